"""Environment factory: id checks, custom entry points, env_info and episode capture/restore."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest

from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.function.envs import EnvSpec, capture_episode, check_env_id, env_info, make_env, restore_episode
from minionsrl.prepare import prepare_config


# -- check_env_id ----------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Hopper-v5", "custom_env:CounterEnv"])
def test_check_env_id_accepts_buildable_ids(env_id):
    check_env_id(env_id)  # no exception


def test_check_env_id_rejects_typo_with_one_line_suggestion():
    with pytest.raises(ConfigError) as info:
        check_env_id("CartPol-v1")
    message = str(info.value)
    assert "\n" not in message
    assert "'CartPol-v1'" in message
    assert "did you mean" in message
    assert "CartPole-v1" in message


def test_check_env_id_without_close_match_points_to_registry():
    with pytest.raises(ConfigError) as info:
        check_env_id("Zzzzqqqq-v9")
    assert "\n" not in str(info.value)
    assert "pprint_registry" in str(info.value)


# -- custom entry points ----------------------------------------------------------------------------
def test_custom_entry_point_builds_with_kwargs():
    env = make_env(EnvSpec("custom_env:CounterEnv", {"length": 3}))
    try:
        assert type(env).__name__ == "CounterEnv"
        obs, _ = env.reset(seed=0)
        np.testing.assert_array_equal(obs, [0.0, 0.0])
        dones = [env.step(1)[2] for _ in range(3)]
        assert dones == [False, False, True]
    finally:
        env.close()


def test_custom_entry_point_env_info():
    info = env_info(EnvSpec("custom_env:CounterEnv"))
    assert info.obs_shape == (2,)
    assert info.discrete is True
    assert info.action_dim == 3
    info = env_info(EnvSpec("custom_env:BoxActionEnv"))
    assert (info.obs_shape, info.discrete, info.action_dim) == ((3,), False, 2)
    assert info.action_low == (-2.0, -2.0) and info.action_high == (2.0, 2.0)


def test_custom_entry_point_missing_module_is_one_line_config_error():
    with pytest.raises(ConfigError) as info:
        check_env_id("no_such_module_minionsrl_xyz:MyEnv")
    message = str(info.value)
    assert "\n" not in message
    assert "no_such_module_minionsrl_xyz" in message
    assert "PYTHONPATH" in message


def test_custom_entry_point_missing_class_is_config_error():
    with pytest.raises(ConfigError) as info:
        check_env_id("custom_env:NoSuchEnv")
    message = str(info.value)
    assert "\n" not in message
    assert "'NoSuchEnv'" in message and "'custom_env'" in message


def test_entry_point_with_empty_module_is_config_error():
    with pytest.raises(ConfigError):
        check_env_id(":Foo")


def test_entry_point_with_relative_module_is_config_error():
    with pytest.raises(ConfigError):
        check_env_id("..relative:Foo")


def test_entry_point_naming_a_non_env_is_config_error():
    with pytest.raises(ConfigError):
        prepare_config(TrainConfig(env_id="custom_env:NOT_AN_ENV", max_rounds=1))


# -- env_info --------------------------------------------------------------------------------------
def test_env_info_discrete_cartpole():
    info = env_info(EnvSpec("CartPole-v1"))
    assert info.obs_shape == (4,)
    assert info.discrete is True
    assert info.action_dim == 2
    assert info.action_low == () and info.action_high == ()
    assert info.family == "classic"


def test_env_info_continuous_pendulum():
    info = env_info(EnvSpec("Pendulum-v1"))
    assert (info.obs_shape, info.discrete, info.action_dim) == ((3,), False, 1)
    assert info.action_low == (-2.0,) and info.action_high == (2.0,)
    assert info.family == "classic"


def test_env_info_continuous_hopper_is_mujoco():
    info = env_info(EnvSpec("Hopper-v5"))
    assert (info.obs_shape, info.discrete, info.action_dim) == ((11,), False, 3)
    assert info.action_low == (-1.0,) * 3 and info.action_high == (1.0,) * 3
    assert info.family == "mujoco"


def test_env_info_passes_kwargs():
    env = make_env(EnvSpec("CartPole-v1", {"max_episode_steps": 7}))
    try:
        env.reset(seed=0)
        truncated = [env.step(i % 2)[3] for i in range(7)]
    finally:
        env.close()
    assert truncated[-1] is True and not any(truncated[:-1])


# -- capture / restore -----------------------------------------------------------------------------
def _play(env, actions):
    out = []
    for a in actions:
        obs, reward, term, trunc, _ = env.step(a)
        out.append((np.asarray(obs, dtype=np.float64).copy(), float(reward), bool(term), bool(trunc)))
        if term or trunc:
            break
    return out


def _assert_same_play(a, b) -> None:
    """Two plays of the same actions went alike, step by step (floats to 1e-6: MuJoCo's state round trip)."""
    assert len(a) == len(b) > 0
    for (oa, ra, ta, ua), (ob, rb, tb, ub) in zip(a, b, strict=True):
        np.testing.assert_allclose(oa, ob, atol=1e-6, rtol=0)
        assert ra == pytest.approx(rb, abs=1e-6) and (ta, ua) == (tb, ub)


def test_capture_restore_cartpole_round_trip():
    spec = EnvSpec("CartPole-v1", {"max_episode_steps": 20})
    original, copy = make_env(spec), make_env(spec)
    try:
        original.reset(seed=5)
        for a in (0, 1, 0, 1, 1, 0, 0, 1, 0, 1):
            original.step(a)
        state = capture_episode(original)
        assert state is not None and state["elapsed"] == 10
        assert len(state["state"]) == 4
        copy.reset(seed=999)  # a different episode, then overwritten
        restore_episode(copy, state)
        actions = [1, 0] * 10
        a, b = _play(original, actions), _play(copy, actions)
    finally:
        original.close()
        copy.close()
    assert len(a) == len(b) > 0
    for (oa, ra, ta, ua), (ob, rb, tb, ub) in zip(a, b, strict=True):
        np.testing.assert_array_equal(oa, ob)
        assert (ra, ta, ua) == (rb, tb, ub)
    # the time limit's step count came along: the restored copy truncates at step 20 of the episode too
    assert len(a) == 10 and a[-1][3] is True and a[-1][2] is False


def test_capture_restore_hopper_round_trip():
    spec = EnvSpec("Hopper-v5")
    original, copy = make_env(spec), make_env(spec)
    rng = np.random.default_rng(0)
    try:
        original.reset(seed=1)
        for _ in range(15):
            original.step(rng.uniform(-0.3, 0.3, size=3))
        state = capture_episode(original)
        assert state is not None and state["elapsed"] == 15
        assert len(state["qpos"]) == 6 and len(state["qvel"]) == 6
        copy.reset(seed=12345)
        restore_episode(copy, state)
        actions = [rng.uniform(-0.3, 0.3, size=3) for _ in range(30)]
        a, b = _play(original, actions), _play(copy, actions)
    finally:
        original.close()
        copy.close()
    assert len(a) > 5
    _assert_same_play(a, b)


def test_capture_restore_hopper_differs_without_restore():
    """Guard for the test above: two differently seeded Hopper episodes do not already agree."""
    spec = EnvSpec("Hopper-v5")
    e1, e2 = make_env(spec), make_env(spec)
    try:
        o1, _ = e1.reset(seed=1)
        o2, _ = e2.reset(seed=12345)
    finally:
        e1.close()
        e2.close()
    assert np.abs(o1 - o2).max() > 1e-4


def test_capture_returns_none_for_env_without_state():
    env = make_env(EnvSpec("custom_env:CounterEnv"))
    try:
        env.reset(seed=0)
        assert capture_episode(env) is None
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["custom_env:HeldPendulum", "custom_env:StatefulCounter"])
def test_a_custom_env_carries_its_episode_through_the_env_it_holds_or_its_own_protocol(env_id):
    """A class that holds Pendulum (``self.inner = gym.make(...)``) carries the inner env's state and time limit;
    an env with get_episode_state/set_episode_state carries what it says. The copy goes on as the original."""
    spec = EnvSpec(env_id)
    original, copy = make_env(spec), make_env(spec)
    steps = 150 if env_id.endswith("Pendulum") else 4
    actions = [original.action_space.sample() for _ in range(steps + 60)]
    try:
        original.reset(seed=3)
        for action in actions[:steps]:
            original.step(action)
        state = capture_episode(original)
        assert state is not None
        copy.reset(seed=77)
        restore_episode(copy, json.loads(json.dumps(state)))
        a, b = _play(original, actions[steps:]), _play(copy, actions[steps:])
    finally:
        original.close()
        copy.close()
    _assert_same_play(a, b)
    if env_id.endswith("Pendulum"):  # the inner time limit came along: 200 steps in all, 50 after the carry
        assert len(a) == 50 and a[-1][3] is True


def test_the_env_check_says_whether_episodes_carry_and_how_long_they_run():
    held = env_info(EnvSpec("custom_env:HeldPendulum"))
    assert held.carries and held.episode_steps == 200
    counter = env_info(EnvSpec("custom_env:CounterEnv"))
    assert not counter.carries and counter.episode_steps is None
    assert env_info(EnvSpec("CartPole-v1")).episode_steps == 500
    with pytest.raises(ConfigError, match="get_episode_state\\(\\) must return plain JSON"):
        env_info(EnvSpec("custom_env:UnreadableState"))


def test_uncarried_episodes_are_said_once_and_auto_keeps_fragments_that_hold_an_episode(monkeypatch):
    """An env whose episodes cannot be carried and whose fragments are shorter than its time limit: one warning
    before any work, naming the counts that let them end; --actors auto's n_max falls to those counts; fragments
    that hold an episode, or a carried env, say nothing."""
    from minionsrl.errors import EpisodesNotCarried
    from minionsrl.function import envs

    real = envs.capture_episode
    monkeypatch.setattr(envs, "capture_episode", lambda env: None if "Pendulum" in str(env.spec) else real(env))
    with pytest.warns(EpisodesNotCarried, match="run up to 200 steps: fragments of 32 steps cut every one") as said:
        prepare_config(TrainConfig(env_id="Pendulum-v1", actors=64, train_batch_size=2048, max_rounds=1))
    assert len(said) == 1 and "use at most 10 actors" in str(said[0].message)
    with pytest.warns(EpisodesNotCarried, match="auto stays at n <= 10"):
        cfg, _ = prepare_config(TrainConfig(env_id="Pendulum-v1", actors="auto", train_batch_size=2048, max_rounds=1))
    assert cfg.scaling.n_max == 10
    with warnings.catch_warnings():
        warnings.simplefilter("error", EpisodesNotCarried)
        prepare_config(TrainConfig(env_id="Pendulum-v1", actors=8, train_batch_size=2048, max_rounds=1))  # 256 each
        monkeypatch.setattr(envs, "capture_episode", real)
        prepare_config(TrainConfig(env_id="Pendulum-v1", actors=64, train_batch_size=2048, max_rounds=1))  # carried


def test_restore_rejects_state_of_another_env():
    cartpole, hopper = make_env(EnvSpec("CartPole-v1")), make_env(EnvSpec("Hopper-v5"))
    try:
        hopper.reset(seed=0)
        cartpole.reset(seed=0)
        hopper_state = capture_episode(hopper)
        cart_state = capture_episode(cartpole)
        bad_cart = {**cart_state, "state": [0.0, 0.0, 0.0]}
        with pytest.raises(ValueError):
            restore_episode(cartpole, bad_cart)
        bad_hopper = {**hopper_state, "qpos": hopper_state["qpos"][:-1]}
        with pytest.raises(ValueError):
            restore_episode(hopper, bad_hopper)
    finally:
        cartpole.close()
        hopper.close()


def test_capture_state_is_json_serialisable():
    import json

    env = make_env(EnvSpec("Hopper-v5"))
    try:
        env.reset(seed=0)
        env.step(np.zeros(3))
        state = capture_episode(env)
    finally:
        env.close()
    assert json.loads(json.dumps(state)) == state


def test_gym_registry_is_not_polluted():
    """make_env must not register ids as a side effect of building custom envs."""
    before = set(gym.registry)
    make_env(EnvSpec("custom_env:CounterEnv")).close()
    assert set(gym.registry) == before
