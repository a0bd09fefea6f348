"""Detectors read a round's batch and estimate how useful more samples would be: before the update by default,
at the policy that sampled it, or after it (Nitro's published placement; :class:`DetectorPlan`).

* **Convexity ratio** (Nitro, DESIGN §2.1): the extreme eigenvalues of the Hessian of the full PPO loss
  on the round's batch, by Lanczos iterations on Hessian-vector products (double back-propagation,
  Rademacher start vector, full re-orthogonalisation); ``c = -(λmax + ε) / (λmin − ε)``.
* **Gradient noise scale** (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training",
  appendix A.1): ``B_simple = tr(Σ) / |G|²`` from the gradient of the whole batch and of ``k`` slices
  (cut from a random permutation of the rows; one loss, advantages normalised once over the batch). The
  estimator itself (:func:`slice_noise_scale`) takes any loss's per-slice gradients.

Neither touches the parameters, their ``.grad`` or the optimiser: the model is left exactly as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner.batch import Batch
from minionsrl.learner.engine import bucket, pad_rows
from minionsrl.learner.networks import Params
from minionsrl.learner.ppo import LossParams, normalize_advantages_np, ppo_loss

CONVEXITY_EPS = 0.01


def lanczos_extremes(hvp: Callable[[np.ndarray], np.ndarray], dim: int, iterations: int,
                     rng: np.random.Generator, tol: float = 0.0) -> tuple[float, float]:
    """(λmin, λmax) of the symmetric operator ``hvp`` on R^dim, by Lanczos with full re-orthogonalisation
    (in float64 on the host), for at most ``iterations`` products. With ``tol`` > 0 it stops early, once two
    iterations in a row moved neither extreme by more than ``tol`` of the larger one's magnitude: the extremes
    converge first (often in a fraction of the cap), and each product is a pass over the batch."""
    m = min(iterations, dim)
    basis = np.zeros((m, dim), dtype=np.float64)
    alphas: list[float] = []
    betas: list[float] = []
    v = (rng.integers(0, 2, dim).astype(np.float64) * 2 - 1) / dim**0.5
    extremes, still = np.array([np.nan, np.nan]), 0
    for j in range(m):
        basis[j] = v
        w = np.asarray(hvp(v), dtype=np.float64)
        alpha = float(w @ v)
        alphas.append(alpha)
        if tol > 0:
            ritz = _ritz_extremes(alphas, betas)
            moved = np.abs(ritz - extremes).max() if j else np.inf
            still = still + 1 if moved <= tol * np.abs(ritz).max() else 0
            extremes = ritz
            if still == 2:
                break
        # full re-orthogonalisation against every previous Lanczos vector (twice is enough)
        for _ in range(2):
            w = w - basis[: j + 1].T @ (basis[: j + 1] @ w)
        beta = float(np.linalg.norm(w))
        if j == m - 1 or beta < 1e-10:
            break
        betas.append(beta)
        v = w / beta
    lo, hi = _ritz_extremes(alphas, betas)
    return float(lo), float(hi)


def _ritz_extremes(alphas: list[float], betas: list[float]) -> np.ndarray:
    """The extreme eigenvalues of the Lanczos tridiagonal matrix built so far."""
    k = len(alphas)
    tri = np.diag(alphas) + np.diag(betas[: k - 1], 1) + np.diag(betas[: k - 1], -1)
    eig = np.linalg.eigvalsh(tri)
    return eig[[0, -1]]


@dataclass
class Curvature:
    """Extreme Hessian eigenvalues of the PPO loss and the convexity ratio built from them."""

    lambda_min: float
    lambda_max: float

    @property
    def convexity_ratio(self) -> float:
        return -(self.lambda_max + CONVEXITY_EPS) / (self.lambda_min - CONVEXITY_EPS)


def _padded(batch: Batch, rows: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The batch's arrays padded to ``rows`` rows, and the weights marking the real ones."""
    data = {k: pad_rows(v, rows) for k, v in batch.arrays().items()}
    w = np.zeros(rows, np.float32)
    w[: len(batch)] = 1.0
    return data, w


def _flat_grad(arch: PolicyArch, p: LossParams, kl_coef: jax.Array, weights: Params, data: dict[str, jax.Array],
               w: jax.Array) -> jax.Array:
    """The PPO loss's gradient on the rows of ``data`` weighted ``w``, as one flat vector (traced, not jitted)."""
    return ravel_pytree(jax.grad(lambda q: ppo_loss(arch, q, data, w, p, kl_coef).loss)(weights))[0]


@partial(jax.jit, static_argnames=("arch", "p"))
def _hvp(arch: PolicyArch, p: LossParams, kl_coef: jax.Array, weights: Params, data: dict[str, jax.Array],
         w: jax.Array, v: jax.Array) -> jax.Array:
    """The Hessian of the PPO loss (flattened weights) times ``v``: forward-over-reverse differentiation."""
    flat, unravel = ravel_pytree(weights)

    def grad(x: jax.Array) -> jax.Array:
        return _flat_grad(arch, p, kl_coef, unravel(x), data, w)

    return jax.jvp(grad, (flat,), (v.astype(flat.dtype),))[1]


def hessian_curvature(arch: PolicyArch, weights: Params, batch: Batch, params: LossParams, iterations: int = 100,
                      seed: int = 0, kl_coef: float | None = None, tol: float = 0.0) -> Curvature:
    """Lanczos estimate of the Hessian's extreme eigenvalues for the full PPO loss on ``batch``."""
    data, w = _padded(batch, bucket(len(batch)))
    coef = np.float32(params.kl_coef if kl_coef is None else kl_coef)
    dim = ravel_pytree(weights)[0].size
    lam_min, lam_max = lanczos_extremes(
        lambda v: np.asarray(_hvp(arch, params, coef, weights, data, w, v.astype(np.float32))), dim, iterations,
        np.random.default_rng(seed), tol)
    return Curvature(lam_min, lam_max)


GNS_SETS_PER_CALL = 8  # row sets per compiled call: one program for every n, however many slices


@partial(jax.jit, static_argnames=("arch", "p"))
def _set_grads(arch: PolicyArch, p: LossParams, kl_coef: jax.Array, weights: Params, rows: dict[str, jax.Array],
               w: jax.Array) -> jax.Array:
    """The flat loss gradient of each row set: ``rows[k][i]`` are set i's rows, weighted ``w[i]`` (0: padding)."""
    return jax.lax.map(lambda rows_w: _flat_grad(arch, p, kl_coef, weights, *rows_w), (rows, w))


def _set_gradients(arch: PolicyArch, p: LossParams, kl_coef: np.float32, weights: Params,
                   arrays: dict[str, np.ndarray], sets: list[np.ndarray]) -> np.ndarray:
    """``(len(sets), dim)`` float64 gradients, ``GNS_SETS_PER_CALL`` sets of one padded width per call. The rows
    are gathered here, so that the compiled program's shapes depend on neither the batch size nor the count."""
    width = bucket(max(len(s) for s in sets))
    out = []
    for start in range(0, len(sets), GNS_SETS_PER_CALL):
        chunk = sets[start : start + GNS_SETS_PER_CALL]
        idx = np.zeros((GNS_SETS_PER_CALL, width), np.int64)
        w = np.zeros((GNS_SETS_PER_CALL, width), np.float32)
        for i, rows in enumerate(chunk):
            idx[i, : len(rows)], w[i, : len(rows)] = rows, 1.0
        w[len(chunk) :, 0] = 1.0  # padding sets: one row each, so that their (unused) loss is defined
        grads = _set_grads(arch, p, kl_coef, weights, {k: v[idx] for k, v in arrays.items()}, w)
        out.append(np.asarray(grads, dtype=np.float64)[: len(chunk)])
    return np.concatenate(out)


@dataclass(frozen=True)
class NoiseScale:
    """McCandlish et al.'s unbiased estimates of the noise ``tr(Σ)`` (of one sample's gradient) and of the true
    gradient's squared norm ``|G|²``; their ratio is ``B_simple``. Averaged over rounds apart, their ratio is
    less biased than the mean of the ratios (the paper's advice)."""

    trace: float
    g2: float

    @property
    def b_simple(self) -> float:
        return self.trace / self.g2 if self.g2 != 0 else float("nan")


def slice_noise_scale(set_gradients: Callable[[list[np.ndarray]], np.ndarray], size: int, slices: int,
                      seed: int = 0) -> NoiseScale | None:
    """``tr(Σ)`` and ``|G|²`` of any mean-over-rows loss on a batch of ``size`` rows, from the gradients of
    ``slices`` equal slices cut from a random permutation of the rows (``seed`` draws it).

    ``set_gradients(sets)`` returns a ``(len(sets), dim)`` array: the loss's gradient on each set of row indices.
    The sets are the slices and, when they leave rows over, those rows as one more set, so that the full-batch
    gradient is the row-weighted mean of them all (no separate pass over the batch). With |G_B|² the squared norm
    of a size-B gradient and b the slice size, the unbiased estimates (appendix A.1) are

        |G|² = (B·|G_B|² − b·E|G_b|²)/(B − b)        tr(Σ) = (E|G_b|² − |G_B|²)/(1/b − 1/B).

    None with fewer than 2 slices or fewer than 2 rows a slice.
    """
    if slices < 2 or size < 2 * slices:
        return None
    small = size // slices
    order = np.random.default_rng(seed).permutation(size)
    sets = [order[i * small : (i + 1) * small] for i in range(slices)]
    if slices * small < size:
        sets.append(order[slices * small :])
    grads = np.asarray(set_gradients(sets), dtype=np.float64)
    counts = np.array([len(s) for s in sets], dtype=np.float64)
    full = counts @ grads / size
    big_sq, small_sq = float(full @ full), float(np.mean(np.sum(grads[:slices] ** 2, axis=1)))
    return NoiseScale(trace=(small_sq - big_sq) / (1.0 / small - 1.0 / size),
                      g2=(size * big_sq - small * small_sq) / (size - small))


def gradient_noise_scale(arch: PolicyArch, weights: Params, batch: Batch, params: LossParams, slices: int,
                         seed: int = 0, kl_coef: float | None = None) -> float:
    """``B_simple`` of the PPO loss on ``batch`` at ``weights``, by :func:`slice_noise_scale` over ``slices`` slices.
    Returns NaN with fewer than 2 slices; the ratio can be negative when the noise is small.

    McCandlish et al. derive these estimates for i.i.d. samples of one loss, so two things are done here:

    * the slices are cut from a random permutation of the rows, not contiguous rows: contiguous rows are whole
      actors' fragments, whose samples are correlated (one episode, one start), which inflates the spread
      between small-batch gradients;
    * advantages are normalised once, over the whole batch (when ``params.norm_adv``), and every gradient
      is of ``ppo_loss`` with per-minibatch normalisation off. Re-normalising inside each slice would make
      each slice's gradient that of a different loss than the full batch's; with one loss, the mean of
      the slice gradients is the full-batch gradient when the slices partition the batch.

    The sets go in fixed-size calls, padded with 0/1 row weights, so a changing ``n`` compiles no new program.
    """
    adv = normalize_advantages_np(batch.advantages).astype(np.float32) if params.norm_adv else batch.advantages
    arrays = replace(batch, advantages=adv).arrays()
    one_loss = replace(params, norm_adv=False)
    coef = np.float32(params.kl_coef if kl_coef is None else kl_coef)
    estimate = slice_noise_scale(lambda sets: _set_gradients(arch, one_loss, coef, weights, arrays, sets),
                                 len(batch), slices, seed)
    return float("nan") if estimate is None else estimate.b_simple


@dataclass(frozen=True)
class DetectorPlan:
    """What a round's detectors compute and where: built by the trainer every round, run by the learner.

    ``placement`` "before": on the round's fresh batch at the weights it was sampled with (PPO ratio 1), before
    the update: McCandlish et al.'s noise scale is of the gradient at the current parameters on fresh samples.
    "after": at the updated weights, on the batch just fitted (Nitro's published placement): the update pulls the
    full-batch gradient towards zero, not the slices', so the noise scale swings in size and sign there.
    """

    wanted: frozenset[str]  # "gns" and/or "curvature"
    placement: str = "before"
    slices: int = 8  # the noise scale's slices: the round's fragment count
    seed: int = 0
    samples: int = 0  # the curvature's random subsample of rows (0: all)
    iterations: int = 100  # Lanczos iterations, at most
    tol: float = 0.0  # Lanczos early stop


@dataclass(frozen=True)
class Detected:
    """What a round's detectors read (None: not asked for that round)."""

    convexity_ratio: float | None = None  # λ_min / λ_max of the loss's Hessian (Nitro's input)
    lambda_min: float | None = None
    lambda_max: float | None = None
    gns: float | None = None  # the gradient noise scale B_simple, in samples


def detect(plan: DetectorPlan, arch: PolicyArch, weights: Params, batch: Batch, params: LossParams,
           kl_coef: float | None = None) -> Detected:
    """The detectors ``plan`` asks for on a round's batch at ``weights``. The curvature reads
    a random subsample of ``plan.samples`` rows (0: all), since Hessian-vector products cost O(batch) each."""
    gns = None
    if "gns" in plan.wanted:
        # its slices from a stream apart from the curvature's subsample (default_rng(seed) below)
        gns = gradient_noise_scale(arch, weights, batch, params, plan.slices, seed=plan.seed + 1, kl_coef=kl_coef)
    if "curvature" not in plan.wanted:
        return Detected(gns=gns)
    sample = batch
    if 0 < plan.samples < len(batch):
        idx = np.random.default_rng(plan.seed).choice(len(batch), plan.samples, replace=False)
        sample = batch.select(np.sort(idx))
    curvature = hessian_curvature(arch, weights, sample, params, plan.iterations, seed=plan.seed, kl_coef=kl_coef,
                                  tol=plan.tol)
    return Detected(curvature.convexity_ratio, curvature.lambda_min, curvature.lambda_max, gns)
