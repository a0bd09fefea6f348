"""Live training display (rich): a progress bar over steps plus the latest round's figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from minionsrl.config import TrainConfig


def _num(value: Any, fmt: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, fmt)


class TrainingDisplay:
    """Shows round, steps/s, returns and actors while training; silent when disabled."""

    def __init__(self, cfg: TrainConfig, enabled: bool = True, start_steps: int = 0, start_round: int = 0) -> None:
        self.console = Console(stderr=True)
        self.enabled = enabled
        self.by_steps = cfg.total_timesteps is not None
        total = cfg.total_timesteps if self.by_steps else cfg.max_rounds
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[stats]}"), console=self.console, disable=not enabled,
        )
        self.task = self.progress.add_task(cfg.env_id, total=total, stats="starting actors…",
                                           completed=start_steps if self.by_steps else start_round)
        self.last_eval: Any = None

    def __enter__(self) -> TrainingDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, row: dict[str, Any]) -> None:
        if row.get("eval_return_mean") is not None:
            self.last_eval = row["eval_return_mean"]
        stats = (f"round {row['round']} · {row['n_actors']} actors · {_num(row['sps'], '.0f')} steps/s · "
                 f"train {_num(row['train_return_mean'])} · eval {_num(self.last_eval)}")
        self.progress.update(self.task, completed=row["env_steps"] if self.by_steps else row["round"], stats=stats)

    def print_summary(self, summary: dict[str, Any], run_dir: Path) -> None:
        table = Table(title=f"minionsrl · {summary['env_id']}", show_header=False)
        for key in ("stopped_by", "rounds", "env_steps", "wall_s", "final_eval_return", "best_eval_return",
                    "train_return_last100"):
            value = summary.get(key)
            table.add_row(key, _num(value, ".2f") if isinstance(value, float) else str(value))
        table.add_row("run_dir", str(run_dir))
        Console().print(table)
        if summary.get("stopped_by") == "budget_usd":
            spent, budget = summary["cost_usd"]["serverless"], summary["config"]["budget_usd"]
            Console(stderr=True).print(f"minionsrl: stopped by the budget: ${spent:.4g} of budget_usd ${budget:g} "
                                       "spent, and the next round would have exceeded it")
