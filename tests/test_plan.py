"""``minionsrl plan``: the round model's arithmetic by hand, the forecast's picks, the whole command on CartPole,
and bad input as one line before any work."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from importlib import resources

import pytest

from minionsrl.backends.base import InvocationRecord
from minionsrl.config import TrainConfig
from minionsrl.cost import CostLedger, load_prices
from minionsrl.experiments.plan import PLATFORMS, Probe, forecast, picks, run_plan, verdict


def test_a_modelled_round_is_billed_as_worked_by_hand():
    """4 functions of 10 ms init and 1 s run, a learner part of 0.5 s, the local profile (a Lambda Invoke: 30 ms,
    64 calls at once, nothing to collect), Lambda x86 at 1,769 MB, one actor host of 16 vCPUs."""
    prices = load_prices()
    ledger = CostLedger(prices, "aws_lambda_x86", 1769, 1.0, "cpu", "local")
    function = InvocationRecord(invocation_id="m", kind="train", init_s=0.01, run_s=1.0, cpu_s=1.0)
    got = ledger.model_round(0.5, function, 4)
    assert got.round_s == pytest.approx(0.5 + 0.03 + 1.01 + 0.0)
    lam, servers = prices["aws_lambda"], prices["servers"]
    learner_usd_s = servers["cpu_learner_host"]["usd_per_hour"] / 3600
    one = 1.010 * 1769 / 1024 * lam["x86_usd_per_gb_s"] + lam["usd_per_million_requests"] / 1e6  # 1 ms billing
    assert got.serverless_usd == pytest.approx(learner_usd_s * 1.54 + 4 * one)
    per_s = (learner_usd_s + servers["actor_host"]["usd_per_hour"] / 3600
             + 2 * servers["usd_per_host_month"] / (30 * 24 * 3600))
    assert got.server_usd == pytest.approx(per_s * 1.54)
    assert (got.learner_s, got.function_s, got.overhead_s) == pytest.approx((0.5, 1.01, 0.03))


def _probe(sample_s: float = 1e-3, quantiles: tuple[float, ...] | None = None) -> Probe:
    """A probe's figures (a sample of ``sample_s`` every time, unless ``quantiles`` spread it)."""
    return Probe(sample_s=sample_s, sample_quantiles=quantiles or (sample_s,) * 21, init_s=0.01, busy_share=1.0,
                 reply_bytes_per_sample=100.0, learner_a_s=0.05, learner_b_s=1e-5, compile_s=2.0,
                 local_cold_start_s=1.0, probe_s=0.0)


PROBE = _probe()


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(env_id="CartPole-v1", fragment_length=128, total_timesteps=131_072, **kw)


def test_the_forecast_rows_follow_the_model_and_the_picks_follow_the_rows():
    rows = forecast(_cfg(), PROBE, cap=64)
    assert {(r.n, r.platform) for r in rows} == {(2**i, p) for i in range(7) for p in PLATFORMS}
    lam = {r.n: r for r in rows if r.platform == "lambda"}
    # Lithops on Lambda: 0.13 s a call (64 at once) and 0.43 s to collect; one function: 10 ms + 128 x 1 ms
    assert lam[1].round_s == pytest.approx(0.05 + 1e-5 * 128 + 0.13 + 0.01 + 0.128 + 0.43)
    assert lam[8].rounds == 131_072 // (8 * 128) and lam[8].run_s == pytest.approx(lam[8].rounds * lam[8].round_s)
    for platform in PLATFORMS:
        mine = [r for r in rows if r.platform == platform]
        k = picks(rows, platform)
        assert min(r.run_s for r in mine) == next(r.run_s for r in mine if r.n == k.fastest)
        assert min(r.run_usd for r in mine) == next(r.run_usd for r in mine if r.n == k.cheapest)
        by_n = {r.n: r for r in mine}
        if k.knee < 64:  # doubling past the knee shortens the run by less than 10%, and not before it
            assert by_n[2 * k.knee].run_s > 0.9 * by_n[k.knee].run_s
            assert all(by_n[2 * n].run_s <= 0.9 * by_n[n].run_s for n in by_n if n < k.knee)


def test_a_round_waits_for_the_slowest_of_its_functions_and_pays_for_each():
    spread = _probe(1e-3, tuple(1e-3 * (1 + k / 20) for k in range(21)))  # the slowest sample twice the fastest
    assert spread.slowest_sample_s(1) == pytest.approx(1.5e-3)  # one function: the median
    assert spread.slowest_sample_s(19) == pytest.approx(1.95e-3) and spread.slowest_sample_s(10_000) < 2e-3
    lam = {r.n: r for r in forecast(_cfg(), spread, cap=64) if r.platform == "lambda"}
    flat = {r.n: r for r in forecast(_cfg(), PROBE, cap=64) if r.platform == "lambda"}
    assert lam[64].functions_s == pytest.approx(0.01 + 128 * spread.slowest_sample_s(64))
    assert lam[64].round_s - flat[64].round_s == pytest.approx(128 * (spread.slowest_sample_s(64) - 1e-3))


def test_the_verdict_says_when_one_machine_does_the_job():
    quick = _probe(3e-5)  # 30 µs a step: Lambda's half-second a round dominates
    assert verdict(forecast(_cfg(), quick, cap=64), quick).startswith("Serverless does not pay for this job")
    slow = _probe(0.02)  # 20 ms of CPU a step: 2 cores take 22 min
    assert verdict(forecast(_cfg(), slow, cap=64), slow).startswith("Serverless pays")


def test_plan_on_cartpole_writes_the_table_the_json_and_the_frontier(tmp_path):
    cfg = TrainConfig(env_id="CartPole-v1", total_timesteps=50_000, hidden_sizes=[16], seed=1)
    text, _ = run_plan(cfg, cap=32, out_dir=tmp_path / "plan", json_path=tmp_path / "plan.json")
    data = json.loads((tmp_path / "plan.json").read_text())
    assert {(r["n"], r["platform"]) for r in data["rows"]} == {(2**i, p) for i in range(6) for p in PLATFORMS}
    for row in data["rows"]:
        assert row["round_s"] > 0 and row["usd_per_round"] > 0 and math.isfinite(row["run_usd"])
    probe = data["probe"]
    assert 0 < probe["sample_s"] < 0.05 and 0 < probe["busy_share"] <= 1
    # the learner's seconds for a round, a + b·batch (its intercept alone may fit to 0 on a loaded machine)
    assert probe["learner_a_s"] >= 0 and probe["learner_b_s"] >= 0 and probe["learner_a_s"] + probe["learner_b_s"] > 0
    assert (tmp_path / "plan" / "plan.png").stat().st_size > 0
    assert text.startswith("# plan: CartPole-v1, 50,000 steps") and data["verdict"] in text
    assert set(data["picks"]) == set(PLATFORMS)


def _plan_cli(args: list[str], env: dict[str, str], cwd) -> tuple[int, list[str]]:
    proc = subprocess.run([sys.executable, "-m", "minionsrl", "plan", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)
    return proc.returncode, proc.stderr.strip().splitlines()


@pytest.mark.parametrize(("args", "says"), [
    (["--cap", "0"], "--cap: 0 actors; give a cap of at least 1"),
    (["--env-id", "custom_env:NoSuchEnv"], "custom_env"),
    (["--prices", "{DIR}/prices.yaml"], "overheads.lithops.invoke_s"),
])
def test_bad_input_to_plan_is_one_line_before_any_work(args, says, tmp_path, subprocess_env):
    text = resources.files("minionsrl").joinpath("data", "prices.yaml").read_text()
    (tmp_path / "prices.yaml").write_text(text.replace("invoke_s: 0.13", "invoke_x: 0.13"))
    args = [a.replace("{DIR}", str(tmp_path)) for a in args]
    code, lines = _plan_cli([*args, "--out", str(tmp_path / "out")], subprocess_env, tmp_path)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("minionsrl: error:"), lines
    assert says in lines[0]
    assert not (tmp_path / "out").exists()  # no probe ran
