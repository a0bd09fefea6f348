"""The compiled update, and how much work it does at what rate.

First the plan the host makes (the learner budget: minibatches per epoch and SGD steps in all, as the batch grows
or shrinks with ``n``, DESIGN §1; the minibatches' rows; the learning rate's scaling with the batch and its
KL-adaptive rule). Then a generic SGD engine, parameterised by its loss, that owns the policy's weights and
optimiser state and runs a whole update on one round's batch as one compiled program (PureJaxRL's way): every epoch
and minibatch, gradient clipping, Adam, the KL early stop and the KL-adaptive rate. The host draws the minibatch
order (:func:`minibatch_schedule`), the program loops over it.

PPO passes its clipped-surrogate loss (:func:`~minionsrl.learner.ppo.ppo_loss`), IMPALA its own
(:func:`~minionsrl.learner.impala.impala_loss`). Shapes are padded to buckets (rows of a minibatch carry a 0/1
weight), so a scaler that changes ``n`` every round costs a handful of compilations, kept across runs by JAX's
persistent cache; the padding caps are part of the engine's checkpointed state.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from minionsrl.config import LearnerConfig
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner import networks
from minionsrl.learner.batch import Batch
from minionsrl.learner.networks import Params
from minionsrl.learner.ppo import LossFn, LossParams, LossTerms, adapt_kl_coef, approx_kl, weighted_mean


def minibatch_count(rows: int, lc: LearnerConfig) -> int:
    """How many minibatches an epoch over ``rows`` rows takes: ``num_minibatches`` when set (CleanRL's
    ``--num-minibatches``: the SGD steps per round stay fixed as the batch grows; at most one per row), else
    ``rows / minibatch_size`` rounded (half to even), at least 1 — their size is then within half a
    ``minibatch_size`` of it (a batch of fewer than half a minibatch is one minibatch)."""
    if lc.num_minibatches is not None:
        return min(lc.num_minibatches, rows)
    return max(1, round(rows / lc.minibatch_size))


def update_plan(rows: int, lc: LearnerConfig, reference_batch: int | None = None) -> tuple[int, int]:
    """(minibatches per epoch, SGD steps in all) of an update on ``rows`` rows under ``lc.learner_budget``;
    ``per-round`` and ``fixed-compute`` are relative to ``reference_batch`` (the config's actors' round batch:
    build.make_learner; None: this batch)."""
    if lc.learner_budget == "per-sample":
        chunks = minibatch_count(rows, lc)
        return chunks, chunks * lc.update_epochs
    reference = reference_batch or rows
    reference_chunks = minibatch_count(reference, lc)
    if lc.learner_budget == "per-round":  # the minibatches grow with the batch, their number does not
        chunks = min(reference_chunks, rows)
        return chunks, chunks * lc.update_epochs
    # fixed-compute: the reference's steps, each of the reference's minibatch size: fewer epochs as n grows
    size = reference / reference_chunks
    chunks = min(max(1, round(rows / size)), rows)
    return chunks, reference_chunks * lc.update_epochs


def lr_factor(rows: int, lc: LearnerConfig, reference_batch: int | None = None) -> float:
    """The learning rate's multiplier for a batch of ``rows`` under ``lc.lr_batch_scaling`` (``sqrt``: times
    sqrt(rows / reference_batch))."""
    if lc.lr_batch_scaling == "sqrt" and reference_batch:
        return math.sqrt(rows / reference_batch)
    return 1.0


def minibatch_schedule(rows: int, lc: LearnerConfig, rng: np.random.Generator, whole_batch: bool = False,
                       reference_batch: int | None = None) -> list[list[np.ndarray]]:
    """The rows of every minibatch of an update, epoch by epoch (``whole_batch``: one step on all of it).

    Each epoch splits a permutation of the rows into minibatches of equal size up to one row (their number from
    :func:`update_plan`): exactly ``minibatch_size`` rows when that divides the batch (CleanRL's even split), and
    otherwise no ragged tail (a 1-row tail would even skip advantage normalisation). Under ``fixed-compute`` the
    last epoch may be cut short."""
    chunks, steps = (1, 1) if whole_batch else update_plan(rows, lc, reference_batch)
    # np.array_split's sizes (the first rows % chunks one row longer), as slices: the same minibatches in less than
    # half its time (a Hopper round's 10 epochs x 64: 2.7 ms against 6.1), on the thread the functions share
    sizes = np.full(chunks, rows // chunks)
    sizes[: rows % chunks] += 1
    bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    epochs = []
    for epoch in range(math.ceil(steps / chunks)):
        order = rng.permutation(rows)
        epochs.append([order[bounds[i]:bounds[i + 1]] for i in range(min(chunks, steps - epoch * chunks))])
    return epochs


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


_SCORE_CHUNK = 1024  # rows per forward pass (bounds the memory of CNN activations)


@partial(jax.jit, static_argnames="arch")
def _score(arch: PolicyArch, weights: Params, obs: jax.Array, actions: jax.Array) -> tuple[jax.Array, jax.Array]:
    logp, _, values = networks.evaluate(arch, weights, obs, actions)
    return logp, values


def score(arch: PolicyArch, weights: Params, obs: np.ndarray, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The log-probabilities of ``actions`` and the values of ``obs`` under ``weights``, row by row, in chunks of
    one compiled shape (the tail padded to it)."""
    chunk = min(_SCORE_CHUNK, bucket(len(obs)))
    logp, values = [], []
    for i in range(0, len(obs), chunk):
        part = slice(i, min(i + chunk, len(obs)))
        rows = part.stop - part.start
        lp, v = _score(arch, weights, pad_rows(obs[part], chunk), pad_rows(actions[part], chunk))
        logp.append(np.asarray(lp)[:rows])
        values.append(np.asarray(v)[:rows])
    return np.concatenate(logp), np.concatenate(values)


def make_optimizer(p: LossParams) -> optax.GradientTransformation:
    """Gradient clipping by global norm (unless ``max_grad_norm`` is 0, RLlib's default), then Adam's scaling
    with eps 1e-5 (CleanRL); the learning rate multiplies the result in the update."""
    adam = optax.scale_by_adam(eps=1e-5)
    return optax.chain(optax.clip_by_global_norm(p.max_grad_norm), adam) if p.max_grad_norm else adam


STAT_NAMES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")


@partial(jax.jit, static_argnames=("arch", "p", "loss"))
def _update_program(arch: PolicyArch, p: LossParams, loss: LossFn, weights: Params, opt_state: Any,
                    data: dict[str, jax.Array], idx: jax.Array, w: jax.Array, epoch_end: jax.Array,
                    n_steps: jax.Array, lr: jax.Array, kl_coef: jax.Array, target_kl: jax.Array,
                    clip_coef: jax.Array) -> tuple[Params, Any, dict[str, jax.Array], jax.Array, jax.Array, jax.Array]:
    """Every SGD step of an update as one program: step ``i`` trains on rows ``idx[i]`` weighted ``w[i]``; the
    loop stops after ``n_steps`` steps, or at an epoch's end whose last minibatch's KL exceeds ``target_kl``.
    With ``p.desired_kl`` the learning rate adapts at every epoch's end (:func:`adapt_learning_rate`). The rate and
    the clipping coefficient are traced values, not part of the static ``p``: annealed every round, they would
    otherwise compile a program per round.
    Returns the weights, the optimiser state, each step's statistics, the number of steps taken, the rate, and
    whether every weight and optimiser value is finite (checked here: one program, not one per array)."""
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
            out = loss(arch, params, mb, wi, p, kl_coef, clip_coef)
            return out.loss, out

        (_, out), grads = jax.value_and_grad(objective, has_aux=True)(weights)
        updates, opt_state = tx.update(grads, opt_state, weights)
        weights = jax.tree.map(lambda x, u: x - lr * u, weights, updates)
        kl = approx_kl(out.ratio, out.logratio, wi)
        step = {"policy_loss": out.pg_loss, "value_loss": out.v_loss, "entropy": out.entropy,
                "approx_kl": kl,
                "clipfrac": weighted_mean((jnp.abs(out.ratio - 1.0) > clip_coef).astype(jnp.float32), wi)}
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
    finite = jnp.all(jnp.stack([jnp.isfinite(x).all() for x in jax.tree.leaves((weights, opt_state))]))
    return weights, opt_state, stats, i, lr, finite


class SGDEngine:
    """Owns the policy's weights and optimiser state and runs minibatch SGD on one round's batch with ``loss``
    (:data:`~minionsrl.learner.ppo.LossFn`: PPO's clipped surrogate, or IMPALA's actor-critic loss), the whole
    update one compiled program; the KL coefficient and the adaptive learning rate it carries between updates,
    and the padding caps, are in its checkpointed state."""

    def __init__(self, arch: PolicyArch, weights: dict[str, np.ndarray], lc: LearnerConfig, loss: LossFn,
                 device: jax.Device | None = None, reference_batch: int | None = None) -> None:
        self.arch, self.config, self.loss, self.reference_batch = arch, lc, loss, reference_batch
        self.constants = LossParams.of(lc)  # what the compiled update reads as constants
        self.device = device or jax.devices("cpu")[0]
        # NumPy arrays put as they are, the optimiser's state made by one compiled program: op by op, each array
        # shape compiled its own small programs, which was most of a small policy's start-up. Both are committed
        # to the device, as the update's outputs are: otherwise the first update compiles a program of its own
        self.weights: Params = jax.device_put(dict(weights), self.device)
        self.opt_state = jax.device_put(jax.jit(make_optimizer(self.constants).init)(self.weights), self.device)
        self.finite = True  # the weights and optimiser state after the last update are all finite
        self.kl_coef = lc.kl_coef  # adapted after every update when lc.kl_target is set
        self.learning_rate = lc.learning_rate
        self.clip_coef = lc.clip_coef  # the round's (annealed with anneal_clip), set before each update
        # padded shapes only grow (in powers of two): a round with fewer actors than an earlier one reuses its program
        self._rows_cap = self._steps_cap = 0

    def set_learning_rate(self, lr: float) -> None:
        """The rate of the next update (the anneal's, or the KL-adaptive rule's)."""
        self.learning_rate = lr

    def set_clip_coef(self, clip_coef: float) -> None:
        """The surrogate's clipping coefficient for the next update (annealed with ``anneal_clip``)."""
        self.clip_coef = clip_coef

    def numpy_weights(self) -> dict[str, np.ndarray]:
        """The weights as NumPy arrays (published and checkpointed as they are)."""
        return {k: np.asarray(v) for k, v in self.weights.items()}

    def update(self, batch: Batch, rng: np.random.Generator, whole_batch: bool = False) -> dict[str, float]:
        """Run ``update_epochs`` epochs of minibatch SGD (``whole_batch``: one step on all of it, the caller
        making the epochs) as one compiled program; return CleanRL's loss statistics (those of the last step,
        the clip fraction averaged over all of them)."""
        lc = self.config
        epochs = minibatch_schedule(len(batch), lc, rng, whole_batch, self.reference_batch)
        steps = [mb for epoch in epochs for mb in epoch]
        lengths = np.array([len(mb) for mb in steps])
        width = bucket(int(lengths.max()))
        self._steps_cap = max(self._steps_cap, bucket(len(steps), fine=False))
        self._rows_cap = max(self._rows_cap, bucket(len(batch), fine=False))
        # step i trains on rows idx[i, :lengths[i]] (weight 1), the rest of its row padding (weight 0); filled at
        # once, row by row in order (a Python loop over a Hopper round's 640 steps took milliseconds)
        idx = np.zeros((self._steps_cap, width), np.int32)
        w = np.zeros(idx.shape, np.float32)
        used = np.arange(width) < lengths[:, None]
        idx[: len(steps)][used] = np.concatenate(steps)
        w[: len(steps)] = used
        epoch_end = np.zeros(len(idx), bool)
        epoch_end[np.cumsum([len(epoch) for epoch in epochs]) - 1] = True  # each epoch's last step (a cut one's too)
        rows = self._rows_cap  # padding rows are never indexed
        data = {k: pad_rows(v, rows) for k, v in batch.arrays().items()}
        put = partial(jax.device_put, device=self.device)
        target_kl = np.inf if lc.target_kl is None else lc.target_kl
        self.weights, self.opt_state, stats, done, lr, finite = _update_program(
            self.arch, self.constants, self.loss, self.weights, self.opt_state, put(data), put(idx), put(w),
            put(epoch_end), np.int32(len(steps)), np.float32(self.learning_rate), np.float32(self.kl_coef),
            np.float32(target_kl), np.float32(self.clip_coef))
        done, self.finite = int(done), bool(finite)
        if lc.desired_kl is not None:  # kept across rounds (and in the checkpoint)
            self.learning_rate = float(lr)
        taken = {name: np.asarray(values)[:done] for name, values in stats.items()}
        if lc.kl_target is not None and done:  # after the update, on its mean KL (RLlib's rule)
            self.kl_coef = adapt_kl_coef(self.kl_coef, float(taken["approx_kl"].mean()), lc.kl_target)
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
        self.weights = jax.device_put({k: np.asarray(state["policy"][k]) for k in self.weights}, self.device)
        structure = jax.tree.structure(self.opt_state)
        leaves = [np.asarray(state["optimizer"][f"{i:03d}"]) for i in range(structure.num_leaves)]
        self.opt_state = jax.device_put(jax.tree.unflatten(structure, leaves), self.device)
        self.kl_coef = float(state["kl_coef"])
        self.learning_rate = float(state["learning_rate"])
        self._rows_cap, self._steps_cap = int(state["rows_cap"]), int(state["steps_cap"])
