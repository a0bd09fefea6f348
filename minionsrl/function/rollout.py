"""The rollout function: the unit of work a serverless platform runs.

``handle(request, fetch_policy, key)`` is the whole contract. The request is a
:class:`~minionsrl.function.request.Request`'s JSON; the reply is a
:mod:`minionsrl.function.wire` message signed for that invocation only. Between calls a warm instance
keeps its environments and the last policy it loaded in module globals, exactly as a warm Lambda keeps
its globals; a cold one builds them and says so in its timings. Every invocation resets its environment
with its own seed, so a fragment depends only on (policy, env, seed, steps) and never on which instance
ran it.

No learner framework here: inference is NumPy (see :mod:`minionsrl.function.numpy_policy`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from threadpoolctl import threadpool_limits

from minionsrl.function import clock, faults, wire
from minionsrl.function.envs import capture_episode, make_env, start_episode
from minionsrl.function.fragment import ENV_FAULT, Fragment, Instance, PolicySnapshot, ReplyMeta, Timings
from minionsrl.function.normalization import Moments, ObsNormalizer
from minionsrl.function.numpy_policy import NumpyPolicy, choose_action, exploration_noise
from minionsrl.function.request import EVAL_MAX_STEPS, Carry, Request

# A function has about one vCPU: BLAS threads beyond one only contend (measured on the CNN's matmuls on
# 2 shared cores: 1.3 ms per step with one OpenBLAS thread, 30-50 ms with two; docs/BENCHMARKS.md §4).
threadpool_limits(1, "blas")

# Warm state of this instance (module globals survive between invocations, like a warm Lambda).
_ENVS: dict[str, gym.Env] = {}
_POLICY: dict[str, tuple[PolicySnapshot, NumpyPolicy, float]] = {}  # and the own-instance seconds its load took
_SERVED = [0]  # invocations this instance has answered: 0 means this one is its cold start


def close_envs() -> None:
    """Close this instance's environments (an env may hold a simulator process), as a platform retires it."""
    while _ENVS:
        _, env = _ENVS.popitem()
        with contextlib.suppress(Exception):  # a broken close must not keep the others open
            env.close()


def rollout(env: gym.Env, snapshot: PolicySnapshot, policy: NumpyPolicy, steps: int, seed: int,
            gamma: float, carry: Carry | None = None) -> Fragment:
    """Run ``steps`` steps of the stochastic policy, seeded with ``seed`` (one environment).

    The env is reset with ``seed``; if ``carry`` holds an episode captured at the end of a previous
    fragment, that episode continues from it. Episodes cut by a time limit record V(final obs) in
    ``trunc_values``; the fragment's own cut is bootstrapped with ``last_value``, and the episode in
    progress is returned in ``fragment.meta["carry"]`` where the env supports it.

    The discounted return whose moments feed the reward scaler is Gymnasium's ``NormalizeReward``
    recurrence, ``d = d·γ·(1 − terminated) + r``: a termination restarts it, a time-limit truncation does
    not, and it travels in the carry (``disc_return``).

    Where the env separates the learning signal from the game (Atari: ``info["raw_reward"]`` and
    ``info["game_over"]``), rewards and terminations are the learning signal and the reported
    episode returns are full games of raw rewards. Image observations stay uint8 throughout.
    """
    return rollout_many([env], snapshot, policy, steps, [seed], gamma, [carry])[0]


def rollout_many(envs: list[gym.Env], snapshot: PolicySnapshot, policy: NumpyPolicy, steps: int, seeds: list[int],
                 gamma: float, carries: list[Carry | None]) -> list[Fragment]:
    """:func:`rollout` of several environments in lockstep, one fragment each: every step runs the policy
    once on all their observations (batched inference: one matmul, or one im2col per convolution, for
    all of them). Each environment has its own seed, noise and carried episode."""
    normalize = ObsNormalizer(snapshot.obs_mean, snapshot.obs_var, snapshot.clip_obs, policy.arch.image)
    tracks = [_Track(env, policy, normalize, steps, seed, carry) for env, seed, carry in
              zip(envs, seeds, carries, strict=True)]
    for t in range(steps):
        xs = [track.observe(t) for track in tracks]
        if len(tracks) == 1:  # one observation: the unbatched forward pass (bit-identical to before)
            head, value = policy.forward(xs[0])
            heads, values = head[None], np.asarray(value)[None]
        else:
            heads, values = policy.forward(np.stack(xs))
        for track, head, value in zip(tracks, heads, values, strict=True):
            track.act(t, head, value, gamma)
    return [track.fragment(snapshot.version) for track in tracks]


class _Track:
    """One environment's fragment in the making: its noise, buffers and episode in progress."""

    def __init__(self, env: gym.Env, policy: NumpyPolicy, normalize: ObsNormalizer, steps: int, seed: int,
                 carry: Carry | None) -> None:
        arch = policy.arch
        self.env, self.policy, self.normalize, self.arch = env, policy, normalize, arch
        rng = np.random.default_rng(seed)
        # the whole fragment's exploration noise in one draw
        self.noise = exploration_noise(rng, (steps, arch.action_dim), arch.discrete, policy.std)
        self.low = self.high = None  # a continuous action's bounds, for the env
        if not arch.discrete:
            self.low = np.asarray(env.action_space.low, dtype=np.float32)
            self.high = np.asarray(env.action_space.high, dtype=np.float32)
        # Image stacks are stored as they come (uint8, one write per step); vectors normalised to float32.
        self.obs_buf = np.empty((steps, *arch.step_obs_shape), dtype=np.uint8 if arch.image else np.float32)
        self.raw_obs = np.empty((steps, arch.obs_dim), dtype=np.float64) if normalize.enabled else None
        self.heads = np.empty((steps, arch.action_dim), dtype=np.float32)
        self.actions = (np.empty((steps,), dtype=np.int64) if arch.discrete
                        else np.empty((steps, arch.action_dim), np.float32))
        self.values = np.empty(steps, dtype=np.float32)
        self.rewards = np.empty(steps, dtype=np.float32)
        self.terminated = np.zeros(steps, dtype=np.bool_)
        self.truncated = np.zeros(steps, dtype=np.bool_)
        self.trunc_values = np.zeros(steps, dtype=np.float32)
        self.disc_returns = np.empty(steps, dtype=np.float64)
        self.ep_returns: list[float] = []
        self.ep_lengths: list[int] = []
        self.obs = start_episode(env, seed, None if carry is None else carry["env"])
        self.ep_ret, self.ep_len, self.disc = 0.0, 0, 0.0
        if carry is not None:
            if self.obs is None:
                self.obs = np.asarray(carry["obs"], dtype=env.observation_space.dtype)
            self.ep_ret, self.ep_len = float(carry["ep_return"]), int(carry["ep_length"])
            self.disc = float(carry["disc_return"])

    def observe(self, t: int) -> np.ndarray:
        """The policy's input at step ``t`` (and the raw observation, for the normaliser's moments)."""
        try:
            if self.raw_obs is not None:
                self.raw_obs[t] = self.obs
            self.obs_buf[t] = x = self.normalize(self.obs)
        except ValueError as exc:  # NumPy's broadcast error, said as what the env did
            if np.shape(self.obs) == self.obs_buf.shape[1:]:
                raise
            raise ValueError(f"{ENV_FAULT} an observation of shape {np.shape(self.obs)} at step {t} of the fragment, "
                             f"not its observation space's {self.obs_buf.shape[1:]}; make its reset() and step() "
                             "return observations of that shape") from exc
        return x

    def act(self, t: int, head: np.ndarray, value: float, gamma: float) -> None:
        """Sample the action from the policy's ``head``, step the env and record the step."""
        self.heads[t], self.values[t] = head, value
        action, env_action = choose_action(head, self.noise[t], self.arch.discrete, self.low, self.high)
        if self.arch.discrete:
            env_action = int(env_action)
        self.actions[t] = action
        self.obs, reward, term, trunc, info = self.env.step(env_action)
        with np.errstate(over="ignore", invalid="ignore"):  # a reward past float32 is the reply check's to report
            self.rewards[t] = reward
        # the reward scaler's discounted return, exactly as Gymnasium's NormalizeReward (CleanRL's) keeps it:
        # a termination restarts it (from this step's reward on); a time-limit truncation does not
        self.disc = self.disc * gamma * (1.0 - float(term)) + reward
        self.disc_returns[t] = self.disc
        self.ep_ret += info.get("raw_reward", reward)
        self.ep_len += 1
        if term or trunc:
            self.terminated[t], self.truncated[t] = term, trunc and not term
            if self.truncated[t]:
                self.trunc_values[t] = self.policy.forward(self.normalize(self.obs))[1]
            if info.get("game_over", True):
                self.ep_returns.append(self.ep_ret)
                self.ep_lengths.append(self.ep_len)
                self.ep_ret, self.ep_len = 0.0, 0
            self.obs, _ = self.env.reset()

    def fragment(self, version: int) -> Fragment:
        """The finished fragment, bootstrapped with the value of the observation after its last step."""
        last_obs = self.normalize(self.obs)
        last_value = float(self.policy.forward(last_obs)[1])
        env_state = capture_episode(self.env)
        next_carry: Carry | None = None if env_state is None else {
            "env": env_state, "obs": None if self.arch.image else np.asarray(self.obs).tolist(),
            "ep_return": self.ep_ret, "ep_length": self.ep_len, "disc_return": self.disc}
        return Fragment(
            obs=self.obs_buf, actions=self.actions, logprobs=self.policy.log_prob(self.heads, self.actions),
            values=self.values, rewards=self.rewards, terminated=self.terminated, truncated=self.truncated,
            trunc_values=self.trunc_values, last_value=last_value, last_obs=np.asarray(last_obs)[None],
            episode_returns=np.asarray(self.ep_returns, dtype=np.float64),
            episode_lengths=np.asarray(self.ep_lengths, dtype=np.int64),
            obs_moments=Moments.of(self.raw_obs) if self.raw_obs is not None else None,
            ret_moments=Moments.of(self.disc_returns), policy_version=version, meta={"carry": next_carry},
        )


def evaluate(env: gym.Env, snapshot: PolicySnapshot, policy: NumpyPolicy, episodes: int,
             seed: int, choose: Callable[[Any], Any] | None = None,
             max_steps: int = EVAL_MAX_STEPS) -> tuple[np.ndarray, np.ndarray]:
    """Run ``episodes`` full episodes (full games, raw rewards; episode ``i`` reset with ``seed + i``) with the
    deterministic policy, or the actions ``choose`` picks for each raw observation; return (returns, lengths).
    An episode still running after ``max_steps`` steps (an env without a time limit) is cut there."""
    normalize = ObsNormalizer(snapshot.obs_mean, snapshot.obs_var, snapshot.clip_obs, policy.arch.image)
    returns, lengths = np.zeros(episodes), np.zeros(episodes, dtype=np.int64)
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            if choose is not None:
                action: Any = choose(obs)
            else:
                action = _greedy(policy, normalize(obs), env)
            obs, reward, term, trunc, info = env.step(action)
            returns[ep] += info.get("raw_reward", reward)
            lengths[ep] += 1
            done = ((term or trunc) and info.get("game_over", True)) or lengths[ep] >= max_steps
    return returns, lengths


def _greedy(policy: NumpyPolicy, x: np.ndarray, env: gym.Env) -> Any:
    """The deterministic action for a normalised observation: the argmax, or the mean clipped to the bounds."""
    head, _ = policy.forward(x)
    if policy.arch.discrete:
        return int(choose_action(head, 0.0, True, None, None)[1])
    return choose_action(head, 0.0, False, env.action_space.low, env.action_space.high)[1]


def _instance() -> Instance:
    """Which instance serves this invocation, and how many it served before (pid read now: platforms fork)."""
    served, _SERVED[0] = _SERVED[0], _SERVED[0] + 1
    return {"id": f"{socket.gethostname()}-{os.getpid()}", "served": served}


def handle(request: bytes, fetch_policy: Callable[[str], bytes], key: bytes) -> bytes:
    """Serve one invocation: parse the JSON request, run it, return an authenticated reply.

    ``key`` is the run key: the policy is checked with it, and the reply is signed with the invocation's
    own key (:func:`~minionsrl.function.wire.invocation_key` of the request's id), so it is accepted for
    this invocation only. Failures become an ``error`` reply carrying the traceback, so the caller can count
    and retry. A request may carry an injected fault (:mod:`minionsrl.function.faults`), which the function
    enacts itself.
    """
    cpu0, t0, w0 = time.process_time(), time.perf_counter(), clock.thread_wait_s()
    invocation_id = "?"
    try:
        raw = json.loads(request)
        invocation_id = str(raw["id"]) if isinstance(raw, dict) and "id" in raw else "?"  # signs even an error
        req = Request.from_json(raw)
        reply_key = wire.invocation_key(key, invocation_id)
        faults.before_work(req)
        n_envs = req.envs
        env_key = json.dumps(req.env.to_json(), sort_keys=True)
        keys = [env_key] + [f"{env_key}#{e}" for e in range(1, n_envs)]  # a warm instance keeps all of them
        env_built = any(k not in _ENVS for k in keys)
        for k in keys:
            if k not in _ENVS:
                _ENVS[k] = make_env(req.env)
        envs = [_ENVS[k] for k in keys]
        policy_fetched = req.policy not in _POLICY
        bytes_fetched = 0
        if policy_fetched:
            load_t0, load_w0 = time.perf_counter(), clock.thread_wait_s()
            blob = fetch_policy(req.policy)
            bytes_fetched = len(blob)
            snapshot = PolicySnapshot.decode(blob, key)
            _POLICY.clear()  # keep only the newest policy
            _POLICY[req.policy] = (snapshot, snapshot.numpy_policy(),
                                      clock.own_s(time.perf_counter() - load_t0, clock.thread_wait_s() - load_w0))
        snapshot, policy, load_s = _POLICY[req.policy]
        t1, w1 = time.perf_counter(), clock.thread_wait_s()
        meta: ReplyMeta = {"id": invocation_id, "env_built": env_built, "policy_fetched": policy_fetched,
                                "policy_bytes": bytes_fetched, "instance": _instance()}
        if req.kind == "train":
            fragments = rollout_many(envs, snapshot, policy, req.steps, list(req.seeds), req.gamma,
                                     list(req.carries))
            arrays_reply = None
        else:
            rets, lens = evaluate(envs[0], snapshot, policy, req.episodes, req.seed, max_steps=req.max_steps)
            arrays_reply = {"episode_returns": rets, "episode_lengths": lens}
        t2, w2 = time.perf_counter(), clock.thread_wait_s()
        meta["timings"] = Timings(init_s=t1 - t0, run_s=t2 - t1, cpu_s=time.process_time() - cpu0,
                                  init_wait_s=w1 - w0, run_wait_s=w2 - w1,
                                  reused_policy_s=0.0 if policy_fetched else load_s).to_json()
        if arrays_reply is None:
            reply = Fragment.encode_many(fragments, meta, reply_key)
        else:
            reply = wire.encode(arrays_reply, {**meta, "type": "eval"}, reply_key)
        return faults.corrupt_reply(req, reply, reply_key)
    except (Exception, SystemExit) as exc:  # an env that calls sys.exit() fails its invocation, not its instance
        message = (f"the env called sys.exit({exc.code!r})" if isinstance(exc, SystemExit)
                   else f"{type(exc).__name__}: {exc}")
        return wire.encode({}, {"type": "error", "id": invocation_id, "error": message,
                                "traceback": traceback.format_exc(limit=8)}, wire.invocation_key(key, invocation_id))
