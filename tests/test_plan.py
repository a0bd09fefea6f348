"""``minionsrl plan``: the round model's arithmetic by hand, the forecast's picks, the whole command on CartPole,
and bad input as one line before any work."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from importlib import resources

import pytest
import yaml

from minionsrl.backends.base import InvocationRecord
from minionsrl.config import TrainConfig
from minionsrl.cost import CostLedger, RoundTimes, load_prices
from minionsrl.deployments import DEPLOYMENTS
from minionsrl.experiments.plan import PLATFORMS, Probe, forecast, picks, probe_actors, report, run_plan, verdict
from minionsrl.forecast import function_stats, model_round


def _shipped_catalogue() -> dict:
    """The shipped price catalogue as its YAML says it, for sums worked by hand."""
    return yaml.safe_load(resources.files("minionsrl").joinpath("data", "prices.yaml").read_text())


def test_a_modelled_round_is_billed_as_worked_by_hand():
    """4 functions of 10 ms init and 1 s run, a learner part of 0.5 s, the direct-invoke profile (a Lambda Invoke:
    30 ms, 64 calls at once, nothing to collect), Lambda x86 at 1,769 MB, one actor host of 16 vCPUs, whose bill
    prices the servers' path (4 RPCs of 1 ms one after the other, 1 ms to collect)."""
    prices = load_prices()
    ledger = CostLedger(prices, "aws_lambda_x86", 1769, 1.0, "cpu", DEPLOYMENTS["direct"])
    function = InvocationRecord(invocation_id="m", kind="train", init_s=0.01, run_s=1.0, cpu_s=1.0)
    got = ledger.model_round(0.5, function, 4)
    assert got.round_s == pytest.approx(0.5 + 0.03 + 1.01 + 0.0)
    catalogue = _shipped_catalogue()  # the YAML's own numbers, worked by hand
    lam, servers = catalogue["aws_lambda"], catalogue["servers"]
    learner_usd_s = servers["cpu_learner_host"]["usd_per_hour"] / 3600
    one = 1.010 * 1769 / 1024 * lam["x86_usd_per_gb_s"] + lam["usd_per_million_requests"] / 1e6  # 1 ms billing
    assert got.serverless_usd == pytest.approx(learner_usd_s * 1.54 + 4 * one)
    per_s = (learner_usd_s + servers["actor_host"]["usd_per_hour"] / 3600
             + 2 * servers["usd_per_host_month"] / (30 * 24 * 3600))
    assert got.server_usd == pytest.approx(per_s * (0.5 + 4 * 0.001 + 1.01 + 0.001))
    assert (got.learner_s, got.function_s, got.overhead_s) == pytest.approx((0.5, 1.01, 0.03))


def _probe(sample_s: float = 1e-3, quantiles: tuple[float, ...] | None = None) -> Probe:
    """A probe's figures (a sample of ``sample_s`` every time, unless ``quantiles`` spread it)."""
    return Probe(sample_s=sample_s, sample_quantiles=quantiles or (sample_s,) * 21, init_s=0.01, busy_share=1.0,
                 reply_bytes_per_sample=100.0, learner_batches=(0, 1), learner_seconds=(0.05, 0.05 + 1e-5),
                 compile_s=2.0, local_cold_start_s=1.0, probe_s=0.0)  # the learner 50 ms + 10 µs a sample


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


def test_the_learner_follows_its_measured_points_not_a_line_through_the_first_two():
    """CartPole's learner: 20 SGD steps at 64 and at 256 samples (one minibatch), then one more step per 256
    samples; measured 10 ms, 15 ms and 40 ms at 64, 256 and 1,024 samples."""
    steps = replace(PROBE, learner_batches=(64, 256, 1024), learner_seconds=(0.010, 0.015, 0.040))
    assert steps.learner_s(640) == pytest.approx(0.0275)  # between points: on the segment
    assert steps.learner_s(2048) == pytest.approx(0.040 + 0.025 / 768 * 1024)  # past them: the last segment
    assert steps.learner_s(0) == pytest.approx(0.010 - 0.005 / 192 * 64)  # before them: the first
    assert replace(steps, learner_seconds=(0.01, 0.05, 0.06)).learner_s(0) == 0.0  # never below 0
    assert replace(steps, learner_batches=(256,), learner_seconds=(0.02,)).learner_s(4096) == 0.02  # one: constant
    # a round of 64 functions of 32 steps: 2,048 samples, the last segment's 73 ms (a line through 64 and 256
    # samples would say 62 ms)
    rows = forecast(TrainConfig(env_id="CartPole-v1", fragment_length=32, total_timesteps=65_536), steps,
                    platforms={"lambda": "direct"}, counts=[64])
    assert rows[0].learner_s == pytest.approx(0.040 + 0.025 / 768 * 1024)


def test_the_functions_of_a_modelled_round_bill_n_times_the_mean_and_it_waits_for_the_slowest():
    """Three warm functions of 100 samples and 10 ms init, at 1, 1 and 4 ms a sample: the round's stats are the
    mean (2 ms) and the slowest (4 ms), and a round modelled from them bills 2 x 110 ms + 410 ms, as the three did
    (not 2 means and the slowest on top: 2 x 210 ms + 410 ms), and waits 410 ms for the slowest."""
    ledger = CostLedger(load_prices(), "aws_lambda_x86", 1769, 1.0, "cpu", DEPLOYMENTS["direct"])
    records = [InvocationRecord(invocation_id=str(i), kind="train", init_s=0.01, run_s=run, cpu_s=run)
               for i, run in enumerate((0.1, 0.1, 0.4))]
    stats = function_stats([(r, 100) for r in records])
    assert (stats.sample_s, stats.slowest_sample_s) == pytest.approx((2e-3, 4e-3))
    modelled = model_round(ledger, 0.5, stats, 3, 100)
    projected = ledger.projected_s(RoundTimes(0.0, 0.5, [[r] for r in records]))
    assert modelled.round_s == pytest.approx(projected) == pytest.approx(0.5 + 0.03 + 0.41)
    assert modelled.serverless_usd == pytest.approx(ledger.serverless_usd(projected, records, projected - 0.5)[0])
    gb_s = 1769 / 1024 * _shipped_catalogue()["aws_lambda"]["x86_usd_per_gb_s"]
    assert modelled.serverless_usd - ledger.learner_usd_s * projected == pytest.approx(
        (2 * 0.11 + 0.41) * gb_s + 3 * 2e-7)


def test_the_verdict_says_what_serverless_pays_in():
    """Time against this machine, dollars against servers: one, both or neither, said as such; the direct invoke
    only as a labelled what-if."""
    quick = _probe(3e-5)  # 30 µs a step: Lambda's half-second a round dominates
    said = verdict(forecast(_cfg(), quick, cap=64), quick)
    assert said.startswith("Serverless (Lambda via Lithops) pays neither in time nor in dollars for this job")
    slow = _probe(0.02)  # 20 ms of CPU a step: 2 cores take 22 min; Lambda sooner, servers cheaper
    said = verdict(forecast(_cfg(), slow, cap=64), slow)
    assert said.startswith("Serverless (Lambda via Lithops) pays in time, not in dollars")
    assert "What-if: invoked directly, as the papers ran it (no backend here ships that path)" in said


def test_a_verdict_within_a_tenth_calls_it_even_rather_than_flip_on_the_probes_noise():
    """Lambda's best run 3% slower than this machine's (2.7 against 2.6 min flipped the verdict between two probes
    of one job): about as fast, not "does not pay in time"."""
    slow = _probe(0.02)
    rows = forecast(_cfg(), slow, cap=64)
    here = min((r for r in rows if r.platform == "local"), key=lambda r: r.run_s).run_s
    even = [replace(r, run_s=here * 1.03 * (1 + r.n / 1e3)) if r.platform == "lambda" else r for r in rows]
    said = verdict(even, slow)
    assert said.startswith("Serverless (Lambda via Lithops) is about as fast as this machine (within 10%) and does "
                           "not pay in dollars for this job"), said


def test_counts_whose_fragments_cut_every_episode_are_marked_and_never_picked():
    """Episodes not carried and 200 steps long: at 2,048 samples a round, 16 or more functions step under 200 each,
    so no training episode would end; plan marks those rows and picks among the others."""
    uncarried = replace(_probe(0.02), carries=False, episode_steps=200)
    cfg = TrainConfig(env_id="Pendulum-v1", train_batch_size=2048, total_timesteps=131_072)
    rows = forecast(cfg, uncarried, cap=64)
    assert {r.n for r in rows if r.cuts_episodes} == {16, 32, 64}
    for platform in PLATFORMS:
        assert max(vars(picks(rows, platform)).values()) <= 8
    assert not any(r.cuts_episodes for r in forecast(cfg, _probe(0.02), cap=64))  # carried: nothing cut


def test_counts_whose_fragments_are_under_64_steps_are_marked_and_never_picked():
    """Episodes carried, 2,048 samples a round: 64 functions would step 32 each and 128 16, under the shortest
    fragment at which every env measured learned as much a round; those rows are marked `short` and never picked,
    however fast their round (20 ms a step: the more functions, the sooner)."""
    cfg = TrainConfig(env_id="Pendulum-v1", train_batch_size=2048, total_timesteps=131_072)
    rows = forecast(cfg, _probe(0.02), cap=128)
    assert {r.n for r in rows if r.short_fragments} == {64, 128} == {r.n for r in rows if not r.learns}
    assert min((r for r in rows if r.platform == "lambda"), key=lambda r: r.run_s).n == 128  # fastest, as modelled
    assert picks(rows, "lambda").fastest == 32
    assert "128 short" in report(cfg, _probe(0.02), rows) and "marked `short` and never picked" in report(
        cfg, _probe(0.02), rows)


def test_a_fixed_fragment_length_is_never_short_and_a_plan_whose_every_count_is_says_so():
    """CartPole's preset, 32 steps a function whatever the count: the user's layout, the same at every count, so
    no row is `short` (plan once marked them all and then picked from them). A plan whose every count splits its
    constant batch under 64 steps says that its picks come from marked rows only because every count is one."""
    fixed = TrainConfig(env_id="CartPole-v1", fragment_length=32, total_timesteps=131_072)
    assert all(r.learns for r in forecast(fixed, PROBE, cap=64))
    thin = TrainConfig(env_id="Pendulum-v1", train_batch_size=256, total_timesteps=131_072)
    rows = forecast(thin, _probe(0.02), cap=64, counts=[8, 16, 32])  # 32, 16 and 8 steps a function
    assert not any(r.learns for r in rows)
    text = report(thin, _probe(0.02), rows)
    assert "never picked" not in text and "picked below only because every count is marked" in text


def test_to_a_target_from_the_recorded_rounds_times_the_forecast_round():
    """Hopper-v5 to 2,500 at 4,096 samples a round is a recorded job: fixed-8's seeds took 140, none, 70, 110 and 70
    rounds; each is that many forecast rounds, plus the first round's compilation and cold start. An unrecorded job
    has no basis, and says so."""
    from minionsrl.experiments.plan import target_text, to_target

    cfg = TrainConfig(env_id="Hopper-v5", train_batch_size=4096, total_timesteps=1_000_000, eval_every=10)
    rows = forecast(cfg, PROBE, cap=128)
    got = {(g.n, g.platform): g for g in to_target(cfg, PROBE, rows, 2500.0)}
    eight = got[8, "lambda"]
    assert (eight.reached, eight.seeds, eight.rounds) == (4, 5, (97.5, 70.0, 140.0))
    lam = next(r for r in rows if r.platform == "lambda" and r.n == 8)
    assert eight.seconds[2] == pytest.approx(140 * lam.round_s + PROBE.compile_s + cfg.cost.cold_start_s)
    assert eight.usd[2] > 140 * lam.usd_per_round  # and 14 evaluations' functions
    assert eight.priced_as == "aws_lambda_x86 via lithops" and got[8, "server"].priced_as == "servers"
    assert to_target(cfg.replace(train_batch_size=2048), PROBE, rows, 2500.0) == []
    unrecorded = target_text(cfg, 3000.0, [], rows)[0]
    assert "no recorded basis" in unrecorded
    # the comparison it suggests runs as printed: this job's env and batch, capped at fixed-64's or fixed-8's
    # forecast seconds for the step budget (Lambda), whichever is longer
    import shlex

    from minionsrl import cli

    command = unrecorded.split("`")[1]
    args = cli.build_parser().parse_args(shlex.split(command)[1:])
    cap = max(r.run_s for r in rows if r.platform == "lambda" and r.n in (8, 64))
    assert (args.command, args.env_id, args.train_batch_size, args.until, args.target) == (
        "compare", "Hopper-v5", 4096, "target", 3000.0)
    assert args.scalers == "fixed:8,fixed:64" and cap <= args.time_budget_s < cap + 10


def test_every_row_names_its_deployment_as_a_run_does():
    rows = forecast(_cfg(), PROBE, cap=8)
    named = {r.platform: (r.priced_as, r.shipped) for r in rows}
    assert named["lambda"] == ("aws_lambda_x86 via lithops", True)
    assert named["lambda-direct"][1] is False and "what-if" in named["lambda-direct"][0]
    assert named["server"] == ("servers", True) and named["ray"] == ("ray cluster", True)
    from minionsrl.prepare import make_ledger
    assert make_ledger(_cfg()).priced_as == named["lambda"][0]  # a local run's deployment has a row


@pytest.mark.integration
def test_plan_on_cartpole_writes_the_table_the_json_and_the_frontier(tmp_path):
    cfg = TrainConfig(env_id="CartPole-v1", total_timesteps=50_000, hidden_sizes=[16], seed=1)
    said: list[str] = []
    text, _ = run_plan(cfg, cap=32, out_dir=tmp_path / "plan", json_path=tmp_path / "plan.json", say=said.append)
    # the probe says what it runs as it starts each run, and when it is done (the CLI prints these to stderr)
    assert len(said) == 3 and said[0].startswith("plan: probe 1 of 2: 4 rounds of 2 actors (256 env steps) on ")
    assert said[1].startswith("plan: probe 2 of 2: 4 rounds of 8 actors (1,024 env steps) on this machine, ")
    assert said[2].startswith("plan: probed in ") and said[2].endswith(" s; forecasting")
    data = json.loads((tmp_path / "plan.json").read_text())
    assert {(r["n"], r["platform"]) for r in data["rows"]} == {(2**i, p) for i in range(6) for p in PLATFORMS}
    for row in data["rows"]:
        assert row["round_s"] > 0 and row["usd_per_round"] > 0 and math.isfinite(row["run_usd"])
    probe = data["probe"]
    assert 0 < probe["sample_s"] < 0.05 and 0 < probe["busy_share"] <= 1
    # the learner's seconds a round at the two runs' batches (2 and 8 actors of the preset's 32 steps), and, its
    # update being cheap, at four times the larger one, carried on by the replays' slope (never down)
    assert probe["learner_batches"] == [64, 256, 1024] and all(s >= 0 for s in probe["learner_seconds"])
    assert probe["learner_seconds"][2] >= probe["learner_seconds"][1]
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


@pytest.mark.parametrize(("envs", "actors"), [(1, (2, 8)), (2, (1, 4)), (4, (1, 2)), (8, (1, 2)), (16, (1, 2))])
def test_the_probe_learns_on_the_one_env_layouts_batches(envs, actors):
    """With E envs a function, the probe runs E times fewer actors: 1 × 8 is measured at 8 streams, as 8 × 1 is."""
    assert probe_actors(envs) == actors


def test_at_autos_batch_plan_says_how_to_start_auto_at_the_knee():
    """At a constant batch plan names the ``--initial-actors`` that starts ``--actors auto`` at Lambda's knee (and the
    ``--n-min`` that lets it, below the default 8); at a batch growing with ``n``, the plan at auto's batch instead."""
    from minionsrl.experiments.plan import auto_text

    cfg = TrainConfig(env_id="Pendulum-v1", train_batch_size=4096, total_timesteps=131_072)
    for step_s in (3e-5, 0.02):
        rows = forecast(cfg, _probe(step_s), cap=64)
        knee = picks(rows, "lambda").knee
        said = auto_text(cfg, rows)
        assert f"`--actors auto --initial-actors {knee}" in said
        assert (f"--n-min {knee}`" in said) == (knee < 8)
        assert f"learns as `--actors {knee} --train-batch-size 4096` does" in said
    assert {picks(forecast(cfg, _probe(s), cap=64), "lambda").knee for s in (3e-5, 0.02)} == {1, 64}  # both branches
    growing = auto_text(_cfg(), forecast(_cfg(), PROBE, cap=8))
    assert "--initial-actors" not in growing and "`minionsrl plan --actors auto` forecasts at that batch" in growing
