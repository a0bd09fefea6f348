"""V-trace off-policy value targets and policy-gradient advantages (Espeholt et al. 2018, IMPALA §4.1).

For a trajectory sampled with a behaviour policy μ and a learner policy π, with importance weights
``ρ_t = min(ρ̄, π(a_t|x_t) / μ(a_t|x_t))`` and trace coefficients ``c_t = λ · min(c̄, π/μ)``:

    v_s = V(x_s) + Σ_{t≥s} γ^{t-s} (Π_{i=s}^{t-1} c_i) ρ_t (r_t + γ V(x_{t+1}) − V(x_t)),

computed backwards as ``v_s − V(x_s) = δ_s + γ c_s (v_{s+1} − V(x_{s+1}))``. The policy gradient uses
the advantage ``ρ_s (r_s + γ v_{s+1} − V(x_s))``. On-policy (π = μ, ρ̄, c̄ ≥ 1, λ = 1) ``v_s`` is the
n-step return bootstrapped at the fragment's end: GAE(λ=1)'s return.

Episode boundaries are GAE's (:func:`minionsrl.learner.advantages.episode_bootstrap`): a terminated step bootstraps with
0, a time-limit truncation with V(final observation), the fragment's cut with the bootstrap value, and
the traces stop at every boundary.
"""

from __future__ import annotations

import numpy as np

from minionsrl.learner.advantages import episode_bootstrap


def vtrace(rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
           trunc_values: np.ndarray, bootstrap: np.ndarray, log_rhos: np.ndarray, gamma: float,
           rho_bar: float = 1.0, c_bar: float = 1.0, lam: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """V-trace over ``(n, T)`` fragments; return (targets ``v_s``, policy-gradient advantages), float32.

    ``values`` and ``bootstrap`` (``(n,)``, V of the observation after the last step) are the learner's
    current estimates; ``log_rhos`` are ``log π(a|x) − log μ(a|x)`` of the actions taken.
    """
    n, steps = rewards.shape
    ratios = np.exp(log_rhos.astype(np.float64))
    rhos = np.minimum(rho_bar, ratios)
    cs = lam * np.minimum(c_bar, ratios)
    values = values.astype(np.float64)
    vs_minus_v = np.zeros((n, steps), dtype=np.float64)
    next_vs_minus_v = np.zeros(n, dtype=np.float64)  # v_{s+1} − V(x_{s+1}), 0 past the fragment's end
    next_value = bootstrap.astype(np.float64)
    next_values = np.empty((n, steps), dtype=np.float64)  # V(x_{s+1}) as the step bootstraps it
    for t in reversed(range(steps)):
        boot, done = episode_bootstrap(terminated[:, t], truncated[:, t], trunc_values[:, t], next_value)
        next_values[:, t] = boot
        delta = rhos[:, t] * (rewards[:, t] + gamma * boot - values[:, t])
        vs_minus_v[:, t] = delta + gamma * cs[:, t] * (~done) * next_vs_minus_v
        next_vs_minus_v = vs_minus_v[:, t]
        next_value = values[:, t]
    vs = vs_minus_v + values
    # v_{s+1} for the advantage: the next target inside an episode, the bootstrap value at a boundary
    next_vs = next_values.copy()
    inside = ~(terminated | truncated)[:, :-1]
    next_vs[:, :-1] = np.where(inside, vs[:, 1:], next_values[:, :-1])
    next_vs[:, -1] = next_values[:, -1]
    advantages = rhos * (rewards + gamma * next_vs - values)
    return vs.astype(np.float32), advantages.astype(np.float32)
