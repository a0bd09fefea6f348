"""Benchmark: the gradient noise scale measured before the update against after it, on Hopper-v5.

Runs ``kungfu`` and ``critical`` (the scalers that read the noise scale) with ``--detector-placement before`` and
``after`` (Nitro's published placement, the old default), 300k steps each, the comparison's settings
(docs/results/hopper.yaml, 64 minibatches, ``--detectors on`` so that the curvature is logged too), and reports
per run the per-round B_simple (median, quantiles, fraction positive, early and late medians), the actor counts
the scaler chose, the return and the bill; and, on the first seed's ``critical`` pair, B_simple round by round
(the two placements see the same batches there for as long as they pick the same ``n``). The section goes to
docs/SCALING.md; the per-round columns it reads are kept in docs/results/gns-placement-hopper.csv, so that
``--reuse`` renders it again without the runs.

    .venv/bin/python bench/gns_placement.py [--seeds 1 2 3] [--jobs 2] [--reuse]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from common import OUT, PYTHON, ROOT, log, markdown_table, provenance, write_section

from minionsrl.loop.metrics import read_metrics

RUNS = OUT / "gns-placement"
KEPT = ROOT / "docs" / "results" / "gns-placement-hopper.csv"
PLOT = ROOT / "docs" / "results" / "gns-placement-hopper.png"
SCALING = ROOT / "docs" / "SCALING.md"
SCALERS = ("kungfu", "critical")
PLACEMENTS = ("before", "after")
COLUMNS = ("round", "env_steps", "n_actors", "gns", "convexity_ratio", "eval_return_mean", "learn_s", "detector_s",
           "projected_round_s", "cost_serverless_usd")
STEPS = 300_000


def run_dir(scaler: str, where: str, seed: int) -> Path:
    return RUNS / f"hopper-{scaler}-{where}-seed{seed}"


def command(scaler: str, where: str, seed: int) -> list[str]:
    """The ``minionsrl train`` command line of one run."""
    return ["minionsrl", "train", "--config", "docs/results/hopper.yaml", "--scaler", scaler, "--detectors", "on",
            "--detector-placement", where, "--num-minibatches", "64", "--eval-episodes", "5",
            "--total-timesteps", str(STEPS), "--seed", str(seed), "--no-progress",
            "--run-dir", str(run_dir(scaler, where, seed).relative_to(ROOT))]


def train(scaler: str, where: str, seed: int) -> None:
    """One run, in a fresh process (its run dir replaced)."""
    out = run_dir(scaler, where, seed)
    subprocess.run(["rm", "-rf", str(out)], check=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".log"), "w") as fh:
        subprocess.run([PYTHON, "-m", "minionsrl.cli", *command(scaler, where, seed)[1:]], cwd=ROOT, stdout=fh,
                       stderr=subprocess.STDOUT, check=True)
    log(f"{scaler} {where} seed {seed}: done")


def keep(seeds: list[int]) -> None:
    """The columns the section reads, of every run, into one CSV under docs/results/."""
    with open(KEPT, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["scaler", "placement", "seed", *COLUMNS])
        for scaler, where, seed in itertools.product(SCALERS, PLACEMENTS, seeds):
            for row in read_metrics(run_dir(scaler, where, seed)):
                writer.writerow([scaler, where, seed, *(row[c] for c in COLUMNS)])


def load() -> dict[tuple[str, str, int], list[dict[str, str]]]:
    """The kept rows by (scaler, placement, seed), in round order."""
    runs: dict[tuple[str, str, int], list[dict[str, str]]] = {}
    with open(KEPT, newline="") as fh:
        for row in csv.DictReader(fh):
            runs.setdefault((row["scaler"], row["placement"], int(row["seed"])), []).append(row)
    return runs


def column(rows: list[dict[str, str]], name: str) -> np.ndarray:
    return np.array([float(r[name]) for r in rows if r[name] not in ("", "nan")])


def run_length(ns: list[int]) -> str:
    """An actor-count trajectory, runs of one count written ``8×20``."""
    runs = [(n, len(list(group))) for n, group in itertools.groupby(ns)]
    return ", ".join(f"{n}×{count}" if count > 1 else str(n) for n, count in runs)


def noise_row(key: tuple[str, str, int], rows: list[dict[str, str]]) -> list:
    """One run's B_simple summary: median, 10/90% quantiles, % positive, medians of the first and last thirds."""
    g = column(rows, "gns")
    third = max(1, len(g) // 3)
    return [key[0], key[1], key[2], len(rows), float(np.median(g)), float(np.quantile(g, 0.1)),
            float(np.quantile(g, 0.9)), 100 * float((g > 0).mean()), float(np.median(g[:third])),
            float(np.median(g[-third:])), float(np.median(column(rows, "convexity_ratio")))]


def run_row(key: tuple[str, str, int], rows: list[dict[str, str]]) -> list:
    """One run's actors, return and bill."""
    ns = [int(r["n_actors"]) for r in rows]
    evals = column(rows, "eval_return_mean")
    return [key[0], key[1], key[2], float(np.mean(ns)), min(ns), max(ns), 100 * float(np.mean(np.array(ns) == 8)),
            float(evals[-1]), float(evals.max()), float(column(rows, "cost_serverless_usd").sum()),
            100 * float(column(rows, "detector_s").sum() / column(rows, "projected_round_s").sum()),
            run_length(ns)]


def trace(runs: dict, seed: int, every: int = 5) -> tuple[str, int]:
    """B_simple round by round in the ``critical`` pair of ``seed`` while both picked the same ``n`` (the same
    batches and weights: the placements differ only in where they measure), every ``every`` rounds."""
    before, after = runs[("critical", "before", seed)], runs[("critical", "after", seed)]
    pairs = list(zip(before, after, strict=False))
    same = next((i for i, (a, b) in enumerate(pairs) if a["n_actors"] != b["n_actors"]), len(pairs))
    rows = [[int(a["round"]), int(a["env_steps"]), int(a["n_actors"]), float(a["gns"]), float(b["gns"])]
            for a, b in pairs[:same] if (int(a["round"]) - 1) % every == 0]
    return markdown_table(["round", "env steps", "n", "B_simple before", "B_simple after"], rows,
                          digits=[0, 0, 0, 0, 0]), same


def plot(runs: dict, seeds: list[int]) -> None:
    """B_simple per round, before against after (symmetric log scale: the after values change sign)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SCALERS), figsize=(11, 3.8), sharey=True)
    for ax, scaler in zip(axes, SCALERS, strict=True):
        for where, colour in zip(PLACEMENTS, ("tab:blue", "tab:red"), strict=True):
            for seed in seeds:
                rows = runs[(scaler, where, seed)]
                ax.plot([int(r["round"]) for r in rows], [float(r["gns"]) for r in rows], color=colour,
                        alpha=0.7, lw=1, label=f"{where} the update" if seed == seeds[0] else None)
        ax.set_yscale("symlog", linthresh=100)
        ax.set_title(f"Hopper-v5, {scaler}")
        ax.set_xlabel("round")
        ax.axhline(0, color="grey", lw=0.5)
    axes[0].set_ylabel("B_simple (rows)")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def known_problem(batches: int = 64) -> str:
    """The estimator on least squares, whose B_noise is known (``least_squares_problem``): over ``batches``
    independent batches per setting, the ratio of the mean estimates of tr(Σ) and |G|², the median and spread
    of the per-batch ratio (what a scaler reads each round) and how often it is positive."""
    from minionsrl.learner.detectors import least_squares_problem, slice_noise_scale

    rows = []
    for noise_var, size, slices in itertools.product((3.0, 31.0, 255.0), (4096, 16384), (8, 64)):
        estimates, truth = [], 0.0
        for seed in range(batches):
            set_gradients, _, truth = least_squares_problem(size, 32, noise_var, seed)
            estimates.append(slice_noise_scale(set_gradients, size, slices, seed=seed))
        each = np.array([e.b_simple for e in estimates])
        pooled = np.mean([e.trace for e in estimates]) / np.mean([e.g2 for e in estimates])
        rows.append([truth, size, slices, pooled / truth, float(np.median(each)) / truth,
                     float(np.quantile(each, 0.1)) / truth, float(np.quantile(each, 0.9)) / truth,
                     100 * float((each > 0).mean())])
    return markdown_table(["true B_noise", "batch B", "slices k", "pooled / true", "median / true", "10% / true",
                           "90% / true", "% > 0"], rows, digits=[0, 0, 0, 3, 3, 2, 2, 0])


def section(runs: dict, seeds: list[int]) -> str:
    keys = [k for k in itertools.product(SCALERS, PLACEMENTS, seeds) if k in runs]
    noise = markdown_table(["scaler", "placement", "seed", "rounds", "median", "10%", "90%", "% > 0",
                            "median, first third", "median, last third", "convexity ratio (median)"],
                           [noise_row(k, runs[k]) for k in keys], digits=[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2])
    actors = markdown_table(["scaler", "placement", "seed", "mean n", "min n", "max n", "% rounds at n_min",
                             "final eval", "best eval", "serverless $", "detector % of projected", "n by round"],
                            [run_row(k, runs[k]) for k in keys], digits=[0, 0, 0, 1, 0, 0, 0, 0, 0, 4, 1, 0])
    pairs, same = trace(runs, seeds[0])
    cmd = " ".join(command("SCALER", "PLACEMENT", 0)).replace("--seed 0", "--seed SEED").replace(
        "hopper-SCALER-PLACEMENT-seed0", "hopper-SCALER-PLACEMENT-seedSEED")
    return f"""## The estimator on a problem whose noise scale is known

Least squares with Gaussian inputs in 32 dimensions and label noise σ² (`least_squares_problem` in
`minionsrl/learner/detectors.py`): `B_noise = 32·(1 + σ²) + 1` exactly, for σ² = 3, 31 and 255. The estimator is
the one the detectors run (`slice_noise_scale`: a random partition into `k` slices, per-slice gradients, the
unbiased estimates of tr(Σ) and |G|²), on 64 independent batches per row. *Pooled*: the ratio of the mean tr(Σ)
and mean |G|² estimates; *median*, *10%*, *90%*: of the per-batch ratio, i.e. of what a scaler reads in one round.
`tests/test_detectors.py::test_noise_scale_recovers_the_closed_form_of_least_squares` holds the `B_noise = 1,025`
rows to 10% (the pooled ratio, the median, and tr(Σ) and |G|² each), and would fail on a bias factor of that size.

{known_problem()}

## Measured: before against after the update (Hopper-v5, 300k steps)

Per run, B_simple over its rounds (in rows, i.e. samples; the scalers read it per round, `critical` smoothed):

{noise}

What the scalers did with it (`n by round`: the actor counts in order, `8×20` = 20 rounds of 8):

{actors}

Seed {seeds[0]}'s `critical` pair picked the same `n` for its first {same} rounds, so up to there both runs trained
on the same batches with the same weights (the detectors leave the model alone), and the two columns differ only
in where the noise scale was measured — every 5th round:

{pairs}

![B_simple per round, before and after the update](results/gns-placement-hopper.png)

Each run (`SCALER` in kungfu, critical; `PLACEMENT` in before, after; `SEED` in {", ".join(map(str, seeds))}):

```bash
{cmd}
```
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time")
    parser.add_argument("--reuse", action="store_true",
                        help="render the section from docs/results/gns-placement-hopper.csv (no runs)")
    args = parser.parse_args()
    started = time.time()
    if not args.reuse:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda k: train(*k), itertools.product(SCALERS, PLACEMENTS, args.seeds)))
        keep(args.seeds)
    else:  # the runs' own start where they are still here
        made = [d.stat().st_mtime for d in RUNS.glob("hopper-*/config.yaml")]
        started = min(made) if made else KEPT.stat().st_mtime
    runs = load()
    seeds = sorted({seed for _, _, seed in runs})
    plot(runs, seeds)
    body = section(runs, seeds)
    body = f"{body.strip()}\n\n{provenance(started, KEPT.stat().st_mtime)}\n"
    print(body)
    write_section("gns_placement", body, SCALING)


if __name__ == "__main__":
    main()
