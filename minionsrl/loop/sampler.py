"""Samplers turn "n actors this round" into fragments: the collect phase of a round, from the policy published and the
requests sent to the fragments checked and in slot order, through faults.

What is sent: the policy, published once per version (:class:`Publisher`), and the requests that refer to it
(:class:`Requests`). A request is a :class:`~minionsrl.function.request.Request`: its id, kind (``train`` or
``eval``), attempt, policy reference, env spec and seed, plus what its kind needs (steps and carried episodes, or
episodes). The seed of an invocation is a function of (run seed, index, slot, seed stream) only, so a fragment
never depends on which instance or backend ran it, nor on arrival order; every attempt of a slot has the slot's
seed (a retry samples what the first attempt would have) and its own id. A function of E environments is E actors:
slot ``s``'s environment ``e`` has the seed of actor ``s·E + e``, as a one-environment function in that slot would,
so a run samples the same whatever E.

How it comes back: :class:`SyncSampler` (PPO) invokes ``n`` functions and waits for them at a barrier with a
deadline (:func:`~minionsrl.loop.retry.run_group`); :class:`PipelinedSampler` (``--pipeline``) is that barrier with the
next round's functions sent while the learner updates. :class:`AsyncSampler` (APPO, IMPALA; DESIGN §1, last
paragraph) keeps ``n`` invocations in flight and returns once ``k`` fragments have arrived; every function that
returns is resubmitted with the newest published policy as soon as its reply is taken in (one that returns during
an update waits for the update to end: replies are taken in on the learner's thread), and fragments lag (each
carries the policy version it was sampled with). Both classify replies with one
:class:`~minionsrl.loop.retry.Tracker`, retry a failed slot with its seed (one retry engine,
:class:`~minionsrl.loop.retry.Retries`, counts failures and refusals and times back-offs), and keep every attempt
for the ledger and ``invocations.csv``.
"""

from __future__ import annotations

import json
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from minionsrl.backends.base import Backend, Reply
from minionsrl.config import StepPlan
from minionsrl.cost import RoundTimes
from minionsrl.errors import ConfigError, EvaluationCut, InvocationError
from minionsrl.function import wire
from minionsrl.function.envs import EnvSpec
from minionsrl.function.faults import FaultPlan
from minionsrl.function.fragment import Fragment, PolicySnapshot, checked_episodes
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.request import EVAL_MAX_STEPS, Carry, Request
from minionsrl.loop import checkpoint
from minionsrl.loop.retry import (
    DUPLICATE,
    GIVE_UP,
    OK,
    STRAY,
    THROTTLED,
    Attempt,
    Group,
    InFlightGroup,
    Outcome,
    Retries,
    RetryPolicy,
    Tracker,
    run_groups,
    slot_chains,
)


def invocation_seed(run_seed: int, index: int, slot: int, stream: int) -> int:
    """Seed of one invocation (or of the detectors): a function of its arguments only.
    ``stream`` is :data:`~minionsrl.function.wire.SEED_STREAMS` of the kind."""
    return int(np.random.SeedSequence([run_seed, index, slot, stream]).generate_state(1)[0])


REPLY_HEADROOM = 2  # the cap is this many times what the arrays of a full reply hold ...
REPLY_FIXED_BYTES = 1 << 20  # ... plus this, for the header, the metadata and an error's text
FRAGMENT_EXTRA_BYTES = 64 << 10  # ... plus, per fragment, this and 32 bytes per observation number (its carried
# episode travels as JSON in the metadata: the observation as numbers, an ALE state in base64)


def reply_cap(arch: PolicyArch, kind: str, steps: int = 0, envs: int = 1, episodes: int = 0) -> int:
    """The most bytes a reply to this request may have: what its arrays hold at most (steps × row size per
    fragment, for training; two numbers per episode, for evaluation) times :data:`REPLY_HEADROOM`, plus room for
    the header and metadata. A reply over it is refused before it is decoded (a failed attempt, retried)."""
    if kind != "train":
        return REPLY_FIXED_BYTES + REPLY_HEADROOM * 16 * max(episodes, 0)
    obs_numbers = int(np.prod(arch.step_obs_shape))
    obs_bytes = obs_numbers * (1 if arch.image else 4)
    # per fragment: last_obs, last_value, moments (2 × 8 per obs number, and 4 counts), its carried episode
    fixed = obs_bytes + 4 + 16 * obs_numbers + 64 + FRAGMENT_EXTRA_BYTES + 32 * obs_numbers
    return REPLY_FIXED_BYTES + REPLY_HEADROOM * max(envs, 1) * (max(steps, 0) * row_bytes(arch) + fixed)


def row_bytes(arch: PolicyArch) -> int:
    """The most bytes one step adds to a training reply: its observation, action, log-prob, value, reward and
    truncation value (4 × 4), its two end flags and an episode's statistics (16)."""
    obs_bytes = int(np.prod(arch.step_obs_shape)) * (1 if arch.image else 4)
    return obs_bytes + (8 if arch.discrete else 4 * arch.action_dim) + 16 + 2 + 16


class Requests:
    """Builds the requests of one run; an injected fault, if one is drawn, travels with its attempt."""

    def __init__(self, spec: EnvSpec, seed: int, gamma: float, faults: FaultPlan,
                 arch: PolicyArch | None = None, eval_max_steps: int = EVAL_MAX_STEPS) -> None:
        self.env, self.seed, self.gamma, self.faults = spec, seed, gamma, faults
        self.arch = arch  # with it, each request says how large its reply may be (``max_reply_bytes``)
        self.eval_max_steps = eval_max_steps  # an evaluation episode is cut after this many steps

    def make(self, kind: str, ref: str, index: int, slot: int, attempt: int, steps: int = 0,
             carries: tuple[Carry | None, ...] = (None,), episodes: int = 0) -> Request:
        """Attempt ``attempt`` of ``slot``; ``index`` is the round (synchronous learners) or the slot's
        invocation count (asynchronous ones)."""
        envs = len(carries)
        cap = None if self.arch is None else reply_cap(self.arch, kind, steps, envs, episodes)
        seeds = [invocation_seed(self.seed, index, slot * envs + e, wire.SEED_STREAMS[kind]) for e in range(envs)]
        return Request(id=f"r{index}-{kind}-{slot}" + (f"-a{attempt}" if attempt else ""), kind=kind, policy=ref,
                       env=self.env, seed=seeds[0], env_seeds=tuple(seeds) if envs > 1 else (),
                       gamma=self.gamma, attempt=attempt, steps=steps, carries=carries, episodes=episodes,
                       max_steps=self.eval_max_steps, max_reply_bytes=cap,
                       fault=self.faults.draw(index, slot, attempt, kind))


class Publisher:
    """Publishes the policy once per version (updates applied), lazily: whoever needs a reference first
    publishes it, and evaluation and the next round share it."""

    def __init__(self, backend: Backend, key: bytes, snapshot: Callable[[int], PolicySnapshot]) -> None:
        self.backend, self.key, self.snapshot = backend, key, snapshot
        self.version = 0  # updates applied to the learner's policy
        self._published: tuple[int, str] | None = None  # (version, reference) of the current version
        self.last: PolicySnapshot | None = None  # the last policy published
        self._newest: str | None = None  # its reference

    def ref(self) -> str:
        """The reference of the current version, published now if it was not yet."""
        if self._published is None or self._published[0] != self.version:
            self._published = (self.version, self.publish(self.snapshot(self.version)))
        return self._published[1]

    def publish(self, policy: PolicySnapshot) -> str:
        """Publish ``policy`` (the current version's, or an older one a resumed run sends again); its reference."""
        self.last, self._newest = policy, self.backend.publish(policy.encode(self.key))
        return self._newest

    @property
    def newest(self) -> str | None:
        """The last reference published, if any."""
        return self._newest


EVAL_ARRAYS = frozenset({"episode_returns", "episode_lengths"})


def eval_returns(request: Request, reply: Reply) -> np.ndarray:
    """The episode returns of an evaluation reply, checked against its request: exactly its two arrays, one
    finite float64 return and one positive int64 length per episode asked for; anything else is a WireError."""
    episodes = request.episodes
    if reply.meta.get("type") != "eval":
        raise wire.WireError(f"evaluation reply is of type {reply.meta.get('type')!r}, not 'eval'")
    stray = sorted(set(reply.arrays) - EVAL_ARRAYS)
    if stray:
        raise wire.WireError(f"evaluation reply holds unexpected arrays {stray[:3]}")
    returns, lengths = checked_episodes(reply.arrays, "evaluation reply", episodes)
    if (lengths >= request.max_steps).any():  # the rollout function cut them: an env without a time limit
        warnings.warn(EvaluationCut(f"evaluation episodes ran to eval_max_steps ({request.max_steps:,} steps) and "
                                    "were cut there: their returns, and eval_return_mean, are of the steps played; "
                                    "raise --eval-max-steps to play them out"), stacklevel=2)
    return returns


class Evaluation(NamedTuple):
    """An evaluation of round ``round``'s policy: ``episodes`` deterministic episodes over up to ``actors``
    functions (its seeds follow from these three, wherever it runs)."""

    round: int
    actors: int
    episodes: int


@dataclass
class Sampled:
    """A round's fragments (in slot order, or arrival order when asynchronous), every attempt it waited for
    (training, and an evaluation run beside it), that evaluation's mean return, and the sampler's own columns:
    the fragments' policy lag in updates (pipelined and asynchronous rounds), and for asynchronous ones the
    fragments used and the stale-policy retries. ``sent_ahead``: its training functions were sent before the
    round began, beside the previous update (pipelined)."""

    fragments: list[Fragment]
    outcomes: list[Outcome]
    eval_return: float | None = None
    policy_lag_mean: float | None = None
    policy_lag_max: int | None = None
    used: int | None = None
    stale_retries: int | None = None
    sent_ahead: bool = False

    def times(self, wall_s: float, learner_s: float, previous_learner_s: float,
              evaluated_after: list[Outcome] | None = None) -> RoundTimes:
        """The round's times for the ledger. Functions sent ahead ran beside the previous update: its own seconds
        (``previous_learner_s``) are their head start, and they are billed apart from an evaluation sent beside
        them at the round's start (that one had no head start)."""
        head_start_s = previous_learner_s if self.sent_ahead else 0.0
        after = slot_chains(evaluated_after or [])
        if not head_start_s:
            return RoundTimes(wall_s, learner_s, slot_chains(self.outcomes), after)
        return RoundTimes(wall_s, learner_s, slot_chains(self.outcomes[:1]), after, head_start_s,
                          slot_chains(self.outcomes[1:]))


class Sampler(ABC):
    """Runs the round's rollout functions on a backend; knows nothing of the learner's algorithm."""

    evaluates_beside = False  # whether :meth:`sample` can run an evaluation beside the round's functions
    # whether a due evaluation always waits to run beside the next round's functions (they hold the backend)
    defers_evaluation = False

    def __init__(self, backend: Backend, requests: Requests, publisher: Publisher, arch: PolicyArch,
                 plan: StepPlan, carry_episodes: bool, retry: RetryPolicy) -> None:
        self.backend, self.requests, self.publisher, self.arch = backend, requests, publisher, arch
        self.plan, self.carry_episodes, self.retry = plan, carry_episodes, retry
        self.envs = plan.envs
        # actor (slot · envs + env) -> its episode in progress, sent with the slot's next request
        self.carries: dict[int, Carry] = {}

    @abstractmethod
    def sample(self, round_idx: int, n: int, evaluation: Evaluation | None = None) -> Sampled:
        """The fragments of round ``round_idx`` from ``n`` actors, with the published policy; with
        ``evaluation`` (samplers that :attr:`evaluates_beside`), that evaluation of the same policy too."""

    @abstractmethod
    def evaluate(self, round_idx: int, n_actors: int, episodes: int) -> tuple[float, Outcome]:
        """Mean return of ``episodes`` deterministic episodes of the published policy, run as up to
        ``n_actors`` rollout functions (the mean is over the episodes of the slots that came back)."""

    def finish(self) -> Outcome:
        """Stop: cancel whatever is still in flight (billed for the time it ran)."""
        return Outcome({})

    def sent_actors(self, round_idx: int) -> int | None:
        """The actor count of round ``round_idx``'s functions if they were sent already, ahead of it."""
        return None

    def before_update(self, round_idx: int, next_actors: Callable[[], int | None]) -> None:  # noqa: B027 - optional
        """Round ``round_idx``'s fragments are in and its update is about to start. A sampler that keeps functions
        running while the learner works sends the next round's now: ``next_actors()`` of them (asked only then;
        None when the round is the last by a count known already)."""

    def state_dict(self) -> dict[str, Any]:
        return {"carries": json.dumps({str(k): v for k, v in self.carries.items()})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.carries = {int(k): v for k, v in json.loads(state["carries"]).items()}

    def _train_request(self, ref: str, index: int, slot: int, attempt: int, n: int) -> Request:
        """A training request of ``slot`` in a round of ``n`` functions (its steps from the plan); each of its
        environments carries its episode in progress (a carried episode goes on whatever the steps)."""
        carries = tuple(self.carries.get(slot * self.envs + e) for e in range(self.envs))
        return self.requests.make("train", ref, index, slot, attempt, steps=self.plan.slot_steps(slot, n),
                                  carries=carries)

    def _resume_paused(self, n: int) -> None:
        """Hand the episodes in progress of actors outside a round of ``n`` functions (paused: ``n`` shrank) to the
        round's actors that have none, lowest first, before they would start new ones; the rest stay paused, for a
        later round's free actor. So a smaller ``n`` loses no episode and no return (``train_return`` would be
        biased low: long episodes are the likeliest to be in progress). A carry is a whole episode state, not tied
        to the actor that left it: continued by another, the episode is the same. Nothing moves while ``n``
        does not shrink below the actors that carry episodes."""
        actors = n * self.envs
        paused = sorted(a for a in self.carries if a >= actors)
        free = [a for a in range(actors) if a not in self.carries]
        for src, dst in zip(paused, free, strict=False):
            self.carries[dst] = self.carries.pop(src)

    def _fragments(self, request: Request, reply: Reply, version: int | None = None) -> list[Fragment]:
        """The reply's fragments, checked against the steps its request asked for."""
        return Fragment.many_from_wire(reply.arrays, reply.meta, request.steps, self.arch, self.envs,
                                       version)

    def _keep_carries(self, slot: int, fragments: list[Fragment]) -> None:
        """Remember the episodes a slot's fragments left in progress (a finished one is forgotten)."""
        for e, frag in enumerate(fragments):
            actor, carry = slot * self.envs + e, frag.meta.get("carry")
            if carry is None:
                self.carries.pop(actor, None)
            else:
                self.carries[actor] = carry

    def _eval_split(self, episodes: int, n_actors: int) -> list[int]:
        """Evaluation episodes per function: ``episodes`` spread over up to one function per actor (``n_actors``
        functions' environments), so the split, and with it the episodes' seeds, does not depend on how the actors
        are grouped into functions."""
        slots = min(episodes, n_actors * self.envs)
        return [episodes // slots + (1 if i < episodes % slots else 0) for i in range(slots)]

    @staticmethod
    def _mean_return(got: Outcome) -> float:
        return float(np.concatenate([got.results[slot] for slot in sorted(got.results)]).mean())  # slot order


@dataclass
class SentRound:
    """A round's training invocations, sent: ``actors`` of them, sampling with policy ``version`` (``ref``)."""

    round: int
    actors: int
    version: int
    ref: str
    in_flight: InFlightGroup
    policy: PolicySnapshot | None  # what ``ref`` holds, kept while the wave runs ahead (for the checkpoint)


class SyncSampler(Sampler):
    """A barrier per round: ``n`` invocations, retried and de-duplicated, cut at the round deadline. The
    previous round's evaluation can run beside them: the policy it evaluates is the one they sample with."""

    evaluates_beside = True

    def sample(self, round_idx: int, n: int, evaluation: Evaluation | None = None) -> Sampled:
        return self._await_round(self._send(round_idx, n), evaluation)

    def _send(self, round_idx: int, n: int) -> SentRound:
        """Round ``round_idx``'s ``n`` training functions, sent now with the published policy."""
        return self._wave(round_idx, n, self.publisher.ref(), self.publisher.version)

    def _wave(self, round_idx: int, n: int, ref: str, version: int, policy: PolicySnapshot | None = None
              ) -> SentRound:
        """Send ``n`` training functions of round ``round_idx`` sampling with policy ``version`` (``ref``)."""
        if self.carry_episodes:  # before the requests are made (idempotent: a resumed wave's carries are handed)
            self._resume_paused(n)
        training = Group(n, lambda slot, attempt: self._train_request(ref, round_idx, slot, attempt, n),
                         lambda req, r: self._fragments(req, r, version), self.retry, f"round {round_idx} training")
        return SentRound(round_idx, n, version, ref, InFlightGroup(self.backend, training), policy)

    def _await_round(self, wave: SentRound, evaluation: Evaluation | None, sent_ahead: bool = False) -> Sampled:
        """Wait for ``wave`` (and ``evaluation``, sent now beside it); its fragments in slot order."""
        beside = [self._evaluation(evaluation, self.publisher.ref())] if evaluation else []
        got, *evaluated = run_groups(self.backend, beside, wave.in_flight)
        if self.carry_episodes:  # a lost slot's episodes are lost with it: the slot starts new ones
            actors = wave.actors * self.envs  # the paused episodes of actors outside the round wait (_resume_paused)
            self.carries = {a: carry for a, carry in self.carries.items() if a >= actors}
            for slot, fragments in got.results.items():
                self._keep_carries(slot, fragments)
        lag = self.publisher.version - wave.version  # updates since the wave's policy: 1 when sent ahead
        lagged = sent_ahead or bool(lag)
        return Sampled([f for slot in sorted(got.results) for f in got.results[slot]], [got, *evaluated],
                       eval_return=self._mean_return(evaluated[0]) if evaluated else None,
                       policy_lag_mean=float(lag) if lagged else None, policy_lag_max=lag if lagged else None,
                       sent_ahead=sent_ahead)

    def evaluate(self, round_idx: int, n_actors: int, episodes: int) -> tuple[float, Outcome]:
        got = run_groups(self.backend, [self._evaluation(Evaluation(round_idx, n_actors, episodes),
                                                         self.publisher.ref())])[0]
        return self._mean_return(got), got

    def _evaluation(self, e: Evaluation, ref: str) -> Group:
        per_slot = self._eval_split(e.episodes, e.actors)
        return Group(len(per_slot), lambda slot, attempt: self.requests.make(
            "eval", ref, e.round, slot, attempt, episodes=per_slot[slot]), eval_returns, self.retry,
            f"round {e.round} evaluation")


class PipelinedSampler(SyncSampler):
    """The barrier of :class:`SyncSampler`, with the learner off the critical path (``--pipeline``): once a
    round's fragments are in, the next round's functions are sent before its update (:meth:`before_update`), so
    they sample with the policy one update older (a policy lag of one, logged as APPO's is) while the learner
    works. They hold the backend, so a due evaluation runs beside them. The checkpoint keeps that wave (its round,
    actors and policy), so a resumed run sends the same invocations again."""

    defers_evaluation = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ahead: SentRound | None = None  # sent ahead of its round, not yet awaited
        self.resumed_ahead: tuple[int, int, PolicySnapshot] | None = None  # (round, actors, policy) to send again

    def sent_actors(self, round_idx: int) -> int | None:
        if self.ahead is not None and self.ahead.round == round_idx:
            return self.ahead.actors
        if self.resumed_ahead is not None and self.resumed_ahead[0] == round_idx:
            return self.resumed_ahead[1]
        return None

    def before_update(self, round_idx: int, next_actors: Callable[[], int | None]) -> None:
        n = next_actors()
        if n is not None:  # they run while the learner updates
            self.ahead = self._send(round_idx + 1, n, keep_policy=True)

    def sample(self, round_idx: int, n: int, evaluation: Evaluation | None = None) -> Sampled:
        sent_ahead = self.sent_actors(round_idx) is not None  # a resumed wave was sent ahead by the checkpointed run
        wave = self.ahead if self.ahead is not None and self.ahead.round == round_idx else self._send(round_idx, n)
        self.ahead = None
        return self._await_round(wave, evaluation, sent_ahead)

    def _send(self, round_idx: int, n: int, keep_policy: bool = False) -> SentRound:
        """As :meth:`SyncSampler._send`, keeping the policy for the checkpoint (``keep_policy``); a wave the
        checkpointed run had sent ahead is sent again as it was, with its actors and its policy."""
        if self.resumed_ahead is not None and self.resumed_ahead[0] == round_idx:
            _, n, policy = self.resumed_ahead
            ref, version = self.publisher.publish(policy), policy.version
        else:
            ref, version = self.publisher.ref(), self.publisher.version
            policy = self.publisher.last if keep_policy else None
        self.resumed_ahead = None
        return self._wave(round_idx, n, ref, version, policy)

    def finish(self) -> Outcome:
        """Cancel a wave sent ahead, if any (billed for the time it ran)."""
        wave, self.ahead = self.ahead, None
        return wave.in_flight.cancel() if wave is not None else Outcome({})

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.ahead is not None and self.ahead.policy is not None:
            p = self.ahead.policy
            state["sent_ahead"] = {"round": self.ahead.round, "actors": self.ahead.actors, "version": p.version,
                                   "clip_obs": p.clip_obs, "params": dict(p.params), "obs_mean": p.obs_mean,
                                   "obs_var": p.obs_var}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        wave = state.get("sent_ahead")
        if wave is not None:  # checked against this run's policy as resume checks the learner's weights
            template = self.publisher.snapshot(0)
            expected = {**{f"params/{k}": v for k, v in template.params.items()},
                        **({} if template.obs_mean is None else {"obs_mean": template.obs_mean,
                                                                  "obs_var": template.obs_var})}
            for name, value in expected.items():
                group, _, key = name.rpartition("/")
                saved = (wave.get(group) or {}).get(key) if group else wave.get(name)
                problem = checkpoint.array_problem(saved, value.shape, value.dtype)
                if problem:
                    raise ConfigError(f"the pipelined wave's policy: {name} {problem}")
            stats = template.obs_mean is not None
            policy = PolicySnapshot(int(wave["version"]), self.arch, dict(wave["params"]),
                                    wave["obs_mean"] if stats else None, wave["obs_var"] if stats else None,
                                    float(wave["clip_obs"]))
            self.resumed_ahead = (int(wave["round"]), int(wave["actors"]), policy)


class AsyncSampler(Sampler):
    """``n`` invocations kept in flight; a round returns once ``k`` fragments have arrived.

    Seeds stay a function of the run: actor ``slot``'s ``j``-th invocation gets index ``j``, and its retries
    after a failure keep that seed; which fragments make up an update depends on arrival order, so
    asynchronous runs are not bit-reproducible, unlike synchronous ones. Under a batch size, a slot's steps
    follow the ``n`` in force when it is submitted: the functions in flight hold the batch, and an update
    learns on the ``k`` fragments that arrive first (about ``k/n`` of it).
    """

    def __init__(self, *args: Any, k: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.k = k  # fragments per update (default: half of those in flight, at least 1)
        self.tracker = Tracker(self.backend)
        self.slot_calls: dict[int, int] = {}  # slot -> invocations started so far (seeds and ids)
        # per slot: failures in a row (stale-policy ones not counted), refusals in a row, the retry not made yet
        self.retries = Retries(self.retry)
        self.arrived: list[tuple[list[Fragment], Outcome]] = []  # replies' fragments not yet used by an update
        self.unlogged: list[Outcome] = []  # failed, duplicate and stray deliveries not yet logged and billed
        self.n_target = 0  # invocations to keep in flight (the scaler's n of the current round)
        self.stale_retries = 0  # failed invocations that held an outdated policy reference, resubmitted

    def sample(self, round_idx: int, n: int, evaluation: Evaluation | None = None) -> Sampled:
        if evaluation is not None:
            raise ValueError("an asynchronous sampler evaluates between rounds (its functions stay in flight)")
        k = min(self.k or max(1, n // 2), n)
        self.n_target, self.stale_retries = n, 0
        self._top_up()  # with the policy after the previous update
        while len(self.arrived) < k:
            self._route(self._collect())
        arrived, self.arrived = self.arrived, []
        outcomes, self.unlogged = [g for _, g in arrived] + self.unlogged, []
        fragments = [f for frags, _ in arrived for f in frags]
        lags = [self.publisher.version - f.policy_version for f in fragments]  # updates since each was sampled
        return Sampled(fragments, outcomes, policy_lag_mean=float(np.mean(lags)), policy_lag_max=int(max(lags)),
                       used=len(fragments), stale_retries=self.stale_retries)

    def evaluate(self, round_idx: int, n_actors: int, episodes: int) -> tuple[float, Outcome]:
        """Evaluation while training invocations stay in flight: every reply that arrives meanwhile is routed,
        until each evaluation slot has a result (a failed slot is retried up to ``max_retries`` times; a refused,
        throttled, one after a back-off, up to ``max_throttled`` times)."""
        per_slot, ref = self._eval_split(episodes, n_actors), self.publisher.ref()
        retries = Retries(self.retry)  # the evaluation's slots, apart from the actors'

        def submit(sent: list[tuple[int, int]]) -> None:
            if sent:
                self.tracker.submit([(slot, attempt, self.requests.make("eval", ref, round_idx, slot, attempt,
                                                                        episodes=per_slot[slot]))
                                     for slot, attempt in sent])

        submit([(slot, 0) for slot in range(len(per_slot))])
        got = Outcome({})
        while len(got.results) < len(per_slot):
            for attempt in self._route(self._collect(retries.next_due())):
                got.attempts.append(attempt)
                if attempt.status == OK:
                    got.results[attempt.slot] = attempt.result
                    continue
                verdict = retries.after(attempt)
                if verdict.action == GIVE_UP:
                    raise InvocationError(f"evaluation slot {attempt.slot}: {verdict.count} attempts in a row ended "
                                          f"{attempt.status} ({attempt.reply.record.invocation_id}: "
                                          f"{attempt.reply.record.error})")
            submit(retries.due(time.perf_counter()))  # failed ones at once, refused ones once backed off
        return self._mean_return(got), got

    def finish(self) -> Outcome:
        self.n_target = 0  # submit nothing more, not even while a final evaluation runs
        return Outcome({}, self.tracker.cancel())

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "slot_calls": json.dumps({str(k): v for k, v in self.slot_calls.items()})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.slot_calls = {int(k): int(v) for k, v in json.loads(state["slot_calls"]).items()}

    # -- keeping invocations in flight -----------------------------------------------------------
    def _top_up(self) -> None:
        """Submit an invocation, with the newest policy, for every slot below ``n_target`` that has none in
        flight: the slot's next one, or a retry (same seed, next attempt) of the one that failed."""
        busy = {slot for slot, _, req in self.tracker.flying.values() if req.kind == "train"}
        now = time.perf_counter()
        free = [slot for slot in range(self.n_target) if slot not in busy and not self.retries.waiting(slot, now)]
        if not free:
            return
        ref = self.publisher.ref()  # the newest weights
        retries = dict(self.retries.due(now, set(free)))  # slot -> the attempt that retries its failed one
        sent = []
        for slot in free:
            attempt = retries.get(slot, 0)
            if attempt == 0:
                self.slot_calls[slot] = self.slot_calls.get(slot, 0) + 1
            sent.append((slot, attempt, self._train_request(ref, self.slot_calls[slot], slot, attempt,
                                                            self.n_target)))
        self.tracker.submit(sent)

    def _validate(self, request: Request, reply: Reply) -> Any:
        if request.kind == "eval":
            return eval_returns(request, reply)
        return self._fragments(request, reply)  # any policy version: lag is expected

    def _route(self, replies: list[Reply]) -> list[Attempt]:
        """Take in collected replies: fragments are kept for the next update and their slots resubmitted at
        once; evaluation attempts are returned to the caller.

        A failed invocation is retried (same seed) with the newest policy, up to ``max_retries`` times in a
        row; one that held a policy reference replaced since is retried without counting (our backends keep a
        policy while invocations use it, but a third-party backend may drop it once a newer one is published)."""
        evaluations = []
        for reply in replies:
            attempt = self.tracker.receive(reply, self._validate)
            if attempt.status in (DUPLICATE, STRAY):  # billed, never learned from
                self.unlogged.append(Outcome({}, [attempt]))
            elif attempt.request is not None and attempt.request.kind == "eval":
                evaluations.append(attempt)
            elif attempt.status != OK:
                self._failed(attempt)
            else:
                self.retries.succeeded(attempt.slot)
                if self.carry_episodes:
                    self._keep_carries(attempt.slot, attempt.result)
                self.arrived.append((attempt.result, Outcome({attempt.slot: attempt.result}, [attempt])))
        self._top_up()
        return evaluations

    def _failed(self, attempt: Attempt) -> None:
        """Keep a failed (or refused) attempt's slot for its retry (a new id, the same seed, the newest policy) at
        the next top-up, a refused one once backed off, as run_group does; a slot given up fails the run."""
        self.unlogged.append(Outcome({}, [attempt]))
        stale = attempt.status != THROTTLED and self.publisher.newest is not None \
            and attempt.request is not None and attempt.request.policy != self.publisher.newest
        self.stale_retries += stale
        verdict = self.retries.after(attempt, counted=not stale)
        if verdict.action != GIVE_UP:
            return
        record = attempt.reply.record
        if attempt.status == THROTTLED:
            raise InvocationError(f"actor slot {attempt.slot}: the platform refused {verdict.count} calls in a row "
                                  f"(throttled: {record.error}); raise its concurrency limit or lower --n-max")
        raise InvocationError(f"actor slot {attempt.slot} failed {verdict.count} times in a row "
                              f"({record.invocation_id}: {record.error})")

    def _collect(self, also: float | None = None) -> list[Reply]:
        """The next replies, or none once a refused slot's back-off is over (the caller then resubmits it; ``also``:
        another back-off's end, an evaluation's); a backend with nothing in flight and no slot backing off cannot
        deliver what the learner waits for."""
        due = min((t for t in (self.retries.next_due(range(self.n_target)), also) if t is not None), default=None)
        wait_s = None if due is None else max(0.0, due - time.perf_counter())
        if not self.backend.in_flight:
            if wait_s is None:
                raise InvocationError("the backend has no invocation in flight but the learner is waiting for replies")
            time.sleep(wait_s)
            return []
        return self.backend.collect(timeout=wait_s)
