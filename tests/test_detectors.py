"""Detectors: Lanczos extremes against known spectra, the model left untouched, the noise scale."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from minionsrl.function.numpy_policy import PolicyArch
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
