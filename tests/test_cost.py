"""The cost ledger against the hand-computed example in docs/COST.md."""

from __future__ import annotations

import pytest

from minionsrl.backends.base import InvocationRecord
from minionsrl.cost import CostLedger, FunctionPricing, load_prices
from minionsrl.errors import ConfigError


def _records() -> list[InvocationRecord]:
    return [
        InvocationRecord("A", "train", cold=True, init_s=0.8, run_s=0.5004),
        InvocationRecord("B", "train", cold=False, init_s=0.0002, run_s=0.5),
        InvocationRecord("C", "train", cold=False, init_s=0.0, run_s=0.6),
    ]


def test_billed_duration_rounds_up_to_the_millisecond() -> None:
    pricing = FunctionPricing.of(load_prices(), "aws_lambda_x86")
    assert [pricing.billed_seconds(r) for r in _records()] == pytest.approx([1.301, 0.501, 0.600])


def test_round_bill_matches_the_worked_example() -> None:
    """docs/COST.md's example: hosts billed over the projected round (2.0004 s), the wall-time bill beside it."""
    ledger = CostLedger(load_prices(), "aws_lambda_x86", memory_mb=1769.0, cold_start_s=1.0, learner_device="cuda")
    bill = ledger.bill_round(round_s=2.0, sample_s=1.5, records=_records(), n_actors=3)
    assert bill.projected_round_s == pytest.approx(2.0004)
    assert bill.cost_serverless_usd == pytest.approx(0.0017700993, rel=1e-8)
    assert bill.cost_server_usd == pytest.approx(0.0652688161, rel=1e-8)
    assert bill.cost_serverless_wall_usd == pytest.approx(0.0017697593, rel=1e-8)
    assert bill.cost_server_wall_usd == pytest.approx(0.0652683951, rel=1e-8)
    again = ledger.bill_round(round_s=2.0, sample_s=1.5, records=_records(), n_actors=3)
    assert again.cost_server_usd == pytest.approx(0.0021058532, rel=1e-8)  # no host starts this time
    assert ledger.total_serverless_usd == pytest.approx(2 * 0.0017700993, rel=1e-8)
    assert ledger.total_serverless_wall_usd == pytest.approx(2 * 0.0017697593, rel=1e-8)
    assert ledger.total_server_usd == pytest.approx(0.0652688161 + 0.0021058532, rel=1e-8)
    assert bill.actor_hosts == 1


def test_hosts_are_billed_for_the_projected_round_not_the_queued_local_one() -> None:
    """64 functions queue on this machine's 2 cores (a long wall-time round); in the cloud they run side by
    side, so the hosts wait only for the learner's part and the slowest function."""
    ledger = CostLedger(load_prices(), "aws_lambda_x86", cold_start_s=1.0)
    warm = [InvocationRecord(str(i), "train", init_s=0.001, run_s=0.3) for i in range(64)]
    bill = ledger.bill_round(round_s=12.0, sample_s=10.0, records=warm, n_actors=64)
    assert bill.projected_round_s == pytest.approx(2.0 + 0.301)
    host_s = ledger.learner_usd_s
    assert bill.cost_serverless_wall_usd - bill.cost_serverless_usd == pytest.approx(host_s * (12.0 - 2.301))
    assert bill.cost_server_usd < bill.cost_server_wall_usd


def test_growing_past_one_host_pays_the_startup_again() -> None:
    ledger = CostLedger(load_prices())
    ledger.bill_round(1.0, 0.5, [], n_actors=16)
    bigger = ledger.bill_round(1.0, 0.5, [], n_actors=17)
    assert bigger.actor_hosts == 2
    assert bigger.projected_server_round_s == pytest.approx(0.5 + 60.0)  # the learner's 0.5 s, no function
    shrink = ledger.bill_round(1.0, 0.5, [], n_actors=4)
    assert shrink.projected_server_round_s == pytest.approx(0.5)


def test_arm_is_cheaper_and_budget_check() -> None:
    x86 = CostLedger(load_prices(), "aws_lambda_x86", learner_device="cuda")
    arm = CostLedger(load_prices(), "aws_lambda_arm", learner_device="cuda")
    assert arm.bill_round(2.0, 1.5, _records(), 3).cost_serverless_usd < x86.bill_round(
        2.0, 1.5, _records(), 3).cost_serverless_usd
    assert x86.affordable(None, 1e9)
    assert not x86.affordable(0.001, 0.0)  # already spent more than that
    assert x86.affordable(1.0, 0.5)


def test_bad_price_files_fail_with_one_line(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_prices(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("aws_lambda: {x86_usd_per_gb_s: -1}\n")
    with pytest.raises(ConfigError, match="aws_lambda"):
        load_prices(bad)


def test_failed_invocation_without_timings_is_billed_for_the_time_it_ran() -> None:
    pricing = FunctionPricing.of(load_prices(), "aws_lambda_x86")
    cancelled = InvocationRecord("x", "train", duration_s=2.5, status="cancelled", error="cancelled")
    assert pricing.billed_seconds(cancelled) == pytest.approx(2.5)
    finished = InvocationRecord("y", "train", run_s=0.5, duration_s=2.5)  # the platform bills its own time
    assert pricing.billed_seconds(finished) == pytest.approx(0.5)


def test_least_budget_counts_the_learner_host(tmp_path) -> None:
    """A budget below what round 1 must cost is refused before any work, learner host included: $0.00001 was
    accepted when only the functions' requests counted, and round 1 then spent 35x that."""
    from minionsrl.build import prepare_config
    from minionsrl.config import TrainConfig

    ledger = CostLedger(load_prices(), "aws_lambda_x86", cold_start_s=1.0)
    assert ledger.least_round_usd(8) > ledger.learner_usd_s * 1.0 > 0
    with pytest.raises(ConfigError, match="learner host"):
        prepare_config(TrainConfig(env_id="CartPole-v1", budget_usd=0.00001, max_rounds=1,
                                   run_dir=str(tmp_path / "r")))
    prepare_config(TrainConfig(env_id="CartPole-v1", budget_usd=0.01, max_rounds=1, run_dir=str(tmp_path / "r")))


def test_the_learner_host_follows_the_learner_device(tmp_path) -> None:
    """A CPU learner is billed as the catalogue's CPU host, a GPU learner as its GPU host; the run's device
    (auto: a GPU when JAX sees one) decides which."""
    from minionsrl.build import make_ledger, prepare_config
    from minionsrl.config import TrainConfig

    prices = load_prices()
    cpu = CostLedger(prices, learner_device="cpu").bill_round(2.0, 1.5, _records(), 3)
    gpu = CostLedger(prices, learner_device="cuda").bill_round(2.0, 1.5, _records(), 3)
    gap_usd_s = (prices["servers"]["gpu_learner_host"]["usd_per_hour"]
                 - prices["servers"]["cpu_learner_host"]["usd_per_hour"]) / 3600
    assert gpu.cost_serverless_usd - cpu.cost_serverless_usd == pytest.approx(gpu.projected_round_s * gap_usd_s)
    assert gpu.cost_server_usd - cpu.cost_server_usd == pytest.approx((gpu.projected_round_s + 60.0) * gap_usd_s)
    cfg, _ = prepare_config(TrainConfig(env_id="CartPole-v1", max_rounds=1, run_dir=str(tmp_path / "r")))
    import jax

    assert cfg.device == "auto"  # the config keeps what was asked for: a run can resume on another machine
    try:
        gpu_here = bool(jax.devices("gpu"))
    except RuntimeError:  # no GPU backend (or no device it can use)
        gpu_here = False
    assert make_ledger(cfg).learner_host["name"] == ("p3.2xlarge" if gpu_here else "c5.large")
