"""Issue 55's autopilot goal, read from comparisons that ran `--actors auto` beside every fixed count:
on every seed, auto within 1.15x the projected time to the target of the hindsight-best fixed count (the one
whose seeds took the least projected time on average) at no more than 1.1x its dollars.

Each comparison is an ordinary ``minionsrl compare`` out dir (its compare.csv); the seeds' ratios, their means
over the seeds both reached (the pairs' sum over sum) with a bootstrap 95% interval, and the verdict go to
``docs/results/autopilot.md``, with where auto misses, what its rounds were (scaler.csv says why it moved).

    .venv/bin/python bench/experiment.py bench/specs/time-to-target-slowpendulum.yaml   # the comparison
    .venv/bin/python bench/autopilot.py slowpendulum=bench/out/ttt/slowpendulum          # the goal, read

A comparison read again replaces its own section of the doc (by its heading); the others stay.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from pathlib import Path

from common import ROOT, markdown_table

from minionsrl.experiments.targets import by_seed, hindsight_best, paired, paired_text

TIME_MAX, USD_MAX = 1.15, 1.10  # the goal, per seed
TIME, USD = "projected_time_to_target_s", "usd_to_target"
DOC = ROOT / "docs" / "results" / "autopilot.md"


def read(out: Path) -> list[dict[str, str]]:
    with open(out / "compare.csv", newline="") as f:
        return list(csv.DictReader(f))


def changes(out: Path, seed: int, arm: str = "auto") -> list[dict[str, str]]:
    """The rows of a run's scaler.csv: each change of its count, with the round (none where it has no file)."""
    path = out / "runs" / f"{arm}__s{seed}" / "scaler.csv"
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def counts(out: Path, seed: int, arm: str = "auto") -> list[int]:
    return [int(r["n_actors"]) for r in changes(out, seed, arm)]


def moves(out: Path, seed: int, arm: str = "auto") -> str:
    """The counts auto ran, by the rounds it changed them."""
    return " → ".join(f"{r['n_actors']} (r{r['round']})" for r in changes(out, seed, arm)) or "?"


def warm_round(out: Path, run: str) -> tuple[float, float]:
    """A run's median projected seconds and dollars of a round past its third without an evaluation beside it or
    a cold start: what a count costs a round, as the round model weighs it."""
    with open(out / "runs" / run / "metrics.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f)
                if int(r["round"]) > 3 and not r["eval_return_mean"] and not int(r["cold_starts"] or 0)]
    return (statistics.median(float(r["projected_round_s"]) for r in rows),
            statistics.median(float(r["cost_serverless_usd"]) for r in rows))


def report(name: str, out: Path, arm: str = "auto") -> list[str]:
    """One comparison's section: the hindsight-best fixed count, each seed's ratios, their means, the verdict, and
    a warm round of auto's against the best's (what its count costs, learning apart)."""
    rows = read(out)
    arms = sorted({r["arm"] for r in rows})
    best = hindsight_best(rows, arms)
    assert best is not None, f"{out}: no fixed count ran"
    ours, theirs = by_seed(rows, arm), by_seed(rows, best)
    table, every = [], True
    for seed in sorted(set(ours) & set(theirs)):
        a, b = ours[seed], theirs[seed]
        (sa, ua), (sb, ub) = warm_round(out, f"{arm}__s{seed}"), warm_round(out, f"{best}__s{seed}")
        warm = f"{sa / sb:.2f}x s, {ua / ub:.2f}x $"
        if not (a[TIME] and b[TIME]):
            every = False
            table.append([seed, "not reached" if not a[TIME] else "–", "–", a["rounds_to_target"] or "–",
                          b["rounds_to_target"] or "–", warm, moves(out, seed, arm)])
            continue
        t, u = float(a[TIME]) / float(b[TIME]), float(a[USD]) / float(b[USD])
        every &= t <= TIME_MAX and u <= USD_MAX
        table.append([seed, f"{t:.3f}", f"{u:.3f}", a["rounds_to_target"], b["rounds_to_target"], warm,
                      moves(out, seed, arm)])
    time, usd = paired(ours, theirs, TIME), paired(ours, theirs, USD)
    verdict = "met" if every and len(table) >= 5 else "missed" if table else "not run"
    settled = {counts(out, seed, arm)[-1] for seed in ours if counts(out, seed, arm)}  # where each seed ended
    peer = f"fixed-{settled.pop()}" if len(settled) == 1 else None
    peer = peer if peer in arms else None
    against = ([f"Against {peer}, the count it settles on (learning apart, what its start costs): time "
                f"{paired_text(paired(ours, by_seed(rows, peer), TIME))}, dollars "
                f"{paired_text(paired(ours, by_seed(rows, peer), USD))}.", ""] if peer and peer != best else [])
    return [f"## {name}", "",
            f"Hindsight-best fixed count: **{best}**. `{arm}` against it, seed by seed (goal: time ≤ {TIME_MAX}x and "
            f"dollars ≤ {USD_MAX}x on every seed): **{verdict}**. Over the seeds: time {paired_text(time)}, dollars "
            f"{paired_text(usd)} (sum over sum, bootstrap 95%).", "",
            markdown_table(["seed", "time vs best", "dollars vs best", f"rounds ({arm})", f"rounds ({best})",
                            "a warm round vs best's", f"{arm}'s counts (round)"], table), "", *against]


def kept(doc: Path) -> dict[str, list[str]]:
    """The doc's sections by heading: a comparison read again replaces its own, and the others stay (a
    comparison's runs need not outlive its session)."""
    sections: dict[str, list[str]] = {}
    heading = None
    for line in doc.read_text().splitlines() if doc.exists() else []:
        if line.startswith("## "):
            heading = line
            sections[heading] = []
        if heading is not None:
            sections[heading].append(line)
    return sections


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("comparisons", nargs="+", help="NAME=OUT_DIR of a comparison with auto and fixed counts")
    parser.add_argument("--arm", default="auto", help="the auto arm's label in compare.csv (e.g. "
                        "auto+initial_actors=64 for auto started at plan's knee)")
    args = parser.parse_args()
    lines = ["# `--actors auto` against the hindsight-best fixed count", "",
             "Written by `bench/autopilot.py` from comparisons that ran `--actors auto` beside every fixed count "
             f"(its docstring has the commands). The goal (issue 55): on every seed, auto within {TIME_MAX}x the "
             "projected time to the target of the hindsight-best fixed count (the least projected time on average) "
             f"at no more than {USD_MAX}x its dollars.", ""]
    sections = kept(DOC)
    for item in args.comparisons:
        name, _, out = item.partition("=")
        section = report(name, Path(out), args.arm)
        sections[section[0]] = section
        print("\n".join(section))
    DOC.write_text("\n".join([*lines, *(line for section in sections.values() for line in section)]))


if __name__ == "__main__":
    main()
