"""The round loop of DESIGN §1: scaler → backend → rollout functions → learner → detectors → ledger →
logger/checkpoint.

Read :meth:`Trainer.run_round`: one round as five phases (plan, collect, learn, decide, record), the same for
every algorithm, each a method below it. The parts are composed, not inherited: a
:class:`~minionsrl.loop.sampler.Sampler` runs the round's functions (synchronously, or keeping them in flight), a
:class:`~minionsrl.learner.learners.Learner` updates the policy, a :class:`~minionsrl.scaling.base.Scaler` picks
``n``, a :class:`~minionsrl.cost.CostLedger` bills, and a :class:`~minionsrl.loop.session.Session` keeps the run
directory. They are built in :func:`minionsrl.build.make_trainer`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from minionsrl.backends.base import Backend
from minionsrl.config import TrainConfig
from minionsrl.cost import CostLedger
from minionsrl.errors import ConfigError, Diverged
from minionsrl.forecast import function_stats
from minionsrl.function import fragment, wire
from minionsrl.learner import runtime
from minionsrl.learner.detectors import DetectorPlan
from minionsrl.learner.learners import Learned, Learner
from minionsrl.loop import checkpoint, stops
from minionsrl.loop.metrics import RunLog, invocation_rows
from minionsrl.loop.retry import OK, Attempt, Outcome, TooFewReplies, fault_counts
from minionsrl.loop.sampler import Evaluation, Publisher, Sampled, Sampler, invocation_seed
from minionsrl.loop.session import Progress, Remaining, Session
from minionsrl.scaling.base import Scaler
from minionsrl.stats import FUNCTION_COLUMNS, RoundStats, RunSummary


@dataclass
class Round:
    """One round in progress: what each phase of :meth:`Trainer.run_round` leaves for the next, and its clocks."""

    index: int
    n_actors: int
    started: float  # perf_counter stamps of the round's phases
    previous_learner_s: float = 0.0  # the previous round's update, beside which its functions may have been sent
    eval_beside: Evaluation | None = None  # the previous round's evaluation, run beside this round's functions
    sampled: Sampled = field(default_factory=lambda: Sampled([], []))
    learned: Learned | None = None  # its detectors' columns and seconds too
    learning: runtime.Mark | None = None  # the learner's clocks when its part began
    outcomes: list[Outcome] = field(default_factory=list)  # every attempt: training, evaluation, cancelled ones
    evaluated_after: list[Outcome] = field(default_factory=list)  # an evaluation after the update
    eval_return: float | None = None
    eval_deferred: bool = False  # its evaluation runs beside the next round's functions: its row is written then
    learner_s: float = 0.0  # the learner's part on a host of its own: update and detectors, less their CPU wait
    sampled_at: float = 0.0
    learned_at: float = 0.0  # update and detectors done
    decided_at: float = 0.0  # the stop decided (on the last round: stragglers abandoned); evaluation from here
    ended: float = 0.0


class Trainer:
    """Runs rounds until a stop condition holds; owns the run's progress, not its parts' internals."""

    def __init__(self, cfg: TrainConfig, session: Session, learner: Learner, sampler: Sampler, publisher: Publisher,
                 scaler: Scaler, ledger: CostLedger, backend: Backend) -> None:
        self.cfg, self.session, self.learner, self.sampler = cfg, session, learner, sampler
        self.publisher, self.scaler, self.ledger, self.backend = publisher, scaler, ledger, backend
        self.run_dir = session.run_dir
        self.progress = Progress()
        self.written: list[RoundStats] = []  # the rows the last round wrote (a held row comes a round later)
        if session.resume_state is not None:
            self._restore(session.resume_state)
        # a resumed run keeps its learning-rate schedule, whatever limits it was given now
        self.progress.remaining = Remaining.resumed(cfg, self.progress.remaining, self._spent())
        # a checkpoint taken while its round's evaluation was in flight: that round's row is written again, after
        # the evaluation runs again (metrics.csv may hold it already, if the run stopped later)
        held = self.progress.pending_eval is not None
        self.log = RunLog(self.run_dir, self.round if session.resume else None, self.env_steps - held,
                          cfg.run.tensorboard, metrics_round=self.round - held if session.resume else None)

    @property
    def round(self) -> int:
        return self.progress.round

    @property
    def env_steps(self) -> int:
        return self.progress.env_steps

    @property
    def last_round(self) -> RoundStats | None:
        return self.progress.last_round

    # -- the loop --------------------------------------------------------------------------------
    def run(self, on_round: Callable[[RoundStats], bool | None] | None = None) -> RunSummary:
        """Train until a stop condition holds; return the summary (also written to summary.json). ``on_round``
        gets each metrics row once it is written, complete: a row held for its evaluation a round later. When it
        returns False the run stops after that round (``stopped_by: callback``): a row still waiting for its
        evaluation is written without it, and the round is checkpointed (``--resume`` continues the run).

        A resumed run keeps its learning-rate schedule (:class:`~minionsrl.loop.session.Remaining`): changed limits
        (``total_timesteps``, the budgets) do not restart the annealing."""
        self.progress.started = time.perf_counter()
        try:
            p = self.progress
            if self.session.resume_state is not None:
                p.stopped_by = stops.resumed_stop(self.cfg, p)
                if p.stopped_by is not None:  # the checkpoint passed its checks: the run is over, nothing runs
                    print(stops.nothing_to_do(self.cfg, p, p.stopped_by), file=sys.stderr, flush=True)
            else:
                p.stopped_by = stops.stop_reason(self.cfg, p, self._spent_so_far())
            if p.stopped_by is None:
                self.log.log_config(self.session.cfg.to_dict(), self.env_steps)  # TensorBoard's Text tab
            while p.stopped_by is None:
                self.run_round()
                stop = False
                if on_round is not None:
                    for row in self.written:
                        stop = on_round(row) is False or stop
                if stop and p.stopped_by is None:
                    p.stopped_by = "callback"
                    if p.pending_eval is not None:  # its evaluation would have run beside the next round
                        p.pending_eval = None
                        self.log.log_round(p.last_round, [])
                        on_round(p.last_round)
                    self._abandon_in_flight()
                    self.session.save(self._state(), p.round)
            self._abandon_in_flight()  # e.g. stopped by the budget with invocations in flight: none outlives the run
            self.session.wait()
            return self.session.write_summary(
                self.progress,
                {"serverless": self.ledger.total_serverless_usd, "server": self.ledger.total_server_usd,
                 "serverless_wall": self.ledger.total_serverless_wall_usd,
                 "server_wall": self.ledger.total_server_wall_usd},
                self.ledger.total_projected_s, self.ledger.priced_as, self.ledger.learner_host.name,
                self.backend.where())
        finally:
            self.close()

    def close(self) -> None:
        """Close the logs and the backend, and let the last checkpoint reach the disk (for callers of
        :meth:`run_round`; :meth:`run` closes by itself)."""
        self.log.close()
        self.backend.close()
        self.session.close()  # its lock; on the way out of an error, a checkpoint's error is not the one to report

    def run_round(self) -> RoundStats:
        """One round, in five phases, the same for every algorithm: **plan** (how many functions, the learning
        rate), **collect** (run them, beside the previous round's evaluation), **learn** (the update and the
        detectors), **decide** (does the run stop here; does the round's evaluation run now or beside the next
        round's functions) and **record** (bill, log, checkpoint). A sampler may send a round's functions ahead of
        it, while the previous round learns (:class:`~minionsrl.loop.sampler.PipelinedSampler`)."""
        r = self._plan()
        self._collect(r)
        self._learn(r)
        self._decide(r)
        return self._record(r)

    def _plan(self) -> Round:
        """The round's actor count (the scaler's, or the one its functions were sent ahead with) and the fraction
        of the run left, which sets the learner's rate and clip."""
        p, started = self.progress, time.perf_counter()
        p.round += 1
        self.written = []
        sent = self.sampler.sent_actors(p.round)
        n = sent if sent is not None else self._ask_scaler(p.round)
        self.learner.set_remaining(self._remaining())
        beside = Evaluation(*p.pending_eval) if p.pending_eval else None  # of the policy this round samples with
        previous_s = p.last_round.projected_learner_s if p.last_round else 0.0
        return Round(p.round, n, started, previous_learner_s=previous_s, eval_beside=beside)

    def _collect(self, r: Round) -> None:
        """The round's fragments from its functions (and the return of the previous round's evaluation beside them,
        whose row is written now); a sampler that sends ahead sends the next round's functions before this one
        learns, unless this round is the last by a count."""
        r.sampled = self._logging_failures([], lambda: self.sampler.sample(r.index, r.n_actors, r.eval_beside))
        r.learning = runtime.mark()
        r.sampled_at = r.learning.wall
        if r.eval_beside is not None:
            self._log_deferred_row(r.sampled.eval_return)
        steps = sum(len(f.rewards) for f in r.sampled.fragments)
        # the scaler is asked only by a sampler that sends ahead, and reads the row just completed
        self.sampler.before_update(r.index, lambda: None if stops.last_by_count(self.cfg, self.progress, steps)
                                   else self._ask_scaler(r.index + 1))

    def _ask_scaler(self, round_idx: int) -> int:
        """The scaler's actor count for round ``round_idx``, from the last row; where it says why it changed the
        count, the reason goes to ``scaler.csv``."""
        n = self.scaler.next_actors(self.progress.last_round)
        if self.scaler.reason is not None:
            self.log.log_scaler(round_idx, n, self.scaler.reason)
        return n

    def _learn(self, r: Round) -> None:
        """Update the policy on the fragments (the detectors the scaler reads, before or after the update)."""
        p, fragments = self.progress, r.sampled.fragments
        self.session.wait()  # the previous round's checkpoint, written while this round sampled
        try:
            r.learned = self.learner.learn(fragments, np.random.default_rng([self.cfg.run.seed, r.index]),
                                           self._detector_plan(len(fragments)))
        except Diverged as exc:  # the round is what the user needs to find it in metrics.csv
            raise Diverged(f"round {r.index}: {exc}") from None
        self.publisher.version = r.index  # the next publish carries this update
        p.env_steps += len(r.learned.batch)
        for frag in fragments:
            p.recent_returns.extend(frag.episode_returns.tolist())
            p.recent_rounds.extend([r.index] * len(frag.episode_returns))
        r.learned_at = time.perf_counter()

    def _decide(self, r: Round) -> None:
        """Whether the run stops after this round, decided once, here, with what the round has cost so far (a later
        check could find the budget spent after the round and skip the final evaluation it promised); then the
        round's evaluation: now, after the update (the last round always), or held for the next round's functions
        to run beside (``--eval-overlap``, or a sampler that ``defers_evaluation``: its functions sent ahead hold
        the backend)."""
        cfg, p = self.cfg, self.progress
        r.outcomes = list(r.sampled.outcomes)
        assert r.learning is not None
        so_far = r.sampled.times(time.perf_counter() - r.started, runtime.own_s(r.learning), r.previous_learner_s)
        pending = stops.Spent(self.ledger.round_usd(so_far, [a.reply.record for g in r.outcomes for a in g.attempts]),
                              self.ledger.projected_s(so_far))
        p.stopped_by = stops.stop_reason(cfg, p, self._spent_so_far(), pending)
        if p.stopped_by:  # abandon what is still in flight, a wave sent ahead too (billed for the time it ran)
            r.outcomes.append(self.sampler.finish())
        r.decided_at, r.learner_s = time.perf_counter(), runtime.own_s(r.learning)
        due = bool(cfg.eval.eval_every) and r.index % cfg.eval.eval_every == 0
        r.eval_deferred = (due and not p.stopped_by and (cfg.eval.eval_overlap or self.sampler.defers_evaluation)
                           and self.sampler.evaluates_beside)
        if (due and not r.eval_deferred) or p.stopped_by:
            r.eval_return, evaluated = self._logging_failures(r.outcomes, lambda: self.sampler.evaluate(
                r.index, r.n_actors, cfg.eval.eval_episodes))
            self._evaluated(r.index, r.eval_return)
            r.outcomes.append(evaluated)
            r.evaluated_after.append(evaluated)
            # this evaluation may reach the target
            p.stopped_by = p.stopped_by or stops.stop_reason(cfg, p, self._spent_so_far(), check_budget=False)
        r.ended = time.perf_counter()

    def _record(self, r: Round) -> RoundStats:
        """Bill the round, write its row (or hold it for its evaluation), and checkpoint it every
        ``checkpoint_every`` rounds and on the last (the stop decision travels with the checkpoint)."""
        cfg, p = self.cfg, self.progress
        stats = self._bill_and_log(r)
        p.pending_eval = (r.index, r.n_actors, cfg.eval.eval_episodes) if r.eval_deferred else None
        p.stop_budget = stops.budgets(cfg).get(p.stopped_by or "")
        if r.index % cfg.run.checkpoint_every == 0 or p.stopped_by:
            self.session.save(self._state(), r.index)
        return stats

    # -- pieces of a round -----------------------------------------------------------------------
    def _logging_failures(self, earlier: list[Outcome], step: Callable[[], Any]) -> Any:
        """Run a sampling step; a round that fails still lists its attempts (and ``earlier`` ones of the same
        round) in invocations.csv before the error ends the run."""
        try:
            return step()
        except TooFewReplies as exc:
            self.log.log_invocations(invocation_rows(self.round, [*earlier, exc.outcome]))
            if fragment.ENV_FAULT in str(exc):  # a reply failed its checks on what the env returned: name the env
                named = str(exc).replace(fragment.ENV_FAULT, f"the env {self.cfg.env.env_id!r} returned", 1)
                raise TooFewReplies(named, exc.outcome) from None
            raise

    def _detector_plan(self, fragments: int) -> DetectorPlan | None:
        """What the learner's detectors compute this round: what the scaler reads (``detectors=auto``), everything
        (``on``) or nothing (``off``); the noise scale from one slice per fragment."""
        mode, cfg = self.cfg.scaling.detectors, self.cfg
        wanted = {"curvature", "gns"} if mode == "on" else set() if mode == "off" else set(self.scaler.needs)
        if not wanted:
            return None
        return DetectorPlan(frozenset(wanted), cfg.scaling.detector_placement, fragments,
                            invocation_seed(cfg.run.seed, self.round, 0, wire.SEED_STREAMS["detect"]),
                            cfg.scaling.detector_samples, cfg.scaling.lanczos_iterations, cfg.scaling.lanczos_tol)

    def _bill_and_log(self, r: Round) -> RoundStats:
        """Bill every attempt (failed ones, retries, duplicates and cancelled stragglers too, an evaluation in the
        round it ran); write the row, or only its invocations when the round holds it for its evaluation."""
        attempts = [a for g in r.outcomes for a in g.attempts]
        lost = sum(len(g.lost) for g in r.outcomes)
        times = r.sampled.times(r.ended - r.started, r.learner_s, r.previous_learner_s, r.evaluated_after)
        bill = self.ledger.bill_round(times, [a.reply.record for a in attempts], r.n_actors)
        episodes = [x for f in r.sampled.fragments for x in f.episode_returns.tolist()]
        assert r.learned is not None
        update, detected, sampled = r.learned.stats, r.learned.detected, r.sampled
        stats = RoundStats(
            round=r.index, env_steps=self.env_steps, n_actors=r.n_actors, wall_s=self.progress.wall(),
            round_s=r.ended - r.started, sample_s=r.sampled_at - r.started,
            learn_s=r.learned_at - r.sampled_at - r.learned.detector_s,  # the detectors ran inside learn
            eval_s=r.ended - r.decided_at, eval_return_mean=r.eval_return,
            train_return_mean=float(np.mean(episodes)) if episodes else None, episodes=len(episodes),
            policy_loss=update.policy_loss, value_loss=update.value_loss, entropy=update.entropy,
            approx_kl=update.approx_kl, clipfrac=update.clipfrac, explained_variance=update.explained_variance,
            learning_rate=update.learning_rate, sps=len(r.learned.batch) / (r.ended - r.started),
            cost_serverless_usd=bill.cost_serverless_usd, cost_server_usd=bill.cost_server_usd,
            cum_cost_serverless_usd=self.ledger.total_serverless_usd, cum_cost_server_usd=self.ledger.total_server_usd,
            projected_round_s=bill.projected_round_s, projected_learner_s=r.learner_s,
            cost_storage_usd=bill.storage_usd, cold_starts=sum(a.reply.record.cold for a in attempts),
            **self._function_columns(attempts),
            cost_serverless_wall_usd=bill.cost_serverless_wall_usd, cost_server_wall_usd=bill.cost_server_wall_usd,
            scaler_score=self.scaler.score, convexity_ratio=detected.convexity_ratio,
            lambda_min=detected.lambda_min, lambda_max=detected.lambda_max, gns=detected.gns,
            detector_s=r.learned.detector_s, **fault_counts(attempts, lost),
            fragments=sampled.used, policy_lag_mean=sampled.policy_lag_mean, policy_lag_max=sampled.policy_lag_max,
            stale_retries=sampled.stale_retries,
        )
        self.progress.recent_costs.append(bill.cost_serverless_usd)
        self.progress.recent_projected.append(bill.projected_round_s)
        if r.eval_deferred:
            self.log.log_invocations(invocation_rows(r.index, r.outcomes))
        else:
            self.log.log_round(stats, invocation_rows(r.index, r.outcomes))
            self.written.append(stats)
        self.progress.last_round = stats
        return stats

    def _function_columns(self, attempts: list[Attempt]) -> dict[str, float | None]:
        """What the round's warm training functions did, per sample (empty cells when none ran warm)."""
        envs = self.cfg.env.envs_per_function
        stats = function_stats([(a.reply.record, a.request.steps * envs) for a in attempts
                                if a.status == OK and a.request is not None])  # not a duplicate delivery's copy
        return stats.columns() if stats else dict.fromkeys(FUNCTION_COLUMNS.values())

    def _log_deferred_row(self, eval_return: float | None) -> None:
        """The previous round's row, written now that its evaluation (run beside this round's functions) is
        back; the run stops after this round if that evaluation reached the target."""
        p = self.progress
        assert p.last_round is not None and eval_return is not None
        p.last_round = replace(p.last_round, eval_return_mean=eval_return)
        self._evaluated(p.last_round.round, eval_return)  # before this round's update: the learner holds that policy
        p.pending_eval = None
        self.log.log_round(p.last_round, [])
        self.written.append(p.last_round)

    def _evaluated(self, round_idx: int, eval_return: float) -> None:
        """Record an evaluation of round ``round_idx``'s policy, the learner's current one, and keep that policy as
        ``checkpoints/best.safetensors`` when it evaluates better than every earlier one."""
        p = self.progress
        p.last_eval = eval_return
        if eval_return > p.best_eval:
            p.best_eval, p.best_round = eval_return, round_idx
            self.session.save_best(checkpoint.policy_state(self.learner.state_dict(), round_idx, eval_return))

    def _spent(self) -> list[float]:
        """What the learning rate anneals over, spent so far: env steps, serverless dollars, projected seconds."""
        return [self.env_steps, self.ledger.total_serverless_usd, self.ledger.total_projected_s]

    def _remaining(self) -> float:
        """The fraction of the run left, which the learner anneals its rate (``lr_schedule`` anneal) and clip
        (``anneal_clip``) by: linearly to 0 over the run's spent fraction of whichever limit is nearest its end —
        total_timesteps (CleanRL's schedule), the dollar budget, or the projected-time budget — times the scale a
        resumed run with changed limits keeps (:class:`~minionsrl.loop.session.Remaining`)."""
        assert self.progress.remaining is not None  # set in __init__
        return self.progress.remaining.fraction(self.cfg, self._spent())

    def _abandon_in_flight(self) -> None:
        """Cancel what still runs after the last round (a wave sent ahead, asynchronous invocations) and bill it: its
        attempts go into invocations.csv under the last round and their dollars into the run's totals."""
        got = self.sampler.finish()
        if got.attempts:
            self.log.log_invocations(invocation_rows(self.round, [got]))
            self.ledger.bill_abandoned([a.reply.record for a in got.attempts])

    def _spent_so_far(self) -> stops.Spent:
        """What the ledger has billed the run: serverless dollars and projected seconds."""
        return stops.Spent(self.ledger.total_serverless_usd, self.ledger.total_projected_s)

    # -- checkpoint ------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        """Everything a resumed run needs: arrays and plain data (a safetensors checkpoint)."""
        return {"format_version": checkpoint.STATE_VERSION, **self.progress.state_dict(), **self.learner.state_dict(),
                **self.sampler.state_dict(), "scaler": self.scaler.state_dict(), "ledger": self.ledger.state_dict()}

    def _restore(self, state: dict[str, Any]) -> None:
        """Resume from ``state``, checked first against the state this run writes itself (as ``load_policy``
        checks weights): a checkpoint that parses but does not fit is one line, not a NaN policy or a traceback."""
        where = f"--resume: checkpoint {str(checkpoint.dir_of(self.run_dir) / checkpoint.LATEST)!r}"
        try:
            checkpoint.check_state(state, self._state(), where)
            self.progress.load_state_dict(state)
            self.learner.load_state_dict(state)
            self.sampler.load_state_dict(state)
            self.scaler.load_state_dict(state["scaler"])
            self.ledger.load_state_dict(state["ledger"])
        except ConfigError as exc:
            raise ConfigError(f"{exc}; {checkpoint.restore_hint(checkpoint.dir_of(self.run_dir))}") from exc
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # a field its reader refuses
            raise ConfigError(f"{where} does not fit this run ({type(exc).__name__}: {exc}); "
                              f"{checkpoint.restore_hint(checkpoint.dir_of(self.run_dir))}") from exc
        self.publisher.version = self.progress.round
