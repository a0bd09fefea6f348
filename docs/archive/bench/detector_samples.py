"""Benchmark: how many rows the curvature detector needs (``--detector-samples``), against what it costs.

One run of the comparison's settings (docs/results/hopper.yaml or halfcheetah.yaml: 16 actors x 512 steps, 64
minibatches) computes, on every round's batch after its update, the convexity ratio from random subsamples of
4,096 rows (the comparison's setting, twice: two draws), 2,048, 1,024 and 512 rows, and from 1,024 rows with a
looser Lanczos early stop, each timed. Reported per variant: the detector's seconds per round, its share of the
round's projected cloud time (docs/COST.md), the rank correlation of its ratio series with the 4,096-row one, and
how often Nitro (its published window and floor, n 8..64) would pick the same ``n`` from that series as from the
4,096-row one. The run itself is a fixed-16 run, so every variant sees the same batches.

    .venv/bin/python bench/detector_samples.py [--env hopper|halfcheetah] [--rounds 40] [--reuse]
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path

from common import OUT, append_jsonl, load_jsonl, log, markdown_table, mean, publish_section

from minionsrl.experiments.motivate import spearman

# (label, rows, draw, Lanczos tolerance): draw 1 is a second random subsample of the same size, the 4,096-row
# estimate's own noise; 1e-3 was the default tolerance until these measurements
VARIANTS = (("4,096", 4096, 0, 1e-3), ("4,096, another draw", 4096, 1, 1e-3), ("2,048", 2048, 0, 1e-3),
            ("1,024", 1024, 0, 1e-3), ("1,024, tol 1e-2", 1024, 0, 1e-2), ("512", 512, 0, 1e-3))
ENVS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5"}


def results_path(env: str) -> Path:
    return OUT / f"detector_samples-{env}.jsonl"


def measure(env: str, rounds: int) -> None:
    """Train, and after each round's update time the curvature on each subsample size; one JSON line a round."""
    from minionsrl.loop.requests import invocation_seed

    from minionsrl import config
    from minionsrl.build import make_trainer
    from minionsrl.function import wire
    from minionsrl.learner.detectors import DetectorPlan
    from minionsrl.learner.learners import Learned

    run_dir = OUT / f"detector_samples-{env}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run, not a resumed one
    base = config.build(config.load_yaml(f"docs/results/{env}.yaml"))
    cfg = base.replace(actors=16, scaler="fixed", num_minibatches=64, max_rounds=rounds, eval_every=0,
                       seed=1, progress=False, run_dir=str(run_dir))
    trainer = make_trainer(cfg)
    learner, learn = trainer.learner, trainer.learner.learn  # the run's own update (no detectors for fixed)

    def learn_and_measure(fragments: list, rng: object, plan: DetectorPlan | None = None) -> Learned:
        learned, record = learn(fragments, rng, plan), {"round": trainer.round}
        seed = invocation_seed(cfg.run.seed, trainer.round, 0, wire.SEED_STREAMS["detect"])
        for label, size, draw, tol in VARIANTS:  # after the update, where these were measured
            variant = DetectorPlan(frozenset({"curvature"}), "after", len(fragments), seed + draw, size,
                                   cfg.scaling.lanczos_iterations, tol)
            got, record[f"s_{label}"] = learner.detect(learned.batch, variant)
            record[f"ratio_{label}"] = got["convexity_ratio"]
        records.append(record)
        return learned

    records: list[dict] = []
    learner.learn = learn_and_measure
    trainer.run(on_round=lambda row: records[-1].update(projected_s=float(row["projected_round_s"])))
    for record in records:
        append_jsonl(results_path(env), record)


def nitro_choices(ratios: list[float]) -> list[int]:
    """The ``n`` Nitro (published settings, n 8..64, n_0 16) picks after each round, fed this ratio series."""
    from minionsrl.scaling.rules import NitroScaler

    nitro = NitroScaler(8, 64, 16)
    return [nitro.next_actors({"round": r, "n_actors": 16, "convexity_ratio": ratio})
            for r, ratio in enumerate(ratios, start=1)]


def table(records: list[dict]) -> str:
    """One env's table: a row per variant its records hold."""
    later = records[1:]  # round 1 compiles the programs
    reference = [r["ratio_4,096"] for r in records]
    picks = nitro_choices(reference)
    rows = []
    for label, *_ in VARIANTS:
        if f"ratio_{label}" not in records[0]:  # measured before this variant existed
            continue
        series = [r[f"ratio_{label}"] for r in records]
        same = sum(a == b for a, b in zip(nitro_choices(series), picks, strict=True))
        rows.append([label, mean([r[f"s_{label}"] for r in later]),
                     mean([r[f"s_{label}"] / r["projected_s"] for r in later]) * 100,
                     mean([a / b for a, b in zip(series, reference, strict=True)]),
                     spearman(series, reference), f"{same} of {len(records)}"])
    return markdown_table(["detector rows", "s per round (after round 1)", "% of projected round",
                           "ratio / 4,096-row ratio (mean)", "Spearman with 4,096 rows", "Nitro picks the same n"],
                          rows, digits=[0, 3, 1, 2, 2, 0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=sorted(ENVS), default="hopper")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--reuse", action="store_true", help="render the section from the results already measured")
    args = parser.parse_args()
    if args.reuse:
        started = results_path(args.env).stat().st_mtime
    else:
        started = time.time()
        results_path(args.env).unlink(missing_ok=True)
        measure(args.env, args.rounds)
    tables = []
    for env, env_id in ENVS.items():
        if results_path(env).exists():
            records = load_jsonl(results_path(env))
            log(f"{env}: {len(records)} rounds measured")
            when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(results_path(env).stat().st_mtime))
            tables.append(f"**{env_id}** ({len(records)} rounds of 16 x 512 steps, measured {when} UTC)\n\n"
                          f"{table(records)}")
    body = "\n\n".join(tables)
    section = f"""## 11. The curvature detector's subsample (`--detector-samples`)

Nitro reads the convexity ratio every round: Lanczos (early stop at `--lanczos-tol 1e-3`) on a random subsample
of the round's batch, each iteration one Hessian-vector product over it, so its cost is linear in the rows. One
fixed-16 run per env (the comparison's settings) computed the ratio on each round's batch from 4,096 rows (the
comparison's setting; twice, from two random draws, which measures the estimate's own noise), 2,048, 1,024 and
512 rows, and from 1,024 rows with a ten times looser early stop (`--lanczos-tol 1e-2`). The share is of the
round's projected cloud time (docs/COST.md), which is what the issue's 10% target is judged on; the last column
feeds each series to Nitro's rule (published window and floor) and counts the rounds whose `n` matches the first
4,096-row one.

{body}

On HalfCheetah the looser early stop takes a quarter less time than 1e-3 and agrees with the 4,096-row ratio as
well as 1e-3 does (on the 2026-11-24 run: Spearman 0.57 against 0.58, Nitro's `n` the same in 16 against 17 of 40
rounds; a second 4,096-row draw: 0.72 and 22); 512 rows agree clearly less (0.35). So the defaults are now
1,024 rows and `--lanczos-tol 1e-2` (docs/archive/RESULTS-2026-11.md measures them in Nitro's own runs). The
Hopper table predates the 512-row and 1e-2 rows.
"""
    publish_section("detector_samples", section, started, results_path(args.env))


if __name__ == "__main__":
    main()
