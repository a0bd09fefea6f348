"""What a new user meets: other libraries' names for our settings lead to ours (CleanRL's and Stable-Baselines3's,
on the command line and as config keys), a mistyped flag gets the closest one, and a missing extra's line gives
the install command that works where the user is."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from minionsrl import TrainConfig, cli, config
from minionsrl.config import FIELDS
from minionsrl.errors import ConfigError
from minionsrl.function import extras
from minionsrl.words import FOREIGN, foreign_name

ROOT = Path(__file__).resolve().parent.parent
SOURCE = Path(extras.__file__).resolve().parents[2]  # the checkout minionsrl is imported from


def _refused(capsys, *argv: str) -> str:
    """The one line ``minionsrl argv`` exits 2 with (before any work)."""
    with pytest.raises(SystemExit) as info:
        cli.main(list(argv))
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1, err
    return err.strip()


def test_cleanrls_flags_name_ours(capsys) -> None:
    err = _refused(capsys, "train", "--env-id", "CartPole-v1", "--num-envs", "8", "--num-steps", "128")
    assert err.startswith("minionsrl: error: --num-envs is CleanRL's name; here it is --actors (")
    assert "--num-steps is CleanRL's name; here it is --fragment-length (" in err
    assert err.endswith("see `minionsrl train --help`")
    assert "unrecognized" not in err and " 8" not in err  # the values are not reported as arguments of their own


def test_sb3s_names_say_where_batch_size_differs(capsys) -> None:
    err = _refused(capsys, "train", "--n_steps", "128")
    assert "--n_steps is Stable-Baselines3's name; here it is --fragment-length" in err
    err = _refused(capsys, "train", "--batch-size", "64")
    assert ("--batch-size is Stable-Baselines3's name; here it is --minibatch-size (SB3's batch_size is the minibatch; "
            "a whole round's samples whatever the actor count are --train-batch-size (RLlib's word))") in err
    assert "flags are written with '-': --train-batch-size" in _refused(capsys, "train", "--train_batch_size", "64")
    assert "here it is --update-epochs" in _refused(capsys, "compare", "--scalers", "fixed", "--n-epochs=3")
    # a config key: the same words, as keys
    line = foreign_name("batch_size", as_flag=False, known=FIELDS)
    assert line.startswith("'batch_size' is Stable-Baselines3's name; here it is minibatch_size (")
    assert "are train_batch_size (RLlib's word)" in line and "--" not in line


@pytest.mark.parametrize(("word", "ours"), [("batch_size", "minibatch_size"), ("n_steps", "fragment_length"),
                                            ("n_epochs", "update_epochs"), ("num_envs", "actors"),
                                            ("n_envs", "actors"), ("num_steps", "fragment_length")])
def test_another_librarys_word_in_python_gets_the_same_line(word: str, ours: str) -> None:
    with pytest.raises(ConfigError, match=rf"^TrainConfig: '{word}' is .*'s name; here it is {ours} \("):
        TrainConfig(env_id="CartPole-v1", **{word: 64})
    with pytest.raises(ConfigError, match=rf"^'{word}' is .*'s name; here it is {ours} \("):
        config.build({"learner": {word: 64}})


def test_a_saved_run_that_wrote_batch_size_reads_as_train_batch_size(tmp_path) -> None:
    cfg = TrainConfig(env_id="Hopper-v5", train_batch_size=4096)
    config.dump(cfg, tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    assert "train_batch_size: 4096" in text
    (tmp_path / "config.yaml").write_text(text.replace("train_batch_size:", "batch_size:"))  # as 0.2 wrote it
    assert config.build(config.load_yaml(tmp_path / "config.yaml", saved=True)) == cfg
    with pytest.raises(ConfigError, match="'batch_size' is Stable-Baselines3's name"):
        config.load_yaml(tmp_path / "config.yaml")  # a user's file: the correction


def test_a_mistyped_flag_gets_the_closest_and_underscores_the_hyphenated(capsys) -> None:
    err = _refused(capsys, "train", "--learning-rat", "1e-3")
    assert err == ("minionsrl: error: unrecognized argument --learning-rat; did you mean --learning-rate?; "
                   "see `minionsrl train --help`")
    assert "--learning_rate: flags are written with '-': --learning-rate" in _refused(capsys, "train",
                                                                                      "--learning_rate", "1")
    assert _refused(capsys, "train", "8") == "minionsrl: error: unrecognized arguments: 8; see `minionsrl train --help`"


def test_a_command_without_the_setting_is_not_offered_it(capsys) -> None:
    """``eval`` has no --actors: its answer is the plain one, from its own parser."""
    err = _refused(capsys, "eval", "--run-dir", "r", "--num-envs", "3")
    assert err == "minionsrl: error: unrecognized argument --num-envs; see `minionsrl eval --help`"
    assert "--actors" in _refused(capsys, "scheduler", "train", "--target", "1", "--num-envs", "2")


def test_the_table_names_fields_that_exist_and_names_that_are_not_ours() -> None:
    for name, (_, fields, meaning) in FOREIGN.items():
        assert name not in FIELDS, name  # one of ours would never reach the table
        assert all(f in FIELDS for f in fields), name
        assert meaning and foreign_name(name, as_flag=True) is not None
    assert foreign_name("learning_rate", as_flag=False, known=FIELDS) is None  # ours: nothing to say


def test_install_hint_from_this_checkout_is_an_editable_install_with_the_pins(monkeypatch) -> None:
    monkeypatch.chdir(SOURCE)  # in the checkout: paths as typed there (.venv/bin/python)
    python = Path(sys.executable).absolute()
    shown = str(python.relative_to(SOURCE)) if python.is_relative_to(SOURCE) else sys.executable
    argv = shlex.split(extras.install_hint("mujoco"))
    assert argv == [shown, "-m", "pip", "install", "-c", "constraints.txt", "-e", ".[mujoco]"]
    monkeypatch.chdir("/")  # elsewhere: absolute paths
    argv = shlex.split(extras.install_hint("video"))
    assert argv == [str(python), "-m", "pip", "install", "-c", str(SOURCE / "constraints.txt"), "-e",
                    f"{SOURCE}[video]"]


def test_install_hint_from_an_index_or_a_local_folder(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(extras, "_source_tree", lambda: None)
    monkeypatch.setattr(extras, "_installed_from", lambda: None)
    assert shlex.split(extras.install_hint("ray"))[1:] == ["-m", "pip", "install", "minionsrl[ray]"]
    # installed (not editably) from a folder with a space in its name
    folder = tmp_path / "my clone"
    folder.mkdir()
    (folder / "pyproject.toml").write_text('[project]\nname = "minionsrl"\n')

    class Dist:
        def read_text(self, name: str) -> str:
            return json.dumps({"url": folder.as_uri(), "dir_info": {}}) if name == "direct_url.json" else ""

    monkeypatch.undo()
    monkeypatch.setattr(extras, "_source_tree", lambda: None)
    monkeypatch.setattr(extras.importlib.metadata, "distribution", lambda name: Dist())
    assert shlex.split(extras.install_hint("atari"))[1:] == ["-m", "pip", "install", f"{folder}[atari]"]


def _rows(arm: str, returns: list[float]) -> list[dict]:
    from minionsrl.experiments.compare import RUN_COLUMNS

    return [{**dict.fromkeys(RUN_COLUMNS, 1.0), "arm": arm, "seed": i + 1, "final_eval_return": r,
             "time_to_target_s": None, "projected_time_to_target_s": None, "usd_to_target": None,
             "rounds_to_target": None} for i, r in enumerate(returns)]


def test_compare_gives_an_interval_only_where_the_seeds_allow_one() -> None:
    from minionsrl.experiments.compare import MIN_SEEDS_FOR_INTERVAL, Arm, legend, markdown_table

    few, many = Arm("fixed", 2), Arm("fixed", 4)
    results = _rows("fixed-2", [100.0, 300.0]) + _rows("fixed-4", [float(v) for v in range(10, 10 + 10 * 6, 10)])
    table = markdown_table(results, [few, many], target=None, dollar_budget=0.0001045).splitlines()
    head = table[0]
    assert "| final eval return |" in head and "| return at $0.0001045 |" in head and "final_eval_return" not in head
    cells = dict(zip([c.strip() for c in head.split("|")], [c.strip() for c in table[2].split("|")], strict=True))
    assert cells["final eval return"] == "200 (100–300)"  # two seeds: the mean and both values, no interval
    cells = dict(zip([c.strip() for c in head.split("|")], [c.strip() for c in table[3].split("|")], strict=True))
    mean, interval = cells["final eval return"].split(" ", 1)
    assert MIN_SEEDS_FOR_INTERVAL <= 6 and mean == "35" and interval.startswith("[")
    text = legend(["final_eval_return", "return_at_budget"], None, 0.0001045)
    assert "- **return at $0.0001045** (`return_at_budget`): the run's latest evaluation return when its bill " \
           "reached $0.0001045" in text
    assert f"with {MIN_SEEDS_FOR_INTERVAL} values or more, the mean [bootstrap 95% interval]" in text


def test_the_readmes_run_dir_is_named_as_a_default_run_dir_is() -> None:
    import re

    from minionsrl.config import TrainConfig, resolve

    pattern = r"runs/Hopper-v5__2__\d{8}-\d{6}"
    assert re.fullmatch(pattern, resolve(TrainConfig(env_id="Hopper-v5", seed=2), "mujoco").run.run_dir)
    named = re.findall(r"runs/Hopper-v5__2__[\d-]+", (ROOT / "README.md").read_text())
    assert named and all(re.fullmatch(pattern, n) for n in named), named


def test_deploy_says_what_the_all_extra_brings() -> None:
    """DEPLOY.md once said ``[all]`` brings SB3: it does not (``bench`` does)."""
    import tomllib

    extras_ = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert not any("stable-baselines3" in r for r in extras_["all"])
    paragraph = next(p for p in (ROOT / "docs" / "DEPLOY.md").read_text().split("\n\n") if "'.[all]'" in p)
    assert "not `bench` (Stable-Baselines3 and torch" in paragraph
