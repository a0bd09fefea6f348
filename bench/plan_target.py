"""Does ``minionsrl plan --target-return`` forecast the time and dollars to a target (issue 55)? Hopper-v5 to
2,500 at 4,096 samples a round: plan's forecast per recorded count (its rounds from ``minionsrl/data/targets.yaml``
times this machine's probe), against 5 seeds run to the target on today's code (``minionsrl compare --until
target``, each run's projected seconds and dollars to its first evaluation there, priced as the same deployment).
Goal: the forecast mean within the seeds' own spread (their least to most) in both.

    .venv/bin/python bench/plan_target.py [--counts 8,64] [--seeds 5]

The runs are kept under ``bench/out/plan_target/`` (compare reuses finished ones, so the script resumes); the table
goes to ``docs/results/plan-target.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from minionsrl import cli  # noqa: E402
from minionsrl.config import TrainConfig  # noqa: E402
from minionsrl.experiments.plan import recorded_steps, run_plan  # noqa: E402

OUT = REPO / "bench" / "out" / "plan_target"
DOC = REPO / "docs" / "results" / "plan-target.md"
JOB = {"env_id": "Hopper-v5", "train_batch_size": 4096, "total_timesteps": 1_000_000}
TARGET = 2500.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default="8,64")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    OUT.mkdir(parents=True, exist_ok=True)
    plan_json = OUT / "plan.json"
    if not plan_json.exists():
        run_plan(TrainConfig(**JOB, target_return=TARGET, seed=1), cap=128, out_dir=OUT / "plan", json_path=plan_json)
    forecast = {(g["n"], g["platform"]): g for g in json.loads(plan_json.read_text())["to_target"]}
    rc = cli.main(["compare", "--env-id", JOB["env_id"], "--train-batch-size", str(JOB["train_batch_size"]),
                   "--total-timesteps", str(JOB["total_timesteps"]), "--time-budget-s", "1000", "--no-progress",
                   "--no-tensorboard",
                   "--scalers", ",".join(f"fixed:{n}" for n in counts), "--seeds", str(args.seeds),
                   "--until", "target", "--target", str(TARGET), "--out", str(OUT / "runs")])
    if rc:
        return rc
    with open(OUT / "runs" / "compare.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    lines = ["| n | priced as | rounds to it, seeds 1–5: run / record | forecast time | measured time: mean "
             "(least–most) | forecast $ | measured $: mean (least–most) | within the spread |",
             "|---:|---|---|---:|---:|---:|---:|---|"]
    record = recorded_steps(TrainConfig(**JOB), TARGET) or {}
    for n in counts:
        mine = [r for r in rows if r["arm"] == f"fixed-{n}" and r["usd_to_target"]]
        g = forecast[n, "lambda"]
        t = [float(r["projected_time_to_target_s"]) for r in mine]
        d = [float(r["usd_to_target"]) for r in mine]
        inside = min(t) <= g["seconds"][0] <= max(t) and min(d) <= g["usd"][0] <= max(d)
        ran = [r["rounds_to_target"] or "–" for r in sorted(rows, key=lambda r: int(r["seed"]))
               if r["arm"] == f"fixed-{n}"]
        kept_rounds = [str(s // JOB["train_batch_size"]) if s else "–" for s in record.get(n, [])]
        lines.append(f"| {n} | {mine[0]['priced_as']} | {', '.join(ran)} / {', '.join(kept_rounds)} | "
                     f"{g['seconds'][0]:.1f} s | {statistics.fmean(t):.1f} s ({min(t):.1f}–{max(t):.1f}) | "
                     f"${g['usd'][0]:.4f} | ${statistics.fmean(d):.4f} (${min(d):.4f}–${max(d):.4f}) | "
                     f"{'yes' if inside else 'no'} |")
    table = "\n".join(lines)
    DOC.write_text("# plan's forecast to a target against runs to it\n\n`minionsrl plan --env-id Hopper-v5 "
                   "--train-batch-size 4096 --target-return 2500`: each recorded count's rounds to 2,500 (5 seeds, "
                   "`minionsrl/data/targets.yaml`) times this machine's probe, against 5 seeds run to 2,500 on today's "
                   "code (projected seconds and dollars to the first evaluation there, on the deployment named). The "
                   "runs learned otherwise than the recorded ones (this machine's floating point is not theirs), so "
                   "the rounds are an independent draw, not a replay.\n\n"
                   + table + "\n\nReproduce: `.venv/bin/python bench/plan_target.py` (runs kept in "
                   "bench/out/plan_target/).\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
