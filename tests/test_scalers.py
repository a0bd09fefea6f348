"""Scaling rules on worked examples (DESIGN §2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from minionsrl import config
from minionsrl.build import make_scaler
from minionsrl.config import TrainConfig
from minionsrl.scaling.registry import SCALERS, first_actors
from minionsrl.scaling.rules import (
    CriticalScaler,
    FixedScaler,
    GnsBoostScaler,
    HydrozoaScaler,
    KungFuScaler,
    NitroScaler,
    RandomScaler,
)
from minionsrl.stats import FunctionStats, RoundStats


def _row(round_idx: int, n: int, **extra: float) -> RoundStats:
    return RoundStats.from_row({"round": round_idx, "n_actors": n, **extra}, complete=False)


def test_nitro_floor_is_the_published_schedule() -> None:
    nitro = NitroScaler()
    assert [int(nitro.floor(r)) for r in range(1, 9)] == [61, 54, 44, 33, 23, 14, 8, 8]
    linear = NitroScaler(floor="r")
    assert int(linear.floor(1)) == 61 and int(linear.floor(20)) == 28  # 64 * 0.96**20 = 28.3


def test_nitro_scores_within_the_window() -> None:
    nitro = NitroScaler()
    assert nitro.next_actors(None) == 16
    # one value in the window: score 1, so n_max
    assert nitro.next_actors(_row(1, 16, convexity_ratio=2.0)) == 64
    assert nitro.score == 1.0
    # R2 = 1.0 * 0.96**2 = 0.9216 < R1 = 1.92: score 0, the floor (54) wins
    assert nitro.next_actors(_row(2, 64, convexity_ratio=1.0)) == 54
    assert nitro.score == 0.0
    # R3 = 1.5 * 0.96**3 = 1.327; window [1.92, 0.9216, 1.327]: score (1.327-0.9216)/(1.92-0.9216) = 0.406
    n = nitro.next_actors(_row(3, 54, convexity_ratio=1.5))
    expected_score = (1.5 * 0.96**3 - 0.9216) / (1.92 - 0.9216)
    assert nitro.score == pytest.approx(expected_score)
    assert n == int(max(64 * expected_score, 64 * 0.96**9))  # 44: the floor still wins at round 3


def test_nitro_flat_window_does_not_divide_by_zero_and_late_rounds_follow_the_score() -> None:
    nitro = NitroScaler()
    for r in range(1, 10):
        n = nitro.next_actors(_row(r, 8, convexity_ratio=0.0))  # decayed value 0 every round: no spread
        assert nitro.score == 1.0
        assert n == 64
    nitro = NitroScaler(window=2)
    nitro.next_actors(_row(9, 8, convexity_ratio=3.0))
    assert nitro.next_actors(_row(10, 8, convexity_ratio=1.0)) == 8  # score 0 and the floor is n_min


def test_nitro_raw_window_option_pushes_both_values() -> None:
    nitro = NitroScaler(window_mode="decayed+raw")
    nitro.next_actors(_row(1, 16, convexity_ratio=2.0))
    assert list(nitro.window) == pytest.approx([1.92, 2.0])


def test_nitro_needs_the_detector() -> None:
    assert NitroScaler.needs == {"curvature"}  # the noise scale is not its input: not computed for it by default
    with pytest.raises(ValueError, match="convexity ratio"):
        NitroScaler().next_actors(_row(1, 16, convexity_ratio=float("nan")))


def test_hydrozoa_schedule() -> None:
    h = HydrozoaScaler(8, 64)
    got = [h.next_actors(None if r == 1 else _row(r - 1, 8)) for r in (1, 2, 10, 11, 21, 31, 41)]
    assert got == [16, 8, 8, 16, 32, 64, 64]


def test_kungfu_scales_by_the_noise_scale_ratio() -> None:
    k = KungFuScaler(8, 64)
    assert k.next_actors(None) == 16
    assert k.next_actors(_row(1, 16, gns=100.0)) == 8
    assert k.next_actors(_row(2, 8, gns=300.0)) == 24  # 8 * 300/100
    assert k.next_actors(_row(3, 24, gns=30.0)) == 8  # 24 * 0.1 = 2.4, clipped to n_min
    assert k.next_actors(_row(4, 8, gns=float("nan"))) == 8  # no estimate: keep n


def test_gns_boost_boosts_on_a_jump() -> None:
    g = GnsBoostScaler(8, 64)
    assert g.next_actors(None) == 8
    for r in range(1, 8):
        assert g.next_actors(_row(r, 8, gns=100.0)) == 8  # flat: z-score 0
    ns = [g.next_actors(_row(r, 8, gns=5000.0)) for r in range(8, 12)]
    assert ns[-1] == 64


def test_random_is_reproducible_and_uses_both_ends() -> None:
    a, b = RandomScaler(8, 64, seed=3), RandomScaler(8, 64, seed=3)
    seq_a = [a.next_actors(_row(r, 8)) for r in range(40)]
    assert seq_a == [b.next_actors(_row(r, 8)) for r in range(40)]
    assert set(seq_a) == {8, 64}


def test_state_round_trips_through_state_dict() -> None:
    nitro = NitroScaler()
    for r, c in enumerate([2.0, 1.0, 1.5], start=1):
        nitro.next_actors(_row(r, 16, convexity_ratio=c))
    clone = NitroScaler()
    clone.load_state_dict(nitro.state_dict())
    assert clone.next_actors(_row(4, 16, convexity_ratio=0.7)) == nitro.next_actors(_row(4, 16, convexity_ratio=0.7))


def test_make_scaler_builds_every_name_and_its_first_round_is_the_one_the_registry_says() -> None:
    assert set(SCALERS) == set(config.SCALERS)  # every scaler the config offers is built from the one table
    for name in set(config.SCALERS) - {"minions"}:  # the learned scheduler: tests/test_scheduler.py
        cfg = TrainConfig(scaler=name, actors=12, n_min=4, n_max=32, fragment_length=128, initial_actors=10)
        scaler = make_scaler(cfg)
        assert scaler.name == name and scaler.needs == SCALERS[name].needs
        n = scaler.next_actors(None)
        assert 4 <= n <= 32 or (isinstance(scaler, FixedScaler) and n == 12)
        # round 1 as the checks before any work count it (a budget's least round): exactly, or the fewest where the
        # rule draws it (the first deadline and prewarm: registry.started_actors)
        first = first_actors(cfg.scaling)
        assert first == n if name != "random" else first == min(n, first)


STATS = FunctionStats(sample_s=1e-3, slowest_sample_s=1e-3, init_s=0.01, busy_share=1.0, bytes_per_sample=100.0)
Forecast = Callable[[int, float, FunctionStats], tuple[float, float]]


def _linear(a: float, b: float, seconds_a: float = 1.0, seconds_b: float = 0.0) -> Forecast:
    """A hand-given round model: dollars ``a + b·n``, projected seconds ``seconds_a + seconds_b·n``."""
    return lambda n, learner_s, stats: (seconds_a + seconds_b * n, a + b * n)


def _crow(r: int, n: int, forecast: Forecast, gns: float, cold: int = 0, scale: float = 1.0) -> RoundStats:
    """Round ``r``'s stats at ``n`` functions: what ``forecast`` says (times ``scale``)."""
    seconds, usd = forecast(n, 0.1, STATS)
    return RoundStats.from_row({"round": r, "n_actors": n, "cold_starts": cold, "projected_learner_s": 0.1,
                                "projected_round_s": scale * seconds, "cost_serverless_usd": scale * usd, "gns": gns,
                                **STATS.columns()}, complete=False)


def _critical(forecast: Forecast, gns: float, n_min: int = 1, n_max: int = 256, steps: int = 100,
              **kwargs: object) -> tuple[CriticalScaler, int]:
    """A critical scaler after two rounds of its first count, the first of them cold; and its pick."""
    scaler = CriticalScaler(n_min, n_max, steps, forecast, **kwargs)  # type: ignore[arg-type]
    n = scaler.next_actors(None)
    for r in (1, 2):
        n = scaler.next_actors(_crow(r, n, forecast, gns, cold=n if r == 1 else 0))
    return scaler, n


def test_critical_minimises_cost_per_unit_of_progress_on_a_worked_example() -> None:
    """D(n) = a + b·n with a = 0.01, b = 0.001, T = 100, B_noise = 10,000: the least of D(n)·(1 + B/(nT)) is at
    n* = √(a·B/(b·T)) = √1000 ≈ 31.6; of the integers, 32."""
    a, b = 0.01, 0.001
    scaler = CriticalScaler(1, 256, 100, _linear(a, b), n0=8)
    assert scaler.next_actors(None) == 8
    assert scaler.next_actors(_crow(1, 8, _linear(a, b), 10_000.0, cold=8)) == 8  # a cold round: not measured
    assert not scaler.model.ready
    n = scaler.next_actors(_crow(2, 8, _linear(a, b), 10_000.0))  # the first warm round feeds the round model
    costs = {k: (a + b * k) * (1 + 10_000.0 / (k * 100)) for k in range(1, 257)}
    assert n == 32 == min(costs, key=costs.__getitem__) and scaler.score == 32.0
    assert scaler.cost_per_progress(32) == pytest.approx(costs[32])


def test_critical_small_noise_picks_n_min_large_noise_n_max_and_dearer_actors_fewer() -> None:
    def choice(noise: float, b: float, a: float = 0.01) -> int:
        return _critical(_linear(a, b), noise, n_min=4, n_max=64, steps=512, n0=8)[1]

    assert choice(noise=10.0, b=1e-4) == 4  # a batch of 4·512 is already far above B_noise
    assert choice(noise=1e9, b=1e-4) == 64
    assert choice(noise=-5.0, b=1e-4) == 4  # a negative estimate: noise too small to measure
    # n* = √(a·B/(b·T)): 57.1 and 19.8; dearer functions move the cost optimum down
    assert (choice(noise=2e3, b=1.2e-5), choice(noise=2e3, b=1e-4)) == (57, 20)
    assert choice(noise=2e5, b=0.0) == 64  # actors that cost nothing extra: as many as allowed


def test_critical_time_objective_reads_projected_seconds_and_resumes() -> None:
    # seconds 1 + 0.01·n, dollars flat: by dollars n_max; by seconds √(1·2000 / (0.01·100)) = 44.7
    forecast = _linear(0.01, 0.0, seconds_a=1.0, seconds_b=0.01)
    assert _critical(forecast, 2_000.0, n_max=64, n0=8)[1] == 64
    scaler, n = _critical(forecast, 2_000.0, n_max=64, n0=8, objective="time")
    assert n == 45
    again = CriticalScaler(1, 64, 100, forecast, objective="time", n0=8)
    again.load_state_dict(scaler.state_dict())
    row = _crow(3, n, forecast, 2_000.0)
    assert again.next_actors(row) == scaler.next_actors(row) == 45


def test_critical_with_a_constant_batch_finds_where_the_overhead_meets_the_shrinking_fragment() -> None:
    """--batch-size: a round of n functions takes a + b·n + c/n (per-invocation overhead against a fragment n
    functions share); from its first warm round the scaler picks the least, n* = √(c/b) = 20, whatever the noise
    scale, and stays there; a count's first round (cold, compiling: 2 s more) is not measured."""
    def forecast(n: int, learner_s: float, stats: FunctionStats) -> tuple[float, float]:
        return 0.1 + 0.002 * n + 0.8 / n, 1.0

    scaler = CriticalScaler(1, 64, 512, forecast, objective="time", n0=8, constant_batch=True)
    n, picked = scaler.next_actors(None), [0]
    for r in range(1, 41):
        cold = n if n != picked[-1] else 0
        row = _crow(r, n, forecast, 5e5 if r % 2 else -3e3, cold=cold)
        row = replace(row, projected_round_s=row.projected_round_s + 2.0 * bool(cold))
        picked.append(n := scaler.next_actors(row))
    assert picked[1:3] == [8, 20] and picked[3:] == [20] * 38


def test_critical_corrects_the_model_by_the_rounds_it_measures() -> None:
    """A count's measured rounds correct the forecast near it: with seconds 0.5 + 8/n, 16's warm round (as
    forecast) sends the scaler to n_max, 64; once 64's warm round measures twice its forecast (1.25 s), 32 (0.75 s,
    corrected by 16's rounds, as near as 64's) is the fastest."""
    def forecast(n: int, learner_s: float, stats: FunctionStats) -> tuple[float, float]:
        return 0.5 + 8.0 / n, 1.0

    scaler = CriticalScaler(8, 64, 100, forecast, objective="time", n0=16, constant_batch=True)
    n = scaler.next_actors(None)
    picked = []
    for r in range(1, 6):
        cold = n if r in (1, 3) else 0
        picked.append(n := scaler.next_actors(_crow(r, n, forecast, 1e3, cold=cold, scale=2.0 if n == 64 else 1.0)))
    assert picked == [16, 64, 64, 32, 32]
    assert scaler.model.predicted(64)[0] == pytest.approx(1.25) and scaler.model.predicted(32)[0] == pytest.approx(0.75)
