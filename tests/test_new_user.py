"""What a new user meets (issue 43): the policy a run hands back, next steps that run as printed, an ETA that says
what it counts to, the next steps last on screen, a resumed finished run that says there is nothing to do, summary
figures that say what each one is, and where the functions ran."""

from __future__ import annotations

import json
import re
import shutil
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

import minionsrl
from minionsrl import cli, progress
from minionsrl.backends.base import Backend
from minionsrl.config import TrainConfig
from minionsrl.deployments import BACKENDS
from minionsrl.experiments.evaluate import evaluate_run
from minionsrl.experiments.policy import WorseThanBest, well_below
from minionsrl.loop import checkpoint
from minionsrl.progress import eta_goal, eta_s, figures, next_steps
from minionsrl.stats import RoundStats

REPO = Path(__file__).resolve().parent.parent
FAST = ["--actors", "2", "--fragment-length", "32", "--eval-episodes", "1", "--hidden-sizes", "8",
        "--max-concurrency", "2"]


def _tiny(run_dir: Path, **kw) -> TrainConfig:
    return TrainConfig(env_id="CartPole-v1", actors=2, fragment_length=32, eval_episodes=1, eval_every=1,
                       hidden_sizes=[8], progress=False, tensorboard=False, max_concurrency=2, run_dir=str(run_dir),
                       **kw)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("new-user") / "r"
    return run_dir, minionsrl.train(_tiny(run_dir, max_rounds=2), plots=False)


def _fall_behind_best(run_dir: Path, last: float, best: float) -> None:
    """Rewrite the latest checkpoint as if the run's last evaluation had fallen from ``best`` to ``last``."""
    state = checkpoint.load(run_dir / "checkpoints")
    state.update(last_eval=last, best_eval=best, best_round=1)
    checkpoint.save(run_dir / "checkpoints", state)


# -- row 1: the policy a run hands back ------------------------------------------------------------------------
@pytest.mark.parametrize(("last", "best", "below"), [
    (112.8, 500.0, True),  # the seed 1
    (460.0, 500.0, False),  # within a tenth: evaluation noise
    (-400.0, -150.0, True),  # Pendulum-like negative returns
    (-160.0, -150.0, False),
    (None, 500.0, False),  # no evaluation: nothing to compare
    (float("nan"), 500.0, False),
])
def test_well_below_means_more_than_a_tenth_of_the_best(last, best, below):
    assert well_below(last, best) is below


def test_the_last_policy_warns_when_it_fell_well_below_the_best(tmp_path, run, capsys):
    run_dir = tmp_path / "r"
    shutil.copytree(run[0], run_dir)
    _fall_behind_best(run_dir, last=112.8, best=500.0)
    with pytest.warns(WorseThanBest, match=r"evaluated 112\.8 .* well below the best evaluation, 500\.0 \(round 1\)"
                                            r": which=\"best\""):
        policy = minionsrl.load_policy(run_dir)
    assert policy.round == 2  # the default is still the last round's policy
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither the best policy nor an explicit checkpoint file warns
        assert minionsrl.load_policy(run_dir, which="best").round == 1
    result = evaluate_run(run_dir, episodes=1)  # `minionsrl eval`: one line on stderr, kept in the result
    assert "well below the best" in result["warning"]
    assert capsys.readouterr().err.startswith("minionsrl: eval: the last round's policy (round 2) evaluated 112.8")


def test_the_last_policy_does_not_warn_when_it_holds_its_return(tmp_path, run):
    run_dir = tmp_path / "r"
    shutil.copytree(run[0], run_dir)
    _fall_behind_best(run_dir, last=480.0, best=500.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert minionsrl.load_policy(run_dir).round == 2


def test_the_summarys_next_steps_say_when_the_last_policy_is_well_below_the_best(run):
    run_dir, summary = run
    fell = {**summary, "final_eval_return": 112.8, "best_eval_return": 500.0, "best_round": 1}
    assert "it evaluated 112.8, well below the best" in next_steps(fell, run_dir)[0]
    held = {**summary, "final_eval_return": 500.0, "best_eval_return": 500.0, "best_round": 1}
    assert next_steps(held, run_dir)[0].endswith("# the last round's policy")


# -- row 2: next steps that run as printed ---------------------------------------------------------------------
def test_next_steps_name_the_minionsrl_script_by_a_path_that_works_off_path(run, monkeypatch, tmp_path):
    run_dir, summary = run
    monkeypatch.setattr(progress.shutil, "which", lambda name: None)  # a venv that is not activated
    script = Path(sys.executable).absolute().parent / "minionsrl"
    assert script.exists()  # the venv's console script, beside its interpreter
    monkeypatch.chdir(tmp_path)  # not under the venv: the absolute path
    steps = next_steps(summary, run_dir)
    assert any(step.startswith(f"{script} eval --run-dir {run_dir}") for step in steps), steps
    monkeypatch.chdir(script.parent.parent.parent)  # the venv's parent: a relative path, still with a slash
    relative = script.relative_to(Path.cwd())
    assert any(step.startswith(f"{relative} eval --run-dir") for step in next_steps(summary, run_dir))
    monkeypatch.setattr(progress.shutil, "which", lambda name: f"/usr/bin/{name}")  # on PATH: the bare name
    assert any(step.startswith("minionsrl eval --run-dir") for step in next_steps(summary, run_dir))


_WALK = """
import gymnasium as gym
import numpy as np

class Walk(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), float(action), self.t >= 16, False, {}
"""


@pytest.mark.integration
def test_a_custom_envs_eval_step_runs_as_printed_from_another_folder(tmp_path, monkeypatch, capsys):
    """Training imports a custom env's module from the current folder; ``minionsrl eval`` imports nothing a run
    names from there unasked. The printed eval command therefore names the module's folder on PYTHONPATH, and
    runs as printed from anywhere, with no PYTHONPATH of the user's."""
    import os
    import subprocess

    code, elsewhere = tmp_path / "code", tmp_path / "elsewhere"
    code.mkdir(), elsewhere.mkdir()
    monkeypatch.delenv("PYTHONPATH", raising=False)
    (code / "walkenv_nu.py").write_text(_WALK)
    monkeypatch.chdir(code)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the folder training adds goes with the test
    assert cli.main(["train", "--env-id", "walkenv_nu:Walk", *FAST, "--max-rounds", "1", "--no-progress",
                     "--no-tensorboard", "--run-dir", str(tmp_path / "run")]) == 0
    printed = [line.strip() for line in capsys.readouterr().out.splitlines() if " eval --run-dir " in line]
    assert len(printed) == 1 and printed[0].startswith(f"PYTHONPATH={code.resolve()} "), printed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(printed[0] + " --episodes 1", shell=True, cwd=elsewhere, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and '"return_mean"' in done.stdout, done.stderr
    # a registered id needs nothing
    assert not any(step.startswith("PYTHONPATH=") for step in next_steps(
        {"config": {"env_id": "CartPole-v1"}, "best_round": None}, tmp_path / "run"))


def test_a_custom_envs_folder_is_named_unless_a_fresh_process_finds_it(tmp_path, monkeypatch):
    """A module imported from a folder a script put on ``sys.path`` needs PYTHONPATH elsewhere; on PYTHONPATH
    already, or a Gymnasium id, nothing. The printed command keeps a PYTHONPATH the user has."""
    import importlib

    from minionsrl.function.envs import code_folders

    (tmp_path / "walkenv_cf.py").write_text(_WALK)
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "walkenv_cf", raising=False)
    importlib.import_module("walkenv_cf")
    assert code_folders("walkenv_cf:Walk") == [tmp_path.resolve()]
    monkeypatch.setenv("PYTHONPATH", "/elsewhere/theirs")
    summary = {"config": {"env_id": "walkenv_cf:Walk"}, "best_round": None}
    assert any(step.startswith(f"PYTHONPATH={tmp_path.resolve()}:/elsewhere/theirs ")
               for step in next_steps(summary, tmp_path / "run"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert code_folders("walkenv_cf:Walk") == []
    assert code_folders("CartPole-v1") == [] and code_folders("not_imported_at_all:Env") == []


@pytest.mark.integration
def test_a_run_resumed_on_another_deployment_says_its_totals_add_both(tmp_path, capsys):
    """A resume may change where the functions run (and so what the rounds are priced as), not what is learned:
    the run says so once, naming both and the round it changes at."""
    run_dir = str(tmp_path / "run")
    assert cli.main(["train", *FAST, "--max-rounds", "1", "--no-progress", "--run-dir", run_dir]) == 0
    capsys.readouterr()
    assert cli.main(["train", "--resume", "--run-dir", run_dir, "--max-rounds", "2", "--no-progress",
                     "--deployment", "direct"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "priced as" in line]
    assert said == ["minionsrl: --resume: this run was priced as aws_lambda_x86 via lithops; it is priced as "
                    "aws_lambda_x86 direct invoke (what-if: no backend ships it) from round 2 on; its totals add "
                    "both"], said


def test_the_tensorboard_step_only_where_the_viewer_is_installed(run, monkeypatch):
    run_dir, summary = run
    on = {**summary, "config": {**summary["config"], "tensorboard": True}}
    monkeypatch.setattr(progress.shutil, "which", lambda name: f"/usr/bin/{name}")
    import minionsrl.function.extras as extras
    monkeypatch.setattr(extras, "installed", lambda module: module != "tensorboard")
    last = next_steps(on, run_dir)[-1]
    assert last.startswith("# TensorBoard events are in") and "tb extra" in last and "pip install" in last
    monkeypatch.setattr(extras, "installed", lambda module: True)
    assert next_steps(on, run_dir)[-1] == f"tensorboard --logdir {run_dir / 'tensorboard'}"


# -- row 5: the ETA says what it counts to; the next steps are the last lines ----------------------------------
def _row(round_idx: int, steps: int, wall_s: float) -> RoundStats:
    return RoundStats.from_row({"round": round_idx, "env_steps": steps, "wall_s": wall_s, "sps": 1000.0, "n_actors": 8,
                                "train_return_mean": 20.0, "eval_return_mean": None, "cum_cost_serverless_usd": 0.001},
                               complete=False)


@pytest.mark.parametrize(("limits", "goal"), [
    ({"total_timesteps": 500_000, "target_return": 500.0}, "to 500k steps or return 500"),  # make run's
    ({"total_timesteps": 1_000_000}, "to 1M steps"),
    ({"total_timesteps": 1500}, "to 1,500 steps"),
    ({"max_rounds": 40, "total_timesteps": 10**9}, "to round 40"),  # the nearest limit
    ({"budget_usd": 0.002}, "to $0.002"),
    ({"time_budget_s": 600.0}, "to 600 projected s"),
    ({"target_return": 100.0}, "until return 100"),
])
def test_the_eta_says_what_it_counts_to(limits, goal):
    cfg = TrainConfig(env_id="CartPole-v1", **limits)
    row = _row(1, 256, 1.0)
    assert eta_goal(cfg, row, 10.0) == goal
    line = figures(row, None, eta_s(cfg, row, 10.0), eta_goal(cfg, row, 10.0))
    assert re.search(r"ETA (\d+:\d\d:\d\d|-) " + re.escape(goal) + "$", line), line


def test_make_run_ends_with_the_train_command():
    """The run target's last command is `minionsrl train`, whose summary ends with the next steps: nothing is
    printed after them (the summary's JSON was, and scrolled them away)."""
    lines = (REPO / "Makefile").read_text().splitlines()
    start = lines.index("run: $(CORE)")
    recipe = []
    for line in lines[start + 1:]:
        if not line.startswith("\t"):
            break
        recipe.append(line)
    commands = " ".join(recipe).replace("\\\t", " ")
    assert commands.rstrip().endswith("--run-dir runs/cartpole") and "summary.json" not in commands


@pytest.mark.integration
def test_a_cli_run_ends_with_its_next_steps(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert cli.main(["train", *FAST, "--max-rounds", "2", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out.rstrip().splitlines()
    steps = next_steps(json.loads((run_dir / "summary.json").read_text()), run_dir)
    assert [line.strip() for line in out[-len(steps):]] == steps and out[-len(steps) - 1] == "next steps:"


# -- row 6: a resumed run that is over says so, before any work ------------------------------------------------
@pytest.mark.integration
def test_resuming_a_finished_run_says_there_is_nothing_to_do(run, tmp_path, capsys):
    run_dir = tmp_path / "r"
    shutil.copytree(run[0], run_dir)
    capsys.readouterr()
    assert cli.main(["train", "--resume", "--run-dir", str(run_dir), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == ("minionsrl: nothing to do: the run reached max_rounds (2); raise "
                                            "--max-rounds to continue (the summary below is the finished run's)")
    assert "stopped_by" in captured.out  # then the finished run's summary, as before
    assert cli.main(["train", "--resume", "--run-dir", str(run_dir), "--no-progress", "--max-rounds", "3"]) == 0
    assert "nothing to do" not in capsys.readouterr().err  # a raised limit: it trains on
    assert json.loads((run_dir / "summary.json").read_text())["rounds"] == 3


# -- row 7: summary figures that say what each one is ----------------------------------------------------------
def test_the_summary_labels_its_three_returns(run, capsys):
    run_dir, summary = run
    assert summary["train_return_last100_rounds"][1] == 2  # the last 100 episodes' span of rounds
    progress.print_summary({**summary, "train_return_last100_rounds": [1, 2]}, run_dir)
    out = capsys.readouterr().out
    for label in ("eval, last policy (round 2)", "eval, best policy (round", "train, last 100 episodes (rounds 1-2)"):
        assert label in out, label


# -- row 8: where the functions ran --------------------------------------------------------------------------
def test_the_summary_names_where_the_functions_ran(run):
    _, summary = run
    assert summary["functions_ran_on"] == "local worker processes (this machine)"


def test_lithops_without_a_config_says_it_ran_on_its_localhost_backend(tmp_path, monkeypatch):
    pytest.importorskip("lithops")
    from minionsrl.backends.lithops_backend import LithopsBackend, lithops_config
    from minionsrl.function import wire

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.lithops/config
    monkeypatch.delenv("LITHOPS_CONFIG_FILE", raising=False)
    backend = LithopsBackend(wire.new_key(), lithops_config(None), max_concurrency=1)
    try:
        assert backend.where() == "Lithops localhost (no Lithops config found)"
    finally:
        backend.close()
    path = tmp_path / "lithops.yaml"
    path.write_text("lithops: {backend: localhost, storage: localhost}\n")
    backend = LithopsBackend(wire.new_key(), lithops_config(str(path)), max_concurrency=1)
    try:
        assert backend.where() == f"Lithops localhost (config {path})"
    finally:
        backend.close()


def test_every_backend_says_where_its_functions_run():
    for name in BACKENDS:
        assert Backend.where(SimpleNamespace(name=name)) != name  # words for each, not its bare name
