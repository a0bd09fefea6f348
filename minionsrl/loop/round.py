"""One round, read top to bottom (DESIGN §1): **plan → collect → learn → decide**, the same for every algorithm.

:func:`play_round` takes the run's frozen :class:`~minionsrl.loop.state.RunState` and its :class:`Parts` and returns
the next state, the round's :class:`~minionsrl.stats.RoundStats` and every attempt it made (:class:`Played`). It
writes no file: the metrics log, ``invocations.csv``, ``scaler.csv``, the checkpoint and the best policy's copy are
:class:`Observer`\\ s, told as things happen (a row is written as soon as it is complete, so a round that fails
loses none), and wired by the trainer (:mod:`minionsrl.loop.trainer`). The parts keep their own state (the
learner's weights, the sampler's carried episodes and a wave sent ahead, the scaler's history) and hand it to the
checkpoint; what the round itself carries from one round to the next is in the state, the totals billed among it
(the ledger only prices).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from minionsrl.config import TrainConfig
from minionsrl.cost import CostLedger, RoundBill, RoundTimes
from minionsrl.errors import Diverged
from minionsrl.forecast import function_stats
from minionsrl.function import fragment, wire
from minionsrl.learner import runtime
from minionsrl.learner.detectors import DetectorPlan
from minionsrl.learner.learners import Learned, Learner
from minionsrl.loop import checkpoint, stops
from minionsrl.loop.retry import OK, Attempt, Outcome, TooFewReplies, fault_counts
from minionsrl.loop.sampler import Evaluation, Publisher, Sampled, Sampler, invocation_seed
from minionsrl.loop.state import COSTS_KEPT, RETURNS_KEPT, RunState, kept
from minionsrl.scaling.base import Scaler
from minionsrl.stats import FUNCTION_COLUMNS, RoundStats


@dataclass(frozen=True)
class Parts:
    """What a round runs on, built once (:func:`minionsrl.build.make_trainer`)."""

    cfg: TrainConfig
    learner: Learner
    sampler: Sampler
    publisher: Publisher
    scaler: Scaler
    ledger: CostLedger


class Observer:
    """What a round tells the rest of the run, as it happens; each method does nothing unless overridden."""

    def scaler_changed(self, round_idx: int, n_actors: int, reason: str) -> None:
        """The scaler chose ``n_actors`` for round ``round_idx``, and said why."""

    def row(self, stats: RoundStats, outcomes: list[Outcome]) -> None:
        """A metrics row is complete (``outcomes``: its round's attempts; none for a row held for its evaluation,
        whose attempts went to :meth:`attempts` in their round)."""

    def attempts(self, round_idx: int, outcomes: list[Outcome]) -> None:
        """Attempts of round ``round_idx`` without a row: a round whose row waits for its evaluation, a round that
        failed (before its error ends the run), invocations abandoned at the end."""

    def best(self, policy: dict[str, Any]) -> None:
        """An evaluation beat every earlier one: the policy it evaluated (``checkpoint.policy_state``)."""

    def before_update(self) -> None:
        """The update is about to replace the learner's tensors."""


@dataclass(frozen=True)
class Played:
    """A round played: the run's state after it, its stats, the rows it completed (a held row comes a round later),
    and every attempt it made (training, evaluation, cancelled ones)."""

    state: RunState
    stats: RoundStats
    rows: tuple[RoundStats, ...]
    outcomes: tuple[Outcome, ...]


def play_round(s: RunState, parts: Parts, observe: Observer) -> Played:
    """Plan the round (its actor count, the fraction of the run left), collect its fragments (beside the previous
    round's evaluation), learn on them, and decide whether the run stops here and when the round's evaluation runs:
    now (the last round always) or beside the next round's functions (``--eval-overlap``, or a sampler whose
    functions sent ahead hold the backend). A sampler may send the next round's functions before this one learns."""
    cfg, learner, sampler, ledger = parts.cfg, parts.learner, parts.sampler, parts.ledger
    started, index, rows = time.perf_counter(), s.round + 1, []
    # plan: the count (the scaler's, or the one its functions were sent ahead with) and the fraction of the run left
    sent = sampler.sent_actors(index)
    n = sent if sent is not None else ask_scaler(parts, s, index, observe)
    assert s.remaining is not None  # set when the trainer starts
    s = replace(s, round=index, remaining=s.remaining.at(s.spent()))
    learner.set_remaining(s.remaining.fraction(cfg))
    beside = Evaluation(*s.pending_eval) if s.pending_eval else None  # of the policy this round samples with
    previous_s = s.last_round.projected_learner_s if s.last_round else 0.0
    # collect
    sampled = failing(cfg, observe, index, [], lambda: sampler.sample(index, n, beside))
    learning = runtime.mark()
    if beside is not None:  # the previous round's row is complete; its policy is still the learner's
        assert s.last_round is not None and sampled.eval_return is not None
        s = evaluated(replace(s, last_round=replace(s.last_round, eval_return_mean=sampled.eval_return),
                              pending_eval=None), parts, observe, s.last_round.round, sampled.eval_return)
        observe.row(s.last_round, [])
        rows.append(s.last_round)
    steps, now = sum(len(f.rewards) for f in sampled.fragments), s
    sampler.before_update(index, lambda: None if stops.last_by_count(cfg, now, steps)
                          else ask_scaler(parts, now, index + 1, observe))
    # learn: the batch, the detectors the scaler reads, the update
    observe.before_update()
    try:
        learned = learner.learn(sampled.fragments, np.random.default_rng([cfg.run.seed, index]),
                                detector_plan(parts, index, len(sampled.fragments)))
    except Diverged as exc:  # the round is what the user needs to find it in metrics.csv
        raise Diverged(f"round {index}: {exc}") from None
    parts.publisher.version = index  # the next publish carries this update
    returns = [x for f in sampled.fragments for x in f.episode_returns.tolist()]
    s = replace(s, env_steps=s.env_steps + len(learned.batch),
                recent_returns=kept(s.recent_returns, returns, RETURNS_KEPT),
                recent_rounds=kept(s.recent_rounds, [index] * len(returns), RETURNS_KEPT))
    learned_at = time.perf_counter()
    # decide, once, with what the round has cost so far (a later check could find the budget spent after the round
    # and skip the final evaluation it promised)
    outcomes = list(sampled.outcomes)
    so_far = sampled.times(time.perf_counter() - started, runtime.own_s(learning), previous_s)
    pending = stops.Spent(ledger.round_usd(so_far, records(outcomes)), ledger.projected_s(so_far))
    stopped_by = stops.stop_reason(cfg, s, pending)
    if stopped_by:  # abandon what is still in flight, a wave sent ahead too (billed for the time it ran)
        outcomes.append(sampler.finish())
    decided_at, learner_s = time.perf_counter(), runtime.own_s(learning)
    due = bool(cfg.eval.eval_every) and index % cfg.eval.eval_every == 0
    deferred = (due and not stopped_by and (cfg.eval.eval_overlap or sampler.defers_evaluation)
                and sampler.evaluates_beside)
    eval_return, after = None, []
    if (due and not deferred) or stopped_by:
        eval_return, evaluation = failing(cfg, observe, index, outcomes, lambda: sampler.evaluate(
            index, n, cfg.eval.eval_episodes))
        s = evaluated(s, parts, observe, index, eval_return)
        outcomes.append(evaluation)
        after.append(evaluation)
        stopped_by = stopped_by or stops.stop_reason(cfg, s, check_budget=False)
    ended = time.perf_counter()
    # the round's bill and row (held for its evaluation, when that runs beside the next round's functions)
    times = sampled.times(ended - started, learner_s, previous_s, after)
    bill = ledger.bill_round(times, records(outcomes), n, s.billed.actor_hosts)
    s = replace(s, billed=s.billed.billed(bill))
    clocks = {"round_s": ended - started, "sample_s": learning.wall - started,
              "learn_s": learned_at - learning.wall - learned.detector_s, "eval_s": ended - decided_at}
    stats = round_stats(parts, s, index, n, sampled, learned, bill, times, outcomes, eval_return, clocks)
    s = replace(s, last_round=stats, recent_costs=kept(s.recent_costs, [bill.cost_serverless_usd], COSTS_KEPT),
                recent_projected=kept(s.recent_projected, [bill.projected_round_s], COSTS_KEPT),
                stopped_by=stopped_by, stop_budget=stops.budgets(cfg).get(stopped_by or ""),
                pending_eval=(index, n, cfg.eval.eval_episodes) if deferred else None)
    if deferred:
        observe.attempts(index, outcomes)
    else:
        observe.row(stats, outcomes)
        rows.append(stats)
    return Played(s, stats, tuple(rows), tuple(outcomes))


# -- pieces of a round -----------------------------------------------------------------------------
def ask_scaler(parts: Parts, s: RunState, round_idx: int, observe: Observer) -> int:
    """The scaler's actor count for round ``round_idx``, from the last row (and why it changed it, if it says)."""
    n = parts.scaler.next_actors(s.last_round)
    if parts.scaler.reason is not None:
        observe.scaler_changed(round_idx, n, parts.scaler.reason)
    return n


def failing(cfg: TrainConfig, observe: Observer, round_idx: int, earlier: list[Outcome], step: Callable[[], Any]
            ) -> Any:
    """Run a sampling step; a round that fails still tells its attempts (and ``earlier`` ones of the same round)
    before the error ends the run, and a reply whose env broke its contract names the env."""
    try:
        return step()
    except TooFewReplies as exc:
        observe.attempts(round_idx, [*earlier, exc.outcome])
        if fragment.ENV_FAULT in str(exc):
            named = str(exc).replace(fragment.ENV_FAULT, f"the env {cfg.env.env_id!r} returned", 1)
            raise TooFewReplies(named, exc.outcome) from None
        raise


def evaluated(s: RunState, parts: Parts, observe: Observer, round_idx: int, eval_return: float) -> RunState:
    """``s`` after an evaluation of round ``round_idx``'s policy, the learner's current one (kept as the best
    policy when it evaluates better than every earlier one)."""
    s = replace(s, last_eval=eval_return)
    if not eval_return > s.best_eval:  # a NaN never is
        return s
    observe.best(checkpoint.policy_state(parts.learner.state_dict(), round_idx, eval_return))
    return replace(s, best_eval=eval_return, best_round=round_idx)


def detector_plan(parts: Parts, round_idx: int, fragments: int) -> DetectorPlan | None:
    """What the learner's detectors compute this round: what the scaler reads (``detectors=auto``), everything
    (``on``) or nothing (``off``); the noise scale from one slice per fragment."""
    cfg = parts.cfg
    mode = cfg.scaling.detectors
    wanted = {"curvature", "gns"} if mode == "on" else set() if mode == "off" else set(parts.scaler.needs)
    if not wanted:
        return None
    return DetectorPlan(frozenset(wanted), cfg.scaling.detector_placement, fragments,
                        invocation_seed(cfg.run.seed, round_idx, 0, wire.SEED_STREAMS["detect"]),
                        cfg.scaling.detector_samples, cfg.scaling.lanczos_iterations, cfg.scaling.lanczos_tol)


def round_stats(parts: Parts, s: RunState, index: int, n: int, sampled: Sampled, learned: Learned, bill: RoundBill,
                times: RoundTimes, outcomes: list[Outcome], eval_return: float | None,
                clocks: dict[str, float]) -> RoundStats:
    """The round's row: what it sampled, learned, measured, cost and detected."""
    attempts = [a for g in outcomes for a in g.attempts]
    lost = sum(len(g.lost) for g in outcomes)
    episodes = [x for f in sampled.fragments for x in f.episode_returns.tolist()]
    update, detected = learned.stats, learned.detected
    return RoundStats(
        round=index, env_steps=s.env_steps, n_actors=n, wall_s=s.wall(), **clocks, eval_return_mean=eval_return,
        train_return_mean=float(np.mean(episodes)) if episodes else None, episodes=len(episodes),
        policy_loss=update.policy_loss, value_loss=update.value_loss, entropy=update.entropy,
        approx_kl=update.approx_kl, clipfrac=update.clipfrac, explained_variance=update.explained_variance,
        learning_rate=update.learning_rate, sps=len(learned.batch) / clocks["round_s"],
        cost_serverless_usd=bill.cost_serverless_usd, cost_server_usd=bill.cost_server_usd,
        cum_cost_serverless_usd=s.billed.serverless_usd, cum_cost_server_usd=s.billed.server_usd,
        projected_round_s=bill.projected_round_s, projected_learner_s=times.learner_s,
        cost_storage_usd=bill.storage_usd, cold_starts=sum(a.reply.record.cold for a in attempts),
        **function_columns(parts.cfg, attempts),
        cost_serverless_wall_usd=bill.cost_serverless_wall_usd, cost_server_wall_usd=bill.cost_server_wall_usd,
        scaler_score=parts.scaler.score, convexity_ratio=detected.convexity_ratio,
        lambda_min=detected.lambda_min, lambda_max=detected.lambda_max, gns=detected.gns,
        detector_s=learned.detector_s, **fault_counts(attempts, lost),
        fragments=sampled.used, policy_lag_mean=sampled.policy_lag_mean, policy_lag_max=sampled.policy_lag_max,
        stale_retries=sampled.stale_retries,
    )


def function_columns(cfg: TrainConfig, attempts: list[Attempt]) -> dict[str, float | None]:
    """What the round's warm training functions did, per sample (empty cells when none ran warm)."""
    envs = cfg.env.envs_per_function
    stats = function_stats([(a.reply.record, a.request.steps * envs) for a in attempts
                            if a.status == OK and a.request is not None])  # not a duplicate delivery's copy
    return stats.columns() if stats else dict.fromkeys(FUNCTION_COLUMNS.values())


def records(outcomes: list[Outcome]) -> list[Any]:
    """The invocation records of every attempt in ``outcomes``, for the ledger."""
    return [a.reply.record for g in outcomes for a in g.attempts]
