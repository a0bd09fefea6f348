"""Badly behaved environments for the hardening tests, as ``hostile_envs:ClassName`` entry points: they hang, never
end an episode, exit, or start a process of their own (a simulator)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

FOREVER_S = 3600.0


class _Tiny(gym.Env):
    """A 2-number observation, 2 actions, reward 1 per step; never terminates unless ``length`` is given."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(self, length: int | None = None) -> None:
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.length, self.t = length, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        done = self.length is not None and self.t >= self.length
        return np.zeros(2, np.float32), 1.0, done, False, {}


class EndlessEnv(_Tiny):
    """An episode that never ends, and no time limit."""


class HangingInitEnv(_Tiny):
    """A constructor that never returns."""

    def __init__(self) -> None:
        time.sleep(FOREVER_S)


class HangingStepEnv(_Tiny):
    """``step`` never returns once the file ``flag`` exists (always, without one)."""

    def __init__(self, flag: str = "", length: int = 20) -> None:
        super().__init__(length)
        self.flag = flag

    def step(self, action):
        if not self.flag or os.path.exists(self.flag):
            time.sleep(FOREVER_S)
        return super().step(action)


class ExitingEnv(_Tiny):
    """``step`` calls ``sys.exit(code)`` (or ends the process at once with ``os._exit(code)``, ``hard``)."""

    def __init__(self, code: int = 0, hard: bool = False) -> None:
        super().__init__(20)
        self.code, self.hard = code, hard

    def step(self, action):
        if self.hard:
            os._exit(self.code)
        sys.exit(self.code)


class SimulatorEnv(_Tiny):
    """Starts a child process (a simulator) in its constructor, writes its pid into the folder ``pids``, and stops it
    in ``close()``; ``step`` hangs once the file ``hang`` exists."""

    def __init__(self, pids: str, hang: str = "", length: int = 20) -> None:
        super().__init__(length)
        self.hang = hang
        self.simulator = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({FOREVER_S})"])
        Path(pids, str(self.simulator.pid)).touch()

    def step(self, action):
        if self.hang and os.path.exists(self.hang):
            time.sleep(FOREVER_S)
        return super().step(action)

    def close(self) -> None:
        self.simulator.kill()
        self.simulator.wait()


class LoudEnv(_Tiny):
    """Prints ``megabytes`` MB in its first step, between a first and a last line that say so."""

    def __init__(self, megabytes: float = 10.0) -> None:
        super().__init__(20)
        self.megabytes = megabytes

    def step(self, action):
        if self.t == 0:
            print("FIRST LINE")
            line = "x" * 1023
            for _ in range(int(self.megabytes * 1024)):
                print(line)
            print("LAST LINE", file=sys.stderr)
        return super().step(action)


class StampedEnv(_Tiny):
    """Sleeps ``sleep_s`` a step and keeps, in a file of its own in ``folder``, the wall-clock times (``time.time``)
    of its last reset and its last step: when each function ran, whatever the machine's load, to tell whether
    functions ran at the same time. Three actions, as the tests' counter policy has."""

    def __init__(self, folder: str, sleep_s: float = 0.05) -> None:
        super().__init__(None)
        self.action_space = gym.spaces.Discrete(3)
        self.sleep_s, self.path, self.start = sleep_s, Path(folder, f"{os.getpid()}-{id(self)}"), 0.0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.start = time.time()
        return super().reset(seed=seed, options=options)

    def step(self, action):
        time.sleep(self.sleep_s)
        self.path.write_text(f"{self.start} {time.time()}")
        return super().step(action)
