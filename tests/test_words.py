"""What a new user meets: other libraries' names for our settings lead to ours (CleanRL's and Stable-Baselines3's,
on the command line and as config keys), a mistyped flag gets the closest one, and a missing extra's line gives
the install command that works where the user is."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from minionsrl import cli
from minionsrl.config import FIELDS
from minionsrl.function import extras
from minionsrl.words import ALIKE, FOREIGN, foreign_name

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
    assert "SB3's batch_size is a minibatch, --minibatch-size here; --batch-size here is a whole round's samples" in err
    assert "--minibatch-size here" in _refused(capsys, "train", "--batch_size", "64")
    assert "here it is --update-epochs" in _refused(capsys, "compare", "--scalers", "fixed", "--n-epochs=3")
    # a config key: the same words, as keys
    line = foreign_name("n_steps", as_flag=False, known=FIELDS)
    assert line.startswith("'n_steps' is Stable-Baselines3's name; here it is fragment_length (")
    assert "minibatch_size here; batch_size here" in line and "--" not in line


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
    assert set(ALIKE) <= set(FIELDS)
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
