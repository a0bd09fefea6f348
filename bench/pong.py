"""Pong learning curve on this CPU: PPO with the `atari` preset (CleanRL's ppo_atari.py settings) for a
wall-clock budget, 8 local actors, reporting training returns (full games) and steps/s as it goes.

Usage: .venv/bin/python bench/pong.py [--minutes 25] [--seed 1] [--learner-threads 2] [--envs-per-function 1]
                                      [--device auto|cpu|cuda]
The rows go to bench/out/pong.jsonl as each round ends; the section is rewritten every 20 rounds, so a
cut run still leaves its curve. The learning rate anneals over the preset's 10M steps, as CleanRL's does.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import common

ENV = "ALE/Pong-v5"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=25.0, help="wall-clock budget of the training run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--actors", type=int, default=8)
    parser.add_argument("--learner-threads", type=int, default=2,
                        help="the update's threads: the rollout functions idle while PPO learns, so both cores")
    parser.add_argument("--envs-per-function", type=int, default=1)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="the learner's device")
    args = parser.parse_args()

    from minionsrl.build import make_trainer
    from minionsrl.config import TrainConfig

    out = common.OUT / "pong.jsonl"
    out.unlink(missing_ok=True)
    started = time.time()
    run_dir = common.OUT / f"pong-run-{time.strftime('%Y%m%d-%H%M%S')}"
    cfg = TrainConfig(env_id=ENV, actors=args.actors, seed=args.seed, eval_every=0,
                      learner_threads=args.learner_threads, envs_per_function=args.envs_per_function, detectors="off",
                      device=args.device,
                      progress=False, tensorboard=False, checkpoint_every=20, run_dir=str(run_dir))
    trainer = make_trainer(cfg)
    rows: list[dict] = []
    try:
        while time.time() - started < args.minutes * 60:
            row = trainer.run_round().to_row()
            record = {k: row.get(k) for k in ("round", "env_steps", "wall_s", "train_return_mean", "episodes",
                                               "sample_s", "learn_s", "round_s", "sps", "entropy", "approx_kl")}
            record["returns"] = [float(x) for x in list(trainer.state.recent_returns)[-row["episodes"]:]] \
                if row["episodes"] else []
            rows.append(record)
            common.append_jsonl(out, record)
            common.log(f"round {row['round']} steps {row['env_steps']} wall {row['wall_s']:.0f}s "
                       f"return {row['train_return_mean']} sps {row['sps']:.0f}")
            if row["round"] % 20 == 0:
                write(rows, args, started, trainer.cfg)
    finally:
        trainer.close()
    write(rows, args, started, trainer.cfg)


def write(rows: list[dict], args: argparse.Namespace, started: float, cfg) -> None:
    if not rows:
        return
    table = [[row["round"], row["env_steps"], 4 * row["env_steps"], row["wall_s"], row["env_steps"] / row["wall_s"],
              games, last20] for row, games, last20 in tenths(rows)]
    last = rows[-1]
    learn = sum(r["learn_s"] for r in rows)
    sample = sum(r["sample_s"] for r in rows)
    plot = plot_curve(rows, common.ROOT / "docs" / "results" / "pong_curve.png", "ALE/Pong-v5, PPO, CPU")
    text = f"""## 6. Pong (ALE/Pong-v5) learning curve on this CPU, PPO

PPO with the `atari` preset (CleanRL's `ppo_atari.py` settings: lr 2.5e-4 annealed over 10M steps, T = 128,
{cfg.scaling.actors} actors, 4 epochs of minibatch 256, clip 0.1, entropy 0.01), the standard preprocessing
(no-op reset, frame skip 4 with max-pooling, 84×84 grey, 4 stacked frames, episodic life and sign-clipped rewards
for the learning signal only, v5's sticky actions kept), episodes carried across rounds (ALE state), the JAX
learner on {cfg.learner.learner_threads} thread(s), {cfg.env.envs_per_function} env(s) per function,
{common.n_cores()} cores shared with other work, for a wall-clock budget of {args.minutes:g} min. Returns are
full games of raw rewards (−21…21) from the training actors, mean of the last 20 finished games.
The GPU learner's Pong (2 min on an H100, `--device cuda`) is in §14; the 10M-frame run (CleanRL reports
20.4) would take about 25 min there and is not done.

| round | env steps | frames | wall s | steps/s | games finished | return (last 20 games) |
|---:|---:|---:|---:|---:|---:|---:|
""" + "\n".join("| " + " | ".join(common.fmt(c, 1) for c in r) + " |" for r in table) + f"""

Throughput: {last['env_steps']:,} steps ({4 * last['env_steps']:,} frames) in {last['wall_s']:.0f} s =
{last['env_steps'] / last['wall_s']:.0f} steps/s overall; of the time, sampling (rollout functions) {sample:.0f} s
and the learner's update {learn:.0f} s. {plot}

{common.provenance(started)}
"""
    common.write_section("pong", text)


def tenths(rows: list[dict]) -> list[tuple[dict, int, float | None]]:
    """The rounds at each tenth of the run, each with the games finished by then and the mean of the last 20."""
    marks = {max(1, round(len(rows) * f / 10)) for f in range(1, 11)}
    out, games = [], []
    for row in rows:
        games.extend(row["returns"])
        if row["round"] in marks:
            last = games[-20:]
            out.append((row, len(games), sum(last) / len(last) if last else None))
    return out


def plot_curve(rows: list[dict], path: Path, title: str) -> str:
    """Every finished game's return against frames, and the mean of the last 20, as a PNG at ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ""
    steps, rets = [], []
    for row in rows:
        for r in row["returns"]:
            steps.append(4 * row["env_steps"])
            rets.append(r)
    if not rets:
        return ""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, rets, ".", alpha=0.4, label="game")
    k = 20
    if len(rets) >= k:
        avg = [sum(rets[i - k + 1 : i + 1]) / k for i in range(k - 1, len(rets))]
        ax.plot(steps[k - 1 :], avg, "-", label=f"mean of last {k}")
    ax.set_xlabel("frames")
    ax.set_ylabel("game return")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return f"Curve: `{path.resolve().relative_to(common.ROOT)}`."


if __name__ == "__main__":
    main()
