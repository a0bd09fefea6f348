"""Invocations through faults (DESIGN §6): bounded retries, de-duplication, a round deadline.

:class:`Tracker` is the one place where replies meet the invocations they answer: every reply is
classified once (a first delivery, accepted or failed; a second delivery; a reply to nothing sent),
whichever sampler keeps the invocations in flight. :func:`run_group` is the synchronous round on top of
it: each slot of the round (one actor) is invoked, and re-invoked after a failure up to
``max_retries`` times; every attempt of a slot carries the slot's seed, so a retried fragment is the
fragment the first attempt would have returned. A call the platform refused (``throttled``) is re-invoked
after an exponential back-off with full jitter and does not count against ``max_retries``: a platform that
throttles says "not now", not that the function fails, and counting refusals as failures would lose slots
to a burst of them that a short wait rides out; ``max_throttled`` refusals of a slot in a row (and the
round deadline) bound the waiting instead. At the round deadline the invocations still running
are cancelled, and the round proceeds with the slots that came back if they are at least
``min_fraction`` of the round; otherwise it fails. Every attempt, duplicate and straggler is kept, so
the ledger can bill it and ``invocations.csv`` list it. :class:`Retries` is the one retry engine: it counts a
slot's failures and refusals, times its back-off and decides what a failed attempt becomes (retried at once,
retried after a back-off, given up), for the synchronous round and the asynchronous sampler alike.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from minionsrl.backends.base import (
    CANCELLED,
    FAILED,
    OK,
    OOM,
    THROTTLED,
    TIMED_OUT,
    Backend,
    InvocationRecord,
    Reply,
    classify_failure,
    earliest,
)
from minionsrl.errors import InvocationError
from minionsrl.function.request import Request
from minionsrl.function.wire import WireError

# Statuses of an attempt in invocations.csv: the backend's (ok, failed, timed_out, cancelled) and two of
# de-duplication: a second delivery of an answered invocation, and a stray reply to nothing sent.
DUPLICATE, STRAY = "duplicate", "stray"
# What becomes of a slot after a failed attempt (:meth:`Retries.after`)
RETRY, BACK_OFF, GIVE_UP = "retry", "back off", "give up"
__all__ = ["BACK_OFF", "CANCELLED", "DUPLICATE", "FAILED", "GIVE_UP", "OK", "OOM", "RETRY", "STRAY", "THROTTLED",
           "TIMED_OUT", "Attempt", "Group", "InFlightGroup", "Outcome", "Replay", "Retries", "RetryPolicy",
           "TooFewReplies", "Tracker", "Verdict", "backoff_s", "fault_counts", "run_group", "run_groups", "slot_chains"]
_JITTER = random.Random()  # back-off jitter: timing only, never what is learned


class TooFewReplies(InvocationError):
    """A round got fewer results than its policy allows; ``outcome`` holds every attempt, to log and bill."""

    def __init__(self, message: str, outcome: Outcome) -> None:
        super().__init__(message)
        self.outcome = outcome


@dataclass(frozen=True)
class RetryPolicy:
    """How hard a round tries: retries per slot, a deadline, and the fraction of slots it needs."""

    max_retries: int = 3
    deadline_s: float | None = None
    min_fraction: float = 1.0
    max_throttled: int = 30  # refusals of one slot in a row before it is given up (some 2.5 min of back-off)
    backoff_base_s: float = 0.05  # the first back-off after a refusal is up to this; it doubles with each one
    backoff_cap_s: float = 5.0


def backoff_s(policy: RetryPolicy, refusals: int) -> float:
    """How long to wait before re-invoking a slot refused ``refusals`` times in a row: exponential back-off with
    full jitter, uniform in [0, min(cap, base · 2^(refusals-1))], so throttled callers do not come back in step."""
    return _JITTER.uniform(0.0, min(policy.backoff_cap_s, policy.backoff_base_s * 2.0 ** max(refusals - 1, 0)))


@dataclass
class Attempt:
    """One delivered reply (or cancelled invocation) of one slot, and what was made of it."""

    slot: int
    attempt: int
    request: Request | None  # None: a stray, a reply to no invocation sent
    reply: Reply
    status: str
    result: Any = None  # what the validator returned for an accepted reply


@dataclass
class Outcome:
    """What a group of invocations came to: a validated result per slot that succeeded, every attempt, and the
    slots lost."""

    results: dict[int, Any]  # slot -> the accepted reply's result
    attempts: list[Attempt] = field(default_factory=list)
    lost: list[int] = field(default_factory=list)  # slots with no result


def slot_chains(outcomes: list[Outcome]) -> list[list[InvocationRecord]]:
    """Each slot's attempts, in the order they ran: a platform runs a slot's retries one after the other. A second
    delivery of one invocation, or a stray reply, is not an attempt of its own."""
    chains: dict[tuple[int, int], list[InvocationRecord]] = {}
    for group, g in enumerate(outcomes):
        for a in g.attempts:
            if a.status not in (DUPLICATE, STRAY):
                chains.setdefault((group, a.slot), []).append(a.reply.record)
    return list(chains.values())


def fault_counts(attempts: list[Attempt], lost: int) -> dict[str, int]:
    """Per-round fault counters: failed attempts (timed out and out-of-memory ones included), retried attempts,
    attempts that ran past a deadline (invocation timeout, or cancelled at the round deadline), discarded duplicate
    (or stray) deliveries, slots that got no result, and calls the platform refused (throttled: not failures)."""

    def count(*statuses: str) -> int:
        return sum(1 for a in attempts if a.status in statuses)

    return {"failed": count(FAILED, TIMED_OUT, OOM), "timed_out": count(TIMED_OUT, CANCELLED),
            "retried": sum(1 for a in attempts if a.attempt > 0 and a.status not in (DUPLICATE, STRAY)),
            "duplicates": count(DUPLICATE, STRAY), "lost": lost, "throttled": count(THROTTLED)}


class Verdict(NamedTuple):
    """What :meth:`Retries.after` made of a failed attempt: ``action`` (:data:`RETRY` at once, :data:`BACK_OFF`:
    retried once its back-off is over, :data:`GIVE_UP`), the number of the attempt that retries it (a new id, the
    same seed), and ``count``: the slot's failures, or refusals in a row, this one included (past its limit when
    the slot is given up)."""

    action: str
    attempt: int
    count: int


class Replay(NamedTuple):
    """What a failed attempt did that its slot's seed would make it do again (:func:`replayed`): ``how`` it failed
    (``"raised"``, ``"hung"``) and ``what``: the exception's text, or where it hung."""

    how: str
    what: str

    @property
    def again(self) -> str:
        """How a round's line says the retry did it again."""
        return "hung there again" if self.how == "hung" else f"{self.how} again"


def replayed(got: Attempt) -> Replay | None:
    """What a failed attempt's env or function did that its seed replays, or None: the exception the function raised
    (its signed error reply), or the place in the env's own code where it hung (a timeout its backend located in
    the env's constructor, ``reset()`` or ``step()``: the env is what the seed drives). Not a kill, a malformed
    reply, a hang elsewhere (a wait on the network may pass) or one no backend located, and never an injected
    fault: one is drawn per attempt, not by the seed."""
    if got.request is None or got.request.fault is not None:
        return None
    if got.status == FAILED and got.reply.meta.get("type") == "error":
        return Replay("raised", got.reply.record.error)
    hung = got.reply.hung_at
    return Replay("hung", str(hung)) if got.status == TIMED_OUT and hung is not None and hung.in_env else None


class Retries:
    """The retry engine of a set of slots (a round's group, an evaluation's, an asynchronous sampler's actors).

    Per slot it counts failed attempts against ``max_retries`` (a success forgets them: :meth:`succeeded`) and the
    platform's refusals (throttled) in a row against ``max_throttled`` (an attempt that ran, failed or not, ends the
    row). A slot that fails twice in a row the same way its seed replays (:func:`replayed`: the same exception word
    for word, or a hang at the same place in the env) is given up at once: every attempt carries the slot's seed,
    so each retry would replay it (a kill, a malformed reply, a hang outside the env keep their retries). It keeps
    the retry a failed attempt earned until it is made: at once after a failure, after an
    exponential back-off with full jitter (:func:`backoff_s`) after a refusal. A slot past either limit is given
    up: its caller decides whether that loses the slot (a synchronous round) or fails the run (an asynchronous one).
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.failures: dict[int, int] = {}  # slot -> failed attempts (refusals not counted)
        self.refusals: dict[int, int] = {}  # slot -> refusals in a row
        self.replays: dict[int, Replay] = {}  # slot -> what its last failed attempt did that its seed replays
        self.pending: dict[int, tuple[float, int]] = {}  # slot -> (when, attempt): a retry not made yet

    def after(self, got: Attempt, counted: bool = True) -> Verdict:
        """Decide what becomes of slot ``got.slot`` after its attempt ``got`` failed or was refused, and keep the
        retry it earned (see :meth:`due`). ``counted=False``: a failure that is not the function's (it held a
        policy reference replaced since), retried at once without counting."""
        slot, attempt = got.slot, got.attempt + 1
        if got.status == THROTTLED:  # "not now", not a failure: retried after a back-off
            refusals = self.refusals.get(slot, 0) + 1
            if refusals > self.policy.max_throttled:
                return Verdict(GIVE_UP, attempt, refusals)
            self.refusals[slot] = refusals
            self.pending[slot] = (time.perf_counter() + backoff_s(self.policy, refusals), attempt)
            return Verdict(BACK_OFF, attempt, refusals)
        failures = self.failures.get(slot, 0) + int(counted)
        replay = replayed(got)
        if failures > self.policy.max_retries or (replay is not None and self.replays.get(slot) == replay):
            return Verdict(GIVE_UP, attempt, failures)
        if replay is not None:
            self.replays[slot] = replay
        self.refusals.pop(slot, None)
        self.failures[slot] = failures
        self.pending[slot] = (-math.inf, attempt)
        return Verdict(RETRY, attempt, failures)

    def succeeded(self, slot: int) -> None:
        """Slot ``slot`` got a result: its failures and refusals are forgotten."""
        self.failures.pop(slot, None)
        self.refusals.pop(slot, None)
        self.replays.pop(slot, None)

    def due(self, now: float = -math.inf, slots: Collection[int] | None = None) -> list[tuple[int, int]]:
        """Take the retries to make now, as ``(slot, attempt)`` in the order they were earned (of ``slots`` only,
        if given): those to make at once and, given ``now`` (a ``perf_counter`` time), the refused slots whose
        back-off is over by then."""
        due = [(slot, attempt) for slot, (when, attempt) in self.pending.items()
               if when <= now and (slots is None or slot in slots)]
        for slot, _ in due:
            del self.pending[slot]
        return due

    def waiting(self, slot: int, now: float) -> bool:
        """Whether slot ``slot`` is refused and still backing off at ``now``."""
        return slot in self.pending and self.pending[slot][0] > now

    def next_due(self, slots: Collection[int] | None = None) -> float | None:
        """When the first retry kept (of ``slots`` only, if given) may be made (``perf_counter`` time), if any."""
        return min((when for slot, (when, _) in self.pending.items() if slots is None or slot in slots), default=None)


Validator = Callable[[Request, Reply], Any]  # (request, ok reply) -> result, or raises WireError


class Tracker:
    """The invocations sent through one backend, by id: it submits them and classifies every reply once."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.flying: dict[str, tuple[int, int, Request]] = {}  # id -> (slot, attempt, request), unanswered
        self.answered: dict[str, tuple[int, int, Request]] = {}  # id -> (slot, attempt, slim request)

    def submit(self, sent: list[tuple[int, int, Request]]) -> None:
        """Send ``(slot, attempt, request)`` triples as one batch."""
        self.flying.update({r.id: (slot, attempt, r) for slot, attempt, r in sent})
        self.backend.submit([r for _, _, r in sent])

    def receive(self, reply: Reply, validate: Validator) -> Attempt:
        """Classify one reply: a first delivery is validated (an authentic but malformed reply is a failed
        attempt like any other); a second delivery is a duplicate and a reply to nothing sent a stray — both
        billed, never learned from."""
        rid = reply.record.invocation_id
        classify_failure(reply.record)  # a platform's error that says throttled or out of memory
        if rid in self.answered:
            slot, attempt, request = self.answered[rid]
            return Attempt(slot, attempt, request, reply, DUPLICATE)
        if rid not in self.flying:
            return Attempt(-1, -1, None, reply, STRAY)
        slot, attempt, request = self.flying.pop(rid)
        # keep what invocations.csv needs of an answered request, not its carried episodes
        self.answered[rid] = (slot, attempt, replace(request, carries=(None,) * request.envs))
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


@dataclass(frozen=True)
class Group:
    """Slots run together under one retry policy: a round's training invocations, or an evaluation's.
    ``make_request(slot, attempt)`` builds each attempt; ``validate(request, reply)`` turns an ok reply into a
    result or raises ``WireError``."""

    slots: int
    make_request: Callable[[int, int], Request]
    validate: Validator
    policy: RetryPolicy
    what: str = "round"


class _RunningGroup:
    """One group's invocations while they run: its tracker, its open slots, its deadline."""

    def __init__(self, backend: Backend, group: Group) -> None:
        self.group, self.tracker, self.out = group, Tracker(backend), Outcome(results={})
        deadline = group.policy.deadline_s
        self.end = None if deadline is None else time.perf_counter() + deadline
        self.open = set(range(group.slots))
        self.retries = Retries(group.policy)
        self.tracker.submit([(slot, 0, group.make_request(slot, 0)) for slot in range(group.slots)])

    def owns(self, reply: Reply) -> bool:
        rid = reply.record.invocation_id
        return rid in self.tracker.flying or rid in self.tracker.answered

    def take(self, replies: list[Reply]) -> None:
        """Classify this group's replies; retry a failed slot (same seed) while it has retries left, a refused one
        once its back-off is over (:meth:`retry_refused`)."""
        g = self.group
        for reply in replies:
            got = self.tracker.receive(reply, g.validate)
            self.out.attempts.append(got)
            if got.status in (DUPLICATE, STRAY):
                continue
            if got.status == OK:
                self.out.results[got.slot] = got.result
                self.open.discard(got.slot)
            elif self.retries.after(got).action == GIVE_UP:
                self.open.discard(got.slot)
                self.out.lost.append(got.slot)
        self._submit(self.retries.due())

    def next_backoff(self) -> float | None:
        """When the first refused slot may be re-invoked (perf_counter time), if one waits."""
        return self.retries.next_due()

    def retry_refused(self) -> None:
        """Re-invoke the refused slots whose back-off is over (a new attempt: a new id, the same seed)."""
        self._submit(self.retries.due(time.perf_counter()))

    def _submit(self, retries: list[tuple[int, int]]) -> None:
        if retries:
            self.tracker.submit([(slot, attempt, self.group.make_request(slot, attempt)) for slot, attempt in retries])

    def close(self) -> Outcome:
        """Cancel what still runs (past the deadline), list the slots without a result; too few is an error."""
        out, g = self.out, self.group
        stragglers = self.tracker.cancel() if self.tracker.flying else []
        out.attempts.extend(stragglers)
        out.lost.extend(a.slot for a in stragglers)
        out.lost.extend(sorted(self.open - set(out.lost)))  # a backend that dropped an invocation without a reply
        out.lost.sort()
        self.open = set()
        if len(out.results) < g.policy.min_fraction * g.slots or not out.results:
            first = next((a for a in out.attempts if a.status in (FAILED, TIMED_OUT, CANCELLED, OOM, THROTTLED)), None)
            detail = ""
            if first is not None:
                record = first.reply.record
                detail = f"; first failure {record.invocation_id}: {(record.error.splitlines() or [''])[0]}"
                replay = replayed(first)
                if replay is not None and sum(a.slot == first.slot and replayed(a) == replay for a in out.attempts) > 1:
                    detail += (f" ({replay.again} on its retry, with the same seed: a fault the seed causes, so it was "
                               "not retried further)")
            raise TooFewReplies(f"{g.what}: only {len(out.results)} of {g.slots} invocations succeeded, fewer than "
                                f"min_reply_fraction {g.policy.min_fraction:g} of them{detail}", out)
        return out


def run_group(backend: Backend, slots: int, make_request: Callable[[int, int], Request],
              validate: Validator, policy: RetryPolicy, what: str = "round") -> Outcome:
    """Invoke ``slots`` functions and collect them under ``policy`` (one :class:`Group`)."""
    return run_groups(backend, [Group(slots, make_request, validate, policy, what)])[0]


class InFlightGroup:
    """A group's invocations submitted now and awaited later by :func:`run_groups` (a pipelined round's
    training wave, sent before the update it overlaps)."""

    def __init__(self, backend: Backend, group: Group) -> None:
        self.state = _RunningGroup(backend, group)

    def cancel(self) -> Outcome:
        """Cancel what still runs of the group (billed, never learned from)."""
        return Outcome({}, self.state.tracker.cancel())


def run_groups(backend: Backend, groups: list[Group], in_flight: InFlightGroup | None = None) -> list[Outcome]:
    """Several groups' invocations in flight at once (an evaluation beside a training round): each reply goes
    to the group that sent it (a reply to nothing sent is the first group's stray), each group keeps its own
    retries and deadline, and all of them are done when this returns. ``in_flight``: a group submitted earlier,
    awaited first. A group that gets too few results raises :class:`TooFewReplies` with every group's
    attempts, to log and bill."""
    states = [*([in_flight.state] if in_flight else []), *(_RunningGroup(backend, group) for group in groups)]
    while backend.in_flight or any(s.retries.pending for s in states):
        now = time.perf_counter()
        waiting = [s for s in states if s.open and (s.end is None or s.end > now)]  # past its deadline: closed below
        if not waiting:
            break
        ends = [s.end - now for s in waiting if s.end is not None]
        timeout = earliest(*ends) if len(ends) == len(waiting) else None
        dues = [when - now for s in waiting if (when := s.next_backoff()) is not None]
        timeout = earliest(timeout, *dues) if dues else timeout
        if backend.in_flight:
            replies = backend.collect(timeout)
        else:  # nothing runs: only refused slots backing off
            time.sleep(timeout or 0.0)
            replies = []
        for s in states:
            mine = [r for r in replies if s.owns(r)]
            if s is states[0]:  # a reply to nothing sent: the first group's stray
                mine += [r for r in replies if not any(o.owns(r) for o in states)]
            if mine:
                s.take(mine)
        for s in waiting:
            s.retry_refused()
    closed, failure = [], None
    for s in states:
        try:
            closed.append(s.close())
        except TooFewReplies as exc:
            failure = failure or exc
            closed.append(exc.outcome)
    if failure is not None:
        raise TooFewReplies(str(failure), Outcome({}, [a for g in closed for a in g.attempts]))
    return closed
