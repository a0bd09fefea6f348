"""``--actors auto`` (issue 42): the auto scaler on a hand-worked round model, its config, and a real run."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from minionsrl import cli
from minionsrl.build import make_scaler, round_forecast
from minionsrl.config import TrainConfig, build, resolve
from minionsrl.errors import ConfigError
from minionsrl.forecast import doubling_counts, env_check_stats, knee
from minionsrl.scaling.auto import AutoScaler, first_count, start_count
from minionsrl.stats import FunctionStats, RoundStats

STATS = FunctionStats(sample_s=1e-3, slowest_sample_s=1e-3, init_s=0.01, busy_share=1.0, bytes_per_sample=100.0)


def _model(n: int, learner_s: float, stats: FunctionStats) -> tuple[float, float]:
    """A hand-worked round: the learner, 0.01 s an invocation, and 8 s of stepping the functions share;
    dollars 1e-5 a second of round plus 1e-6 an invocation."""
    seconds = learner_s + 0.01 * n + 8000 * stats.sample_s / n
    return seconds, 1e-5 * seconds + 1e-6 * n


def _row(round_idx: int, n: int, cold: int = 0, scale: float = 1.0, **extra: float) -> RoundStats:
    seconds, usd = _model(n, 1.0, STATS)
    return RoundStats.from_row({"round": round_idx, "n_actors": n, "cold_starts": cold, "projected_learner_s": 1.0,
            "projected_round_s": scale * seconds, "cost_serverless_usd": scale * usd, "env_steps": 4096 * round_idx,
            "cum_cost_serverless_usd": scale * usd * round_idx, **STATS.columns(), **extra}, complete=False)


def test_the_knee_and_the_counts_weighed_by_hand() -> None:
    # D(8) = 1 + 0.08 + 1 = 2.08; D(16) = 1.66 (20% less); D(32) = 1.57 (5.4% less: not worth doubling); D(64) = 1.765
    assert knee([(8, 2.08), (16, 1.66), (32, 1.57), (64, 1.765)]) == 16
    assert knee([(8, 2.0), (16, 1.0), (32, 0.5)]) == 32  # still paying at the cap: the cap
    assert doubling_counts(8, 64) == [8, 16, 32, 64] and doubling_counts(3, 40) == [3, 4, 8, 16, 32, 40]
    # a step short of a doubling is held to its share of the 10%: 32 → 48 must save 1 - 0.9**0.585 = 6.0%
    assert knee([(32, 1.0), (48, 0.93)]) == 48 and knee([(32, 1.0), (48, 0.95)]) == 32


def test_auto_measures_a_warm_round_then_picks_the_knee() -> None:
    auto = AutoScaler(8, 64, 8, _model)
    assert auto.next_actors(None) == 8
    assert auto.next_actors(_row(1, 8, cold=8)) == 8  # a cold round measures starting instances: not used
    assert auto.model.stats is None
    assert auto.next_actors(_row(2, 8)) == 16  # warm: D(16) 1.66 s, D(32) only 5% less
    assert auto.score == 16.0 and auto.model.stats == STATS and auto.model.learner_s == 1.0
    assert auto.next_actors(_row(3, 16, cold=8)) == 16  # the new instances' first round: stays to measure it
    assert auto.next_actors(_row(4, 16)) == 16


def test_auto_says_why_it_changes_the_count_and_nothing_when_it_keeps_it() -> None:
    auto = AutoScaler(8, 64, 8, _model)
    auto.next_actors(None)
    assert auto.reason.startswith("starts at 8 actors, from the given --initial-actors: its second round measures it")
    auto.next_actors(_row(1, 8, cold=8))
    assert auto.reason is None
    auto.next_actors(_row(2, 8))
    assert auto.reason == ("8 -> 16 actors: the knee of the round model: doubling it would shorten a round by under "
                           "10% (a round forecast at 1.66 s and $3.26e-05 against 2.08 s and $2.88e-05 at 8, as "
                           "measured)")
    auto.next_actors(_row(3, 16))
    assert auto.reason is None  # kept
    poor = AutoScaler(8, 64, 16, _model, total_timesteps=4096 * 12, budget_usd=3.26e-5 * 2 + 1.7e-5 * 10)
    poor.next_actors(_row(1, 16, cold=16))
    poor.next_actors(_row(2, 16))
    assert "16 -> 8 actors" in poor.reason and "over 8 the forecast overruns budget_usd" in poor.reason


def test_a_second_round_that_started_more_instances_still_measures_its_warm_functions() -> None:
    """The local backend grows its pool as it learns how much the functions wait: round 2 starts a few more
    instances. Its warm functions and the learner still measure the count, so auto picks at once; only the
    correction of the forecast waits for a round without starts (a cold start's modelled second is not the count's)."""
    auto = AutoScaler(8, 64, 8, _model)
    auto.next_actors(_row(1, 8, cold=8))
    assert auto.next_actors(_row(2, 8, cold=3, scale=3.0)) == 16
    assert auto.model.stats == STATS and auto.model.ratios == {}


def test_auto_corrects_the_model_by_what_each_count_measured() -> None:
    auto = AutoScaler(8, 64, 8, _model)
    auto.next_actors(_row(1, 8, cold=8))
    auto.next_actors(_row(2, 8, scale=2.0))  # the round took twice the model's seconds and dollars
    assert auto.model.predicted(8) == pytest.approx(tuple(2 * x for x in _model(8, 1.0, STATS)))
    # 64's nearest measured count: 8
    assert auto.model.predicted(64) == pytest.approx(tuple(2 * x for x in _model(64, 1.0, STATS)))
    # a round with an evaluation beside it runs long: the median of a count's latest rounds is its correction
    for i, scale in enumerate([1.0, 1.0, 5.0, 1.0]):
        auto.next_actors(_row(3 + i, 8, scale=scale))
    assert auto.model.predicted(8)[0] == pytest.approx(_model(8, 1.0, STATS)[0])


def test_auto_for_dollars_takes_the_cheapest_count() -> None:
    auto = AutoScaler(8, 64, 16, _model, objective="cost")
    auto.next_actors(_row(1, 16, cold=16))
    # $ = 1e-5·D(n) + 1e-6·n: 2.88e-5 at 8, 3.26e-5 at 16, 4.77e-5 at 32: the fewest actors
    assert auto.next_actors(_row(2, 16)) == 8


def test_auto_keeps_to_a_dollar_budget() -> None:
    rounds_left = 10  # 40,960 steps left at 4,096 a round
    budget = 3.26e-5 * 2 + 1.7e-5 * rounds_left  # spent two rounds at 16; about $1.7e-5 a round left
    auto = AutoScaler(8, 64, 16, _model, total_timesteps=4096 * (2 + rounds_left), budget_usd=budget)
    auto.next_actors(_row(1, 16, cold=16))
    assert auto.next_actors(_row(2, 16)) == 8  # no count fits: the cheapest
    rich = AutoScaler(8, 64, 16, _model, total_timesteps=4096 * 12, budget_usd=1.0)
    rich.next_actors(_row(1, 16, cold=16))
    assert rich.next_actors(_row(2, 16)) == 16  # the knee fits: already there


def test_auto_stays_when_the_pick_saves_under_five_percent() -> None:
    auto = AutoScaler(8, 64, 32, _model)
    auto.next_actors(_row(1, 32, cold=32))
    # the knee is 16: 1.66 s vs 1.57 s at 32, slower; 3.26e-5 vs 4.77e-5 dollars, 32% cheaper: moves
    assert auto.next_actors(_row(2, 32)) == 16
    far = AutoScaler(8, 64, 32, lambda n, a, s: (1.0 + 16.0 / n, 1e-5 * (1.0 + 16.0 / n) + 1e-9 * n))
    far.next_actors(_row(1, 32, cold=32))
    # 32 → 64 saves 17%, past the knee's 10% by more than its margin: the knee is 64, 17% faster than 32: moves
    assert far.next_actors(_row(2, 32)) == 64
    flat = AutoScaler(8, 64, 32, lambda n, a, s: (1.0 + 1.0 / n, 1e-5 * (1.0 + 1.0 / n)))
    flat.next_actors(_row(1, 32, cold=32))
    # the knee is 8 (16 saves 5.5%); 8 is 3% slower and 3% dearer than 32: not worth the change
    assert flat.next_actors(_row(2, 32)) == 32 and flat.score == 8.0


def test_auto_keeps_a_count_that_is_a_knee_within_two_points_of_the_threshold() -> None:
    """32 → 64 saving 9-11%: the plain rule's knee is 32 below 10% and 64 from it, but with cutoffs of 8% and 12% the
    knees are 64 and 32, so a count that near the threshold stays where it is, from either side, rather than flip
    as its measured rounds move the forecast by a point; 14% moves it up, 6% down."""
    def rounds(save: float):
        return lambda n, a, s: (1.0 if n < 64 else 1.0 - save, 1e-5 * (1.0 if n < 64 else 1.0 - save) + 1e-7 * n)

    for start in (32, 64):
        for save in (0.09, 0.10, 0.11):
            auto = AutoScaler(32, 64, start, rounds(save))
            auto.next_actors(_row(1, start, cold=start))
            assert auto.next_actors(_row(2, start)) == start, (start, save)
            assert knee([(32, 1.0), (64, 1.0 - save)]) == (64 if save >= 0.10 else 32)  # the plain rule would move
    up = AutoScaler(32, 64, 32, rounds(0.14))
    up.next_actors(_row(1, 32, cold=32))
    assert up.next_actors(_row(2, 32)) == 64
    down = AutoScaler(32, 64, 64, rounds(0.06))
    down.next_actors(_row(1, 64, cold=64))
    assert down.next_actors(_row(2, 64)) == 32  # 6%: the knee is 32, 16% cheaper


def test_auto_resumes_from_its_state() -> None:
    auto = AutoScaler(8, 64, 8, _model)
    for row in (_row(1, 8, cold=8), _row(2, 8, scale=1.5)):
        auto.next_actors(row)
    again = AutoScaler(8, 64, 8, _model)
    again.load_state_dict(auto.state_dict())
    assert (again.model.stats, again.model.learner_s, again.model.ratios, again.previous) == (
        auto.model.stats, auto.model.learner_s, auto.model.ratios, auto.previous) and auto.previous == 8
    assert again.next_actors(_row(3, 8, scale=1.5)) == auto.next_actors(_row(3, 8, scale=1.5))
    assert again.model.predicted(32) == auto.model.predicted(32)


def _flags(*argv: str) -> TrainConfig:
    return cli.train_config(cli.build_parser().parse_args(["train", *argv]))[0]


def test_actors_auto_is_the_auto_scaler_with_the_default_count_s_batch() -> None:
    cfg = _flags("--env-id", "CartPole-v1", "--actors", "auto", "--total-timesteps", "1000")
    assert cfg.scaling.actors == "auto"
    resolved = resolve(cfg, "classic")
    # CartPole's row: 32 steps a function, 8 functions: a batch of 256 whatever auto picks
    assert resolved.scaling.scaler == "auto" and resolved.scaling.actors == 8
    assert resolved.env.train_batch_size == 256 and resolved.env.fragment_length is None
    assert resolved.scaling.objective == "time"
    cost = resolve(_flags("--actors", "auto", "--optimize", "cost", "--total-timesteps", "1000"), "classic")
    assert cost.scaling.objective == "cost"
    assert resolve(TrainConfig(scaler="critical", total_timesteps=1000), "classic").scaling.objective == "cost"
    yaml_cfg = resolve(build({"actors": "auto", "total_timesteps": 1000}), "classic")
    assert yaml_cfg.scaling.scaler == "auto"
    with pytest.raises(ConfigError, match="actors: auto picks the actor count itself; drop --scaler nitro"):
        resolve(TrainConfig(actors="auto", scaler="nitro", total_timesteps=1000), "classic")


def test_actors_takes_a_number_or_auto_only() -> None:
    out = subprocess.run([sys.executable, "-m", "minionsrl", "train", "--actors", "many"], capture_output=True,
                         text=True)
    assert out.returncode == 2 and "'many' is neither a number nor auto" in out.stderr


def test_make_scaler_prices_the_model_on_the_run_s_ledger() -> None:
    cfg = resolve(TrainConfig(env_id="CartPole-v1", actors="auto", total_timesteps=1000), "classic")
    scaler = make_scaler(cfg)
    # CartPole's 8 x 32 a round: fragments of 64 steps or more leave auto 8 actors only (never under n_min)
    assert isinstance(scaler, AutoScaler) and scaler.n0 == scaler.n_max == 8 and scaler.objective == "time"
    s8, usd8 = round_forecast(cfg)(8, 0.05, STATS)
    s16, usd16 = round_forecast(cfg)(16, 0.05, STATS)
    # 256 samples a round: 32 ms a function at 8, 16 ms at 16, after the learner's 50 ms
    assert s8 > 0.05 + 0.032 and s16 < s8 and usd8 > 0 and usd16 > 0


@pytest.mark.integration
def test_an_auto_run_logs_what_its_functions_did_and_runs_its_pick(tmp_path: Path) -> None:
    from minionsrl import TrainConfig as Config
    from minionsrl import train

    run = tmp_path / "auto"
    # 1,024 a round: auto weighs 8 to 16 actors (CartPole's own 8 x 32 would leave it 8 only: fragments >= 64 steps)
    train(Config(env_id="CartPole-v1", actors="auto", train_batch_size=1024, max_rounds=6, run_dir=str(run),
                 progress=False, tensorboard=False, hidden_sizes=[16]))
    with open(run / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["n_actors"] for r in rows[:2]] == ["16", "16"]  # n_0, cold then (at least) measured
    # a round whose functions all started instances has no warm one to measure (on a busy machine, more than
    # round 1 may start some): its cells are empty; the others hold what a function did per sample
    warm = [r for r in rows if r["function_sample_s"] != ""]
    assert warm and all(0 < float(r["function_sample_s"]) <= float(r["function_slowest_sample_s"]) for r in warm)
    # a row's score is the pick that decided its count: that count, or the one before when it saved under 5%
    picked = [i for i, r in enumerate(rows) if r["scaler_score"] != ""]
    assert picked, "the model never picked"
    i = picked[0]
    pick = int(float(rows[i]["scaler_score"]))
    assert 8 <= pick <= 16 and int(rows[i]["n_actors"]) in (pick, int(rows[i - 1]["n_actors"]))
    # scaler.csv: the start, and each change of the count with its reason, in the round it took effect
    with open(run / "scaler.csv") as fh:
        said = list(csv.DictReader(fh))
    assert said[0]["round"] == "1" and said[0]["n_actors"] == "16" and said[0]["reason"].startswith("starts at 16")
    counts = {int(r["round"]): r["n_actors"] for r in rows}
    changed = [k for k in counts if k > 1 and counts[k] != counts[k - 1]]
    assert [int(r["round"]) for r in said[1:]] == changed
    assert all(r["reason"].startswith(f"{counts[int(r['round']) - 1]} -> {r['n_actors']} actors: ") for r in said[1:])

def test_actors_auto_with_a_batch_size_and_a_budget_is_checked_as_the_auto_scaler() -> None:
    from minionsrl.prepare import prepare_config

    cfg, _ = prepare_config(TrainConfig(env_id="CartPole-v1", actors="auto", train_batch_size=512, budget_usd=1.0,
                                        total_timesteps=1000))
    assert cfg.scaling.scaler == "auto" and cfg.env.train_batch_size == 512  # the user's batch, not 8 actors' one
    with pytest.raises(ConfigError, match="train_batch_size: 32 steps cannot be split over up to 64 functions"):
        prepare_config(TrainConfig(env_id="CartPole-v1", actors="auto", train_batch_size=32, n_max=64,
                                   total_timesteps=1000))


def test_auto_weighs_as_many_actors_as_keep_a_fragment_at_64_steps() -> None:
    """Without --n-max, auto's bound is the batch's (fragments of 64 steps or more), not a fixed 64; the other
    scalers keep 64, and a user's --n-max is kept."""
    def n_max(**fields) -> int | None:
        return resolve(TrainConfig(env_id="Hopper-v5", **fields), "mujoco").scaling.n_max

    assert n_max(actors="auto") == 4096 // 64 == 64
    assert n_max(actors="auto", train_batch_size=16384) == 256
    assert n_max(actors="auto", train_batch_size=2048) == 32
    assert n_max(actors="auto", train_batch_size=128) == 8  # never under n_min
    assert n_max(actors="auto", train_batch_size=1 << 20) == 1000  # Lambda's concurrency
    assert n_max(actors="auto", n_max=32) == 32
    assert n_max(scaler="nitro") == n_max() == 64


def test_auto_measures_its_first_rounds_mid_range() -> None:
    """Without a timed step that mostly waits, auto's n_0 is the power of two nearest the middle of its range on a
    log scale (its pick may be either end); the config leaves it to auto, the other scalers' stays Nitro's 16, and a
    user's --initial-actors is kept."""
    def n0(**fields) -> int | None:
        return resolve(TrainConfig(env_id="Hopper-v5", **fields), "mujoco").scaling.initial_actors

    assert n0(actors="auto") is None and n0(actors="auto", initial_actors=8) == 8 and n0(scaler="nitro") == 16
    assert first_count(None, 8, 64, _model, None) == (32, "the middle of its range")  # sqrt 22.6: the larger
    assert first_count(None, 8, 128, _model, None)[0] == 32
    assert first_count(None, 8, 32, _model, None)[0] == 16
    assert first_count(None, 8, 8, _model, None)[0] == 8  # a range of one count
    assert first_count(8, 8, 64, _model, WAITING)[0] == 8  # a user's --initial-actors wins


WAITING = FunctionStats(sample_s=5e-3, slowest_sample_s=5e-3, init_s=0.0, busy_share=0.05, bytes_per_sample=100.0)


def test_a_step_that_mostly_waits_sets_auto_s_first_count() -> None:
    """The learner's env check timed a step that waits: auto starts at the knee of the model on it, so it runs no
    round at another count; a CPU-bound step (timed slow by a fresh env, and near the knee's line) leaves the start
    mid-range."""
    # 40 s of stepping shared: D(8) 5.08, D(16) 2.66, D(32) 1.57, D(64) 1.27 (19% less), D(128) 1.59
    assert start_count(8, 128, _model, WAITING) == 64
    assert start_count(8, 128, _model, WAITING, objective="cost") == 16  # $4.26e-5 a round against 8's 5.88e-5
    busy = FunctionStats(**{**WAITING.__dict__, "busy_share": 0.9})
    assert start_count(8, 128, _model, busy) is None and first_count(None, 8, 128, _model, busy)[0] == 32
    auto = AutoScaler(8, 128, None, _model, prior=WAITING)
    assert auto.next_actors(None) == 64 and "the env's step as the learner's check timed it (5 ms" in auto.reason
    assert auto.next_actors(_row(1, 64, cold=64)) == 64  # then as ever: measured from its second round


def test_the_env_check_s_step_as_a_function_s_stats() -> None:
    stats = env_check_stats(own_s=0.5e-3, cpu_s=0.4e-3, latency_s=4.5e-3, bytes_per_sample=60.0)
    assert stats.sample_s == stats.slowest_sample_s == pytest.approx(5e-3)  # the added latency waits in every step
    assert stats.busy_share == pytest.approx(0.08) and stats.init_s == 0.0 and stats.bytes_per_sample == 60.0
    assert env_check_stats(0.0, 0.0, 0.0, 60.0).busy_share == 1.0  # nothing timed: taken as busy, no pick


def test_a_run_starts_the_instances_auto_starts_with(tmp_path: Path) -> None:
    """The scaler a run builds reads the env check's step with the functions' added latency: CartPole waiting 20 ms a
    step starts auto at 64 (and the run prewarms 64), CartPole as it is mid-range."""
    from minionsrl.build import scaler_needs
    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.prepare import prepare_config
    from minionsrl.scaling.registry import started_actors

    for latency, first in ((20.0, 64), (0.0, 32)):
        cfg, info = prepare_config(TrainConfig(env_id="CartPole-v1", actors="auto", train_batch_size=4096,
                                               env_step_latency_ms=latency, total_timesteps=8192,
                                               run_dir=str(tmp_path / "run")))
        assert info.step_own_s >= info.step_cpu_s > 0  # CartPole's own step: all CPU, under 20 ms
        needs = scaler_needs(cfg, info, PolicyArch.of(info, cfg.learner.hidden_sizes))
        scaler = make_scaler(cfg, needs=needs)
        assert started_actors(cfg, needs) == scaler.next_actors(None) == first


def test_auto_refuses_rounds_it_does_not_model_and_is_an_arm_of_compare() -> None:
    from minionsrl.experiments.compare import Arm

    for flags in ({"algo": "appo"}, {"pipeline": True}):
        with pytest.raises(ConfigError, match="scaler: auto models a synchronous round"):
            resolve(TrainConfig(actors="auto", total_timesteps=1000, **flags), "classic")
    arm = Arm.parse("auto:cost")
    assert (arm.scaler, arm.objective, arm.label) == ("auto", "cost", "auto-cost")
    with pytest.raises(ConfigError, match="or an objective"):
        Arm.parse("auto:fast")


@pytest.mark.integration
def test_compare_takes_actors_auto_as_its_base(tmp_path: Path) -> None:
    """An arm's own scaler and count replace the base's auto (they crashed the learner's batch before)."""
    assert cli.main(["compare", "--env-id", "CartPole-v1", "--actors", "auto", "--scalers", "fixed:16", "--seeds", "1",
                     "--rounds", "2", "--eval-every", "0", "--out", str(tmp_path / "cmp"), "--no-progress",
                     "--no-tensorboard", "--hidden-sizes", "16"]) == 0
    with open(tmp_path / "cmp" / "runs" / "fixed-16__s1" / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["n_actors"], r["env_steps"]) for r in rows] == [("16", "512"), ("16", "1024")]  # 16 x 32 steps
