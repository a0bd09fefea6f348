"""What a run shows while it trains and when it ends, on a terminal or in a log file.

On a terminal (stderr), a rich progress bar over steps (or rounds) with the latest round's figures and an ETA.
Where stdout is not a terminal (nohup, SLURM, ``make run > log``), a plain line on stdout per round, at most one
every :data:`LINE_EVERY_S` seconds so that a fast run does not flood its log (the last round's line always). Both
show the same figures (:func:`figures`). The run ends with a summary: outcome, both bills, next steps.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from minionsrl.config import TrainConfig

LINE_EVERY_S = 10.0  # the least seconds between two plain lines (a CartPole round takes a few milliseconds)


def _num(value: Any, fmt: str = ".1f") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return format(value, fmt)


def _usd(dollars: float) -> str:
    """Dollars to the micro-dollar: a CartPole round costs a few of them."""
    return f"${dollars:,.6f}"


def _clock(seconds: float) -> str:
    """``H:MM:SS`` (as rich's elapsed column shows time)."""
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def eta_s(cfg: TrainConfig, row: dict[str, Any], projected_s: float) -> float | None:
    """Wall seconds left until the nearest limit the run has (steps, rounds, dollar or projected-time budget),
    extrapolated from the wall time so far; None when no limit gives one (a target return alone)."""
    spent = [(row["env_steps"], cfg.run.total_timesteps), (row["round"], cfg.run.max_rounds),
             (row.get("cum_cost_serverless_usd") or 0.0, cfg.cost.budget_usd), (projected_s, cfg.cost.time_budget_s)]
    fraction = max((used / limit for used, limit in spent if limit), default=0.0)
    if not fraction > 0:
        return None
    return max(row["wall_s"] * (1.0 - fraction) / fraction, 0.0) if fraction < 1 else 0.0


def figures(row: dict[str, Any], last_eval: Any, eta: float | None) -> str:
    """The round's figures as one line: the bar's text and the log's line."""
    return (f"round {row['round']} · {row['env_steps']} steps · {_num(row['sps'], '.0f')} steps/s · "
            f"{row['n_actors']} actors · train {_num(row['train_return_mean'])} · eval {_num(last_eval)} · "
            f"{_usd(row.get('cum_cost_serverless_usd') or 0.0)} · ETA {'-' if eta is None else _clock(eta)}")


class TrainingDisplay:
    """Shows the run while it trains (a bar on a terminal, plain lines in a log); silent when disabled.

    ``projected_s`` returns the run's projected cloud seconds so far (a time budget's ETA); ``out`` is where the
    plain lines go (stdout), written only when it is not a terminal."""

    def __init__(self, cfg: TrainConfig, enabled: bool = True, start_steps: int = 0, start_round: int = 0,
                 projected_s: Callable[[], float] = lambda: 0.0, out: IO[str] | None = None,
                 line_every_s: float = LINE_EVERY_S) -> None:
        self.cfg, self.projected_s, self.line_every_s = cfg, projected_s, line_every_s
        self.console = Console(stderr=True)
        self.out = out if out is not None else sys.stdout
        self.lines = enabled and not _is_terminal(self.out)
        self.by_steps = cfg.run.total_timesteps is not None
        total = cfg.run.total_timesteps if self.by_steps else cfg.run.max_rounds
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[stats]}"), console=self.console,
            disable=not (enabled and self.console.is_terminal),  # off a terminal rich would print one squashed line
        )
        self.task = self.progress.add_task(cfg.env.env_id, total=total, stats="starting actors…",
                                           completed=start_steps if self.by_steps else start_round)
        self.last_eval: Any = None
        self._line_at = -math.inf  # when the last plain line was written (monotonic seconds)
        self._unwritten: str | None = None  # the newest figures not yet written as a line

    def __enter__(self) -> TrainingDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
        self._write_line(force=True)

    def update(self, row: dict[str, Any]) -> None:
        """Show a metrics row (``on_round``)."""
        if row.get("eval_return_mean") is not None:
            self.last_eval = row["eval_return_mean"]
        stats = figures(row, self.last_eval, eta_s(self.cfg, row, self.projected_s()))
        self.progress.update(self.task, completed=row["env_steps"] if self.by_steps else row["round"], stats=stats)
        if self.lines:
            self._unwritten = stats
            self._write_line()

    def _write_line(self, force: bool = False) -> None:
        now = time.monotonic()
        if self._unwritten is None or (not force and now - self._line_at < self.line_every_s):
            return
        print(f"minionsrl: {self.cfg.env.env_id} {self._unwritten}", file=self.out, flush=True)
        self._unwritten, self._line_at = None, now


def _is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def next_steps(summary: dict[str, Any], run_dir: Path) -> list[str]:
    """The commands that use a finished run: its policy from Python, its evaluation, its TensorBoard events."""
    quoted = shlex.quote(str(run_dir))
    steps = [f'policy = minionsrl.load_policy("{run_dir}")  # the last round\'s policy']
    if summary.get("best_round"):
        steps.append(f'policy = minionsrl.load_policy("{run_dir}", which="best")  # round {summary["best_round"]}, '
                     'the best evaluation')
    steps.append(f"minionsrl eval --run-dir {quoted}" + (" --which best" if summary.get("best_round") else ""))
    if summary["config"].get("tensorboard"):
        steps.append(f"tensorboard --logdir {shlex.quote(str(run_dir / 'tensorboard'))}")
    return steps


def print_summary(summary: dict[str, Any], run_dir: Path) -> None:
    """The end of a run on stdout: outcome, both bills (serverless and server dollars, projected cloud seconds),
    then next steps."""
    table = Table(title=f"minionsrl · {summary['env_id']}", show_header=False)
    for key in ("stopped_by", "rounds", "env_steps", "wall_s", "final_eval_return", "best_eval_return",
                "best_round", "train_return_last100"):
        value = summary.get(key)
        table.add_row(key, _num(value, ".2f") if isinstance(value, float) else str(value))
    cost = summary["cost_usd"]
    table.add_row("cost (serverless)", _usd(cost["serverless"]))
    table.add_row("cost (server)", _usd(cost["server"]))
    table.add_row("projected_cloud_s", _num(summary.get("projected_cloud_s"), ".1f"))
    table.add_row("run_dir", str(run_dir))
    console = Console()
    console.print(table)
    console.print("next steps:", highlight=False)
    for step in next_steps(summary, run_dir):
        console.print(f"  {step}", highlight=False, markup=False, soft_wrap=True)
    if summary.get("stopped_by") == "budget_usd":
        spent, budget = cost["serverless"], summary["config"]["budget_usd"]
        Console(stderr=True).print(f"minionsrl: stopped by the budget: ${spent:.4g} of budget_usd ${budget:g} "
                                   "spent, and the next round would have exceeded it")
