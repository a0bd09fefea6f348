"""What the learner asks of one rollout function: :class:`Request`, the same type on both sides of the wire.

The learner builds it (:class:`~minionsrl.loop.sampler.Requests`), a backend ships :meth:`Request.encode`'s JSON
and reads the few fields it routes on (``id``, ``kind``, ``policy``, ``max_reply_bytes``, ``fault``), and the
function parses it back with :meth:`Request.decode`, which refuses anything else with one line.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from minionsrl.function.envs import EnvSpec

KINDS = ("train", "eval")
EVAL_MAX_STEPS = 27_000  # an evaluation episode still running after this many steps is cut (Atari's 108k frames / 4)


class Carry(TypedDict):
    """An episode in progress: it travels back with a fragment and out again with its actor's next request (JSON)."""

    env: dict[str, Any]  # the env's state: MuJoCo qpos/qvel, a classic-control state, or the ALE emulator and frames
    obs: list[Any] | None  # the last observation; None where the env's state holds it (the ALE frame stack)
    ep_return: float
    ep_length: int
    disc_return: float  # the reward scaler's discounted return


class Fault(TypedDict):
    """An injected fault the function (or the backend, for ``throttle`` and ``duplicate``) enacts
    (:mod:`minionsrl.function.faults`)."""

    kind: str
    sleep_s: NotRequired[float]  # hang: how long
    variant: NotRequired[int]  # malformed: which corruption


@dataclass(frozen=True)
class Request:
    """One invocation: attempt ``attempt`` of a slot (every attempt of a slot has its seed, each its own ``id``),
    of ``kind`` ``train`` (``steps`` steps in each of ``len(carries)`` environments, each continuing its carried
    episode, if any) or ``eval`` (``episodes`` deterministic episodes, each cut after ``max_steps``), with the
    published policy ``policy``.

    ``seed`` seeds an evaluation, or a training function's first environment; a function of several
    environments gets each one's seed in ``env_seeds`` (the seeds that many one-environment functions would
    have), so its fragments are theirs: how actors are grouped into functions changes no sample."""

    id: str
    kind: str
    policy: str
    env: EnvSpec
    seed: int
    gamma: float
    attempt: int = 0
    steps: int = 0
    carries: tuple[Carry | None, ...] = (None,)  # one per environment: its episode in progress
    env_seeds: tuple[int, ...] = ()  # one per environment, the first being ``seed``; empty for one environment
    episodes: int = 0
    max_steps: int = EVAL_MAX_STEPS
    max_reply_bytes: int | None = None  # the backend refuses a bigger reply before decoding it
    fault: Fault | None = None  # an injected fault the function enacts (minionsrl.function.faults)

    def __post_init__(self) -> None:
        if len(self.seeds) != self.envs or self.seeds[0] != self.seed:
            raise ValueError("env_seeds: one seed per environment (as many as carries), the first being seed")

    @property
    def envs(self) -> int:
        """The environments a training function steps in lockstep (one policy call a step for all of them)."""
        return len(self.carries) if self.kind == "train" else 1

    @property
    def seeds(self) -> tuple[int, ...]:
        """Each environment's seed."""
        return self.env_seeds or (self.seed,)

    def encode(self) -> bytes:
        """The request as the JSON a function receives."""
        data: dict[str, Any] = {"id": self.id, "kind": self.kind, "attempt": self.attempt, "policy": self.policy,
                                "env": self.env.to_json(), "seed": self.seed, "gamma": self.gamma}
        if self.kind == "train":
            data.update(steps=self.steps, carries=list(self.carries))
            if self.env_seeds:
                data["env_seeds"] = list(self.env_seeds)
        else:
            data.update(episodes=self.episodes, max_steps=self.max_steps)
        if self.max_reply_bytes is not None:
            data["max_reply_bytes"] = self.max_reply_bytes
        if self.fault:
            data["fault"] = self.fault
        return json.dumps(data).encode()

    @classmethod
    def decode(cls, data: bytes | str) -> Request:
        """A request from its JSON (:meth:`from_json`)."""
        return cls.from_json(json.loads(data))

    @classmethod
    def from_json(cls, raw: Any) -> Request:
        """A request from its parsed JSON; a field missing or of the wrong kind is a ``ValueError`` naming it."""
        if not isinstance(raw, dict):
            raise ValueError("a request is a JSON object")
        unknown = sorted(set(raw) - FIELDS)
        if unknown:  # a learner of another version: refused, not half read (a carried episode silently dropped)
            raise ValueError(f"the request holds fields this function does not know: {unknown[:3]}")
        try:
            kind = str(raw["kind"])
            if kind not in KINDS:
                raise ValueError(f"unknown invocation kind {kind!r}")
            carries = raw.get("carries", [None]) if kind == "train" else [None]
            if not isinstance(carries, list) or not carries:
                raise ValueError("carries: a list of one episode (or null) per environment")
            env_seeds = raw.get("env_seeds", [])
            if not isinstance(env_seeds, list):
                raise ValueError("env_seeds: a list of one seed per environment")
            cap = raw.get("max_reply_bytes")
            return cls(id=str(raw["id"]), kind=kind, policy=str(raw["policy"]), env=EnvSpec.from_json(raw["env"]),
                       seed=int(raw["seed"]), gamma=float(raw["gamma"]), attempt=int(raw.get("attempt", 0)),
                       steps=int(raw.get("steps", 0)), carries=tuple(carries),
                       env_seeds=tuple(int(s) for s in env_seeds), episodes=int(raw.get("episodes", 0)),
                       max_steps=int(raw.get("max_steps", EVAL_MAX_STEPS)),
                       max_reply_bytes=None if cap is None else int(cap), fault=raw.get("fault") or None)
        except KeyError as exc:
            raise ValueError(f"the request has no {exc.args[0]!r}") from None


FIELDS = frozenset(f.name for f in dataclasses.fields(Request))  # the JSON's keys: the dataclass's fields
