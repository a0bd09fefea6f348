"""``minionsrl scale``: invoke 1..N concurrent functions and measure the overhead to invoke and collect.

For each ``k`` (powers of two up to N) a fresh backend runs one round of ``k`` invocations (cold),
then ``repeats`` warm rounds. Overhead is what the round took beyond the functions' own work spread
over the cores: ``round_s − Σ(init_s + run_s) / min(k, concurrency)``.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

import numpy as np

from minionsrl.config import TrainConfig
from minionsrl.experiments.plots import line_plot
from minionsrl.experiments.tables import g4, markdown_table
from minionsrl.function import wire
from minionsrl.function.envs import EnvSpec
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.request import Request
from minionsrl.learner.networks import init_params, snapshot_of

COLUMNS = ["actors", "cold_round_s", "round_s", "functions_s", "ideal_s", "overhead_s", "overhead_per_invocation_ms",
           "mean_duration_s", "bytes_in", "bytes_out"]


def run_scale(cfg: TrainConfig, max_actors: int, steps: int, repeats: int, out_dir: str | Path) -> list[dict[str, Any]]:
    """Measure rounds of 1, 2, 4, … ``max_actors`` invocations of ``steps`` steps each on ``cfg.functions.backend``."""
    from minionsrl.build import make_backend
    from minionsrl.loop.sampler import invocation_seed
    from minionsrl.prepare import prepare_config

    cfg, info = prepare_config(cfg.replace(max_rounds=cfg.run.max_rounds or 1))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = EnvSpec(cfg.env.env_id, cfg.env.env_kwargs)
    arch = PolicyArch.of(info, cfg.learner.hidden_sizes)
    counts = sorted({min(2**i, max_actors) for i in range(int(np.log2(max_actors)) + 2)})
    rows = []
    for k in counts:
        backend = make_backend(cfg, wire.new_key())
        try:
            blob = snapshot_of(arch, init_params(arch, cfg.run.seed), None, 0, cfg.learner.clip_obs).encode(backend.key)
            timings = []
            for rep in range(repeats + 1):
                ref = backend.publish(blob)
                requests = [Request(id=f"s{k}-{rep}-{i}", kind="train", policy=ref, env=spec, steps=steps,
                                    seed=invocation_seed(cfg.run.seed, rep, i, 0), gamma=0.99) for i in range(k)]
                t0 = time.perf_counter()
                replies = backend.invoke(requests)
                timings.append((time.perf_counter() - t0, [r.record for r in replies]))
            concurrency = getattr(backend, "max_concurrency", k)
        finally:
            backend.close()
        warm = timings[1:]
        functions = [sum(r.init_s + r.run_s for r in recs) for _, recs in warm]
        round_s = float(np.median([t for t, _ in warm]))
        ideal = float(np.median(functions)) / min(k, concurrency)
        records = [r for _, recs in warm for r in recs]
        rows.append({
            "actors": k, "cold_round_s": timings[0][0], "round_s": round_s, "functions_s": float(np.median(functions)),
            "ideal_s": ideal, "overhead_s": round_s - ideal, "overhead_per_invocation_ms": 1000 * (round_s - ideal) / k,
            "mean_duration_s": float(np.mean([r.duration_s for r in records])),
            "bytes_in": int(np.mean([r.bytes_in for r in records])),
            "bytes_out": int(np.mean([r.bytes_out for r in records])),
        })
    _write(rows, out_dir, cfg, steps)
    return rows


def _write(rows: list[dict[str, Any]], out_dir: Path, cfg: TrainConfig, steps: int) -> None:
    with open(out_dir / "scale.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    table = markdown_table(COLUMNS, [[r[c] for c in COLUMNS] for r in rows], g4)
    (out_dir / "scale.md").write_text(f"# scale: {cfg.env.env_id}, backend {cfg.functions.backend}, {steps} steps per "
                                      f"function\n\n{table}\n")
    ks = [r["actors"] for r in rows]
    line_plot({"warm round": (ks, [r["round_s"] for r in rows]), "cold round": (ks, [r["cold_round_s"] for r in rows]),
               "ideal (work / cores)": (ks, [r["ideal_s"] for r in rows])}, "concurrent invocations", "seconds",
              f"scale: {cfg.functions.backend}", out_dir / "scale.png")
