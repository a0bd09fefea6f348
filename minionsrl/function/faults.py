"""Fault injection: make rollout functions fail the way serverless platforms do, reproducibly, on any backend.

Which invocation gets which fault is a pure function of (fault seed, round, slot, attempt, kind), so a run
with faults is repeatable and a retry (the next attempt) draws afresh. Function-side faults travel in the
request (``request["fault"]``) and the rollout function enacts them itself, so they work wherever the
function runs:

* ``raise``      the function raises an exception (an error reply);
* ``hang``       the function sleeps far past its deadline (the backend or the round deadline cuts it);
* ``kill``       the function SIGKILLs its own process (the instance dies mid-invocation);
* ``malformed``  the function returns corrupted bytes: a flipped byte (fails the HMAC check) or, signed with
                 the right key, a fragment with an array cut short (fails fragment validation).

``duplicate`` (the platform delivers one invocation's reply twice) is enacted by
:class:`DuplicatingBackend`, a thin wrapper over any :class:`~minionsrl.backends.base.Backend`.
Which attempt fails is drawn by the learner (:meth:`FaultPlan.draw`) when it builds the request.
Torch-free: rollout functions import this module.
"""

from __future__ import annotations

import copy
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from minionsrl.backends.base import Backend, Reply
from minionsrl.config import FAULT_FIELDS
from minionsrl.function import wire

KINDS = tuple(FAULT_FIELDS)  # the order fixes which kind a draw falls into
_KIND_CODE = {"train": 0, "eval": 1}


class InjectedFault(RuntimeError):
    """The exception a function raises for an injected ``raise`` fault."""


@dataclass(frozen=True)
class FaultPlan:
    """Per-kind fault rates (each a probability per invocation attempt) and the seed that draws them."""

    rates: dict[str, float]
    seed: int = 0
    hang_s: float = 3600.0  # how long a hung function sleeps: far past any deadline

    @property
    def active(self) -> bool:
        return any(r > 0 for r in self.rates.values())

    def draw(self, round_idx: int, slot: int, attempt: int, kind: str) -> dict[str, Any] | None:
        """The fault of one invocation attempt (``None``: none), deterministic in its arguments."""
        if not self.active:
            return None
        rng = np.random.default_rng([self.seed, round_idx, slot, attempt, _KIND_CODE.get(kind, 2)])
        u, variant = rng.random(), int(rng.integers(2))
        edge = 0.0
        for name in KINDS:
            edge += self.rates.get(name, 0.0)
            if u < edge:
                fault: dict[str, Any] = {"kind": name}
                if name == "hang":
                    fault["sleep_s"] = self.hang_s
                elif name == "malformed":
                    fault["variant"] = variant
                return fault
        return None


def before_work(request: dict[str, Any]) -> None:
    """Enact a request's function-side fault that strikes before any work: raise, hang or kill."""
    fault = request.get("fault") or {}
    kind = fault.get("kind")
    if kind == "raise":
        raise InjectedFault(f"injected fault in {request.get('id')}")
    if kind == "hang":
        time.sleep(float(fault.get("sleep_s", 3600.0)))
    elif kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def corrupt_reply(request: dict[str, Any], reply: bytes, key: bytes) -> bytes:
    """Enact a ``malformed`` fault on a reply: flip one byte, or re-sign it with its first array cut short."""
    fault = request.get("fault") or {}
    if fault.get("kind") != "malformed":
        return reply
    if fault.get("variant", 0) == 0:
        bad = bytearray(reply)
        bad[len(bad) // 2] ^= 0xFF
        return bytes(bad)
    arrays, meta = wire.decode(reply, key)
    name = next((n for n in sorted(arrays) if arrays[n].ndim and len(arrays[n])), None)
    if name is not None:
        arrays[name] = arrays[name][:-1]
    else:  # nothing to cut: drop the arrays altogether
        arrays = {}
    return wire.encode(arrays, meta, key)


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

    def submit(self, requests: list[dict[str, Any]]) -> None:
        self._twice.update(str(r["id"]) for r in requests if (r.get("fault") or {}).get("kind") == "duplicate")
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
