"""The off-policy learners: IMPALA (Espeholt et al. 2018) and APPO, both on V-trace-corrected batches.

A batch of fragments sampled with older policies (behaviour μ, whose log-probabilities the fragments
carry) is scored by the learner's current policy π once, before the update: V-trace
(:mod:`minionsrl.learner.vtrace`) turns rewards, the learner's values and the importance weights π/μ into value
targets ``v_s`` and advantages ``ρ_s (r_s + γ v_{s+1} − V(x_s))``. The result is an ordinary
:class:`~minionsrl.learner.batch.Batch` whose ``logprobs`` are π's at the start of the update, so

- APPO is PPO's clipped surrogate on it (trust region around π, off-policy correction in ρ_s), and
- IMPALA is the plain actor-critic loss ``−A·log π − H + ½ (V − v_s)²`` (:func:`impala_loss`).

Fragment cuts bootstrap with the learner's value of ``last_obs``; time-limit truncations inside a
fragment keep the behaviour policy's V(final observation) (the final observation does not travel).
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
from minionsrl.learner.advantages import scale_rewards
from minionsrl.learner.batch import Batch, by_length, stack_fragments
from minionsrl.learner.engine import bucket, pad_rows, score
from minionsrl.learner.networks import Params
from minionsrl.learner.ppo import LossTerms, PPOParams, normalize_advantages, weighted_mean
from minionsrl.learner.vtrace import vtrace


@partial(jax.jit, static_argnames="arch")
def _values(arch: PolicyArch, weights: Params, obs: jax.Array) -> jax.Array:
    return networks.value(arch, weights, obs)


def vtrace_batch(fragments: list[Fragment], arch: PolicyArch, weights: Params, params: PPOParams,
                 reward_rms: RunningMeanStd | None, clip_reward: float, rho_bar: float, c_bar: float) -> Batch:
    """Score ``fragments`` with the policy ``weights`` and compute V-trace targets (λ = ``gae_lambda``); fragments
    of unequal length (a batch size) each with their own."""
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
                         stack["trunc_values"], bootstrap[at], log_rhos, params.gamma, rho_bar, c_bar,
                         params.gae_lambda)
        return {"vs": vs, "adv": adv}

    out = by_length(fragments, targets)
    return Batch(obs, actions, logp, out["adv"], out["vs"], values)


def impala_loss(arch: PolicyArch, weights: Params, mb: dict[str, jax.Array], w: jax.Array, p: PPOParams,
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
