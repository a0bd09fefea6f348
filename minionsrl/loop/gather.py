"""Gathering a round's replies through faults (SPEC §6): bounded retries, de-duplication, a round deadline.

Each slot of the round (one actor) is invoked, and re-invoked after a failure up to ``max_retries``
times; every attempt of a slot carries the slot's seed, so a retried fragment is the fragment the first
attempt would have returned. Replies are de-duplicated by invocation id (a platform may deliver one
twice). At the round deadline the invocations still running are cancelled, and the round proceeds with
the slots that came back if they are at least ``min_fraction`` of the round; otherwise it fails. Every
attempt, duplicate and straggler is kept, so the ledger can bill it and ``invocations.csv`` list it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from minionsrl.backends.base import Backend, Reply
from minionsrl.errors import InvocationError
from minionsrl.function.wire import WireError

# Statuses of an attempt in invocations.csv; a stray is a reply to no invocation of this round (a late one).
OK, FAILED, TIMED_OUT, CANCELLED, DUPLICATE, STRAY = "ok", "failed", "timed_out", "cancelled", "duplicate", "stray"


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
    """One delivered reply (or cancelled invocation) of one slot."""

    slot: int
    attempt: int
    request: dict[str, Any]
    reply: Reply
    status: str


@dataclass
class Gathered:
    """What a round got back: a validated result per slot that succeeded, and every attempt."""

    results: dict[int, Any]  # slot -> what ``validate`` returned for its accepted reply
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


def gather(backend: Backend, slots: int, make_request: Callable[[int, int], dict[str, Any]],
           validate: Callable[[int, Reply], Any], policy: RetryPolicy, what: str = "round") -> Gathered:
    """Invoke ``slots`` functions (``make_request(slot, attempt)`` builds each attempt) and collect them under
    ``policy``; ``validate(slot, reply)`` turns an ok reply into a result or raises ``WireError``."""
    end = None if policy.deadline_s is None else time.perf_counter() + policy.deadline_s
    out = Gathered(results={})
    sent: dict[str, tuple[int, int, dict[str, Any]]] = {}  # invocation id -> (slot, attempt, request)

    def submit(pairs: list[tuple[int, int]]) -> None:
        requests = [make_request(slot, attempt) for slot, attempt in pairs]
        sent.update({str(r["id"]): (slot, attempt, r) for (slot, attempt), r in zip(pairs, requests, strict=True)})
        backend.submit(requests)

    submit([(slot, 0) for slot in range(slots)])
    seen: set[str] = set()
    open_slots = set(range(slots))
    while open_slots and backend.in_flight:
        timeout = None if end is None else end - time.perf_counter()
        if timeout is not None and timeout <= 0:
            break
        retry: list[tuple[int, int]] = []
        for reply in backend.collect(timeout):
            rid = reply.record.invocation_id
            if rid not in sent:  # billed, never learned from
                out.attempts.append(Attempt(-1, -1, {"id": rid, "kind": reply.record.kind, "seed": ""}, reply, STRAY))
                continue
            slot, attempt, request = sent[rid]
            if rid in seen:  # the platform delivered this invocation again: bill it, learn nothing from it
                out.attempts.append(Attempt(slot, attempt, request, reply, DUPLICATE))
                continue
            seen.add(rid)
            result, status = accept(reply, lambda r, s=slot: validate(s, r))
            if status == OK:
                out.results[slot] = result
            out.attempts.append(Attempt(slot, attempt, request, reply, status))
            if status == OK:
                open_slots.discard(slot)
            elif attempt < policy.max_retries:
                retry.append((slot, attempt + 1))
            else:
                open_slots.discard(slot)
                out.lost.append(slot)
        if retry:
            submit(retry)
    stragglers = cancelled(backend, sent) if backend.in_flight else []  # still running past the round deadline
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


def accept(reply: Reply, validate: Callable[[Reply], Any]) -> tuple[Any, str]:
    """A first delivery's result (``None`` unless ``validate`` accepts an ok reply) and its status; an
    authentic but malformed reply becomes a failed attempt like any other."""
    if reply.ok:
        try:
            return validate(reply), OK
        except WireError as exc:
            reply.record.status, reply.record.error = "error", f"malformed reply: {exc}"
    return None, TIMED_OUT if reply.record.status == "timeout" else FAILED


def cancelled(backend: Backend, sent: dict[str, tuple[int, int, dict[str, Any]]]) -> list[Attempt]:
    """Cancel the backend's invocations in ``sent`` (id -> slot, attempt, request): billed, never learned from."""
    attempts = []
    for reply in backend.cancel(list(sent)):
        slot, attempt, request = sent[reply.record.invocation_id]
        attempts.append(Attempt(slot, attempt, request, reply, CANCELLED))
    return attempts
