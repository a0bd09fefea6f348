"""PPO.update's minibatches: equal sizes (up to one row) that partition the batch in every epoch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner.networks import ActorCritic
from minionsrl.learner.ppo import PPO, Batch, PPOParams, ppo_loss

ARCH = PolicyArch(4, 2, True, (8,))


def _batch(n: int) -> Batch:
    g = torch.Generator().manual_seed(0)
    return Batch(torch.randn(n, 4, generator=g), torch.randint(0, 2, (n,), generator=g),
                 torch.randn(n, generator=g) * 0.1 - 0.7, torch.randn(n, generator=g), torch.randn(n, generator=g),
                 torch.randn(n, generator=g))


def _minibatches(rows: int, minibatch_size: int, epochs: int = 2, whole_batch: bool = False) -> list[list[int]]:
    """The rows of every minibatch the update stepped on, epoch by epoch (rows tagged by their observation)."""
    torch.manual_seed(0)
    batch = _batch(rows)
    batch.obs[:, 0] = torch.arange(rows, dtype=torch.float32)  # row id, read back from each minibatch
    seen: list[list[int]] = []

    def recording_loss(policy, mb, p):
        seen.append(mb.obs[:, 0].long().tolist())
        return ppo_loss(policy, mb, p)

    ppo = PPO(ActorCritic(ARCH), PPOParams(update_epochs=epochs, minibatch_size=minibatch_size), loss=recording_loss)
    ppo.update(batch, np.random.default_rng(1), whole_batch=whole_batch)
    return seen


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
    epochs = 2
    seen = _minibatches(rows, minibatch_size, epochs)
    assert len(seen) == epochs * len(sizes)  # optimizer steps
    for e in range(epochs):
        epoch = seen[e * len(sizes) : (e + 1) * len(sizes)]
        assert [len(mb) for mb in epoch] == sizes
        assert sorted(i for mb in epoch for i in mb) == list(range(rows))


def test_whole_batch_is_one_step_on_all_of_it():
    """whole_batch: one step on the whole batch per call (the caller, IMPALA, makes the passes)."""
    seen = _minibatches(384, 256, epochs=3, whole_batch=True)
    assert [sorted(mb) for mb in seen] == [list(range(384))]


@pytest.mark.parametrize(("budget", "mb", "k", "expected"), [
    # reference batch 8 actors x 512 = 4096 rows, 10 epochs; (minibatches per epoch, SGD steps) at 4, 8, 64 actors
    ("per-sample", 64, None, [(32, 320), (64, 640), (512, 5120)]),      # steps grow with n (the presets' way)
    ("per-round", 64, None, [(64, 640), (64, 640), (64, 640)]),         # 64 minibatches whatever n
    ("per-round", None, 32, [(32, 320), (32, 320), (32, 320)]),         # ... or --num-minibatches
    ("fixed-compute", 64, None, [(32, 640), (64, 640), (512, 640)]),    # 640 steps of 64 rows: 20, 10, 1.25 epochs
])
def test_learner_budgets(budget, mb, k, expected):
    from minionsrl.learner.ppo import update_plan

    p = PPOParams(update_epochs=10, minibatch_size=mb, num_minibatches=k, learner_budget=budget,
                  reference_batch=4096)
    assert [update_plan(n * 512, p) for n in (4, 8, 64)] == expected


def test_fixed_compute_cuts_the_last_epoch_short_and_sqrt_scales_the_rate():
    from minionsrl.learner.ppo import lr_factor

    torch.manual_seed(0)
    batch = _batch(96)
    steps: list[int] = []

    def counting_loss(policy, mb, p):
        steps.append(len(mb.obs))
        return ppo_loss(policy, mb, p)

    p = PPOParams(update_epochs=2, minibatch_size=16, learner_budget="fixed-compute", reference_batch=64)
    PPO(ActorCritic(ARCH), p, loss=counting_loss).update(batch, np.random.default_rng(0))
    assert steps == [16] * 8  # 2 epochs x 4 minibatches of the reference: 8 steps, 1.33 epochs of 96 rows
    assert lr_factor(256, PPOParams(lr_batch_scaling="sqrt", reference_batch=64)) == pytest.approx(2.0)
    assert lr_factor(256, PPOParams(reference_batch=64)) == 1.0


def test_adaptive_kl_rule_on_a_worked_example():
    """RLlib's rule, coefficient 0.2 and target 0.01: x1.5 when the KL exceeds 0.02, halved below 0.005."""
    from minionsrl.learner.ppo import adapt_kl_coef

    coef, trace = 0.2, []
    for kl in (0.03, 0.025, 0.01, 0.004, 0.02, 0.0):
        coef = adapt_kl_coef(coef, kl, 0.01)
        trace.append(round(coef, 6))
    assert trace == [0.3, 0.45, 0.45, 0.225, 0.225, 0.1125]  # 0.02 is not above 2x the target: unchanged


def test_rllib_loss_terms_and_the_coefficient_adapting_after_an_update():
    from minionsrl.learner.ppo import PPO

    torch.manual_seed(0)
    batch, policy = _batch(64), ActorCritic(ARCH)
    plain = ppo_loss(policy, batch, PPOParams(clip_vloss=False))
    rllib = ppo_loss(policy, batch, PPOParams(vf_clip=0.5, kl_coef=0.2))
    _, _, value = policy.evaluate(batch.obs, batch.actions)
    assert rllib.v_loss.item() == pytest.approx(((value - batch.returns) ** 2).clamp(max=0.5).mean().item())
    kl = ((plain.ratio - 1) - plain.logratio).mean()
    expected = plain.pg_loss - 0.01 * plain.entropy + 0.5 * rllib.v_loss + 0.2 * kl  # default ent and vf coefs
    assert rllib.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    ppo = PPO(policy, PPOParams(update_epochs=5, num_minibatches=1, learning_rate=0.05, kl_coef=0.2, kl_target=1e-6,
                                max_grad_norm=0.0))
    ppo.update(batch, np.random.default_rng(0))
    assert ppo.kl_coef == pytest.approx(0.3)  # a large step: the KL was far above twice the tiny target
    assert ppo.current_params.kl_coef == pytest.approx(0.3)
