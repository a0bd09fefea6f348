"""Return estimation over ``(n, T)`` fragments on the host: the rewards as the estimators read them (scaled and
clipped when reward scaling is on), the episode-boundary rule every estimator shares, and GAE.

V-trace (:mod:`minionsrl.learner.vtrace`) is the other estimator, on the same boundary rule; the round's batch
(:mod:`minionsrl.learner.batch`) is built from either.
"""

from __future__ import annotations

import numpy as np

from minionsrl.function.normalization import RunningMeanStd


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
    """Generalised advantage estimation over ``(n, T)`` fragments; return (advantages, returns).

    Episode boundaries by :func:`episode_bootstrap`; the fragment's cut bootstraps with ``last_values``.
    """
    n, steps = rewards.shape
    advantages = np.zeros((n, steps), dtype=np.float64)
    last_gae = np.zeros(n, dtype=np.float64)
    next_value = last_values.astype(np.float64)
    for t in reversed(range(steps)):
        bootstrap, done = episode_bootstrap(terminated[:, t], truncated[:, t], trunc_values[:, t], next_value)
        delta = rewards[:, t] + gamma * bootstrap - values[:, t]
        last_gae = delta + gamma * lam * (~done) * last_gae
        advantages[:, t] = last_gae
        next_value = values[:, t]
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)


def scale_rewards(rewards: np.ndarray, reward_rms: RunningMeanStd | None, clip_reward: float) -> np.ndarray:
    """Rewards divided by the std of discounted returns and clipped (when reward scaling is on), float64."""
    rewards = rewards.astype(np.float64)
    if reward_rms is None:
        return rewards
    return np.clip(rewards / np.sqrt(reward_rms.var + 1e-8), -clip_reward, clip_reward)
