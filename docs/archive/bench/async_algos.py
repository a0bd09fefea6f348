"""APPO and IMPALA vs PPO at equal env steps: CartPole-v1 and Hopper-v5, return and wall time.

Every run is `make_trainer(TrainConfig(...)).run()` in a fresh process (bench/common.py), 8 actors on
the local backend, the env family's preset (CleanRL's PPO hyper-parameters; IMPALA takes one SGD step per
fragment), one 10-episode deterministic evaluation at the end. APPO/IMPALA keep 8 invocations in flight
and update after 4 fragments (the default k = n/2).

Usage: .venv/bin/python bench/async_algos.py [--seeds 3] [--cartpole-steps 50000] [--hopper-steps 300000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import common

ALGOS = ("ppo", "appo", "impala")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--cartpole-steps", type=int, default=50_000)
    parser.add_argument("--hopper-steps", type=int, default=300_000)
    parser.add_argument("--envs", default="CartPole-v1,Hopper-v5")
    args = parser.parse_args()
    steps = {"CartPole-v1": args.cartpole_steps, "Hopper-v5": args.hopper_steps}
    out = common.OUT / "async_algos.jsonl"
    out.unlink(missing_ok=True)
    started = time.time()
    results: list[dict] = []
    for env in args.envs.split(","):
        for seed in range(1, args.seeds + 1):  # seed-major: a cut run still compares every algorithm
            for algo in ALGOS:
                run_dir = common.OUT / f"async-{env}-{algo}-{seed}-{time.strftime('%H%M%S')}"
                config = {"env_id": env, "algo": algo, "seed": seed, "actors": 8, "total_timesteps": steps[env],
                          "eval_every": 0, "eval_episodes": 10, "progress": False, "tensorboard": False,
                          "run_dir": str(run_dir)}
                common.log(f"{env} {algo} seed {seed}")
                summary = common.run_minionsrl(config, timeout_s=1800)
                from minionsrl.loop.metrics import read_metrics

                rows = read_metrics(run_dir)
                lags = [float(r["policy_lag_mean"]) for r in rows if r.get("policy_lag_mean")]
                record = {"env": env, "algo": algo, "seed": seed, "steps": summary["env_steps"],
                          "eval": summary["final_eval_return"], "train100": summary["train_return_last100"],
                          "wall_s": summary["wall_s"], "process_wall_s": summary["process_wall_s"],
                          "updates": summary["rounds"], "lag": statistics.fmean(lags) if lags else 0.0}
                common.append_jsonl(out, record)
                results.append(record)
                common.log(str(record))
            write(results, args, started, steps)


def write(results: list[dict], args: argparse.Namespace, started: float, steps: dict[str, int]) -> None:
    per_seed, summary = [], []
    for env in dict.fromkeys(r["env"] for r in results):
        ppo_wall = statistics.median([r["wall_s"] for r in results if r["env"] == env and r["algo"] == "ppo"] or [0])
        for algo in ALGOS:
            rs = [r for r in results if r["env"] == env and r["algo"] == algo]
            if not rs:
                continue
            evals = [r["eval"] for r in rs]
            wall = statistics.median(r["wall_s"] for r in rs)
            summary.append([env, algo, len(rs), f"{rs[0]['steps']:,}", statistics.fmean(evals),
                            statistics.pstdev(evals) if len(evals) > 1 else 0.0,
                            common.mean([r["train100"] for r in rs]), wall,
                            statistics.median(r["steps"] / r["wall_s"] for r in rs),
                            wall / ppo_wall if ppo_wall else None, statistics.fmean(r["lag"] for r in rs)])
            per_seed += [[env, algo, r["seed"], r["eval"], r["train100"], r["wall_s"], r["process_wall_s"],
                          r["updates"], r["lag"]] for r in rs]
    text = f"""## 5. APPO and IMPALA vs PPO at equal env steps (CartPole-v1, Hopper-v5)

Each run: `make_trainer(TrainConfig(env_id=ENV, algo=ALGO, seed=s, actors=8, total_timesteps=STEPS,
eval_every=0, eval_episodes=10)).run()` in a fresh process on the local backend, with the family's preset
(`classic`: T = 128, 4 epochs of 128; `mujoco`: T = 512, 10 epochs of 64, observation and reward normalisation;
IMPALA: one pass, one SGD step per fragment, each scored with V-trace under the current policy).
PPO waits for all 8 fragments each round; APPO and IMPALA keep 8 invocations in flight and
update once 4 have arrived (k = n/2), correcting the lag with V-trace (ρ̄ = c̄ = 1, λ = `gae_lambda`).
Steps: CartPole-v1 {steps['CartPole-v1']:,}, Hopper-v5 {steps['Hopper-v5']:,} (sized to fit this session's time on
2 shared cores; Hopper is far from converged at that length — CleanRL reports 2383 at 1M). "eval" is the final
10-episode deterministic evaluation; "train" the mean of the last 100 training episodes; "wall" the run's own
`wall_s` (median over seeds); "lag" the mean policy lag in updates of the fragments used.

{common.markdown_table(["env", "algo", "seeds", "steps", "eval (mean)", "eval (std)", "train (last 100)", "wall s",
                        "steps/s", "wall / PPO", "lag"], summary, [0, 0, 0, 0, 1, 1, 1, 1, 0, 2, 2])}

<details><summary>Per seed</summary>

{common.markdown_table(["env", "algo", "seed", "eval", "train (last 100)", "wall s (run)", "wall s (process)",
                        "updates", "lag"], per_seed, [0, 0, 0, 1, 1, 1, 1, 0, 2])}

</details>

{common.provenance(started)}
"""
    common.write_section("async_algos", text)


if __name__ == "__main__":
    main()
