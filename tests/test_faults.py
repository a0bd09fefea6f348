"""Fault injection, function side: the draw is deterministic and each kind is enacted by the function itself."""

from __future__ import annotations

import json

import pytest
import torch

from minionsrl import faults, wire
from minionsrl.envs import EnvSpec
from minionsrl.fragment import Fragment
from minionsrl.numpy_policy import PolicyArch
from minionsrl.policy import ActorCritic, snapshot_of
from minionsrl.rollout import handle

KEY = b"f" * 32
CART = PolicyArch(4, 2, True, (8,))
STEPS = 16


def _policy_blob() -> bytes:
    torch.manual_seed(0)
    return snapshot_of(ActorCritic(CART), None, 0, 10.0).encode(KEY)


def _request(fault: dict | None = None, kind: str = "train") -> bytes:
    req = {"id": "r1-train-0", "kind": kind, "policy": "p", "env": EnvSpec("CartPole-v1").to_json(), "seed": 5,
           "gamma": 0.99, "steps": STEPS, "episodes": 1}
    if fault is not None:
        req["fault"] = fault
    return json.dumps(req).encode()


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
    arrays, meta = wire.decode(_handle({"kind": "raise"}), KEY)
    assert meta["type"] == "error" and "InjectedFault" in meta["error"] and arrays == {}


def test_no_fault_and_duplicate_leave_the_reply_intact():
    clean, _ = wire.decode(_handle(), KEY)
    arrays, meta = wire.decode(_handle({"kind": "duplicate"}), KEY)  # duplicates are the platform's doing
    assert arrays.keys() == clean.keys() and all((arrays[k] == clean[k]).all() for k in clean)
    assert Fragment.from_wire(arrays, meta, STEPS, CART).obs.shape == (STEPS, 4)


def test_malformed_flip_fails_the_integrity_check():
    with pytest.raises(wire.WireError, match="HMAC"):
        wire.decode(_handle({"kind": "malformed", "variant": 0}), KEY)


@pytest.mark.parametrize("kind", ["train", "eval"])
def test_malformed_resigned_reply_fails_validation(kind):
    arrays, meta = wire.decode(_handle({"kind": "malformed", "variant": 1}, kind), KEY)  # authentic, but cut
    clean, _ = wire.decode(_handle(kind=kind), KEY)
    cut = [name for name in clean if arrays[name].shape != clean[name].shape]
    assert len(cut) == 1
    if kind == "train":
        with pytest.raises(wire.WireError):
            Fragment.from_wire(arrays, meta, STEPS, CART)
