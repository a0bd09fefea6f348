"""The run's state between rounds, frozen: what :func:`~minionsrl.loop.round.play_round` reads and returns anew.

:class:`RunState` holds the run's counters (round, steps, wall time, evaluations, recent returns and costs, the last
metrics row, what it has been billed, the stop decision, an evaluation still to run, the learning-rate schedule);
the checkpoint keeps all of it (:meth:`RunState.to_state`). :class:`Remaining` is the schedule a resumed run keeps.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from minionsrl.config import TrainConfig
from minionsrl.cost import Totals
from minionsrl.errors import ConfigError
from minionsrl.numbers import is_amount
from minionsrl.stats import RoundStats

LIMITS = ("total_timesteps", "budget_usd", "time_budget_s")  # what the rate anneals over: steps, dollars, seconds
RETURNS_KEPT = 100  # training episodes' returns kept (summary.json's train_return_last100, CleanRL's figure)
COSTS_KEPT = 10  # rounds' dollars and projected seconds kept (a budget's estimate of the next round)


def run_limits(cfg: TrainConfig) -> list[float | None]:
    """The run's value of each of :data:`LIMITS` (None where it sets none)."""
    return [cfg.run.total_timesteps, cfg.cost.budget_usd, cfg.cost.time_budget_s]


def fraction_left(spent: list[float], limits: list[float | None]) -> float:
    """``1 - f``: the fraction of the nearest limit left (1 without limits)."""
    fractions = [s / lim for s, lim in zip(spent, limits, strict=True) if lim is not None]
    return max(1.0 - max(fractions), 0.0) if fractions else 1.0


@dataclass(frozen=True)
class Remaining:
    """How much of the run is left, kept across resumes: the fraction the learner anneals its rate and clip by.

    Each round the learner is told ``1 - f``, ``f`` the spent fraction of whichever limit is nearest its end
    (:data:`LIMITS`); with ``lr_schedule`` anneal the learner's rate is the config's times it
    (:meth:`~minionsrl.learner.learners.Learner.set_remaining`), and with ``anneal_clip`` the surrogate's clip too
    (rl-baselines3-zoo's ``lin_`` rate and clip range). Those limits are stop conditions, which a resumed run may
    change: raised, ``f`` fell and the rate jumped back up (a run annealed to 3e-5 resumed at 5e-4). A resumed run
    keeps its schedule instead: with the same limits it is exactly the uninterrupted run's; with changed ones the
    rate goes on from the last round's and falls linearly to 0 at the new nearest limit. ``scale`` does it, and
    travels with the checkpoint, so a second resume keeps it too."""

    limits: list[float | None]  # the run's value of each of LIMITS
    scale: float = 1.0  # multiplies the fraction left
    spent: list[float] | None = None  # what the run had spent of each of LIMITS when its last round started

    @classmethod
    def resumed(cls, cfg: TrainConfig, kept: Remaining | None, spent: list[float]) -> Remaining:
        """What is left of the run, this session: ``kept`` is the checkpoint's (None: a fresh run), ``spent`` what
        the run has spent so far (steps, serverless dollars, projected seconds)."""
        now = run_limits(cfg)
        if kept is None:
            return cls(now)
        scale = kept.scale
        if (cfg.learner.lr_schedule == "anneal" or cfg.learner.anneal_clip) and kept.limits != now \
                and kept.spent is not None:
            rate = scale * fraction_left(kept.spent, kept.limits)  # the last round's fraction of the config's rate
            left = fraction_left(spent, now)
            if left > 0.0:
                scale = rate / left  # rate at the next round, falling to 0 at the new nearest limit
        return cls(now, scale, kept.spent)

    def at(self, spent: list[float]) -> Remaining:
        """This schedule as a round starts with ``spent`` spent (checkpointed with the round: where its rate stood)."""
        return replace(self, spent=spent)

    def fraction(self, cfg: TrainConfig) -> float:
        """The fraction of the run left at :attr:`spent`."""
        assert self.spent is not None  # set by at()
        return self.scale * fraction_left(self.spent, run_limits(cfg))

    def to_json(self) -> dict[str, Any]:
        return {"limits": self.limits, "scale": self.scale, "spent": self.spent}

    @classmethod
    def from_json(cls, raw: Any) -> Remaining | None:
        """A checkpoint's schedule (None when it kept none); a malformed one is a ConfigError."""
        if raw is None:
            return None
        if not isinstance(raw, dict) or not _amounts(raw.get("limits"), True) or not is_amount(raw.get("scale")) \
                or not (raw.get("spent") is None or _amounts(raw.get("spent"), False)):
            raise ConfigError("--resume: the checkpoint's learning-rate schedule (anneal) is malformed")
        return cls(list(raw["limits"]), float(raw["scale"]), raw.get("spent"))


def _amounts(value: Any, none_ok: bool) -> bool:
    return isinstance(value, list) and len(value) == len(LIMITS) and all(
        (v is None and none_ok) or is_amount(v) for v in value)


def kept(window: tuple[Any, ...], new: list[Any], size: int) -> tuple[Any, ...]:
    """``window`` with ``new`` appended, its last ``size`` items."""
    return (*window, *new)[-size:]


@dataclass(frozen=True)
class RunState:
    """The run's counters between rounds; all of them go into the checkpoint."""

    round: int = 0
    env_steps: int = 0
    wall_offset: float = 0.0  # wall seconds of earlier sessions of a resumed run
    best_eval: float = float("-inf")
    best_round: int = 0  # the round whose policy evaluated to best_eval (checkpoints/best.safetensors); 0: none
    last_eval: float = float("nan")
    recent_returns: tuple[float, ...] = ()  # the last RETURNS_KEPT training episodes' returns
    recent_rounds: tuple[int, ...] = ()  # the round each of them ended in
    recent_costs: tuple[float, ...] = ()  # serverless $ of the last COSTS_KEPT rounds
    recent_projected: tuple[float, ...] = ()  # their projected seconds
    last_round: RoundStats | None = None  # the last round's row
    stopped_by: str | None = None  # the stop condition that ends the run (decided in its last round)
    stop_budget: float | None = None  # the budget in force when a budget (dollars or seconds) stopped the run
    # (round, actors, episodes): the evaluation of round ``round``'s policy that runs beside the next round's
    # functions; that round's row (last_round) is written once it returns
    pending_eval: tuple[int, int, int] | None = None
    remaining: Remaining | None = None  # the fraction of the run left, across resumes (its checkpoint key: anneal)
    billed: Totals = field(default_factory=Totals)  # what the run has been billed so far (its checkpoint key: ledger)
    started: float = field(default_factory=time.perf_counter)  # this session's start (perf_counter)

    def wall(self) -> float:
        return self.wall_offset + time.perf_counter() - self.started

    def spent(self) -> list[float]:
        """What the learning rate anneals over (:data:`LIMITS`), spent so far: env steps, serverless dollars,
        projected seconds."""
        return [self.env_steps, self.billed.serverless_usd, self.billed.projected_s]

    def to_state(self) -> dict[str, Any]:
        """The checkpoint's part of the run's counters (plain data)."""
        return {"round": self.round, "env_steps": self.env_steps, "wall_s": self.wall(), "best_eval": self.best_eval,
                "best_round": self.best_round, "last_eval": self.last_eval, "recent_returns": list(self.recent_returns),
                "recent_rounds": list(self.recent_rounds),
                "recent_costs": list(self.recent_costs), "recent_projected": list(self.recent_projected),
                "last_row": json.dumps(None if self.last_round is None else self.last_round.to_row()),
                "stop": json.dumps({"stopped_by": self.stopped_by, "budget": self.stop_budget}),
                "pending_eval": json.dumps(self.pending_eval),
                "anneal": json.dumps(None if self.remaining is None else self.remaining.to_json()),
                "ledger": self.billed.to_state()}

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> RunState:
        """The counters a checkpoint kept (:meth:`to_state`)."""
        returns = tuple(state["recent_returns"])[-RETURNS_KEPT:]
        rounds = state["recent_rounds"]
        last, stop = json.loads(state["last_row"]), json.loads(state["stop"])
        pending = json.loads(state["pending_eval"])
        return cls(round=int(state["round"]), env_steps=int(state["env_steps"]), wall_offset=state["wall_s"],
                   best_eval=float(state["best_eval"]), best_round=int(state["best_round"]),
                   last_eval=float(state["last_eval"]), recent_returns=returns,
                   recent_rounds=tuple(rounds)[-RETURNS_KEPT:] if len(rounds) == len(returns) else (),
                   recent_costs=tuple(state["recent_costs"])[-COSTS_KEPT:],
                   recent_projected=tuple(state["recent_projected"])[-COSTS_KEPT:],
                   last_round=None if last is None else RoundStats.from_row(last),
                   stopped_by=stop["stopped_by"], stop_budget=stop["budget"],
                   pending_eval=tuple(pending) if pending else None,
                   remaining=Remaining.from_json(json.loads(state["anneal"])),
                   billed=Totals.from_state(state["ledger"]))
