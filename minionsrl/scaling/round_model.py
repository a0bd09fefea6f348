"""The round model as a run measures it: what the ``auto`` and ``critical`` scalers weigh.

The model is :mod:`minionsrl.forecast`'s (what ``minionsrl plan`` forecasts with, priced by the ledger's rule on
the run's platform); here it is fed by the run's own warm rounds instead of a probe. Each warm round's learner
seconds and function stats (its metrics row's ``function_*`` columns) go in, smoothed; and each count the run
measures corrects the model for itself and its neighbours: the median, over its latest warm rounds, of its
measured projected seconds and dollars over the forecast (a median, as a round with an evaluation beside it runs
longer). A scaler never learns which backend runs: the forecast it is given already holds the platform's prices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import median
from typing import Any

from minionsrl.scaling.base import as_finite, ewma
from minionsrl.stats import FunctionStats, RoundStats

# (n, the learner's seconds, a function's stats) -> a round's projected seconds and serverless dollars
RoundForecast = Callable[[int, float, FunctionStats], tuple[float, float]]
CALIBRATION_ROUNDS = 5  # the latest warm rounds of a count whose median corrects its forecast
SMOOTHING = 0.5  # EWMA weight on the learner's seconds and the function stats so far


class MeasuredRoundModel:
    """The round model fed and corrected by a run's warm rounds (see the module's docstring)."""

    def __init__(self, forecast: RoundForecast) -> None:
        self.forecast = forecast
        self.stats: FunctionStats | None = None  # smoothed over the warm rounds
        self.learner_s: float | None = None  # smoothed over the warm rounds
        self.ratios: dict[int, list[tuple[float, float]]] = {}  # n -> its latest (measured / forecast) s and $

    @property
    def ready(self) -> bool:
        """Whether a warm round has fed the model."""
        return self.stats is not None and self.learner_s is not None

    def measure(self, last: RoundStats, calibrate: bool = True) -> None:
        """Feed a round's learner seconds and warm functions' stats (a round that measured no warm function, or no
        finite time, changes nothing); ``calibrate``: its projected seconds and dollars also correct its count's
        forecast (not for a round that started instances: a cold start's modelled second is not the count's)."""
        stats = last.function_stats()
        learner_s = as_finite(last.projected_learner_s)
        seconds = as_finite(last.projected_round_s)
        usd = as_finite(last.cost_serverless_usd)
        if stats is None or learner_s is None or seconds is None or usd is None:
            return
        n = last.n_actors
        self.stats = stats if self.stats is None else self.stats.blend(stats, SMOOTHING)
        self.learner_s = learner_s if self.learner_s is None else ewma(self.learner_s, learner_s, SMOOTHING)
        model_s, model_usd = self.forecast(n, self.learner_s, self.stats)
        if calibrate and model_s > 0 and model_usd > 0:
            self.ratios[n] = [*self.ratios.get(n, [])[-(CALIBRATION_ROUNDS - 1):], (seconds / model_s, usd / model_usd)]

    def predicted(self, n: int) -> tuple[float, float]:
        """A round of ``n``: the model's seconds and dollars, corrected by the measured count nearest ``n``."""
        assert self.stats is not None and self.learner_s is not None, "predicted before a warm round was measured"
        seconds, usd = self.forecast(n, self.learner_s, self.stats)
        if self.ratios:
            nearest = min(self.ratios, key=lambda m: (abs(math.log(m / n)), m))
            ratios = self.ratios[nearest]
            seconds *= median(r for r, _ in ratios)
            usd *= median(u for _, u in ratios)
        return seconds, usd

    def state_dict(self) -> dict[str, Any]:
        return {"stats": None if self.stats is None else self.stats.columns(), "learner_s": self.learner_s,
                "ratios": [[n, r] for n, r in self.ratios.items()]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats = None if state["stats"] is None else FunctionStats.from_row(state["stats"])
        self.learner_s = state["learner_s"]
        self.ratios = {int(n): [(float(s), float(u)) for s, u in r] for n, r in state["ratios"]}
