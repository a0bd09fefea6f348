"""The round's retry policy (minionsrl.loop.retry) against a scripted backend: retries, de-duplication, deadline."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import replace

import numpy as np
import pytest

from minionsrl.backends.base import Backend, InvocationRecord, Reply
from minionsrl.backends.duplicating import DuplicatingBackend
from minionsrl.errors import InvocationError
from minionsrl.function import wire
from minionsrl.function.envs import EnvSpec
from minionsrl.function.fragment import PHASES, HungAt
from minionsrl.function.request import Request
from minionsrl.loop import retry


class ScriptedBackend(Backend):
    """Answers each attempt as ``script(slot, attempt)`` says: "ok", "error", "timeout", "bad" (an ok reply that
    fails validation), "twice" (delivered two times) or "never" (runs until cancelled)."""

    name = "scripted"
    key = b"s" * 32

    def __init__(self, script) -> None:
        self.script = script
        self.ready: list[Reply] = []
        self.running: dict[str, Request] = {}
        self.submitted: list[Request] = []

    def publish(self, policy_blob: bytes) -> str:
        return "ref"

    def submit(self, requests: list[Request]) -> None:
        for req in requests:
            self.submitted.append(req)
            what = self.script(req.seed, req.attempt)  # the slot, as _request sets it
            record = InvocationRecord(req.id, "train", run_s=0.1)
            if what == "never":
                self.running[req.id] = req
                continue
            if what in ("error", "timeout"):
                record.status = "failed" if what == "error" else "timed_out"
                record.error = "boom\n  (a second line)" if what == "error" else "timed out after 1 s"
            arrays = {"x": np.array([req.seed])} if what != "bad" else {}
            self.ready.extend([Reply(record, arrays)] * (2 if what == "twice" else 1))

    def collect(self, timeout: float | None = None) -> list[Reply]:
        if not self.ready:
            if self.running and timeout is not None:
                time.sleep(timeout)
            return []
        out, self.ready = self.ready, []
        return out

    def cancel(self, ids: Iterable[str] | None = None) -> list[Reply]:
        out = [Reply(InvocationRecord(i, "train", status="cancelled", error="cancelled")) for i in self.running]
        self.running.clear()
        return out

    @property
    def in_flight(self) -> int:
        return len(self.ready) + len(self.running)

    def close(self) -> None:
        pass


def _request(slot: int, attempt: int) -> Request:
    return Request(id=f"s{slot}-a{attempt}", kind="train", policy="ref", env=EnvSpec("CartPole-v1"), seed=slot,
                   gamma=0.99, attempt=attempt)


def _validate(request: Request, reply: Reply) -> int:
    if "x" not in reply.arrays:
        raise wire.WireError("missing x")
    return int(reply.arrays["x"][0])


def _run_group(script, slots: int = 4, **policy) -> tuple[retry.Outcome, ScriptedBackend]:
    backend = ScriptedBackend(script)
    return retry.run_group(backend, slots, _request, _validate, retry.RetryPolicy(**policy)), backend


def test_every_slot_ok_first_time():
    got, backend = _run_group(lambda s, a: "ok")
    assert got.results == {0: 0, 1: 1, 2: 2, 3: 3} and got.lost == []
    assert retry.fault_counts(got.attempts, 0) == {"failed": 0, "retried": 0, "timed_out": 0, "duplicates": 0,
                                                   "lost": 0, "throttled": 0}
    assert len(backend.submitted) == 4


def test_failures_are_retried_until_they_succeed():
    script = {(1, 0): "error", (1, 1): "timeout", (2, 0): "bad"}
    got, backend = _run_group(lambda s, a: script.get((s, a), "ok"), max_retries=3)
    assert got.results == {0: 0, 1: 1, 2: 2, 3: 3} and got.lost == []
    assert [(r.seed, r.attempt) for r in backend.submitted[4:]] == [(1, 1), (2, 1), (1, 2)]
    assert retry.fault_counts(got.attempts, 0) == {"failed": 3, "retried": 3, "timed_out": 1, "duplicates": 0,
                                                   "lost": 0, "throttled": 0}
    bad = next(a for a in got.attempts if a.slot == 2 and a.attempt == 0)
    assert bad.status == retry.FAILED and "malformed reply: missing x" in bad.reply.record.error


def test_retries_are_bounded_and_a_lost_slot_is_tolerated_above_the_fraction():
    got, _ = _run_group(lambda s, a: "error" if s == 3 else "ok", max_retries=2, min_fraction=0.75)
    assert sorted(got.results) == [0, 1, 2] and got.lost == [3]
    assert [a.attempt for a in got.attempts if a.slot == 3] == [0, 1, 2]  # 1 try + 2 retries, then given up


def test_too_few_replies_fail_the_round_with_one_clear_line():
    with pytest.raises(InvocationError, match=r"round: only 2 of 4 invocations succeeded, fewer than "
                                              r"min_reply_fraction 0.75 .* s2-a0: boom") as info:
        _run_group(lambda s, a: "error" if s >= 2 else "ok", max_retries=0, min_fraction=0.75)
    assert "\n" not in str(info.value)


def test_duplicate_deliveries_are_discarded_but_kept_for_billing():
    got, _ = _run_group(lambda s, a: "twice" if s in (0, 2) else "ok")
    assert got.results == {0: 0, 1: 1, 2: 2, 3: 3}
    assert [a.status for a in got.attempts].count(retry.DUPLICATE) == 2
    assert retry.fault_counts(got.attempts, 0)["duplicates"] == 2


def test_round_deadline_cancels_stragglers_and_proceeds():
    t0 = time.perf_counter()
    got, _ = _run_group(lambda s, a: "never" if s == 1 else "ok", deadline_s=0.3, min_fraction=0.5)
    # the straggler never answers, so the round returned only because the deadline ended it, and not before it
    assert time.perf_counter() - t0 >= 0.3
    assert sorted(got.results) == [0, 2, 3] and got.lost == [1]
    straggler = next(a for a in got.attempts if a.slot == 1)
    assert straggler.status == retry.CANCELLED and straggler.reply.record.error == "cancelled"
    assert retry.fault_counts(got.attempts, len(got.lost))["timed_out"] == 1


def test_round_deadline_with_too_few_replies_fails():
    with pytest.raises(InvocationError, match="only 1 of 4"):
        _run_group(lambda s, a: "ok" if s == 0 else "never", deadline_s=0.2, min_fraction=0.5)


def test_duplicating_backend_delivers_marked_requests_twice():
    inner = ScriptedBackend(lambda s, a: "ok")
    backend = DuplicatingBackend(inner)
    reqs = [_request(s, 0) for s in range(3)]
    reqs[1] = replace(reqs[1], fault={"kind": "duplicate"})
    backend.submit(reqs)
    replies = backend.collect()
    assert [r.record.invocation_id for r in replies] == ["s0-a0", "s1-a0", "s1-a0", "s2-a0"]
    assert replies[1].record is not replies[2].record  # billed twice, as two records
    assert backend.in_flight == 0 and backend.key == inner.key


def test_a_stray_reply_is_billed_and_ignored():
    class Stray(ScriptedBackend):
        def collect(self, timeout=None):
            out = super().collect(timeout)
            return [Reply(InvocationRecord("r0-train-9", "train", run_s=0.2), {"x": np.array([99])}), *out]

    backend = Stray(lambda s, a: "ok")
    got = retry.run_group(backend, 2, _request, _validate, retry.RetryPolicy())
    assert got.results == {0: 0, 1: 1}
    stray = [a for a in got.attempts if a.status == retry.STRAY]
    assert len(stray) == 1 and stray[0].reply.record.run_s == 0.2
    assert retry.fault_counts(got.attempts, 0)["duplicates"] == 1


# -- the retry engine both samplers use ---------------------------------------------------------------
def _failed(slot: int, attempt: int, status: str) -> retry.Attempt:
    record = InvocationRecord(f"r0-train-{slot}", "train")
    return retry.Attempt(slot, attempt, _request(slot, attempt), Reply(record), status)


def test_the_retry_engine_retries_failures_at_once_up_to_max_retries():
    retries = retry.Retries(retry.RetryPolicy(max_retries=2))
    assert retries.after(_failed(0, 0, retry.FAILED)) == (retry.RETRY, 1, 1)
    assert retries.after(_failed(1, 0, retry.TIMED_OUT)) == (retry.RETRY, 1, 1)
    assert retries.due() == [(0, 1), (1, 1)] and retries.due() == []  # taken once, in the order earned
    assert retries.after(_failed(0, 1, retry.OOM)) == (retry.RETRY, 2, 2)
    retries.due()
    assert retries.after(_failed(0, 2, retry.FAILED)) == (retry.GIVE_UP, 3, 3)  # 1 try + 2 retries
    assert retries.due() == [] and not retries.pending
    retries.succeeded(1)  # a success forgets the slot's failures
    assert retries.after(_failed(1, 2, retry.FAILED)).count == 1


def _raised(slot: int, attempt: int, error: str) -> retry.Attempt:
    """A failed attempt whose function raised ``error`` (its signed error reply)."""
    record = InvocationRecord(f"r0-train-{slot}-a{attempt}", "train", status=retry.FAILED, error=error)
    return retry.Attempt(slot, attempt, _request(slot, attempt), Reply(record, meta={"type": "error"}), retry.FAILED)


def test_an_exception_the_function_raises_twice_word_for_word_gives_the_slot_up():
    retries = retry.Retries(retry.RetryPolicy(max_retries=3))
    seed_fault = "ValueError: the env returned an observation of shape (5,) at step 50"
    assert retries.after(_raised(0, 0, seed_fault)).action == retry.RETRY
    assert retries.after(_raised(0, 1, seed_fault)) == (retry.GIVE_UP, 2, 2)  # the seed replays it: not 3 more
    assert retries.after(_raised(1, 0, "injected fault in r0-train-1")).action == retry.RETRY  # ids differ
    assert retries.after(_raised(1, 1, "injected fault in r0-train-1-a1")).action == retry.RETRY
    for attempt in range(3):  # a hang no backend located: every retry it has
        assert retries.after(_failed(2, attempt, retry.TIMED_OUT)).action == retry.RETRY
    retries.succeeded(1)
    assert retries.after(_raised(1, 2, "injected fault in r0-train-1-a1")).action == retry.RETRY  # forgotten


def _hung(slot: int, attempt: int, where: HungAt, injected: bool = False) -> retry.Attempt:
    """A timed-out attempt its backend located at ``where`` (an injected hang, ``injected``)."""
    request = _request(slot, attempt)
    if injected:
        request = replace(request, fault={"kind": "hang", "sleep_s": 3600.0})
    record = InvocationRecord(f"r0-train-{slot}-a{attempt}", "train", status=retry.TIMED_OUT, error="timed out")
    return retry.Attempt(slot, attempt, request, Reply(record, hung_at=where), retry.TIMED_OUT)


def test_a_hang_at_the_same_place_in_the_env_twice_gives_the_slot_up():
    retries = retry.Retries(retry.RetryPolicy(max_retries=3))
    step = HungAt(PHASES["step"], "my_env.py:12 in step")
    assert retries.after(_hung(0, 0, step)).action == retry.RETRY
    assert retries.after(_hung(0, 1, step)) == (retry.GIVE_UP, 2, 2)  # the seed replays it: not 2 more minutes
    assert retries.after(_hung(1, 0, step)).action == retry.RETRY  # elsewhere the second time: it may pass
    assert retries.after(_hung(1, 1, step._replace(frame="my_env.py:30 in step"))).action == retry.RETRY
    outside = HungAt("", "socket.py:700 in readinto")  # a wait outside the env's code: it may pass
    for attempt in range(3):
        assert retries.after(_hung(2, attempt, outside)).action == retry.RETRY
        assert retries.after(_hung(3, attempt, step, injected=True)).action == retry.RETRY  # drawn per attempt
    assert retries.after(_raised(4, 0, "boom")).action == retry.RETRY
    assert retries.after(_hung(4, 1, step)).action == retry.RETRY  # failed two ways: not a replay


def test_the_retry_engine_does_not_count_a_failure_that_is_not_the_functions():
    retries = retry.Retries(retry.RetryPolicy(max_retries=0))
    assert retries.after(_failed(0, 0, retry.FAILED), counted=False) == (retry.RETRY, 1, 0)
    assert retries.after(_failed(0, 1, retry.FAILED)).action == retry.GIVE_UP


def test_the_retry_engine_backs_refused_slots_off_without_using_up_retries():
    retries = retry.Retries(retry.RetryPolicy(max_retries=0, max_throttled=2, backoff_base_s=10.0))
    before = time.perf_counter()
    assert retries.after(_failed(0, 0, retry.THROTTLED)) == (retry.BACK_OFF, 1, 1)
    when = retries.next_due()
    assert when is not None and before <= when <= time.perf_counter() + 10.0
    assert retries.due() == []  # not made at once
    assert retries.waiting(0, math.nextafter(when, -math.inf))  # a moment before it is due (at any clock size)
    assert not retries.waiting(0, when) and not retries.waiting(1, before)
    assert retries.next_due(slots=[1]) is None
    assert retries.due(when) == [(0, 1)] and retries.next_due() is None
    assert retries.after(_failed(0, 1, retry.THROTTLED)) == (retry.BACK_OFF, 2, 2)
    assert retries.due(math.inf) == [(0, 2)]
    assert retries.after(_failed(0, 2, retry.THROTTLED)) == (retry.GIVE_UP, 3, 3)  # past max_throttled


def test_an_attempt_that_ran_ends_a_slots_refusals_in_a_row():
    retries = retry.Retries(retry.RetryPolicy(max_retries=5, max_throttled=1, backoff_base_s=0.0))
    assert retries.after(_failed(0, 0, retry.THROTTLED)).action == retry.BACK_OFF
    assert retries.after(_failed(0, 1, retry.FAILED)) == (retry.RETRY, 2, 1)
    assert retries.after(_failed(0, 2, retry.THROTTLED)) == (retry.BACK_OFF, 3, 1)  # a new row
    assert retries.after(_failed(0, 3, retry.THROTTLED)).action == retry.GIVE_UP
