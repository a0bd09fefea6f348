"""One conformance suite that every backend passes: ``local``, ``ray`` on a real two-node Ray cluster the
session starts, and ``lithops`` on Lithops' real localhost backend. Also: the same run learns the same
thing on every backend."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from backend_helpers import CART, COUNTER, KEY, STEPS, requests_for, snapshot

from minionsrl.backends.base import Backend
from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.function.envs import EnvSpec
from minionsrl.function.fragment import Fragment
from minionsrl.loop.metrics import LEARNING_COLUMNS, read_metrics

pytestmark = pytest.mark.integration  # a two-node Ray cluster, Lithops localhost, worker processes

BACKENDS = ["local", "ray", "lithops"]
SLOW_COUNTER = EnvSpec("custom_env:CounterEnv", {"length": 1000, "sleep_s": 0.05})


def _build(name: str, request: pytest.FixtureRequest, **kwargs) -> Backend:
    if name == "local":
        from minionsrl.backends.local import LocalBackend

        return LocalBackend(KEY, max_concurrency=2, **kwargs)
    if name == "ray":
        request.getfixturevalue("ray_address")  # connected: the backend joins the session's cluster
        from minionsrl.backends.ray_backend import RayBackend

        return RayBackend(KEY, **kwargs)
    pytest.importorskip("lithops")
    from minionsrl.backends.lithops_backend import LithopsBackend, lithops_config

    return LithopsBackend(KEY, lithops_config(None), max_concurrency=2, **kwargs)


@pytest.fixture(params=BACKENDS)
def make_backend(request):
    built: list[Backend] = []

    def make(**kwargs) -> Backend:
        built.append(_build(request.param, request, **kwargs))
        return built[-1]

    yield make
    for backend in built:
        backend.close()


def _ids(replies) -> list[str]:
    return [r.record.invocation_id for r in replies]


def test_invoke_many_gives_valid_fragments_in_request_order(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot())
    requests = requests_for(ref, 12)
    replies = backend.invoke(requests)
    assert _ids(replies) == [r.id for r in requests]
    assert all(r.ok for r in replies), [r.record.error for r in replies if not r.ok]
    for reply in replies:
        fragment = Fragment.from_wire(reply.arrays, reply.meta, STEPS, CART)
        assert len(fragment.rewards) == STEPS


def test_records_are_complete(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot())
    replies = backend.invoke(requests_for(ref, 4) + requests_for(ref, 2, kind="eval"))
    for reply in replies:
        rec = reply.record
        assert rec.status == "ok" and rec.error == ""
        assert rec.kind in ("train", "eval") and rec.instance_id
        assert rec.duration_s > 0 and rec.run_s > 0 and rec.cpu_s > 0 and rec.init_s >= 0
        assert rec.bytes_in > 0 and rec.bytes_out > 0
        assert rec.duration_s >= rec.run_s
    if backend.name != "ray":  # the session's Ray cluster keeps its worker processes warm between tests
        assert any(r.record.cold for r in replies)  # a fresh backend starts instances


def test_invocations_run_concurrently(make_backend, tmp_path):
    """Two functions were stepping at the same moment: each env stamps when it ran (wall clock), so load, which
    stretches every function, cannot make this pass or fail (no bound on the round's wall time)."""
    backend = make_backend()
    ref = backend.publish(snapshot(COUNTER))
    spec = EnvSpec("hostile_envs:StampedEnv", {"folder": str(tmp_path)})
    replies = backend.invoke(requests_for(ref, 4, spec=spec, steps=64))  # 64 x 50 ms = 3.2 s each
    assert all(r.ok for r in replies), [r.record.error for r in replies if not r.ok]
    assert len({r.record.instance_id for r in replies}) >= 2
    ran = sorted(tuple(map(float, f.read_text().split())) for f in tmp_path.iterdir())
    assert len(ran) >= 2 and any(later[0] < earlier[1] for earlier, later in itertools.pairwise(ran))


def test_policy_published_once_per_version_and_fetched_by_reference(make_backend):
    backend = make_backend()
    blob = snapshot()
    fetched: Counter[tuple[int, str]] = Counter()
    for round_idx in (1, 2):
        ref = backend.publish(blob if round_idx == 1 else snapshot(version=1))
        replies = backend.invoke(requests_for(ref, 6, round_idx=round_idx))
        assert all(r.ok for r in replies)
        for reply in replies:
            fetched[(round_idx, reply.record.instance_id)] += bool(reply.meta["policy_fetched"])
            assert reply.record.bytes_in < 4096 + (len(blob) if reply.meta["policy_fetched"] else 0)
    assert backend.publishes == 2
    assert max(fetched.values()) == 1  # one fetch per instance per round, then the instance's copy


def test_function_error_is_surfaced(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot())
    replies = backend.invoke(requests_for(ref, 2) + requests_for(ref, 1, kind="bogus"))
    assert [r.ok for r in replies] == [True, True, False]
    assert "unknown invocation kind" in replies[2].record.error


def test_function_that_dies_is_surfaced_and_the_backend_goes_on(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot(COUNTER))
    dying = EnvSpec("custom_env:CounterEnv", {"exit_code": 3})
    replies = backend.invoke(requests_for(ref, 1, spec=dying))
    assert not replies[0].ok and replies[0].record.error
    again = backend.invoke(requests_for(ref, 2, round_idx=2, spec=EnvSpec("custom_env:CounterEnv")))
    assert all(r.ok for r in again)


def test_invocation_timeout_is_surfaced(make_backend):
    backend = make_backend(invocation_timeout_s=1.0)
    ref = backend.publish(snapshot(COUNTER))
    # its sleeps alone would take an hour: were it not stopped, the test would time out
    replies = backend.invoke(requests_for(ref, 1, spec=SLOW_COUNTER, steps=72_000))
    assert replies[0].record.status == "timed_out" and "timed out" in replies[0].record.error
    assert replies[0].record.duration_s >= 1.0


def test_round_deadline_cancels_stragglers_and_bills_them(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot(COUNTER))
    fast = requests_for(ref, 1, spec=EnvSpec("custom_env:CounterEnv"))
    slow = requests_for(ref, 1, round_idx=2, spec=SLOW_COUNTER, steps=1000)
    # the slow one runs 50 s; the deadline leaves the fast one time to start a worker on a loaded machine
    replies = backend.invoke(fast + slow, deadline_s=15.0)
    assert _ids(replies) == [fast[0].id, slow[0].id]
    assert replies[0].ok
    assert replies[1].record.error == "cancelled" and replies[1].record.duration_s > 3.0  # billed from dispatch
    assert backend.in_flight == 0


def test_submit_collect_and_cancel(make_backend):
    backend = make_backend()
    ref = backend.publish(snapshot(COUNTER))
    backend.submit(requests_for(ref, 2, spec=SLOW_COUNTER, steps=1000))
    assert backend.in_flight == 2
    assert backend.collect(timeout=0.5) == []
    cancelled = backend.cancel()
    assert sorted(_ids(cancelled)) == ["r1-train-0", "r1-train-1"]
    assert all(r.record.error == "cancelled" for r in cancelled) and backend.in_flight == 0
    backend.submit(requests_for(ref, 1, round_idx=2, spec=EnvSpec("custom_env:CounterEnv")))
    replies: list = []
    while backend.in_flight:
        replies += backend.collect(timeout=30)
    assert [r.ok for r in replies] == [True]


def _curve(run_dir) -> list[tuple[str, ...]]:
    return [tuple(row[k] for k in LEARNING_COLUMNS) for row in read_metrics(run_dir)]


def test_same_seed_same_learning_on_every_backend(tmp_path, request):
    """A run with the same seed and actor counts learns exactly the same on local, ray and lithops."""
    request.getfixturevalue("ray_address")
    curves = {}
    for name in BACKENDS:
        cfg = TrainConfig(env_id="CartPole-v1", actors=3, fragment_length=128, max_rounds=3, seed=11,
                          backend=name, run_dir=str(tmp_path / name), progress=False, tensorboard=False,
                          eval_every=2, eval_episodes=2, max_concurrency=2)
        make_trainer(cfg).run()
        curves[name] = _curve(tmp_path / name)
    assert len(curves["local"]) == 3 and np.isfinite(float(curves["local"][-1][LEARNING_COLUMNS.index("policy_loss")]))
    assert curves["ray"] == curves["local"]
    assert curves["lithops"] == curves["local"]


@pytest.mark.parametrize("name", ["local", "ray"])
def test_warm_instances_keep_their_environments(name, request):
    """Platforms that keep instances between rounds (not Lithops localhost, which starts a job per round)
    reuse the instance's env: the second round builds none on an instance that served the first."""
    backend = _build(name, request)
    try:
        ref = backend.publish(snapshot())
        first = backend.invoke(requests_for(ref, 2))
        second = backend.invoke(requests_for(ref, 2, round_idx=2))
    finally:
        backend.close()
    warm = [r for r in second if r.record.instance_id in {f.record.instance_id for f in first}]
    assert warm and all(not r.meta["env_built"] and not r.record.cold for r in warm)


def test_lithops_call_lost_with_its_worker_process_is_surfaced(request):
    """On Lithops localhost a worker process that dies takes its current call with it, and no status is ever
    written for that call: the backend notices when the job has ended instead of waiting forever."""
    backend = _build("lithops", request)
    try:
        ref = backend.publish(snapshot(COUNTER))
        requests = requests_for(ref, 3, spec=EnvSpec("custom_env:CounterEnv"))
        requests[1] = replace(requests[1], env=EnvSpec("custom_env:CounterEnv", {"kill_parent": True}))  # only here!
        replies = backend.invoke(requests, deadline_s=60)
    finally:
        backend.close()
    assert [r.ok for r in replies] == [True, False, True]
    assert "job ended without finishing this call" in replies[1].record.error


def test_a_policy_outlives_a_newer_publish_while_invocations_use_it(make_backend):
    """Asynchronous learners publish while invocations of the previous version are queued or running."""
    backend = make_backend()
    old = backend.publish(snapshot(COUNTER))
    backend.submit(requests_for(old, 4, spec=EnvSpec("custom_env:CounterEnv", {"sleep_s": 0.02})))
    backend.publish(snapshot(COUNTER, version=1))  # 2 of the 4 are still queued (concurrency 2)
    replies: list = []
    while backend.in_flight:
        replies += backend.collect(timeout=60)
    assert sorted(_ids(replies)) == [f"r1-train-{i}" for i in range(4)]
    assert all(r.ok for r in replies), [r.record.error for r in replies if not r.ok]
