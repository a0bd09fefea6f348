"""How much of the run is left, kept across resumes: the fraction the learner anneals its rate and clip by.

The trainer tells the learner ``1 - f`` each round, ``f`` the spent fraction of whichever limit is nearest its end
(``total_timesteps``, ``budget_usd``, ``time_budget_s``); with ``lr_schedule`` anneal the learner's rate is the
config's times it (:meth:`~minionsrl.learner.learners.Learner.set_remaining`). Those limits are stop
conditions, which a resumed run may change: raised, ``f`` fell and the rate jumped back up (a run annealed to
3e-5 resumed at 5e-4). A resumed run keeps its schedule instead: with the same limits it is exactly the
uninterrupted run's; with changed ones the rate goes on from the last round's and falls linearly to 0 at the
new nearest limit. The factor that does it travels with the checkpoint (:class:`~minionsrl.loop.session.Progress`
``anneal``), so a second resume keeps it too.

With ``anneal_clip`` the surrogate's clipping coefficient follows the same fraction: one schedule, the rate's and
the clip's (rl-baselines3-zoo's ``lin_`` learning rate and clip range).
"""

from __future__ import annotations

from typing import Any

from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.loop.checkpoint import RESTORE
from minionsrl.numbers import is_amount

LIMITS = ("total_timesteps", "budget_usd", "time_budget_s")  # what the rate anneals over: steps, dollars, seconds


def limits(cfg: TrainConfig) -> list[float | None]:
    """The run's value of each of :data:`LIMITS` (None where it sets none)."""
    return [cfg.get(name) for name in LIMITS]


def remaining(spent: list[float], limit: list[float | None]) -> float:
    """``1 - f``: the fraction of the nearest limit left (1 without limits)."""
    fractions = [s / lim for s, lim in zip(spent, limit, strict=True) if lim is not None]
    return max(1.0 - max(fractions), 0.0) if fractions else 1.0


def keep_on_resume(cfg: TrainConfig, anneal: dict[str, Any] | None, spent: list[float]) -> dict[str, Any]:
    """The schedule of this session: ``{"limits", "scale", "spent"}``, ``scale`` multiplying the config's rate.

    ``anneal`` is the checkpoint's (None: a fresh run); ``spent`` what the run has spent so far (steps, serverless
    dollars, projected seconds)."""
    now = limits(cfg)
    if anneal is not None and not _well_formed(anneal):
        raise ConfigError(f"--resume: the checkpoint's learning-rate schedule (anneal) is malformed; {RESTORE}")
    if anneal is None:
        return {"limits": now, "scale": 1.0, "spent": None}
    scale, before, last = float(anneal["scale"]), anneal["limits"], anneal.get("spent")
    if (cfg.learner.lr_schedule == "anneal" or cfg.learner.anneal_clip) and before != now and last is not None:
        rate = scale * remaining(last, before)  # the last round's fraction of the config's rate (and clip)
        left = remaining(spent, now)
        if left > 0.0:
            scale = rate / left  # rate at the next round, falling to 0 at the new nearest limit
    return {"limits": now, "scale": scale, "spent": anneal.get("spent")}


def _numbers(value: Any, none_ok: bool) -> bool:
    return isinstance(value, list) and len(value) == len(LIMITS) and all(
        (v is None and none_ok) or is_amount(v) for v in value)


def _well_formed(anneal: Any) -> bool:
    if not isinstance(anneal, dict) or not _numbers(anneal.get("limits"), True):
        return False
    scale = anneal.get("scale")
    spent = anneal.get("spent")
    return is_amount(scale) and (spent is None or _numbers(spent, False))
