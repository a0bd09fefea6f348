"""Sampling: the local backend against the raw limit (BENCHMARKS §3) and the backends side by side (§7).

    .venv/bin/python bench/sampling.py [local] [--actors 2 8 32] [--steps 512] [--rounds 8]
    .venv/bin/python bench/sampling.py backends [--backends local ray lithops] [--actors 8 32] [--rounds 6] [--reps 2]
    .venv/bin/python bench/sampling.py engines [--steps 3000] [--repeats 3]   (the bench extra: EnvPool)

``local``: Benchmark 3: sampling throughput of the local backend vs the raw limit, and the per-round overhead.

For each actor count n (default 2, 8, 32) a fresh LocalBackend (default concurrency: one instance
per core) runs one warm-up round (cold starts, reported apart) and then ``--rounds`` measured rounds,
each exactly as a round (``play_round``) samples: encode the snapshot and ``publish`` it once, ``invoke``
n train requests built like ``Sampler._train_request`` (seeds from ``invocation_seed``, episodes carried
across rounds), then ``Fragment.from_wire`` on every reply. Steps/s = n·T / (publish + invoke + decode).

The raw limit: this process steps the env with the NumpyPolicy through ``minionsrl.function.rollout.rollout``
(the function's own loop, no backend) for the same T, times the number of cores. It is measured
right before each n, so the two see the same background load.

    .venv/bin/python bench/sampling.py [--actors 2 8 32] [--steps 512] [--rounds 8]

``backends``: Benchmark 7: the backends side by side — per-round overhead and steps/s on Hopper-v5 at 8 and 32
actors, and ``minionsrl scale`` (1..64 concurrent invocations) on each backend.

Training: for each repetition, actor count and backend (interleaved, so all see the same background
load) a fresh ``minionsrl train`` process runs ``--rounds`` PPO rounds of T-step fragments with the
same seed and concurrency (one instance per core). Round 1 (cold starts) and the last round (it
evaluates) are left out; the rest give the medians. Overhead = sample_s − Σ(init_s + run_s) of the
round's functions / min(n, cores): the part of sampling that is not the functions' own work.
Scale: ``minionsrl scale --backend B --max-actors 64`` per backend, its table as written.

    .venv/bin/python bench/sampling.py backends [--backends local ray lithops] [--actors 8 32] [--rounds 6] [--reps 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import OUT, ROOT, append_jsonl, log, markdown_table, n_cores, provenance, run_modes, write_section

# -- local (was sampling.py) ----------------------------------------------------

# minionsrl (and with it JAX) is imported inside the functions: the raw-limit processes this
# script starts should pay only for what a rollout function needs.

ENV, GAMMA, SEED = "Hopper-v5", 0.99, 1
TARGET_FRACTION, TARGET_OVERHEAD = 0.85, 0.05


class Learner:
    """The learner's side of a round, reduced to what sampling needs (no PPO update)."""

    def __init__(self, steps: int) -> None:

        from minionsrl.function.envs import EnvSpec, env_info
        from minionsrl.function.normalization import RunningMeanStd
        from minionsrl.function.numpy_policy import PolicyArch
        from minionsrl.learner.networks import init_params

        self.spec = EnvSpec(ENV)
        info = env_info(self.spec)
        self.arch = PolicyArch.of(info, (64, 64))
        self.params = init_params(self.arch, SEED)
        self.obs_rms = RunningMeanStd((self.arch.obs_dim,))
        self.steps = steps
        self.version = 0
        self.carries: dict[int, dict[str, Any]] = {}

    def snapshot(self) -> Any:
        from minionsrl.learner.networks import snapshot_of

        self.version += 1
        return snapshot_of(self.arch, self.params, self.obs_rms, self.version, 10.0)

    def requests(self, round_idx: int, ref: str, n: int) -> list[Any]:
        from minionsrl.function.request import Request
        from minionsrl.loop.sampler import invocation_seed

        return [Request(id=f"r{round_idx}-train-{slot}", kind="train", policy=ref, env=self.spec,
                        seed=invocation_seed(SEED, round_idx, slot, 0), gamma=GAMMA, steps=self.steps,
                        carries=(self.carries.get(slot),)) for slot in range(n)]

    def round(self, backend: Any, key: bytes, round_idx: int, n: int) -> dict[str, Any]:
        from minionsrl.function.fragment import Fragment

        t0 = time.perf_counter()
        ref = backend.publish(self.snapshot().encode(key))
        t1 = time.perf_counter()
        replies = backend.invoke(self.requests(round_idx, ref, n))
        t2 = time.perf_counter()
        frags = [Fragment.from_wire(r.arrays, r.meta, self.steps, self.arch) for r in replies]
        t3 = time.perf_counter()
        bad = [r.record.error for r in replies if not r.ok]
        if bad or len(frags) != n:
            raise RuntimeError(f"round {round_idx}: {len(bad)} failed invocations: {bad[:1]}")
        self.carries = {slot: f.meta["carry"] for slot, f in enumerate(frags) if f.meta.get("carry")}
        recs = [r.record for r in replies]
        func_init = [float(r.meta["timings"]["init_s"]) for r in replies]
        cold = [rec.init_s - fi for rec, fi in zip(recs, func_init, strict=True) if rec.cold]
        busy: dict[str, float] = {}
        for rec in recs:
            busy[rec.instance_id] = busy.get(rec.instance_id, 0.0) + rec.run_s
        roundtrip = [rec.duration_s - fi - rec.run_s for rec, fi in zip(recs, func_init, strict=True)]
        return {"n": n, "round": round_idx, "publish_s": t1 - t0, "invoke_s": t2 - t1, "decode_s": t3 - t2,
                "round_s": t3 - t0, "sum_run_s": sum(rec.run_s for rec in recs), "sum_func_init_s": sum(func_init),
                "max_instance_run_s": max(busy.values()), "sum_roundtrip_s": sum(roundtrip),
                "cold_instances": len(cold), "instance_cold_start_s": cold,
                "reply_bytes": sum(rec.bytes_out for rec in recs), "steps": n * self.steps}


class RawStepper:
    """The raw limit: one process running the rollout function's loop directly (no backend), T steps at a time."""

    def __init__(self, learner: Learner) -> None:
        from minionsrl.function.envs import make_env

        self.steps, self.spec = learner.steps, learner.spec
        self.snap = learner.snapshot()
        self.policy = self.snap.numpy_policy()
        self.env = make_env(learner.spec)
        self.carry: dict[str, Any] | None = None
        self.seed = 0
        self.block(1)  # warm-up: first reset, caches

    def block(self, fragments: int) -> dict[str, Any]:
        from minionsrl.function.rollout import rollout

        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(fragments):
            self.seed += 1
            frag = rollout(self.env, self.snap, self.policy, self.steps, self.seed, GAMMA, self.carry)
            self.carry = frag.meta["carry"]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {"steps": fragments * self.steps, "wall_s": wall, "cpu_s": cpu, "sps": fragments * self.steps / wall}


class ParallelRaw:
    """k raw steppers in k processes released together: what the machine's cores give right now."""

    def __init__(self, k: int, steps: int) -> None:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--raw-child", str(steps)]
        self.procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                      for _ in range(k)]
        for proc in self.procs:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("raw child failed to start")

    def block(self, fragments: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        for proc in self.procs:
            proc.stdin.write(f"{fragments}\n")
            proc.stdin.flush()
        parts = [json.loads(proc.stdout.readline()) for proc in self.procs]
        wall = time.perf_counter() - t0
        steps = sum(p["steps"] for p in parts)
        return {"k": len(parts), "steps": steps, "wall_s": wall, "sps": steps / wall,
                "per_process_cpu_over_wall": [p["cpu_s"] / p["wall_s"] for p in parts]}

    def close(self) -> None:
        for proc in self.procs:
            proc.stdin.close()
            proc.wait(timeout=30)


def raw_child(steps: int) -> None:
    """``--raw-child``: step on request (one line: fragments) and answer with one JSON line."""
    stepper = RawStepper(Learner(steps))
    print("ready", flush=True)
    for line in sys.stdin:
        print(json.dumps(stepper.block(int(line))), flush=True)


def measure(n: int, rounds: int, steps: int, raw_fragments: int, out: Path) -> dict[str, Any]:
    """Alternate raw blocks and a backend round, so each triple sees the same background load."""
    from minionsrl.backends.local import LocalBackend
    from minionsrl.function import wire

    learner = Learner(steps)
    raw = RawStepper(learner)
    k = min(n_cores(), n)
    par = ParallelRaw(k, steps)
    key = wire.new_key()
    raw_blocks, par_blocks, rows = [], [], []
    with LocalBackend(key) as backend:
        warm = learner.round(backend, key, 1, n)
        append_jsonl(out, {"kind": "warmup", "time": time.time(), **warm})
        for r in range(2, rounds + 2):
            raw_blocks.append(raw.block(raw_fragments))
            append_jsonl(out, {"kind": "raw", "n": n, "time": time.time(), **raw_blocks[-1]})
            par_blocks.append(par.block(raw_fragments))
            append_jsonl(out, {"kind": "raw-parallel", "n": n, "time": time.time(), **par_blocks[-1]})
            rows.append(learner.round(backend, key, r, n))
            append_jsonl(out, {"kind": "round", "time": time.time(), **rows[-1]})
        concurrency = backend.max_concurrency
    raw.env.close()
    par.close()
    med = {k: statistics.median(row[k] for row in rows)
           for k in ("publish_s", "invoke_s", "decode_s", "round_s", "sum_run_s", "sum_func_init_s")}
    raw_sps = sum(b["steps"] for b in raw_blocks) / sum(b["wall_s"] for b in raw_blocks)
    par_sps = sum(b["steps"] for b in par_blocks) / sum(b["wall_s"] for b in par_blocks)
    return {"n": n, "raw": {"sps": raw_sps, "blocks": raw_blocks}, "par": {"k": k, "sps": par_sps},
            "warmup": warm, "rounds": rows, "median": med,
            "concurrency": concurrency, "sps": sum(row["steps"] for row in rows) / sum(row["round_s"] for row in rows),
            "run_sps_per_instance": sum(row["steps"] for row in rows) / sum(row["sum_run_s"] for row in rows)}


def overhead(res: dict[str, Any], cores: int) -> dict[str, float]:
    """Per-round overhead = round − Σ run_s / min(cores, n), split into publish, invoke+gather excess, decode."""
    parallel = min(cores, res["n"], res["concurrency"])
    per_round = []
    for row in res["rounds"]:
        ideal = row["sum_run_s"] / parallel
        per_round.append({"round_s": row["round_s"], "ideal_s": ideal, "overhead_s": row["round_s"] - ideal,
                          "publish_s": row["publish_s"], "invoke_excess_s": row["invoke_s"] - ideal,
                          "func_init_s": row["sum_func_init_s"] / parallel, "decode_s": row["decode_s"],
                          "imbalance_s": row["max_instance_run_s"] - ideal,
                          "roundtrip_s": row["sum_roundtrip_s"] / parallel})
    return {k: statistics.median(p[k] for p in per_round) for k in per_round[0]}


def render(results: list[dict[str, Any]], args: argparse.Namespace, cores: int, started: float) -> str:
    rows = []
    for res in results:
        limit = res["raw"]["sps"] * cores
        cold = res["warmup"]["instance_cold_start_s"]
        rows.append([res["n"], args.steps, res["concurrency"], res["sps"], res["raw"]["sps"], limit,
                     res["sps"] / limit, res["par"]["sps"], res["sps"] / res["par"]["sps"],
                     res["run_sps_per_instance"], res["warmup"]["round_s"],
                     res["warmup"]["round_s"] - res["median"]["round_s"], statistics.mean(cold) if cold else None])
    table = markdown_table(
        ["actors n", "T", "instances", "steps/s (local backend)", "raw steps/s (1 process)",
         f"limit = raw × {cores} cores", "fraction of limit", "raw steps/s, min(cores, n) processes at once",
         "fraction of that", "steps/s inside each function (Σ steps / Σ run_s)",
         "warm-up round s (cold)", "its extra over a warm round s", "instance cold start s (mean)"],
        rows, digits=[0, 0, 0, 0, 0, 0, 3, 0, 3, 0, 2, 2, 2])
    eight = next((r for r in results if r["n"] == 8), None)
    ov_text = "(8 actors were not measured)"
    ok_ov = False
    if eight is not None:
        ov = overhead(eight, cores)
        frac = ov["overhead_s"] / ov["round_s"]
        ok_ov = frac <= TARGET_OVERHEAD
        parts = [["round wall time", ov["round_s"], 1.0],
                 [f"ideal parallel time Σ run_s / {min(cores, 8)}", ov["ideal_s"], ov["ideal_s"] / ov["round_s"]],
                 ["**overhead** (round − ideal)", ov["overhead_s"], frac],
                 ["– publish (encode snapshot + write)", ov["publish_s"], ov["publish_s"] / ov["round_s"]],
                 ["– invoke + gather beyond the ideal", ov["invoke_excess_s"], ov["invoke_excess_s"] / ov["round_s"]],
                 ["  of which: imbalance (busiest instance's Σ run_s − ideal)", ov["imbalance_s"],
                  ov["imbalance_s"] / ov["round_s"]],
                 ["  of which: functions' own init (policy load), / cores", ov["func_init_s"],
                  ov["func_init_s"] / ov["round_s"]],
                 ["  of which: round trip per invocation (dispatch → reply − function time), / cores",
                  ov["roundtrip_s"], ov["roundtrip_s"] / ov["round_s"]],
                 ["– decode (`Fragment.from_wire`)", ov["decode_s"], ov["decode_s"] / ov["round_s"]]]
        ov_text = markdown_table(["8 actors × T = 512, median over rounds", "seconds", "fraction of round"], parts,
                                 digits=[0, 4, 3])
        ov_text += f"\n\nOverhead target ≤ {TARGET_OVERHEAD:.0%}: **{'met' if ok_ov else 'not met'}** ({frac:.1%})."
    fractions = [r["sps"] / (r["raw"]["sps"] * cores) for r in results]
    ok_tp = all(f >= TARGET_FRACTION for f in fractions)
    return f"""## 3. Sampling throughput of the local backend (Hopper-v5) and per-round overhead

Each actor count gets a fresh `LocalBackend` with its default concurrency (one instance per core,
so n > {cores} queue on {cores} warm instances, as the Trainer runs by default). One warm-up round
(cold starts: the warm-up round's wall time, what it took beyond a warm round — instance start, env
construction, first policy load — and the mean instance start-up, process start to ready, are in the
last three columns) is followed by {args.rounds} measured rounds. A round is what
a round (`play_round`) does before learning: encode and `publish` the snapshot once (a new version every
round, so every instance re-fetches it, as in training), `invoke` n train requests built like
`Sampler._train_request` (episodes carried across rounds), `Fragment.from_wire` on each reply. Steps/s =
n·T / Σ round time. The raw limit is one process calling `minionsrl.function.rollout.rollout` (the function's
loop: NumpyPolicy + env, episodes carried) back to back for T-step fragments, times the {cores} cores;
a block of {args.raw_fragments} raw fragments runs right before every measured round, so raw and backend
see the same background load (steps/s are totals over all blocks / rounds).
Because other work shared the machine (another agent's training process kept about one core busy),
{cores} processes do not get {cores} cores: the column "min(cores, n) processes at once" measures what the
cores really gave, with that many raw stepping processes released together (right after the single
raw block, before each round); "fraction of that" compares the backend with it.

{table}

Throughput target ≥ {TARGET_FRACTION:.0%} of the limit: **{'met' if ok_tp else 'not met'}**
({", ".join(f"n={r['n']}: {f:.0%}" for r, f in zip(results, fractions, strict=True))}).

An instance is a fresh interpreter (`python -m minionsrl.backends.local_worker`) that imports only
the rollout function (NumPy, Gymnasium), never the learner's JAX nor the caller's `__main__`, so its cold start
is the same from the CLI, from a script or from this benchmark.

Per-round overhead for 8 actors: round wall time minus the ideal parallel time (the functions'
summed `run_s` divided by min(cores, n)), as a fraction of the round. Publish and decode run in the
learner; "invoke + gather beyond the ideal" holds the dispatch, the functions' own init (reading and
decoding the new policy), reply transfer and the HMAC check + safetensors parse done inside `invoke`
(`make_reply`), and any imbalance between the instances.

{ov_text}

{provenance(started)}
"""


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--actors", type=int, nargs="+", default=[2, 8, 32])
    p.add_argument("--steps", type=int, default=512, help="fragment length T")
    p.add_argument("--rounds", type=int, default=8, help="measured rounds per actor count (after a warm-up)")
    p.add_argument("--raw-fragments", type=int, default=4, help="T-step fragments of raw stepping before each round")
    p.add_argument("--out", default=str(OUT / "sampling.jsonl"))
    p.add_argument("--raw-child", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.raw_child is not None:
        raw_child(args.raw_child)
        return
    started, cores, out = time.time(), n_cores(), Path(args.out)
    results = []
    for n in args.actors:
        log(f"n={n}")
        res = measure(n, args.rounds, args.steps, args.raw_fragments, out)
        results.append(res)
        log(f"n={n}: {res['sps']:.0f} steps/s, raw {res['raw']['sps']:.0f} steps/s/process")
    section = render(results, args, cores, started)
    write_section("sampling", section)
    print(section)


# -- backends (was backends.py) -------------------------------------------------

ENV, SEED, TARGET_RAY_RATIO = "Hopper-v5", 1, 2.0
MINIONSRL = str(ROOT / ".venv" / "bin" / "minionsrl")


def train_once(backend: str, n: int, steps: int, rounds: int, cores: int) -> dict[str, Any]:
    """One training run in a fresh process; per-round figures from its metrics.csv and invocations.csv."""
    run_dir = OUT / "backends" / f"{backend}-{n}"
    shutil.rmtree(run_dir, ignore_errors=True)
    t0 = time.perf_counter()
    subprocess.run([MINIONSRL, "train", "--env-id", ENV, "--backend", backend, "--actors", str(n),
                    "--fragment-length", str(steps), "--max-rounds", str(rounds), "--seed", str(SEED),
                    "--max-concurrency", str(cores), "--eval-every", "0", "--eval-episodes", "1",
                    "--no-progress", "--no-tensorboard", "--run-dir", str(run_dir)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process_s = time.perf_counter() - t0
    from minionsrl.loop.metrics import read_metrics, read_rows

    metrics = read_metrics(run_dir)
    work: dict[int, float] = {}
    for row in read_rows(run_dir / "invocations.csv"):
        if row["kind"] == "train":
            work[int(row["round"])] = work.get(int(row["round"]), 0.0) + float(row["init_s"]) + float(row["run_s"])
    measured = metrics[1:-1]  # not the cold first round, not the evaluating last one
    per_round = [{"round_s": float(m["round_s"]), "sample_s": float(m["sample_s"]), "learn_s": float(m["learn_s"]),
                  "ideal_s": work[int(m["round"])] / min(n, cores)} for m in measured]
    med = {k: statistics.median(r[k] for r in per_round) for k in per_round[0]}
    med["overhead_s"] = statistics.median(r["sample_s"] - r["ideal_s"] for r in per_round)
    return {"backend": backend, "n": n, "steps": steps, "process_s": process_s,
            "cold_round_s": float(metrics[0]["round_s"]), "train_return_last": metrics[-1]["train_return_mean"],
            **med, "sps": n * steps / med["round_s"], "sample_sps": n * steps / med["sample_s"]}


def scale_once(backend: str, max_actors: int, steps: int, cores: int) -> list[dict[str, Any]]:
    out = OUT / "backends" / f"scale-{backend}"
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([MINIONSRL, "scale", "--env-id", ENV, "--backend", backend, "--max-actors", str(max_actors),
                    "--steps", str(steps), "--repeats", "2", "--max-concurrency", str(cores), "--out", str(out)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from minionsrl.loop.metrics import read_rows

    return [{k: float(v) for k, v in row.items()} for row in read_rows(out / "scale.csv")]


def backends_render(train: list[dict[str, Any]], scale: dict[str, list[dict[str, Any]]], args: argparse.Namespace,
           cores: int, started: float) -> str:
    def pooled(backend: str, n: int, key: str) -> float:
        return statistics.median(r[key] for r in train if r["backend"] == backend and r["n"] == n)

    rows = []
    for n in args.actors:
        local_ov = pooled("local", n, "overhead_s") if "local" in args.backends else None
        for b in args.backends:
            ov = pooled(b, n, "overhead_s")
            rows.append([b, n, pooled(b, n, "round_s"), pooled(b, n, "sample_s"), pooled(b, n, "learn_s"), ov,
                         ov / pooled(b, n, "round_s"), ov / local_ov if local_ov else None,
                         pooled(b, n, "sample_sps"), pooled(b, n, "sps"), pooled(b, n, "cold_round_s")])
    table = markdown_table(["backend", "actors", "round s", "sample s", "learn s", "overhead s",
                            "overhead / round", "overhead / local's", "sampling steps/s", "steps/s (whole round)",
                            "cold first round s"], rows, digits=[0, 0, 2, 2, 2, 3, 3, 2, 0, 0, 2])
    ray_ratios = [r[7] for r in rows if r[0] == "ray" and r[7] is not None]
    verdict = ("not measured" if not ray_ratios else
               f"**{'met' if max(ray_ratios) <= TARGET_RAY_RATIO else 'not met'}** "
               f"({', '.join(f'{x:.2f}×' for x in ray_ratios)} of local's overhead at "
               f"{', '.join(map(str, args.actors))} actors)")
    scale_rows = []
    for b, res in scale.items():
        for r in res:
            scale_rows.append([b, int(r["actors"]), r["cold_round_s"], r["round_s"], r["ideal_s"], r["overhead_s"],
                               r["overhead_per_invocation_ms"]])
    scale_table = markdown_table(["backend", "concurrent invocations", "cold round s", "warm round s",
                                  "ideal s (work / cores)", "overhead s", "overhead per invocation ms"],
                                 scale_rows, digits=[0, 0, 2, 2, 2, 3, 1])
    return f"""## 7. Backends side by side: local, Ray, Lithops (Hopper-v5)

Every backend runs on this one machine with the same concurrency ({cores}, one instance per core):
`local` (worker processes), `ray` (a local Ray cluster started by the run; Ray tasks, policy in the
object store), `lithops` (Lithops' localhost backend, `version: 1`; policy and replies in its storage).
Training runs: `minionsrl train --env-id {ENV} --backend B --actors n --fragment-length {args.steps}
--max-rounds {args.rounds} --max-concurrency {cores}`, {args.reps} repetitions interleaved across
backends; medians over rounds 2..{args.rounds - 1} and repetitions (round 1 is cold, round {args.rounds}
evaluates). Overhead = sample s − Σ(init_s + run_s) / min(n, cores). Learning is identical on every
backend (same seed, same actor counts: `tests/test_backend_conformance.py` checks it), so "learn s"
differs only by noise.

{table}

Target: Ray's per-round overhead within {TARGET_RAY_RATIO:g}× of local's: {verdict}.

Lithops' localhost backend starts a new job process for every round (every invocation is cold, and
it polls storage for status), which is what its overhead measures; on a cloud backend the same code
pays the platform's invoke and storage latencies instead, which were not measured here (no cloud
account; see docs/DEPLOY.md).

### `minionsrl scale`: 1..{args.max_actors} concurrent invocations of {args.scale_steps} steps

`minionsrl scale --env-id {ENV} --backend B --max-actors {args.max_actors} --steps {args.scale_steps}
--repeats 2 --max-concurrency {cores}`: a fresh backend per count, one cold round then the median of
2 warm rounds; ideal = the functions' summed init + run time / min(k, cores).

{scale_table}

{provenance(started)}
"""


def backends_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", nargs="+", default=["local", "ray", "lithops"])
    p.add_argument("--actors", type=int, nargs="+", default=[8, 32])
    p.add_argument("--steps", type=int, default=512, help="fragment length T of the training runs")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--max-actors", type=int, default=64)
    p.add_argument("--scale-steps", type=int, default=256)
    p.add_argument("--out", default=str(OUT / "backends.jsonl"))
    args = p.parse_args(argv)
    started, cores, out = time.time(), n_cores(), Path(args.out)
    train = []
    for rep in range(args.reps):
        for n in args.actors:
            for b in args.backends:
                res = train_once(b, n, args.steps, args.rounds, cores)
                train.append({**res, "rep": rep})
                append_jsonl(out, {"kind": "train", **res, "rep": rep})
                log(f"{b} n={n}: round {res['round_s']:.2f} s, overhead {res['overhead_s']:.3f} s")
    scale = {}
    for b in args.backends:
        scale[b] = scale_once(b, args.max_actors, args.scale_steps, cores)
        append_jsonl(out, {"kind": "scale", "backend": b, "rows": json.dumps(scale[b])})
        log(f"scale {b} done")
    section = backends_render(train, scale, args, cores, started)
    write_section("backends", section)
    print(section)


# -- engines ---------------------------------------------------------------------

class _Engine:
    """One way to step an env inside a function: ``build()`` makes it, ``run(actions)`` steps it once per action
    (resetting where an episode ends); ``envs`` actions go in per step (EnvPool's batch)."""

    def __init__(self, env_id: str, label: str, envs: int, carry: str, build: Any, run: Any) -> None:
        self.env_id, self.label, self.envs, self.carry, self.build, self.run = env_id, label, envs, carry, build, run


def _gym_run(env: Any, actions: Any) -> None:
    for a in actions:
        _, _, terminated, truncated, _ = env.step(a)
        if terminated or truncated:
            env.reset()


def _pool_run(pool: Any, actions: Any) -> None:  # EnvPool resets a finished env itself on its next step
    for a in actions:
        pool.step(a)


def _mujoco_run(env: Any, actions: Any) -> None:  # the physics alone: the frame skip's mj_step calls, no reset
    import mujoco

    model, data, frames = env.unwrapped.model, env.unwrapped.data, env.unwrapped.frame_skip
    for a in actions:
        data.ctrl[:] = a
        for _ in range(frames):
            mujoco.mj_step(model, data)


def _ale_run(env: Any, actions: Any) -> None:  # the emulator alone: 4 frames an agent step, no frame read
    ale, action_set = env.unwrapped.ale, env.unwrapped._action_set
    for a in actions:
        for _ in range(4):
            ale.act(action_set[a])
        if ale.game_over():
            ale.reset_game()


def _actions(space: Any, envs: int, steps: int, batched: bool, rng: Any) -> list[Any]:
    """``steps`` random actions: a batch of ``envs`` each for EnvPool, else one (an int where discrete)."""
    import numpy as np

    discrete = not space.shape
    a = (rng.integers(space.n, size=(steps, envs)) if discrete else
         rng.uniform(space.low, space.high, (steps, envs, *space.shape)).astype(np.float32))
    return list(a) if batched else [int(x[0]) if discrete else x[0] for x in a]


def _engines() -> list[_Engine]:
    import envpool
    import gymnasium as gym

    from minionsrl.function.envs import EnvSpec, make_env

    def pool(task: str, n: int, **kw: Any) -> Any:
        return lambda: envpool.make(task, env_type="gymnasium", num_envs=n, batch_size=n, num_threads=1, seed=0,
                                    **kw)

    def gym_atari() -> Any:  # what rollout functions ran before AtariGame
        env = gym.make("ALE/Pong-v5", frameskip=1, disable_env_checker=True)
        return gym.wrappers.FrameStackObservation(gym.wrappers.AtariPreprocessing(
            env, noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False), 4)

    sticky = {"repeat_action_probability": 0.25}  # v5's sticky actions (EnvPool's default is none)
    return [
        _Engine("Hopper-v5", "Gymnasium (the functions' engine)", 1, "yes (qpos, qvel)",
                lambda: make_env(EnvSpec("Hopper-v5")), _gym_run),
        _Engine("Hopper-v5", "EnvPool", 1, "no", pool("Hopper-v5", 1), _pool_run),
        _Engine("Hopper-v5", "EnvPool", 8, "no", pool("Hopper-v5", 8), _pool_run),
        _Engine("Hopper-v5", "the physics alone (mujoco.mj_step, 4 frames)", 1, "—",
                lambda: make_env(EnvSpec("Hopper-v5")), _mujoco_run),
        _Engine("ALE/Pong-v5", "Gymnasium AtariPreprocessing + FrameStackObservation", 1, "yes (ALE state)",
                gym_atari, _gym_run),
        _Engine("ALE/Pong-v5", "AtariGame (the functions' engine)", 1, "yes (ALE state)",
                lambda: make_env(EnvSpec("ALE/Pong-v5")), _gym_run),
        _Engine("ALE/Pong-v5", "EnvPool", 1, "no", pool("Pong-v5", 1, **sticky), _pool_run),
        _Engine("ALE/Pong-v5", "EnvPool", 8, "no", pool("Pong-v5", 8, **sticky), _pool_run),
        _Engine("ALE/Pong-v5", "the emulator alone (ALE, 4 frames)", 1, "—",
                lambda: make_env(EnvSpec("ALE/Pong-v5")), _ale_run),
    ]


def engines_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Env engines inside a function: CPU per agent step, build time")
    p.add_argument("--steps", type=int, default=3000, help="agent steps per measurement (all envs)")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    import numpy as np

    started, engines = time.time(), _engines()
    cpu: dict[int, list[float]] = {}
    build: dict[int, list[float]] = {}
    for _ in range(args.repeats):  # interleaved: every engine once a repeat
        for i, e in enumerate(engines):
            w0 = time.perf_counter()
            env = e.build()
            build.setdefault(i, []).append(time.perf_counter() - w0)
            steps = args.steps // e.envs
            acts = _actions(env.action_space, e.envs, steps, e.run is _pool_run, np.random.default_rng(0))
            if e.run is _pool_run:
                env.reset()
            else:
                env.reset(seed=0)  # outside the count: an ALE seed loads the ROM
            c0 = time.process_time()
            e.run(env, acts)
            cpu.setdefault(i, []).append((time.process_time() - c0) / (steps * e.envs))
            env.close()
    rows, base = [], {}
    for i, e in enumerate(engines):
        step_ms = 1e3 * min(cpu[i])
        base.setdefault(e.env_id, step_ms)
        rows.append([e.env_id, e.label, e.envs, step_ms, base[e.env_id] / step_ms, 1e3 * statistics.median(build[i]),
                     e.carry])
        log(f"{e.env_id} {e.label} x{e.envs}: {step_ms:.3f} ms CPU a step")
    physics_ms = next(r[3] for r in rows if r[0] == "Hopper-v5" and r[1].startswith("the physics alone"))
    section = f"""## Env engines inside a function: Gymnasium, EnvPool and our ALE driver

What a rollout function's env costs per agent step, on its own: random actions, {args.steps:,} agent steps per
measurement, the least CPU time of {args.repeats} interleaved repeats (CPU time, counting EnvPool's worker thread;
one worker, as a one-vCPU function would run it). "build" is the wall time to make the env (the median), which a
function pays per invocation where the env must be made anew. "carries an episode" is whether the engine can hand
an episode in progress to the next invocation (minionsrl carries them by default: `--carry-episodes`).

{markdown_table(["env", "engine", "envs", "CPU ms / agent step", "steps per CPU s vs first row", "build ms",
                 "carries an episode"], rows, [0, 0, 0, 3, 2, 1, 0])}

Why EnvPool is not a function's engine here, whatever its CPU row says against the functions' engine above it:
it cannot carry an episode (it has no state to get or set), and a fragment must depend only on its seed (its
`reset` takes no seed, so a pool would be built per invocation, at the "build" column's cost). Without the carry
every fragment would end its episodes (Hopper's 1,000-step episodes cut at 512), which changes what is learned and
hides the long episodes from the training returns. On Atari the functions' own driver (AtariGame: Gymnasium's
preprocessing frame for frame, on the emulator directly) keeps the carry; the emulator alone is its floor, as
MuJoCo's physics alone is Hopper's (2 cores stepping it and nothing else: {2e3 / physics_ms:,.0f} steps a second
here, the physical limit of any Hopper figure on this machine).

These are CPU milliseconds of the machine that ran them, and the machines this project's sessions get differ:
on an AMD EPYC (2026-11-29) the Gymnasium row read 0.279 ms, on another machine 0.092-0.096 ms (issue 58's
measure, physics 0.062-0.065 ms), on this one the table above. Compare rows within one table, not across
machines: the ratio to the physics is what carries over.

{provenance(started)}
"""
    write_section("engines", section)
    print(section)


MODES = {"local": main, "backends": backends_main, "engines": engines_main}


if __name__ == "__main__":
    run_modes(MODES)
