"""Learning unchanged bit for bit (issue 44): short PPO, APPO and pipelined runs on CartPole and Hopper learn
exactly what they learned when tests/golden/learning.json was recorded (tests/golden/learning.py says how, and why
the record holds only on a machine of the kind it was made on)."""

from __future__ import annotations

import json

import pytest
from golden import learning

pytestmark = pytest.mark.slow  # six short runs: minutes on 2 cores (.ci/run runs them)


@pytest.fixture(scope="module")
def recorded() -> dict:
    """The runs recorded on this machine's kind (skipped on a kind with no record)."""
    here = learning.signature()
    runs = learning.matching(here)
    if runs is None:
        kinds = [r["signature"] for r in learning.records()]
        pytest.skip(f"the golden runs were recorded on {kinds}; this machine is {here}")
    return runs


def test_each_machine_kind_has_one_record_of_every_run():
    kinds = [json.dumps(r["signature"], sort_keys=True) for r in learning.records()]
    assert kinds and len(set(kinds)) == len(kinds)
    assert all(sorted(r["runs"]) == sorted(learning.RUNS) for r in learning.records())


@pytest.mark.parametrize("name", sorted(learning.RUNS))
def test_a_golden_run_learns_what_it_learned_when_recorded(name, recorded, tmp_path):
    got, want = learning.run(name, tmp_path), recorded[name]
    for i, (row, kept) in enumerate(zip(got["rows"], want["rows"], strict=True), start=1):
        assert row == kept, f"{name}: round {i} differs"
    assert got["policy"] == want["policy"], f"{name}: the final policy differs"
