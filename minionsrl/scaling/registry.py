"""Every scaler by name, in one table: its class (which says the detectors it reads), the actor count of its
first round, and how a config builds it. ``minionsrl.build`` constructs from here; the checks before any work
(the detectors a rule needs, a budget that cannot pay for round 1, the first invocations' deadline) read here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from minionsrl import config
from minionsrl.config import ScalingConfig, TrainConfig
from minionsrl.scaling import rules
from minionsrl.scaling.auto import AutoScaler, first_count
from minionsrl.scaling.base import Scaler
from minionsrl.scaling.minions import MinionsScaler, load_agent
from minionsrl.scaling.round_model import RoundForecast
from minionsrl.stats import FunctionStats


@dataclass(frozen=True)
class Needs:
    """What building a scaler may need beyond the config: the env's family (which shipped scheduler), the round
    model priced on the run's platform (made only for the scalers that weigh it), and a function's stats as the
    learner's check of the env saw a step (where it ran: what ``auto`` starts from without ``--initial-actors``)."""

    family: str
    forecast: Callable[[], RoundForecast]
    prior: FunctionStats | None = None


@dataclass(frozen=True)
class ScalerEntry:
    """One scaling rule: its class, its first round's actor count (the fewest it can be, where the rule draws it),
    and its constructor."""

    cls: type[Scaler]
    first: Callable[[ScalingConfig], int]
    build: Callable[[TrainConfig, Needs], Scaler]
    weighs_objective: bool = False  # it minimises --objective (dollars or projected seconds) on the round model

    @property
    def needs(self) -> frozenset[str]:
        """The detectors the rule reads every round, as far as its name says (a learned scheduler's depend on its
        agent: checked once it is built)."""
        return self.cls.needs if isinstance(self.cls.needs, frozenset) else frozenset()


def _initial(sc: ScalingConfig) -> int:
    assert sc.initial_actors is not None, "the first count of a config not resolved (config.resolve fills it)"
    return max(sc.n_min, min(sc.initial_actors, sc.most_actors))


def _auto_first(sc: ScalingConfig) -> int:
    """auto's first count where the config gives it; else the fewest it can start at (it picks from the env check)."""
    return sc.n_min if sc.initial_actors is None else _initial(sc)


def _unbounded_steps(cfg: TrainConfig) -> int | None:
    steps = cfg.run.total_timesteps
    return steps if (steps or 0) < config.UNBOUNDED_STEPS else None


def _steps_per_actor(cfg: TrainConfig) -> int:
    """Samples one actor adds to a round (``T·E``); under a batch size, one of a round of ``initial_actors``."""
    n = _initial(cfg.scaling)
    return max(1, cfg.env.step_plan().round_batch(n) // n)


def _minions(cfg: TrainConfig, needs: Needs) -> Scaler:
    sc = cfg.scaling
    agent, meta = load_agent(sc.scheduler, needs.family, constant_batch=cfg.env.constant_batch)
    # the round feature in the units it was trained in: rounds over the training jobs' length
    rounds = meta.get("max_rounds") or cfg.run.max_rounds
    return MinionsScaler(agent, sc.n_min, sc.n_max, target_return=cfg.run.target_return or float(meta["target_return"]),
                         horizon=int(rounds) if rounds else None, budget_usd=cfg.cost.budget_usd)


SCALERS: dict[str, ScalerEntry] = {
    "fixed": ScalerEntry(rules.FixedScaler, lambda sc: sc.actors, lambda c, _: rules.FixedScaler(c.scaling.actors)),
    "min": ScalerEntry(rules.MinScaler, lambda sc: sc.n_min,
                       lambda c, _: rules.MinScaler(c.scaling.n_min, c.scaling.n_max)),
    "max": ScalerEntry(rules.MaxScaler, lambda sc: sc.most_actors,
                       lambda c, _: rules.MaxScaler(c.scaling.n_min, c.scaling.n_max)),
    "random": ScalerEntry(rules.RandomScaler, lambda sc: sc.n_min,
                          lambda c, _: rules.RandomScaler(c.scaling.n_min, c.scaling.n_max, c.run.seed)),
    "hydrozoa": ScalerEntry(rules.HydrozoaScaler, lambda sc: min(16, sc.most_actors),
                            lambda c, _: rules.HydrozoaScaler(c.scaling.n_min, c.scaling.n_max)),
    "kungfu": ScalerEntry(rules.KungFuScaler, lambda sc: min(16, sc.most_actors),
                          lambda c, _: rules.KungFuScaler(c.scaling.n_min, c.scaling.n_max)),
    "gns-boost": ScalerEntry(rules.GnsBoostScaler, lambda sc: sc.n_min,
                             lambda c, _: rules.GnsBoostScaler(c.scaling.n_min, c.scaling.n_max)),
    "nitro": ScalerEntry(rules.NitroScaler, _initial, lambda c, _: rules.NitroScaler(
        c.scaling.n_min, c.scaling.n_max, c.scaling.initial_actors, c.scaling.nitro_window, c.scaling.nitro_decay,
        c.scaling.nitro_floor, c.scaling.nitro_window_mode)),
    "critical": ScalerEntry(rules.CriticalScaler, _initial, lambda c, n: rules.CriticalScaler(
        c.scaling.n_min, c.scaling.n_max, _steps_per_actor(c), n.forecast(), c.scaling.objective,
        c.scaling.initial_actors, constant_batch=c.env.constant_batch), weighs_objective=True),
    "auto": ScalerEntry(AutoScaler, _auto_first, lambda c, n: AutoScaler(
        c.scaling.n_min, c.scaling.n_max, c.scaling.initial_actors, n.forecast(), c.scaling.objective,
        _unbounded_steps(c), c.cost.budget_usd, n.prior), weighs_objective=True),
    "minions": ScalerEntry(MinionsScaler, lambda sc: sc.n_min, _minions),
}


def first_actors(sc: ScalingConfig) -> int:
    """The actors of round 1 (the fewest it can have, where the rule draws it or picks it from the env check)."""
    return SCALERS[sc.scaler].first(sc)


def started_actors(cfg: TrainConfig, needs: Needs) -> int:
    """The actors of round 1 as the scaler built with ``needs`` will start (auto's from the env check, where the
    config gives no first count): the instances to start before it."""
    sc = cfg.scaling
    if sc.scaler == "auto" and sc.initial_actors is None:
        n0, _ = first_count(None, sc.n_min, sc.n_max, needs.forecast(), needs.prior, sc.objective or "time")
        return max(sc.n_min, min(n0, sc.n_max))
    return first_actors(sc)
