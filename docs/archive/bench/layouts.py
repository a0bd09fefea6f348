"""Learning per round across layouts (issue 21): at a constant batch, do many short fragments learn worse?

Every arm trains with the MuJoCo preset and ``--batch-size 4096``: n functions each step 4096 / n steps, so
every round learns on the same 4,096 samples and rounds are equal env steps across arms. Arms 8x512, 32x128,
64x64, 128x32; Hopper-v5 for 300k steps (74 rounds) or HalfCheetah-v5 for 491,520 (120 rounds). ``--engine sb3``
runs Stable-Baselines3's PPO on the same layouts (n_envs x n_steps) and the same hyper-parameters (VecNormalize,
the rate annealed, 10 epochs of 64-sample minibatches), evaluated as ours is: is a layout's gap ours, or PPO's?
Two trainings at a time; each finished run appends one JSON line to bench/out/layouts.jsonl, and a run already
there (or whose summary.json exists) is not run again, so a cut session resumes where it stopped.

    .venv/bin/python bench/layouts.py                 # Hopper, ours: run what is missing, then print the table per
                                                      # arm and the eval return per round (vs 8x512)
    .venv/bin/python bench/layouts.py --reuse         # only re-render from bench/out/layouts.jsonl
    .venv/bin/python bench/layouts.py --seeds 6 7 8 9 10   # more seeds (the table shows --seeds only)
    .venv/bin/python bench/layouts.py --env halfcheetah --engine sb3   # SB3 (`make .venv/.bench` installs it)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from common import OUT, ROOT, load_average, load_jsonl, log, markdown_table, run_all, run_sb3

from minionsrl.config.presets import PRESETS
from minionsrl.experiments.compare import bootstrap_ci, diff_bootstrap_ci
from minionsrl.function.normalization import CLIP_DEFAULT
from minionsrl.loop.metrics import read_metrics

RESULTS = OUT / "layouts.jsonl"
CLI = str(Path(sys.executable).parent / "minionsrl")
ARMS = (8, 32, 64, 128)
BATCH = 4096
EVAL_EVERY, EVAL_EPISODES = 10, 5
# per env: the Gymnasium id, the steps of a run (a whole number of rounds for HalfCheetah), and the rounds whose
# eval return the table shows (equal rounds are equal env steps: every arm has the same batch)
ENVS = {"hopper": ("Hopper-v5", 300_000, (30, 60)), "halfcheetah": ("HalfCheetah-v5", 120 * BATCH, (40, 80))}


def run_dir(env: str, engine: str, actors: int, seed: int) -> Path:
    # Hopper's runs by our engine keep the directory names of the first measurement (docs/LAYOUTS.md)
    prefix = "" if (env, engine) == ("hopper", "minionsrl") else f"{env}-{engine}-"
    return OUT / "layouts" / f"{prefix}a{actors}-s{seed}"


def command(env: str, actors: int, seed: int, path: Path | None = None) -> list[str]:
    """``minionsrl train``'s arguments for one run (``path``: its run folder, by default :func:`run_dir`'s)."""
    env_id, steps, _ = ENVS[env]
    return ["train", "--env-id", env_id, "--preset", "mujoco", "--total-timesteps", str(steps), "--batch-size",
            str(BATCH), "--max-concurrency", "16", "--eval-every", str(EVAL_EVERY), "--eval-episodes",
            str(EVAL_EPISODES), "--no-progress", "--no-tensorboard", "--actors", str(actors), "--seed", str(seed),
            "--run-dir", str(path or run_dir(env, "minionsrl", actors, seed))]


def is_run_of(r: dict[str, Any], env: str, engine: str) -> bool:
    """Whether the record ``r`` is a run of ``env`` by ``engine`` (the first records, Hopper by ours, carry
    neither key)."""
    return (r.get("env", "hopper"), r.get("engine", "minionsrl")) == (env, engine)


def run_train(path: Path, argv: list[str], what: str) -> None:
    """Run ``argv`` (a ``minionsrl train`` into ``path``) unless ``path`` holds a finished run; a cut run starts
    over. RuntimeError, naming ``what``, if it fails."""
    if (path / "summary.json").exists():
        return
    shutil.rmtree(path, ignore_errors=True)
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{proc.stderr[-2000:]}")


def sb3_layout(actors: int) -> dict[str, Any]:
    """SB3 PPO's settings for one layout: the MuJoCo preset's values under SB3's names. Left at SB3's own: the
    value loss is not clipped (``clip_range_vf=None``; CleanRL and the preset clip it at 0.2)."""
    p = PRESETS["mujoco"]
    ppo = dict(n_steps=BATCH // actors, batch_size=p["minibatch_size"], n_epochs=p["update_epochs"],
               learning_rate=p["learning_rate"], gamma=p["gamma"], gae_lambda=p["gae_lambda"],
               clip_range=p["clip_coef"], ent_coef=p["ent_coef"], vf_coef=p["vf_coef"],
               max_grad_norm=p["max_grad_norm"], normalize_advantage=p["norm_adv"])
    return {"n_envs": actors, "ppo": ppo, "anneal_lr": p["anneal_lr"],
            "normalize": p["normalize_obs"] and p["normalize_reward"], "clip": CLIP_DEFAULT, "eval_every": EVAL_EVERY}


def record(env: str, actors: int, seed: int, path: Path | None = None) -> dict[str, Any]:
    """One finished run of ours, from its summary.json and metrics.csv (in ``path``, by default :func:`run_dir`)."""
    path = path or run_dir(env, "minionsrl", actors, seed)
    summary = json.loads((path / "summary.json").read_text())
    rows = read_metrics(path)
    evals = {str(int(float(r["round"]))): float(r["eval_return_mean"]) for r in rows if r.get("eval_return_mean")}
    return {"env": env, "engine": "minionsrl", "actors": actors, "seed": seed, "rounds": summary["rounds"],
            "env_steps": summary["env_steps"], "wall_s": summary["wall_s"], "final_eval": summary["final_eval_return"],
            "best_eval": summary["best_eval_return"], "train_last100": summary["train_return_last100"],
            "projected_cloud_s": summary["projected_cloud_s"], "cost_usd": summary["cost_usd"]["serverless"],
            "projected_round_s": statistics.median(float(r["projected_round_s"]) for r in rows[1:] or rows),
            "evals": evals, "load": load_average()}


def train(env: str, engine: str, actors: int, seed: int) -> dict[str, Any]:
    if engine == "sb3":
        env_id, steps, _ = ENVS[env]
        res = run_sb3(env_id, seed, steps, eval_episodes=EVAL_EPISODES, layout=sb3_layout(actors), timeout_s=3600)
        final = res["evals"][str(res["rounds"])]
        return {"env": env, "engine": engine, "actors": actors, "seed": seed, "rounds": res["rounds"],
                "env_steps": res["env_steps"], "wall_s": res["process_wall_s"], "final_eval": final,
                "evals": res["evals"], "load": load_average()}
    run_train(run_dir(env, engine, actors, seed), [CLI, *command(env, actors, seed)],
              f"{actors}x{BATCH // actors} seed {seed}")
    return record(env, actors, seed)


def mean_ci(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:,.0f}" if values else "—"
    lo, hi = bootstrap_ci(values)
    return f"{np.mean(values):,.0f} [{lo:,.0f}, {hi:,.0f}]"


def diff_ci(a: list[float], b: list[float], draws: int = 2000, seed: int = 0) -> str:
    """Mean of a minus mean of b, with a percentile bootstrap interval (each arm resampled on its own)."""
    if len(a) < 2 or len(b) < 2:
        return "—"
    lo, hi = diff_bootstrap_ci(a, b, draws=draws, seed=seed)
    return f"{np.mean(a) - np.mean(b):+,.0f} [{lo:+,.0f}, {hi:+,.0f}]"


def table(records: list[dict[str, Any]], at_rounds: tuple[int, ...]) -> str:
    """One row per arm: means over seeds with bootstrap 95% intervals, and the final eval against 8x512.
    SB3's runs have no train return, projected time or dollars: those cells are blank."""
    def mean_of(rs: list[dict[str, Any]], key: str, show: Any) -> Any:
        values = [r[key] for r in rs if key in r]
        return show(values) if len(values) == len(rs) else ""

    rows = []
    ref = [r["final_eval"] for r in records if r["actors"] == ARMS[0]]
    for n in ARMS:
        rs = sorted((r for r in records if r["actors"] == n), key=lambda r: r["seed"])
        if not rs:
            continue
        final = [r["final_eval"] for r in rs]
        at = [mean_ci([r["evals"][str(k)] for r in rs if str(k) in r["evals"]]) for k in at_rounds]
        every = mean_ci([statistics.fmean(r["evals"].values()) for r in rs])
        rows.append([f"{n}x{BATCH // n}", ",".join(str(r["seed"]) for r in rs), mean_ci(final),
                     diff_ci(final, ref) if n != ARMS[0] else "—", mean_of(rs, "train_last100", mean_ci), *at,
                     every, mean_of(rs, "projected_round_s", statistics.median),
                     mean_of(rs, "projected_cloud_s", statistics.fmean), mean_of(rs, "cost_usd", statistics.fmean)])
    headers = ["layout", "seeds", "final eval return", f"vs {ARMS[0]}x{BATCH // ARMS[0]}", "train return last100",
               *(f"eval @ round {k}" for k in at_rounds), "mean of all evals", "median projected round s",
               "projected s / run", "serverless $ / run"]
    return markdown_table(headers, rows, digits=[0] * (6 + len(at_rounds)) + [2, 0, 4])


def curve(records: list[dict[str, Any]]) -> str:
    """Eval return at each evaluated round: the mean per arm and, beside it, the difference to 8x512."""
    def at(n: int, k: str) -> list[float]:
        return [r["evals"][k] for r in records if r["actors"] == n and k in r["evals"]]

    arms = [n for n in ARMS if any(r["actors"] == n for r in records)]
    rounds = sorted({k for r in records for k in r["evals"]}, key=int)
    rows = [[f"{k} ({round(int(k) * BATCH / 1000)}k)", *(f"{np.mean(at(n, k)):,.0f}" + (
        f" ({diff_ci(at(n, k), at(ARMS[0], k))})" if n != ARMS[0] else "") for n in arms)] for k in rounds]
    return markdown_table(["round (env steps)", *(f"{n}x{BATCH // n}" for n in arms)], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", action="store_true", help="only re-render from the results already measured")
    parser.add_argument("--env", choices=sorted(ENVS), default="hopper", help="the env (default: hopper)")
    parser.add_argument("--engine", choices=("minionsrl", "sb3"), default="minionsrl",
                        help="whose PPO trains (sb3: Stable-Baselines3, from `make .venv/.bench`)")
    parser.add_argument("--arms", type=int, nargs="+", default=list(ARMS), choices=ARMS,
                        help="the layouts to run and tabulate, by function count")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="run and tabulate these")
    parser.add_argument("--jobs", type=int, default=2, help="trainings at a time (the machine has 2 cores)")
    args = parser.parse_args()

    def ours(r: dict[str, Any]) -> bool:
        return is_run_of(r, args.env, args.engine)

    if not args.reuse:
        done = {(r["actors"], r["seed"]) for r in load_jsonl(RESULTS) if ours(r)}
        todo = [(n, s) for s in args.seeds for n in args.arms if (n, s) not in done]
        log(f"{len(todo)} runs of {args.env} ({args.engine}) to go")
        run_all([(args.env, args.engine, n, s) for n, s in todo], train,
                lambda _env, _engine, n, s: f"{n}x{BATCH // n} seed {s}", RESULTS, args.jobs)
    records = [r for r in load_jsonl(RESULTS) if ours(r) and r["seed"] in args.seeds and r["actors"] in args.arms]
    print(table(records, ENVS[args.env][2]), curve(records), sep="\n\n")


if __name__ == "__main__":
    main()
