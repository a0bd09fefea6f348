"""Scalers decide how many actors the next round gets (SPEC §2). Round stats in, next ``n`` out.

A scaler never knows which backend runs the actors; its state goes into the checkpoint.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from minionsrl.config import TrainConfig


class Scaler(ABC):
    """One small interface for every scaling rule."""

    name: str = "base"

    @abstractmethod
    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        """Number of actors for the coming round, given the previous round's metrics row (or None)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 - stateless scalers keep nothing
        """Restore what :meth:`state_dict` saved."""


class FixedScaler(Scaler):
    """Always ``n`` actors: the baseline (and the server-based setup on a server backend)."""

    name = "fixed"

    def __init__(self, n: int) -> None:
        self.n = n

    def next_actors(self, last_round: dict[str, Any] | None) -> int:
        return self.n


def make_scaler(cfg: TrainConfig) -> Scaler:
    """Build the scaler named by ``cfg.scaler``."""
    if cfg.scaler == "fixed":
        return FixedScaler(cfg.actors)
    raise ValueError(f"unknown scaler {cfg.scaler!r}")
