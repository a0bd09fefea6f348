"""Experiment tracking with Weights & Biases (``--track``, CleanRL's flag; the ``wandb`` extra).

A tracked run logs, per round, the scalars TensorBoard gets under the same tags
(:data:`~minionsrl.loop.metrics.TENSORBOARD_TAGS`, ``charts/episodic_return``, ``losses/…``) against
``global_step`` (environment steps, TensorBoard's step), plus the resolved config, the summary and the plots.
The W&B run lives in ``RUN_DIR/wandb/``; its id is kept there so that ``--resume`` continues the same W&B run
(rounds replayed after the last checkpoint have steps W&B already holds, and it keeps the first ones).
``WANDB_MODE=offline`` writes everything locally (``wandb sync RUN_DIR/wandb/offline-run-…`` uploads it
later). Credentials are W&B's own (``wandb login`` or ``WANDB_API_KEY``), never in the config.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from minionsrl import files
from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.function.extras import check_tensorboard, require_extra
from minionsrl.loop.metrics import tensorboard_scalars
from minionsrl.stats import RoundStats, RunSummary

RUN_ID_FILE = "minionsrl-run-id"  # in RUN_DIR/wandb/: the W&B run a resumed run continues
STEP = "global_step"


def check(cfg: TrainConfig) -> None:
    """The run's optional outputs can be written (before any work starts): with ``tensorboard`` on, tensorboardX
    is installed; with ``track`` on, W&B is installed (the config's own rules name the project)."""
    check_tensorboard(cfg.run.tensorboard)
    if cfg.run.track:
        require_extra("--track", "wandb", "train without --track")


class WandbTracker:
    """One W&B run for one run directory."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, resume: bool) -> None:
        import wandb

        self._wandb = wandb
        wandb_dir = Path(run_dir) / "wandb"
        wandb_dir.mkdir(parents=True, exist_ok=True)
        id_file = wandb_dir / RUN_ID_FILE
        run_id = id_file.read_text().strip() if resume and id_file.exists() else None
        run_id = run_id or secrets.token_hex(4)  # a fresh W&B run id (8 characters, as W&B makes them)
        try:
            self.run = wandb.init(project=cfg.run.wandb_project_name, entity=cfg.run.wandb_entity,
                                  name=Path(run_dir).name, id=run_id, resume="allow", config=cfg.to_dict(),
                                  dir=str(run_dir),
                                  job_type="train", settings=wandb.Settings(console="off"))
        except Exception as exc:  # no credentials, no network, a project one cannot write to
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ConfigError(f"track: Weights & Biases did not start a run ({first}); log in with `wandb login` "
                              "(or set WANDB_MODE=offline), then continue with --resume --run-dir "
                              f"{str(run_dir)!r}") from exc
        files.write_text(id_file, run_id)
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)  # plotted against environment steps, as in TensorBoard
        self._last_step = 0

    def log_round(self, stats: RoundStats) -> None:
        """A round's scalars under their TensorBoard tags."""
        self._last_step = stats.env_steps
        self.run.log({**tensorboard_scalars(stats), STEP: self._last_step, "round": stats.round}, step=self._last_step)

    def log_plots(self, paths: list[Path]) -> None:
        """The run's PNG plots, as images at the last step (``plots/return``, ``plots/cost``, …)."""
        if paths:
            self.run.log({f"plots/{Path(p).stem}": self._wandb.Image(str(p)) for p in paths}, step=self._last_step)

    def log_summary(self, summary: RunSummary) -> None:
        """The run's outcome (``summary.json`` less the config, which the run already holds)."""
        self.run.summary.update({k: v for k, v in summary.items() if k != "config" and v is not None})

    def finish(self, exit_code: int = 0) -> None:
        self.run.finish(exit_code=exit_code)


