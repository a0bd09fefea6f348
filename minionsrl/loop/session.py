"""A run directory over the run's life: opened fresh or resumed, checkpointed, summarised.

:class:`Progress` holds the run's counters (round, steps, wall time, evaluations, recent returns and
costs, the last metrics row); :class:`Session` owns the directory: ``config.yaml`` (a resumed run must
keep every field that changes learning), ``checkpoints/``, ``summary.json``, and ``.lock``, held while
the session is open so that two learners never share a run dir.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from minionsrl import config, files
from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.loop import checkpoint
from minionsrl.numbers import is_amount
from minionsrl.stats import RoundStats, RunSummary

LOCK = ".lock"  # in the run dir: held by the learner using it
LIMITS = ("total_timesteps", "budget_usd", "time_budget_s")  # what the rate anneals over: steps, dollars, seconds


def run_limits(cfg: TrainConfig) -> list[float | None]:
    """The run's value of each of :data:`LIMITS` (None where it sets none)."""
    return [cfg.get(name) for name in LIMITS]


def fraction_left(spent: list[float], limits: list[float | None]) -> float:
    """``1 - f``: the fraction of the nearest limit left (1 without limits)."""
    fractions = [s / lim for s, lim in zip(spent, limits, strict=True) if lim is not None]
    return max(1.0 - max(fractions), 0.0) if fractions else 1.0


@dataclass
class Remaining:
    """How much of the run is left, kept across resumes: the fraction the learner anneals its rate and clip by.

    The trainer tells the learner ``1 - f`` each round, ``f`` the spent fraction of whichever limit is nearest its
    end (:data:`LIMITS`); with ``lr_schedule`` anneal the learner's rate is the config's times it
    (:meth:`~minionsrl.learner.learners.Learner.set_remaining`), and with ``anneal_clip`` the surrogate's clip too
    (rl-baselines3-zoo's ``lin_`` rate and clip range). Those limits are stop conditions, which a resumed run may
    change: raised, ``f`` fell and the rate jumped back up (a run annealed to 3e-5 resumed at 5e-4). A resumed run
    keeps its schedule instead: with the same limits it is exactly the uninterrupted run's; with changed ones the
    rate goes on from the last round's and falls linearly to 0 at the new nearest limit. ``scale`` does it, and
    travels with the checkpoint, so a second resume keeps it too."""

    limits: list[float | None]  # the run's value of each of LIMITS
    scale: float = 1.0  # multiplies the fraction left
    spent: list[float] | None = None  # what the run had spent of each of LIMITS when its last round started

    @classmethod
    def resumed(cls, cfg: TrainConfig, kept: Remaining | None, spent: list[float]) -> Remaining:
        """What is left of the run, this session: ``kept`` is the checkpoint's (None: a fresh run), ``spent`` what
        the run has spent so far (steps, serverless dollars, projected seconds)."""
        now = run_limits(cfg)
        if kept is None:
            return cls(now)
        scale = kept.scale
        if (cfg.learner.lr_schedule == "anneal" or cfg.learner.anneal_clip) and kept.limits != now \
                and kept.spent is not None:
            rate = scale * fraction_left(kept.spent, kept.limits)  # the last round's fraction of the config's rate
            left = fraction_left(spent, now)
            if left > 0.0:
                scale = rate / left  # rate at the next round, falling to 0 at the new nearest limit
        return cls(now, scale, kept.spent)

    def fraction(self, cfg: TrainConfig, spent: list[float]) -> float:
        """The fraction of the run left with ``spent`` spent, remembered (checkpointed with the round: where its
        rate stood)."""
        self.spent = spent
        return self.scale * fraction_left(spent, run_limits(cfg))

    def to_json(self) -> dict[str, Any]:
        return {"limits": self.limits, "scale": self.scale, "spent": self.spent}

    @classmethod
    def from_json(cls, raw: Any) -> Remaining | None:
        """A checkpoint's schedule (None when it kept none); a malformed one is a ConfigError."""
        if raw is None:
            return None
        if not isinstance(raw, dict) or not _amounts(raw.get("limits"), True) or not is_amount(raw.get("scale")) \
                or not (raw.get("spent") is None or _amounts(raw.get("spent"), False)):
            raise ConfigError("--resume: the checkpoint's learning-rate schedule (anneal) is malformed")
        return cls(list(raw["limits"]), float(raw["scale"]), raw.get("spent"))


def _amounts(value: Any, none_ok: bool) -> bool:
    return isinstance(value, list) and len(value) == len(LIMITS) and all(
        (v is None and none_ok) or is_amount(v) for v in value)


@dataclass
class Progress:
    """The run's counters; all of them go into the checkpoint."""

    round: int = 0
    env_steps: int = 0
    wall_offset: float = 0.0  # wall seconds of earlier sessions of a resumed run
    best_eval: float = float("-inf")
    best_round: int = 0  # the round whose policy evaluated to best_eval (checkpoints/best.safetensors); 0: none
    last_eval: float = float("nan")
    recent_returns: deque[float] = field(default_factory=lambda: deque(maxlen=100))
    recent_rounds: deque[int] = field(default_factory=lambda: deque(maxlen=100))  # the round each of them ended in
    recent_costs: deque[float] = field(default_factory=lambda: deque(maxlen=10))  # serverless $ of the last rounds
    recent_projected: deque[float] = field(default_factory=lambda: deque(maxlen=10))  # their projected seconds
    last_round: RoundStats | None = None  # the last round's row
    stopped_by: str | None = None  # the stop condition that ends the run (decided in its last round)
    stop_budget: float | None = None  # the budget in force when a budget (dollars or seconds) stopped the run
    # (round, actors, episodes): the evaluation of round ``round``'s policy that runs beside the next round's
    # functions; that round's row (last_round) is written once it returns
    pending_eval: tuple[int, int, int] | None = None
    remaining: Remaining | None = None  # the fraction of the run left, across resumes (its checkpoint key: anneal)
    started: float = field(default_factory=time.perf_counter)

    def wall(self) -> float:
        return self.wall_offset + time.perf_counter() - self.started

    def state_dict(self) -> dict[str, Any]:
        return {"round": self.round, "env_steps": self.env_steps, "wall_s": self.wall(), "best_eval": self.best_eval,
                "best_round": self.best_round, "last_eval": self.last_eval, "recent_returns": list(self.recent_returns),
                "recent_rounds": list(self.recent_rounds),
                "recent_costs": list(self.recent_costs), "recent_projected": list(self.recent_projected),
                "last_row": json.dumps(None if self.last_round is None else self.last_round.to_row()),
                "stop": json.dumps({"stopped_by": self.stopped_by, "budget": self.stop_budget}),
                "pending_eval": json.dumps(self.pending_eval),
                "anneal": json.dumps(None if self.remaining is None else self.remaining.to_json())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round, self.env_steps, self.wall_offset = int(state["round"]), int(state["env_steps"]), state["wall_s"]
        self.best_eval, self.last_eval = float(state["best_eval"]), float(state["last_eval"])
        self.best_round = int(state["best_round"])
        self.recent_returns.extend(state["recent_returns"])
        rounds = state["recent_rounds"]
        self.recent_rounds.extend(rounds if len(rounds) == len(self.recent_returns) else [])
        self.recent_costs.extend(state["recent_costs"])
        self.recent_projected.extend(state["recent_projected"])
        last = json.loads(state["last_row"])
        self.last_round = None if last is None else RoundStats.from_row(last)
        stop = json.loads(state["stop"])
        self.stopped_by, self.stop_budget = stop["stopped_by"], stop["budget"]
        pending = json.loads(state["pending_eval"])
        self.pending_eval = tuple(pending) if pending else None
        self.remaining = Remaining.from_json(json.loads(state["anneal"]))


class Session:
    """The run directory. Opening one checks it (and reads the checkpoint to resume from) before any work;
    :meth:`create` then makes it (a fresh run) and writes ``config.yaml``. ``create=False`` leaves that to
    the caller, who starts its backend in between, so that a backend that cannot start leaves no run dir."""

    def __init__(self, cfg: TrainConfig, resume: bool, create: bool = True) -> None:
        self.cfg, self.resume = cfg, resume
        self.run_dir = Path(cfg.run.run_dir)
        self._writer: threading.Thread | None = None  # the checkpoint being written
        self._write_error: BaseException | None = None
        self._unlock: weakref.finalize | None = None  # releases the run dir's lock
        try:
            self.resume_state = self._check()
            if create:
                self.create()
        except BaseException:
            self.close()
            raise

    def _check(self) -> dict[str, Any] | None:
        """Refuse a run dir that cannot hold this run, writing nothing but its lock (in an existing run dir);
        return the checkpoint to resume from."""
        files.check_run_dir(self.run_dir)  # no link or special file to write through (or read from)
        if not self.resume:
            if self.run_dir.is_dir():
                self._lock()
            if (self.run_dir / files.METRICS).exists():
                raise ConfigError(f"run_dir {str(self.run_dir)!r} already holds a run; use --resume to continue "
                                  "it or choose another --run-dir")
            here = next(p for p in (self.run_dir.absolute(), *self.run_dir.absolute().parents) if p.exists())
            if not here.is_dir() or not os.access(here, os.W_OK | os.X_OK):  # what mkdir would find (cheap)
                why = "Not a directory" if not here.is_dir() else "Permission denied"
                raise ConfigError(f"run_dir: {str(self.run_dir)!r} cannot be written ({why}: {str(here)!r}); "
                                  "choose a writable directory")
            return None
        cfg_path = files.config_path(self.run_dir, "--resume")
        self._lock()
        state = checkpoint.load(checkpoint.dir_of(self.run_dir))
        if state is not None:  # a run of another minionsrl is that first (its config may be written otherwise too)
            latest = checkpoint.dir_of(self.run_dir) / checkpoint.LATEST
            checkpoint.check_version(state, f"--resume: checkpoint {str(latest)!r}")
        saved = config.build(config.load_yaml(cfg_path, saved=True))
        changed = [k for k, v in self.cfg.learning_fields().items() if saved.learning_fields()[k] != v]
        if changed:
            raise ConfigError(f"--resume: run_dir belongs to another config ({', '.join(changed)} differ); "
                              "resume with the same settings or choose another --run-dir")
        return state

    def create(self) -> None:
        """Make the run dir (a fresh run) and write ``config.yaml`` into it."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._lock()
            config.dump(self.cfg, self.run_dir / files.CONFIG)
        except OSError as exc:
            raise ConfigError(f"run_dir: {str(self.run_dir)!r} cannot be written ({exc.strerror or exc}); "
                              "choose a writable directory") from exc

    def _lock(self) -> None:
        """Hold ``RUN_DIR/.lock`` (``flock``) until :meth:`close` or this process ends, so that a second learner
        on the same run dir (fresh or ``--resume``) is refused at once. The file holds the holder's pid."""
        if self._unlock is not None and self._unlock.alive:
            return
        try:
            fd = os.open(self.run_dir / LOCK, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            raise ConfigError(f"run_dir: {str(self.run_dir)!r} cannot be written ({exc.strerror or exc}); "
                              "choose a writable directory") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(f"run_dir {str(self.run_dir)!r} is in use by another learner (process {holder}); "
                              "wait for it to end or stop it, or choose another --run-dir") from None
        except BaseException:
            os.close(fd)
            raise
        self._unlock = weakref.finalize(self, os.close, fd)  # also when a session is dropped without close()
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())

    def close(self) -> None:
        """Let the checkpoint being written reach the disk, then release the run dir's lock."""
        self.wait(raise_error=False)
        if self._unlock is not None:
            self._unlock()

    def save(self, state: dict[str, Any], round_idx: int) -> None:
        """Start writing the checkpoint (and a kept copy every ``keep_checkpoints_every`` rounds) in the
        background, so that it overlaps the next round's sampling. ``state`` shares the learner's tensors:
        :meth:`wait` must return before they change (the next update)."""
        self.wait()

        def write() -> None:
            try:
                checkpoint.save(checkpoint.dir_of(self.run_dir), state)
                if self.cfg.run.keep_checkpoints_every and round_idx % self.cfg.run.keep_checkpoints_every == 0:
                    checkpoint.save(checkpoint.dir_of(self.run_dir), state, name=checkpoint.kept_name(round_idx))
            except BaseException as exc:  # handed to the learner's thread by wait()
                self._write_error = exc

        self._writer = threading.Thread(target=write, name="checkpoint", daemon=True)
        self._writer.start()

    def save_best(self, state: dict[str, Any]) -> None:
        """Write ``checkpoints/best.safetensors`` now (a policy's weights, a small file, and only when an evaluation
        improves): the learner's tensors in ``state`` change with the next update."""
        checkpoint.save(checkpoint.dir_of(self.run_dir), state, name=checkpoint.BEST)

    def wait(self, raise_error: bool = True) -> None:
        """Wait until the checkpoint being written is on disk; raise what went wrong writing it."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        error, self._write_error = self._write_error, None
        if error is not None and raise_error:
            raise error

    def write_summary(self, progress: Progress, cost_usd: dict[str, float], projected_cloud_s: float,
                      priced_as: str, learner_host: str | None = None,
                      functions_ran_on: str | None = None) -> RunSummary:
        """``summary.json``: the run's outcome, the stop condition that ended it, what it cost (on the deployment
        ``priced_as`` names, and the server the learner was billed as: a GPU host for a GPU learner), where its
        functions ran, and its config. Numbers that
        do not exist (no evaluation yet) are ``null``: JSON has no NaN.

        Three returns, each of a different thing: ``final_eval_return`` is the last round's policy, evaluated
        (deterministic); ``best_eval_return`` the best evaluated policy (round ``best_round``,
        ``checkpoints/best.safetensors``); ``train_return_last100`` the mean of the last 100 training episodes
        (CleanRL's figure, sampled with the stochastic policies of rounds ``train_return_last100_rounds``: long
        episodes make that window reach far back)."""
        recent = list(progress.recent_returns)
        span = [progress.recent_rounds[0], progress.recent_rounds[-1]] if progress.recent_rounds else None
        # a target is met by an evaluated policy (the best one); the other conditions stop the run as it stands
        stop_checkpoint = checkpoint.BEST if progress.stopped_by == "target_return" else checkpoint.LATEST
        summary: RunSummary = {
            "run_dir": str(self.run_dir),
            "env_id": self.cfg.env.env_id, "seed": self.cfg.run.seed, "scaler": self.cfg.scaling.scaler,
            "backend": self.cfg.functions.backend, "rounds": progress.round, "env_steps": progress.env_steps,
            "wall_s": round(progress.wall(), 3), "stopped_by": progress.stopped_by,
            "stop_checkpoint": f"checkpoints/{stop_checkpoint}",
            "final_eval_return": progress.last_eval if math.isfinite(progress.last_eval) else None,
            "best_eval_return": progress.best_eval if math.isfinite(progress.best_eval) else None,
            "best_round": progress.best_round or None,
            "train_return_last100": float(np.mean(recent)) if recent else None,
            "train_return_last100_rounds": span,
            "functions_ran_on": functions_ran_on,
            "cost_usd": cost_usd, "projected_cloud_s": projected_cloud_s, "priced_as": priced_as,
            "learner_host": learner_host,
            "config": self.cfg.to_dict(),
        }
        path = self.run_dir / files.SUMMARY
        try:
            files.write_text(path, json.dumps(summary, indent=2, allow_nan=False))
        except OSError as exc:  # the run itself is checkpointed: --resume of a finished run writes this again
            raise ConfigError(f"{files.SUMMARY}: cannot write {str(path)!r} ({exc.strerror or exc}); free space (or "
                              "make the run dir writable), then run again with --resume --run-dir "
                              f"{str(self.run_dir)!r}") from exc
        return summary
