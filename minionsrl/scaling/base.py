"""The scaler interface (DESIGN §2): the previous round's stats in, the next round's actor count out.

A scaler never knows which backend runs the actors. It sees the previous round's
:class:`~minionsrl.stats.RoundStats` (``round``, ``n_actors``, ``convexity_ratio``, ``gns``, …) and returns the
next ``n`` within ``[n_min, n_max]``; whatever it remembers is in ``state_dict`` and goes into the checkpoint.
Every rule, its first round and how a config builds it: :mod:`minionsrl.scaling.registry`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

from minionsrl.stats import RoundStats


class Scaler(ABC):
    """One small interface for every scaling rule."""

    name: str = "base"
    needs: frozenset[str] = frozenset()  # detectors the rule reads: "curvature" and/or "gns"

    def __init__(self, n_min: int, n_max: int) -> None:
        self.n_min, self.n_max = n_min, n_max
        self.score: float | None = None  # the rule's last score, logged beside n_actors
        self.reason: str | None = None  # why the last call changed the count, in words (rules that say), else None
        self.previous: int | None = None  # the count of the round before the last one (:meth:`warm`)

    @abstractmethod
    def next_actors(self, last_round: RoundStats | None) -> int:
        """Number of actors for the coming round, given the previous round's stats (None before the first)."""

    def clip(self, n: float) -> int:
        return int(min(max(n, self.n_min), self.n_max))

    def warm(self, last_round: RoundStats) -> bool:
        """Whether the previous round measured its count running, not starting: the count's second round or later
        (remembered here), without cold starts. A count's first round starts instances and compiles the learner's
        programs for its batch's shapes (seconds on a CPU): kept, it would stand for its count for the whole run."""
        n = last_round.n_actors
        warm = n == self.previous and not last_round.cold_starts
        self.previous = n
        return warm

    def state_dict(self) -> dict[str, Any]:
        return {"score": self.score, "previous": self.previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.score = state["score"]
        self.previous = state["previous"]


def ewma(old: float, new: float, weight: float) -> float:
    """An exponentially weighted moving average's next value: ``weight`` on the average so far, the rest on ``new``."""
    return weight * old + (1 - weight) * new


def as_finite(value: Any) -> float | None:
    """``value`` as a float, or None when it is missing, empty or not finite."""
    if value is None or value == "":
        return None
    value = float(value)
    return value if math.isfinite(value) else None
