"""Scaling experiments end to end on CartPole: compare, scale, motivate, the learned scheduler,
the server backend and the budget stop."""

from __future__ import annotations

import csv
import json
import math
import time
from pathlib import Path

import pytest

from minionsrl.backends.server import ServerBackend
from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.experiments.compare import Arm, run_compare
from minionsrl.experiments.motivate import run_motivate
from minionsrl.experiments.scale import run_scale
from minionsrl.experiments.scheduler import train_scheduler
from minionsrl.function.envs import EnvSpec
from minionsrl.function.request import Request
from minionsrl.loop.metrics import LEARNING_COLUMNS, read_metrics
from minionsrl.scaling.minions import load_agent


def _cfg(tmp_path, **changes) -> TrainConfig:
    base = TrainConfig(env_id="CartPole-v1", actors=4, n_min=2, n_max=8, max_rounds=4, eval_every=2,
                       eval_episodes=2, progress=False, tensorboard=False, run_dir=str(tmp_path / "run"))
    return base.replace(**changes)


def test_arm_parsing() -> None:
    assert Arm.parse("fixed:16@server") == Arm("fixed", 16, "server")
    assert Arm.parse("fixed:64/per-round") == Arm("fixed", 64, "local", "per-round")
    assert Arm.parse("nitro@ray/fixed-compute").label == "nitro@ray+fixed-compute"
    with pytest.raises(ConfigError, match="learner budget"):
        Arm.parse("fixed:8/per-day")
    assert Arm.parse("nitro").label == "nitro"
    assert Arm.parse("kungfu/per-round*5") == Arm("kungfu", learner_budget="per-round", seeds=5)
    with pytest.raises(ConfigError, match="seed count"):
        Arm.parse("kungfu*0")
    time_arm = Arm.parse("critical:time@ray")
    assert time_arm == Arm("critical", None, "ray", objective="time") and time_arm.label == "critical-time@ray"
    assert time_arm.apply(_cfg(Path("."))).scaling.objective == "time"
    with pytest.raises(ConfigError, match="positive integer or an objective"):
        Arm.parse("critical:money")
    with pytest.raises(ConfigError, match="positive integer"):
        Arm.parse("fixed:time")
    assert Arm.parse("fixed:16@server").label == "fixed-16@server"
    with pytest.raises(ConfigError, match="not one of"):
        Arm.parse("nitr")
    with pytest.raises(ConfigError, match="backend"):
        Arm.parse("fixed:4@lambda")


def test_an_arm_sets_config_fields_over_the_base() -> None:
    weak = Arm.parse("fixed:64+fragment_length=512+lr_schedule=adaptive*5")
    assert weak.seeds == 5 and weak.label == "fixed-64+fragment_length=512+lr_schedule=adaptive"
    cfg = weak.apply(TrainConfig(env_id="Hopper-v5", train_batch_size=4096))
    # one size or the other
    assert (cfg.env.fragment_length, cfg.env.train_batch_size, cfg.learner.lr_schedule) == (512, None, "adaptive")
    piped = Arm.parse("fixed:16/per-round+pipeline")
    assert piped.label == "fixed-16+per-round+pipeline" and piped.apply(TrainConfig()).learner.pipeline is True
    with pytest.raises(ConfigError, match="did you mean 'fragment_length'"):
        Arm.parse("fixed:8+fragment_lenght=5")
    with pytest.raises(ConfigError, match="must be an integer"):
        Arm.parse("fixed:8+train_batch_size=lots")


def test_an_arms_learner_budget_is_relative_to_the_base_configs_actors() -> None:
    """fixed:64/per-round keeps the minibatch count of the base's 8-actor batch (64 minibatches of 64 there):
    relative to its own 64 actors it would be per-sample again, 512 minibatches."""
    from minionsrl.build import make_learner
    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.learner.engine import update_plan
    from minionsrl.prepare import prepare_config

    base = TrainConfig(env_id="Hopper-v5", actors=8, fragment_length=512, minibatch_size=64, max_rounds=1)
    for budget, chunks in (("per-round", 64), ("per-sample", 512), ("fixed-compute", 512)):
        cfg, _ = prepare_config(Arm.parse(f"fixed:64/{budget}").apply(base))
        assert cfg.scaling.actors == 64 and cfg.learner.reference_actors == 8
        learner = make_learner(cfg, PolicyArch(11, 3, False, (64, 64)))
        assert update_plan(64 * 512, learner.config, learner.engine.reference_batch)[0] == chunks, budget


@pytest.mark.integration
def test_compare_writes_table_csv_and_plots_and_server_learns_the_same(tmp_path) -> None:
    arms = [Arm("fixed", 4, "server"), Arm("fixed", 4), Arm.parse("hydrozoa*2")]
    results = run_compare(_cfg(tmp_path), arms, [1], tmp_path / "cmp", target_return=1.0)
    # seed-major, arm order within a seed; the arm with its own seed count runs seed 2 as well
    assert [(r["arm"], r["seed"]) for r in results] == [("fixed-4@server", 1), ("fixed-4", 1), ("hydrozoa", 1),
                                                         ("hydrozoa", 2)]
    assert "| hydrozoa | 2 |" in (tmp_path / "cmp" / "compare.md").read_text()
    for name in ("compare.csv", "compare.md", "pareto.png", "return_vs_round.png", "return_vs_steps.png",
                 "return_vs_dollars.png", "return_vs_projected_time.png", "actors_per_round.png"):
        assert (tmp_path / "cmp" / name).stat().st_size > 0
    assert all(r["usd_to_target"] is not None for r in results)
    cheapest = min(results, key=lambda r: r["cost_usd"])  # the default budget: it has spent exactly that
    assert cheapest["return_at_budget"] == cheapest["final_eval_return"]
    assert "Pareto" in (tmp_path / "cmp" / "compare.md").read_text()
    server, local = (read_metrics(tmp_path / "cmp" / "runs" / f"{a}__s1") for a in ("fixed-4@server", "fixed-4"))
    assert [[r[c] for c in LEARNING_COLUMNS] for r in server] == [[r[c] for c in LEARNING_COLUMNS] for r in local]
    by_arm = {r["arm"]: r for r in results}
    assert by_arm["fixed-4@server"]["cost_usd"] == by_arm["fixed-4@server"]["cost_server_usd"]
    assert by_arm["fixed-4"]["cost_usd"] == by_arm["fixed-4"]["cost_serverless_usd"]
    assert by_arm["fixed-4"]["time_to_target_s"] is not None  # every eval return is >= 1
    # the detectors' seconds against the projected rounds they ran in
    hydrozoa = read_metrics(tmp_path / "cmp" / "runs" / "hydrozoa__s1")
    share = next(r["detector_share"] for r in results if r["arm"] == "hydrozoa" and r["seed"] == 1)
    assert share == pytest.approx(
        sum(float(r["detector_s"]) for r in hydrozoa) / sum(float(r["projected_round_s"]) for r in hydrozoa))
    assert all(0 <= r["detector_share"] < 1 for r in results)
    assert "detector_share" in (tmp_path / "cmp" / "compare.md").read_text()
    # a second call reuses the finished runs instead of training again: not one of their files is written
    written = {f: f.stat().st_mtime_ns for f in (tmp_path / "cmp" / "runs").rglob("*") if f.is_file()}
    run_compare(_cfg(tmp_path), arms, [1], tmp_path / "cmp")
    assert {f: f.stat().st_mtime_ns for f in (tmp_path / "cmp" / "runs").rglob("*") if f.is_file()} == written


@pytest.mark.integration
def test_compare_cli_ends_runs_at_total_timesteps_or_rounds(tmp_path) -> None:
    """--total-timesteps is honoured (it was silently replaced by the preset's 500k): 2 actors x 128 steps x 3
    rounds reach 768 steps, so a 700-step budget ends each run after 3 of its 10 rounds."""
    from minionsrl import cli

    out = tmp_path / "cmp"
    assert cli.main(["compare", "--env-id", "CartPole-v1", "--scalers", "fixed:2", "--seeds", "1", "--rounds", "10",
                     "--fragment-length", "128", "--total-timesteps", "700", "--eval-every", "0",
                     "--eval-episodes", "1", "--no-tensorboard", "--out", str(out)]) == 0
    summary = json.loads((out / "runs" / "fixed-2__s1" / "summary.json").read_text())
    assert (summary["rounds"], summary["env_steps"], summary["stopped_by"]) == (3, 768, "total_timesteps")


@pytest.mark.integration
def test_ledger_totals_equal_the_sum_of_rows_and_budget_stops_early(tmp_path) -> None:
    summary = make_trainer(_cfg(tmp_path, max_rounds=5, cold_start_s=0.0)).run()
    rows = read_metrics(tmp_path / "run")
    assert summary["cost_usd"]["serverless"] == pytest.approx(sum(float(r["cost_serverless_usd"]) for r in rows))
    assert summary["cost_usd"]["server"] == pytest.approx(sum(float(r["cost_server_usd"]) for r in rows))
    assert summary["projected_cloud_s"] == pytest.approx(sum(float(r["projected_round_s"]) for r in rows))
    budget = float(rows[-1]["cost_serverless_usd"]) * 4  # four warm rounds (the first, compiling, costs more)
    capped = make_trainer(_cfg(tmp_path, max_rounds=50, run_dir=str(tmp_path / "capped"),
                               budget_usd=budget, cold_start_s=0.0)).run()
    assert capped["rounds"] < 50
    capped_rows = read_metrics(tmp_path / "capped")
    # the next round's cost is estimated (the dearest of the last 10): at most one round's overshoot
    overshoot = capped["cost_usd"]["serverless"] - budget
    assert overshoot < max(float(r["cost_serverless_usd"]) for r in capped_rows)


@pytest.mark.integration
def test_a_budget_stop_still_evaluates_the_last_round(tmp_path) -> None:
    """The round that exhausts the budget is the last, and the last round always evaluates: the stop is
    decided before its evaluation, with the round's cost so far, not after its bill."""
    capped = make_trainer(_cfg(tmp_path, max_rounds=50, eval_every=0, run_dir=str(tmp_path / "capped"),
                               budget_usd=_steady_round_usd(tmp_path) * 8, cold_start_s=0.0)).run()
    rows = read_metrics(tmp_path / "capped")
    assert capped["rounds"] < 50
    assert rows[-1]["eval_return_mean"] != "" and math.isfinite(capped["final_eval_return"])
    assert all(r["eval_return_mean"] == "" for r in rows[:-1])  # eval_every=0: only the last round evaluates


def _strict_json(path) -> dict:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def _steady_round_usd(tmp_path) -> float:
    """The serverless cost of a warm round (the last of a 3-round probe), so a budget a few rounds long is a few
    rounds long however loaded the machine is; the first round (compilation, cold starts) costs more."""
    make_trainer(_cfg(tmp_path, max_rounds=3, eval_every=0, run_dir=str(tmp_path / "probe"), cold_start_s=0.0)).run()
    with open(tmp_path / "probe" / "metrics.csv") as f:
        return float(list(csv.DictReader(f))[-1]["cost_serverless_usd"])


@pytest.mark.integration
def test_a_budget_stop_is_kept_on_resume_unless_the_budget_is_raised(tmp_path) -> None:
    """The run decided its budget stop before its last evaluation; a resume keeps that decision instead of
    re-checking with the whole bill (which could stop a resumed run a round earlier than an uninterrupted one)."""
    cfg = _cfg(tmp_path, max_rounds=50, eval_every=0, run_dir=str(tmp_path / "capped"), cold_start_s=0.0,
               budget_usd=_steady_round_usd(tmp_path) * 4)
    capped = make_trainer(cfg).run()
    assert capped["stopped_by"] == "budget_usd"
    again = make_trainer(cfg, resume=True).run()
    assert again["rounds"] == capped["rounds"] and again["stopped_by"] == "budget_usd"
    raised = make_trainer(cfg.replace(budget_usd=cfg.cost.budget_usd * 3), resume=True).run()
    assert raised["rounds"] > capped["rounds"]


@pytest.mark.integration
def test_a_time_budget_stops_before_the_round_that_would_cross_it_and_anneals_the_rate(tmp_path) -> None:
    """--time-budget-s counts projected cloud seconds: the run stops before a round that would take it past the
    budget (at most one round over: the next round's time is an estimate), the stop is kept on resume, and the
    learning rate anneals over the spent fraction of whichever limit is nearest its end."""
    make_trainer(_cfg(tmp_path, max_rounds=3, eval_every=0, run_dir=str(tmp_path / "probe"))).run()
    budget = float(read_metrics(tmp_path / "probe")[-1]["projected_round_s"]) * 6  # six warm rounds
    cfg = _cfg(tmp_path, max_rounds=200, eval_every=0, run_dir=str(tmp_path / "capped"), time_budget_s=budget,
               anneal_lr=True, learning_rate=1e-3, total_timesteps=10**9)
    capped = make_trainer(cfg).run()
    rows = read_metrics(tmp_path / "capped")
    assert capped["stopped_by"] == "time_budget_s" and capped["rounds"] < 200
    assert capped["projected_cloud_s"] - budget < max(float(r["projected_round_s"]) for r in rows)
    spent = 0.0
    for r in rows:  # the rate of each round: 1e-3 x (1 - projected seconds spent before it / budget)
        assert float(r["learning_rate"]) == pytest.approx(1e-3 * max(1 - spent / budget, 0.0), rel=1e-6)
        spent += float(r["projected_round_s"])
    again = make_trainer(cfg, resume=True).run()
    assert again["rounds"] == capped["rounds"] and again["stopped_by"] == "time_budget_s"


@pytest.mark.parametrize(("flags", "message"), [
    (["--until", "target", "--time-budget-s", "60"], "--until target: name the return"),
    (["--until", "target", "--target", "50"], "cap the runs"),
    (["--until", "target", "--target", "50", "--time-budget-s", "0"], "time_budget_s: 0.0 must be > 0"),
    (["--until", "target", "--target", "50", "--budget-usd", "nan"], "budget_usd: nan must be a finite number"),
    (["--target", "50"], "--rounds: give the rounds"),
])
def test_compare_until_target_bad_input_is_one_line(tmp_path, capsys, flags, message) -> None:
    from minionsrl import cli

    rc = cli.main(["compare", "--env-id", "CartPole-v1", "--scalers", "fixed:2", "--seeds", "1",
                   "--out", str(tmp_path / "cmp"), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize("command", [["plan"], ["compare", "--scalers", "fixed:2", "--rounds", "1"]])
def test_plan_and_compare_refuse_run_dir_for_out(tmp_path, capsys, command) -> None:
    """They take train's flags; --run-dir was one, accepted and ignored (they write under --out)."""
    from minionsrl import cli

    assert cli.main([*command, "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"minionsrl: error: --run-dir: {command[0]} writes its runs and files under --out; give --out "
                   "instead"] and not (tmp_path / "r").exists()


def test_compare_refuses_an_arm_named_twice(tmp_path, capsys) -> None:
    """``fixed:4,fixed:4`` once ran one arm and tabled it twice, each row over both runs' seeds."""
    from minionsrl import cli

    rc = cli.main(["compare", "--env-id", "CartPole-v1", "--scalers", "fixed:4,fixed:2,fixed:4", "--seeds", "1",
                   "--rounds", "2", "--out", str(tmp_path / "cmp")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == ["minionsrl: error: --scalers: fixed-4 is named more than once; name each arm once"]
    assert not (tmp_path / "cmp").exists()


@pytest.mark.integration
def test_compare_until_target_runs_each_arm_to_the_target_or_its_cap(tmp_path) -> None:
    """Each run goes on until its evaluation reaches the target (CartPole: 40, a few rounds) or the projected-time
    cap; the table says how many seeds reached it, with the projected seconds and dollars to it."""
    from minionsrl import cli

    out = tmp_path / "cmp"
    assert cli.main(["compare", "--env-id", "CartPole-v1", "--scalers", "fixed:4,fixed:2", "--seeds", "2",
                     "--until", "target", "--target", "40", "--time-budget-s", "200", "--eval-every", "2",
                     "--eval-episodes", "2", "--no-tensorboard", "--out", str(out)]) == 0
    with open(out / "compare.csv") as f:
        runs = list(csv.DictReader(f))
    for run in runs:
        summary = json.loads((out / "runs" / f"{run['arm']}__s{run['seed']}" / "summary.json").read_text())
        assert summary["stopped_by"] in ("target_return", "time_budget_s")
        assert (summary["stopped_by"] == "target_return") == (run["usd_to_target"] != "")
        if run["usd_to_target"]:
            assert float(run["projected_time_to_target_s"]) <= summary["projected_cloud_s"] + 1e-9
            # the round of the first evaluation at the target, before the run stopped: an evaluation round of the
            # grid, since a run that reached it stopped by the target (a cap's last round evaluates too)
            assert int(run["rounds_to_target"]) % 2 == 0 and int(run["rounds_to_target"]) <= summary["rounds"]
        else:
            assert run["rounds_to_target"] == ""
    table = (out / "compare.md").read_text()
    assert "| reached |" in table.replace("| arm | seeds | reached |", "| reached |")
    assert "Pareto to target" in table


@pytest.mark.integration
def test_summary_says_why_the_run_stopped_and_is_valid_json(tmp_path) -> None:
    from minionsrl.loop.session import Session
    from minionsrl.loop.state import RunState

    budget = _steady_round_usd(tmp_path) * 4
    assert _strict_json(tmp_path / "probe" / "summary.json")["stopped_by"] == "max_rounds"
    make_trainer(_cfg(tmp_path, max_rounds=50, eval_every=0, run_dir=str(tmp_path / "capped"),
                      budget_usd=budget, cold_start_s=0.0)).run()
    capped = _strict_json(tmp_path / "capped" / "summary.json")
    assert capped["stopped_by"] == "budget_usd" and capped["rounds"] < 50
    # a run that has not evaluated yet: null, not NaN
    session = Session(_cfg(tmp_path, run_dir=str(tmp_path / "fresh")), resume=False)
    session.write_summary(RunState(), {"serverless": 0.0, "server": 0.0}, 0.0, "aws_lambda_x86 via lithops")
    fresh = _strict_json(tmp_path / "fresh" / "summary.json")
    assert fresh["final_eval_return"] is None and fresh["best_eval_return"] is None and fresh["stopped_by"] is None


def test_pareto_front_return_at_budget_and_bootstrap_interval() -> None:
    from minionsrl.experiments.compare import _return_at, bootstrap_ci, pareto_front

    points = {"cheap-weak": (1.0, 100.0), "dear-strong": (3.0, 300.0), "dominated": (3.0, 200.0),
              "cheap-strong": (1.0, 150.0)}
    assert pareto_front(points) == ["dear-strong", "cheap-strong"]
    rows = [{"cum_cost_serverless_usd": str(c), "eval_return_mean": e} for c, e in
            ((0.1, ""), (0.2, "10"), (0.3, ""), (0.4, "30"))]
    assert _return_at(rows, "cum_cost_serverless_usd", 0.35) == 10.0  # the last evaluation known by then
    assert _return_at(rows, "cum_cost_serverless_usd", 0.05) is None
    lo, hi = bootstrap_ci([1.0, 2.0, 3.0, 4.0])
    assert 1.0 <= lo < 2.5 < hi <= 4.0 and bootstrap_ci([5.0]) == (5.0, 5.0)


@pytest.mark.integration
def test_server_backend_waits_for_new_hosts_only_when_asked(tmp_path) -> None:
    cfg = _cfg(tmp_path)
    with ServerBackend(b"s" * 32, vcpus_per_host=2, startup_s=0.4, wait_for_startup=True) as backend:
        trainer = make_trainer(cfg.replace(backend="server", scaler="max", max_rounds=1), backend=backend)
        trainer.run()
        assert backend.hosts == 4 and backend.startup_waits == 0  # the first hosts start before the job
    with ServerBackend(b"s" * 32, vcpus_per_host=2, startup_s=0.4, wait_for_startup=True) as backend:
        backend.invoke([])
        backend.hosts = 1
        assert backend.idle_timeout_s == float("inf")
        requests = [Request(id=f"x{i}", kind="train", policy="none", env=EnvSpec("CartPole-v1"), seed=i, gamma=0.99,
                            steps=1) for i in range(4)]
        backend.publish(b"x")
        backend.invoke(requests[:0])
        assert backend.startup_waits == 0  # no request: no host added, nothing waited for
        # 4 train requests need 2 hosts: one is added, so the backend waits 0.4 s (replies are errors: no such policy)
        t1 = time.perf_counter()
        replies = backend.invoke(requests)
        assert time.perf_counter() - t1 >= 0.4
        assert backend.startup_waits == 1 and len(replies) == 4 and not any(r.ok for r in replies)


@pytest.mark.integration
def test_scale_measures_every_count(tmp_path) -> None:
    rows = run_scale(_cfg(tmp_path), max_actors=4, steps=1, repeats=2, out_dir=tmp_path / "scale")
    assert [r["actors"] for r in rows] == [1, 2, 4]
    assert all(r["round_s"] > 0 and r["cold_round_s"] > 0 for r in rows)
    assert (tmp_path / "scale" / "scale.png").stat().st_size > 0
    with open(tmp_path / "scale" / "scale.csv") as fh:
        assert len(list(csv.DictReader(fh))) == 3


@pytest.mark.integration
@pytest.mark.parametrize("algo", ["ppo", "appo"])
def test_motivate_correlates_gain_with_the_ratio(tmp_path, algo) -> None:
    make_trainer(_cfg(tmp_path, max_rounds=6, keep_checkpoints_every=2, algo=algo)).run()
    result = run_motivate(tmp_path / "run", base=2, boost=8, eval_episodes=2, out_dir=tmp_path / "mot")
    assert result["checkpoints"] == 3
    for name in ("convexity_ratio", "gns"):
        rho = result[name]["spearman"]
        assert -1.0 <= rho <= 1.0 or rho != rho
    path = tmp_path / "mot" / "motivate.csv"
    rows = list(csv.DictReader(open(path)))  # noqa: SIM115
    assert [(r["run"], int(r["round"])) for r in rows] == [("run", 2), ("run", 4), ("run", 6)]
    assert all(r["convexity_ratio"] and r["gns"] for r in rows)
    if algo == "ppo":  # a cut experiment resumes: the rows it has are kept, the missing checkpoint is measured
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(lines[:3]))
        again = run_motivate([tmp_path / "run"], base=2, boost=8, eval_episodes=2, out_dir=tmp_path / "mot")
        assert again["checkpoints"] == 3 and list(csv.DictReader(open(path)))[:2] == rows[:2]  # noqa: SIM115
        assert list(csv.DictReader(open(path)))[2]["gain"] == rows[2]["gain"]  # noqa: SIM115
    with pytest.raises(ConfigError, match="kept checkpoints"):
        run_motivate(tmp_path / "mot", 2, 8, 2, tmp_path / "mot2")


@pytest.mark.integration
def test_scheduler_training_runs_jobs_and_the_trained_one_drives_a_run(tmp_path) -> None:
    # the scheduler's own tests (artefacts, the shipped one, sampling, training steps) are in test_scheduler
    out = train_scheduler(_cfg(tmp_path, max_rounds=3), jobs=2, target=500.0, out=tmp_path / "sched.safetensors",
                          n_max=8)
    curve = list(csv.DictReader(open(out.with_suffix(".curve.csv"))))  # noqa: SIM115
    assert [int(r["job"]) for r in curve] == [1, 2]
    assert all(r["reached"] == "False" and float(r["episode_return"]) < 0 for r in curve)
    summary = make_trainer(_cfg(tmp_path, scaler="minions", scheduler=str(out), run_dir=str(tmp_path / "m"))).run()
    assert summary["scaler"] == "minions"
    rows = read_metrics(tmp_path / "m")
    assert all(r["gns"] for r in rows)  # a new scheduler reads the noise scale: the detector runs for it
    # a training cut short goes on where it stopped
    out = train_scheduler(_cfg(tmp_path, max_rounds=3), jobs=3, target=500.0, out=out, n_max=8)
    assert [int(r["job"]) for r in csv.DictReader(open(out.with_suffix(".curve.csv")))] == [1, 2, 3]  # noqa: SIM115
    assert load_agent(out)[1]["jobs"] == 3


def test_a_compare_cell_over_fewer_seeds_than_its_arm_ran_says_how_many() -> None:
    """A run with no evaluation by the compared spend (or that never reached the target) has no value: the cell
    says it is over 1 of 2 seeds, not a value of the arm's."""
    from minionsrl.experiments.compare import _summary_cell

    assert _summary_cell([None, 173.9]) == "173.9 (1 of 2 seeds)"
    assert _summary_cell([1.0, 3.0, None]) == "2 (1–3) (2 of 3 seeds)"
    assert _summary_cell([1.0, 3.0]) == "2 (1–3)" and _summary_cell([None, None]) == "–"
