"""The MinionsRL learned scheduler (DESIGN §2.2): a small PPO agent that picks each round's actor count.

The MDP's episode is one whole training job. State (normalised): round index, learner loss, mean
evaluation return, KL, learner time, actor time, round time, remaining budget (capped at 1, so an
infinite budget never reaches the network) and, for schedulers trained since, the gradient noise
scale. Action: the number of actors, ``1..n_max`` (categorical). Reward per round:
``−β · round_seconds`` (the *projected cloud* round time, since on a function platform actors run side
by side), optionally ``− λ · round_dollars`` (budget-aligned), plus at the end, if the target return was
not reached, ``best_return − target``.

The agent is PPO with separate 64-64 tanh actor and critic, lr 1e-3, γ 0.99, clip 0.2, Monte-Carlo
returns and entropy 0.01, updated after every job. Artefacts are safetensors files (weights plus JSON
metadata: no pickle). ``minionsrl scheduler train`` makes one (the training lives in
:mod:`minionsrl.experiments.scheduler`); the package ships one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn

from minionsrl.errors import ConfigError
from minionsrl.learner.networks import mlp
from minionsrl.scaling.base import Scaler, as_finite

# The MDP state's features, in order. The shipped CartPole scheduler was trained on the first eight; new ones
# also see the gradient noise scale, which says how much a larger batch would help (DESIGN §2.2).
FEATURES_V1 = ("round", "loss", "eval_return", "kl", "learn_s", "sample_s", "round_s", "budget")
FEATURES = (*FEATURES_V1, "gns")
SHIPPED = "scheduler-cartpole.safetensors"


@dataclass(frozen=True)
class SchedulerHyper:
    """The agent's hyper-parameters (DESIGN §2.2) and the reward's coefficients."""

    learning_rate: float = 1e-3
    gamma: float = 0.99
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    epochs: int = 4
    beta: float = 0.1  # per projected round-second
    lam: float = 0.0  # per round-dollar ("budget-aligned" when > 0)


class SchedulerAgent(nn.Module):
    """Categorical actor over ``1..n_max`` and a value critic, separate 64-64 tanh MLPs."""

    def __init__(self, n_max: int, features: tuple[str, ...] = FEATURES) -> None:
        super().__init__()
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown scheduler state features {sorted(unknown)}")
        self.n_max, self.features = n_max, tuple(features)
        self.actor = mlp(len(features), (64, 64), n_max, 0.01, build_first=True)
        self.critic = mlp(len(features), (64, 64), 1, 1.0, build_first=True)

    def distribution(self, states: torch.Tensor) -> torch.distributions.Categorical:
        return torch.distributions.Categorical(logits=self.actor(states))


def save_agent(agent: SchedulerAgent, path: str | Path, metadata: dict[str, Any]) -> None:
    """Write the agent as a safetensors file with JSON metadata."""
    save_file({k: v.contiguous() for k, v in agent.state_dict().items()}, str(path),
              metadata={"minionsrl": json.dumps({"n_max": agent.n_max, "features": list(agent.features),
                                                 **metadata})})


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
        agent = SchedulerAgent(int(meta["n_max"]), tuple(meta.get("features", FEATURES_V1)))
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

    def __init__(self, agent: SchedulerAgent, n_min: int, n_max: int, return_scale: float, horizon: int = 100,
                 budget_usd: float | None = None, explore: bool = False, hyper: SchedulerHyper = SchedulerHyper(),
                 seed: int = 0) -> None:
        """``horizon``: the rounds a job is expected to take (normalises the round index); ``budget_usd``:
        the job's budget, if any (the state's remaining-budget feature)."""
        super().__init__(n_min, min(n_max, agent.n_max))
        self.agent, self.return_scale, self.explore, self.hyper = agent, return_scale, explore, hyper
        self.horizon, self.budget_usd = horizon, budget_usd
        self.generator = torch.Generator().manual_seed(seed)
        self.last_eval = 0.0
        self.episode = Episode()
        self.needs = frozenset({"gns"}) if "gns" in agent.features else frozenset()

    def state(self, row: dict[str, Any] | None) -> np.ndarray:
        """The normalised MDP state after ``row`` (zeros before the first round)."""
        if row is None:
            return np.zeros(len(self.agent.features), dtype=np.float32)
        if row.get("eval_return_mean") is not None:
            self.last_eval = float(row["eval_return_mean"])
        spent = float(row["cum_cost_serverless_usd"])
        budget = 1.0 if self.budget_usd is None else max(0.0, 1.0 - spent / self.budget_usd)
        loss = (as_finite(row.get("policy_loss")) or 0.0) + (as_finite(row.get("value_loss")) or 0.0)
        values = {
            "round": int(row["round"]) / self.horizon, "loss": _signed_log(loss),
            "eval_return": self.last_eval / self.return_scale,
            "kl": min((as_finite(row.get("approx_kl")) or 0.0) * 100.0, 10.0),
            "learn_s": math.log1p(float(row["learn_s"])), "sample_s": math.log1p(float(row["sample_s"])),
            "round_s": math.log1p(float(row["round_s"])), "budget": min(budget, 1.0),
            "gns": _signed_log(as_finite(row.get("gns")) or 0.0) / 10.0,  # noise scales span 1e-2..1e5 samples
        }
        return np.array([values[name] for name in self.agent.features], dtype=np.float32)

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
