"""The rollout function: the unit of work a serverless platform runs.

``handle(request, fetch_policy, key)`` is the whole contract. The request is JSON; the reply is a
:mod:`minionsrl.function.wire` message. Between calls a warm instance keeps its environments and the last
policy it loaded in module globals, exactly as a warm Lambda keeps its globals; a cold one builds
them and says so in its timings. Every invocation resets its environment with its own seed, so a
fragment depends only on (policy, env, seed, steps) and never on which instance ran it.

No torch here: inference is NumPy (see :mod:`minionsrl.function.numpy_policy`).
"""

from __future__ import annotations

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

from minionsrl.function import faults, wire
from minionsrl.function.envs import EnvSpec, capture_episode, make_env, restore_episode
from minionsrl.function.fragment import Fragment, PolicySnapshot, Timings
from minionsrl.function.normalization import Moments
from minionsrl.function.numpy_policy import NumpyPolicy

# A function has about one vCPU: BLAS threads beyond one only contend (measured on the CNN's matmuls on
# 2 shared cores: 1.3 ms per step with one OpenBLAS thread, 30-50 ms with two; docs/BENCHMARKS.md §4).
threadpool_limits(1, "blas")

# Warm state of this instance (module globals survive between invocations, like a warm Lambda).
_ENVS: dict[str, gym.Env] = {}
_POLICY: dict[str, tuple[PolicySnapshot, NumpyPolicy]] = {}
_SERVED = [0]  # invocations this instance has answered: 0 means this one is its cold start


class _ObsNormalizer:
    """Frozen normalisation with the round's published statistics (float32 identity when disabled); image
    stacks pass through as they come (uint8: the network scales them)."""

    def __init__(self, snapshot: PolicySnapshot, image: bool) -> None:
        self.enabled = snapshot.obs_mean is not None
        self.image = image
        if image and self.enabled:
            raise ValueError("image observations are not normalised with running statistics")
        if self.enabled:
            self.mean = snapshot.obs_mean
            self.inv_std = 1.0 / np.sqrt(snapshot.obs_var + 1e-8)
            self.clip = snapshot.clip_obs

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self.image:
            return obs
        if not self.enabled:
            return np.asarray(obs, dtype=np.float32)
        return np.clip((obs - self.mean) * self.inv_std, -self.clip, self.clip).astype(np.float32)


def rollout(env: gym.Env, snapshot: PolicySnapshot, policy: NumpyPolicy, steps: int, seed: int,
            gamma: float, carry: dict[str, Any] | None = None) -> Fragment:
    """Run ``steps`` steps of the stochastic policy, seeded with ``seed``.

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
    arch = policy.arch
    rng = np.random.default_rng(seed)
    normalize = _ObsNormalizer(snapshot, arch.image)
    # Noise for the whole fragment in one call: Gaussian for continuous, Gumbel-max for discrete.
    noise = rng.gumbel(size=(steps, arch.action_dim)) if arch.discrete else rng.standard_normal(
        (steps, arch.action_dim))
    if not arch.discrete:
        noise = (noise * policy.std).astype(np.float32)
        low = np.asarray(env.action_space.low, dtype=np.float32)
        high = np.asarray(env.action_space.high, dtype=np.float32)

    # Image stacks are stored as they come (uint8, one write per step); vectors normalised to float32.
    obs_buf = np.empty((steps, *arch.step_obs_shape), dtype=np.uint8 if arch.image else np.float32)
    raw_obs = np.empty((steps, arch.obs_dim), dtype=np.float64) if normalize.enabled else None
    heads = np.empty((steps, arch.action_dim), dtype=np.float32)
    actions = np.empty((steps,), dtype=np.int64) if arch.discrete else np.empty((steps, arch.action_dim), np.float32)
    values = np.empty(steps, dtype=np.float32)
    rewards = np.empty(steps, dtype=np.float32)
    terminated = np.zeros(steps, dtype=np.bool_)
    truncated = np.zeros(steps, dtype=np.bool_)
    trunc_values = np.zeros(steps, dtype=np.float32)
    disc_returns = np.empty(steps, dtype=np.float64)
    ep_returns: list[float] = []
    ep_lengths: list[int] = []

    obs, _ = env.reset(seed=seed)
    ep_ret, ep_len, disc = 0.0, 0, 0.0
    if carry is not None:
        restored = restore_episode(env, carry["env"])
        obs = restored if restored is not None else np.asarray(carry["obs"], dtype=env.observation_space.dtype)
        ep_ret, ep_len, disc = float(carry["ep_return"]), int(carry["ep_length"]), float(carry["disc_return"])
    for t in range(steps):
        if raw_obs is not None:
            raw_obs[t] = obs
        x = normalize(obs)
        head, value = policy.forward(x)
        obs_buf[t], heads[t], values[t] = x, head, value
        if arch.discrete:
            action = int(np.argmax(head + noise[t]))
            env_action: Any = action
        else:
            action = head + noise[t]
            env_action = np.clip(action, low, high)
        actions[t] = action
        obs, reward, term, trunc, info = env.step(env_action)
        rewards[t] = reward
        # the reward scaler's discounted return, exactly as Gymnasium's NormalizeReward (CleanRL's) keeps it:
        # a termination restarts it (from this step's reward on); a time-limit truncation does not
        disc = disc * gamma * (1.0 - float(term)) + reward
        disc_returns[t] = disc
        ep_ret += info.get("raw_reward", reward)
        ep_len += 1
        if term or trunc:
            terminated[t], truncated[t] = term, trunc and not term
            if truncated[t]:
                trunc_values[t] = policy.forward(normalize(obs))[1]
            if info.get("game_over", True):
                ep_returns.append(ep_ret)
                ep_lengths.append(ep_len)
                ep_ret, ep_len = 0.0, 0
            obs, _ = env.reset()
    last_obs = normalize(obs)
    last_value = float(policy.forward(last_obs)[1])
    env_state = capture_episode(env)
    next_carry = None if env_state is None else {
        "env": env_state, "obs": None if arch.image else np.asarray(obs).tolist(), "ep_return": ep_ret,
        "ep_length": ep_len, "disc_return": disc}
    return Fragment(
        obs=obs_buf, actions=actions, logprobs=policy.log_prob(heads, actions), values=values,
        rewards=rewards, terminated=terminated, truncated=truncated, trunc_values=trunc_values,
        last_value=last_value, last_obs=np.asarray(last_obs)[None], episode_returns=np.asarray(ep_returns,
                                                                                             dtype=np.float64),
        episode_lengths=np.asarray(ep_lengths, dtype=np.int64),
        obs_moments=Moments.of(raw_obs) if raw_obs is not None else None,
        ret_moments=Moments.of(disc_returns), policy_version=snapshot.version, meta={"carry": next_carry},
    )


def evaluate(env: gym.Env, snapshot: PolicySnapshot, policy: NumpyPolicy, episodes: int,
             seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Run ``episodes`` full episodes (full games, raw rewards) with the deterministic policy; return
    (returns, lengths)."""
    normalize = _ObsNormalizer(snapshot, policy.arch.image)
    returns, lengths = np.zeros(episodes), np.zeros(episodes, dtype=np.int64)
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            head, _ = policy.forward(normalize(obs))
            if policy.arch.discrete:
                action: Any = int(np.argmax(head))
            else:
                action = np.clip(head, env.action_space.low, env.action_space.high)
            obs, reward, term, trunc, info = env.step(action)
            returns[ep] += info.get("raw_reward", reward)
            lengths[ep] += 1
            done = (term or trunc) and info.get("game_over", True)
    return returns, lengths


def _instance() -> dict[str, Any]:
    """Which instance serves this invocation, and how many it served before (pid read now: platforms fork)."""
    served, _SERVED[0] = _SERVED[0], _SERVED[0] + 1
    return {"id": f"{socket.gethostname()}-{os.getpid()}", "served": served}


def handle(request: bytes, fetch_policy: Callable[[str], bytes], key: bytes) -> bytes:
    """Serve one invocation: parse the JSON request, run it, return an authenticated reply.

    Failures become an ``error`` reply carrying the traceback, so the caller can count and retry. A
    request may carry an injected fault (:mod:`minionsrl.function.faults`), which the function enacts itself.
    """
    cpu0, t0 = time.process_time(), time.perf_counter()
    invocation_id = "?"
    try:
        req = json.loads(request)
        invocation_id = str(req["id"])
        faults.before_work(req)
        spec = EnvSpec.from_json(req["env"])
        env_key = json.dumps(spec.to_json(), sort_keys=True)
        env_built = env_key not in _ENVS
        if env_built:
            _ENVS[env_key] = make_env(spec)
        env = _ENVS[env_key]
        policy_fetched = req["policy"] not in _POLICY
        bytes_fetched = 0
        if policy_fetched:
            blob = fetch_policy(req["policy"])
            bytes_fetched = len(blob)
            snapshot = PolicySnapshot.decode(blob, key)
            _POLICY.clear()  # keep only the newest policy
            _POLICY[req["policy"]] = (snapshot, snapshot.numpy_policy())
        snapshot, policy = _POLICY[req["policy"]]
        t1 = time.perf_counter()
        meta: dict[str, Any] = {"id": invocation_id, "env_built": env_built, "policy_fetched": policy_fetched,
                                "policy_bytes": bytes_fetched, "instance": _instance()}
        if req["kind"] == "train":
            fragment = rollout(env, snapshot, policy, int(req["steps"]), int(req["seed"]), float(req["gamma"]),
                               req.get("carry"))
            meta.update(fragment.meta)
            arrays_reply = None
        elif req["kind"] == "eval":
            rets, lens = evaluate(env, snapshot, policy, int(req["episodes"]), int(req["seed"]))
            arrays_reply = {"episode_returns": rets, "episode_lengths": lens}
        else:
            raise ValueError(f"unknown invocation kind {req['kind']!r}")
        t2 = time.perf_counter()
        meta["timings"] = Timings(init_s=t1 - t0, run_s=t2 - t1, cpu_s=time.process_time() - cpu0).to_json()
        if arrays_reply is None:
            reply = fragment.encode(meta, key)
        else:
            reply = wire.encode(arrays_reply, {**meta, "type": "eval"}, key)
        return faults.corrupt_reply(req, reply, key)
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"
        return wire.encode({}, {"type": "error", "id": invocation_id, "error": message,
                                "traceback": traceback.format_exc(limit=8)}, key)
