"""The MinionsRL learned scheduler (SPEC §2.2): a small PPO agent that picks each round's actor count.

The MDP's episode is one whole training job. State (normalised, 8 numbers): round index, learner
loss, mean evaluation return, KL, learner time, actor time, round time, remaining budget (capped at
1, so an infinite budget never reaches the network). Action: the number of actors, ``1..n_max``
(categorical). Reward per round: ``−β · round_seconds`` (the *projected cloud* round time, since on
a function platform actors run side by side), optionally ``− λ · round_dollars`` (budget-aligned),
plus at the end, if the target return was not reached, ``best_return − target``.

The agent is PPO with separate 64-64 tanh actor and critic, lr 1e-3, γ 0.99, clip 0.2, Monte-Carlo
returns and entropy 0.01, updated after every job. Artefacts are safetensors files (weights plus JSON
metadata: no pickle). ``minionsrl scheduler train`` makes one; the package ships one.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.scaling.rules import Scaler, as_finite

STATE_DIM = 8
SHIPPED = "scheduler-cartpole.safetensors"


@dataclass(frozen=True)
class SchedulerHyper:
    """The agent's hyper-parameters (SPEC §2.2) and the reward's coefficients."""

    learning_rate: float = 1e-3
    gamma: float = 0.99
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    epochs: int = 4
    beta: float = 0.1  # per projected round-second
    lam: float = 0.0  # per round-dollar ("budget-aligned" when > 0)


class SchedulerAgent(nn.Module):
    """Categorical actor over ``1..n_max`` and a value critic, separate 64-64 tanh MLPs."""

    def __init__(self, n_max: int) -> None:
        super().__init__()
        self.n_max = n_max

        def mlp(n_out: int, std: float) -> nn.Sequential:
            layers = [nn.Linear(STATE_DIM, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, n_out)]
            for layer in layers:
                if isinstance(layer, nn.Linear):
                    nn.init.orthogonal_(layer.weight, std if layer is layers[-1] else math.sqrt(2))
                    nn.init.zeros_(layer.bias)
            return nn.Sequential(*layers)

        self.actor = mlp(n_max, 0.01)
        self.critic = mlp(1, 1.0)

    def distribution(self, states: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.actor(states))


def save_agent(agent: SchedulerAgent, path: str | Path, metadata: dict[str, Any]) -> None:
    """Write the agent as a safetensors file with JSON metadata."""
    save_file({k: v.contiguous() for k, v in agent.state_dict().items()}, str(path),
              metadata={"minionsrl": json.dumps({"n_max": agent.n_max, **metadata})})


def load_agent(path: str | Path | None) -> tuple[SchedulerAgent, dict[str, Any]]:
    """Read a scheduler artefact (the shipped one when ``path`` is None)."""
    if path is None:
        path = resources.files("minionsrl").joinpath("data", SHIPPED)
    if not Path(str(path)).is_file():
        raise ConfigError(f"scheduler: file {str(path)!r} does not exist; train one with `minionsrl scheduler train`")
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = json.loads(fh.metadata()["minionsrl"])
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - safe_open has no __iter__
        agent = SchedulerAgent(int(meta["n_max"]))
        agent.load_state_dict(tensors)
    except (OSError, KeyError, ValueError, RuntimeError, SafetensorError) as exc:
        raise ConfigError(f"scheduler: {str(path)!r} is not a minionsrl scheduler ({exc})") from exc
    return agent, meta


def _signed_log(x: float) -> float:
    return math.copysign(math.log1p(abs(x)), x)


@dataclass
class Transition:
    state: np.ndarray
    action: int
    logprob: float
    reward: float = 0.0


@dataclass
class Episode:
    """One job's trajectory, filled while the scaler runs."""

    transitions: list[Transition] = field(default_factory=list)


class MinionsScaler(Scaler):
    """Picks ``n`` with the learned agent; greedy when deployed, sampling while it is being trained."""

    name = "minions"

    def __init__(self, agent: SchedulerAgent, cfg: TrainConfig, return_scale: float, explore: bool = False,
                 hyper: SchedulerHyper = SchedulerHyper(), seed: int = 0) -> None:
        super().__init__(cfg.n_min, min(cfg.n_max, agent.n_max))
        self.agent, self.cfg, self.return_scale, self.explore, self.hyper = agent, cfg, return_scale, explore, hyper
        self.generator = torch.Generator().manual_seed(seed)
        self.last_eval = 0.0
        self.episode = Episode()

    def state(self, row: dict[str, Any] | None) -> np.ndarray:
        """The normalised MDP state after ``row`` (zeros before the first round)."""
        if row is None:
            return np.zeros(STATE_DIM, dtype=np.float32)
        if row.get("eval_return_mean") is not None:
            self.last_eval = float(row["eval_return_mean"])
        cfg = self.cfg
        horizon = cfg.max_rounds or 100
        spent = float(row["cum_cost_serverless_usd"])
        budget = 1.0 if cfg.budget_usd is None else max(0.0, 1.0 - spent / cfg.budget_usd)
        loss = (as_finite(row.get("policy_loss")) or 0.0) + (as_finite(row.get("value_loss")) or 0.0)
        return np.array([
            int(row["round"]) / horizon, _signed_log(loss), self.last_eval / self.return_scale,
            min((as_finite(row.get("approx_kl")) or 0.0) * 100.0, 10.0), math.log1p(float(row["learn_s"])),
            math.log1p(float(row["sample_s"])), math.log1p(float(row["round_s"])), min(budget, 1.0),
        ], dtype=np.float32)

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        if self.explore and last_round is not None and self.episode.transitions:
            self.episode.transitions[-1].reward = self.round_reward(last_round)
        state = self.state(last_round)
        with torch.no_grad():
            probs = self.agent.distribution(torch.from_numpy(state)[None]).probs[0]
        if self.explore:
            action = int(torch.multinomial(probs, 1, generator=self.generator))
            self.episode.transitions.append(Transition(state, action, float(torch.log(probs[action]))))
        else:
            action = int(probs.argmax())
        self.score = float(probs[action])
        return self.clip(action + 1)

    def round_reward(self, row: dict[str, Any]) -> float:
        return -self.hyper.beta * float(row["projected_round_s"]) - self.hyper.lam * float(row["cost_serverless_usd"])

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "last_eval": self.last_eval}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.last_eval = float(state["last_eval"])


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
        pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - hyper.clip_coef, 1 + hyper.clip_coef)).mean()
        v_loss = 0.5 * ((agent.critic(states).squeeze(-1) - returns_t) ** 2).mean()
        loss = pg - hyper.ent_coef * dist.entropy().mean() + 0.5 * v_loss
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
        optimizer.step()
    return {"episode_return": float(returns[-1]), "policy_loss": pg.item(), "value_loss": v_loss.item()}


def train_scheduler(base: TrainConfig, jobs: int, target: float, out: str | Path, n_max: int = 64,
                    hyper: SchedulerHyper = SchedulerHyper(),
                    on_job: Callable[[dict[str, Any]], None] | None = None) -> Path:
    """Train the scheduler over ``jobs`` complete training jobs of ``base``; save it and its curve."""
    from minionsrl.loop.trainer import make_trainer

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(base.seed)
    agent = SchedulerAgent(n_max)
    optimizer = torch.optim.Adam(agent.parameters(), lr=hyper.learning_rate)
    curve_path = out.with_suffix(".curve.csv")
    columns = ["job", "episode_return", "rounds", "reached", "best_eval_return", "projected_cloud_s", "wall_s",
               "mean_actors", "cost_serverless_usd"]
    with open(curve_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, columns)
        writer.writeheader()
        for job in range(1, jobs + 1):
            cfg = dataclasses.replace(base, seed=base.seed * 100_000 + job, target_return=target, progress=False,
                                      tensorboard=False, run_dir=tempfile.mkdtemp(prefix=f"minionsrl-job{job}-"))
            scaler = MinionsScaler(agent, cfg, return_scale=abs(target) or 1.0, explore=True, hyper=hyper, seed=job)
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
            shutil.rmtree(cfg.run_dir, ignore_errors=True)
            if on_job is not None:
                on_job(row)
    plot_curve(curve_path, out.with_suffix(".curve.png"))
    save_agent(agent, out, {"env_id": base.env_id, "jobs": jobs, "target_return": target, "max_rounds": base.max_rounds,
                            "hyper": dataclasses.asdict(hyper), "curve": curve_path.name})
    return out


def plot_curve(curve_csv: str | Path, png: str | Path, window: int = 10) -> Path:
    """The scheduler's learning curve: MDP return and projected job time per job (moving averages)."""
    from minionsrl.experiments.plots import line_plot

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
