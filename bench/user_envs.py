"""Two envs as a user would write them, for the benchmarks that check what ``plan`` and a run say of an env nobody
here tuned for (``bench/priced_as.py``): one that burns CPU, one that waits.

* ``bench.user_envs:Reach`` — a two-link planar arm reaching a target, integrated with many small sub-steps in
  NumPy (about 1 ms of CPU a step here), 200-step episodes it ends itself; it carries its episodes by the
  ``get_episode_state`` / ``set_episode_state`` protocol.
* ``bench.user_envs:SlowPendulum`` — Pendulum-v1 held in a class of its own whose every step waits ``wait_ms``
  (a remote simulator's round trip) without burning CPU; minionsrl carries its episodes through the env it holds.
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


class Reach(gym.Env):
    """Torques on a two-link arm; reward: minus the hand's distance to the target, minus a little effort."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute
    SUBSTEPS = 60  # the integration's small steps a control step (its CPU cost)
    DT = 0.05 / SUBSTEPS
    LENGTH = 200

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(8,), dtype=np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.q, self.qd, self.target, self.t = np.zeros(2), np.zeros(2), np.zeros(2), 0

    def _hand(self) -> np.ndarray:
        a = np.cumsum(self.q)
        return np.array([np.cos(a).sum(), np.sin(a).sum()]) * 0.5

    def _obs(self) -> np.ndarray:
        return np.concatenate([np.cos(self.q), np.sin(self.q), self.qd * 0.1, self.target - self._hand()])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.q = self.np_random.uniform(-np.pi, np.pi, 2)
        self.qd = np.zeros(2)
        angle, radius = self.np_random.uniform(-np.pi, np.pi), self.np_random.uniform(0.2, 0.95)
        self.target = radius * np.array([np.cos(angle), np.sin(angle)])
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        torque = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        for _ in range(self.SUBSTEPS):  # a damped arm with gravity-free coupled links
            coupling = np.array([[2.0 + np.cos(self.q[1]), 0.5 + 0.5 * np.cos(self.q[1])],
                                 [0.5 + 0.5 * np.cos(self.q[1]), 0.5]])
            qdd = np.linalg.solve(coupling, 4.0 * torque - 0.5 * self.qd)
            self.qd = self.qd + self.DT * qdd
            self.q = self.q + self.DT * self.qd
        self.t += 1
        distance = float(np.linalg.norm(self.target - self._hand()))
        return self._obs(), -distance - 0.01 * float(torque @ torque), False, self.t >= self.LENGTH, {}

    def get_episode_state(self) -> dict:
        return {"q": self.q.tolist(), "qd": self.qd.tolist(), "target": self.target.tolist(), "t": self.t}

    def set_episode_state(self, state: dict) -> None:
        self.q, self.qd = np.array(state["q"]), np.array(state["qd"])
        self.target, self.t = np.array(state["target"]), int(state["t"])


class SlowPendulum(gym.Env):
    """Pendulum-v1 whose every step waits ``wait_ms`` for a reply from elsewhere."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(self, wait_ms: float = 10.0, render_mode: str | None = None) -> None:
        self.inner = gym.make("Pendulum-v1")
        self.wait_s = wait_ms / 1000.0
        self.observation_space, self.action_space = self.inner.observation_space, self.inner.action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        return self.inner.reset(seed=seed)

    def step(self, action):
        time.sleep(self.wait_s)
        return self.inner.step(action)
