"""How much work an update does and at what rate: the learner budget (minibatches per epoch and SGD steps in all,
as the batch grows or shrinks with ``n``; DESIGN §1), the minibatches' rows, the learning rate's scaling with the
batch and its KL-adaptive rule. The compiled update (:mod:`minionsrl.learner.engine`) runs what these decide.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from minionsrl.learner.ppo import PPOParams


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
    reference_chunks = minibatch_count(reference, p)
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
