"""Time and dollars to a target return (issue 21): which ``n`` or scaler reaches it soonest, which cheapest?

Per env, one ``minionsrl compare --until target`` over the arms below (≥ 5 seeds), every run capped at 1M env
steps (its learning rate anneals over them, as in a 1M-step run) and a projected-time budget that does not bind:

- ``hopper``: Hopper-v5, target 2,500; ``halfcheetah``: HalfCheetah-v5, target 2,500; ``latency``: Hopper-v5 whose
  every step waits 5 ms (``--env-step-latency-ms 5``, a remote simulator), target 1,000, up to 128 functions at once;
- arms: fixed 8/16/32/64/128 at a constant batch of 4,096 (``n`` buys a shorter round, not a larger batch),
  weak scaling (64 × 512 with the KL-adaptive rate, with the preset's 64-row minibatches and with rsl_rl's four
  minibatches of 5 epochs), ``--pipeline`` on fixed-64 and on critical (time), ``critical`` (time and cost),
  nitro, kungfu, minions (its shipped scheduler), ``auto`` (``--actors auto``: the round model's knee) and fixed-16
  on servers (the papers' baseline);
- ``nitro50``: Nitro's own claim at its published 50 rounds (T fixed, the batch growing with ``n``): nitro against
  fixed-16 on servers, under our MuJoCo preset and under ``--preset nitro``.

Each (arm, seed) is an ordinary run under ``bench/out/ttt/<env>/runs``; finished runs are reused and cut ones
resumed, so the experiment spans sessions. JAX keeps compiled programs in a cache on disk, so the first run of an
arm compiles (seconds of learner time, which its projected time counts) and later ones do not: ``--rerun-cold``
deletes the finished runs whose learner compiled for more than a second (rounds whose learner time is over five
times the run's median) so that the next pass runs them again, warm, and every seed is measured alike. The
script then writes, per env, the compare table and plots to ``docs/results/time-to-target/<env>/`` and the goals
with a plain yes/no, and why where missed (the round's split into learner and functions + overhead, the actor
count, the noise scale), to ``docs/results/time-to-target/GOALS.md``.

    .venv/bin/python bench/time_to_target.py --envs hopper latency      # run what is missing, then report
    .venv/bin/python bench/time_to_target.py --reuse                    # only report from what has run
    .venv/bin/python bench/time_to_target.py --answer                   # the answer across the comparisons

``--answer`` reads the published comparisons listed in :data:`ANSWER` and reads every arm against the fixed-8 that
ran beside it, seed by seed, into docs/results/time-to-target-answer.md and the top of docs/RESULTS.md.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from common import OUT, ROOT, log, markdown_table, write_section

from minionsrl.backends.base import OK, InvocationRecord
from minionsrl.cost import CostLedger, load_prices
from minionsrl.loop.metrics import read_metrics

RUNS = OUT / "ttt"
DOCS = ROOT / "docs" / "results" / "time-to-target"
CLI = str(Path(sys.executable).parent / "minionsrl")
BATCH = ["--batch-size", "4096"]
CAP = ["--total-timesteps", "1000000", "--time-budget-s", "1000"]
ENVS: dict[str, dict[str, Any]] = {
    "hopper": {"flags": ["--env-id", "Hopper-v5", *BATCH], "target": 2500.0},
    "halfcheetah": {"flags": ["--env-id", "HalfCheetah-v5", *BATCH], "target": 2500.0},
    # its steps wait rather than compute, so the functions really run side by side here: its answer shows the wall
    "latency": {"flags": ["--env-id", "Hopper-v5", *BATCH, "--env-step-latency-ms", "5", "--max-concurrency", "128"],
                "target": 1000.0, "wall": True},
}
FIXED = ["fixed:8", "fixed:16", "fixed:32", "fixed:64", "fixed:128"]
ADAPTIVE = ["auto", "critical:time", "critical:cost", "kungfu", "nitro", "minions"]
WEAK = "fixed:64+fragment_length=512+lr_schedule=adaptive"
# weak scaling as rsl_rl runs it (``PPO`` defaults: 4 minibatches, 5 epochs, the adaptive rate from 1e-3): the
# minibatches grow with the batch, so the larger batch takes fewer, cleaner steps, and the rate can rise
WEAK_RSL = f"{WEAK}+num_minibatches=4+update_epochs=5+learning_rate=0.001"
# ``--pipeline`` on fixed-64 and on critical (time), the arms nearest the goal on Hopper; under it a round is about
# the longer of the learner and the functions, so critical's fitted time flattens once the functions are the shorter
ARMS = [*FIXED, WEAK, WEAK_RSL, "fixed:64+pipeline", "critical:time+pipeline", *ADAPTIVE, "fixed:16@server"]
NITRO50 = {"ours": ["--env-id", "Hopper-v5", "--preset", "mujoco"],
           "nitro-preset": ["--env-id", "Hopper-v5", "--preset", "nitro"]}


def label(arm: str) -> str:
    """The compare label of an arm (as ``Arm.label`` writes it)."""
    from minionsrl.experiments.compare import Arm

    return Arm.parse(arm).label


# The answer to the user's question on today's code (``--answer``): per env, the published comparisons
# (docs/results/time-to-target-NAME/ENV/compare.csv) and the arms each contributes. Every comparison ran fixed-8
# beside its arms, and each arm is read against that fixed-8 seed by seed: a fixed arm's learning repeats per seed
# (on the latency env not quite: docs/archive/RESULTS-2026-11.md, 2026-11-27; nor across CPUs: the -hc-fixed and
# -lat-adaptive comparisons ran on an AMD EPYC, the others on an Intel Xeon), while the host's speed, which every
# projected second carries, moved 1.6x between comparisons on one CPU and 2.4x across the two (the same file).
ANSWER: dict[str, list[tuple[str, list[str]]]] = {
    "hopper": [("2026-11-26", ["fixed-64", "minions"]), ("2026-11-26-nnls", ["critical-time"]),
               ("2026-11-26-fixed", ["fixed-16", "fixed-32"]),
               ("2026-11-27", ["fixed-8", "fixed-128", "fixed-64+pipeline", "critical-time", "critical-time+pipeline",
                               "critical-cost", "kungfu", "nitro", "minions", "fixed-16@server", label(WEAK_RSL)]),
               # --actors auto beside every fixed count, on the code of 2026-11-28
               ("2026-11-28-auto", ["fixed-8", "fixed-16", "fixed-32", "fixed-64", "fixed-128", "auto"])],
    "halfcheetah": [("2026-11-26-hc", ["fixed-8", "fixed-64", "critical-time", "critical-cost", "minions"]),
                    ("2026-11-27-hc", ["fixed-8", "fixed-64", "fixed-64+pipeline", "kungfu", "nitro",
                                       "fixed-16@server"]),
                    ("2026-11-27-hc-fixed", ["fixed-8", "fixed-16", "fixed-32", "fixed-128", label(WEAK_RSL)]),
                    ("2026-11-28-auto", ["fixed-8", "fixed-16", "fixed-32", "fixed-64", "fixed-128", "auto"])],
    "latency": [("2026-11-26-wall", ["fixed-8", "fixed-64"]),
                ("2026-11-26", ["fixed-64", "critical-time", "critical-cost", "minions"]),
                ("2026-11-27-lat", ["fixed-8", "fixed-16", "fixed-32", "fixed-64", "fixed-128", "fixed-64+pipeline",
                                    "kungfu", "nitro", "fixed-16@server", label(WEAK_RSL)]),
                ("2026-11-27-lat-adaptive", ["fixed-8", "critical-cost", "kungfu"]),
                # seeds 1-5 again (learning bit for bit as in -lat-adaptive, same code and CPU) and 6-10
                ("2026-11-27-lat-minions10", ["fixed-8", "minions"]),
                # -lat-adaptive's runs of seeds 1-5 and -lat-minions10's fixed-8 of seeds 6-10, beside new runs
                ("2026-11-27-lat-critical10", ["fixed-8", "fixed-64", "critical-time"]),
                # the runs of -lat-minions10 (fixed-8, minions) and -lat-critical20 (fixed-64, critical time),
                # seeds 1-20, with fixed-8 and minions run for seeds 11-20 (same CPU, learning bit for bit)
                ("2026-11-27-lat-20", ["fixed-8", "fixed-64", "critical-time", "minions"]),
                ("2026-11-28-auto", ["fixed-8", "fixed-16", "fixed-32", "fixed-64", "fixed-128", "auto"])],
}


def compile_s(run_dir: Path) -> float:
    """Seconds of a run's learner time that went to compiling: the excess of rounds over five times the median."""
    learner = [float(r["projected_learner_s"]) for r in read_metrics(run_dir)]
    median = statistics.median(learner)
    return sum(x - median for x in learner if x > 5 * median)


def drop_cold(out: Path) -> list[str]:
    """Delete the finished runs under ``out`` that compiled for more than a second; their names."""
    cold = [d for d in sorted((out / "runs").glob("*__s*")) if (d / "summary.json").exists() and compile_s(d) > 1.0]
    for d in cold:
        shutil.rmtree(d)
    return [d.name for d in cold]


def with_earlier(out: Path, arms: list[str]) -> list[str]:
    """``arms`` and after them every other arm of :data:`ARMS` with a run (finished or cut) under ``out``: a later
    pass with other arms adds them to the comparison rather than leave a table without its fixed-8. Finished runs
    are reused; the earlier arms also run any seeds of ``--seeds`` they lack."""
    done = {d.name.rpartition("__s")[0] for d in (out / "runs").glob("*__s*")}
    asked = {label(a) for a in arms}
    return [*arms, *(a for a in ARMS if label(a) in done - asked)]


def run_env(env: str, seeds: int, arms: list[str]) -> None:
    spec = ENVS[env]
    cmd = [CLI, "compare", *spec["flags"], "--until", "target", "--target", str(spec["target"]), *CAP,
           "--seeds", str(seeds), "--scalers", ",".join(with_earlier(RUNS / env, arms)), "--out", str(RUNS / env),
           "--no-progress", "--no-tensorboard"]
    log(" ".join(cmd))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def run_nitro50(seeds: int) -> None:
    for name, flags in NITRO50.items():
        cmd = [CLI, "compare", *flags, "--rounds", "50", "--seeds", str(seeds), "--scalers", "nitro,fixed:16@server",
               "--out", str(RUNS / f"nitro50-{name}"), "--no-progress", "--no-tensorboard"]
        log(" ".join(cmd))
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def _rows(out: Path, target: float | None) -> list[dict[str, str]]:
    """A compare.csv row per finished run under ``out`` of the arms of :data:`ARMS` (a cut experiment reports what
    has finished), as strings, as compare.csv holds them."""
    from minionsrl.experiments.compare import Arm, run_row

    rows = []
    for arm in dict.fromkeys([*ARMS, "nitro", "fixed:16@server"]):
        for run_dir in sorted((out / "runs").glob(f"{label(arm)}__s*")):
            if (run_dir / "summary.json").exists():
                seed = int(run_dir.name.rpartition("__s")[2])
                rows.append({k: "" if v is None else str(v)
                             for k, v in run_row(Arm.parse(arm), seed, run_dir, target).items()})
    return rows


def _mean(rows: list[dict[str, str]], column: str) -> float | None:
    values = [float(r[column]) for r in rows if r[column] != ""]
    return statistics.fmean(values) if values else None


# what a run that never reached the target spent in all, by the column of what it spent to it
WHOLE = {"projected_time_to_target_s": "projected_cloud_s", "time_to_target_s": "wall_s", "usd_to_target": "cost_usd",
         "rounds_to_target": "rounds"}


def paired(arm: dict[int, dict[str, str]], base: dict[int, dict[str, str]], column: str) -> dict[str, Any]:
    """An arm against its comparison's fixed-8, seed by seed (both dicts: seed -> compare.csv row).

    ``same_seeds``: over the seeds where both have ``column`` (seconds, dollars or rounds to the target: the seeds
    both reached it; a price of a round: every seed), the arm's mean over fixed-8's mean on the same seeds, with a
    bootstrap interval (seeds resampled in pairs); ``stalls``: the
    ratio of the means over every seed, a run that never got there counted at its whole run (:data:`WHOLE`), so a lower
    bound of what it would have taken: ``bound`` says which side is open ("≥" when only the arm stalled, "?" when
    fixed-8 did too, "" when neither)."""
    from minionsrl.experiments.compare import bootstrap_ci

    seeds = sorted(set(arm) & set(base))
    both = [s for s in seeds if arm[s][column] and base[s][column]]
    ours, theirs = [float(arm[s][column]) for s in both], [float(base[s][column]) for s in both]

    def counted(row: dict[str, str]) -> float:
        return float(row[column] or row[WHOLE[column]])

    stalled = any(not arm[s][column] for s in seeds), any(not base[s][column] for s in seeds)
    stalls = (statistics.fmean(counted(arm[s]) for s in seeds) / statistics.fmean(counted(base[s]) for s in seeds)
              if seeds else None)
    return {"pairs": len(both), "same_seeds": sum(ours) / sum(theirs) if both else None,
            "interval": bootstrap_ci(ours, over=theirs) if both else None, "stalls": stalls,
            "bound": "?" if stalled[1] else "≥" if stalled[0] else ""}


def _by_seed(rows: list[dict[str, str]], arm: str) -> dict[int, dict[str, str]]:
    return {int(r["seed"]): r for r in rows if r["arm"] == arm}


def _reached(rows: list[dict[str, str]], arm: str) -> tuple[int, int]:
    """How many of an arm's seeds reached the target, of how many."""
    mine = [r for r in rows if r["arm"] == arm]
    return sum(r["usd_to_target"] != "" for r in mine), len(mine)


def _ratio(rows: list[dict[str, str]], arm: str, base: str, column: str) -> str:
    (k, of), (kb, ofb) = _reached(rows, arm), _reached(rows, base)
    p = paired(_by_seed(rows, arm), _by_seed(rows, base), column)
    if p["same_seeds"] is None:
        return f"– ({k}/{of} vs {kb}/{ofb} reached)"
    return f"{p['same_seeds']:.2f}× on {p['pairs']} seeds ({k}/{of} vs {kb}/{ofb})"


def _goal(rows: list[dict[str, str]], arm: str, base: str, time_col: str, time_max: float,
          usd_max: float | None, seeds: int = 5) -> str:
    """yes when every seed of ``arm`` reached the target (``seeds`` of them ran) within both ratios of the
    baseline's, on the seeds the baseline reached too."""
    (k, of), (kb, ofb) = _reached(rows, arm), _reached(rows, base)
    if of < seeds or ofb < seeds:
        return f"no verdict yet ({of} and {ofb} of {seeds} seeds run)"
    if k < of or kb == 0:
        return f"no ({k} of its {of} seeds reached it, {kb} of the baseline's {ofb})"
    ours, theirs = _by_seed(rows, arm), _by_seed(rows, base)
    time, usd = paired(ours, theirs, time_col)["same_seeds"], paired(ours, theirs, "usd_to_target")["same_seeds"]
    return "yes" if time <= time_max and (usd_max is None or usd <= usd_max) else "no"


def hindsight_best(rows: list[dict[str, str]], arms: list[str]) -> str | None:
    """The fixed count (on the serverless platform, no other change) whose runs took the least projected time to
    the target on average, a seed that never reached it counted at its whole run: the arm a sweep would have
    found."""
    fixed = [a for a in arms if a.startswith("fixed-") and a[len("fixed-"):].isdigit()]
    column = "projected_time_to_target_s"

    def mean_time(arm: str) -> float:
        return statistics.fmean(float(r[column] or r[WHOLE[column]]) for r in rows if r["arm"] == arm)

    return min(fixed, key=mean_time) if fixed else None


def slowest_functions(run_dir: Path) -> dict[int, float]:
    """Per round, the own-instance seconds of its slowest training function, as the ledger projects them."""
    ledger, slowest = CostLedger(load_prices()), {}
    with open(run_dir / "invocations.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row["kind"] == "train" and row["status"] == OK:
                r = int(row["round"])
                slowest[r] = max(slowest.get(r, 0.0), ledger.latency_s(InvocationRecord.from_row(row)))
    return slowest


def round_split(out: Path, arm_label: str) -> dict[str, float]:
    """Medians over an arm's rounds and seeds: the projected round, its learner part, the rest (functions and
    overhead), of it the slowest training function and the rest (dispatch, collection, an evaluation's functions),
    the actor count and the noise scale (B_simple) the scaler read."""
    parts: dict[str, list[float]] = {"round": [], "learner": [], "functions": [], "slowest": [], "overhead": [],
                                     "actors": [], "gns": [], "compile": []}
    for run_dir in sorted((out / "runs").glob(f"{arm_label}__s*")):
        parts["compile"].append(compile_s(run_dir))
        slowest = slowest_functions(run_dir)
        for r in read_metrics(run_dir)[1:]:  # round 1 compiles and starts instances
            functions = float(r["projected_round_s"]) - float(r["projected_learner_s"])
            parts["round"].append(float(r["projected_round_s"]))
            parts["learner"].append(float(r["projected_learner_s"]))
            parts["functions"].append(functions)
            parts["slowest"].append(slowest.get(int(r["round"]), 0.0))
            parts["overhead"].append(functions - parts["slowest"][-1])
            parts["actors"].append(float(r["n_actors"]))
            if r.get("gns"):
                parts["gns"].append(float(r["gns"]))
    return {k: statistics.median(v) if v else float("nan") for k, v in parts.items()}


def publish(out: Path, name: str) -> None:
    """Copy a compare's own table and plots into ``docs/results/time-to-target/<name>/``, once it has run to the
    end."""
    if (out / "compare.csv").exists():
        target_dir = DOCS / name
        target_dir.mkdir(parents=True, exist_ok=True)
        for f in out.iterdir():
            if f.is_file():
                shutil.copy(f, target_dir / f.name)


def report_env(env: str) -> list[str]:
    """Copy the env's compare outputs into docs and return its goal lines."""
    out = RUNS / env
    rows = _rows(out, ENVS[env]["target"]) if (out / "runs").exists() else []
    if not rows:
        return [f"- **{env}**: not run yet", ""]
    publish(out, env)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fixed8, server = label("fixed:8"), label("fixed:16@server")
    seeds = {r["arm"]: sum(x["arm"] == r["arm"] for x in rows) for r in rows}
    lines = [f"### {env} (target {ENVS[env]['target']:g}; finished runs per arm: "
             f"{', '.join(f'{a} {k}' for a, k in seeds.items())})", ""]
    table = []
    for arm in arms:
        split = round_split(out, arm)
        table.append([arm, _ratio(rows, arm, fixed8, "projected_time_to_target_s"),
                      _ratio(rows, arm, fixed8, "usd_to_target"), _ratio(rows, arm, fixed8, "time_to_target_s"),
                      f"{split['round']:.3f}", f"{split['learner']:.3f}", f"{split['functions']:.3f}",
                      f"{split['slowest']:.3f}", f"{split['overhead']:.3f}",
                      f"{split['actors']:.0f}", f"{split['gns']:.4g}", f"{split['compile']:.1f}"])
    lines.append(markdown_table(["arm", "projected time to target vs fixed-8", "dollars vs fixed-8",
                                 "wall time vs fixed-8", "round s (median)", "learner s", "functions + overhead s",
                                 "slowest function s", "overhead s",
                                 "actors", "noise scale", "compile s (median run)"], table))
    if any("pipeline" in arm for arm in arms):
        lines.append("Pipelined arms: a round's functions ran beside the previous update, so *functions + overhead* is "
                     "only what the round waited beyond it (0: the learner was the round), and *overhead* (that less "
                     "the slowest function) comes out negative.")
    lines.append("")
    adaptive = [label(a) for a in ADAPTIVE if label(a) in arms]
    for arm in adaptive:
        versus = (f"against fixed-16 on servers: time {_ratio(rows, arm, server, 'projected_time_to_target_s')}, "
                  f"dollars {_ratio(rows, arm, server, 'usd_to_target')}" if server in arms
                  else "fixed-16 on servers not run here")
        lines.append(f"- {arm} ≤ 0.48× fixed-8's projected time at ≤ 1.0× its dollars: "
                     f"**{_goal(rows, arm, fixed8, 'projected_time_to_target_s', 0.48, 1.0)}**; {versus}")
    if label("auto") in arms and (best := hindsight_best(rows, arms)) is not None:
        lines.append(f"- auto within 1.15× the time to target of the hindsight-best fixed arm ({best}: the least mean "
                     f"projected time over its seeds, a stalled seed counted at its whole run) at ≤ 1.1× its dollars: "
                     f"**{_goal(rows, label('auto'), best, 'projected_time_to_target_s', 1.15, 1.1)}** (time "
                     f"{_ratio(rows, label('auto'), best, 'projected_time_to_target_s')}, dollars "
                     f"{_ratio(rows, label('auto'), best, 'usd_to_target')})")
    if label("minions") in arms and server in arms:
        lines.append(f"- MinionsRL's claim (minions vs fixed-16 on servers: ≤ 0.48× time, ≤ 0.14× dollars): "
                     f"**{_goal(rows, label('minions'), server, 'projected_time_to_target_s', 0.48, 0.14)}** "
                     f"(time {_ratio(rows, label('minions'), server, 'projected_time_to_target_s')}, dollars "
                     f"{_ratio(rows, label('minions'), server, 'usd_to_target')})")
    if ENVS[env].get("wall") and label("fixed:64") in arms:
        lines.append(f"- 64 functions reach the target in ≤ 0.2× the wall time of 8: "
                     f"**{_goal(rows, label('fixed:64'), fixed8, 'time_to_target_s', 0.2, None)}** "
                     f"({_ratio(rows, label('fixed:64'), fixed8, 'time_to_target_s')})")
    return [*lines, ""]


def report_nitro50() -> list[str]:
    lines = ["### Nitro's claim at its 50 rounds (final return ≥ fixed-16 on servers' at ≤ 0.58× its dollars)", ""]
    for name in NITRO50:
        out = RUNS / f"nitro50-{name}"
        if not (out / "compare.csv").exists():
            lines.append(f"- {name}: not run yet")
            continue
        publish(out, f"nitro50-{name}")
        rows = _rows(out, None)
        nitro = [r for r in rows if r["arm"] == "nitro"]
        server = [r for r in rows if r["arm"] == label("fixed:16@server")]
        ret, base_ret = _mean(nitro, "final_eval_return"), _mean(server, "final_eval_return")
        usd, base_usd = _mean(nitro, "cost_usd"), _mean(server, "cost_usd")
        ok = ret is not None and base_ret is not None and ret >= base_ret and usd / base_usd <= 0.58
        lines.append(f"- {name} preset ({len(nitro)} seeds): nitro {ret:.0f} vs {base_ret:.0f}, dollars "
                     f"{usd / base_usd:.2f}×: **{'yes' if ok else 'no'}**")
    return [*lines, ""]


def _same(p: dict[str, Any]) -> str:
    """A paired ratio with its interval and pairs, as the answer's tables print it."""
    if p["same_seeds"] is None:
        return "– (no seed reached it in both)"
    lo, hi = p["interval"]
    return f"{p['same_seeds']:.2f}× [{lo:.2f}, {hi:.2f}] ({p['pairs']})"


def _with_per_round(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """compare.csv rows with what a round cost over the whole run: projected seconds and dollars per round."""
    return [{**r, "s_per_round": str(float(r["projected_cloud_s"]) / int(r["rounds"])),
             "usd_per_round": str(float(r["cost_usd"]) / int(r["rounds"]))} for r in rows]


def answer_env(env: str, comparisons: list[tuple[str, list[str]]]) -> list[str]:
    """The env's tables: every arm of ``comparisons`` against the fixed-8 of its own comparison, seed by seed; then
    why, as rounds to the target and what a round costs (time to it = rounds x seconds a round)."""
    from minionsrl.experiments.compare import pareto_front

    wall = ENVS[env].get("wall", False)
    table, why, points = [], [], {}

    def not_run(arm: str, name: str) -> None:
        table.append([arm, name, "not run yet", *[""] * (6 + wall)])
        why.append([arm, name, "not run yet", "", ""])

    for name, arms in comparisons:
        path = DOCS.with_name(f"time-to-target-{name}") / env / "compare.csv"
        if not path.exists():
            not_run(", ".join(arms), name)
            continue
        with open(path, newline="") as f:
            rows = _with_per_round(list(csv.DictReader(f)))
        base = _by_seed(rows, label("fixed:8"))
        for arm in arms:
            mine = _by_seed(rows, arm)
            if not mine:
                not_run(arm, name)
                continue
            t, d = paired(mine, base, "projected_time_to_target_s"), paired(mine, base, "usd_to_target")
            reached = sum(bool(r["usd_to_target"]) for r in mine.values())
            if t["stalls"] is not None and d["stalls"] is not None and not t["bound"] and not d["bound"]:
                # on the front only where every seed got there (and fixed-8's): a stall's ratio is only a bound
                points[f"{arm} ({name})"] = (d["stalls"], -t["stalls"])
            table.append([arm, name, f"{reached}/{len(mine)}", _same(t), _same(d),
                          *([_same(paired(mine, base, "time_to_target_s"))] if wall else []),
                          f"{t['bound']}{t['stalls']:.2f}×", f"{d['bound']}{d['stalls']:.2f}×",
                          f"{statistics.fmean(float(r['mean_actors']) for r in mine.values()):.0f}", ""])
            # comparisons published before compare.csv had the column lack it
            rounds = (_same(paired(mine, base, "rounds_to_target")) if "rounds_to_target" in rows[0]
                      else "– (not recorded)")
            why.append([arm, name, rounds, _same(paired(mine, base, "s_per_round")),
                        _same(paired(mine, base, "usd_per_round"))])
    front = pareto_front(points)
    for row in table:
        if f"{row[0]} ({row[1]})" in front:
            row[-1] = "yes"
    return [f"### {env} (target {ENVS[env]['target']:g})", "",
            markdown_table(["arm", "comparison", "reached", "time to target vs fixed-8, same seeds [95%] (pairs)",
                            "dollars vs fixed-8, same seeds [95%] (pairs)",
                            *(["measured wall time vs fixed-8, same seeds [95%] (pairs)"] if wall else []),
                            "time, stalls counted",
                            "dollars, stalls counted", "actors (mean)", "Pareto (every seed reached)"], table), "",
            f"#### Why ({env}): the rounds to the target and what a round costs",
            "", markdown_table(["arm", "comparison", "rounds to target vs fixed-8, same seeds [95%] (pairs)",
                                "projected seconds a round vs fixed-8 [95%] (pairs)",
                                "dollars a round vs fixed-8 [95%] (pairs)"], why), ""]


def answer() -> str:
    """Which ``n`` or scaler reaches the target in the least time, which for the fewest dollars: per env, from the
    comparisons of :data:`ANSWER`."""
    lines = ["Every arm against the fixed-8 of its own comparison, seed by seed (`bench/time_to_target.py "
             "--answer`, from the compare tables under `docs/results/time-to-target-NAME/`). *Same seeds*: over "
             "the seeds where both reached the target, the arm's mean projected seconds (or dollars) to it over "
             "fixed-8's, with a bootstrap interval (seeds resampled in pairs). *Stalls counted*: the ratio of the "
             "means over every seed, a run that never reached the target counted at its whole 1M-step run: a lower "
             "bound (≥) when the arm stalled, of unknown side (?) when fixed-8 stalled too. *Pareto*: among the arms "
             "that reached the target in every seed (as did their fixed-8), no other arm is both faster and "
             "cheaper. On the latency-bound env also the *measured wall time* "
             "(its steps wait rather than compute, so the functions overlap on this 2-core machine; unlike the "
             "projected time, it moves with the machine's load). *Why*: the time to the target is the rounds to it "
             "times the seconds a round, so each arm's ratios split, roughly, in two: the rounds its evaluation "
             "took to reach the target (the round of the first evaluation there; evaluations every 10 rounds and "
             "after the last, so a count is known to 10 rounds), against fixed-8's on the seeds both reached it, "
             "which says whether it learned as much per round; and the projected seconds and dollars a round, over "
             "each whole run, every seed paired, which say what a round costs it (every arm samples "
             f"{int(BATCH[1]):,} steps a round but the weak-scaling arms, {64 * 512:,}). The two are over "
             "different seeds and rounds, so their product is near the time or dollar ratio, not equal to it.", ""]
    for env, comparisons in ANSWER.items():
        lines += answer_env(env, comparisons)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="*", default=["hopper", "latency", "halfcheetah", "nitro50"],
                        choices=[*ENVS, "nitro50"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--arms", type=lambda s: s.split(","), default=ARMS,
                        help="comma-separated subset of the arms to run, in this order (default: all of them)")
    parser.add_argument("--reuse", action="store_true", help="only report from the runs there are")
    parser.add_argument("--name", help="a separate experiment: its runs under bench/out/ttt-NAME and its report "
                        "under docs/results/time-to-target-NAME/ (a re-run on newer code beside the published one)")
    parser.add_argument("--rerun-cold", action="store_true", help="first delete the finished runs that compiled "
                        "(see above), so that this pass runs them again with the compilation cache warm")
    parser.add_argument("--answer", action="store_true", help="only write the answer across the published "
                        "comparisons (see ANSWER) to docs/results/time-to-target-answer.md and docs/RESULTS.md")
    args = parser.parse_args()
    if args.answer:
        text = answer()
        (ROOT / "docs" / "results" / "time-to-target-answer.md").write_text(
            f"# Time and dollars to a target: the answer on today's code\n\n{text}\n")
        write_section("answer", text, ROOT / "docs" / "RESULTS.md")
        print(text)
        return
    if args.name:
        global RUNS, DOCS
        RUNS, DOCS = RUNS.with_name(f"ttt-{args.name}"), DOCS.with_name(f"time-to-target-{args.name}")
    if unknown := [a for a in args.arms if a not in ARMS]:
        parser.error(f"--arms: {', '.join(unknown)} not among {', '.join(ARMS)}")
    if args.rerun_cold:
        for env in args.envs:
            out = RUNS / (f"nitro50-{next(iter(NITRO50))}" if env == "nitro50" else env)
            log(f"{env}: running again, warm: {', '.join(drop_cold(out)) or 'none'}")
    if not args.reuse:
        for env in args.envs:
            run_nitro50(args.seeds) if env == "nitro50" else run_env(env, args.seeds, args.arms)
    DOCS.mkdir(parents=True, exist_ok=True)
    lines = ["# Time and dollars to a target: the goals", "",
             "Written by `bench/time_to_target.py` (its docstring says what runs). Ratios are of means over the "
             "seeds that both the arm and its baseline reached the target in, seed by seed (the seeds reached, "
             "in brackets: arm vs baseline); a goal is met only if every seed of the arm reached it. Times are "
             "projected cloud seconds unless marked wall.", ""]
    for env in ENVS:
        lines += report_env(env)
    lines += report_nitro50()
    text = "\n".join(lines)
    (DOCS / "GOALS.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
