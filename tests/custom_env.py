"""Tiny environments used as ``custom_env:ClassName`` entry points by the tests."""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np


class CounterEnv(gym.Env):
    """Observation ``[t / length, last action]``; reward 1 per step; terminates after ``length`` steps.

    ``sleep_s`` > 0 makes every step sleep that long (a hung function for timeout tests);
    ``exit_code`` set makes the first step end the process with that code (a function that dies);
    ``kill_parent`` makes the first step SIGKILL the process that started this one (on Lithops localhost:
    the worker process that runs the calls, so the call's own process is orphaned and writes nothing);
    ``announce`` prints a line on every step (a chatty function).
    """

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(self, length: int = 10, sleep_s: float = 0.0, exit_code: int | None = None,
                 announce: bool = False, kill_parent: bool = False, render_mode: str | None = None) -> None:
        self.kill_parent = kill_parent
        self.announce = announce
        self.length = int(length)
        self.sleep_s = float(sleep_s)
        self.exit_code = exit_code
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(-1.0, 2.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self.t = 0

    def _obs(self, action: int = 0) -> np.ndarray:
        return np.array([self.t / self.length, float(action)], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if self.exit_code is not None:
            os._exit(self.exit_code)
        if self.kill_parent:
            os.kill(os.getppid(), signal.SIGKILL)
            os._exit(1)
        if self.sleep_s > 0:
            time.sleep(self.sleep_s)
        if self.announce:
            print(f"step {self.t}", flush=True)
        self.t += 1
        return self._obs(int(action)), 1.0, self.t >= self.length, False, {}


class BoxActionEnv(gym.Env):
    """A continuous-action env with a 3-D observation and 2-D action in [-2, 2]."""

    def __init__(self) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float64)
        self.action_space = gym.spaces.Box(-2.0, 2.0, shape=(2,), dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(3), {}

    def step(self, action):
        return np.ones(3), -float(np.sum(np.square(action))), False, False, {}


NOT_AN_ENV = 42  # an attribute that exists but is not an environment class


class CarelessEnv(CounterEnv):
    """Reads a credential from the environment variable ``MINIONSRL_TEST_SECRET`` (as envs should) and then
    fails every step with an error that quotes it (as envs should not): minionsrl must not pass it on."""

    def step(self, action):
        secret = os.environ.get("MINIONSRL_TEST_SECRET", "")
        raise RuntimeError(f"login failed: password={secret}, api_key: {secret}, Authorization: Bearer {secret}")


class NoRenderModeEnv(gym.Env):
    """An env whose constructor takes no ``render_mode`` (many hand-written ones): built from a registered id,
    it must not be given ``render_mode=None``."""

    def __init__(self, length: int = 5) -> None:
        self.length = int(length)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t / self.length], dtype=np.float32), 1.0, self.t >= self.length, False, {}


class WrongShapeEnv(CounterEnv):
    """Its observations do not fit its observation space."""

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(5, dtype=np.float32), {}


# a module that registers an id on import: ``custom_env:NoRender-v0`` (Gymnasium's module:id form) reaches it in
# every rollout function, which imports the module too
gym.register("NoRender-v0", entry_point=NoRenderModeEnv, max_episode_steps=50)


class HeldPendulum(gym.Env):
    """Pendulum held by a class of its own (not a Gymnasium ``Wrapper``: its unwrapped env is itself), the way a
    user wraps a classic env; minionsrl carries its episodes through the one env it holds."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(self, render_mode: str | None = None) -> None:
        self.pendulum = gym.make("Pendulum-v1")
        self.observation_space, self.action_space = self.pendulum.observation_space, self.pendulum.action_space
        self.reset, self.step = self.pendulum.reset, self.pendulum.step  # every call goes to the env it holds


class StatefulCounter(CounterEnv):
    """CounterEnv with the episode-state protocol: its step count carried across rounds."""

    def get_episode_state(self) -> dict:
        return {"t": self.t}

    def set_episode_state(self, state: dict) -> None:
        self.t = int(state["t"])


class UnreadableState(CounterEnv):
    """The protocol with a state that is not plain JSON (a NumPy array): bad input, said before any work."""

    def get_episode_state(self) -> dict:
        return {"t": np.array([self.t])}

    def set_episode_state(self, state: dict) -> None:
        self.t = int(state["t"][0])
