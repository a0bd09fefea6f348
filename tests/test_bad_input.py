"""Every bad input of tests/bad_inputs.py (tabled in docs/results/bad-input.md by ``bench/robustness.py
bad-input``): exit code 2, one line on stderr naming the field, nothing started."""

from __future__ import annotations

import re

import bad_inputs as bad_input
import pytest


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    path = tmp_path_factory.mktemp("bad-input")
    bad_input.prepare(path)
    return path


@pytest.mark.parametrize("case", bad_input.CASES, ids=lambda c: f"{c.field}:{' '.join(c.flags)[:40]}")
def test_bad_input_is_one_line_naming_the_field(case, workdir):
    before = sorted(p.name for p in workdir.iterdir())
    rc, err = bad_input.run_case(case, workdir)
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("minionsrl: error: "), err
    names = {case.field, case.field.replace("_", "-"), "--" + case.field.replace("_", "-")}
    if case.field in ("run_dir", "checkpoint"):
        names |= {"--resume", "run_dir"}
    assert any(n in lines[0] for n in names) or (case.field == "fault_*" and "fault_" in lines[0]), lines[0]
    fix = r"; |use |must |needs? |is not one of|choose from|did you mean"
    assert re.search(fix, lines[0]), f"no fix in: {lines[0]}"
    assert sorted(p.name for p in workdir.iterdir() if p.name not in case.files) == \
        [n for n in before if n not in case.files]  # no run directory left behind


def test_a_number_in_untrusted_data_is_finite_and_not_a_bool() -> None:
    """The one rule every reader of a file, a reply or a catalogue applies (JSON's true, NaN and Infinity decode
    to a bool and floats)."""
    from minionsrl.numbers import is_amount, is_number

    assert is_number(3) and is_number(-2.5) and is_amount(0) and is_amount(1e9)
    assert not any(is_number(v) for v in (True, False, float("nan"), float("inf"), "1", None, [1]))
    assert not is_amount(-1e-12) and not is_amount(float("-inf"))
