"""``minionsrl motivate``: does boosting one round pay, and does the convexity ratio predict when?

From each kept checkpoint of a run (``--keep-checkpoints-every``), one more round is trained twice:
with ``base`` actors and with ``boost`` actors, both evaluated right after the update on the same
episodes. The gain is ``eval(boost) − eval(base)``. The convexity ratio and the gradient noise scale
measured on the base round's batch — what a scaler would know before deciding to boost — are then
correlated with the gain (Pearson and Spearman), pooled over every run given (one per seed). This is the
experiment behind Nitro's design (DESIGN §7). Rows are written as they come and a rerun skips the
checkpoints already in ``motivate.csv``, so a long experiment can span sessions.
"""

from __future__ import annotations

import csv
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from minionsrl import config, files
from minionsrl.errors import ConfigError
from minionsrl.experiments.plots import scatter_plot
from minionsrl.experiments.tables import markdown_table
from minionsrl.loop import checkpoint

COLUMNS = ["run", "round", "base", "boost", "convexity_ratio", "gns", "eval_base", "eval_boost", "gain"]
INTEGERS = ("round", "base", "boost")
PREDICTORS = ("convexity_ratio", "gns")


def _one_round(run_dir: Path, ckpt: Path, actors: int, eval_episodes: int) -> dict[str, Any]:
    """Train one round from ``ckpt`` with ``actors`` actors in a scratch copy; return its metrics row."""
    from minionsrl.build import make_trainer

    saved = config.build(config.load_yaml(run_dir / files.CONFIG, saved=True))
    round_idx = checkpoint.kept_round(ckpt)
    with tempfile.TemporaryDirectory(prefix="minionsrl-motivate-") as tmp:
        # total_timesteps stays: the learning rate anneals over it, so the round learns at the run's own rate
        cfg = saved.replace(scaler="fixed", actors=actors, max_rounds=round_idx + 1,
                            target_return=None, budget_usd=None, eval_every=1, eval_episodes=eval_episodes,
                            detectors="on",
                            run_dir=tmp, progress=False, tensorboard=False, keep_checkpoints_every=0)
        checkpoints = checkpoint.dir_of(tmp)
        checkpoints.mkdir()
        shutil.copy(ckpt, checkpoints / checkpoint.LATEST)
        config.dump(cfg, Path(tmp, files.CONFIG))
        trainer = make_trainer(cfg, resume=True)  # an APPO/IMPALA run boosts its invocations in flight
        trainer.run()
        if trainer.round != round_idx + 1:
            raise ConfigError(f"motivate: the round after {ckpt.name} did not run; check the run's config")
        assert trainer.last_round is not None
        return trainer.last_round.to_row()


def run_motivate(run_dirs: str | Path | list[str | Path], base: int, boost: int, eval_episodes: int,
                 out_dir: str | Path) -> dict[str, Any]:
    """Boost one round from every kept checkpoint of each run in ``run_dirs``; write motivate.csv/.md and a
    scatter plot; return the mean gain and each predictor's correlation with the gain over all of them."""
    runs = [Path(d) for d in ([run_dirs] if isinstance(run_dirs, (str, Path)) else run_dirs)]
    out_dir = Path(out_dir)
    todo = {}
    for run_dir in runs:  # every run is checked before the first round is trained
        ckpts = sorted(checkpoint.dir_of(run_dir).glob(checkpoint.KEPT))
        if len(ckpts) < 3:
            raise ConfigError(f"--run-dir: {str(run_dir)!r} has {len(ckpts)} kept checkpoints; train it with "
                              "--keep-checkpoints-every K so that at least 3 exist")
        todo[run_dir] = ckpts
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "motivate.csv"
    rows: list[dict[str, Any]] = []
    if path.exists():  # a rerun: keep what was measured, for these runs and this boost
        with open(path, newline="") as fh:
            rows = [{k: v if k == "run" else int(v) if k in INTEGERS else float(v) for k, v in r.items()}
                    for r in csv.DictReader(fh)]
        kept = {d.name for d in runs}
        rows = [r for r in rows if r["run"] in kept and (r.get("base"), r.get("boost")) == (base, boost)]
    done = {(r["run"], r["round"]) for r in rows}
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
        for run_dir, ckpts in todo.items():
            for ckpt in ckpts:
                round_idx = checkpoint.kept_round(ckpt)
                if (run_dir.name, round_idx) in done:
                    continue
                low = _one_round(run_dir, ckpt, base, eval_episodes)
                high = _one_round(run_dir, ckpt, boost, eval_episodes)
                rows.append({"run": run_dir.name, "round": round_idx, "base": base, "boost": boost,
                             "convexity_ratio": low["convexity_ratio"],
                             "gns": low["gns"], "eval_base": low["eval_return_mean"],
                             "eval_boost": high["eval_return_mean"],
                             "gain": high["eval_return_mean"] - low["eval_return_mean"]})
                writer.writerow(rows[-1])
                fh.flush()  # a cut experiment keeps every row it finished
    gain = np.array([r["gain"] for r in rows], dtype=float)
    result: dict[str, Any] = {"runs": len(runs), "checkpoints": len(rows), "base": base, "boost": boost,
                              "mean_gain": float(gain.mean()), "boost_helped": int((gain > 0).sum())}
    for name in PREDICTORS:
        x = np.array([r[name] for r in rows], dtype=float)
        result[name] = {"pearson": _corr(x, gain), "spearman": spearman(x, gain)}
    shown = [c for c in COLUMNS if c not in ("base", "boost")]  # in the title
    table = markdown_table(shown, [[r[c] for c in shown] for r in rows],
                           [str, str, *["{:.4g}".format] * (len(shown) - 2)])
    names = ", ".join(d.name for d in runs)
    (out_dir / "motivate.md").write_text(
        f"# motivate: {names}, {base} vs {boost} actors for one round\n\n{table}\n\n"
        f"mean gain {result['mean_gain']:.4g}; the boost helped at {result['boost_helped']} of {len(rows)} "
        f"checkpoints; correlation with the gain, over {len(rows)} checkpoints: convexity ratio Pearson "
        f"{result['convexity_ratio']['pearson']:.3f}, Spearman {result['convexity_ratio']['spearman']:.3f}; "
        f"noise scale Pearson {result['gns']['pearson']:.3f}, Spearman {result['gns']['spearman']:.3f}\n")
    ratio = [r["convexity_ratio"] for r in rows]
    scatter_plot(ratio, gain, "convexity ratio (base round)", f"gain of {boost} over {base} actors (eval return)",
                 f"boosting one round: Spearman {result['convexity_ratio']['spearman']:.2f}", out_dir / "motivate.png")
    return result


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (NaN for fewer than 2 points or a constant series)."""
    return _corr(_ranks(np.asarray(x)), _ranks(np.asarray(y)))


def _ranks(x: np.ndarray) -> np.ndarray:
    return np.argsort(np.argsort(x)).astype(float)


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    if len(x) < 2 or np.std(x) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(x, y)[0, 1])
