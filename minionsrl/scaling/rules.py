"""The scaling rules of DESIGN §2: fixed counts, schedules, and rules driven by the detectors."""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from minionsrl.scaling.base import Scaler, as_finite, ewma
from minionsrl.scaling.round_model import MeasuredRoundModel, RoundForecast
from minionsrl.stats import RoundStats


class FixedScaler(Scaler):
    """Always ``n`` actors: the baseline (and the server-based setup on a server backend)."""

    name = "fixed"

    def __init__(self, n: int) -> None:
        super().__init__(n, n)
        self.n = n

    def next_actors(self, last_round: RoundStats | None) -> int:
        return self.n


class MinScaler(Scaler):
    name = "min"

    def next_actors(self, last_round: RoundStats | None) -> int:
        return self.n_min


class MaxScaler(Scaler):
    name = "max"

    def next_actors(self, last_round: RoundStats | None) -> int:
        return self.n_max


class RandomScaler(Scaler):
    """Uniformly ``n_min`` or ``n_max``; the draw is a function of (seed, round), so resume-safe."""

    name = "random"

    def __init__(self, n_min: int, n_max: int, seed: int) -> None:
        super().__init__(n_min, n_max)
        self.seed = seed

    def next_actors(self, last_round: RoundStats | None) -> int:
        round_idx = 1 if last_round is None else last_round.round + 1
        pick = np.random.default_rng([self.seed, round_idx, 7]).integers(2)
        return self.n_max if pick else self.n_min


class HydrozoaScaler(Scaler):
    """16 actors in round 1, then 8, doubled every 10 rounds, capped at ``n_max``."""

    name = "hydrozoa"

    def next_actors(self, last_round: RoundStats | None) -> int:
        round_idx = 1 if last_round is None else last_round.round + 1
        if round_idx == 1:
            return min(16, self.n_max)
        return min(8 * 2 ** ((round_idx - 1) // 10), self.n_max)


class KungFuScaler(Scaler):
    """16, then 8; afterwards scale by the ratio of the current to the previous gradient noise scale."""

    name = "kungfu"
    needs = frozenset({"gns"})

    def __init__(self, n_min: int, n_max: int) -> None:
        super().__init__(n_min, n_max)
        self.prev_gns: float | None = None

    def next_actors(self, last_round: RoundStats | None) -> int:
        if last_round is None:
            return min(16, self.n_max)
        gns, n = as_finite(last_round.gns), last_round.n_actors
        prev, self.prev_gns = self.prev_gns, gns
        if last_round.round == 1:
            return self.clip(8)
        if gns is None or prev is None or gns <= 0 or prev <= 0:
            return self.clip(n)
        self.score = gns / prev
        return self.clip(round(n * self.score))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "prev_gns": self.prev_gns}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.prev_gns = state["prev_gns"]


class GnsBoostScaler(Scaler):
    """``n_max`` when the z-score of the smoothed noise scale (EWMA 0.9, median filter 5) is ≥ 1."""

    name = "gns-boost"
    needs = frozenset({"gns"})

    def __init__(self, n_min: int, n_max: int, ewma: float = 0.9, median_window: int = 5) -> None:
        super().__init__(n_min, n_max)
        self.ewma, self.median_window = ewma, median_window
        self.smoothed: list[float] = []

    def next_actors(self, last_round: RoundStats | None) -> int:
        gns = None if last_round is None else as_finite(last_round.gns)
        if gns is None:
            return self.n_min
        prev = self.smoothed[-1] if self.smoothed else gns
        self.smoothed.append(ewma(prev, gns, self.ewma))
        series = np.array(self.smoothed)
        filtered = np.array([np.median(series[max(0, i - self.median_window + 1) : i + 1]) for i in range(len(series))])
        if len(filtered) < 2 or filtered.std() == 0:
            self.score = 0.0
        else:
            self.score = float((filtered[-1] - filtered.mean()) / filtered.std())
        return self.n_max if self.score >= 1.0 else self.n_min

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "smoothed": list(self.smoothed)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.smoothed = list(state["smoothed"])


class NitroScaler(Scaler):
    """Nitro (DESIGN §2.1): boost by the detected convexity ratio, front-loaded by a decaying floor.

    ``R_r = c_r·δ^r`` goes into a window of the last ``W`` values; ``score`` is its min-max position
    (1 for a single value or no spread); the floor is ``clip(n_max·δ^(r·r), n_min, n_max)`` (or
    ``δ^r`` with ``floor="r"``); the next ``n = int(clip(n_max·score, floor, n_max))``. With
    ``window_mode="decayed+raw"`` the undecayed ratio is pushed too, as the published code did.
    """

    name = "nitro"
    needs = frozenset({"curvature"})  # the noise scale too only with --detectors on: it is not Nitro's input

    def __init__(self, n_min: int = 8, n_max: int = 64, n0: int = 16, window: int = 6, decay: float = 0.96,
                 floor: str = "r2", window_mode: str = "decayed") -> None:
        super().__init__(n_min, n_max)
        self.n0, self.decay, self.floor_mode, self.window_mode = n0, decay, floor, window_mode
        self.window: deque[float] = deque(maxlen=window)

    def floor(self, round_idx: int) -> float:
        exponent = round_idx * round_idx if self.floor_mode == "r2" else round_idx
        return min(max(self.n_max * self.decay**exponent, self.n_min), self.n_max)

    def next_actors(self, last_round: RoundStats | None) -> int:
        if last_round is None:
            return self.clip(self.n0)
        ratio = as_finite(last_round.convexity_ratio)
        if ratio is None:
            raise ValueError("nitro needs the convexity ratio of every round; enable the detectors")
        r = last_round.round
        decayed = ratio * self.decay**r
        self.window.append(decayed)
        if self.window_mode == "decayed+raw":
            self.window.append(ratio)
        lo, hi = min(self.window), max(self.window)
        self.score = 1.0 if hi - lo <= 0 else (decayed - lo) / (hi - lo)
        return int(min(max(self.n_max * self.score, self.floor(r)), self.n_max))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "window": list(self.window)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.window.clear()
        self.window.extend(state["window"])


class CriticalScaler(Scaler):
    """The actor count that minimises dollars (or seconds) per unit of training progress, from the gradient
    noise scale (McCandlish et al. 2018, "An Empirical Model of Large-Batch Training"; docs/SCALING.md).

    With ``B = n·T`` samples a round and ``B_noise`` the noise scale, a round makes progress ∝
    ``1 / (1 + B_noise / B)``, so the cost per unit of progress is ``D(n)·(1 + B_noise / (n·T))``, with ``D(n)``
    a round of ``n`` functions' serverless dollars (``objective="cost"``) or projected seconds (``"time"``). ``D``
    is the round model ``minionsrl plan`` and ``--actors auto`` use, fed by the run's warm rounds and corrected by
    each count it measures (:class:`~minionsrl.scaling.round_model.MeasuredRoundModel`); ``B_noise`` is smoothed
    (EWMA) over rounds. The pick is the least of that product over every count in ``[n_min, n_max]``.

    With a constant batch (``constant_batch``: ``--batch-size``), ``n`` buys a shorter round, not more samples:
    progress per round does not depend on ``n``, and the pick is the count of the least ``D(n)``, where the
    per-invocation overhead meets the shrinking fragment.

    The first count, ``n_0``, runs until a warm round (its second, without cold starts) has measured it: a count's
    first round starts instances and compiles the learner's programs for its batch's shapes.
    """

    name = "critical"
    needs = frozenset({"gns"})

    def __init__(self, n_min: int, n_max: int, fragment_steps: int, forecast: RoundForecast, objective: str = "cost",
                 n0: int = 16, ewma: float = 0.9, constant_batch: bool = False) -> None:
        super().__init__(n_min, n_max)
        self.steps, self.objective, self.n0, self.ewma = fragment_steps, objective, n0, ewma
        self.constant_batch = constant_batch
        self.model = MeasuredRoundModel(forecast)
        self.noise: float | None = None  # smoothed B_noise (samples)

    def next_actors(self, last_round: RoundStats | None) -> int:
        if last_round is None:
            return self.clip(self.n0)
        n = last_round.n_actors
        if self.warm(last_round):
            self.model.measure(last_round)
        gns = as_finite(last_round.gns)
        if gns is not None:
            self.noise = gns if self.noise is None else ewma(self.noise, gns, self.ewma)
        if not self.model.ready or (self.noise is None and not self.constant_batch):
            return n
        best = min(range(self.n_min, self.n_max + 1), key=self.cost_per_progress)
        self.score = float(best)
        return best

    def cost_per_progress(self, n: int) -> float:
        """A round of ``n``'s dollars (or seconds) over its progress, ``D(n)·(1 + B_noise / (n·T))`` (``D(n)``
        under a constant batch, whose progress a round does not depend on ``n``; a noise scale ≤ 0 is too small
        to measure: a round's progress is whole)."""
        seconds, usd = self.model.predicted(n)
        cost = usd if self.objective == "cost" else seconds
        if self.constant_batch or self.noise is None:
            return cost
        return cost * (1 + max(self.noise, 0.0) / (n * self.steps))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), **self.model.state_dict(), "noise": self.noise}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.model.load_state_dict(state)
        self.noise = state["noise"]
