"""The ``local`` backend: an embedded FaaS runtime of worker processes."""

from __future__ import annotations

import time

import numpy as np
import pytest
from backend_helpers import CART, COUNTER, KEY, STEPS, requests_for, snapshot

from minionsrl.backends import local_worker
from minionsrl.backends.local import LocalBackend
from minionsrl.function.envs import EnvSpec
from minionsrl.function.fragment import Fragment


def test_cold_then_warm(make_backend):
    backend = make_backend(max_concurrency=1)
    ref = backend.publish(snapshot())
    first = backend.invoke(requests_for(ref, 2, round_idx=1))
    assert [r.ok for r in first] == [True, True]
    assert [r.record.cold for r in first] == [True, False]  # one instance: cold once, then warm
    assert first[0].record.init_s > 0
    assert first[0].record.instance_id == first[1].record.instance_id
    assert first[0].meta["env_built"] is True and first[1].meta["env_built"] is False
    second = backend.invoke(requests_for(ref, 2, round_idx=2))
    assert [r.ok for r in second] == [True, True]
    assert not any(r.record.cold for r in second)
    assert {r.record.instance_id for r in second} == {first[0].record.instance_id}
    assert all(r.meta["env_built"] is False for r in second)
    # a warm invocation skips the cold start: its init is well below the cold one's
    assert max(r.record.init_s for r in second) < first[0].record.init_s
    assert backend.instances_started == 1


@pytest.mark.integration
def test_parallel_cold_starts(make_backend):
    backend = make_backend(max_concurrency=2)
    ref = backend.publish(snapshot(COUNTER))
    slow = EnvSpec("custom_env:CounterEnv", {"sleep_s": 0.01})  # 32 steps of 10 ms: both instances get one
    replies = backend.invoke(requests_for(ref, 2, spec=slow))
    assert all(r.ok and r.record.cold and r.record.init_s > 0 for r in replies)
    assert len({r.record.instance_id for r in replies}) == 2
    assert backend.instances_started == 2


def test_replies_in_request_order_with_valid_fragments(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot())
    requests = requests_for(ref, 5)
    replies = backend.invoke(requests)
    assert [r.record.invocation_id for r in replies] == [q.id for q in requests]
    frags = [Fragment.from_wire(r.arrays, r.meta, STEPS, CART) for r in replies]
    assert all(f.obs.shape == (STEPS, 4) for f in frags)
    # distinct seeds per slot: distinct fragments
    assert len({f.obs.tobytes() for f in frags}) == 5


def test_fragment_does_not_depend_on_instance(make_backend):
    backend = make_backend(max_concurrency=1)
    ref = backend.publish(snapshot())
    requests = requests_for(ref, 3)
    a = backend.invoke(requests)
    b = backend.invoke(list(reversed(requests)))[::-1]  # other order, warm instance
    for ra, rb in zip(a, b, strict=True):
        np.testing.assert_array_equal(ra.arrays["obs"], rb.arrays["obs"])
        np.testing.assert_array_equal(ra.arrays["actions"], rb.arrays["actions"])


def test_concurrency_cap(make_backend):
    backend = make_backend(max_concurrency=2)
    ref = backend.publish(snapshot())
    replies = backend.invoke(requests_for(ref, 6))
    assert all(r.ok for r in replies)
    assert backend.instances_started == 2
    assert len(backend.instance_ids) == 2
    served = {r.record.instance_id for r in replies}
    assert 1 <= len(served) <= 2
    assert sum(r.record.cold for r in replies) == len(served)  # one cold start per instance that served
    # a second batch starts no new instance
    backend.invoke(requests_for(ref, 6, round_idx=2))
    assert backend.instances_started == 2


@pytest.mark.integration
def test_idle_instances_are_reaped(make_backend):
    backend = make_backend(max_concurrency=1, idle_timeout_s=60.0)
    ref = backend.publish(snapshot())
    first = backend.invoke(requests_for(ref, 2))
    processes = [inst.process for inst in backend._instances]
    assert len(processes) == 1
    assert backend.reap_idle() == 0  # just used
    backend.idle_timeout_s = 0.5  # (set after the check above, which a stall of 0.5 s would otherwise fail)
    time.sleep(1.0)
    assert backend.reap_idle() == 1
    assert backend.instance_ids == [] and backend.instances_reaped == 1
    assert all(p.poll() is not None for p in processes)
    again = backend.invoke(requests_for(ref, 2, round_idx=2))
    assert all(r.ok for r in again)
    assert [r.record.cold for r in again] == [True, False]  # cold again after the reaping
    assert again[0].record.instance_id != first[0].record.instance_id
    assert backend.instances_started == 2


@pytest.mark.integration
def test_instance_that_became_ready_after_its_batch_is_reaped(make_backend):
    backend = make_backend(max_concurrency=2, idle_timeout_s=0.3)
    backend._start_instance()  # the state a batch leaves when another instance served all its requests
    time.sleep(1.0)
    assert backend.reap_idle() == 1


@pytest.mark.integration
def test_cold_start_of_a_late_ready_instance_is_not_inflated(make_backend, monkeypatch):
    """The cold start is the worker's own READY stamp less its start, not the moment the learner read it (which
    load cannot move: no wall-time bound here)."""
    backend = make_backend(max_concurrency=2)
    ref = backend.publish(snapshot())
    frames, read = [], local_worker.read_frame

    def reading(stream, limit=None):
        frames.append((read(stream, limit), time.monotonic()))
        return frames[-1][0]

    monkeypatch.setattr(local_worker, "read_frame", reading)
    backend._start_instance()  # the state a batch leaves when another instance served all its requests
    inst = backend._instances[-1]
    time.sleep(1.5)  # the learner's update, evaluation, ...
    reply = backend.invoke(requests_for(ref, 1))[0]
    assert reply.ok and reply.record.cold
    ready, read_at = frames[0]
    stamp = float(ready.split()[1])
    assert ready.startswith(local_worker.READY) and read_at >= stamp  # read after it was ready (1.5 s, unloaded)
    assert inst.cold_start_s == stamp - inst.started_at  # ... and billed as of its stamp
    assert reply.record.init_s >= inst.cold_start_s


@pytest.mark.integration
def test_invoke_reaps_before_dispatch(make_backend):
    backend = make_backend(idle_timeout_s=0.2)
    ref = backend.publish(snapshot())
    backend.invoke(requests_for(ref, 1))
    time.sleep(0.5)
    reply = backend.invoke(requests_for(ref, 1, round_idx=2))[0]
    assert reply.record.cold and backend.instances_reaped == 1


def test_invocation_records(make_backend):
    backend = make_backend()
    blob = snapshot()
    ref = backend.publish(blob)
    requests = requests_for(ref, 3)
    replies = backend.invoke(requests)
    for req, reply in zip(requests, replies, strict=True):
        rec = reply.record
        assert rec.invocation_id == req.id and rec.kind == "train"
        assert rec.instance_id.startswith("local-")
        assert rec.status == "ok" and rec.error == ""
        assert rec.bytes_in > 0 and rec.bytes_out > 0 and rec.run_s > 0 and rec.cpu_s > 0
        assert rec.duration_s > 0 and rec.init_s > 0
        assert rec.duration_s >= rec.run_s
        assert rec.bytes_out > 1000  # a 32-step fragment
        row = rec.row()
        assert row["invocation_id"] == req.id and row["bytes_in"] == rec.bytes_in
    # the first invocation on each instance paid for the policy: its bytes_in includes the blob
    fetched = [r for r in replies if r.meta["policy_fetched"]]
    assert all(r.record.bytes_in > len(blob) for r in fetched)
    assert all(r.record.bytes_in < len(blob) for r in replies if not r.meta["policy_fetched"])


def test_policy_published_once_and_fetched_once_per_instance(make_backend):
    backend = make_backend(max_concurrency=2)
    ref1 = backend.publish(snapshot(version=0))
    assert backend.publishes == 1
    replies = backend.invoke(requests_for(ref1, 6, round_idx=1))
    assert backend.publishes == 1
    fetches: dict[str, int] = {}
    for r in replies:
        fetches[r.record.instance_id] = fetches.get(r.record.instance_id, 0) + int(r.meta["policy_fetched"])
        assert r.meta["type"] == "fragment"
    assert set(fetches.values()) == {1} and 1 <= len(fetches) <= 2
    # the next round's policy: a new reference, fetched once more by each instance, and it is used
    ref2 = backend.publish(snapshot(version=1))
    assert ref2 != ref1 and backend.publishes == 2
    replies2 = backend.invoke(requests_for(ref2, 6, round_idx=1))
    fetches2: dict[str, int] = {}
    for r in replies2:
        fetches2[r.record.instance_id] = fetches2.get(r.record.instance_id, 0) + int(r.meta["policy_fetched"])
        assert r.meta["policy_version"] == 1
    assert set(fetches2.values()) == {1}
    # same seeds, different policy: different fragments
    assert any(not np.array_equal(a.arrays["actions"], b.arrays["actions"]) or
               not np.array_equal(a.arrays["logprobs"], b.arrays["logprobs"]) for a, b in zip(replies, replies2,
                                                                                               strict=True))


def test_function_error_comes_back_as_error_reply(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot())
    bad = EnvSpec("CartPole-v1", {"not_a_kwarg": 3})
    replies = backend.invoke(requests_for(ref, 1, spec=bad) + requests_for(ref, 1, round_idx=2))
    assert replies[0].record.status == "failed" and not replies[0].ok
    assert "not_a_kwarg" in replies[0].record.error
    assert replies[0].meta["type"] == "error"
    assert replies[1].ok  # the other invocation of the batch is unaffected
    # the instance survived the error and stays warm
    again = backend.invoke(requests_for(ref, 1, round_idx=3))[0]
    assert again.ok and not again.record.cold


@pytest.mark.integration
def test_a_served_instance_is_reused_before_one_that_only_became_ready_later(make_backend):
    """An instance that finished starting after the last invocation returned (started for a request another
    instance took) was never used: the next invocation goes to the warm one, not to it (it would be cold)."""
    backend = make_backend()
    ref = backend.publish(snapshot())
    first = backend.invoke(requests_for(ref, 1, round_idx=1))[0]
    backend.prewarm(2)  # a second instance becomes ready after the first one served
    deadline = time.perf_counter() + 60
    while len(backend.instance_ids) < 2 or not all(i.ready for i in backend._instances):
        assert time.perf_counter() < deadline, "the prewarmed instance never became ready"
        backend.collect(timeout=0.05)  # with nothing in flight, this reads the READY of finished starts
    again = backend.invoke(requests_for(ref, 1, round_idx=2))[0]
    assert again.ok and not again.record.cold
    assert again.record.instance_id == first.record.instance_id


@pytest.mark.integration
def test_invocation_timeout_kills_a_hung_instance(make_backend):
    backend = make_backend(invocation_timeout_s=5.0)  # room for the other instance's start on a loaded machine
    ref = backend.publish(snapshot(COUNTER))
    hang = EnvSpec("custom_env:CounterEnv", {"sleep_s": 3600.0})  # were it waited for, the test would time out
    fine = EnvSpec("custom_env:CounterEnv", {"length": 5})
    replies = backend.invoke(requests_for(ref, 1, spec=hang) + requests_for(ref, 1, round_idx=2, spec=fine))
    hung, ok = replies
    assert hung.record.status == "timed_out" and "timed out" in hung.record.error
    assert hung.record.invocation_id == "r1-train-0"
    assert hung.record.duration_s >= 5.0
    assert ok.ok
    assert hung.record.instance_id not in backend.instance_ids  # the hung instance was killed
    # the backend keeps working
    after = backend.invoke(requests_for(ref, 2, round_idx=3, spec=fine))
    assert all(r.ok for r in after)


def test_instance_that_dies_gives_an_error_record(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot(COUNTER))
    dies = EnvSpec("custom_env:CounterEnv", {"exit_code": 3})
    fine = EnvSpec("custom_env:CounterEnv", {"length": 5})
    dead, ok = backend.invoke(requests_for(ref, 1, spec=dies) + requests_for(ref, 1, round_idx=2, spec=fine))
    assert dead.record.status == "failed" and "died" in dead.record.error
    assert dead.record.instance_id not in backend.instance_ids
    assert ok.ok
    assert backend.invoke(requests_for(ref, 1, round_idx=3, spec=fine))[0].ok


@pytest.mark.integration
def test_dead_instance_record_names_its_exit_code(make_backend):
    backend = make_backend(max_concurrency=1)
    ref = backend.publish(snapshot(COUNTER))
    dies = EnvSpec("custom_env:CounterEnv", {"exit_code": 3})
    errors = [backend.invoke(requests_for(ref, 1, round_idx=i, spec=dies))[0].record.error for i in range(4)]
    assert all("exit code 3" in e for e in errors), errors


def test_eval_invocations(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot())
    replies = backend.invoke(requests_for(ref, 2, kind="eval"))
    assert all(r.ok and r.record.kind == "eval" for r in replies)
    assert all(r.arrays["episode_returns"].shape == (1,) for r in replies)


def test_close_stops_every_instance():
    backend = LocalBackend(KEY, max_concurrency=2)
    try:
        ref = backend.publish(snapshot())
        backend.invoke(requests_for(ref, 2))
        processes = [inst.process for inst in backend._instances]
        directory = backend._dir
        assert all(p.poll() is None for p in processes) and directory.exists()
    finally:
        backend.close()
    assert all(p.poll() is not None for p in processes)
    assert not directory.exists() and backend.instance_ids == []


def test_publish_keeps_the_newest_two_policy_files(make_backend):
    """The one before the newest stays: a pipelined round's functions (and their retries) sample with it."""
    from pathlib import Path

    backend = make_backend()
    ref1 = backend.publish(snapshot())
    ref2 = backend.publish(snapshot(version=1))
    assert Path(ref1).exists() and Path(ref2).read_bytes() == snapshot(version=1)
    ref3 = backend.publish(snapshot(version=2))
    assert not Path(ref1).exists() and Path(ref2).exists() and Path(ref3).read_bytes() == snapshot(version=2)


def test_instances_that_never_start_fail_the_round_instead_of_looping(monkeypatch):
    """A worker that dies before it is ready (here: cannot import its module) fails the pending invocations."""
    import minionsrl.backends.local as local

    monkeypatch.setattr(local, "_WORKER_MODULE", "minionsrl.no_such_worker_module")
    backend = LocalBackend(KEY, max_concurrency=2, max_failed_starts=3)
    try:
        ref = backend.publish(snapshot())
        replies = backend.invoke(requests_for(ref, 4))
        assert len(replies) == 4 and not any(r.ok for r in replies)
        assert all("died before they were ready" in r.record.error for r in replies)
        assert backend.instances_started >= 3
    finally:
        backend.close()


def test_a_print_in_the_function_does_not_corrupt_the_reply_stream():
    backend = LocalBackend(KEY, max_concurrency=1)
    try:
        ref = backend.publish(snapshot(COUNTER))
        spec = EnvSpec("custom_env:CounterEnv", {"announce": True})
        replies = backend.invoke(requests_for(ref, 2, spec=spec))
        assert all(r.ok for r in replies), [r.record.error for r in replies]
    finally:
        backend.close()


@pytest.mark.integration
def test_prewarmed_instances_boot_ahead_and_are_still_cold_on_first_use(make_backend):
    """Instances started while the learner sets up: the first invocation on each is billed as cold, with its
    measured start."""
    backend = make_backend(max_concurrency=2)
    backend.prewarm(5)
    assert backend.instances_started == 2  # capped at the concurrency
    replies = backend.invoke(requests_for(backend.publish(snapshot()), 4))
    assert all(r.ok for r in replies)
    firsts = {}  # each instance's first invocation (an instance ready sooner may serve several)
    for r in sorted(replies, key=lambda r: r.record.init_s, reverse=True):
        firsts.setdefault(r.record.instance_id, r)
    assert all(r.record.cold and r.record.init_s > 0 for r in firsts.values())
    assert sum(r.record.cold for r in replies) == len(firsts)  # cold once per instance, then warm
    assert backend.instances_started == 2  # no further start: the prewarmed ones served


@pytest.mark.integration
def test_concurrency_follows_functions_that_mostly_wait(make_backend):
    """No max_concurrency: functions that sleep 10 ms a step use little CPU, so more of them run at once than there
    are CPUs; functions that keep a CPU busy run one per CPU."""
    import os

    from minionsrl.backends.local import CONCURRENCY_CAP

    cpus = os.cpu_count() or 1
    waiting, busy = make_backend(max_concurrency=None), make_backend(max_concurrency=None)
    assert waiting.max_concurrency == busy.max_concurrency == cpus  # nothing measured yet
    ref = waiting.publish(snapshot(COUNTER))
    spec = EnvSpec("custom_env:CounterEnv", {"length": 1000, "sleep_s": 0.01})
    assert all(r.ok for r in waiting.invoke(requests_for(ref, cpus, spec=spec, steps=30)))
    shares = waiting.concurrency._shares
    assert len(shares) == cpus and max(shares) < 0.5
    assert cpus < waiting.max_concurrency <= CONCURRENCY_CAP
    replies = waiting.invoke(requests_for(ref, 4 * cpus, round_idx=2, spec=spec, steps=30))
    assert all(r.ok for r in replies) and waiting.instances_started > cpus
    ref = busy.publish(snapshot(COUNTER))
    spin = EnvSpec("custom_env:CounterEnv", {"length": 1_000_000})
    assert all(r.ok for r in busy.invoke(requests_for(ref, cpus, spec=spin, steps=20_000)))
    assert min(busy.concurrency._shares) > 0.5 and busy.max_concurrency == cpus


@pytest.mark.integration
def test_concurrency_that_follows_waiting_functions_stops_at_the_memory_available(make_backend, monkeypatch):
    from minionsrl.backends import local

    backend = make_backend(max_concurrency=None)
    ref = backend.publish(snapshot(COUNTER))
    spec = EnvSpec("custom_env:CounterEnv", {"length": 1000, "sleep_s": 0.01})
    assert all(r.ok for r in backend.invoke(requests_for(ref, 2, spec=spec, steps=30)))
    unbounded = backend.max_concurrency
    largest = max(local.resident_bytes(i.process.pid) for i in backend._instances)
    monkeypatch.setattr(local, "available_memory_bytes", lambda: int(3 * largest / local.MEMORY_SHARE))
    bounded = backend.max_concurrency
    assert bounded < unbounded and bounded <= len(backend._instances) + 3
    assert make_backend(max_concurrency=3).max_concurrency == 3  # what the user asked is kept
