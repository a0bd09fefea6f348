"""Fault injection: make rollout functions fail the way serverless platforms do, reproducibly, on any backend.

Which invocation gets which fault is a pure function of (fault seed, round, slot, attempt, kind), so a run
with faults is repeatable and a retry (the next attempt) draws afresh. Function-side faults travel in the
request (``Request.fault``) and the rollout function enacts them itself, so they work wherever the
function runs:

* ``raise``      the function raises an exception (an error reply);
* ``hang``       the function sleeps far past its deadline (the backend or the round deadline cuts it);
* ``kill``       the function SIGKILLs its own process (the instance dies mid-invocation);
* ``malformed``  the function returns corrupted bytes: a flipped byte (fails the HMAC check) or, signed with
                 the right key, a fragment with an array cut short (fails fragment validation);
* ``oom``        the function allocates (and touches) memory past its limit: a platform that enforces the limit
                 kills it there (the ``local`` backend does, as Lambda does); where none does, the function
                 raises ``MemoryError`` itself once past it.

``duplicate`` (the platform delivers one invocation's reply twice) is enacted on the learner's side by
:class:`~minionsrl.backends.duplicating.DuplicatingBackend`, a thin wrapper over any backend, and ``throttle``
(the platform refuses the call: it never runs) by every backend at submission
(:class:`~minionsrl.backends.base.Refusals`).
Which attempt fails is drawn by the learner (:meth:`FaultPlan.draw`) when it builds the request.
Torch-free and config-free: rollout functions import this module.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import numpy as np

from minionsrl.function import wire
from minionsrl.function.request import Fault, Request

# the order fixes which kind a draw falls into; new kinds go at the end, so that the draws of the others stay
KINDS = ("raise", "hang", "kill", "duplicate", "malformed", "throttle", "oom")
MEMORY_ENV = "MINIONSRL_FUNCTION_MEMORY_MB"  # a function's memory, as its backend tells it (Lambda: its own variable)
_LAMBDA_MEMORY_ENV = "AWS_LAMBDA_FUNCTION_MEMORY_SIZE"
DEFAULT_MEMORY_MB = 1769.0  # a function's memory when nothing says (the config's default: 1 vCPU on Lambda)
HANG_S = 3600.0  # how long a hung function sleeps: far past any deadline


class InjectedFault(RuntimeError):
    """The exception a function raises for an injected ``raise`` fault."""


@dataclass(frozen=True)
class FaultPlan:
    """Per-kind fault rates (each a probability per invocation attempt) and the seed that draws them."""

    rates: dict[str, float]
    seed: int = 0
    hang_s: float = HANG_S

    @property
    def active(self) -> bool:
        return any(r > 0 for r in self.rates.values())

    def draw(self, round_idx: int, slot: int, attempt: int, kind: str) -> Fault | None:
        """The fault of one invocation attempt (``None``: none), deterministic in its arguments."""
        if not self.active:
            return None
        rng = np.random.default_rng([self.seed, round_idx, slot, attempt, wire.SEED_STREAMS[kind]])
        u, variant = rng.random(), int(rng.integers(2))
        edge = 0.0
        for name in KINDS:
            edge += self.rates.get(name, 0.0)
            if u < edge:
                fault: Fault = {"kind": name}
                if name == "hang":
                    fault["sleep_s"] = self.hang_s
                elif name == "malformed":
                    fault["variant"] = variant
                return fault
        return None


def before_work(request: Request) -> None:
    """Enact a request's function-side fault that strikes before any work: raise, hang or kill."""
    fault = request.fault or {}
    kind = fault.get("kind")
    if kind == "raise":
        raise InjectedFault(f"injected fault in {request.id}")
    if kind == "hang":
        time.sleep(float(fault.get("sleep_s", HANG_S)))
    elif kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "oom":
        exceed_memory(function_memory_mb())


def function_memory_mb() -> float:
    """This function's memory limit in MB, as its platform says it (else the config's default)."""
    for name in (MEMORY_ENV, _LAMBDA_MEMORY_ENV):
        try:
            return float(os.environ[name])
        except (KeyError, ValueError):
            continue
    return DEFAULT_MEMORY_MB


def exceed_memory(limit_mb: float, margin_mb: float = 64.0) -> None:
    """Allocate and touch memory until this process holds more than ``limit_mb`` + ``margin_mb``: quickly to just
    under the limit, then slowly (8 MB every 25 ms), so that it stays past its limit for a while (at least
    ``margin_mb`` / 8 × 25 ms) and a platform watching the process's memory kills it there. A platform that enforces
    no limit lets it get to the end: then it raises ``MemoryError`` itself."""
    held: list[np.ndarray] = []
    step, limit, target = 8 << 20, limit_mb * (1 << 20), (limit_mb + margin_mb) * (1 << 20)
    while (rss := _rss_bytes()) < target:
        fast = rss + 8 * step <= limit  # a large block only where it cannot cross the limit in one go
        held.append(np.ones(8 * step if fast else step, dtype=np.uint8))  # touched
        if not fast:
            time.sleep(0.025)
    raise MemoryError(f"out of memory (injected): allocated past the function's {limit_mb:g} MB and no platform "
                      "stopped it")


def resident_bytes(pid: int | str = "self") -> int | None:
    """A process's resident memory in bytes (Linux ``/proc``), or None where it cannot be read (it has exited)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _rss_bytes() -> int:
    """This process's resident memory (elsewhere than Linux, what ``ru_maxrss`` says: its peak)."""
    rss = resident_bytes()
    if rss is None:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
    return rss


def corrupt_reply(request: Request, reply: bytes, key: bytes) -> bytes:
    """Enact a ``malformed`` fault on a reply: flip one byte, or re-sign it with its first array cut short."""
    fault = request.fault or {}
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
