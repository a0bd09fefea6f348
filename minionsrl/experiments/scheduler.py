"""``minionsrl scheduler train``: train the learned scheduler (DESIGN §2.2) over whole training jobs.

Each job is one ordinary run of the base config whose scaler is a sampling
:class:`~minionsrl.scaling.minions.MinionsScaler`; after it, the agent takes one PPO update on the
job's trajectory. The artefact is written with :func:`~minionsrl.scaling.minions.save_agent`, beside
its learning curve (CSV and PNG).
"""

from __future__ import annotations

import csv
import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from minionsrl.config import TrainConfig
from minionsrl.experiments.plots import line_plot
from minionsrl.learner.ppo import clipped_surrogate
from minionsrl.scaling.minions import Episode, MinionsScaler, SchedulerAgent, SchedulerHyper, load_agent, save_agent

CURVE_COLUMNS = ["job", "episode_return", "rounds", "reached", "best_eval_return", "projected_cloud_s", "wall_s",
                 "mean_actors", "cost_serverless_usd"]


def ppo_update(agent: SchedulerAgent, optimizer: torch.optim.Optimizer, episode: Episode,
               hyper: SchedulerHyper) -> dict[str, float]:
    """PPO on one job's trajectory with Monte-Carlo returns."""
    steps = episode.transitions
    returns, g = [], 0.0
    for t in reversed(steps):
        g = t.reward + hyper.gamma * g
        returns.append(g)
    returns_t = torch.tensor(returns[::-1], dtype=torch.float32)
    states = torch.from_numpy(np.stack([t.state for t in steps]))
    actions = torch.tensor([t.action for t in steps])
    old_logp = torch.tensor([t.logprob for t in steps])
    with torch.no_grad():
        adv = returns_t - agent.critic(states).squeeze(-1)
        if len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    for _ in range(hyper.epochs):
        dist = agent.distribution(states)
        ratio = (dist.log_prob(actions) - old_logp).exp()
        pg = clipped_surrogate(adv, ratio, hyper.clip_coef)
        v_loss = 0.5 * ((agent.critic(states).squeeze(-1) - returns_t) ** 2).mean()
        loss = pg - hyper.ent_coef * dist.entropy().mean() + 0.5 * v_loss
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
        optimizer.step()
    return {"episode_return": float(returns[-1]), "policy_loss": pg.item(), "value_loss": v_loss.item()}


def train_scheduler(base: TrainConfig, jobs: int, target: float, out: str | Path, n_max: int = 64,
                    hyper: SchedulerHyper | None = None,
                    on_job: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """Train the scheduler over ``jobs`` complete training jobs of ``base``; save it and its curve."""
    from minionsrl.build import make_trainer

    hyper = SchedulerHyper() if hyper is None else hyper
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(base.seed)
    agent = SchedulerAgent(n_max)
    curve_path = out.with_suffix(".curve.csv")
    done = _jobs_done(curve_path) if out.exists() else 0
    if done:  # a training cut short goes on from its last saved agent (the optimiser's moments start afresh)
        agent, _ = load_agent(out)
    optimizer = torch.optim.Adam(agent.parameters(), lr=hyper.learning_rate)
    meta = {"env_id": base.env_id, "target_return": target, "max_rounds": base.max_rounds,
            "hyper": dataclasses.asdict(hyper), "curve": curve_path.name}
    with open(curve_path, "a" if done else "w", newline="") as fh:
        writer = csv.DictWriter(fh, CURVE_COLUMNS)
        if not done:
            writer.writeheader()
        for job in range(done + 1, jobs + 1):
            cfg = dataclasses.replace(base, seed=base.seed * 100_000 + job, target_return=target, progress=False,
                                      tensorboard=False, run_dir=tempfile.mkdtemp(prefix=f"minionsrl-job{job}-"))
            scaler = MinionsScaler(agent, cfg.n_min, cfg.n_max, return_scale=abs(target) or 1.0,
                                   horizon=cfg.max_rounds or 100, budget_usd=cfg.budget_usd, explore=True,
                                   hyper=hyper, seed=job)
            trainer = make_trainer(cfg, scaler=scaler)
            started = time.perf_counter()
            summary = trainer.run()
            episode = scaler.episode
            episode.transitions[-1].reward = scaler.round_reward(trainer.last_row)
            best = summary["best_eval_return"] if summary["best_eval_return"] is not None else 0.0
            reached = best >= target
            if not reached:
                episode.transitions[-1].reward += best - target
            stats = ppo_update(agent, optimizer, episode, hyper)
            row = {"job": job, "episode_return": stats["episode_return"], "rounds": summary["rounds"],
                   "reached": reached, "best_eval_return": best, "projected_cloud_s": summary["projected_cloud_s"],
                   "wall_s": time.perf_counter() - started,
                   "mean_actors": float(np.mean([t.action + 1 for t in episode.transitions])),
                   "cost_serverless_usd": summary["cost_usd"]["serverless"]}
            writer.writerow(row)
            fh.flush()
            save_agent(agent, out, {**meta, "jobs": job})  # after every job: a cut training loses at most one
            shutil.rmtree(cfg.run_dir, ignore_errors=True)
            if on_job is not None:
                on_job(row)
    plot_curve(curve_path, out.with_suffix(".curve.png"))
    return out


def _jobs_done(curve_csv: Path) -> int:
    """Jobs already in a learning curve (0 when there is none)."""
    if not curve_csv.exists():
        return 0
    with open(curve_csv, newline="") as fh:
        return sum(1 for _ in csv.DictReader(fh))


def plot_curve(curve_csv: str | Path, png: str | Path, window: int = 10) -> Path:
    """The scheduler's learning curve: MDP return and projected job time per job (moving averages)."""
    with open(curve_csv, newline="") as fh:
        rows = list(csv.DictReader(fh))
    jobs = [int(r["job"]) for r in rows]

    def smooth(key: str) -> np.ndarray:
        values = np.array([float(r[key]) for r in rows])
        return np.array([values[max(0, i - window + 1) : i + 1].mean() for i in range(len(values))])

    return line_plot({"MDP return (per job)": (jobs, smooth("episode_return")),
                      "projected job time / 10 s": (jobs, smooth("projected_cloud_s") / 10.0),
                      "mean actors / 10": (jobs, smooth("mean_actors") / 10.0)},
                     "job", f"moving average over {window} jobs", "MinionsRL scheduler training", png)
