"""``--actors auto``: the actor count an expert would pick, from the round model and the run's own rounds.

The batch stays what ``--actors`` functions would sample (the config makes it constant: ``train_batch_size``), so more
functions buy a shorter round, not fewer updates, and the choice is a question of seconds and dollars only.
The first count, ``n_0``, is ``--initial-actors`` where given (``minionsrl plan --actors auto`` prints its knee);
else, where the learner's check of the env timed a step that mostly waits, the knee of the round model on that step
(:func:`start_count`: a waiting env, whose count far from the middle pays, runs no round at another count); else the
middle of the range. It runs two rounds: the first starts instances and compiles the learner; the second is the
probe — its learner seconds and what its warm functions did per sample (a round in which the local backend starts
more instances, as it learns how much they wait, still measures the ones that ran warm) go into the round model as
the run measures it (:class:`~minionsrl.scaling.round_model.MeasuredRoundModel`: ``minionsrl plan``'s model, priced on
this run's platform and corrected by every count the run measures), which prices every count between ``n_min``
and ``n_max``.

The pick, for ``objective="time"`` (the default): the knee of the forecast — the least ``n`` past which doubling
it shortens the run by under 10% (``minionsrl plan``'s knee), as the last few percent of time cost a doubling of
the invocations' overhead; under ``--budget-usd``, among the counts whose forecast dollars for the steps left
fit in what is left (the cheapest when none does). For ``"cost"``: the count of least forecast dollars a sample.
A new count is taken only when its forecast is faster (for time) or cheaper than the current one's by more than
:data:`SWITCH_GAIN`, since every change starts instances; and, for time, the current count is kept while it lies
between the knees at 10% -/+ :data:`KNEE_MARGIN` (at 12% and at 8%), since a count that near the threshold
flips back and forth as measured rounds move the forecast by a point (Hopper started at ``plan``'s knee 8:
8 -> 16 at 10.8%, back at 9.9%; docs/results/autopilot-initial-actors.md), and each change of count changes what
is learned.
"""

from __future__ import annotations

from typing import Any

from minionsrl.config.train import auto_initial
from minionsrl.forecast import KNEE_GAIN, doubling_counts, knee
from minionsrl.scaling.base import Scaler, as_finite
from minionsrl.scaling.round_model import MeasuredRoundModel, RoundForecast
from minionsrl.stats import FunctionStats, RoundStats

SWITCH_GAIN = 0.05  # a new count must beat the current one's forecast by this share
KNEE_MARGIN = 0.02  # the current count stays while it lies between the knees at KNEE_GAIN -/+ this
WAITING_SHARE = 0.2  # the env check's step decides the first count only for a step whose CPU is busy under this


def _best(table: dict[int, tuple[float, float]], allowed: list[int], objective: str) -> int:
    """Of the ``allowed`` counts priced in ``table`` (n -> a round's seconds and dollars): the cheapest, for
    ``objective="cost"``; else the knee of their seconds."""
    if objective == "cost":
        return min(allowed, key=lambda c: (table[c][1], c))
    return knee([(c, table[c][0]) for c in allowed])


def start_count(n_min: int, n_max: int, forecast: RoundForecast, prior: FunctionStats | None,
                objective: str = "time") -> int | None:
    """The count to start at before any round ran, where the env's step mostly waits (a CPU busy under
    :data:`WAITING_SHARE` of it, as the learner's check timed it: ``prior``): the pick (:func:`_best`) of the round
    model fed ``prior`` and no learner seconds (not known before its first update). The same at every count under
    auto's constant batch, they still weigh against a doubling's saving, so leaving them out can only raise the
    pick; a waiting step's saving is far past the line (the latency env's 32 -> 64: over 20%). So a waiting env runs
    no round at another count. None for a CPU-bound step: a fresh env's few random steps in the check time it up to
    1.6x slow here (Reach: 1.4 ms of CPU against its warm functions' 0.85 ms a sample), and its knee lies within a
    few percent of the threshold (Reach's 64 saves 9.4% over 32), which the run's own rounds must tell."""
    if prior is None or prior.busy_share >= WAITING_SHARE:
        return None
    counts = doubling_counts(n_min, n_max)
    return _best({c: forecast(c, 0.0, prior) for c in counts}, counts, objective)


def first_count(n0: int | None, n_min: int, n_max: int, forecast: RoundForecast, prior: FunctionStats | None,
                objective: str = "time") -> tuple[int, str]:
    """auto's first count and where it comes from: ``n0`` (``--initial-actors``) where given, else the env check's
    pick (:func:`start_count`) where it makes one, else the middle of the range (``auto_initial``)."""
    if n0 is not None:
        return n0, "the given --initial-actors"
    picked = start_count(n_min, n_max, forecast, prior, objective)
    if picked is not None and prior is not None:
        return picked, (f"the round model on the env's step as the learner's check timed it ({prior.sample_s * 1e3:.3g}"
                        " ms a sample, mostly waiting)")
    return auto_initial(n_min, n_max), "the middle of its range"


class AutoScaler(Scaler):
    """The knee (or the cheapest count) of the round model, measured on the run's first warm round and
    corrected by every count it runs (see the module's docstring)."""

    name = "auto"

    def __init__(self, n_min: int, n_max: int, n0: int | None, forecast: RoundForecast, objective: str = "time",
                 total_timesteps: int | None = None, budget_usd: float | None = None,
                 prior: FunctionStats | None = None) -> None:
        super().__init__(n_min, n_max)
        self.objective = objective
        self.total_timesteps, self.budget_usd = total_timesteps, budget_usd
        self.model = MeasuredRoundModel(forecast)
        self.n0, self.started_from = first_count(n0, n_min, n_max, forecast, prior, objective)

    def next_actors(self, last_round: RoundStats | None) -> int:
        self.reason = None
        if last_round is None:
            n0 = self.clip(self.n0)
            self.reason = (f"starts at {n0} actors, from {self.started_from}: its second round measures it (the first "
                           f"starts instances), then the round model prices every count from {self.n_min} to "
                           f"{self.n_max}")
            return n0
        n = last_round.n_actors
        again = n == self.previous  # the learner's programs for this batch compiled in an earlier round
        warm = self.warm(last_round)
        if again:  # its warm functions measure running them even where others started (the local backend grows)
            self.model.measure(last_round, calibrate=warm)
        if not self.model.ready:
            return n
        return self._pick(n, last_round)

    def _pick(self, n: int, last_round: RoundStats) -> int:
        counts = doubling_counts(self.n_min, self.n_max)
        table = {c: self.model.predicted(c) for c in {*counts, n}}
        allowed = self._affordable(counts, table, last_round)
        best = _best(table, allowed, self.objective)
        if self.objective != "cost":
            points = [(c, table[c][0]) for c in allowed]
            if n in allowed and knee(points, KNEE_GAIN + KNEE_MARGIN) <= n <= knee(points, KNEE_GAIN - KNEE_MARGIN):
                best = n  # a knee within the margin either way: keep it rather than flip at the threshold
        self.score = float(best)
        (now_s, now_usd), (then_s, then_usd) = table[n], table[best]
        cheaper = then_usd < (1 - SWITCH_GAIN) * now_usd
        faster = then_s < (1 - SWITCH_GAIN) * now_s
        if n in allowed and not (cheaper or (faster and self.objective == "time")):
            return n  # not worth starting instances for
        self.reason = self._why(n, best, table, allowed, counts)
        return best

    def _why(self, n: int, best: int, table: dict[int, tuple[float, float]], allowed: list[int],
             counts: list[int]) -> str:
        """The line that says why ``best`` replaces ``n``: the rule, and both counts' forecast rounds."""
        rule = ("the least forecast dollars a sample" if self.objective == "cost" else
                "the knee of the round model: doubling it would shorten a round by under 10%")
        if n not in allowed or len(allowed) < len(counts):
            rule += f"; over {max(allowed)} the forecast overruns budget_usd"
        (now_s, now_usd), (then_s, then_usd) = table[n], table[best]
        return (f"{n} -> {best} actors: {rule} (a round forecast at {then_s:.3g} s and ${then_usd:.3g} against "
                f"{now_s:.3g} s and ${now_usd:.3g} at {n}, as measured)")

    def _affordable(self, counts: list[int], table: dict[int, tuple[float, float]],
                    last_round: RoundStats) -> list[int]:
        """The counts whose forecast dollars for the steps left fit in what is left of ``budget_usd`` (every count
        without a budget or a step budget; the cheapest when none fits)."""
        spent, steps = as_finite(last_round.cum_cost_serverless_usd), last_round.env_steps
        if self.budget_usd is None or self.total_timesteps is None or spent is None:
            return counts
        rounds_left = max(self.total_timesteps - steps, 0.0) / max(steps / max(last_round.round, 1), 1.0)
        fits = [c for c in counts if table[c][1] * rounds_left <= self.budget_usd - spent]
        return fits or [min(counts, key=lambda c: (table[c][1], c))]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), **self.model.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.model.load_state_dict(state)
