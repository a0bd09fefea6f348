"""The README says what the code does: run-directory columns, summary keys, the module map's paths."""

from __future__ import annotations

import re
from pathlib import Path

from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.loop.metrics import INVOCATION_COLUMNS, METRIC_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _listed(file: str) -> list[str]:
    """The comma-separated names in the README's row for ``file`` (a ``key: {a, b}`` group counts as key)."""
    row = next(line for line in README.splitlines() if line.startswith(f"| `{file}` |"))
    names = re.search(r"`([a-z_0-9]+(?:, [a-z_0-9]+[^`]*)+)`", row.split("|")[2]).group(1)
    return [name.split(":")[0] for name in re.sub(r"\{[^}]*\}", "", names).split(", ")]


def test_readme_lists_the_csv_columns_the_code_writes():
    assert _listed("metrics.csv") == METRIC_COLUMNS
    assert _listed("invocations.csv") == INVOCATION_COLUMNS


def test_readme_lists_the_summary_keys(tmp_path):
    summary = make_trainer(TrainConfig(env_id="CartPole-v1", actors=1, fragment_length=16, max_rounds=1,
                                       eval_episodes=1, progress=False, tensorboard=False,
                                       run_dir=str(tmp_path / "r"))).run()
    assert _listed("summary.json") == [k for k in summary if k != "config"]
    assert "cost_usd: {serverless, server, serverless_wall, server_wall}" in README
    assert list(summary["cost_usd"]) == ["serverless", "server", "serverless_wall", "server_wall"]


def test_module_map_paths_exist_and_the_design_is_ours():
    section = README.split("## How a round works")[1].split("**Rollout functions are stateless.**")[0]
    paths = re.findall(r"`(minionsrl/[\w/.]+)`", section)
    assert len(paths) >= 10
    assert all((ROOT / p).exists() for p in paths), [p for p in paths if not (ROOT / p).exists()]
    assert "shared/SPEC" not in README and (ROOT / "docs" / "DESIGN.md").exists()
