"""Detectors read a round's batch after the update and estimate how useful more samples would be.

* **Convexity ratio** (Nitro, DESIGN §2.1): the extreme eigenvalues of the Hessian of the full PPO loss
  on the round's batch, by Lanczos iterations on Hessian-vector products (double back-propagation,
  Rademacher start vector, full re-orthogonalisation); ``c = -(λmax + ε) / (λmin − ε)``.
* **Gradient noise scale** (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training",
  appendix A.1): ``B_simple = tr(Σ) / |G|²`` from the gradient of the whole batch and of ``k`` slices
  (cut from a random permutation of the rows; one loss, advantages normalised once over the batch).

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
from minionsrl.learner.networks import Params
from minionsrl.learner.ppo import Batch, PPOParams, bucket, pad_rows, ppo_loss

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


def _flat_grad(arch: PolicyArch, p: PPOParams, kl_coef: jax.Array, weights: Params, data: dict[str, jax.Array],
               w: jax.Array) -> jax.Array:
    """The PPO loss's gradient on the rows of ``data`` weighted ``w``, as one flat vector (traced, not jitted)."""
    return ravel_pytree(jax.grad(lambda q: ppo_loss(arch, q, data, w, p, kl_coef).loss)(weights))[0]


@partial(jax.jit, static_argnames=("arch", "p"))
def _hvp(arch: PolicyArch, p: PPOParams, kl_coef: jax.Array, weights: Params, data: dict[str, jax.Array],
         w: jax.Array, v: jax.Array) -> jax.Array:
    """The Hessian of the PPO loss (flattened weights) times ``v``: forward-over-reverse differentiation."""
    flat, unravel = ravel_pytree(weights)

    def grad(x: jax.Array) -> jax.Array:
        return _flat_grad(arch, p, kl_coef, unravel(x), data, w)

    return jax.jvp(grad, (flat,), (v.astype(flat.dtype),))[1]


def hessian_curvature(arch: PolicyArch, weights: Params, batch: Batch, params: PPOParams, iterations: int = 100,
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
def _set_grads(arch: PolicyArch, p: PPOParams, kl_coef: jax.Array, weights: Params, rows: dict[str, jax.Array],
               w: jax.Array) -> jax.Array:
    """The flat loss gradient of each row set: ``rows[k][i]`` are set i's rows, weighted ``w[i]`` (0: padding)."""
    return jax.lax.map(lambda rows_w: _flat_grad(arch, p, kl_coef, weights, *rows_w), (rows, w))


def _set_gradients(arch: PolicyArch, p: PPOParams, kl_coef: np.float32, weights: Params,
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


def gradient_noise_scale(arch: PolicyArch, weights: Params, batch: Batch, params: PPOParams, slices: int,
                         seed: int = 0, kl_coef: float | None = None) -> float:
    """``B_simple`` from the full-batch gradient and the gradients of ``slices`` equal slices.

    With |G_B|² the squared norm of a size-B gradient, the unbiased estimates are
    |G|² = (B·|G_B|² − b·E|G_b|²)/(B − b) and tr(Σ) = (E|G_b|² − |G_B|²)/(1/b − 1/B).
    Returns NaN with fewer than 2 slices; the ratio can be negative when the noise is small.

    McCandlish et al. derive these estimates for i.i.d. samples of one loss, so two things are done here:

    * the slices are cut from a random permutation of the rows (``seed`` draws it), not contiguous rows:
      contiguous rows are whole actors' fragments, whose samples are correlated (one episode, one start),
      which inflates the spread between small-batch gradients;
    * advantages are normalised once, over the whole batch (when ``params.norm_adv``), and every gradient
      is of ``ppo_loss`` with per-minibatch normalisation off. Re-normalising inside each slice would make
      each slice's gradient that of a different loss than the full batch's; with one loss, the mean of
      the slice gradients is the full-batch gradient when the slices partition the batch.

    Every gradient is taken per slice (with the rows a partition leaves over as one more set): the loss is a
    mean over rows, so the full-batch gradient is their row-weighted mean, and a changing ``n`` compiles no new
    program (the sets go in fixed-size calls, padded with 0/1 row weights).
    """
    size = len(batch)
    if slices < 2 or size < 2 * slices:
        return float("nan")
    small = size // slices
    adv = batch.advantages
    if params.norm_adv:
        adv = ((adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)).astype(np.float32)
    batch = replace(batch, advantages=adv)
    one_loss = replace(params, norm_adv=False)
    order = np.random.default_rng(seed).permutation(size)
    coef = np.float32(params.kl_coef if kl_coef is None else kl_coef)
    sets = [order[i * small : (i + 1) * small] for i in range(slices)]
    if slices * small < size:
        sets.append(order[slices * small :])
    grads = _set_gradients(arch, one_loss, coef, weights, batch.arrays(), sets)
    counts = np.array([len(s) for s in sets], dtype=np.float64)
    full = counts @ grads / size
    big_sq, small_sq = float(full @ full), float(np.mean(np.sum(grads[:slices] ** 2, axis=1)))
    g2 = (size * big_sq - small * small_sq) / (size - small)
    trace = (small_sq - big_sq) / (1.0 / small - 1.0 / size)
    return float(trace / g2) if g2 != 0 else float("nan")


def detect(wanted: set[str], arch: PolicyArch, weights: Params, batch: Batch, params: PPOParams, slices: int,
           seed: int, samples: int, iterations: int, kl_coef: float | None = None,
           tol: float = 0.0) -> dict[str, float]:
    """The detectors in ``wanted`` ("gns", "curvature") on a round's batch, as metrics columns. The curvature
    reads a random subsample of ``samples`` rows (0: all), since Hessian-vector products cost O(batch) each."""
    out: dict[str, float] = {}
    if "gns" in wanted:
        # its slices from a stream apart from the curvature's subsample (default_rng(seed) below)
        out["gns"] = gradient_noise_scale(arch, weights, batch, params, slices, seed=seed + 1, kl_coef=kl_coef)
    if "curvature" not in wanted:
        return out
    sample = batch
    if 0 < samples < len(batch):
        idx = np.random.default_rng(seed).choice(len(batch), samples, replace=False)
        sample = batch.select(np.sort(idx))
    curvature = hessian_curvature(arch, weights, sample, params, iterations, seed=seed, kl_coef=kl_coef, tol=tol)
    return {**out, "convexity_ratio": curvature.convexity_ratio, "lambda_min": curvature.lambda_min,
            "lambda_max": curvature.lambda_max}
