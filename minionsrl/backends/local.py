"""``local``: an embedded FaaS runtime on this machine, the default backend.

It behaves like a function platform: each instance is a worker process that serves one invocation
at a time; a request with no idle instance starts a new one (a measured cold start) while the
concurrency cap allows, otherwise it queues; warm instances are reused (most recently used first,
keeping their environments alive) and instances idle longer than ``idle_timeout_s`` are reaped.
Instances come from a fork server that preloads only the rollout function's imports, so they are
safe to start from a learner that has torch loaded. The policy is written once per round to a file
that instances read by reference.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from minionsrl.backends import local_worker
from minionsrl.backends.base import Backend, InvocationRecord, Reply, make_reply

_WORKER_MODULE = "minionsrl.backends.local_worker"


@dataclass
class _Instance:
    id: str
    process: Any
    conn: Connection
    started_at: float
    ready: bool = False
    cold_start_s: float = 0.0
    served: int = 0
    last_used: float = field(default_factory=time.perf_counter)
    task: tuple[int, float] | None = None  # (request index, dispatch time) while busy


class LocalBackend(Backend):
    """Worker-process function runtime with cold starts, warm reuse, a concurrency cap and reaping."""

    name = "local"

    def __init__(self, key: bytes, max_concurrency: int | None = None, idle_timeout_s: float = 300.0,
                 invocation_timeout_s: float | None = None, start_method: str = "forkserver") -> None:
        self.key = key
        self.max_concurrency = max_concurrency or os.cpu_count() or 1
        self.idle_timeout_s = idle_timeout_s
        self.invocation_timeout_s = invocation_timeout_s
        self._ctx = mp.get_context(start_method)
        if start_method == "forkserver":
            self._ctx.set_forkserver_preload([_WORKER_MODULE])
        self._dir = Path(tempfile.mkdtemp(prefix="minionsrl-local-"))
        self._instances: list[_Instance] = []
        self._next_instance = 0
        self._policy_path: Path | None = None
        self.instances_started = 0
        self.instances_reaped = 0
        self.publishes = 0

    # -- publishing ------------------------------------------------------------------------------
    def publish(self, policy_blob: bytes) -> str:
        """Write the round's policy once; instances read it by path and cache it per reference."""
        self.publishes += 1
        path = self._dir / f"policy-{self.publishes}.bin"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(policy_blob)
        tmp.replace(path)
        if self._policy_path is not None:
            self._policy_path.unlink(missing_ok=True)  # no invocation of the old round is in flight
        self._policy_path = path
        return str(path)

    # -- invoking --------------------------------------------------------------------------------
    def invoke(self, requests: list[dict[str, Any]]) -> list[Reply]:
        self.reap_idle()
        payloads = [json.dumps(r).encode() for r in requests]
        replies: list[Reply | None] = [None] * len(requests)
        pending = deque(range(len(requests)))
        while pending or any(inst.task is not None for inst in self._instances):
            self._dispatch(pending, payloads)
            waiting = [inst for inst in self._instances if inst.task is not None or not inst.ready]
            timeout = self._next_deadline(waiting)
            for conn in wait([inst.conn for inst in waiting], timeout=timeout):
                inst = next(i for i in waiting if i.conn is conn)
                self._collect(inst, requests, payloads, replies)
            self._expire(requests, payloads, replies)
        for inst in [i for i in self._instances if not i.ready and i.conn.poll(0)]:
            self._collect(inst, requests, payloads, replies)  # instances that became ready meanwhile
        return [r for r in replies if r is not None]

    def _dispatch(self, pending: deque[int], payloads: list[bytes]) -> None:
        idle = sorted((i for i in self._instances if i.ready and i.task is None), key=lambda i: i.last_used)
        while pending and idle:
            inst = idle.pop()  # most recently used first, as function platforms do
            index = pending.popleft()
            inst.task = (index, time.perf_counter())
            inst.conn.send_bytes(payloads[index])
        starting = sum(1 for i in self._instances if not i.ready)
        while len(pending) > starting and len(self._instances) < self.max_concurrency:
            self._start_instance()
            starting += 1

    def _collect(self, inst: _Instance, requests: list[dict[str, Any]], payloads: list[bytes],
                 replies: list[Reply | None]) -> None:
        try:
            data = inst.conn.recv_bytes()
        except (EOFError, OSError):
            data = None
        now = time.perf_counter()
        if not inst.ready:
            if data is None or not data.startswith(local_worker.READY):
                self._stop(inst, kill=True)
                return
            ready_at = float(data.split()[1])  # the worker's own clock: a late read does not inflate it
            inst.ready, inst.cold_start_s, inst.last_used = True, ready_at - inst.started_at, now
            return
        index, sent = inst.task
        record = InvocationRecord(invocation_id=str(requests[index]["id"]), kind=str(requests[index]["kind"]),
                                  instance_id=inst.id, cold=inst.served == 0, duration_s=now - sent,
                                  bytes_in=len(payloads[index]))
        reply = make_reply(record, data, self.key, cold_start_s=inst.cold_start_s if inst.served == 0 else 0.0)
        if data is None:
            self._stop(inst, kill=True)  # joins the process, so its exit code is known
            record.error = f"instance {inst.id} died (exit code {inst.process.exitcode})"
        else:
            inst.task, inst.served, inst.last_used = None, inst.served + 1, now
        replies[index] = reply

    def _next_deadline(self, waiting: list[_Instance]) -> float | None:
        if self.invocation_timeout_s is None:
            return None
        sent = [i.task[1] for i in waiting if i.task is not None]
        if not sent:
            return None
        return max(0.0, min(sent) + self.invocation_timeout_s - time.perf_counter())

    def _expire(self, requests: list[dict[str, Any]], payloads: list[bytes], replies: list[Reply | None]) -> None:
        """Kill instances whose invocation ran past the deadline and record a timeout."""
        if self.invocation_timeout_s is None:
            return
        now = time.perf_counter()
        for inst in list(self._instances):
            if inst.task is not None and now - inst.task[1] > self.invocation_timeout_s:
                index, sent = inst.task
                replies[index] = Reply(InvocationRecord(
                    invocation_id=str(requests[index]["id"]), kind=str(requests[index]["kind"]),
                    instance_id=inst.id, cold=inst.served == 0, duration_s=now - sent,
                    bytes_in=len(payloads[index]), status="error",
                    error=f"timed out after {self.invocation_timeout_s:g} s"))
                self._stop(inst, kill=True)

    # -- instance lifecycle ----------------------------------------------------------------------
    def _start_instance(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        self._next_instance += 1
        process = self._ctx.Process(target=local_worker.serve, args=(child, self.key),
                                    name=f"minionsrl-local-{self._next_instance}", daemon=True)
        started = time.monotonic()  # the clock the worker stamps READY with
        process.start()
        child.close()
        self._instances.append(_Instance(id=f"local-{self._next_instance}", process=process, conn=parent,
                                         started_at=started))
        self.instances_started += 1

    def _stop(self, inst: _Instance, kill: bool = False) -> None:
        if inst in self._instances:
            self._instances.remove(inst)
        if not kill:
            with contextlib.suppress(OSError):
                inst.conn.send_bytes(local_worker.STOP)
            inst.process.join(timeout=2.0)
        if inst.process.is_alive():
            inst.process.kill()
            inst.process.join(timeout=2.0)
        inst.conn.close()

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
    def instance_ids(self) -> list[str]:
        """Ids of the live instances (warm or starting)."""
        return [i.id for i in self._instances]

    def close(self) -> None:
        for inst in list(self._instances):
            self._stop(inst)
        shutil.rmtree(self._dir, ignore_errors=True)
