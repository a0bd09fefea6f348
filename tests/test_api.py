"""The Python API: ``minionsrl.train`` and ``minionsrl.load_policy(...).predict`` (NumPy alone)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import minionsrl
from minionsrl import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.experiments.evaluate import evaluate_run
from minionsrl.function import extras
from minionsrl.function.numpy_policy import make_numpy_policy
from minionsrl.loop import checkpoint

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _tiny(env_id: str, run_dir, **kw) -> TrainConfig:
    return TrainConfig(env_id=env_id, actors=2, fragment_length=32, max_rounds=2, eval_episodes=1, progress=False,
                       tensorboard=False, max_concurrency=2, run_dir=str(run_dir), **kw)


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("api") / "cartpole"
    rows: list[minionsrl.RoundStats] = []
    summary = minionsrl.train(_tiny("CartPole-v1", run_dir, keep_checkpoints_every=1), on_round=rows.append)
    assert [row.round for row in rows] == [1, 2]
    with pytest.raises(TypeError, match=r"read row\.eval_return_mean, not row\['eval_return_mean'\]"):
        rows[0]["eval_return_mean"]  # a callback written for the dict rows of before: one line
    return run_dir, summary


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("api") / "pendulum"
    minionsrl.train(_tiny("Pendulum-v1", run_dir, normalize_obs=True), plots=False)
    return run_dir


def _returns(policy, episodes: int, seed: int) -> list[float]:
    """Drive the env as the README shows: reset, predict, step."""
    env = policy.make_env()
    returns = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        total, done = 0.0, False
        while not done:
            obs, reward, term, trunc, _ = env.step(policy.act(obs))
            total += float(reward)
            done = term or trunc
        returns.append(total)
    env.close()
    return returns


def test_train_is_the_cli_path_and_writes_the_run_dir(cartpole_run):
    run_dir, summary = cartpole_run
    assert summary["rounds"] == 2 and summary["stopped_by"] == "max_rounds"
    assert json.loads((run_dir / "summary.json").read_text()) == summary
    assert (run_dir / "checkpoints" / "latest.safetensors").exists()
    assert sorted(p.name for p in (run_dir / "plots").iterdir()) == ["actors.png", "cost.png", "return.png"]
    assert "train" in dir(minionsrl) and minionsrl.TrainConfig is TrainConfig
    with pytest.raises(AttributeError):
        _ = minionsrl.no_such_name


def test_cartpole_single_and_batch_predictions_agree_with_the_numpy_policy(cartpole_run):
    run_dir, _ = cartpole_run
    policy = minionsrl.load_policy(run_dir)
    assert policy.round == 2 and policy.arch.discrete and policy.env_id == "CartPole-v1"
    state = checkpoint.load(run_dir / "checkpoints")
    net = make_numpy_policy(policy.arch, state["policy"])  # the rollout function's policy, from the checkpoint
    env = gym.make("CartPole-v1")
    obs = np.stack([env.reset(seed=s)[0] for s in range(64)]) + np.random.default_rng(0).normal(
        0, 0.5, (64, 4)).astype(np.float32)  # spread the states so both actions occur
    batch = policy.act(obs)
    assert batch.shape == (64,) and batch.dtype == np.int64
    singles = [policy.act(o) for o in obs]
    assert all(type(a) is int and env.action_space.contains(a) for a in singles)
    assert singles == batch.tolist()
    assert batch.tolist() == np.argmax(net.forward(obs)[0], axis=-1).tolist()  # greedy
    assert policy.value(obs[0]) == pytest.approx(float(net.forward(obs[0])[1]), rel=1e-5)
    # stochastic predictions draw from the policy's distribution, seeded
    draws = [minionsrl.load_policy(run_dir, seed=3).act(obs, deterministic=False) for _ in range(2)]
    assert draws[0].tolist() == draws[1].tolist()
    with pytest.raises(ValueError, match="shape"):
        policy.act(np.zeros(5))


def test_driving_cartpole_reproduces_the_runs_evaluation(cartpole_run):
    """load_policy + predict, stepping a Gymnasium env, gives exactly the returns `minionsrl eval` (the
    learner's snapshot run by the rollout function's evaluate) gives on the same seeds."""
    run_dir, _ = cartpole_run
    expected = evaluate_run(run_dir, episodes=3, seed=500)["returns"]
    assert _returns(minionsrl.load_policy(run_dir), 3, 500) == expected


def test_a_checkpoint_file_loads_its_round(cartpole_run):
    run_dir, _ = cartpole_run
    first = minionsrl.load_policy(run_dir / "checkpoints" / "round-00001.safetensors")
    latest = minionsrl.load_policy(str(run_dir / "checkpoints" / "latest.safetensors"))
    assert (first.round, latest.round) == (1, 2)
    saved = checkpoint.load(run_dir / "checkpoints", "round-00001.safetensors")["policy"]
    assert np.array_equal(first.snapshot.params["actor.0.weight"], saved["actor.0.weight"])


def test_pendulum_applies_the_saved_normalisation_and_clips(pendulum_run):
    policy = minionsrl.load_policy(pendulum_run)
    state = checkpoint.load(pendulum_run / "checkpoints")
    mean, var = state["obs_rms"]["mean"], state["obs_rms"]["var"]
    assert policy.config.learner.normalize_obs and state["obs_rms"]["count"] > 1 and not np.allclose(mean, 0)
    net = make_numpy_policy(policy.arch, state["policy"])
    rng = np.random.default_rng(1)
    obs = np.column_stack([np.cos(a := rng.uniform(-np.pi, np.pi, 32)), np.sin(a), rng.uniform(-8, 8, 32)])
    obs = obs.astype(np.float32)
    normalised = np.clip((obs - mean) / np.sqrt(var + 1e-8), -10.0, 10.0).astype(np.float32)
    head = net.forward(normalised)[0]
    expected = np.clip(head, -2.0, 2.0)
    batch = policy.act(obs)
    assert batch.shape == (32, 1) and batch.dtype == np.float32
    np.testing.assert_allclose(batch, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(policy.act(obs[0]), expected[0], rtol=1e-5, atol=1e-6)
    assert np.abs(net.forward(obs)[0] - head).max() > 1e-4  # the raw observations would give other actions
    sampled = policy.act(obs, deterministic=False)  # noise added, then clipped to the bounds
    assert np.all(sampled >= -2.0) and np.all(sampled <= 2.0) and not np.allclose(sampled, batch)
    assert _returns(policy, 2, 900) == evaluate_run(pendulum_run, episodes=2, seed=900)["returns"]


@pytest.mark.integration
def test_atari_frame_stacks_from_the_env_wrapper(tmp_path):
    """A CNN policy on the uint8 frame stacks of the env that Policy.make_env builds (as rollout functions build
    it). Its weights are random, in the learner's layout (names and shapes checked against the JAX network)."""
    pytest.importorskip("ale_py")


    from minionsrl import config
    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.function.numpy_policy import param_shapes as expected_shapes
    from minionsrl.learner import networks
    from minionsrl.prepare import prepare_config

    cfg, info = prepare_config(TrainConfig(env_id="ALE/Pong-v5", env_kwargs={"repeat_action_probability": 0.0},
                                           max_rounds=1, run_dir=str(tmp_path / "pong")))
    arch = PolicyArch.of(info, cfg.learner.hidden_sizes)
    learner_layout = networks._cnn_params(np.random.default_rng(0), arch)
    assert {k: v.shape for k, v in learner_layout.items()} == expected_shapes(arch)
    rng = np.random.default_rng(0)
    params = {k: rng.normal(0, 0.05, shape).astype(np.float32) for k, shape in expected_shapes(arch).items()}
    (tmp_path / "pong").mkdir()
    config.dump(cfg, tmp_path / "pong" / "config.yaml")
    checkpoint.save(tmp_path / "pong" / "checkpoints", {"round": 0, "policy": params, "obs_rms": None})
    policy = minionsrl.load_policy(tmp_path / "pong")
    assert policy.arch.image
    env = policy.make_env()
    obs, _ = env.reset(seed=0)
    stacks = []
    for t in range(16):
        stacks.append(obs)
        obs, *_ = env.step(policy.act(obs) if t % 2 else env.action_space.sample())
    env.close()
    stacks = np.stack(stacks)
    assert stacks.dtype == np.uint8 and stacks.shape == (16, 4, 84, 84)
    batch = policy.act(stacks)
    greedy = np.argmax(make_numpy_policy(arch, params).forward(stacks)[0], axis=-1)
    assert batch.tolist() == greedy.tolist() == [policy.act(s) for s in stacks]
    with pytest.raises(ValueError, match="uint8"):
        policy.act(stacks[0].astype(np.float32) / 255)


def test_the_readme_examples_run(cartpole_run):
    section = README.split("## From Python")[1].split("\n## ")[0]
    drive, training = re.findall(r"```python\n(.*?)```", section, re.S)
    assert '"runs/cartpole"' in drive and len(drive.strip().splitlines()) <= 7
    scope: dict = {}
    exec(drive.replace('"runs/cartpole"', repr(str(cartpole_run[0]))), scope)
    assert scope["done"] and scope["env"].spec.id == "CartPole-v1"
    compile(training, "README", "exec")
    assert "from minionsrl import TrainConfig, train" in training


def test_loading_refuses_what_is_not_a_run(cartpole_run, tmp_path):
    run_dir, _ = cartpole_run
    # each line names the caller's argument (one rule, minionsrl.files.config_path, for every reader of a run dir)
    with pytest.raises(ConfigError, match=r"^load_policy: .* holds no run \(no config\.yaml\); pass a run directory"):
        minionsrl.load_policy(tmp_path)
    with pytest.raises(ConfigError, match=r"^--run-dir: .* holds no run \(no config\.yaml\)"):
        evaluate_run(tmp_path)
    with pytest.raises(ConfigError, match=r"^load_policy: .* does not exist"):
        minionsrl.load_policy(tmp_path / "nope")
    stray = tmp_path / "stray.safetensors"
    stray.write_bytes((run_dir / "checkpoints" / "latest.safetensors").read_bytes())
    with pytest.raises(ConfigError, match=r"^load_policy: no config\.yaml beside checkpoint"):
        minionsrl.load_policy(stray)
    # a checkpoint whose weights do not fit the config's network
    bad = tmp_path / "bad"
    (bad / "checkpoints").mkdir(parents=True)
    (bad / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    state = checkpoint.load(run_dir / "checkpoints")
    state["policy"]["actor.0.weight"] = np.zeros((3, 4), np.float32)
    checkpoint.save(bad / "checkpoints", state)
    with pytest.raises(ConfigError, match=r"actor\.0\.weight"):
        minionsrl.load_policy(bad)
    # a config.yaml that fails the CLI's checks
    (bad / "config.yaml").write_text((run_dir / "config.yaml").read_text().replace("actors: 2", "actors: -1"))
    with pytest.raises(ConfigError, match="actors"):
        minionsrl.load_policy(bad)
    (bad / "checkpoints" / "latest.safetensors").write_bytes(b"garbage")
    (bad / "config.yaml").write_text((run_dir / "config.yaml").read_text())
    with pytest.raises(ConfigError, match="cannot be read"):
        minionsrl.load_policy(bad)
    # the weights' bytes altered after the file was written: it still parses, and is refused
    latest = bytearray((run_dir / "checkpoints" / "latest.safetensors").read_bytes())
    latest[-600:-300] = bytes(300)
    (bad / "checkpoints" / "latest.safetensors").write_bytes(bytes(latest))
    with pytest.raises(ConfigError, match=r"^load_policy: checkpoint .* cannot be read \(its weights or state differ "
                                          r"from what was written: the file was altered or damaged\)$"):
        minionsrl.load_policy(bad)


_DRIVE = """
    import json, sys
    import numpy
    from threadpoolctl import threadpool_info
    blas = lambda: [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    before = blas()
    import gymnasium as gym
    import minionsrl
    policy = minionsrl.load_policy(sys.argv[1])
    env = gym.make("CartPole-v1")
    returns = []
    for ep in range({episodes}):
        obs, _ = env.reset(seed=100 + ep)
        total, done = 0.0, False
        while not done:
            obs, reward, term, trunc, _ = env.step(policy.act(obs))
            total, done = total + reward, term or trunc
        returns.append(total)
    print(json.dumps({{"returns": returns, "jax": "jax" in sys.modules, "torch": "torch" in sys.modules,
                      "blas": [before, blas()]}}))
"""


def _drive_in_a_fresh_interpreter(run_dir, episodes: int, subprocess_env) -> dict:
    code = textwrap.dedent(_DRIVE.format(episodes=episodes))
    out = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, timeout=300,
                         env=subprocess_env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_load_policy_needs_neither_jax_nor_torch(cartpole_run, subprocess_env):
    result = _drive_in_a_fresh_interpreter(cartpole_run[0], 1, subprocess_env)
    assert result["jax"] is False and result["torch"] is False
    assert result["blas"][0] == result["blas"][1]  # the rollout module's one-thread BLAS cap is not left behind
    assert len(result["returns"]) == 1


@pytest.mark.slow
def test_a_trained_cartpole_policy_reaches_its_return_on_numpy_alone(tmp_path, subprocess_env):
    """A run trained to an evaluation of 500 over 20 episodes; its policy, loaded in a fresh interpreter that never
    imports JAX or torch, drives CartPole-v1 on five other seeds to the returns `minionsrl eval` gets there."""
    cfg = TrainConfig(env_id="CartPole-v1", preset="classic", target_return=500, total_timesteps=200_000, seed=2,
                      eval_episodes=20, progress=False, tensorboard=False, run_dir=str(tmp_path / "run"))
    summary = minionsrl.train(cfg, plots=False)
    assert summary["final_eval_return"] >= 475, summary
    result = _drive_in_a_fresh_interpreter(tmp_path / "run", 5, subprocess_env)
    assert result["jax"] is False and result["torch"] is False
    assert result["returns"] == evaluate_run(tmp_path / "run", episodes=5, seed=100)["returns"]
    assert np.mean(result["returns"]) >= 475, result


def test_help_shows_each_flags_default_or_the_preset(capsys):
    from minionsrl import cli, config

    with pytest.raises(SystemExit):
        cli.main(["train", "--help-all"])  # --help without the rarely used flags (test_config_cli)
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    assert "--actors ACTORS number of actors per round (fixed scaler), or auto: " in text and "(default: 8)" in text
    assert "--objective {cost,time}, --optimize {cost,time}" in text  # one setting, the name for it too
    assert ("--learning-rate LEARNING_RATE Adam learning rate (default: from the preset: classic 0.00025, mujoco "
            "0.0003, atari 0.00025; nitro 5e-05)") in text
    assert "--hidden-sizes N [N ...] hidden layer sizes of actor and critic (default: 64 64)" in text
    assert "(default: from the preset: 0.99)" in text  # gamma: every family's
    assert "(default: unset)" in text  # --max-rounds
    for name in config.FIELDS:  # every flag says its default
        assert "default" in config.help_text(name), name
        flag = "--" + name.replace("_", "-")
        assert flag in text
    for name, value in config.PRESETS["mujoco"].items():
        assert f"mujoco {value}" in config.help_text(name) or f"preset: {value}" in config.help_text(name), name


def _wandb_records(path) -> list:
    """The records of a ``.wandb`` file: W&B's LevelDB-style log (a 7-byte header ``:W&B``, 0xBEE1, version 0;
    32 KiB blocks of chunks, each with a CRC-32, a length and a type: full, first, middle, last) of
    ``wandb_internal_pb2.Record`` protobufs. W&B's own Python reader left the package with its Go core."""
    import struct
    import zlib

    from wandb.proto import wandb_internal_pb2

    data, block, header = Path(path).read_bytes(), 32768, 7
    assert struct.unpack("<4sHB", data[:header]) == (b":W&B", 0xBEE1, 0)
    records, pos, pending = [], header, b""
    while pos + header <= len(data):
        if block - pos % block < header:  # the rest of a block too short for a header is padding
            pos += block - pos % block
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + header])
        if kind == 0 and length == 0:
            break
        chunk = data[pos + header:pos + header + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc
        pos, pending = pos + header + length, pending + chunk
        if kind in (1, 4):  # full, last
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _wandb_run(run_dir) -> dict:
    """What the offline W&B runs in ``RUN_DIR/wandb`` hold: run ids, project, entity, config, history, summary."""
    out: dict = {"ids": [], "history": [], "config": {}, "summary": {}}
    for run_file in sorted((Path(run_dir) / "wandb").glob("offline-run-*/run-*.wandb")):
        for record in _wandb_records(run_file):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                out["ids"].append(record.run.run_id)
                out["project"], out["entity"] = record.run.project, record.run.entity
                out["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
            elif kind == "history":
                out["history"].append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                                       for i in record.history.item})
            elif kind == "summary":
                out["summary"].update({i.key: json.loads(i.value_json) for i in record.summary.update if i.key})
    return out


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    home = tmp_path / "wandb-home"
    for var, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_ERROR_REPORTING": "false",
                       "WANDB_CONFIG_DIR": home / "config", "WANDB_CACHE_DIR": home / "cache",
                       "WANDB_DATA_DIR": home / "data"}.items():
        monkeypatch.setenv(var, str(value))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)


@pytest.mark.integration
def test_track_logs_scalars_config_and_plots_to_wandb_offline(tmp_path, wandb_offline):
    from minionsrl import cli
    from minionsrl.loop.metrics import TENSORBOARD_TAGS, read_metrics

    run_dir = tmp_path / "tracked"
    # the family preset, whose slow start finishes an episode in each 32-step round (checked below)
    flags = ["--env-id", "CartPole-v1", "--preset", "classic", "--actors", "1", "--fragment-length", "32",
             "--eval-episodes", "1", "--no-progress", "--no-tensorboard", "--run-dir", str(run_dir)]
    assert cli.main(["train", "--track", "--wandb-project-name", "minionsrl-test", "--wandb-entity", "someone",
                     "--max-rounds", "1", *flags]) == 0
    assert cli.main(["train", "--resume", "--max-rounds", "2", *flags]) == 0  # continues the same W&B run
    # W&B's service process writes the offline files on its own time: in CI one file lacked its run record when
    # read right after finish() returned, and held it when read later; wait for both sessions' records
    deadline = time.monotonic() + 30
    while len((logged := _wandb_run(run_dir))["ids"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    files = sorted(str(p.relative_to(run_dir)) for p in (run_dir / "wandb").rglob("*.wandb"))
    assert len(logged["ids"]) == 2 and len(set(logged["ids"])) == 1, files
    assert (run_dir / "wandb" / "minionsrl-run-id").read_text() == logged["ids"][0]
    assert (logged["project"], logged["entity"]) == ("minionsrl-test", "someone")
    config = logged["config"]  # the resolved config
    assert (config["env_id"], config["track"], config["fragment_length"], config["learning_rate"]) == (
        "CartPole-v1", True, 32, 2.5e-4)
    # the TensorBoard scalars of every round, against environment steps
    rows = read_metrics(run_dir)
    scalars = [h for h in logged["history"] if "charts/SPS" in h]
    assert [h["global_step"] for h in scalars] == [int(r["env_steps"]) for r in rows] == [32, 64]
    for h, row in zip(scalars, rows, strict=True):
        for key, tag in TENSORBOARD_TAGS.items():
            if row.get(key):
                assert h[tag] == pytest.approx(float(row[key]), rel=1e-6), tag
    assert "losses/policy_loss" in scalars[0] and "charts/episodic_return" in scalars[-1]
    # the plots, as images of the last step, and the summary
    images = [h for h in logged["history"] if h.get("plots/return/_type") == "image-file"]
    assert [h["global_step"] for h in images] == [32, 64]  # each session's plots, at its last step
    assert {h["plots/cost/format"] for h in images} == {"png"}
    assert len(list((run_dir / "wandb").glob("offline-run-*/files/media/images/plots/*.png"))) == 6
    summary = json.loads((run_dir / "summary.json").read_text())
    assert logged["summary"]["rounds"] == 2 and logged["summary"]["final_eval_return"] == summary["final_eval_return"]


def test_track_without_wandb_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    from minionsrl import cli

    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    assert cli.main(["train", "--track", "--max-rounds", "1", "--run-dir", str(tmp_path / "r")]) == 2
    assert extras.install_hint("wandb") in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
    with pytest.raises(ConfigError, match="wandb"):
        minionsrl.train(TrainConfig(track=True, max_rounds=1, run_dir=str(tmp_path / "r")))


# -- what an SB3 user reaches for ------------------------------------------------------------------
def test_predict_unpacks_as_stable_baselines3s(cartpole_run, pendulum_run):
    cart = minionsrl.load_policy(cartpole_run[0])
    obs = np.array([0.01, -0.02, 0.03, 0.04], dtype=np.float32)
    action, state = cart.predict(obs)  # SB3: `action, _states = model.predict(obs)`; before: TypeError on an int
    assert (action, state) == (cart.act(obs), None) and cart.predict(obs, deterministic=True).action == action
    pend = minionsrl.load_policy(pendulum_run)
    obs = pend.make_env().reset(seed=0)[0]
    action, state = pend.predict(obs, state=None, episode_start=None)  # a Box action is not unpacked into floats
    assert action.shape == (1,) and state is None
    np.testing.assert_array_equal(action, pend.act(obs))


def test_evaluate_is_sb3s_evaluate_policy_and_agrees_with_minionsrl_eval(cartpole_run):
    import gymnasium as gym

    run_dir, _ = cartpole_run
    assert "evaluate" in minionsrl.__all__
    expected = evaluate_run(run_dir, episodes=3, seed=100)
    policy = minionsrl.load_policy(run_dir)
    mean, std = minionsrl.evaluate(policy, "CartPole-v1", n_episodes=3, seed=100)
    assert (mean, std) == (expected["return_mean"], expected["return_std"])
    assert minionsrl.evaluate(run_dir, n_episodes=3, seed=100) == (mean, std)  # a run dir, the run's env
    env = gym.make("CartPole-v1")
    assert minionsrl.evaluate(policy, env, n_episodes=3, seed=100) == (mean, std)
    env.close()
    sampled, _ = minionsrl.evaluate(policy, n_episodes=2, deterministic=False)
    assert sampled > 0
    with pytest.raises(ConfigError, match="evaluate: env is a dict"):
        minionsrl.evaluate(policy, {"id": "CartPole-v1"})


def test_the_package_declares_its_type_hints():
    root = Path(minionsrl.__file__).parent
    assert (root / "py.typed").exists()
    assert '"py.typed"' in (root.parent / "pyproject.toml").read_text()
