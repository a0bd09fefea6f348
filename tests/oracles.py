"""Independent references the tests check the package against (kept here, not in bench/ or the package)."""

from __future__ import annotations

import numpy as np


def gae_step_loop(rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                  trunc_values: np.ndarray, last_values: np.ndarray, gamma: float,
                  lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE as ``compute_gae`` ran it until 2026-11-27: every step's bootstrap and TD error inside the loop over T
    (the vectorised form must match it bit for bit; docs/archive/bench/gae_placement.py measured the two)."""
    from minionsrl.learner.advantages import episode_bootstrap

    advantages = np.zeros(rewards.shape, dtype=np.float64)
    last_gae = np.zeros(len(rewards), dtype=np.float64)
    next_value = last_values.astype(np.float64)
    for t in reversed(range(rewards.shape[1])):
        bootstrap, done = episode_bootstrap(terminated[:, t], truncated[:, t], trunc_values[:, t], next_value)
        delta = rewards[:, t] + gamma * bootstrap - values[:, t]
        last_gae = delta + gamma * lam * (~done) * last_gae
        advantages[:, t] = last_gae
        next_value = values[:, t]
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)
