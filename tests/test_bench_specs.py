"""The comparison specs of bench/specs/: each reads (arms parse, fields are config fields) and every arm's config
passes the checks `minionsrl compare` makes before its first run; one spec runs end to end, tiny."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from minionsrl import config
from minionsrl.errors import ConfigError
from minionsrl.experiments.compare import Arm, read_spec
from minionsrl.prepare import prepare_config

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "bench" / "specs").glob("*.yaml"))


def test_there_are_specs():
    assert len(SPECS) >= 5


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_every_arm_of_a_spec_is_a_config_compare_accepts(spec, monkeypatch):
    monkeypatch.chdir(ROOT)  # a spec's base: is read from the repository root
    argv, fields = read_spec(spec)
    base = config.build(fields)
    for arm in argv[argv.index("--scalers") + 1].split(","):
        prepare_config(Arm.parse(arm).apply(base).replace(run_dir="unused"))


@pytest.mark.parametrize(("text", "message"), [
    ("compare: {seeds: 2}\n", "scalers needed"),
    ("compare: {scalers: [fixed:2], sedes: 2}\n", "sedes"),
    ("compare: {scalers: [fixed:2]}\nconfig: {env_idd: CartPole-v1}\n", "env_idd"),
    ("compare: {scalers: [fixd:2]}\n", "fixd"),
    ("compare: {scalers: [fixed:2]}\nextra: 1\n", "compare:, base: and config: only"),
])
def test_a_bad_spec_is_refused_naming_what(tmp_path, text, message):
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(ConfigError, match=message):
        read_spec(tmp_path / "s.yaml")


@pytest.mark.integration
def test_a_spec_runs_through_the_harness(tmp_path):
    spec = {"compare": {"scalers": ["fixed:2", "fixed:2+eval_overlap=false"], "seeds": 1, "rounds": 2,
                        "out": str(tmp_path / "out")},
            "config": {"env_id": "CartPole-v1", "fragment_length": 16, "eval_every": 1, "eval_episodes": 1,
                       "tensorboard": False}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    proc = subprocess.run([sys.executable, "bench/experiment.py", str(tmp_path / "s.yaml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "| fixed-2+eval_overlap=False |" in (tmp_path / "out" / "compare.md").read_text()
    assert yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())["fragment_length"] == 16


def test_benchmarks_md_is_what_its_section_files_make():
    proc = subprocess.run([sys.executable, "bench/common.py", "doc", "--check"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_benchmarks_summary_row_reads_a_sections_headline_date_and_command(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import common
    finally:
        sys.path.remove(str(ROOT / "bench"))
    section = ("## 3. Sampling\n<!-- headline: 15,500 steps/s -->\ntext\n"
               "- Date: 2026-11-22 00:16, measurements took 0.6 min.\n"
               "- Reproduce: `.venv/bin/python bench/sampling.py`\n")
    assert common.summary_row(3, section) == ["§3 Sampling", "15,500 steps/s", "2026-11-22",
                                              "`.venv/bin/python bench/sampling.py`"]
    rewritten = section.replace("<!-- headline: 15,500 steps/s -->\n", "")  # a benchmark's rerun drops its headline
    assert common.summary_row(3, rewritten)[1].startswith("(rerun since its headline")
    (tmp_path / "01-a.md").write_text("<!-- bench:a start -->\n" + section + "<!-- bench:a end -->\n")
    doc = common.render_doc(tmp_path)
    assert "| §1 Sampling | 15,500 steps/s | 2026-11-22 |" in doc and "headline:" not in doc
    assert "## 1. Sampling" in doc


def _budget_record(ours_wall_s: float) -> dict:
    rows = [{"round": float(r), "env_steps": 4096.0 * r, "round_s": 0.5, "sample_s": 0.4, "learn_s": 0.08,
             "eval_s": 0.0} for r in range(4, 11)]
    rows[-1].update(round_s=0.6, eval_s=0.1)  # the final evaluation: left out, as §17 leaves it out
    return {"start": 0.0, "end": 1.0, "cores": 2, "batch": 4096, "actors": 8, "steps": 40960,
            "raw_rollout_sps": 10000.0, "raw_rollout_cpu_share": 0.97, "peer_sps": 5000.0, "pool_sps": 11500.0,
            "step_ms": {"physics": 0.075, "gymnasium": 0.038, "policy": 0.02, "loop": 0.015, "rollout": 0.148,
                        "env_policy": 0.133},
            "ours": {"rows": rows, "first": 3, "last": 10, "steps": 28672, "wall_s": ours_wall_s + 0.1,
                     "final_eval_s": 0.1, "learner_cpu_s": 0.2, "other_threads_cpu_s": 0.5, "instances_cpu_s": 5.9,
                     "handler_cpu_s": 5.7, "final_eval_cpu_s": 0.1, "instances_started": 0, "instances_ended": 0}}


def test_round_budget_parts_add_up_and_the_verdict_follows_the_target():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import hopper
    finally:
        sys.path.remove(str(ROOT / "bench"))
    text = hopper.render_budget(_budget_record(ours_wall_s=4.0))  # 7,168 steps/s: 1.43x the peer's 5,000
    assert "**1.43×** (target 2.2×: **no**)" in text
    assert text.splitlines()[1] == ("<!-- headline: Hopper, 8 actors, one run: ours 7,168 steps/s, 1.43× the EnvPool "
                                    "peer (target 2.2×: not met); 2.2× it is 11,000, above the rollout function "
                                    "alone on every core (10,000) -->")
    # 7 rounds in 4.0 s: 571.4 ms a round, of which 500 ms in round_s (the final evaluation's 0.1 s left out)
    assert "| between rounds (billing, logging, the checkpoint's start, callbacks) | 71.4 | 12.5 |" in text
    assert "| the detectors and the stop decision | 20.0 | 3.5 |" in text
    assert "| **a round** (the window's wall time / its rounds) | 571.4 | 100.0 |" in text
    assert "| **all** | 0.227 | 100.0 |" in text  # (5.7 + 0.1 + 0.2 + 0.5) CPU s over 28,672 steps
    assert "| the target, 2.2× the peer | 11,000 | 0.182 |" in text
    assert "10,000 steps/s, 0.91 of the target" in text and "only a step cheaper than Gymnasium's" in text
    fast = hopper.render_budget(_budget_record(ours_wall_s=2.0))  # 14,336 steps/s: past 2.2x
    assert "**2.87×** (target 2.2×: yes)" in fast


def test_the_goals_oracle_names_the_counts_that_would_meet_it_and_how_stable_the_best_is(tmp_path):
    """bench/autopilot.py --oracle on a synthetic comparison: fixed-16 is the hindsight-best (least mean time),
    fixed-32 lies within 1.15x its time and 1.1x its dollars on every seed, fixed-8 misses on seed 2."""
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import autopilot
    finally:
        sys.path.remove(str(ROOT / "bench"))
    times = {"fixed-8": [10.0, 30.0, 10.0], "fixed-16": [10.0, 10.0, 10.0], "fixed-32": [11.0, 10.5, 10.0]}
    usd = {"fixed-8": 1.0, "fixed-16": 1.0, "fixed-32": 1.05}
    columns = ["arm", "backend", "priced_as", "seed", "rounds", "projected_cloud_s", "cost_usd",
               "projected_time_to_target_s", "usd_to_target"]
    lines = [",".join(columns)] + [
        f"{arm},local,aws_lambda_x86 via lithops,{seed + 1},10,{t},{usd[arm]},{t},{usd[arm]}"
        for arm, ts in times.items() for seed, t in enumerate(ts)]
    (tmp_path / "compare.csv").write_text("\n".join(lines) + "\n")
    text = "\n".join(autopilot.oracle("Synthetic", tmp_path, draws=200))
    assert "hindsight-best's (**fixed-16**)" in text and "Counts other than fixed-16 that meet it: **fixed-32**" in text
    assert "| fixed-8 | 1.00 / 1.00 | 3.00 / 1.00 | 1.00 / 1.00 | no |" in text
    assert "| fixed-32 | 1.10 / 1.05 | 1.05 / 1.05 | 1.00 / 1.05 | yes |" in text
    # a sweep on seeds 1 and 3 finds fixed-8 and fixed-16 tied and picks the first: on seed 2 it takes 3x the time
    assert "seed 2: fixed-8, 3.00× / 1.00×" in text and "seed 1: fixed-16, 1.00× / 1.00×" in text
