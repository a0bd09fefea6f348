"""checkpoints/best.safetensors: the policy of the best evaluation so far, the one that was evaluated (an
evaluation run beside the next round included), loaded on request; summary.json names the policy that stopped
the run."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

import minionsrl
from minionsrl import cli
from minionsrl.config import TrainConfig
from minionsrl.experiments.evaluate import evaluate_run
from minionsrl.loop import checkpoint
from minionsrl.loop.metrics import read_metrics


def _tiny(run_dir, **kw) -> TrainConfig:
    return TrainConfig(env_id="CartPole-v1", actors=2, fragment_length=32, eval_episodes=2, eval_every=1,
                       progress=False, tensorboard=False, max_concurrency=2, run_dir=str(run_dir), **kw)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("best") / "r"
    # every round evaluated beside the next one (eval_overlap), and every round's checkpoint kept to compare with
    summary = minionsrl.train(_tiny(run_dir, max_rounds=5, keep_checkpoints_every=1, learning_rate=3e-3),
                              plots=False)
    return run_dir, summary


def test_best_is_the_policy_of_the_best_evaluation(run):
    run_dir, summary = run
    rows = read_metrics(run_dir)
    returns = {int(r["round"]): float(r["eval_return_mean"]) for r in rows}
    best_round = max(returns, key=lambda r: (returns[r], -r))  # the first round that reached the best
    assert summary["best_round"] == best_round and summary["best_eval_return"] == returns[best_round]
    best = checkpoint.load(run_dir / "checkpoints", checkpoint.BEST)
    assert best["round"] == best_round and best["eval_return"] == returns[best_round]
    # the weights of that round (its evaluation ran beside the next round, before the next update), no others
    kept = checkpoint.load(run_dir / "checkpoints", f"round-{best_round:05d}.safetensors")
    for name, weights in kept["policy"].items():
        np.testing.assert_array_equal(best["policy"][name], weights)
    assert summary["stop_checkpoint"] == "checkpoints/latest.safetensors"  # max_rounds: the run as it stands


def test_load_policy_and_eval_take_which(run, capsys):
    run_dir, summary = run
    assert minionsrl.load_policy(run_dir, which="best").round == summary["best_round"]
    assert minionsrl.load_policy(run_dir).round == minionsrl.load_policy(run_dir, which="latest").round == 5
    assert evaluate_run(run_dir, episodes=1, which="best")["round"] == summary["best_round"]
    assert cli.main(["eval", "--run-dir", str(run_dir), "--which", "best", "--episodes", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["round"] == summary["best_round"]
    with pytest.raises(minionsrl.errors.ConfigError, match="which='bset'; choose one of 'latest', 'best'"):
        minionsrl.load_policy(run_dir, which="bset")


@pytest.mark.integration
def test_a_run_stopped_by_its_target_names_the_best_policy(tmp_path):
    summary = minionsrl.train(_tiny(tmp_path / "r", max_rounds=4, target_return=5.0), plots=False)
    assert summary["stopped_by"] == "target_return"
    assert summary["stop_checkpoint"] == "checkpoints/best.safetensors"
    best = minionsrl.load_policy(tmp_path / "r", which="best")
    assert best.round == summary["best_round"] and summary["best_eval_return"] >= 5.0


def test_a_run_dir_without_best_says_so(run, tmp_path):
    older = shutil.copytree(run[0], tmp_path / "older")  # as a run from before best checkpoints
    (older / "checkpoints" / checkpoint.BEST).unlink()
    with pytest.raises(minionsrl.errors.ConfigError, match=r"no checkpoint yet .*predates best checkpoints"):
        minionsrl.load_policy(older, which="best")


def test_load_policy_takes_what_train_returns(run):
    """SB3's habit, ``model = train(...)`` then load what it returned: the summary names its run dir."""
    run_dir, summary = run
    assert summary["run_dir"] == str(run_dir)
    assert minionsrl.load_policy(summary).round == minionsrl.load_policy(run_dir).round
    with pytest.raises(minionsrl.errors.ConfigError, match="this one has none: pass the run directory instead"):
        minionsrl.load_policy({"env_id": "CartPole-v1"})


def test_a_finished_run_that_lost_its_latest_checkpoint_says_so_and_names_best(run, tmp_path):
    lost = shutil.copytree(run[0], tmp_path / "lost")
    (lost / "checkpoints" / checkpoint.LATEST).unlink()
    with pytest.raises(minionsrl.errors.ConfigError, match=r"has lost its checkpoint latest\.safetensors \(a finished "
                       r"run wrote it: restore it from a copy\); which='best' \(minionsrl eval --which best\) loads "
                       r"best\.safetensors, which is there$"):
        minionsrl.load_policy(lost)
