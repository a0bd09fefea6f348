"""PPO, faithful to CleanRL's ``ppo.py``: its batch with GAE advantages (on the host, NumPy), then its loss and the
constants it reads (in JAX): the clipped surrogate, the (clipped) value loss and the entropy bonus, RLlib's clipped
squared value error and adaptive KL penalty, and the pieces other losses share (weighted means over padded rows,
advantage normalisation, the KL estimator).

The compiled program that runs the SGD steps with this loss (or IMPALA's), and how many at what rate, is
:mod:`minionsrl.learner.engine`; IMPALA's batch and loss are :mod:`minionsrl.learner.impala`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from minionsrl.config import LearnerConfig
from minionsrl.function.fragment import Fragment
from minionsrl.function.normalization import CLIP_DEFAULT, RunningMeanStd
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner import networks
from minionsrl.learner.batch import Batch, by_length, episode_bootstrap, scale_rewards, stack_fragments
from minionsrl.learner.networks import Params


def compute_gae(rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                trunc_values: np.ndarray, last_values: np.ndarray, gamma: float,
                lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over ``(n, T)`` fragments, ``T ≥ 1``; return (advantages, returns).

    Episode boundaries by :func:`~minionsrl.learner.batch.episode_bootstrap`; the fragment's cut bootstraps with
    ``last_values``.
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


def gae_batch(fragments: list[Fragment], gamma: float, gae_lambda: float, reward_rms: RunningMeanStd | None,
              clip_reward: float = CLIP_DEFAULT) -> Batch:
    """PPO's batch: fragments stacked in invocation order, rewards scaled (if enabled), GAE(``gamma``,
    ``gae_lambda``) advantages and returns (fragments of unequal length, as a batch size makes them, each with
    their own)."""

    def gae(group: list[Fragment]) -> dict[str, np.ndarray]:
        stack = stack_fragments(group)
        rewards = scale_rewards(stack["rewards"], reward_rms, clip_reward)
        last_values = np.array([f.last_value for f in group])
        adv, ret = compute_gae(rewards, stack["values"], stack["terminated"], stack["truncated"],
                               stack["trunc_values"], last_values, gamma, gae_lambda)
        return {"obs": stack["obs"], "actions": stack["actions"], "logprobs": stack["logprobs"],
                "advantages": adv, "returns": ret, "values": stack["values"]}

    return Batch(**by_length(fragments, gae))


@dataclass(frozen=True)
class LossParams:
    """The settings the compiled update and the detectors' loss read as constants: a jit-static argument, so this
    holds only what those programs read (the round's learning rate, clipping and KL coefficients and ``target_kl``
    are traced values besides). A projection of the resolved :class:`~minionsrl.config.LearnerConfig`
    (:meth:`of`), which alone holds the defaults; the host-side settings (epochs, minibatches, discounting, the
    rate's schedule) the learner reads from that config itself."""

    norm_adv: bool
    clip_coef: float  # the configured one: the detectors' loss; the update passes the round's (annealed)
    clip_vloss: bool
    # RLlib's PPO (the published Nitro code's learner): the squared value error clipped at ``vf_clip`` (instead of
    # CleanRL's clipped value change), and an adaptive KL penalty, on when ``kl_coef`` (its initial value) is not 0
    vf_clip: float | None
    kl_coef: float
    ent_coef: float
    vf_coef: float
    max_grad_norm: float
    # the KL-adaptive learning rate (:func:`~minionsrl.learner.engine.adapt_learning_rate`): on when set
    desired_kl: float | None
    lr_min: float
    lr_max: float

    @classmethod
    def of(cls, lc: LearnerConfig) -> LossParams:
        """The compiled programs' constants of a resolved learner config."""
        return cls(**{f.name: getattr(lc, f.name) for f in dataclasses.fields(cls)})


class LossTerms(NamedTuple):
    """The PPO loss and the pieces the update reports."""

    loss: jax.Array
    pg_loss: jax.Array
    v_loss: jax.Array
    entropy: jax.Array
    logratio: jax.Array
    ratio: jax.Array


def weighted_mean(x: jax.Array, w: jax.Array) -> jax.Array:
    """The mean of ``x`` over the rows whose weight ``w`` is 1 (padding rows weigh 0)."""
    return (x * w).sum() / w.sum()


ADV_EPS = 1e-8  # advantage normalisation: (A − mean) / (std + ADV_EPS), CleanRL's


def normalize_advantages(adv: jax.Array, w: jax.Array) -> jax.Array:
    """``(A − mean) / (std + 1e-8)`` over the real rows (torch's unbiased std), left alone for a single row: in the
    compiled update, per minibatch. :func:`normalize_advantages_np` is the same formula on the host."""
    count = w.sum()
    mean = (adv * w).sum() / count
    std = jnp.sqrt(((adv - mean) ** 2 * w).sum() / jnp.maximum(count - 1.0, 1.0))
    return jnp.where(count > 1, (adv - mean) / (std + ADV_EPS), adv)


def normalize_advantages_np(adv: np.ndarray) -> np.ndarray:
    """:func:`normalize_advantages` of all rows, in NumPy on the host, in ``adv``'s dtype: for whoever normalises a
    whole batch outside the compiled update (the detectors' one loss, the scheduler's training). Two runtimes of
    one formula, tested against each other, as the Gaussian log-probability is."""
    if len(adv) < 2:
        return adv
    return (adv - adv.mean()) / (adv.std(ddof=1) + ADV_EPS)


def clipped_surrogate(adv: jax.Array, ratio: jax.Array, clip_coef: jax.Array | float, w: jax.Array | None = None,
                      behaviour_weights: jax.Array | None = None) -> jax.Array:
    """PPO's clipped policy loss: the mean of ``max(−A·r, −A·clip(r, 1 − c, 1 + c))`` (over rows weighing 1); with
    ``behaviour_weights`` (π_anchor/π_behaviour, ``r`` then taken against π_anchor), each row's term times its
    weight: the decoupled objective of Hilton et al. 2021, "Batch size-invariance for policy optimization"."""
    terms = jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1 - clip_coef, 1 + clip_coef))
    if behaviour_weights is not None:
        terms = terms * behaviour_weights
    return terms.mean() if w is None else weighted_mean(terms, w)


def approx_kl(ratio: jax.Array, logratio: jax.Array, w: jax.Array) -> jax.Array:
    """The KL of the new policy to the behaviour policy by the ``(r − 1) − log r`` estimator (≥ 0; Schulman's
    "approximating KL divergence", CleanRL's ``approx_kl``), over the rows weighing 1: the penalty's, the early
    stop's, the adaptive rates' and the reported one."""
    return weighted_mean((ratio - 1) - logratio, w)


def ppo_loss(arch: PolicyArch, params: Params, mb: dict[str, jax.Array], w: jax.Array, p: LossParams,
             kl_coef: jax.Array | float, clip_coef: jax.Array | float | None = None) -> LossTerms:
    """CleanRL's PPO loss on a (mini)batch: clipped surrogate, (clipped) value loss, entropy bonus; RLlib's
    clipped squared value error and KL penalty where ``p`` asks. ``w`` weighs the rows (0: padding).
    ``clip_coef`` (None: ``p.clip_coef``) clips both the ratio and the value change, as OpenAI baselines' ppo2
    does with its annealed ``cliprange``.

    Used by the update and by the detectors, which differentiate it twice.
    """
    newlogprob, entropy, newvalue = networks.evaluate(arch, params, mb["obs"], mb["actions"])
    logratio = newlogprob - mb["logprobs"]
    ratio = jnp.exp(logratio)
    adv = normalize_advantages(mb["advantages"], w) if p.norm_adv else mb["advantages"]
    clip = p.clip_coef if clip_coef is None else clip_coef
    pg_loss = clipped_surrogate(adv, ratio, clip, w, mb.get("behaviour_weights"))
    if p.vf_clip is not None:  # RLlib: the squared error itself is clipped (and not halved)
        v_loss = weighted_mean(jnp.minimum((newvalue - mb["returns"]) ** 2, p.vf_clip), w)
    elif p.clip_vloss:
        v_clipped = mb["values"] + jnp.clip(newvalue - mb["values"], -clip, clip)
        v_loss = 0.5 * weighted_mean(jnp.maximum((newvalue - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2), w)
    else:
        v_loss = 0.5 * weighted_mean((newvalue - mb["returns"]) ** 2, w)
    entropy_loss = weighted_mean(entropy, w)
    loss = pg_loss - p.ent_coef * entropy_loss + v_loss * p.vf_coef
    if p.kl_coef:  # RLlib's KL penalty
        loss = loss + kl_coef * approx_kl(ratio, logratio, w)
    return LossTerms(loss, pg_loss, v_loss, entropy_loss, logratio, ratio)


# (arch, weights, minibatch, row weights, params, KL coefficient, clipping coefficient): the last two traced
LossFn = Callable[[PolicyArch, Params, dict[str, jax.Array], jax.Array, LossParams, Any, Any], LossTerms]


def adapt_kl_coef(coef: float, kl: float, target: float) -> float:
    """RLlib's adaptive KL coefficient after an update whose mean KL was ``kl``: times 1.5 above twice the
    target, halved below half of it, else unchanged."""
    if kl > 2.0 * target:
        return coef * 1.5
    if kl < 0.5 * target:
        return coef * 0.5
    return coef
