"""Detectors: Lanczos extremes against known spectra, the model left untouched, the noise scale."""

from __future__ import annotations

from dataclasses import asdict, replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from oracles import least_squares_problem

from minionsrl.config import learner_settings
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner.batch import Batch
from minionsrl.learner.detectors import (
    Curvature,
    Detected,
    gradient_noise_scale,
    hessian_curvature,
    lanczos_extremes,
    slice_noise_scale,
)
from minionsrl.learner.networks import init_params
from minionsrl.learner.ppo import LossParams, ppo_loss


def _batch(arch: PolicyArch, n: int, seed: int = 0, dtype: type = np.float32) -> Batch:
    rng = np.random.default_rng(seed)
    actions = (rng.integers(0, arch.action_dim, n) if arch.discrete
               else rng.standard_normal((n, arch.action_dim)).astype(dtype))
    return Batch(rng.standard_normal((n, arch.obs_dim)).astype(dtype), actions,
                 (rng.standard_normal(n) * 0.1 - 1.0).astype(dtype), rng.standard_normal(n).astype(dtype),
                 rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype))


def _weights(arch: PolicyArch, seed: int, dtype: type = np.float32) -> dict[str, jax.Array]:
    """The learner's weights (``PPO.weights``: a dict of JAX arrays) at initialisation."""
    return {k: jnp.asarray(v.astype(dtype)) for k, v in init_params(arch, seed).items()}


def _loss(arch: PolicyArch, weights: dict, batch: Batch, params: LossParams, kl_coef: float | None = None):
    """``ppo_loss`` on the whole of ``batch`` (every row weighing 1)."""
    data = {k: jnp.asarray(v) for k, v in batch.arrays().items()}
    coef = params.kl_coef if kl_coef is None else kl_coef
    return ppo_loss(arch, weights, data, jnp.ones(len(batch), data["advantages"].dtype), params, coef).loss


def test_lanczos_finds_the_extremes_of_a_quadratic() -> None:
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((60, 60)))
    eigs = np.concatenate([[-3.7], rng.uniform(-1, 2, 58), [5.2]])
    hessian = q @ np.diag(eigs) @ q.T
    lo, hi = lanczos_extremes(lambda v: hessian @ v, 60, 60, np.random.default_rng(1))
    assert lo == pytest.approx(-3.7, rel=1e-3)
    assert hi == pytest.approx(5.2, rel=1e-3)


def test_lanczos_stops_early_once_the_extremes_settle() -> None:
    """With a tolerance, Lanczos stops once two iterations in a row moved neither extreme by more than it, well
    before the cap on a spectrum whose extremes stand apart, and within that tolerance of the full run."""
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.standard_normal((200, 200)))
    eigs = np.concatenate([[-3.7], rng.uniform(-1, 2, 198), [5.2]])
    hessian = q @ np.diag(eigs) @ q.T
    calls = []

    def hvp(v: np.ndarray) -> np.ndarray:
        calls.append(1)
        return hessian @ v

    lo, hi = lanczos_extremes(hvp, 200, 100, np.random.default_rng(1), tol=1e-4)
    assert len(calls) < 60
    assert lo == pytest.approx(-3.7, rel=1e-3) and hi == pytest.approx(5.2, rel=1e-3)
    calls.clear()
    lanczos_extremes(hvp, 200, 100, np.random.default_rng(1))  # no tolerance: every iteration
    assert len(calls) == 100


def _exact_extremes(arch: PolicyArch, weights: dict, batch: Batch, params: LossParams,
                    kl_coef: float | None) -> np.ndarray:
    """The extreme eigenvalues of the PPO loss's exact Hessian in the flattened weights (jax.hessian)."""
    flat0, unravel = ravel_pytree(weights)
    hessian = np.asarray(jax.hessian(lambda x: _loss(arch, unravel(x), batch, params, kl_coef))(flat0), np.float64)
    assert hessian.shape == (flat0.size, flat0.size)
    eig = np.linalg.eigvalsh((hessian + hessian.T) / 2)
    return eig[[0, -1]]


@pytest.mark.integration
@pytest.mark.parametrize(("params", "kl_coef"), [
    (LossParams.of(learner_settings(ent_coef=0.01)), None),
    (LossParams.of(learner_settings(ent_coef=0.01, kl_coef=0.2, vf_clip=4.0)), 0.5)],
                         ids=["cleanrl", "kl-penalty"])
def test_hessian_curvature_matches_the_exact_hessian_and_leaves_the_model_untouched(params, kl_coef) -> None:
    arch = PolicyArch(3, 2, False, (5,))
    with jax.enable_x64(True):  # float64 throughout: the exact Hessian is matched to 1e-5
        weights = _weights(arch, 0, np.float64)
        batch = _batch(arch, 64, dtype=np.float64)
        before = {k: np.array(v) for k, v in weights.items()}
        objects = dict(weights)
        est = hessian_curvature(arch, weights, batch, params, iterations=100, seed=3, kl_coef=kl_coef)
        lo, hi = _exact_extremes(arch, weights, batch, params, kl_coef)
    assert lo < 0 < hi
    assert est.lambda_min == pytest.approx(lo, rel=1e-5)
    assert est.lambda_max == pytest.approx(hi, rel=1e-5)
    assert weights.keys() == before.keys()
    for k, v in weights.items():
        assert v is objects[k] and v.dtype == np.float64
        np.testing.assert_array_equal(np.asarray(v), before[k])


@pytest.mark.integration
def test_hessian_curvature_in_float32_matches_the_exact_hessian() -> None:
    """The learner's own precision (float32 weights and batch) finds the same extremes, to float32's accuracy."""
    arch = PolicyArch(3, 2, False, (5,))
    params = LossParams.of(learner_settings(ent_coef=0.01))
    weights, batch = _weights(arch, 0), _batch(arch, 64)
    est = hessian_curvature(arch, weights, batch, params, iterations=100, seed=3)
    with jax.enable_x64(True):
        lo, hi = _exact_extremes(arch, {k: jnp.asarray(np.asarray(v, np.float64)) for k, v in weights.items()},
                                 Batch(*(v.astype(np.float64) if v.dtype == np.float32 else v
                                         for v in batch.arrays().values())), params, None)
    assert est.lambda_min == pytest.approx(lo, rel=1e-4)
    assert est.lambda_max == pytest.approx(hi, rel=1e-4)


def test_convexity_ratio_formula() -> None:
    c = Curvature(lambda_min=-0.5, lambda_max=2.0)
    assert c.convexity_ratio == pytest.approx(-(2.0 + 0.01) / (-0.5 - 0.01))


def test_gradient_noise_scale_is_finite_and_grows_with_noise() -> None:
    arch = PolicyArch(4, 2, True, (16,))
    weights = _weights(arch, 0)
    params = LossParams.of(learner_settings())
    quiet = _batch(arch, 512, seed=1)
    quiet.advantages[:] = 1.0  # identical targets: little noise between slices
    noisy = _batch(arch, 512, seed=1)
    noisy.advantages[:] = np.random.default_rng(5).standard_normal(512) * 10
    gns_quiet = gradient_noise_scale(arch, weights, quiet, params, slices=8)
    gns_noisy = gradient_noise_scale(arch, weights, noisy, params, slices=8)
    assert np.isfinite(gns_quiet) and np.isfinite(gns_noisy)
    assert gns_noisy > gns_quiet
    assert np.isnan(gradient_noise_scale(arch, weights, quiet, params, slices=1))


def _blocked_batch(arch: PolicyArch, fragments: int, steps: int, seed: int = 0) -> Batch:
    """``fragments`` contiguous blocks of ``steps`` rows (whole actors' fragments) that differ systematically:
    each block has its own observation offset and advantage level. Float64 throughout."""
    rng = np.random.default_rng(seed)
    n = fragments * steps
    block = np.repeat(np.arange(fragments, dtype=np.float64), steps)
    obs = rng.standard_normal((n, arch.obs_dim)) * 0.3 + 0.5 * block[:, None]
    actions = rng.integers(0, arch.action_dim, n)
    adv = rng.standard_normal(n) * 0.2 + (block - block.mean())
    rnd = [rng.standard_normal(n) for _ in range(3)]
    return Batch(obs, actions, rnd[0] * 0.1 - 0.7, adv, rnd[1] + block, rnd[2])


def _normalised_once(batch: Batch) -> Batch:
    adv = batch.advantages
    return replace(batch, advantages=(adv - adv.mean()) / (adv.std(ddof=1) + 1e-8))


def _flat_grad(arch: PolicyArch, weights: dict, batch: Batch, params: LossParams) -> np.ndarray:
    grads = jax.grad(lambda q: _loss(arch, q, batch, params))(weights)
    return np.asarray(ravel_pytree(grads)[0], np.float64)


def _b_simple(arch: PolicyArch, weights: dict, batch: Batch, params: LossParams, parts: list[np.ndarray],
              one_loss: bool = True) -> float:
    """McCandlish et al.'s B_simple over the given equal-size parts: of one loss (advantages normalised once over
    the batch), or (``one_loss=False``) with ``params``' per-(mini)batch normalisation inside every part."""
    if one_loss:
        batch, params = _normalised_once(batch), replace(params, norm_adv=False)

    def sq(b: Batch) -> float:
        g = _flat_grad(arch, weights, b, params)
        return float(g @ g)

    big, small = len(batch), len(parts[0])
    big_sq, small_sq = sq(batch), float(np.mean([sq(batch.select(idx)) for idx in parts]))
    g2 = (big * big_sq - small * small_sq) / (big - small)
    return (small_sq - big_sq) / (1.0 / small - 1.0 / big) / g2


@pytest.mark.integration
def test_gradient_noise_scale_slices_are_a_seeded_random_partition_not_fragments() -> None:
    """Contiguous slices are whole fragments, correlated within: they inflate the spread between slice gradients."""
    arch = PolicyArch(4, 2, True, (16,))
    params = LossParams.of(learner_settings())
    fragments, steps = 8, 64
    batch = _blocked_batch(arch, fragments, steps)
    with jax.enable_x64(True):
        weights = _weights(arch, 0, np.float64)
        gns = gradient_noise_scale(arch, weights, batch, params, slices=fragments, seed=3)
        assert gns == gradient_noise_scale(arch, weights, batch, params, slices=fragments, seed=3)  # deterministic
        assert gns != gradient_noise_scale(arch, weights, batch, params, slices=fragments, seed=4)
        # it is B_simple over the partition the seed draws
        order = np.random.default_rng(3).permutation(fragments * steps)
        drawn = [order[i * steps : (i + 1) * steps] for i in range(fragments)]
        expected = _b_simple(arch, weights, batch, params, drawn)
        # ... and far from the estimate over contiguous slices (the fragments)
        contiguous = _b_simple(arch, weights, batch, params, [np.arange(i * steps, (i + 1) * steps)
                                                              for i in range(fragments)])
    assert gns == pytest.approx(expected, rel=1e-8)
    assert contiguous > 5 * abs(gns)


@pytest.mark.integration
def test_gradient_noise_scale_slices_are_of_one_loss() -> None:
    """No re-normalisation per slice: every gradient is of one loss (advantages normalised once over the batch),
    so with slices that partition the batch their gradients average to the full-batch gradient; the noise scale
    is B_simple of that loss, not of slices normalised each on their own."""
    arch = PolicyArch(4, 2, True, (16,))
    params = LossParams.of(learner_settings())
    batch = _blocked_batch(arch, 8, 64)
    order = np.random.default_rng(1).permutation(len(batch))
    parts = [order[i * 64 : (i + 1) * 64] for i in range(8)]
    with jax.enable_x64(True):
        weights = _weights(arch, 0, np.float64)
        gns = gradient_noise_scale(arch, weights, batch, params, slices=8, seed=1)
        one, one_params = _normalised_once(batch), replace(params, norm_adv=False)
        full = _flat_grad(arch, weights, one, one_params)
        slices = np.stack([_flat_grad(arch, weights, one.select(idx), one_params) for idx in parts])
        of_one_loss = _b_simple(arch, weights, batch, params, parts)
        renormalised = _b_simple(arch, weights, batch, params, parts, one_loss=False)
    assert np.isfinite(gns)
    np.testing.assert_allclose(slices.mean(0), full, rtol=1e-10, atol=1e-12)
    assert gns == pytest.approx(of_one_loss, rel=1e-8)
    assert abs(renormalised - gns) > 0.01 * abs(gns)  # far outside the 1e-8 above


# -- the estimator on a problem whose noise scale is known in closed form (least_squares_problem) -------------------
LSQ_DIM = 32


@pytest.mark.parametrize(("size", "slices", "seeds"), [(4096, 8, 64), (4096, 64, 64), (16384, 8, 24),
                                                       (16384, 64, 24)])
def test_noise_scale_recovers_the_closed_form_of_least_squares(size, slices, seeds) -> None:
    """At the round batches used in practice, ``tr(Σ)``, ``|G|²`` and their ratio averaged over independent batches
    are within 10% of the truth (``B_noise = 1,025``; each batch's own estimate scatters by 9–29%). The test can
    tell: the uncorrected ``|G_B|²`` overestimates ``|G|²`` by ``tr(Σ)/B``, 25% at 4,096 rows."""
    estimates, naive = [], []
    for seed in range(seeds):
        set_gradients, full_sq, b_noise = least_squares_problem(size, LSQ_DIM, 31.0, seed)
        estimates.append(slice_noise_scale(set_gradients, size, slices, seed=seed))
        naive.append(full_sq)
    trace, g2 = b_noise, 1.0  # |G|² = 1, so tr(Σ) = B_noise
    got_trace, got_g2 = np.mean([e.trace for e in estimates]), np.mean([e.g2 for e in estimates])
    assert got_trace == pytest.approx(trace, rel=0.1)
    assert got_g2 == pytest.approx(g2, rel=0.1)
    assert got_trace / got_g2 == pytest.approx(trace / g2, rel=0.1)
    assert np.median([e.b_simple for e in estimates]) == pytest.approx(trace / g2, rel=0.1)
    # without the correction: the batch's own |G_B|² reads |G|² + tr(Σ)/B (25% high at 4,096 rows)
    assert np.mean(naive) == pytest.approx(g2 + trace / size, rel=0.05)


def test_noise_scale_follows_the_noise_of_least_squares() -> None:
    """Eight times less label noise, about eight times smaller a noise scale (B_noise 129 against 1,025)."""
    quiet = [slice_noise_scale(least_squares_problem(16384, LSQ_DIM, 3.0, seed)[0], 16384, 64, seed=seed)
             for seed in range(16)]
    assert np.mean([e.trace for e in quiet]) / np.mean([e.g2 for e in quiet]) == pytest.approx(129.0, rel=0.1)


def test_noise_scale_needs_two_slices_of_two_rows() -> None:
    set_gradients = least_squares_problem(16, LSQ_DIM, 1.0, 0)[0]
    assert slice_noise_scale(set_gradients, 16, 1) is None
    assert slice_noise_scale(set_gradients, 16, 9) is None
    assert slice_noise_scale(set_gradients, 16, 8) is not None


# -- where the learner runs them ------------------------------------------------------------------------------------
def _learner_and_fragments(algo: str = "ppo"):
    """A CartPole learner with RLlib's adaptive KL penalty (its coefficient moves in the update) and 4 fragments of
    64 steps sampled with its current policy."""
    from minionsrl.function.envs import EnvSpec, make_env
    from minionsrl.function.rollout import rollout
    from minionsrl.learner.learners import APPOLearner, IMPALALearner, PPOLearner

    arch = PolicyArch(4, 2, True, (8, 8))
    params = learner_settings(minibatch_size=64, kl_coef=0.2, kl_target=0.01)  # one set for all: one compilation
    learner = {"ppo": PPOLearner, "appo": APPOLearner, "impala": IMPALALearner}[algo](arch, params)
    snap = learner.snapshot(0)
    env = make_env(EnvSpec("CartPole-v1"))
    try:
        fragments = [rollout(env, snap, snap.numpy_policy(), 64, seed=i, gamma=0.99) for i in range(4)]
    finally:
        env.close()
    return learner, fragments


def _weights_now(learner) -> dict[str, jax.Array]:
    return {k: jnp.array(v) for k, v in learner.engine.weights.items()}


@pytest.mark.integration
@pytest.mark.parametrize("algo", ["ppo", "appo", "impala"])
def test_the_learner_detects_before_its_update_or_after_it(algo) -> None:
    """Before (the default): the detectors read the round's batch at the weights that sampled it (PPO ratio 1) and
    the KL coefficient the update starts from; after (Nitro's placement, the old behaviour): the batch learned on
    (IMPALA's scored again) at the updated weights and adapted coefficient. Either way the update is the one
    without detectors."""
    from minionsrl.learner.detectors import DetectorPlan, detect

    plans = {where: DetectorPlan(frozenset({"gns", "curvature"}), where, slices=4, seed=7, samples=128,
                                 iterations=8) for where in ("before", "after")}
    learned, seen = {}, {}
    for where, plan in plans.items():
        learner, fragments = _learner_and_fragments(algo)
        start, start_coef = _weights_now(learner), learner.engine.kl_coef
        learned[where] = got = learner.learn(fragments, np.random.default_rng(0), plan)
        # the batch learned on is scored by the policy that sampled it (V-trace's too, here)
        np.testing.assert_allclose(got.batch.logprobs, np.concatenate([f.logprobs for f in fragments]), atol=1e-5)
        if where == "before":
            seen[where] = detect(plan, learner.arch, start, got.batch, learner.engine.constants, kl_coef=start_coef)
        else:
            batch = learner.vtrace(fragments) if algo == "impala" else got.batch
            seen[where] = detect(plan, learner.arch, learner.engine.weights, batch, learner.engine.constants,
                                 kl_coef=learner.engine.kl_coef)
        assert asdict(got.detected) == pytest.approx(asdict(seen[where]), rel=1e-5)
        assert None not in asdict(got.detected).values()  # gns and the curvature's three
        assert got.detector_s > 0
    # detectors before the update leave it as detectors after it (none yet) find it
    assert learned["before"].stats == learned["after"].stats
    assert learned["before"].detected.gns != learned["after"].detected.gns  # the update moved the weights
    without = _learner_and_fragments(algo)[0].learn(_learner_and_fragments(algo)[1], np.random.default_rng(0))
    assert without.detected == Detected() and without.detector_s == 0.0 and without.stats == learned["before"].stats
