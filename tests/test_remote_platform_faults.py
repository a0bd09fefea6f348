"""Faults of the remote platforms' own parts, on real components: the raylet of a private Ray cluster killed
mid-run (the run ends with one line, as for a lost head, and leaves nothing behind), and a Lithops policy object
deleted or overwritten in storage (re-published once, so the round goes on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from minionsrl.loop.metrics import read_metrics, read_rows

CART = ["--env-id", "CartPole-v1", "--fragment-length", "64", "--eval-every", "1000", "--eval-episodes", "1",
        "--no-progress", "--no-tensorboard", "--seed", "1"]


def _train(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "minionsrl.cli", "train", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _wait_rounds(run_dir: Path, n: int, proc: subprocess.Popen, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while len(read_rows(run_dir / "metrics.csv", missing_ok=True)) < n:
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, f"no round {n} within {timeout_s} s"
        time.sleep(0.05)


# -- Ray: a private cluster's raylet or head killed mid-run ------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("victim", ["raylet", "gcs_server"])
def test_private_ray_cluster_process_killed_is_one_line_and_leaves_nothing(tmp_path, subprocess_env, victim):
    """The private cluster's raylet (or its GCS) is SIGKILLed while the run goes: the learner ends with exit code 1
    and one line naming the run to resume, nothing of Ray's on stdout or stderr (without the fix: exit 1, an empty
    stderr and the raylet log's last 20 lines on stdout, printed by Ray, whose driver ends the process from C++),
    no token folder and no process of the run's cluster left; `--resume` then finishes the run."""
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("ray")
    run = tmp_path / "run"
    proc = _train([*CART, "--backend", "ray", "--actors", "2", "--max-rounds", "100000", "--run-dir", str(run)],
                  subprocess_env)
    try:
        _wait_rounds(run, 3, proc)
        family = psutil.Process(proc.pid).children(recursive=True)
        cluster = [(p, p.create_time()) for p in family]
        target = [p for p in family if p.name() == victim]
        assert len(target) == 1, [p.name() for p in family]
        target[0].send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=120)  # the watchdog holds stderr too: this waits for it
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = err.decode().strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, (proc.returncode, err.decode(), out.decode()[-2000:])
    assert lines[0].startswith("minionsrl: cluster lost: the Ray cluster's "), lines
    assert ("raylet" if victim == "raylet" else "head") in lines[0]
    assert lines[0].endswith(f"continue with --resume --run-dir {run}"), lines
    assert out.decode().strip() == "", out.decode()[-2000:]  # no "Raylet is terminated ..." dump
    assert list(Path(tempfile.gettempdir()).glob(f"minionsrl-ray-token-{proc.pid}-*")) == []
    deadline = time.monotonic() + 15  # an agent may take a moment to go after its raylet
    while left := [p for p, started in cluster if p.is_running() and p.create_time() == started
                   and p.status() != psutil.STATUS_ZOMBIE]:
        assert time.monotonic() < deadline, [(p.pid, p.name()) for p in left]
        time.sleep(0.2)

    done = len(read_metrics(run))  # rounds that the checkpoint kept
    resumed = _train(["--resume", "--run-dir", str(run), "--max-rounds", str(done + 2), "--no-progress"],
                     subprocess_env)
    _, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err.decode()
    assert [int(r["round"]) for r in read_metrics(run)] == list(range(1, done + 3))
