"""``minionsrl compare``: scalers × seeds on one env → CSV, Markdown table and PNG curves (DESIGN §7).

An *arm* is ``scaler[:n][@backend]``: ``fixed:16@server`` is the server-based baseline, ``fixed:16``
the same actors as functions, ``nitro`` the Nitro scaler. Each (arm, seed) is one ordinary run in
``OUT/runs/<arm>__s<seed>``; finished runs are reused and interrupted ones resumed, so a cut
comparison continues where it stopped.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from minionsrl import config
from minionsrl.config import TrainConfig
from minionsrl.errors import ConfigError
from minionsrl.experiments import tables
from minionsrl.experiments.plots import forward_fill, line_plot
from minionsrl.loop.metrics import read_metrics

RUN_COLUMNS = ["arm", "scaler", "backend", "seed", "rounds", "env_steps", "final_eval_return", "best_eval_return",
               "train_return_last100", "wall_s", "projected_cloud_s", "cost_serverless_usd", "cost_server_usd",
               "cost_usd", "mean_actors", "time_to_target_s", "projected_time_to_target_s"]


@dataclass(frozen=True)
class Arm:
    """One configuration under comparison."""

    scaler: str
    actors: int | None = None
    backend: str = "local"

    @property
    def label(self) -> str:
        name = self.scaler if self.actors is None else f"{self.scaler}-{self.actors}"
        return name if self.backend == "local" else f"{name}@{self.backend}"

    @classmethod
    def parse(cls, text: str) -> Arm:
        """``scaler[:n][@backend]``, e.g. ``fixed:16@server``."""
        body, _, backend = text.strip().partition("@")
        scaler, _, n = body.partition(":")
        if scaler not in config.SCALERS:
            raise ConfigError(f"--scalers: {scaler!r} is not one of {', '.join(config.SCALERS)}")
        if backend and backend not in config.BACKENDS:
            raise ConfigError(f"--scalers: backend {backend!r} in {text!r} is not one of {', '.join(config.BACKENDS)}")
        if n and not n.isdigit():
            raise ConfigError(f"--scalers: {text!r}: the actor count after ':' must be a positive integer")
        return cls(scaler, int(n) if n else None, backend or "local")

    def apply(self, cfg: TrainConfig) -> TrainConfig:
        changes: dict[str, Any] = {"scaler": self.scaler, "backend": self.backend}
        if self.actors is not None:
            changes["actors"] = self.actors
        return dataclasses.replace(cfg, **changes)


def run_compare(base: TrainConfig, arms: list[Arm], seeds: list[int], out_dir: str | Path,
                target_return: float | None = None,
                on_run: Callable[[str, int], None] | None = None) -> list[dict[str, Any]]:
    """Run (or reuse) every arm × seed, then write compare.csv, compare.md and the plots."""
    from minionsrl.build import make_trainer

    out_dir = Path(out_dir)
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    results = []
    for seed in seeds:  # seed-major: a cut comparison still covers every arm
        for arm in arms:
            run_dir = out_dir / "runs" / f"{arm.label}__s{seed}"
            if on_run is not None:
                on_run(arm.label, seed)
            if not (run_dir / "summary.json").exists():
                cfg = dataclasses.replace(arm.apply(base), seed=seed, run_dir=str(run_dir), progress=False)
                make_trainer(cfg, resume=(run_dir / "metrics.csv").exists()).run()
            results.append(_run_row(arm, seed, run_dir, target_return))
    _write_outputs(results, arms, out_dir, base.env_id, target_return)
    return results


def _run_row(arm: Arm, seed: int, run_dir: Path, target: float | None) -> dict[str, Any]:
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = read_metrics(run_dir)
    cost = summary["cost_usd"]
    reached = [int(r["round"]) for r in rows
               if target is not None and r["eval_return_mean"] and float(r["eval_return_mean"]) >= target]
    first = reached[0] if reached else None
    return {
        "arm": arm.label, "scaler": arm.scaler, "backend": arm.backend, "seed": seed, "rounds": summary["rounds"],
        "env_steps": summary["env_steps"], "final_eval_return": summary["final_eval_return"],
        "best_eval_return": summary["best_eval_return"], "train_return_last100": summary["train_return_last100"],
        "wall_s": summary["wall_s"], "projected_cloud_s": summary["projected_cloud_s"],
        "cost_serverless_usd": cost["serverless"], "cost_server_usd": cost["server"],
        # what this arm really pays: servers for the server backend, functions otherwise
        "cost_usd": cost["server"] if arm.backend == "server" else cost["serverless"],
        "mean_actors": float(np.mean([int(r["n_actors"]) for r in rows])),
        "time_to_target_s": float(rows[first - 1]["wall_s"]) if first else None,
        "projected_time_to_target_s": sum(float(r["projected_round_s"]) for r in rows[:first]) if first else None,
    }


def _mean_std(values: list[Any]) -> str:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return "–"
    if len(vals) == 1:
        return f"{vals[0]:.4g}"
    return f"{np.mean(vals):.4g} ± {np.std(vals):.2g}"


def markdown_table(results: list[dict[str, Any]], arms: list[Arm], target: float | None) -> str:
    """Mean ± std over seeds per arm."""
    cols = ["final_eval_return", "best_eval_return", "wall_s", "projected_cloud_s", "cost_serverless_usd",
            "cost_server_usd", "cost_usd", "mean_actors"]
    if target is not None:
        cols += ["time_to_target_s", "projected_time_to_target_s"]
    table = []
    for arm in arms:
        rows = [r for r in results if r["arm"] == arm.label]
        table.append([arm.label, len(rows), *(_mean_std([r[c] for r in rows]) for c in cols)])
    return tables.markdown_table(["arm", "seeds", *cols], table)


def _write_outputs(results: list[dict[str, Any]], arms: list[Arm], out_dir: Path, env_id: str,
                   target: float | None) -> None:
    with open(out_dir / "compare.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, RUN_COLUMNS)
        writer.writeheader()
        writer.writerows(results)
    (out_dir / "compare.md").write_text(f"# compare: {env_id}\n\n{markdown_table(results, arms, target)}\n")
    curves: dict[str, dict[str, tuple]] = {"return": {}, "dollars": {}, "actors": {}}
    bands: dict[str, tuple] = {}
    for arm in arms:
        runs = [read_metrics(out_dir / "runs" / f"{arm.label}__s{r['seed']}") for r in results if r["arm"] == arm.label]
        length = min(len(m) for m in runs)
        rounds = np.arange(1, length + 1)
        returns = np.array([forward_fill([float(x["eval_return_mean"]) if x["eval_return_mean"] else None
                                          for x in m[:length]]) for m in runs])
        cost_col = "cum_cost_server_usd" if arm.backend == "server" else "cum_cost_serverless_usd"
        dollars = np.array([[float(x[cost_col]) for x in m[:length]] for m in runs])
        actors = np.array([[int(x["n_actors"]) for x in m[:length]] for m in runs])
        with warnings.catch_warnings():  # rounds before the first evaluation are all-NaN: left blank
            warnings.simplefilter("ignore", RuntimeWarning)
            mean_return = np.nanmean(returns, axis=0)
            bands[arm.label] = (np.nanmin(returns, axis=0), np.nanmax(returns, axis=0))
        curves["return"][arm.label] = (rounds, mean_return)
        curves["dollars"][arm.label] = (dollars.mean(axis=0), mean_return)
        curves["actors"][arm.label] = (rounds, actors.mean(axis=0))
    line_plot(curves["return"], "round", "eval return (mean over seeds; band: min–max)", f"{env_id}: return",
              out_dir / "return_vs_round.png", bands)
    line_plot(curves["dollars"], "cumulative cost (USD)", "eval return", f"{env_id}: return vs dollars",
              out_dir / "return_vs_dollars.png")
    line_plot(curves["actors"], "round", "actors (mean over seeds)", f"{env_id}: actors per round",
              out_dir / "actors_per_round.png")
