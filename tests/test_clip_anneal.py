"""``anneal_clip``: the clipping coefficient follows the learning rate's schedule (rl-baselines3-zoo's
``clip_range: lin_0.2``), as a traced value of the compiled update, across resumes too (issue 43, row 1)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from minionsrl import Callback, TrainConfig, train
from minionsrl.cli import build_parser
from minionsrl.config import LearnerConfig, learner_settings
from minionsrl.errors import ConfigError
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.learner.batch import Batch
from minionsrl.learner.engine import SGDEngine, _update_program
from minionsrl.learner.learners import PPOLearner
from minionsrl.learner.networks import init_params
from minionsrl.learner.ppo import ppo_loss
from minionsrl.loop.state import Remaining

ARCH = PolicyArch(4, 2, True, (8,))
BASE = {"env_id": "CartPole-v1", "actors": 2, "fragment_length": 64, "eval_episodes": 1, "eval_every": 100,
        "hidden_sizes": [8], "progress": False, "tensorboard": False, "learning_rate": 1e-3, "clip_coef": 0.2}


def _batch(n: int, seed: int = 0) -> Batch:
    """``n`` random rows of a CartPole-shaped batch."""
    r = np.random.default_rng(seed)
    f32 = np.float32
    return Batch(r.standard_normal((n, 4)).astype(f32), r.integers(0, 2, n).astype(f32),
                 (r.standard_normal(n) * 0.1 - 0.7).astype(f32), r.standard_normal(n).astype(f32),
                 r.standard_normal(n).astype(f32), r.standard_normal(n).astype(f32))


def _annealed(params: LearnerConfig, fraction: float) -> tuple[float, float]:
    """The rate and clip a learner with ``params`` takes for a run with ``fraction`` of it left."""
    learner = PPOLearner(ARCH, params)
    learner.set_remaining(fraction)
    return learner.lr, learner.engine.clip_coef


@pytest.mark.parametrize(("anneal_lr", "anneal_clip"), [(True, True), (True, False), (False, True), (False, False)])
def test_rate_and_clip_follow_one_fraction_each_where_asked(anneal_lr, anneal_clip):
    schedule = "anneal" if anneal_lr else "constant"
    params = learner_settings(learning_rate=1e-3, clip_coef=0.2, lr_schedule=schedule, anneal_clip=anneal_clip)
    for fraction in (1.0, 0.5, 0.0):
        lr, clip = _annealed(params, fraction)
        assert lr == pytest.approx(1e-3 * (fraction if anneal_lr else 1.0))
        assert clip == pytest.approx(0.2 * (fraction if anneal_clip else 1.0))


def test_the_clip_is_traced_into_the_update_and_means_what_the_params_mean():
    """A new clip each round compiles nothing new, and an update with the clip set is the one whose params hold it."""
    batch, weights = _batch(256, seed=3), init_params(ARCH, 7)
    settings = learner_settings(update_epochs=4, minibatch_size=64, learning_rate=3e-2)
    annealed = SGDEngine(ARCH, weights, settings, ppo_loss)
    annealed.update(batch, np.random.default_rng(0))  # compiles the program
    before = _update_program._cache_size()
    for clip in (0.15, 0.1, 0.05):
        annealed.set_clip_coef(clip)
        annealed.update(batch, np.random.default_rng(1))
    assert _update_program._cache_size() == before
    fixed = SGDEngine(ARCH, weights, dataclasses.replace(settings, clip_coef=0.05), ppo_loss)
    other = SGDEngine(ARCH, weights, settings, ppo_loss)
    other.set_clip_coef(0.05)
    got, want = other.update(batch, np.random.default_rng(2)), fixed.update(batch, np.random.default_rng(2))
    assert got == pytest.approx(want)  # clipfrac counts against the traced clip too
    for k, v in fixed.numpy_weights().items():
        np.testing.assert_allclose(other.numpy_weights()[k], v, rtol=1e-6, atol=1e-7, err_msg=k)


class Clips(Callback):
    """The learner's clip and rate each round."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float]] = []

    def on_round(self, row, trainer):
        self.seen.append((trainer.learner.engine.clip_coef, row.learning_rate))
        return True


@pytest.mark.integration
def test_a_run_anneals_the_clip_with_the_rate_and_a_resume_keeps_the_schedule(tmp_path):
    run_dir = str(tmp_path / "run")
    first = Clips()
    train(TrainConfig(**BASE, anneal_clip=True, total_timesteps=512, run_dir=run_dir), callback=[first],
          plots=False)  # 4 rounds of 128 steps
    clips, rates = np.array(first.seen).T
    np.testing.assert_allclose(clips, [0.2, 0.15, 0.1, 0.05], rtol=1e-6)
    np.testing.assert_allclose(clips / 0.2, rates / 1e-3, rtol=1e-6)  # the same fraction
    # the limit doubled: clip and rate go on from the last round's (0.05, 2.5e-4), to 0 at 1,024 steps
    second = Clips()
    train(TrainConfig(**BASE, anneal_clip=True, total_timesteps=1024, run_dir=run_dir), callback=[second],
          resume=True, plots=False)
    clips, rates = np.array(second.seen).T
    np.testing.assert_allclose(clips, [0.05, 0.0375, 0.025, 0.0125], rtol=1e-6)
    np.testing.assert_allclose(rates, [2.5e-4, 1.875e-4, 1.25e-4, 6.25e-5], rtol=1e-6)


def test_a_resume_keeps_the_clip_schedule_with_the_rate_constant():
    """With the clip annealed alone the kept scale is the clip's: 0.25 of it left at 384 of 512 steps, then half of
    1,024 left at 512 steps: the clip goes on at twice the fraction left."""
    cfg = TrainConfig(**BASE, anneal_lr=False, anneal_clip=True, total_timesteps=1024)
    kept = Remaining.resumed(cfg, Remaining([512, None, None], 1.0, [384, 0.0, 0.0]), [512, 0.0, 0.0])
    assert kept.scale == pytest.approx(0.5)
    fraction = kept.at([512, 0.0, 0.0]).fraction(cfg)
    params = learner_settings(learning_rate=1e-3, clip_coef=0.2, lr_schedule="constant", anneal_clip=True)
    assert _annealed(params, fraction) == pytest.approx((1e-3, 0.05))


def test_anneal_clip_is_in_train_help_with_its_default():
    train_parser = build_parser()._subparsers._group_actions[0].choices["train"]
    text = " ".join(train_parser.format_help().split())
    assert "--anneal-clip, --no-anneal-clip" in text
    assert "with the learning rate's schedule (the zoo's lin_ clip_range) (default: off)" in text
    params = learner_settings(learning_rate=1e-3, clip_coef=0.2, lr_schedule="anneal", anneal_clip=None)
    assert TrainConfig().learner.anneal_clip is None and _annealed(params, 0.5) == pytest.approx((5e-4, 0.2))


def test_a_checkpoints_schedule_round_trips_and_a_malformed_one_is_refused():
    kept = Remaining([512, None, 3600.0], 0.5, [384, 0.0, 12.5])
    assert Remaining.from_json(json.loads(json.dumps(kept.to_json()))) == kept
    assert Remaining.from_json(None) is None
    for bad in ({"limits": [512], "scale": 1.0}, {"limits": [512, None, None], "scale": "1"},
                {"limits": [512, None, None], "scale": 1.0, "spent": [1, None, 0]}, [512, 1.0]):
        with pytest.raises(ConfigError, match="learning-rate schedule"):
            Remaining.from_json(bad)
