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
from dataclasses import replace
from pathlib import Path

import pytest
from run_dir_tools import alive, train_process, wait_rounds

from minionsrl.function.request import Request
from minionsrl.loop.metrics import read_metrics, read_rows

pytestmark = pytest.mark.integration  # Lithops localhost and private Ray clusters

CART = ["--env-id", "CartPole-v1", "--fragment-length", "64", "--eval-every", "1000", "--eval-episodes", "1",
        "--no-progress", "--no-tensorboard", "--seed", "1"]


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
    proc = train_process([*CART, "--backend", "ray", "--actors", "2", "--max-rounds", "100000", "--run-dir", str(run)],
                         subprocess_env, stdout=subprocess.PIPE)
    try:
        wait_rounds(run, 3, proc)
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
    while left := [p for p, started in cluster if alive(p, started)]:
        assert time.monotonic() < deadline, [(p.pid, p.name()) for p in left]
        time.sleep(0.2)

    done = len(read_metrics(run))  # rounds that the checkpoint kept
    resumed = train_process(["--resume", "--run-dir", str(run), "--max-rounds", str(done + 2), "--no-progress"],
                            subprocess_env)
    _, err = resumed.communicate(timeout=240)
    assert resumed.returncode == 0, err.decode()
    assert [int(r["round"]) for r in read_metrics(run)] == list(range(1, done + 3))


# -- Lithops: the round's policy object lost or mangled in storage ---------------------------------------------
class LosingStorage:
    """Lithops storage (the real one, underneath) that, after the first ``after`` policy objects written to it,
    loses the next ``times`` (all of them if negative): deleted (``mode="delete"``) or overwritten with garbage
    right after they are written, as a storage, or someone who can write the bucket, may do."""

    def __init__(self, storage, mode: str, times: int, after: int = 0) -> None:
        self._storage, self.mode, self.times, self.after = storage, mode, times, after

    def __getattr__(self, name: str):
        return getattr(self._storage, name)

    def put_object(self, bucket: str, key: str, data) -> None:
        self._storage.put_object(bucket, key, data)
        if "/policy-" not in key:
            return
        if self.after > 0:
            self.after -= 1
        elif self.times != 0:
            self.times -= 1
            if self.mode == "delete":
                self._storage.delete_objects(bucket, [key])
            else:
                self._storage.put_object(bucket, key, b"mangled!" * 8)


def _lithops_backend(mode: str, times: int):
    pytest.importorskip("lithops")
    from backend_helpers import KEY

    from minionsrl.backends.lithops_backend import LithopsBackend, lithops_config

    backend = LithopsBackend(KEY, lithops_config(None), max_concurrency=2)
    backend._storage = LosingStorage(backend._storage, mode, times)
    return backend


def _gather_round(backend, slots: int = 2, max_retries: int = 2):
    from backend_helpers import CART, STEPS, requests_for, snapshot

    from minionsrl.function.fragment import Fragment
    from minionsrl.loop.retry import RetryPolicy, run_group

    ref = backend.publish(snapshot())

    def request(slot: int, attempt: int) -> Request:
        req = requests_for(ref, slots)[slot]
        return replace(req, id=req.id + (f"-a{attempt}" if attempt else ""), attempt=attempt)

    return run_group(backend, slots, request,
                     lambda req, reply: Fragment.from_wire(reply.arrays, reply.meta, STEPS, CART),
                     RetryPolicy(max_retries=max_retries))


@pytest.mark.parametrize("mode", ["delete", "garbage"])
def test_lithops_policy_object_lost_once_is_republished_and_the_round_completes(mode):
    """The round's policy object deleted, or overwritten with garbage, in storage: the functions that read it
    report it (PolicyUnavailable), the learner writes it again once, and their retries succeed (without this,
    every retry read the same bad object and the round failed)."""
    backend = _lithops_backend(mode, times=1)
    try:
        got = _gather_round(backend)
    finally:
        backend.close()
    assert sorted(got.results) == [0, 1] and got.lost == []
    failed = [a.reply.record.error for a in got.attempts if a.status != "ok"]
    assert failed and all(e.startswith("PolicyUnavailable: the policy object ") for e in failed), failed
    assert ("cannot be read from storage" if mode == "delete" else "fails its check") in failed[0]
    assert backend.republishes == 1
    assert sum("the learner wrote the policy to storage again" in e for e in failed) == 1
    assert all(a.status == "ok" for a in got.attempts if a.attempt > 0)


def test_lithops_storage_that_keeps_losing_the_policy_ends_the_round_with_one_line():
    """A storage that loses the policy every time it is written: it is written again once only, so the round
    fails (retries used up) with one line naming the lost policy, rather than re-publishing for ever."""
    from minionsrl.loop.retry import TooFewReplies

    backend = _lithops_backend("delete", times=-1)
    try:
        with pytest.raises(TooFewReplies) as caught:
            _gather_round(backend, max_retries=1)
    finally:
        backend.close()
    message = str(caught.value)
    assert "\n" not in message and "only 0 of 2 invocations succeeded" in message
    assert "PolicyUnavailable: the policy object " in message
    assert backend.republishes == 1
    attempts = caught.value.outcome.attempts
    assert len(attempts) == 4 and all(a.status == "failed" for a in attempts)


# the learner of a real `minionsrl train`, its Lithops storage losing policy objects (LosingStorage)
_LOSING_TRAIN = """
import sys
from minionsrl.backends import lithops_backend
from test_remote_platform_faults import LosingStorage

mode, times, after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
init = lithops_backend.LithopsBackend.__init__

def losing_init(self, *args, **kwargs):
    init(self, *args, **kwargs)
    self._storage = LosingStorage(self._storage, mode, times, after)

lithops_backend.LithopsBackend.__init__ = losing_init
from minionsrl.cli import main

sys.exit(main(sys.argv[4:]))
"""


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "times"), [("garbage", 1), ("delete", -1)])
def test_lithops_run_rides_out_a_lost_policy_and_ends_in_one_line_when_storage_keeps_losing_it(
        tmp_path, subprocess_env, mode, times):
    """`minionsrl train --backend lithops`: round 2's policy overwritten with garbage once, the run completes;
    a storage that loses every policy from round 2 on, the run ends with exit code 1 and one line, and none of
    Lithops' own tracebacks (its job monitor, left polling while the interpreter exited, printed 39 lines)."""
    pytest.importorskip("lithops")
    run = tmp_path / "run"
    env = {**subprocess_env, "TMPDIR": str(tmp_path)}  # a Lithops temp folder of its own
    proc = subprocess.run([sys.executable, "-c", _LOSING_TRAIN, mode, str(times), "1", "train", *CART, "--backend",
                           "lithops", "--actors", "2", "--max-rounds", "3", "--run-dir", str(run)],
                          env=env, capture_output=True, timeout=300)
    err = proc.stderr.decode()
    invocations = read_rows(run / "invocations.csv", missing_ok=True)
    lost = [r for r in invocations if r["error"].startswith("PolicyUnavailable")]
    assert lost, invocations
    if times == 1:
        assert proc.returncode == 0 and err == "", err
        assert [int(r["round"]) for r in read_metrics(run)] == [1, 2, 3]
        assert sum("wrote the policy to storage again" in r["error"] for r in lost) == 1
    else:
        lines = err.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, err
        assert lines[0].startswith("minionsrl: invocation failed: round 2 training: only 0 of 2") and \
            "PolicyUnavailable" in lines[0], lines
        assert "Traceback" not in err
