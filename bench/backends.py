"""Benchmark 7: the backends side by side — per-round overhead and steps/s on Hopper-v5 at 8 and 32
actors, and ``minionsrl scale`` (1..64 concurrent invocations) on each backend.

Training: for each repetition, actor count and backend (interleaved, so all see the same background
load) a fresh ``minionsrl train`` process runs ``--rounds`` PPO rounds of T-step fragments with the
same seed and concurrency (one instance per core). Round 1 (cold starts) and the last round (it
evaluates) are left out; the rest give the medians. Overhead = sample_s − Σ(init_s + run_s) of the
round's functions / min(n, cores): the part of sampling that is not the functions' own work.
Scale: ``minionsrl scale --backend B --max-actors 64`` per backend, its table as written.

    .venv/bin/python bench/backends.py [--backends local ray lithops] [--actors 8 32] [--rounds 6] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from common import OUT, ROOT, append_jsonl, log, markdown_table, n_cores, provenance, write_section

ENV, SEED, TARGET_RAY_RATIO = "Hopper-v5", 1, 2.0
MINIONSRL = str(ROOT / ".venv" / "bin" / "minionsrl")


def train_once(backend: str, n: int, steps: int, rounds: int, cores: int) -> dict[str, Any]:
    """One training run in a fresh process; per-round figures from its metrics.csv and invocations.csv."""
    run_dir = OUT / "backends" / f"{backend}-{n}"
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run([MINIONSRL, "train", "--env-id", ENV, "--backend", backend, "--actors", str(n),
                    "--fragment-length", str(steps), "--max-rounds", str(rounds), "--seed", str(SEED),
                    "--max-concurrency", str(cores), "--eval-every", "0", "--eval-episodes", "1",
                    "--no-progress", "--no-tensorboard", "--run-dir", str(run_dir)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process_s = time.perf_counter() - t0
    from minionsrl.loop.metrics import read_metrics, read_rows

    metrics = read_metrics(run_dir)
    work: dict[int, float] = {}
    for row in read_rows(run_dir / "invocations.csv"):
        if row["kind"] == "train":
            work[int(row["round"])] = work.get(int(row["round"]), 0.0) + float(row["init_s"]) + float(row["run_s"])
    measured = metrics[1:-1]  # not the cold first round, not the evaluating last one
    per_round = [{"round_s": float(m["round_s"]), "sample_s": float(m["sample_s"]), "learn_s": float(m["learn_s"]),
                  "ideal_s": work[int(m["round"])] / min(n, cores)} for m in measured]
    med = {k: statistics.median(r[k] for r in per_round) for k in per_round[0]}
    med["overhead_s"] = statistics.median(r["sample_s"] - r["ideal_s"] for r in per_round)
    return {"backend": backend, "n": n, "steps": steps, "process_s": process_s,
            "cold_round_s": float(metrics[0]["round_s"]), "train_return_last": metrics[-1]["train_return_mean"],
            **med, "sps": n * steps / med["round_s"], "sample_sps": n * steps / med["sample_s"]}


def scale_once(backend: str, max_actors: int, steps: int, cores: int) -> list[dict[str, Any]]:
    out = OUT / "backends" / f"scale-{backend}"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([MINIONSRL, "scale", "--env-id", ENV, "--backend", backend, "--max-actors", str(max_actors),
                    "--steps", str(steps), "--repeats", "2", "--max-concurrency", str(cores), "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from minionsrl.loop.metrics import read_rows

    return [{k: float(v) for k, v in row.items()} for row in read_rows(out / "scale.csv")]


def render(train: list[dict[str, Any]], scale: dict[str, list[dict[str, Any]]], args: argparse.Namespace,
           cores: int, started: float) -> str:
    def pooled(backend: str, n: int, key: str) -> float:
        return statistics.median(r[key] for r in train if r["backend"] == backend and r["n"] == n)

    rows = []
    for n in args.actors:
        local_ov = pooled("local", n, "overhead_s") if "local" in args.backends else None
        for b in args.backends:
            ov = pooled(b, n, "overhead_s")
            rows.append([b, n, pooled(b, n, "round_s"), pooled(b, n, "sample_s"), pooled(b, n, "learn_s"), ov,
                         ov / pooled(b, n, "round_s"), ov / local_ov if local_ov else None,
                         pooled(b, n, "sample_sps"), pooled(b, n, "sps"), pooled(b, n, "cold_round_s")])
    table = markdown_table(["backend", "actors", "round s", "sample s", "learn s", "overhead s",
                            "overhead / round", "overhead / local's", "sampling steps/s", "steps/s (whole round)",
                            "cold first round s"], rows, digits=[0, 0, 2, 2, 2, 3, 3, 2, 0, 0, 2])
    ray_ratios = [r[7] for r in rows if r[0] == "ray" and r[7] is not None]
    verdict = ("not measured" if not ray_ratios else
               f"**{'met' if max(ray_ratios) <= TARGET_RAY_RATIO else 'not met'}** "
               f"({', '.join(f'{x:.2f}×' for x in ray_ratios)} of local's overhead at "
               f"{', '.join(map(str, args.actors))} actors)")
    scale_rows = []
    for b, res in scale.items():
        for r in res:
            scale_rows.append([b, int(r["actors"]), r["cold_round_s"], r["round_s"], r["ideal_s"], r["overhead_s"],
                               r["overhead_per_invocation_ms"]])
    scale_table = markdown_table(["backend", "concurrent invocations", "cold round s", "warm round s",
                                  "ideal s (work / cores)", "overhead s", "overhead per invocation ms"],
                                 scale_rows, digits=[0, 0, 2, 2, 2, 3, 1])
    return f"""## 7. Backends side by side: local, Ray, Lithops (Hopper-v5)

Every backend runs on this one machine with the same concurrency ({cores}, one instance per core):
`local` (worker processes), `ray` (a local Ray cluster started by the run; Ray tasks, policy in the
object store), `lithops` (Lithops' localhost backend, `version: 1`; policy and replies in its storage).
Training runs: `minionsrl train --env-id {ENV} --backend B --actors n --fragment-length {args.steps}
--max-rounds {args.rounds} --max-concurrency {cores}`, {args.reps} repetitions interleaved across
backends; medians over rounds 2..{args.rounds - 1} and repetitions (round 1 is cold, round {args.rounds}
evaluates). Overhead = sample s − Σ(init_s + run_s) / min(n, cores). Learning is identical on every
backend (same seed, same actor counts: `tests/test_backend_conformance.py` checks it), so "learn s"
differs only by noise.

{table}

Target: Ray's per-round overhead within {TARGET_RAY_RATIO:g}× of local's: {verdict}.

Lithops' localhost backend starts a new job process for every round (every invocation is cold, and
it polls storage for status), which is what its overhead measures; on a cloud backend the same code
pays the platform's invoke and storage latencies instead, which were not measured here (no cloud
account; see docs/DEPLOY.md).

### `minionsrl scale`: 1..{args.max_actors} concurrent invocations of {args.scale_steps} steps

`minionsrl scale --env-id {ENV} --backend B --max-actors {args.max_actors} --steps {args.scale_steps}
--repeats 2 --max-concurrency {cores}`: a fresh backend per count, one cold round then the median of
2 warm rounds; ideal = the functions' summed init + run time / min(k, cores).

{scale_table}

{provenance(started)}
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", nargs="+", default=["local", "ray", "lithops"])
    p.add_argument("--actors", type=int, nargs="+", default=[8, 32])
    p.add_argument("--steps", type=int, default=512, help="fragment length T of the training runs")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--max-actors", type=int, default=64)
    p.add_argument("--scale-steps", type=int, default=256)
    p.add_argument("--out", default=str(OUT / "backends.jsonl"))
    args = p.parse_args()
    started, cores, out = time.time(), n_cores(), Path(args.out)
    train = []
    for rep in range(args.reps):
        for n in args.actors:
            for b in args.backends:
                res = train_once(b, n, args.steps, args.rounds, cores)
                train.append({**res, "rep": rep})
                append_jsonl(out, {"kind": "train", **res, "rep": rep})
                log(f"{b} n={n}: round {res['round_s']:.2f} s, overhead {res['overhead_s']:.3f} s")
    scale = {}
    for b in args.backends:
        scale[b] = scale_once(b, args.max_actors, args.scale_steps, cores)
        append_jsonl(out, {"kind": "scale", "backend": b, "rows": json.dumps(scale[b])})
        log(f"scale {b} done")
    section = render(train, scale, args, cores, started)
    write_section("backends", section)
    print(section)


if __name__ == "__main__":
    main()
