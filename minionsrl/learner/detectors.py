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

import numpy as np
import torch
from torch import nn

from minionsrl.learner.ppo import Batch, PPOParams, ppo_loss

CONVEXITY_EPS = 0.01


def lanczos_extremes(hvp: Callable[[torch.Tensor], torch.Tensor], dim: int, iterations: int,
                     generator: torch.Generator) -> tuple[float, float]:
    """(λmin, λmax) of the symmetric operator ``hvp`` on R^dim, by Lanczos with full re-orthogonalisation."""
    m = min(iterations, dim)
    basis = torch.zeros(m, dim, dtype=torch.float64)
    alphas: list[float] = []
    betas: list[float] = []
    v = (torch.randint(0, 2, (dim,), generator=generator, dtype=torch.float64) * 2 - 1) / dim**0.5
    for j in range(m):
        basis[j] = v
        w = hvp(v)
        alpha = float(w @ v)
        alphas.append(alpha)
        # full re-orthogonalisation against every previous Lanczos vector (twice is enough)
        for _ in range(2):
            w = w - basis[: j + 1].T @ (basis[: j + 1] @ w)
        beta = float(w.norm())
        if j == m - 1 or beta < 1e-10:
            break
        betas.append(beta)
        v = w / beta
    k = len(alphas)
    tri = np.diag(alphas) + np.diag(betas[: k - 1], 1) + np.diag(betas[: k - 1], -1)
    eig = np.linalg.eigvalsh(tri)
    return float(eig[0]), float(eig[-1])


def _flat_grad(loss: torch.Tensor, params: list[nn.Parameter], create_graph: bool = False) -> torch.Tensor:
    grads = torch.autograd.grad(loss, params, create_graph=create_graph)
    return torch.cat([g.reshape(-1) for g in grads])


@dataclass
class Curvature:
    """Extreme Hessian eigenvalues of the PPO loss and the convexity ratio built from them."""

    lambda_min: float
    lambda_max: float

    @property
    def convexity_ratio(self) -> float:
        return -(self.lambda_max + CONVEXITY_EPS) / (self.lambda_min - CONVEXITY_EPS)


def hessian_curvature(policy: nn.Module, batch: Batch, params: PPOParams, iterations: int = 100,
                      seed: int = 0) -> Curvature:
    """Lanczos estimate of the Hessian's extreme eigenvalues for the full PPO loss on ``batch``."""
    weights = [p for p in policy.parameters() if p.requires_grad]
    loss = ppo_loss(policy, batch, params).loss
    grad = _flat_grad(loss, weights, create_graph=True)  # the graph is reused by every product

    def hvp(v: torch.Tensor) -> torch.Tensor:
        prods = torch.autograd.grad(grad, weights, grad_outputs=v.to(grad.device, grad.dtype), retain_graph=True)
        return torch.cat([p.reshape(-1) for p in prods]).to("cpu", torch.float64)  # Lanczos runs on the CPU

    gen = torch.Generator().manual_seed(seed)
    lam_min, lam_max = lanczos_extremes(hvp, grad.numel(), iterations, gen)
    return Curvature(lam_min, lam_max)


def gradient_noise_scale(policy: nn.Module, batch: Batch, params: PPOParams, slices: int, seed: int = 0) -> float:
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
    """
    weights = [p for p in policy.parameters() if p.requires_grad]
    size = len(batch)
    if slices < 2 or size < 2 * slices:
        return float("nan")
    small = size // slices
    adv = batch.advantages
    if params.norm_adv:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    batch = replace(batch, advantages=adv)
    one_loss = replace(params, norm_adv=False)
    order = torch.from_numpy(np.random.default_rng(seed).permutation(size))
    big_sq = float(_flat_grad(ppo_loss(policy, batch, one_loss).loss, weights).pow(2).sum())
    small_sq = np.mean([
        float(_flat_grad(ppo_loss(policy, batch.select(order[i * small : (i + 1) * small]), one_loss).loss,
                         weights).pow(2).sum())
        for i in range(slices)
    ])
    g2 = (size * big_sq - small * small_sq) / (size - small)
    trace = (small_sq - big_sq) / (1.0 / small - 1.0 / size)
    return float(trace / g2) if g2 != 0 else float("nan")


def detect(wanted: set[str], policy: nn.Module, batch: Batch, params: PPOParams, slices: int, seed: int,
           samples: int, iterations: int) -> dict[str, float]:
    """The detectors in ``wanted`` ("gns", "curvature") on a round's batch, as metrics columns. The curvature
    reads a random subsample of ``samples`` rows (0: all), since Hessian-vector products cost O(batch) each."""
    out: dict[str, float] = {}
    if "gns" in wanted:
        # its slices from a stream apart from the curvature's subsample (default_rng(seed) below)
        out["gns"] = gradient_noise_scale(policy, batch, params, slices, seed=seed + 1)
    if "curvature" not in wanted:
        return out
    sample = batch
    if 0 < samples < len(batch):
        idx = np.random.default_rng(seed).choice(len(batch), samples, replace=False)
        sample = batch.select(torch.from_numpy(np.sort(idx)))
    curvature = hessian_curvature(policy, sample, params, iterations, seed=seed)
    return {**out, "convexity_ratio": curvature.convexity_ratio, "lambda_min": curvature.lambda_min,
            "lambda_max": curvature.lambda_max}
