"""The rollout function, called directly: fragments, seeding, truncation, carried episodes, handle()."""

from __future__ import annotations

import contextlib
import itertools
import json

import gymnasium as gym
import numpy as np
import pytest

from minionsrl.function import rollout as rollout_mod
from minionsrl.function import wire
from minionsrl.function.envs import EnvSpec, make_env
from minionsrl.function.faults import FaultPlan
from minionsrl.function.fragment import Fragment, PolicySnapshot
from minionsrl.function.normalization import RunningMeanStd
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.request import Request
from minionsrl.function.rollout import evaluate, handle, rollout
from minionsrl.learner.networks import init_params, snapshot_of
from minionsrl.loop.sampler import Requests

CART = PolicyArch(4, 2, True, (64, 64))
PEND = PolicyArch(3, 1, False, (64, 64))
KEY = b"r" * 32


def _snapshot(arch: PolicyArch, seed: int = 0, obs_rms: RunningMeanStd | None = None) -> PolicySnapshot:
    return snapshot_of(arch, init_params(arch, seed), obs_rms, 0, 10.0)


def _run(spec: EnvSpec, snap: PolicySnapshot, steps: int, seed: int, carry=None, env=None) -> Fragment:
    own = env is None
    env = env or make_env(spec)
    try:
        return rollout(env, snap, snap.numpy_policy(), steps, seed, 0.99, carry)
    finally:
        if own:
            env.close()


def _assert_same(a: Fragment, b: Fragment) -> None:
    for name in Fragment._STEP_ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.last_value == b.last_value
    np.testing.assert_array_equal(a.episode_returns, b.episode_returns)
    np.testing.assert_array_equal(a.episode_lengths, b.episode_lengths)
    assert a.meta["carry"] == b.meta["carry"]


# -- shapes and dtypes -----------------------------------------------------------------------------
def test_cartpole_fragment_shapes_and_dtypes():
    steps = 64
    frag = _run(EnvSpec("CartPole-v1"), _snapshot(CART), steps, seed=3)
    assert frag.obs.shape == (steps, 4) and frag.obs.dtype == np.float32
    assert frag.actions.shape == (steps,) and frag.actions.dtype == np.int64
    assert set(np.unique(frag.actions)) <= {0, 1}
    for name in ("logprobs", "values", "rewards", "trunc_values"):
        arr = getattr(frag, name)
        assert arr.shape == (steps,) and arr.dtype == np.float32, name
    for name in ("terminated", "truncated"):
        assert getattr(frag, name).shape == (steps,) and getattr(frag, name).dtype == np.bool_
    assert isinstance(frag.last_value, float)
    assert frag.episode_returns.dtype == np.float64 and frag.episode_lengths.dtype == np.int64
    assert (frag.logprobs <= 0).all() and (frag.logprobs > np.log(1e-3)).all()
    np.testing.assert_array_equal(frag.rewards, 1.0)  # CartPole pays 1 per step
    # episodes start at step 0 (no carry): finished episodes account for the steps up to the last done
    done = np.flatnonzero(frag.terminated | frag.truncated)
    assert len(frag.episode_lengths) == len(done) > 0  # a random CartPole policy falls within 64 steps
    assert frag.episode_lengths.sum() == done[-1] + 1
    np.testing.assert_array_equal(frag.episode_returns, frag.episode_lengths)
    assert frag.obs_moments is None  # not normalised
    assert frag.ret_moments.count == steps
    assert frag.policy_version == 0


def test_pendulum_fragment_shapes_dtypes_and_time_limit():
    steps = 210  # Pendulum's time limit is 200 steps: one truncation inside the fragment
    frag = _run(EnvSpec("Pendulum-v1"), _snapshot(PEND), steps, seed=4)
    assert frag.obs.shape == (steps, 3) and frag.obs.dtype == np.float32
    assert frag.actions.shape == (steps, 1) and frag.actions.dtype == np.float32
    assert (frag.rewards <= 0).all()
    assert not frag.terminated.any()
    np.testing.assert_array_equal(np.flatnonzero(frag.truncated), [199])
    assert frag.trunc_values[199] != 0.0
    assert np.count_nonzero(frag.trunc_values) == 1
    np.testing.assert_array_equal(frag.episode_lengths, [200])
    assert frag.episode_returns[0] == pytest.approx(frag.rewards[:200].sum(dtype=np.float64), rel=1e-5)
    # actions are stored unclipped (their log-prob is what PPO needs); the env got clipped ones
    assert np.isfinite(frag.actions).all()


def test_observation_normalisation_uses_published_statistics():
    rms = RunningMeanStd((3,))
    rms.mean, rms.var = np.array([0.5, -0.5, 1.0]), np.array([0.25, 4.0, 9.0])
    snap = _snapshot(PEND, obs_rms=rms)
    frag = _run(EnvSpec("Pendulum-v1"), snap, 50, seed=5)
    assert frag.obs_moments is not None and frag.obs_moments.count == 50
    raw = frag.obs.astype(np.float64) * np.sqrt(rms.var + 1e-8) + rms.mean  # nothing clipped at 10
    np.testing.assert_allclose(raw.mean(axis=0), frag.obs_moments.mean, atol=1e-5)
    np.testing.assert_allclose(raw.var(axis=0), frag.obs_moments.var, atol=1e-5)


def test_observation_normalisation_clips():
    rms = RunningMeanStd((3,))
    rms.mean, rms.var = np.zeros(3), np.full(3, 1e-6)
    snap = snapshot_of(PEND, init_params(PEND, 0), rms, 0, 2.5)
    frag = _run(EnvSpec("Pendulum-v1"), snap, 20, seed=5)
    assert np.abs(frag.obs).max() == pytest.approx(2.5)


# -- seeding ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("env_id", "arch"), [("CartPole-v1", CART), ("Pendulum-v1", PEND)])
def test_same_seed_same_fragment_even_on_a_used_env(env_id, arch):
    spec, snap = EnvSpec(env_id), _snapshot(arch)
    first = _run(spec, snap, 100, seed=42)
    env = make_env(spec)  # a "warm" env that already ran another fragment
    try:
        _run(spec, snap, 37, seed=7, env=env)
        second = _run(spec, snap, 100, seed=42, env=env)
    finally:
        env.close()
    _assert_same(first, second)


@pytest.mark.parametrize(("env_id", "arch"), [("CartPole-v1", CART), ("Pendulum-v1", PEND)])
def test_different_seed_different_fragment(env_id, arch):
    spec, snap = EnvSpec(env_id), _snapshot(arch)
    a, b = _run(spec, snap, 100, seed=1), _run(spec, snap, 100, seed=2)
    assert not np.array_equal(a.obs, b.obs)
    assert not np.array_equal(a.actions, b.actions)


# -- truncation and carried episodes ---------------------------------------------------------------
def test_time_limit_truncation_inside_a_fragment():
    spec, snap = EnvSpec("CartPole-v1", {"max_episode_steps": 20}), _snapshot(CART)
    frag = _run(spec, snap, 400, seed=0)
    assert frag.truncated.any()
    assert not (frag.truncated & frag.terminated).any()
    assert (frag.trunc_values[frag.truncated] != 0).all()
    assert (frag.trunc_values[~frag.truncated] == 0).all()
    assert frag.episode_lengths.max() <= 20
    # every truncation ends an episode of exactly 20 steps (a fall at step 20 counts as a termination)
    ends = np.flatnonzero(frag.terminated | frag.truncated)
    lengths = np.diff(np.concatenate([[-1], ends]))
    np.testing.assert_array_equal(lengths, frag.episode_lengths)
    assert (lengths[frag.truncated[ends]] == 20).all()
    assert (lengths[frag.terminated[ends]] <= 20).all()


def test_carry_continues_episodes_across_fragments():
    spec, snap, steps = EnvSpec("CartPole-v1"), _snapshot(CART), 16
    env = make_env(spec)
    lengths, carry, frags = [], None, []
    try:
        for i in range(8):
            frag = _run(spec, snap, steps, seed=100 + i, carry=carry, env=env)
            frags.append(frag)
            lengths += frag.episode_lengths.tolist()
            carry = frag.meta["carry"]
            assert carry is not None
            json.dumps(carry)  # travels in the next request
    finally:
        env.close()
    assert max(lengths) > steps  # episodes longer than one fragment exist
    # the next fragment starts exactly where the previous one stopped
    for prev, nxt in itertools.pairwise(frags):
        np.testing.assert_array_equal(nxt.obs[0], np.asarray(prev.meta["carry"]["obs"], dtype=np.float32))
    # the first finished episode of fragment 2 counts the steps done in fragment 1
    second = frags[1]
    if len(second.episode_lengths):
        first_end = int(np.flatnonzero(second.terminated | second.truncated)[0])
        assert second.episode_lengths[0] == frags[0].meta["carry"]["ep_length"] + first_end + 1


def test_without_carry_episodes_never_exceed_the_fragment():
    spec, snap, steps = EnvSpec("CartPole-v1"), _snapshot(CART), 16
    lengths = []
    for i in range(8):
        lengths += _run(spec, snap, steps, seed=100 + i).episode_lengths.tolist()
    assert max(lengths) <= steps


def test_carry_keeps_the_time_limit_count():
    """With a limit of 20 and T=8, a carried episode is truncated at 20 total steps, across fragments."""
    spec, snap = EnvSpec("CartPole-v1", {"max_episode_steps": 20}), _snapshot(CART)
    env = make_env(spec)
    lengths, truncations, carry = [], 0, None
    try:
        for i in range(30):
            frag = _run(spec, snap, 8, seed=i, carry=carry, env=env)
            carry = frag.meta["carry"]
            lengths += frag.episode_lengths.tolist()
            truncations += int(frag.truncated.sum())
    finally:
        env.close()
    assert max(lengths) == 20 and truncations > 0
    assert lengths.count(20) >= truncations


def _discounted(rewards: np.ndarray, terminated: np.ndarray, gamma: float, start: float = 0.0,
                resets: np.ndarray | None = None) -> np.ndarray:
    """Gymnasium's NormalizeReward recurrence, d = d·γ·(1 − terminated) + r, from ``start`` (``resets``: the
    steps that zero it instead of ``terminated``)."""
    resets = terminated if resets is None else resets
    out, d = np.empty(len(rewards)), start
    for t, (r, done) in enumerate(zip(rewards.astype(np.float64), resets, strict=True)):
        d = d * gamma * (1.0 - float(done)) + r
        out[t] = d
    return out


class _Replay(gym.Env):
    """Replays given rewards and termination flags (never truncates), for Gymnasium's own wrapper."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Discrete(1)

    def __init__(self, rewards: np.ndarray, terminated: np.ndarray) -> None:
        self.steps, self.t = list(zip(rewards.tolist(), terminated.tolist(), strict=True)), 0

    def reset(self, *, seed=None, options=None):
        return np.zeros(1, np.float32), {}

    def step(self, action):
        reward, term = self.steps[self.t]
        self.t += 1
        return np.zeros(1, np.float32), reward, term, False, {}


def test_discounted_return_resets_at_terminations_only_like_gymnasium():
    """The reward scaler's discounted return follows Gymnasium's NormalizeReward (CleanRL's reward scaling):
    a termination resets it, a time-limit truncation does not, and it carries across fragments."""
    spec, snap, gamma = EnvSpec("CartPole-v1", {"max_episode_steps": 20}), _snapshot(CART), 0.99
    env = make_env(spec)
    frags, carry = [], None
    try:
        for i in range(6):
            frags.append(rollout(env, snap, snap.numpy_policy(), 50, i, gamma, carry))
            carry = frags[-1].meta["carry"]
    finally:
        env.close()
    terminated = np.concatenate([f.terminated for f in frags])
    truncated = np.concatenate([f.truncated for f in frags])
    assert terminated.any() and truncated.any()  # both kinds of episode end are exercised
    start = 0.0
    for frag in frags:
        expected = _discounted(frag.rewards, frag.terminated, gamma, start)
        assert frag.ret_moments.count == len(expected)
        assert frag.ret_moments.mean == pytest.approx(expected.mean(), rel=1e-12)
        assert frag.ret_moments.var == pytest.approx(expected.var(), rel=1e-12)
        assert frag.meta["carry"]["disc_return"] == pytest.approx(expected[-1], rel=1e-12)
        # resetting at truncations too (the old behaviour) gives other moments
        old = _discounted(frag.rewards, frag.terminated, gamma, start, resets=frag.terminated | frag.truncated)
        if frag.truncated[:-1].any():
            assert frag.ret_moments.mean != pytest.approx(old.mean(), rel=1e-6)
        start = frag.meta["carry"]["disc_return"]
    # the recurrence is Gymnasium's own: replay the rewards and terminations through its wrapper
    rewards = np.concatenate([f.rewards for f in frags])
    wrapped = gym.wrappers.NormalizeReward(_Replay(rewards, terminated), gamma=gamma)
    wrapped.reset(seed=0)
    theirs = []
    for _ in range(len(rewards)):
        wrapped.step(0)
        theirs.append(float(wrapped.discounted_reward[0]))
    np.testing.assert_allclose(theirs, _discounted(rewards, terminated, gamma), rtol=1e-12)
    # with CartPole's reward of 1 per step: a truncation keeps the sum growing, a termination restarts it
    disc = _discounted(rewards, terminated, gamma)
    trunc_at, term_at = np.flatnonzero(truncated[:-1]), np.flatnonzero(terminated)
    np.testing.assert_allclose(disc[trunc_at + 1], disc[trunc_at] * gamma + 1.0)
    assert (disc[trunc_at] > 1.0).all()
    np.testing.assert_array_equal(disc[term_at], 1.0)


def test_carry_for_mujoco_continues_the_episode():
    arch = PolicyArch(11, 3, False, (64, 64))
    spec, snap = EnvSpec("Hopper-v5"), _snapshot(arch)
    first = _run(spec, snap, 5, seed=1)
    carry = first.meta["carry"]
    assert carry["ep_length"] == 5 and len(first.episode_lengths) == 0  # Hopper does not fall in 5 steps
    assert set(carry["env"]) == {"qpos", "qvel", "elapsed"}
    second = _run(spec, snap, 5, seed=999, carry=carry)
    np.testing.assert_allclose(second.obs[0], np.asarray(carry["obs"], dtype=np.float32))
    assert second.meta["carry"]["env"]["elapsed"] == 10


def test_no_carry_for_env_without_state():
    arch = PolicyArch(2, 3, True, (8,))
    snap = snapshot_of(arch, init_params(arch, 0), None, 0, 10.0)
    frag = _run(EnvSpec("custom_env:CounterEnv", {"length": 25}), snap, 10, seed=0)
    assert frag.meta["carry"] is None
    assert len(frag.episode_lengths) == 0


# -- evaluate --------------------------------------------------------------------------------------
def test_evaluate_is_deterministic_and_counts_full_episodes():
    snap = _snapshot(CART)
    env = make_env(EnvSpec("CartPole-v1"))
    try:
        r1, l1 = evaluate(env, snap, snap.numpy_policy(), 3, seed=10)
        r2, _ = evaluate(env, snap, snap.numpy_policy(), 3, seed=10)
    finally:
        env.close()
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(r1, l1)  # CartPole: return == length
    assert l1.dtype == np.int64 and (l1 >= 8).all()


# -- handle() --------------------------------------------------------------------------------------
@pytest.fixture
def cold_instance():
    """Start and end with no warm state in this process' rollout module."""
    def clear():
        for env in rollout_mod._ENVS.values():
            env.close()
        rollout_mod._ENVS.clear()
        rollout_mod._POLICY.clear()

    clear()
    yield
    clear()


def _request(**overrides) -> bytes:
    req = {"id": "r1-train-0", "kind": "train", "policy": "P1", "env": EnvSpec("CartPole-v1").to_json(),
           "seed": 5, "gamma": 0.99, "steps": 32, "carries": [None]}
    req.update(overrides)
    return json.dumps(req).encode()


def _decode(reply: bytes, invocation_id: str = "r1-train-0", key: bytes = KEY):
    """A reply as the learner reads it: signed with its invocation's own key."""
    return wire.decode(reply, wire.invocation_key(key, invocation_id))


def _policies(blob: bytes):
    fetched: list[str] = []

    def fetch(ref: str) -> bytes:
        fetched.append(ref)
        return blob

    return fetch, fetched


def test_handle_train_cold_then_warm(cold_instance):
    blob = _snapshot(CART).encode(KEY)
    fetch, fetched = _policies(blob)
    arrays, meta = _decode(handle(_request(), fetch, KEY))
    frag = Fragment.from_wire(arrays, meta, 32, CART)
    assert meta["id"] == "r1-train-0" and meta["type"] == "fragment"
    assert meta["env_built"] is True and meta["policy_fetched"] is True and meta["policy_bytes"] == len(blob)
    assert meta["timings"]["init_s"] > 0 and meta["timings"]["run_s"] > 0 and meta["timings"]["cpu_s"] > 0
    arrays2, meta2 = _decode(handle(_request(id="r1-train-1"), fetch, KEY), "r1-train-1")
    assert meta2["env_built"] is False and meta2["policy_fetched"] is False and meta2["policy_bytes"] == 0
    assert fetched == ["P1"]
    # the first loaded the policy within its init; the second reused it and says what the load took, which a
    # function on an instance of its own would pay again
    assert meta["timings"]["reused_policy_s"] == 0.0
    assert 0.0 < meta2["timings"]["reused_policy_s"] < meta["timings"]["init_s"]
    # same seed, warm or cold: the same fragment
    np.testing.assert_array_equal(Fragment.from_wire(arrays2, meta2, 32, CART).obs, frag.obs)


def test_handle_eval_request(cold_instance):
    fetch, _ = _policies(_snapshot(CART).encode(KEY))
    arrays, meta = _decode(handle(_request(kind="eval", episodes=2), fetch, KEY))
    assert meta["type"] == "eval"
    assert arrays["episode_returns"].shape == (2,) and arrays["episode_lengths"].shape == (2,)


def _error(reply: bytes, invocation_id: str = "r1-train-0") -> dict:
    arrays, meta = _decode(reply, invocation_id)
    assert arrays == {}
    assert meta["type"] == "error"
    assert meta["traceback"]
    return meta


@pytest.mark.parametrize(("request_bytes", "expected_id", "fragment"), [
    (b"{this is not json", "?", "JSONDecodeError"),
    (json.dumps({"kind": "train"}).encode(), "?", "the request has no 'id'"),
    (_request(kind="dance"), "r1-train-0", "unknown invocation kind"),
    (_request(env={"id": "CartPole-v1", "kwargs": {"no_such_kwarg": 1}}), "r1-train-0", "no_such_kwarg"),
    (_request(env={"id": "NoSuchEnv-v0"}), "r1-train-0", "NoSuchEnv"),
    (_request(steps="many"), "r1-train-0", "ValueError"),
    (_request(carry=None), "r1-train-0", "does not know: ['carry']"),  # an older learner's key: refused, not dropped
])
def test_handle_bad_request_returns_error_reply(cold_instance, request_bytes, expected_id, fragment):
    fetch, _ = _policies(_snapshot(CART).encode(KEY))
    meta = _error(handle(request_bytes, fetch, KEY), expected_id)
    assert meta["id"] == expected_id
    assert fragment in meta["error"]


def test_handle_policy_signed_with_another_key_is_an_error_reply(cold_instance):
    fetch, _ = _policies(_snapshot(CART).encode(b"another key entirely" * 2))
    meta = _error(handle(_request(), fetch, KEY))
    assert "HMAC" in meta["error"]


def test_handle_policy_fetch_failure_is_an_error_reply(cold_instance):
    def fetch(ref: str) -> bytes:
        raise FileNotFoundError(ref)

    meta = _error(handle(_request(), fetch, KEY))
    assert "FileNotFoundError" in meta["error"]


def test_handle_keeps_only_the_newest_policy(cold_instance):
    fetch, fetched = _policies(_snapshot(CART).encode(KEY))
    for ref in ("P1", "P2", "P1"):
        _decode(handle(_request(policy=ref), fetch, KEY))
    assert fetched == ["P1", "P2", "P1"]
    assert list(rollout_mod._POLICY) == ["P1"]


def test_several_environments_per_function_each_give_the_fragment_they_would_alone():
    """``envs_per_function``: one function steps E environments with one batched forward pass per step; each
    fragment equals the one-environment rollout with that environment's seed and carried episode."""
    spec, snap = EnvSpec("Pendulum-v1"), _snapshot(PolicyArch(3, 1, False, (64, 64)))
    seeds = [123, 7, 99]
    alone = [_run(spec, snap, 50, s) for s in seeds]
    carry = alone[1].meta["carry"]
    envs = [make_env(spec) for _ in range(3)]
    together = rollout_mod.rollout_many(envs, snap, snap.numpy_policy(), 50, seeds, 0.99, [None, carry, None])
    continued = _run(spec, snap, 50, seeds[1], carry=carry)
    for got, want in zip(together, [alone[0], continued, alone[2]], strict=True):
        for name in Fragment._STEP_ARRAYS:
            np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-5, atol=1e-5)
        assert got.last_value == pytest.approx(want.last_value, abs=1e-5)


def test_a_function_of_several_environments_replies_with_one_fragment_each():
    spec, snap = EnvSpec("CartPole-v1"), _snapshot(CART)
    key = b"k" * 32
    blob = snap.encode(key)
    request = {"id": "r1-train-0", "kind": "train", "attempt": 0, "policy": "p", "env": spec.to_json(), "seed": 5,
               "gamma": 0.99, "steps": 40, "carries": [None] * 4, "env_seeds": [5, 6, 7, 8]}
    arrays, meta = _decode(handle(json.dumps(request).encode(), lambda ref: blob, key), key=key)
    frags = Fragment.many_from_wire(arrays, meta, 40, CART, envs=4, version=0)
    assert len(frags) == 4 and all(f.obs.shape == (40, 4) for f in frags)
    assert len({f.obs[0].tobytes() for f in frags}) == 4  # four environments, four seeds
    assert all(f.meta["carry"] is not None for f in frags)  # each returns its episode in progress
    with pytest.raises(wire.WireError, match="3 fragments"):
        Fragment.many_from_wire(arrays, meta, 40, CART, envs=3)
    with pytest.raises(wire.WireError, match="unexpected arrays"):
        Fragment.many_from_wire({**arrays, "e9/obs": arrays["e0/obs"]}, meta, 40, CART, envs=4)


@pytest.mark.parametrize("env_seeds", [None, [5, 6], [6, 5, 7, 8], "5678"])
def test_a_request_of_several_environments_needs_each_ones_seed(env_seeds):
    request = {"id": "r1-train-0", "kind": "train", "policy": "p", "env": EnvSpec("CartPole-v1").to_json(),
               "seed": 5, "gamma": 0.99, "steps": 40, "carries": [None] * 4}
    if env_seeds is not None:
        request["env_seeds"] = env_seeds
    with pytest.raises(ValueError, match="env_seeds"):
        Request.from_json(request)


def test_grouping_actors_into_functions_changes_no_sample(cold_instance):
    """Round 3's requests of 2 functions × 4 environments hold the seeds of 8 one-environment functions, actor
    ``s·4 + e`` in both; so each environment's fragment is the one its one-environment function samples (up to
    the rounding of the batched forward pass)."""
    spec, snap = EnvSpec("Pendulum-v1"), _snapshot(PEND)
    blob = snap.encode(KEY)
    requests = Requests(spec, seed=11, gamma=0.99, faults=FaultPlan({}))
    one = [requests.make("train", "p", 3, slot, 0, steps=30) for slot in range(8)]
    four = [requests.make("train", "p", 3, slot, 0, steps=30, carries=(None,) * 4) for slot in range(2)]
    assert [r.seed for r in one] == [s for r in four for s in r.seeds]

    def fragments(req: Request, envs: int) -> list[Fragment]:
        arrays, meta = _decode(handle(req.encode(), lambda ref: blob, KEY), req.id)
        return Fragment.many_from_wire(arrays, meta, 30, PEND, envs=envs, version=0)

    alone = [f for req in one for f in fragments(req, 1)]
    grouped = [f for req in four for f in fragments(req, 4)]
    for got, want in zip(grouped, alone, strict=True):
        for name in Fragment._STEP_ARRAYS:
            np.testing.assert_allclose(getattr(got, name), getattr(want, name), rtol=1e-5, atol=1e-5, err_msg=name)


HOSTILE = ["x", None, [1], {"a": 1}, -1, 1.5, True, float("nan"), 10**30]


@pytest.mark.parametrize("envs", [1, 2])
def test_a_signed_reply_with_any_header_field_forged_is_a_good_or_a_failed_attempt_never_a_crash(cold_instance, envs):
    """A reply signed with its invocation's key (a function of the run's own code, gone wrong) whose header field,
    or a fragment's own header, holds any JSON value: the backend and the sampler's decoding accept it or refuse it
    as a bad reply; nothing else is raised."""
    from minionsrl.backends.base import InvocationRecord, make_reply

    fetch, _ = _policies(_snapshot(CART).encode(KEY))
    reply_key = wire.invocation_key(KEY, "r1-train-0")
    seeds = {} if envs == 1 else {"env_seeds": [5, 6], "carries": [None, None]}
    arrays, meta = wire.decode(handle(_request(**seeds), fetch, KEY), reply_key)
    paths = [(name,) for name in meta] + [("fragments", 0, name) for name in (meta.get("fragments") or [{}])[0]]
    paths += [("timings", name) for name in meta["timings"]] + [("instance", name) for name in meta["instance"]]
    for path in paths:
        for value in HOSTILE:
            forged = json.loads(json.dumps(meta))
            *parents, last = path
            node = forged
            for step in parents:
                node = node[step]
            node[last] = value
            record = InvocationRecord("r1-train-0", "train", duration_s=60.0)
            reply = make_reply(record, wire.encode(arrays, forged, reply_key), KEY)
            if reply.ok:
                with contextlib.suppress(wire.WireError):
                    Fragment.many_from_wire(reply.arrays, reply.meta, 32, CART, envs, version=None)
            else:
                assert record.error, (path, value)
