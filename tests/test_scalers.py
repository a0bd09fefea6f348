"""Scaling rules on worked examples (DESIGN §2)."""

from __future__ import annotations

import math

import pytest

from minionsrl.build import make_scaler
from minionsrl.config import TrainConfig
from minionsrl.scaling.rules import (
    CriticalScaler,
    FixedScaler,
    GnsBoostScaler,
    HydrozoaScaler,
    KungFuScaler,
    NitroScaler,
    RandomScaler,
)


def _row(round_idx: int, n: int, **extra: float) -> dict:
    return {"round": round_idx, "n_actors": n, **extra}


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


def test_make_scaler_builds_every_name() -> None:
    for name in ("fixed", "nitro", "critical", "hydrozoa", "kungfu", "gns-boost", "min", "max", "random"):
        scaler = make_scaler(TrainConfig(scaler=name, actors=12, n_min=4, n_max=32, fragment_length=128))
        assert scaler.name == name
        n = scaler.next_actors(None)
        assert 4 <= n <= 32 or (isinstance(scaler, FixedScaler) and n == 12)
        assert not math.isnan(n)


def _crow(r: int, n: int, cost: float, gns: float, seconds: float = 1.0) -> dict:
    return {"round": r, "n_actors": n, "cost_serverless_usd": cost, "projected_round_s": seconds, "gns": gns}


def test_critical_minimises_cost_per_unit_of_progress_on_a_worked_example() -> None:
    """D(n) = a + b·n with a = 0.01, b = 0.001, T = 100, B_noise = 10,000: n* = √(a·B/(b·T)) = √1000 ≈ 31.6."""
    scaler = CriticalScaler(1, 256, fragment_steps=100, n0=8)
    a, b = 0.01, 0.001
    assert scaler.next_actors(None) == 8
    assert scaler.next_actors(_crow(1, 8, a + b * 8, 10_000.0)) == 8  # a count's first round measures its start
    assert scaler.next_actors(_crow(2, 8, a + b * 8, 10_000.0)) == 16  # one count seen: try another
    assert scaler.next_actors(_crow(3, 16, a + b * 16, 10_000.0)) == 16
    n = scaler.next_actors(_crow(4, 16, a + b * 16, 10_000.0))
    assert scaler.fit() == pytest.approx((a, b))
    assert scaler.score == pytest.approx(math.sqrt(1000.0)) and n == 32
    # the choice is the minimum of D(n)·(1 + B/(nT)) over the integers
    costs = {k: (a + b * k) * (1 + 10_000.0 / (k * 100)) for k in range(1, 257)}
    assert costs[n] <= min(costs.values()) * 1.001


def test_critical_small_noise_picks_n_min_large_noise_n_max_and_dearer_actors_fewer() -> None:
    def choice(noise: float, b: float, a: float = 0.01) -> int:
        scaler = CriticalScaler(4, 64, fragment_steps=512, n0=8)
        scaler.next_actors(None)
        for r, n in enumerate((8, 8, 16), start=1):
            scaler.next_actors(_crow(r, n, a + b * n, noise))
        return scaler.next_actors(_crow(4, 16, a + b * 16, noise))

    assert choice(noise=10.0, b=1e-4) == 4  # a batch of 4·512 is already far above B_noise
    assert choice(noise=1e9, b=1e-4) == 64
    assert choice(noise=-5.0, b=1e-4) == 4  # a negative estimate: noise too small to measure
    cheap, dear = choice(noise=2e3, b=1e-5), choice(noise=2e3, b=1e-4)  # n* 62.5 and 19.8
    assert 4 < dear < cheap <= 64  # dearer functions: the cost optimum moves down
    assert choice(noise=2e5, b=0.0) == 64  # actors that cost nothing extra: as many as allowed


def test_critical_time_objective_reads_projected_seconds_and_resumes() -> None:
    scaler = CriticalScaler(1, 64, fragment_steps=100, objective="time", n0=8)
    scaler.next_actors(None)
    for r, m in enumerate((8, 8, 16), start=1):
        scaler.next_actors(_crow(r, m, 99.0, 2_000.0, seconds=1.0 + 0.01 * m))
    n = scaler.next_actors(_crow(4, 16, 99.0, 2_000.0, seconds=1.0 + 0.01 * 16))
    assert scaler.fit() == pytest.approx((1.0, 0.01)) and n == round(math.sqrt(1.0 * 2_000 / (0.01 * 100)))
    again = CriticalScaler(1, 64, fragment_steps=100, objective="time", n0=8)
    again.load_state_dict(scaler.state_dict())
    row = _crow(5, n, 99.0, 2_000.0, seconds=1.0 + 0.01 * n)
    assert again.next_actors(row) == scaler.next_actors(row)


def test_critical_with_a_constant_batch_finds_where_the_overhead_meets_the_shrinking_fragment() -> None:
    """--batch-size: a round of n functions costs a + b·n + c/n (per-invocation overhead against a fragment n
    functions share); after trying n_0, 2·n_0 and n_0/2 the scaler picks n* = √(c/b) whatever the noise scale."""
    def seconds(n: int, before: int | None) -> float:
        compiled = 2.0 if n != before else 0.0  # a count's first round compiles the learner's programs
        return 0.1 + 0.002 * n + 0.8 / n + compiled  # least at √(0.8 / 0.002) = 20

    scaler = CriticalScaler(1, 64, fragment_steps=512, objective="time", n0=8, constant_batch=True)
    n, picked = scaler.next_actors(None), []
    for r in range(1, 61):
        n = scaler.next_actors(_crow(r, n, 99.0, 5e5 if r % 2 else -3e3,
                                     seconds=seconds(n, picked[-1] if picked else None)))
        picked.append(n)
    # two rounds of each count tried, the first not measured; then it stays at n* however long it runs: the counts
    # tried at the start are not forgotten and re-tried
    assert picked[:5] == [8, 16, 16, 4, 4] and picked[5:] == [20] * 55
    cheap = CriticalScaler(1, 64, fragment_steps=512, objective="time", n0=8, constant_batch=True)
    cheap.next_actors(None)
    for r, m in enumerate((8, 8, 16, 16, 4, 4), start=1):  # no per-invocation cost: as many functions as allowed
        last = cheap.next_actors(_crow(r, m, 99.0, 1e3, seconds=0.1 + 0.8 / m))
    assert last == 64


def test_critical_fits_only_rounds_without_cold_starts() -> None:
    """A round that started instances measures their cold starts (1 s each in the model), not what its count
    costs once warm: the scaler stays at a count until a warm round has measured it, and fits warm rounds only."""
    scaler = CriticalScaler(1, 64, fragment_steps=100, objective="time", n0=8)
    scaler.next_actors(None)
    assert scaler.next_actors({**_crow(1, 8, 99.0, 2_000.0, seconds=2.5), "cold_starts": 8}) == 8
    assert scaler.next_actors({**_crow(2, 8, 99.0, 2_000.0, seconds=1.08), "cold_starts": 0}) == 16
    assert scaler.next_actors({**_crow(3, 16, 99.0, 2_000.0, seconds=3.0), "cold_starts": 8}) == 16
    n = scaler.next_actors({**_crow(4, 16, 99.0, 2_000.0, seconds=1.16), "cold_starts": 0})
    assert scaler.fit() == pytest.approx((1.0, 0.01)) and n == round(math.sqrt(1.0 * 2_000 / (0.01 * 100)))


def test_critical_with_a_constant_batch_fits_no_negative_cost_from_noisy_rounds() -> None:
    """A measured Hopper run (time objective): one warm round each gave 0.29 s at 16, 0.20 s at 32 and 0.31 s at 8
    actors. Fitted freely, a + b·n + c/n came out with c < 0 ("splitting the fragment saves nothing") and the run
    stayed at n_min for 100 rounds, where 64 actors were the fastest; no term of a round's cost is negative, and the
    fit that keeps them so sends it up."""
    scaler = CriticalScaler(8, 64, fragment_steps=256, objective="time", n0=16, constant_batch=True)
    n = scaler.next_actors(None)
    trace = [(16, 1.24, 16), (16, 0.29, 0), (32, 0.21, 16), (32, 0.20, 0), (8, 0.35, 0), (8, 0.31, 0)]
    for r, (count, seconds, cold) in enumerate(trace, start=1):
        assert n == count
        n = scaler.next_actors({**_crow(r, n, 99.0, 2_000.0, seconds=seconds), "cold_starts": cold})
    assert n == 64
