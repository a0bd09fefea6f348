"""What the learner sends to rollout functions: the published policy and the requests that refer to it.

A request is JSON: its id, kind (``train`` or ``eval``), attempt, policy reference, env spec and seed,
plus what its kind needs (steps and carried episode, or episodes). The seed of an invocation is a
function of (run seed, index, slot, seed stream) only, so a fragment never depends on which instance or
backend ran it, nor on arrival order; every attempt of a slot has the slot's seed (a retry samples what
the first attempt would have) and its own id.
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
from minionsrl.function.fragment import Fragment, PolicySnapshot


def invocation_seed(run_seed: int, index: int, slot: int, stream: int) -> int:
    """Seed of one invocation (or of the detectors): a function of its arguments only.
    ``stream`` is :data:`~minionsrl.function.wire.SEED_STREAMS` of the kind."""
    return int(np.random.SeedSequence([run_seed, index, slot, stream]).generate_state(1)[0])


class Requests:
    """Builds the requests of one run; an injected fault, if one is drawn, travels with its attempt."""

    def __init__(self, spec: EnvSpec, seed: int, gamma: float, faults: FaultPlan) -> None:
        self.env, self.seed, self.gamma, self.faults = spec.to_json(), seed, gamma, faults

    def make(self, kind: str, ref: str, index: int, slot: int, attempt: int, **extra: Any) -> dict[str, Any]:
        """Attempt ``attempt`` of ``slot``; ``index`` is the round (synchronous learners) or the slot's
        invocation count (asynchronous ones)."""
        request = {"id": f"r{index}-{kind}-{slot}" + (f"-a{attempt}" if attempt else ""), "kind": kind,
                   "attempt": attempt, "policy": ref, "env": self.env,
                   "seed": invocation_seed(self.seed, index, slot, wire.SEED_STREAMS[kind]), "gamma": self.gamma,
                   **extra}
        fault = self.faults.draw(index, slot, attempt, kind)
        return {**request, "fault": fault} if fault else request


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


def eval_returns(request: dict[str, Any], reply: Reply) -> np.ndarray:
    """The episode returns of an evaluation reply, checked against its request."""
    episodes = int(request["episodes"])
    returns = reply.arrays.get("episode_returns")
    lengths = reply.arrays.get("episode_lengths")
    if returns is None or returns.shape != (episodes,) or returns.dtype != np.float64 \
            or lengths is None or lengths.shape != (episodes,):
        raise wire.WireError(f"evaluation reply does not hold {episodes} episode returns and lengths")
    if not np.isfinite(returns).all():
        raise wire.WireError("evaluation returns hold non-finite numbers")
    return returns
