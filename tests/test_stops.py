"""The stop rules (minionsrl/loop/stops.py) on worked examples: one decision from the progress and the cost."""

from __future__ import annotations

from dataclasses import replace

from minionsrl.config import TrainConfig
from minionsrl.cost import Totals
from minionsrl.loop import stops
from minionsrl.loop.state import RunState


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(env_id="CartPole-v1", **kw)


def test_a_target_a_step_limit_and_a_round_limit_each_stop_and_the_target_comes_first():
    p = RunState(round=3, env_steps=900, last_eval=480.0)
    assert stops.reached(_cfg(target_return=500, total_timesteps=1_000, max_rounds=10), p) is None
    assert stops.reached(_cfg(target_return=450, total_timesteps=900, max_rounds=3), p) == "target_return"
    assert stops.reached(_cfg(total_timesteps=900, max_rounds=3), p) == "total_timesteps"
    assert stops.reached(_cfg(total_timesteps=10_000, max_rounds=3), p) == "max_rounds"
    assert stops.reached(_cfg(target_return=-1e9, total_timesteps=10_000), RunState()) is None  # no evaluation yet


def test_a_budget_stops_before_the_round_that_would_exceed_it():
    """Spent + this round so far + the largest of the recent rounds (an evaluation round costs more) > budget."""
    p = RunState(recent_costs=(0.10, 0.30, 0.10), recent_projected=(1.0, 1.0, 1.0), billed=Totals(serverless_usd=0.60))
    cfg = _cfg(budget_usd=1.0, total_timesteps=10_000)
    assert stops.over_budget(cfg, p, stops.NOTHING) is None  # 0.60 + 0.30 = 0.90
    assert stops.over_budget(cfg, p, stops.Spent(0.15, 0.0)) == "budget_usd"
    assert stops.over_budget(_cfg(time_budget_s=10.0, total_timesteps=10_000), replace(p, billed=Totals(
        projected_s=9.5)), stops.NOTHING) == "time_budget_s"
    # a later evaluation may reach the target; it spends nothing the decision did not weigh
    spent = replace(p, billed=Totals(serverless_usd=0.95))
    assert stops.stop_reason(cfg, spent, check_budget=False) is None
    assert stops.stop_reason(cfg, spent) == "budget_usd"


def test_the_last_round_by_a_count_is_known_before_its_update():
    p = RunState(round=4, env_steps=768)
    assert stops.last_by_count(_cfg(total_timesteps=1_024), p, 256)
    assert not stops.last_by_count(_cfg(total_timesteps=1_025), p, 256)
    assert stops.last_by_count(_cfg(total_timesteps=10_000, max_rounds=4), p, 256)


def test_a_resumed_run_keeps_a_budgets_decision_unless_the_budget_was_raised():
    p = RunState(round=5, env_steps=1_280, stopped_by="budget_usd", stop_budget=1.0)
    assert stops.resumed_stop(_cfg(budget_usd=1.0, total_timesteps=10_000), p) == "budget_usd"
    assert stops.resumed_stop(_cfg(budget_usd=2.0, total_timesteps=10_000), p) is None
    line = stops.nothing_to_do(_cfg(budget_usd=1.0, total_timesteps=10_000), p, "budget_usd")
    assert line.startswith("minionsrl: nothing to do: the run spent its budget_usd (1") and "--budget-usd" in line
