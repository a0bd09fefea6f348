"""The run plots read as a user expects: return against env steps and projected time, the two bills each on an
axis of its own, a fixed actor count as a level line on an axis from 0; TensorBoard gets the config as text."""

from __future__ import annotations

import pytest
from run_dir_tools import tensorboard_events

from minionsrl.experiments import plots
from minionsrl.loop.metrics import RunLog


def _rows(n: int = 6, actors: int = 8) -> list[dict[str, str]]:
    return [{"round": str(i), "env_steps": str(256 * i), "n_actors": str(actors), "projected_round_s": "0.5",
             "eval_return_mean": "100" if i % 3 == 0 else "", "train_return_mean": str(10.0 * i),
             "cum_cost_serverless_usd": str(1e-5 * i), "cum_cost_server_usd": str(0.01 + 1e-4 * i)}
            for i in range(1, n + 1)]


@pytest.fixture
def figures(monkeypatch):
    """The figures run_plots draws, by file name (inspected before they are closed)."""
    seen = {}
    save = plots._save

    def keep(fig, path):
        seen[path.name] = [(ax.get_xlabel(), ax.get_ylabel(), ax.get_ylim(), ax.get_title()) for ax in fig.axes]
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return seen


def test_run_plots_axes(tmp_path, figures):
    paths = plots.run_plots(_rows(), tmp_path, "run")
    assert [p.name for p in paths] == ["return.png", "cost.png", "actors.png"] and all(p.stat().st_size for p in paths)
    assert [x for x, *_ in figures["return.png"]] == ["environment steps", "projected cloud time (s)"]
    (_, left, left_lim, title), (_, right, right_lim, _) = figures["cost.png"]
    assert "serverless" in left and "server-based" in right
    assert left_lim[1] < 1e-4 < 0.01 < right_lim[1]  # the serverless bill fills its own axis
    assert "server-based" in title and "x)" in title
    ((xlabel, _, (low, high), title),) = figures["actors.png"]
    assert xlabel == "round" and low == 0 and 9 <= high <= 12 and "8 every round" in title


def test_a_scaler_s_actors_and_an_older_metrics_file(tmp_path, figures):
    rows = _rows()
    for i, r in enumerate(rows):
        r["n_actors"] = str([4, 8, 16, 8, 4, 32][i])
        del r["projected_round_s"]  # a run written before the column
    plots.run_plots(rows, tmp_path, "run")
    assert "4-32, mean 12.0" in figures["actors.png"][0][3]


def test_tensorboard_gets_the_config_as_text(tmp_path):
    log = RunLog(tmp_path, None, 0, tensorboard=True)
    log.log_config({"env_id": "CartPole-v1", "hidden_sizes": [64, 64], "budget_usd": None, "note": "a|b"}, 0)
    log.close()
    events = tensorboard_events(tmp_path)
    (value,) = events[1].summary.value
    assert value.tag == "hyperparameters/text_summary"
    text = value.tensor.string_val[0].decode()
    assert text.startswith("|param|value|\n|-|-|\n|env_id|CartPole-v1|")
    assert "|hidden_sizes|[64, 64]|" in text and "|budget_usd||" in text and "|note|a\\|b|" in text
