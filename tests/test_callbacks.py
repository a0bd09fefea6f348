"""Callbacks that see the trainer and can stop the run (SB3's ``BaseCallback``, small), and a resumed run that
keeps its learning-rate schedule when a limit is raised (it restarted the annealing: 2.5e-4 then 5e-4)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import minionsrl
from minionsrl import Callback, TrainConfig, train
from minionsrl.errors import ConfigError

BASE = {"env_id": "CartPole-v1", "actors": 2, "fragment_length": 64, "eval_episodes": 1, "hidden_sizes": [8],
        "progress": False, "tensorboard": False, "learning_rate": 1e-3}


def _rates(run_dir) -> list[float]:
    with open(run_dir / "metrics.csv") as f:
        return [float(r["learning_rate"]) for r in csv.DictReader(f)]


@pytest.mark.integration
def test_raising_total_timesteps_on_resume_keeps_the_annealing(tmp_path):
    run_dir = str(tmp_path / "run")
    train(TrainConfig(**BASE, eval_every=100, total_timesteps=512, run_dir=run_dir), plots=False)  # 4 rounds
    # twice the steps: the rate goes on from the last round's and reaches 0 at the new limit (it jumped to 5e-4)
    train(TrainConfig(**BASE, eval_every=100, total_timesteps=1024, max_rounds=6, run_dir=run_dir), resume=True,
          plots=False)
    # resumed again with the same limit: the kept schedule travels with the checkpoint
    summary = train(TrainConfig(**BASE, eval_every=100, total_timesteps=1024, run_dir=run_dir), resume=True,
                    plots=False)
    assert summary["env_steps"] == 1024
    rates = _rates(tmp_path / "run")
    np.testing.assert_allclose(rates[:4], [1e-3, 7.5e-4, 5e-4, 2.5e-4], rtol=1e-6)
    np.testing.assert_allclose(rates[4:], [2.5e-4, 1.875e-4, 1.25e-4, 6.25e-5], rtol=1e-6)


@pytest.mark.integration
def test_resuming_with_the_same_limits_is_the_uninterrupted_schedule(tmp_path):
    run_dir = str(tmp_path / "run")
    train(TrainConfig(**BASE, eval_every=100, total_timesteps=512, max_rounds=2, run_dir=run_dir), plots=False)
    train(TrainConfig(**BASE, eval_every=100, total_timesteps=512, run_dir=run_dir), resume=True, plots=False)
    np.testing.assert_allclose(_rates(tmp_path / "run"), [1e-3, 7.5e-4, 5e-4, 2.5e-4], rtol=1e-6)


class StopAfter(Callback):
    def __init__(self, rounds: int) -> None:
        self.rounds, self.seen, self.summary = rounds, [], None

    def on_round(self, row, trainer):
        policy = minionsrl.current_policy(trainer)  # the policy as it stands, on NumPy
        assert policy.round == trainer.round and policy.act(np.zeros(4, dtype=np.float32)) in (0, 1)
        self.seen.append((row.round, trainer.round, row.eval_return_mean))
        return row.round < self.rounds

    def on_end(self, summary, trainer):
        self.summary = summary


@pytest.mark.integration
def test_a_callback_sees_the_trainer_and_stops_the_run(tmp_path):
    """Evaluated every round beside the next one: row 1 comes during round 2, and stopping there leaves round 2's
    row waiting for its evaluation; it is written without one, the round checkpointed, and --resume continues."""
    run_dir = tmp_path / "run"
    stop = StopAfter(1)
    functions = []
    summary = train(TrainConfig(**BASE, eval_every=1, max_rounds=10, run_dir=str(run_dir)), plots=False,
                    callback=[stop, lambda row, trainer: functions.append(trainer.env_steps)])
    assert summary["stopped_by"] == "callback" and summary["rounds"] == 2
    assert stop.summary == summary and json.loads((run_dir / "summary.json").read_text())["stopped_by"] == "callback"
    assert [(r, t) for r, t, _ in stop.seen] == [(1, 2), (2, 2)]
    assert stop.seen[0][2] is not None and stop.seen[1][2] is None  # round 2's evaluation never ran
    assert functions == [256, 256]
    assert len(_rates(run_dir)) == 2
    resumed = train(TrainConfig(**BASE, eval_every=1, max_rounds=3, run_dir=str(run_dir)), resume=True, plots=False)
    assert resumed["rounds"] == 3 and resumed["stopped_by"] == "max_rounds"
    with open(run_dir / "metrics.csv") as f:
        assert [int(r["round"]) for r in csv.DictReader(f)] == [1, 2, 3]


def test_on_round_returning_false_stops_too_and_a_bad_callback_fails_first(tmp_path):
    summary = train(TrainConfig(**BASE, eval_every=100, max_rounds=5, run_dir=str(tmp_path / "a")), plots=False,
                    on_round=lambda row: row.round < 2)
    assert summary["stopped_by"] == "callback" and summary["rounds"] == 2
    with pytest.raises(ConfigError, match=r"neither a minionsrl\.Callback nor a function"):
        train(TrainConfig(**BASE, max_rounds=1, run_dir=str(tmp_path / "b")), callback=42)
    assert not (tmp_path / "b").exists()
