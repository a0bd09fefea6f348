"""The backend interface: publish a policy once per round, invoke many rollout functions, get replies.

A backend moves bytes and measures; it knows nothing of PPO. Every invocation yields an
:class:`InvocationRecord` whatever happened to it, and replies come back in request order.
"""

from __future__ import annotations

import math
import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, cast

import numpy as np

from minionsrl.deployments import BACKENDS
from minionsrl.function import wire
from minionsrl.function.fragment import HungAt, ReplyMeta, Timings
from minionsrl.function.request import Request
from minionsrl.numbers import is_amount


def concurrency(asked: int | None) -> int:
    """How many functions a backend on this machine runs at once: ``asked``, else one per CPU."""
    return asked or os.cpu_count() or 1


def learner_path() -> str:
    """The learner's import path as one ``PYTHONPATH`` value, for the workers a backend starts on this machine:
    they find what the learner finds (a custom env's module, an editable install)."""
    return os.pathsep.join(p for p in sys.path if p)


def hosts_for(actors: int, vcpus_per_host: int) -> int:
    """Servers of ``vcpus_per_host`` vCPUs that ``actors`` actors take, one actor a vCPU: what the server backend
    starts and the cost ledger bills."""
    return math.ceil(actors / vcpus_per_host)


# What happened to an invocation: one vocabulary for backends, the retry engine and invocations.csv.
OK, FAILED, TIMED_OUT, CANCELLED = "ok", "failed", "timed_out", "cancelled"
# Two failures named by their cause: the platform refused the call (it never ran: back off, then retry), and the
# function ran out of memory (killed at its limit, or its allocation failed: retried as a failure).
THROTTLED, OOM = "throttled", "oom"
# How platforms word them (matched case-insensitively in a failed invocation's error): AWS Lambda's
# TooManyRequestsException / HTTP 429 "Rate exceeded" (Lithops' AWS backend raises "Error 429: ..."); Python's
# MemoryError, Ray's OutOfMemoryError, Lithops' "exceeded the memory available to it", Lambda's
# "Runtime.OutOfMemory", and our local backend's "out of memory".
THROTTLE_MARKERS = ("toomanyrequests", "rate exceeded", "error 429", "http 429", "throttl")
OOM_MARKERS = ("memoryerror", "outofmemory", "out of memory", "exceeded the memory", "exceeded maximum memory")


@dataclass
class InvocationRecord:
    """One row of ``invocations.csv``: what the platform did for one invocation."""

    invocation_id: str
    kind: str
    instance_id: str = ""
    cold: bool = False
    init_s: float = 0.0  # instance cold start (if cold) + the function's own init
    run_s: float = 0.0  # the function's stepping time
    cpu_s: float = 0.0  # CPU seconds the function used
    init_wait_s: float = 0.0  # of init_s, the function's wait for a CPU of this machine (not on its own instance)
    run_wait_s: float = 0.0  # of run_s, the same
    reused_policy_s: float = 0.0  # the policy load its instance did for an earlier invocation (Timings)
    duration_s: float = 0.0  # dispatch to reply, as the caller saw it
    bytes_in: int = 0  # request + policy bytes the function fetched
    bytes_out: int = 0  # reply bytes
    status: str = OK  # OK | FAILED | TIMED_OUT (ran past the invocation timeout, stopped) | CANCELLED | THROTTLED | OOM
    error: str = ""

    def row(self) -> dict[str, Any]:
        """The fields by name (all scalars: no deep copy needed, which ``asdict`` would make for every row)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_row(cls, row: dict[str, str]) -> InvocationRecord:
        """The record of an invocations.csv row, read as strings (the columns it adds are left out; a column an
        older run did not write keeps its default, whether the file lacks it or a resumed run left its old rows
        empty)."""
        parse = {"bool": lambda v: v == "True", "float": float, "int": int, "str": str}
        return cls(**{f.name: parse[f.type](row[f.name]) for f in fields(cls) if row.get(f.name, "") != ""})


@dataclass
class Reply:
    """A decoded reply and its record. ``arrays``/``meta`` are empty when the invocation failed."""

    record: InvocationRecord
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    meta: ReplyMeta = field(default_factory=ReplyMeta)
    hung_at: HungAt | None = None  # a timed-out invocation: where it was, where its backend could tell

    @property
    def ok(self) -> bool:
        return self.record.status == OK


def reply_limit(request: Request) -> int | None:
    """The most bytes the reply to ``request`` may have (its ``max_reply_bytes``, set by the learner from the
    steps and row size it asked for), or None where it sets none."""
    cap = request.max_reply_bytes
    return cap if cap is not None and cap > 0 else None


def oversize(size: int, cap: int) -> str:
    """The error of a reply refused for its size, before it was decoded."""
    return f"bad reply: {size} bytes, over the {cap}-byte cap its request allows (steps × row size, with headroom)"


def make_reply(record: InvocationRecord, data: bytes | None, key: bytes, cold_start_s: float = 0.0,
               max_bytes: int | None = None) -> Reply:
    """Decode a function's reply bytes into a :class:`Reply`, filling the record from its timings. ``key`` is
    the run key; the reply must be signed with this invocation's key (``wire.invocation_key``) and name it.
    A reply longer than ``max_bytes`` (:func:`reply_limit` of its request) is refused before it is decoded."""
    if data is None:
        record.status = FAILED
        return Reply(record)
    record.bytes_out = len(data)
    if max_bytes is not None and len(data) > max_bytes:
        record.status, record.error = FAILED, oversize(len(data), max_bytes)
        return Reply(record)
    try:
        arrays, header = wire.decode(data, wire.invocation_key(key, record.invocation_id))
        meta = cast(ReplyMeta, header)  # from outside: each field is checked where it is read
        if meta.get("id") != record.invocation_id:
            raise wire.WireError(f"reply names invocation {meta.get('id')!r}, not {record.invocation_id!r}")
    except wire.WireError as exc:
        record.status, record.error = FAILED, f"bad reply: {exc}"
        return Reply(record)
    if meta.get("type") == "error":
        record.status, record.error = FAILED, str(meta.get("error", "function failed"))
        classify_failure(record)
        return Reply(record, meta=meta)
    instance = meta.get("instance")
    if isinstance(instance, dict) and not record.instance_id:  # remote platforms: the function says where it ran
        record.instance_id, record.cold = str(instance.get("id", "")), instance.get("served") == 0
    policy_bytes = meta.get("policy_bytes", 0)
    try:
        timings = checked_timings(meta.get("timings", {}), record.duration_s, bool(meta.get("policy_fetched")))
        if not (isinstance(policy_bytes, int) and not isinstance(policy_bytes, bool) and policy_bytes >= 0):
            raise ValueError(f"policy_bytes is {policy_bytes!r}, not a byte count")
    except ValueError as exc:  # billed as given it would be a forged bill: a failed attempt, retried
        record.status, record.error = FAILED, f"bad reply: {exc}"
        return Reply(record)
    for name in TIMINGS:
        setattr(record, name, timings[name])
    record.init_s += cold_start_s
    record.bytes_in += policy_bytes
    return Reply(record, arrays, meta)


TIMINGS = tuple(f.name for f in fields(Timings))  # a reply's timings, by the names the record keeps them under


def checked_timings(timings: Any, duration_s: float, policy_fetched: bool = False) -> dict[str, float]:
    """A reply's timings as numbers the ledger may bill: each finite and non-negative (missing ones 0), and the
    function's time within what its caller saw (``duration_s``, where measured); a policy load reused from an
    earlier invocation neither beside a load of its own (``policy_fetched``) nor longer than this invocation as
    its caller saw it; ValueError otherwise. (A CPU wait read a moment after its time may exceed it: the ledger
    clamps own-instance times at 0.)"""
    if not isinstance(timings, dict):
        raise ValueError("timings are not a mapping")
    out = {}
    for name in TIMINGS:
        value = timings.get(name, 0.0)
        if not is_amount(value):
            raise ValueError(f"timings.{name} is {value!r}, not a finite non-negative number")
        out[name] = float(value)
    # the function's clock and its caller's run apart: 1% and 50 ms of slack before a reply is called forged
    within = 1.01 * duration_s + 0.05 if duration_s > 0 else float("inf")
    if out["init_s"] + out["run_s"] > within:
        raise ValueError(f"timings say {out['init_s'] + out['run_s']:.3g} s, more than the {duration_s:.3g} s "
                         "the caller waited")
    reused = out["reused_policy_s"]
    if reused and policy_fetched:
        raise ValueError("timings bill a reused policy load beside a load of its own")
    if reused > within:
        raise ValueError(f"timings say the reused policy load took {reused:.3g} s, more than the whole "
                         f"{duration_s:.3g} s invocation")
    return out


def classify_failure(record: InvocationRecord) -> InvocationRecord:
    """Name a failed invocation's cause where its error says it: THROTTLED (the platform refused the call) or
    OOM (the function ran out of memory); any other failure stays FAILED. Time-outs and cancellations keep
    their status. Returns the record."""
    if record.status == FAILED:
        text = record.error.lower()
        if any(m in text for m in THROTTLE_MARKERS):
            record.status = THROTTLED
        elif any(m in text for m in OOM_MARKERS):
            record.status = OOM
    return record


def throttle_refusal(request: Request) -> str | None:
    """The platform's refusal of a request that carries an injected ``throttle`` fault (worded as AWS Lambda's),
    or None. Refusing is the platform's doing, before any function runs, so each backend enacts it at submission
    (:class:`Refusals`), as :class:`~minionsrl.backends.duplicating.DuplicatingBackend` enacts duplicates."""
    if (request.fault or {}).get("kind") != "throttle":
        return None
    return (f"TooManyRequestsException: Rate exceeded (injected throttle: the platform refused "
            f"{request.id}; it never ran)")


class Refusals:
    """Calls the platform refused at submission (throttled): never started, answered at the next ``collect``."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []

    def __len__(self) -> int:
        return len(self.replies)

    def admit(self, requests: list[Request]) -> list[Request]:
        """The requests the platform accepts; the others are kept as THROTTLED replies (not billed: duration 0)."""
        accepted = []
        for request in requests:
            why = throttle_refusal(request)
            if why is None:
                accepted.append(request)
            else:
                self.replies.append(Reply(InvocationRecord(invocation_id=request.id, kind=request.kind,
                                                           status=THROTTLED, error=why)))
        return accepted

    def take(self, ids: Iterable[str] | None = None) -> list[Reply]:
        """Remove and return the refusals (all, or those in ``ids``)."""
        wanted = None if ids is None else set(ids)
        taken = [r for r in self.replies if wanted is None or r.record.invocation_id in wanted]
        self.replies = [r for r in self.replies if all(r is not t for t in taken)]
        return taken


# Deadlines by default, as a serverless platform has them (SPEC §6): a function never runs for ever
LIMIT_S = 900.0  # the longest any invocation may run: AWS Lambda's limit
DEADLINE_FACTOR = 10.0  # by default an invocation may run this many times the longest recent one of its kind ...
DEADLINE_FLOOR_S = 60.0  # ... but at least this long ...
FIRST_DEADLINE_S = 300.0  # ... and, before one of its kind has succeeded, this long (or the learner's guess)
_KEPT_DURATIONS = 64  # ... of this many of the latest successes of a kind


class Deadlines:
    """How long each invocation may run before the backend stops it (status ``timed_out``).

    The user's ``invocation_timeout_s`` where given; otherwise derived from what the run measured, per kind of
    invocation (training, evaluation): :data:`DEADLINE_FACTOR` times the longest of the latest successful
    invocations of that kind, at least :data:`DEADLINE_FLOOR_S`, at most :data:`LIMIT_S`. The longest, not a median:
    an evaluation's episodes grow as the policy learns (CartPole's from 20 steps to 500), and a deadline must not
    cut a function that is only slower than the early ones. Before any succeeded, the learner's guess of a duration
    (:meth:`expect`) is taken the same way, else :data:`FIRST_DEADLINE_S`."""

    def __init__(self, fixed_s: float | None = None) -> None:
        self.fixed_s = fixed_s
        self._seen: dict[str, list[float]] = {}  # kind -> the latest successful durations
        self._expected: dict[str, float] = {}  # kind -> the learner's guess of a duration

    def expect(self, kind: str, seconds: float) -> None:
        """The learner's guess of how long an invocation of ``kind`` takes, for the deadline before one has run."""
        self._expected[kind] = seconds

    def observe(self, record: InvocationRecord) -> None:
        """Learn from an invocation that ended: a successful one's duration moves its kind's deadline."""
        if record.status == OK and record.duration_s > 0:
            seen = self._seen.setdefault(record.kind, [])
            seen.append(record.duration_s)
            del seen[:-_KEPT_DURATIONS]

    def of(self, kind: str) -> float:
        """The deadline, in seconds, of an invocation of ``kind`` sent now."""
        if self.fixed_s is not None:
            return self.fixed_s
        seen = self._seen.get(kind)
        if seen:
            typical = max(seen)
        elif kind in self._expected:
            typical = self._expected[kind]
        else:
            return FIRST_DEADLINE_S
        return min(LIMIT_S, max(DEADLINE_FLOOR_S, DEADLINE_FACTOR * typical))

    def error(self, timeout_s: float, where: HungAt | None = None) -> str:
        """The error of an invocation stopped at its deadline ``timeout_s``, and ``where`` it was (what hung)."""
        rule = ("--invocation-timeout-s" if self.fixed_s is not None else
                f"the default deadline: {DEADLINE_FACTOR:g}x the longest of its kind, at least {DEADLINE_FLOOR_S:g} s; "
                "set --invocation-timeout-s to change it")
        return f"timed out after {timeout_s:.3g} s ({rule})" + (f"; it was {where}" if where else "")


@dataclass(eq=False)
class Pending:
    """An invocation submitted and not yet answered: its request, the bytes sent, and the platform's handle."""

    request: Request
    payload: bytes
    sent: float = 0.0  # perf_counter time of dispatch
    handle: Any = None
    timeout_s: float | None = None  # its deadline (:class:`Deadlines`), fixed when it is sent

    @property
    def id(self) -> str:
        return self.request.id

    def record(self, **fields: Any) -> InvocationRecord:
        """This invocation's record, with what the backend knows of it so far."""
        return InvocationRecord(invocation_id=self.id, kind=self.request.kind, bytes_in=len(self.payload),
                                **fields)

    def send(self, deadlines: Deadlines, now: float) -> None:
        """Mark it sent at ``now`` (a ``perf_counter`` time), with the deadline its kind has now."""
        self.sent, self.timeout_s = now, deadlines.of(self.request.kind)

    def overdue(self, now: float) -> bool:
        """Whether this invocation ran past its deadline at ``now``."""
        return self.timeout_s is not None and now - self.sent > self.timeout_s


def timeout_left_s(pending: Iterable[Pending], now: float) -> float | None:
    """Seconds from ``now`` until the first of ``pending`` runs past its deadline (0 if one has; None: nothing in
    flight has one): how long a backend may wait for replies before it must expire one."""
    ends = [p.sent + p.timeout_s for p in pending if p.timeout_s is not None]
    return max(0.0, min(ends) - now) if ends else None


def retire_policies(published: list[str], in_use: set[str]) -> list[str]:
    """Take out of ``published`` (oldest first) the policy references that no invocation in flight uses and
    that are not one of the newest two (a pipelined round's functions sample with the one before the newest, and
    a failed one is retried with it after the newest came out); return them, for the backend to delete."""
    retired = [ref for ref in published[:-2] if ref not in in_use]
    published[:] = [ref for ref in published if ref not in retired]
    return retired


def earliest(*timeouts: float | None) -> float | None:
    """The smallest of the given timeouts (None: no limit), never negative."""
    given = [t for t in timeouts if t is not None]
    return max(0.0, min(given)) if given else None


class Backend(ABC):
    """Runs rollout functions: ``local`` (embedded FaaS runtime), ``server``, ``ray`` and ``lithops``.

    The primitives are asynchronous — :meth:`submit` starts invocations, :meth:`collect` returns those
    that ended, :meth:`cancel` abandons the rest — so a learner may keep invocations in flight;
    :meth:`invoke` is the synchronous round built on them.
    """

    name: str = "base"
    key: bytes

    @abstractmethod
    def publish(self, policy_blob: bytes) -> str:
        """Make this round's policy available to functions once; return the reference they fetch."""

    @abstractmethod
    def submit(self, requests: list[Request]) -> None:
        """Start one function per request (each has a unique ``id``) and return at once."""

    @abstractmethod
    def collect(self, timeout: float | None = None) -> list[Reply]:
        """Wait until at least one in-flight invocation ends (or ``timeout`` seconds pass) and return every
        reply available now, in arrival order; ``[]`` on timeout or when nothing is in flight."""

    @abstractmethod
    def cancel(self, ids: Iterable[str] | None = None) -> list[Reply]:
        """Abandon in-flight invocations (all, or those in ``ids``), stopping them where the platform can;
        return their records as error replies, billed for the time they ran."""

    @property
    @abstractmethod
    def in_flight(self) -> int:
        """Invocations submitted whose reply has not been collected yet."""

    @abstractmethod
    def close(self) -> None:
        """Release every instance and resource."""

    def where(self) -> str:
        """Where the functions run, in words: the summary's "functions ran on" (a backend that knows more, such as
        Lithops' compute backend and config, says more)."""
        kind = BACKENDS.get(self.name)
        return kind.where if kind is not None else self.name

    def prewarm(self, count: int) -> None:  # noqa: B027 - optional: most platforms cannot prewarm
        """Start up to ``count`` instances ahead of the first invocations, where the platform can (their first
        invocations are still cold, and billed so); by default nothing."""

    def invoke(self, requests: list[Request], deadline_s: float | None = None) -> list[Reply]:
        """Run one function per request and wait for them all, or until ``deadline_s`` seconds have passed,
        after which the stragglers are cancelled. Every request gets at least one reply (several if the
        platform delivered it more than once), sorted in request order."""
        if self.in_flight:
            raise RuntimeError(f"invoke() needs an idle backend; {self.in_flight} invocations are in flight")
        order = {r.id: i for i, r in enumerate(requests)}
        waiting, replies = set(order), []
        end = None if deadline_s is None else time.perf_counter() + deadline_s
        self.submit(requests)
        while waiting and self.in_flight:
            timeout = None if end is None else end - time.perf_counter()
            if timeout is not None and timeout <= 0:
                break
            for reply in self.collect(timeout):
                replies.append(reply)
                waiting.discard(reply.record.invocation_id)
        replies.extend(self.cancel(waiting) if waiting else [])
        answered = {r.record.invocation_id for r in replies}
        replies.extend(Reply(InvocationRecord(invocation_id=i, kind=requests[order[i]].kind, status=FAILED,
                                              error="the backend lost this invocation"))
                       for i in sorted(waiting - answered, key=order.__getitem__))
        return sorted(replies, key=lambda r: order.get(r.record.invocation_id, len(order)))

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
