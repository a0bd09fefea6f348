"""When a run stops: every stop rule, in one place, as one decision from the run's progress and what it has cost.

A run stops after the round in which the first of these holds (:func:`stop_reason`): an evaluation reached the
target return, the step limit or the round limit was reached (:func:`reached`), or the next round would exceed a
budget, in serverless dollars or projected seconds (:func:`over_budget`). A callback that returns False stops it
too (``callback``: the trainer, which calls them, says so). A resumed run keeps the decision a budget made
(:func:`resumed_stop`), and says in one line why there is nothing to do (:func:`nothing_to_do`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from minionsrl.config import TrainConfig
from minionsrl.loop.state import RunState


class Spent(NamedTuple):
    """What a round has cost so far: serverless dollars and projected seconds."""

    usd: float
    projected_s: float


NOTHING = Spent(0.0, 0.0)


def budgets(cfg: TrainConfig) -> dict[str, float | None]:
    """The run's budgets, by the stop reason each gives."""
    return {"budget_usd": cfg.cost.budget_usd, "time_budget_s": cfg.cost.time_budget_s}


def reached(cfg: TrainConfig, p: RunState) -> str | None:
    """The stop condition other than a budget that holds for the run as ``p`` stands, if any: a target return
    met by the last evaluation, the step limit, the round limit."""
    reasons = {
        "target_return": cfg.run.target_return is not None and math.isfinite(p.last_eval)
        and p.last_eval >= cfg.run.target_return,
        "total_timesteps": cfg.run.total_timesteps is not None and p.env_steps >= cfg.run.total_timesteps,
        "max_rounds": cfg.run.max_rounds is not None and p.round >= cfg.run.max_rounds,
    }
    return next((name for name, hit in reasons.items() if hit), None)


def over_budget(cfg: TrainConfig, p: RunState, pending: Spent) -> str | None:
    """The budget the next round would exceed, if any: what the run has been billed (``p.billed``), plus what the
    current round has cost so far (``pending``, not yet billed), plus the next round estimated as the largest of the
    last 10 rounds' (evaluation rounds and cold starts cost more than the rest)."""
    spend = {"budget_usd": (p.billed.serverless_usd, pending.usd, p.recent_costs),
             "time_budget_s": (p.billed.projected_s, pending.projected_s, p.recent_projected)}
    for reason, budget in budgets(cfg).items():
        total, now, recent = spend[reason]
        estimates = [*recent, *([now] if now else [])]
        if budget is not None and estimates and total + now + max(estimates) > budget:
            return reason
    return None


def stop_reason(cfg: TrainConfig, p: RunState, pending: Spent = NOTHING, check_budget: bool = True) -> str | None:
    """The stop condition that holds for the run as ``p`` stands, if any, with ``pending`` spent by the current
    round and not yet billed (the budgets only with ``check_budget``: an evaluation after the round's decision may
    reach the target, but spends nothing the decision did not weigh)."""
    reason = reached(cfg, p)
    if reason is None and check_budget:
        reason = over_budget(cfg, p, pending)
    return reason


def last_by_count(cfg: TrainConfig, p: RunState, steps: int) -> bool:
    """Whether the round now learning on ``steps`` samples is the last by a count (steps, rounds) known before
    its update; a budget or a target may still end the run later, and a wave sent ahead is then cancelled."""
    return ((cfg.run.total_timesteps is not None and p.env_steps + steps >= cfg.run.total_timesteps)
            or (cfg.run.max_rounds is not None and p.round >= cfg.run.max_rounds))


def resumed_stop(cfg: TrainConfig, p: RunState) -> str | None:
    """Why a resumed run is already over, if it is. A budget is not re-checked here: the run decided that before
    its last round's evaluation (with the round's cost so far), and re-checking with the whole bill could stop
    it a round earlier than the uninterrupted run; the decision is kept unless that budget was raised since."""
    budget = budgets(cfg).get(p.stopped_by or "")
    if budget is not None and p.stop_budget is not None and budget <= p.stop_budget:
        return p.stopped_by
    return reached(cfg, p)


def nothing_to_do(cfg: TrainConfig, p: RunState, reason: str) -> str:
    """The line a resumed run that is already over prints before any work: what stopped it, and the flag to raise."""
    limit = {"total_timesteps": (cfg.run.total_timesteps, f"{p.env_steps:,} steps"),
             "max_rounds": (cfg.run.max_rounds, ""),
             "target_return": (cfg.run.target_return, f"an evaluation returned {p.last_eval:.1f}"),
             "budget_usd": (cfg.cost.budget_usd, "the next round would exceed it"),
             "time_budget_s": (cfg.cost.time_budget_s, "the next round would exceed it")}
    value, how = limit[reason]
    verb = "spent its" if reason in budgets(cfg) else "reached"
    return (f"minionsrl: nothing to do: the run {verb} {reason} ({value:g}{': ' + how if how else ''}); raise "
            f"--{reason.replace('_', '-')} to continue (the summary below is the finished run's)")
