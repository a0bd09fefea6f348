"""Chaos run: Hopper-v5 through function faults and learner kills, checked against a fault-free run.

One command, run from the repository root:

    .venv/bin/python bench/chaos.py [--rounds 30] [--fault-rate 0.2] [--kills 3]

1. A fault-free reference: ``minionsrl train`` on Hopper-v5 for ``--rounds`` rounds.
2. The same command with ``--fault-rate`` of invocation attempts failing in mixed ways (raise, hang, SIGKILL of
   the instance, reply delivered twice, corrupted reply, call refused by the platform (throttled), allocation
   past the function's memory (out of memory)), the learner SIGKILLed ``--kills`` times — the first
   in the middle of writing a checkpoint (the checkpoint module's test hook stops it half-written), the others
   mid-round — and restarted with ``--resume`` each time.
3. The chaos run's outputs against the reference: rounds completed, invocations lost vs retried, batches
   corrupted (an accepted fragment whose digest differs from the reference's for the same round and slot),
   the learning curve, and the ledger totals against the sum of metrics.csv rows.

The table goes into docs/RELIABILITY.md (section ``chaos``); the runs stay in bench/out/chaos/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import OUT, PYTHON, ROOT, log, markdown_table, provenance, write_section

from minionsrl.loop import checkpoint
from minionsrl.loop.metrics import LEARNING_COLUMNS, read_rows

DOC = ROOT / "docs" / "RELIABILITY.md"
# how the fault rate is split over the kinds (shares of --fault-rate)
MIX = {"raise": 0.2, "kill": 0.2, "malformed": 0.15, "duplicate": 0.15, "hang": 0.1, "throttle": 0.15, "oom": 0.05}


def _rows(path: Path) -> list[dict[str, str]]:
    return read_rows(path, missing_ok=True)


def _flags(args: argparse.Namespace, faults: bool) -> list[str]:
    flags = ["--env-id", "Hopper-v5", "--seed", str(args.seed), "--actors", str(args.actors), "--fragment-length",
             str(args.fragment_length), "--max-rounds", str(args.rounds), "--eval-every", "10", "--eval-episodes",
             "4", "--no-progress", "--no-tensorboard", "--invocation-timeout-s", str(args.invocation_timeout_s),
             "--max-retries", str(args.max_retries)]
    if faults:
        flags += [x for kind, share in MIX.items() for x in (f"--fault-{kind}", f"{args.fault_rate * share:g}")]
        flags += ["--fault-seed", str(args.seed)]
    return flags


def _train(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([PYTHON, "-m", "minionsrl.cli", "train", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)


def _finish(proc: subprocess.Popen) -> None:
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"training failed (exit {proc.returncode}): {err.decode()[-2000:]}")


def _wait_for(condition, proc: subprocess.Popen, what: str) -> None:
    while not condition():
        if proc.poll() is not None:
            raise RuntimeError(f"training ended before {what}: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.02)


def _checkpoint_round(run_dir: Path) -> int:
    state = checkpoint.load(run_dir / "checkpoints")
    return int(state["round"]) if state else 0


def _kill(proc: subprocess.Popen, run_dir: Path, how: str) -> dict[str, Any]:
    os.killpg(proc.pid, signal.SIGKILL)  # the learner and its function instances
    proc.wait()
    proc.stderr.close()
    logged, saved = len(_rows(run_dir / "metrics.csv")), _checkpoint_round(run_dir)
    log(f"killed ({how}): {logged} rounds logged, checkpoint of round {saved}")
    return {"how": how, "rounds_logged": logged, "checkpoint_round": saved}


def chaos_run(args: argparse.Namespace, run_dir: Path) -> list[dict[str, Any]]:
    """The faulty run with its kills; returns one record per kill."""
    metrics, kills = run_dir / "metrics.csv", []
    marker = run_dir.parent / "paused-in-checkpoint"
    marker.unlink(missing_ok=True)
    at = [max(1, round(args.rounds * (k + 1) / (args.kills + 1))) for k in range(args.kills)]
    # kill 1: half-way through writing a checkpoint
    proc = _train([*_flags(args, faults=True), "--run-dir", str(run_dir)],
                  {**os.environ, checkpoint.PAUSE_ENV: f"{at[0]}:{marker}"})
    _wait_for(marker.exists, proc, f"the pause in round {at[0]}'s checkpoint")
    kills.append(_kill(proc, run_dir, f"mid-checkpoint of round {at[0]}"))
    # the others: mid-round, a fraction of a round after round k was logged
    for k, rnd in enumerate(at[1:], start=1):
        proc = _train(["--resume", "--run-dir", str(run_dir), "--no-progress"])
        _wait_for(lambda n=rnd: len(_rows(metrics)) >= n, proc, f"round {rnd}")
        last = _rows(metrics)[-1]
        time.sleep(float(last["round_s"]) * k / args.kills)
        kills.append(_kill(proc, run_dir, f"mid-round after round {rnd} was logged"))
    proc = _train(["--resume", "--run-dir", str(run_dir), "--no-progress"])
    _finish(proc)
    return kills


def compare(ref: Path, run: Path, kills: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """What the chaos run kept, lost and corrupted, against the fault-free reference."""
    m_ref, m_run = _rows(ref / "metrics.csv"), _rows(run / "metrics.csv")
    inv_ref, inv_run = _rows(ref / "invocations.csv"), _rows(run / "invocations.csv")

    def accepted(rows: list[dict[str, str]]) -> dict[tuple[str, str], str]:
        return {(r["round"], r["slot"]): r["digest"] for r in rows if r["kind"] == "train" and r["status"] == "ok"}

    good_ref, good_run = accepted(inv_ref), accepted(inv_run)
    summary = json.loads((run / "summary.json").read_text())
    rounds = [int(r["round"]) for r in m_run]
    faults = {kind: sum(1 for r in inv_run if r["fault"] == kind and r["status"] != "duplicate") for kind in MIX}
    first_tries = [r for r in inv_run if r["attempt"] == "0" and r["status"] != "duplicate"]
    attempts = sum(1 for r in inv_run if r["status"] != "duplicate")
    return {
        "rounds_completed": len(m_run), "rounds_expected": args.rounds,
        "rounds_contiguous": rounds == list(range(1, args.rounds + 1)),
        "attempts": attempts, "fault_share": sum(faults.values()) / max(attempts, 1),
        "first_tries": len(first_tries),
        "faults_injected": faults,
        "failed": sum(int(r["failed"]) for r in m_run), "retried": sum(int(r["retried"]) for r in m_run),
        "timed_out": sum(int(r["timed_out"]) for r in m_run), "duplicates": sum(int(r["duplicates"]) for r in m_run),
        "throttled": sum(int(r.get("throttled") or 0) for r in m_run),
        "oom": sum(1 for r in inv_run if r["status"] == "oom"),
        "lost": sum(int(r["lost"]) for r in m_run),
        "fragments_accepted": len(good_run), "fragments_reference": len(good_ref),
        "batches_corrupted": sum(1 for key, d in good_run.items() if good_ref.get(key) != d),
        "learning_identical": [{k: r[k] for k in LEARNING_COLUMNS} for r in m_run]
        == [{k: r[k] for k in LEARNING_COLUMNS} for r in m_ref],
        "ledger_serverless": summary["cost_usd"]["serverless"],
        "rows_serverless": sum(float(r["cost_serverless_usd"]) for r in m_run),
        "ledger_server": summary["cost_usd"]["server"],
        "rows_server": sum(float(r["cost_server_usd"]) for r in m_run),
        "reference_serverless": json.loads((ref / "summary.json").read_text())["cost_usd"]["serverless"],
        "kills": kills,
    }


def render(res: dict[str, Any], args: argparse.Namespace, started: float, ended: float) -> str:
    kills = "; ".join(f"{k['how']}: {k['rounds_logged']} rounds logged, checkpoint of round "
                      f"{k['checkpoint_round']}, round {k['checkpoint_round'] + 1} re-run" for k in res["kills"])
    rows = [
        ["rounds completed (contiguous 1..N, no duplicates)",
         f"{res['rounds_completed']} of {res['rounds_expected']} ({'yes' if res['rounds_contiguous'] else 'NO'})"],
        ["invocation attempts (first tries + retries)", f"{res['attempts']} ({res['first_tries']} + {res['retried']})"],
        ["faults injected (share of attempts)", ", ".join(f"{k} {v}" for k, v in res["faults_injected"].items())
         + f" ({100 * res['fault_share']:.1f}%)"],
        ["failed (out of memory among them) / retried / timed out / duplicates discarded",
         f"{res['failed']} ({res['oom']}) / {res['retried']} / {res['timed_out']} / {res['duplicates']}"],
        ["calls refused by the platform (throttled: backed off and retried, not counted against --max-retries)",
         str(res["throttled"])],
        ["invocations lost (slots without a fragment)", str(res["lost"])],
        ["fragments accepted vs fault-free run", f"{res['fragments_accepted']} vs {res['fragments_reference']}"],
        ["batches corrupted (accepted fragment differs from the fault-free run's)", str(res["batches_corrupted"])],
        ["learning curve identical to the fault-free run (every learning column of metrics.csv)",
         "yes" if res["learning_identical"] else "NO"],
        ["ledger serverless total vs sum of metrics.csv rows",
         f"${res['ledger_serverless']:.6f} vs ${res['rows_serverless']:.6f} "
         f"({'equal' if res['ledger_serverless'] == res['rows_serverless'] else 'DIFFERENT'})"],
        ["ledger server-based total vs sum of rows",
         f"${res['ledger_server']:.6f} vs ${res['rows_server']:.6f} "
         f"({'equal' if res['ledger_server'] == res['rows_server'] else 'DIFFERENT'})"],
        ["serverless cost vs the fault-free run (retries, duplicates, stragglers billed)",
         f"${res['ledger_serverless']:.6f} vs ${res['reference_serverless']:.6f}"],
        ["learner kills", f"{len(res['kills'])}: {kills}"],
    ]
    mix = ", ".join(f"{k} {args.fault_rate * s:g}" for k, s in MIX.items())
    return "\n".join([
        "## Chaos run: Hopper-v5 through function faults and learner kills",
        "",
        f"Hopper-v5, {args.rounds} rounds of {args.actors} actors × {args.fragment_length} steps (seed {args.seed}). "
        f"Fault rates per invocation attempt: {mix} (sum {args.fault_rate:g}); hangs are cut by "
        f"`--invocation-timeout-s {args.invocation_timeout_s:g}`; `--max-retries {args.max_retries}`. The learner "
        f"was SIGKILLed {args.kills} times (with its function instances) and restarted with `--resume` each time. "
        "The same command without faults and kills is the reference: a batch is *corrupted* if an accepted "
        "fragment's digest (invocations.csv) differs from the reference's for the same round and slot.",
        "",
        markdown_table(["what", "measured"], rows),
        "",
        provenance(started, ended),
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--fragment-length", type=int, default=512)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--fault-rate", type=float, default=0.2)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--max-retries", type=int, default=4)
    parser.add_argument("--invocation-timeout-s", type=float, default=10.0)
    args = parser.parse_args()
    started = time.time()
    out = OUT / "chaos"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    log("fault-free reference run")
    _finish(_train([*_flags(args, faults=False), "--run-dir", str(out / "reference")]))
    log("chaos run")
    kills = chaos_run(args, out / "chaos")
    res = compare(out / "reference", out / "chaos", kills, args)
    (out / "result.json").write_text(json.dumps(res, indent=2))
    write_section("chaos", render(res, args, started, time.time()), doc=DOC)
    log(f"written to {DOC.relative_to(ROOT)}: {json.dumps({k: v for k, v in res.items() if k != 'kills'})}")


if __name__ == "__main__":
    sys.exit(main())
