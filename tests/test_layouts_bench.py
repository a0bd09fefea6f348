"""bench/layouts.py: SB3's settings come from the MuJoCo preset, and the tables read both engines' records."""

from __future__ import annotations

from conftest import load_bench

from minionsrl.config.presets import PRESETS
from minionsrl.function.normalization import CLIP_DEFAULT

layouts = load_bench("layouts")


def test_sb3_layout_is_the_mujoco_preset_under_sb3_names() -> None:
    p = PRESETS["mujoco"]
    lay = layouts.sb3_layout(128)
    assert lay["n_envs"] == 128 and lay["ppo"]["n_steps"] == 32  # 128 x 32 = the 4,096-sample batch
    assert lay["ppo"]["batch_size"] == p["minibatch_size"] and lay["ppo"]["n_epochs"] == p["update_epochs"]
    assert lay["ppo"]["learning_rate"] == p["learning_rate"] and lay["anneal_lr"] is p["anneal_lr"]
    assert (lay["ppo"]["gamma"], lay["ppo"]["gae_lambda"], lay["ppo"]["clip_range"]) == (
        p["gamma"], p["gae_lambda"], p["clip_coef"])
    assert lay["normalize"] and lay["clip"] == CLIP_DEFAULT and lay["eval_every"] == layouts.EVAL_EVERY


def _record(actors: int, seed: int, final: float, engine: str) -> dict:
    rec = {"env": "hopper", "engine": engine, "actors": actors, "seed": seed, "final_eval": final,
           "evals": {"10": final / 2, "20": final}}
    if engine == "minionsrl":
        rec.update(train_last100=final, projected_round_s=0.1, projected_cloud_s=10.0, cost_usd=0.002)
    return rec


def test_tables_read_sb3_records_without_our_columns() -> None:
    records = [_record(n, s, 1000.0 + 100 * s - n, "sb3") for n in (8, 128) for s in (1, 2, 3)]
    rows = layouts.table(records, (10, 20)).splitlines()
    assert len(rows) == 4 and rows[2].startswith("| 8x512 |") and rows[3].startswith("| 128x32 |")
    assert rows[3].split("|")[5].strip() == ""  # no train return for SB3: a blank cell, not a crash or a zero
    assert "-120" in rows[3]  # 128x32's final eval against 8x512's: 120 lower on every seed
    curve = layouts.curve(records).splitlines()
    assert curve[0] == "| round (env steps) | 8x512 | 128x32 |" and curve[3].startswith("| 20 (82k) |")


def test_tables_fill_our_columns() -> None:
    records = [_record(n, s, 1000.0 + 100 * s, "minionsrl") for n in (8, 32) for s in (1, 2)]
    row = layouts.table(records, (10,)).splitlines()[2]
    assert row.split("|")[5].strip().startswith("1,150")  # train return last100: the mean of 1,100 and 1,200
