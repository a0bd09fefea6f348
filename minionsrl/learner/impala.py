"""The off-policy learners: IMPALA (Espeholt et al. 2018) and APPO, both on V-trace-corrected batches.

A batch of fragments sampled with older policies (behaviour μ, whose log-probabilities the fragments
carry) is scored by the learner's current policy π once, before the update: V-trace
(:func:`vtrace`, below) turns rewards, the learner's values and the importance weights π/μ into value
targets ``v_s`` and advantages ``ρ_s (r_s + γ v_{s+1} − V(x_s))``. The result is an ordinary
:class:`~minionsrl.learner.batch.Batch` whose ``logprobs`` are π's at the start of the update, so

- APPO is PPO's clipped surrogate on it (trust region around π, off-policy correction in ρ_s), and
- IMPALA is the plain actor-critic loss ``−A·log π − H + ½ (V − v_s)²`` (:func:`impala_loss`).

Fragment cuts bootstrap with the learner's value of ``last_obs``; time-limit truncations inside a
fragment keep the behaviour policy's V(final observation) (the final observation does not travel).

V-trace's value targets and policy-gradient advantages (IMPALA §4.1): for a trajectory sampled with a behaviour
policy μ and a learner policy π, with importance weights ``ρ_t = min(ρ̄, π(a_t|x_t) / μ(a_t|x_t))`` and trace
coefficients ``c_t = λ · min(c̄, π/μ)``:

    v_s = V(x_s) + Σ_{t≥s} γ^{t-s} (Π_{i=s}^{t-1} c_i) ρ_t (r_t + γ V(x_{t+1}) − V(x_t)),

computed backwards as ``v_s − V(x_s) = δ_s + γ c_s (v_{s+1} − V(x_{s+1}))``. The policy gradient uses
the advantage ``ρ_s (r_s + γ v_{s+1} − V(x_s))``. On-policy (π = μ, ρ̄, c̄ ≥ 1, λ = 1) ``v_s`` is the
n-step return bootstrapped at the fragment's end: GAE(λ=1)'s return.

Episode boundaries are GAE's (:func:`minionsrl.learner.batch.episode_bootstrap`): a terminated step bootstraps
with 0, a time-limit truncation with V(final observation), the fragment's cut with the bootstrap value, and the
traces stop at every boundary.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from minionsrl.function.fragment import Fragment
from minionsrl.function.normalization import RunningMeanStd
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner import networks
from minionsrl.learner.batch import Batch, by_length, episode_bootstrap, scale_rewards, stack_fragments
from minionsrl.learner.engine import bucket, pad_rows, score
from minionsrl.learner.networks import Params
from minionsrl.learner.ppo import LossParams, LossTerms, normalize_advantages, weighted_mean


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


@partial(jax.jit, static_argnames="arch")
def _values(arch: PolicyArch, weights: Params, obs: jax.Array) -> jax.Array:
    return networks.value(arch, weights, obs)


def vtrace_batch(fragments: list[Fragment], arch: PolicyArch, weights: Params, gamma: float, gae_lambda: float,
                 reward_rms: RunningMeanStd | None, clip_reward: float, rho_bar: float, c_bar: float) -> Batch:
    """Score ``fragments`` with the policy ``weights`` and compute V-trace targets (discount ``gamma``,
    λ = ``gae_lambda``); fragments of unequal length (a batch size) each with their own."""
    obs, actions = np.concatenate([f.obs for f in fragments]), np.concatenate([f.actions for f in fragments])
    logp, values = score(arch, weights, obs, actions)
    last_obs = np.concatenate([f.last_obs for f in fragments])
    bootstrap = np.asarray(_values(arch, weights, pad_rows(last_obs, bucket(len(last_obs)))))[: len(last_obs)]
    starts = np.cumsum([0] + [len(f.rewards) for f in fragments])
    where = {id(f): i for i, f in enumerate(fragments)}

    def targets(group: list[Fragment]) -> dict[str, np.ndarray]:
        stack, at = stack_fragments(group), [where[id(f)] for f in group]
        scored = [slice(starts[i], starts[i + 1]) for i in at]
        log_rhos = np.stack([logp[r] for r in scored]).astype(np.float64) - stack["logprobs"]
        rewards = scale_rewards(stack["rewards"], reward_rms, clip_reward)
        vs, adv = vtrace(rewards, np.stack([values[r] for r in scored]), stack["terminated"], stack["truncated"],
                         stack["trunc_values"], bootstrap[at], log_rhos, gamma, rho_bar, c_bar,
                         gae_lambda)
        return {"vs": vs, "adv": adv}

    out = by_length(fragments, targets)
    return Batch(obs, actions, logp, out["adv"], out["vs"], values)


def impala_loss(arch: PolicyArch, weights: Params, mb: dict[str, jax.Array], w: jax.Array, p: LossParams,
                kl_coef: jax.Array | float, clip_coef: jax.Array | float | None = None) -> LossTerms:
    """IMPALA's loss on a V-trace (mini)batch: policy gradient with the V-trace advantages (normalised
    per minibatch if ``norm_adv``), entropy bonus and squared error to the targets ``v_s``; nothing is clipped
    (``kl_coef`` and ``clip_coef`` are :data:`~minionsrl.learner.ppo.LossFn`'s, unused)."""
    newlogprob, entropy, newvalue = networks.evaluate(arch, weights, mb["obs"], mb["actions"])
    adv = normalize_advantages(mb["advantages"], w) if p.norm_adv else mb["advantages"]
    pg_loss = -weighted_mean(adv * newlogprob, w)
    v_loss = 0.5 * weighted_mean((newvalue - mb["returns"]) ** 2, w)
    entropy_loss = weighted_mean(entropy, w)
    logratio = newlogprob - mb["logprobs"]
    return LossTerms(pg_loss - p.ent_coef * entropy_loss + p.vf_coef * v_loss, pg_loss, v_loss, entropy_loss,
                     logratio, jnp.exp(logratio))
