"""Benchmark: evaluation beside the next round's functions (``--eval-overlap``, the default) vs after the update.

Each env is trained twice with the same seed, config and evaluation cadence, the two runs back to back (in
alternating order over ``--repeats``), and compared on: the evaluation returns (they must be equal: the same
seeds evaluate the same policy), the rounds' wall time on this machine, the projected cloud time (the learner's
part as measured plus the slowest function each round waited for, docs/COST.md) and the serverless dollars.

    .venv/bin/python bench/eval_overlap.py [--repeats 2]
"""

from __future__ import annotations

import time

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

from minionsrl.loop.metrics import read_metrics

RESULTS = OUT / "eval_overlap.jsonl"
CASES = {  # env: (rounds, eval_every, eval_episodes, actors)
    "CartPole-v1": (40, 5, 10, 8),
    "Hopper-v5": (20, 5, 10, 8),
}


def run(env_id: str, overlap: bool, repeat: int) -> dict:
    rounds, every, episodes, actors = CASES[env_id]
    run_dir = OUT / "eval_overlap" / f"{env_id.replace('/', '_')}-{overlap}-{repeat}"
    summary = run_minionsrl({"env_id": env_id, "seed": 1, "actors": actors, "max_rounds": rounds, "eval_every": every,
                             "eval_episodes": episodes, "eval_overlap": overlap, "progress": False,
                             "tensorboard": False, "run_dir": str(run_dir)})
    rows = read_metrics(run_dir)
    return {"env_id": env_id, "overlap": overlap, "repeat": repeat, "rounds": summary["rounds"],
            "wall_s": sum(float(r["round_s"]) for r in rows), "projected_s": summary["projected_cloud_s"],
            "usd": summary["cost_usd"]["serverless"],
            "evals": [float(r["eval_return_mean"]) for r in rows if r["eval_return_mean"]]}


def main() -> None:
    args = repeated_bench_args(__doc__, 2, RESULTS)
    started = time.time()
    for repeat in range(0 if args.reuse else args.repeats):
        for env_id in CASES:
            for overlap in ((True, False) if repeat % 2 == 0 else (False, True)):  # alternate who goes first
                record = run(env_id, overlap, repeat)
                append_jsonl(RESULTS, record)
                log(f"{env_id} overlap={overlap}: wall {record['wall_s']:.1f} s, "
                    f"projected {record['projected_s']:.1f} s")
    records = load_jsonl(RESULTS)
    if args.reuse:  # the measurements' own time span
        started, args.repeats = RESULTS.stat().st_mtime - sum(r["wall_s"] for r in records), len(records) // 4
    rows = []
    for env_id in CASES:
        got = {o: [r for r in records if r["env_id"] == env_id and r["overlap"] == o] for o in (True, False)}
        same = all(a["evals"] == b["evals"] for a, b in zip(got[True], got[False], strict=True))
        beside, after = ({k: mean([r[k] for r in got[o]]) for k in ("wall_s", "projected_s", "usd")}
                         for o in (True, False))
        rounds, every, episodes, actors = CASES[env_id]
        rows.append([env_id, f"{rounds} rounds, {actors} actors, {episodes} episodes every {every}",
                     after["wall_s"], beside["wall_s"], after["projected_s"], beside["projected_s"],
                     beside["projected_s"] / after["projected_s"], beside["usd"] / after["usd"],
                     "yes" if same else "**no**"])
    table = markdown_table(["env", "run", "wall s, after", "wall s, beside", "projected s, after",
                            "projected s, beside", "projected ratio", "serverless $ ratio",
                            "same evaluation returns"], rows, digits=[0, 0, 1, 1, 2, 2, 2, 2, 0])
    section = f"""## 10. Evaluation beside the next round's functions (`--eval-overlap`)

A round's evaluation uses the policy after its update, which is the policy the next round samples with, so its
functions run beside the next round's training functions and the round's row is written once they return
(DESIGN §1, step 5). "After" is `--no-eval-overlap`: the evaluation runs after the update, on the round's
critical path. Means over {args.repeats} pairs of runs, each pair back to back in alternating order. Wall time
is this machine's, where all functions share its cores, so on an idle machine overlap can only fill cores the
round leaves idle (the gap below was measured with the machine loaded by other work); projected time is what the
cloud would take (docs/COST.md), where the evaluation's functions run on instances of their own.

{table}
"""
    publish_section("eval_overlap", section, started, RESULTS)


if __name__ == "__main__":
    main()
