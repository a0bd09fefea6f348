"""Time and dollars to a target return (issue 21): which ``n`` or scaler reaches it soonest, which cheapest?

Per env, one ``minionsrl compare --until target`` over the arms of its spec, ``bench/specs/time-to-target-ENV.yaml``
(≥ 5 seeds; every run capped at 1M env steps, its learning rate annealing over them, and a projected-time budget
that does not bind; the specs say what each env and arm is):

- ``hopper``: Hopper-v5, target 2,500; ``halfcheetah``: HalfCheetah-v5, target 2,500; ``latency``: Hopper-v5 whose
  every step waits 5 ms (a remote simulator), target 1,000, up to 128 functions at once;
- arms: fixed 8/16/32/64/128 at a constant batch of 4,096, weak scaling, ``--pipeline``, critical, nitro, kungfu,
  minions, ``auto`` and fixed-16 on servers (the papers' baseline);
- ``nitro50``: Nitro's own claim at its published 50 rounds (``time-to-target-nitro50-{ours,nitro-preset}.yaml``).

``--arms``, ``--seeds`` and ``--name`` replace a spec's arms, seeds and out; the arms run there before are kept.
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
ran beside it, seed by seed, into docs/results/time-to-target-answer.md (docs/RESULTS.md links it and states its
verdicts).
"""

from __future__ import annotations

import argparse
import csv
import shutil
import statistics
import sys
from pathlib import Path

from common import OUT, ROOT, log, markdown_table
from experiment import command
from reprice import on_lithops

from minionsrl import cli
from minionsrl.backends.base import OK, InvocationRecord
from minionsrl.cost import CostLedger, load_prices
from minionsrl.experiments import targets
from minionsrl.experiments.compare import read_spec
from minionsrl.experiments.targets import goal, hindsight_best, ratio_text, with_earlier
from minionsrl.loop.metrics import read_metrics

RUNS = OUT / "ttt"
DOCS = ROOT / "docs" / "results" / "time-to-target"
SPECS = ROOT / "bench" / "specs"  # time-to-target-ENV.yaml: each comparison's arms, seeds, target and config
ENVS = ("hopper", "halfcheetah", "latency")
WALL = ("latency",)  # its steps wait rather than compute, so the functions really run side by side: the wall counts
NITRO50 = ("ours", "nitro-preset")  # time-to-target-nitro50-NAME.yaml: Nitro's claim under our preset and its own
ADAPTIVE = ["auto", "critical:time", "critical:cost", "kungfu", "nitro", "minions"]
BATCH = 4096  # every arm's samples a round (the specs' train_batch_size) but the weak-scaling arms'
WEAK_RSL = "fixed:64+fragment_length=512+lr_schedule=adaptive+num_minibatches=4+update_epochs=5+learning_rate=0.001"


def label(arm: str) -> str:
    """The compare label of an arm (as ``Arm.label`` writes it)."""
    from minionsrl.experiments.compare import Arm

    return Arm.parse(arm).label


def spec_of(env: str) -> tuple[Path, list[str], float | None]:
    """The spec of ``env`` (or of ``nitro50-NAME``): its path, its arms and its target (None: it runs to rounds)."""
    path = SPECS / f"time-to-target-{env}.yaml"
    argv, _ = read_spec(path)
    target = float(argv[argv.index("--target") + 1]) if "--target" in argv else None
    return path, argv[argv.index("--scalers") + 1].split(","), target


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
               ("2026-11-28-auto", ["fixed-8", "fixed-16", "fixed-32", "fixed-64", "fixed-128", "auto"]),
               # priced on the shipped deployment as it ran (Lambda via Lithops): auto choosing on that model
               ("2026-12-02-lithops", ["fixed-8", "fixed-64", "auto"])],
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


def run(env: str, seeds: int, arms: list[str] | None) -> None:
    """Run ``env``'s spec (``nitro50``: both of its specs) through ``minionsrl compare``: ``arms`` (None: the spec's)
    and the arms run there before, ``seeds`` seeds, under :data:`RUNS`."""
    for name in [f"nitro50-{n}" for n in NITRO50] if env == "nitro50" else [env]:
        spec, order, _ = spec_of(name)
        scalers = order if arms is None or env == "nitro50" else with_earlier(RUNS / name, arms, order)
        argv = command(spec, scalers=",".join(scalers), seeds=str(seeds), out=str(RUNS / name))
        log("minionsrl " + " ".join(argv))
        if (rc := cli.main(argv)) != 0:
            sys.exit(rc)


def _rows(out: Path, arms: list[str], target: float | None) -> list[dict[str, str]]:
    """A compare.csv row per finished run under ``out`` of ``arms`` (a cut experiment reports what has finished), as
    strings, as compare.csv holds them."""
    from minionsrl.experiments.compare import Arm, run_row

    rows = []
    for arm in arms:
        for run_dir in sorted((out / "runs").glob(f"{label(arm)}__s*")):
            if (run_dir / "summary.json").exists():
                seed = int(run_dir.name.rpartition("__s")[2])
                rows.append({k: "" if v is None else str(v)
                             for k, v in run_row(Arm.parse(arm), seed, run_dir, target).items()})
    return rows


def _mean(rows: list[dict[str, str]], column: str) -> float | None:
    values = [float(r[column]) for r in rows if r[column] != ""]
    return statistics.fmean(values) if values else None


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
    out, (_, order, target) = RUNS / env, spec_of(env)
    rows = _rows(out, order, target) if (out / "runs").exists() else []
    if not rows:
        return [f"- **{env}**: not run yet", ""]
    publish(out, env)
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    fixed8, server = label("fixed:8"), label("fixed:16@server")
    seeds = {r["arm"]: sum(x["arm"] == r["arm"] for x in rows) for r in rows}
    lines = [f"### {env} (target {target:g}; finished runs per arm: "
             f"{', '.join(f'{a} {k}' for a, k in seeds.items())})", ""]
    table = []
    for arm in arms:
        split = round_split(out, arm)
        table.append([arm, ratio_text(rows, arm, fixed8, "projected_time_to_target_s"),
                      ratio_text(rows, arm, fixed8, "usd_to_target"), ratio_text(rows, arm, fixed8, "time_to_target_s"),
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
        versus = (f"against fixed-16 on servers: time {ratio_text(rows, arm, server, 'projected_time_to_target_s')}, "
                  f"dollars {ratio_text(rows, arm, server, 'usd_to_target')}" if server in arms
                  else "fixed-16 on servers not run here")
        lines.append(f"- {arm} ≤ 0.48× fixed-8's projected time at ≤ 1.0× its dollars: "
                     f"**{goal(rows, arm, fixed8, 'projected_time_to_target_s', 0.48, 1.0)}**; {versus}")
    if label("auto") in arms and (best := hindsight_best(rows, arms)) is not None:
        lines.append(f"- auto within 1.15× the time to target of the hindsight-best fixed arm ({best}: the least mean "
                     f"projected time over its seeds, a stalled seed counted at its whole run) at ≤ 1.1× its dollars: "
                     f"**{goal(rows, label('auto'), best, 'projected_time_to_target_s', 1.15, 1.1)}** (time "
                     f"{ratio_text(rows, label('auto'), best, 'projected_time_to_target_s')}, dollars "
                     f"{ratio_text(rows, label('auto'), best, 'usd_to_target')})")
    if label("minions") in arms and server in arms:
        lines.append(f"- MinionsRL's claim (minions vs fixed-16 on servers: ≤ 0.48× time, ≤ 0.14× dollars): "
                     f"**{goal(rows, label('minions'), server, 'projected_time_to_target_s', 0.48, 0.14)}** "
                     f"(time {ratio_text(rows, label('minions'), server, 'projected_time_to_target_s')}, dollars "
                     f"{ratio_text(rows, label('minions'), server, 'usd_to_target')})")
    if env in WALL and label("fixed:64") in arms:
        lines.append(f"- 64 functions reach the target in ≤ 0.2× the wall time of 8: "
                     f"**{goal(rows, label('fixed:64'), fixed8, 'time_to_target_s', 0.2, None)}** "
                     f"({ratio_text(rows, label('fixed:64'), fixed8, 'time_to_target_s')})")
    return [*lines, ""]


def report_nitro50() -> list[str]:
    lines = ["### Nitro's claim at its 50 rounds (final return ≥ fixed-16 on servers' at ≤ 0.58× its dollars)", ""]
    for name in NITRO50:
        out = RUNS / f"nitro50-{name}"
        if not (out / "compare.csv").exists():
            lines.append(f"- {name}: not run yet")
            continue
        publish(out, f"nitro50-{name}")
        rows = _rows(out, spec_of(f"nitro50-{name}")[1], None)
        nitro = [r for r in rows if r["arm"] == "nitro"]
        server = [r for r in rows if r["arm"] == label("fixed:16@server")]
        ret, base_ret = _mean(nitro, "final_eval_return"), _mean(server, "final_eval_return")
        usd, base_usd = _mean(nitro, "cost_usd"), _mean(server, "cost_usd")
        ok = ret is not None and base_ret is not None and ret >= base_ret and usd / base_usd <= 0.58
        lines.append(f"- {name} preset ({len(nitro)} seeds): nitro {ret:.0f} vs {base_ret:.0f}, dollars "
                     f"{usd / base_usd:.2f}×: **{'yes' if ok else 'no'}**")
    return [*lines, ""]


def answer() -> str:
    """Which ``n`` or scaler reaches the target in the least time, which for the fewest dollars: per env, from the
    comparisons of :data:`ANSWER`."""
    lines = ["Every arm against the fixed-8 of its own comparison, seed by seed (`bench/time_to_target.py "
             "--answer`, from the compare tables under `docs/results/time-to-target-NAME/`), priced as AWS Lambda "
             "through Lithops (`aws_lambda_x86 via lithops`, the deployment this package ships): these comparisons "
             "ran before 2026-12-02, billed on a direct Lambda invoke that no backend makes, and are re-priced by "
             "`bench/reprice.py` (its check against runs billed both ways: `docs/results/reprice.md`). *Same "
             "seeds*: over the seeds where both reached the target, the arm's mean projected seconds (or dollars) "
             "to it over fixed-8's, with a bootstrap interval (seeds resampled in pairs). *Stalls counted*: the "
             "ratio of the means over every seed, a run that never reached the target counted at its whole 1M-step "
             "run: a lower bound (≥) when the arm stalled, of unknown side (?) when fixed-8 stalled too. *Pareto*: "
             "among the arms that reached the target in every seed (as did their fixed-8), no other arm is both "
             "faster and cheaper. On the latency-bound env also the *measured wall time* (its steps wait rather "
             "than compute, so the functions overlap on this 2-core machine; unlike the projected time, it moves "
             "with the machine's load). *Why*: the time to the target is the rounds to it times the seconds a "
             "round, so each arm's ratios split, roughly, in two: the rounds its evaluation took to reach the "
             "target (the round of the first evaluation there; evaluations every 10 rounds and after the last, so "
             "a count is known to 10 rounds), against fixed-8's on the seeds both reached it, which says whether "
             "it learned as much per round; and the projected seconds and dollars a round, over each whole run, "
             f"every seed paired, which say what a round costs it (every arm samples {BATCH:,} steps a round but "
             f"the weak-scaling arms, {64 * 512:,}). The two are over different seeds and rounds, so their product "
             "is near the time or dollar ratio, not equal to it.", ""]
    for env, comparisons in ANSWER.items():
        lines += targets.answer_env(env, spec_of(env)[2] or 0.0, comparisons, DOCS.parent, wall=env in WALL,
                                    priced=lambda row, env=env: on_lithops(row, env))
    return "\n".join(lines)


# ``--record``: the comparison whose fixed counts become plan's basis for ``--target`` (minionsrl/data/targets.yaml)
RECORD = "2026-11-28-auto"
TARGETS_YAML = ROOT / "minionsrl" / "data" / "targets.yaml"


def record() -> str:
    """The env steps each seed of :data:`RECORD`'s fixed counts took to its env's target (null: never, in its 1M
    steps), per env, as ``minionsrl plan --target`` reads them; returns the YAML."""
    import yaml

    jobs = []
    for env in ENVS:
        spec, _, target = spec_of(env)
        config = yaml.safe_load(spec.read_text())["config"]
        with open(DOCS.parent / f"time-to-target-{RECORD}" / env / "compare.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        counts = sorted({int(r["arm"].split("-")[1]) for r in rows if r["arm"].startswith("fixed-")})
        steps = {n: [int(r["rounds_to_target"]) * BATCH if r["rounds_to_target"] else None
                     for r in sorted(rows, key=lambda r: int(r["seed"])) if r["arm"] == f"fixed-{n}"]
                 for n in counts}
        jobs.append({"env_id": config["env_id"], "step_latency_ms": float(config.get("env_step_latency_ms", 0.0)),
                     "target": target, "train_batch_size": BATCH, "steps_to_target": steps})
    text = ("# What plan --target forecasts from: the env steps each seed took to a target return (its first\n"
            "# evaluation there, every 10 rounds; null: not within its 1M steps), at a constant batch per round, per\n"
            f"# fixed actor count. Measured by `minionsrl compare --until target` ({RECORD}: docs/results/\n"
            f"# time-to-target-{RECORD}/), written by `bench/time_to_target.py --record`.\n"
            + yaml.safe_dump({"jobs": jobs}, sort_keys=False, default_flow_style=None))
    TARGETS_YAML.write_text(text)
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="*", default=["hopper", "latency", "halfcheetah", "nitro50"],
                        choices=[*ENVS, "nitro50"])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--arms", type=lambda s: s.split(","), default=None,
                        help="comma-separated subset of the spec's arms to run, in this order (default: all of them)")
    parser.add_argument("--reuse", action="store_true", help="only report from the runs there are")
    parser.add_argument("--name", help="a separate experiment: its runs under bench/out/ttt-NAME and its report "
                        "under docs/results/time-to-target-NAME/ (a re-run on newer code beside the published one)")
    parser.add_argument("--rerun-cold", action="store_true", help="first delete the finished runs that compiled "
                        "(see above), so that this pass runs them again with the compilation cache warm")
    parser.add_argument("--answer", action="store_true", help="only write the answer across the published "
                        "comparisons (see ANSWER) to docs/results/time-to-target-answer.md")
    parser.add_argument("--record", action="store_true", help="only write plan --target's basis, the steps to the "
                        f"target of {RECORD}'s fixed counts, to minionsrl/data/targets.yaml")
    args = parser.parse_args()
    if args.record:
        print(record())
        return
    if args.answer:
        text = answer()
        (ROOT / "docs" / "results" / "time-to-target-answer.md").write_text(
            f"# Time and dollars to a target: the answer on today's code\n\n{text}\n")
        print(text)
        return
    if args.name:
        global RUNS, DOCS
        RUNS, DOCS = RUNS.with_name(f"ttt-{args.name}"), DOCS.with_name(f"time-to-target-{args.name}")
    order = spec_of(ENVS[0])[1]  # the env specs hold the same arms
    if unknown := [a for a in args.arms or [] if a not in order]:
        parser.error(f"--arms: {', '.join(unknown)} not among {', '.join(order)}")
    if args.rerun_cold:
        for env in args.envs:
            out = RUNS / (f"nitro50-{NITRO50[0]}" if env == "nitro50" else env)
            log(f"{env}: running again, warm: {', '.join(drop_cold(out)) or 'none'}")
    if not args.reuse:
        for env in args.envs:
            run(env, args.seeds, args.arms)
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
