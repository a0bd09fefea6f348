"""Benchmark: the projected cloud round does not move with this machine's load.

The same run (Hopper-v5, 16 actors, seed 1, 30 rounds) twice, back to back: once as the machine is, once with two
busy loops beside it (one per core), in alternating order over ``--repeats``. Each run reports its projected cloud
seconds and serverless dollars as the ledger computes them now (own-instance times: wall time less the wait for a
CPU here, ``minionsrl/function/clock.py``), and as the earlier ledger computed them from the same rows (wall times:
the learner's part as measured, each function's init and run as measured), so the two methods are compared on the
same runs. The wall time is the machine's.

    .venv/bin/python bench/load_independence.py [--repeats 1] [--rounds 30]
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common import (
    OUT,
    append_jsonl,
    load_jsonl,
    log,
    markdown_table,
    mean,
    publish_section,
    repeated_bench_args,
    run_minionsrl,
)

from minionsrl.cost import CostLedger, load_prices, overhead_of
from minionsrl.loop.metrics import read_metrics

RESULTS = OUT / "load_independence.jsonl"
BUSY = "while True: pass"


def wall_based(run_dir: Path) -> tuple[float, float]:
    """(projected seconds, serverless dollars) as the earlier ledger computed them: the learner's part as measured
    on this machine (round − sampling), plus the slowest training function with its measured warm init (or the
    modelled cold start) and measured run; functions billed for their measured init and run."""
    ledger = CostLedger(load_prices(), cold_start_s=1.0)
    with open(run_dir / "invocations.csv") as f:
        invocations = list(csv.DictReader(f))
    seconds = dollars = 0.0
    for row in read_metrics(run_dir):
        mine = [r for r in invocations if r["round"] == row["round"]]
        slowest = max(((1.0 if r["cold"] == "True" else float(r["init_s"])) + float(r["run_s"])
                       for r in mine if r["kind"] == "train" and r["status"] == "ok"), default=0.0)
        projected = float(row["round_s"]) - float(row["sample_s"]) + slowest
        seconds += projected
        dollars += ledger.learner_usd_s * projected + sum(
            ledger.pricing.invocation_usd(float(r["init_s"]), float(r["run_s"]), ledger.memory_mb) for r in mine)
    return seconds, dollars


def run(loaded: bool, repeat: int, rounds: int) -> dict:
    run_dir = OUT / "load_independence" / f"{'loaded' if loaded else 'as-is'}-{repeat}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run each time
    load_before = os.getloadavg()[0]
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)] if loaded else []
    try:
        summary = run_minionsrl({"env_id": "Hopper-v5", "seed": 1, "actors": 16, "max_rounds": rounds,
                                 "eval_every": 10, "progress": False, "tensorboard": False, "run_dir": str(run_dir)})
    finally:
        for p in busy:
            p.kill()
            p.wait()
    rows = read_metrics(run_dir)
    old_s, old_usd = wall_based(run_dir)
    return {"loaded": loaded, "repeat": repeat, "rounds": summary["rounds"], "load_avg_before": load_before,
            "wall_s": sum(float(r["round_s"]) for r in rows), "projected_s": summary["projected_cloud_s"],
            "usd": summary["cost_usd"]["serverless"], "old_projected_s": old_s, "old_usd": old_usd,
            "learner_s": sum(float(r["projected_learner_s"]) for r in rows),
            "learner_wall_s": sum(float(r["round_s"]) - float(r["sample_s"]) for r in rows)}


def main() -> None:
    args = repeated_bench_args(__doc__, 1, RESULTS, lambda p: p.add_argument("--rounds", type=int, default=30))
    started = time.time()
    if not args.reuse:
        # a short run first, not recorded: it fills JAX's compilation cache, so no measured run pays the compile
        warm_up = OUT / "load_independence" / "warm-up"
        shutil.rmtree(warm_up, ignore_errors=True)
        run_minionsrl({"env_id": "Hopper-v5", "seed": 1, "actors": 16, "max_rounds": 2, "eval_every": 1,
                       "progress": False, "tensorboard": False, "run_dir": str(warm_up)})
        for repeat in range(args.repeats):
            for loaded in ((False, True) if repeat % 2 == 0 else (True, False)):  # alternate who goes first
                record = run(loaded, repeat, args.rounds)
                append_jsonl(RESULTS, record)
                log(f"loaded={loaded}: wall {record['wall_s']:.1f} s, projected {record['projected_s']:.2f} s "
                    f"(wall-based {record['old_projected_s']:.2f} s), ${record['usd']:.6f}")
    records = load_jsonl(RESULTS)
    quiet, busy = ({k: mean([r[k] for r in records if r["loaded"] == b])
                    for k in ("wall_s", "projected_s", "usd", "old_projected_s", "old_usd", "learner_s",
                              "learner_wall_s", "load_avg_before")} for b in (False, True))
    def spread(key: str, loaded: bool, scale: float) -> str:
        values = [r[key] * scale for r in records if r["loaded"] == loaded]
        return f"{min(values):.3f}–{max(values):.3f}"

    scales = {"usd": 1e3, "old_usd": 1e3}  # dollars shown in thousandths
    rows = [[name, quiet[k] * scales.get(k, 1), busy[k] * scales.get(k, 1), busy[k] / quiet[k],
             spread(k, False, scales.get(k, 1)), spread(k, True, scales.get(k, 1))] for name, k in (
        ("wall time of the rounds (s)", "wall_s"),
        ("projected cloud time (s): own-instance (now)", "projected_s"),
        ("projected cloud time (s): wall-based (before)", "old_projected_s"),
        ("serverless m$: own-instance (now)", "usd"),
        ("serverless m$: wall-based (before)", "old_usd"),
        ("learner's part (s): own-instance", "learner_s"),
        ("learner's part (s): wall", "learner_wall_s"))]
    table = markdown_table(["measure", "as the machine is (mean)", "two busy loops beside (mean)", "ratio",
                            "as is, runs", "busy, runs"], rows, digits=[0, 3, 3, 3, 0, 0])
    prices = load_prices()
    profiles = markdown_table(
        ["backend", "overhead, 8 slots (s)", "overhead, 32 slots (s)", "source"],
        [[b, *(overhead_of(prices, b).stage_s([0.0] * slots) for slots in (8, 32)), p["source"]]
         for b, p in prices["overheads"].items()], digits=[0, 3, 3, 0])
    body = f"""## 13. The projected round does not depend on this machine's load

The same run (Hopper-v5, 16 actors, seed 1, {records[0]['rounds']} rounds, evaluation every 10) as the
machine is (load average {quiet['load_avg_before']:.2f} before it; other work may share the machine) and with two
busy Python loops beside it (one per core), back to back, {len(records) // 2} pair(s). "Own-instance" is the
ledger now: each function's and the learner's wall time less the time it spent waiting for a CPU here
(`/proc/thread-self/schedstat`), the cold start modelled, plus the platform's invoke/collect overhead
(docs/COST.md). "Wall-based" recomputes the same runs the earlier way (the learner's part and the functions' init
and run as measured), which moved 1.26x (seconds) and 1.36x (dollars) between a quiet and a loaded machine in
issue 20's measurement. Target: own-instance within ±5% (ratio 0.95-1.05). A short run before them, not recorded,
fills JAX's compilation cache. m$: thousandths of a dollar. "Runs": the least and the most of the single runs.

{table}

What remains between single runs is the work's own CPU time, which this shared machine does not hold still: the
slowest of a round's 16 functions is a tail (a function that lost its caches to a busy neighbour runs longer on
the CPU too), and two runs on the same load differ by a few percent as well.

The platform overhead each projected round adds (`overheads` in `minionsrl/data/prices.yaml`: dispatch of the
slots and collection of their results, no function time); what this machine measures for the same backends is in
§7 (local 0.022 s and 0.044 s, Ray 0.031 s and 0.072 s, Lithops on its localhost backend 0.90 s and 2.94 s, at 8
and 32 actors: queueing on two cores included), beside it in docs/COST.md.

{profiles}
"""
    publish_section("load_independence", body, started, RESULTS)


if __name__ == "__main__":
    main()
