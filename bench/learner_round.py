"""The learner update: at Hopper sizes on one core (BENCHMARKS §8) and on a GPU against one CPU core (§14); and the
round's own CPU on the learner's thread besides it (``overhead``).

    .venv/bin/python bench/learner_round.py [round] [--reps 5]
    .venv/bin/python bench/learner_round.py overhead [--env-id Hopper-v5] [--actors 8] [--rounds 14]
    python3 bench/learner_round.py gpu {facts,learner,report,curve} ...   (bench/gpu_check.sh runs it on the GPU)

``round``: Benchmark: the project's learner update (JAX, one compiled program per update) at Hopper sizes, one core.

Times ``minionsrl.learner.engine.SGDEngine.update`` as the trainer calls it (host-side minibatch draw, padding,
transfer, the compiled program, the statistics read back) on a batch of the right shapes:

* (a) 4,096 samples (8 actors × 512), 10 epochs of 64-sample minibatches (640 SGD steps; target ≤ 0.1 s);
* (b) 32,768 samples (64 actors × 512), 10 epochs of 32 minibatches of 1,024 (target ≤ 0.6 s);
* (c) a scaler changing ``n`` every round: Nitro's published floor (61, 54, 44, 33, 23, 14, then 8) with
  seeded boosts to 8..64 actors, 30 rounds, per-sample budget (64-sample minibatches): the mean time per
  round *including every compilation*, with JAX's persistent compilation cache empty, then warm.

Each measurement runs in a fresh process pinned to one core (``taskset -c 0``) with XLA on one thread, so a
process's first call pays tracing and compilation (or, with a warm cache, loading the compiled program).

    .venv/bin/python bench/learner_round.py [--reps 5]

``gpu``: The learner on a GPU (issue 25): measured on a machine that has one, reported on this one.

On the device machine, from the repository root (``bench/gpu_check.sh`` runs every step, writing under ``$OUT``):

    python3 bench/learner_round.py gpu facts --out DIR --commit C   # the machine, its card, the versions that ran
    python3 bench/learner_round.py gpu learner --out DIR            # the update on the CPU (one core) and on the GPU

``learner`` times :meth:`minionsrl.learner.engine.SGDEngine.update` as the trainer calls it (minibatch draw,
padding, transfer, the compiled program, statistics read back) at three sizes: (a) Hopper, 4,096 samples, 10 epochs
of 64-sample minibatches; (b) Hopper, 32,768 samples, 10 epochs of 32 minibatches; (c) the Nature CNN, 1,024
frames, 4 epochs of 256 (the Atari preset's round). Each size and device is a fresh process (its first call
compiles); the CPU one is pinned to one core with XLA on one thread, as BENCHMARKS §8 measures it.

Back here, with DIR fetched: ``.venv/bin/python bench/learner_round.py gpu report --from DIR`` writes the section
``gpu`` of docs/BENCHMARKS.md from those files and the runs ``gpu_check.sh`` made (Hopper-v5 1M steps, Pong);
``.venv/bin/python bench/learner_round.py gpu curve --from DIR`` prints the table of a Pong run's curve
(``gpu_check.sh curve``) and draws it beside its rows as ``pong-curve.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import OUT, PYTHON, ROOT, append_jsonl, log, markdown_table, provenance, run_modes, write_section

# -- round (was learner_round.py) -----------------------------------------------

RESULTS = OUT / "learner_round.jsonl"
SIZES = {"a": (8, {"minibatch_size": 64}), "b": (64, {"minibatch_size": None, "num_minibatches": 32})}
T = 512
ROUNDS_VARYING = 30


def nitro_like_ns(rounds: int, seed: int = 0) -> list[int]:
    """Nitro's published floor 61, 54, 44, 33, 23, 14, then 8, with a boost to a random 8..64 every third round."""
    import numpy as np

    rng = np.random.default_rng(seed)
    floor = [61, 54, 44, 33, 23, 14]
    return [floor[r] if r < len(floor) else int(rng.integers(8, 65)) if r % 3 == 0 else 8 for r in range(rounds)]


def child(cfg: dict[str, Any]) -> dict[str, Any]:
    """One process: build the learner, time its updates; returns the timings."""
    import numpy as np

    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.learner import runtime

    runtime.configure(1)
    from minionsrl.config import learner_settings
    from minionsrl.learner.batch import Batch
    from minionsrl.learner.engine import SGDEngine, _update_program
    from minionsrl.learner.networks import init_params
    from minionsrl.learner.ppo import ppo_loss

    arch = PolicyArch(11, 3, False, (64, 64))  # Hopper-v5: 11 observations, 3 torques, 64-64 tanh towers

    def batch(rows: int, seed: int) -> Batch:
        r = np.random.default_rng(seed)
        f32 = np.float32
        return Batch(r.standard_normal((rows, 11)).astype(f32), r.standard_normal((rows, 3)).astype(f32),
                     (r.standard_normal(rows) * 0.1 - 3.0).astype(f32), r.standard_normal(rows).astype(f32),
                     r.standard_normal(rows).astype(f32), r.standard_normal(rows).astype(f32))

    out: dict[str, Any] = {}
    if cfg["mode"] == "fixed":
        actors, kw = SIZES[cfg["size"]]
        settings = learner_settings(update_epochs=10, learning_rate=3e-4, **kw)
        ppo = SGDEngine(arch, init_params(arch, 0), settings, ppo_loss)
        b = batch(actors * T, 0)
        times = []
        for i in range(cfg["reps"] + 1):
            t = time.perf_counter()
            ppo.update(b, np.random.default_rng(i))
            times.append(time.perf_counter() - t)
        out |= {"first_s": times[0], "median_s": float(np.median(times[1:]))}
    else:
        ns = nitro_like_ns(ROUNDS_VARYING)
        settings = learner_settings(update_epochs=10, learning_rate=3e-4, minibatch_size=64)
        ppo = SGDEngine(arch, init_params(arch, 0), settings, ppo_loss)
        times = []
        for r, n in enumerate(ns):
            b = batch(n * T, r)
            t = time.perf_counter()
            ppo.update(b, np.random.default_rng(r))
            times.append(time.perf_counter() - t)
        steady = {n: [] for n in set(ns)}
        for n, t in zip(ns, times, strict=True):
            steady[n].append(t)
        out |= {"ns": ns, "times": times, "total_s": sum(times), "programs": _update_program._cache_size(),
                "distinct_n": len(set(ns)), "mean_actors": float(np.mean(ns))}
    return out


def run_child(cfg: dict[str, Any], cache_dir: str) -> dict[str, Any]:
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": cache_dir, "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    proc = subprocess.run(["taskset", "-c", "0", PYTHON, __file__, "--child", json.dumps(cfg)], env=env,
                          capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--child")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    started = time.time()
    rows, varying = [], {}
    for size, label, target in (("a", "(a) 4,096 samples, 10 epochs × 64 minibatches of 64", 0.1),
                                ("b", "(b) 32,768 samples, 10 epochs × 32 minibatches of 1,024", 0.6)):
        with tempfile.TemporaryDirectory() as cache:
            cold = run_child({"mode": "fixed", "size": size, "reps": args.reps}, cache)
            warm = run_child({"mode": "fixed", "size": size, "reps": args.reps}, cache)
        rec = {"size": size, "cold": cold, "warm": warm}
        append_jsonl(RESULTS, rec)
        log(f"{label}: {rec}")
        median_s = min(cold["median_s"], warm["median_s"])  # two processes' steady states: the less disturbed one
        rows.append([label, median_s, median_s / (640 if size == "a" else 320) * 1e3, cold["first_s"],
                     warm["first_s"], target, "yes" if median_s <= target else "**no**"])
    with tempfile.TemporaryDirectory() as cache:
        for state in ("empty", "warm"):
            varying[state] = run_child({"mode": "varying"}, cache)
            append_jsonl(RESULTS, {"varying": state, **varying[state]})
            log(f"varying n, cache {state}: total {varying[state]['total_s']:.2f} s")
    table = markdown_table(["size", "s / update (median)", "ms / SGD step", "first call s (cache empty)",
                            "first call s (cache warm)", "target s", "met?"], rows, digits=[0, 3, 3, 2, 2, 1, 0])
    ns = varying["empty"]["ns"]
    vrows = [[state, v["total_s"] / len(ns), v["total_s"], v["programs"]] for state, v in varying.items()]
    vtable = markdown_table(["compilation cache", "mean s / round (compiles included)", "total s, 30 rounds",
                             "programs compiled in the process"], vrows, digits=[0, 3, 2, 0])
    steady = varying["warm"]["times"]
    section = f"""## 8. The learner update (JAX): per round at Hopper sizes, one core

`minionsrl.learner.engine.SGDEngine.update` with PPO's loss, as the trainer calls it — the host draws the minibatch
order (the same permutations as before), pads it to bucketed shapes, and one compiled program runs every epoch
and minibatch (clip, Adam, KL early stop) — on a Hopper-sized batch (11 observations, 3-D Gaussian, 64-64 tanh
actor and critic; CleanRL's loss, Adam lr 3e-4 eps 1e-5, clip 0.2, grad-norm 0.5). Each row is a fresh process pinned to
one core with XLA on one thread; "first call" includes tracing and compiling (cache empty) or loading the
compiled program from JAX's persistent cache (cache warm: what a second run of the same shapes pays). The
median is over {args.reps} further calls. Before the move to JAX the project's torch update took 0.60–0.84 s
for (a) and 0.94–1.57 s for (b) on this machine (the issue's measurement and section "Learner update" below).

{table}

**A scaler that changes `n` every round.** {len(ns)} rounds of n = {", ".join(map(str, ns))} actors × 512 steps
(per-sample budget: 64-sample minibatches, so 10 × n × 8 SGD steps; mean {varying["empty"]["mean_actors"]:.1f}
actors, {varying["empty"]["distinct_n"]} distinct n). Shapes are bucketed (rows and step count to a power of two that
never shrinks within a run, minibatch width to an eighth of its octave; the loop's trip count is dynamic), so the
distinct n compile only a few programs:

{vtable}

The same rounds' steady-state times (warm cache) range {min(steady):.3f}–{max(steady):.3f} s: the update's work is
the SGD steps, which this budget makes proportional to n (`--learner-budget per-round` holds them fixed).

{provenance(started, time.time(), ".venv/bin/python bench/learner_round.py")}
"""
    print(section)
    write_section("learner_round", section)


# -- gpu (was gpu.py) -----------------------------------------------------------

# (architecture, rows, PPO's epochs and minibatches) of each measured update
GPU_SIZES: dict[str, tuple[str, int, dict[str, Any]]] = {
    "a": ("hopper", 4096, {"update_epochs": 10, "minibatch_size": 64}),
    "b": ("hopper", 32768, {"update_epochs": 10, "minibatch_size": None, "num_minibatches": 32}),
    "c": ("cnn", 1024, {"update_epochs": 4, "minibatch_size": 256}),
}
REPS = {"cpu": {"a": 10, "b": 10, "c": 2}, "cuda": {"a": 10, "b": 10, "c": 10}}  # the CNN takes seconds on a CPU
CHILD_S = 120  # one size on one device, compilation included
DISTS = ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "optax", "numpy", "gymnasium", "mujoco",
         "ale-py")


def facts(out: Path, commit: str) -> None:
    """The machine, its card and the versions, as ``facts.json``."""
    import importlib.metadata

    import jax

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.strip()
    except OSError:  # no NVIDIA driver here
        smi = ""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    record = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "gpu": smi,
              "jax_devices": [str(d) for d in jax.devices()], "cpu": cpu, "cores": os.cpu_count(),
              "python": platform.python_version(), "versions": {d: v for d in DISTS if (v := version(d))}}
    (out / "facts.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record))


def _arch(kind: str):
    from minionsrl.function.numpy_policy import PolicyArch

    if kind == "cnn":
        return PolicyArch(4 * 84 * 84, 6, True, (), "cnn", (4, 84, 84))
    return PolicyArch(11, 3, False, (64, 64))  # Hopper-v5: 11 observations, 3 torques, 64-64 tanh towers


def time_update(size: str, device: str, reps: int) -> dict[str, Any]:
    """One process's timings of the update at ``size`` on ``device``: the first call and the median of ``reps``."""
    import numpy as np

    from minionsrl.learner import runtime

    if device == "cpu":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the CPU learner runs beside functions
    runtime.configure(1, gpu=device == "cuda")  # as a run sets the learner up
    import jax

    from minionsrl.config import learner_settings
    from minionsrl.learner.batch import Batch
    from minionsrl.learner.engine import SGDEngine
    from minionsrl.learner.networks import init_params
    from minionsrl.learner.ppo import ppo_loss

    kind, rows, ppo = GPU_SIZES[size]
    arch = _arch(kind)
    r = np.random.default_rng(0)
    f32 = np.float32
    obs = (r.integers(0, 256, (rows, *arch.obs_shape), dtype=np.uint8) if arch.image
           else r.standard_normal((rows, arch.obs_dim)).astype(f32))
    actions = (r.integers(0, arch.action_dim, rows) if arch.discrete
               else r.standard_normal((rows, arch.action_dim))).astype(f32)
    batch = Batch(obs, actions, (r.standard_normal(rows) * 0.1 - 1.5).astype(f32),
                  *(r.standard_normal(rows).astype(f32) for _ in range(3)))
    target = jax.devices("cpu" if device == "cpu" else "gpu")[0]
    engine = SGDEngine(arch, init_params(arch, 0), learner_settings(learning_rate=3e-4, **ppo), ppo_loss, target)
    times = []
    for i in range(reps + 1):
        started = time.perf_counter()
        engine.update(batch, np.random.default_rng(i))  # its statistics come back to the host: the work is done
        times.append(time.perf_counter() - started)
    return {"size": size, "device": device, "rows": rows, "first_s": times[0], "median_s": float(np.median(times[1:])),
            "times": times[1:], "device_name": str(target)}


def learner(out: Path, sizes: str) -> None:
    """Each size on each device, each in a fresh process; rows appended to ``learner.jsonl`` as they finish."""
    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    for size in sizes:
        for device in ("cpu", "cuda"):
            try:
                proc = subprocess.run([sys.executable, __file__, "gpu", "time", size, device, str(REPS[device][size])],
                                      env=env, capture_output=True, text=True, cwd=ROOT, check=False, timeout=CHILD_S)
            except subprocess.TimeoutExpired:  # a row that says so: the report shows it instead of a number
                proc = None
            if proc is not None and proc.returncode:
                print(f"{size} on {device} failed:\n{proc.stderr[-3000:]}", flush=True)
                continue
            row = (proc.stdout.strip().splitlines()[-1] if proc is not None
                   else json.dumps({"size": size, "device": device, "timed_out_s": CHILD_S}))
            with open(out / "learner.jsonl", "a") as fh:
                fh.write(row + "\n")
            print(row, flush=True)


def _hopper_runs(root: Path) -> list[dict[str, Any]]:
    """Each Hopper run under ``root``: its summary, medians of the round's parts, and the process's wall time."""
    import statistics

    from minionsrl.loop.metrics import read_metrics

    runs = []
    for summary_path in sorted(root.glob("hopper-*-s*/summary.json")):
        run = summary_path.parent
        summary = json.loads(summary_path.read_text())
        rows = read_metrics(run)
        med = {k: statistics.median(float(r[k]) for r in rows[1:])  # round 1 compiles
               for k in ("learn_s", "sample_s", "round_s", "projected_round_s")}
        stamps = [run.with_suffix(s) for s in (".start", ".end")]
        process = (float(stamps[1].read_text()) - float(stamps[0].read_text())
                   if all(p.exists() for p in stamps) else None)
        runs.append({"device": summary["config"]["device"], "seed": summary["seed"], "summary": summary,
                     "first_learn_s": float(rows[0]["learn_s"]), "process_s": process, **med})
    return runs


def _pong(path: Path) -> dict[str, Any]:
    """A Pong run's rows (``bench/pong.py``'s JSON lines): throughput, the round's parts, the last games."""
    import statistics

    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    steady = rows[5:]  # after compilation and the first rounds' warm-up
    games = [g for r in rows for g in r["returns"]]
    return {"rounds": len(rows), "steps": rows[-1]["env_steps"], "wall_s": rows[-1]["wall_s"],
            "first_learn_s": rows[0]["learn_s"], "games": len(games),
            "last20": sum(games[-20:]) / len(games[-20:]) if games else None,
            **{k: statistics.median(r[k] for r in steady) for k in ("learn_s", "sample_s", "round_s")}}


def curve(src: Path) -> str:
    """The Pong curve in ``src/pong.jsonl``: the mean of the last 20 games at tenths of the run, and its PNG."""
    from common import markdown_table
    from pong import plot_curve, tenths

    rows = [json.loads(line) for line in (src / "pong.jsonl").read_text().splitlines() if line.strip()]
    table = [[row["round"], 4 * row["env_steps"], row["wall_s"], games, last20] for row, games, last20 in tenths(rows)]
    plot_curve(rows, src / "pong-curve.png", "ALE/Pong-v5, PPO, GPU learner")
    return markdown_table(["round", "frames", "wall s", "games finished", "return (last 20 games)"], table,
                          digits=[0, 0, 0, 0, 1])


def report(src: Path, here: Path | None) -> str:
    """The BENCHMARKS section from what ``gpu_check.sh`` wrote (``src``) and, optionally, CPU runs of the same
    Hopper command on this machine (``here``)."""
    import statistics

    from common import markdown_table, write_section

    from minionsrl.cost import load_prices

    facts_ = json.loads((src / "facts.json").read_text())
    rows = [json.loads(line) for line in (src / "learner.jsonl").read_text().splitlines() if line.strip()]
    by = {(r["size"], r["device"]): r for r in rows}
    pong_gpu, pong_cpu = _pong(src / "runs" / "pong.jsonl"), _pong(src / "pong-cpu.jsonl")
    labels = {"a": "(a) Hopper, 4,096 samples, 10 epochs × 64 minibatches of 64",
              "b": "(b) Hopper, 32,768 samples, 10 epochs × 32 minibatches of 1,024",
              "c": "(c) Nature CNN, 1,024 frames, 4 epochs × 4 minibatches of 256"}
    table = []
    for size, label in labels.items():
        cpu, gpu = by.get((size, "cpu"), {}), by.get((size, "cuda"), {})
        speedup = cpu["median_s"] / gpu["median_s"] if "median_s" in cpu and "median_s" in gpu else None
        table.append([label, cpu.get("median_s"), gpu.get("median_s"), speedup, cpu.get("first_s"),
                      gpu.get("first_s")])
    learner_table = markdown_table(["update", "CPU s (1 core, 1 XLA thread)", "GPU s", "GPU speed-up",
                                    "first call CPU s", "first call GPU s"], table, digits=[0, 4, 4, 1, 2, 2])
    runs = _hopper_runs(src / "runs")
    local = _hopper_runs(here) if here else []
    hrows = [[f"{r['device']} ({'device machine' if r in runs else 'this machine'})", r["seed"],
              r["summary"]["train_return_last100"], r["summary"]["final_eval_return"], r["summary"]["wall_s"],
              r["process_s"], r["learn_s"], r["sample_s"], r["first_learn_s"], r["summary"]["projected_cloud_s"],
              r["summary"]["cost_usd"]["serverless"], r["summary"]["cost_usd"]["server"],
              r["summary"]["learner_host"]] for r in runs + local]
    hopper_table = markdown_table(["learner", "seed", "train return (last 100)", "final eval (10 ep.)", "wall s (run)",
                                   "wall s (process)", "learner s / round (median)", "sampling s / round (median)",
                                   "round 1 learner s", "projected s", "serverless $", "server $", "billed as"],
                                  hrows, digits=[0, 0, 0, 0, 1, 1, 3, 3, 2, 1, 4, 4, 0])

    def mean(device: str, where: list[dict[str, Any]], key: str) -> float | None:
        vals = [r["summary"][key] for r in where if r["device"] == device]
        return statistics.mean(vals) if vals else None

    pair = {r["device"]: r for r in runs if r["seed"] == 1}
    gpu1, cpu1 = pair["cuda"]["summary"], pair["cpu"]["summary"]
    usd_ratio = gpu1["cost_usd"]["serverless"] / cpu1["cost_usd"]["serverless"]
    prices = load_prices()
    gpu_rate, cpu_rate = prices.gpu_learner_host.usd_per_hour, prices.cpu_learner_host.usd_per_hour
    b_speedup = by[("b", "cpu")]["median_s"] / by[("b", "cuda")]["median_s"]
    prow = []
    for name, rate, p in (("GPU", gpu_rate, pong_gpu), (f"CPU ({facts_['cores']} cores)", cpu_rate, pong_cpu)):
        # the learner host's share of a million steps: the catalogue rate x the measured rounds of 1,024 steps
        prow.append([name, 1024 / p["round_s"], p["round_s"], p["sample_s"], p["learn_s"], p["first_learn_s"],
                     rate / 3600 * p["round_s"] * 1e6 / 1024])
    pong_table = markdown_table(["learner", "steps/s (steady)", "round s", "sampling s", "learner s",
                                 "first update s (compiles)", "learner host $ per 1M steps"], prow,
                                digits=[0, 0, 3, 3, 3, 1, 3])
    versions = ", ".join(f"{k} {v}" for k, v in facts_["versions"].items())
    smoke = (src / "log-smoke.txt").read_text()
    passed = next((line.strip() for line in smoke.splitlines() if " passed" in line and " in " in line), "not found")
    errors = [line.strip() for line in smoke.splitlines() if line.startswith("max |log-prob error|")]
    error_text = ("; ".join(errors) if errors else "not printed by that run's version of the test (its bound: "
                  "1e-4 × the largest |log-prob|, and TF32 at least 10× worse)")
    c_gpu = "" if "median_s" in by.get(("c", "cuda"), {}) else (
        "(c) on the GPU has no row: its process was still compiling or running when the stage's time limit cut it "
        "(after about a minute; a second try alone, after the main call, ran past 120 s). The same update in the Pong "
        f"run below took {pong_gpu['learn_s']:.3f} s a round (median of rounds 6–{pong_gpu['rounds']}; its first, "
        f"compiling, {pong_gpu['first_learn_s']:.1f} s). Those processes set the learner up with one thread "
        "(`configure(1)`: JAX's clients made while the process was held to one core), the Pong run with two "
        "(no such hold); since this run a GPU learner never makes its clients under that hold "
        "(`runtime.configure(threads, gpu=True)`), but whether the hold was the cause is not measured.")
    local_text = ""
    if local:
        import numpy as np

        from minionsrl.experiments.compare import diff_bootstrap_ci

        gpu_ret = np.array([r["summary"]["train_return_last100"] for r in runs if r["device"] == "cuda"])
        cpu_ret = np.array([r["summary"]["train_return_last100"] for r in local if r["device"] == "cpu"])
        lo, hi = diff_bootstrap_ci(list(gpu_ret), list(cpu_ret), draws=10_000)
        local_text = (f"; the CPU learner's on this machine {cpu_ret.mean():,.0f} (eval "
                      f"{mean('cpu', local, 'final_eval_return'):,.0f}): a difference of "
                      f"{gpu_ret.mean() - cpu_ret.mean():+,.0f} [{lo:+,.0f}, {hi:+,.0f}] (bootstrap 95% interval, "
                      "10,000 resamples of the seeds), which 3 seeds a side cannot tell from none. This machine's "
                      "runs ran beside another benchmark on its 2 cores: their wall times say nothing of the "
                      "learner")
    text = f"""## 14. The learner on a GPU: {facts_["gpu"].split(",")[0]}

Issue 25, on a lent machine: {facts_["gpu"]} (driver, memory), {facts_["cores"]} cores ({facts_["cpu"]}),
Python {facts_["python"]}; {versions}. That machine's image has JAX 0.11.2 with its CUDA 13 plugin, not the
`cuda` extra's pins (jax 0.10.2, CUDA 12), and nothing can be installed there from the network: Gymnasium, MuJoCo,
ALE and tensorboardX travelled as wheels; the rest ran as found. Commit {facts_["commit"]}, {facts_["date"]}. What
ran there: `bash bench/gpu_check.sh smoke` then `main` (one call each); this section is
`.venv/bin/python bench/learner_round.py gpu report --from DIR --cpu-here DIR2` here.

**Tests** (`pytest -m gpu tests/test_gpu.py`; skipped where JAX sees no GPU, as in CI): {passed}. The learner's
log-probabilities on the GPU against the NumPy functions' (full float32 matmuls, the runtime's setting; then TF32,
JAX's GPU default): {error_text}. The same update on the CPU and the GPU gave the same weights to rtol 1e-4 (Hopper
MLP and Nature CNN), and a `--device cuda` CartPole run was billed as `p3.2xlarge`.

**The update** (`bench/learner_round.py gpu learner`: each size and device a fresh process; median of 10 calls, 2 for
the CNN on one CPU core):

{learner_table}

An SGD step of the Hopper MLP is a few small kernels: at 64-sample minibatches the GPU takes as long as one CPU core
((a): 640 steps, ~0.1 ms each, launch-bound); at 1,024-sample minibatches ((b)) it is {b_speedup:.1f}× faster.
{c_gpu}

**Hopper-v5, 1M steps** (the MuJoCo preset, 8 actors, one 10-episode evaluation at the end, as §2), on the device
machine: seed 1 with each learner side by side (18 processes on 16 cores), then seeds 2 and 3 on the GPU side by
side{"; and the same command with the CPU learner on this 2-core machine (jax 0.10.2), seeds 1–3" if local else ""}:

{hopper_table}

- Returns: the GPU learner's mean train return over 3 seeds is {mean("cuda", runs, "train_return_last100"):,.0f}
  (eval {mean("cuda", runs, "final_eval_return"):,.0f}){local_text}. Seeds spread widely (the issue's brief:
  749–3,233 at 300k steps for one config), and runs are not bit-identical across devices or JAX versions (float32
  sums in another order), so the same seed differs between rows.
- Wall time: seed 1 took {gpu1["wall_s"]:.1f} s with the GPU learner and {cpu1["wall_s"]:.1f} s with the CPU
  learner, side by side on the same machine: **the GPU buys no time on Hopper**. The learner is
  {pair["cuda"]["learn_s"]:.3f} s against {pair["cpu"]["learn_s"]:.3f} s a round, and sampling
  ({pair["cuda"]["sample_s"]:.3f} s) is the larger part of either.
- The bill: the ledger bills a GPU learner as `p3.2xlarge` (${gpu_rate}/h) and a CPU one as `c5.large`
  (${cpu_rate}/h), {gpu_rate / cpu_rate:.0f}× the rate. Seed 1 cost ${gpu1["cost_usd"]["serverless"]:.4f} serverless
  with the GPU learner against ${cpu1["cost_usd"]["serverless"]:.4f} with the CPU one ({usd_ratio:.1f}×), and
  ${gpu1["cost_usd"]["server"]:.4f} against ${cpu1["cost_usd"]["server"]:.4f} on servers. (The catalogue's GPU host
  is a V100 machine; the card measured is an H100.)

**Pong** (`bench/pong.py --minutes 2 --device cuda`, the `atari` preset: CleanRL's settings, 8 actors × 128 steps,
4 epochs of 256): {pong_gpu["rounds"]} rounds, {pong_gpu["steps"]:,} steps ({4 * pong_gpu["steps"]:,} frames) in
{pong_gpu["wall_s"]:.0f} s; the last 20 of {pong_gpu["games"]} games averaged {pong_gpu["last20"]:.1f}, where any
PPO starts (CleanRL's 20.4 is at 10M frames). Then `--device cpu` on the same machine for 1.6 min (XLA's CPU pool
takes the machine's {facts_["cores"]} cores while the functions wait). Medians of rounds 6 on:

{pong_table}

The host's dollars are the catalogue rate × the measured rounds; the functions' bill is the same for both, since
they sample the same steps. The CPU figure in §6 is 298 steps/s on this 2-core machine. At
{1024 / pong_gpu["round_s"]:,.0f} steps/s, CleanRL's 10M frames would take
{2.5e6 / (1024 / pong_gpu["round_s"]) / 60:.0f} min of wall time: more than a session's 15 device minutes, so the
10M-frame curve is not measured.

**When the GPU learner is worth its price.** It is {gpu_rate / cpu_rate:.0f}× the CPU host's rate, so in dollars it
pays only if the round gets that much shorter; with the functions' sampling in every round it never does here. In
time it pays where the update is a large part of the round: the Nature CNN (Pong's round
{pong_cpu["round_s"] / pong_gpu["round_s"]:.1f}× shorter, the update {pong_cpu["learn_s"] / pong_gpu["learn_s"]:.0f}×
faster) and MLP batches of ~32k samples ((b), {b_speedup:.1f}×); not Hopper at 4,096 samples, where it costs
{usd_ratio:.1f}× the dollars for the same minutes.
"""
    write_section("gpu", text)
    return text


def gpu_main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("facts")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--commit", default="unknown")
    lp = sub.add_parser("learner")
    lp.add_argument("--out", type=Path, required=True)
    lp.add_argument("--sizes", default="".join(GPU_SIZES), help="which of (a), (b), (c): e.g. ab")
    r = sub.add_parser("report")
    r.add_argument("--from", dest="src", type=Path, required=True, help="what gpu_check.sh wrote, fetched")
    r.add_argument("--cpu-here", type=Path, help="CPU runs of the same Hopper command on this machine")
    c = sub.add_parser("curve")
    c.add_argument("--from", dest="src", type=Path, required=True, help="a folder holding a Pong run's pong.jsonl")
    t = sub.add_parser("time")
    t.add_argument("size", choices=list(GPU_SIZES))
    t.add_argument("device", choices=["cpu", "cuda"])
    t.add_argument("reps", type=int)
    args = ap.parse_args(argv)
    if args.cmd == "facts":
        facts(args.out, args.commit)
    elif args.cmd == "learner":
        learner(args.out, args.sizes)
    elif args.cmd == "report":
        print(report(args.src, args.cpu_here))
    elif args.cmd == "curve":
        print(curve(args.src))
    else:
        print(json.dumps(time_update(args.size, args.device, args.reps)))


# -- overhead: the round's own CPU on the learner's thread -----------------------------------------

# what a round calls, by phase (play_round's plan, collect, learn, decide and what it tells its observers), and the
# object that owns each call: the rest of a round's CPU is play_round's own and the trainer's
CALLS = (("plan: the scaler", "scaler", "next_actors"), ("collect: the sampler", "sampler", "sample"),
         ("learn: the update (learner.learn)", "learner", "learn"), ("decide: the bill", "ledger", "bill_round"),
         ("observers: the rows written", "files", "row"), ("observers: the checkpoint", "files", "ended"))


def overhead_main(argv: list[str] | None = None) -> None:
    """The CPU seconds a round costs the learner's thread, call by call, besides the update: what the functions lose
    of the machine they share with the learner (2 cores here). Thread CPU time, so the load of other processes
    changes it little."""
    ap = argparse.ArgumentParser(description=overhead_main.__doc__.split("\n")[0])
    ap.add_argument("--env-id", default="Hopper-v5")
    ap.add_argument("--actors", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=14, help="rounds measured after two warm-up rounds")
    args = ap.parse_args(argv)
    import numpy as np

    from minionsrl.build import make_trainer
    from minionsrl.config import TrainConfig

    started = time.time()
    spent: dict[str, float] = {}

    def timed(name: str, method: Any) -> Any:
        def run(*a: Any, **k: Any) -> Any:
            t = time.thread_time()
            try:
                return method(*a, **k)
            finally:
                spent[name] = spent.get(name, 0.0) + time.thread_time() - t
        return run

    per_round: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        trainer = make_trainer(TrainConfig(env_id=args.env_id, actors=args.actors, max_rounds=args.rounds + 2,
                                           eval_every=0, tensorboard=False, run_dir=f"{tmp}/run"))
        try:
            for name, owner, method in CALLS:
                part = trainer.files if owner == "files" else getattr(trainer.parts, owner)
                setattr(part, method, timed(name, getattr(part, method)))
            for r in range(args.rounds + 2):
                spent.clear()
                wall, cpu = time.perf_counter(), time.thread_time()
                trainer.run_round()
                if r >= 2:  # compiled, instances warm
                    per_round.append({name: 0.0 for name, _, _ in CALLS} | spent
                                     | {"round": time.thread_time() - cpu, "wall": time.perf_counter() - wall})
        finally:
            trainer.close()
    med = {k: float(np.median([r[k] for r in per_round])) for k in per_round[0]}
    append_jsonl(OUT / "round_overhead.jsonl", {"env_id": args.env_id, "actors": args.actors, **med})
    update = "learn: the update (learner.learn)"
    rest = float(np.median([r["round"] - sum(r[name] for name, _, _ in CALLS) for r in per_round]))
    rows = [[name, med[name] * 1e3] for name, _, _ in CALLS]
    rows.append(["the rest (play_round's own, the stop rules, the trainer)", rest * 1e3])
    rows.append(["round, outside the update", (med["round"] - med[update]) * 1e3])
    table = markdown_table(["call", "learner thread CPU ms / round (median)"], rows, digits=[0, 1])
    outside = (med["round"] - med[update]) * 1e3
    section = f"""## The round's own CPU on the learner's thread
<!-- headline: {args.env_id}, {args.actors} actors: {outside:.1f} ms of learner-thread CPU a round outside the \
update (a round {med["wall"]:.2f} s) -->

The learner's thread spends CPU on every round besides the update: sending the requests and publishing the policy,
waiting on and decoding the replies (and, on the local backend, watching its instances' memory and concurrency),
billing, logging and checkpointing. On one machine that CPU is taken from the rollout functions. {args.env_id},
{args.actors} actors on the local backend, the family preset, no evaluation; the median of {len(per_round)} rounds
after two warm-up rounds, in thread CPU time, by what the round (`play_round`) calls (the update's compiled program
runs on XLA's own thread: its share here is the host side, the minibatch draw, padding and transfer; the checkpoint
is written on a thread of its own, this is what it costs the learner's). A round took {med["wall"]:.2f} s of wall
time here.

{table}

{provenance(started, time.time(), ".venv/bin/python bench/learner_round.py overhead")}
"""
    print(section)
    write_section("round_overhead", section)


MODES = {"round": main, "gpu": gpu_main, "overhead": overhead_main}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    run_modes(MODES)
