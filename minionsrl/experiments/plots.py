"""PNG plots of runs: return, cost and actors per round (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
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


def run_plots(rows: list[dict[str, str]], out_dir: str | Path, title: str) -> list[Path]:
    """The three per-run plots (return, cost, actors per round) from a run's metrics rows."""
    out_dir = Path(out_dir)
    rounds = [int(r["round"]) for r in rows]
    eval_ret = forward_fill([float(r["eval_return_mean"]) if r["eval_return_mean"] else None for r in rows])
    train_ret = forward_fill([float(r["train_return_mean"]) if r["train_return_mean"] else None for r in rows])
    return [
        line_plot({"eval (deterministic)": (rounds, eval_ret), "train episodes": (rounds, train_ret)}, "round",
                  "return", f"{title}: return", out_dir / "return.png"),
        line_plot({"serverless": (rounds, [float(r["cum_cost_serverless_usd"]) for r in rows]),
                   "server-based": (rounds, [float(r["cum_cost_server_usd"]) for r in rows])}, "round",
                  "cumulative cost (USD)", f"{title}: cost", out_dir / "cost.png"),
        line_plot({"actors": (rounds, [int(r["n_actors"]) for r in rows])}, "round", "actors", f"{title}: actors",
                  out_dir / "actors.png"),
    ]


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
