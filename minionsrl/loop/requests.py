"""What the learner sends to rollout functions: the published policy and the requests that refer to it.

A request is a :class:`~minionsrl.function.request.Request`: its id, kind (``train`` or ``eval``), attempt,
policy reference, env spec and seed, plus what its kind needs (steps and carried episodes, or episodes). The
seed of an invocation is a function of (run seed, index, slot, seed stream) only, so a fragment never depends on
which instance or backend ran it, nor on arrival order; every attempt of a slot has the slot's seed (a retry
samples what the first attempt would have) and its own id. A function of E environments is E actors: slot ``s``'s
environment ``e`` has the seed of actor ``s·E + e``, as a one-environment function in that slot would, so a run
samples the same whatever E.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from minionsrl.backends.base import Backend, Reply
from minionsrl.function import wire
from minionsrl.function.envs import EnvSpec
from minionsrl.function.faults import FaultPlan
from minionsrl.function.fragment import Fragment, PolicySnapshot, checked_episodes
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.request import EVAL_MAX_STEPS, Request


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
    act_bytes = 8 if arch.discrete else 4 * arch.action_dim
    # per step: obs, action, logprob/value/reward/trunc_value (4 × 4), terminated/truncated (2), an episode (16)
    row = obs_bytes + act_bytes + 16 + 2 + 16
    # per fragment: last_obs, last_value, moments (2 × 8 per obs number, and 4 counts), its carried episode
    fixed = obs_bytes + 4 + 16 * obs_numbers + 64 + FRAGMENT_EXTRA_BYTES + 32 * obs_numbers
    return REPLY_FIXED_BYTES + REPLY_HEADROOM * max(envs, 1) * (max(steps, 0) * row + fixed)


class Requests:
    """Builds the requests of one run; an injected fault, if one is drawn, travels with its attempt."""

    def __init__(self, spec: EnvSpec, seed: int, gamma: float, faults: FaultPlan,
                 arch: PolicyArch | None = None, eval_max_steps: int = EVAL_MAX_STEPS) -> None:
        self.env, self.seed, self.gamma, self.faults = spec, seed, gamma, faults
        self.arch = arch  # with it, each request says how large its reply may be (``max_reply_bytes``)
        self.eval_max_steps = eval_max_steps  # an evaluation episode is cut after this many steps

    def make(self, kind: str, ref: str, index: int, slot: int, attempt: int, steps: int = 0,
             carries: tuple[dict[str, Any] | None, ...] = (None,), episodes: int = 0) -> Request:
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


def fragment_digest(fragments: list[Fragment]) -> str:
    """A short digest of the step arrays of a reply's fragments: equal digests, equal training data."""
    h = hashlib.sha256()
    for fragment in fragments:
        for name in Fragment._STEP_ARRAYS:
            h.update(np.ascontiguousarray(getattr(fragment, name)).tobytes())
        h.update(np.float32(fragment.last_value).tobytes())
    return h.hexdigest()[:16]


def eval_split(episodes: int, n_actors: int) -> list[int]:
    """Evaluation episodes per function: ``episodes`` spread over up to ``n_actors`` functions."""
    slots = min(episodes, n_actors)
    return [episodes // slots + (1 if i < episodes % slots else 0) for i in range(slots)]


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
    return checked_episodes(reply.arrays, "evaluation reply", episodes)[0]
