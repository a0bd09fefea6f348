"""Learning unchanged bit for bit (issue 44): short PPO, APPO and pipelined runs on CartPole and Hopper learn
exactly what they learned when tests/golden/learning.json was recorded (tests/golden/learning.py says how, and why
the record holds only on a machine of the kind it was made on)."""

from __future__ import annotations

import json

import pytest
from golden import learning

RECORD = json.loads(learning.RECORD.read_text())
pytestmark = pytest.mark.slow  # six short runs: minutes on 2 cores (.ci/run runs them)


@pytest.fixture(scope="module")
def same_kind() -> None:
    here = learning.signature()
    if here != RECORD["signature"]:
        pytest.skip(f"the golden runs were recorded on {RECORD['signature']}; this machine is {here}")


@pytest.mark.parametrize("name", sorted(learning.RUNS))
def test_a_golden_run_learns_what_it_learned_when_recorded(name, same_kind, tmp_path):
    got, want = learning.run(name, tmp_path), RECORD["runs"][name]
    for i, (row, kept) in enumerate(zip(got["rows"], want["rows"], strict=True), start=1):
        assert row == kept, f"{name}: round {i} differs"
    assert got["policy"] == want["policy"], f"{name}: the final policy differs"
