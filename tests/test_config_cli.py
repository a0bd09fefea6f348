"""Configuration and the command line: bad input is one clear line and exit code 2; YAML, flags, presets."""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import as_resolved

from minionsrl import cli
from minionsrl.config import ENV_PRESETS, PRESETS, ROLES, LearnerConfig, TrainConfig, build, load_yaml
from minionsrl.errors import ConfigError
from minionsrl.prepare import prepare_config

FAST = ["--max-rounds", "1", "--actors", "1", "--fragment-length", "32", "--eval-episodes", "1",
        "--hidden-sizes", "8", "--no-progress", "--no-tensorboard"]


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got: {err!r}"
    assert lines[0].startswith("minionsrl: error:"), lines[0]
    return lines[0]


def _write_yaml(path: Path, data: dict | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


# -- bad input: exit code 2 and one line naming the field -------------------------------------------
@pytest.mark.parametrize(("flags", "needles"), [
    (["--env-id", "CartPol-v1"], ["env_id", "did you mean", "CartPole-v1"]),
    (["--env-id", "custom_env:NoSuchEnv"], ["env_id", "NoSuchEnv"]),
    (["--learning-rate", "-0.1"], ["learning_rate", "> 0"]),
    (["--learning-rate", "nan"], ["learning_rate", "finite"]),
    (["--actors", "0"], ["actors", ">= 1 or auto"]),
    (["--gamma", "1.5"], ["gamma", "<= 1"]),
    (["--fragment-length", "0"], ["fragment_length"]),
    (["--hidden-sizes", "64", "0"], ["hidden_sizes"]),
    (["--seed", "-1"], ["seed"]),
])
def test_bad_flag_is_one_line_exit_2(tmp_path, capsys, flags, needles):
    run_dir = tmp_path / "run"
    rc = cli.main(["train", *FAST, "--run-dir", str(run_dir), *flags])
    assert rc == 2
    line = _error_line(capsys)
    for needle in needles:
        assert needle in line
    assert not run_dir.exists()  # nothing started


def test_bad_choice_flag_is_one_line_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:  # argparse checks the choices, before any field is validated
        cli.main(["train", *FAST, "--run-dir", str(tmp_path / "run"), "--detector-placement", "during"])
    assert exit_.value.code == 2
    line = _error_line(capsys)
    assert "--detector-placement" in line and "'before', 'after'" in line
    assert not (tmp_path / "run").exists()


def test_config_without_any_stop_condition_is_refused():
    from minionsrl.config import validate

    with pytest.raises(ConfigError, match="total_timesteps, max_rounds, target_return, budget_usd or time_budget_s"):
        validate(TrainConfig(env_id="CartPole-v1", total_timesteps=None))
    validate(TrainConfig(env_id="CartPole-v1", total_timesteps=None, time_budget_s=60.0))  # a budget ends a run


def test_preset_total_timesteps_is_a_stop_condition():
    cfg, _ = prepare_config(TrainConfig(env_id="CartPole-v1", run_dir="unused"))
    assert cfg.run.total_timesteps == ENV_PRESETS["CartPole-v1"]["total_timesteps"]
    cfg, _ = prepare_config(TrainConfig(env_id="CartPole-v1", preset="classic", run_dir="unused"))
    assert cfg.run.total_timesteps == PRESETS["classic"]["total_timesteps"]


def test_unknown_yaml_key_suggests_the_field(tmp_path, capsys):
    cfg = _write_yaml(tmp_path / "c.yaml", {"learning_rat": 0.001, "max_rounds": 1})
    rc = cli.main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "--no-progress"])
    assert rc == 2
    line = _error_line(capsys)
    assert "'learning_rat'" in line and "did you mean 'learning_rate'" in line


@pytest.mark.parametrize(("content", "field"), [
    ("learning_rate: fast\nmax_rounds: 1\n", "learning_rate"),
    ("actors: '8'\nmax_rounds: 1\n", "actors"),
    ("actors: 2.5\nmax_rounds: 1\n", "actors"),
    ("normalize_obs: 1\nmax_rounds: 1\n", "normalize_obs"),
    ("env_kwargs: [1, 2]\nmax_rounds: 1\n", "env_kwargs"),
    ("hidden_sizes: 64\nmax_rounds: 1\n", "hidden_sizes"),
    ("detector_placement: during\nmax_rounds: 1\n", "detector_placement: 'during' is not one of before, after"),
])
def test_yaml_wrong_type_is_one_line_exit_2(tmp_path, capsys, content, field):
    cfg = _write_yaml(tmp_path / "c.yaml", content)
    rc = cli.main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "--no-progress"])
    assert rc == 2
    assert field in _error_line(capsys)


@pytest.mark.parametrize("content", ["a: [unclosed\n", "- just\n- a list\n"])
def test_malformed_yaml_is_one_line_exit_2(tmp_path, capsys, content):
    cfg = _write_yaml(tmp_path / "c.yaml", content)
    assert cli.main(["train", "--config", str(cfg), "--run-dir", str(tmp_path / "r")]) == 2
    assert "config file" in _error_line(capsys)


def test_missing_config_file(tmp_path, capsys):
    rc = cli.main(["train", "--config", str(tmp_path / "nope.yaml"), "--run-dir", str(tmp_path / "r")])
    assert rc == 2
    line = _error_line(capsys)
    assert "nope.yaml" in line and "does not exist" in line


def test_resume_on_empty_dir(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    rc = cli.main(["train", "--resume", "--run-dir", str(empty), "--no-progress"])
    assert rc == 2
    line = _error_line(capsys)
    assert "--resume" in line and "no config.yaml" in line
    assert list(empty.iterdir()) == []


def test_resume_without_run_dir(capsys):
    assert cli.main(["train", "--resume"]) == 2
    assert "--run-dir" in _error_line(capsys)


def test_eval_on_missing_run(tmp_path, capsys):
    assert cli.main(["eval", "--run-dir", str(tmp_path / "nothing")]) == 2
    assert "--run-dir" in _error_line(capsys)


def test_bad_env_kwargs_is_one_line_exit_2(tmp_path, capsys):
    rc = cli.main(["train", *FAST, "--run-dir", str(tmp_path / "r"), "--env-kwargs", '{"no_such_kwarg": 1}'])
    assert rc == 2
    assert "env_kwargs" in _error_line(capsys)


def test_entry_point_without_module_is_one_line_exit_2(tmp_path, capsys):
    rc = cli.main(["train", *FAST, "--run-dir", str(tmp_path / "r"), "--env-id", ":Foo"])
    assert rc == 2
    assert "env_id" in _error_line(capsys)


def test_env_with_missing_dependency_is_one_line_exit_2(tmp_path, capsys, monkeypatch):
    # Box2D made unimportable (None in sys.modules), and gymnasium's Box2D envs imported afresh, so that this runs
    # whether the extra is installed or not
    monkeypatch.setitem(sys.modules, "Box2D", None)
    for name in [m for m in sys.modules if m.startswith("gymnasium.envs.box2d")]:
        monkeypatch.delitem(sys.modules, name)
    rc = cli.main(["train", *FAST, "--run-dir", str(tmp_path / "r"), "--env-id", "LunarLander-v3"])
    assert rc == 2
    assert "box2d" in _error_line(capsys).lower()


def test_an_integer_flag_takes_a_whole_float_as_python_does_and_refuses_a_fraction(tmp_path, capsys):
    """``--total-timesteps 1e5`` is 100,000, as ``TrainConfig(total_timesteps=1e5)`` is; 1.5 is one line."""
    args = cli.build_parser().parse_args(["train", "--total-timesteps", "1e5", "--hidden-sizes", "6.4e1", "32"])
    assert (args.total_timesteps, args.hidden_sizes) == (100_000, [64, 32])
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", *FAST, "--run-dir", str(tmp_path / "run"), "--total-timesteps", "1.5"])
    assert exit_.value.code == 2 and "--total-timesteps: '1.5' is not a whole number" in _error_line(capsys)


def test_a_field_reads_by_its_flat_name_as_it_is_written():
    """``cfg.seed`` as ``TrainConfig(seed=3)`` wrote it (SB3 and CleanRL users read fields flat); a typo is the
    AttributeError that names the field."""
    cfg = TrainConfig(env_id="CartPole-v1", seed=3, learning_rate=1e-3)
    assert (cfg.seed, cfg.learning_rate, cfg.env_id) == (cfg.run.seed, cfg.learner.learning_rate, "CartPole-v1")
    with pytest.raises(AttributeError, match="did you mean 'seed'"):
        _ = cfg.sed
    assert not hasattr(cfg, "__wrapped__")  # a probe for a dunder is not a field lookup


def test_yaml_scientific_notation_without_dot():
    values = {"learning_rate": yaml.safe_load("learning_rate: 3e-4")["learning_rate"]}
    assert build(values).learner.learning_rate == pytest.approx(3e-4)


# -- YAML and flags ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def yaml_run(tmp_path_factory):
    """One tiny real run: YAML supplies most fields, a flag overrides the seed."""
    tmp = tmp_path_factory.mktemp("yaml_run")
    cfg = _write_yaml(tmp / "c.yaml", {
        "env_id": "CartPole-v1", "env-kwargs": {"max_episode_steps": 50}, "seed": 3, "actors": 2,
        "learning_rate": 0.001, "fragment_length": 32, "max_rounds": 1, "eval_episodes": 1,
        "hidden_sizes": [16, 16], "tensorboard": False,
    })
    run_dir = tmp / "run"
    rc = cli.main(["train", "--config", str(cfg), "--seed", "5", "--actors", "3", "--run-dir", str(run_dir),
                   "--no-progress"])
    return rc, run_dir


@pytest.mark.integration
def test_yaml_applied_and_flags_override(yaml_run):
    rc, run_dir = yaml_run
    assert rc == 0
    sections = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert list(sections) == list(ROLES)  # one section per role
    saved = {name: value for section in sections.values() for name, value in section.items()}
    assert saved["seed"] == 5 and saved["actors"] == 3  # flags win
    assert saved["learning_rate"] == 0.001 and saved["fragment_length"] == 32  # from YAML
    assert saved["hidden_sizes"] == [16, 16] and saved["env_kwargs"] == {"max_episode_steps": 50}
    assert saved["tensorboard"] is False
    assert saved["gamma"] == 0.98 and saved["update_epochs"] == 20  # the preset (CartPole's row) fills the rest
    assert saved["run_dir"] == str(run_dir)
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1 and rows[0]["n_actors"] == "3" and rows[0]["env_steps"] == str(3 * 32)
    assert not (run_dir / "tensorboard").exists()
    # the written config.yaml is itself a valid --config file
    assert build(load_yaml(run_dir / "config.yaml")).run.seed == 5


@pytest.mark.integration
def test_fresh_run_into_dir_that_holds_a_run(yaml_run, capsys):
    _, run_dir = yaml_run
    before = (run_dir / "metrics.csv").read_text()
    rc = cli.main(["train", *FAST, "--run-dir", str(run_dir)])
    assert rc == 2
    line = _error_line(capsys)
    assert "already holds a run" in line and "--resume" in line
    assert (run_dir / "metrics.csv").read_text() == before  # untouched


@pytest.mark.integration
def test_resume_with_a_changed_learning_field(yaml_run, capsys):
    _, run_dir = yaml_run
    rc = cli.main(["train", "--resume", "--run-dir", str(run_dir), "--learning-rate", "0.5", "--max-rounds", "2"])
    assert rc == 2
    assert "learning_rate" in _error_line(capsys)


@pytest.mark.integration
def test_a_run_dir_with_a_flat_config_yaml_resumes(yaml_run):
    """Run dirs written before the config had roles hold a flat config.yaml: they resume as written."""
    _, run_dir = yaml_run
    flat = build(load_yaml(run_dir / "config.yaml")).to_dict()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(flat, sort_keys=False))
    assert cli.main(["train", "--resume", "--run-dir", str(run_dir), "--max-rounds", "2", "--no-progress"]) == 0
    with open(run_dir / "metrics.csv") as fh:
        assert [r["round"] for r in csv.DictReader(fh)] == ["1", "2"]
    assert list(yaml.safe_load((run_dir / "config.yaml").read_text())) == list(ROLES)  # written back by role


# -- presets ----------------------------------------------------------------------------------------
def test_mujoco_preset_for_hopper():
    cfg, info = prepare_config(TrainConfig(env_id="Hopper-v5", max_rounds=1, run_dir="unused"))
    assert info.family == "mujoco"
    assert cfg.learner.normalize_obs is True and cfg.learner.normalize_reward is True
    assert cfg.env.fragment_length == 512
    for name, value in as_resolved(PRESETS["mujoco"]).items():
        assert cfg.get(name) == value, name


def test_classic_preset_for_cartpole():
    cfg, info = prepare_config(TrainConfig(env_id="CartPole-v1", max_rounds=1, run_dir="unused"))
    assert info.family == "classic"
    assert cfg.env.fragment_length == 32 and cfg.learner.normalize_obs is False  # the zoo's tuned row over the family's
    for name, value in as_resolved({**PRESETS["classic"], **ENV_PRESETS["CartPole-v1"]}).items():
        assert cfg.get(name) == value, name


def test_explicit_values_beat_the_preset():
    cfg, _ = prepare_config(TrainConfig(env_id="Hopper-v5", max_rounds=1, run_dir="unused", fragment_length=64,
                                        normalize_obs=False, learning_rate=1e-3))
    assert (cfg.env.fragment_length, cfg.learner.normalize_obs, cfg.learner.learning_rate) == (64, False, 1e-3)
    assert cfg.learner.update_epochs == 10  # the rest still from the mujoco preset


def test_named_preset_overrides_family():
    cfg, _ = prepare_config(TrainConfig(env_id="Hopper-v5", preset="classic", max_rounds=1, run_dir="unused"))
    assert cfg.env.fragment_length == 128 and cfg.learner.normalize_obs is False


def test_default_run_dir_is_under_runs():
    cfg, _ = prepare_config(TrainConfig(env_id="custom_env:CounterEnv", seed=4, max_rounds=1))
    assert cfg.run.run_dir.startswith("runs/custom_env_CounterEnv__4__")


def test_config_sections_drive_flags_and_resume_checks():
    """Field metadata is the one table: sections decide each subcommand's flags, ``learning`` the resume check."""
    from minionsrl import config as cfgmod

    assert set(cfgmod.ROLE_OF) == set(cfgmod.FIELDS) and set(cfgmod.ROLE_OF.values()) == set(cfgmod.ROLES)
    learning = TrainConfig().learning_fields()
    assert "learning_rate" in learning and "seed" in learning
    assert not {"backend", "run_dir", "max_rounds", "fault_raise", "budget_usd"} & set(learning)

    def flags(*argv: str) -> set[str]:
        sub = next(a for a in cli.build_parser()._subparsers._group_actions[0].choices.items() if a[0] == argv[0])[1]
        if len(argv) > 1:
            sub = sub._subparsers._group_actions[0].choices[argv[1]]
        return {a.dest for a in sub._actions}

    assert set(cfgmod.FIELDS) <= flags("train")
    assert "backend" in flags("scale") and "learning_rate" not in flags("scale") and "scaler" not in flags("scale")
    assert "learning_rate" in flags("scheduler", "train") and "nitro_decay" not in flags("scheduler", "train")
    assert cfgmod.field_kind("total_timesteps") == "int" and cfgmod.field_kind("hidden_sizes") == "list"


def test_cuda_asked_for_without_one_is_one_line_before_any_work(tmp_path, capsys):
    import jax

    try:
        jax.devices("gpu")
        pytest.skip("JAX sees a GPU on this machine")
    except RuntimeError:  # no GPU backend: what this test is about
        pass
    code = cli.main(["train", "--env-id", "CartPole-v1", "--device", "cuda", "--max-rounds", "1",
                     "--run-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "device: 'cuda'" in err[0] and "--device cpu" in err[0]
    assert not (tmp_path / "r").exists()  # nothing started


def test_num_minibatches_is_exclusive_with_minibatch_size_and_replaces_the_presets(tmp_path):
    from minionsrl.build import make_learner
    from minionsrl.errors import ConfigError
    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.learner.engine import minibatch_count
    from minionsrl.prepare import prepare_config

    with pytest.raises(ConfigError, match=r"num_minibatches.*not both"):
        prepare_config(TrainConfig(env_id="Hopper-v5", num_minibatches=32, minibatch_size=64, max_rounds=1,
                                   run_dir="unused"))
    cfg, info = prepare_config(TrainConfig(env_id="Hopper-v5", num_minibatches=32, max_rounds=1, run_dir="unused"))
    # the rest of the preset still applies
    assert cfg.learner.minibatch_size is None and cfg.learner.update_epochs == 10
    params = make_learner(cfg, PolicyArch.of(info, cfg.learner.hidden_sizes)).config
    # the SGD steps per epoch stay 32 as the batch grows with the actors (CleanRL: minibatch = batch / K)
    assert [minibatch_count(n * 512, params) for n in (4, 8, 64)] == [32, 32, 32]
    assert minibatch_count(20, params) == 20  # never more minibatches than rows
    preset, _ = prepare_config(TrainConfig(env_id="Hopper-v5", max_rounds=1, run_dir="unused"))
    per_sample = make_learner(preset, PolicyArch.of(info, preset.learner.hidden_sizes)).config
    assert [minibatch_count(n * 512, per_sample) for n in (4, 8, 64)] == [32, 64, 512]


def test_preset_nitro_is_rllib_ppo_as_the_published_code_ran_it():
    from minionsrl.build import make_learner
    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.learner.engine import update_plan
    from minionsrl.prepare import prepare_config

    cfg, info = prepare_config(TrainConfig(env_id="Hopper-v5", preset="nitro", max_rounds=1, run_dir="unused"))
    lc = cfg.learner
    assert (lc.num_minibatches, lc.minibatch_size, lc.update_epochs, lc.learning_rate, lc.gae_lambda) == (
        1, None, 30, 5e-5, 1.0)
    assert (lc.clip_coef, lc.vf_clip, lc.vf_coef, lc.ent_coef, lc.max_grad_norm) == (0.3, 10.0, 1.0, 0.0, 0.0)
    assert (lc.kl_coef, lc.kl_target, lc.lr_schedule, cfg.env.fragment_length) == (0.2, 0.01, "constant", 512)
    learner = make_learner(cfg, PolicyArch.of(info, cfg.learner.hidden_sizes))
    # 30 full-batch steps, any n
    assert [update_plan(n * 512, learner.config, learner.engine.reference_batch) for n in (8, 64)] == [(1, 30), (1, 30)]
    own, _ = prepare_config(TrainConfig(env_id="Hopper-v5", preset="nitro", minibatch_size=64, max_rounds=1,
                                        run_dir="unused"))
    # the user's split wins over the preset's
    assert (own.learner.minibatch_size, own.learner.num_minibatches) == (64, None)


def test_inconsistent_learner_and_detector_settings_are_one_line(tmp_path, capsys):
    for argv, expected in (
        (["--scaler", "nitro", "--detectors", "off"], "detectors: the nitro scaler reads the curvature detector"),
        (["--scaler", "critical", "--detectors", "off"], "detectors: the critical scaler reads the gns"),
        (["--kl-target", "0.01"], "kl_target: the adaptive KL penalty needs"),
        (["--algo", "impala", "--preset", "nitro"], "kl_coef: IMPALA's loss has no KL penalty"),
    ):
        code = cli.main(["train", "--env-id", "CartPole-v1", "--max-rounds", "1", "--run-dir", str(tmp_path / "r"),
                         *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and expected in err[0], (argv, err)
    assert not (tmp_path / "r").exists()


# -- the command's hygiene -------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--learning-rat", "--total-timestep", "--lr"])
def test_no_flag_is_abbreviated(flag, tmp_path, capsys):
    # before allow_abbrev=False the first two were taken as --learning-rate and --total-timesteps, and --lr as an
    # invalid choice of --lr-batch-scaling
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", flag, "1000", *FAST, "--run-dir", str(tmp_path / "r")])
    assert exit_info.value.code == 2
    assert f"unrecognized argument {flag}" in _error_line(capsys)  # not taken as another flag
    assert not (tmp_path / "r").exists()


def _parsers(parser, name="minionsrl"):
    """Every parser of the command, subcommands' (and theirs) included, with its name."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_subcommand_shows_its_defaults_and_abbreviates_nothing():
    for name, parser in _parsers(cli.build_parser()):
        assert parser.allow_abbrev is False, name
        text = " ".join(parser.format_help().split())
        for action in parser._actions:
            if action.help and action.default not in (None, False, argparse.SUPPRESS):
                assert f"(default: {action.default})" in text, (name, action.dest)
    evaluate = dict(_parsers(cli.build_parser()))["minionsrl eval"]
    assert "(default: 10)" in " ".join(evaluate.format_help().split())  # --episodes: `eval --help` showed none


@pytest.mark.integration
def test_version_and_python_dash_m(capsys, subprocess_env):
    from minionsrl import __version__

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.strip() == f"minionsrl {__version__}"
    done = subprocess.run([sys.executable, "-m", "minionsrl", "--version"], capture_output=True, text=True,
                          env=subprocess_env, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, f"minionsrl {__version__}")


def test_a_config_is_built_by_role_from_flat_or_sectioned_values(tmp_path):
    """Flat names and role sections give the same config; a field in another role's section, or given twice, is one
    line naming the fix; a role object replaces its role whole."""
    flat = build({"env_id": "Hopper-v5", "learning_rate": 1e-3, "n_max": 32, "backend": "server"})
    sectioned = build({"env": {"env_id": "Hopper-v5"}, "learner": {"learning-rate": 1e-3},
                       "scaling": {"n_max": 32}, "functions": {"backend": "server"}})
    assert flat == sectioned == TrainConfig(env_id="Hopper-v5", learning_rate=1e-3, n_max=32, backend="server")
    assert (flat.learner.learning_rate, flat.scaling.n_max, flat.functions.backend) == (1e-3, 32, "server")
    assert flat.get("n_max") == 32 and flat.replace(n_max=16).scaling.n_max == 16 and flat.scaling.n_max == 32
    with pytest.raises(ConfigError, match=r"^n_max: a field of scaling, not of learner; move it there"):
        build({"learner": {"n_max": 3}})
    with pytest.raises(ConfigError, match=r"^learner: a role's section holds its fields \(e.g. learner: \{algo: "):
        build({"learner": 3e-4})
    with pytest.raises(ConfigError, match=r"^seed: given twice"):
        build({"seed": 1, "run": {"seed": 2}})
    with pytest.raises(ConfigError, match=r"unknown config field 'learning_rat'; did you mean 'learning_rate'"):
        build({"learner": {"learning_rat": 1e-3}})
    (tmp_path / "c.yaml").write_text("env:\n  env_id: Hopper-v5\nlearner:\n  learning_rate: 1e-3\nseed: 4\n")
    assert build(load_yaml(tmp_path / "c.yaml")) == flat.replace(seed=4, n_max=None, backend="local")
    whole = TrainConfig(learner=LearnerConfig(gamma=0.9), seed=2)
    assert whole.learner.gamma == 0.9 and whole.run.seed == 2 and whole.scaling == TrainConfig().scaling
    with pytest.raises(ConfigError, match="unknown config field 'learnin_rate'; did you mean 'learning_rate'"):
        TrainConfig(learnin_rate=1.0)
    with pytest.raises(ConfigError, match=r"unknown config field 'plots'; plots is train\(\)'s own argument"):
        TrainConfig(env_id="CartPole-v1", plots=False)  # the README's word, given to the wrong call


def test_each_role_checks_its_own_rules():
    """A role's rules between its own fields fail with one line, before any work (validate runs them all)."""
    from minionsrl.config import validate

    for values, message in [({"n_min": 9, "n_max": 8}, "n_min: 9 is larger than n_max 8"),
                            ({"lr_min": 1e-2, "lr_max": 1e-3}, "lr_min: 0.01 is not below lr_max 0.001"),
                            ({"fault_raise": 0.6, "fault_kill": 0.6}, "fault_*: the fault rates add up to 1.2"),
                            ({"train_batch_size": 64, "fragment_length": 8}, "train_batch_size: set either"),
                            ({"env_kwargs": {"x": float("nan")}}, "env_kwargs: "),
                            ({"algo": "appo", "pipeline": True}, "pipeline: appo keeps its functions in flight"),
                            ({"run_dir": " "}, "run_dir: an empty path"),
                            ({"track": True, "wandb_project_name": ""}, "wandb_project_name: --track needs")]:
        with pytest.raises(ConfigError, match="^" + message.replace("*", r"\*").replace("(", r"\(")):
            validate(TrainConfig(max_rounds=1, **values))


def test_help_groups_flags_by_role_and_keeps_rare_ones_for_help_all(capsys):
    """``train --help`` has one section per role and leaves the rarely used flags to ``--help-all``; both exit 0."""
    for argv in (["train", "--help"], ["train", "--help-all"]):
        with pytest.raises(SystemExit) as stop:
            cli.main(argv)
        assert stop.value.code == 0
    short, full = capsys.readouterr().out.split("usage: minionsrl train")[1:]
    assert all(f"{role} options:" in short for role in ROLES)
    assert "--learning-rate" in short and "--fault-kill" not in short and "--nitro-decay" not in short
    assert "--fault-kill" in full and "--nitro-decay" in full and "--lanczos-tol" in full
    assert "--help-all lists them" in short and "--help-all lists them" not in full
    assert len(short.splitlines()) < 0.8 * len(full.splitlines())


def test_every_backend_the_config_offers_is_built_from_one_table():
    from minionsrl import build as composition
    from minionsrl.config import FIELDS
    from minionsrl.deployments import BACKENDS

    assert set(composition.BACKENDS) == set(BACKENDS) == set(FIELDS["backend"].metadata["choices"])


def test_every_algo_the_config_offers_is_a_learner_built_from_the_learner_config_alone():
    import inspect

    from minionsrl.config import ALGOS
    from minionsrl.learner.learners import LEARNERS

    assert set(LEARNERS) == set(ALGOS)
    for cls in LEARNERS.values():  # one constructor for all: arch, the resolved config, device, seed, reference
        assert list(inspect.signature(cls).parameters)[:5] == ["arch", "lc", "device", "seed", "reference_batch"]
    assert [name for name, cls in LEARNERS.items() if cls.synchronous] == ["ppo"]


@pytest.mark.parametrize(("field", "value", "says"), [
    ("total_timesteps", "50k", "total_timesteps: '50k' must be an integer"),
    ("total_timesteps", True, "total_timesteps: True must be an integer"),
    ("seed", 1.5, "seed: 1.5 must be an integer"),
    ("run_dir", 123, "run_dir: 123 must be a string"),
])
def test_a_python_caller_s_value_of_the_wrong_type_is_one_line_at_once(field, value, says):
    """TrainConfig checks types as the CLI and YAML do: before, '50k' ran a round and then raised a TypeError."""
    with pytest.raises(ConfigError, match=f"^{re.escape(says)}$"):
        TrainConfig(env_id="CartPole-v1", **{field: value})
    cfg = TrainConfig(env_id="CartPole-v1", hidden_sizes=(32, 32), learning_rate=1, total_timesteps=2048.0)
    assert cfg.learner.hidden_sizes == [32, 32] and cfg.learner.learning_rate == 1.0 and cfg.run.total_timesteps == 2048
