"""Arms read against a baseline arm of their own comparison, seed by seed: the ratios, goals and answer tables of
the time (and dollars) to a target return, from ``minionsrl compare``'s compare.csv.

A row is one run's compare.csv row as the file holds it, strings, ``""`` where a run never reached the target.
``bench/time_to_target.py`` reads its comparisons with these (its goals and ``--answer``, docs/RESULTS.md).
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minionsrl.experiments.compare import Arm, bootstrap_ci, pareto_front
from minionsrl.experiments.tables import markdown_table

Row = dict[str, str]
BySeed = dict[int, Row]

# what a run that never reached the target spent in all, by the column of what it spent to it
WHOLE = {"projected_time_to_target_s": "projected_cloud_s", "time_to_target_s": "wall_s", "usd_to_target": "cost_usd",
         "rounds_to_target": "rounds"}

BASELINE = "fixed-8"  # the arm every comparison of the answer ran beside its others


@dataclass(frozen=True)
class Paired:
    """An arm against its baseline on one column, seed by seed (:func:`paired`).

    ``same_seeds``: over the ``pairs`` seeds where both have the column, the arm's mean over the baseline's on the
    same seeds, with its bootstrap ``interval`` (seeds resampled in pairs); None where no seed has it in both.
    ``stalls``: the ratio of the means over every seed, a run that never got there counted at its whole run
    (:data:`WHOLE`), so a lower bound of what it would have taken; ``bound`` says which side is open ("≥" when only
    the arm stalled, "?" when the baseline did too, "" when neither)."""

    pairs: int
    same_seeds: float | None
    interval: tuple[float, float] | None
    stalls: float | None
    bound: str


def paired(arm: BySeed, base: BySeed, column: str) -> Paired:
    """``arm`` against ``base`` (both: seed -> row) on ``column``: seconds, dollars or rounds to the target (the seeds
    both reached it), or a price of a round (every seed)."""
    seeds = sorted(set(arm) & set(base))
    both = [s for s in seeds if arm[s][column] and base[s][column]]
    ours, theirs = [float(arm[s][column]) for s in both], [float(base[s][column]) for s in both]

    def counted(row: Row) -> float:
        return float(row[column] or row[WHOLE[column]])

    stalled = any(not arm[s][column] for s in seeds), any(not base[s][column] for s in seeds)
    stalls = (statistics.fmean(counted(arm[s]) for s in seeds) / statistics.fmean(counted(base[s]) for s in seeds)
              if seeds else None)
    return Paired(pairs=len(both), same_seeds=sum(ours) / sum(theirs) if both else None,
                  interval=bootstrap_ci(ours, over=theirs) if both else None, stalls=stalls,
                  bound="?" if stalled[1] else "≥" if stalled[0] else "")


def by_seed(rows: list[Row], arm: str) -> BySeed:
    """An arm's rows by seed."""
    return {int(r["seed"]): r for r in rows if r["arm"] == arm}


def reached(rows: list[Row], arm: str) -> tuple[int, int]:
    """How many of an arm's seeds reached the target, of how many."""
    mine = [r for r in rows if r["arm"] == arm]
    return sum(r["usd_to_target"] != "" for r in mine), len(mine)


def ratio_text(rows: list[Row], arm: str, base: str, column: str) -> str:
    """The same-seeds ratio of ``arm`` over ``base`` on ``column``, with the seeds each reached the target in."""
    (k, of), (kb, ofb) = reached(rows, arm), reached(rows, base)
    p = paired(by_seed(rows, arm), by_seed(rows, base), column)
    if p.same_seeds is None:
        return f"– ({k}/{of} vs {kb}/{ofb} reached)"
    return f"{p.same_seeds:.2f}× on {p.pairs} seeds ({k}/{of} vs {kb}/{ofb})"


def goal(rows: list[Row], arm: str, base: str, time_col: str, time_max: float, usd_max: float | None,
         seeds: int = 5) -> str:
    """yes when every seed of ``arm`` reached the target (``seeds`` of them ran) within both ratios of the
    baseline's, on the seeds the baseline reached too; otherwise no, or no verdict yet, and why."""
    (k, of), (kb, ofb) = reached(rows, arm), reached(rows, base)
    if of < seeds or ofb < seeds:
        return f"no verdict yet ({of} and {ofb} of {seeds} seeds run)"
    if k < of or kb == 0:
        return f"no ({k} of its {of} seeds reached it, {kb} of the baseline's {ofb})"
    ours, theirs = by_seed(rows, arm), by_seed(rows, base)
    time, usd = paired(ours, theirs, time_col).same_seeds, paired(ours, theirs, "usd_to_target").same_seeds
    assert time is not None and usd is not None  # every seed of both reached it
    return "yes" if time <= time_max and (usd_max is None or usd <= usd_max) else "no"


def fixed_counts(arms: list[str]) -> list[str]:
    """The arms that run a fixed count on the serverless platform with no other change (``fixed-8``), by count."""
    return sorted((a for a in arms if a.startswith("fixed-") and a[len("fixed-"):].isdigit()),
                  key=lambda a: int(a[len("fixed-"):]))


def hindsight_best(rows: list[Row], arms: list[str]) -> str | None:
    """The fixed count (on the serverless platform, no other change) whose runs took the least projected time to
    the target on average, a seed that never reached it counted at its whole run: the arm a sweep would have
    found."""
    fixed = fixed_counts(arms)
    column = "projected_time_to_target_s"

    def mean_time(arm: str) -> float:
        return statistics.fmean(float(r[column] or r[WHOLE[column]]) for r in rows if r["arm"] == arm)

    return min(fixed, key=mean_time) if fixed else None


def paired_text(p: Paired) -> str:
    """A paired ratio with its interval and pairs, as the answer's tables print it."""
    if p.same_seeds is None or p.interval is None:
        return "– (no seed reached it in both)"
    lo, hi = p.interval
    return f"{p.same_seeds:.2f}× [{lo:.2f}, {hi:.2f}] ({p.pairs})"


def with_per_round(rows: list[Row]) -> list[Row]:
    """Rows with what a round cost over the whole run: projected seconds and dollars per round."""
    return [{**r, "s_per_round": str(float(r["projected_cloud_s"]) / int(r["rounds"])),
             "usd_per_round": str(float(r["cost_usd"]) / int(r["rounds"]))} for r in rows]


def answer_env(env: str, target: float, comparisons: list[tuple[str, list[str]]], results: Path,
               wall: bool = False, priced: Callable[[Row], Row] = lambda row: row) -> list[str]:
    """The env's answer: every arm of ``comparisons`` (name, arms) against the :data:`BASELINE` of its own
    comparison (``results/time-to-target-NAME/ENV/compare.csv``, each row as ``priced`` re-prices it), seed by
    seed; then why, as rounds to the target and what a round costs (time to it = rounds x seconds a round).
    ``wall``: the measured wall time too."""
    table: list[list[str]] = []
    why: list[list[str]] = []
    points: dict[str, tuple[float, float]] = {}

    def not_run(arm: str, name: str) -> None:
        table.append([arm, name, "not run yet", *[""] * (6 + wall)])
        why.append([arm, name, "not run yet", "", ""])

    for name, arms in comparisons:
        path = results / f"time-to-target-{name}" / env / "compare.csv"
        if not path.exists():
            not_run(", ".join(arms), name)
            continue
        with open(path, newline="") as f:
            rows = with_per_round([priced(row) for row in csv.DictReader(f)])
        base = by_seed(rows, BASELINE)
        for arm in arms:
            mine = by_seed(rows, arm)
            if not mine:
                not_run(arm, name)
                continue
            t, d = paired(mine, base, "projected_time_to_target_s"), paired(mine, base, "usd_to_target")
            n_reached = sum(bool(r["usd_to_target"]) for r in mine.values())
            if t.stalls is not None and d.stalls is not None and not t.bound and not d.bound:
                # on the front only where every seed got there (and the baseline's): a stall's ratio is only a bound
                points[f"{arm} ({name})"] = (d.stalls, -t.stalls)
            table.append([arm, name, f"{n_reached}/{len(mine)}", paired_text(t), paired_text(d),
                          *([paired_text(paired(mine, base, "time_to_target_s"))] if wall else []),
                          f"{t.bound}{t.stalls:.2f}×", f"{d.bound}{d.stalls:.2f}×",
                          f"{statistics.fmean(float(r['mean_actors']) for r in mine.values()):.0f}", ""])
            # comparisons published before compare.csv had the column lack it
            rounds = (paired_text(paired(mine, base, "rounds_to_target")) if "rounds_to_target" in rows[0]
                      else "– (not recorded)")
            why.append([arm, name, rounds, paired_text(paired(mine, base, "s_per_round")),
                        paired_text(paired(mine, base, "usd_per_round"))])
    front = pareto_front(points)
    for row in table:
        if f"{row[0]} ({row[1]})" in front:
            row[-1] = "yes"
    return [f"### {env} (target {target:g})", "",
            markdown_table(["arm", "comparison", "reached", "time to target vs fixed-8, same seeds [95%] (pairs)",
                            "dollars vs fixed-8, same seeds [95%] (pairs)",
                            *(["measured wall time vs fixed-8, same seeds [95%] (pairs)"] if wall else []),
                            "time, stalls counted",
                            "dollars, stalls counted", "actors (mean)", "Pareto (every seed reached)"], table), "",
            f"#### Why ({env}): the rounds to the target and what a round costs",
            "", markdown_table(["arm", "comparison", "rounds to target vs fixed-8, same seeds [95%] (pairs)",
                                "projected seconds a round vs fixed-8 [95%] (pairs)",
                                "dollars a round vs fixed-8 [95%] (pairs)"], why), ""]


def with_earlier(out: Path, arms: list[str], order: list[str]) -> list[str]:
    """``arms`` and after them every other arm of ``order`` with a run (finished or cut) under ``out/runs``: a later
    pass of a comparison with other arms adds them to it rather than leave a table without its baseline. Finished
    runs are reused, and the earlier arms also run any seeds they lack."""
    done = {d.name.rpartition("__s")[0] for d in (out / "runs").glob("*__s*")}
    asked = {Arm.parse(a).label for a in arms}
    return [*arms, *(a for a in order if Arm.parse(a).label in done - asked)]
