"""Independent references the tests check the package against (kept here, not in bench/ or the package)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def gae_step_loop(rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                  trunc_values: np.ndarray, last_values: np.ndarray, gamma: float,
                  lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE as ``compute_gae`` ran it until 2026-11-27: every step's bootstrap and TD error inside the loop over T
    (the vectorised form must match it bit for bit; docs/archive/bench/gae_placement.py measured the two)."""
    from minionsrl.learner.batch import episode_bootstrap

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


def least_squares_problem(size: int, dim: int, noise_var: float,
                          seed: int) -> tuple[Callable[[list[np.ndarray]], np.ndarray], float, float]:
    """A batch whose noise scale is known in closed form, to check ``slice_noise_scale``
    (minionsrl/learner/detectors.py) against: linear regression ``y = x·w* + σε`` (``x ~ N(0, I_dim)``,
    ``ε ~ N(0, 1)``, ``σ² = noise_var``) with ``size`` rows and the loss ``½(x·w − y)²`` (mean over rows) at
    ``w = w* + e``, ``|e| = 1``.

    Per row the gradient is ``g = x (x·e − σε)``, so (Isserlis) ``G = E g = e`` and ``Σ = (1 + σ²) I + e eᵀ``:
    ``B_noise = tr(Σ)/|G|² = dim·(1 + σ²) + 1``. Returns the per-set gradient function, the batch's own
    ``|G_B|²`` (what an estimate without the correction would read: ``|G|² + tr(Σ)/B`` on average) and
    ``B_noise``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((size, dim))
    e = np.zeros(dim)
    e[0] = 1.0
    residual = x @ e - np.sqrt(noise_var) * rng.standard_normal(size)
    full = x.T @ residual / size
    return ((lambda sets: np.stack([x[s].T @ residual[s] / len(s) for s in sets])), float(full @ full),
            dim * (1 + noise_var) + 1.0)
