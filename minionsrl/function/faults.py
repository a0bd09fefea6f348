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

``duplicate`` (the platform delivers one invocation's reply twice) is enacted on the learner's side by
:class:`~minionsrl.backends.duplicating.DuplicatingBackend`, a thin wrapper over any backend.
Which attempt fails is drawn by the learner (:meth:`FaultPlan.draw`) when it builds the request.
Torch-free and config-free: rollout functions import this module.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from minionsrl.function import wire

KINDS = ("raise", "hang", "kill", "duplicate", "malformed")  # the order fixes which kind a draw falls into


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
        rng = np.random.default_rng([self.seed, round_idx, slot, attempt, wire.SEED_STREAMS[kind]])
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
