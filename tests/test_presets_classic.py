"""``--preset auto`` on the classic-control envs: the family preset plus the env's row of ``ENV_PRESETS``, a
Gaussian policy for the continuous ones, and a short learning run (slow)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import as_resolved

from minionsrl import config
from minionsrl.config import ENV_PRESETS, PRESETS, TrainConfig
from minionsrl.function.numpy_policy import PolicyArch, param_shapes
from minionsrl.prepare import prepare_config

CLASSIC = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1",
           pytest.param("LunarLander-v3", marks=pytest.mark.skipif(importlib.util.find_spec("Box2D") is None,
                                                                    reason="the box2d extra is not installed"))]
CONTINUOUS = {"MountainCarContinuous-v0", "Pendulum-v1"}


@pytest.mark.parametrize("env_id", CLASSIC)
def test_auto_picks_the_classic_preset_and_the_envs_row(env_id: str) -> None:
    cfg, info = prepare_config(TrainConfig(env_id=env_id, run_dir="unused"))
    assert info.family == "classic"
    expected = as_resolved({**PRESETS["classic"], **ENV_PRESETS.get(env_id, {})})
    assert {name: cfg.get(name) for name in expected} == expected
    assert cfg.run.total_timesteps is not None  # the preset's budget is the stop condition
    arch = PolicyArch.of(info, cfg.learner.hidden_sizes)
    assert arch.discrete is (env_id not in CONTINUOUS)
    assert ("log_std" in param_shapes(arch)) is (env_id in CONTINUOUS)  # a Gaussian policy: mean and log std


def test_every_classic_env_has_its_own_row() -> None:
    assert set(ENV_PRESETS) == {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
                                "Pendulum-v1", "LunarLander-v3"}
    for env_id, row in ENV_PRESETS.items():
        assert set(row) <= set(config.FIELDS), env_id
        assert all(config.FIELDS[name].default is None for name in row), env_id  # only fields a preset fills
        config.validate(config.build({"env_id": env_id, **row}))  # every value passes the field's rules


def test_a_named_preset_or_a_flag_beats_the_envs_row() -> None:
    bare, _ = prepare_config(TrainConfig(env_id="Pendulum-v1", preset="classic", run_dir="unused"))
    classic = as_resolved(PRESETS["classic"])
    assert {name: bare.get(name) for name in classic} == classic
    flagged, _ = prepare_config(TrainConfig(env_id="Pendulum-v1", gamma=0.99, run_dir="unused"))
    assert flagged.learner.gamma == 0.99
    assert flagged.learner.learning_rate == ENV_PRESETS["Pendulum-v1"]["learning_rate"]
    nitro, _ = prepare_config(TrainConfig(env_id="Pendulum-v1", preset="nitro", run_dir="unused"))
    assert nitro.learner.learning_rate == config.NITRO_PRESET["learning_rate"] and nitro.learner.gamma == 0.99


def test_readme_names_every_envs_row_as_flags() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for env_id, row in ENV_PRESETS.items():
        line = next(line for line in readme.splitlines() if line.startswith(f"| `{env_id}`"))
        assert f"`{config.preset_flags(row)}`" in line, env_id


def test_help_of_preset_names_the_per_env_rows() -> None:
    text = config.help_text("preset")
    assert "ENV_PRESETS" in text and "default: auto" in text
    for env_id, row in ENV_PRESETS.items():  # each field's --help names the envs that set it, after the families'
        for name, value in row.items():
            shown = value if isinstance(value, bool) else config.preset_flags({name: value}).split()[-1]
            assert f"{env_id} {shown}" in config.help_text(name), (env_id, name)
    assert config.help_text("gamma").endswith("(auto, per env: CartPole-v1 0.98, MountainCarContinuous-v0 0.9999, "
                                              "Pendulum-v1 0.9, LunarLander-v3 0.999)")


@pytest.mark.slow
def test_mountain_car_continuous_learns_with_auto(tmp_path) -> None:
    """The cheapest env the zoo tunes: its 20k steps with the preset's settings reach the goal (return > 50)."""
    from minionsrl.build import make_trainer

    cfg = TrainConfig(env_id="MountainCarContinuous-v0", seed=1, progress=False, tensorboard=False,
                      eval_episodes=2, run_dir=str(tmp_path / "run"))
    summary = make_trainer(cfg).run()
    assert summary["env_steps"] >= 20_000
    assert summary["best_eval_return"] > 50.0
