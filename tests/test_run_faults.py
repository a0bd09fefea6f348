"""Faults around the run rather than inside a round (docs/RELIABILITY.md §6): a cluster that is not there,
folders left by killed learners, two learners on one run dir, a disk that fills or a run dir that cannot be
written."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from minionsrl.stats import RoundStats

FAST = ["--max-rounds", "1", "--actors", "1", "--fragment-length", "16", "--eval-episodes", "1", "--no-progress",
        "--no-tensorboard"]


def _closed_port() -> int:
    """A port on which nothing listens: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_ray_address_without_a_cluster_fails_at_once_and_leaves_no_run_dir(tmp_path, subprocess_env):
    pytest.importorskip("ray")
    port, run_dir = _closed_port(), tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "minionsrl.cli", "train", *FAST, "--backend", "ray",
                           "--ray-address", f"127.0.0.1:{port}", "--run-dir", str(run_dir)],
                          capture_output=True, text=True, env=subprocess_env, timeout=60)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("minionsrl: error: ray_address: no Ray cluster at ") and f":{port}" in lines[0]
    assert "connection refused" in lines[0] and "ray start --head" in lines[0], lines[0]
    assert not run_dir.exists()  # the same command can be run again once a cluster is up


def test_local_backend_removes_the_folders_of_dead_learners_and_keeps_live_ones(key, monkeypatch, tmp_path,
                                                                              subprocess_env):
    """A learner killed with SIGKILL leaves its minionsrl-local-PID-* folder behind: the next backend to start
    removes it, and leaves alone those of learners still running (their lock held: tests/test_hardening.py has
    the cases where the pid in the name misleads)."""
    import tempfile

    from minionsrl.backends.local import STATE_PREFIX, LocalBackend

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this test's own temporary folder
    hold = ("import time\nfrom minionsrl.backends.tempdirs import OwnedFolder\n"
            f"print(OwnedFolder({STATE_PREFIX!r}).path, flush=True)\ntime.sleep(60)")
    env = {**subprocess_env, "TMPDIR": str(tmp_path)}
    dead, live = (subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True, env=env)
                  for _ in range(2))
    try:
        stale, running = (Path(p.stdout.readline().strip()) for p in (dead, live))
        dead.kill()
        dead.wait()
        for folder in (stale, running):
            (folder / "policy-7.bin").write_bytes(b"x" * 100)
        backend = LocalBackend(key, max_concurrency=1)
        try:
            assert not stale.exists() and (running / "policy-7.bin").exists()
            mine = backend._dir
            assert mine.parent == tmp_path and mine.name.startswith(f"{STATE_PREFIX}{os.getpid()}-")
            backend.publish(b"policy")
        finally:
            backend.close()
        assert not mine.exists() and running.exists()
    finally:
        live.kill()
        live.wait()


def _cli(args: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-m", "minionsrl.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)
    return proc.returncode, proc.stderr.strip().splitlines()


def test_a_run_dir_is_locked_while_a_session_holds_it(tmp_path):
    from minionsrl.config import TrainConfig
    from minionsrl.errors import ConfigError
    from minionsrl.loop.session import LOCK, Session

    cfg = TrainConfig(run_dir=str(tmp_path / "run"))
    first = Session(cfg, resume=False)
    assert (tmp_path / "run" / LOCK).read_text().strip() == str(os.getpid())
    for resume in (False, True):
        with pytest.raises(ConfigError, match=r"run_dir '.*run' is in use by another learner \(process \d+\)"):
            Session(cfg, resume=resume)
    first.close()
    second = Session(cfg, resume=True)  # released by close()
    second.close()
    third = Session(cfg, resume=True)
    del third  # a session dropped without close() releases it too
    Session(cfg, resume=True).close()


@pytest.mark.integration
def test_a_second_learner_on_a_run_dir_fails_at_once(tmp_path, subprocess_env):
    """While one process holds a run dir, `minionsrl train` on it, fresh or --resume, fails with one line naming
    it, before any backend starts; once the holder is killed (SIGKILL), the run dir can be used again."""
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom minionsrl.config import TrainConfig\n"
         "from minionsrl.loop.session import Session\n"
         "s = Session(TrainConfig(run_dir=sys.argv[1]), resume=False)\nprint('ready', flush=True)\ntime.sleep(120)",
         str(run_dir)], stdout=subprocess.PIPE, text=True, env=subprocess_env)
    try:
        assert holder.stdout.readline().strip() == "ready"
        for args in ([*FAST, "--run-dir", str(run_dir)], ["--resume", "--run-dir", str(run_dir), "--no-progress"]):
            rc, lines = _cli(["train", *args], subprocess_env)
            assert rc == 2 and len(lines) == 1, lines
            assert lines[0] == (f"minionsrl: error: run_dir {str(run_dir)!r} is in use by another learner (process "
                                f"{holder.pid}); wait for it to end or stop it, or choose another --run-dir"), lines
            assert holder.poll() is None  # refused while the holder runs, not after waiting for it to end
        assert sorted(p.name for p in run_dir.iterdir()) == [".lock", "config.yaml"]  # the second wrote nothing
    finally:
        holder.kill()
        holder.wait()
    from minionsrl.config import TrainConfig
    from minionsrl.loop.session import Session

    Session(TrainConfig(run_dir=str(run_dir)), resume=True).close()  # the kernel released the dead holder's lock


class _FullDisk:
    """A file being written on a disk with ``room`` bytes left: the write that does not fit writes what fits
    and fails with ENOSPC, as write(2) does."""

    def __init__(self, fh, room: int) -> None:
        self._fh, self._room = fh, room

    def write(self, data: bytes) -> int:
        if len(data) > self._room:
            self._fh.write(data[: self._room])
            self._room = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(data)
        return self._fh.write(data)

    def __getattr__(self, name: str):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._fh.close()


@pytest.mark.integration
def test_a_full_disk_at_a_checkpoint_stops_the_run_with_one_line_and_resume_continues(tmp_path, monkeypatch, capsys):
    from minionsrl import cli, files
    from minionsrl.loop import checkpoint
    from minionsrl.loop.metrics import read_metrics

    run_dir, writes = tmp_path / "run", []

    def full_disk_open(path, mode="r", *args, **kwargs):
        fh = open(path, mode, *args, **kwargs)  # noqa: SIM115
        if not str(path).endswith(".safetensors.tmp"):  # not a checkpoint's temporary file: written as ever
            return fh
        writes.append(path)
        return _FullDisk(fh, 1000) if len(writes) == 2 else fh  # round 2's checkpoint: the disk fills

    monkeypatch.setattr(files, "open", full_disk_open, raising=False)  # a checkpoint is written through files
    train = ["train", "--max-rounds", "3", "--actors", "1", "--fragment-length", "16", "--eval-every", "0",
             "--eval-episodes", "1", "--checkpoint-every", "1", "--no-progress", "--no-tensorboard"]
    assert cli.main([*train, "--run-dir", str(run_dir)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    latest = run_dir / "checkpoints" / checkpoint.LATEST
    assert lines == [f"minionsrl: error: checkpoint: cannot write {str(latest)!r} (No space left on device); the "
                     "previous checkpoint is intact: free space (or make the run dir writable), then continue with "
                     f"--resume --run-dir {str(run_dir)!r}"], lines
    assert len(writes) == 2 and sorted(p.name for p in latest.parent.iterdir()) == [checkpoint.LATEST]  # no .tmp
    assert checkpoint.load(latest.parent)["round"] == 1  # the previous checkpoint, whole
    monkeypatch.undo()  # space again
    assert cli.main(["train", "--resume", "--run-dir", str(run_dir), "--no-progress", "--no-tensorboard"]) == 0
    assert [r["round"] for r in read_metrics(run_dir)] == ["1", "2", "3"]
    assert checkpoint.load(latest.parent)["round"] == 3


def test_a_full_disk_or_an_unwritable_file_in_the_run_logs_is_one_line(tmp_path):
    from minionsrl.errors import ConfigError
    from minionsrl.loop.metrics import RunLog, read_metrics

    log = RunLog(tmp_path, None, 0, tensorboard=False)
    log.log_round(RoundStats.from_row({"round": 1, "env_steps": 16}, complete=False), [])
    full = os.open("/dev/full", os.O_WRONLY)  # every write to it fails with ENOSPC: a disk that just filled
    os.dup2(full, log._metrics.fileno())
    os.close(full)
    with pytest.raises(ConfigError) as raised:
        log.log_round(RoundStats.from_row({"round": 2, "env_steps": 32}, complete=False), [])
    assert str(raised.value) == (f"metrics.csv: cannot write {str(tmp_path / 'metrics.csv')!r} (No space left on "
                                 "device); free space (or make the run dir writable), then continue with --resume "
                                 f"--run-dir {str(tmp_path)!r}")
    log.close()  # what stayed buffered is dropped, not raised again over the error above
    assert [r["round"] for r in read_metrics(tmp_path)] == ["1"]

    blocked = tmp_path / "blocked"
    (blocked / "invocations.csv").mkdir(parents=True)  # a file that cannot be opened for writing
    with pytest.raises(ConfigError, match=r"^invocations.csv: cannot write '.*blocked/invocations.csv' \(Is a "
                                          r"directory\); free space \(or make the run dir writable\)"):
        RunLog(blocked, None, 0, tensorboard=False)


def test_a_run_dir_that_cannot_be_written_is_one_line_before_any_work(tmp_path, monkeypatch):
    from minionsrl.config import TrainConfig
    from minionsrl.errors import ConfigError
    from minionsrl.loop.session import LOCK, Session

    cfg = TrainConfig(run_dir=str(tmp_path / "run"))
    Session(cfg, resume=False).close()
    lock, real_open = str(tmp_path / "run" / LOCK), os.open

    def read_only_open(path, flags, *args):  # as chmod 0555 does, also for root
        if str(path) == lock:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only_open)
    with pytest.raises(ConfigError, match=r"^run_dir: '.*run' cannot be written \(Permission denied\); choose a "
                                          "writable directory$"):
        Session(cfg, resume=True)


def test_rows_torn_by_a_kill_or_a_full_disk_are_dropped(tmp_path):
    """A row cut short (a "12" cut to "1" must not pass for round 1), or NUL bytes a crash left, after the last
    whole row: reading and resuming keep the whole rows only."""
    from minionsrl.loop.metrics import METRIC_COLUMNS, _prepare_csv, read_metrics

    path = tmp_path / "metrics.csv"

    def row(r: int) -> str:
        return ",".join([str(r), str(16 * r), *[""] * (len(METRIC_COLUMNS) - 2)]) + "\r\n"

    whole = ",".join(METRIC_COLUMNS) + "\r\n" + "".join(row(r) for r in range(1, 12))
    for tail in ["1", row(12)[:5], row(12)[:-2], "\0" * 512, row(12)[:9] + "\0" * 64]:
        path.write_text(whole + tail, newline="")
        complete = tail == row(12)[:-2]  # every field there: whole, but for its newline
        assert [r["round"] for r in read_metrics(tmp_path)] == [str(r) for r in range(1, 12 + complete)], repr(tail)
        _prepare_csv(path, METRIC_COLUMNS, 11)  # a resume from the checkpoint of round 11
        assert [r["round"] for r in read_metrics(tmp_path)] == [str(r) for r in range(1, 12)], repr(tail)
        assert path.read_bytes().decode() == whole


def test_a_private_ray_cluster_that_does_not_start_is_tried_again_then_one_line(monkeypatch):
    """Ray gives a starting node 30 s, hard-coded; on a busy machine it can miss them. The backend tries once more,
    then says so in one line (the CLI's "not started", exit 1), with Ray's settings restored and no token left."""
    ray = pytest.importorskip("ray")
    from minionsrl.backends import ray_backend
    from minionsrl.backends.remote import _HELD
    from minionsrl.errors import NotStarted, one_line

    calls = []

    def busy_init(*args, **kwargs):
        calls.append(kwargs)
        raise Exception("The current node timed out during startup. This could happen because some of the raylet "
                        "failed to startup or the GCS has become overloaded.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process, whatever ran before
    monkeypatch.setattr(ray, "init", busy_init)
    env = {name: os.environ.get(name) for name in ray_backend._PRIVATE_ENV}
    held = set(_HELD)
    with pytest.raises(NotStarted) as info:
        ray_backend.RayBackend(b"k" * 32)
    assert len(calls) == ray_backend.PRIVATE_START_TRIES == 2
    line = one_line(str(info.value))
    assert line.startswith("backend 'ray': the private Ray cluster did not start, 2 tries (Ray: The current node")
    assert "--ray-address" in line
    assert {name: os.environ.get(name) for name in ray_backend._PRIVATE_ENV} == env
    assert set(_HELD) == held  # each try's token file removed with its folder


def test_another_error_of_a_private_ray_cluster_is_not_tried_again(monkeypatch):
    ray = pytest.importorskip("ray")
    from minionsrl.backends import ray_backend

    calls = []

    def broken_init(*args, **kwargs):
        calls.append(kwargs)
        raise RuntimeError("no space left for the object store")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process, whatever ran before
    monkeypatch.setattr(ray, "init", broken_init)
    with pytest.raises(RuntimeError, match="no space left"):
        ray_backend.RayBackend(b"k" * 32)
    assert len(calls) == 1


def test_the_cli_says_a_backend_that_did_not_start_in_one_line(monkeypatch, capsys, tmp_path):
    ray = pytest.importorskip("ray")
    from minionsrl import cli

    def busy_init(*args, **kwargs):
        raise Exception("The current node timed out during startup.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process, whatever ran before
    monkeypatch.setattr(ray, "init", busy_init)
    assert cli.main(["train", *FAST, "--backend", "ray", "--run-dir", str(tmp_path / "run")]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("minionsrl: not started: backend 'ray': the private Ray"), lines
    assert not (tmp_path / "run").exists()  # nothing made: the same command can simply be run again
