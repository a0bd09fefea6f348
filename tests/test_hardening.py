"""Issue 41's rows: temp folders owned by lock (not by pid), deadlines by default, nothing outliving the run.

Processes are counted before and after: an env's simulator and the local backend's workers must be gone, whether
the backend closed, an instance was killed at its deadline, or the learner itself was killed with SIGKILL.
"""

from __future__ import annotations

import csv
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from backend_helpers import KEY, requests_for, snapshot

from minionsrl.backends import local_worker
from minionsrl.backends.base import (
    DEADLINE_FLOOR_S,
    FIRST_DEADLINE_S,
    LIMIT_S,
    Deadlines,
    InvocationRecord,
)
from minionsrl.backends.local import STATE_PREFIX, LocalBackend
from minionsrl.backends.tempdirs import LOCK_NAME, UNLOCKED_GRACE_S, OwnedFolder, sweep
from minionsrl.errors import ConfigError, Resumable
from minionsrl.function.envs import EnvSpec, env_info
from minionsrl.function.fragment import PHASES, HungAt
from minionsrl.function.numpy_policy import PolicyArch

TINY = PolicyArch(2, 2, True, (8,))  # hostile_envs' spaces
GONE_WITHIN_S = 30.0  # how long a test waits for a process to go (a liveness check, not a speed one)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _wait_gone(pids: list[int]) -> list[int]:
    """Wait until none of ``pids`` runs, or ``GONE_WITHIN_S``; the ones still running."""
    end = time.monotonic() + GONE_WITHIN_S
    while any(_alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _wait_for(predicate, what: str, within_s: float = 60.0) -> None:
    end = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > end:
            pytest.fail(f"{what} did not happen within {within_s:g} s")
        time.sleep(0.05)


@pytest.fixture
def own_tmp(tmp_path, monkeypatch) -> Path:
    """This test's own temporary folder (for this process and the ones it starts)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path


# -- temp folders: owned by lock ------------------------------------------------------------------------------------
_HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from minionsrl.backends.tempdirs import OwnedFolder
    folder = OwnedFolder("{prefix}")
    if len(sys.argv) > 1:  # renamed as a learner of another PID namespace would have it named: by a pid dead here
        folder.path = folder.path.rename(folder.path.with_name("{prefix}" + sys.argv[1] + "-held"))
    print(folder.path, flush=True)
    time.sleep(120)
""")


def _holder(prefix: str, env: dict[str, str], *args: str, wrap: list[str] | None = None) -> tuple[subprocess.Popen,
                                                                                                   Path]:
    proc = subprocess.Popen([*(wrap or []), sys.executable, "-c", _HOLD.format(prefix=prefix), *args],
                            stdout=subprocess.PIPE, text=True, env=env)
    return proc, Path(proc.stdout.readline().strip())


def _dead_pid() -> int:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    return dead.pid


def test_a_live_learners_folder_named_by_a_dead_pid_is_kept_and_a_dead_ones_removed(own_tmp, subprocess_env):
    """The pid in a folder's name says nothing (a learner in another PID namespace): the lock decides."""
    env = {**subprocess_env, "TMPDIR": str(own_tmp)}
    live, held = _holder(STATE_PREFIX, env, str(_dead_pid()))
    killed, left = _holder(STATE_PREFIX, env)
    try:
        killed.kill()
        killed.wait()
        (held / "policy-3.bin").write_bytes(b"x")
        backend = LocalBackend(KEY, max_concurrency=1)
        try:
            assert (held / "policy-3.bin").exists(), "a live learner's folder was removed"
            assert not left.exists(), "a killed learner's folder was kept"
            backend.publish(b"policy")
        finally:
            backend.close()
        assert not backend._dir.exists() and held.exists()
    finally:
        live.kill()
        live.wait()


def test_a_learner_in_another_pid_namespace_keeps_its_folder(own_tmp, subprocess_env):
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--pid", "--fork", "true"], capture_output=True).returncode:
        pytest.skip("this machine does not let a test make a PID namespace (unshare --pid --fork)")
    env = {**subprocess_env, "TMPDIR": str(own_tmp)}
    other, folder = _holder(STATE_PREFIX, env, wrap=[unshare, "--pid", "--fork", "--kill-child"])
    try:
        assert folder.name.startswith(STATE_PREFIX)  # named by its pid in its own namespace: 1 or so
        (folder / "policy-1.bin").write_bytes(b"x")
        for _ in range(2):  # two learners start beside it
            LocalBackend(KEY, max_concurrency=1).close()
        assert (folder / "policy-1.bin").exists()
    finally:
        other.kill()
        other.wait()
    _wait_for(lambda: sweep(STATE_PREFIX) == [folder], "the sweep of the folder, once its learner is gone")


def test_a_folder_without_a_lock_is_removed_only_once_long_untouched(own_tmp):
    fresh = own_tmp / f"{STATE_PREFIX}{_dead_pid()}-fresh"  # one being made right now, or an older version's
    old = own_tmp / f"{STATE_PREFIX}{_dead_pid()}-old"
    for folder in (fresh, old):
        folder.mkdir()
    long_ago = time.time() - UNLOCKED_GRACE_S - 60
    os.utime(old, (long_ago, long_ago))
    assert sweep(STATE_PREFIX) == [old] and fresh.exists()


def test_an_owned_folder_holds_its_lock_and_goes_whole(own_tmp):
    folder = OwnedFolder("minionsrl-test-")
    assert (folder.path / LOCK_NAME).exists() and oct(folder.path.stat().st_mode & 0o777) == "0o700"
    assert sweep("minionsrl-test-") == []
    folder.remove()
    folder.remove()
    assert not folder.path.exists()


# -- deadlines by default -------------------------------------------------------------------------------------------
def _ok(kind: str, seconds: float) -> InvocationRecord:
    return InvocationRecord(invocation_id="x", kind=kind, duration_s=seconds)


def test_deadlines_follow_the_median_of_their_kind_within_floor_and_limit():
    d = Deadlines()
    assert d.of("train") == FIRST_DEADLINE_S  # nothing measured, nothing expected
    d.expect("train", 30.0)
    assert d.of("train") == 300.0  # 10x the learner's guess
    for s in (1.0, 2.0, 3.0):
        d.observe(_ok("train", s))
    d.observe(InvocationRecord(invocation_id="y", kind="train", duration_s=500.0, status="timed_out"))  # not a success
    assert d.of("train") == DEADLINE_FLOOR_S  # 10 x 3 s = 30 s, under the floor
    d.observe(_ok("train", 40.0))
    assert d.of("train") == 400.0  # 10x the longest: episodes grow as the policy learns
    for _ in range(64):
        d.observe(_ok("train", 20.0))
    assert d.of("train") == 200.0  # the 40 s one has left the latest 64
    d.observe(_ok("train", 200.0))
    assert d.of("train") == LIMIT_S  # 2,000 s, over Lambda's limit
    assert d.of("eval") == FIRST_DEADLINE_S  # kinds apart
    assert Deadlines(5.0).of("eval") == 5.0  # the user's, whatever was measured
    assert d.error(60.0, HungAt(PHASES["step"], "my_env.py:12 in step")).endswith(
        "; it was in the env's step() (at my_env.py:12 in step)") and "--invocation-timeout-s" in d.error(60.0)


@pytest.mark.integration
def test_a_hung_step_is_stopped_at_its_deadline_with_where_it_hung_and_its_simulator(make_backend, tmp_path):
    pids, hang = tmp_path / "pids", tmp_path / "hang"
    pids.mkdir()
    hang.touch()
    backend = make_backend(invocation_timeout_s=3.0)
    ref = backend.publish(snapshot(TINY))
    spec = EnvSpec("hostile_envs:SimulatorEnv", {"pids": str(pids), "hang": str(hang)})
    reply = backend.invoke(requests_for(ref, 1, spec=spec))[0]
    assert reply.record.status == "timed_out"
    assert "timed out after 3 s (--invocation-timeout-s)" in reply.record.error
    assert "in the env's step() (at hostile_envs.py:" in reply.record.error and "in step)" in reply.record.error
    assert reply.hung_at is not None and reply.hung_at.in_env  # what the retry engine reads (not the text)
    simulators = [int(p.name) for p in pids.iterdir()]
    assert len(simulators) == 1 and _wait_gone(simulators) == []  # killed with its instance's process group


def test_where_hung_reads_the_serving_thread_of_a_faulthandler_dump():
    dump = textwrap.dedent("""\
        Thread 0x00007f1 (most recent call first):
          File "/x/minionsrl/backends/local_worker.py", line 80 in _watch_learner
          File "/usr/lib/python3.11/threading.py", line 975 in run

        Current thread 0x00007f2 (most recent call first):
          File "/home/u/my_env.py", line 12 in __init__
          File "/x/gymnasium/envs/registration.py", line 740 in make
          File "/x/minionsrl/function/envs.py", line 330 in make_env
          File "/x/minionsrl/function/rollout.py", line 240 in handle
          File "/x/minionsrl/backends/local_worker.py", line 120 in main
        """)
    where = local_worker.where_hung(dump)
    assert where is not None and str(where) == "building the env (at my_env.py:12 in __init__)" and where.in_env
    assert local_worker.where_hung("") is None


@pytest.mark.integration
@pytest.mark.parametrize(("env", "says"), [("HangingInitEnv", "its constructor did not return within 1 s"),
                                           ("HangingStepEnv", "step() did not return within 1 s")])
def test_the_learners_env_check_is_bounded_and_names_what_hung(env, says):
    with pytest.raises(ConfigError, match=r"--env-check-timeout-s") as err:
        env_info(EnvSpec(f"hostile_envs:{env}"), timeout_s=1.0)
    assert says in str(err.value)


def test_the_env_check_times_a_step():
    info = env_info(EnvSpec("hostile_envs:EndlessEnv"))
    assert info.step_s > 0 and info.build_s > 0


def test_an_episode_without_end_is_cut_in_evaluation(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot(TINY))
    reply = backend.invoke(requests_for(ref, 1, spec=EnvSpec("hostile_envs:EndlessEnv"), kind="eval",
                                        episodes=2, max_steps=300))[0]
    assert reply.ok, reply.record.error
    assert reply.arrays["episode_lengths"].tolist() == [300, 300]
    assert np.all(reply.arrays["episode_returns"] == 300.0)


# -- nothing outlives the run ---------------------------------------------------------------------------------------
def test_a_closed_backend_closes_its_envs_and_leaves_no_process(make_backend, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    backend = make_backend()
    ref = backend.publish(snapshot(TINY))
    replies = backend.invoke(requests_for(ref, 2, spec=EnvSpec("hostile_envs:SimulatorEnv", {"pids": str(pids)})))
    assert all(r.ok for r in replies), [r.record.error for r in replies]
    workers = [i.process.pid for i in backend._instances]
    simulators = [int(p.name) for p in pids.iterdir()]
    assert simulators and all(_alive(p) for p in simulators + workers)
    backend.close()
    assert [p for p in simulators + workers if _alive(p)] == []  # at once: close() waits for them


_LEARNER = textwrap.dedent("""
    import sys, time
    from backend_helpers import KEY, requests_for, snapshot
    from minionsrl.backends.local import LocalBackend
    from minionsrl.function.envs import EnvSpec
    from minionsrl.function.numpy_policy import PolicyArch
    backend = LocalBackend(KEY, max_concurrency=2)
    ref = backend.publish(snapshot(PolicyArch(2, 2, True, (8,))))
    spec = EnvSpec("hostile_envs:SimulatorEnv", {{"pids": "{pids}", "hang": "{hang}"}})
    backend.submit(requests_for(ref, 2, spec=spec))
    while sum(1 for i in backend._instances if i.task is not None) < 2:
        backend.collect(timeout=0.1)
    print(" ".join(str(i.process.pid) for i in backend._instances), flush=True)
    time.sleep(120)
""")


@pytest.mark.integration
def test_a_sigkilled_learner_takes_its_hung_workers_and_their_simulators_with_it(tmp_path, subprocess_env):
    pids, hang = tmp_path / "pids", tmp_path / "hang"
    pids.mkdir()
    hang.touch()
    learner = subprocess.Popen([sys.executable, "-c", _LEARNER.format(pids=pids, hang=hang)],
                               stdout=subprocess.PIPE, text=True, env={**subprocess_env, "TMPDIR": str(tmp_path)})
    try:
        workers = [int(p) for p in learner.stdout.readline().split()]
        _wait_for(lambda: len(list(pids.iterdir())) == 2, "both envs started")
        simulators = [int(p.name) for p in pids.iterdir()]
        assert len(workers) == 2 and all(_alive(p) for p in workers + simulators)
    finally:
        learner.kill()
        learner.wait()
    assert _wait_gone(workers + simulators) == []


def test_an_env_that_calls_sys_exit_fails_its_invocation_and_one_that_ends_its_process_gives_its_code(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot(TINY))
    soft = backend.invoke(requests_for(ref, 1, spec=EnvSpec("hostile_envs:ExitingEnv", {"code": 0})))[0]
    assert soft.record.status == "failed" and "the env called sys.exit(0)" in soft.record.error
    hard = backend.invoke(requests_for(ref, 1, round_idx=2, spec=EnvSpec("hostile_envs:ExitingEnv",
                                                                         {"code": 3, "hard": True})))[0]
    assert hard.record.status == "failed" and hard.record.error.endswith("died (exit code 3)")


def test_an_envs_output_is_capped_per_invocation_keeping_its_head_and_tail(make_backend, capfd):
    backend = make_backend(max_concurrency=1)
    ref = backend.publish(snapshot(TINY))
    capfd.readouterr()
    for round_idx in (1, 2):  # the cap is per invocation
        reply = backend.invoke(requests_for(ref, 1, round_idx=round_idx, spec=EnvSpec("hostile_envs:LoudEnv")))[0]
        assert reply.ok, reply.record.error
        err = capfd.readouterr().err
        assert len(err) < local_worker.OUTPUT_HEAD_BYTES + local_worker.OUTPUT_TAIL_BYTES + 200  # of 10 MB printed
        assert err.startswith("FIRST LINE") and err.rstrip().endswith("LAST LINE")
        assert "bytes of this function's output left out]" in err


def test_a_full_temporary_folder_at_publish_stops_with_one_resumable_line(make_backend, monkeypatch):
    backend = make_backend()

    def full(self, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(Resumable) as err:
        backend.publish(b"policy")
    message = str(err.value)
    assert "No space left on device" in message and message.endswith("continue with --resume")
    assert "\n" not in message and list(backend._dir.glob("policy-*")) == []


# -- the whole command, default deadlines -----------------------------------------------------------------------------
def _hang_mid_run(tmp_path: Path, subprocess_env: dict[str, str], *flags: str) -> tuple[int, str, list[int]]:
    """Train on an env whose step hangs from its third round on, under ``flags``: the exit status, what it wrote
    on stderr, and the pids of the workers it had started."""
    flag, run = tmp_path / "hang", tmp_path / "run"
    cmd = [sys.executable, "-m", "minionsrl", "train", "--env-id", "hostile_envs:HangingStepEnv",
           "--env-kwargs", f'{{"flag": "{flag}"}}', "--actors", "1", "--fragment-length", "16", "--eval-every", "0",
           "--hidden-sizes", "8", "--no-progress", "--no-tensorboard", "--total-timesteps", "100000",
           "--run-dir", str(run), *flags]
    learner = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**subprocess_env, "TMPDIR": str(tmp_path)})
    try:
        _wait_for(lambda: (run / "metrics.csv").exists() and len((run / "metrics.csv").read_text().splitlines()) >= 3,
                  "two rounds", within_s=120)
        workers = [int(p) for p in subprocess.run(["pgrep", "-f", "minionsrl.backends.local_worker", "-P",
                                                   str(learner.pid)], capture_output=True, text=True).stdout.split()]
        flag.touch()
        err = learner.communicate(timeout=DEADLINE_FLOOR_S + 120)[1].strip()
    finally:
        learner.kill()
    return learner.returncode, err, workers


@pytest.mark.slow
def test_a_step_that_hangs_mid_run_ends_the_run_in_one_line_at_the_default_deadline(tmp_path, subprocess_env):
    """Default deadline flags (only --max-retries 0, so that one timeout ends it): the run stops at the default
    deadline with one line naming the deadline, the step that hung and where, and leaves no worker behind."""
    rc, err, workers = _hang_mid_run(tmp_path, subprocess_env, "--max-retries", "0")
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("minionsrl: invocation failed:") and "Traceback" not in err
    assert f"timed out after {DEADLINE_FLOOR_S:.3g} s (the default deadline" in err
    assert "in the env's step() (at hostile_envs.py:" in err
    assert workers and _wait_gone(workers) == []
    assert list(tmp_path.glob(f"{STATE_PREFIX}*")) == []


@pytest.mark.integration
def test_a_step_that_hangs_at_the_same_place_again_is_not_retried_further(tmp_path, subprocess_env):
    """A hang the slot's seed replays (the retry hung at the same line of the env's step) ends the run at the
    second attempt, not after all of --max-retries, and its line says why."""
    rc, err, _ = _hang_mid_run(tmp_path, subprocess_env, "--invocation-timeout-s", "3", "--max-retries", "3")
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert "in the env's step() (at hostile_envs.py:" in err
    assert "(hung there again on its retry, with the same seed: a fault the seed causes" in err
    with open(tmp_path / "run" / "invocations.csv") as f:
        timed_out = [row for row in csv.DictReader(f) if row["status"] == "timed_out"]
    assert len(timed_out) == 2, timed_out  # the first attempt and one retry, not 1 + 3
