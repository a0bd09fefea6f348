"""Training from Python, the CLI's own path: ``summary = minionsrl.train(TrainConfig(env_id="CartPole-v1",
target_return=500))``.

:func:`train` checks the config, assembles the run (:func:`minionsrl.build.make_trainer`), trains until a stop
condition holds and writes the run directory exactly as ``minionsrl train`` does (``plots/`` included);
``minionsrl train`` runs :func:`run_trainer` on the trainer it builds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from minionsrl import files
from minionsrl.build import make_trainer
from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.loop import tracking
from minionsrl.stats import RoundStats, RunSummary

if TYPE_CHECKING:
    from minionsrl.loop.trainer import Trainer

__all__ = ["Callback", "plot_run", "run_trainer", "train"]


class Callback:
    """Stable-Baselines3's ``BaseCallback``, kept small: subclass it, override what you need, and pass it as
    ``train(cfg, callback=MyCallback())`` (or a list of them). A plain function ``fn(row, trainer)`` works too.

    ``trainer`` is the running :class:`~minionsrl.loop.trainer.Trainer`: ``trainer.round``, ``trainer.env_steps``,
    ``trainer.cfg``, ``trainer.run_dir``, ``trainer.learner`` (the JAX learner), ``trainer.state`` (the run's frozen
    :class:`~minionsrl.loop.state.RunState`: best evaluation, recent returns, what it has been billed);
    ``minionsrl.current_policy(trainer)`` is its policy as it stands, on NumPy (``act``, ``predict``,
    ``minionsrl.evaluate``)."""

    def on_round(self, row: RoundStats, trainer: Trainer) -> bool | None:
        """After each round's metrics row is written, with that round's stats (``row.round``,
        ``row.eval_return_mean``: metrics.csv's columns as typed fields; a row held for its evaluation comes a round
        later); return False to stop the run after this round (``stopped_by: callback``)."""
        return None

    def on_end(self, summary: RunSummary, trainer: Trainer) -> None:
        """Once, after the run's summary is written."""


CallbackLike = Callback | Callable[[RoundStats, "Trainer"], bool | None]


def train(cfg: TrainConfig, resume: bool = False, on_round: Callable[[RoundStats], bool | None] | None = None,
          plots: bool = True, callback: CallbackLike | list[CallbackLike] | None = None) -> RunSummary:
    """Train the run ``cfg`` describes (``resume``: continue the one in ``cfg.run.run_dir`` from its checkpoint, its
    learning-rate schedule kept) and return its summary (also in ``RUN_DIR/summary.json``). ``callback``: a
    :class:`Callback`, a function ``fn(row, trainer)``, or a list of them, called after each round with its
    :class:`~minionsrl.stats.RoundStats`; one that returns False stops the run. ``on_round(row)`` is the same with
    the stats alone. ``plots=False`` skips the
    PNGs. With ``cfg.run.track`` the run is logged to Weights & Biases. Bad input raises
    :class:`~minionsrl.errors.ConfigError` before any work starts."""
    tracking.check(cfg)
    callbacks = _callbacks(callback)  # a wrong callback fails before any work
    return run_trainer(make_trainer(cfg, resume=resume), on_round=on_round, plots=plots, callback=callbacks)


def _callbacks(callback: CallbackLike | list[CallbackLike] | None) -> list[CallbackLike]:
    listed = [] if callback is None else list(callback) if isinstance(callback, list | tuple) else [callback]
    for cb in listed:
        if not (isinstance(cb, Callback) or callable(cb)):
            raise ConfigError(f"callback: {cb!r} is neither a minionsrl.Callback nor a function fn(row, trainer)")
    return listed


def run_trainer(trainer: Trainer, on_round: Callable[[RoundStats], bool | None] | None = None,
                plots: bool = True, callback: CallbackLike | list[CallbackLike] | None = None,
                show: Callable[[RoundStats], None] | None = None) -> RunSummary:
    """Run an assembled trainer to its end: the rounds, then the plots; with ``track``, all of it logged to
    Weights & Biases as it happens. ``show`` gets each round's stats as they are written (the CLI's progress
    display). Returns the summary."""
    callbacks = _callbacks(callback)

    def each_round(stats: RoundStats) -> bool:
        if show is not None:
            show(stats)
        stop = on_round is not None and on_round(stats) is False
        for cb in callbacks:
            answer = cb.on_round(stats, trainer) if isinstance(cb, Callback) else cb(stats, trainer)
            stop = answer is False or stop
        return not stop

    def ended(summary: RunSummary) -> RunSummary:
        for cb in callbacks:
            if isinstance(cb, Callback):
                cb.on_end(summary, trainer)
        return summary

    if not trainer.cfg.run.track:
        summary = trainer.run(on_round=each_round)
        if plots:
            plot_run(trainer.run_dir)
        return ended(summary)
    try:
        tracker = tracking.WandbTracker(trainer.cfg, trainer.run_dir, trainer.session.resume)
    except BaseException:
        trainer.close()
        raise

    def logged_round(stats: RoundStats) -> bool:
        tracker.log_round(stats)
        return each_round(stats)

    exit_code = 1
    try:
        summary = trainer.run(on_round=logged_round)
        tracker.log_summary(summary)
        if plots:
            tracker.log_plots(plot_run(trainer.run_dir))
        exit_code = 0
        return ended(summary)
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
    plots = run_dir / files.PLOTS
    plots.mkdir(exist_ok=True)
    return run_plots(read_metrics(run_dir), plots, run_dir.name)
