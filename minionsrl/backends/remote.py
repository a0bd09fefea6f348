"""What the ``ray`` and ``lithops`` backends share: invocations in flight on someone else's platform.

A remote platform hands back an opaque handle per invocation (a Ray object ref, a Lithops future).
This class keeps the :class:`~minionsrl.backends.base.Pending` invocations by handle, enforces the
per-invocation timeout, turns what the platform returns into replies, and cancels; a subclass only
starts calls (:meth:`_start`), waits for some to end (:meth:`_poll`) and stops them (:meth:`_stop`).
"""

from __future__ import annotations

import os
import time
from abc import abstractmethod
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from minionsrl.backends.base import (
    CANCELLED,
    TIMED_OUT,
    Backend,
    Deadlines,
    Pending,
    Refusals,
    Reply,
    earliest,
    make_reply,
    reply_limit,
    timeout_left_s,
)
from minionsrl.backends.tempdirs import OwnedFolder
from minionsrl.function.request import Request

_HELD: dict[Path, OwnedFolder] = {}  # the folders of this process's private files, locked while they exist


def private_file(prefix: str, name: str, data: bytes) -> Path:
    """Write ``data`` (a secret) to a new file readable by this user only (0600), in a new folder of its own
    (0700) under the system's temporary folder — never the home folder. The folder is this process's by lock
    (:class:`~minionsrl.backends.tempdirs.OwnedFolder`): one left by a killed process is removed by the next
    run; remove it with :func:`remove_private_file`."""
    folder = OwnedFolder(prefix)
    path = folder.path / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    _HELD[path] = folder
    return path


def remove_private_file(path: Path) -> None:
    """Remove a file made by :func:`private_file`, with its folder."""
    folder = _HELD.pop(path, None)
    if folder is not None:
        folder.remove()


class RemoteBackend(Backend):
    """Invocations tracked by platform handle, with a per-invocation timeout; calls with an injected ``throttle``
    fault are refused at submission, as the platform would refuse them (:class:`Refusals`)."""

    def __init__(self, key: bytes, invocation_timeout_s: float | None = None) -> None:
        self.key = key
        self.invocation_timeout_s = invocation_timeout_s  # the user's, if any: the platform's own limit follows it
        self.deadlines = Deadlines(invocation_timeout_s)
        self._pending: dict[Any, Pending] = {}  # platform handle -> invocation
        self._refusals = Refusals()  # throttled calls: refused at submission, answered at the next collect
        self.publishes = 0

    # -- what a platform implements --------------------------------------------------------------
    @abstractmethod
    def _start(self, payloads: list[bytes]) -> list[Any]:
        """Start one call per request payload; return their handles in the same order."""

    @abstractmethod
    def _poll(self, handles: list[Any], timeout: float | None) -> list[tuple[Any, bytes | None, str]]:
        """Wait until at least one handle ended (or ``timeout``); return ``(handle, reply bytes or None,
        platform error)`` for every ended one."""

    @abstractmethod
    def _stop(self, handles: list[Any]) -> None:
        """Stop these calls where the platform can; their replies are never read."""

    # -- the Backend primitives ------------------------------------------------------------------
    def submit(self, requests: list[Request]) -> None:
        requests = self._refusals.admit(requests)
        payloads = [r.encode() for r in requests]
        sent = time.perf_counter()  # before the calls start: a quick one can end before _start returns
        handles = self._start(payloads)
        for request, payload, handle in zip(requests, payloads, handles, strict=True):
            self._pending[handle] = call = Pending(request, payload, handle=handle)
            call.send(self.deadlines, sent)

    @property
    def in_flight(self) -> int:
        return len(self._refusals) + len(self._pending)

    def collect(self, timeout: float | None = None) -> list[Reply]:
        refused = self._refusals.take()  # answered at once: they never ran
        if refused or not self._pending:
            return refused
        deadline = timeout_left_s(self._pending.values(), time.perf_counter())
        ended = self._poll(list(self._pending), earliest(timeout, deadline))
        now = time.perf_counter()
        replies = []
        for handle, data, error in ended:
            call = self._pending.pop(handle)
            record = call.record(duration_s=now - call.sent)
            reply = make_reply(record, data, self.key, max_bytes=reply_limit(call.request))
            if data is None:
                record.error = error or "the function ended without a reply"
            self.deadlines.observe(record)
            replies.append(reply)
        return replies + self._expire(now)

    def cancel(self, ids: Iterable[str] | None = None) -> list[Reply]:
        wanted = None if ids is None else set(ids)
        chosen = [p for p in self._pending.values() if wanted is None or p.id in wanted]
        return self._refusals.take(wanted) + self._abandon(chosen, "cancelled", status=CANCELLED)

    def _expire(self, now: float) -> list[Reply]:
        late = [p for p in self._pending.values() if p.overdue(now)]
        return self._abandon(late, lambda p: self.deadlines.error(p.timeout_s), status=TIMED_OUT)

    def _abandon(self, calls: list[Pending], error: str | Callable[[Pending], str], status: str) -> list[Reply]:
        """Stop ``calls`` and record each as failed (``error``, or ``error(call)``), billed for the time it ran."""
        if not calls:
            return []
        self._stop([p.handle for p in calls])
        now = time.perf_counter()
        for call in calls:
            del self._pending[call.handle]
        return [Reply(p.record(duration_s=now - p.sent, status=status, error=error if isinstance(error, str)
                               else error(p))) for p in calls]
