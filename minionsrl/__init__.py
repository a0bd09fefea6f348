"""minionsrl: deep RL with serverless actors.

Kept import-light on purpose: rollout functions import submodules of this package and must not
pay for the learner's framework. The Python API is loaded on first use:

- ``minionsrl.train(cfg, resume=False) -> dict``: train the run a :class:`TrainConfig` describes, exactly as
  ``minionsrl train`` does, and return its summary (:mod:`minionsrl.experiments.training`);
- ``minionsrl.TrainConfig``: the run configuration (:mod:`minionsrl.config`);
- ``minionsrl.load_policy(run_dir_or_checkpoint, which="latest") -> Policy``: a trained policy (``which="best"``:
  the one with the best evaluation) whose ``act(obs)`` (and SB3's ``action, _ = predict(obs)``) runs on NumPy
  alone (:mod:`minionsrl.experiments.policy`); the last round's warns (``minionsrl.WorseThanBest``) when it
  evaluated well below the best;
- ``minionsrl.evaluate(policy, env_or_id=None, n_episodes=10, deterministic=True, seed=10_000) -> (mean, std)``:
  SB3's ``evaluate_policy`` shape;
- ``minionsrl.Callback``: SB3's ``BaseCallback``, small: ``on_round(row, trainer)`` after each round, ``row`` its
  ``minionsrl.RoundStats`` (metrics.csv's columns as typed fields; False stops the run), ``on_end(summary,
  trainer)``; ``train(cfg, callback=...)`` takes one, a list, or ``fn(row, trainer)``;
- ``minionsrl.current_policy(trainer) -> Policy``: a running trainer's policy, for callbacks.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.2.0"

# name -> the module that defines it, imported when the name is first used (PEP 562)
_LAZY = {
    "TrainConfig": "minionsrl.config",
    "train": "minionsrl.experiments.training",
    "load_policy": "minionsrl.experiments.policy",
    "Policy": "minionsrl.experiments.policy",
    "evaluate": "minionsrl.experiments.policy",
    "current_policy": "minionsrl.experiments.policy",
    "WorseThanBest": "minionsrl.experiments.policy",
    "Callback": "minionsrl.experiments.training",
    "RoundStats": "minionsrl.stats",
}
__all__ = ["Callback", "Policy", "RoundStats", "TrainConfig", "WorseThanBest", "__version__", "current_policy",
           "evaluate", "load_policy", "train"]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'minionsrl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
