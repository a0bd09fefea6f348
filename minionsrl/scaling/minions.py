"""The MinionsRL learned scheduler (DESIGN §2.2): a small PPO agent that picks each round's actor count.

The MDP's episode is one whole training job. State (normalised): round index, learner loss, mean
evaluation return, KL, learner time, actor time, round time, remaining budget (capped at 1, so an
infinite budget never reaches the network) and, for schedulers trained since, the gradient noise
scale. Action: the number of actors, ``1..n_max`` (categorical). Reward per round:
``−β · round_seconds`` (the *projected cloud* round time, since on a function platform actors run side
by side), optionally ``− λ · round_dollars`` (budget-aligned), plus at the end, if the target return was
not reached, ``μ · (best_return − target) / |target|``: the shortfall in units of the target, so that it
weighs like a few rounds' time rather than drowning them (μ = 1).

The agent is PPO with separate 64-64 tanh actor and critic, lr 1e-3, γ 0.9, clip 0.2, Monte-Carlo
returns and entropy 0.01, updated after every job. Artefacts are safetensors files (weights plus JSON
metadata: no pickle). ``minionsrl scheduler train`` makes one (the training, in JAX, lives in
:mod:`minionsrl.experiments.scheduler`); the package ships one trained on CartPole and one on Hopper.

Inference is NumPy alone: the scaler is consulted every round, and importing it pays for neither JAX
nor torch. Weights are kept as :mod:`minionsrl.learner.networks` names them (``actor.{0,1,2}.weight``,
shape ``(out, in)``); artefacts name the linear layers by their index in a torch ``Sequential``
(``actor.0``, ``actor.2``, ``actor.4``: a tanh between each), and either naming loads.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from minionsrl.errors import ConfigError
from minionsrl.function.numpy_policy import mlp_layers, mlp_params, tanh_mlp
from minionsrl.scaling.base import Scaler, as_finite
from minionsrl.stats import RoundStats

# The MDP state's features, in order. The shipped CartPole scheduler was trained on the first eight; new ones
# also see the gradient noise scale, which says how much a larger batch would help (DESIGN §2.2).
FEATURES_V1 = ("round", "loss", "eval_return", "kl", "learn_s", "sample_s", "round_s", "budget")
FEATURES = (*FEATURES_V1, "gns")
# The shipped schedulers, by env family and by whether a round's batch is constant (DESIGN §2.2): each was trained
# on one env of its family's jobs in that mode, since what an actor buys differs (with T fixed, samples; with a
# batch size, a shorter round); Atari and custom envs get the CartPole one, and a mode with none its family's other
SHIPPED = {("classic", False): "scheduler-cartpole.safetensors", ("mujoco", False): "scheduler-hopper.safetensors",
           ("mujoco", True): "scheduler-hopper-batch.safetensors"}
HIDDEN = (64, 64)
TOWERS = ("actor", "critic")
_SEQUENTIAL_STRIDE = 2  # artefacts: a torch Sequential's index of each linear layer (Linear, Tanh, Linear, …)


@dataclass(frozen=True)
class SchedulerHyper:
    """The agent's hyper-parameters (DESIGN §2.2) and the reward's coefficients."""

    learning_rate: float = 1e-3
    # 0.9, not 0.99: the rounds a job still has to run are mostly its seed's luck, and summed over ~100 rounds
    # that noise drowned a round's own cost (on Hopper a 0.99 agent had not moved after 34 jobs)
    gamma: float = 0.9
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    epochs: int = 4
    beta: float = 0.1  # per projected round-second
    lam: float = 0.0  # per round-dollar ("budget-aligned" when > 0)
    miss_coef: float = 1.0  # per target's worth of shortfall at the end of a job that missed its target


def init_params(n_max: int, n_features: int, seed: int) -> dict[str, np.ndarray]:
    """Fresh weights from ``seed`` (CleanRL's orthogonal initialisation, the learner's)."""
    actor, critic = np.random.default_rng(seed).spawn(2)
    return {**mlp_params(actor, "actor", (n_features, *HIDDEN, n_max), 0.01),
            **mlp_params(critic, "critic", (n_features, *HIDDEN, 1), 1.0)}


def _layers(tensors: dict[str, Any]) -> dict[str, np.ndarray]:
    """``tensors`` with each tower's linear layers renumbered ``0, 1, 2…`` (from either naming)."""
    indices: dict[str, set[int]] = {tower: set() for tower in TOWERS}
    for key in tensors:
        tower, _, rest = key.partition(".")
        index, _, kind = rest.partition(".")
        if tower not in indices or not index.isdigit() or kind not in ("weight", "bias"):
            raise ValueError(f"unexpected tensor {key!r}")
        indices[tower].add(int(index))
    out: dict[str, np.ndarray] = {}
    for tower, found in indices.items():
        if not found:
            raise ValueError(f"no {tower} layers")
        for i, index in enumerate(sorted(found)):
            for kind in ("weight", "bias"):
                out[f"{tower}.{i}.{kind}"] = np.ascontiguousarray(tensors[f"{tower}.{index}.{kind}"],
                                                                  dtype=np.float32)
    return out


def _forward(params: dict[str, np.ndarray], tower: str, x: np.ndarray) -> np.ndarray:
    """The tanh MLP ``tower`` on ``x`` (``(n_features,)`` or a batch): the rollout functions' NumPy MLP (the
    learner's, :func:`minionsrl.learner.networks.mlp`, is JAX, which inference here must not import)."""
    return tanh_mlp(x, [(params[f"{tower}.{i}.weight"].T, params[f"{tower}.{i}.bias"])
                        for i in range(mlp_layers(params, tower))])


class SchedulerAgent:
    """Categorical actor over ``1..n_max`` and a value critic, separate 64-64 tanh MLPs, as NumPy weights.

    ``params``: the weights in either naming (see the module's docstring); fresh ones from ``seed`` when
    None. ``agent.params`` holds them as :mod:`minionsrl.learner.networks` names them.
    """

    def __init__(self, n_max: int, features: tuple[str, ...] = FEATURES, *, seed: int = 0,
                 params: dict[str, Any] | None = None) -> None:
        unknown = set(features) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown scheduler state features {sorted(unknown)}")
        self.n_max, self.features = n_max, tuple(features)
        self.params: dict[str, np.ndarray] = {}
        self.load_state_dict(init_params(n_max, len(self.features), seed) if params is None else params)

    def load_state_dict(self, tensors: dict[str, Any]) -> None:
        """Take weights in either naming; their shapes must fit ``features`` and ``n_max``."""
        params = _layers(tensors)
        for tower, n_out in (("actor", self.n_max), ("critic", 1)):
            n_in = len(self.features)
            for i in range(mlp_layers(params, tower)):
                w, b = params[f"{tower}.{i}.weight"], params[f"{tower}.{i}.bias"]
                if w.ndim != 2 or w.shape[1] != n_in or b.shape != (w.shape[0],):
                    raise ValueError(f"{tower} layer {i}: weight {w.shape}, bias {b.shape} after {n_in} inputs")
                n_in = w.shape[0]
            if n_in != n_out:
                raise ValueError(f"{tower} gives {n_in} outputs, not {n_out}")
        self.params = params

    def state_dict(self) -> dict[str, np.ndarray]:
        """The weights as artefacts name them (``actor.0``, ``actor.2``, ``actor.4``…)."""
        out = {}
        for key, value in self.params.items():
            tower, index, kind = key.split(".")
            out[f"{tower}.{int(index) * _SEQUENTIAL_STRIDE}.{kind}"] = value
        return out

    def logits(self, states: np.ndarray) -> np.ndarray:
        """The actor's logits over ``1..n_max`` for one state or a batch."""
        return _forward(self.params, "actor", np.asarray(states, dtype=np.float32))

    def value(self, states: np.ndarray) -> np.ndarray:
        """The critic's value for one state ``()`` or a batch ``(B,)``."""
        return _forward(self.params, "critic", np.asarray(states, dtype=np.float32))[..., 0]

    def log_probs(self, states: np.ndarray) -> np.ndarray:
        """Log-probabilities of the actions (float64, so they sum to 1 within rounding)."""
        logits = self.logits(states).astype(np.float64)
        shifted = logits - logits.max(axis=-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def save_agent(agent: SchedulerAgent, path: str | Path, metadata: dict[str, Any]) -> None:
    """Write the agent as a safetensors file with JSON metadata."""
    save_file({k: np.ascontiguousarray(v) for k, v in agent.state_dict().items()}, str(path),
              metadata={"minionsrl": json.dumps({"n_max": agent.n_max, "features": list(agent.features),
                                                 **metadata})})


def shipped(family: str, constant_batch: bool = False) -> str:
    """The file name of the scheduler shipped for the env ``family`` and batch mode (see :data:`SHIPPED`)."""
    known = family if (family, False) in SHIPPED else "classic"
    return SHIPPED.get((known, constant_batch), SHIPPED[(known, False)])


def load_agent(path: str | Path | None, family: str = "classic",
               constant_batch: bool = False) -> tuple[SchedulerAgent, dict[str, Any]]:
    """Read a scheduler artefact (when ``path`` is None, the one shipped for the env ``family`` and batch mode)."""
    if path is None:
        path = resources.files("minionsrl").joinpath("data", shipped(family, constant_batch))
    if not Path(str(path)).is_file():
        raise ConfigError(f"scheduler: file {str(path)!r} does not exist; train one with `minionsrl scheduler train`")
    try:
        with safe_open(str(path), framework="numpy") as fh:
            meta = json.loads(fh.metadata()["minionsrl"])
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 - safe_open has no __iter__
        agent = SchedulerAgent(int(meta["n_max"]), tuple(meta.get("features", FEATURES_V1)), params=tensors)
    except (OSError, KeyError, ValueError, TypeError, SafetensorError) as exc:
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


HORIZON = 100  # rounds a job is taken to last when neither the scheduler nor the run says


class MinionsScaler(Scaler):
    """Picks ``n`` with the learned agent; greedy when deployed, sampling while it is being trained.

    Samples come from a NumPy generator seeded with ``seed``, whose state is in :meth:`state_dict` (as
    plain JSON-able data), so a resumed run draws what the uninterrupted one would have.
    """

    name = "minions"

    def __init__(self, agent: SchedulerAgent, n_min: int, n_max: int, target_return: float,
                 horizon: int | None = None, budget_usd: float | None = None, explore: bool = False,
                 hyper: SchedulerHyper = SchedulerHyper(), seed: int = 0) -> None:
        """``target_return``: the job's target, the unit of the return features (its magnitude, so a negative
        target keeps their sign; 1 for a target of 0); ``horizon``: the rounds a job is expected to take
        (normalises the round index; :data:`HORIZON` when not known); ``budget_usd``: the job's budget, if any
        (the state's remaining-budget feature)."""
        super().__init__(n_min, min(n_max, agent.n_max))
        self.agent, self.explore, self.hyper = agent, explore, hyper
        self.return_scale = abs(target_return) or 1.0
        self.horizon, self.budget_usd = horizon or HORIZON, budget_usd
        self.generator = np.random.default_rng(seed)
        self.last_eval = 0.0
        self.episode = Episode()

    @property
    def needs(self) -> frozenset[str]:  # type: ignore[override]  # the agent's features decide, not the class
        """The noise scale when the agent reads it (schedulers trained since it joined the state)."""
        return frozenset({"gns"}) if "gns" in self.agent.features else frozenset()

    def state(self, row: RoundStats | None) -> np.ndarray:
        """The normalised MDP state after ``row`` (zeros before the first round)."""
        if row is None:
            return np.zeros(len(self.agent.features), dtype=np.float32)
        if row.eval_return_mean is not None:
            self.last_eval = row.eval_return_mean
        spent = row.cum_cost_serverless_usd
        budget = 1.0 if self.budget_usd is None else max(0.0, 1.0 - spent / self.budget_usd)
        loss = (as_finite(row.policy_loss) or 0.0) + (as_finite(row.value_loss) or 0.0)
        values = {
            "round": row.round / self.horizon, "loss": _signed_log(loss),
            "eval_return": self.last_eval / self.return_scale,
            "kl": min((as_finite(row.approx_kl) or 0.0) * 100.0, 10.0),
            "learn_s": math.log1p(row.learn_s), "sample_s": math.log1p(row.sample_s),
            "round_s": math.log1p(row.round_s), "budget": min(budget, 1.0),
            "gns": _signed_log(as_finite(row.gns) or 0.0) / 10.0,  # noise scales span 1e-2..1e5 samples
        }
        return np.array([values[name] for name in self.agent.features], dtype=np.float32)

    def next_actors(self, last_round: RoundStats | None) -> int:
        if self.explore and last_round is not None and self.episode.transitions:
            self.episode.transitions[-1].reward = self.round_reward(last_round)
        state = self.state(last_round)
        logp = self.agent.log_probs(state)
        if self.explore:
            probs = np.exp(logp)
            action = int(self.generator.choice(len(probs), p=probs / probs.sum()))
            self.episode.transitions.append(Transition(state, action, float(logp[action])))
        else:
            action = int(logp.argmax())
        self.score = float(math.exp(logp[action]))
        return self.clip(action + 1)

    def round_reward(self, row: RoundStats) -> float:
        """The MDP reward of the round ``row`` describes: its projected seconds and, if ``λ > 0``, dollars."""
        return -self.hyper.beta * row.projected_round_s - self.hyper.lam * row.cost_serverless_usd

    def miss_reward(self, best_return: float, target: float) -> float:
        """The end-of-job reward: 0 when the target was reached, else the shortfall in units of the target."""
        return self.hyper.miss_coef * min(best_return - target, 0.0) / self.return_scale

    def state_dict(self) -> dict[str, Any]:
        # the generator's state is a dict of strings and ints (PCG64's exceed 2**63: JSON keeps them exact); the
        # job's trajectory so far (a training job's) as lists of numbers: float32 states survive JSON exactly
        return {**super().state_dict(), "last_eval": self.last_eval, "generator": self.generator.bit_generator.state,
                "episode": [{"state": t.state.tolist(), "action": t.action, "logprob": t.logprob, "reward": t.reward}
                            for t in self.episode.transitions]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.last_eval = float(state["last_eval"])
        self.generator.bit_generator.state = state["generator"]
        self.episode = Episode([Transition(np.asarray(t["state"], dtype=np.float32), int(t["action"]),
                                           float(t["logprob"]), float(t["reward"])) for t in state["episode"]])
