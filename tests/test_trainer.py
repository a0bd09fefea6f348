"""The round loop end to end: determinism, run outputs, resume after a kill, and the eval command."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minionsrl import cli
from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.loop import checkpoint
from minionsrl.loop.metrics import INVOCATION_COLUMNS, LEARNING_COLUMNS, METRIC_COLUMNS, read_metrics, read_rows
from minionsrl.loop.sampler import invocation_seed


def _train(run_dir: Path, **overrides) -> dict:
    cfg = TrainConfig(**{"env_id": "CartPole-v1", "max_rounds": 6, "actors": 4, "eval_every": 3,
                         "progress": False, "tensorboard": False, "run_dir": str(run_dir), **overrides})
    return make_trainer(cfg).run()


def _learning(run_dir: Path) -> list[dict[str, str]]:
    return [{k: row[k] for k in LEARNING_COLUMNS} for row in read_metrics(run_dir)]


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# -- (a) determinism -------------------------------------------------------------------------------
@pytest.mark.integration
def test_same_seed_same_learning_curve_different_seed_differs(tmp_path):
    _train(tmp_path / "a", seed=11)
    _train(tmp_path / "b", seed=11)
    _train(tmp_path / "c", seed=12)
    a, b, c = _learning(tmp_path / "a"), _learning(tmp_path / "b"), _learning(tmp_path / "c")
    assert len(a) == 6
    assert a == b
    assert a != c
    assert [r["policy_loss"] for r in a] != [r["policy_loss"] for r in c]
    # evaluation in rounds 3 and 6 only
    assert [bool(r["eval_return_mean"]) for r in a] == [False, False, True, False, False, True]


# -- (b) outputs -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("outputs") / "run"
    summary = _train(run_dir, seed=3, max_rounds=4, actors=3, eval_every=2, eval_episodes=4, fragment_length=64,
                     tensorboard=True)
    return run_dir, summary


def test_run_dir_files(finished_run):
    run_dir, _ = finished_run
    for name in ("config.yaml", "metrics.csv", "invocations.csv", "summary.json", "checkpoints/latest.safetensors"):
        assert (run_dir / name).is_file(), name
    events = list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0


def test_metrics_csv(finished_run):
    run_dir, _ = finished_run
    with open(run_dir / "metrics.csv", newline="") as fh:
        assert next(csv.reader(fh)) == METRIC_COLUMNS
    rows = read_metrics(run_dir)
    assert [int(r["round"]) for r in rows] == [1, 2, 3, 4]
    assert [int(r["env_steps"]) for r in rows] == [192, 384, 576, 768]
    assert all(int(r["n_actors"]) == 3 for r in rows)
    for r in rows:
        for col in ("wall_s", "round_s", "sample_s", "learn_s", "sps", "policy_loss", "value_loss", "entropy",
                    "approx_kl", "clipfrac", "learning_rate"):
            assert r[col] != "", col
            float(r[col])
        assert float(r["round_s"]) >= float(r["sample_s"]) > 0
        assert 0 < float(r["entropy"]) <= 0.6932  # two actions: at most log(2)
    assert [r["eval_return_mean"] != "" for r in rows] == [False, True, False, True]
    assert [float(r["wall_s"]) for r in rows] == sorted(float(r["wall_s"]) for r in rows)
    lrs = [float(r["learning_rate"]) for r in rows]
    assert lrs[0] == pytest.approx(1e-3) and lrs == sorted(lrs, reverse=True) and lrs[1] < lrs[0]  # annealed


def test_invocations_csv(finished_run):
    run_dir, _ = finished_run
    with open(run_dir / "invocations.csv", newline="") as fh:
        assert next(csv.reader(fh)) == INVOCATION_COLUMNS
    rows = _rows(run_dir / "invocations.csv")
    for rnd in (1, 2, 3, 4):
        train = [r for r in rows if r["round"] == str(rnd) and r["kind"] == "train"]
        assert len(train) == 3
        assert [r["invocation_id"] for r in train] == [f"r{rnd}-train-{s}" for s in range(3)]
        assert [int(r["seed"]) for r in train] == [invocation_seed(3, rnd, s, 0) for s in range(3)]
        evals = [r for r in rows if r["round"] == str(rnd) and r["kind"] == "eval"]
        # 4 episodes over min(4, n=3) slots: round 2's evaluation runs (and is listed) beside round 3's
        # functions, the last round's after its update
        assert len(evals) == (3 if rnd in (3, 4) else 0)
        assert {r["seed"] for r in evals} == ({str(invocation_seed(3, rnd - (rnd == 3), s, 1)) for s in range(3)}
                                              if evals else set())
    assert all(r["status"] == "ok" for r in rows)
    assert all(int(r["bytes_in"]) > 0 and int(r["bytes_out"]) > 0 and float(r["cpu_s"]) > 0 for r in rows)
    cold = [r for r in rows if r["cold"] == "True"]
    instances = {r["instance_id"] for r in rows}
    assert len(cold) == len(instances) <= (os.cpu_count() or 1)  # one cold start per instance, then reuse


def test_checkpoint_is_plain_arrays_and_json(finished_run):
    run_dir, _ = finished_run
    state = checkpoint.load(run_dir / "checkpoints")
    assert state["round"] == 4 and state["env_steps"] == 768
    for key in ("policy", "optimizer", "scaler", "last_row", "carries", "recent_returns",
                "best_eval", "last_eval", "obs_rms", "ret_rms"):
        assert key in state, key
    assert "actor.0.weight" in state["policy"] and state["policy"]["actor.0.weight"].shape == (64, 4)
    assert json.loads(state["last_row"])["round"] == 4


def test_summary_json(finished_run):
    run_dir, summary = finished_run
    saved = json.loads((run_dir / "summary.json").read_text())
    for key in ("env_id", "seed", "scaler", "backend", "rounds", "env_steps", "wall_s", "final_eval_return",
                "best_eval_return", "train_return_last100"):
        assert key in saved, key
    assert saved == json.loads(json.dumps(summary))
    assert (saved["env_id"], saved["seed"], saved["scaler"], saved["backend"]) == ("CartPole-v1", 3, "fixed", "local")
    assert (saved["rounds"], saved["env_steps"]) == (4, 768)
    rows = read_metrics(run_dir)
    assert saved["final_eval_return"] == pytest.approx(float(rows[-1]["eval_return_mean"]))
    assert saved["best_eval_return"] == pytest.approx(max(float(rows[1]["eval_return_mean"]),
                                                          float(rows[3]["eval_return_mean"])))
    assert saved["train_return_last100"] > 0 and saved["wall_s"] > 0


def test_run_round_can_be_called_directly(tmp_path):
    trainer = make_trainer(TrainConfig(env_id="CartPole-v1", max_rounds=2, actors=1, fragment_length=32,
                                  progress=False, tensorboard=False, run_dir=str(tmp_path / "r")))
    try:
        row = trainer.run_round()
        assert row.round == 1 and row.to_row()["round"] == 1
    finally:
        trainer.close()


# -- (c) resume after a kill -----------------------------------------------------------------------
RESUME_FLAGS = ["--env-id", "CartPole-v1", "--seed", "7", "--actors", "4", "--fragment-length", "128",
                "--update-epochs", "4", "--minibatch-size", "64", "--eval-every", "10", "--eval-episodes", "2",
                "--max-rounds", "40", "--no-progress", "--no-tensorboard"]


def _n_rows(path: Path) -> int:
    try:
        return max(len(path.read_text().splitlines()) - 1, 0)
    except FileNotFoundError:
        return 0


def _wait_for_rows(proc: subprocess.Popen, metrics: Path, rows: int, timeout_s: float) -> None:
    """Wait until a training process has written ``rows`` rounds."""
    deadline = time.monotonic() + timeout_s
    while _n_rows(metrics) < rows:
        assert proc.poll() is None, f"training ended early: {proc.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, f"no {rows} rounds within {timeout_s} s"
        time.sleep(0.02)


@pytest.mark.integration
def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path, subprocess_env):
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "minionsrl.cli", "train", *RESUME_FLAGS,
                             "--run-dir", str(killed)], env=subprocess_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        _wait_for_rows(proc, killed / "metrics.csv", 5, 180)
        os.killpg(proc.pid, signal.SIGKILL)  # the learner and its worker processes, mid-run
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    rows_at_kill = _n_rows(killed / "metrics.csv")
    assert 5 <= rows_at_kill < 40

    assert cli.main(["train", "--resume", "--run-dir", str(killed), "--no-progress"]) == 0

    straight = tmp_path / "straight"
    assert cli.main(["train", *RESUME_FLAGS, "--run-dir", str(straight)]) == 0

    resumed_rows = read_metrics(killed)
    assert [int(r["round"]) for r in resumed_rows] == list(range(1, 41))
    assert [int(r["env_steps"]) for r in resumed_rows] == [512 * r for r in range(1, 41)]
    invocations = _rows(killed / "invocations.csv")
    for rnd in range(1, 41):
        ids = [r["invocation_id"] for r in invocations if r["round"] == str(rnd) and r["kind"] == "train"]
        assert ids == [f"r{rnd}-train-{s}" for s in range(4)], rnd
    resumed, reference = _learning(killed), _learning(straight)
    mismatched = [(a["round"], k) for a, b in zip(resumed, reference, strict=True) for k in LEARNING_COLUMNS
                  if a[k] != b[k]]
    assert not mismatched, f"resumed run differs from the uninterrupted one at (round, column): {mismatched[:10]}"
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["rounds"] == 40 and summary["env_steps"] == 40 * 512


@pytest.mark.integration
def test_resume_of_a_finished_run_does_nothing_more(finished_run, tmp_path):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run[0], run_dir)
    before = read_metrics(run_dir)
    assert cli.main(["train", "--resume", "--run-dir", str(run_dir), "--no-progress", "--no-tensorboard"]) == 0
    assert read_metrics(run_dir) == before


# -- (d) the eval command --------------------------------------------------------------------------
@pytest.mark.integration
def test_eval_command_writes_video(finished_run, tmp_path, capsys):
    import shutil

    run_dir = tmp_path / "copy"
    shutil.copytree(finished_run[0], run_dir)
    assert os.environ.get("SDL_VIDEODRIVER") == "dummy"
    rc = cli.main(["eval", "--run-dir", str(run_dir), "--episodes", "2", "--capture-video"])
    assert rc == 0
    out = capsys.readouterr().out
    result = json.loads(out[out.index("{"):])
    assert result["episodes"] == 2 and result["round"] == 4 and len(result["returns"]) == 2
    assert result["return_mean"] == pytest.approx(sum(result["returns"]) / 2)
    videos = sorted((run_dir / "videos").glob("*.mp4"))
    assert len(videos) == 2
    assert all(v.stat().st_size > 1000 for v in videos)
    assert sorted(result["videos"]) == [str(v) for v in videos]


def test_eval_command_is_deterministic(finished_run, capsys):
    outs = []
    for _ in range(2):
        assert cli.main(["eval", "--run-dir", str(finished_run[0]), "--episodes", "3", "--seed", "5"]) == 0
        out = capsys.readouterr().out
        outs.append(json.loads(out[out.index("{"):])["returns"])
    assert outs[0] == outs[1]
    assert not (finished_run[0] / "videos").exists()


@pytest.mark.integration
def test_checkpoint_with_reward_scaling_round_trips(tmp_path):
    """Scalar running statistics (reward scaling) must survive the checkpoint and resume."""
    from minionsrl.build import make_trainer
    from minionsrl.config import TrainConfig

    cfg = TrainConfig(env_id="Pendulum-v1", actors=2, fragment_length=64, max_rounds=2, eval_every=0, eval_episodes=1,
                      update_epochs=1, normalize_obs=True, normalize_reward=True, progress=False, tensorboard=False,
                      run_dir=str(tmp_path / "run"))
    assert make_trainer(cfg).run()["rounds"] == 2
    state = checkpoint.load(tmp_path / "run" / "checkpoints")
    assert state["ret_rms"]["mean"].shape == () and state["obs_rms"]["mean"].shape == (3,)
    resumed = make_trainer(cfg.replace(max_rounds=3), resume=True)
    assert resumed.round == 2 and resumed.learner.ret_rms.count == pytest.approx(state["ret_rms"]["count"])
    assert resumed.run()["rounds"] == 3


@pytest.mark.integration
def test_ctrl_c_says_how_to_resume_this_run(tmp_path, subprocess_env):
    """Ctrl-C mid-run: exit 130 with the resume command naming this run's directory (was a literal DIR)."""
    run_dir = tmp_path / "run dir"
    proc = subprocess.Popen([sys.executable, "-m", "minionsrl.cli", "train", "--env-id", "CartPole-v1", "--actors",
                             "2", "--max-rounds", "100000", "--total-timesteps", "100000000", "--no-progress",
                             "--no-tensorboard", "--run-dir",
                             str(run_dir)], env=subprocess_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            # as a terminal would: an earlier test's cluster may have left SIGINT ignored in this
                            # process, and a child inherits that (Python then installs no KeyboardInterrupt handler)
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for_rows(proc, run_dir / "metrics.csv", 2, 120)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert f"continue with --resume --run-dir '{run_dir}'" in err.decode()


@pytest.mark.integration
@pytest.mark.parametrize("overlap", [False, True])
def test_the_round_whose_evaluation_reaches_the_target_is_the_last(tmp_path, overlap):
    """The stop is decided before a round's evaluation (so a budget stop still evaluates) and again after it:
    a round that evaluates at the target ends the run, with no extra round; an evaluation run beside the next
    round's functions ends the run after that round (its fragments, already paid for, are learned from)."""
    cfg = TrainConfig(env_id="CartPole-v1", actors=2, fragment_length=32, max_rounds=5, eval_every=2, eval_episodes=1,
                      target_return=1.0, eval_overlap=overlap, progress=False, tensorboard=False,
                      run_dir=str(tmp_path / "r"))
    summary = make_trainer(cfg).run()  # any evaluation returns >= 1 on CartPole
    assert summary["rounds"] == 2 + overlap and summary["stopped_by"] == "target_return"
    assert [r["eval_return_mean"] != "" for r in read_metrics(tmp_path / "r")] == [False, True, *[True] * overlap]


def test_an_evaluation_cut_at_its_step_cap_says_so_once(tmp_path):
    import warnings

    from minionsrl.errors import EvaluationCut

    cfg = TrainConfig(env_id="CartPole-v1", actors=2, fragment_length=32, max_rounds=3, eval_every=1, eval_episodes=2,
                      eval_max_steps=5, progress=False, tensorboard=False, run_dir=str(tmp_path / "r"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        make_trainer(cfg).run()
    cut = [w for w in caught if issubclass(w.category, EvaluationCut)]
    assert len(cut) == 1 and "eval_max_steps (5 steps) and were cut there" in str(cut[0].message)
    assert all(float(r["eval_return_mean"]) == 5.0 for r in read_metrics(tmp_path / "r"))  # the steps played
    with warnings.catch_warnings(record=True) as caught:  # a cap the episodes do not reach: nothing said
        warnings.simplefilter("default")
        make_trainer(cfg.replace(eval_max_steps=27_000, max_rounds=1, run_dir=str(tmp_path / "s"))).run()
    assert not [w for w in caught if issubclass(w.category, EvaluationCut)]


@pytest.mark.integration
def test_an_evaluation_beside_the_next_round_gives_the_same_rows(tmp_path):
    """Overlapping changes when an evaluation runs, not what it returns: the same seeds evaluate the same
    policy, so every learning column matches a run that evaluates after each update."""
    for overlap in (False, True):
        _train(tmp_path / str(overlap), eval_overlap=overlap, eval_every=2, eval_episodes=2, max_rounds=5)
    beside, after = _learning(tmp_path / "True"), _learning(tmp_path / "False")
    assert [r["eval_return_mean"] != "" for r in beside] == [False, True, False, True, True]
    assert beside == after


@pytest.mark.integration
def test_a_row_held_for_its_evaluation_survives_a_stop_and_is_written_once(tmp_path):
    """A checkpoint taken while its round's evaluation ran beside the next round holds that round's row: a run
    stopped there (row not yet written) or one round later (row written, next checkpoint not) writes the row
    exactly once on --resume, with the evaluation an uninterrupted run got."""
    base = {"env_id": "CartPole-v1", "actors": 2, "fragment_length": 32, "eval_every": 2, "eval_episodes": 2,
            "max_rounds": 4, "checkpoint_every": 2, "progress": False, "tensorboard": False}
    make_trainer(TrainConfig(**base, run_dir=str(tmp_path / "straight"))).run()
    for stop_after in (2, 3):
        run_dir = tmp_path / f"stopped-{stop_after}"
        trainer = make_trainer(TrainConfig(**base, run_dir=str(run_dir)))
        try:
            for _ in range(stop_after):
                trainer.run_round()
        finally:
            trainer.close()
        assert [r["round"] for r in read_metrics(run_dir)] == ["1", "2", "3"][: 2 * stop_after - 3]
        make_trainer(TrainConfig(**base, run_dir=str(run_dir)), resume=True).run()
        assert _learning(run_dir) == _learning(tmp_path / "straight"), stop_after


def test_checkpoints_are_written_in_the_background_and_their_errors_surface(tmp_path, monkeypatch):
    """A round's checkpoint is written while the next round samples; the learner waits for it before the
    next update (which changes the tensors it holds), and a failed write is raised there, not lost."""
    import threading

    from minionsrl.loop import checkpoint
    from minionsrl.loop.session import Session

    session = Session(TrainConfig(run_dir=str(tmp_path / "r")), resume=False)
    release = threading.Event()
    real_save = checkpoint.save

    def slow_save(*args, **kwargs):
        release.wait(10)
        return real_save(*args, **kwargs)

    monkeypatch.setattr(checkpoint, "save", slow_save)
    session.save({"round": 1}, 1)  # returns while the write waits
    assert not (tmp_path / "r" / "checkpoints" / checkpoint.LATEST).exists()
    release.set()
    session.wait()
    assert (tmp_path / "r" / "checkpoints" / checkpoint.LATEST).exists()

    def failing_save(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "save", failing_save)
    session.save({"round": 2}, 2)
    with pytest.raises(OSError, match="No space left"):
        session.wait()


@pytest.mark.integration
@pytest.mark.parametrize("algo", ["ppo", "appo"])
def test_several_environments_per_function_learn_from_every_fragment(tmp_path, algo):
    cfg = TrainConfig(env_id="CartPole-v1", algo=algo, actors=2, envs_per_function=3, fragment_length=16,
                      max_rounds=3, eval_every=0, eval_episodes=1, progress=False, tensorboard=False,
                      run_dir=str(tmp_path / "r"))
    summary = make_trainer(cfg).run()
    rows = read_rows(tmp_path / "r" / "metrics.csv")
    train = [r for r in read_rows(tmp_path / "r" / "invocations.csv") if r["kind"] == "train"]
    steps = [int(r["env_steps"]) for r in rows]
    if algo == "ppo":  # every round: 2 functions x 3 environments x 16 steps
        assert steps == [96, 192, 288] and summary["env_steps"] == 288
    else:  # an update once one function's 3 fragments (or more, arriving together) are in
        assert all(s % 48 == 0 for s in steps) and steps == sorted(steps) and steps[0] >= 48
    assert len({r["digest"] for r in train if r["status"] == "ok"}) == sum(r["status"] == "ok" for r in train)
    resumed = make_trainer(cfg.replace(max_rounds=4), resume=True)
    # each environment's episode in progress came back (appo: of the functions that returned before the end)
    carried = len(resumed.sampler.carries)
    assert carried == 6 if algo == "ppo" else carried in (3, 6)
    resumed.close()


@pytest.mark.integration
def test_detectors_read_the_batch_before_the_update_unless_asked_after(tmp_path):
    """``detector_placement`` "before" (the default) or "after" changes what the detectors read, not what is learned;
    their seconds are their own column, apart from the update's."""
    assert TrainConfig().scaling.detector_placement == "before"
    rows = {}
    for where in ("before", "after"):
        _train(tmp_path / where, max_rounds=2, actors=4, eval_every=0, fragment_length=32, detectors="on",
               lanczos_iterations=4, detector_samples=64, detector_placement=where)
        rows[where] = read_metrics(tmp_path / where)
    same = [c for c in LEARNING_COLUMNS if c not in ("convexity_ratio", "gns")]
    assert [{c: r[c] for c in same} for r in rows["before"]] == [{c: r[c] for c in same} for r in rows["after"]]
    assert [r["gns"] for r in rows["before"]] != [r["gns"] for r in rows["after"]]
    for row in rows["before"] + rows["after"]:
        assert float(row["detector_s"]) > 0 and float(row["learn_s"]) > 0
        assert float(row["sample_s"]) + float(row["learn_s"]) + float(row["detector_s"]) <= float(row["round_s"])
