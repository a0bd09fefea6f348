"""Does a run's projected round match ``minionsrl plan``'s row for the deployment it is priced as (issue 55)?

Per env (two a user would write, ``bench/user_envs.py``: one that burns CPU, one that waits): ``plan``'s probe and
forecast, then real ``--backend local`` runs at fixed counts; each run's ``summary.json`` names its deployment
(``priced_as``), the plan row of that name and count is found, and the run's warm rounds (the median: not its first,
nor its last, nor one that started instances) as the ledger billed them — projected seconds and serverless dollars
a round — are set against the row. Goal: within ±10% in both.

    .venv/bin/python bench/priced_as.py [--envs reach,slow-pendulum] [--rounds N]

Results are kept per env in ``bench/out/priced_as/ENV.json`` (an env done is not run again: delete its file to
redo it); the table goes to ``docs/results/priced-as.md`` after each env.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT as REPO
from common import kept

from minionsrl.config import TrainConfig

sys.path.insert(0, str(REPO))  # the envs are bench.user_envs:…
from minionsrl.experiments.plan import forecast, probe

BATCH = 2048  # samples a round at every count: more actors buy a shorter round
ENVS = {  # name -> config fields
    "reach": {"env_id": "bench.user_envs:Reach"},
    "slow-pendulum": {"env_id": "bench.user_envs:SlowPendulum", "env_kwargs": {"wait_ms": 10.0}},
}
COUNTS = (8, 32)
OUT = REPO / "bench" / "out" / "priced_as"
DOC = REPO / "docs" / "results" / "priced-as.md"
GOAL = 0.10


def measured(cfg: TrainConfig, n: int, rounds: int, folder: Path) -> dict:
    """A real run at ``n`` actors: its deployment and the median of its warm rounds' seconds and dollars."""
    from minionsrl.build import make_trainer
    from minionsrl.experiments.training import run_trainer

    run_dir = folder / f"n{n}"
    run = cfg.replace(run_dir=str(run_dir), scaler="fixed", actors=n, max_rounds=rounds, eval_every=0,
                      eval_episodes=1, eval_max_steps=1, progress=False, tensorboard=False)
    summary = run_trainer(make_trainer(run), plots=False)
    with open(run_dir / "metrics.csv") as fh:
        warm = [r for r in list(csv.DictReader(fh))[1:-1] if not float(r["cold_starts"] or 0)]
    if not warm:
        raise SystemExit(f"priced_as: the run at {n} actors had no warm round to compare; raise --rounds")
    return {"priced_as": summary["priced_as"], "warm_rounds": len(warm),
            **{name: statistics.median(float(r[column]) for r in warm)
               for name, column in (("round_s", "projected_round_s"), ("usd", "cost_serverless_usd"))}}


def run_env(name: str, rounds: int) -> dict:
    from minionsrl.prepare import prepare_config

    cfg, _ = prepare_config(TrainConfig(**ENVS[name], seed=1, train_batch_size=BATCH, total_timesteps=200_000))
    t0 = time.perf_counter()
    rows = forecast(cfg, probe(cfg), counts=list(COUNTS))
    runs = []
    with tempfile.TemporaryDirectory(prefix=f"minionsrl-priced-as-{name}-") as tmp:
        for n in COUNTS:
            got = measured(cfg, n, rounds, Path(tmp))
            row = next(r for r in rows if r.n == n and r.priced_as == got["priced_as"])  # the run's deployment
            direct = next(r for r in rows if r.n == n and r.platform == "lambda-direct")
            runs.append({"n": n, **got, "forecast_round_s": row.round_s, "forecast_usd": row.usd_per_round,
                         "round_error": row.round_s / got["round_s"] - 1,
                         "usd_error": row.usd_per_round / got["usd"] - 1, "what_if_direct_s": direct.round_s})
    return {"env": name, "fields": ENVS[name], "runs": runs, "seconds": time.perf_counter() - t0}


def table(results: list[dict]) -> str:
    lines = ["| env | n | priced as | plan round (s) | run's round (s) | error | plan $ a round | run's $ a round | "
             "error | what-if: direct invoke (s) |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    worst = 0.0
    for res in results:
        for r in res["runs"]:
            worst = max(worst, abs(r["round_error"]), abs(r["usd_error"]))
            lines.append(f"| {res['env']} | {r['n']} | {r['priced_as']} | {r['forecast_round_s']:.4g} | "
                         f"{r['round_s']:.4g} | {r['round_error']:+.1%} | {r['forecast_usd']:.3g} | {r['usd']:.3g} | "
                         f"{r['usd_error']:+.1%} | {r['what_if_direct_s']:.4g} |")
    verdict = "met" if worst <= GOAL else "missed"
    return "\n".join(lines) + f"\n\nLargest error {worst:.1%}: the ±{GOAL:.0%} goal {verdict}.\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=",".join(ENVS))
    parser.add_argument("--rounds", type=int, default=8, help="rounds a run")
    args = parser.parse_args()
    results = []
    for name in args.envs.split(","):
        results.append(kept(OUT / f"{name}.json", lambda name=name: run_env(name, args.rounds)))
        DOC.write_text(
            "# A run and its forecast price the same deployment\n\nPer env (`bench/user_envs.py`: `reach` burns about "
            "1 ms of CPU a step, `slow-pendulum` waits 10 ms a step), `minionsrl plan`'s probe and its row for the "
            f"deployment each `--backend local` run names (`priced_as`), at {BATCH:,} samples a round, against that "
            "run's warm rounds (the median) as the ledger billed them. The last column is the same round invoked "
            "directly (the papers' path, which no backend ships), as a what-if.\n\n" + table(results)
            + "\nReproduce: `.venv/bin/python bench/priced_as.py` (results kept in bench/out/priced_as/; delete an "
            "env's file to run it again).\n")
        print(table(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
