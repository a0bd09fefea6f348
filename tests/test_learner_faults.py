"""Learner faults: a real ``minionsrl train`` is SIGKILLed at varied moments — once in the middle of writing a
checkpoint — and resumed with --resume each time; it ends where an uninterrupted run ends, and its outputs
stay consistent (no duplicate or missing rounds, ledger totals equal to the sum of the rows)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minionsrl import cli
from minionsrl.loop import checkpoint
from minionsrl.loop.metrics import LEARNING_COLUMNS, read_metrics, read_rows

ROUNDS = 12
FLAGS = ["--env-id", "CartPole-v1", "--seed", "3", "--actors", "4", "--fragment-length", "64", "--hidden-sizes",
         "16", "--update-epochs", "2", "--minibatch-size", "64", "--eval-every", "4", "--eval-episodes", "2",
         "--max-rounds", str(ROUNDS), "--no-progress", "--no-tensorboard", "--max-concurrency", "2",
         # function faults as well: the learner's kills and resumes must not disturb their replay
         "--fault-raise", "0.1", "--fault-kill", "0.05", "--fault-duplicate", "0.1", "--fault-malformed", "0.1",
         "--fault-seed", "2", "--max-retries", "10"]


def _rows(path: Path) -> list[dict[str, str]]:
    return read_rows(path, missing_ok=True)


def _wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"training ended before {what}: {proc.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.01)


def _start(run_dir: Path, env: dict[str, str], resume: bool, pause: tuple[int, Path] | None = None) -> subprocess.Popen:
    """``minionsrl train`` in a process of its own; ``pause``: (round, marker) to stop that round's checkpoint
    half-written (tests/pause_in_checkpoint.py)."""
    args = ["--resume", "--run-dir", str(run_dir), "--no-progress"] if resume else [*FLAGS, "--run-dir", str(run_dir)]
    launcher = ([str(Path(__file__).with_name("pause_in_checkpoint.py")), str(pause[0]), str(pause[1])] if pause
                else ["-m", "minionsrl.cli"])
    return subprocess.Popen([sys.executable, *launcher, "train", *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the learner and its function instances
    proc.wait(timeout=30)
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL


def _checkpoint_round(run_dir: Path) -> int:
    return int(checkpoint.load(run_dir / "checkpoints")["round"])


@pytest.mark.slow
def test_three_sigkills_one_mid_checkpoint_then_resume_matches_an_uninterrupted_run(tmp_path, subprocess_env):
    run = tmp_path / "killed"
    metrics = run / "metrics.csv"
    kills = []

    # 1. in the middle of writing round 3's checkpoint (stopped half-written by tests/pause_in_checkpoint.py)
    marker = tmp_path / "paused"
    proc = _start(run, subprocess_env, resume=False, pause=(3, marker))
    _wait_for(marker.exists, proc, "the pause in round 3's checkpoint")
    _kill(proc)
    tmp = run / "checkpoints" / f".{checkpoint.LATEST}.tmp"
    assert tmp.stat().st_size > 0  # the half-written checkpoint is there...
    assert _checkpoint_round(run) == 2  # ...and the previous one is intact
    assert len(_rows(metrics)) == 3  # round 3 was logged but not checkpointed: resume must drop it
    kills.append(3)

    # 2. mid-round, a moment after round 6 was logged; 3. the instant round 9 was logged (before its checkpoint)
    for rows_at_kill, delay in ((6, 0.15), (9, 0.0)):
        proc = _start(run, subprocess_env, resume=True)
        _wait_for(lambda n=rows_at_kill: len(_rows(metrics)) >= n, proc, f"round {rows_at_kill}")
        time.sleep(delay)
        _kill(proc)
        kills.append(len(_rows(metrics)))
    assert len(kills) == 3

    assert cli.main(["train", "--resume", "--run-dir", str(run), "--no-progress"]) == 0
    straight = tmp_path / "straight"
    assert cli.main(["train", *FLAGS, "--run-dir", str(straight)]) == 0

    # no duplicate or missing rounds, and the same learning as the uninterrupted run
    resumed, reference = read_metrics(run), read_metrics(straight)
    assert [int(r["round"]) for r in resumed] == list(range(1, ROUNDS + 1))
    assert [{k: r[k] for k in LEARNING_COLUMNS} for r in resumed] == \
        [{k: r[k] for k in LEARNING_COLUMNS} for r in reference]
    # every invocation attempt listed once, exactly as in the uninterrupted run (faults replay identically)
    keys = ("round", "invocation_id", "kind", "slot", "attempt", "status", "fault", "digest", "seed")
    assert [tuple(r[k] for k in keys) for r in _rows(run / "invocations.csv")] == \
        [tuple(r[k] for k in keys) for r in _rows(straight / "invocations.csv")]
    assert sum(int(r["failed"]) + int(r["duplicates"]) for r in resumed) > 0
    # the ledger's totals equal the sum of the rows
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds"] == ROUNDS
    assert summary["cost_usd"]["serverless"] == sum(float(r["cost_serverless_usd"]) for r in resumed)
    assert summary["cost_usd"]["server"] == sum(float(r["cost_server_usd"]) for r in resumed)
    assert float(resumed[-1]["cum_cost_serverless_usd"]) == summary["cost_usd"]["serverless"]
    assert _checkpoint_round(run) == ROUNDS
