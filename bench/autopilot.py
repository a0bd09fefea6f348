"""Issue 55's autopilot goal, read from comparisons that ran `--actors auto` beside every fixed count:
on every seed, auto within 1.15x the projected time to the target of the hindsight-best fixed count (the one
whose seeds took the least projected time on average) at no more than 1.1x its dollars.

Each comparison is an ordinary ``minionsrl compare`` out dir (its compare.csv); the seeds' ratios, their means
over the seeds both reached (the pairs' sum over sum) with a bootstrap 95% interval, and the verdict go to
``docs/results/autopilot.md``, with where auto misses, what its rounds were (scaler.csv says why it moved).

    .venv/bin/python bench/experiment.py bench/specs/time-to-target-slowpendulum.yaml   # the comparison
    .venv/bin/python bench/autopilot.py slowpendulum=bench/out/ttt/slowpendulum          # the goal, read

``--oracle`` reads a comparison that ran every fixed count (its compare.csv alone) for the premise of the goal
instead: could any count rule meet it? Each fixed count against the hindsight-best, seed by seed; how often the
seeds, resampled, make each count the hindsight-best; and the count a sweep on the other seeds would have picked,
tried on the seed left out. Rows billed before ``priced_as`` existed are re-priced on Lithops (``bench/reprice.py``;
its env is the one of hopper, halfcheetah, latency the name starts with).

    .venv/bin/python bench/autopilot.py --oracle "Reach, 2026-12-03=docs/results/time-to-target-2026-12-03-reach"

A comparison read again replaces its own section of the doc (by its heading); the others stay.
"""

from __future__ import annotations

import argparse
import collections
import csv
import random
import statistics
from pathlib import Path

from common import ROOT, markdown_table
from reprice import LEARNER_S, on_lithops

from minionsrl.experiments.targets import by_seed, fixed_counts, hindsight_best, paired, paired_text

TIME_MAX, USD_MAX = 1.15, 1.10  # the goal, per seed
TIME, USD = "projected_time_to_target_s", "usd_to_target"
DOC = ROOT / "docs" / "results" / "autopilot.md"
Cell = tuple[float, float] | str | None  # a seed's time and dollars ratio; None: not reached; "–": nothing to compare


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
    table, every, cells = [], True, ratios(rows, arm, best)
    for seed in sorted(set(ours) & set(theirs)):
        a, b, cell = ours[seed], theirs[seed], cells[seed]
        (sa, ua), (sb, ub) = warm_round(out, f"{arm}__s{seed}"), warm_round(out, f"{best}__s{seed}")
        warm = f"{sa / sb:.2f}x s, {ua / ub:.2f}x $"
        if not isinstance(cell, tuple):  # a seed either did not reach: no seed of it meets the goal
            every = False
            table.append([seed, "not reached" if not a[TIME] else "–", "–", a["rounds_to_target"] or "–",
                          b["rounds_to_target"] or "–", warm, moves(out, seed, arm)])
            continue
        t, u = cell
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


def ratios(rows: list[dict[str, str]], arm: str, best: str) -> dict[int, Cell]:
    """``arm``'s time and dollars to the target over ``best``'s, by ``best``'s seeds: None where ``arm`` did not
    reach it and ``best`` did, "–" where ``best`` did not (no ratio to take)."""
    ours, theirs = by_seed(rows, arm), by_seed(rows, best)
    return {seed: "–" if not b[TIME] else None if seed not in ours or not ours[seed][TIME] else
            (float(ours[seed][TIME]) / float(b[TIME]), float(ours[seed][USD]) / float(b[USD]))
            for seed, b in sorted(theirs.items())}


def meets(cells: dict[int, Cell]) -> bool:
    """The goal on every seed the hindsight-best reached."""
    return all(c == "–" or (isinstance(c, tuple) and c[0] <= TIME_MAX and c[1] <= USD_MAX) for c in cells.values())


def oracle(name: str, out: Path, draws: int = 2000) -> list[str]:
    """The goal's premise on one comparison of every fixed count: which counts would meet it against the
    hindsight-best, how stable that best is over the seeds, and what a sweep on the other seeds would pick."""
    env = next((e for e in LEARNER_S if name.lower().startswith(e)), None)
    rows = [on_lithops(r, env) if env else r for r in read(out)]
    assert all(r.get("priced_as") or r["backend"] != "local" for r in rows) or env, f"{out}: name its env first"
    fixed = fixed_counts(sorted({r["arm"] for r in rows}))
    assert len(fixed) >= 3, f"{out}: fewer than 3 fixed counts ran"
    # the seeds every fixed count ran: each column, resample and sweep compares them all
    seeds = sorted(set.intersection(*({r["seed"] for r in rows if r["arm"] == arm} for arm in fixed)), key=int)
    rows = [r for r in rows if r["seed"] in seeds]
    best = hindsight_best(rows, fixed)
    assert best is not None
    table = []
    for arm in fixed:
        cells = ratios(rows, arm, best)
        table.append([arm, *(c if isinstance(c, str) else "not reached" if c is None else f"{c[0]:.2f} / {c[1]:.2f}"
                             for c in cells.values()), "yes" if meets(cells) else "no"])
    rng, picked = random.Random(0), collections.Counter()
    for _ in range(draws):  # the seeds resampled with replacement, every arm's runs of a seed kept together
        drawn = [rng.choice(seeds) for _ in seeds]
        picked[hindsight_best([r for seed in drawn for r in rows if r["seed"] == seed], fixed)] += 1
    swept = []
    for seed in seeds:
        pick = hindsight_best([r for r in rows if r["seed"] != seed], fixed)
        assert pick is not None
        cell = ratios(rows, pick, best)[int(seed)]
        swept.append(f"seed {seed}: {pick}, " + ("–" if cell == "–" else "not reached" if cell is None else
                                                  f"{cell[0]:.2f}× / {cell[1]:.2f}×"))
    others = [row[0] for row in table if row[-1] == "yes" and row[0] != best]
    stable = ", ".join(f"{arm} {picked[arm] / draws:.0%}" for arm in fixed if picked[arm])
    return [f"## Could a fixed count meet the goal? {name}", "",
            f"Every fixed count's projected time / dollars to the target over the hindsight-best's (**{best}**), seed "
            f"by seed; the goal: ≤ {TIME_MAX} / ≤ {USD_MAX} on every seed it reached. Counts other than {best} that "
            f"meet it: **{', '.join(others) or 'none'}**. The seeds resampled ({draws} draws) make each count the "
            f"hindsight-best this often: {stable}. A sweep on the other seeds, tried on the one left out (its pick, "
            f"then time / dollars against {best}): {'; '.join(swept)}.", "",
            markdown_table(["count", *(f"seed {s}" for s in seeds), "meets the goal"], table), ""]


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
    parser.add_argument("--oracle", action="store_true", help="read each comparison (of every fixed count) for "
                        "the goal's premise: could any count rule meet it (see the module's docstring)")
    parser.add_argument("--arm", default="auto", help="the auto arm's label in compare.csv (e.g. "
                        "auto+initial_actors=64 for auto started at plan's knee)")
    args = parser.parse_args()
    lines = ["# `--actors auto` against the hindsight-best fixed count", "",
             "Written by `bench/autopilot.py` from comparisons that ran `--actors auto` beside every fixed count "
             f"(its docstring has the commands). The goal (issue 55): on every seed, auto within {TIME_MAX}x the "
             "projected time to the target of the hindsight-best fixed count (the least projected time on average) "
             f"at no more than {USD_MAX}x its dollars. The sections \"Could a fixed count meet the goal?\" "
             "(`--oracle`) read the goal's premise from comparisons of every fixed count: which counts meet it "
             "against the hindsight-best, and how often the seeds, resampled, make each count that best.", ""]
    sections = kept(DOC)
    for item in args.comparisons:
        name, _, out = item.partition("=")
        section = oracle(name, Path(out)) if args.oracle else report(name, Path(out), args.arm)
        sections[section[0]] = section
        print("\n".join(section))
    DOC.write_text("\n".join([*lines, *(line for section in sections.values() for line in section)]))


if __name__ == "__main__":
    main()
