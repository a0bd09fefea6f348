"""``--actors auto``: the actor count an expert would pick, from the round model and the run's own rounds.

The batch stays what ``--actors`` functions would sample (the config makes it constant: ``batch_size``), so more
functions buy a shorter round, not fewer updates, and the choice is a question of seconds and dollars only.
The first count, ``n_0``, runs two rounds: the first starts instances and compiles the learner; the second, warm,
is the probe — its learner seconds and what one function did per sample (the row's ``function_*`` columns) go
into the round model (:mod:`minionsrl.forecast`, the model ``minionsrl plan`` forecasts with), which prices every
count between ``n_min`` and ``n_max`` on this run's platform. Each count the run measures corrects the model
for itself and its neighbours: the median, over its latest warm rounds, of its measured projected seconds and
dollars over the forecast (a median, as a round with an evaluation beside it runs longer).

The pick, for ``objective="time"`` (the default): the knee of the forecast — the least ``n`` past which doubling
it shortens the run by under 10% (``minionsrl plan``'s knee), as the last few percent of time cost a doubling of
the invocations' overhead; under ``--budget-usd``, among the counts whose forecast dollars for the steps left
fit in what is left (the cheapest when none does). For ``"cost"``: the count of least forecast dollars a sample.
A new count is taken only when its forecast is faster (for time) or cheaper than the current one's by more than
:data:`SWITCH_GAIN`, since every change starts instances.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import median
from typing import Any

from minionsrl.forecast import FunctionStats, doubling_counts, knee
from minionsrl.scaling.base import Scaler, as_finite, ewma

# (n, the learner's seconds, a function's stats) -> a round's projected seconds and serverless dollars
RoundForecast = Callable[[int, float, FunctionStats], tuple[float, float]]
SWITCH_GAIN = 0.05  # a new count must beat the current one's forecast by this share
CALIBRATION_ROUNDS = 5  # the latest warm rounds of a count whose median corrects its forecast
SMOOTHING = 0.5  # EWMA weight on the learner's seconds and the function stats so far


class AutoScaler(Scaler):
    """The knee (or the cheapest count) of the round model, measured on the run's first warm round and
    corrected by every count it runs (see the module's docstring)."""

    name = "auto"

    def __init__(self, n_min: int, n_max: int, n0: int, forecast: RoundForecast, objective: str = "time",
                 total_timesteps: int | None = None, budget_usd: float | None = None) -> None:
        super().__init__(n_min, n_max)
        self.n0, self.forecast, self.objective = n0, forecast, objective
        self.total_timesteps, self.budget_usd = total_timesteps, budget_usd
        self.stats: FunctionStats | None = None  # smoothed over the warm rounds
        self.learner_s: float | None = None  # smoothed over the warm rounds (the batch is constant)
        self.ratios: dict[int, list[tuple[float, float]]] = {}  # n -> its latest (measured / forecast) s and $

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        if last_round is None:
            return self.clip(self.n0)
        n = int(last_round["n_actors"])
        warm = self.warm(last_round)  # a count's first round measures starting it, not running it
        stats = FunctionStats.from_row(last_round)
        learner_s = as_finite(last_round.get("projected_learner_s"))
        seconds = as_finite(last_round.get("projected_round_s"))
        usd = as_finite(last_round.get("cost_serverless_usd"))
        if warm and None not in (stats, learner_s, seconds, usd):
            self._measure(n, stats, learner_s, seconds, usd)  # type: ignore[arg-type]
        if self.stats is None:
            return n
        return self._pick(n, last_round)

    def _measure(self, n: int, stats: FunctionStats, learner_s: float, seconds: float, usd: float) -> None:
        self.stats = stats if self.stats is None else self.stats.blend(stats, SMOOTHING)
        self.learner_s = learner_s if self.learner_s is None else ewma(self.learner_s, learner_s, SMOOTHING)
        model_s, model_usd = self.forecast(n, self.learner_s, self.stats)
        if model_s > 0 and model_usd > 0:
            self.ratios[n] = [*self.ratios.get(n, [])[-(CALIBRATION_ROUNDS - 1):], (seconds / model_s, usd / model_usd)]

    def predicted(self, n: int) -> tuple[float, float]:
        """A round of ``n``: the model's seconds and dollars, corrected by the measured count nearest ``n``."""
        assert self.stats is not None and self.learner_s is not None
        seconds, usd = self.forecast(n, self.learner_s, self.stats)
        if self.ratios:
            nearest = min(self.ratios, key=lambda m: (abs(math.log(m / n)), m))
            ratios = self.ratios[nearest]
            seconds *= median(r for r, _ in ratios)
            usd *= median(u for _, u in ratios)
        return seconds, usd

    def _pick(self, n: int, last_round: dict[str, Any]) -> int:
        counts = doubling_counts(self.n_min, self.n_max)
        table = {c: self.predicted(c) for c in {*counts, n}}
        allowed = self._affordable(counts, table, last_round)
        if self.objective == "cost":
            best = min(allowed, key=lambda c: (table[c][1], c))
        else:
            best = knee([(c, table[c][0]) for c in allowed])
        self.score = float(best)
        (now_s, now_usd), (then_s, then_usd) = table[n], table[best]
        cheaper = then_usd < (1 - SWITCH_GAIN) * now_usd
        faster = then_s < (1 - SWITCH_GAIN) * now_s
        if n in allowed and not (cheaper or (faster and self.objective == "time")):
            return n  # not worth starting instances for
        return best

    def _affordable(self, counts: list[int], table: dict[int, tuple[float, float]],
                    last_round: dict[str, Any]) -> list[int]:
        """The counts whose forecast dollars for the steps left fit in what is left of ``budget_usd`` (every count
        without a budget or a step budget; the cheapest when none fits)."""
        spent, steps = as_finite(last_round.get("cum_cost_serverless_usd")), as_finite(last_round.get("env_steps"))
        if self.budget_usd is None or self.total_timesteps is None or spent is None or steps is None:
            return counts
        rounds_left = max(self.total_timesteps - steps, 0.0) / max(steps / max(int(last_round["round"]), 1), 1.0)
        fits = [c for c in counts if table[c][1] * rounds_left <= self.budget_usd - spent]
        return fits or [min(counts, key=lambda c: (table[c][1], c))]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "stats": None if self.stats is None else self.stats.columns(),
                "learner_s": self.learner_s, "ratios": [[n, r] for n, r in self.ratios.items()],
                "previous": self.previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.stats = None if state["stats"] is None else FunctionStats.from_row(state["stats"])
        self.learner_s = state["learner_s"]
        self.ratios = {int(n): [(float(s), float(u)) for s, u in r] for n, r in state["ratios"]}
        self.previous = state["previous"]
