"""What billing every warm invocation for its round's policy load (``reused_policy_s``, since 2026-11-27) changes in
the serverless dollars of finished runs that predate it.

Before, a local instance loaded a round's policy for its first invocation and the rest of the round's invocations on
it reused it, unbilled; in the cloud each function has an instance of its own and loads it. Per round, the load is
estimated from the run's own invocations.csv: the median own-instance init of the warm invocations that fetched the
policy (their ``bytes_in`` holds it) less the median of those that did not; each of the latter is billed again with
it (:meth:`minionsrl.cost.CostLedger.invocation_usd`, the platform's default prices). Prints per arm the median load
and the mean share it adds to a run's serverless dollars. A run that already reports the load is refused.

    .venv/bin/python bench/rebill_policy_load.py bench/out/ttt-2026-11-27/hopper
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

from minionsrl.backends.base import OK, InvocationRecord
from minionsrl.cost import CostLedger, load_prices

POLICY_BYTES = 8000  # a request is under 1 kB; a Hopper policy about 42 kB


def rebill(run_dir: Path, ledger: CostLedger) -> tuple[float, float]:
    """(the dollars a run's reused policy loads add, the median per-round load in seconds)."""
    rounds: dict[str, list[dict[str, str]]] = defaultdict(list)
    with open(run_dir / "invocations.csv", newline="") as f:
        reader = csv.DictReader(f)
        if "reused_policy_s" in (reader.fieldnames or []):
            raise SystemExit(f"{run_dir}: its invocations already report the policy loads they reused")
        for row in reader:
            if row["status"] == OK and row["cold"] == "False":
                rounds[row["round"]].append(row)
    added, loads = 0.0, []
    for rows in rounds.values():
        records = [(InvocationRecord.from_row(r), int(r["bytes_in"]) > POLICY_BYTES) for r in rows]
        fetched = [rec for rec, f in records if f]
        reused = [rec for rec, f in records if not f]
        if not fetched or not reused:
            continue
        load = max(statistics.median(ledger.function_s(r)[0] for r in fetched)
                   - statistics.median(ledger.function_s(r)[0] for r in reused), 0.0)
        loads.append(load)
        for rec in reused:
            before = ledger.invocation_usd(rec)
            rec.reused_policy_s = load
            added += ledger.invocation_usd(rec) - before
    return added, statistics.median(loads) if loads else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("compare_dir", type=Path,
                        help="a compare's --out (its runs/ holds one folder per arm and seed)")
    args = parser.parse_args()
    ledger = CostLedger(load_prices())
    arms: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for run_dir in sorted((args.compare_dir / "runs").glob("*__s*")):
        if (run_dir / "summary.json").exists():
            added, load = rebill(run_dir, ledger)
            usd = json.loads((run_dir / "summary.json").read_text())["cost_usd"]["serverless"]
            arms[run_dir.name.rpartition("__s")[0]].append((added / usd, load))
    print("| arm | runs | policy load (ms, median) | serverless dollars added (mean) |\n|---|---:|---:|---:|")
    for arm, values in arms.items():
        print(f"| {arm} | {len(values)} | {statistics.median(v[1] for v in values) * 1e3:.2f} | "
              f"{statistics.fmean(v[0] for v in values) * 100:.2f}% |")


if __name__ == "__main__":
    main()
