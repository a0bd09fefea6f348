"""Return estimation over ``(n, T)`` fragments on the host: the rewards as the estimators read them (scaled and
clipped when reward scaling is on), the episode-boundary rule every estimator shares, and GAE.

V-trace (:mod:`minionsrl.learner.vtrace`) is the other estimator, on the same boundary rule; the round's batch
(:mod:`minionsrl.learner.batch`) is built from either.
"""

from __future__ import annotations

import numpy as np

from minionsrl.function.normalization import RunningMeanStd, scale_of


def episode_bootstrap(terminated: np.ndarray, truncated: np.ndarray, trunc_values: np.ndarray,
                      next_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The episode-boundary rule of one step, for every return estimator over fragments (GAE here, V-trace in
    :mod:`minionsrl.learner.vtrace`): (the value the step bootstraps with, whether an episode ends there). A
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
