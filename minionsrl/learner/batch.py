"""The round's batch: fragments stacked and flattened to rows, with their advantages and value targets; and the
return estimation over ``(n, T)`` fragments it is built with, on the host: the rewards as the estimators read them
(scaled and clipped when reward scaling is on), the episode-boundary rule every estimator shares, and GAE.

:meth:`Batch.from_fragments` is PPO's (GAE); the V-trace learners build theirs in
:func:`minionsrl.learner.impala.vtrace_batch`, on the same boundary rule. The update
(:mod:`minionsrl.learner.engine`) and the detectors read it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from minionsrl.function.fragment import Fragment
from minionsrl.function.normalization import CLIP_DEFAULT, RunningMeanStd, scale_of


def episode_bootstrap(terminated: np.ndarray, truncated: np.ndarray, trunc_values: np.ndarray,
                      next_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The episode-boundary rule of one step, for every return estimator over fragments (GAE here, V-trace in
    :mod:`minionsrl.learner.impala`): (the value the step bootstraps with, whether an episode ends there). A
    terminated step bootstraps with 0, a time-limit truncation with V(final obs) (``trunc_values``), any other step
    with ``next_value`` (the next step's value, or the fragment's bootstrap after its last step); the chain of
    advantages (or of traces) is cut wherever an episode ends."""
    bootstrap = np.where(terminated, 0.0, np.where(truncated, trunc_values, next_value))
    return bootstrap, terminated | truncated


def compute_gae(rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                trunc_values: np.ndarray, last_values: np.ndarray, gamma: float,
                lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over ``(n, T)`` fragments, ``T ≥ 1``; return (advantages, returns).

    Episode boundaries by :func:`episode_bootstrap`; the fragment's cut bootstraps with ``last_values``.
    """
    # Every step's bootstrap and TD error at once; only the recurrence runs over T (docs/BENCHMARKS.md, "GAE on
    # the host or inside the compiled program"). The arithmetic keeps a step-by-step loop's dtypes, so the results are
    # bit-identical to it: an inner step bootstraps with the next value in the values' own dtype (NumPy 2 then
    # computes gamma * bootstrap in float32), the last step with the fragment's bootstrap in float64.
    inner, inner_done = episode_bootstrap(terminated[:, :-1], truncated[:, :-1], trunc_values[:, :-1], values[:, 1:])
    last, last_done = episode_bootstrap(terminated[:, -1], truncated[:, -1], trunc_values[:, -1],
                                        last_values.astype(np.float64))
    delta = np.empty(rewards.shape, dtype=np.float64)
    delta[:, :-1] = rewards[:, :-1] + gamma * inner - values[:, :-1]
    delta[:, -1] = rewards[:, -1] + gamma * last - values[:, -1]
    carry = gamma * lam * ~np.concatenate([inner_done, last_done[:, None]], axis=1)  # 0 where an episode ends
    advantages = np.empty(rewards.shape, dtype=np.float64)
    last_gae = np.zeros(len(rewards), dtype=np.float64)
    for t in reversed(range(rewards.shape[1])):
        last_gae = delta[:, t] + carry[:, t] * last_gae
        advantages[:, t] = last_gae
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)


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

    @classmethod
    def from_fragments(cls, fragments: list[Fragment], gamma: float, gae_lambda: float,
                       reward_rms: RunningMeanStd | None, clip_reward: float = CLIP_DEFAULT) -> Batch:
        """Stack fragments in invocation order, scale rewards (if enabled) and compute GAE(``gamma``,
        ``gae_lambda``) (fragments of unequal length, as a batch size makes them, each with their own)."""

        def gae(group: list[Fragment]) -> dict[str, np.ndarray]:
            stack = stack_fragments(group)
            rewards = scale_rewards(stack["rewards"], reward_rms, clip_reward)
            last_values = np.array([f.last_value for f in group])
            adv, ret = compute_gae(rewards, stack["values"], stack["terminated"], stack["truncated"],
                                   stack["trunc_values"], last_values, gamma, gae_lambda)
            return {"obs": stack["obs"], "actions": stack["actions"], "logprobs": stack["logprobs"],
                    "advantages": adv, "returns": ret, "values": stack["values"]}

        return cls(**by_length(fragments, gae))

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
