"""The cost ledger against the hand-computed example in docs/COST.md."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

import minionsrl
from minionsrl.backends.base import InvocationRecord
from minionsrl.cost import CostLedger, RoundTimes, Totals, load_prices
from minionsrl.deployments import DEPLOYMENTS
from minionsrl.errors import ConfigError


def _records() -> list[InvocationRecord]:
    """docs/COST.md's round: a cold slot, a warm one that waited 0.05 s for a CPU here, and a slot whose first
    attempt failed without timings (0.2 s as its caller saw it) and whose retry ran warm."""
    return [
        InvocationRecord("A", "train", cold=True, init_s=0.8, run_s=0.5004),
        InvocationRecord("B", "train", cold=False, init_s=0.0002, run_s=0.55, run_wait_s=0.05),
        InvocationRecord("C-0", "train", status="failed", duration_s=0.2),
        InvocationRecord("C-1", "train", cold=False, init_s=0.0, run_s=0.6),
    ]


def _times() -> RoundTimes:
    a, b, c0, c1 = _records()
    return RoundTimes(wall_s=2.0, learner_s=0.45, sampled=[[a], [b], [c0, c1]])


def test_billed_duration_is_the_own_instance_time_rounded_up_to_the_millisecond() -> None:
    """One cold-start model for seconds and dollars (the modelled 1.0 s, not this machine's 0.8 s); a CPU wait
    here is not billed; a failure without timings is billed for the time its caller saw."""
    ledger = CostLedger(load_prices(), "aws_lambda_x86", cold_start_s=1.0)
    billed = [ledger.pricing.billed_seconds(*ledger.function_s(r)) for r in _records()]
    assert billed == pytest.approx([1.501, 0.501, 0.200, 0.600])
    assert [ledger.latency_s(r) for r in _records()] == pytest.approx([1.5004, 0.5002, 0.2, 0.6])


def test_a_policy_load_reused_on_a_shared_instance_is_billed_as_its_own_instance_would_pay_it() -> None:
    """Here one instance serves several invocations of a round and loads the round's policy once; in the cloud
    each function has an instance of its own and loads it: a warm invocation's init counts the load it reused.
    A cold start is the model, which includes it."""
    ledger = CostLedger(load_prices(), "aws_lambda_x86", cold_start_s=1.0)
    warm = InvocationRecord("W", "train", init_s=0.0002, run_s=0.010, reused_policy_s=0.0006)
    assert ledger.function_s(warm) == pytest.approx((0.0008, 0.010))
    assert ledger.pricing.billed_seconds(*ledger.function_s(warm)) == pytest.approx(0.011)
    cold = InvocationRecord("C", "train", cold=True, init_s=0.3, run_s=0.010, reused_policy_s=0.0006)
    assert ledger.function_s(cold) == pytest.approx((1.0, 0.010))


def test_round_bill_matches_the_worked_example() -> None:
    """docs/COST.md's example, on the shipped deployment (Lambda through Lithops over S3): hosts billed over the
    projected round (2.5104 s), the servers over theirs (1.9544 s), the wall-time bills beside them. Lithops pays 4
    PUTs and 3 GETs per invocation, the round's policy PUT, and a LIST every 0.25 s (ours) and 2 s (Lithops'
    monitor) while the learner waits: dearer than the functions."""
    ledger = CostLedger(load_prices(), "aws_lambda_x86", memory_mb=1769.0, cold_start_s=1.0, learner_device="cuda")
    assert ledger.priced_as == "aws_lambda_x86 via lithops"
    bill = ledger.bill_round(_times(), _records(), n_actors=3)
    assert bill.projected_round_s == pytest.approx(0.45 + 0.13 + 1.5004 + 0.43)
    assert bill.storage_usd == pytest.approx(17 * 5e-6 + 12 * 4e-7 + 4.5 * 2.0604 * 5e-6, rel=1e-9)
    assert bill.storage_usd > sum(ledger.invocation_usd(r) for r in _records())
    assert bill.cost_serverless_usd == pytest.approx(0.00235147524, rel=1e-8)
    assert bill.projected_server_round_s == pytest.approx(0.45 + 3 * 0.001 + 1.5004 + 0.001 + 60.0)
    assert bill.cost_server_usd == pytest.approx(0.06522039121, rel=1e-8)
    assert bill.cost_serverless_wall_usd == pytest.approx(0.00191763524, rel=1e-8)
    assert bill.cost_server_wall_usd == pytest.approx(0.0652683951, rel=1e-8)
    again = ledger.bill_round(_times(), _records(), n_actors=3, actor_hosts=bill.actor_hosts)
    assert again.cost_server_usd == pytest.approx(0.00205742825, rel=1e-8)  # no host starts this time
    totals = Totals().billed(bill).billed(again)
    assert totals.serverless_usd == pytest.approx(2 * 0.00235147524, rel=1e-8)
    assert totals.server_usd == pytest.approx(0.06522039121 + 0.00205742825, rel=1e-8)
    assert bill.actor_hosts == totals.actor_hosts == 1
    assert totals.projected_s == pytest.approx(2 * bill.projected_round_s)
    assert Totals.from_state(totals.to_state()) == totals  # the checkpoint's ledger


def test_the_direct_invoke_what_if_prices_the_same_round_without_storage() -> None:
    """The same round invoked directly (the papers' path, which no backend ships: 0.03 s a call, the result in the
    response): a shorter round, no storage requests; the server bill is the servers' path either way."""
    ledger = CostLedger(load_prices(), "aws_lambda_x86", cold_start_s=1.0, learner_device="cuda",
                        deployment=DEPLOYMENTS["direct"])
    assert ledger.priced_as.startswith("aws_lambda_x86 direct invoke (what-if")
    bill = ledger.bill_round(_times(), _records(), n_actors=3)
    assert bill.projected_round_s == pytest.approx(0.45 + 0.03 + 1.5004)
    assert bill.cost_serverless_usd == pytest.approx(0.00176481624, rel=1e-8)
    assert bill.storage_usd == 0.0
    assert bill.cost_server_usd == pytest.approx(0.06522039121, rel=1e-8)


def test_retries_of_one_slot_run_in_series() -> None:
    """A slot retried three times waits for each attempt in turn (and a new call and collection for each retry),
    where the old ledger took the longest attempt as if they ran side by side."""
    ledger = CostLedger(load_prices(), cold_start_s=1.0, deployment=DEPLOYMENTS["direct"])
    tries = [InvocationRecord(f"s-{i}", "train", status="failed", duration_s=0.4) for i in range(3)]
    ok = InvocationRecord("s-3", "train", run_s=0.4)
    times = RoundTimes(1.0, 0.1, [[*tries, ok], [InvocationRecord("t", "train", run_s=0.5)]])
    assert ledger.projected_s(times) == pytest.approx(0.1 + 0.03 + 4 * 0.4 + 3 * 0.03)


def test_the_projected_round_ignores_the_wait_for_a_cpu_here() -> None:
    """The same work measured on a quiet and on a loaded machine: the wall times differ, the waits say by how
    much, and the projected round and its bill are the same."""
    def run(wait: float) -> tuple[float, float]:
        ledger = CostLedger(load_prices(), cold_start_s=1.0)
        warm = [InvocationRecord(str(i), "train", init_s=0.01 + wait / 10, init_wait_s=wait / 10, run_s=0.3 + wait,
                                 run_wait_s=wait) for i in range(16)]
        bill = ledger.bill_round(RoundTimes(5.0 + 10 * wait, 0.2, [[r] for r in warm]), warm, n_actors=16)
        return bill.projected_round_s, bill.cost_serverless_usd

    assert run(0.0) == pytest.approx(run(0.25), rel=1e-9)


def test_hosts_are_billed_for_the_projected_round_not_the_queued_local_one() -> None:
    """64 functions queue on this machine's 2 cores (a long wall-time round); in the cloud they run side by
    side, so the hosts wait only for the learner's part, the dispatch and the slowest function."""
    ledger = CostLedger(load_prices(), "aws_lambda_x86", cold_start_s=1.0)
    warm = [InvocationRecord(str(i), "train", init_s=0.001, run_s=0.3) for i in range(64)]
    bill = ledger.bill_round(RoundTimes(12.0, 2.0, [[r] for r in warm]), warm, n_actors=64)
    assert bill.projected_round_s == pytest.approx(2.0 + 0.13 + 0.301 + 0.43)
    host_s = ledger.learner_usd_s
    assert bill.cost_serverless_wall_usd - bill.cost_serverless_usd == pytest.approx(host_s * (12.0 - 2.861))
    assert bill.cost_server_usd < bill.cost_server_wall_usd


def test_a_started_server_pool_stays_up_and_is_billed_idle() -> None:
    """Growing past one host pays the start-up again; shrinking keeps every started host billed until the job
    ends (the old ledger billed only the hosts the round needed)."""
    ledger = CostLedger(load_prices())
    first = ledger.bill_round(RoundTimes(1.0, 0.5, []), [], n_actors=16)
    bigger = ledger.bill_round(RoundTimes(1.0, 0.5, []), [], n_actors=17, actor_hosts=first.actor_hosts)
    assert bigger.actor_hosts == 2
    assert bigger.projected_server_round_s == pytest.approx(0.5 + 60.0)  # the learner's 0.5 s, no function
    shrink = ledger.bill_round(RoundTimes(1.0, 0.5, []), [], n_actors=4, actor_hosts=bigger.actor_hosts)
    assert shrink.projected_server_round_s == pytest.approx(0.5) and shrink.actor_hosts == 2
    two_hosts = ledger.learner_usd_s + 2 * ledger.actor_usd_s + 3 * ledger.host_overhead_usd_s
    assert shrink.cost_server_usd == pytest.approx(two_hosts * 0.5)


def test_arm_is_cheaper() -> None:
    x86 = CostLedger(load_prices(), "aws_lambda_x86", learner_device="cuda")
    arm = CostLedger(load_prices(), "aws_lambda_arm", learner_device="cuda")
    assert arm.bill_round(_times(), _records(), 3).cost_serverless_usd < x86.bill_round(
        _times(), _records(), 3).cost_serverless_usd


def test_bad_price_files_fail_with_one_line(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_prices(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("aws_lambda: {x86_usd_per_gb_s: -1}\n")
    with pytest.raises(ConfigError, match="aws_lambda"):
        load_prices(bad)
    shipped = yaml.safe_load((Path(minionsrl.__file__).parent / "data" / "prices.yaml").read_text())
    for breaks, message in ((lambda p: p["overheads"]["lithops"].pop("collect_s"), "overheads.lithops.collect_s"),
                            (lambda p: p["overheads"].pop("ray"), "no overheads.ray profile"),
                            (lambda p: p["overheads"]["direct"].update(parallel_invokes=0), "positive integer"),
                            (lambda p: p["overheads"]["servers"].pop("source"), "where its figures come from"),
                            (lambda p: p["storage_requests"].update(usd_per_1000_list=-1), "usd_per_1000_list")):
        prices = copy.deepcopy(shipped)
        breaks(prices)
        bad.write_text(yaml.safe_dump(prices))
        with pytest.raises(ConfigError, match=message):
            load_prices(bad)


def test_least_budget_counts_the_learner_host(tmp_path) -> None:
    """A budget below what round 1 must cost is refused before any work, learner host included: $0.00001 was
    accepted when only the functions' requests counted, and round 1 then spent 35x that."""
    from minionsrl.config import TrainConfig
    from minionsrl.prepare import prepare_config

    ledger = CostLedger(load_prices(), "aws_lambda_x86", cold_start_s=1.0)
    assert ledger.least_round_usd(8) > ledger.learner_usd_s * 1.0 > 0
    with pytest.raises(ConfigError, match="learner host"):
        prepare_config(TrainConfig(env_id="CartPole-v1", budget_usd=0.00001, max_rounds=1,
                                   run_dir=str(tmp_path / "r")))
    prepare_config(TrainConfig(env_id="CartPole-v1", budget_usd=0.01, max_rounds=1, run_dir=str(tmp_path / "r")))


def test_the_learner_host_follows_the_learner_device(tmp_path) -> None:
    """A CPU learner is billed as the catalogue's CPU host, a GPU learner as its GPU host; the run's device
    (auto: a GPU when JAX sees one) decides which."""
    from minionsrl.config import TrainConfig
    from minionsrl.prepare import make_ledger, prepare_config

    prices = load_prices()
    cpu = CostLedger(prices, learner_device="cpu").bill_round(_times(), _records(), 3)
    gpu = CostLedger(prices, learner_device="cuda").bill_round(_times(), _records(), 3)
    gap_usd_s = (prices.gpu_learner_host.usd_per_hour - prices.cpu_learner_host.usd_per_hour) / 3600
    assert gpu.cost_serverless_usd - cpu.cost_serverless_usd == pytest.approx(gpu.projected_round_s * gap_usd_s)
    assert gpu.cost_server_usd - cpu.cost_server_usd == pytest.approx(gpu.projected_server_round_s * gap_usd_s)
    cfg, _ = prepare_config(TrainConfig(env_id="CartPole-v1", max_rounds=1, run_dir=str(tmp_path / "r")))
    import jax

    assert cfg.learner.device == "auto"  # the config keeps what was asked for: a run can resume on another machine
    try:
        gpu_here = bool(jax.devices("gpu"))
    except RuntimeError:  # no GPU backend (or no device it can use)
        gpu_here = False
    assert make_ledger(cfg).learner_host.name == ("p3.2xlarge" if gpu_here else "c5.large")


@pytest.mark.parametrize("run_s", ["abc", float("nan"), -1.0, 1e12, True, None])
def test_a_reply_with_forged_timings_is_a_failed_attempt_not_a_bill(run_s) -> None:
    """A reply signed with the run key whose timings are not numbers, not finite, negative or longer than its
    caller waited is refused as a bad reply (retried like any failure), never billed as given."""
    from minionsrl.backends.base import make_reply
    from minionsrl.function import wire

    key = b"k" * 32
    meta = {"id": "r1-train-0", "timings": {"init_s": 0.01, "run_s": run_s, "cpu_s": 0.1}}
    record = InvocationRecord("r1-train-0", "train", duration_s=2.0)
    reply = make_reply(record, wire.encode({}, meta, wire.invocation_key(key, "r1-train-0")), key)
    assert not reply.ok and record.status == "failed" and record.error.startswith("bad reply: timings")
    good = InvocationRecord("r1-train-0", "train", duration_s=2.0)
    meta["timings"]["run_s"] = 0.5
    assert make_reply(good, wire.encode({}, meta, wire.invocation_key(key, "r1-train-0")), key).ok
    assert good.run_s == 0.5


@pytest.mark.parametrize("reused, fetched, ok", [(0.001, False, True), (0.001, True, False), (5.0, False, False),
                                                 (0.0, True, True)])
def test_a_reused_policy_load_is_billed_only_where_it_can_be_true(reused, fetched, ok) -> None:
    """A reply may say its instance had loaded the policy for an earlier invocation, but not beside a load of its
    own (billed twice) nor longer than its whole invocation: such a reply is a failed attempt, not a bill."""
    from minionsrl.backends.base import make_reply
    from minionsrl.function import wire

    key = b"k" * 32
    meta = {"id": "r1-train-0", "policy_fetched": fetched,
            "timings": {"init_s": 0.001, "run_s": 0.5, "cpu_s": 0.5, "reused_policy_s": reused}}
    record = InvocationRecord("r1-train-0", "train", duration_s=2.0)
    reply = make_reply(record, wire.encode({}, meta, wire.invocation_key(key, "r1-train-0")), key)
    assert reply.ok is ok
    assert record.reused_policy_s == (reused if ok else 0.0)
    assert ok or record.error.startswith("bad reply: timings")


@pytest.mark.parametrize("policy_bytes", ["abc", -5, 1.5, True, [1], None])
def test_a_reply_whose_policy_bytes_are_not_a_byte_count_is_a_failed_attempt(policy_bytes) -> None:
    """The bytes a function says it fetched are billed as transfer: a reply signed with the run key that gives
    anything but a non-negative whole number there is a bad reply (retried), never a crash or a negative bill."""
    from minionsrl.backends.base import make_reply
    from minionsrl.function import wire

    key = b"k" * 32
    meta = {"id": "r1-train-0", "policy_bytes": policy_bytes, "timings": {"run_s": 0.5}}
    record = InvocationRecord("r1-train-0", "train", duration_s=2.0)
    reply = make_reply(record, wire.encode({}, meta, wire.invocation_key(key, "r1-train-0")), key)
    assert not reply.ok and record.error.startswith("bad reply: policy_bytes"), record.error
    meta["policy_bytes"] = 4096
    good = InvocationRecord("r1-train-0", "train", duration_s=2.0)
    assert make_reply(good, wire.encode({}, meta, wire.invocation_key(key, "r1-train-0")), key).ok
    assert good.bytes_in == 4096


def test_a_row_of_an_older_run_reads_with_the_new_columns_at_their_defaults() -> None:
    """invocations.csv of a run from before reused_policy_s: the column missing, or (a resumed run, its file
    rewritten with the new header) empty in its old rows."""
    row = {"invocation_id": "r1-train-0", "kind": "train", "instance_id": "i", "cold": "False", "init_s": "0.1",
           "run_s": "0.5", "cpu_s": "0.5", "init_wait_s": "0", "run_wait_s": "0", "duration_s": "0.7",
           "bytes_in": "900", "bytes_out": "5000", "status": "ok", "error": "", "round": "1"}
    for old in (row, {**row, "reused_policy_s": ""}):
        record = InvocationRecord.from_row(old)
        assert record.reused_policy_s == 0.0 and record.init_s == 0.1 and record.bytes_in == 900
    assert InvocationRecord.from_row({**row, "reused_policy_s": "0.0006"}).reused_policy_s == 0.0006
