"""The README says what the code does: run-directory columns, summary keys, the module map's paths."""

from __future__ import annotations

import re
from pathlib import Path

from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.loop.metrics import INVOCATION_COLUMNS, METRIC_COLUMNS
from minionsrl.stats import RunSummary

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
                                       eval_episodes=1, progress=False, tensorboard=False, device="cpu",
                                       run_dir=str(tmp_path / "r"))).run()
    assert _listed("summary.json") == [k for k in summary if k != "config"]
    assert list(summary) == list(RunSummary.__annotations__)  # the type train() declares is what it returns
    assert "cost_usd: {serverless, server, serverless_wall, server_wall}" in README
    assert list(summary["cost_usd"]) == ["serverless", "server", "serverless_wall", "server_wall"]
    assert summary["learner_host"] == "c5.large"  # a CPU learner: the catalogue's CPU host
    assert summary["priced_as"] == "aws_lambda_x86 via lithops"  # a local run: the deployment --backend lithops ships


def test_module_map_paths_exist_and_the_design_is_ours():
    """The module map lives in docs/INTERNALS.md (the README is the user's page)."""
    internals = (ROOT / "docs" / "INTERNALS.md").read_text()
    section = internals.split("## How a round works")[1].split("**Rollout functions are stateless.**")[0]
    paths = re.findall(r"`(minionsrl/[\w/.]+)`", section)
    assert len(paths) >= 10
    assert all((ROOT / p).exists() for p in paths), [p for p in paths if not (ROOT / p).exists()]
    assert "shared/SPEC" not in README and (ROOT / "docs" / "DESIGN.md").exists()


def test_design_names_at_most_five_files_to_follow_a_round_in():
    """DESIGN §1's phase table: the files a round's logic lives in (its "read" column) are at most five, and every
    file it names, to read or one call below, exists."""
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    rows = [line.split(" | ") for line in design.splitlines() if line.startswith("| **")
            and line.split(" | ")[0].strip("| *") in ("plan", "collect", "learn", "decide", "observe")]
    assert len(rows) == 5

    def files(column: int) -> set[str]:
        return {p for row in rows for p in re.findall(r"`((?:\w+/)*\w+\.py)`", row[column])}

    read, below = files(2), files(3)
    assert 3 <= len(read) <= 5, sorted(read)
    missing = [p for p in read | below if not (ROOT / "minionsrl" / p).exists()]
    assert not missing, missing


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_of_the_readme_and_docs_resolves():
    """Files and folders exist, and a ``#fragment`` names a heading of the page it points to."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, fragment = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif fragment and dest.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", dest.read_text(), flags=re.S), re.M)
                if fragment not in {_anchor(h) for h in headings}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_readme_is_a_users_page():
    """Contents first, the two commands, when to use it and when not, the scope; internals in docs/."""
    assert "## Contents" in README and "make run" in README and "make test" in README
    for heading in ("## Quick start", "## When to use minionsrl, and when not", "## What it trains", "## Examples"):
        assert heading in README
    assert "HMAC" not in README.split("## Further reading")[0], "the data plane's details belong in docs/INTERNALS.md"
    quick = README.split("## Quick start")[1].split("\n## ")[0]
    assert len(re.findall(r"```bash\n(.*?)```", quick, re.S)[0].strip().splitlines()) <= 10


def test_every_python_block_of_the_readme_compiles():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 3
    for block in blocks:
        compile(block, "README", "exec")
