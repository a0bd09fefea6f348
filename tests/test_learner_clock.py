"""The learner's own-instance seconds (``minionsrl.learner.runtime.own_s``): wall time less its threads' wait for a
CPU, never less than what one of them ran."""

from __future__ import annotations

import time

import pytest

from minionsrl.function import clock
from minionsrl.learner import runtime


def test_own_time_is_wall_less_wait_but_at_least_what_ran() -> None:
    assert clock.own_s(1.0, 0.2) == pytest.approx(0.8)
    assert clock.own_s(1.0, 0.2, ran_s=0.5) == pytest.approx(0.8)  # threads that took turns: the wait says it
    assert clock.own_s(1.0, 1.3, ran_s=0.6) == pytest.approx(0.6)  # waits that overlapped: what ran says more
    assert clock.own_s(1.0, 1.3) == 0.0


def test_threads_waiting_at_once_do_not_cancel_the_update(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loaded machine: in one second of wall time the calling thread waited 0.7 s while XLA's compute thread
    (id 7) waited 0.6 s and ran 0.35 s. Summed, the waits exceed the wall time; the update still took 0.35 s."""
    since = runtime.Mark(10.0, {"self": 1.0, "7": 2.0}, {"self": 3.0, "7": 4.0})
    monkeypatch.setattr(runtime, "mark", lambda: runtime.Mark(11.0, {"self": 1.7, "7": 2.6}, {"self": 3.05, "7": 4.35}))
    assert runtime.own_s(since) == pytest.approx(0.35)
    # taking turns (no overlap): wall less the summed waits, 1 - 0.2 - 0.1
    monkeypatch.setattr(runtime, "mark", lambda: runtime.Mark(11.0, {"self": 1.2, "7": 2.1}, {"self": 3.3, "7": 4.4}))
    assert runtime.own_s(since) == pytest.approx(0.7)


def test_own_time_covers_what_the_calling_thread_computed() -> None:
    """Measured for real: at least the CPU time the calling thread spent, whatever the machine's load."""
    started, cpu0 = runtime.mark(), time.thread_time()
    total = 0
    while time.thread_time() - cpu0 < 0.05:
        total += sum(range(1000))
    assert runtime.own_s(started) >= 0.9 * (time.thread_time() - cpu0) and total > 0
