"""Do ``minionsrl plan``'s forecasts hold (issue 42)? Per env: the probe, then real runs at the recommended ``n``
(Lambda's knee) and at two other counts; each run's warm rounds (not its first, which starts instances and
compiles, nor its last, which evaluates, nor one that started instances) billed by the ledger — projected seconds
and serverless dollars a round — against the forecast for the same ``n`` with the same profile (the local
backend's: a Lambda Invoke).

    .venv/bin/python docs/archive/bench/forecast.py [--envs cartpole,hopper,...] [--rounds N] [--out docs/results/forecast.md]

Results are kept per env in ``bench/out/forecast/ENV.json`` (an env done is not run again: delete its file to
redo it), and the table is written after each env. Goal: every error within ±15%. Each env's plan, as ``minionsrl
plan`` prints it for the probe kept there (1 to 256 actors, the env's preset step budget), goes to
``docs/results/plan/ENV.md`` with its time-vs-dollars frontier ``ENV.png``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # docs/archive/bench/ -> the repository
sys.path.insert(0, str(REPO))
from minionsrl.config import TrainConfig  # noqa: E402
from minionsrl.experiments.plan import Probe, forecast, frontier_plot, picks, probe, report  # noqa: E402

ENVS = {  # name -> (config fields, other counts run beside the knee, rounds a run)
    "cartpole": ({"env_id": "CartPole-v1"}, (8, 32), 5),
    "hopper": ({"env_id": "Hopper-v5"}, (8, 32), 5),
    "halfcheetah": ({"env_id": "HalfCheetah-v5"}, (8, 32), 5),
    "latency-5ms": ({"env_id": "Hopper-v5", "env_step_latency_ms": 5.0}, (8, 32), 5),
    # the local backend starts instances for five rounds or so as it learns how much 64 functions of a 20 ms step
    # wait, and a round that starts instances is not a warm round
    "latency-20ms": ({"env_id": "Hopper-v5", "env_step_latency_ms": 20.0}, (8, 64), 10),
    "pong": ({"env_id": "ALE/Pong-v5"}, (4, 8), 10),
}
CAP = 64  # the counts this 2-core machine can run in a few minutes an env
OUT = REPO / "bench" / "out" / "forecast"
PLANS = REPO / "docs" / "results" / "plan"


def measured(cfg: TrainConfig, n: int, rounds: int, folder: Path) -> dict[str, float]:
    """A real run at ``n`` actors: the median of its warm rounds' projected seconds and serverless dollars."""
    from minionsrl.build import make_trainer
    from minionsrl.experiments.training import run_trainer

    run_dir = folder / f"n{n}"
    run = cfg.replace(run_dir=str(run_dir), scaler="fixed", actors=n, max_rounds=rounds, eval_every=0,
                      eval_episodes=1, eval_max_steps=1, progress=False, tensorboard=False)
    run_trainer(make_trainer(run), plots=False)
    with open(run_dir / "metrics.csv") as fh:
        # not its first round nor its last, nor one that started instances (the local backend may start more as it
        # learns how much its functions wait): the forecast is of a warm round
        warm = [r for r in list(csv.DictReader(fh))[1:-1] if not float(r["cold_starts"] or 0)]
    if not warm:
        raise SystemExit(f"forecast: the run at {n} actors had no warm round to compare; raise --rounds")
    return {name: statistics.median(float(r[column]) for r in warm)
            for name, column in (("round_s", "projected_round_s"), ("usd", "cost_serverless_usd"))}


def run_env(name: str, rounds: int | None) -> dict:
    fields, others, env_rounds = ENVS[name]
    rounds = rounds or env_rounds
    from minionsrl.build import prepare_config

    cfg, _ = prepare_config(TrainConfig(**fields, seed=1, total_timesteps=1_000_000))
    t0 = time.perf_counter()
    p = probe(cfg)
    plan_rows = forecast(cfg, p, CAP)
    knee = picks(plan_rows, "lambda").knee
    counts = sorted({knee, *others})
    predicted = {r.n: r for r in forecast(cfg, p, platforms={"billed": cfg.functions.backend}, counts=counts)}
    runs = []
    with tempfile.TemporaryDirectory(prefix=f"minionsrl-forecast-{name}-") as tmp:
        for n in counts:
            got = measured(cfg, n, rounds, Path(tmp))
            f = predicted[n]
            runs.append({"n": n, "recommended": n == knee, "forecast_round_s": f.round_s, "round_s": got["round_s"],
                         "round_error": f.round_s / got["round_s"] - 1, "forecast_usd": f.usd_per_round,
                         "usd": got["usd"], "usd_error": f.usd_per_round / got["usd"] - 1})
    return {"env": name, "fields": fields, "probe": asdict(p), "knee": knee, "runs": runs,
            "seconds": time.perf_counter() - t0}


def _probe(kept: dict) -> Probe:
    """A kept probe, its lists as the tuples :class:`Probe` holds."""
    return Probe(**{**kept, **{k: tuple(kept[k]) for k in ("sample_quantiles", "learner_batches", "learner_seconds")}})


def write_plan(res: dict) -> None:
    """The env's plan from its kept probe, for its preset's step budget: ``docs/results/plan/ENV.md`` and ``.png``."""
    from minionsrl.build import prepare_config

    cfg, _ = prepare_config(TrainConfig(**res["fields"], seed=1))
    p = _probe(res["probe"])
    rows = forecast(cfg, p)
    PLANS.mkdir(parents=True, exist_ok=True)
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in res["fields"].items())
    (PLANS / f"{res['env']}.md").write_text(
        report(cfg, p, rows) + f"\nThe probe kept by `docs/archive/bench/forecast.py` (`minionsrl plan {flags}` probes afresh).\n")
    frontier_plot(rows, PLANS / f"{res['env']}.png", f"plan: {res['env']}")


def table(results: list[dict]) -> str:
    lines = ["| env | n | forecast round (s) | ledger round (s) | error | forecast $ a round | ledger $ a round | "
             "error |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    worst = 0.0
    for res in results:
        for r in res["runs"]:
            worst = max(worst, abs(r["round_error"]), abs(r["usd_error"]))
            star = " (knee)" if r["recommended"] else ""
            lines.append(f"| {res['env']} | {r['n']}{star} | {r['forecast_round_s']:.4g} | {r['round_s']:.4g} | "
                         f"{r['round_error']:+.1%} | {r['forecast_usd']:.3g} | {r['usd']:.3g} | "
                         f"{r['usd_error']:+.1%} |")
    verdict = "met" if worst <= 0.15 else "missed"
    return "\n".join(lines) + f"\n\nLargest error {worst:.1%}: the ±15% goal {verdict} on these envs.\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", default=",".join(ENVS))
    parser.add_argument("--rounds", type=int, help="rounds a run (default: the env's, 5 or 10)")
    parser.add_argument("--out", default=str(REPO / "docs" / "results" / "forecast.md"))
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    results = []
    for name in args.envs.split(","):
        path = OUT / f"{name}.json"
        if not path.exists():
            print(f"{name}: probing and running …", flush=True)
            path.write_text(json.dumps(run_env(name, args.rounds), indent=1))
        results.append(json.loads(path.read_text()))
        write_plan(results[-1])
        text = ("# Do plan's forecasts hold?\n\nPer env, `minionsrl plan`'s probe, then real runs at Lambda's knee and "
                "two other counts on this machine's local backend; each run's warm rounds (the median, not its first "
                "nor its last) as the ledger billed them, against the forecast for the same count and profile.\n\n"
                + table(results) + "\nEach env's plan (every count and platform, the picks, the verdict): "
                + ", ".join(f"[{r['env']}](plan/{r['env']}.md)" for r in results)
                + ".\n\nReproduce: `.venv/bin/python docs/archive/bench/forecast.py` (results kept in "
                "bench/out/forecast/; delete an env's file to run it again).\n")
        Path(args.out).write_text(text)
        print(table(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
