"""Environment factory: Gymnasium ids and custom ``package.module:ClassName`` entry points.

This module is imported inside rollout functions, so it must stay free of the learner's framework.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import difflib
import importlib
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np

from minionsrl.errors import ConfigError, one_line
from minionsrl.function import clock
from minionsrl.function.extras import installed, missing_extra_error, require_extra


@dataclass(frozen=True)
class EnvInfo:
    """What the learner needs to know about an environment to build a policy for it."""

    obs_shape: tuple[int, ...]
    discrete: bool
    action_dim: int  # number of actions (discrete) or action vector size (continuous)
    action_low: tuple[float, ...] = ()
    action_high: tuple[float, ...] = ()
    family: str = "classic"  # "classic" | "mujoco" | "atari": picks the PPO preset
    carries: bool = True  # whether an episode in progress can be carried to the next round (capture_episode)
    episode_steps: int | None = None  # its time limit (the env's, or its inner env's), where it has one
    build_s: float = field(default=0.0, compare=False)  # the learner's check: seconds to build it ...
    step_s: float = field(default=0.0, compare=False)  # ... and to take a random step
    step_own_s: float = field(default=0.0, compare=False)  # the median step less its wait for a CPU here
    step_cpu_s: float = field(default=0.0, compare=False)  # ... and the process's CPU seconds of it


MAX_STEP_LATENCY_MS = 10_000.0  # ten seconds a step: past any simulator worth training against


@dataclass(frozen=True)
class EnvSpec:
    """A serialisable description of an environment: an id or entry point plus keyword args, and a latency added
    to every step (:class:`StepLatency`; 0: none)."""

    env_id: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    step_latency_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = {"id": self.env_id, "kwargs": dict(self.kwargs)}
        # only when set: requests (and warm instances' env keys) stay as they were without it
        return {**data, "step_latency_ms": self.step_latency_ms} if self.step_latency_ms else data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EnvSpec:
        return cls(env_id=str(data["id"]), kwargs=dict(data.get("kwargs", {})),
                   step_latency_ms=float(data.get("step_latency_ms", 0.0)))


class StepLatency(gym.Wrapper):
    """Every step waits ``latency_ms`` milliseconds, sleeping: an environment whose step waits on something
    remote (a simulator service, a game server, a model that judges the reward) without burning CPU here.

    Only the time changes: observations, rewards and the environment's random numbers are those of the wrapped
    env, so a seeded rollout is the same with and without it. Resets do not wait. On one machine, many rollout
    functions of such an env run side by side on a few cores (they sleep), as they would on their own
    instances in the cloud: what more actors buy when sampling, not computing, is the cost.
    """

    def __init__(self, env: gym.Env, latency_ms: float) -> None:
        super().__init__(env)
        if not (math.isfinite(latency_ms) and 0.0 <= latency_ms <= MAX_STEP_LATENCY_MS):
            raise ValueError(f"step latency {latency_ms!r} ms is not in 0..{MAX_STEP_LATENCY_MS:g}")
        self.latency_s = latency_ms / 1000.0

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        time.sleep(self.latency_s)
        return self.env.step(action)


def is_entry_point(env_id: str) -> bool:
    """``package.module:ClassName`` names a custom environment class rather than a registered id."""
    return ":" in env_id


def entry_point_class(env_id: str) -> type[gym.Env]:
    """The class a custom entry point ``package.module:ClassName`` names, checked to be a ``gymnasium.Env``
    subclass before anything of it is called (its module is imported: a custom entry point is code). Raise
    a one-line :class:`ConfigError` otherwise."""
    target = entry_point_target(env_id)
    if isinstance(target, str):
        raise ConfigError(f"env_id {env_id!r}: {target!r} is an id the module registers, not a class")
    return target


def entry_point_target(env_id: str) -> type[gym.Env] | str:
    """What ``package.module:Name`` names once its module is imported: a ``gymnasium.Env`` subclass (checked before
    anything of it is called), or the id of an env the module registers when imported (Gymnasium's own
    ``module:Env-v0`` form: the rollout functions import the module too, so the id exists there). Raise a
    one-line :class:`ConfigError` otherwise."""
    module_name, _, attr = env_id.partition(":")
    if not module_name or not attr or module_name.startswith("."):
        raise ConfigError(f"env_id {env_id!r}: write a custom env as package.module:ClassName")
    if module_name.partition(".")[0] == "__main__":
        raise ConfigError(f"env_id {env_id!r}: the rollout functions run in processes of their own, whose __main__ "
                          f"is not your script; {_move_into_module(attr)}")
    module = import_env_module(env_id, module_name)
    cls = getattr(module, attr, None)
    if cls is None:
        if attr in gym.registry:  # registered by the module on import (or already before it)
            return attr
        envs = sorted(n for n, v in vars(module).items()
                      if isinstance(v, type) and issubclass(v, gym.Env) and v.__module__ == module.__name__)
        defines = f"the gymnasium.Env subclasses {', '.join(envs)}" if envs else "no gymnasium.Env subclass"
        raise ConfigError(f"env_id {env_id!r}: module {module_name!r} has no attribute {attr!r} and registers no "
                          f"Gymnasium id {attr!r}; it defines {defines}")
    if not (isinstance(cls, type) and issubclass(cls, gym.Env)):
        raise ConfigError(f"env_id {env_id!r}: {attr!r} is not a gymnasium.Env subclass")
    return cls


def import_env_module(env_id: str, module_name: str) -> ModuleType:
    """Import the module of a custom entry point as Gymnasium would, and make sure the rollout workers can too.

    A module that is not on ``sys.path`` but sits in the current folder (``mymodule.py`` or ``mymodule/``) is
    imported from there: the ``minionsrl`` command, unlike ``python script.py``, does not put the current
    folder on ``sys.path``. The folder the module was imported from is then put on ``sys.path`` as an
    absolute path, which the backends hand to their workers (``PYTHONPATH`` for local worker processes and
    the private Ray cluster, the job's environment on Lithops localhost), so a module importable here is
    importable there without setting anything by hand. Otherwise raise a one-line :class:`ConfigError`
    that says what to set.
    """
    top = module_name.partition(".")[0]
    folders = [f or os.getcwd() for f in _SEARCHED.get()]
    try:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != top or not any(_add_folder_holding(top, f) for f in folders):
                raise
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == top and not folders:  # a run dir being loaded: its folder is not searched unasked
            raise ConfigError(
                f"env_id {env_id!r}: module {module_name!r} is not on the Python path, and a run being loaded "
                f"names code that is imported only from there; set PYTHONPATH=/folder/holding/{top} (the one "
                "training imported it from), or, if you trust the run, pass --trust-run-code (load_policy(..., "
                f"trust_run_code=True)) to import it from the run's folder or the current one (either may hold "
                f"a {top}.py of anyone's)") from exc
        if exc.name == top:
            raise ConfigError(
                f"env_id {env_id!r}: cannot import module {module_name!r}: no {top}.py or {top}/ in the current "
                f"folder ({os.getcwd()}) nor on the Python path; run from the folder that holds it, or set "
                f"PYTHONPATH=/folder/holding/{top} (the rollout workers get it too), or pip install it"
            ) from exc
        raise _import_failed(env_id, module_name, exc) from exc
    except Exception as exc:  # whatever the module raises while importing
        raise _import_failed(env_id, module_name, exc) from exc
    _export_folder(top)
    return module


def _import_failed(env_id: str, module_name: str, exc: BaseException) -> ConfigError:
    return ConfigError(f"env_id {env_id!r}: cannot import module {module_name!r} ({type(exc).__name__}: {exc}); "
                       "fix the module, or install what it imports")


# The folders a custom entry point's module may be imported from when it is not on sys.path: "" is the current
# folder (training: the user's own config names it); none at all while a run dir is loaded (it is data: code it
# names is imported from sys.path as it stands, or from folders the user trusts)
_SEARCHED: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("searched", default=("",))


@contextlib.contextmanager
def search_for_env_code(folders: Sequence[str | Path]) -> Iterator[None]:
    """Within the block, a custom entry point's module missing from ``sys.path`` is imported from the first of
    ``folders`` that holds it (none: from nowhere); outside, from the current folder."""
    token = _SEARCHED.set(tuple(str(Path(f).absolute()) for f in folders))
    try:
        yield
    finally:
        _SEARCHED.reset(token)


def _add_folder_holding(top: str, folder: str) -> bool:
    """Put ``folder`` on ``sys.path`` if it holds the module or package ``top``; whether it did."""
    if not ((Path(folder) / f"{top}.py").is_file() or (Path(folder) / top).is_dir()) or folder in sys.path:
        return False
    sys.path.append(folder)
    importlib.invalidate_caches()
    return True


def _module_folders(top: str) -> list[Path]:
    """The folders the imported module or package ``top`` was found in (a namespace package may span several;
    none for one not imported, built in or frozen)."""
    spec = getattr(sys.modules.get(top), "__spec__", None)
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p).parent.resolve() for p in spec.submodule_search_locations]
    return [Path(spec.origin).parent.resolve()] if spec.origin and spec.has_location else []


def _export_folder(top: str) -> None:
    """Put the folder the module ``top`` was imported from on ``sys.path`` as an absolute path, unless it is
    there already: found through ``""`` or a relative entry, it would not be found by a worker process that
    runs elsewhere (the backends pass on the absolute entries of ``sys.path``)."""
    on_path = {Path(p).resolve() for p in sys.path if p and os.path.isabs(p)}
    for folder in _module_folders(top):
        if folder not in on_path:
            sys.path.append(str(folder))


def code_folders(env_id: str) -> list[Path]:
    """The folders a custom entry point's module was imported from in this process that another process would
    not find by itself (not installed, not on ``PYTHONPATH``: the current folder, a script's, one the script put
    on ``sys.path``; a namespace package may need several): what ``PYTHONPATH`` must name for a command that
    loads the run from anywhere. None for a Gymnasium id or a module found without them. Asks a fresh
    interpreter of this installation, started in the root folder, for its path."""
    module, sep, _ = env_id.partition(":")
    folders = _module_folders(module.partition(".")[0]) if sep else []
    if not folders:
        return []
    try:
        listed = subprocess.run([sys.executable or "python3", "-c", "import sys; print('\\n'.join(sys.path))"],
                                cwd=os.path.abspath(os.sep), capture_output=True, text=True, timeout=60,
                                check=True).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        listed = []  # then name them all: harmless where they were not needed
    fresh = {Path(p).resolve() for p in listed if p and os.path.isabs(p)}
    return [f for f in folders if f not in fresh]


# Gymnasium's own ids whose entry points need an extra: (entry point prefix, extra)
_REGISTERED_EXTRAS = (("gymnasium.envs.mujoco", "mujoco"), ("gymnasium.envs.box2d", "box2d"), ("ale_py", "atari"))


def check_env_id(env_id: str) -> None:
    """Raise a one-line :class:`ConfigError` if the rollout functions could not build ``env_id``, suggesting close
    matches; an id whose simulator is an extra not installed names the extra and the command that installs it here
    (:func:`~minionsrl.function.extras.install_hint`).

    A function builds its env in a process of its own (a worker, a Ray task, a cloud function), from the id
    alone: it has what Gymnasium and ale-py register and what the entry point's module defines or registers
    when imported, nothing the training script made (a class, an instance, an id it registered itself)."""
    if not isinstance(env_id, str):
        raise ConfigError(_not_an_id(env_id))
    if is_entry_point(env_id):
        target = entry_point_target(env_id)
        if isinstance(target, str):
            _check_registered(target, env_id)
        return
    _register_optional_envs()
    if env_id in gym.registry:
        if not _registered_in_every_process(env_id):
            raise ConfigError(_registered_here_only(env_id))
        _check_registered(env_id, env_id)
        return
    if env_id.startswith("ALE/") and not installed("ale_py"):
        raise missing_extra_error(f"env_id {env_id!r}", "atari")
    matches = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(matches)}?" if matches else "; see gymnasium.pprint_registry()"
    raise ConfigError(f"env_id {env_id!r} is not a registered Gymnasium environment{hint}")


def _check_registered(registered: str, env_id: str) -> None:
    entry_point = str(gym.registry[registered].entry_point)
    for prefix, extra in _REGISTERED_EXTRAS:
        if entry_point.startswith(prefix):
            require_extra(f"env_id {env_id!r}", extra)


# the packages whose ids every rollout function has: Gymnasium's own, and ale-py's (registered on import)
_REGISTRARS = ("gymnasium", "ale_py")


def _entry_point_module(env_id: str) -> str:
    entry_point = gym.registry[env_id].entry_point
    if isinstance(entry_point, str):
        return entry_point.partition(":")[0]
    return str(getattr(entry_point, "__module__", "") or "")


def _registered_in_every_process(env_id: str) -> bool:
    """Whether a fresh process has ``env_id`` too: one of Gymnasium's or ale-py's own ids (an id registered by the
    training script, or by a module only it imported, exists in its process alone)."""
    return _entry_point_module(env_id).partition(".")[0] in _REGISTRARS


def _registered_here_only(env_id: str) -> str:
    spec = gym.registry[env_id]
    module = _entry_point_module(env_id)
    entry_point = spec.entry_point
    name = entry_point.partition(":")[2] if isinstance(entry_point, str) else getattr(entry_point, "__qualname__", "")
    name = name if name.isidentifier() else "MyEnv"
    if module and module.partition(".")[0] != "__main__" and isinstance(entry_point, str | type):
        instead, registrar = f"env_id='{module}:{name}' (module:Class)", module
    else:
        instead, registrar = _move_into_module(name), _script_module()[0]
    kwargs = f", env_kwargs={dict(spec.kwargs)!r}" if spec.kwargs else ""
    return (f"env_id {env_id!r} is registered in this process only (gym.register in the script, or by a module only "
            f"it imported): the rollout functions build their env in processes of their own and would not find it; "
            f"{instead}{kwargs}, or '{registrar}:{env_id}' where importing {registrar} registers the id")


def _script_module() -> tuple[str, str]:
    """A module name to suggest for env code that now lives in the running script, and where to put it: named after
    the script (``reach.py``: ``reach_envs.py`` beside it), or ``my_envs`` when there is no script file (a
    notebook, ``python -c``)."""
    script = getattr(sys.modules.get("__main__"), "__file__", None)
    stem = Path(script).stem if script else ""
    if stem.isidentifier():
        return f"{stem}_envs", f"beside {Path(script).name}"
    return "my_envs", "beside the script"


def _move_into_module(name: str) -> str:
    """What to do with a class ``name`` defined in the script: put it in a module the rollout functions import."""
    module, where = _script_module()
    return f"move {name} into a module (e.g. {module}.py {where}) and write env_id='{module}:{name}'"


def _not_an_id(value: Any) -> str:
    """What to write instead of a class or an env instance given as ``env_id``."""
    if isinstance(value, gym.Env):
        spec = value.spec
        if spec is not None and isinstance(spec.id, str) and spec.id in gym.registry \
                and _registered_in_every_process(spec.id):
            kwargs = f", env_kwargs={dict(spec.kwargs)!r}" if spec.kwargs else ""
            return (f"env_id: an env instance ({spec.id}) is not an env id; every rollout function builds its own "
                    f"env from the id: write env_id={spec.id!r}{kwargs}")
        cls, what = type(value.unwrapped), f"an instance of {type(value.unwrapped).__qualname__}"
    elif isinstance(value, type):
        cls, what = value, f"the class {value.__qualname__}"
    else:
        return f"env_id: {value!r} is not a string; write a Gymnasium id ('CartPole-v1') or 'package.module:ClassName'"
    name = cls.__qualname__ if cls.__qualname__.isidentifier() else "MyEnv"
    if cls.__module__.partition(".")[0] == "__main__" or not cls.__qualname__.isidentifier():
        instead = _move_into_module(name)
    else:
        instead = f"write env_id='{cls.__module__}:{name}'"
    return (f"env_id: {what} is not an env id; every rollout function builds its own env in a process of its own, "
            f"from a string: {instead} (constructor arguments go in env_kwargs)")


def make_env(spec: EnvSpec, render_mode: str | None = None) -> gym.Env:
    """Build the environment described by ``spec`` (time limits included, no env checker), its steps delayed by
    the spec's latency (outermost, so that nothing else waits)."""
    env = _make_env(spec, render_mode)
    return StepLatency(env, spec.step_latency_ms) if spec.step_latency_ms else env


def _make_env(spec: EnvSpec, render_mode: str | None) -> gym.Env:
    # render_mode only when one is asked for: an env whose constructor has no such argument still builds
    render = {} if render_mode is None else {"render_mode": render_mode}
    if is_entry_point(spec.env_id):
        target = entry_point_target(spec.env_id)  # a gymnasium.Env subclass, or nothing is called
        if isinstance(target, str):  # an id the module registers
            return gym.make(target, disable_env_checker=True, **{**spec.kwargs, **render})
        env = target(**{**spec.kwargs, **render})
        if env.spec is not None and env.spec.max_episode_steps:
            env = gym.wrappers.TimeLimit(env, env.spec.max_episode_steps)
        return env
    _register_optional_envs()
    if is_atari(spec.env_id):
        return make_atari(spec, render_mode)
    return gym.make(spec.env_id, disable_env_checker=True, **{**spec.kwargs, **render})


def is_atari(env_id: str) -> bool:
    """Whether ``env_id`` is an Arcade Learning Environment id (ale-py installed and registered)."""
    _register_optional_envs()
    env_spec = gym.registry.get(env_id)
    return env_spec is not None and "ale_py" in str(env_spec.entry_point)


class AtariGame(gym.Wrapper):
    """An ALE game as the Atari preset trains on it (Machado et al. 2018; Mnih et al. 2015): up to 30 no-ops at a new
    game, 4 frames an agent step, the last two max-pooled, grey, resized to 84×84 (OpenCV's area rule), a stack of
    the last 4; rewards clipped to their sign and a lost life ``terminated`` for the learning signal only.

    The observations, raw rewards and game ends are those of Gymnasium's ``AtariPreprocessing(noop_max=30,
    frame_skip=4, screen_size=84)`` under a ``FrameStackObservation(4)``, frame for frame (``tests/test_atari.py``
    replays both), but a step drives the emulator directly: those wrappers make four Python steps of the ALE env a
    step, each building an observation and an info mapping, which was a third of a Pong function's env time
    (0.79–0.93 against 0.56–0.67 ms of CPU an agent step; the emulator alone takes 0.38: BENCHMARKS §19). A lost life
    does not end the game: the next ``reset()`` without a seed plays on from where it stopped. ``info["raw_reward"]``
    is the unclipped reward and ``info["game_over"]`` says whether the game really ended, so the rollout reports
    full-game returns.
    """

    FRAME_SKIP, NOOP_MAX, SIDE, STACK = 4, 30, 84, 4

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        u = env.unwrapped
        if getattr(u, "_frameskip", 1) != 1:
            raise ValueError("AtariGame skips frames itself: build the ALE env with frameskip=1")
        self.ale, self._actions = u.ale, u._action_set
        self._screens = np.zeros((2, *self.ale.getScreenDims()), np.uint8)  # the last two frames of a step
        self._stack = np.zeros((self.STACK, self.SIDE, self.SIDE), np.uint8)
        self.observation_space = gym.spaces.Box(0, 255, self._stack.shape, np.uint8)
        self.lives, self.game_over = 0, True
        self._last_obs: np.ndarray | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        if not (self.game_over or seed is not None or self._last_obs is None):
            return self._last_obs, {"lives": self.lives}  # a life was lost: play on from where it stopped
        _, info = self.env.reset(seed=seed, options=options)
        for _ in range(self.env.unwrapped.np_random.integers(1, self.NOOP_MAX + 1)):  # no-op starts, rarely run
            _, _, terminated, truncated, step_info = self.env.step(0)
            info.update(step_info)
            if terminated or truncated:
                _, info = self.env.reset(seed=seed, options=options)
        self.ale.getScreenGrayscale(self._screens[0])
        self._screens[1].fill(0)
        self._stack[:] = self._frame()
        self.lives, self.game_over, self._last_obs = self.ale.lives(), False, self._stack.copy()
        return self._last_obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        act, reward, terminated, truncated = self._actions[action], 0.0, False, False
        for t in range(self.FRAME_SKIP):
            reward += self.ale.act(act, 1.0)
            terminated, truncated = self.ale.game_over(with_truncation=False), self.ale.game_truncated()
            if terminated or truncated:
                break
            if t >= self.FRAME_SKIP - 2:  # the last two frames, pooled below
                self.ale.getScreenGrayscale(self._screens[self.FRAME_SKIP - 1 - t])
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = self._frame()
        lives = self.ale.lives()
        life_lost = 0 < lives < self.lives
        self.game_over = bool(terminated or truncated)
        self.lives, self._last_obs = lives, self._stack.copy()
        info = {"lives": lives, "raw_reward": float(reward), "game_over": self.game_over}
        return self._last_obs, float(np.sign(reward)), bool(terminated or life_lost), bool(truncated), info

    def _frame(self) -> np.ndarray:
        """The newest frame: the max of the step's last two grey screens (into the first, as Gymnasium pools),
        resized to 84×84 by area."""
        import cv2

        np.maximum(self._screens[0], self._screens[1], out=self._screens[0])
        return cv2.resize(self._screens[0], (self.SIDE, self.SIDE), interpolation=cv2.INTER_AREA)

    def restore(self, ale_state: Any, lives: int, frames: np.ndarray) -> None:
        """Continue a game captured elsewhere: the emulator's state (with its RNG), its lives, its frame stack."""
        if frames.shape != self._stack.shape:
            raise ValueError("carried frame stack does not match this environment")
        self.ale.restoreState(ale_state)
        self._stack[:] = frames
        self.lives, self.game_over, self._last_obs = lives, False, self._stack.copy()


def make_atari(spec: EnvSpec, render_mode: str | None = None) -> gym.Env:
    """An ALE game with the standard preprocessing (:class:`AtariGame`): observations are uint8 ``(4, 84, 84)``;
    ``env_kwargs`` go to the ALE env (e.g. ``repeat_action_probability``)."""
    # AtariGame skips frames and reads the grey screen itself: the inner env's own observation is never read
    kwargs = {**spec.kwargs, "frameskip": 1, "obs_type": "grayscale"}
    return AtariGame(gym.make(spec.env_id, render_mode=render_mode, disable_env_checker=True, **kwargs))


ENV_CHECK_TIMEOUT_S = 60.0  # the learner's check of an env fails after this long (a constructor or step that hangs)
CHECK_STEPS = 16  # random steps the check takes


def env_info(spec: EnvSpec, timeout_s: float = ENV_CHECK_TIMEOUT_S) -> EnvInfo:
    """Build the environment once as a rollout function will, inspect its spaces, reset it once (an observation
    that does not fit the space would fail every function), take a few random steps (timed: what a function's
    deadline starts from), and close it. The check runs in a thread of its own, bounded by ``timeout_s``: an env
    whose constructor, ``reset`` or ``step`` never returns fails it with one line naming which."""
    doing, outcome = ["its constructor"], []

    def check() -> None:
        try:
            outcome.append(_checked_info(spec, doing))
        except BaseException as exc:
            outcome.append(exc)

    context = contextvars.copy_context()  # where custom env code is searched for (search_for_env_code)
    thread = threading.Thread(target=context.run, args=(check,), name="minionsrl-env-check", daemon=True)
    thread.start()  # abandoned if it hangs
    thread.join(timeout_s)
    if not outcome:
        raise ConfigError(f"env_id {spec.env_id!r}: {doing[0]} did not return within {timeout_s:g} s, in the "
                          "learner's check of the env; fix the env (or give it longer with --env-check-timeout-s)")
    if isinstance(outcome[0], ValueError) and "main thread" in str(outcome[0]):  # e.g. signal.signal in __init__
        return _checked_info(spec, doing)  # such an env is built where functions build it, unbounded
    exc = outcome[0]
    if isinstance(exc, Exception) and not isinstance(exc, ConfigError):  # the env's own failure, named by its stage
        first_line = str(exc).splitlines()[0] if str(exc) else ""
        if doing[0] == "its constructor":  # bad kwargs, a missing optional dependency, a broken custom env
            raise ConfigError(f"env_id {spec.env_id!r} with env_kwargs {dict(spec.kwargs)!r} cannot be built "
                              f"({first_line or type(exc).__name__}); check env_kwargs against the environment's "
                              "constructor") from exc
        raise ConfigError(f"env_id {spec.env_id!r}: {doing[0]} raised {type(exc).__name__}"
                          f"{': ' + first_line if first_line else ''} in the learner's check of the env (it was "
                          f"built); fix the env's {doing[0]}") from exc
    if isinstance(exc, BaseException):
        raise exc
    return exc


def _checked_info(spec: EnvSpec, doing: list[str]) -> EnvInfo:
    t0 = time.perf_counter()
    env = make_env(spec)
    try:
        info = replace(_spaces_info(spec, env), build_s=time.perf_counter() - t0)
        doing[0] = "reset()"
        obs, _ = env.reset(seed=0)
        if np.shape(obs) != info.obs_shape:
            raise ConfigError(f"env_id {spec.env_id!r}: reset() returned an observation of shape {np.shape(obs)}, "
                              f"not the observation space's {info.obs_shape}; make the two agree")
        info = replace(info, carries=_carries(spec, env), episode_steps=episode_steps(env))
        env.action_space.seed(0)
        t0, steps = time.perf_counter(), []  # each step's own-instance seconds and the process's CPU seconds
        try:
            for _ in range(CHECK_STEPS):
                doing[0] = "step()"
                # the whole process's CPU: an env that steps in threads of its own is busy there too
                started, cpu0, wait0 = time.perf_counter(), time.process_time(), clock.thread_wait_s()
                _, _, terminated, truncated, _ = env.step(env.action_space.sample())
                cpu = time.process_time() - cpu0
                steps.append((clock.own_s(time.perf_counter() - started, clock.thread_wait_s() - wait0, cpu), cpu))
                if terminated or truncated:
                    doing[0] = "reset()"
                    env.reset()
        except Exception:
            return info
        # the median step: one stalled here (another thread holding the GIL, a page in) does not make it a waiting env
        own_s, cpu_s = (float(np.median(column)) for column in zip(*steps, strict=True))
        return replace(info, step_s=(time.perf_counter() - t0) / CHECK_STEPS, step_own_s=own_s, step_cpu_s=cpu_s)
    finally:
        stage, doing[0] = doing[0], "close()"
        env.close()
        doing[0] = stage  # a failure before close() is that stage's


def _spaces_info(spec: EnvSpec, env: gym.Env) -> EnvInfo:
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, gym.spaces.Box):
        raise ConfigError(
            f"env_id {spec.env_id!r}: observation space {obs_space} is not a Box; "
            "wrap it so observations are arrays (e.g. FlattenObservation)"
        )
    if isinstance(act_space, gym.spaces.Discrete):
        return EnvInfo(tuple(obs_space.shape), True, int(act_space.n), family=_family(env))
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) == 1:
        return EnvInfo(
            tuple(obs_space.shape),
            False,
            int(act_space.shape[0]),
            tuple(float(x) for x in np.asarray(act_space.low, dtype=np.float64)),
            tuple(float(x) for x in np.asarray(act_space.high, dtype=np.float64)),
            family=_family(env),
        )
    raise ConfigError(
        f"env_id {spec.env_id!r}: action space {act_space} is not supported; "
        "use Discrete or a 1-D Box"
    )


def _family(env: gym.Env) -> str:
    module = type(env.unwrapped).__module__
    if module.startswith("ale_py"):
        return "atari"
    if "mujoco" in module:
        return "mujoco"
    if "classic_control" in module or "box2d" in module:
        return "classic"
    return "classic" if isinstance(env.action_space, gym.spaces.Discrete) else "mujoco"


_OPTIONAL_REGISTERED = False


def _register_optional_envs() -> None:
    """Register ALE ids when ale-py is installed (it is an optional extra)."""
    global _OPTIONAL_REGISTERED
    if _OPTIONAL_REGISTERED:
        return
    _OPTIONAL_REGISTERED = True
    try:
        import ale_py

        gym.register_envs(ale_py)
    except ImportError:
        pass


def _time_limit(env: gym.Env) -> gym.wrappers.TimeLimit | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return env
        env = env.env
    return None


def episode_steps(env: gym.Env) -> int | None:
    """The longest an episode of ``env`` runs: its time limit's, else its inner env's (:func:`_inner_env`), else
    None (unknown: the env ends its episodes itself, or never)."""
    limit = _time_limit(_without_latency(env))
    if limit is not None:
        return int(limit._max_episode_steps)
    inner = _inner_env(_without_latency(env).unwrapped)
    return None if inner is None else episode_steps(inner[1])


def _inner_env(u: gym.Env) -> tuple[str, gym.Env] | None:
    """The one env a custom env wraps by holding it (``self.inner = gym.make(...)``), with its attribute's name;
    None where it holds none, or more than one (which would carry is then not ours to guess)."""
    held = [(name, value) for name, value in vars(u).items() if isinstance(value, gym.Env) and value is not u]
    return held[0] if len(held) == 1 else None


def _carries(spec: EnvSpec, env: gym.Env) -> bool:
    """Whether an episode of ``env`` (just reset) can be carried to the next round; a state the env's own
    :data:`EPISODE_STATE` protocol gives that is not JSON is bad input, said before any work."""
    try:
        state = capture_episode(env)
        json.dumps(state, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env_id {spec.env_id!r}: get_episode_state() must return plain JSON (numbers, strings, "
                          f"lists, dicts): {one_line(str(exc), 200)}; convert arrays with .tolist()") from None
    return state is not None


# The protocol by which any env carries its episodes across rounds: two methods on the env (the unwrapped one)
EPISODE_STATE = ("get_episode_state", "set_episode_state")  # () -> JSON-able state; (state) -> None


def capture_episode(env: gym.Env) -> dict[str, Any] | None:
    """The simulator state needed to continue the current episode elsewhere, or None if unsupported.

    Supported: an env with :data:`EPISODE_STATE`'s two methods (``get_episode_state()`` returns a plain-JSON
    state, ``set_episode_state(state)`` puts a freshly reset env into it), MuJoCo envs (qpos, qvel),
    classic-control envs (their ``state`` array), ALE games (the emulator state with its RNG, the lives count and
    the frame stack), and a custom env that holds one such env (``self.inner = gym.make(...)``: the inner env's
    state), plus the time limit's step count. Rollout functions return it so the next round can continue the
    episode on any instance: the functions stay stateless and episodes keep their full length.
    """
    env = _without_latency(env)
    u = env.unwrapped
    if all(callable(getattr(u, method, None)) for method in EPISODE_STATE):
        state = {"custom": u.get_episode_state()}
    elif isinstance(env, AtariGame):
        if env.game_over or env._last_obs is None:
            return None
        state: dict[str, Any] = {"ale": base64.b64encode(u.ale.cloneState(include_rng=True).serialize()).decode(),
                                 "lives": env.lives, "frames": encode_array(env._last_obs)}
    elif hasattr(u, "set_state") and hasattr(u, "data"):
        state = {"qpos": u.data.qpos.tolist(), "qvel": u.data.qvel.tolist()}
    elif type(u).__module__.startswith("gymnasium.envs.") and isinstance(getattr(u, "state", None), np.ndarray):
        # Gymnasium's classic control: the array is the whole episode (a custom env's may not be: its protocol)
        state = {"state": u.state.tolist()}
    elif (inner := _inner_env(u)) is not None and (held := capture_episode(inner[1])) is not None:
        state = {"inner": inner[0], "held": held}
    else:
        return None
    limit = _time_limit(env)
    state["elapsed"] = int(limit._elapsed_steps) if limit is not None else 0
    return state


def start_episode(env: gym.Env, seed: int, state: dict[str, Any] | None) -> Any:
    """Seed ``env`` with ``seed`` and return the observation to step from: a new episode's (``state`` None), or the
    one :func:`capture_episode` carried in ``state``, where the state holds it (the ALE frame stack); None where
    the carry's own observation is it.

    A carried ALE game is not reset with its seed: that reloads the ROM (about 120 ms, a third of a 128-step Pong
    function), and the carried state replaces the emulator and its RNG. Only the env's Python RNG (the no-op starts
    of the fragment's later games) is seeded, so the fragment still depends on the seed and the state alone."""
    if state is not None and "ale" in state:
        env.reset()  # without a seed: no ROM load (and a game in progress is not even restarted)
        _without_latency(env).unwrapped.seed_game(seed)
        return restore_episode(env, state)
    obs, _ = env.reset(seed=seed)
    return obs if state is None else restore_episode(env, state)


def restore_episode(env: gym.Env, state: dict[str, Any]) -> np.ndarray | None:
    """Put a freshly reset ``env`` into the state captured by :func:`capture_episode`; return the
    observation to continue from where the state holds it (the ALE frame stack), else None."""
    env = _without_latency(env)
    u = env.unwrapped
    if "custom" in state:
        u.set_episode_state(state["custom"])
    elif "inner" in state:
        inner = _inner_env(u)
        if inner is None or inner[0] != state["inner"]:
            raise ValueError("carried inner-env state does not match this environment")
        restore_episode(inner[1], state["held"])
    elif "ale" in state:
        _restore_atari(env, state)
    elif "qpos" in state:
        qpos, qvel = np.asarray(state["qpos"], dtype=np.float64), np.asarray(state["qvel"], dtype=np.float64)
        if qpos.shape != u.data.qpos.shape or qvel.shape != u.data.qvel.shape:
            raise ValueError("carried MuJoCo state does not match this environment")
        u.set_state(qpos, qvel)
    else:
        current = u.state
        new = np.asarray(state["state"], dtype=current.dtype)
        if new.shape != current.shape:
            raise ValueError("carried state does not match this environment")
        u.state = new
    limit = _time_limit(env)
    if limit is not None:
        limit._elapsed_steps = int(state["elapsed"])
    return env._last_obs if isinstance(env, AtariGame) else None


def _without_latency(env: gym.Env) -> gym.Env:
    """The env under its :class:`StepLatency` (the episode's state is the wrapped env's)."""
    return env.env if isinstance(env, StepLatency) else env


def _restore_atari(env: gym.Env, state: dict[str, Any]) -> None:
    if not isinstance(env, AtariGame):
        raise ValueError("carried ALE state needs an ALE environment")
    env.restore(ale_state(base64.b64decode(state["ale"])), int(state["lives"]), decode_array(state["frames"]))


def ale_state(data: bytes) -> Any:
    """An ALE emulator state from its serialised bytes (ale_py imported only where Atari runs)."""
    import ale_py

    return ale_py.ALEState(data)


def encode_array(a: np.ndarray) -> dict[str, Any]:
    """A small array as JSON: dtype, shape and base64 bytes (compact for uint8 frames)."""
    return {"dtype": str(a.dtype), "shape": list(a.shape), "b64": base64.b64encode(a.tobytes()).decode()}


def decode_array(data: dict[str, Any]) -> np.ndarray:
    """Inverse of :func:`encode_array`; only plain numeric dtypes are accepted."""
    dtype = np.dtype(data["dtype"])
    if dtype.kind not in "biuf":
        raise ValueError(f"carried array has unsupported dtype {dtype}")
    return np.frombuffer(base64.b64decode(data["b64"]), dtype=dtype).reshape(data["shape"]).copy()
