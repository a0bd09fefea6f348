"""``minionsrl motivate``: does boosting one round pay, and does the convexity ratio predict when?

From each kept checkpoint of a run (``--keep-checkpoints-every``), one more round is trained twice:
with ``base`` actors and with ``boost`` actors, both evaluated right after the update on the same
episodes. The gain is ``eval(boost) − eval(base)``. The convexity ratio (and noise scale) measured on
the base round's batch — what a scaler would know before deciding to boost — is then correlated with
the gain (Pearson and Spearman). This is the experiment behind Nitro's design (DESIGN §7).
"""

from __future__ import annotations

import csv
import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from minionsrl import config
from minionsrl.errors import ConfigError
from minionsrl.experiments.plots import scatter_plot
from minionsrl.experiments.tables import markdown_table
from minionsrl.loop import checkpoint

COLUMNS = ["round", "convexity_ratio", "gns", "eval_base", "eval_boost", "gain"]


def _one_round(run_dir: Path, ckpt: Path, actors: int, eval_episodes: int) -> dict[str, Any]:
    """Train one round from ``ckpt`` with ``actors`` actors in a scratch copy; return its metrics row."""
    from minionsrl.build import make_trainer

    saved = config.build(config.load_yaml(run_dir / "config.yaml"))
    round_idx = int(ckpt.stem.split("-")[1])
    with tempfile.TemporaryDirectory(prefix="minionsrl-motivate-") as tmp:
        cfg = dataclasses.replace(saved, scaler="fixed", actors=actors, max_rounds=round_idx + 1, total_timesteps=None,
                                  target_return=None, budget_usd=None, eval_every=1, eval_episodes=eval_episodes,
                                  detectors="on",
                                  run_dir=tmp, progress=False, tensorboard=False, keep_checkpoints_every=0)
        Path(tmp, "checkpoints").mkdir()
        shutil.copy(ckpt, Path(tmp, "checkpoints", checkpoint.LATEST))
        config.dump(cfg, Path(tmp, "config.yaml"))
        trainer = make_trainer(cfg, resume=True)  # an APPO/IMPALA run boosts its invocations in flight
        trainer.run()
        if trainer.round != round_idx + 1:
            raise ConfigError(f"motivate: the round after {ckpt.name} did not run; check the run's config")
        return trainer.last_row


def run_motivate(run_dir: str | Path, base: int, boost: int, eval_episodes: int, out_dir: str | Path) -> dict[str, Any]:
    """Boost one round from every kept checkpoint; write motivate.csv/.md and a scatter plot."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    ckpts = sorted((run_dir / "checkpoints").glob("round-*.safetensors"))
    if len(ckpts) < 3:
        raise ConfigError(f"--run-dir: {str(run_dir)!r} has {len(ckpts)} kept checkpoints; train it with "
                          "--keep-checkpoints-every K so that at least 3 exist")
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for ckpt in ckpts:
        low, high = _one_round(run_dir, ckpt, base, eval_episodes), _one_round(run_dir, ckpt, boost, eval_episodes)
        rows.append({"round": int(ckpt.stem.split("-")[1]), "convexity_ratio": low["convexity_ratio"],
                     "gns": low["gns"], "eval_base": low["eval_return_mean"], "eval_boost": high["eval_return_mean"],
                     "gain": high["eval_return_mean"] - low["eval_return_mean"]})
    ratio, gain = np.array([r["convexity_ratio"] for r in rows]), np.array([r["gain"] for r in rows])
    result = {"checkpoints": len(rows), "base": base, "boost": boost, "mean_gain": float(gain.mean()),
              "pearson": _corr(ratio, gain), "spearman": _corr(_ranks(ratio), _ranks(gain))}
    with open(out_dir / "motivate.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    table = markdown_table(COLUMNS, [[r[c] for c in COLUMNS] for r in rows], "{:.4g}".format)
    (out_dir / "motivate.md").write_text(
        f"# motivate: {run_dir.name}, {base} vs {boost} actors for one round\n\n{table}\n\n"
        f"mean gain {result['mean_gain']:.4g}; correlation of convexity ratio with gain: "
        f"Pearson {result['pearson']:.3f}, Spearman {result['spearman']:.3f} over {len(rows)} checkpoints\n")
    scatter_plot(ratio, gain, "convexity ratio (base round)", f"gain of {boost} over {base} actors (eval return)",
                 f"boosting one round: Spearman {result['spearman']:.2f}", out_dir / "motivate.png")
    return result


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x)).astype(float)


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])
