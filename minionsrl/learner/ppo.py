"""PPO learner (clipped surrogate, GAE, value loss, entropy), faithful to CleanRL's ``ppo.py``, in JAX.

The batch is whatever the round's ``n`` actors returned (``n × T`` steps). How the update's work
follows it is the learner budget (:func:`update_plan`): by default the minibatch size stays fixed (up to
rounding, when it does not divide the batch), so the gradient steps per sample do not depend on how many
actors the scaler chose; ``per-round`` and ``fixed-compute`` hold the steps per round fixed instead.

The whole update — every epoch and minibatch, clipping, Adam, the KL early stop — is one compiled
program (:func:`_update_program`, PureJaxRL's way): the host draws the minibatch order, the program loops
over it. Shapes are padded to buckets (rows of a minibatch carry a 0/1 weight), so a scaler that changes
``n`` every round costs a handful of compilations, kept across runs by JAX's persistent cache.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from minionsrl import config
from minionsrl.function.fragment import Fragment
from minionsrl.function.normalization import CLIP_DEFAULT, RunningMeanStd
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner import networks
from minionsrl.learner.networks import Params

_CONFIG_DEFAULTS = {f.name: f.default for f in dataclasses.fields(config.TrainConfig)}


def _default(name: str) -> Any:
    """A learner hyper-parameter's default, as the config writes it (the one place): the classic preset's value
    (CleanRL's ``ppo.py``), else the config field's own default."""
    if name in config.PRESETS["classic"]:
        return config.PRESETS["classic"][name]
    return _CONFIG_DEFAULTS[name]


@dataclass(frozen=True)
class PPOParams:
    """PPO hyper-parameters (CleanRL names); their defaults are the config's (:func:`_default`)."""

    learning_rate: float = _default("learning_rate")
    gamma: float = _default("gamma")
    gae_lambda: float = _default("gae_lambda")
    update_epochs: int = _default("update_epochs")
    minibatch_size: int | None = _default("minibatch_size")
    num_minibatches: int | None = _default("num_minibatches")  # when set: this many per epoch, whatever the batch
    # how the update's work follows the batch (DESIGN §1): "per-sample" (minibatches of a fixed size, SGD steps
    # grow with the batch), "per-round" (a fixed number of minibatches) or "fixed-compute" (a fixed number of
    # steps of a fixed size); the latter two, and the learning-rate rule, relative to ``reference_batch``
    learner_budget: str = _default("learner_budget")
    reference_batch: int | None = None  # the config's actors' round batch (build.make_learner)
    lr_batch_scaling: str = _default("lr_batch_scaling")  # "sqrt": the rate times sqrt(batch / reference_batch)
    # RLlib's PPO (the published Nitro code's learner): the squared value error clipped at ``vf_clip`` (instead of
    # CleanRL's clipped value change), and an adaptive KL penalty ``kl_coef · KL`` steered towards ``kl_target``
    vf_clip: float | None = _default("vf_clip")
    kl_coef: float = _default("kl_coef")
    kl_target: float | None = _default("kl_target")
    norm_adv: bool = _default("norm_adv")
    clip_coef: float = _default("clip_coef")
    clip_vloss: bool = _default("clip_vloss")
    ent_coef: float = _default("ent_coef")
    vf_coef: float = _default("vf_coef")
    max_grad_norm: float = _default("max_grad_norm")
    target_kl: float | None = _default("target_kl")
    # the KL-adaptive learning rate (:func:`adapt_learning_rate`): on when ``desired_kl`` is set, within bounds
    desired_kl: float | None = _default("desired_kl")
    lr_min: float = _default("lr_min")
    lr_max: float = _default("lr_max")


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


@dataclass
class Batch:
    """A round's fragments stacked and flattened for the update (NumPy arrays on the host; the update moves
    them to the learner's device once)."""

    obs: np.ndarray
    actions: np.ndarray
    logprobs: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    values: np.ndarray

    @classmethod
    def from_fragments(cls, fragments: list[Fragment], params: PPOParams,
                       reward_rms: RunningMeanStd | None, clip_reward: float = CLIP_DEFAULT) -> Batch:
        """Stack fragments in invocation order, scale rewards (if enabled) and compute GAE (fragments of unequal
        length, as a batch size makes them, each with their own)."""

        def gae(group: list[Fragment]) -> dict[str, np.ndarray]:
            stack = stack_fragments(group)
            rewards = scale_rewards(stack["rewards"], reward_rms, clip_reward)
            last_values = np.array([f.last_value for f in group])
            adv, ret = compute_gae(rewards, stack["values"], stack["terminated"], stack["truncated"],
                                   stack["trunc_values"], last_values, params.gamma, params.gae_lambda)
            return {"obs": stack["obs"], "actions": stack["actions"], "logprobs": stack["logprobs"],
                    "advantages": adv, "returns": ret, "values": stack["values"]}

        return cls(**by_length(fragments, gae))

    def __len__(self) -> int:
        return len(self.obs)

    def select(self, idx: np.ndarray) -> Batch:
        """The rows ``idx`` of every field (a minibatch)."""
        return Batch(*(getattr(self, f.name)[idx] for f in dataclasses.fields(self)))

    def arrays(self) -> dict[str, np.ndarray]:
        """The fields by name (what the compiled losses read)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def by_length(fragments: list[Fragment],
              compute: Callable[[list[Fragment]], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """``compute`` on each group of equally long fragments (all of them, in the usual case of one length), whose
    ``(n, T, ...)`` arrays come back flattened to rows in the fragments' order: what a per-step recurrence over
    stacked fragments (GAE, V-trace) needs when a batch size makes a round's fragments differ by a step."""
    lengths = [len(f.rewards) for f in fragments]
    if len(set(lengths)) == 1:
        return {name: flat(a) for name, a in compute(fragments).items()}
    per_fragment: list[dict[str, np.ndarray]] = [{} for _ in fragments]
    for length in sorted(set(lengths)):
        members = [i for i, n in enumerate(lengths) if n == length]
        out = compute([fragments[i] for i in members])
        for j, i in enumerate(members):
            per_fragment[i] = {name: a[j] for name, a in out.items()}
    return {name: np.concatenate([rows[name] for rows in per_fragment]) for name in per_fragment[0]}


def stack_fragments(fragments: list[Fragment]) -> dict[str, np.ndarray]:
    """The per-step arrays of ``fragments`` stacked to ``(n, T, ...)`` (image observations stay uint8)."""
    return {name: np.stack([getattr(f, name) for f in fragments]) for name in Fragment._STEP_ARRAYS}


def scale_rewards(rewards: np.ndarray, reward_rms: RunningMeanStd | None, clip_reward: float) -> np.ndarray:
    """Rewards divided by the std of discounted returns and clipped (when reward scaling is on), float64."""
    rewards = rewards.astype(np.float64)
    if reward_rms is None:
        return rewards
    return np.clip(rewards / np.sqrt(reward_rms.var + 1e-8), -clip_reward, clip_reward)


def flat(a: np.ndarray) -> np.ndarray:
    """``(n, T, ...)`` to ``(n·T, ...)``, keeping the dtype."""
    return np.ascontiguousarray(a.reshape(-1, *a.shape[2:]))


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


def clipped_surrogate(adv: jax.Array, ratio: jax.Array, clip_coef: float, w: jax.Array | None = None) -> jax.Array:
    """PPO's clipped policy loss: the mean of ``max(−A·r, −A·clip(r, 1 − c, 1 + c))`` (over rows weighing 1)."""
    terms = jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1 - clip_coef, 1 + clip_coef))
    return terms.mean() if w is None else weighted_mean(terms, w)


def approx_kl(ratio: jax.Array, logratio: jax.Array, w: jax.Array) -> jax.Array:
    """The KL of the new policy to the behaviour policy by the ``(r − 1) − log r`` estimator (≥ 0; Schulman's
    "approximating KL divergence", CleanRL's ``approx_kl``), over the rows weighing 1: the penalty's, the early
    stop's, the adaptive rates' and the reported one."""
    return weighted_mean((ratio - 1) - logratio, w)


def ppo_loss(arch: PolicyArch, params: Params, mb: dict[str, jax.Array], w: jax.Array, p: PPOParams,
             kl_coef: jax.Array | float) -> LossTerms:
    """CleanRL's PPO loss on a (mini)batch: clipped surrogate, (clipped) value loss, entropy bonus; RLlib's
    clipped squared value error and KL penalty where ``p`` asks. ``w`` weighs the rows (0: padding).

    Used by the update and by the detectors, which differentiate it twice.
    """
    newlogprob, entropy, newvalue = networks.evaluate(arch, params, mb["obs"], mb["actions"])
    logratio = newlogprob - mb["logprobs"]
    ratio = jnp.exp(logratio)
    adv = normalize_advantages(mb["advantages"], w) if p.norm_adv else mb["advantages"]
    pg_loss = clipped_surrogate(adv, ratio, p.clip_coef, w)
    if p.vf_clip is not None:  # RLlib: the squared error itself is clipped (and not halved)
        v_loss = weighted_mean(jnp.minimum((newvalue - mb["returns"]) ** 2, p.vf_clip), w)
    elif p.clip_vloss:
        v_clipped = mb["values"] + jnp.clip(newvalue - mb["values"], -p.clip_coef, p.clip_coef)
        v_loss = 0.5 * weighted_mean(jnp.maximum((newvalue - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2), w)
    else:
        v_loss = 0.5 * weighted_mean((newvalue - mb["returns"]) ** 2, w)
    entropy_loss = weighted_mean(entropy, w)
    loss = pg_loss - p.ent_coef * entropy_loss + v_loss * p.vf_coef
    if p.kl_coef:  # RLlib's KL penalty
        loss = loss + kl_coef * approx_kl(ratio, logratio, w)
    return LossTerms(loss, pg_loss, v_loss, entropy_loss, logratio, ratio)


LossFn = Callable[[PolicyArch, Params, dict[str, jax.Array], jax.Array, PPOParams, Any], LossTerms]


def adapt_kl_coef(coef: float, kl: float, target: float) -> float:
    """RLlib's adaptive KL coefficient after an update whose mean KL was ``kl``: times 1.5 above twice the
    target, halved below half of it, else unchanged."""
    if kl > 2.0 * target:
        return coef * 1.5
    if kl < 0.5 * target:
        return coef * 0.5
    return coef





def adapt_learning_rate(lr: jax.Array | float, kl: jax.Array | float, desired_kl: float, lr_min: float,
                        lr_max: float) -> jax.Array:
    """The KL-adaptive learning rate after an epoch whose minibatches' mean KL to the behaviour policy was ``kl``:
    divided by 1.5 above twice ``desired_kl``, times 1.5 below half of it (a KL of 0 measured nothing), else
    unchanged; kept within ``[lr_min, lr_max]``.

    The rule is the one rsl_rl (``PPO.update``, ``schedule="adaptive"``, per minibatch, on the exact KL of the old
    and new Gaussians; bounds 1e-5 and 1e-2) and rl_games (``AdaptiveScheduler``, thresholds 2x and 0.5x, factor
    1.5) ship. We adapt once per epoch, as rl_games' ``standard`` schedule does, on the mean of the KL estimate the
    update already computes per minibatch (``approx_kl``, the ``(r − 1) − log r`` estimator): with our presets'
    small minibatches (64 rows, 640 steps a MuJoCo round) a per-minibatch rule would move the rate by up to
    1.5^640 in a round, and it would follow a single minibatch's noise."""
    higher = jnp.minimum(lr * 1.5, lr_max)
    lower = jnp.maximum(lr / 1.5, lr_min)
    return jnp.where(kl > 2.0 * desired_kl, lower, jnp.where((kl < 0.5 * desired_kl) & (kl > 0), higher, lr))


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


def minibatch_schedule(rows: int, p: PPOParams, rng: np.random.Generator,
                       whole_batch: bool = False) -> list[list[np.ndarray]]:
    """The rows of every minibatch of an update, epoch by epoch (``whole_batch``: one step on all of it).

    Each epoch splits a permutation of the rows into minibatches of equal size up to one row (their number from
    :func:`update_plan`): exactly ``minibatch_size`` rows when that divides the batch (CleanRL's even split), and
    otherwise no ragged tail (a 1-row tail would even skip advantage normalisation). Under ``fixed-compute`` the
    last epoch may be cut short."""
    chunks, steps = (1, 1) if whole_batch else update_plan(rows, p)
    epochs = []
    for epoch in range(math.ceil(steps / chunks)):
        split = np.array_split(rng.permutation(rows), chunks)
        epochs.append(split[: steps - epoch * chunks])
    return epochs


def bucket(x: int, fine: bool = True) -> int:
    """``x`` rounded up so that few shapes need compiling: to an eighth of its power-of-two octave (``fine``:
    at most 12.5% padding, for sizes that cost compute), or to a power of two (sizes that cost only memory)."""
    if x <= 8:
        return max(x, 1)
    if not fine:
        return 1 << (x - 1).bit_length()
    step = 1 << (x.bit_length() - 4)
    return -(-x // step) * step


def pad_rows(a: np.ndarray, rows: int) -> np.ndarray:
    """``a`` with zero rows appended up to ``rows`` (padding that a compiled program never reads, or weighs 0)."""
    return np.concatenate([a, np.zeros((rows - len(a), *a.shape[1:]), a.dtype)]) if rows > len(a) else a


def make_optimizer(p: PPOParams) -> optax.GradientTransformation:
    """Gradient clipping by global norm (unless ``max_grad_norm`` is 0, RLlib's default), then Adam's scaling
    with eps 1e-5 (CleanRL); the learning rate multiplies the result in the update."""
    adam = optax.scale_by_adam(eps=1e-5)
    return optax.chain(optax.clip_by_global_norm(p.max_grad_norm), adam) if p.max_grad_norm else adam


STAT_NAMES = ("policy_loss", "value_loss", "entropy", "old_approx_kl", "approx_kl", "clipfrac")


@partial(jax.jit, static_argnames=("arch", "p", "loss"))
def _update_program(arch: PolicyArch, p: PPOParams, loss: LossFn, weights: Params, opt_state: Any,
                    data: dict[str, jax.Array], idx: jax.Array, w: jax.Array, epoch_end: jax.Array,
                    n_steps: jax.Array, lr: jax.Array, kl_coef: jax.Array,
                    target_kl: jax.Array) -> tuple[Params, Any, dict[str, jax.Array], jax.Array, jax.Array]:
    """Every SGD step of an update as one program: step ``i`` trains on rows ``idx[i]`` weighted ``w[i]``; the
    loop stops after ``n_steps`` steps, or at an epoch's end whose last minibatch's KL exceeds ``target_kl``.
    With ``p.desired_kl`` the learning rate adapts at every epoch's end (:func:`adapt_learning_rate`).
    Returns the weights, the optimiser state, each step's statistics, the number of steps taken and the rate."""
    tx = make_optimizer(p)
    stats0 = {name: jnp.zeros(idx.shape[0], jnp.float32) for name in STAT_NAMES}

    def cond(carry: tuple) -> jax.Array:
        i, _, _, stopped, _, _ = carry
        return (i < n_steps) & ~stopped

    def body(carry: tuple) -> tuple:
        i, weights, opt_state, _, stats, (lr, kl_sum, kl_steps) = carry
        rows, wi = idx[i], w[i]
        mb = {name: value[rows] for name, value in data.items()}

        def objective(params: Params) -> tuple[jax.Array, LossTerms]:
            out = loss(arch, params, mb, wi, p, kl_coef)
            return out.loss, out

        (_, out), grads = jax.value_and_grad(objective, has_aux=True)(weights)
        updates, opt_state = tx.update(grads, opt_state, weights)
        weights = jax.tree.map(lambda x, u: x - lr * u, weights, updates)
        kl = approx_kl(out.ratio, out.logratio, wi)
        step = {"policy_loss": out.pg_loss, "value_loss": out.v_loss, "entropy": out.entropy,
                "old_approx_kl": weighted_mean(-out.logratio, wi), "approx_kl": kl,
                "clipfrac": weighted_mean((jnp.abs(out.ratio - 1.0) > p.clip_coef).astype(jnp.float32), wi)}
        stats = {name: stats[name].at[i].set(step[name]) for name in STAT_NAMES}
        if p.desired_kl is not None:  # the epoch's mean KL steers the next epoch's rate
            kl_sum, kl_steps = kl_sum + kl, kl_steps + 1.0
            adapted = adapt_learning_rate(lr, kl_sum / kl_steps, p.desired_kl, p.lr_min, p.lr_max)
            lr = jnp.where(epoch_end[i], adapted, lr)
            kl_sum, kl_steps = jnp.where(epoch_end[i], 0.0, kl_sum), jnp.where(epoch_end[i], 0.0, kl_steps)
        return i + 1, weights, opt_state, epoch_end[i] & (kl > target_kl), stats, (lr, kl_sum, kl_steps)

    zero = jnp.float32(0.0)
    i, weights, opt_state, _, stats, (lr, _, _) = jax.lax.while_loop(
        cond, body, (jnp.int32(0), weights, opt_state, jnp.bool_(False), stats0, (jnp.float32(lr), zero, zero)))
    return weights, opt_state, stats, i, lr


class PPO:
    """Owns the policy's weights and optimiser state and runs minibatch SGD on one round's batch: the
    clipped-surrogate loss by default; the V-trace learners (:mod:`minionsrl.learner.impala`) pass their own
    ``loss``."""

    def __init__(self, arch: PolicyArch, weights: dict[str, np.ndarray], params: PPOParams,
                 loss: LossFn = ppo_loss, device: jax.Device | None = None) -> None:
        self.arch, self.params, self.loss = arch, params, loss
        self.device = device or jax.devices("cpu")[0]
        self.weights: Params = jax.device_put({k: jnp.asarray(v) for k, v in weights.items()}, self.device)
        self.opt_state = make_optimizer(params).init(self.weights)
        self.kl_coef = params.kl_coef  # adapted after every update when params.kl_target is set
        self.learning_rate = params.learning_rate
        # padded shapes only grow (in powers of two): a round with fewer actors than an earlier one reuses its program
        self._rows_cap = self._steps_cap = 0

    @property
    def current_params(self) -> PPOParams:
        """The parameters with the KL coefficient as adapted so far."""
        if self.kl_coef == self.params.kl_coef:
            return self.params
        return dataclasses.replace(self.params, kl_coef=self.kl_coef)

    def set_learning_rate(self, lr: float) -> None:
        self.learning_rate = lr

    def numpy_weights(self) -> dict[str, np.ndarray]:
        """The weights as NumPy arrays (published and checkpointed as they are)."""
        return {k: np.asarray(v) for k, v in self.weights.items()}

    def update(self, batch: Batch, rng: np.random.Generator, whole_batch: bool = False) -> dict[str, float]:
        """Run ``update_epochs`` epochs of minibatch SGD (``whole_batch``: one step on all of it, the caller
        making the epochs) as one compiled program; return CleanRL's loss statistics (those of the last step,
        the clip fraction averaged over all of them)."""
        p = self.params
        epochs = minibatch_schedule(len(batch), p, rng, whole_batch)
        steps = [(mb, e == len(epoch) - 1) for epoch in epochs for e, mb in enumerate(epoch)]
        width = bucket(max(len(mb) for mb, _ in steps))
        self._steps_cap = max(self._steps_cap, bucket(len(steps), fine=False))
        self._rows_cap = max(self._rows_cap, bucket(len(batch), fine=False))
        idx = np.zeros((self._steps_cap, width), np.int32)
        w = np.zeros(idx.shape, np.float32)
        epoch_end = np.zeros(len(idx), bool)
        for i, (mb, end) in enumerate(steps):
            idx[i, : len(mb)], w[i, : len(mb)], epoch_end[i] = mb, 1.0, end
        rows = self._rows_cap  # padding rows are never indexed
        data = {k: pad_rows(v, rows) for k, v in batch.arrays().items()}
        put = partial(jax.device_put, device=self.device)
        target_kl = np.inf if p.target_kl is None else p.target_kl
        self.weights, self.opt_state, stats, done, lr = _update_program(
            self.arch, p, self.loss, self.weights, self.opt_state, put(data), put(idx), put(w), put(epoch_end),
            np.int32(len(steps)), np.float32(self.learning_rate), np.float32(self.kl_coef), np.float32(target_kl))
        done = int(done)
        if p.desired_kl is not None:  # kept across rounds (and in the checkpoint)
            self.learning_rate = float(lr)
        taken = {name: np.asarray(values)[:done] for name, values in stats.items()}
        if p.kl_target is not None and done:  # after the update, on its mean KL (RLlib's rule)
            self.kl_coef = adapt_kl_coef(self.kl_coef, float(taken["approx_kl"].mean()), p.kl_target)
        var_y = np.var(batch.returns)
        explained_var = float("nan") if var_y == 0 else float(1 - np.var(batch.returns - batch.values) / var_y)
        out = {name: float(values[-1]) for name, values in taken.items()}
        return {**out, "clipfrac": float(taken["clipfrac"].mean()), "explained_variance": explained_var}

    def state_dict(self) -> dict[str, Any]:
        """Weights, the optimiser state's arrays (in pytree order), the KL coefficient, the learning rate (the
        adaptive one continues from it) and the padding caps (a resumed run pads to the shapes it compiled), as
        NumPy and numbers."""
        return {"policy": self.numpy_weights(), "kl_coef": self.kl_coef, "learning_rate": self.learning_rate,
                "optimizer": {f"{i:03d}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(self.opt_state))},
                "rows_cap": self._rows_cap, "steps_cap": self._steps_cap}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.weights = jax.device_put({k: jnp.asarray(state["policy"][k]) for k in self.weights}, self.device)
        structure = jax.tree.structure(self.opt_state)
        leaves = [jnp.asarray(state["optimizer"][f"{i:03d}"]) for i in range(structure.num_leaves)]
        self.opt_state = jax.device_put(jax.tree.unflatten(structure, leaves), self.device)
        self.kl_coef = float(state.get("kl_coef", self.params.kl_coef))
        self.learning_rate = float(state.get("learning_rate", self.learning_rate))
        # checkpoints from before the caps were kept have none: they grow again from the next update
        self._rows_cap, self._steps_cap = int(state.get("rows_cap", 0)), int(state.get("steps_cap", 0))
