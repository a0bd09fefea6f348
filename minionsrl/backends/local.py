"""``local``: an embedded FaaS runtime on this machine, the default backend.

It behaves like a function platform: each instance is a worker process that serves one invocation
at a time; a request with no idle instance starts a new one (a measured cold start) while the
concurrency cap allows, otherwise it queues; warm instances are reused (most recently used first,
keeping their environments alive) and instances idle longer than ``idle_timeout_s`` are reaped.
Instances are fresh interpreters (:mod:`minionsrl.backends.local_worker`) that import only the
rollout function, never the learner's framework nor its ``__main__``, so they are safe to start from a
learner with JAX loaded and their cold start is a function's. The policy is written once per round to a file
that instances read by reference, in a folder of the temporary folder that the learner holds by lock
(:mod:`minionsrl.backends.tempdirs`) and removes on close; one left by a learner that was killed is removed by the
next backend to start, whatever PID namespace either runs in.

Nothing outlives the run: an instance is a process group of its own, stopped whole (the env's own child
processes with it); one told to stop closes its envs first; and an instance whose learner died, however it
died, kills its group (:func:`minionsrl.backends.local_worker.main` watches for it).

With ``memory_mb`` an instance has a function's memory, enforced as platforms do: while invocations run,
the backend reads each busy instance's resident memory every ``MEMORY_POLL_S`` and kills one past the limit
(status ``oom``). A request with an injected ``throttle`` fault is refused at submission (status
``throttled``) and never reaches an instance.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from pathlib import Path

import numpy as np

from minionsrl.backends import local_worker
from minionsrl.backends.base import (
    CANCELLED,
    FAILED,
    OK,
    OOM,
    TIMED_OUT,
    Backend,
    Deadlines,
    InvocationRecord,
    Pending,
    Refusals,
    Reply,
    concurrency,
    earliest,
    learner_path,
    make_reply,
    oversize,
    reply_limit,
    retire_policies,
    timeout_left_s,
)
from minionsrl.backends.tempdirs import OwnedFolder
from minionsrl.deployments import IDLE_TIMEOUT_S
from minionsrl.errors import Resumable
from minionsrl.function.clock import own_s
from minionsrl.function.faults import MEMORY_ENV, resident_bytes
from minionsrl.function.fragment import HungAt
from minionsrl.function.request import Request

_WORKER_MODULE = "minionsrl.backends.local_worker"
STATE_PREFIX = "minionsrl-local-"  # + the learner's pid: its folder of published policies, in the temporary folder
READY_FRAME_BYTES = 4096  # an instance's first frame says it is ready: anything longer is not that
MEMORY_POLL_S = 0.05  # how often busy instances' memory is read, when it is limited
CONCURRENCY_CAP = 256  # the most instances run at once when the concurrency follows waiting functions ...
MEMORY_SHARE = 0.5  # ... and the instances added may take at most this share of the memory available now
HEADROOM = 1.25  # run this many times what would just keep the CPUs busy: a function that waits a moment for a CPU
# loses little, one queued behind another loses its whole run (64 functions 3.4% busy on 2 CPUs: 73, not 59)
_KEPT_SHARES = 64  # the busy share is the median over this many of the latest successful invocations
STOP_WAIT_S = 2.0  # an instance told to stop has this long to close its envs and exit before its group is killed
EXIT_GRACE_S = 1.0  # an instance whose stream ended has this long to exit by itself (its exit code is reported)


def _exited(pid: int, within_s: float) -> bool:
    """Wait up to ``within_s`` for child ``pid`` to exit, without reaping it (its pid keeps naming its process
    group until it is reaped); whether it exited."""
    end = time.monotonic() + within_s
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.01)


def available_memory_bytes() -> int | None:
    """Memory available to new processes now (Linux ``MemAvailable``), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as fh:
            return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def at_once(cpus: int, busy_share: float) -> int:
    """How many functions of this busy share (CPU over own-instance seconds) to run at once on ``cpus`` CPUs, memory
    aside: ``HEADROOM · cpus / busy share``, at least the CPUs, at most :data:`CONCURRENCY_CAP`."""
    share = max(busy_share, 1.0 / CONCURRENCY_CAP)
    return min(CONCURRENCY_CAP, max(cpus, math.floor(HEADROOM * cpus / share)))


class Concurrency:
    """How many instances run at once: the user's ``max_concurrency``, else one per CPU while the functions keep a
    CPU busy, and more while they mostly wait (a sleep, a remote simulator, a game server), as a function platform
    runs every call at once: ``HEADROOM · CPUs / busy share``, the busy share being a function's CPU seconds over its
    own-instance seconds (wall time less its wait for a CPU here: :mod:`minionsrl.function.clock`), the median of
    the latest successful invocations; at most :data:`CONCURRENCY_CAP`, and no more than the memory available
    holds (:data:`MEMORY_SHARE` of it, at the largest instance's size)."""

    def __init__(self, asked: int | None) -> None:
        self.asked, self.cpus = asked, concurrency(None)
        self._shares: list[float] = []
        self._wanted: int | None = None  # at_once of the shares' median, memory aside (None: shares changed since)

    def observe(self, record: InvocationRecord, cold_start_s: float = 0.0) -> None:
        """Learn a function's busy share from an invocation that succeeded (its instance's own start,
        ``cold_start_s``, is not the function's: its CPU seconds are not in ``cpu_s``)."""
        own = own_s(record.init_s - cold_start_s + record.run_s, record.init_wait_s + record.run_wait_s)
        if self.asked is None and record.status == OK and own > 0:
            self._shares.append(min(record.cpu_s / own, 1.0))
            del self._shares[:-_KEPT_SHARES]
            self._wanted = None

    def limit(self, instance_pids: list[int]) -> int:
        """The most instances to run at once, with ``instance_pids`` running now."""
        if self.asked is not None:
            return self.asked
        if not self._shares:
            return self.cpus
        if self._wanted is None:  # asked for at every dispatch: the median only when the shares changed
            self._wanted = at_once(self.cpus, float(np.median(self._shares)))
        wanted = self._wanted
        if wanted <= len(instance_pids):  # memory can only lower it: nothing to read
            return wanted
        sizes = [size for size in map(resident_bytes, instance_pids) if size]
        free = available_memory_bytes()
        if sizes and free is not None:
            wanted = min(wanted, max(len(instance_pids) + int(MEMORY_SHARE * free / max(sizes)), self.cpus))
        return wanted


@dataclass
class _Instance:
    id: str
    process: subprocess.Popen
    started_at: float
    ready: bool = False
    cold_start_s: float = 0.0
    served: int = 0
    last_used: float = field(default_factory=time.perf_counter)
    task: Pending | None = None  # while busy


class LocalBackend(Backend):
    """Worker-process function runtime with cold starts, warm reuse, a concurrency cap and reaping."""

    name = "local"

    def __init__(self, key: bytes, max_concurrency: int | None = None, idle_timeout_s: float = IDLE_TIMEOUT_S,
                 invocation_timeout_s: float | None = None, max_failed_starts: int = 3,
                 memory_mb: float | None = None) -> None:
        self.key = key
        self.memory_mb = memory_mb  # an instance's memory limit (None: unlimited)
        self._memory_read_at = -math.inf  # when busy instances' memory was last read (every MEMORY_POLL_S at most)
        self._refusals = Refusals()  # throttled calls: refused at submission
        self.concurrency = Concurrency(max_concurrency)
        self.idle_timeout_s = idle_timeout_s
        self.deadlines = Deadlines(invocation_timeout_s)
        self.max_failed_starts = max_failed_starts
        self._failed_starts = 0  # in a row; reset by every instance that becomes ready
        folder = OwnedFolder(STATE_PREFIX)  # sweeps the folders of learners killed before they could remove theirs
        self._dir = folder.path
        # removed on close, or when the backend is collected or the interpreter exits without it (SIGTERM under the
        # CLI stops a run as Ctrl-C does, through close); only a SIGKILL leaves it, for the next backend to remove
        self._remove_dir = weakref.finalize(self, folder.remove)
        self._instances: list[_Instance] = []
        self._queue: deque[Pending] = deque()
        self._next_instance = 0
        self._policies: list[str] = []  # published policy files still on disk, oldest first
        self.instances_started = 0
        self.instances_reaped = 0
        self.publishes = 0

    # -- publishing ------------------------------------------------------------------------------
    def publish(self, policy_blob: bytes) -> str:
        """Write the round's policy once; instances read it by path and cache it per reference."""
        self.publishes += 1
        path = self._dir / f"policy-{self.publishes}.bin"
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_bytes(policy_blob)
            tmp.replace(path)
        except OSError as exc:  # a full temporary folder: the run stops at its checkpoint, as a full run dir does
            tmp.unlink(missing_ok=True)
            raise Resumable(f"the local backend cannot write the policy to {str(path)!r} ({exc.strerror or exc}); "
                            f"free space in {tempfile.gettempdir()!r} (or point TMPDIR elsewhere), then continue "
                            "with --resume") from exc
        self._policies.append(str(path))
        self._retire_policies()
        return str(path)

    def prewarm(self, count: int) -> None:
        """Start instances now (up to the concurrency cap), so that they boot while the learner sets up; their
        start is measured and their first invocation is cold all the same."""
        for _ in range(min(count, self.max_concurrency) - len(self._instances)):
            self._start_instance()

    # -- invoking --------------------------------------------------------------------------------
    def submit(self, requests: list[Request]) -> None:
        self.reap_idle()
        self._queue.extend(Pending(r, r.encode()) for r in self._refusals.admit(requests))
        self._dispatch()

    @property
    def in_flight(self) -> int:
        return len(self._refusals) + len(self._queue) + sum(1 for i in self._instances if i.task is not None)

    def collect(self, timeout: float | None = None) -> list[Reply]:
        end = None if timeout is None else time.perf_counter() + timeout
        replies: list[Reply] = self._refusals.take()  # refused at once, without running
        while self.in_flight and not replies:
            if self._failed_starts >= self.max_failed_starts:
                replies.extend(self._fail_queued())
                break
            self._dispatch()
            waiting = [inst for inst in self._instances if inst.task is not None or not inst.ready]
            watch = MEMORY_POLL_S if self.memory_mb is not None and any(i.task for i in waiting) else None
            wait_s = earliest(self._next_deadline(waiting), None if end is None else end - time.perf_counter(), watch)
            for ready in wait([inst.process.stdout for inst in waiting], timeout=wait_s):
                replies.extend(self._collect(next(i for i in waiting if i.process.stdout is ready)))
            replies.extend(self._expire())
            replies.extend(self._over_memory())
            if end is not None and time.perf_counter() >= end:
                break
        if not self.in_flight:
            self._absorb_ready()
        self._retire_policies()
        return replies

    def cancel(self, ids: Iterable[str] | None = None) -> list[Reply]:
        wanted = None if ids is None else set(ids)
        chosen = [t for t in self._queue if wanted is None or t.id in wanted]
        replies = self._refusals.take(wanted) + [Reply(t.record(status=CANCELLED, error="cancelled")) for t in chosen]
        self._queue = deque(t for t in self._queue if t not in chosen)
        now = time.perf_counter()
        for inst in [i for i in self._instances if i.task is not None and (wanted is None or i.task.id in wanted)]:
            replies.append(Reply(inst.task.record(instance_id=inst.id, cold=inst.served == 0,
                                                  duration_s=now - inst.task.sent, status=CANCELLED,
                                                  error="cancelled")))
            self._stop(inst, kill=True)
        return replies

    def _retire_policies(self) -> None:
        """Delete the policy files of earlier versions once no queued or running invocation refers to them."""
        tasks = [*self._queue, *(i.task for i in self._instances if i.task is not None)]
        for ref in retire_policies(self._policies, {t.request.policy for t in tasks}):
            Path(ref).unlink(missing_ok=True)

    def _absorb_ready(self) -> None:
        """Read READY from instances that finished starting meanwhile, so they can be reaped and reused."""
        starting = [i for i in self._instances if not i.ready]
        for stdout in wait([i.process.stdout for i in starting], timeout=0) if starting else []:
            self._collect(next(i for i in starting if i.process.stdout is stdout))

    def _fail_queued(self) -> list[Reply]:
        """Instances keep dying before they are ready: fail what is queued instead of retrying forever."""
        replies = [Reply(t.record(status=FAILED, error=(
            f"{self._failed_starts} instances in a row died before they were ready (see stderr)")))
            for t in self._queue]
        self._queue.clear()
        return replies

    def _dispatch(self) -> None:
        # most recently used first, as function platforms do; an instance that became ready but never served
        # (started for a request another instance took) was never used, so it comes after every served one
        idle = sorted((i for i in self._instances if i.ready and i.task is None),
                      key=lambda i: (i.served > 0, i.last_used))
        while self._queue and idle:
            inst = idle.pop()
            inst.task = self._queue.popleft()
            inst.task.send(self.deadlines, time.perf_counter())
            self._send(inst, inst.task.payload)
        starting = sum(1 for i in self._instances if not i.ready)
        limit = self.max_concurrency if len(self._queue) > starting else 0
        while len(self._queue) > starting and len(self._instances) < limit:
            self._start_instance()
            starting += 1

    def _collect(self, inst: _Instance) -> list[Reply]:
        limit = READY_FRAME_BYTES if not inst.ready else reply_limit(inst.task.request) if inst.task else None
        too_large: local_worker.FrameTooLarge | None = None
        try:
            data = local_worker.read_frame(inst.process.stdout, limit)
        except local_worker.FrameTooLarge as exc:  # refused unread: the instance is stopped, its reply never read
            data, too_large = None, exc
        except OSError:
            data = None
        now = time.perf_counter()
        if not inst.ready:
            if data is None or not data.startswith(local_worker.READY):
                self._failed_starts += 1
                self._stop(inst, kill=True)
                return []
            ready_at = float(data.split()[1])  # the worker's own clock: a late read does not inflate it
            inst.ready, inst.cold_start_s, inst.last_used = True, ready_at - inst.started_at, now
            self._failed_starts = 0
            return []
        task = inst.task
        record = task.record(instance_id=inst.id, cold=inst.served == 0, duration_s=now - task.sent)
        reply = make_reply(record, data, self.key, cold_start_s=inst.cold_start_s if inst.served == 0 else 0.0)
        if data is None:
            # its stream ended: it is exiting (its own exit code is reported, not our kill's) or it sent too much
            self._stop(inst, kill=True, grace_s=EXIT_GRACE_S if too_large is None else 0.0)
            record.error = f"instance {inst.id} died (exit code {inst.process.returncode})"
            if too_large is not None:
                record.bytes_out, record.error = too_large.size, oversize(too_large.size, too_large.limit)
        else:
            inst.task, inst.served, inst.last_used = None, inst.served + 1, now
        self.deadlines.observe(record)
        self.concurrency.observe(record, inst.cold_start_s if record.cold else 0.0)
        return [reply]

    def _next_deadline(self, waiting: list[_Instance]) -> float | None:
        return timeout_left_s([i.task for i in waiting if i.task is not None], time.perf_counter())

    def _expire(self) -> list[Reply]:
        """Kill instances whose invocation ran past its deadline and record a timeout, saying where it hung."""
        now, replies = time.perf_counter(), []
        for inst in list(self._instances):
            if inst.task is not None and inst.task.overdue(now):
                where = self._where(inst)
                replies.append(Reply(inst.task.record(
                    instance_id=inst.id, cold=inst.served == 0, duration_s=now - inst.task.sent,
                    status=TIMED_OUT, error=self.deadlines.error(inst.task.timeout_s, where)), hung_at=where))
                self._stop(inst, kill=True)
        return replies

    def _where(self, inst: _Instance) -> HungAt | None:
        """What a hung instance is doing, from the stack its worker dumps on SIGUSR1 (``faulthandler``)."""
        stack = self._stack_file(inst)
        with contextlib.suppress(OSError):
            os.kill(inst.process.pid, signal.SIGUSR1)
            # a C signal handler writes the dump, thread by thread, as soon as the worker gets a CPU: on a loaded
            # machine that may take a while, so wait (2 s at most) until the serving thread's frames are in it
            text, until = "", time.perf_counter() + 2.0
            while not local_worker.SERVING.search(text) and time.perf_counter() < until:
                time.sleep(0.01)
                text = stack.read_text(errors="replace") if stack.exists() else ""
            return local_worker.where_hung(text)
        return None

    def _stack_file(self, inst: _Instance) -> Path:
        return self._dir / f"stack-{inst.id}.txt"

    def _over_memory(self) -> list[Reply]:
        """Kill instances whose invocation holds more memory than a function has, as a platform does (Lambda
        stops a function past its memory); record it as out of memory."""
        now, replies = time.perf_counter(), []
        if self.memory_mb is None or now - self._memory_read_at < MEMORY_POLL_S:  # a reply woke the wait early
            return []
        self._memory_read_at = now
        for inst in [i for i in self._instances if i.task is not None]:
            held = resident_bytes(inst.process.pid)
            rss = None if held is None else held / (1 << 20)
            if rss is not None and rss > self.memory_mb:
                replies.append(Reply(inst.task.record(
                    instance_id=inst.id, cold=inst.served == 0, duration_s=now - inst.task.sent, status=OOM,
                    error=f"out of memory: instance {inst.id} held {rss:.0f} MB, past the function's "
                          f"{self.memory_mb:g} MB, and was killed")))
                self._stop(inst, kill=True)
        return replies

    # -- instance lifecycle ----------------------------------------------------------------------
    def _start_instance(self) -> None:
        self._next_instance += 1
        # the child sees what this interpreter can import (custom env modules included), and its memory
        inst_id = f"local-{self._next_instance}"
        # the worker watches this process (it kills its group once the learner is gone) and dumps its stack on
        # SIGUSR1 into a file of this backend's folder (what a timed-out invocation was doing)
        env = {**os.environ, "PYTHONPATH": learner_path(), local_worker.LEARNER_ENV: str(os.getpid()),
               local_worker.STACK_ENV: str(self._dir / f"stack-{inst_id}.txt"),
               **({MEMORY_ENV: f"{self.memory_mb:g}"} if self.memory_mb is not None else {})}
        started = time.monotonic()  # the clock the worker stamps READY with
        # a session (and process group) of its own: stopped whole, the env's child processes with it
        process = subprocess.Popen([sys.executable, "-m", _WORKER_MODULE], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, bufsize=0, env=env, start_new_session=True)
        inst = _Instance(id=inst_id, process=process, started_at=started)
        self._instances.append(inst)
        self.instances_started += 1
        self._send(inst, self.key)

    def _send(self, inst: _Instance, data: bytes) -> None:
        with contextlib.suppress(OSError):  # a dead instance shows up as end of stream on its stdout
            local_worker.write_frame(inst.process.stdin, data)

    def _stop(self, inst: _Instance, kill: bool = False, grace_s: float = 0.0) -> None:
        """Stop an instance with its whole process group: told to stop (it closes its envs and exits; killed after
        ``STOP_WAIT_S``), or killed at once after ``grace_s`` to exit by itself (so its own exit code is kept)."""
        if inst in self._instances:
            self._instances.remove(inst)
        if not kill:
            self._send(inst, local_worker.STOP)
            grace_s = STOP_WAIT_S
        _exited(inst.process.pid, grace_s)
        with contextlib.suppress(OSError):  # before the leader is reaped, its pid still names its group
            os.killpg(inst.process.pid, signal.SIGKILL)
        inst.process.wait(timeout=5.0)
        self._stack_file(inst).unlink(missing_ok=True)
        for stream in (inst.process.stdin, inst.process.stdout):
            with contextlib.suppress(OSError):
                stream.close()

    def reap_idle(self) -> int:
        """Stop instances idle for longer than ``idle_timeout_s`` (and any that never became ready in that
        time); return how many were reaped."""
        now, started_now = time.perf_counter(), time.monotonic()
        stale = [i for i in self._instances if i.task is None and (
            (i.ready and now - i.last_used > self.idle_timeout_s)
            or (not i.ready and started_now - i.started_at > self.idle_timeout_s))]
        for inst in stale:
            self._stop(inst, kill=not inst.ready)
        self.instances_reaped += len(stale)
        return len(stale)

    @property
    def max_concurrency(self) -> int:
        """How many instances may run at once now (:class:`Concurrency`)."""
        return self.concurrency.limit([i.process.pid for i in self._instances])

    @property
    def instance_ids(self) -> list[str]:
        """Ids of the live instances (warm or starting)."""
        return [i.id for i in self._instances]

    def close(self) -> None:
        try:
            for inst in list(self._instances):
                self._stop(inst)
        finally:
            self._remove_dir()

