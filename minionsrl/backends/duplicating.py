"""The platform's own fault, for fault injection: one invocation's reply delivered twice.

Requests carrying a ``duplicate`` fault (drawn by :class:`~minionsrl.function.faults.FaultPlan`) have
their reply delivered twice by :class:`DuplicatingBackend`, a thin wrapper over any backend.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from minionsrl.backends.base import Backend, Reply
from minionsrl.function.request import Request


class DuplicatingBackend(Backend):
    """Wraps a backend so that requests carrying a ``duplicate`` fault have their reply delivered twice (the
    second a copy with its own record: a platform that ran a call twice bills it twice)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.key = inner.key
        self.name = inner.name
        self._twice: set[str] = set()

    def publish(self, policy_blob: bytes) -> str:
        return self.inner.publish(policy_blob)

    def submit(self, requests: list[Request]) -> None:
        self._twice.update(r.id for r in requests if (r.fault or {}).get("kind") == "duplicate")
        self.inner.submit(requests)

    def collect(self, timeout: float | None = None) -> list[Reply]:
        out: list[Reply] = []
        for reply in self.inner.collect(timeout):
            out.append(reply)
            if reply.record.invocation_id in self._twice:
                self._twice.discard(reply.record.invocation_id)
                out.append(Reply(copy.copy(reply.record), reply.arrays, reply.meta))
        return out

    def cancel(self, ids: Iterable[str] | None = None) -> list[Reply]:
        replies = self.inner.cancel(ids)
        self._twice.difference_update(r.record.invocation_id for r in replies)
        return replies

    @property
    def in_flight(self) -> int:
        return self.inner.in_flight

    def close(self) -> None:
        self.inner.close()
