"""SGDEngine.update with the PPO loss: its minibatches, the learner budgets, the RLlib terms, and the compiled
program against a plain CleanRL-style reference update."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from minionsrl.config import LearnerConfig, learner_settings
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner import networks
from minionsrl.learner.batch import Batch
from minionsrl.learner.engine import SGDEngine, _update_program, bucket, minibatch_schedule, update_plan
from minionsrl.learner.networks import init_params
from minionsrl.learner.ppo import LossParams, normalize_advantages, normalize_advantages_np, ppo_loss

ARCH = PolicyArch(4, 2, True, (8,))
CONT = PolicyArch(5, 2, False, (16, 16))


def _batch(n: int, arch: PolicyArch = ARCH, seed: int = 0) -> Batch:
    r = np.random.default_rng(seed)
    actions = (r.integers(0, arch.action_dim, n) if arch.discrete
               else r.standard_normal((n, arch.action_dim))).astype(np.float32)
    return Batch(r.standard_normal((n, arch.obs_dim)).astype(np.float32), actions,
                 (r.standard_normal(n) * 0.1 - 0.7).astype(np.float32), r.standard_normal(n).astype(np.float32),
                 r.standard_normal(n).astype(np.float32), r.standard_normal(n).astype(np.float32))


@pytest.mark.parametrize(("rows", "minibatch_size", "sizes"), [
    (4096, 64, [64] * 64),       # MuJoCo preset, 8 actors x 512: divisible, unchanged
    (1024, 128, [128] * 8),      # classic preset, 8 actors x 128
    (384, 256, [192, 192]),      # Atari preset, 3 actors x 128: was 256 + a 128-row tail
    (640, 256, [320, 320]),      # Atari preset, 5 actors: 2.5 minibatches round to 2 (half to even)
    (257, 128, [129, 128]),      # was 128 + 128 + a 1-row tail, which skipped advantage normalisation
    (100, 128, [100]),           # a batch smaller than a minibatch is one minibatch
    (50, 128, [50]),             # ... even under half of one
])
def test_minibatches_are_equal_up_to_one_row_and_partition_each_epoch(rows, minibatch_size, sizes):
    epochs = minibatch_schedule(rows, learner_settings(update_epochs=2, minibatch_size=minibatch_size),
                                np.random.default_rng(1))
    assert len(epochs) == 2
    for epoch in epochs:
        assert [len(mb) for mb in epoch] == sizes
        assert sorted(i for mb in epoch for i in mb) == list(range(rows))


def test_whole_batch_is_one_step_on_all_of_it():
    """whole_batch: one step on the whole batch per call (the caller, IMPALA, makes the passes)."""
    lc = learner_settings(update_epochs=3, minibatch_size=256)
    epochs = minibatch_schedule(384, lc, np.random.default_rng(1), True)
    assert [[sorted(mb) for mb in epoch] for epoch in epochs] == [[list(range(384))]]


@pytest.mark.parametrize(("budget", "mb", "k", "expected"), [
    # reference batch 8 actors x 512 = 4096 rows, 10 epochs; (minibatches per epoch, SGD steps) at 4, 8, 64 actors
    ("per-sample", 64, None, [(32, 320), (64, 640), (512, 5120)]),      # steps grow with n (the presets' way)
    ("per-round", 64, None, [(64, 640), (64, 640), (64, 640)]),         # 64 minibatches whatever n
    ("per-round", None, 32, [(32, 320), (32, 320), (32, 320)]),         # ... or --num-minibatches
    ("fixed-compute", 64, None, [(32, 640), (64, 640), (512, 640)]),    # 640 steps of 64 rows: 20, 10, 1.25 epochs
])
def test_learner_budgets(budget, mb, k, expected):
    p = learner_settings(update_epochs=10, minibatch_size=mb, num_minibatches=k, learner_budget=budget)
    assert [update_plan(n * 512, p, reference_batch=4096) for n in (4, 8, 64)] == expected


def test_fixed_compute_cuts_the_last_epoch_short_and_sqrt_scales_the_rate():
    from minionsrl.learner.engine import lr_factor

    p = learner_settings(update_epochs=2, minibatch_size=16, learner_budget="fixed-compute")
    steps = [len(mb) for epoch in minibatch_schedule(96, p, np.random.default_rng(0), reference_batch=64)
             for mb in epoch]
    assert steps == [16] * 8  # 2 epochs x 4 minibatches of the reference: 8 steps, 1.33 epochs of 96 rows
    # more minibatches asked for than the reference has rows: one a row, as an epoch over the reference splits it
    tiny = learner_settings(update_epochs=2, num_minibatches=100, learner_budget="fixed-compute")
    # minibatches of one row; the reference's 2 epochs x 64 steps
    assert update_plan(128, tiny, reference_batch=64) == (128, 2 * 64)
    assert lr_factor(256, learner_settings(lr_batch_scaling="sqrt"), reference_batch=64) == pytest.approx(2.0)
    assert lr_factor(256, learner_settings(), reference_batch=64) == 1.0


def test_adaptive_kl_rule_on_a_worked_example():
    """RLlib's rule, coefficient 0.2 and target 0.01: x1.5 when the KL exceeds 0.02, halved below 0.005."""
    from minionsrl.learner.ppo import adapt_kl_coef

    coef, trace = 0.2, []
    for kl in (0.03, 0.025, 0.01, 0.004, 0.02, 0.0):
        coef = adapt_kl_coef(coef, kl, 0.01)
        trace.append(round(coef, 6))
    assert trace == [0.3, 0.45, 0.45, 0.225, 0.225, 0.1125]  # 0.02 is not above 2x the target: unchanged


@pytest.mark.integration
def test_rllib_loss_terms_and_the_coefficient_adapting_after_an_update():
    batch, weights = _batch(64), init_params(ARCH, 0)
    mb, w = batch.arrays(), np.ones(64, np.float32)
    plain = ppo_loss(ARCH, weights, mb, w, LossParams.of(learner_settings(clip_vloss=False)), 0.0)
    rllib = ppo_loss(ARCH, weights, mb, w, LossParams.of(learner_settings(vf_clip=0.5, kl_coef=0.2)), 0.2)
    _, _, value = networks.evaluate(ARCH, weights, batch.obs, batch.actions)
    assert float(rllib.v_loss) == pytest.approx(float(jnp.minimum((value - batch.returns) ** 2, 0.5).mean()), rel=1e-6)
    kl = ((plain.ratio - 1) - plain.logratio).mean()
    expected = plain.pg_loss - 0.01 * plain.entropy + 0.5 * rllib.v_loss + 0.2 * kl  # default ent and vf coefs
    assert float(rllib.loss) == pytest.approx(float(expected), rel=1e-5)
    ppo = SGDEngine(ARCH, weights, learner_settings(update_epochs=5, num_minibatches=1, learning_rate=0.05,
                                                    kl_coef=0.2, kl_target=1e-6, max_grad_norm=0.0), ppo_loss)
    ppo.update(batch, np.random.default_rng(0))
    assert ppo.kl_coef == pytest.approx(0.3)  # a large step: the KL was far above twice the tiny target


# -- the compiled update against a plain reference ---------------------------------------------------------
def _reference_update(arch: PolicyArch, weights: dict, batch: Batch, p: LearnerConfig, rng: np.random.Generator):
    """CleanRL's update written plainly: one gradient step per minibatch in a Python loop (each gradient jitted on
    its own), optax's Adam (eps 1e-5) after global-norm clipping, the KL early stop after each epoch. No padding,
    no weights."""
    params = {k: jnp.asarray(v) for k, v in weights.items()}
    tx = optax.chain(optax.clip_by_global_norm(p.max_grad_norm), optax.adam(p.learning_rate, eps=1e-5))
    state = tx.init(params)

    def loss_fn(params, mb):
        logp, entropy, value = networks.evaluate(arch, params, mb["obs"], mb["actions"])
        logratio = logp - mb["logprobs"]
        ratio = jnp.exp(logratio)
        adv = mb["advantages"]
        if len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-8)
        pg = jnp.maximum(-adv * ratio, -adv * jnp.clip(ratio, 1 - p.clip_coef, 1 + p.clip_coef)).mean()
        v_clipped = mb["values"] + jnp.clip(value - mb["values"], -p.clip_coef, p.clip_coef)
        v_loss = 0.5 * jnp.maximum((value - mb["returns"]) ** 2, (v_clipped - mb["returns"]) ** 2).mean()
        return pg - p.ent_coef * entropy.mean() + p.vf_coef * v_loss, ((ratio - 1) - logratio).mean()

    grad_fn = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))
    for epoch in minibatch_schedule(len(batch), p, rng):
        for idx in epoch:
            (_, kl), grads = grad_fn(params, batch.select(idx).arrays())
            updates, state = tx.update(grads, state, params)
            params = optax.apply_updates(params, updates)
        if p.target_kl is not None and float(kl) > p.target_kl:
            break
    return {k: np.asarray(v) for k, v in params.items()}


@pytest.mark.integration
@pytest.mark.parametrize(("arch", "rows", "kwargs"), [
    (ARCH, 256, {"minibatch_size": 64}),                       # even minibatches
    (ARCH, 257, {"minibatch_size": 128}),                      # 129 + 128 rows: padding rows weigh 0
    (CONT, 300, {"minibatch_size": 64}),                       # Gaussian head, 5 ragged minibatches
    (CONT, 512, {"minibatch_size": 32, "target_kl": 0.002}),   # the KL early stop ends the update mid-way
])
def test_compiled_update_equals_a_plain_reference_update(arch, rows, kwargs):
    p = learner_settings(update_epochs=4, learning_rate=3e-3, **kwargs)
    batch, weights = _batch(rows, arch, seed=3), init_params(arch, 7)
    expected = _reference_update(arch, weights, batch, p, np.random.default_rng(11))
    ppo = SGDEngine(arch, weights, p, ppo_loss)
    ppo.update(batch, np.random.default_rng(11))
    got = ppo.numpy_weights()
    assert any(not np.allclose(expected[k], weights[k]) for k in weights)  # the update did move the weights
    for k in weights:
        np.testing.assert_allclose(got[k], expected[k], atol=1e-5, rtol=1e-5, err_msg=k)


def test_target_kl_stops_at_an_epoch_end():
    p = learner_settings(update_epochs=4, learning_rate=3e-3, minibatch_size=32, target_kl=0.002)
    ppo = SGDEngine(CONT, init_params(CONT, 7), p, ppo_loss)
    ppo.update(_batch(512, CONT, seed=3), np.random.default_rng(11))
    count = int(jax.tree.leaves(ppo.opt_state)[0])  # Adam's step count, after the clipping's empty state
    assert 0 < count < 4 * 16 and count % 16 == 0


def test_update_is_deterministic_and_resumes_exactly_from_its_state():
    p = learner_settings(update_epochs=2, minibatch_size=64)
    batches = [_batch(256, CONT, seed=s) for s in range(3)]
    a = SGDEngine(CONT, init_params(CONT, 1), p, ppo_loss)
    for i, b in enumerate(batches):
        a.update(b, np.random.default_rng(i))
    b = SGDEngine(CONT, init_params(CONT, 1), p, ppo_loss)
    b.update(batches[0], np.random.default_rng(0))
    c = SGDEngine(CONT, init_params(CONT, 99), p, ppo_loss)  # other weights, then the checkpointed state of b
    c.load_state_dict(b.state_dict())
    for i, batch in enumerate(batches[1:], start=1):
        c.update(batch, np.random.default_rng(i))
    for k, v in a.numpy_weights().items():
        np.testing.assert_array_equal(c.numpy_weights()[k], v, err_msg=k)


@pytest.mark.integration
def test_bucketed_shapes_keep_compilations_few_as_n_changes():
    """A scaler moving n over 8..64 actors of 512 steps compiles a handful of programs, not one per n."""
    assert all(x <= bucket(x) <= 1.125 * x for x in range(9, 5000))
    assert all(x <= bucket(x, fine=False) < 2 * x for x in range(1, 5000))
    p = learner_settings(update_epochs=1, minibatch_size=64)
    ppo = SGDEngine(ARCH, init_params(ARCH, 0), p, ppo_loss)
    before = _update_program._cache_size()
    for n in (8, 9, 11, 13, 16, 19, 23, 29, 31):  # actors x 64 steps
        ppo.update(_batch(n * 64), np.random.default_rng(n))
    assert _update_program._cache_size() - before <= 3


def test_a_resumed_update_keeps_the_padded_shapes_and_compiles_nothing_new():
    """The padding caps only grow within a run; they are in the state, so a resumed run pads a small round to the
    shapes the uninterrupted run uses (one compiled program for both)."""
    p = learner_settings(update_epochs=1, minibatch_size=64)
    a = SGDEngine(ARCH, init_params(ARCH, 0), p, ppo_loss)
    a.update(_batch(2048), np.random.default_rng(0))  # a boosted round: large caps
    state = a.state_dict()
    b = SGDEngine(ARCH, init_params(ARCH, 0), p, ppo_loss)
    b.load_state_dict(state)
    assert (b._rows_cap, b._steps_cap) == (a._rows_cap, a._steps_cap) == (2048, 32)
    a.update(_batch(256, seed=1), np.random.default_rng(1))
    before = _update_program._cache_size()
    b.update(_batch(256, seed=1), np.random.default_rng(1))  # the program a compiled for this round
    assert _update_program._cache_size() == before
    for k, v in a.numpy_weights().items():
        np.testing.assert_array_equal(b.numpy_weights()[k], v, err_msg=k)


@pytest.mark.parametrize("rows", [1, 2, 7, 300])
def test_advantage_normalisation_on_the_host_is_the_compiled_one(rows):
    """One formula in two runtimes: the compiled update's per-minibatch normalisation (padding rows weighing 0) and
    the host's over a whole batch (the detectors', the scheduler's training)."""
    adv = (np.random.default_rng(rows).standard_normal(rows) * 3 + 1).astype(np.float32)
    host = normalize_advantages_np(adv)
    assert host.dtype == np.float32
    w = np.concatenate([np.ones(rows, np.float32), np.zeros(5, np.float32)])
    compiled = np.asarray(normalize_advantages(jnp.asarray(np.concatenate([adv, np.full(5, 9.0, np.float32)])),
                                               jnp.asarray(w)))[:rows]
    np.testing.assert_allclose(host, compiled, rtol=1e-5, atol=1e-6)
    if rows == 1:
        assert host is adv  # a single row is left alone
    else:
        assert abs(float(host.mean())) < 1e-5 and float(host.std(ddof=1)) == pytest.approx(1.0, rel=1e-5)


def test_the_decoupled_objective_weighs_each_row_by_anchor_over_behaviour():
    """Hilton et al. 2021: the ratio is taken against the anchor policy and each clipped term weighs
    π_anchor/π_behaviour; with weights of 1 it is PPO's loss exactly."""
    p, batch = LossParams.of(learner_settings()), _batch(64)
    weights = init_params(ARCH, 0)
    w = jnp.ones(64, jnp.float32)
    mb = {k: jnp.asarray(v) for k, v in batch.arrays().items()}
    plain = ppo_loss(ARCH, weights, mb, w, p, 0.0)
    ones = ppo_loss(ARCH, weights, {**mb, "behaviour_weights": jnp.ones(64, jnp.float32)}, w, p, 0.0)
    assert float(ones.pg_loss) == float(plain.pg_loss)
    iw = jnp.asarray(np.random.default_rng(1).uniform(0.5, 1.5, 64).astype(np.float32))
    weighted = ppo_loss(ARCH, weights, {**mb, "behaviour_weights": iw}, w, p, 0.0)
    adv = normalize_advantages(mb["advantages"], w)
    r = weighted.ratio
    terms = jnp.maximum(-adv * r, -adv * jnp.clip(r, 1 - p.clip_coef, 1 + p.clip_coef))
    assert float(weighted.pg_loss) == pytest.approx(float((terms * iw).mean()), rel=1e-6)
    assert float(weighted.v_loss) == float(plain.v_loss)  # the value loss is not weighed
