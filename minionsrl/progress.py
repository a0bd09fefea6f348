"""What a run shows while it trains and when it ends, on a terminal or in a log file.

On a terminal (stderr), a rich progress bar over steps (or rounds) with the latest round's figures and an ETA.
Where stdout is not a terminal (nohup, SLURM, ``make run > log``), a plain line on stdout per round, at most one
every :data:`LINE_EVERY_S` seconds so that a fast run does not flood its log (the last round's line always). Both
show the same figures (:func:`figures`). The run ends with a summary: outcome, both bills, next steps.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from minionsrl.config import TrainConfig
from minionsrl.deployments import deployment_of, pays_servers
from minionsrl.stats import RoundStats, RunSummary

LINE_EVERY_S = 10.0  # the least seconds between two plain lines (a CartPole round takes a few milliseconds)
BAR_WIDTH = 30  # the bar's characters on a terminal, down to MIN_BAR_WIDTH on a narrow one ...
MIN_BAR_WIDTH = 10
FIGURES_ROOM = 40  # ... to leave the figures this many (the evaluation and the ETA to a million steps)


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


def _count(n: float) -> str:
    """A limit as a user writes it: ``500k``, ``1M``, ``1,500``."""
    n = int(n)
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    return f"{n // 1000}k" if n >= 10_000 and n % 1000 == 0 else f"{n:,}"


def _budgets_bill(cfg: TrainConfig) -> str:
    """`` as functions`` where the run's line states the server bill (a Ray cluster, servers) but ``--budget-usd``
    counts the functions' (docs/COST.md), so that the line says which dollars the budget's ETA counts."""
    deployment = deployment_of(cfg.cost.deployment, cfg.functions.backend)
    return " as functions" if deployment.servers else ""


def _spent(cfg: TrainConfig, row: RoundStats, projected_s: float) -> list[tuple[float, str]]:
    """The spent fraction of each limit the run has (steps, rounds, dollar or projected-time budget), with the
    limit in words (``500k steps``), in the same order for every row of a run."""
    spent = [(row.env_steps, cfg.run.total_timesteps, lambda n: f"{_count(n)} steps"),
             (row.round, cfg.run.max_rounds, lambda n: f"round {n}"),
             (row.cum_cost_serverless_usd or 0.0, cfg.cost.budget_usd, lambda n: f"${n:g}{_budgets_bill(cfg)}"),
             (projected_s, cfg.cost.time_budget_s, lambda n: f"{n:g} projected s")]
    return [(used / limit, name(limit)) for used, limit, name in spent if limit]


def _soonest(cfg: TrainConfig, row: RoundStats, projected_s: float,
             since: tuple[RoundStats, float] | None = None) -> tuple[float | None, str]:
    """Wall seconds left until the limit the run reaches first (steps, rounds, dollar or projected-time budget),
    each limit extrapolated from the wall time since ``since`` (an earlier row and the projected seconds then:
    the display's first, as its round compiled the learner and started instances, which later rounds do not
    repeat; else since the start), and that limit in words. None seconds where no limit has moved since (the
    words then name the limit nearest its end); ``(None, "")`` without limits (a target return alone)."""
    now = _spent(cfg, row, projected_s)
    then = _spent(cfg, *since) if since is not None else [(0.0, name) for _, name in now]
    wall = row.wall_s - (since[0].wall_s if since is not None else 0.0)
    left = [(0.0 if fraction >= 1 else max(wall * (1.0 - fraction) / (fraction - before), 0.0), name)
            for (fraction, name), (before, _) in zip(now, then, strict=True) if fraction >= 1 or fraction > before]
    if left:
        return min(left, key=lambda pair: pair[0])
    return None, max(now, default=(0.0, ""))[1]


def eta_s(cfg: TrainConfig, row: RoundStats, projected_s: float,
          since: tuple[RoundStats, float] | None = None) -> float | None:
    """Wall seconds left until the run's first limit (:func:`_soonest`); None when no limit gives one."""
    return _soonest(cfg, row, projected_s, since)[0]


def eta_goal(cfg: TrainConfig, row: RoundStats, projected_s: float,
             since: tuple[RoundStats, float] | None = None) -> str:
    """What the ETA counts to: the limit it reaches first (``to 500k steps``), and the target return that may stop
    the run sooner (``to 500k steps or return 500``; a target alone: ``until return 500``)."""
    limit = _soonest(cfg, row, projected_s, since)[1]
    target = cfg.run.target_return
    if target is None:
        return f"to {limit}" if limit else ""
    return f"to {limit} or return {target:g}" if limit else f"until return {target:g}"


def figures(row: RoundStats, last_eval: float | None, eta: float | None, goal: str = "", priced_as: str = "") -> str:
    """The round's figures as one line: the bar's text and the log's line. ``train`` is the mean return of the
    training episodes that ended in this round; ``eval`` the latest evaluation (deterministic); the dollars so far
    on the deployment ``priced_as`` names; ``goal`` what the ETA counts to (:func:`eta_goal`)."""
    return fit(figure_parts(row, last_eval, eta, goal, priced_as), None)


# The figures in the order a line shows them, each with its rank: a narrow terminal drops the lowest first (the bar
# beside them already shows the steps done and the clock), keeping the evaluation and the ETA longest
def figure_parts(row: RoundStats, last_eval: float | None, eta: float | None, goal: str = "",
                 priced_as: str = "") -> list[tuple[int, str]]:
    """The round's figures (:func:`figures`), each with the rank a narrow terminal keeps it by (higher: kept): the
    dollars are the bill of the deployment ``priced_as`` names (the server bill for servers or a Ray cluster)."""
    usd = _usd((row.cum_cost_server_usd if pays_servers(priced_as) else row.cum_cost_serverless_usd) or 0.0)
    return [(2, f"round {row.round}"), (0, f"{row.env_steps} steps"), (5, f"{_num(row.sps, '.0f')} steps/s"),
            (1, f"{row.n_actors} actors"), (4, f"train {_num(row.train_return_mean)}"), (7, f"eval {_num(last_eval)}"),
            (3, usd + (f" as {priced_as}" if priced_as else "")),
            (6, f"ETA {'-' if eta is None else _clock(eta)}" + (f" {goal}" if goal else ""))]


def fit(parts: list[tuple[int, str]], room: int | None) -> str:
    """The figures ``parts`` joined, within ``room`` characters (None: all): the lowest-ranked dropped first, and
    what still does not fit cut, an ellipsis marking the cut."""
    kept = list(parts)
    while room is not None and len(kept) > 1 and len(" · ".join(t for _, t in kept)) > room:
        kept.remove(min(kept, key=lambda p: p[0]))
    text = " · ".join(t for _, t in kept)
    return text if room is None or len(text) <= room else text[: max(room - 1, 0)] + "…"


class TrainingDisplay:
    """Shows the run while it trains (a bar on a terminal, plain lines in a log); silent when disabled.

    ``projected_s`` returns the run's projected cloud seconds so far (a time budget's ETA); ``out`` is where the
    plain lines go (stdout), written only when it is not a terminal."""

    def __init__(self, cfg: TrainConfig, enabled: bool = True, start_steps: int = 0, start_round: int = 0,
                 projected_s: Callable[[], float] = lambda: 0.0, out: IO[str] | None = None,
                 line_every_s: float = LINE_EVERY_S, priced_as: str = "",
                 reason: Callable[[], str | None] = lambda: None) -> None:
        self.cfg, self.projected_s, self.line_every_s, self.priced_as = cfg, projected_s, line_every_s, priced_as
        self.reason, self._reason_shown = reason, None  # the scaler's why, each new one shown once
        self.console = Console(stderr=True)
        self.out = out if out is not None else sys.stdout
        self.lines = enabled and not _is_terminal(self.out)
        self.by_steps = cfg.run.total_timesteps is not None
        total = cfg.run.total_timesteps if self.by_steps else cfg.run.max_rounds
        # the bar's own columns but the bar (name, done/total, elapsed, the gaps); the bar is narrowed on a narrow
        # terminal so that the evaluation and the ETA keep their room
        counters = len(cfg.env.env_id) + 2 * len(f"{total or 0}") + 1 + len("0:00:00") + 4
        bar = max(MIN_BAR_WIDTH, min(BAR_WIDTH, self.console.width - counters - FIGURES_ROOM))
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=bar), MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[stats]}"), console=self.console,
            disable=not (enabled and self.console.is_terminal),  # off a terminal rich would print one squashed line
        )
        # the figures get the rest, fitted by us (:func:`fit`), as rich would otherwise squeeze the counters out of
        # a narrow terminal to fit them
        self._bar_width = counters + bar
        self.task = self.progress.add_task(cfg.env.env_id, total=total, stats="starting actors…",
                                           completed=start_steps if self.by_steps else start_round)
        self.last_eval: float | None = None
        self._first: tuple[RoundStats, float] | None = None  # the first row shown, and the projected seconds then
        self._line_at = -math.inf  # when the last plain line was written (monotonic seconds)
        self._unwritten: str | None = None  # the newest figures not yet written as a line

    def __enter__(self) -> TrainingDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()
        self._write_line(force=True)

    def update(self, row: RoundStats) -> None:
        """Show a round's row, once it is written."""
        if row.eval_return_mean is not None:
            self.last_eval = row.eval_return_mean
        projected = self.projected_s()
        eta = eta_s(self.cfg, row, projected, self._first) if self._first is not None else None
        goal = eta_goal(self.cfg, row, projected, self._first or (row, projected))
        self._first = self._first or (row, projected)
        parts = figure_parts(row, self.last_eval, eta, goal, self.priced_as)
        stats = fit(parts, None)
        self.progress.update(self.task, completed=row.env_steps if self.by_steps else row.round,
                             stats=fit(parts, self.console.width - self._bar_width))
        reason = self.reason()
        if reason is not None and reason != self._reason_shown and (self.lines or not self.progress.disable):
            self._reason_shown = reason
            line = f"minionsrl: round {row.round}: {self.cfg.scaling.scaler} {reason}"
            if self.lines:
                print(line, file=self.out, flush=True)
            else:
                self.progress.console.print(line, highlight=False, markup=False)
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


def command(name: str) -> str | None:
    """How to run the console script ``name`` as printed: its name where the shell finds it (on ``PATH``), else its
    path beside this interpreter (a virtual environment that is not activated: ``.venv/bin/minionsrl``), relative to
    the current folder where it lies under it; None where it is not installed beside this interpreter."""
    if shutil.which(name):
        return name
    script = Path(sys.executable).absolute().parent / name
    if not (script.is_file() and os.access(script, os.X_OK)):
        return None
    try:
        return shlex.quote(str(script.relative_to(Path.cwd())))  # has a slash: the shell runs it, PATH or not
    except ValueError:
        return shlex.quote(str(script))


def next_steps(summary: RunSummary, run_dir: Path) -> list[str]:
    """The commands that use a finished run, runnable as printed: its policy from Python, its evaluation (the
    ``minionsrl`` script by the path that works here; ``PYTHONPATH`` naming a custom env's folder where only this
    process found its module, as in the current folder), its TensorBoard events (the viewer where it is installed,
    else how to get it). When the last round's policy evaluated well below the best, the first line says so."""
    from minionsrl.experiments.policy import well_below
    from minionsrl.function.envs import code_folders
    from minionsrl.function.extras import installed, missing_extra_error

    quoted, best_round = shlex.quote(str(run_dir)), summary.get("best_round")
    last = "the last round's policy"
    if best_round and well_below(summary.get("final_eval_return"), summary.get("best_eval_return")):
        last += f": it evaluated {summary['final_eval_return']:.1f}, well below the best"
    steps = [f'policy = minionsrl.load_policy("{run_dir}")  # {last}']
    if best_round:
        steps.append(f'policy = minionsrl.load_policy("{run_dir}", which="best")  # round {best_round}, '
                     'the best evaluation')
    minionsrl = command("minionsrl") or f"{shlex.quote(sys.executable)} -m minionsrl"
    folders = code_folders(str(summary["config"].get("env_id", "")))  # a custom env's, found here only
    path = os.pathsep.join([*map(str, folders), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])
    env = f"PYTHONPATH={shlex.quote(path)} " if folders else ""
    steps.append(f"{env}{minionsrl} eval --run-dir {quoted}" + (" --which best" if best_round else ""))
    if summary["config"].get("tensorboard"):
        logdir = shlex.quote(str(run_dir / "tensorboard"))
        viewer = command("tensorboard") if installed("tensorboard") else None
        steps.append(f"{viewer} --logdir {logdir}" if viewer else
                     f"# TensorBoard events are in {logdir}; {missing_extra_error('the viewer (tensorboard)', 'tb')}")
    return steps


def _label(key: str, summary: RunSummary) -> str:
    """A summary field with what it measures, where the name alone leaves it open: the three returns are of
    different policies and episodes, and need not agree."""
    span = summary.get("train_return_last100_rounds")
    labels = {
        "final_eval_return": f"eval, last policy (round {summary.get('rounds')})",
        "best_eval_return": f"eval, best policy (round {summary.get('best_round')})" if summary.get("best_round")
        else "eval, best policy",
        "train_return_last100": "train, last 100 episodes" + (f" (rounds {span[0]}-{span[1]})" if span else ""),
    }
    return labels.get(key, key)


def print_summary(summary: RunSummary, run_dir: Path) -> None:
    """The end of a run on stdout: outcome, both bills (serverless and server dollars, projected cloud seconds),
    where the functions ran, then the next steps, last."""
    table = Table(title=f"minionsrl · {summary['env_id']}", show_header=False)
    for key in ("stopped_by", "rounds", "env_steps", "wall_s", "final_eval_return", "best_eval_return",
                "train_return_last100"):
        value = summary.get(key)
        table.add_row(_label(key, summary), _num(value, ".2f") if isinstance(value, float) else str(value))
    cost = summary["cost_usd"]
    table.add_row("cost (serverless)", _usd(cost["serverless"]))
    table.add_row("cost (server)", _usd(cost["server"]))
    table.add_row("projected_cloud_s", _num(summary.get("projected_cloud_s"), ".1f"))
    if summary.get("priced_as"):
        table.add_row("priced as", summary["priced_as"])
    if summary.get("functions_ran_on"):
        table.add_row("functions ran on", summary["functions_ran_on"])
    table.add_row("run_dir", str(run_dir))
    if summary.get("stopped_by") == "budget_usd":  # before the table: the next steps stay the last lines
        spent, budget = cost["serverless"], summary["config"]["budget_usd"]
        bill = " as functions" if pays_servers(summary.get("priced_as", "")) else ""  # what the budget counts
        Console(stderr=True).print(f"minionsrl: stopped by the budget: ${spent:.4g}{bill} of budget_usd ${budget:g} "
                                   "spent, and the next round would have exceeded it")
    console = Console()
    console.print(table)
    console.print("next steps:", highlight=False)
    for step in next_steps(summary, run_dir):
        console.print(f"  {step}", highlight=False, markup=False, soft_wrap=True)
