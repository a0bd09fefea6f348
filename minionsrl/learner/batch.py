"""The round's batch: fragments stacked and flattened to rows, with their advantages and value targets; and what
every return estimator over ``(n, T)`` fragments shares, on the host: the rewards as the estimators read them
(scaled and clipped when reward scaling is on), the episode-boundary rule, and the grouping of fragments by length.

PPO builds its batch with GAE (:func:`minionsrl.learner.ppo.gae_batch`), the V-trace learners with V-trace
(:func:`minionsrl.learner.impala.vtrace_batch`). The update (:mod:`minionsrl.learner.engine`) and the detectors
read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from minionsrl.function.fragment import Fragment
from minionsrl.function.normalization import RunningMeanStd, scale_of


def episode_bootstrap(terminated: np.ndarray, truncated: np.ndarray, trunc_values: np.ndarray,
                      next_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The episode-boundary rule of one step, for every return estimator over fragments (GAE in
    :mod:`minionsrl.learner.ppo`, V-trace in :mod:`minionsrl.learner.impala`): (the value the step bootstraps with,
    whether an episode ends there). A terminated step bootstraps with 0, a time-limit truncation with V(final obs)
    (``trunc_values``), any other step with ``next_value`` (the next step's value, or the fragment's bootstrap after
    its last step); the chain of advantages (or of traces) is cut wherever an episode ends."""
    bootstrap = np.where(terminated, 0.0, np.where(truncated, trunc_values, next_value))
    return bootstrap, terminated | truncated


def scale_rewards(rewards: np.ndarray, reward_rms: RunningMeanStd | None, clip_reward: float) -> np.ndarray:
    """Rewards divided by the std of discounted returns and clipped (when reward scaling is on), float64."""
    rewards = rewards.astype(np.float64)
    if reward_rms is None:
        return rewards
    return np.clip(rewards / scale_of(reward_rms.var), -clip_reward, clip_reward)


@dataclass
class Batch:
    """A round's fragments stacked and flattened for the update (NumPy arrays on the host; the update moves
    them to the learner's device once)."""

    obs: np.ndarray
    actions: np.ndarray
    logprobs: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    values: np.ndarray
    # decoupled PPO (lagging fragments): π_anchor / π_behaviour per row, the clip anchored at π_anchor, whose
    # log-probabilities ``logprobs`` then holds (Hilton et al. 2021); None: anchored at the behaviour policy
    behaviour_weights: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.obs)

    def select(self, idx: np.ndarray) -> Batch:
        """The rows ``idx`` of every field (a minibatch)."""
        return Batch(**{name: a[idx] for name, a in self.arrays().items()})

    def arrays(self) -> dict[str, np.ndarray]:
        """The fields by name (what the compiled losses read), those that are set."""
        return {f.name: a for f in dataclasses.fields(self) if (a := getattr(self, f.name)) is not None}


def by_length(fragments: list[Fragment],
              compute: Callable[[list[Fragment]], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``compute`` on each group of equally long fragments (all of them, in the usual case of one length), whose
    ``(n, T, ...)`` arrays come back flattened to rows in the fragments' order: what a per-step recurrence over
    stacked fragments (GAE, V-trace) needs when a batch size makes a round's fragments differ by a step."""
    lengths = [len(f.rewards) for f in fragments]
    if len(set(lengths)) == 1:
        return {name: flat(a) for name, a in compute(fragments).items()}
    per_fragment: list[dict[str, np.ndarray]] = [{} for _ in fragments]
    for length in sorted(set(lengths)):
        members = [i for i, n in enumerate(lengths) if n == length]
        out = compute([fragments[i] for i in members])
        for j, i in enumerate(members):
            per_fragment[i] = {name: a[j] for name, a in out.items()}
    return {name: np.concatenate([rows[name] for rows in per_fragment]) for name in per_fragment[0]}


def stack_fragments(fragments: list[Fragment]) -> dict[str, np.ndarray]:
    """The per-step arrays of ``fragments`` stacked to ``(n, T, ...)`` (image observations stay uint8)."""
    return {name: np.stack([getattr(f, name) for f in fragments]) for name in Fragment._STEP_ARRAYS}


def flat(a: np.ndarray) -> np.ndarray:
    """``(n, T, ...)`` to ``(n·T, ...)``, keeping the dtype."""
    return np.ascontiguousarray(a.reshape(-1, *a.shape[2:]))
