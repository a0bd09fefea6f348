"""Fault injection, function side: the draw is deterministic and each kind is enacted by the function itself."""

from __future__ import annotations

import csv
import itertools
import json
from pathlib import Path

import pytest

from minionsrl import cli
from minionsrl.backends.base import InvocationRecord
from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.cost import CostLedger, load_prices
from minionsrl.function import faults, wire
from minionsrl.function.envs import EnvSpec
from minionsrl.function.fragment import Fragment
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.rollout import handle
from minionsrl.learner.networks import init_params, snapshot_of
from minionsrl.loop.metrics import LEARNING_COLUMNS, read_metrics
from minionsrl.loop.sampler import invocation_seed

KEY = b"f" * 32
CART = PolicyArch(4, 2, True, (8,))
STEPS = 16


def _policy_blob() -> bytes:
    return snapshot_of(CART, init_params(CART, 0), None, 0, 10.0).encode(KEY)


def _request(fault: dict | None = None, kind: str = "train") -> bytes:
    req = {"id": "r1-train-0", "kind": kind, "policy": "p", "env": EnvSpec("CartPole-v1").to_json(), "seed": 5,
           "gamma": 0.99, "steps": STEPS, "episodes": 1}
    if fault is not None:
        req["fault"] = fault
    return json.dumps(req).encode()


REPLY_KEY = wire.invocation_key(KEY, "r1-train-0")  # a reply is signed for its own invocation


def _handle(fault: dict | None = None, kind: str = "train") -> bytes:
    blob = _policy_blob()
    return handle(_request(fault, kind), lambda ref: blob, KEY)


# -- the draw --------------------------------------------------------------------------------------
def test_draw_is_a_pure_function_of_seed_round_slot_attempt():
    plan = faults.FaultPlan({"raise": 0.1, "hang": 0.1, "kill": 0.1, "duplicate": 0.1, "malformed": 0.1}, seed=3)
    keys = [(r, s, a, k) for r in range(1, 6) for s in range(8) for a in range(3) for k in ("train", "eval")]
    first = [plan.draw(*key) for key in keys]
    assert first == [plan.draw(*key) for key in keys]
    other = faults.FaultPlan(plan.rates, seed=4)
    assert first != [other.draw(*key) for key in keys]
    # a retry draws afresh: the next attempt of a faulty slot is not bound to fail the same way
    assert any(plan.draw(r, s, 0, k) != plan.draw(r, s, 1, k) for r, s, _, k in keys)


def test_draw_does_not_depend_on_the_order_of_the_rates():
    """Kinds are walked in the fixed order of KINDS, not in the rates dict's insertion order."""
    rates = {"raise": 0.1, "hang": 0.05, "kill": 0.15, "duplicate": 0.1, "malformed": 0.2}
    keys = [(r, s, a, k) for r in range(1, 6) for s in range(10) for a in range(2) for k in ("train", "eval")]
    expected = [faults.FaultPlan(rates, seed=7).draw(*key) for key in keys]
    assert {d["kind"] for d in expected if d} == set(rates)  # every kind given a rate is drawn somewhere
    for order in itertools.permutations(rates):
        plan = faults.FaultPlan({kind: rates[kind] for kind in order}, seed=7)
        assert [plan.draw(*key) for key in keys] == expected, order


def test_draw_frequencies_follow_the_rates():
    rates = {"raise": 0.05, "hang": 0.02, "kill": 0.08, "duplicate": 0.03, "malformed": 0.02}
    plan = faults.FaultPlan(rates, seed=1)
    draws = [plan.draw(r, s, 0, "train") for r in range(200) for s in range(50)]
    for kind, rate in rates.items():
        share = sum(1 for d in draws if d and d["kind"] == kind) / len(draws)
        assert abs(share - rate) < 0.01, (kind, share)
    assert sum(1 for d in draws if d is None) / len(draws) == pytest.approx(0.8, abs=0.015)


def test_no_rates_no_faults():
    plan = faults.FaultPlan({k: 0.0 for k in faults.KINDS})
    assert not plan.active
    assert all(plan.draw(r, s, 0, "train") is None for r in range(5) for s in range(5))


def test_hang_faults_carry_a_sleep_far_past_deadlines():
    plan = faults.FaultPlan({"hang": 1.0}, hang_s=99.0)
    assert plan.draw(1, 0, 0, "train") == {"kind": "hang", "sleep_s": 99.0}


# -- enacted by the function ----------------------------------------------------------------------
def test_raise_fault_is_an_error_reply():
    arrays, meta = wire.decode(_handle({"kind": "raise"}), REPLY_KEY)
    assert meta["type"] == "error" and "InjectedFault" in meta["error"] and arrays == {}


def test_no_fault_and_duplicate_leave_the_reply_intact():
    clean, _ = wire.decode(_handle(), REPLY_KEY)
    arrays, meta = wire.decode(_handle({"kind": "duplicate"}), REPLY_KEY)  # duplicates are the platform's doing
    assert arrays.keys() == clean.keys() and all((arrays[k] == clean[k]).all() for k in clean)
    assert Fragment.from_wire(arrays, meta, STEPS, CART).obs.shape == (STEPS, 4)


def test_malformed_flip_fails_the_integrity_check():
    with pytest.raises(wire.WireError, match="HMAC"):
        wire.decode(_handle({"kind": "malformed", "variant": 0}), REPLY_KEY)


@pytest.mark.parametrize("kind", ["train", "eval"])
def test_malformed_resigned_reply_fails_validation(kind):
    arrays, meta = wire.decode(_handle({"kind": "malformed", "variant": 1}, kind), REPLY_KEY)  # authentic, but cut
    clean, _ = wire.decode(_handle(kind=kind), REPLY_KEY)
    cut = [name for name in clean if arrays[name].shape != clean[name].shape]
    assert len(cut) == 1
    if kind == "train":
        with pytest.raises(wire.WireError):
            Fragment.from_wire(arrays, meta, STEPS, CART)


# -- a training run through every kind of fault, on the local backend -----------------------------------
FAULTY = {"fault_raise": 0.12, "fault_hang": 0.06, "fault_kill": 0.12, "fault_duplicate": 0.12,
          "fault_malformed": 0.12, "fault_seed": 9, "max_retries": 10, "invocation_timeout_s": 5.0}


def _train(run_dir: Path, **overrides) -> dict:
    cfg = TrainConfig(**{"env_id": "CartPole-v1", "max_rounds": 3, "actors": 4, "fragment_length": 32,
                         "eval_every": 3, "eval_episodes": 2, "hidden_sizes": [16], "seed": 5, "progress": False,
                         "tensorboard": False, "max_concurrency": 2, "run_dir": str(run_dir), **overrides})
    return make_trainer(cfg).run()


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def faulty_and_clean(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    _train(root / "clean")
    _train(root / "faulty", **FAULTY)
    return root / "clean", root / "faulty"


@pytest.mark.slow
def test_faults_do_not_change_what_is_learned(faulty_and_clean):
    clean, faulty = faulty_and_clean
    learned = [{k: r[k] for k in LEARNING_COLUMNS} for r in read_metrics(faulty)]
    assert learned == [{k: r[k] for k in LEARNING_COLUMNS} for r in read_metrics(clean)]

    def accepted(run_dir: Path) -> dict[tuple[str, str], str]:
        return {(r["round"], r["slot"]): r["digest"] for r in _csv(run_dir / "invocations.csv")
                if r["kind"] == "train" and r["status"] == "ok"}

    assert accepted(faulty) == accepted(clean) and len(accepted(clean)) == 12  # the same batches, slot by slot


@pytest.mark.slow
def test_every_fault_kind_is_enacted_counted_and_listed(faulty_and_clean):
    _, faulty = faulty_and_clean
    rows, metrics = _csv(faulty / "invocations.csv"), read_metrics(faulty)
    # throttle and oom: tests/test_cluster_faults.py
    assert {r["fault"] for r in rows} == {"", *(k for k in faults.KINDS if k not in ("throttle", "oom"))}
    by_fault = {kind: [r for r in rows if r["fault"] == kind and r["status"] != "duplicate"] for kind in faults.KINDS}
    assert all(r["status"] == "failed" and "InjectedFault" in r["error"] for r in by_fault["raise"])
    assert all(r["status"] == "timed_out" and "timed out" in r["error"] for r in by_fault["hang"])
    assert all(r["status"] == "failed" and "died" in r["error"] for r in by_fault["kill"])
    assert all(r["status"] == "failed" and ("HMAC" in r["error"] or "malformed reply" in r["error"])
               for r in by_fault["malformed"])
    assert all(r["status"] == "ok" for r in by_fault["duplicate"])
    dups = [r for r in rows if r["status"] == "duplicate"]
    assert len(dups) == len(by_fault["duplicate"]) and {r["fault"] for r in dups} == {"duplicate"}
    # retries keep the slot's seed; attempt numbers and ids say which try it was
    for r in rows:
        assert int(r["seed"]) == invocation_seed(5, int(r["round"]), int(r["slot"]), 0 if r["kind"] == "train" else 1)
        assert r["invocation_id"].endswith(f"-a{r['attempt']}") == (r["attempt"] != "0")
    # per-round counters agree with the rows
    for m in metrics:
        mine = [r for r in rows if r["round"] == m["round"]]
        first = [r for r in mine if r["status"] != "duplicate"]
        assert int(m["failed"]) == sum(r["status"] in ("failed", "timed_out") for r in mine)
        assert int(m["timed_out"]) == sum(r["status"] == "timed_out" for r in mine)
        assert int(m["retried"]) == sum(r["attempt"] != "0" for r in first)
        assert int(m["duplicates"]) == len(mine) - len(first) and int(m["lost"]) == 0
    assert sum(int(m[c]) for m in metrics for c in ("failed", "retried", "timed_out", "duplicates")) > 0


def _record(r: dict[str, str]) -> InvocationRecord:
    """An invocations.csv row as the ledger saw it (a duplicate delivery is billed as the run it was)."""
    return InvocationRecord.from_row({**r, "status": "ok" if r["status"] in ("ok", "duplicate") else r["status"]})


@pytest.mark.slow
def test_every_attempt_is_billed(faulty_and_clean):
    clean, faulty = faulty_and_clean
    ledger = CostLedger(load_prices(), "aws_lambda_x86", cold_start_s=1.0)
    for run_dir in (clean, faulty):
        rows = _csv(run_dir / "invocations.csv")
        metrics = read_metrics(run_dir)
        for m in metrics:
            records = [_record(r) for r in rows if r["round"] == m["round"]]
            projected, waited = float(m["projected_round_s"]), float(m["projected_round_s"]) - float(
                m["projected_learner_s"])
            # Lithops' S3 requests (the deployment a local run is priced as) for every attempt the platform ran
            storage = sum(count * ledger.request_usd[kind] for kind, count in
                          ledger.overhead.storage_requests(len(records), waited).items())
            expected = (ledger.learner_usd_s * projected + sum(ledger.invocation_usd(rec) for rec in records)
                        + storage)
            assert float(m["cost_storage_usd"]) == pytest.approx(storage, rel=1e-9)
            assert float(m["cost_serverless_usd"]) == pytest.approx(expected, rel=1e-9)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["cost_usd"]["serverless"] == sum(float(m["cost_serverless_usd"]) for m in metrics)
    assert len(_csv(faulty / "invocations.csv")) > len(_csv(clean / "invocations.csv"))


@pytest.mark.integration
def test_round_deadline_proceeds_without_stragglers_and_bills_them(tmp_path):
    # seed 1 hangs slots 0 and 2 of round 1 (and no evaluation slot): the round proceeds with slots 1 and 3 (the
    # deadline leaves room for four instances starting cold on two loaded cores, as the conformance test does)
    _train(tmp_path / "run", max_rounds=1, eval_episodes=1, fault_hang=0.4, fault_seed=1, round_deadline_s=15.0,
           max_retries=0, min_reply_fraction=0.5, max_concurrency=4)
    rows, (metrics,) = _csv(tmp_path / "run" / "invocations.csv"), read_metrics(tmp_path / "run")
    cancelled = [r for r in rows if r["status"] == "cancelled"]
    assert [r["slot"] for r in cancelled] == ["0", "2"]
    assert all(r["fault"] == "hang" and r["error"] == "cancelled" for r in cancelled)
    ledger = CostLedger(load_prices(), "aws_lambda_x86")
    for r in cancelled:  # it ran until the deadline and is billed for that time
        assert float(r["duration_s"]) > 1.0
        assert ledger.pricing.billed_seconds(*ledger.function_s(_record(r))) >= float(r["duration_s"])
    assert (metrics["lost"], metrics["timed_out"], metrics["failed"]) == ("2", "2", "0")
    assert int(metrics["env_steps"]) == 2 * 32  # the round learned from the two fragments that arrived


def test_too_few_replies_fail_the_run_with_one_line(tmp_path, capsys):
    rc = cli.main(["train", "--env-id", "CartPole-v1", "--max-rounds", "1", "--actors", "2", "--fragment-length",
                   "16", "--fault-raise", "1", "--max-retries", "1", "--no-progress", "--no-tensorboard",
                   "--run-dir", str(tmp_path / "run")])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("minionsrl: invocation failed: round 1 training: only 0 of 2")
    assert "min_reply_fraction" in err[0] and "InjectedFault" in err[0]
    rows = _csv(tmp_path / "run" / "invocations.csv")  # the failed round's attempts are listed all the same
    assert [(r["slot"], r["attempt"], r["status"]) for r in rows] == [
        ("0", "0", "failed"), ("0", "1", "failed"), ("1", "0", "failed"), ("1", "1", "failed")]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ray", "lithops"])
def test_fault_injection_on_other_backends_learns_what_a_clean_run_learns(backend, faulty_and_clean, tmp_path,
                                                                          request):
    """Every fault kind is enacted by the function (or the duplicating wrapper) wherever it runs."""
    pytest.importorskip(backend)
    if backend == "ray":
        request.getfixturevalue("ray_address")  # the session's cluster, joined by the backend
    clean, _ = faulty_and_clean
    _train(tmp_path / backend, backend=backend, **FAULTY)
    learned = [{k: r[k] for k in LEARNING_COLUMNS} for r in read_metrics(tmp_path / backend)]
    assert learned == [{k: r[k] for k in LEARNING_COLUMNS} for r in read_metrics(clean)]
    rows = _csv(tmp_path / backend / "invocations.csv")
    # throttle and oom: tests/test_cluster_faults.py
    assert {r["fault"] for r in rows} == {"", *(k for k in faults.KINDS if k not in ("throttle", "oom"))}
    assert {r["status"] for r in rows} >= {"ok", "failed", "timed_out", "duplicate"}
