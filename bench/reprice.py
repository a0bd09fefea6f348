"""Re-price runs billed before 2026-12-02 on the shipped deployment (issue 55).

Until then a ``--backend local`` run's projected seconds and serverless dollars priced a Lambda invoked directly
(``overheads.direct`` in ``prices.yaml``), a path no backend of this package makes; they now price Lambda through
Lithops over S3 (``overheads.lithops``), what ``--backend lithops`` runs. The published comparisons' compare.csv
rows hold whole-run totals, so each is re-priced by the difference of the two profiles over its rounds, from the
catalogue (no timing changes: the functions' own seconds are the same on either path):

* seconds: every round's wave pays ``ceil(n / parallel_invokes)`` Lithops calls and a collection instead of direct
  invokes (and a run's last round one more stage, its evaluation after the update);
* dollars: the learner host over those seconds, and the storage requests a direct invoke does not make — PUTs and
  GETs per invocation (``n`` a round, and ``min(eval_episodes, n)`` per evaluation, every ``eval_every`` rounds),
  a PUT per round, and LISTs per second the learner waits (the round less its learner part, ``learner_s``).

A run's rounds to its target are its ``rounds_to_target`` (where the table predates that column: its time to the
target over its mean seconds a round). ``n`` is the run's mean actor count. Checked against runs billed both ways
(``--check``: the same seed on each deployment, learning bit for bit alike): ``docs/results/reprice.md``.

    .venv/bin/python bench/reprice.py --check      # run the check and write docs/results/reprice.md
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from minionsrl.cost import load_prices  # noqa: E402

EVAL_EVERY, EVAL_EPISODES = 10, 10  # the published comparisons' evaluations
# the learner's own seconds a round, per env (the medians of 2026-11-28's comparison, GOALS.md): what the learner
# waits for functions is the round less it (LIST requests per second of waiting)
LEARNER_S = {"hopper": 0.13, "halfcheetah": 0.15, "latency": 0.15}
Row = dict[str, str]


def delta(rounds: float, actors: float, evaluations: float, seconds: float, learner_s: float,
          last_stage: bool) -> tuple[float, float]:
    """(seconds, dollars) that ``rounds`` rounds of ``actors`` functions, billed ``seconds`` on the direct path,
    add on Lithops (see the module's docstring)."""
    prices = load_prices()
    direct, lithops = prices.overheads["direct"], prices.overheads["lithops"]
    stage = (math.ceil(actors / lithops.parallel_invokes) * lithops.invoke_s + lithops.collect_s
             - math.ceil(actors / direct.parallel_invokes) * direct.invoke_s - direct.collect_s)
    more_s = rounds * stage + (stage if last_stage else 0.0)
    invocations = rounds * actors + evaluations * min(EVAL_EPISODES, actors)
    waited = max(seconds + more_s - rounds * learner_s, 0.0)
    requests = prices.usd_per_request
    storage = (requests["put"] * (lithops.puts_per_invocation * invocations + lithops.puts_per_round * rounds)
               + requests["get"] * lithops.gets_per_invocation * invocations
               + requests["list"] * lithops.lists_per_s * waited)
    return more_s, prices.cpu_learner_host.usd_per_hour / 3600 * more_s + storage


def on_lithops(row: Row, env: str) -> Row:
    """A compare.csv row of a local run billed on the direct path (one without ``priced_as``: older than it),
    re-priced on Lithops; other rows as they are."""
    if row["backend"] != "local" or row.get("priced_as"):
        return row
    actors, learner = float(row["mean_actors"]), LEARNER_S[env]
    rounds = int(row["rounds"])
    s, usd = delta(rounds, actors, rounds // EVAL_EVERY + 1, float(row["projected_cloud_s"]), learner, True)
    out = {**row, "projected_cloud_s": str(float(row["projected_cloud_s"]) + s),
           "cost_serverless_usd": str(float(row["cost_serverless_usd"]) + usd)}
    if row["cost_usd"] == row["cost_serverless_usd"]:
        out["cost_usd"] = out["cost_serverless_usd"]
    if row.get("projected_time_to_target_s"):
        to = float(row["projected_time_to_target_s"])
        reached = (int(row["rounds_to_target"]) if row.get("rounds_to_target")
                   else round(to / (float(row["projected_cloud_s"]) / rounds)))
        s, usd = delta(reached, actors, reached // EVAL_EVERY, to, learner, False)
        out["projected_time_to_target_s"], out["usd_to_target"] = str(to + s), str(float(row["usd_to_target"]) + usd)
    return out


def check() -> str:
    """Hopper runs billed on each deployment (the same seed: the same learning), the direct one re-priced here
    against the one the ledger billed on Lithops."""
    from minionsrl.build import make_trainer
    from minionsrl.config import TrainConfig
    from minionsrl.experiments.training import run_trainer
    from minionsrl.loop.metrics import read_metrics

    lines = ["| run | rounds | ledger on Lithops: s | re-priced from direct: s | error | ledger on Lithops: $ | "
             "re-priced from direct: $ | error |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory(prefix="minionsrl-reprice-") as tmp:
        for n in (8, 64):
            got = {}
            for deployment in ("direct", "lithops"):
                cfg = TrainConfig(env_id="Hopper-v5", seed=1, actors=n, train_batch_size=4096, max_rounds=30,
                                  eval_every=EVAL_EVERY, eval_episodes=EVAL_EPISODES, deployment=deployment,
                                  progress=False, tensorboard=False, run_dir=f"{tmp}/{deployment}-{n}")
                summary = run_trainer(make_trainer(cfg), plots=False)
                learner = statistics.median(float(r["projected_learner_s"]) for r in read_metrics(cfg.run.run_dir))
                got[deployment] = (summary, learner)
            (direct, learner), (lithops, _) = got["direct"], got["lithops"]
            rounds = direct["rounds"]
            s, usd = delta(rounds, n, rounds // EVAL_EVERY + 1, direct["projected_cloud_s"], learner, True)
            want_s, want_usd = lithops["projected_cloud_s"], lithops["cost_usd"]["serverless"]
            s, usd = direct["projected_cloud_s"] + s, direct["cost_usd"]["serverless"] + usd
            lines.append(f"| Hopper-v5 fixed-{n}, seed 1 | {rounds} | {want_s:.2f} | {s:.2f} | {s / want_s - 1:+.1%} | "
                         f"{want_usd:.4g} | {usd:.4g} | {usd / want_usd - 1:+.1%} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="run the check, write docs/results/reprice.md")
    args = parser.parse_args()
    if args.check:
        table = check()
        (REPO / "docs" / "results" / "reprice.md").write_text(
            "# Re-pricing direct-invoke runs on Lithops: the check\n\n`bench/reprice.py` re-prices the comparisons "
            "published before 2026-12-02 (billed on a direct Lambda invoke) on the shipped deployment, Lambda "
            "through Lithops. Here the same Hopper runs (seed 1, 30 rounds of 4,096 samples, evaluations every 10) "
            "ran on each deployment, learning alike; the direct run's totals re-priced by the script against the "
            "run the ledger billed on Lithops (the two runs' own timings differ by this machine's noise).\n\n"
            + table + "\n\nReproduce: `.venv/bin/python bench/reprice.py --check`.\n")
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
