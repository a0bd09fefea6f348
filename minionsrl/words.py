"""Other libraries' words for minionsrl's settings: CleanRL's flags, Stable-Baselines3's arguments (and
rl-baselines3-zoo's YAML keys), each with the field that means the same here and what it means, so that a
user who writes ``--num-envs 8`` or ``n_steps: 128`` gets one line naming what to write instead.

The table is the one place these names live: the command line's error path (:mod:`minionsrl.cli`) and the
config loader's unknown-key error read it through :func:`foreign_name`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

_CLEANRL, _SB3, _ZOO = "CleanRL's", "Stable-Baselines3's", "rl-baselines3-zoo's"
# {field} in a meaning is written as the user writes settings: a flag (--minibatch-size) or a key (minibatch_size)
_ROUND_BATCH = "a whole round's samples whatever the actor count are {train_batch_size} (RLlib's word)"
_ACTORS = "rollout functions per round, each stepping its own env; {envs_per_function} puts several in one"
_STEPS = "steps each function takes per round: a round learns on actors x fragment_length samples"

# name (with _) -> (whose name, the fields that mean it here (none: no such setting), what they are)
FOREIGN: dict[str, tuple[str, tuple[str, ...], str]] = {
    "num_envs": (_CLEANRL, ("actors",), _ACTORS),
    "n_envs": (_SB3, ("actors",), _ACTORS),
    "num_steps": (_CLEANRL, ("fragment_length",), _STEPS),
    "n_steps": (_SB3, ("fragment_length",), _STEPS),
    "batch_size": (_SB3, ("minibatch_size",), f"SB3's batch_size is the minibatch; {_ROUND_BATCH}"),
    "n_epochs": (_SB3, ("update_epochs",), "epochs over each round's batch"),
    "clip_range": (_SB3, ("clip_coef",), "the surrogate's clipping coefficient"),
    "normalize_advantage": (_SB3, ("norm_adv",), "advantages normalised per minibatch"),
    "n_timesteps": (_ZOO, ("total_timesteps",), "env steps to train for"),
    "num_iterations": (_CLEANRL, ("max_rounds",), "an iteration is a round here"),
    "cuda": (_CLEANRL, ("device",), "cuda or cpu: where the learner runs"),
    "exp_name": (_CLEANRL, ("run_dir",), "the run's folder; by default named by env, seed and time"),
    "tensorboard_log": (_SB3, ("run_dir",), "TensorBoard files go to RUN_DIR/tensorboard"),
    "net_arch": (_SB3, ("hidden_sizes",), "hidden layer sizes of actor and critic"),
    "policy_kwargs": (_SB3, ("hidden_sizes",), "net_arch's hidden layer sizes; the activation is tanh"),
    "normalize": (_ZOO, ("normalize_obs", "normalize_reward"), "VecNormalize's two halves"),
    "eval_freq": (_SB3, ("eval_every",), "counted in rounds here, not env steps"),
    "n_eval_episodes": (_SB3, ("eval_episodes",), "episodes per evaluation"),
    "verbose": (_SB3, ("progress",), "whether the progress line shows"),
    "capture_video": (_CLEANRL, (), "training records no video here: `minionsrl eval --run-dir DIR "
                      "--capture-video` does"),
    "torch_deterministic": (_CLEANRL, (), "there is no torch here: the learner is JAX"),
}


class _Written(dict):
    """``{field}`` in a meaning, as a flag or as a config key."""

    def __init__(self, as_flag: bool) -> None:
        super().__init__()
        self.as_flag = as_flag

    def __missing__(self, field: str) -> str:
        return flag(field) if self.as_flag else field


def _key(name: str) -> str:
    """``--num-envs``, ``num-envs`` or ``num_envs`` as the table's key."""
    return name.lstrip("-").replace("-", "_").lower()


def flag(field: str) -> str:
    """A config field's command-line flag (``learning_rate`` → ``--learning-rate``)."""
    return "--" + field.replace("_", "-")


def foreign_name(name: str, as_flag: bool, known: Iterable[str] = ()) -> str | None:
    """One line for ``name`` when it is another library's word for a setting here (``as_flag``: a command-line
    flag, else a config key), or, as a flag, one of ours written with ``_``; None otherwise. ``known`` (flags, or
    field names) narrows the answer to the settings the command has: a field it lacks is not offered."""
    key, known, written = _key(name), set(known), _Written(as_flag)
    shown = name if as_flag else repr(name)
    if key not in FOREIGN:
        if as_flag and "_" in name and flag(key) in known:
            return f"{name}: flags are written with '-': {flag(key)}"
        return None
    whose, fields, meaning = FOREIGN[key]
    ours = [written[f] for f in fields]
    if known and not all(o in known for o in ours):
        return None
    meaning = meaning.format_map(written)
    if not ours:
        return f"{shown} is {whose} name; {meaning}"
    return f"{shown} is {whose} name; here it is {' and '.join(ours)} ({meaning})"


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean X?`` for the closest of ``known`` to a mistyped ``name``, or ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"; did you mean {close[0]}?" if close else ""
