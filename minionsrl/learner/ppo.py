"""PPO learner (clipped surrogate, GAE, value loss, entropy), faithful to CleanRL's ``ppo.py``.

The batch is whatever the round's ``n`` actors returned (``n × T`` steps). How the update's work
follows it is the learner budget (:func:`update_plan`): by default the minibatch size stays fixed (up to
rounding, when it does not divide the batch), so the gradient steps per sample do not depend on how many
actors the scaler chose; ``per-round`` and ``fixed-compute`` hold the steps per round fixed instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from minionsrl.function.fragment import Fragment
from minionsrl.function.normalization import RunningMeanStd
from minionsrl.learner.networks import ActorCritic, CNNActorCritic

Policy = ActorCritic | CNNActorCritic


@dataclass(frozen=True)
class PPOParams:
    """PPO hyper-parameters (CleanRL names)."""

    learning_rate: float = 2.5e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    update_epochs: int = 4
    minibatch_size: int | None = 128
    num_minibatches: int | None = None  # when set: this many minibatches per epoch, whatever the batch
    # how the update's work follows the batch (DESIGN §1): "per-sample" (minibatches of a fixed size, SGD steps
    # grow with the batch), "per-round" (a fixed number of minibatches) or "fixed-compute" (a fixed number of
    # steps of a fixed size); the latter two, and the learning-rate rule, relative to ``reference_batch``
    learner_budget: str = "per-sample"
    reference_batch: int | None = None
    lr_batch_scaling: str = "none"  # "sqrt": the learning rate times sqrt(batch / reference_batch)
    # RLlib's PPO (the published Nitro code's learner): the squared value error clipped at ``vf_clip`` (instead of
    # CleanRL's clipped value change), and an adaptive KL penalty ``kl_coef · KL`` steered towards ``kl_target``
    vf_clip: float | None = None
    kl_coef: float = 0.0
    kl_target: float | None = None
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = None


def compute_gae(rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                trunc_values: np.ndarray, last_values: np.ndarray, gamma: float,
                lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over ``(n, T)`` fragments; return (advantages, returns).

    A terminated step bootstraps with 0; a time-limit truncation with V(final obs); the fragment's
    cut with ``last_values``. The advantage chain is cut at every episode boundary.
    """
    n, steps = rewards.shape
    advantages = np.zeros((n, steps), dtype=np.float64)
    last_gae = np.zeros(n, dtype=np.float64)
    next_value = last_values.astype(np.float64)
    for t in reversed(range(steps)):
        done = terminated[:, t] | truncated[:, t]
        bootstrap = np.where(terminated[:, t], 0.0, np.where(truncated[:, t], trunc_values[:, t], next_value))
        delta = rewards[:, t] + gamma * bootstrap - values[:, t]
        last_gae = delta + gamma * lam * (~done) * last_gae
        advantages[:, t] = last_gae
        next_value = values[:, t]
    return advantages.astype(np.float32), (advantages + values).astype(np.float32)


@dataclass
class Batch:
    """A round's fragments stacked and flattened for the update."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    values: torch.Tensor

    @classmethod
    def from_fragments(cls, fragments: list[Fragment], params: PPOParams,
                       reward_rms: RunningMeanStd | None, clip_reward: float = 10.0) -> Batch:
        """Stack fragments in invocation order, scale rewards (if enabled) and compute GAE."""
        stack = stack_fragments(fragments)
        rewards = scale_rewards(stack["rewards"], reward_rms, clip_reward)
        last_values = np.array([f.last_value for f in fragments])
        adv, ret = compute_gae(rewards, stack["values"], stack["terminated"], stack["truncated"],
                               stack["trunc_values"], last_values, params.gamma, params.gae_lambda)
        return cls(flat(stack["obs"]), flat(stack["actions"]), flat(stack["logprobs"]), flat(adv), flat(ret),
                   flat(stack["values"]))

    def __len__(self) -> int:
        return len(self.obs)

    def to(self, device: torch.device | str) -> Batch:
        """The batch on ``device`` (where the learner's policy is)."""
        return Batch(*(getattr(self, f.name).to(device) for f in dataclasses.fields(self)))

    def select(self, idx: torch.Tensor) -> Batch:
        """The rows ``idx`` of every field (a minibatch), on the batch's device."""
        idx = idx.to(self.obs.device)
        return Batch(self.obs[idx], self.actions[idx], self.logprobs[idx], self.advantages[idx], self.returns[idx],
                     self.values[idx])


def stack_fragments(fragments: list[Fragment]) -> dict[str, np.ndarray]:
    """The per-step arrays of ``fragments`` stacked to ``(n, T, ...)`` (image observations stay uint8)."""
    return {name: np.stack([getattr(f, name) for f in fragments]) for name in Fragment._STEP_ARRAYS}


def scale_rewards(rewards: np.ndarray, reward_rms: RunningMeanStd | None, clip_reward: float) -> np.ndarray:
    """Rewards divided by the std of discounted returns and clipped (when reward scaling is on), float64."""
    rewards = rewards.astype(np.float64)
    if reward_rms is None:
        return rewards
    return np.clip(rewards / np.sqrt(reward_rms.var + 1e-8), -clip_reward, clip_reward)


def flat(a: np.ndarray) -> torch.Tensor:
    """``(n, T, ...)`` to a ``(n·T, ...)`` tensor sharing the array's dtype."""
    return torch.from_numpy(np.ascontiguousarray(a.reshape(-1, *a.shape[2:])))


class LossTerms(NamedTuple):
    """The PPO loss and the pieces the update reports."""

    loss: torch.Tensor
    pg_loss: torch.Tensor
    v_loss: torch.Tensor
    entropy: torch.Tensor
    logratio: torch.Tensor
    ratio: torch.Tensor


def clipped_surrogate(adv: torch.Tensor, ratio: torch.Tensor, clip_coef: float) -> torch.Tensor:
    """PPO's clipped policy loss: the mean of ``max(−A·r, −A·clip(r, 1 − c, 1 + c))``."""
    return torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()


def ppo_loss(policy: Policy, mb: Batch, p: PPOParams) -> LossTerms:
    """CleanRL's PPO loss on a (mini)batch: clipped surrogate, (clipped) value loss, entropy bonus.

    Used by the update and by the curvature detectors, which differentiate it twice.
    """
    newlogprob, entropy, newvalue = policy.evaluate(mb.obs, mb.actions)
    logratio = newlogprob - mb.logprobs
    ratio = logratio.exp()
    adv = mb.advantages
    if p.norm_adv and len(adv) > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    pg_loss = clipped_surrogate(adv, ratio, p.clip_coef)
    if p.vf_clip is not None:  # RLlib: the squared error itself is clipped (and not halved)
        v_loss = ((newvalue - mb.returns) ** 2).clamp(max=p.vf_clip).mean()
    elif p.clip_vloss:
        v_clipped = mb.values + (newvalue - mb.values).clamp(-p.clip_coef, p.clip_coef)
        v_loss = 0.5 * torch.max((newvalue - mb.returns) ** 2, (v_clipped - mb.returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((newvalue - mb.returns) ** 2).mean()
    entropy_loss = entropy.mean()
    loss = pg_loss - p.ent_coef * entropy_loss + v_loss * p.vf_coef
    if p.kl_coef:  # the KL to the behaviour policy, by the (ratio − 1) − log ratio estimator (always ≥ 0)
        loss = loss + p.kl_coef * ((ratio - 1) - logratio).mean()
    return LossTerms(loss, pg_loss, v_loss, entropy_loss, logratio, ratio)


def adapt_kl_coef(coef: float, kl: float, target: float) -> float:
    """RLlib's adaptive KL coefficient after an update whose mean KL was ``kl``: times 1.5 above twice the
    target, halved below half of it, else unchanged."""
    if kl > 2.0 * target:
        return coef * 1.5
    if kl < 0.5 * target:
        return coef * 0.5
    return coef


LossFn = Callable[[Policy, Batch, PPOParams], LossTerms]


def minibatch_count(rows: int, p: PPOParams) -> int:
    """How many minibatches an epoch over ``rows`` rows takes: ``num_minibatches`` when set (CleanRL's
    ``--num-minibatches``: the SGD steps per round stay fixed as the batch grows; at most one per row), else
    ``rows / minibatch_size`` rounded (half to even), at least 1 — their size is then within half a
    ``minibatch_size`` of it (a batch of fewer than half a minibatch is one minibatch)."""
    if p.num_minibatches is not None:
        return min(p.num_minibatches, rows)
    return max(1, round(rows / p.minibatch_size))


def update_plan(rows: int, p: PPOParams) -> tuple[int, int]:
    """(minibatches per epoch, SGD steps in all) of an update on ``rows`` rows under ``p.learner_budget``."""
    if p.learner_budget == "per-sample":
        chunks = minibatch_count(rows, p)
        return chunks, chunks * p.update_epochs
    reference = p.reference_batch or rows
    reference_chunks = p.num_minibatches or max(1, round(reference / p.minibatch_size))
    if p.learner_budget == "per-round":  # the minibatches grow with the batch, their number does not
        chunks = min(reference_chunks, rows)
        return chunks, chunks * p.update_epochs
    # fixed-compute: the reference's steps, each of the reference's minibatch size: fewer epochs as n grows
    size = reference / reference_chunks
    chunks = min(max(1, round(rows / size)), rows)
    return chunks, reference_chunks * p.update_epochs


def lr_factor(rows: int, p: PPOParams) -> float:
    """The learning rate's multiplier for a batch of ``rows`` under ``p.lr_batch_scaling``."""
    if p.lr_batch_scaling == "sqrt" and p.reference_batch:
        return math.sqrt(rows / p.reference_batch)
    return 1.0


class PPO:
    """Owns the policy's optimiser and runs minibatch SGD on one round's batch: the clipped-surrogate
    loss by default; the V-trace learners (:mod:`minionsrl.learner.impala`) pass their own ``loss``."""

    def __init__(self, policy: Policy, params: PPOParams, loss: LossFn = ppo_loss) -> None:
        self.policy = policy
        self.params = params
        self.loss = loss
        self.kl_coef = params.kl_coef  # adapted after every update when params.kl_target is set
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=params.learning_rate, eps=1e-5, fused=True)

    @property
    def current_params(self) -> PPOParams:
        """The parameters with the KL coefficient as adapted so far."""
        if self.kl_coef == self.params.kl_coef:
            return self.params
        return dataclasses.replace(self.params, kl_coef=self.kl_coef)

    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def update(self, batch: Batch, rng: np.random.Generator, whole_batch: bool = False) -> dict[str, float]:
        """Run ``update_epochs`` epochs of minibatch SGD (``whole_batch``: one step on all of it, the caller
        making the epochs); return CleanRL's loss statistics.

        Each epoch splits a permutation of the rows into minibatches of equal size up to one row (their number
        from :func:`update_plan`): exactly ``minibatch_size`` rows when that divides the batch (CleanRL's even
        split), and otherwise no ragged tail (a 1-row tail would even skip advantage normalisation)."""
        p = self.current_params
        size = len(batch)
        chunks, steps = (1, 1) if whole_batch else update_plan(size, p)
        kls: list[torch.Tensor] = []
        clipfracs: list[torch.Tensor] = []  # summed once at the end: no per-step .item() sync
        approx_kl = old_approx_kl = pg_loss = v_loss = entropy_loss = torch.zeros(())
        for epoch in range(math.ceil(steps / chunks)):
            split = np.array_split(rng.permutation(size), chunks)
            for idx in split[: steps - epoch * chunks]:  # the last epoch may be cut short (fixed compute)
                out = self.loss(self.policy, batch.select(torch.from_numpy(idx)), p)
                with torch.no_grad():
                    old_approx_kl = (-out.logratio).mean()
                    approx_kl = ((out.ratio - 1) - out.logratio).mean()
                    clipfracs.append(((out.ratio - 1.0).abs() > p.clip_coef).float().mean())
                    kls.append(approx_kl)
                pg_loss, v_loss, entropy_loss, loss = out.pg_loss, out.v_loss, out.entropy, out.loss
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if p.max_grad_norm:  # 0: no clipping (RLlib's default)
                    nn.utils.clip_grad_norm_(self.policy.parameters(), p.max_grad_norm)
                self.optimizer.step()
            if p.target_kl is not None and approx_kl.item() > p.target_kl:
                break

        if p.kl_target is not None and kls:  # after the update, on its mean KL (RLlib's rule)
            self.kl_coef = adapt_kl_coef(self.kl_coef, torch.stack(kls).mean().item(), p.kl_target)
        y_pred, y_true = batch.values.cpu().numpy(), batch.returns.cpu().numpy()
        var_y = np.var(y_true)
        explained_var = float("nan") if var_y == 0 else float(1 - np.var(y_true - y_pred) / var_y)
        return {
            "policy_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy_loss.item(),
            "old_approx_kl": old_approx_kl.item(), "approx_kl": approx_kl.item(),
            "clipfrac": torch.stack(clipfracs).mean().item() if clipfracs else 0.0,
            "explained_variance": explained_var,
        }
