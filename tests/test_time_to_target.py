"""minionsrl.experiments.targets (bench/time_to_target.py's goals and answer): an arm read against the fixed-8 of its
own comparison, seed by seed."""

from __future__ import annotations

import csv

import pytest

from minionsrl.experiments import targets as ttt
from minionsrl.experiments.compare import bootstrap_ci


def rows(times: dict[int, float | None], whole: float) -> dict[int, dict[str, str]]:
    """compare.csv rows by seed: seconds to the target ("" where never reached) and the whole run's seconds."""
    return {s: {"projected_time_to_target_s": "" if t is None else str(t), "projected_cloud_s": str(whole)}
            for s, t in times.items()}


def test_bootstrap_of_a_paired_ratio():
    assert bootstrap_ci([2.0, 4.0, 6.0], over=[4.0, 8.0, 12.0]) == pytest.approx((0.5, 0.5))  # every pair 0.5
    assert bootstrap_ci([3.0], over=[4.0]) == (0.75, 0.75)
    lo, hi = bootstrap_ci([1.0, 4.0, 2.0, 8.0], over=[4.0, 4.0, 4.0, 4.0])
    assert lo < 15 / 16 < hi  # the ratio of the sums lies inside its interval
    assert bootstrap_ci([1.0, 3.0]) == bootstrap_ci([1.0, 3.0], over=None)  # the mean's interval is unchanged


def test_paired_reads_the_same_seeds_and_counts_a_stall_at_its_whole_run():
    base = rows({1: 100.0, 2: 10.0, 3: 20.0}, whole=200.0)
    arm = rows({1: None, 2: 5.0, 3: 10.0}, whole=60.0)  # seed 1, fixed-8's slowest, never reached the target
    p = ttt.paired(arm, base, "projected_time_to_target_s")
    assert p.pairs == 2 and p.same_seeds == pytest.approx(0.5)  # not (5 + 10) / (100 + 10 + 20)
    assert p.stalls == pytest.approx((60 + 5 + 10) / 130) and p.bound == "≥"
    both = ttt.paired(arm, rows({1: None, 2: 10.0, 3: 20.0}, whole=200.0), "projected_time_to_target_s")
    assert both.bound == "?"  # fixed-8 stalled too: the ratio's side is unknown
    assert ttt.paired(base, base, "projected_time_to_target_s").bound == ""


def compare_rows(arm: str, seconds: list[float | None], usd: list[float | None]) -> list[dict[str, str]]:
    """An arm's compare.csv rows, seeds 1.., with its projected seconds and dollars to the target (None: never)."""
    return [{"arm": arm, "seed": str(i + 1), "projected_time_to_target_s": "" if t is None else str(t),
             "usd_to_target": "" if d is None else str(d), "projected_cloud_s": "99", "cost_usd": "9", "rounds": "10"}
            for i, (t, d) in enumerate(zip(seconds, usd, strict=True))]


def write_compare(path, rows: list[dict[str, str]]) -> None:
    """Write ``rows`` as a compare.csv at ``path``."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_goal_needs_every_seed_and_reads_the_ratios_seed_by_seed():
    base = compare_rows("fixed-8", [100.0, 10, 10, 10, 10], [1.0] * 5)
    fast = compare_rows("fast", [40.0, 4, 4, 4, 4], [1.0] * 5)
    assert ttt.goal(base + fast, "fast", "fixed-8", "projected_time_to_target_s", 0.48, 1.0) == "yes"
    stalled = compare_rows("stalled", [None, 4, 4, 4, 4], [None, 1.0, 1.0, 1.0, 1.0])
    assert ttt.goal(base + stalled, "stalled", "fixed-8", "projected_time_to_target_s", 0.48, 1.0).startswith("no (4")
    # on the seeds both reached, 16 / 40 = 0.40x (against fixed-8's mean over its own seeds: 4 / 28 = 0.14x)
    assert "0.40× on 4 seeds" in ttt.ratio_text(base + stalled, "stalled", "fixed-8", "projected_time_to_target_s")
    assert ttt.goal(base + fast, "fast", "fixed-8", "projected_time_to_target_s", 0.3, 1.0) == "no"
    assert "no verdict" in ttt.goal(base + fast[:3], "fast", "fixed-8", "projected_time_to_target_s", 0.48, 1.0)


def test_a_later_pass_keeps_the_arms_run_before(tmp_path):
    for name in ("fixed-8__s1", "fixed-8__s2", "kungfu__s1"):
        (tmp_path / "runs" / name).mkdir(parents=True)
    order = ["fixed:8", "fixed:16", "kungfu", "nitro"]
    # the requested arms first, in their order, then the earlier ones in the spec's order (fixed-8 before kungfu)
    assert ttt.with_earlier(tmp_path, ["nitro", "kungfu"], order) == ["nitro", "kungfu", "fixed:8"]
    assert ttt.with_earlier(tmp_path / "none", ["fixed:8"], order) == ["fixed:8"]


def test_the_latency_answer_reads_the_measured_wall_time_too(tmp_path):
    table = tmp_path / "time-to-target-x" / "latency" / "compare.csv"
    table.parent.mkdir(parents=True)
    rows = [{**r, "time_to_target_s": str(wall), "wall_s": "500", "mean_actors": r["arm"].split("-")[1]}
            for r, wall in zip(compare_rows("fixed-8", [100.0, 80.0], [1.0, 1.0])
                               + compare_rows("fixed-64", [20.0, 16.0], [1.0, 1.0]), [300, 200, 150, 100],
                               strict=True)]
    write_compare(table, rows)
    latency = "\n".join(ttt.answer_env("latency", 1000.0, [("x", ["fixed-8", "fixed-64"])], tmp_path, wall=True))
    assert "measured wall time vs fixed-8" in latency
    # time, dollars, then the wall time: each fixed-64 seed took half of fixed-8's wall seconds
    assert "| fixed-64 | x | 2/2 | 0.20× [0.20, 0.20] (2) | 1.00× [1.00, 1.00] (2) | 0.50× [0.50, 0.50] (2) |" \
        in latency
    assert "measured wall time" not in "\n".join(ttt.answer_env("hopper", 2500.0, [("x", ["fixed-64"])], tmp_path))


def test_the_answer_says_why_as_rounds_to_the_target_and_the_price_of_a_round(tmp_path):
    table = tmp_path / "time-to-target-x" / "hopper" / "compare.csv"
    table.parent.mkdir(parents=True)
    rows = [{**r, "rounds_to_target": reached, "rounds": str(int(reached or 240) + 1), "mean_actors": "8",
             "projected_cloud_s": str(secs), "cost_usd": str(usd)}
            for r, reached, secs, usd in zip(
                compare_rows("fixed-8", [60.0, 80.0, 50.0], [1.0] * 3)
                + compare_rows("fixed-64", [30.0, 50.0, None], [1.0, 1.0, None]),
                ["60", "80", "50", "60", "100", ""], [61.0, 81.0, 51.0, 30.5, 50.5, 120.5],
                [6.1, 8.1, 5.1, 6.1, 10.1, 24.1], strict=True)]
    write_compare(table, rows)
    hopper = "\n".join(ttt.answer_env("hopper", 2500.0, [("x", ["fixed-8", "fixed-64"])], tmp_path))
    why = hopper.split("#### Why (hopper)")[1]
    # rounds on the 2 seeds both reached: (60 + 100) / (60 + 80); a round: half the seconds, the same dollars, all
    # 3 seeds paired (the stalled run's 241 rounds count in its price of a round, not in its rounds to the target)
    assert "| fixed-64 | x | 1.14× [1.00, 1.25] (2) | 0.50× [0.50, 0.50] (3) | 1.00× [1.00, 1.00] (3) |" in why
    assert "| fixed-8 | x | 1.00× [1.00, 1.00] (3) |" in why
    # a comparison published before compare.csv had rounds_to_target says so rather than guess
    for r in rows:
        del r["rounds_to_target"]
    write_compare(table, rows)
    again = "\n".join(ttt.answer_env("hopper", 2500.0, [("x", ["fixed-64"])], tmp_path))
    assert "| fixed-64 | x | – (not recorded) |" in again
