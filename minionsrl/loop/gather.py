"""Invocations through faults (DESIGN §6): bounded retries, de-duplication, a round deadline.

:class:`Tracker` is the one place where replies meet the invocations they answer: every reply is
classified once (a first delivery, accepted or failed; a second delivery; a reply to nothing sent),
whichever sampler keeps the invocations in flight. :func:`gather` is the synchronous round on top of
it: each slot of the round (one actor) is invoked, and re-invoked after a failure up to
``max_retries`` times; every attempt of a slot carries the slot's seed, so a retried fragment is the
fragment the first attempt would have returned. At the round deadline the invocations still running
are cancelled, and the round proceeds with the slots that came back if they are at least
``min_fraction`` of the round; otherwise it fails. Every attempt, duplicate and straggler is kept, so
the ledger can bill it and ``invocations.csv`` list it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from minionsrl.backends.base import CANCELLED, FAILED, OK, TIMED_OUT, Backend, Reply
from minionsrl.errors import InvocationError
from minionsrl.function.wire import WireError

# Statuses of an attempt in invocations.csv: the backend's (ok, failed, timed_out, cancelled) and two of
# de-duplication: a second delivery of an answered invocation, and a stray reply to nothing sent.
DUPLICATE, STRAY = "duplicate", "stray"
__all__ = ["CANCELLED", "DUPLICATE", "FAILED", "OK", "STRAY", "TIMED_OUT", "Attempt", "Gathered", "RetryPolicy",
           "TooFewReplies", "Tracker", "fault_counts", "gather"]


class TooFewReplies(InvocationError):
    """A round got fewer results than its policy allows; ``gathered`` holds every attempt, to log and bill."""

    def __init__(self, message: str, gathered: Gathered) -> None:
        super().__init__(message)
        self.gathered = gathered


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a round tries: retries per slot, a deadline, and the fraction of slots it needs."""

    max_retries: int = 3
    deadline_s: float | None = None
    min_fraction: float = 1.0


@dataclass
class Attempt:
    """One delivered reply (or cancelled invocation) of one slot, and what was made of it."""

    slot: int
    attempt: int
    request: dict[str, Any]
    reply: Reply
    status: str
    result: Any = None  # what the validator returned for an accepted reply


@dataclass
class Gathered:
    """What a round got back: a validated result per slot that succeeded, and every attempt."""

    results: dict[int, Any]  # slot -> the accepted reply's result
    attempts: list[Attempt] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # slots with no result


def fault_counts(attempts: list[Attempt], lost: int) -> dict[str, int]:
    """Per-round fault counters: failed attempts (timed out ones included), retried attempts, attempts that ran
    past a deadline (invocation timeout, or cancelled at the round deadline), discarded duplicate (or stray)
    deliveries, and slots that got no result."""

    def count(*statuses: str) -> int:
        return sum(1 for a in attempts if a.status in statuses)

    return {"failed": count(FAILED, TIMED_OUT), "timed_out": count(TIMED_OUT, CANCELLED),
            "retried": sum(1 for a in attempts if a.attempt > 0 and a.status not in (DUPLICATE, STRAY)),
            "duplicates": count(DUPLICATE, STRAY), "lost": lost}


Validator = Callable[[dict[str, Any], Reply], Any]  # (request, ok reply) -> result, or raises WireError


class Tracker:
    """The invocations sent through one backend, by id: it submits them and classifies every reply once."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.flying: dict[str, tuple[int, int, dict[str, Any]]] = {}  # id -> (slot, attempt, request), unanswered
        self.answered: dict[str, tuple[int, int, dict[str, Any]]] = {}  # id -> (slot, attempt, slim request)

    def submit(self, sent: list[tuple[int, int, dict[str, Any]]]) -> None:
        """Send ``(slot, attempt, request)`` triples as one batch."""
        self.flying.update({str(r["id"]): (slot, attempt, r) for slot, attempt, r in sent})
        self.backend.submit([r for _, _, r in sent])

    def receive(self, reply: Reply, validate: Validator) -> Attempt:
        """Classify one reply: a first delivery is validated (an authentic but malformed reply is a failed
        attempt like any other); a second delivery is a duplicate and a reply to nothing sent a stray — both
        billed, never learned from."""
        rid = reply.record.invocation_id
        if rid in self.answered:
            slot, attempt, request = self.answered[rid]
            return Attempt(slot, attempt, request, reply, DUPLICATE)
        if rid not in self.flying:
            return Attempt(-1, -1, {"id": rid, "kind": reply.record.kind, "seed": ""}, reply, STRAY)
        slot, attempt, request = self.flying.pop(rid)
        # keep what invocations.csv needs of an answered request, not its payload (carried episodes)
        self.answered[rid] = (slot, attempt, {k: request.get(k) for k in ("id", "kind", "seed", "fault")})
        if reply.ok:
            try:
                return Attempt(slot, attempt, request, reply, OK, validate(request, reply))
            except WireError as exc:
                reply.record.status, reply.record.error = FAILED, f"malformed reply: {exc}"
        return Attempt(slot, attempt, request, reply, reply.record.status)

    def cancel(self, ids: list[str] | None = None) -> list[Attempt]:
        """Cancel invocations still in flight (all of them by default): billed, never learned from."""
        wanted = list(self.flying) if ids is None else ids
        attempts = []
        for reply in self.backend.cancel(wanted) if wanted else []:
            slot, attempt, request = self.flying.pop(reply.record.invocation_id)
            attempts.append(Attempt(slot, attempt, request, reply, CANCELLED))
        return attempts


def gather(backend: Backend, slots: int, make_request: Callable[[int, int], dict[str, Any]],
           validate: Validator, policy: RetryPolicy, what: str = "round") -> Gathered:
    """Invoke ``slots`` functions (``make_request(slot, attempt)`` builds each attempt) and collect them under
    ``policy``; ``validate(request, reply)`` turns an ok reply into a result or raises ``WireError``."""
    end = None if policy.deadline_s is None else time.perf_counter() + policy.deadline_s
    out = Gathered(results={})
    tracker = Tracker(backend)
    tracker.submit([(slot, 0, make_request(slot, 0)) for slot in range(slots)])
    open_slots = set(range(slots))
    while open_slots and backend.in_flight:
        timeout = None if end is None else end - time.perf_counter()
        if timeout is not None and timeout <= 0:
            break
        retry: list[tuple[int, int, dict[str, Any]]] = []
        for reply in backend.collect(timeout):
            got = tracker.receive(reply, validate)
            out.attempts.append(got)
            if got.status in (DUPLICATE, STRAY):
                continue
            if got.status == OK:
                out.results[got.slot] = got.result
                open_slots.discard(got.slot)
            elif got.attempt < policy.max_retries:
                retry.append((got.slot, got.attempt + 1, make_request(got.slot, got.attempt + 1)))
            else:
                open_slots.discard(got.slot)
                out.lost.append(got.slot)
        if retry:
            tracker.submit(retry)
    stragglers = tracker.cancel() if backend.in_flight else []  # still running past the round deadline
    out.attempts.extend(stragglers)
    out.lost.extend(a.slot for a in stragglers)
    out.lost.extend(sorted(open_slots - set(out.lost)))  # a backend that dropped an invocation without a reply
    out.lost.sort()
    if len(out.results) < policy.min_fraction * slots or not out.results:
        first = next((a.reply.record for a in out.attempts if a.status in (FAILED, TIMED_OUT, CANCELLED)), None)
        error = (first.error.splitlines() or [""])[0] if first else ""
        detail = f"; first failure {first.invocation_id}: {error}" if first else ""
        raise TooFewReplies(f"{what}: only {len(out.results)} of {slots} invocations succeeded, fewer than "
                            f"min_reply_fraction {policy.min_fraction:g} of them{detail}", out)
    return out
