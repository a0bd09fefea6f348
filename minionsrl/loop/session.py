"""A run directory over the run's life: opened fresh or resumed, checkpointed, summarised.

:class:`Session` owns the directory: ``config.yaml`` (a resumed run must
keep every field that changes learning), ``checkpoints/``, ``summary.json``, and ``.lock``, held while
the session is open so that two learners never share a run dir.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from minionsrl import config, files
from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.loop import checkpoint
from minionsrl.loop.state import RunState
from minionsrl.stats import RunSummary

LOCK = ".lock"  # in the run dir: held by the learner using it
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

    def write_summary(self, progress: RunState, cost_usd: dict[str, float], projected_cloud_s: float,
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
