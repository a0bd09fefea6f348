"""Training from Python, the CLI's own path: ``summary = minionsrl.train(TrainConfig(env_id="CartPole-v1",
target_return=500))``.

:func:`train` checks the config, assembles the run (:func:`minionsrl.build.make_trainer`), trains until a stop
condition holds and writes the run directory exactly as ``minionsrl train`` does (``plots/`` included);
``minionsrl train`` runs :func:`run_trainer` on the trainer it builds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.loop import tracking

if TYPE_CHECKING:
    from minionsrl.loop.trainer import Trainer

__all__ = ["plot_run", "run_trainer", "train"]


def train(cfg: TrainConfig, resume: bool = False, on_round: Callable[[dict[str, Any]], None] | None = None,
          plots: bool = True) -> dict[str, Any]:
    """Train the run ``cfg`` describes (``resume``: continue the one in ``cfg.run_dir`` from its checkpoint) and
    return its summary (also in ``RUN_DIR/summary.json``). ``on_round`` is called with each round's metrics
    row; ``plots=False`` skips the PNGs. With ``cfg.track`` the run is logged to Weights & Biases. Bad input
    raises :class:`~minionsrl.errors.ConfigError` before any work starts."""
    tracking.check(cfg)
    return run_trainer(make_trainer(cfg, resume=resume), on_round=on_round, plots=plots)


def run_trainer(trainer: Trainer, on_round: Callable[[dict[str, Any]], None] | None = None,
                plots: bool = True) -> dict[str, Any]:
    """Run an assembled trainer to its end: the rounds, then the plots; with ``track``, all of it logged to
    Weights & Biases as it happens. Returns the summary."""
    if not trainer.cfg.track:
        summary = trainer.run(on_round=on_round)
        if plots:
            plot_run(trainer.run_dir)
        return summary
    try:
        tracker = tracking.WandbTracker(trainer.cfg, trainer.run_dir, trainer.session.resume)
    except BaseException:
        trainer.close()
        raise

    def each_round(row: dict[str, Any]) -> None:
        tracker.log_round(row)
        if on_round is not None:
            on_round(row)

    exit_code = 1
    try:
        summary = trainer.run(on_round=each_round)
        tracker.log_summary(summary)
        if plots:
            tracker.log_plots(plot_run(trainer.run_dir))
        exit_code = 0
        return summary
    except KeyboardInterrupt:
        exit_code = 130
        raise
    finally:
        tracker.finish(exit_code)


def plot_run(run_dir: str | Path) -> list[Path]:
    """``RUN_DIR/plots/``: return, cost and actors per round, from ``metrics.csv``."""
    from minionsrl.experiments.plots import run_plots
    from minionsrl.loop.metrics import read_metrics

    run_dir = Path(run_dir)
    (run_dir / "plots").mkdir(exist_ok=True)
    return run_plots(read_metrics(run_dir), run_dir / "plots", run_dir.name)
