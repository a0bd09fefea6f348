"""Actors that buy time: a constant batch per round (--train-batch-size), the KL-adaptive learning rate, and an
environment whose steps wait (--env-step-latency-ms)."""

from __future__ import annotations

import dataclasses
import time

import jax.numpy as jnp
import numpy as np
import pytest
import yaml

from minionsrl import cli
from minionsrl.build import make_trainer
from minionsrl.config import StepPlan, TrainConfig, learner_settings
from minionsrl.function.envs import EnvSpec, StepLatency, capture_episode, make_env, restore_episode
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.rollout import rollout
from minionsrl.learner.batch import Batch
from minionsrl.learner.engine import SGDEngine, adapt_learning_rate
from minionsrl.learner.impala import vtrace_batch
from minionsrl.learner.networks import init_params, snapshot_of
from minionsrl.learner.ppo import gae_batch, ppo_loss
from minionsrl.loop.metrics import read_rows
from minionsrl.prepare import prepare_config

CART = PolicyArch(4, 2, True, (16, 16))
FAST = ["--max-rounds", "1", "--eval-episodes", "1", "--hidden-sizes", "8", "--no-progress", "--no-tensorboard"]


def _fragments(lengths: list[int], seed: int = 0, latency_ms: float = 0.0) -> list:
    snap = snapshot_of(CART, init_params(CART, seed), None, 0, 10.0)
    env = make_env(EnvSpec("CartPole-v1", step_latency_ms=latency_ms))
    return [rollout(env, snap, snap.numpy_policy(), steps, 100 + i, 0.99) for i, steps in enumerate(lengths)]


# -- the step rule -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("batch", "n", "envs"), [(4096, 8, 1), (4096, 64, 1), (4096, 3, 1), (1000, 7, 1),
                                                   (4096, 5, 4), (96, 96, 1), (300, 7, 3)])
def test_batch_size_is_exact_with_the_remainder_spread(batch, n, envs):
    plan = StepPlan(train_batch_size=batch, envs=envs)
    steps = plan.steps(n)
    assert len(steps) == n and sum(steps) * envs == batch == plan.round_batch(n)
    assert min(steps) >= 1 and max(steps) - min(steps) <= 1
    assert steps == sorted(steps, reverse=True)  # the first functions take the remainder, one step each
    assert [plan.slot_steps(slot, n) for slot in range(n)] == steps


def test_fragment_length_still_grows_the_batch_with_the_actors():
    plan = StepPlan(fragment_length=32, envs=2)
    assert plan.steps(3) == [32, 32, 32] and plan.round_batch(3) == 192 and plan.round_batch(6) == 384


def test_more_actors_buy_a_shorter_fragment_not_a_larger_batch():
    plan = StepPlan(train_batch_size=4096)
    assert [max(plan.steps(n)) for n in (8, 16, 64)] == [512, 256, 64]
    assert {plan.round_batch(n) for n in (8, 16, 64)} == {4096}


# -- bad input: one line, before any work --------------------------------------------------------------
@pytest.mark.parametrize(("flags", "needles"), [
    (["--train-batch-size", "64", "--fragment-length", "32"], ["train_batch_size", "not both"]),
    (["--train-batch-size", "0"], ["train_batch_size", ">= 1"]),
    (["--train-batch-size", "4", "--actors", "8"], ["train_batch_size", "cannot be split", ">= 8"]),
    (["--train-batch-size", "32", "--scaler", "nitro"], ["train_batch_size", "up to 64 functions"]),
    (["--train-batch-size", "10", "--envs-per-function", "3"], ["train_batch_size", "multiple of envs_per_function"]),
    (["--lr-schedule", "constant", "--anneal-lr"], ["lr_schedule", "contradicts --anneal-lr"]),
    (["--lr-schedule", "anneal", "--no-anneal-lr"], ["lr_schedule", "contradicts --no-anneal-lr"]),
    (["--desired-kl", "0.02"], ["desired_kl", "--lr-schedule adaptive"]),
    (["--lr-schedule", "adaptive", "--algo", "impala"], ["lr_schedule", "IMPALA"]),
    (["--lr-schedule", "adaptive", "--lr-batch-scaling", "sqrt"], ["lr_batch_scaling"]),
    (["--lr-schedule", "adaptive", "--lr-min", "0.1"], ["lr_min", "lr_max"]),
    (["--desired-kl", "-1", "--lr-schedule", "adaptive"], ["desired_kl", "> 0"]),
    (["--env-step-latency-ms", "-1"], ["env_step_latency_ms", ">= 0"]),
    (["--env-step-latency-ms", "nan"], ["env_step_latency_ms", "finite"]),
    (["--env-step-latency-ms", "1e9"], ["env_step_latency_ms", "<= 10000"]),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, flags, needles):
    run_dir = tmp_path / "run"
    assert cli.main(["train", *FAST, "--run-dir", str(run_dir), *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("minionsrl: error:"), lines
    for needle in needles:
        assert needle in lines[0]
    assert not run_dir.exists()


def test_a_batch_size_replaces_the_presets_fragment_length():
    cfg, _ = prepare_config(TrainConfig(env_id="Hopper-v5", train_batch_size=4096, actors=64, run_dir="unused"))
    assert cfg.env.fragment_length is None and cfg.env.train_batch_size == 4096


@pytest.mark.parametrize(("given", "schedule"), [
    ({}, "anneal"), ({"anneal_lr": False}, "constant"), ({"lr_schedule": "constant"}, "constant"),
    ({"lr_schedule": "anneal", "anneal_lr": True}, "anneal"), ({"lr_schedule": "adaptive"}, "adaptive"),
    ({"preset": "nitro"}, "constant"), ({"preset": "nitro", "anneal_lr": True}, "anneal"),
])
def test_lr_schedule_and_the_anneal_flags_are_one_setting(given, schedule):
    # CleanRL's --anneal-lr / --no-anneal-lr (the presets' anneal_lr) say lr_schedule: the one field resolved
    cfg, _ = prepare_config(TrainConfig(env_id="Hopper-v5", max_rounds=1, run_dir="unused", **given))
    assert (cfg.learner.lr_schedule, cfg.learner.anneal_lr) == (schedule, None)
    assert cfg.learner.desired_kl == (0.01 if schedule == "adaptive" else None)


# -- fragments of unequal length ---------------------------------------------------------------------------
def test_unequal_fragments_each_get_their_own_gae_and_vtrace():
    frags = _fragments([33, 33, 32, 32])
    whole = gae_batch(frags, 0.99, 0.95, None)
    alone = [gae_batch([f], 0.99, 0.95, None) for f in frags]
    assert len(whole) == 130
    for name in ("obs", "advantages", "returns", "values", "logprobs"):
        np.testing.assert_array_equal(getattr(whole, name), np.concatenate([getattr(b, name) for b in alone]))
    weights = {k: jnp.asarray(v) for k, v in init_params(CART, 1).items()}
    vt = vtrace_batch(frags, CART, weights, 0.99, 0.95, None, 10.0, 1.0, 1.0)
    vt_alone = [vtrace_batch([f], CART, weights, 0.99, 0.95, None, 10.0, 1.0, 1.0) for f in frags]
    for name in ("advantages", "returns"):
        np.testing.assert_allclose(getattr(vt, name), np.concatenate([getattr(b, name) for b in vt_alone]),
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.integration
@pytest.mark.parametrize("algo", ["ppo", "appo"])
def test_a_batch_size_learns_from_unequal_fragments_with_carried_episodes(tmp_path, algo):
    cfg = TrainConfig(env_id="CartPole-v1", algo=algo, actors=3, train_batch_size=100, max_rounds=3, eval_every=0,
                      eval_episodes=1, hidden_sizes=[8], progress=False, tensorboard=False, run_dir=str(tmp_path / "r"))
    summary = make_trainer(cfg).run()
    rows = read_rows(tmp_path / "r" / "metrics.csv")
    train = [r for r in read_rows(tmp_path / "r" / "invocations.csv") if r["kind"] == "train" and r["status"] == "ok"]
    steps = [int(r["env_steps"]) for r in rows]
    assert all(np.isfinite(float(r["policy_loss"])) for r in rows)
    if algo == "ppo":  # every round exactly 100 samples: fragments of 34, 33 and 33 steps
        assert steps == [100, 200, 300] and summary["env_steps"] == 300
        assert sorted(int(r["steps"]) for r in train) == [33] * 6 + [34] * 3
    else:  # each update learns on the fragments that arrived, each of the length its request asked for
        assert steps == sorted(steps) and all(int(r["steps"]) in (33, 34) for r in train)
    resumed = make_trainer(cfg.replace(max_rounds=4), resume=True)
    carried = resumed.sampler.carries  # CartPole's episodes outlast a 33-step fragment: they go on next round
    assert carried and all(c["ep_length"] > 0 for c in carried.values())
    resumed.close()


# -- the adaptive learning rate ----------------------------------------------------------------------------
@pytest.mark.parametrize(("lr", "kl", "expected"), [
    (1e-3, 0.05, 1e-3 / 1.5),  # above 2x the target: down
    (1e-3, 0.001, 1.5e-3),  # below half: up
    (1e-3, 0.01, 1e-3),  # in between: kept
    (1e-3, 0.0, 1e-3),  # nothing measured: kept
    (1.2e-5, 0.05, 1e-5),  # the lower bound
    (9e-3, 0.0001, 1e-2),  # the upper bound
])
def test_adapt_learning_rate_rule(lr, kl, expected):
    assert float(adapt_learning_rate(lr, kl, 0.01, 1e-5, 1e-2)) == pytest.approx(expected, rel=1e-6)


def _ppo_batch() -> Batch:
    return gae_batch(_fragments([64, 64]), 0.99, 0.95, None)


@pytest.mark.parametrize(("start", "direction"), [(1e-2, "down"), (1e-5, "up")])
def test_the_update_adapts_its_rate_per_epoch_and_a_checkpoint_keeps_it(start, direction):
    params = learner_settings(learning_rate=start, update_epochs=4, minibatch_size=32, lr_schedule="adaptive",
                              desired_kl=1e-3, lr_min=1e-6, lr_max=0.05)
    ppo = SGDEngine(CART, init_params(CART, 0), params, ppo_loss)
    batch, rng = _ppo_batch(), np.random.default_rng(0)
    ppo.update(batch, rng)
    assert params.lr_min <= ppo.learning_rate <= params.lr_max
    assert (ppo.learning_rate < start) if direction == "down" else (ppo.learning_rate > start)
    adapted = ppo.learning_rate
    again = SGDEngine(CART, init_params(CART, 3), params, ppo_loss)
    again.load_state_dict(ppo.state_dict())
    assert again.learning_rate == adapted  # a resumed run goes on from the adapted rate
    fixed = SGDEngine(CART, init_params(CART, 0), dataclasses.replace(params, desired_kl=None), ppo_loss)
    fixed.update(batch, np.random.default_rng(0))
    assert fixed.learning_rate == start  # without a desired KL the rate is the schedule's


@pytest.mark.integration
def test_an_adaptive_run_logs_the_rate_of_each_round_and_resumes_it(tmp_path):
    cfg = TrainConfig(env_id="CartPole-v1", actors=2, fragment_length=32, max_rounds=2, eval_every=0,
                      eval_episodes=1, hidden_sizes=[8], lr_schedule="adaptive", learning_rate=1e-2,
                      desired_kl=1e-4, progress=False, tensorboard=False, run_dir=str(tmp_path / "r"))
    trainer = make_trainer(cfg)
    trainer.run()
    rates = [float(r["learning_rate"]) for r in read_rows(tmp_path / "r" / "metrics.csv")]
    assert rates[0] == pytest.approx(1e-2) and rates[1] < rates[0]  # a KL far above the target: the rate falls
    left = trainer.learner.engine.learning_rate
    resumed = make_trainer(cfg.replace(max_rounds=3), resume=True)
    assert resumed.learner.engine.learning_rate == pytest.approx(left)
    resumed.close()


# -- the step-latency environment ---------------------------------------------------------------------------
def test_latency_wrapper_sleeps_each_step_without_burning_cpu():
    env = make_env(EnvSpec("CartPole-v1", step_latency_ms=20.0))
    assert isinstance(env, StepLatency)
    env.reset(seed=0)
    # the calling thread's CPU time: the process's would count other tests' XLA threads
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(10):
        env.step(0)
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    assert wall >= 10 * 0.020 and cpu < 0.05  # 200 ms waited, hardly any of it on the CPU


def test_latency_leaves_seeded_rollouts_and_carried_episodes_unchanged():
    plain, slow = _fragments([20, 20]), _fragments([20, 20], latency_ms=1.0)
    for a, b in zip(plain, slow, strict=True):
        for name in ("obs", "actions", "rewards", "logprobs", "terminated"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        assert a.meta["carry"] == b.meta["carry"]
    env = make_env(EnvSpec("CartPole-v1", step_latency_ms=1.0))
    env.reset(seed=0)
    state = capture_episode(env)
    assert state is not None and restore_episode(env, state) is None


def test_latency_travels_in_the_spec_only_when_set():
    assert "step_latency_ms" not in EnvSpec("CartPole-v1").to_json()
    spec = EnvSpec("CartPole-v1", {"max_episode_steps": 9}, step_latency_ms=5.0)
    assert EnvSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match="latency"):
        StepLatency(make_env(EnvSpec("CartPole-v1")), float("nan"))


@pytest.mark.integration
def test_a_run_dir_from_before_these_fields_still_resumes(tmp_path):
    cfg = TrainConfig(env_id="CartPole-v1", actors=2, fragment_length=16, max_rounds=1, eval_every=0,
                      eval_episodes=1, hidden_sizes=[8], progress=False, tensorboard=False, run_dir=str(tmp_path / "r"))
    make_trainer(cfg).run()
    path = tmp_path / "r" / "config.yaml"
    saved = yaml.safe_load(path.read_text())
    new = ("train_batch_size", "env_step_latency_ms", "lr_schedule", "desired_kl", "lr_min", "lr_max")
    path.write_text(yaml.safe_dump({k: v for k, v in saved.items() if k not in new}, sort_keys=False))
    make_trainer(cfg.replace(max_rounds=2), resume=True).close()
