"""Robustness: bad input, hostile input and badly behaved envs and platforms, and a chaos run (docs/RELIABILITY.md,
a section each).

    .venv/bin/python bench/robustness.py [hostile] [--no-ray] [--markdown] [--rows all|22|41]
    .venv/bin/python bench/robustness.py bad-input
    .venv/bin/python bench/robustness.py chaos [--rounds 30] [--fault-rate 0.2] [--kills 3]

``hostile``: Hostile input (issue 22) and badly behaved envs and platforms (issue 41): every row of both issues' tables
replayed, and what each gets now.

Each case runs ``python -m minionsrl ...`` in a scratch folder of its own (the run dir is ``RUN`` inside it;
a victim file beside it is what a link in the run dir points at), or, for the rows about replies, calls the
backend's reply check in this process. Per case it prints the exit code, whether stderr is one line, whether
it holds a traceback, whether any file outside the run dir was touched (every file of the scratch folder
outside ``RUN``, by content and mtime) and whether the checkpoint is intact (its bytes unchanged, where one was
there before). Small cases: CartPole-v1, one or two rounds of one actor (two for Ray), 16 steps.

    .venv/bin/python bench/robustness.py hostile [--no-ray] [--markdown] [--rows all|22|41]

Issue 41's rows (``--rows 41``) run envs of ``tests/hostile_envs.py`` that hang, never end an episode or start a
simulator process, with default deadline flags, and count the processes left behind (the backend's workers and
the envs' simulators) once each case is over.

The tmpfs row (a 2 MB tmpfs filled while TensorBoard writes) needs root and CAP_SYS_ADMIN to mount; where
mounting is refused it is reported as skipped.

``bad-input``: Bad input: every case of tests/bad_inputs.py is run through ``minionsrl train`` and the exact error it
gets is tabled in docs/results/bad-input.md (docs/RELIABILITY.md gives one case of each kind), so the table stays
true. tests/test_bad_input.py runs the same cases and checks each is one line on stderr, exit code 2, naming its field.

    .venv/bin/python bench/robustness.py bad-input

``chaos``: Chaos run: Hopper-v5 through function faults and learner kills, checked against a fault-free run.

One command, run from the repository root:

    .venv/bin/python bench/robustness.py chaos [--rounds 30] [--fault-rate 0.2] [--kills 3]

1. A fault-free reference: ``minionsrl train`` on Hopper-v5 for ``--rounds`` rounds.
2. The same command with ``--fault-rate`` of invocation attempts failing in mixed ways (raise, hang, SIGKILL of
   the instance, reply delivered twice, corrupted reply, call refused by the platform (throttled), allocation
   past the function's memory (out of memory)), the learner SIGKILLed ``--kills`` times — the first
   in the middle of writing a checkpoint (the checkpoint module's test hook stops it half-written), the others
   mid-round — and restarted with ``--resume`` each time.
3. The chaos run's outputs against the reference: rounds completed, invocations lost vs retried, batches
   corrupted (an accepted fragment whose digest differs from the reference's for the same round and slot),
   the learning curve, and the ledger totals against the sum of metrics.csv rows.

The table goes into docs/RELIABILITY.md (section ``chaos``); the runs stay in bench/out/chaos/.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from common import OUT, PYTHON, ROOT, log, markdown_table, provenance, run_modes, write_section

from minionsrl.loop import checkpoint
from minionsrl.loop.metrics import LEARNING_COLUMNS, read_rows

sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from run_dir_tools import set_at  # noqa: E402  (the tests' tampering, shared)

# -P: the current folder is not put on sys.path, as with the installed `minionsrl` command (`python -m` puts it
# there, so `cd RUN && python -m minionsrl eval` imports what RUN ships: Python's doing, not the command's)
PY = ["-P", "-m"]


# -- hostile (was hostile.py) ---------------------------------------------------


TRAIN = ["train", "--actors", "1", "--fragment-length", "16", "--eval-every", "0", "--eval-episodes", "1",
         "--hidden-sizes", "8", "--no-progress", "--no-tensorboard", "--checkpoint-every", "1"]
CKPT = Path("checkpoints/latest.safetensors")


@dataclass
class Outcome:
    row: str
    case: str
    before: str
    exit: str = "—"
    one_line: str = "—"
    traceback: str = "—"
    outside: str = "—"
    checkpoint: str = "—"
    says: str = ""
    left: str = "—"  # processes left behind (workers, simulators) once the case is over


def _env() -> dict[str, str]:
    path = [str(ROOT), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def _cli(args: list[str], cwd: Path, timeout: float = 240) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, *PY, "minionsrl", *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stderr


def _snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """Every file of ``folder`` outside its run dir ``RUN``: (sha256, mtime_ns)."""
    out = {}
    for root, dirs, names in os.walk(folder):
        if Path(root) == folder and "RUN" in dirs:
            dirs.remove("RUN")
        for name in names:
            path = Path(root, name)
            if path.is_symlink() or not path.is_file():
                continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(folder))] = (digest, path.stat().st_mtime_ns)
    return out


def _judge(outcome: Outcome, code: int, err: str) -> Outcome:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    outcome.exit = str(code)
    ran = code == 0 and not lines
    outcome.one_line = "yes" if len(lines) == 1 else "— (ran)" if ran else f"no ({len(lines)} lines)"
    outcome.traceback = "yes" if "Traceback" in err or "SIGTERM received" in err else "no"
    outcome.says = (lines[0] if lines else "").replace("|", "\\|")[:160]
    return outcome


class Scratch:
    """A scratch folder holding a copy of the base run as ``RUN`` and a victim file beside it."""

    def __init__(self, base: Path | None, root: Path, name: str) -> None:
        self.dir = root / name
        self.dir.mkdir()
        self.run = self.dir / "RUN"
        if base is not None:
            shutil.copytree(base, self.run, symlinks=True)
        self.victim = self.dir / "victim.txt"
        self.victim.write_text("precious")

    def start(self) -> None:
        self.outside = _snapshot(self.dir)
        path = self.run / CKPT
        self.ckpt = path.read_bytes() if path.is_file() and not path.is_symlink() else None

    def finish(self, outcome: Outcome, code: int, err: str) -> Outcome:
        _judge(outcome, code, err)
        changed = [k for k, v in _snapshot(self.dir).items() if self.outside.get(k) != v]
        changed += [k for k in self.outside if not (self.dir / k).exists()]
        outcome.outside = "no" if not changed else "YES: " + ", ".join(changed[:3])
        if self.ckpt is not None:
            path = self.run / CKPT
            outcome.checkpoint = "yes" if path.is_file() and path.read_bytes() == self.ckpt else "NO"
        return outcome


def _cli_case(base, root, row, case, before, args, prepare=None, cwd_run=False) -> Outcome:
    scratch = Scratch(base, root, f"c{len(list(root.iterdir()))}")
    if prepare is not None:
        prepare(scratch)
    scratch.start()
    args = [a.replace("{RUN}", str(scratch.run)).replace("{DIR}", str(scratch.dir)) for a in args]
    code, err = _cli(args, scratch.run if cwd_run else scratch.dir)
    return scratch.finish(Outcome(row, case, before), code, err)


# -- preparing cases -------------------------------------------------------------------------------------------
def _link(name: str):
    def prepare(s: Scratch) -> None:
        (s.run / name).unlink(missing_ok=True)
        (s.run / name).symlink_to(s.victim)
    return prepare


def _tamper(change):
    def prepare(s: Scratch) -> None:
        from minionsrl.loop import checkpoint

        state = checkpoint.load(s.run / "checkpoints")
        change(state)
        checkpoint.save(s.run / "checkpoints", state)
    return prepare


def _bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "env_kwargs:\n  " + "\n  ".join(lines) + "\n"


def _write(name: str, text: str | bytes):
    def prepare(s: Scratch) -> None:
        (s.dir / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return prepare


def _metrics_non_number(s: Scratch) -> None:
    metrics = s.run / "metrics.csv"
    header, row, *rest = metrics.read_text().splitlines()
    fields = row.split(",")
    fields[header.split(",").index("eval_return_mean")] = "abc"
    metrics.write_text("\n".join([header, ",".join(fields), *rest]) + "\n")


def _evilmod(s: Scratch) -> None:
    (s.run / "evilmod.py").write_text(f"open({str(s.dir / 'ran')!r}, 'w').close()\nclass Env: pass\n")
    cfg = s.run / "config.yaml"
    cfg.write_text(cfg.read_text().replace("env_id: CartPole-v1", "env_id: evilmod:Env"))


def _prices_without_vcpus(s: Scratch) -> None:
    from importlib import resources

    text = resources.files("minionsrl").joinpath("data", "prices.yaml").read_text()
    (s.dir / "prices.yaml").write_text(text.replace("vcpus: 16, ", ""))


def _read_only_plots(s: Scratch) -> None:
    plot = s.run / "plots" / "return.png"
    plot.unlink(missing_ok=True)
    plot.mkdir(parents=True)  # a folder where the plot goes: as a read-only run dir (root ignores modes)


def _special(kind: str):
    def prepare(s: Scratch) -> None:
        path = s.run / CKPT
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")
    return prepare


# -- rows that are about replies: the backend's own check, in this process ----------------------------------
def _reply_cases() -> list[Outcome]:
    from minionsrl.backends.base import InvocationRecord, make_reply
    from minionsrl.function import wire
    from minionsrl.function.envs import EnvSpec
    from minionsrl.function.faults import FaultPlan
    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.loop.retry import Tracker
    from minionsrl.loop.sampler import Requests, eval_returns

    key = wire.new_key()
    out = []
    for value in ("abc", float("nan"), -1.0, 1e12):
        meta = {"id": "r1-train-0", "type": "fragment", "timings": {"run_s": value}}
        reply = make_reply(InvocationRecord("r1-train-0", "train", duration_s=1.0),
                           wire.encode({}, meta, wire.invocation_key(key, "r1-train-0")), key)
        out.append(Outcome("forged reply timings", f"`timings.run_s` {value!r}",
                           "traceback in the ledger, or billed as given",
                           says=f"{reply.record.status}: {reply.record.error}"))
    arch = PolicyArch(4, 2, True, (8,))
    requests = Requests(EnvSpec("CartPole-v1"), 1, 0.99, FaultPlan({}, 0), arch)
    request = requests.make("train", "p", 1, 0, 0, steps=16, )
    t0 = time.perf_counter()
    big = wire.encode({"obs": np.zeros(50 << 20, np.float32)}, {"id": request.id},
                      wire.invocation_key(key, request.id))
    reply = make_reply(InvocationRecord(request.id, "train"), big, key, max_bytes=request.max_reply_bytes)
    out.append(Outcome("quirks: reply size", "a 200 MB reply to a 16-step CartPole request", "decoded (200 MB) "
                       "before refusal", says=f"{reply.record.status} in {time.perf_counter() - t0:.2f} s (encoding "
                       f"included): {reply.record.error}"))
    eval_req = requests.make("eval", "p", 1, 0, 0, episodes=2)
    for case, arrays in (("an extra array", {"extra": np.zeros(3)}),
                         ("a negative length", {"episode_lengths": np.array([5, -3], np.int64)})):
        full = {"episode_returns": np.array([1.0, 2.0]), "episode_lengths": np.array([5, 3], np.int64), **arrays}
        data = wire.encode(full, {"id": eval_req.id, "type": "eval"}, wire.invocation_key(key, eval_req.id))
        reply = make_reply(InvocationRecord(eval_req.id, "eval"), data, key, max_bytes=eval_req.max_reply_bytes)
        tracker = Tracker(None)  # type: ignore[arg-type]
        tracker.flying[eval_req.id] = (0, 0, eval_req)
        attempt = tracker.receive(reply, eval_returns)
        out.append(Outcome("quirks: eval replies", f"an eval reply with {case}", "accepted",
                           says=f"{attempt.status} (retried): {attempt.reply.record.error}"))
    for o in out:
        o.exit = "— (a failed attempt)"
    return out


# -- shutdown -------------------------------------------------------------------------------------------------
def _start(run: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, *PY, "minionsrl", *TRAIN, "--max-rounds", "100000", "--env-step-latency-ms", "5",
            "--run-dir", str(run), *extra]
    return subprocess.Popen(args, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _rounds(proc: subprocess.Popen, run: Path, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        metrics = run / "metrics.csv"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            return True
        time.sleep(0.2)
    return False


def _shutdown_cases(root: Path, ray: bool) -> list[Outcome]:
    import psutil

    out = []
    run = root / "local-term" / "RUN"
    run.parent.mkdir()
    proc = _start(run)
    if _rounds(proc, run, 120):
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
        left = list(Path(tempfile.gettempdir()).glob(f"minionsrl-local-{proc.pid}-*"))
        o = _judge(Outcome("shutdown", "SIGTERM, local backend", "`/tmp/minionsrl-local-PID-*` left until the next "
                           "run"), proc.returncode, err)
        o.outside = "no" if not left else f"YES: {left[0]} left"
        out.append(o)
    else:
        proc.kill()
    if not ray:
        return out
    for sig in (signal.SIGTERM, signal.SIGKILL):
        run = root / f"ray-{sig.name}" / "RUN"
        run.parent.mkdir()
        proc = _start(run, "--backend", "ray", "--actors", "2")
        if not _rounds(proc, run, 300):
            proc.kill()
            out.append(Outcome("shutdown", f"{sig.name}, Ray backend", "", says="the run did not start"))
            continue
        cluster = [p for p in psutil.Process(proc.pid).children(recursive=True)
                   if "import json, signal" not in " ".join(p.cmdline())]
        t0 = time.monotonic()
        proc.send_signal(sig)
        err = proc.communicate(timeout=120)[1]
        while time.monotonic() - t0 < 90 and any(p.is_running() and p.status() != "zombie" for p in cluster):
            time.sleep(0.2)
        gone_s = time.monotonic() - t0
        before = ("a C++ stack dump" if sig == signal.SIGTERM else
                  "two Ray agents hold 4 loopback ports for about a minute")
        o = _judge(Outcome("shutdown", f"{sig.name}, Ray backend", before), proc.returncode, err)
        if sig == signal.SIGKILL:
            o.one_line = o.traceback = "— (killed)"
        o.says = (o.says + "; " if o.says else "") + f"all {len(cluster)} cluster processes gone {gone_s:.1f} s after"
        out.append(o)
    return out


def _tmpfs_case(base: Path, root: Path) -> Outcome:
    o = Outcome("full disk", "2 MB tmpfs filled while TensorBoard writes", "the writer thread dies, the learner "
                "blocks for ever; no checkpoint")
    mnt = root / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        o.says = "skipped: mounting a tmpfs is not allowed here (needs root and CAP_SYS_ADMIN)"
        return o
    try:
        run = mnt / "RUN"
        code, err = _cli([*TRAIN, "--max-rounds", "1", "--run-dir", str(run)], mnt)
        before = (run / CKPT).read_bytes()
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            os.ftruncate(fd, os.fstat(fd).st_size - 48 * 1024)
        os.close(fd)
        code, err = _cli(["train", "--resume", "--run-dir", str(run), "--max-rounds", "30", "--no-progress",
                          "--tensorboard"], mnt)
        _judge(o, code, err)
        from minionsrl.loop import checkpoint

        state = checkpoint.load(run / "checkpoints")
        o.checkpoint = "yes" if state is not None and (state["round"] > 1 or (run / CKPT).read_bytes() == before) \
            else "NO"
        o.outside = "no"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)
    return o


# -- issue 41: badly behaved envs, default deadlines, nothing left behind -----------------------------------------
HOSTILE_ENVS = ROOT / "tests"  # hostile_envs.py, importable by the functions
SIMULATOR = "time.sleep(3600.0)"  # the command line of hostile_envs.SimulatorEnv's child process
WORKER = "minionsrl.backends.local_worker"


def _env41(tmp: Path) -> dict[str, str]:
    env = _env()
    return {**env, "PYTHONPATH": os.pathsep.join([str(HOSTILE_ENVS), env["PYTHONPATH"]]), "TMPDIR": str(tmp)}


def _ours(tmp: Path) -> list[int]:
    """The workers and simulators of this case's processes (they see ``TMPDIR=tmp``)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline", "environ", "status"]):
        with contextlib.suppress(psutil.Error, TypeError):
            line = " ".join(proc.info["cmdline"] or [])
            if (WORKER in line or SIMULATOR in line) and proc.info["status"] != psutil.STATUS_ZOMBIE \
                    and (proc.info["environ"] or {}).get("TMPDIR") == str(tmp):
                found.append(proc.pid)
    return found


def _left(tmp: Path, within_s: float = 10.0) -> str:
    """Processes of the case still running ``within_s`` after it ended (a watcher notices its learner's death
    within half a second), and the temp folders it left (and whether the next learner's sweep removes them)."""
    from minionsrl.backends.tempdirs import sweep

    end = time.monotonic() + within_s
    while _ours(tmp) and time.monotonic() < end:
        time.sleep(0.2)
    procs, folders = len(_ours(tmp)), list(tmp.glob("minionsrl-local-*"))
    if procs:
        return f"YES: {procs} processes"
    if not folders:
        return "none"
    before, tempfile.tempdir = tempfile.tempdir, str(tmp)
    try:
        swept = len(sweep("minionsrl-local-"))
    finally:
        tempfile.tempdir = before
    return f"none; its temp folder, which the next learner removed ({swept} of {len(folders)})"


def _train41(run: Path, env_id: str, kwargs: dict | None = None, *extra: str) -> list[str]:
    return [sys.executable, *PY, "minionsrl", *TRAIN, "--env-id", env_id, "--env-kwargs", json.dumps(kwargs or {}),
            "--run-dir", str(run), *extra]


def _case41(root: Path, row: str, case: str, before: str, env_id: str, kwargs: dict | None = None,
            extra: tuple[str, ...] = (), after_two_rounds=None, timeout: float = 400, note=None) -> Outcome:
    """One CLI run of a hostile env; ``after_two_rounds(proc, folder)`` acts once it made two rounds."""
    folder = root / f"r41-{len(list(root.iterdir()))}"
    (folder / "pids").mkdir(parents=True)  # where a simulator env notes its simulators
    run = folder / "RUN"
    kwargs = {k: str(v).replace("{DIR}", str(folder)) for k, v in (kwargs or {}).items()}
    t0 = time.monotonic()
    proc = subprocess.Popen(_train41(run, env_id, kwargs, *extra), env=_env41(folder), cwd=folder,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    if after_two_rounds is not None:
        if not _rounds(proc, run, 120):
            proc.kill()
            return Outcome(row, case, before, says="the run did not make two rounds")
        t0 = time.monotonic()
        after_two_rounds(proc, folder)
    try:
        err = proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        err = proc.communicate()[1]
        return Outcome(row, case, before, exit="hung", says=f"still running after {timeout:g} s", left=_left(folder))
    took = time.monotonic() - t0
    o = _judge(Outcome(row, case, before), proc.returncode, err)
    line = err.strip().splitlines()[0] if err.strip() else ""
    said = line if len(line) <= 300 else f"{line[:120]} […] {line[-170:]}"  # the end says where it hung
    o.says = f"after {took:.0f} s: " + (said.replace("|", "\\|") or (note(run) if note else "ran"))
    if proc.returncode == -signal.SIGKILL:
        o.one_line = o.traceback = "— (killed)"
    o.left = _left(folder)
    return o


def _eval_note(run: Path) -> str:
    import csv

    with open(run / "metrics.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("eval_return_mean")]
    return f"ran; evaluation episodes cut at 27,000 steps: eval return {rows[-1]['eval_return_mean']}" if rows else \
        "ran; no evaluation row"


def _touch(name: str):
    def act(proc: subprocess.Popen, folder: Path) -> None:
        (folder / name).touch()
    return act


def _kill_learner(proc: subprocess.Popen, folder: Path) -> None:
    (folder / "hang").touch()
    end = time.monotonic() + 30  # until a worker is inside the hung step
    while time.monotonic() < end and not list(folder.glob("pids/*")):
        time.sleep(0.1)
    time.sleep(1.0)
    proc.kill()  # the learner alone, not its group: its workers are in sessions of their own


def _namespace_case(root: Path) -> Outcome:
    """A learner in another PID namespace runs; a second one starts here, then ends."""
    o = Outcome("temp folders", "a learner in another PID namespace (`unshare --pid`) runs; another starts here",
                "the starting learner deletes the live one's policy folder; it dies at its next publish with a "
                "45-line FileNotFoundError")
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--pid", "--fork", "true"], capture_output=True).returncode:
        o.says = "skipped: no PID namespace allowed here"
        return o
    folder = root / "r41-ns"
    folder.mkdir()
    victim_run = folder / "VICTIM"
    victim = subprocess.Popen([unshare, "--pid", "--fork", "--kill-child", sys.executable, *PY, "minionsrl", *TRAIN,
                               "--max-rounds", "100000", "--env-step-latency-ms", "5", "--run-dir", str(victim_run)],
                              env=_env41(folder), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        if not _rounds(victim, victim_run, 120):
            o.says = "the learner in the namespace did not start"
            return o
        code = subprocess.run([sys.executable, *PY, "minionsrl", *TRAIN, "--max-rounds", "2", "--run-dir",
                               str(folder / "RUN")], env=_env41(folder), capture_output=True, timeout=240).returncode
        rounds = len((victim_run / "metrics.csv").read_text().splitlines())
        time.sleep(3.0)
        alive = victim.poll() is None and len((victim_run / "metrics.csv").read_text().splitlines()) > rounds
        o.exit, o.one_line, o.traceback = str(code), "— (ran)", "no"
        o.says = ("the learner in the namespace kept its folder and went on training" if alive else
                  f"the learner in the namespace stopped: {victim.stderr.read()[-160:] if victim.poll() else ''}")
    finally:
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
    o.left = "—"
    return o


def _raylet_case(root: Path) -> Outcome:
    """The private Ray cluster's raylet SIGKILLed mid-run."""
    import psutil

    o = Outcome("lost raylet", "kill -9 of the private Ray cluster's raylet mid-run",
                "exit 1 within 1 s, empty stderr, Ray's 22-line dump on stdout, the token folder left")
    folder = root / "r41-raylet"
    folder.mkdir()
    run = folder / "RUN"
    proc = subprocess.Popen([sys.executable, *PY, "minionsrl", *TRAIN, "--backend", "ray", "--actors", "2",
                             "--max-rounds", "100000", "--env-step-latency-ms", "5", "--run-dir", str(run)],
                            env=_env41(folder), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    if not _rounds(proc, run, 300):
        os.killpg(proc.pid, signal.SIGKILL)
        o.says = "the run did not start"
        return o
    family = psutil.Process(proc.pid).children(recursive=True)
    cluster = [(p, p.create_time()) for p in family]
    next(p for p in family if p.name() == "raylet").kill()
    out, err = proc.communicate(timeout=120)
    end = time.monotonic() + 15
    while (left := [p for p, t in cluster if p.is_running() and p.create_time() == t
                    and p.status() != psutil.STATUS_ZOMBIE]) and time.monotonic() < end:
        time.sleep(0.2)
    _judge(o, proc.returncode, err)
    tokens = list(folder.glob("minionsrl-ray-token-*"))
    o.left = "none" if not left and not tokens else f"YES: {len(left)} processes, {len(tokens)} token folders"
    o.says += f" (stdout: {len(out.strip().splitlines())} lines)"
    return o


def _lithops_cases(root: Path) -> list[Outcome]:
    """A real `train --backend lithops` whose storage loses round 2's policy object once (overwritten), or every
    policy from round 2 on (deleted): tests/test_remote_platform_faults.py's storage wrapper and script."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_remote_platform_faults import _LOSING_TRAIN

    out = []
    for mode, times, case, before in (
            ("garbage", 1, "round 2's `policy-N` object overwritten in storage once",
             "never re-published: every retry reads the same bad object, the run ends; 287 stderr lines"),
            ("delete", -1, "every policy object deleted from round 2 on",
             "the run ends with 39 lines of Lithops tracebacks beside its line")):
        folder = root / f"r41-lithops-{mode}"
        folder.mkdir()
        run = folder / "RUN"
        proc = subprocess.run([sys.executable, "-c", _LOSING_TRAIN, mode, str(times), "1", *TRAIN, "--backend",
                               "lithops", "--actors", "2", "--max-rounds", "3", "--run-dir", str(run)],
                              env=_env41(folder), capture_output=True, text=True, timeout=300)
        o = _judge(Outcome("lost storage object", case, before), proc.returncode, proc.stderr)
        if proc.returncode == 0:
            o.says = "ran: the policy re-published once, the round went on"
        out.append(o)
    return out


def _issue41_cases(root: Path, ray: bool = True) -> list[Outcome]:
    hang_later = {"flag": "{DIR}/hang"}
    sim = {"pids": "{DIR}/pids", "hang": "{DIR}/hang"}
    rows = [_namespace_case(root)]

    rows.append(_case41(root, "deadlines by default", "`step` hangs mid-run, default flags (`--max-retries 0`)",
                        "nothing printed, for ever", "hostile_envs:HangingStepEnv", hang_later,
                        ("--max-rounds", "100000", "--max-retries", "0"), after_two_rounds=_touch("hang")))
    rows.append(_case41(root, "deadlines by default", "`__init__` never returns, default flags",
                        "nothing printed, for ever (the learner's own env check hangs)", "hostile_envs:HangingInitEnv"))
    rows.append(_case41(root, "deadlines by default", "an episode that never ends, evaluated, default flags",
                        "nothing printed, for ever", "hostile_envs:EndlessEnv", None,
                        ("--max-rounds", "2", "--eval-every", "1"), note=_eval_note))
    for case, before, extra, act in (
            ("kill -9 of the learner while its workers are inside a hung `step`",
             "both workers live on with PPID 1, for ever", ("--max-rounds", "100000"), _kill_learner),
            ("an env that starts a simulator, a clean run", "one orphan simulator per worker",
             ("--max-rounds", "3", "--actors", "2"), None),
            ("an env that starts a simulator, its instance killed at the deadline",
             "one more orphan per killed instance", ("--max-rounds", "100000", "--invocation-timeout-s", "5",
                                                     "--max-retries", "0"), _touch("hang"))):
        rows.append(_case41(root, "nothing outlives the run", case, before, "hostile_envs:SimulatorEnv", sim, extra,
                            after_two_rounds=act, timeout=200))
    if ray:
        rows.append(_raylet_case(root))
    return rows + _lithops_cases(root)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray shutdown rows (a minute or two)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown (docs/RELIABILITY.md)")
    parser.add_argument("--rows", choices=("all", "22", "41"), default="all", help="which issue's rows to replay")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    root = Path(tempfile.mkdtemp(prefix="minionsrl-hostile-"))
    try:
        if args.rows == "41":
            rows = _issue41_cases(root, ray=not args.no_ray)
            return _print(rows, args.markdown, t0)
        base = root / "base"
        code, err = _cli([*TRAIN, "--max-rounds", "1", "--run-dir", str(base)], root)
        if code != 0:
            print(f"the base run failed: {err}", file=sys.stderr)
            return 1
        cases = root / "cases"
        cases.mkdir()
        resume = ["train", "--resume", "--run-dir", "{RUN}", "--no-progress", "--max-rounds", "2"]
        rows: list[Outcome] = [_tmpfs_case(base, root)]
        for name in ("checkpoints/.latest.safetensors.tmp", ".config.yaml.tmp", "summary.json"):
            rows.append(_cli_case(base, cases, "crafted run dir", f"`--resume`, `{name}` a link to a file outside",
                                  "exit 0, the link's target overwritten", resume, _link(name)))
        for lr, before in (("1e30", "NaN weights checkpointed; the next round blames the functions"),
                           ("1e300", "exit 0 and a NaN checkpoint")):
            rows.append(_cli_case(None, cases, "diverging update", f"`--learning-rate {lr}`", before,
                                  [*TRAIN, "--max-rounds", "2", "--learning-rate", lr, "--run-dir", "{RUN}"]))
        for case, change in (("NaN optimiser state", set_at("optimizer/001", lambda a: np.full_like(a, np.nan))),
                             ("a missing weight key", set_at("policy/actor.0.weight", KeyError)),
                             ("a string where a tensor belongs", set_at("policy/actor.0.bias", "zeros")),
                             ("round −5", set_at("round", -5)),
                             ("a wrong shape", set_at("policy/critic.1.weight", lambda a: np.zeros((3, 3), a.dtype))),
                             ("a wrong dtype", set_at("policy/critic.1.bias", lambda a: a.astype(np.float64))),
                             ("a tampered ledger", set_at("ledger/total_serverless_usd", "abc"))):
            rows.append(_cli_case(base, cases, "checkpoint that parses but is wrong", f"`--resume`: {case}",
                                  "exit 0 with a NaN policy, or a traceback", resume, _tamper(change)))
        rows += _reply_cases()
        for levels, before in ((8, "> 40 s of CPU and 1.1 GB"), (6, "an 8.7 MB \"one-line\" error")):
            rows.append(_cli_case(None, cases, "YAML alias bomb", f"{levels} levels under `env_kwargs`", before,
                                  [*TRAIN, "--config", "{DIR}/bomb.yaml", "--run-dir", "{RUN}"],
                                  _write("bomb.yaml", _bomb(levels))))

        def bomb_in_run(s: Scratch) -> None:
            (s.run / "config.yaml").write_text((s.run / "config.yaml").read_text() + _bomb(8).replace(
                "env_kwargs:", "env_kwargs_x:"))
        rows.append(_cli_case(base, cases, "YAML alias bomb", "`eval` of a run dir whose config.yaml holds one",
                              "read the same way", ["eval", "--run-dir", "{RUN}", "--episodes", "1"], bomb_in_run))
        rows.append(_cli_case(base, cases, "run dir code", "`cd RUN && minionsrl eval --run-dir .`, `evilmod.py`, "
                              "`env_id: evilmod:Env`", "the module ran (wrote a marker file)",
                              ["eval", "--run-dir", "."], _evilmod, cwd_run=True))
        for kind in ("dev-zero", "fifo"):
            what = "a link to `/dev/zero`" if kind == "dev-zero" else "a FIFO"
            rows.append(_cli_case(base, cases, "special checkpoint", f"`--resume`, `latest.safetensors` {what}",
                                  "reads until MemoryError / hangs", resume, _special(kind)))
        tracebacks = [
            ("a config nested 100k brackets deep", "RecursionError",
             [*TRAIN, "--config", "{DIR}/deep.yaml", "--run-dir", "{RUN}"],
             _write("deep.yaml", "env_kwargs: " + "[" * 100_000 + "]" * 100_000 + "\n"), None),
            ("a non-UTF-8 config", "UnicodeDecodeError", [*TRAIN, "--config", "{DIR}/bin.yaml", "--run-dir", "{RUN}"],
             _write("bin.yaml", b"env_id: \xff\xfe\n"), None),
            ("a 300-character `--run-dir`", "ENAMETOOLONG", [*TRAIN, "--run-dir", "x" * 300], None, None),
            ("a prices file without `vcpus`, `--backend server`", "KeyError",
             [*TRAIN, "--max-rounds", "1", "--backend", "server", "--prices", "{DIR}/prices.yaml", "--run-dir",
              "{RUN}"], _prices_without_vcpus, None),
            ("`eval --seed -1`", "traceback", ["eval", "--run-dir", "{RUN}", "--seed", "-1", "--episodes", "1"], None,
             base),
            ("`plot` on a tampered metrics.csv", "traceback", ["plot", "--run-dir", "{RUN}"], _metrics_non_number,
             base),
            ("`plot` on a read-only run dir", "traceback", ["plot", "--run-dir", "{RUN}"], _read_only_plots, base),
            ("`--resume` with a non-number in a metrics.csv number column", "traceback (at the end, in the plots)",
             resume, _metrics_non_number, base),
        ]
        for case, before, cli_args, prepare, from_base in tracebacks:
            rows.append(_cli_case(from_base, cases, "tracebacks", case, before, cli_args, prepare))
        rows.append(_cli_case(None, cases, "quirks", "`--run-dir ''`", "writes into the current folder",
                              [*TRAIN, "--run-dir", ""]))
        rows.append(_cli_case(None, cases, "quirks", "duplicate YAML keys", "the last one wins silently",
                              [*TRAIN, "--config", "{DIR}/dup.yaml", "--run-dir", "{RUN}"],
                              _write("dup.yaml", "seed: 1\nseed: 2\n")))
        rows += _shutdown_cases(root, ray=not args.no_ray)
        if args.rows == "all":
            rows += _issue41_cases(root / "cases", ray=not args.no_ray)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _print(rows, args.markdown, t0)


def _print(rows: list[Outcome], markdown: bool, t0: float) -> int:
    columns = ("row", "case", "before", "exit", "one line", "traceback", "outside run dir touched",
               "checkpoint intact", "processes left", "says")
    cells = [[r.row, r.case, r.before, r.exit, r.one_line, r.traceback, r.outside, r.checkpoint, r.left, r.says]
             for r in rows]
    if markdown:
        print("| " + " | ".join(columns) + " |")
        print("|" + "---|" * len(columns))
        for c in cells:
            print("| " + " | ".join([*c[:-1], f"`{c[-1]}`" if c[-1] else ""]) + " |")
    else:
        for c in cells:
            print(json.dumps(dict(zip(columns, c, strict=True)), ensure_ascii=False))
    print(f"{len(rows)} cases in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0


# -- bad-input (was bad_input.py) -----------------------------------------------

def bad_input_main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description="every case of tests/bad_inputs.py, its error tabled").parse_args(argv)
    from bad_inputs import CASES, FAST, prepare, run_case  # the cases tests/test_bad_input.py checks

    started = time.time()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        prepare(workdir)
        for case in CASES:
            rc, err = run_case(case, workdir)
            shown = " ".join(shlex.quote(a) for a in case.flags)
            files = "; ".join(f"`{n}`: `{t.strip()}`" for n, t in case.files.items())
            what = f"`{shown}`" + (f" ({files})" if files else "") + (f" — {case.note}" if case.note else "")
            rows.append([case.field, what, rc, "`` " + err.strip().replace("|", "\\|") + " ``"])  # may hold a `
            print(f"{rc} {err.strip()}")
    text = "\n".join([
        "## Bad input: what each gets",
        "",
        f"Each input was given to `minionsrl train` (after fast defaults `{' '.join(FAST)} --run-dir run` for a "
        "fresh run) in a scratch directory; the error column is the exact stderr. Every case stops before any "
        "work starts, with exit code 2 and one line naming the field and the fix. `tests/test_bad_input.py` runs "
        "the same cases.",
        "",
        markdown_table(["field", "input", "exit", "error"], rows),
        "",
        provenance(started),
    ])
    write_section("bad-input", text, doc=ROOT / "docs" / "results" / "bad-input.md")


# -- chaos (was chaos.py) -------------------------------------------------------

DOC = ROOT / "docs" / "RELIABILITY.md"
# how the fault rate is split over the kinds (shares of --fault-rate)
MIX = {"raise": 0.2, "kill": 0.2, "malformed": 0.15, "duplicate": 0.15, "hang": 0.1, "throttle": 0.15, "oom": 0.05}


def _rows(path: Path) -> list[dict[str, str]]:
    return read_rows(path, missing_ok=True)


def _flags(args: argparse.Namespace, faults: bool) -> list[str]:
    flags = ["--env-id", "Hopper-v5", "--seed", str(args.seed), "--actors", str(args.actors), "--fragment-length",
             str(args.fragment_length), "--max-rounds", str(args.rounds), "--eval-every", "10", "--eval-episodes",
             "4", "--no-progress", "--no-tensorboard", "--invocation-timeout-s", str(args.invocation_timeout_s),
             "--max-retries", str(args.max_retries)]
    if faults:
        flags += [x for kind, share in MIX.items() for x in (f"--fault-{kind}", f"{args.fault_rate * share:g}")]
        flags += ["--fault-seed", str(args.seed)]
    return flags


def _train(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "minionsrl.cli", "train", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"training failed (exit {proc.returncode}): {err.decode()[-2000:]}")


def _wait_for(condition, proc: subprocess.Popen, what: str) -> None:
    while not condition():
        if proc.poll() is not None:
            raise RuntimeError(f"training ended before {what}: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.02)


def _checkpoint_round(run_dir: Path) -> int:
    state = checkpoint.load(run_dir / "checkpoints")
    return int(state["round"]) if state else 0


def _kill(proc: subprocess.Popen, run_dir: Path, how: str) -> dict[str, Any]:
    os.killpg(proc.pid, signal.SIGKILL)  # the learner and its function instances
    proc.wait()
    proc.stderr.close()
    logged, saved = len(_rows(run_dir / "metrics.csv")), _checkpoint_round(run_dir)
    log(f"killed ({how}): {logged} rounds logged, checkpoint of round {saved}")
    return {"how": how, "rounds_logged": logged, "checkpoint_round": saved}


def chaos_run(args: argparse.Namespace, run_dir: Path) -> list[dict[str, Any]]:
    """The faulty run with its kills; returns one record per kill."""
    metrics, kills = run_dir / "metrics.csv", []
    marker = run_dir.parent / "paused-in-checkpoint"
    marker.unlink(missing_ok=True)
    at = [max(1, round(args.rounds * (k + 1) / (args.kills + 1))) for k in range(args.kills)]
    # kill 1: half-way through writing a checkpoint
    proc = _train([*_flags(args, faults=True), "--run-dir", str(run_dir)],
                  {**os.environ, checkpoint.PAUSE_ENV: f"{at[0]}:{marker}"})
    _wait_for(marker.exists, proc, f"the pause in round {at[0]}'s checkpoint")
    kills.append(_kill(proc, run_dir, f"mid-checkpoint of round {at[0]}"))
    # the others: mid-round, a fraction of a round after round k was logged
    for k, rnd in enumerate(at[1:], start=1):
        proc = _train(["--resume", "--run-dir", str(run_dir), "--no-progress"])
        _wait_for(lambda n=rnd: len(_rows(metrics)) >= n, proc, f"round {rnd}")
        last = _rows(metrics)[-1]
        time.sleep(float(last["round_s"]) * k / args.kills)
        kills.append(_kill(proc, run_dir, f"mid-round after round {rnd} was logged"))
    proc = _train(["--resume", "--run-dir", str(run_dir), "--no-progress"])
    _finish(proc)
    return kills


def compare(ref: Path, run: Path, kills: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """What the chaos run kept, lost and corrupted, against the fault-free reference."""
    m_ref, m_run = _rows(ref / "metrics.csv"), _rows(run / "metrics.csv")
    inv_ref, inv_run = _rows(ref / "invocations.csv"), _rows(run / "invocations.csv")

    def accepted(rows: list[dict[str, str]]) -> dict[tuple[str, str], str]:
        return {(r["round"], r["slot"]): r["digest"] for r in rows if r["kind"] == "train" and r["status"] == "ok"}

    good_ref, good_run = accepted(inv_ref), accepted(inv_run)
    summary = json.loads((run / "summary.json").read_text())
    rounds = [int(r["round"]) for r in m_run]
    faults = {kind: sum(1 for r in inv_run if r["fault"] == kind and r["status"] != "duplicate") for kind in MIX}
    first_tries = [r for r in inv_run if r["attempt"] == "0" and r["status"] != "duplicate"]
    attempts = sum(1 for r in inv_run if r["status"] != "duplicate")
    return {
        "rounds_completed": len(m_run), "rounds_expected": args.rounds,
        "rounds_contiguous": rounds == list(range(1, args.rounds + 1)),
        "attempts": attempts, "fault_share": sum(faults.values()) / max(attempts, 1),
        "first_tries": len(first_tries),
        "faults_injected": faults,
        "failed": sum(int(r["failed"]) for r in m_run), "retried": sum(int(r["retried"]) for r in m_run),
        "timed_out": sum(int(r["timed_out"]) for r in m_run), "duplicates": sum(int(r["duplicates"]) for r in m_run),
        "throttled": sum(int(r.get("throttled") or 0) for r in m_run),
        "oom": sum(1 for r in inv_run if r["status"] == "oom"),
        "lost": sum(int(r["lost"]) for r in m_run),
        "fragments_accepted": len(good_run), "fragments_reference": len(good_ref),
        "batches_corrupted": sum(1 for key, d in good_run.items() if good_ref.get(key) != d),
        "learning_identical": [{k: r[k] for k in LEARNING_COLUMNS} for r in m_run]
        == [{k: r[k] for k in LEARNING_COLUMNS} for r in m_ref],
        "ledger_serverless": summary["cost_usd"]["serverless"],
        "rows_serverless": sum(float(r["cost_serverless_usd"]) for r in m_run),
        "ledger_server": summary["cost_usd"]["server"],
        "rows_server": sum(float(r["cost_server_usd"]) for r in m_run),
        "reference_serverless": json.loads((ref / "summary.json").read_text())["cost_usd"]["serverless"],
        "kills": kills,
    }


def render(res: dict[str, Any], args: argparse.Namespace, started: float, ended: float) -> str:
    kills = "; ".join(f"{k['how']}: {k['rounds_logged']} rounds logged, checkpoint of round "
                      f"{k['checkpoint_round']}, round {k['checkpoint_round'] + 1} re-run" for k in res["kills"])
    rows = [
        ["rounds completed (contiguous 1..N, no duplicates)",
         f"{res['rounds_completed']} of {res['rounds_expected']} ({'yes' if res['rounds_contiguous'] else 'NO'})"],
        ["invocation attempts (first tries + retries)", f"{res['attempts']} ({res['first_tries']} + {res['retried']})"],
        ["faults injected (share of attempts)", ", ".join(f"{k} {v}" for k, v in res["faults_injected"].items())
         + f" ({100 * res['fault_share']:.1f}%)"],
        ["failed (out of memory among them) / retried / timed out / duplicates discarded",
         f"{res['failed']} ({res['oom']}) / {res['retried']} / {res['timed_out']} / {res['duplicates']}"],
        ["calls refused by the platform (throttled: backed off and retried, not counted against --max-retries)",
         str(res["throttled"])],
        ["invocations lost (slots without a fragment)", str(res["lost"])],
        ["fragments accepted vs fault-free run", f"{res['fragments_accepted']} vs {res['fragments_reference']}"],
        ["batches corrupted (accepted fragment differs from the fault-free run's)", str(res["batches_corrupted"])],
        ["learning curve identical to the fault-free run (every learning column of metrics.csv)",
         "yes" if res["learning_identical"] else "NO"],
        ["ledger serverless total vs sum of metrics.csv rows",
         f"${res['ledger_serverless']:.6f} vs ${res['rows_serverless']:.6f} "
         f"({'equal' if res['ledger_serverless'] == res['rows_serverless'] else 'DIFFERENT'})"],
        ["ledger server-based total vs sum of rows",
         f"${res['ledger_server']:.6f} vs ${res['rows_server']:.6f} "
         f"({'equal' if res['ledger_server'] == res['rows_server'] else 'DIFFERENT'})"],
        ["serverless cost vs the fault-free run (retries, duplicates, stragglers billed)",
         f"${res['ledger_serverless']:.6f} vs ${res['reference_serverless']:.6f}"],
        ["learner kills", f"{len(res['kills'])}: {kills}"],
    ]
    mix = ", ".join(f"{k} {args.fault_rate * s:g}" for k, s in MIX.items())
    return "\n".join([
        "## Chaos run: Hopper-v5 through function faults and learner kills",
        "",
        f"Hopper-v5, {args.rounds} rounds of {args.actors} actors × {args.fragment_length} steps (seed {args.seed}). "
        f"Fault rates per invocation attempt: {mix} (sum {args.fault_rate:g}); hangs are cut by "
        f"`--invocation-timeout-s {args.invocation_timeout_s:g}`; `--max-retries {args.max_retries}`. The learner "
        f"was SIGKILLed {args.kills} times (with its function instances) and restarted with `--resume` each time. "
        "The same command without faults and kills is the reference: a batch is *corrupted* if an accepted "
        "fragment's digest (invocations.csv) differs from the reference's for the same round and slot.",
        "",
        markdown_table(["what", "measured"], rows),
        "",
        provenance(started, ended),
    ])


def chaos_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--fragment-length", type=int, default=512)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--max-retries", type=int, default=4)
    parser.add_argument("--invocation-timeout-s", type=float, default=10.0)
    args = parser.parse_args(argv)
    started = time.time()
    out = OUT / "chaos"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log("fault-free reference run")
    _finish(_train([*_flags(args, faults=False), "--run-dir", str(out / "reference")]))
    log("chaos run")
    kills = chaos_run(args, out / "chaos")
    res = compare(out / "reference", out / "chaos", kills, args)
    (out / "result.json").write_text(json.dumps(res, indent=2))
    write_section("chaos", render(res, args, started, time.time()), doc=DOC)
    log(f"written to {DOC.relative_to(ROOT)}: {json.dumps({k: v for k, v in res.items() if k != 'kills'})}")


MODES = {"hostile": main, "bad-input": bad_input_main, "chaos": chaos_main}


if __name__ == "__main__":
    run_modes(MODES)
