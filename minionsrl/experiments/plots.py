"""PNG plots of runs: return against env steps and projected time, cost, actors per round (matplotlib,
headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np

from minionsrl import files

Series = tuple[Sequence[float], Sequence[float]]


def _save(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` (its format from the suffix), not through a link planted in a run dir."""
    try:
        with files.open_for_write(path, "wb") as fh:
            fig.savefig(fh, format=path.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    return path


def line_plot(series: dict[str, Series], xlabel: str, ylabel: str, title: str, path: str | Path,
              bands: dict[str, Series] | None = None) -> Path:
    """One line per label; ``bands`` optionally gives (low, high) arrays shaded around each line."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, (x, y) in series.items():
        (line,) = ax.plot(x, y, label=label, linewidth=1.6)
        if bands and label in bands:
            lo, hi = bands[label]
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return _save(fig, Path(path))


def forward_fill(values: Sequence[float | None]) -> np.ndarray:
    """Carry the last known value over missing ones (evaluation happens every few rounds)."""
    out, last = [], np.nan
    for v in values:
        if v is not None and not (isinstance(v, float) and np.isnan(v)):
            last = float(v)
        out.append(last)
    return np.asarray(out, dtype=float)


def _column(rows: list[dict[str, str]], name: str) -> list[float | None]:
    """A metrics column as numbers (None where empty, or missing in an older run's file)."""
    return [float(r[name]) if r.get(name) not in (None, "") else None for r in rows]


def run_plots(rows: list[dict[str, str]], out_dir: str | Path, title: str) -> list[Path]:
    """The three per-run plots from a run's metrics rows: the return against env steps and against projected
    cloud time (the x-axes SB3, CleanRL and a bill use), the cumulative cost (serverless and server-based, each
    on an axis of its own, as they differ by orders of magnitude) against env steps, and the actors per round."""
    out_dir = Path(out_dir)
    steps = np.asarray([float(r["env_steps"]) for r in rows])
    projected = np.cumsum(np.nan_to_num(np.asarray(_column(rows, "projected_round_s"), dtype=float)))
    evals = _column(rows, "eval_return_mean")
    evaluated = [i for i, v in enumerate(evals) if v is not None]  # marked: between them the line carries over
    returns = {"eval (deterministic)": (forward_fill(evals), evaluated),
               "train episodes": (forward_fill(_column(rows, "train_return_mean")), None)}
    return [
        _return_plot(steps, projected, returns, title, out_dir / "return.png"),
        _cost_plot(steps, forward_fill(_column(rows, "cum_cost_serverless_usd")),
                   forward_fill(_column(rows, "cum_cost_server_usd")), title, out_dir / "cost.png"),
        _actors_plot([int(r["round"]) for r in rows], [int(r["n_actors"]) for r in rows], title,
                     out_dir / "actors.png"),
    ]


def _return_plot(steps: np.ndarray, projected: np.ndarray, returns: dict[str, tuple[np.ndarray, list[int] | None]],
                 title: str, path: Path) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110, sharey=True)
    for ax, x, xlabel in ((axes[0], steps, "environment steps"), (axes[1], projected, "projected cloud time (s)")):
        for label, (y, marks) in returns.items():
            ax.plot(x, y, label=label, linewidth=1.6, marker="o" if marks else None, markersize=3.5, markevery=marks)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("return")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{title}: return")
    fig.tight_layout()
    return _save(fig, path)


def _cost_plot(steps: np.ndarray, serverless: np.ndarray, server: np.ndarray, title: str, path: Path) -> Path:
    """Two y-axes: the server-based bill is often 10-100x the serverless one, which flattened it on one axis."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    (a,) = ax.plot(steps, serverless, color="tab:blue", linewidth=1.6, label="serverless")
    ax.set_ylabel("serverless, cumulative (USD)", color="tab:blue")
    ax.tick_params(axis="y", colors="tab:blue")
    right = ax.twinx()
    (b,) = right.plot(steps, server, color="tab:orange", linewidth=1.6, linestyle="--", label="server-based")
    right.set_ylabel("server-based, cumulative (USD)", color="tab:orange")
    right.tick_params(axis="y", colors="tab:orange")
    for axis in (ax, right):
        axis.set_ylim(bottom=0)
    ax.set_xlabel("environment steps")
    ax.grid(alpha=0.3)
    ratio = f" (server-based {server[-1] / serverless[-1]:.3g}x)" if len(steps) and serverless[-1] > 0 else ""
    ax.legend(handles=[a, b], fontsize=8, loc="lower right")
    ax.set_title(f"{title}: cost{ratio}")
    fig.tight_layout()
    return _save(fig, path)


def _actors_plot(rounds: list[int], actors: list[int], title: str, path: Path) -> Path:
    """Actors per round on an integer y-axis from 0: a fixed n reads as a level line at n (it was a flat line on a
    7.6-8.4 axis), a scaler's choices as steps."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.step(rounds, actors, where="mid", linewidth=1.6)
    ax.set_ylim(0, max(actors, default=1) * 1.15 + 1)
    ax.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("actors (functions per round)")
    ax.grid(alpha=0.3)
    if len(set(actors)) == 1:
        what = f"{actors[0]} every round"
    else:
        what = f"{min(actors, default=0)}-{max(actors, default=0)}, mean {np.mean(actors) if actors else 0:.1f}"
    ax.set_title(f"{title}: actors ({what})")
    fig.tight_layout()
    return _save(fig, path)


def scatter_plot(x: Sequence[float], y: Sequence[float], xlabel: str, ylabel: str, title: str,
                 path: str | Path, labels: Sequence[str] | None = None, fit: bool = True) -> Path:
    """Points, optionally labelled, with a least-squares line (``fit``)."""
    fig, ax = plt.subplots(figsize=(6, 4.2), dpi=110)
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ax.scatter(x, y, s=18)
    for xi, yi, label in zip(x, y, labels or [], strict=False):
        if label:
            ax.annotate(label, (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=8)
    if fit and len(x) >= 2 and np.std(x) > 0:
        slope, intercept = np.polyfit(x, y, 1)
        xs = np.linspace(x.min(), x.max(), 50)
        ax.plot(xs, slope * xs + intercept, color="gray", linewidth=1)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, Path(path))
