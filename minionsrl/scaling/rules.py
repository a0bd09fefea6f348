"""The scaling rules of DESIGN §2: fixed counts, schedules, and rules driven by the detectors."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from minionsrl.scaling.base import Scaler, as_finite, ewma


class FixedScaler(Scaler):
    """Always ``n`` actors: the baseline (and the server-based setup on a server backend)."""

    name = "fixed"

    def __init__(self, n: int) -> None:
        super().__init__(n, n)
        self.n = n

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        return self.n


class MinScaler(Scaler):
    name = "min"

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        return self.n_min


class MaxScaler(Scaler):
    name = "max"

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        return self.n_max


class RandomScaler(Scaler):
    """Uniformly ``n_min`` or ``n_max``; the draw is a function of (seed, round), so resume-safe."""

    name = "random"

    def __init__(self, n_min: int, n_max: int, seed: int) -> None:
        super().__init__(n_min, n_max)
        self.seed = seed

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        round_idx = 1 if last_round is None else int(last_round["round"]) + 1
        pick = np.random.default_rng([self.seed, round_idx, 7]).integers(2)
        return self.n_max if pick else self.n_min


class HydrozoaScaler(Scaler):
    """16 actors in round 1, then 8, doubled every 10 rounds, capped at ``n_max``."""

    name = "hydrozoa"

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        round_idx = 1 if last_round is None else int(last_round["round"]) + 1
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

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        if last_round is None:
            return min(16, self.n_max)
        gns, n = as_finite(last_round.get("gns")), int(last_round["n_actors"])
        prev, self.prev_gns = self.prev_gns, gns
        if int(last_round["round"]) == 1:
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

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        gns = None if last_round is None else as_finite(last_round.get("gns"))
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

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        if last_round is None:
            return self.clip(self.n0)
        ratio = as_finite(last_round.get("convexity_ratio"))
        if ratio is None:
            raise ValueError("nitro needs the convexity ratio of every round; enable the detectors")
        r = int(last_round["round"])
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
    ``1 / (1 + B_noise / B)``. A round's cost is fitted as ``D(n) = a + b·n`` by least squares over the
    counts measured so far, ``a, b ≥ 0`` (``a``: what does not grow with n, the learner host and its fixed work;
    ``b``: what an actor adds), so the cost per unit of progress ``D(n)·(1 + B_noise/(n·T))`` is least at
    ``n* = √(a·B_noise / (b·T))``, clipped to ``[n_min, n_max]``. ``objective="cost"`` fits the serverless
    dollars of a round, ``"time"`` its projected cloud seconds. ``B_noise`` is smoothed (EWMA) over rounds;
    until two different counts have been seen the fit has nothing to go on, so the first rounds run
    ``n_0`` and then a second count (twice or half of it). Each count's cost is kept for the whole run,
    smoothed (EWMA) over its own warm rounds (not a count's first, which starts instances and compiles the
    learner's programs for its batch's shapes): a window of recent rounds forgot the counts not chosen lately
    and, once it held one count only, sent the scaler back to exploring (to ``n_0/2`` under a constant batch,
    for a window's length).

    With a constant batch (``constant_batch``: ``--batch-size``), ``n`` buys a shorter round, not more samples:
    progress per round does not depend on ``n``, and a round's cost is ``D(n) = a + b·n + c/n`` — ``a`` the
    learner and what no actor changes, ``b`` what each invocation adds (its dispatch, init and request), ``c``
    the fragment's time or dollars that ``n`` functions share (``τ·B``: the slowest function's stepping, or the
    learner host waiting for it). Its least is at ``n* = √(c / b)``, where the per-invocation overhead meets
    the shrinking fragment; fitted once three counts have been seen (``n_0``, twice it, half of it).
    """

    name = "critical"
    needs = frozenset({"gns"})

    def __init__(self, n_min: int, n_max: int, fragment_steps: int, objective: str = "cost", n0: int = 16,
                 ewma: float = 0.9, constant_batch: bool = False) -> None:
        super().__init__(n_min, n_max)
        self.steps, self.objective, self.n0, self.ewma = fragment_steps, objective, n0, ewma
        self.constant_batch = constant_batch
        self.noise: float | None = None  # smoothed B_noise (samples)
        self.measured: dict[int, float] = {}  # n -> its warm rounds' cost or seconds, smoothed

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        if last_round is None:
            return self.clip(self.n0)
        n = int(last_round["n_actors"])
        measure = as_finite(last_round.get("cost_serverless_usd" if self.objective == "cost" else "projected_round_s"))
        if self.warm(last_round) and measure is not None:
            self.measured[n] = self._smooth(self.measured.get(n), measure)
        gns = as_finite(last_round.get("gns"))
        if gns is not None:
            self.noise = self._smooth(self.noise, gns)
        if self.constant_batch:
            return self._least_round(n)
        fit = self.fit()
        if fit is None:  # one count measured so far: try another, to learn what an actor adds
            return self._explore(n, (2 * n, n // 2))
        if self.noise is None:
            return n
        return self.best(*fit, self.noise)

    def _explore(self, n: int, candidates: tuple[int, ...]) -> int:
        """While learning the cost model: stay at ``n`` until a warm round (its second, without cold starts)
        measured it, then the first candidate count not measured yet (``n`` when the bounds leave none)."""
        counts = self._counts()
        if n not in counts:
            return n
        return next((c for c in map(self.clip, candidates) if c not in counts), n)

    def _smooth(self, old: float | None, new: float) -> float:
        return new if old is None else ewma(old, new, self.ewma)

    def _counts(self) -> list[int]:
        return sorted(self.measured)

    def fit(self) -> tuple[float, float] | None:
        """``(a, b)`` of ``D(n) = a + b·n`` by least squares over the counts measured (None: one count seen)."""
        if len(self.measured) < 2:
            return None
        a, b = self._fit_terms(0, 1)
        return float(a), float(b)

    def _fit_terms(self, *powers: int) -> np.ndarray:
        """Least squares of the measured costs over the terms ``n**p`` for ``p`` in ``powers``, each coefficient
        kept ≥ 0: every term is a cost. Fitted freely through three noisy rounds (Hopper, constant
        batch, time: 0.29 s at 16, 0.20 at 32, 0.31 at 8) the fragment's term came out negative, and the run stayed
        at n_min where 64 was fastest."""
        from scipy.optimize import nnls  # here: importing this module (load_policy does) must not load SciPy's BLAS

        ns = np.array(list(self.measured), dtype=np.float64)
        coef, _ = nnls(np.stack([ns**p for p in powers], axis=1), np.array(list(self.measured.values())))
        return coef

    def _least_round(self, n: int) -> int:
        """Constant batch: measure ``n_0``, twice it and half of it, then the ``n`` of the least fitted round cost."""
        if len(self._counts()) < 3:  # (fewer when the bounds leave fewer: n stays)
            return self._explore(n, (2 * self.n0, self.n0 // 2))
        _, b, c = self._fit_terms(0, 1, -1)
        if c <= 0:  # splitting the fragment saves nothing: the fewest invocations
            self.score = 0.0
            return self.n_min
        if b <= 0:  # an invocation costs nothing extra: as many as allowed
            self.score = float(self.n_max)
            return self.n_max
        self.score = math.sqrt(c / b)
        return self.clip(round(self.score))

    def best(self, a: float, b: float, noise: float) -> int:
        """``n*`` for round cost ``a + b·n`` and noise scale ``noise``: ``n_min`` when the noise is small (a
        small batch already gives a full step's progress), ``n_max`` when an actor costs nothing extra."""
        if noise <= 0:
            self.score = 0.0
            return self.n_min
        if b <= 0:
            self.score = float(self.n_max)
            return self.n_max
        n_star = math.sqrt(max(a, 0.0) * noise / (b * self.steps))
        self.score = n_star
        return self.clip(round(n_star))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "noise": self.noise, "measured": [[n, d] for n, d in self.measured.items()],
                "previous": self.previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.noise = state["noise"]
        self.measured = {int(n): float(d) for n, d in state["measured"]}
        self.previous = state["previous"]
