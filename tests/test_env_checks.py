"""Custom envs fail before round 1 when a rollout function could not build them: an id registered only in the
training script, a class or an instance given as ``env_id``, ``__main__:Class``; each is one line that says what
to write instead. An env without a ``render_mode`` argument builds from a registered id."""

from __future__ import annotations

import json
import sys

import custom_env
import gymnasium as gym
import pytest

from minionsrl import TrainConfig, train
from minionsrl.errors import ConfigError
from minionsrl.function.envs import EnvSpec, check_env_id, env_info, make_env
from minionsrl.prepare import prepare_config

SMALL = {"max_rounds": 1, "actors": 2, "fragment_length": 16, "eval_episodes": 1, "hidden_sizes": [8],
         "progress": False, "tensorboard": False}


@pytest.fixture
def registered():
    """``gym.register`` as a training script would call it; the ids are unregistered afterwards."""
    ids = []

    def register(env_id: str, entry_point) -> str:
        gym.register(env_id, entry_point=entry_point)
        ids.append(env_id)
        return env_id

    yield register
    for env_id in ids:
        gym.registry.pop(env_id, None)


def _one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_id_registered_in_the_script_stops_before_any_work(registered, tmp_path, monkeypatch):
    """The issue's case: ``gym.register("Reach-v0", …)`` in the script passed, then every worker failed
    (NameNotFound); now nothing starts and the message says what to write, named after the script."""
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(tmp_path / "reach.py"), raising=False)
    script_class = type("ReachEnv", (custom_env.CounterEnv,), {"__module__": "__main__"})
    registered("Reach-v0", script_class)
    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError) as info:
        train(TrainConfig(env_id="Reach-v0", run_dir=str(run_dir), **SMALL))
    message = _one_line(info)
    assert "registered in this process only" in message
    assert "(e.g. reach_envs.py beside reach.py)" in message
    assert "env_id='reach_envs:ReachEnv'" in message and "'reach_envs:Reach-v0' where importing reach_envs" in message
    assert not run_dir.exists()


def test_id_registered_with_an_importable_entry_point_names_it(registered):
    registered("Counter-v7", "custom_env:CounterEnv")
    with pytest.raises(ConfigError) as info:
        check_env_id("Counter-v7")
    assert "env_id='custom_env:CounterEnv' (module:Class)" in _one_line(info)


@pytest.mark.parametrize(("value", "expected"), [
    (custom_env.CounterEnv, "the class CounterEnv is not an env id"),
    (custom_env.CounterEnv(), "an instance of CounterEnv is not an env id"),
])
def test_a_class_or_an_instance_as_env_id_names_the_string(value, expected):
    with pytest.raises(ConfigError) as info:
        prepare_config(TrainConfig(env_id=value, **SMALL))
    message = _one_line(info)
    assert expected in message and "env_id='custom_env:CounterEnv'" in message


def test_a_gymnasium_instance_as_env_id_names_its_id():
    env = gym.make("CartPole-v1")
    with pytest.raises(ConfigError) as info:
        prepare_config(TrainConfig(env_id=env, **SMALL))
    assert "write env_id='CartPole-v1'" in _one_line(info)


def test_a_class_of_the_script_says_move_it_into_a_module(monkeypatch):
    monkeypatch.delattr(sys.modules["__main__"], "__file__", raising=False)  # no script file: python -c, a notebook
    script_class = type("MyWalker", (custom_env.CounterEnv,), {"__module__": "__main__"})
    with pytest.raises(ConfigError) as info:
        check_env_id(script_class)
    assert "move MyWalker into a module" in _one_line(info) and "env_id='my_envs:MyWalker'" in str(info.value)
    with pytest.raises(ConfigError) as info:
        check_env_id("__main__:MyWalker")
    assert "move MyWalker into a module" in _one_line(info)


def test_observation_that_does_not_fit_the_space_stops_before_any_work():
    with pytest.raises(ConfigError) as info:
        prepare_config(TrainConfig(env_id="custom_env:WrongShapeEnv", **SMALL))
    assert "reset() returned an observation of shape (5,)" in _one_line(info)


def test_env_without_render_mode_builds_from_a_registered_id(registered):
    registered("NoRenderHere-v0", custom_env.NoRenderModeEnv)
    env = make_env(EnvSpec("NoRenderHere-v0", {"length": 3}))  # gym.make(..., render_mode=None) raised TypeError
    env.reset(seed=0)
    env.close()
    assert env_info(EnvSpec("custom_env:NoRender-v0")).obs_shape == (1,)


@pytest.mark.integration
def test_a_module_that_registers_the_id_trains_on_the_functions(tmp_path):
    """``module:Env-v0``: the module registers the id on import, in the learner and in every worker process
    (which would not know the id otherwise); the registration's time limit holds."""
    check_env_id("custom_env:NoRender-v0")
    with pytest.raises(ConfigError) as info:
        check_env_id("custom_env:NoSuch-v0")
    assert "registers no Gymnasium id 'NoSuch-v0'; it defines the gymnasium.Env subclasses " in _one_line(info)
    run_dir = tmp_path / "run"
    summary = train(TrainConfig(env_id="custom_env:NoRender-v0", run_dir=str(run_dir), **SMALL), plots=False)
    assert summary["rounds"] == 1 and summary["env_steps"] == 2 * 16
    assert json.loads((run_dir / "summary.json").read_text())["final_eval_return"] == 5.0
