"""Asynchronous rounds for APPO and IMPALA (SPEC §1, last paragraph; Espeholt et al. 2018).

The learner keeps ``n`` rollout functions in flight (``n`` from the scaler) and updates once ``k``
fragments have arrived instead of waiting for all of them. Every function that returns is
resubmitted at once with the newest published policy, so invocations never wait for the learner;
fragments therefore lag: each carries the policy version and the behaviour log-probabilities it was
sampled with, and V-trace (:mod:`minionsrl.learner.impala`) corrects for the lag. A "round" here is one
update: the metrics row, the scaler, evaluation and checkpoints work per update, and the row records
the policy lag (versions between a fragment's policy and the learner's) of the fragments it used.

Seeds stay a function of the run: actor ``slot``'s ``j``-th invocation gets
``invocation_seed(seed, j, slot, train)``, and its retries after a failure keep that seed; which
fragments make up an update depends on arrival order, so asynchronous runs are not bit-reproducible,
unlike synchronous ones.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np

from minionsrl.backends.base import Backend, Reply
from minionsrl.config import TrainConfig
from minionsrl.errors import InvocationError
from minionsrl.function.fragment import Fragment
from minionsrl.learner.impala import learner_loss, vtrace_batch
from minionsrl.learner.ppo import Batch
from minionsrl.loop import gather
from minionsrl.loop.trainer import Trainer, _eval_returns
from minionsrl.scaling.rules import Scaler


class AsyncTrainer(Trainer):
    """APPO / IMPALA learner over invocations kept in flight with ``submit``/``collect``."""

    def __init__(self, cfg: TrainConfig, resume: bool = False, backend: Backend | None = None,
                 scaler: Scaler | None = None) -> None:
        self.slot_calls: dict[int, int] = {}  # slot -> invocations started so far (seeds and ids)
        super().__init__(cfg, resume=resume, backend=backend, scaler=scaler)
        self.ppo.loss = learner_loss(self.cfg.algo)
        self.flying: dict[str, tuple[int, int, dict[str, Any]]] = {}  # id -> (slot, attempt, request) in flight
        self.seen: set[str] = set()  # ids already answered (a second delivery is a duplicate)
        self.retry_next: dict[int, int] = {}  # slot -> attempt number its failed invocation is retried with
        self.failures: dict[int, int] = {}  # slot -> failures in a row (stale-policy ones not counted)
        self.arrived: list[tuple[Fragment, gather.Gathered]] = []  # fragments not yet used by an update
        self.unlogged: list[gather.Gathered] = []  # failed and duplicate deliveries not yet logged and billed
        self.n_target = 0  # invocations to keep in flight (the scaler's n of the current update)
        self.stale_retries = 0  # failed invocations that held an outdated policy reference, resubmitted
        self.updated = False  # whether this round's update has been applied (the policy version is round)

    def run_round(self) -> dict[str, Any]:
        """One update: top up to n in flight, wait for k fragments, V-trace, learn, evaluate, log."""
        cfg, t_round = self.cfg, time.perf_counter()
        self.round += 1
        n = self.scaler.next_actors(self.last_row)
        k = min(cfg.async_fragments or max(1, n // 2), n)
        self.n_target, self.stale_retries, self.updated = n, 0, False
        lr = self._learning_rate()
        self.ppo.set_learning_rate(lr)

        self._top_up()  # with the policy after the previous update
        while len(self.arrived) < k:
            self._route(self._collect())
        arrived, self.arrived = self.arrived, []
        fragments = [f for f, _ in arrived]
        lags = [self.round - 1 - f.policy_version for f in fragments]  # updates applied since each was sampled
        t_sampled = time.perf_counter()

        self._absorb(fragments)
        rng = np.random.default_rng([cfg.seed, self.round])
        if cfg.algo == "impala":
            stats = self._impala_steps(fragments, rng)
        batch = self._vtrace(fragments)  # APPO learns on it; for IMPALA the detectors read it
        if cfg.algo != "impala":
            stats = self.ppo.update(batch, rng)
        self.updated = True
        self.env_steps += len(batch)
        t_learned = time.perf_counter()

        gathered, self.unlogged = [g for _, g in arrived] + self.unlogged, []
        if self._done():  # the last update: abandon what is still in flight (billed for the time it ran)
            self.n_target = 0  # and submit nothing more, not even while the final evaluation runs
            gathered.append(self._cancel_in_flight())
        extra = {"fragments": len(fragments), "policy_lag_mean": float(np.mean(lags)),
                 "policy_lag_max": int(max(lags)), "stale_retries": self.stale_retries}
        return self._finish_round(n, lr, fragments, batch, stats, gathered, t_round, t_sampled, t_learned, extra)

    # -- the learner -----------------------------------------------------------------------------
    def _vtrace(self, fragments: list[Fragment]) -> Batch:
        cfg = self.cfg
        return vtrace_batch(fragments, self.policy, self.ppo.params, self.ret_rms, cfg.clip_reward,
                            cfg.vtrace_rho_bar, cfg.vtrace_c_bar)

    def _impala_steps(self, fragments: list[Fragment], rng: np.random.Generator) -> dict[str, float]:
        """IMPALA's learner: one SGD step per learner batch of whole fragments (``minibatch_size // T`` of
        them, at least one), each scored with V-trace under the policy as it is at that step — its loss has
        no trust region, so a correction computed before earlier steps would be stale (Espeholt et al. 2018)."""
        group = max(1, self.ppo.params.minibatch_size // self.cfg.fragment_length)
        stats: dict[str, float] = {}
        for _ in range(self.ppo.params.update_epochs):
            order = rng.permutation(len(fragments))
            for start in range(0, len(fragments), group):
                chunk = [fragments[i] for i in order[start : start + group]]
                stats = self.ppo.update(self._vtrace(chunk), rng, whole_batch=True)
        return stats

    # -- keeping invocations in flight -----------------------------------------------------------
    def _top_up(self) -> None:
        """Submit an invocation, with the newest policy, for every slot below ``n_target`` that has none in
        flight: the slot's next one, or a retry (same seed, next attempt) of the one that failed."""
        busy = {slot for slot, _, _ in self.flying.values()}
        free = [slot for slot in range(self.n_target) if slot not in busy]
        if not free:
            return
        ref = self._publish(version=self.round if self.updated else self.round - 1)  # the newest weights
        requests = []
        for slot in free:
            attempt = self.retry_next.pop(slot, 0)
            if attempt == 0:
                self.slot_calls[slot] = self.slot_calls.get(slot, 0) + 1
            req = self._request("train", ref, slot, attempt, index=self.slot_calls[slot],
                                steps=self.cfg.fragment_length, carry=self.carries.get(slot))
            self.flying[req["id"]] = (slot, attempt, req)
            requests.append(req)
        self.backend.submit(requests)

    def _route(self, replies: list[Reply]) -> list[Reply]:
        """Take in collected replies: fragments of training invocations are kept for the next update and
        their slots resubmitted at once; other replies (evaluation) are returned to the caller.

        A failed invocation is retried (same seed) with the newest policy, up to ``max_retries`` times in a
        row; one that held a policy reference replaced since is retried without counting (our backends keep a
        policy while invocations use it, but a third-party backend may drop it once a newer one is published)."""
        others = []
        for reply in replies:
            rid = reply.record.invocation_id
            if rid in self.seen:  # a second delivery: billed, never learned from
                request = {"id": rid, "kind": reply.record.kind, "seed": ""}
                self.unlogged.append(gather.Gathered({}, [gather.Attempt(-1, -1, request, reply, gather.DUPLICATE)]))
                continue
            if rid not in self.flying:
                others.append(reply)
                continue
            self.seen.add(rid)
            slot, attempt, request = self.flying.pop(rid)
            frag, status = gather.accept(reply, lambda r: Fragment.from_wire(
                r.arrays, r.meta, self.cfg.fragment_length, self.arch))  # any policy version: lag is expected
            record = gather.Gathered({slot: frag} if frag is not None else {},
                                     [gather.Attempt(slot, attempt, request, reply, status)])
            if frag is None:
                self.unlogged.append(record)
                stale = self._published is not None and request["policy"] != self._published[1]
                self.stale_retries += stale
                if not stale:
                    self.failures[slot] = self.failures.get(slot, 0) + 1
                    if self.failures[slot] > self.retry.max_retries:
                        raise InvocationError(f"actor slot {slot} failed {self.failures[slot]} times in a row "
                                              f"({rid}: {reply.record.error})")
                self.retry_next[slot] = attempt + 1  # a new id, the same seed
                continue
            self.failures.pop(slot, None)
            if self.cfg.carry_episodes:
                self.carries[slot] = frag.meta.get("carry")
                if self.carries[slot] is None:
                    del self.carries[slot]
            self.arrived.append((frag, record))
        self._top_up()
        return others

    def _collect(self) -> list[Reply]:
        """The next replies; a backend with nothing in flight cannot deliver what the learner waits for."""
        if not self.backend.in_flight:
            raise InvocationError("the backend has no invocation in flight but the learner is waiting for replies")
        return self.backend.collect(timeout=None)

    def _cancel_in_flight(self) -> gather.Gathered:
        cancelled = gather.Gathered({}, gather.cancelled(self.backend, self.flying) if self.flying else [])
        self.flying.clear()
        return cancelled

    def _evaluate(self, n_actors: int, train: gather.Gathered) -> tuple[float, gather.Gathered]:
        """Evaluation while training invocations stay in flight: submit, and route every reply that arrives
        meanwhile, until each evaluation slot has a result (a failed slot is retried up to ``max_retries``)."""
        per_slot = self._eval_split(n_actors)
        ref = self._publish(version=self.round)
        waiting: dict[str, tuple[int, int, dict[str, Any]]] = {}  # id -> (slot, attempt, request)

        def submit(slot: int, attempt: int) -> None:
            req = self._request("eval", ref, slot, attempt, episodes=per_slot[slot])
            waiting[str(req["id"])] = (slot, attempt, req)
            self.backend.submit([req])

        for slot in range(len(per_slot)):
            submit(slot, 0)
        got = gather.Gathered({})
        while len(got.results) < len(per_slot):
            for reply in self._route(self._collect()):
                if reply.record.invocation_id not in waiting:
                    continue  # a late or repeated delivery of an earlier evaluation: nothing to learn from it
                slot, attempt, req = waiting.pop(reply.record.invocation_id)
                returns, status = gather.accept(reply, lambda r, s=slot: _eval_returns(r, per_slot[s]))
                if status == gather.OK:
                    got.results[slot] = returns
                got.attempts.append(gather.Attempt(slot, attempt, req, reply, status))
                if status == gather.OK:
                    continue
                if attempt >= self.retry.max_retries:
                    raise InvocationError(f"evaluation slot {slot} failed {attempt + 1} times "
                                          f"({reply.record.invocation_id}: {reply.record.error})")
                submit(slot, attempt + 1)
        returns = np.concatenate([got.results[slot] for slot in sorted(got.results)])
        return float(returns.mean()), got

    # -- checkpoint ------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {**super()._state(), "slot_calls": json.dumps({str(k): v for k, v in self.slot_calls.items()})}

    def _restore(self, state: dict[str, Any]) -> None:
        super()._restore(state)
        self.slot_calls = {int(k): int(v) for k, v in json.loads(state.get("slot_calls", "{}")).items()}

    def _write_summary(self) -> dict[str, Any]:
        if self.flying:  # stopped without a last update (e.g. by the budget): nothing may outlive the run
            self._cancel_in_flight()
        return super()._write_summary()
