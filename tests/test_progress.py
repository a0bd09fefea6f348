"""What a run shows: plain lines in a log (no terminal), an ETA, and a summary with both bills and next steps."""

from __future__ import annotations

import io

import pytest

from minionsrl import cli
from minionsrl.config import TrainConfig
from minionsrl.progress import TrainingDisplay, eta_goal, eta_s, figures
from minionsrl.stats import RoundStats

FAST = ["--actors", "1", "--fragment-length", "32", "--eval-episodes", "1", "--hidden-sizes", "8"]


def _row(round_idx: int, steps: int, wall_s: float, cost: float = 0.001) -> RoundStats:
    return RoundStats.from_row({"round": round_idx, "env_steps": steps, "wall_s": wall_s, "sps": 1000.0, "n_actors": 2,
                                "train_return_mean": 20.0, "eval_return_mean": None, "cum_cost_serverless_usd": cost},
                               complete=False)


@pytest.mark.parametrize(("limits", "expected"), [
    ({"total_timesteps": 1000}, 30.0),  # a quarter of the steps in 10 s: 30 s to go
    ({"max_rounds": 2}, 10.0),  # the nearest limit wins: half the rounds
    ({"budget_usd": 0.004, "total_timesteps": 10**9}, 30.0),  # a quarter of the dollars
    ({"time_budget_s": 20.0}, 10.0),  # half the projected seconds
    ({"max_rounds": None, "target_return": 100.0}, None),  # a target alone gives no ETA
])
def test_eta_extrapolates_the_nearest_limit(limits, expected):
    cfg = TrainConfig(env_id="CartPole-v1", **limits)
    assert eta_s(cfg, _row(1, 250, 10.0), projected_s=10.0) == expected


def test_the_eta_counts_from_the_first_round_shown_not_its_compiling():
    """Round 1 took 10 s (compiling, starting instances) for a quarter of the steps, round 2 one more second for
    the next quarter: two more such rounds, 2 s, not the 10 s the whole wall time would say. The first row has
    no rate yet."""
    cfg = TrainConfig(env_id="CartPole-v1", total_timesteps=1000)
    first, second = _row(1, 250, 10.0), _row(2, 500, 11.0)
    assert eta_s(cfg, second, 0.0, since=(first, 0.0)) == pytest.approx(2.0)
    assert eta_s(cfg, second, 0.0) == pytest.approx(11.0)
    assert eta_s(cfg, first, 0.0, since=(first, 0.0)) is None  # nothing spent since
    out = io.StringIO()
    with TrainingDisplay(cfg, out=out, line_every_s=0.0) as display:
        display.update(first)
        display.update(second)
    lines = out.getvalue().splitlines()
    assert "ETA - to 1,000 steps" in lines[0] and "ETA 0:00:02 to 1,000 steps" in lines[1], lines
    # two limits: the projected budget was half spent by round 1's compiling, a twentieth more by round 2, so the
    # steps end the run first (2 s), though the budget's fraction is the larger (its own rate: 9 s)
    both = TrainConfig(env_id="CartPole-v1", total_timesteps=1000, time_budget_s=10.0)
    assert eta_s(both, second, 5.5, since=(first, 5.0)) == pytest.approx(2.0)
    assert eta_goal(both, second, 5.5, since=(first, 5.0)) == "to 1,000 steps"
    assert eta_goal(both, first, 5.0, since=(first, 5.0)) == "to 10 projected s"  # no rate yet: the nearest limit


def test_plain_lines_where_stdout_is_not_a_terminal_at_most_one_per_interval():
    out = io.StringIO()  # not a terminal: as under nohup, SLURM or `> log`
    cfg = TrainConfig(env_id="CartPole-v1", total_timesteps=1000)
    with TrainingDisplay(cfg, out=out, line_every_s=3600) as display:
        for r in (1, 2, 3):
            display.update(_row(r, 250 * r, 10.0 * r))
    lines = out.getvalue().splitlines()
    # the first round at once, then none within the interval; the last round's when the display closes
    assert [line.split(" · ")[0] for line in lines] == [f"minionsrl: CartPole-v1 round {r}" for r in (1, 3)]
    assert "750 steps · 1000 steps/s" in lines[1] and "$0.001000" in lines[1] and "ETA 0:00:10" in lines[1]


def test_a_disabled_display_writes_nothing():
    out = io.StringIO()
    with TrainingDisplay(TrainConfig(env_id="CartPole-v1"), enabled=False, out=out) as display:
        display.update(_row(1, 250, 1.0))
    assert out.getvalue() == ""


def test_the_bar_text_is_the_log_line():
    assert figures(_row(1, 250, 10.0), 42.0, None).endswith("eval 42.0 · $0.001000 · ETA -")
    named = figures(_row(1, 250, 10.0), 42.0, None, priced_as="aws_lambda_x86 via lithops")
    assert named.endswith("eval 42.0 · $0.001000 as aws_lambda_x86 via lithops · ETA -")  # the deployment it prices


@pytest.mark.parametrize("width", [80, 200])
def test_a_narrow_terminal_cuts_the_figures_not_the_bar_s_counters(monkeypatch, width):
    from rich.console import Console

    from minionsrl import progress

    screen = io.StringIO()
    monkeypatch.setattr(progress, "Console", lambda stderr: Console(file=screen, width=width, force_terminal=True,
                                                                   color_system=None))
    display = TrainingDisplay(TrainConfig(env_id="Hopper-v5", total_timesteps=1_000_000), out=io.StringIO(),
                              priced_as="aws_lambda_x86 via lithops")
    display.update(_row(12, 24576, 10.0))
    display.console.print(display.progress.get_renderable())
    line = screen.getvalue().splitlines()[-1]
    # before: "Hop… round 12 · 24576 steps · …": rich squeezed the name, the bar, done/total and the clock away
    assert line.startswith("Hopper-v5 ") and " 24576/1000000 0:00:" in line and len(line) <= width
    # a narrow one drops whole figures, the least telling first (the bar shows the steps), not the ETA at the end
    assert "eval " in line and " · ETA " in line and "…" not in line
    assert ("round 12 · " in line and "2 actors · train 20.0" in line) == (width == 200)


@pytest.mark.integration
def test_a_cli_run_logs_rounds_and_ends_with_its_bills_and_next_steps(tmp_path, capsys):
    run_dir = tmp_path / "r"
    assert cli.main(["train", *FAST, "--max-rounds", "2", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out  # captured: not a terminal
    assert "minionsrl: CartPole-v1 round 1 · 32 steps" in out and "minionsrl: CartPole-v1 round 2" in out
    for shown in ("cost (serverless)", "cost (server)", "projected_cloud_s", f'minionsrl.load_policy("{run_dir}")',
                  f"minionsrl eval --run-dir {run_dir}", f"tensorboard --logdir {run_dir / 'tensorboard'}"):
        assert shown in out, shown


def test_the_line_states_the_bill_of_the_deployment_it_names():
    """A run priced as a Ray cluster (servers) states the server bill, as plan's ray row does; one priced as
    Lambda the functions' (the line once said the functions' bill "as ray cluster")."""
    from minionsrl.experiments.compare import _pays

    row = RoundStats.from_row({"round": 1, "env_steps": 250, "wall_s": 1.0, "sps": 1.0, "n_actors": 2,
                               "cum_cost_serverless_usd": 0.001, "cum_cost_server_usd": 0.0002}, complete=False)
    assert "$0.000200 as ray cluster" in figures(row, None, None, priced_as="ray cluster")
    assert "$0.001000 as aws_lambda_x86 via lithops" in figures(row, None, None,
                                                                  priced_as="aws_lambda_x86 via lithops")
    assert (_pays("ray cluster", "ray"), _pays("servers", "local"), _pays("", "server")) == ("server",) * 3
    assert _pays("aws_lambda_x86 via lithops", "lithops") == "serverless"
    ray = TrainConfig(env_id="CartPole-v1", backend="ray", budget_usd=5.0, max_rounds=None)
    assert eta_goal(ray, row, 0.0) == "to $5 as functions"  # what --budget-usd counts, beside the server bill
