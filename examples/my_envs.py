"""A custom environment in a module of its own, so that every rollout function can import it.

Functions build their env in processes of their own (worker processes, Ray tasks, cloud functions): a class
defined in the training script, or an id it registers with ``gym.register``, would not exist there. Name the
class as ``env_id="my_envs:Corridor"``, or the id this module registers on import as ``"my_envs:Corridor-v0"``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    """Walk right along a corridor of ``length`` cells: +1 on reaching the end, -0.01 a step.

    Observation: the position in [0, 1]; actions: 0 left, 1 right. No ``render_mode`` argument: not needed."""

    def __init__(self, length: int = 8) -> None:
        self.length = int(length)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.pos = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.pos / self.length], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.pos = 0
        return self._obs(), {}

    def step(self, action):
        self.pos = max(0, self.pos + (1 if int(action) == 1 else -1))
        done = self.pos >= self.length
        return self._obs(), (1.0 if done else -0.01), done, False, {}


# importing this module registers the id (with a time limit): env_id="my_envs:Corridor-v0"
gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=100)
