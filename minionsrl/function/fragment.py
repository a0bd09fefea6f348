"""What crosses the wire each round: the published policy snapshot and the fragments that come back, with the
reply's header (:class:`ReplyMeta`), the same type on both sides.

Both are encoded with :mod:`minionsrl.function.wire` (safetensors + HMAC). Decoding validates every array's
name, dtype and shape against the request, so a malformed reply is an error, never a silent batch.
Torch-free: rollout functions import this module.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, NamedTuple, TypedDict

import numpy as np

from minionsrl.function import wire
from minionsrl.function.normalization import CLIP_DEFAULT, Moments
from minionsrl.function.numpy_policy import NumpyPolicy, PolicyArch, make_numpy_policy
from minionsrl.function.request import Carry
from minionsrl.numbers import is_number


@dataclass
class PolicySnapshot:
    """Everything a rollout function needs to act: weights plus observation-normalisation stats."""

    version: int
    arch: PolicyArch
    params: dict[str, np.ndarray]
    obs_mean: np.ndarray | None  # None: observations are not normalised
    obs_var: np.ndarray | None
    clip_obs: float = CLIP_DEFAULT

    def encode(self, key: bytes) -> bytes:
        """The policy as a signed wire message (:mod:`minionsrl.function.wire`) under ``key``."""
        arrays = {f"param/{k}": v for k, v in self.params.items()}
        if self.obs_mean is not None:
            arrays["obs_mean"] = self.obs_mean.astype(np.float64)
            arrays["obs_var"] = self.obs_var.astype(np.float64)
        meta = {"type": "policy", "version": self.version, "arch": self.arch.to_json(), "clip_obs": self.clip_obs}
        return wire.encode(arrays, meta, key)

    @classmethod
    def decode(cls, data: bytes, key: bytes) -> PolicySnapshot:
        """The policy in the signed message ``data`` (verified with ``key``; never unpickled)."""
        arrays, meta = wire.decode(data, key)
        if meta.get("type") != "policy":
            raise wire.WireError("expected a policy snapshot")
        params = {k.removeprefix("param/"): v for k, v in arrays.items() if k.startswith("param/")}
        return cls(int(meta["version"]), PolicyArch.from_json(meta["arch"]), params,
                   arrays.get("obs_mean"), arrays.get("obs_var"), float(meta["clip_obs"]))

    def numpy_policy(self) -> NumpyPolicy:
        """The policy as rollout functions run it, in NumPy."""
        return make_numpy_policy(self.arch, self.params)


def checked_episodes(arrays: dict[str, np.ndarray], what: str,
                     count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A reply's ``episode_returns`` and ``episode_lengths`` (of a fragment's finished episodes, or of an
    evaluation's ``count``): one finite float64 return and one positive int64 length per episode; anything else is a
    :class:`~minionsrl.function.wire.WireError` naming ``what``."""
    rets, lens = arrays.get("episode_returns"), arrays.get("episode_lengths")
    if not (rets is not None and lens is not None and rets.ndim == 1 and rets.shape == lens.shape
            and (count is None or len(rets) == count) and rets.dtype == np.float64 and lens.dtype == np.int64):
        raise wire.WireError(f"{what} does not hold {'' if count is None else f'{count} '}episode returns (float64) "
                             "and lengths (int64), one of each per episode")
    if not np.isfinite(rets).all():
        raise wire.WireError(f"{what} episode returns hold non-finite numbers: {_env_fault('reward')}")
    if len(lens) and lens.min() < 1:
        raise wire.WireError(f"{what} episode lengths hold {int(lens.min())}, not a positive step count")
    return rets, lens


@dataclass
class Timings:
    """A function's own account of where its time went."""

    init_s: float = 0.0  # building the env and loading the policy (0 when both were warm)
    run_s: float = 0.0  # stepping the env with the policy
    cpu_s: float = 0.0  # process CPU time over the whole invocation
    init_wait_s: float = 0.0  # of init_s, the time spent waiting for a CPU of this machine (function.clock)
    run_wait_s: float = 0.0  # of run_s, the same
    # the own-instance seconds this instance spent loading the policy for an earlier invocation, which this one
    # reused (0 when it loaded the policy itself): a function on an instance of its own would pay them again
    reused_policy_s: float = 0.0

    def to_json(self) -> dict[str, float]:
        """The timings by name, as a reply's metadata carries them."""
        return asdict(self)


class Instance(TypedDict):
    """Which instance served an invocation: ``id`` (host and process), and how many it ``served`` before."""

    id: str
    served: int


class ReplyMeta(TypedDict, total=False):
    """A reply's header (JSON beside its arrays): what the function writes (:func:`~minionsrl.function.rollout.handle`)
    and the learner reads. It comes from outside the learner, so each field is checked where it is read: ``id``,
    ``timings`` and ``policy_bytes`` by the backend (:func:`~minionsrl.backends.base.make_reply`), ``policy_version``
    and ``carry`` by :meth:`Fragment.from_wire`, ``fragments`` by :meth:`Fragment.many_from_wire`."""

    type: Literal["fragment", "eval", "error"]
    id: str  # the invocation it answers
    env_built: bool  # the instance built its environments for this invocation
    policy_fetched: bool  # and fetched the policy (False: a warm instance reused it)
    policy_bytes: int  # the bytes it fetched
    instance: Instance
    timings: dict[str, float]  # Timings.to_json()
    policy_version: int  # the policy its fragments were sampled with
    carry: Carry | None  # one environment's episode in progress (a reply of one fragment)
    fragments: list[ReplyMeta]  # a reply of several: each fragment's own header, its ``carry``
    error: str  # an ``error`` reply: what failed, and where
    traceback: str


# The phases of a rollout function a backend can tell a hang in (by the function's frames), and of those the ones
# that run the env's own code: what the slot's seed drives
ENV_PHASES = {"make_env": "building the env", "reset": "in the env's reset()", "step": "in the env's step()"}
PHASES = {**ENV_PHASES, "evaluate": "in an evaluation episode"}


class HungAt(NamedTuple):
    """Where a timed-out invocation was when its backend stopped it: the rollout function's phase (a value of
    :data:`PHASES`, "" for none of them) and its innermost frame (``my_env.py:12 in step``)."""

    phase: str
    frame: str

    def __str__(self) -> str:
        return f"{self.phase} (at {self.frame})".strip()

    @property
    def in_env(self) -> bool:
        """Whether it hung in the env's own code (its constructor, reset() or step())."""
        return self.phase in ENV_PHASES.values()


@dataclass
class Fragment:
    """``T`` consecutive steps from one actor, with everything PPO and the normalisers need.

    ``obs`` are what the policy saw: vectors normalised with the round's published statistics
    (float32), or image stacks as the env gave them (uint8, never copied to float on the way).
    ``trunc_values[t]`` is V(final observation) where an episode was truncated by a time limit at
    step ``t``; ``last_value`` is V of the observation after the fragment's last step (the cut), and
    ``last_obs`` that observation (so an off-policy learner can bootstrap with its own value).
    """

    obs: np.ndarray  # (T, obs_dim) float32, or (T, *image_shape) uint8
    actions: np.ndarray  # (T,) int64 or (T, action_dim) float32
    logprobs: np.ndarray  # (T,) float32
    values: np.ndarray  # (T,) float32
    rewards: np.ndarray  # (T,) float32, raw environment rewards
    terminated: np.ndarray  # (T,) bool
    truncated: np.ndarray  # (T,) bool, time-limit truncation inside the fragment
    trunc_values: np.ndarray  # (T,) float32
    last_value: float
    last_obs: np.ndarray  # (1, *obs shape), same dtype as obs
    episode_returns: np.ndarray  # finished episodes, raw rewards
    episode_lengths: np.ndarray
    obs_moments: Moments | None  # raw observations seen
    ret_moments: Moments | None  # discounted returns seen (for reward scaling)
    policy_version: int = 0
    meta: ReplyMeta = field(default_factory=ReplyMeta)

    _STEP_ARRAYS = ("obs", "actions", "logprobs", "values", "rewards", "terminated", "truncated", "trunc_values")

    def encode(self, meta: ReplyMeta, key: bytes) -> bytes:
        """The fragment and ``meta`` as one signed wire message under ``key``."""
        return wire.encode(self.arrays(), {**meta, "type": "fragment", "policy_version": self.policy_version}, key)

    def arrays(self) -> dict[str, np.ndarray]:
        """The fragment's arrays as they cross the wire."""
        arrays = {name: getattr(self, name) for name in self._STEP_ARRAYS}
        arrays["last_value"] = np.array([self.last_value], dtype=np.float32)
        arrays["last_obs"] = self.last_obs
        arrays["episode_returns"] = self.episode_returns.astype(np.float64)
        arrays["episode_lengths"] = self.episode_lengths.astype(np.int64)
        for prefix, m in (("obs_m", self.obs_moments), ("ret_m", self.ret_moments)):
            if m is not None:
                arrays[f"{prefix}/mean"] = np.asarray(m.mean, dtype=np.float64).reshape(-1)
                arrays[f"{prefix}/var"] = np.asarray(m.var, dtype=np.float64).reshape(-1)
                arrays[f"{prefix}/count"] = np.array([m.count], dtype=np.float64)
        return arrays

    @staticmethod
    def digest(fragments: list[Fragment]) -> str:
        """A short digest of the step arrays of a reply's fragments: equal digests, equal training data."""
        h = hashlib.sha256()
        for fragment in fragments:
            for name in Fragment._STEP_ARRAYS:
                h.update(np.ascontiguousarray(getattr(fragment, name)).tobytes())
            h.update(np.float32(fragment.last_value).tobytes())
        return h.hexdigest()[:16]

    @staticmethod
    def encode_many(fragments: list[Fragment], meta: ReplyMeta, key: bytes) -> bytes:
        """One reply for a function's fragments: a single fragment as :meth:`encode` writes it; several with
        their arrays under ``e{i}/`` and their carried episodes in ``meta["fragments"]``."""
        if len(fragments) == 1:
            return fragments[0].encode({**meta, **fragments[0].meta}, key)
        arrays: dict[str, np.ndarray] = {}
        for i, frag in enumerate(fragments):
            arrays.update({f"e{i}/{name}": value for name, value in frag.arrays().items()})
        return wire.encode(arrays, {**meta, "type": "fragment", "policy_version": fragments[0].policy_version,
                                    "fragments": [frag.meta for frag in fragments]}, key)

    @classmethod
    def many_from_wire(cls, arrays: dict[str, np.ndarray], meta: ReplyMeta, steps: int, arch: PolicyArch,
                       envs: int = 1, version: int | None = None) -> list[Fragment]:
        """The ``envs`` fragments of one reply (:meth:`encode_many`), each checked as :meth:`from_wire` does."""
        if envs == 1:
            return [cls.from_wire(arrays, meta, steps, arch, version)]
        per_env = meta.get("fragments")
        if not isinstance(per_env, list) or len(per_env) != envs or not all(isinstance(m, dict) for m in per_env):
            raise wire.WireError(f"reply does not describe {envs} fragments")
        stray = sorted(name for name in arrays if name.split("/", 1)[0] not in {f"e{i}" for i in range(envs)})
        if stray:
            raise wire.WireError(f"reply holds unexpected arrays {stray[:3]}")
        return [cls.from_wire({name[len(f"e{i}/"):]: value for name, value in arrays.items()
                               if name.startswith(f"e{i}/")},
                              {**meta, "carry": per_env[i].get("carry")}, steps, arch, version)
                for i in range(envs)]

    @classmethod
    def from_wire(cls, arrays: dict[str, np.ndarray], meta: ReplyMeta, steps: int,
                  arch: PolicyArch, version: int | None = None) -> Fragment:
        """Build a fragment from decoded arrays, checking names, dtypes and shapes against the request (and the
        policy version it was sampled with, if ``version`` is given); anything else is a WireError."""
        unknown = sorted(set(arrays) - _FRAGMENT_ARRAYS)
        if unknown:
            raise wire.WireError(f"fragment holds unexpected arrays {unknown[:3]}")
        obs_dtype = np.uint8 if arch.image else np.float32
        act_shape = (steps,) if arch.discrete else (steps, arch.action_dim)
        expected = {
            "obs": (obs_dtype, (steps, *arch.step_obs_shape)), "last_obs": (obs_dtype, (1, *arch.step_obs_shape)),
            "actions": (np.int64 if arch.discrete else np.float32, act_shape),
            "logprobs": (np.float32, (steps,)), "values": (np.float32, (steps,)),
            "rewards": (np.float32, (steps,)), "terminated": (np.bool_, (steps,)),
            "truncated": (np.bool_, (steps,)), "trunc_values": (np.float32, (steps,)),
            "last_value": (np.float32, (1,)),
        }
        for name, (dtype, shape) in expected.items():
            arr = arrays.get(name)
            if arr is None:
                raise wire.WireError(f"fragment is missing array {name!r}")
            if arr.dtype != dtype or arr.shape != shape:
                raise wire.WireError(f"fragment array {name!r} is {arr.dtype}{arr.shape}, expected "
                                     f"{np.dtype(dtype)}{shape}")
        # what the env produced first: a NaN observation makes the values NaN too, and the env is to blame for both
        for name in ("rewards", *(() if arch.image else ("obs", "last_obs"))):  # uint8 images are finite by type
            _check_env_output(name, arrays[name])
        obs_moments, ret_moments = _moments(arrays, "obs_m", (arch.obs_dim,)), _moments(arrays, "ret_m", ())
        finite = ("values", "trunc_values", "logprobs", "last_value")
        for name in finite if arch.discrete else (*finite, "actions"):
            if not np.isfinite(arrays[name]).all():
                raise wire.WireError(f"fragment array {name!r} holds non-finite numbers")
        if arch.discrete and steps and (arrays["actions"].min() < 0 or arrays["actions"].max() >= arch.action_dim):
            raise wire.WireError(f"fragment actions are outside 0..{arch.action_dim - 1}")
        sampled_with = meta.get("policy_version", -1)
        if not isinstance(sampled_with, int) or isinstance(sampled_with, bool):
            raise wire.WireError(f"fragment policy_version {sampled_with!r} is not an integer")
        if version is not None and sampled_with != version:
            raise wire.WireError(f"fragment was sampled with policy version {sampled_with}, expected {version}")
        rets, lens = checked_episodes(arrays, "fragment")
        _check_carry(meta.get("carry"))
        return cls(
            **{name: arrays[name] for name in cls._STEP_ARRAYS},
            last_value=float(arrays["last_value"][0]), last_obs=arrays["last_obs"],
            episode_returns=rets, episode_lengths=lens,
            obs_moments=obs_moments, ret_moments=ret_moments,
            policy_version=sampled_with,
            meta=meta,
        )


_FRAGMENT_ARRAYS = frozenset({*Fragment._STEP_ARRAYS, "last_value", "last_obs", "episode_returns", "episode_lengths",
                              *(f"{p}/{s}" for p in ("obs_m", "ret_m") for s in ("mean", "var", "count"))})
_CARRY_NUMBERS = ("ep_return", "ep_length", "disc_return")

# How a reply blames the env for what it returned: the learner names the env where it reports the failure
ENV_FAULT = "the env returned"
_FIX = {"observation": "make its reset() and step() return finite observations",
        "reward": "make its step() return finite rewards"}
_ENV_OUTPUT = {"rewards": "reward", "obs": "observation", "last_obs": "observation", "obs_m": "observation",
               "ret_m": "reward"}


def _env_fault(what: str) -> str:
    """The failure's cause and fix, where the env returned a non-finite ``what`` (observation or reward)."""
    return f"{ENV_FAULT} non-finite {what}s; {_FIX[what]}"


def _check_env_output(name: str, values: np.ndarray) -> None:
    """Raise a WireError blaming the env if ``values`` (what the env returned: rewards, observations) holds a NaN
    or an infinity (a float64 number beyond float32's range arrives as an infinity)."""
    bad = ~np.isfinite(values)
    if bad.any():
        where = np.argwhere(bad)[0]
        what = _ENV_OUTPUT[name]
        step = "after the fragment's last step" if name == "last_obs" else f"at step {int(where[0])} of the fragment"
        raise wire.WireError(f"{ENV_FAULT} a non-finite {what} ({values[tuple(where)]} {step}); {_FIX[what]}")


def _check_carry(carry: Any) -> None:
    """An episode in progress travels back to a function with the next request: it must be well-formed."""
    if carry is None:
        return
    # obs is None where the env state holds the observation itself (the ALE frame stack)
    if not isinstance(carry, dict) or not isinstance(carry.get("env"), dict) or not (
            isinstance(carry.get("obs"), list) or (carry.get("obs") is None and "frames" in carry["env"])):
        raise wire.WireError("fragment carry is not an episode state (env, obs, ep_return, ep_length, disc_return)")
    for name in _CARRY_NUMBERS:
        value = carry.get(name)
        if not is_number(value):
            raise wire.WireError(f"fragment carry {name} {value!r} is not a finite number")


def _moments(arrays: dict[str, np.ndarray], prefix: str, shape: tuple[int, ...]) -> Moments | None:
    names = (f"{prefix}/mean", f"{prefix}/var", f"{prefix}/count")
    present = [n in arrays for n in names]
    if not any(present):
        return None
    if not all(present):
        raise wire.WireError(f"fragment {prefix} moments are incomplete")
    mean, var, count = arrays[f"{prefix}/mean"], arrays[f"{prefix}/var"], arrays[f"{prefix}/count"]
    size = int(np.prod(shape))
    if mean.shape != (size,) or var.shape != (size,) or count.shape != (1,):
        raise wire.WireError(f"fragment {prefix} moments have the wrong shape")
    mean, var = mean.reshape(shape), var.reshape(shape)
    if not (np.isfinite(mean).all() and np.isfinite(var).all()):  # of what the env returned: it is to blame
        raise wire.WireError(f"fragment {prefix} moments are not finite: {_env_fault(_ENV_OUTPUT[prefix])}")
    if not ((var >= 0).all() and count[0] >= 0):
        raise wire.WireError(f"fragment {prefix} moments are not valid statistics")
    return Moments(mean, var, float(count[0]))
