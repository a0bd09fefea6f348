"""Atari: the preprocessing pipeline on real ALE frames, training-only signals, episode carry, the Nature
CNN in JAX and NumPy, uint8 fragments on the wire, and the preset."""

from __future__ import annotations

import cv2
import jax.numpy as jnp
import numpy as np
import pytest

from minionsrl.config import TrainConfig, learner_settings
from minionsrl.errors import ConfigError
from minionsrl.function import wire
from minionsrl.function.envs import EnvSpec, capture_episode, env_info, make_env, restore_episode
from minionsrl.function.fragment import Fragment
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.rollout import evaluate, rollout
from minionsrl.learner import networks
from minionsrl.learner.engine import SGDEngine
from minionsrl.learner.networks import init_params, snapshot_of
from minionsrl.learner.ppo import ppo_loss
from minionsrl.prepare import prepare_config

PONG = EnvSpec("ALE/Pong-v5", {"repeat_action_probability": 0.0})  # no sticky actions: exact replays
ARCH = PolicyArch(4 * 84 * 84, 6, True, (), "cnn", (4, 84, 84))
KEY = b"t" * 32


@pytest.fixture(scope="module")
def pong():
    env = make_env(PONG)
    yield env
    env.close()


def _snapshot(seed: int = 0):
    return snapshot_of(ARCH, init_params(ARCH, seed), None, 0, 10.0)


def test_env_info_and_arch_for_pong():
    info = env_info(EnvSpec("ALE/Pong-v5"))
    assert info.obs_shape == (4, 84, 84) and info.discrete and info.action_dim == 6 and info.family == "atari"
    assert PolicyArch.of(info, [64, 64]) == ARCH


def test_frames_are_skipped_max_pooled_grey_and_resized(pong):
    """One agent step = 4 emulator frames; the new frame is max(last two grey frames) resized to 84x84
    (replayed here on the raw emulator from a cloned state), pushed onto a stack of 4."""
    obs, _ = pong.reset(seed=3)
    assert obs.dtype == np.uint8 and obs.shape == (4, 84, 84)
    ale = pong.unwrapped.ale
    action_set = pong.unwrapped._action_set
    for t in range(60):  # past the serve, so frames change
        action = (2, 3, 0)[t % 3]
        state = ale.cloneState()
        nxt, *_ = pong.step(action)
        ale.restoreState(state)
        greys = []
        for _ in range(4):
            ale.act(action_set[action])
            greys.append(ale.getScreenGrayscale())
        expected = cv2.resize(np.maximum(greys[2], greys[3]), (84, 84), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(nxt[-1], expected)
        np.testing.assert_array_equal(nxt[:3], obs[1:])  # the stack shifts by one frame
        obs = nxt
    assert len({obs[i].tobytes() for i in range(4)}) > 1  # the frames differ: the game is moving


@pytest.mark.integration
@pytest.mark.parametrize("sticky", [0.0, 0.25])
def test_the_game_is_gymnasiums_preprocessing_frame_for_frame(sticky):
    """AtariGame drives the emulator itself; its observations, raw rewards and game ends are those of Gymnasium's
    AtariPreprocessing under a FrameStackObservation, replayed side by side over whole games (with sticky actions
    too: one seed, one emulator RNG)."""
    import gymnasium as gym

    ours = make_env(EnvSpec("ALE/Pong-v5", {"repeat_action_probability": sticky}))
    ref = gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(
        gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=sticky, disable_env_checker=True),
        noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False, grayscale_obs=True), 4)
    try:
        a, _ = ours.reset(seed=5)
        b, _ = ref.reset(seed=5)
        np.testing.assert_array_equal(a, b)
        rng, games = np.random.default_rng(0), 0
        for _ in range(2000):
            action = int(rng.integers(6))
            a, _, _, _, info = ours.step(action)
            b, raw, terminated, truncated, _ = ref.step(action)
            np.testing.assert_array_equal(a, b)
            assert (info["raw_reward"], info["game_over"]) == (raw, terminated or truncated)
            if info["game_over"]:
                games += 1
                np.testing.assert_array_equal(ours.reset()[0], ref.reset()[0])  # no seed: the no-ops go on alike
        assert games >= 1
    finally:
        ours.close()
        ref.close()


def test_rewards_clipped_and_lives_end_the_learning_episode_but_not_the_game():
    env = make_env(EnvSpec("ALE/Breakout-v5", {"repeat_action_probability": 0.0}))
    try:
        obs, _ = env.reset(seed=0)
        rng = np.random.default_rng(0)
        lives, saw_life_loss = env.unwrapped.ale.lives(), False
        for _ in range(3000):
            obs, reward, term, _, info = env.step(int(rng.integers(4)))
            assert reward == np.sign(info["raw_reward"])
            if term and not info["game_over"]:
                saw_life_loss = True
                assert env.unwrapped.ale.lives() == lives - 1
                cont, _ = env.reset()  # no seed: the game goes on where it stopped
                np.testing.assert_array_equal(cont, obs)
                break
        assert saw_life_loss
    finally:
        env.close()


@pytest.mark.integration
def test_rollout_reports_full_games_of_raw_rewards_and_carries_them_across_fragments(pong):
    snap = _snapshot()
    policy = snap.numpy_policy()
    carry, returns, steps = None, [], 0
    while not returns and steps < 4000:  # a Pong game under a random-ish policy lasts ~800+ agent steps
        frag = rollout(pong, snap, policy, 256, 11 + steps, 0.99, carry)
        assert frag.obs.dtype == np.uint8 and frag.last_obs.shape == (1, 4, 84, 84)
        carry, steps = frag.meta["carry"], steps + 256
        returns += frag.episode_returns.tolist()
        assert set(np.unique(frag.rewards)) <= {-1.0, 0.0, 1.0}
    assert returns and -21 <= returns[0] <= 21 and returns[0] == int(returns[0])
    assert returns[0] < 0  # an untrained agent loses most points
    assert frag.episode_lengths[0] > 256  # the game spanned several fragments


@pytest.mark.integration
def test_carried_ale_episode_is_reproducible_on_another_instance(pong):
    snap = _snapshot(1)
    first = rollout(pong, snap, snap.numpy_policy(), 64, 5, 0.99)
    carry = first.meta["carry"]
    assert set(carry["env"]) == {"ale", "lives", "frames", "elapsed"} and carry["obs"] is None
    other = make_env(PONG)
    try:
        a = rollout(pong, snap, snap.numpy_policy(), 64, 6, 0.99, carry)
        b = rollout(other, snap, snap.numpy_policy(), 64, 6, 0.99, carry)
    finally:
        other.close()
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.rewards, b.rewards)
    np.testing.assert_array_equal(a.obs[0], first.last_obs[0])  # continues where the fragment stopped
    assert a.meta["carry"]["ep_length"] == 128


@pytest.mark.integration
def test_a_carried_game_with_sticky_actions_continues_alike_on_any_instance_without_a_rom_load(monkeypatch):
    spec = EnvSpec("ALE/Pong-v5")  # sticky actions (0.25): the carry must hold the emulator's RNG
    snap = _snapshot(1)
    used, fresh = make_env(spec), make_env(spec)
    try:
        carry = rollout(used, snap, snap.numpy_policy(), 64, 5, 0.99).meta["carry"]
        rollout(used, snap, snap.numpy_policy(), 32, 9, 0.99)  # this instance's emulator and RNGs move on
        loads: list[int] = []
        for env in (used, fresh):
            load = env.unwrapped.load_game
            monkeypatch.setattr(env.unwrapped, "load_game", lambda load=load: (loads.append(1), load())[1])
        a = rollout(used, snap, snap.numpy_policy(), 64, 6, 0.99, carry)
        b = rollout(fresh, snap, snap.numpy_policy(), 64, 6, 0.99, carry)
        assert loads == []  # a seeded reset would reload the ROM (about 120 ms) only for the carry to replace it
        rollout(fresh, snap, snap.numpy_policy(), 8, 6, 0.99)
        assert loads == [1]  # a new game is still seeded
    finally:
        used.close()
        fresh.close()
    for name in ("obs", "actions", "rewards", "terminated"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_restore_rejects_a_foreign_frame_stack(pong):
    pong.reset(seed=0)
    state = capture_episode(pong)
    state["frames"]["shape"] = [2, 84, 84]
    state["frames"]["b64"] = state["frames"]["b64"][: len(state["frames"]["b64"]) // 2]
    with pytest.raises(ValueError):
        restore_episode(pong, state)


@pytest.mark.integration
def test_evaluate_plays_full_games(pong):
    snap = _snapshot(2)
    returns, lengths = evaluate(pong, snap, snap.numpy_policy(), 1, 0)
    assert -21 <= returns[0] <= 21 and lengths[0] > 500


# -- the Nature CNN ---------------------------------------------------------------------------------
def _random_cnn_params(seed: int) -> dict[str, np.ndarray]:
    """Initial weights with every entry perturbed by a tenth of its layer's spread (and the actor's, whose init is
    nearly flat, by more): every layer, biases included, differs from its initial value."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in init_params(ARCH, seed).items():
        scale = 0.05 if k.startswith("actor.") else 0.1 * v.std() + 0.01
        out[k] = (v + rng.standard_normal(v.shape) * scale).astype(np.float32)
    return out


@pytest.mark.integration
@pytest.mark.parametrize("which", ["init", "perturbed"])
def test_numpy_cnn_matches_jax(which):
    params = init_params(ARCH, 0) if which == "init" else _random_cnn_params(1)
    snap = snapshot_of(ARCH, params, None, 0, 10.0)
    obs = np.random.default_rng(0).integers(0, 256, size=(6, 4, 84, 84), dtype=np.uint8)
    actions = np.arange(6)
    weights = {k: jnp.asarray(v) for k, v in params.items()}
    logp, _, value = networks.evaluate(ARCH, weights, jnp.asarray(obs), jnp.asarray(actions))
    np.testing.assert_allclose(np.asarray(networks.value(ARCH, weights, jnp.asarray(obs))), np.asarray(value),
                               rtol=1e-6, atol=1e-6)
    policy = snap.numpy_policy()
    heads, values = policy.forward(obs)
    np.testing.assert_allclose(values, np.asarray(value), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(policy.log_prob(heads, actions), np.asarray(logp), rtol=1e-4, atol=1e-5)
    if which == "perturbed":  # the comparison is not between near-constants
        assert np.ptp(np.asarray(logp)) > 0.1 and np.ptp(np.asarray(value)) > 1e-3
    head1, value1 = policy.forward(obs[2])
    np.testing.assert_allclose(value1, values[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(head1, heads[2], rtol=1e-5, atol=1e-6)


def test_cnn_weights_round_trip_through_the_learner_and_the_snapshot():
    """The published layout is the learner's own: init → PPO weights → snapshot → NumPy policy, unchanged."""
    params = init_params(ARCH, 0)
    assert {k: v.shape for k, v in params.items()} == {
        "conv.0.weight": (32, 4, 8, 8), "conv.0.bias": (32,), "conv.1.weight": (64, 32, 4, 4), "conv.1.bias": (64,),
        "conv.2.weight": (64, 64, 3, 3), "conv.2.bias": (64,), "dense.weight": (512, 64 * 7 * 7),
        "dense.bias": (512,), "actor.weight": (6, 512), "actor.bias": (6,), "critic.weight": (1, 512),
        "critic.bias": (1,)}
    assert all(v.dtype == np.float32 for v in params.values())
    learner = SGDEngine(ARCH, params, learner_settings(), ppo_loss).numpy_weights()
    snap = snapshot_of(ARCH, learner, None, 0, 10.0)
    assert snap.params.keys() == params.keys()
    for name, value in params.items():
        np.testing.assert_array_equal(learner[name], value, err_msg=name)
        np.testing.assert_array_equal(snap.params[name], value, err_msg=name)
    other = init_params(ARCH, 1)
    assert not np.array_equal(other["conv.0.weight"], params["conv.0.weight"])  # the seed draws the weights
    np.testing.assert_array_equal(init_params(ARCH, 0)["dense.weight"], params["dense.weight"])


# -- fragments on the wire --------------------------------------------------------------------------
def test_image_fragments_travel_as_uint8_and_compactly(pong):
    snap = _snapshot()
    frag = rollout(pong, snap, snap.numpy_policy(), 32, 1, 0.99)
    blob = frag.encode({"id": "x"}, KEY)
    assert len(blob) < 33 * 4 * 84 * 84 + 4096  # the frames once, as bytes, plus small arrays and header
    arrays, meta = wire.decode(blob, KEY)
    back = Fragment.from_wire(arrays, meta, 32, ARCH)
    assert back.obs.dtype == np.uint8
    np.testing.assert_array_equal(back.obs, frag.obs)
    floats = dict(arrays, obs=arrays["obs"].astype(np.float32))
    with pytest.raises(wire.WireError, match="obs"):
        Fragment.from_wire(floats, meta, 32, ARCH)
    mlp = PolicyArch(4 * 84 * 84, 6, True, (64, 64))
    with pytest.raises(wire.WireError, match="obs"):
        Fragment.from_wire(arrays, meta, 32, mlp)


def test_arch_json_round_trip_and_unknown_net():
    assert PolicyArch.from_json(ARCH.to_json()) == ARCH
    with pytest.raises(ValueError, match="unknown policy network"):
        PolicyArch.from_json({**ARCH.to_json(), "net": "transformer"})


# -- config -----------------------------------------------------------------------------------------
def test_atari_preset_is_cleanrl_ppo_atari(tmp_path):
    cfg, info = prepare_config(TrainConfig(env_id="ALE/Pong-v5", run_dir=str(tmp_path / "r")))
    assert info.family == "atari"
    lc = cfg.learner
    assert (cfg.run.total_timesteps, cfg.env.fragment_length, cfg.scaling.actors, lc.learning_rate, lc.lr_schedule) == (
        10_000_000, 128, 8, 2.5e-4, "anneal")
    assert (lc.update_epochs, lc.minibatch_size, lc.clip_coef, lc.ent_coef, lc.vf_coef) == (4, 256, 0.1, 0.01, 0.5)
    assert (lc.gamma, lc.gae_lambda, lc.max_grad_norm, lc.normalize_obs) == (0.99, 0.95, 0.5, False)


def test_atari_with_observation_normalisation_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="normalize_obs"):
        prepare_config(TrainConfig(env_id="ALE/Pong-v5", normalize_obs=True, run_dir=str(tmp_path / "r")))
