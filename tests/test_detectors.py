"""Detectors: Lanczos extremes against known spectra, the model left untouched, the noise scale."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner import detectors
from minionsrl.learner.detectors import Curvature, gradient_noise_scale, hessian_curvature, lanczos_extremes
from minionsrl.learner.networks import ActorCritic
from minionsrl.learner.ppo import Batch, PPOParams, ppo_loss


def _batch(arch: PolicyArch, n: int, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    actions = (torch.randint(0, arch.action_dim, (n,), generator=g) if arch.discrete
               else torch.randn(n, arch.action_dim, generator=g))
    return Batch(torch.randn(n, arch.obs_dim, generator=g), actions, torch.randn(n, generator=g) * 0.1 - 1.0,
                 torch.randn(n, generator=g), torch.randn(n, generator=g), torch.randn(n, generator=g))


def test_lanczos_finds_the_extremes_of_a_quadratic() -> None:
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    eigs = np.concatenate([[-3.7], rng.uniform(-1, 2, 58), [5.2]])
    hessian = torch.from_numpy(q @ np.diag(eigs) @ q.T)
    lo, hi = lanczos_extremes(lambda v: hessian @ v, 60, 60, torch.Generator().manual_seed(1))
    assert lo == pytest.approx(-3.7, rel=1e-3)
    assert hi == pytest.approx(5.2, rel=1e-3)


def test_hessian_curvature_matches_the_exact_hessian_and_leaves_the_model_untouched() -> None:
    torch.manual_seed(0)
    arch = PolicyArch(3, 2, False, (5,))
    policy = ActorCritic(arch).double()
    batch = _batch(arch, 64)
    batch = Batch(*(t.double() if t.is_floating_point() else t for t in
                    (batch.obs, batch.actions, batch.logprobs, batch.advantages, batch.returns, batch.values)))
    params = PPOParams(ent_coef=0.01)
    before = {k: v.clone() for k, v in policy.state_dict().items()}

    est = hessian_curvature(policy, batch, params, iterations=100, seed=3)

    names = [n for n, _ in policy.named_parameters()]
    shapes = [p.shape for p in policy.parameters()]
    flat0 = torch.cat([p.detach().reshape(-1) for p in policy.parameters()])
    wrapper = _Evaluate(policy)

    def loss_of(flat: torch.Tensor) -> torch.Tensor:
        chunks, i = {}, 0
        for name, shape in zip(names, shapes, strict=True):
            size = int(np.prod(shape))
            chunks[f"policy.{name}"] = flat[i : i + size].reshape(shape)
            i += size
        view = SimpleNamespace(evaluate=lambda o, a: torch.func.functional_call(wrapper, chunks, (o, a)))
        return ppo_loss(view, batch, params).loss

    exact = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss_of, flat0))
    assert est.lambda_min == pytest.approx(float(exact[0]), rel=1e-3)
    assert est.lambda_max == pytest.approx(float(exact[-1]), rel=1e-3)
    for k, v in policy.state_dict().items():
        assert torch.equal(v, before[k])
    assert all(p.grad is None for p in policy.parameters())


class _Evaluate(torch.nn.Module):
    """Exposes ``ActorCritic.evaluate`` as ``forward`` so torch.func can call it with given weights."""

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.policy.evaluate(obs, actions)


def test_convexity_ratio_formula() -> None:
    c = Curvature(lambda_min=-0.5, lambda_max=2.0)
    assert c.convexity_ratio == pytest.approx(-(2.0 + 0.01) / (-0.5 - 0.01))


def test_gradient_noise_scale_is_finite_and_grows_with_noise() -> None:
    torch.manual_seed(0)
    arch = PolicyArch(4, 2, True, (16,))
    policy = ActorCritic(arch)
    params = PPOParams()
    quiet = _batch(arch, 512, seed=1)
    quiet.advantages[:] = 1.0  # identical targets: little noise between slices
    noisy = _batch(arch, 512, seed=1)
    noisy.advantages[:] = torch.randn(512, generator=torch.Generator().manual_seed(5)) * 10
    gns_quiet = gradient_noise_scale(policy, quiet, params, slices=8)
    gns_noisy = gradient_noise_scale(policy, noisy, params, slices=8)
    assert np.isfinite(gns_quiet) and np.isfinite(gns_noisy)
    assert gns_noisy > gns_quiet
    assert np.isnan(gradient_noise_scale(policy, quiet, params, slices=1))


def _blocked_batch(arch: PolicyArch, fragments: int, steps: int, seed: int = 0) -> Batch:
    """``fragments`` contiguous blocks of ``steps`` rows (whole actors' fragments) that differ systematically:
    each block has its own observation offset and advantage level. Float64 throughout."""
    g = torch.Generator().manual_seed(seed)
    n = fragments * steps
    block = torch.arange(fragments, dtype=torch.float64).repeat_interleave(steps)
    obs = torch.randn(n, arch.obs_dim, generator=g, dtype=torch.float64) * 0.3 + 0.5 * block[:, None]
    actions = torch.randint(0, arch.action_dim, (n,), generator=g)
    adv = torch.randn(n, generator=g, dtype=torch.float64) * 0.2 + (block - block.mean())
    rnd = [torch.randn(n, generator=g, dtype=torch.float64) for _ in range(3)]
    return Batch(obs, actions, rnd[0] * 0.1 - 0.7, adv, rnd[1] + block, rnd[2])


def _b_simple(policy: torch.nn.Module, batch: Batch, params: PPOParams, parts: list[torch.Tensor]) -> float:
    """McCandlish et al.'s B_simple over the given equal-size parts, of one loss (advantages normalised once)."""
    adv = (batch.advantages - batch.advantages.mean()) / (batch.advantages.std() + 1e-8)
    batch = Batch(batch.obs, batch.actions, batch.logprobs, adv, batch.returns, batch.values)
    one = PPOParams(**{**vars(params), "norm_adv": False})

    def sq(b: Batch) -> float:
        grads = torch.autograd.grad(ppo_loss(policy, b, one).loss, list(policy.parameters()))
        return float(sum(g.pow(2).sum() for g in grads))

    big, small = len(batch), len(parts[0])
    big_sq, small_sq = sq(batch), float(np.mean([sq(batch.select(idx)) for idx in parts]))
    g2 = (big * big_sq - small * small_sq) / (big - small)
    return (small_sq - big_sq) / (1.0 / small - 1.0 / big) / g2


def test_gradient_noise_scale_slices_are_a_seeded_random_partition_not_fragments() -> None:
    """Contiguous slices are whole fragments, correlated within: they inflate the spread between slice gradients."""
    torch.manual_seed(0)
    arch = PolicyArch(4, 2, True, (16,))
    policy = ActorCritic(arch).double()
    params = PPOParams()
    fragments, steps = 8, 64
    batch = _blocked_batch(arch, fragments, steps)
    gns = gradient_noise_scale(policy, batch, params, slices=fragments, seed=3)
    assert gns == gradient_noise_scale(policy, batch, params, slices=fragments, seed=3)  # deterministic
    assert gns != gradient_noise_scale(policy, batch, params, slices=fragments, seed=4)
    # it is B_simple over the partition the seed draws
    order = torch.from_numpy(np.random.default_rng(3).permutation(fragments * steps))
    drawn = [order[i * steps : (i + 1) * steps] for i in range(fragments)]
    assert gns == pytest.approx(_b_simple(policy, batch, params, drawn), rel=1e-9)
    # ... and far from the estimate over contiguous slices (the fragments)
    contiguous = _b_simple(policy, batch, params, [torch.arange(i * steps, (i + 1) * steps) for i in range(fragments)])
    assert contiguous > 5 * abs(gns)


def test_gradient_noise_scale_slices_are_of_one_loss(monkeypatch: pytest.MonkeyPatch) -> None:
    """No re-normalisation per slice: with slices that partition the batch, their gradients average to the
    full-batch gradient (the loss is a mean over rows of one loss)."""
    torch.manual_seed(0)
    arch = PolicyArch(4, 2, True, (16,))
    policy = ActorCritic(arch).double()
    batch = _blocked_batch(arch, 8, 64)
    grads: list[torch.Tensor] = []
    flat_grad = detectors._flat_grad

    def recording(loss, params, create_graph=False):
        grads.append(flat_grad(loss, params, create_graph))
        return grads[-1]

    monkeypatch.setattr(detectors, "_flat_grad", recording)
    assert np.isfinite(gradient_noise_scale(policy, batch, PPOParams(), slices=8, seed=1))
    full, slices = grads[0], torch.stack(grads[1:])
    assert len(slices) == 8
    torch.testing.assert_close(slices.mean(0), full, rtol=1e-10, atol=1e-12)
