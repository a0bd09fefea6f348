"""Issue 22: a full disk, a diverging update, a crafted run directory and a crafted checkpoint or config each end
in one line (exit 2, no traceback), touch nothing outside the run dir, and leave the last checkpoint intact."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from run_dir_tools import alive, command_line, set_at, tensorboard_events

from minionsrl import cli, files
from minionsrl.errors import ConfigError, one_line
from minionsrl.loop import checkpoint
from minionsrl.stats import RoundStats

TRAIN = ["train", "--actors", "1", "--fragment-length", "16", "--eval-every", "0", "--eval-episodes", "1",
         "--hidden-sizes", "8", "--no-progress", "--no-tensorboard", "--checkpoint-every", "1"]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished one-round run, copied by each test that tampers with it."""
    run = tmp_path_factory.mktemp("hostile") / "run"
    assert cli.main([*TRAIN, "--max-rounds", "1", "--run-dir", str(run)]) == 0
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _resume(run: Path, capsys, *extra: str) -> str:
    assert cli.main(["train", "--resume", "--run-dir", str(run), "--no-progress", *extra]) == 2
    return _one_line(capsys)


# -- a crafted run directory: links and special files are refused, never written through ----------------------
@pytest.mark.parametrize("name", ["checkpoints/.latest.safetensors.tmp", ".config.yaml.tmp", "summary.json",
                                  "metrics.csv", "checkpoints/latest.safetensors"])
def test_a_link_in_the_run_dir_is_refused_and_its_target_untouched(run, tmp_path, capsys, name):
    target = tmp_path / "victim.txt"
    target.write_text("precious")
    before = (run / "checkpoints" / checkpoint.LATEST).read_bytes()
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(target)
    err = _resume(run, capsys)
    assert "symbolic link" in err and name.split("/")[-1] in err, err
    assert target.read_text() == "precious"
    if name != "checkpoints/latest.safetensors":
        assert (run / "checkpoints" / checkpoint.LATEST).read_bytes() == before


def test_writes_do_not_follow_a_link_planted_after_the_check(tmp_path):
    """Defence in depth: the writers themselves neither follow a link at a temporary name nor at the file."""
    target = tmp_path / "victim.txt"
    target.write_text("precious")
    (tmp_path / ".out.tmp").symlink_to(target)
    files.write_text(tmp_path / "out", "new")  # through a fresh temporary file, renamed
    assert target.read_text() == "precious" and (tmp_path / "out").read_text() == "new"
    (tmp_path / "appended").symlink_to(target)
    with pytest.raises(ConfigError, match="symbolic link"):
        files.open_for_write(tmp_path / "appended", "a")
    (tmp_path / ".ck.tmp").symlink_to(target)
    checkpoint.save(tmp_path, {"x": np.zeros(2)}, name="ck")
    assert target.read_text() == "precious" and checkpoint.load(tmp_path, "ck")["x"].shape == (2,)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_special_file_as_checkpoint_is_refused_not_read(tmp_path, kind):
    path = tmp_path / checkpoint.LATEST
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="not a regular file"):
        checkpoint.load(tmp_path)


def test_a_checkpoint_over_the_size_cap_is_refused(tmp_path, monkeypatch):
    checkpoint.save(tmp_path, {"x": np.zeros(100)})
    monkeypatch.setattr(files, "MAX_CHECKPOINT_BYTES", 64)
    with pytest.raises(ConfigError, match="over the 64-byte limit"):
        checkpoint.load(tmp_path)


# -- a checkpoint that parses but is wrong -----------------------------------------------------------------------
def _tamper(run: Path, change) -> None:
    state = checkpoint.load(run / "checkpoints")
    change(state)
    checkpoint.save(run / "checkpoints", state)


@pytest.mark.integration
@pytest.mark.parametrize(("path", "value", "says"), [
    ("optimizer/001", lambda a: np.full_like(a, np.nan), "optimizer/001 holds non-finite numbers"),
    ("policy/actor.0.weight", KeyError, "policy/actor.0.weight is missing"),
    ("policy/actor.0.bias", "zeros", "policy/actor.0.bias is a str, not an array"),
    ("round", -5, "round is -5, not a finite non-negative number"),
    ("policy/critic.1.weight", lambda a: np.zeros((3, 3), a.dtype), "has shape (3, 3), not (1, 8)"),
    ("policy/critic.1.bias", lambda a: a.astype(np.float64), "has dtype float64, not float32"),
    ("ledger/total_serverless_usd", "abc", "total_serverless_usd is 'abc', not a number"),
    ("ledger/total_server_usd", -1.0, "total_server_usd is -1.0, not a finite non-negative number"),
    ("last_row", "{not json", "does not fit this run (JSONDecodeError"),
])
def test_resume_refuses_a_checkpoint_that_does_not_fit(run, capsys, path, value, says):
    _tamper(run, set_at(path, value))
    tampered = (run / "checkpoints" / checkpoint.LATEST).read_bytes()
    err = _resume(run, capsys)
    assert says in err and "--resume: checkpoint" in err and "round-NNNNN" in err, err
    assert (run / "checkpoints" / checkpoint.LATEST).read_bytes() == tampered  # nothing written


def test_resume_refuses_a_checkpoint_of_another_state_format_in_one_line(run, capsys):
    _tamper(run, lambda state: state.pop("format_version"))  # as a minionsrl from before the format was versioned
    err = _resume(run, capsys)
    assert "holds a run state of format 1, and this minionsrl resumes format" in err, err
    assert "start a new run" in err and "minionsrl eval" in err


# -- a diverging update ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("lr", "says"), [("1e30", "round 1: the update diverged"),
                                          ("1e300", "learning_rate: 1e+300 is too large")])
def test_a_diverging_update_stops_before_its_checkpoint(tmp_path, capsys, lr, says):
    run = tmp_path / "run"
    assert cli.main([*TRAIN, "--max-rounds", "2", "--learning-rate", lr, "--run-dir", str(run)]) == 2
    err = _one_line(capsys)
    assert says in err and "learning rate" in err.replace("learning_rate", "learning rate"), err
    assert checkpoint.load(run / "checkpoints") is None  # nothing of the NaN policy was checkpointed


# -- background writers: a full disk under TensorBoard ---------------------------------------------------------
@pytest.mark.integration  # a run through the trainer to a full disk: seconds
def test_a_tensorboard_write_that_fails_is_one_line_naming_its_file(tmp_path):
    from minionsrl.loop.metrics import RunLog

    log = RunLog(tmp_path, None, 0, tensorboard=True)
    log._tb._fh = open("/dev/full", "wb")  # noqa: SIM115 - every write: No space left on device
    with pytest.raises(ConfigError, match=r"events\.out\.tfevents.*No space left on device.*--resume"):
        log.log_round(RoundStats.from_row({"round": 1, "env_steps": 16, "sps": 1.0}, complete=False), [])
    log.close()


def test_tensorboard_events_are_readable(tmp_path):
    from minionsrl.loop.metrics import RunLog

    log = RunLog(tmp_path, 3, 48, tensorboard=True)
    log.log_round(RoundStats.from_row({"round": 4, "env_steps": 64, "sps": 2.5}, complete=False), [])
    log.close()
    events = tensorboard_events(tmp_path)
    assert events[0].file_version == "brain.Event:2" and events[1].step == 49  # the purge step of a resume
    assert [(e.step, e.summary.value[0].tag, e.summary.value[0].simple_value) for e in events[2:]] == [
        (64, "charts/SPS", 2.5)]


@pytest.mark.slow
def test_a_full_tmpfs_stops_the_run_with_one_line_and_keeps_the_checkpoint(tmp_path, capsys):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs is not allowed here (needs root and CAP_SYS_ADMIN)")
    try:
        run = mnt / "run"
        assert cli.main([*TRAIN, "--max-rounds", "1", "--run-dir", str(run)]) == 0
        capsys.readouterr()
        before = (run / "checkpoints" / checkpoint.LATEST).read_bytes()
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        with pytest.raises(OSError):  # the disk fills
            while True:
                os.write(fd, b"\0" * 4096)
        os.ftruncate(fd, os.fstat(fd).st_size - 48 * 1024)  # room for the resume to start, not for the rounds
        os.close(fd)
        code = cli.main(["train", "--resume", "--run-dir", str(run), "--max-rounds", "30", "--no-progress",
                         "--tensorboard"])
        err = _one_line(capsys)
        assert code == 2 and "No space left on device" in err, err
        state = checkpoint.load(run / "checkpoints")  # the last good checkpoint, whole
        assert state["round"] >= 1 and (state["round"] > 1 or checkpoint.decode(before)["round"] == 1)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


# -- YAML with limits; one line, capped -------------------------------------------------------------------------
def _bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "env_kwargs:\n  " + "\n  ".join(lines) + "\n"


@pytest.mark.parametrize(("text", "says"), [
    (_bomb(8), "values once its aliases are expanded"),
    (_bomb(6), "values once its aliases are expanded"),
    ("env_kwargs: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more than"),
    ("seed: 1\nseed: 2\n", "duplicate key 'seed' at line 2"),
    (b"env_id: \xff\xfe\n", "is not UTF-8"),
])
def test_a_hostile_config_is_one_short_line(tmp_path, capsys, text, says):
    path = tmp_path / "config.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert cli.main(["train", "--config", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    err = _one_line(capsys)
    assert says in err and len(err) < 1000, err
    assert not (tmp_path / "run").exists()


def test_a_merge_key_may_override_but_a_plain_duplicate_may_not():
    assert files.parse_yaml("base: &b {x: 1}\nother:\n  <<: *b\n  x: 2\n", "t")["other"] == {"x": 2}


def test_one_line_caps_long_messages():
    text = "start " + "x" * 10_000 + "\n end"
    short = one_line(text)
    assert len(short) <= 800 and short.startswith("start") and short.endswith(" end") and "\n" not in short


@pytest.mark.parametrize(("flags", "says"), [
    (["--run-dir", ""], "run_dir: an empty path"),
    (["--run-dir", "x" * 300], "run_dir: the path is too long"),
])
def test_run_dir_paths_are_checked_before_anything_starts(tmp_path, capsys, monkeypatch, flags, says):
    monkeypatch.chdir(tmp_path)
    assert cli.main([*TRAIN, "--max-rounds", "1", *flags]) == 2
    assert says in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []


# -- eval: code a run dir names is not imported from the current folder unasked ---------------------------------
def test_eval_does_not_import_a_module_the_run_dir_ships(run, capsys, monkeypatch):
    marker = run / "ran"
    (run / "evilmod.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Env: pass\n")
    cfg = (run / "config.yaml").read_text().replace("env_id: CartPole-v1", "env_id: evilmod:Env")
    (run / "config.yaml").write_text(cfg)
    monkeypatch.chdir(run)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(run))])
    assert cli.main(["eval", "--run-dir", "."]) == 2
    err = _one_line(capsys)
    assert "--trust-run-code" in err and not marker.exists(), err
    monkeypatch.delitem(sys.modules, "evilmod", raising=False)
    assert cli.main(["eval", "--run-dir", ".", "--trust-run-code"]) == 2  # imported, then refused as no Env
    assert "not a gymnasium.Env subclass" in _one_line(capsys) and marker.exists()


def test_eval_seed_out_of_range_is_one_line(run, capsys):
    assert cli.main(["eval", "--run-dir", str(run), "--seed", "-1", "--episodes", "1"]) == 2
    assert "--seed: -1 must be in" in _one_line(capsys)


@pytest.mark.parametrize("tamper", ["non-number", "read-only"])
def test_plot_of_a_tampered_or_read_only_run_is_one_line(run, capsys, tamper):
    metrics = run / "metrics.csv"
    if tamper == "non-number":
        metrics.write_text(metrics.read_text().replace(",1,", ",one,", 1))
    else:
        (run / "plots" / "return.png").unlink(missing_ok=True)
        (run / "plots" / "return.png").mkdir(parents=True)  # as a read-only run dir (root ignores modes)
    assert cli.main(["plot", "--run-dir", str(run)]) == 2
    assert "plot: " in _one_line(capsys)


# -- replies: a size cap from the request, checked before decoding; eval replies hold what was asked ----------
def _forging_backend(forge):
    """A backend whose first attempt of each slot answers ``forge(request, key)`` (signed with the invocation's
    key, as a compromised function could), and whose retries answer as the rollout function does."""
    from collections import deque

    from minionsrl.backends.base import Backend, InvocationRecord, make_reply, reply_limit
    from minionsrl.function import rollout, wire

    class Forging(Backend):
        name = "forging"

        def __init__(self):
            self.key, self.queue, self.policy = wire.new_key(), deque(), b""

        def publish(self, blob):
            self.policy = blob
            return "p"

        def submit(self, requests):
            self.queue.extend(requests)

        def collect(self, timeout=None):
            if not self.queue:
                return []
            req = self.queue.popleft()
            data = forge(req, wire.invocation_key(self.key, req.id)) if req.attempt == 0 else \
                rollout.handle(req.encode(), lambda ref: self.policy, self.key)
            record = InvocationRecord(invocation_id=req.id, kind=req.kind, duration_s=1.0)
            return [make_reply(record, data, self.key, max_bytes=reply_limit(req))]

        def cancel(self, ids=None):
            return []

        @property
        def in_flight(self):
            return len(self.queue)

        def close(self):
            pass

    return Forging()


def _requests():
    from minionsrl.function.envs import EnvSpec
    from minionsrl.function.faults import FaultPlan
    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.loop.sampler import Requests

    arch = PolicyArch(4, 2, True, (8,))
    return arch, Requests(EnvSpec("CartPole-v1"), 1, 0.99, FaultPlan({}, 0), arch)


def _gather_forged(forge, kind: str):
    """One slot run through a backend that forges its first reply: the forged attempt's record, and the
    result the retry gave."""
    from test_trust import _snapshot

    from minionsrl.function.fragment import Fragment
    from minionsrl.loop.retry import RetryPolicy, run_group
    from minionsrl.loop.sampler import eval_returns

    arch, requests = _requests()
    backend = _forging_backend(forge)
    ref = backend.publish(_snapshot().encode(backend.key))
    if kind == "train":
        def make(slot, attempt):
            return requests.make("train", ref, 1, slot, attempt, steps=8, )

        def validate(request, reply):
            return Fragment.many_from_wire(reply.arrays, reply.meta, request.steps, arch)
    else:
        def make(slot, attempt):
            return requests.make("eval", ref, 1, slot, attempt, episodes=2)
        validate = eval_returns
    got = run_group(backend, 1, make, validate, RetryPolicy(max_retries=2))
    first, *rest = got.attempts
    return first.reply.record, first.status, got.results, len(rest)


def test_a_reply_over_its_requests_size_cap_is_refused_before_decoding_and_retried(monkeypatch):
    from minionsrl.function import wire

    decoded = []
    real_decode = wire.decode
    monkeypatch.setattr(wire, "decode", lambda data, key: decoded.append(len(data)) or real_decode(data, key))

    def forge(request, key):  # a well-formed, signed reply padded with an array of 4 MB
        return wire.encode({"obs": np.zeros((1 << 20,), np.float32)}, {"id": request.id, "type": "fragment"}, key)

    record, status, results, retries = _gather_forged(forge, "train")
    assert status == "failed" and record.error.startswith("bad reply: 4194") and "-byte cap its request" in \
        record.error, record.error
    assert record.bytes_out > 4 << 20 and all(size < 1 << 22 for size in decoded)  # the forged one never decoded
    assert retries == 1 and results[0][0].obs.shape == (8, 4)  # the retry's fragment was accepted


def test_the_reply_cap_holds_real_replies_with_room():

    from test_trust import _snapshot

    from minionsrl.backends.base import InvocationRecord, make_reply, reply_limit
    from minionsrl.function import rollout, wire
    from minionsrl.loop.sampler import reply_cap

    arch, requests = _requests()
    key = wire.new_key()
    blob = _snapshot().encode(key)
    for kind, extra in (("train", {"steps": 64}), ("eval", {"episodes": 3})):
        request = requests.make(kind, "p", 1, 0, 0, **extra)
        data = rollout.handle(request.encode(), lambda ref: blob, key)
        cap = reply_limit(request)
        assert cap == reply_cap(arch, kind, steps=extra.get("steps", 0), episodes=extra.get("episodes", 0))
        assert len(data) < cap / 2, (kind, len(data), cap)
        assert make_reply(InvocationRecord(request.id, kind), data, key, max_bytes=cap).ok
    image = type(arch)(28224, 6, True, (), net="cnn", obs_shape=(4, 84, 84))
    assert 2 * 128 * 28224 < reply_cap(image, "train", steps=128) < 16 << 20  # Atari: 128 frames, a few MB


@pytest.mark.parametrize(("change", "says"), [
    (lambda a, m: a.update(extra=np.zeros(3)), "unexpected arrays ['extra']"),
    (lambda a, m: a.update(episode_lengths=np.array([5, -3], np.int64)), "lengths hold -3"),
    (lambda a, m: a.update(episode_lengths=np.array([5, 3], np.float64)), "lengths (int64)"),
    (lambda a, m: a.update(episode_returns=np.array([1.0])), "does not hold 2 episode returns"),
    (lambda a, m: m.update(type="fragment"), "of type 'fragment'"),
])
def test_an_eval_reply_with_extra_arrays_or_bad_lengths_is_a_failed_attempt_retried(change, says):
    from minionsrl.function import wire

    def forge(request, key):
        arrays = {"episode_returns": np.array([10.0, 12.0]), "episode_lengths": np.array([10, 12], np.int64)}
        meta = {"id": request.id, "type": "eval"}
        change(arrays, meta)
        return wire.encode(arrays, meta, key)

    record, status, results, retries = _gather_forged(forge, "eval")
    assert status == "failed" and record.error.startswith("malformed reply: ") and says in record.error, record.error
    assert retries == 1 and results[0].shape == (2,)


def test_the_local_backend_refuses_an_oversized_reply_unread_and_replaces_the_instance():
    from test_trust import _request, _snapshot

    from minionsrl.backends.local import LocalBackend
    from minionsrl.function import wire

    key = wire.new_key()
    with LocalBackend(key, max_concurrency=1) as backend:
        ref = backend.publish(_snapshot().encode(key))
        (refused,) = backend.invoke([_request("r1-train-0", policy=ref, max_reply_bytes=100)], deadline_s=60)
        assert refused.record.status == "failed" and "over the 100-byte cap" in refused.record.error
        assert refused.record.bytes_out > 100 and backend.instance_ids == []  # stopped: its pipe was out of step
        (accepted,) = backend.invoke([_request("r1-train-0-a1", policy=ref)], deadline_s=60)
        assert accepted.ok, accepted.record.error


# -- shutdown: SIGTERM ends a run as Ctrl-C does; nothing is left behind ---------------------------------------
def _start_run(run: Path, env: dict, *extra: str) -> subprocess.Popen:
    """A CLI run that goes on until stopped (a slow env), started in its own session."""
    args = [sys.executable, "-m", "minionsrl", *TRAIN, "--max-rounds", "100000", "--env-step-latency-ms", "5",
            "--run-dir", str(run), *extra]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True,
                            start_new_session=True)


def _wait_for_rounds(proc: subprocess.Popen, run: Path, timeout_s: float) -> None:
    import time

    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            pytest.fail(f"the run ended by itself: {proc.stderr.read()}")
        metrics = run / "metrics.csv"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            return
        time.sleep(0.2)
    proc.kill()
    pytest.fail("the run made no two rounds in time")


def _local_dirs(pid: int) -> list[Path]:
    import tempfile

    return list(Path(tempfile.gettempdir()).glob(f"minionsrl-local-{pid}-*"))


@pytest.mark.integration
def test_sigterm_ends_a_local_run_with_one_line_and_removes_its_temp_folder(tmp_path, subprocess_env):
    import signal

    run = tmp_path / "run"
    proc = _start_run(run, subprocess_env)
    try:
        _wait_for_rounds(proc, run, 120)
        assert _local_dirs(proc.pid)  # the backend's folder, while it runs
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1].strip()
    finally:
        proc.kill()
    assert (proc.returncode, err) == (143, f"minionsrl: terminated (SIGTERM); continue with --resume --run-dir {run}")
    assert _local_dirs(proc.pid) == []
    assert checkpoint.load(run / "checkpoints")["round"] >= 1  # and it resumes from there


def test_the_local_backends_folder_goes_when_it_is_dropped_unclosed(key):
    import gc

    from minionsrl.backends.local import LocalBackend

    backend = LocalBackend(key, max_concurrency=1)
    folder = backend._dir
    assert folder.is_dir()
    del backend
    gc.collect()
    assert not folder.exists()


def _ray_run(tmp_path, subprocess_env):
    pytest.importorskip("ray")
    psutil = pytest.importorskip("psutil")
    run = tmp_path / "run"
    proc = _start_run(run, subprocess_env, "--backend", "ray", "--actors", "2")
    _wait_for_rounds(proc, run, 240)
    learner = psutil.Process(proc.pid)
    cluster = learner.children(recursive=True)  # the private cluster's processes, and its watchdog
    assert any("raylet" in command_line(p) for p in cluster) and any("Agent" in command_line(p) for p in cluster)
    return proc, run, cluster


def _gone_within(procs, seconds: float) -> list:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        left = [p for p in procs if alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return left


@pytest.mark.slow
def test_sigterm_ends_a_ray_run_quietly(tmp_path, subprocess_env):
    import signal

    proc, run, cluster = _ray_run(tmp_path, subprocess_env)
    try:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1].strip()
    finally:
        proc.kill()
    # the whole of stderr on a failure: it exited 1 here twice in full-suite runs, printing a line of Ray's own
    # ("[2026-12-…"), which pytest's comparison cut short; not reproduced alone or beside two busy loops
    expected = f"minionsrl: terminated (SIGTERM); continue with --resume --run-dir {run}"
    assert (proc.returncode, err) == (143, expected), f"rc {proc.returncode}, stderr:\n{err}"
    assert _gone_within(cluster, 10) == []


@pytest.mark.slow
def test_a_sigkilled_ray_learners_cluster_is_gone_within_seconds(tmp_path, subprocess_env):
    """Ray's head processes die with the learner (PR_SET_PDEATHSIG); its agents, the raylet's children, took a
    minute before the watchdog, holding loopback ports."""
    import signal

    proc, _, cluster = _ray_run(tmp_path, subprocess_env)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    left = _gone_within(cluster, 10)
    for p in left:
        p.kill()
    assert left == []


# -- more tracebacks that are one line now ---------------------------------------------------------------------
def test_resume_refuses_a_non_number_in_a_metrics_column(run, capsys):
    metrics = run / "metrics.csv"
    header, row, *rest = metrics.read_text().splitlines()
    fields = row.split(",")
    fields[header.split(",").index("eval_return_mean")] = "abc"
    metrics.write_text("\n".join([header, ",".join(fields), *rest]) + "\n")
    before = metrics.read_bytes()
    err = _resume(run, capsys, "--max-rounds", "2")
    assert "metrics.csv: round 1 holds 'abc' in column 'eval_return_mean', not a number" in err, err
    assert metrics.read_bytes() == before


@pytest.mark.integration
def test_a_prices_file_without_vcpus_works_with_the_server_backend(tmp_path, capsys):
    from importlib import resources

    prices = tmp_path / "prices.yaml"
    shipped = resources.files("minionsrl").joinpath("data", "prices.yaml").read_text()
    prices.write_text(shipped.replace("vcpus: 16, ", ""))
    assert "vcpus: 16" not in prices.read_text()
    assert cli.main([*TRAIN, "--max-rounds", "1", "--backend", "server", "--prices", str(prices),
                     "--run-dir", str(tmp_path / "run")]) == 0  # 16 actors a host, as the ledger bills it


@pytest.mark.parametrize("command", ["plot", "eval"])
def test_an_empty_run_dir_is_refused_by_plot_and_eval(tmp_path, capsys, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    assert cli.main([command, "--run-dir", ""]) == 2
    assert "--run-dir: an empty path" in _one_line(capsys)
    assert list(tmp_path.iterdir()) == []
