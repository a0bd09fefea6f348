"""The off-policy learners: IMPALA (Espeholt et al. 2018) and APPO, both on V-trace-corrected batches.

A batch of fragments sampled with older policies (behaviour μ, whose log-probabilities the fragments
carry) is scored by the learner's current policy π once, before the update: V-trace
(:mod:`minionsrl.learner.vtrace`) turns rewards, the learner's values and the importance weights π/μ into value
targets ``v_s`` and advantages ``ρ_s (r_s + γ v_{s+1} − V(x_s))``. The result is an ordinary
:class:`~minionsrl.learner.ppo.Batch` whose ``logprobs`` are π's at the start of the update, so

- APPO is PPO's clipped surrogate on it (trust region around π, off-policy correction in ρ_s), and
- IMPALA is the plain actor-critic loss ``−A·log π − H + ½ (V − v_s)²`` (:func:`impala_loss`).

Fragment cuts bootstrap with the learner's value of ``last_obs``; time-limit truncations inside a
fragment keep the behaviour policy's V(final observation) (the final observation does not travel).
"""

from __future__ import annotations

import numpy as np
import torch

from minionsrl.function.fragment import Fragment
from minionsrl.function.normalization import RunningMeanStd
from minionsrl.learner.ppo import (
    Batch,
    LossTerms,
    Policy,
    PPOParams,
    flat,
    scale_rewards,
    stack_fragments,
)
from minionsrl.learner.vtrace import vtrace

_SCORE_CHUNK = 1024  # rows per no-grad forward pass (bounds the memory of CNN activations)


def vtrace_batch(fragments: list[Fragment], policy: Policy, params: PPOParams, reward_rms: RunningMeanStd | None,
                 clip_reward: float, rho_bar: float, c_bar: float) -> Batch:
    """Stack ``fragments``, score them with ``policy`` and compute V-trace targets (λ = ``gae_lambda``)."""
    stack = stack_fragments(fragments)
    n, steps = stack["rewards"].shape
    obs, actions = flat(stack["obs"]), flat(stack["actions"])
    device = next(policy.parameters()).device
    with torch.no_grad():
        parts = [policy.evaluate(obs[i : i + _SCORE_CHUNK].to(device), actions[i : i + _SCORE_CHUNK].to(device))
                 for i in range(0, len(obs), _SCORE_CHUNK)]
        logp = torch.cat([p[0] for p in parts]).cpu()
        values = torch.cat([p[2] for p in parts]).cpu()
        bootstrap = policy.value(torch.from_numpy(np.concatenate([f.last_obs for f in fragments])).to(device)).cpu()
    log_rhos = logp.numpy().reshape(n, steps).astype(np.float64) - stack["logprobs"]
    vs, adv = vtrace(scale_rewards(stack["rewards"], reward_rms, clip_reward), values.numpy().reshape(n, steps),
                     stack["terminated"], stack["truncated"], stack["trunc_values"], bootstrap.numpy(), log_rhos,
                     params.gamma, rho_bar, c_bar, params.gae_lambda)
    return Batch(obs, actions, logp, torch.from_numpy(adv.reshape(-1)), torch.from_numpy(vs.reshape(-1)), values)


def impala_loss(policy: Policy, mb: Batch, p: PPOParams) -> LossTerms:
    """IMPALA's loss on a V-trace (mini)batch: policy gradient with the V-trace advantages (normalised
    per minibatch if ``norm_adv``), entropy bonus and squared error to the targets ``v_s``."""
    newlogprob, entropy, newvalue = policy.evaluate(mb.obs, mb.actions)
    adv = mb.advantages
    if p.norm_adv and len(adv) > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = -(adv * newlogprob).mean()
    v_loss = 0.5 * ((newvalue - mb.returns) ** 2).mean()
    entropy_loss = entropy.mean()
    logratio = newlogprob - mb.logprobs
    return LossTerms(pg_loss - p.ent_coef * entropy_loss + p.vf_coef * v_loss, pg_loss, v_loss, entropy_loss,
                     logratio, logratio.exp())
