"""The round loop of DESIGN §1, wired: scaler → backend → rollout functions → learner → detectors → ledger →
logger/checkpoint.

A round is :func:`~minionsrl.loop.round.play_round` (read it there, top to bottom); :class:`Trainer` runs rounds
until a stop condition holds, keeps the run's frozen state between them, and wires what observes them: the run
directory (:class:`RunFiles`: metrics, invocations, the scaler's reasons, the best policy, the checkpoint) and the
callbacks. The parts are composed, not inherited: a :class:`~minionsrl.loop.sampler.Sampler` runs the round's
functions (synchronously, or keeping them in flight), a :class:`~minionsrl.learner.learners.Learner` updates the
policy, a :class:`~minionsrl.scaling.base.Scaler` picks ``n``, a :class:`~minionsrl.cost.CostLedger` prices (the run's
state keeps the totals), and a :class:`~minionsrl.loop.session.Session` keeps the run directory. They are built in
:func:`minionsrl.build.make_trainer`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from minionsrl.backends.base import Backend
from minionsrl.config import TrainConfig
from minionsrl.cost import CostLedger
from minionsrl.errors import ConfigError
from minionsrl.learner.learners import Learner
from minionsrl.loop import checkpoint, stops
from minionsrl.loop.metrics import RunLog, invocation_rows
from minionsrl.loop.retry import Outcome
from minionsrl.loop.round import Observer, Parts, Played, play_round
from minionsrl.loop.sampler import Publisher, Sampler
from minionsrl.loop.session import Session
from minionsrl.loop.state import Remaining, RunState
from minionsrl.scaling.base import Scaler
from minionsrl.stats import RoundStats, RunSummary


class RunFiles(Observer):
    """The run directory, observing the rounds: metrics rows, invocations and the scaler's reasons as they come,
    the best policy when an evaluation improves, and the checkpoint every ``checkpoint_every`` rounds and on the
    last (the stop decision travels with it), written while the next round samples."""

    def __init__(self, cfg: TrainConfig, log: RunLog, session: Session,
                 state_of: Callable[[RunState], dict[str, Any]]) -> None:
        self.cfg, self.log, self.session, self.state_of = cfg, log, session, state_of

    def scaler_changed(self, round_idx: int, n_actors: int, reason: str) -> None:
        self.log.log_scaler(round_idx, n_actors, reason)

    def row(self, stats: RoundStats, outcomes: list[Outcome]) -> None:
        self.log.log_round(stats, invocation_rows(stats.round, outcomes))

    def attempts(self, round_idx: int, outcomes: list[Outcome]) -> None:
        self.log.log_invocations(invocation_rows(round_idx, outcomes))

    def best(self, policy: dict[str, Any]) -> None:
        self.session.save_best(policy)

    def before_update(self) -> None:
        self.session.wait()  # the checkpoint being written holds the learner's tensors

    def ended(self, played: Played) -> None:
        """Checkpoint the round when one is due."""
        s = played.state
        if s.round % self.cfg.run.checkpoint_every == 0 or s.stopped_by:
            self.checkpoint(s)

    def checkpoint(self, s: RunState) -> None:
        """Checkpoint the run as ``s`` stands, with its parts' state (written in the background)."""
        self.session.save(self.state_of(s), s.round)


class Trainer:
    """Runs rounds until a stop condition holds; owns the run's state between rounds, not its parts' internals."""

    def __init__(self, cfg: TrainConfig, session: Session, learner: Learner, sampler: Sampler, publisher: Publisher,
                 scaler: Scaler, ledger: CostLedger, backend: Backend) -> None:
        self.cfg, self.session, self.backend = cfg, session, backend
        self.parts = Parts(cfg, learner, sampler, publisher, scaler, ledger)
        self.run_dir = session.run_dir
        self.state = RunState()
        self.written: tuple[RoundStats, ...] = ()  # the rows the last round wrote (a held row comes a round later)
        if session.resume_state is not None:
            self._restore(session.resume_state)
        # a resumed run keeps its learning-rate schedule, whatever limits it was given now
        self.state = replace(self.state, remaining=Remaining.resumed(cfg, self.state.remaining, self.state.spent()))
        # a checkpoint taken while its round's evaluation was in flight: that round's row is written again, after
        # the evaluation runs again (metrics.csv may hold it already, if the run stopped later)
        held = self.state.pending_eval is not None
        self.log = RunLog(self.run_dir, self.round if session.resume else None, self.env_steps - held,
                          cfg.run.tensorboard, metrics_round=self.round - held if session.resume else None)
        self.files = RunFiles(cfg, self.log, session, self._state)

    @property
    def learner(self) -> Learner:
        return self.parts.learner

    @property
    def sampler(self) -> Sampler:
        return self.parts.sampler

    @property
    def scaler(self) -> Scaler:
        return self.parts.scaler

    @property
    def ledger(self) -> CostLedger:
        return self.parts.ledger

    @property
    def round(self) -> int:
        return self.state.round

    @property
    def env_steps(self) -> int:
        return self.state.env_steps

    @property
    def last_round(self) -> RoundStats | None:
        return self.state.last_round

    # -- the loop --------------------------------------------------------------------------------
    def run(self, on_round: Callable[[RoundStats], bool | None] | None = None) -> RunSummary:
        """Train until a stop condition holds; return the summary (also written to summary.json). ``on_round``
        gets each metrics row once it is written, complete: a row held for its evaluation a round later. When it
        returns False the run stops after that round (``stopped_by: callback``): a row still waiting for its
        evaluation is written without it, and the round is checkpointed (``--resume`` continues the run).

        A resumed run keeps its learning-rate schedule (:class:`~minionsrl.loop.state.Remaining`): changed limits
        (``total_timesteps``, the budgets) do not restart the annealing."""
        self.state = replace(self.state, started=time.perf_counter())
        try:
            s = self.state
            if self.session.resume_state is not None:
                stopped_by = stops.resumed_stop(self.cfg, s)
                if stopped_by is not None:  # the checkpoint passed its checks: the run is over, nothing runs
                    print(stops.nothing_to_do(self.cfg, s, stopped_by), file=sys.stderr, flush=True)
            else:
                stopped_by = stops.stop_reason(self.cfg, s)
            self.state = replace(s, stopped_by=stopped_by)
            if stopped_by is None:
                self.log.log_config(self.session.cfg.to_dict(), self.env_steps)  # TensorBoard's Text tab
            while self.state.stopped_by is None:
                self.run_round()
                stop = False
                if on_round is not None:
                    for row in self.written:
                        stop = on_round(row) is False or stop
                if stop and self.state.stopped_by is None:
                    self._stopped_by_callback(on_round)
            self._abandon_in_flight()  # e.g. stopped by the budget with invocations in flight: none outlives the run
            self.session.wait()
            ledger, billed = self.ledger, self.state.billed
            return self.session.write_summary(self.state, billed.usd(), billed.projected_s, ledger.priced_as,
                                              ledger.learner_host.name, self.backend.where())
        finally:
            self.close()

    def run_round(self) -> RoundStats:
        """Play one round (:func:`~minionsrl.loop.round.play_round`), keep its state, and checkpoint it when due."""
        played = play_round(self.state, self.parts, self.files)
        self.state, self.written = played.state, played.rows
        self.files.ended(played)
        return played.stats

    def close(self) -> None:
        """Close the logs and the backend, and let the last checkpoint reach the disk (for callers of
        :meth:`run_round`; :meth:`run` closes by itself)."""
        self.log.close()
        self.backend.close()
        self.session.close()  # its lock; on the way out of an error, a checkpoint's error is not the one to report

    def _stopped_by_callback(self, on_round: Callable[[RoundStats], bool | None]) -> None:
        """A callback stopped the run: a row still waiting for its evaluation (which would have run beside the
        next round) is written without it, what is in flight is abandoned, and the round is checkpointed."""
        s = self.state = replace(self.state, stopped_by="callback")
        if s.pending_eval is not None and s.last_round is not None:
            self.state = replace(s, pending_eval=None)
            self.files.row(s.last_round, [])
            on_round(s.last_round)
        self._abandon_in_flight()
        self.files.checkpoint(self.state)

    def _abandon_in_flight(self) -> None:
        """Cancel what still runs after the last round (a wave sent ahead, asynchronous invocations) and bill it: its
        attempts go into invocations.csv under the last round and their dollars into the run's totals."""
        got = self.sampler.finish()
        if got.attempts:
            self.files.attempts(self.round, [got])
            usd = self.ledger.abandoned_usd([a.reply.record for a in got.attempts])
            self.state = replace(self.state, billed=self.state.billed.abandoned(usd))

    # -- checkpoint ------------------------------------------------------------------------------
    def _state(self, s: RunState) -> dict[str, Any]:
        """Everything a resumed run needs: arrays and plain data (a safetensors checkpoint)."""
        parts, counters = self.parts, s.to_state()
        ledger = counters.pop("ledger")  # last, where the file has always had it (a resume checks keys in order)
        return {"format_version": checkpoint.STATE_VERSION, **counters, **parts.learner.state_dict(),
                **parts.sampler.state_dict(), "scaler": parts.scaler.state_dict(), "ledger": ledger}

    def _restore(self, state: dict[str, Any]) -> None:
        """Resume from ``state``, checked first against the state this run writes itself (as ``load_policy``
        checks weights): a checkpoint that parses but does not fit is one line, not a NaN policy or a traceback."""
        where = f"--resume: checkpoint {str(checkpoint.dir_of(self.run_dir) / checkpoint.LATEST)!r}"
        parts = self.parts
        try:
            checkpoint.check_state(state, self._state(self.state), where)
            self.state = RunState.from_state(state)
            parts.learner.load_state_dict(state)
            parts.sampler.load_state_dict(state)
            parts.scaler.load_state_dict(state["scaler"])
        except ConfigError as exc:
            raise ConfigError(f"{exc}; {checkpoint.restore_hint(checkpoint.dir_of(self.run_dir))}") from exc
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # a field its reader refuses
            raise ConfigError(f"{where} does not fit this run ({type(exc).__name__}: {exc}); "
                              f"{checkpoint.restore_hint(checkpoint.dir_of(self.run_dir))}") from exc
        parts.publisher.version = self.state.round
