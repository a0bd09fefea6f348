"""Hopper-v5 against the peers: our final return and wall time against SB3 PPO (BENCHMARKS §2), RLlib PPO beside
ours and SB3 (docs/results/rllib-hopper.md), whose run is this file too, run by the RLlib venv's python, and our own
JAX PPO on EnvPool (bench/peer_ppo.py) at equal work.

    .venv/bin/python bench/hopper.py [sb3] [--seeds 1 2 3] [--steps 1000000] [--sb3-steps 50000]
    .venv/bin/python bench/hopper.py rllib [all|setup|window|full|report] [--seeds 1 2 3] [--steps 1000000] ...
    bench/out/.venv-rllib/bin/python bench/hopper.py rllib-worker JSON
    .venv/bin/python bench/hopper.py peer [window|full|all|report|budget] [--seeds 1 2 3 4 5] ...

``sb3``: Benchmark 2: Hopper-v5, 1M steps — our final return and wall time vs SB3 PPO's extrapolated wall time.

For each seed, side by side: SB3 PPO with its defaults learns ``--sb3-steps`` steps (its steps/s is
extrapolated to ``--steps``), then our Trainer (mujoco preset, 8 actors, evaluation only at the end)
trains ``--steps`` steps. Each run is a fresh process; each result is appended to
bench/out/hopper.jsonl as soon as it exists, and the doc section is rewritten after every seed.

    .venv/bin/python bench/hopper.py [--seeds 1 2 3] [--steps 1000000] [--sb3-steps 50000]

``rllib``: RLlib PPO on Hopper-v5 beside ours and SB3: returns over 1M steps, and throughput measured side by side.

RLlib (``ray[rllib]==2.60.0``) pins ``gymnasium==1.2.2``, so it runs in a virtual environment of its own,
``bench/out/.venv-rllib``, which this script creates when absent (torch 2.13.0 first, from the CPU wheel on
this machine's disk, then ray[rllib], gymnasium[mujoco] and mujoco). The RLlib run itself is
bench/hopper.py rllib-worker, executed by that venv's python; this script only starts it and reads the JSON lines it
writes (nothing is unpickled). RLlib gets our ``mujoco`` preset's PPO hyper-parameters (``hyper_parameters``
says how each maps, and which cannot).

Phases (default: all, in this order):

- ``setup``: create the venv if absent.
- ``window``: per seed, back to back, SB3 PPO (its defaults), our Trainer (mujoco preset, 8 actors) and
  RLlib PPO (2 env runners) each train ``--window-steps`` steps in a fresh process; steps/s of each training
  loop, and 1M-step wall times extrapolated as hopper.py does for SB3 (start-up as measured + loop time scaled).
  Results: bench/out/rllib_hopper_window.jsonl.
- ``full``: RLlib trains ``--steps`` steps per seed, one seed at a time, appending one record per iteration to
  bench/out/rllib-hopper-s{seed}.jsonl as it goes (checkpoint every ``--ckpt-every`` iterations: a rerun
  resumes a cut seed from its last checkpoint and skips finished ones).
- ``report``: the table, printed and written to docs/results/rllib-hopper.md (also after every phase).

    .venv/bin/python bench/hopper.py rllib [all|setup|window|full|report] [--seeds 1 2 3] [--steps 1000000]
        [--window-steps 50000] [--reuse]

``peer``: Hopper-v5, ours beside ``bench/peer_ppo.py`` (our own JAX PPO on EnvPool in CleanRL's recipe) at equal
work: the peer runs the batch (8 envs × 512), minibatch size, epochs and PPO constants our Trainer resolves for
Hopper-v5 (mujoco preset, 8 actors). Phases (default: window; ``all``: window, then full):

- ``window``: per seed, back to back in fresh processes (order alternating by seed), ours and the peer each train
  ``--window-steps`` (200k) steps, then the peer's pool steps random actions ``--raw-steps`` times (the engine's
  ceiling): steps/s of each training loop, the ratio ours/peer, the 1-min load before and after, CPU seconds.
- ``full``: per seed, ours then the peer, ``--steps`` (1M) each with a 10-episode deterministic evaluation at the
  end: final train and eval returns, bootstrap intervals over seeds, wall times.
- ``report``: only write the section again.
- ``budget``: where a round's time and CPU go, in one script run (its own section, "hopper-round-budget"): the
  rollout function's step by part (the physics alone, Gymnasium's step around it, the policy, our loop), the rollout
  function on every core at once, ours for ``--window-steps`` steps in a child process (each round's wall split and
  the CPU of the functions, their instances, the learner's thread and its other threads), then the peer and its
  pool stepping raw, with the limits they imply (the physics, the synchronous round, our CPU ceiling) beside the
  target. One record per run in bench/out/peer_budget.jsonl (seed: the first of ``--seeds``); ``--render`` writes
  the section again from the latest.

Each result is appended to bench/out/peer_hopper.jsonl as it comes; a rerun skips what is there (``--fresh``
measures again). The section (docs/benchmarks/, "hopper-peer") is written once there is a result; ``--out-dir`` and
``--doc`` send both elsewhere (smoke runs).

    .venv/bin/python bench/hopper.py peer [window|full|all|report|budget] [--seeds 1 2 3 4 5] [--window-steps 200000]
        [--steps 1000000] [--raw-steps 100000] [--peer-threads 2] [--fresh] [--out-dir DIR] [--doc FILE]

``rllib-worker``: RLlib PPO on Hopper-v5: the child process of ``rllib``, run by bench/out/.venv-rllib's python
only.

    bench/out/.venv-rllib/bin/python bench/hopper.py rllib-worker JSON

JSON holds ``seed``, ``steps`` (stop once this many env steps are sampled), ``out`` (a JSON-lines file the run
appends to as it goes), ``work`` (a scratch folder: episode logs, checkpoint), ``ckpt_every`` (iterations
between checkpoints, 0: none), ``lr_horizon`` (env steps over which the learning rate anneals to 0) and the
hyper-parameters ``hp`` (see bench/hopper.py rllib, which maps our mujoco preset onto RLlib's names).

Records written to ``out`` (one JSON object per line, flushed at once): ``start`` (a process segment:
set-up time, where it resumed), ``iter`` (one per ``algo.train()``: env steps sampled so far, the
cumulative wall time of the training loop, the raw returns and lengths of the training episodes that
finished in it), ``ckpt`` (a checkpoint was written after that iteration) and ``done``. A rerun with a
``done`` record does nothing; without one it resumes from the last checkpoint (records after it are
dropped and re-run) or, with none, starts again. Nothing here is unpickled by the caller: it only
reads this JSON.

Raw (unnormalised) returns: the rewards RLlib sees are scaled (gymnasium's ``NormalizeReward``, as our
``normalize_reward`` and CleanRL do), so RLlib's own ``episode_return_mean`` is not the Hopper return.
A wrapper under the scaling writes each finished episode's true return to a per-process file in ``work``;
after each iteration the driver of this process collects the new lines into the ``iter`` record.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import (
    OUT,
    ROOT,
    append_jsonl,
    find_result,
    fmt,
    load_jsonl,
    log,
    markdown_table,
    mean,
    met,
    n_cores,
    provenance,
    ratio,
    reproduce_command,
    run_child,
    run_minionsrl,
    run_modes,
    run_sb3,
    sb3_threads_note,
    write_section,
)

# -- sb3 (was hopper.py) --------------------------------------------------------

ENV = "Hopper-v5"
TARGET_RETURN, TARGET_RATIO = 2500.0, 0.2
CLEANRL_HOPPER = 2383  # CleanRL PPO, Hopper-v4, 1M steps, mean of 3 seeds (DESIGN §8)


def sb3_extrapolated(sb3: dict[str, Any], steps: int) -> float:
    """SB3 wall time for ``steps``: process start-up and setup as measured, learn() scaled linearly."""
    startup = sb3["process_wall_s"] - sb3["learn_s"] - sb3.get("eval_s", 0.0)
    return startup + sb3["learn_s"] * steps / sb3["steps"]


def ours(seed: int, steps: int, actors: int) -> dict[str, Any]:
    run_dir = OUT / "runs" / f"hopper-s{seed}-{int(time.time())}"
    shutil.rmtree(run_dir, ignore_errors=True)
    return run_minionsrl(dict(env_id=ENV, preset="auto", actors=actors, seed=seed, total_timesteps=steps,
                              eval_every=0, progress=False, tensorboard=False, run_dir=str(run_dir)))


def learner_share(run_dir: str) -> float | None:
    """Fraction of the run's round time spent in the PPO update (from metrics.csv), None if unreadable."""
    from minionsrl.loop.metrics import read_metrics  # lazily: the RLlib venv imports this file, without minionsrl

    try:
        rows = read_metrics(run_dir)
        return sum(float(r["learn_s"]) for r in rows) / sum(float(r["round_s"]) for r in rows)
    except (OSError, KeyError, ValueError, ZeroDivisionError):
        return None


def render(results: list[dict[str, Any]], args: argparse.Namespace, started: float, ended: float) -> str:
    rows, ratios = [], []
    for r in results:
        m, s = r["ours"], r["sb3"]
        sb3_wall = sb3_extrapolated(s, args.steps)
        rr = ratio(m["process_wall_s"], sb3_wall)
        ratios.append(rr)
        rows.append([r["seed"], m["train_return_last100"], m["final_eval_return"], m["process_wall_s"], m["wall_s"],
                     m["env_steps"] / m["wall_s"], s["steps"] / s["learn_s"], sb3_wall, rr,
                     learner_share(m.get("run_dir", "")), f"{_span(m)} / {_span(s)}"])
    ret = mean([r["ours"]["train_return_last100"] for r in results])
    ev = mean([r["ours"]["final_eval_return"] for r in results])
    mean_ratio = mean(ratios)
    pooled = ratio(sum(r["ours"]["process_wall_s"] for r in results),
                   sum(sb3_extrapolated(r["sb3"], args.steps) for r in results))
    table = markdown_table(
        ["seed", "train return (last 100 ep.)", "final eval return (10 ep.)", "our wall s (process)",
         "our wall s (run)", "our steps/s (run)", "SB3 steps/s (learn)", f"SB3 wall s for {args.steps:,} (extrap.)",
         "ratio ours/SB3", "our learner's share of the round time", "measured at (ours / SB3)"], rows,
        digits=[0, 1, 1, 1, 1, 0, 0, 0, 3, 2, 0])
    done = len(results)
    status = ("" if done == len(args.seeds) else
              f"\n**Incomplete: {done} of {len(args.seeds)} seeds finished** when this section was written.\n")
    threads_note = sb3_threads_note(args.sb3_threads)
    reuse_note = (" (with `--reuse`, results of an earlier cut run were taken from bench/out/hopper.jsonl, so a "
                  "seed's two measurements may not be adjacent in time)") if args.reuse else ""
    ok_ret = ret is not None and ret >= TARGET_RETURN
    ok_ratio = mean_ratio is not None and mean_ratio <= TARGET_RATIO
    ok_pooled = pooled is not None and pooled <= TARGET_RATIO
    return f"""## 2. Hopper-v5, {args.steps:,} steps: return and wall time vs SB3 PPO

Ours: `Trainer` with env {ENV}, the `mujoco` preset (picked by `auto`: CleanRL's hyper-parameters,
T = 512), {args.actors} actors, `eval_every=0` (one 10-episode evaluation at the end only, since SB3's
training does no evaluation either), `progress=False, tensorboard=False`, in a fresh process per seed.
SB3: `PPO("MlpPolicy", "{ENV}", seed=s).learn({args.sb3_steps:,})` with SB3's defaults, in a fresh
process, measured right before our run of the same seed{reuse_note}; its wall time for {args.steps:,} steps
is extrapolated as (process start-up + setup) + learn time × {args.steps:,} / {args.sb3_steps:,}.
{threads_note}
"our wall s (process)" is launch to exit of our process (what a user waits for, final evaluation
included); "run" is the Trainer's own `wall_s`. Reference: CleanRL PPO reports {CLEANRL_HOPPER} on
Hopper-v4 at 1M steps (mean of 3 seeds, last-100-episode training return).
{status}
{table}

| | mean over {done} seed(s) | target | met? |
|---|---:|---:|---|
| train return, last 100 episodes | {fmt(ret)} | ≥ {TARGET_RETURN:,.0f} | {met(ok_ret)} |
| final eval return | {fmt(ev)} | — | — |
| wall-time ratio ours / SB3 (extrapolated) | {fmt(mean_ratio, 3)} | ≤ {TARGET_RATIO} | {met(ok_ratio)} |
| same, ratio of the summed wall times | {fmt(pooled, 3)} | ≤ {TARGET_RATIO} | {met(ok_pooled)} |

The per-seed ratios spread from {fmt(min(ratios), 2)} to {fmt(max(ratios), 2)}: SB3's {args.sb3_steps:,}-step window
lasts a minute or two and our 1M-step run many minutes, and the background load changed in between
(the "measured at" column gives both windows). Read them as a range, not as a precise number.
Where our time goes: the round is synchronous, and the PPO update (10 epochs of 64-sample
minibatches over each 4,096-step batch, one compiled JAX program on one XLA thread) takes the share shown of
every round while the rollout functions wait; the rest is sampling on 2 cores. A ratio of 0.2 means 5× SB3's
steps/s on 2 cores.

{provenance(started, ended)}
"""


def _span(rec: dict[str, Any]) -> str:
    """Clock time over which a result was measured."""
    start, end = (time.strftime("%H:%M", time.localtime(rec[k])) for k in ("start", "end"))
    return f"{start}–{end}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--sb3-steps", type=int, default=50_000, help="steps SB3 learns to measure its steps/s")
    p.add_argument("--actors", type=int, default=8)
    p.add_argument("--sb3-threads", type=int, default=1, help="torch threads for SB3 (0: torch's default)")
    p.add_argument("--reuse", action="store_true", help="take results already in --out instead of re-running")
    p.add_argument("--out", default=str(OUT / "hopper.jsonl"))
    args = p.parse_args(argv)
    started = time.time()
    out = Path(args.out)
    previous = load_jsonl(out) if args.reuse else []
    results: list[dict[str, Any]] = []
    for seed in args.seeds:
        log(f"seed {seed}: SB3 PPO {args.sb3_steps:,} steps")
        sb3 = find_result(previous, kind="sb3", seed=seed, steps=args.sb3_steps, threads=args.sb3_threads)
        if sb3 is None:
            t = time.time()
            sb3 = {"kind": "sb3", "seed": seed, "threads": args.sb3_threads, "start": t,
                   **run_sb3(ENV, seed, args.sb3_steps, threads=args.sb3_threads or None), "end": time.time()}
            append_jsonl(out, sb3)
        log(f"seed {seed}: SB3 {args.sb3_steps / sb3['learn_s']:.0f} steps/s; ours {args.steps:,} steps")
        done = [r for r in previous if r["kind"] == "ours" and r["seed"] == seed and r["env_steps"] >= args.steps]
        m = done[-1] if done else None
        if m is None:
            t = time.time()
            m = {"kind": "ours", "seed": seed, "actors": args.actors, "start": t,
                 **ours(seed, args.steps, args.actors), "end": time.time()}
            append_jsonl(out, m)
        log(f"seed {seed}: ours return {m['train_return_last100']}, eval {m['final_eval_return']}, "
            f"{m['process_wall_s']:.0f} s")
        results.append({"seed": seed, "sb3": sb3, "ours": m})
        first = min(r[k]["start"] for r in results for k in ("ours", "sb3"))
        last = max(r[k]["end"] for r in results for k in ("ours", "sb3"))
        section = render(results, args, min(started, first), last)
        write_section("hopper", section)
    print(section)


# -- rllib (was rllib_hopper.py) ------------------------------------------------

VENV = OUT / ".venv-rllib"
VPY = VENV / "bin" / "python"
WORKER = Path(__file__).resolve()  # run as `hopper.py rllib-worker JSON` by the RLlib venv's python
DOC = ROOT / "docs" / "results" / "rllib-hopper.md"
WINDOW_JSONL = OUT / "rllib_hopper_window.jsonl"
TORCH, RAY, GYM, MUJOCO = "torch==2.13.0", "ray[rllib]==2.60.0", "gymnasium[mujoco]==1.2.2", "mujoco==3.3.7"
ACTORS = 8  # our bench's actor count (bench/hopper.py): the batch RLlib gets is ACTORS x fragment_length
TARGET_RETURN = 2500.0


# -- the venv ------------------------------------------------------------------------------------


def _pip(*args: str) -> None:
    cmd = ["nice", "-n", "10", str(VPY), "-m", "pip", "install", "--disable-pip-version-check", *args]
    log("  " + " ".join(cmd[3:]))
    subprocess.run(cmd, check=True)


def _torch_version() -> str | None:
    proc = subprocess.run([str(VPY), "-m", "pip", "show", "torch"], capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    return None


def ensure_venv() -> None:
    """Create bench/out/.venv-rllib when absent (its marker file says a complete install finished)."""
    marker = VENV / "minionsrl-bench-ok"
    if marker.exists():
        return
    log(f"creating {VENV.relative_to(ROOT)} (torch, then ray[rllib], gymnasium[mujoco], mujoco)")
    if not VPY.exists():
        subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(VENV)], check=True)
    # torch first, from the CPU wheel on disk (pip's find-links); then a constraint keeps pip from replacing it
    _pip(TORCH)
    torch_v = _torch_version()
    if not torch_v or not torch_v.startswith("2.13.0"):
        raise SystemExit(f"torch in {VENV} is {torch_v}, not 2.13.0")
    constraints = VENV / "constraints.txt"
    constraints.write_text(f"torch=={torch_v}\n")
    _pip("-c", str(constraints), RAY, GYM, MUJOCO)
    if _torch_version() != torch_v:
        raise SystemExit(f"pip replaced torch {torch_v} by {_torch_version()} in {VENV}")
    freeze = subprocess.run([str(VPY), "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    marker.write_text(freeze)
    log(f"venv ready: torch {torch_v}")


def venv_versions() -> str:
    marker = VENV / "minionsrl-bench-ok"
    if not marker.exists():
        return "venv not created"
    pins = {}
    for line in marker.read_text().splitlines():
        name, _, version = line.partition("==")
        pins[name.lower()] = version
    return ", ".join(f"{k} {pins.get(k, '?')}" for k in ("ray", "torch", "gymnasium", "mujoco", "numpy"))


# -- hyper-parameters ----------------------------------------------------------------------------


def hyper_parameters() -> tuple[dict[str, Any], list[tuple[str, str, str]]]:
    """RLlib's PPO settings from our mujoco preset, and the mapping as (ours, RLlib, note) rows."""
    from minionsrl.config import TrainConfig, resolve

    # what our Trainer runs on Hopper-v5 (preset auto: the mujoco family, then any Hopper row of ENV_PRESETS)
    d = resolve(TrainConfig(env_id=ENV, actors=ACTORS, run_dir="unused"), "mujoco")
    p = {k: d.get(k) for k in ("fragment_length", "learning_rate", "lr_schedule", "gamma", "gae_lambda",
                                "clip_coef", "update_epochs", "ent_coef", "vf_coef", "max_grad_norm",
                                "normalize_obs", "normalize_reward", "clip_vloss", "norm_adv")}
    batch = ACTORS * p["fragment_length"]
    p["minibatch_size"] = d.learner.minibatch_size or batch // d.learner.num_minibatches
    hp = dict(num_env_runners=2, num_envs_per_env_runner=ACTORS // 2, rollout_fragment_length=p["fragment_length"],
              train_batch_size_per_learner=batch, lr=p["learning_rate"], anneal_lr=p["lr_schedule"] == "anneal",
              gamma=p["gamma"], lambda_=p["gae_lambda"], clip_param=p["clip_coef"], num_epochs=p["update_epochs"],
              minibatch_size=p["minibatch_size"], entropy_coeff=p["ent_coef"],
              # ours: vf_coef * 0.5 * (v - R)^2 (CleanRL); RLlib: vf_loss_coeff * (v - R)^2
              vf_loss_coeff=p["vf_coef"] * 0.5, vf_clip_param=float("inf"),
              grad_clip=p["max_grad_norm"] or None, normalize_obs=p["normalize_obs"], clip_obs=d.learner.clip_obs,
              normalize_reward=p["normalize_reward"], clip_reward=d.learner.clip_reward,
              hidden_sizes=list(d.learner.hidden_sizes))
    rows = [
        (f"{ACTORS} actors × fragment_length {p['fragment_length']}",
         f"num_env_runners=2, num_envs_per_env_runner={ACTORS // 2}, rollout_fragment_length={p['fragment_length']}, "
         f"train_batch_size_per_learner={batch}", f"the same {ACTORS} environments × {p['fragment_length']} steps "
         "per batch"),
        (f"learning_rate {p['learning_rate']}, lr_schedule {p['lr_schedule']}",
         f"lr=[[0, {p['learning_rate']}], [steps, 0.0]]", "linear to 0 over the run, by sampled env steps"),
        (f"gamma {p['gamma']}, gae_lambda {p['gae_lambda']}", f"gamma={p['gamma']}, lambda_={p['gae_lambda']}", ""),
        (f"clip_coef {p['clip_coef']}", f"clip_param={p['clip_coef']}", ""),
        (f"update_epochs {p['update_epochs']}, minibatch_size {p['minibatch_size']}",
         f"num_epochs={p['update_epochs']}, minibatch_size={p['minibatch_size']}", "shuffled every epoch in both"),
        (f"ent_coef {p['ent_coef']}", f"entropy_coeff={p['ent_coef']}", ""),
        (f"vf_coef {p['vf_coef']} (loss 0.5·(v−R)²)", f"vf_loss_coeff={p['vf_coef'] * 0.5}",
         "RLlib's value loss has no ½: the same gradient"),
        (f"clip_vloss {p['clip_vloss']} (value change clipped at ±{p['clip_coef']})", "vf_clip_param=inf",
         "**not matched**: RLlib can only clip the squared error (default 10), not the change of the value; "
         "we turn its clipping off"),
        (f"max_grad_norm {p['max_grad_norm']}", f"grad_clip={p['max_grad_norm']}, grad_clip_by='global_norm'", ""),
        (f"norm_adv {p['norm_adv']} (per minibatch)", "(always on)",
         "**differs**: RLlib standardises advantages once over the whole batch, not per minibatch"),
        (f"normalize_obs {p['normalize_obs']}, clip_obs {d.learner.clip_obs}",
         f"env_to_module_connector=MeanStdFilter(clip_by_value={d.learner.clip_obs})",
         "running mean/std, synchronised over env runners every iteration (ours: merged by the learner every round)"),
        (f"normalize_reward {p['normalize_reward']}, clip_reward {d.learner.clip_reward}",
         f"gymnasium NormalizeReward(gamma={p['gamma']}) + clip ±{d.learner.clip_reward} in the env creator",
         "**differs**: RLlib has no reward scaling; the wrappers (CleanRL's) keep statistics per environment, ours "
         "are merged over actors"),
        (f"hidden_sizes {d.learner.hidden_sizes}, tanh, separate actor and critic",
         f"fcnet_hiddens={d.learner.hidden_sizes}, fcnet_activation='tanh', vf_share_layers=False",
         "RLlib's default shares the trunk; turned off"),
        ("state-independent log std (0 at start)", "free_log_std=True", ""),
        ("orthogonal init: √2 hidden, 0.01 policy head, 1.0 value head",
         "fcnet_kernel_initializer='orthogonal_' (gain √2), zero biases",
         "**partly**: RLlib's heads take torch's default init (no setting for them)"),
        ("kl_coef 0 (no KL penalty)", "use_kl_loss=False", "RLlib's default is an adaptive KL penalty"),
        ("Adam eps 1e-5 (CleanRL)", "Adam (torch default eps 1e-8)", "**not matched**: not a PPOConfig setting"),
        ("learner: one thread", "torch.set_num_threads(1) in the learner process; env runners: Ray's one "
         "thread per actor", "as SB3 in this bench"),
    ]
    return hp, rows


# -- runs ----------------------------------------------------------------------------------------


def run_rllib(seed: int, steps: int, out: Path, work: Path, ckpt_every: int, lr_horizon: int,
              log_path: Path, timeout_s: float | None = None) -> dict[str, Any]:
    """Run the worker in the RLlib venv; returns its last stdout line (JSON) plus ``process_wall_s``."""
    hp, _ = hyper_parameters()
    args = {"seed": seed, "steps": steps, "out": str(out), "work": str(work), "ckpt_every": ckpt_every,
            "lr_horizon": lr_horizon, "threads": 1, "env_id": ENV, "hp": hp,
            "ray_tmp": f"/tmp/ray-mrl-{os.getpid()}-{seed}"}
    t0 = time.perf_counter()
    with log_path.open("a") as err:
        proc = subprocess.run([str(VPY), str(WORKER), "rllib-worker", json.dumps(args)], cwd=ROOT,
                              stdout=subprocess.PIPE,
                              stderr=err, text=True, timeout=timeout_s)
    wall = time.perf_counter() - t0
    shutil.rmtree(args["ray_tmp"], ignore_errors=True)
    if proc.returncode != 0:
        raise RuntimeError(f"RLlib worker failed (exit {proc.returncode}); see {log_path}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = wall
    return result


def window_records() -> list[dict[str, Any]]:
    """bench/out/rllib_hopper_window.jsonl (RLlib records first written with the worker's kind "done" read as
    "rllib")."""
    return [{**r, "kind": "rllib"} if r.get("kind") == "done" else r for r in load_jsonl(WINDOW_JSONL)]


def phase_window(args: argparse.Namespace) -> None:
    previous = window_records() if args.reuse else []
    w = args.window_steps
    for seed in args.seeds:
        if find_result(previous, kind="sb3", seed=seed, steps=w) is None:
            log(f"window seed {seed}: SB3 {w:,} steps")
            t = time.time()
            rec = {"kind": "sb3", "seed": seed, "start": t, **run_sb3(ENV, seed, w, threads=1), "end": time.time()}
            append_jsonl(WINDOW_JSONL, rec)
        if find_result(previous, kind="ours", seed=seed, steps=w) is None:
            log(f"window seed {seed}: ours {w:,} steps")
            run_dir = OUT / "runs" / f"rllib-window-ours-s{seed}-{int(time.time())}"
            t = time.time()
            m = run_minionsrl(dict(env_id=ENV, preset="auto", actors=ACTORS, seed=seed, total_timesteps=w,
                                   eval_every=0, eval_episodes=1, progress=False, tensorboard=False,
                                   run_dir=str(run_dir)))
            rec = {"kind": "ours", "seed": seed, "steps": w, "start": t, "end": time.time(),
                   **{k: m.get(k) for k in ("env_steps", "wall_s", "process_wall_s", "train_return_last100")}}
            append_jsonl(WINDOW_JSONL, rec)
            shutil.rmtree(run_dir, ignore_errors=True)
        if find_result(previous, kind="rllib", seed=seed, steps=w) is None:
            log(f"window seed {seed}: RLlib {w:,} steps")
            out = OUT / f"rllib-window-s{seed}.jsonl"
            out.unlink(missing_ok=True)
            t = time.time()
            r = run_rllib(seed, w, out, OUT / f"rllib-window-s{seed}.work", 0, args.steps,
                          OUT / f"rllib-window-s{seed}.log")
            rec = {**r, "kind": "rllib", "seed": seed, "steps": w, "start": t, "end": time.time()}
            append_jsonl(WINDOW_JSONL, rec)
        report(args)


def phase_full(args: argparse.Namespace) -> None:
    for seed in args.seeds:
        out = OUT / f"rllib-hopper-s{seed}.jsonl"
        if any(r["kind"] == "done" for r in load_jsonl(out)):
            log(f"full seed {seed}: already finished, skipped")
            continue
        log(f"full seed {seed}: RLlib {args.steps:,} steps -> {out.relative_to(ROOT)}")
        r = run_rllib(seed, args.steps, out, OUT / f"rllib-hopper-s{seed}.work", args.ckpt_every, args.steps,
                      OUT / f"rllib-hopper-s{seed}.log")
        log(f"full seed {seed}: {r.get('env_steps')} steps in {r.get('wall_s', 0):.0f} s")
        report(args)


# -- report --------------------------------------------------------------------------------------


def full_progress(seed: int) -> dict[str, Any] | None:
    """What a seed's full run has reached: steps, loop wall time, last-100 return, finished or not."""
    recs = load_jsonl(OUT / f"rllib-hopper-s{seed}.jsonl")
    its = [r for r in recs if r["kind"] == "iter"]
    if not its:
        return None
    returns = [x for r in its for x in r["returns"]]
    starts = [r for r in recs if r["kind"] == "start"]
    last = its[-1]  # RLlib's timers are moving averages (EMA): the last iteration's are the run's recent share
    learn, sample = last.get("learn_s"), last.get("sample_s")
    return {"seed": seed, "env_steps": its[-1]["env_steps"], "wall_s": its[-1]["wall_s"],
            "setup_s": starts[0]["setup_s"] if starts else None, "segments": len(starts),
            "hp": [r.get("hp") for r in starts],
            "episodes": len(returns), "last100": mean(returns[-100:]), "done": any(r["kind"] == "done" for r in recs),
            "start": starts[0]["t"] if starts else its[0]["t"], "end": its[-1]["t"],
            "learn_share": ratio(learn, learn + sample) if learn is not None and sample is not None else None}


def ours_full() -> list[dict[str, Any]]:
    """Our 1M-step runs from bench/hopper.py (bench/out/hopper.jsonl), the latest per seed, if any."""
    latest: dict[int, dict[str, Any]] = {}
    for r in load_jsonl(OUT / "hopper.jsonl"):
        if r.get("kind") == "ours" and r.get("env_steps", 0) >= 1_000_000:
            latest[r["seed"]] = r
    return [latest[s] for s in sorted(latest)]


def _extrap(startup: float, loop_s: float, steps: int, target: int) -> float:
    return startup + loop_s * target / steps


def _hm(t: float) -> str:
    return time.strftime("%H:%M", time.localtime(t))


def report(args: argparse.Namespace) -> str:
    hp_now, mapping = hyper_parameters()
    hp_now = json.loads(json.dumps(hp_now))  # as the worker's records hold it
    win = window_records()
    n = args.steps
    rows, per = [], {"ours": [], "sb3": [], "rllib": []}
    seeds = sorted({r["seed"] for r in win})
    for seed in seeds:
        s = find_result(win, kind="sb3", seed=seed, steps=args.window_steps)
        m = find_result(win, kind="ours", seed=seed, steps=args.window_steps)
        r = find_result(win, kind="rllib", seed=seed, steps=args.window_steps)
        if not (s and m and r):
            continue
        sps = {"sb3": s["steps"] / s["learn_s"], "ours": m["env_steps"] / m["wall_s"],
               "rllib": r["env_steps"] / r["wall_s"]}
        wall = {"sb3": _extrap(s["process_wall_s"] - s["learn_s"], s["learn_s"], s["steps"], n),
                "ours": _extrap(m["process_wall_s"] - m["wall_s"], m["wall_s"], m["env_steps"], n),
                "rllib": _extrap(r["process_wall_s"] - r["wall_s"], r["wall_s"], r["env_steps"], n)}
        for k in per:
            per[k].append((sps[k], wall[k]))
        rows.append([seed, sps["ours"], sps["sb3"], sps["rllib"], wall["ours"], wall["sb3"], wall["rllib"],
                     ratio(wall["ours"], wall["sb3"]), ratio(wall["rllib"], wall["sb3"]),
                     ratio(wall["ours"], wall["rllib"]), f"{_hm(s['start'])}–{_hm(r['end'])}"])
    window_table = markdown_table(
        ["seed", "ours steps/s", "SB3 steps/s", "RLlib steps/s", f"ours wall s for {n:,} (extrap.)",
         "SB3 (extrap.)", "RLlib (extrap.)", "ours / SB3", "RLlib / SB3", "ours / RLlib", "measured"],
        rows, digits=[0, 0, 0, 0, 0, 0, 0, 3, 3, 3, 0]) if rows else "_No window measured yet._"

    def pooled(k: str) -> float | None:
        return sum(w for _, w in per[k]) if per[k] else None

    full = [f for f in (full_progress(s) for s in args.seeds) if f]
    stale = [f["seed"] for f in full if any(h != hp_now for h in f["hp"])]
    stale_note = (f"\n**Seeds {stale} ran (at least in part) with hyper-parameters other than today's preset's** (the "
                  "`start` records of their jsonl hold what they ran with): delete their files to rerun them.\n"
                  if stale else "")
    full_rows = [[f["seed"], f["env_steps"], "finished" if f["done"] else "**partial** (cut or still running)",
                  f["episodes"], f["last100"], f["wall_s"], f["env_steps"] / f["wall_s"], f["learn_share"],
                  f["segments"], f"{_hm(f['start'])}–{_hm(f['end'])}"] for f in full]
    full_table = markdown_table(
        ["seed", "env steps reached", "status", "training episodes", "train return (last 100 ep.)",
         "loop wall s", "steps/s", "learner's share (RLlib's smoothed timers)", "process segments", "measured"],
        full_rows, digits=[0, 0, 0, 0, 1, 0, 0, 2, 0, 0]) if full_rows else "_No full run yet._"
    ours = ours_full()
    ours_ret = mean([o["train_return_last100"] for o in ours])
    finished = [f for f in full if f["done"]]
    rl_cell = (f"{fmt(mean([f['last100'] for f in finished]))} ({len(finished)} of {len(args.seeds)} seeds finished "
               f"× {n:,})" if finished else "no seed finished")
    partial = [f"seed {f['seed']}: {fmt(f['last100'])} at {f['env_steps']:,} steps" for f in full if not f["done"]]
    if partial:
        rl_cell += "; **partial** (not a 1M result): " + ", ".join(partial)
    summary = markdown_table(
        ["", "ours (minionsrl)", "SB3 PPO (defaults)", "RLlib PPO (our hyper-parameters)"],
        [["train return, last 100 episodes (mean over seeds)",
          (f"{fmt(ours_ret)} ({len(ours)} seeds × 1M, bench/out/hopper.jsonl: the bench/hopper.py run of "
           f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(ours[0]['start']))})") if ours else "—",
          "— (a throughput window only, as in BENCHMARKS §2)",
          rl_cell if full else "—"],
         ["training-loop steps/s in the side-by-side window (mean)", fmt(mean([x for x, _ in per["ours"]]), 0),
          fmt(mean([x for x, _ in per["sb3"]]), 0), fmt(mean([x for x, _ in per["rllib"]]), 0)],
         [f"wall s for {n:,} steps, extrapolated from the window (summed over seeds / seeds)",
          fmt(ratio(pooled("ours"), len(per["ours"])), 0), fmt(ratio(pooled("sb3"), len(per["sb3"])), 0),
          fmt(ratio(pooled("rllib"), len(per["rllib"])), 0)],
         ["wall-time ratio to SB3 (summed wall times)", fmt(ratio(pooled("ours"), pooled("sb3")), 3), "1",
          fmt(ratio(pooled("rllib"), pooled("sb3")), 3)]], digits=1)
    hp_table = markdown_table(["ours (mujoco preset)", "RLlib 2.60 (new API stack)", "note"], mapping)
    times = [r["start"] for r in win] + [f["start"] for f in full]
    ends = [r["end"] for r in win] + [f["end"] for f in full]
    cmd = ".venv/bin/python bench/hopper.py rllib"
    text = f"""# RLlib PPO on Hopper-v5 beside minionsrl and SB3

Written by `bench/hopper.py rllib` (RLlib runs in `bench/out/.venv-rllib`, created by the script: {venv_versions()};
RLlib's own code is `bench/hopper.py rllib-worker`). RLlib PPO: new API stack, 2 env runners ×
{ACTORS // 2} environments, one local learner (one torch thread, in the process that drives the run), our `mujoco`
preset's hyper-parameters (table at the end); `RAY_worker_niceness=0`, so that the env runners keep the niceness of
the process that started them (Ray's default adds 15, which on this shared machine would handicap RLlib). Returns
are the raw Hopper returns of the training episodes (a wrapper under the reward scaling logs them), "last 100" as our
bench reports it: the mean of the last 100 finished training episodes.

## Summary

{summary}

## Throughput, side by side

Each row is one seed's three runs, back to back: SB3 `PPO("MlpPolicy", "{ENV}", seed=s).learn({args.window_steps:,})`
(defaults, one torch thread), our Trainer ({ENV}, `mujoco` preset, {ACTORS} actors, {args.window_steps:,} steps,
one 1-episode evaluation at the end) and RLlib PPO ({args.window_steps:,} steps), each in a fresh process. Steps/s
is each training loop's (SB3: `learn()`; ours: the Trainer's `wall_s`; RLlib: the `algo.train()` loop). The
{n:,}-step wall time is extrapolated as for SB3 in BENCHMARKS §2: the process's start-up as measured (imports,
set-up; for RLlib also Ray's start and the env runners') + loop time × {n:,} / window. The machine has 2 cores,
shared with other work (and, while the full RLlib runs below were going, with them at `nice 5`): read the ratios,
which were measured within minutes of each other, not the absolute numbers (the load changed a lot between
rows: compare the "measured" column with the steps/s).

{window_table}

## RLlib, {n:,} steps per seed (training returns)

One seed at a time (`nohup nice -n 5`), writing one record per `algo.train()` iteration to
`bench/out/rllib-hopper-s<seed>.jsonl`; a checkpoint every {args.ckpt_every} iterations lets a rerun resume a cut
seed (the reward-scaling statistics of the gymnasium wrapper restart on resume; a rerun skips finished seeds).
A partial row is the return at the steps reached, not a 1M result. Its wall time shares the machine with the
window runs and other work.
{stale_note}
{full_table}

## Hyper-parameters: ours → RLlib

{hp_table}

{provenance(min(times, default=time.time()), max(ends, default=time.time()), cmd)}
"""
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(text)
    return text


def rllib_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("phase", nargs="?", default="all", choices=("all", "setup", "window", "full", "report"))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--steps", type=int, default=1_000_000, help="env steps of a full RLlib run")
    p.add_argument("--window-steps", type=int, default=50_000, help="steps of each side-by-side throughput window")
    p.add_argument("--ckpt-every", type=int, default=5, help="full runs: iterations between checkpoints")
    p.add_argument("--reuse", action="store_true", help="window: keep windows already in bench/out")
    args = p.parse_args(argv)
    if args.phase in ("all", "setup", "window", "full"):
        ensure_venv()
    if args.phase in ("all", "window"):
        phase_window(args)
    if args.phase in ("all", "full"):
        phase_full(args)
    print(report(args))


# -- rllib-worker (was rllib_worker.py) -----------------------------------------

T_PROCESS = time.perf_counter()


# The worker runs in RLlib's own virtual environment, which has neither minionsrl nor the bench's dependencies:
# bench/common.py imports only the standard library at its top, so this file's imports hold there too.
def _records(path: Path) -> list[dict[str, Any]]:
    """The worker's records so far, up to a line cut by a kill mid-write."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut by a kill mid-write
            break
    return out


def make_env(cfg: dict[str, Any]):
    """Hopper-v5, a raw-episode logger, then (optionally) CleanRL's reward scaling and clipping."""
    import gymnasium as gym
    import numpy as np

    class EpisodeLog(gym.Wrapper):
        """Appends ``{"r": return, "l": length, "t": time}`` of each finished episode to a per-process file."""

        def __init__(self, env: gym.Env, folder: str) -> None:
            super().__init__(env)
            Path(folder).mkdir(parents=True, exist_ok=True)
            self._path = Path(folder) / f"episodes-{os.getpid()}-{id(self)}.jsonl"
            self._ret, self._len = 0.0, 0

        def reset(self, **kwargs):
            self._ret, self._len = 0.0, 0
            return self.env.reset(**kwargs)

        def step(self, action):
            obs, reward, terminated, truncated, info = self.env.step(action)
            self._ret += float(reward)
            self._len += 1
            if terminated or truncated:
                with self._path.open("a") as f:
                    f.write(json.dumps({"r": self._ret, "l": self._len, "t": time.time()}) + "\n")
                self._ret, self._len = 0.0, 0
            return obs, reward, terminated, truncated, info

    env = EpisodeLog(gym.make(cfg["env_id"]), cfg["episodes_dir"])
    if cfg["normalize_reward"]:
        env = gym.wrappers.NormalizeReward(env, gamma=cfg["gamma"])
        clip = cfg["clip_reward"]
        env = gym.wrappers.TransformReward(env, lambda r: float(np.clip(r, -clip, clip)))
    return env


class EpisodeFiles:
    """Reads the lines the env runners' loggers appended since the last call."""

    def __init__(self, folder: Path) -> None:
        self.folder, self.offsets = folder, {}

    def new(self) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.folder.glob("episodes-*.jsonl")):
            with path.open() as f:
                f.seek(self.offsets.get(path, 0))
                chunk = f.read()
            complete = chunk[: chunk.rfind("\n") + 1]  # a line being written stays for the next call
            self.offsets[path] = self.offsets.get(path, 0) + len(complete)
            found += [json.loads(line) for line in complete.splitlines() if line.strip()]
        return sorted(found, key=lambda e: e["t"])


def build_config(args: dict[str, Any], episodes_dir: str):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import MeanStdFilter
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env

    hp = args["hp"]
    register_env("hopper-minionsrl-bench", make_env)
    lr: Any = hp["lr"]
    if hp["anneal_lr"]:  # linear to 0 over the run's env steps, as our lr_schedule anneal (RLlib: piecewise)
        lr = [[0, hp["lr"]], [args["lr_horizon"], 0.0]]
    env_config = {"env_id": args["env_id"], "episodes_dir": episodes_dir, "normalize_reward": hp["normalize_reward"],
                  "gamma": hp["gamma"], "clip_reward": hp["clip_reward"]}
    obs_filter = None
    if hp["normalize_obs"]:
        clip_obs = hp["clip_obs"]

        def obs_filter(env=None, spaces=None, device=None):  # RLlib calls it with (env, spaces, device)
            return MeanStdFilter(clip_by_value=clip_obs)

    model = DefaultModelConfig(fcnet_hiddens=hp["hidden_sizes"], fcnet_activation="tanh",
                               fcnet_kernel_initializer="orthogonal_",
                               fcnet_kernel_initializer_kwargs={"gain": 2 ** 0.5},
                               fcnet_bias_initializer="zeros_", vf_share_layers=False, free_log_std=True)
    return (
        PPOConfig()
        .environment("hopper-minionsrl-bench", env_config=env_config)
        .env_runners(num_env_runners=hp["num_env_runners"], num_envs_per_env_runner=hp["num_envs_per_env_runner"],
                     rollout_fragment_length=hp["rollout_fragment_length"], env_to_module_connector=obs_filter,
                     num_cpus_per_env_runner=1)
        .learners(num_learners=0)
        .training(lr=lr, gamma=hp["gamma"], lambda_=hp["lambda_"], clip_param=hp["clip_param"],
                  num_epochs=hp["num_epochs"], minibatch_size=hp["minibatch_size"],
                  train_batch_size_per_learner=hp["train_batch_size_per_learner"],
                  entropy_coeff=hp["entropy_coeff"], vf_loss_coeff=hp["vf_loss_coeff"],
                  vf_clip_param=hp["vf_clip_param"], grad_clip=hp["grad_clip"], grad_clip_by="global_norm",
                  use_kl_loss=False, kl_coeff=0.0)
        .rl_module(model_config=model)
        .debugging(seed=args["seed"])
        .reporting(metrics_num_episodes_for_smoothing=100)
    )


def _get(result: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(result, dict) or k not in result:
            return None
        result = result[k]
    return result


def rllib_worker_main(argv: list[str] | None = None) -> None:
    args = json.loads((argv or sys.argv[1:])[0])
    out, work = Path(args["out"]), Path(args["work"])
    ckpt = work / "checkpoint"
    records = _records(out)
    if any(r["kind"] == "done" for r in records):
        print(json.dumps({"status": "already done", **[r for r in records if r["kind"] == "done"][-1]}), flush=True)
        return
    # resume: keep what the last checkpoint covers, drop (and re-run) what came after it
    last_ckpt = max((i for i, r in enumerate(records) if r["kind"] == "ckpt"), default=None)
    resume = last_ckpt is not None and (ckpt / "ok").exists()
    kept = records[: last_ckpt + 1] if resume else []
    tmp = out.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
    tmp.replace(out)
    episodes_dir = work / f"episodes-{int(time.time())}"
    shutil.rmtree(work / "episodes", ignore_errors=True)
    for old in work.glob("episodes-*"):
        shutil.rmtree(old, ignore_errors=True)
    episodes_dir.mkdir(parents=True, exist_ok=True)

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    # Ray renices its worker processes (the env runners) by +15 by default; here they keep this process's
    # niceness, as the processes of our Trainer and SB3 do, so that on a shared machine none is handicapped
    os.environ.setdefault("RAY_worker_niceness", "0")
    import torch

    torch.set_num_threads(args["threads"])  # the learner's torch threads (env runners: Ray sets one per actor)
    import ray

    hp = args["hp"]
    ray.init(address="local", num_cpus=hp["num_env_runners"] + 1, include_dashboard=False, log_to_driver=False,
             object_store_memory=200 * 1024 * 1024, _temp_dir=args.get("ray_tmp") or None)
    algo = build_config(args, str(episodes_dir)).build_algo()
    wall0, steps0, it0 = 0.0, 0, 0
    if resume:
        algo.restore_from_path(str(ckpt / "algo"))
        c = kept[-1]
        wall0, steps0, it0 = c["wall_s"], c["env_steps"], c["iter"]
    setup_s = time.perf_counter() - T_PROCESS
    append_jsonl(out, {"kind": "start", "seed": args["seed"], "t": time.time(), "setup_s": setup_s,
                  "resumed_from_steps": steps0, "hp": hp, "steps_target": args["steps"]})
    files = EpisodeFiles(episodes_dir)
    files.new()  # anything written while building (none expected)
    t_loop, it, steps = time.perf_counter(), it0, steps0
    while steps < args["steps"]:
        result = algo.train()
        it += 1
        sampled = _get(result, "env_runners", "num_env_steps_sampled") or 0
        lifetime = _get(result, "env_runners", "num_env_steps_sampled_lifetime")
        steps = int(lifetime) if lifetime else steps + int(sampled)
        eps = files.new()
        rec = {"kind": "iter", "seed": args["seed"], "iter": it, "env_steps": steps, "iter_steps": int(sampled),
               "wall_s": wall0 + time.perf_counter() - t_loop, "t": time.time(),
               "returns": [e["r"] for e in eps], "lengths": [e["l"] for e in eps],
               "sample_s": _get(result, "timers", "env_runner_sampling_timer"),
               "learn_s": _get(result, "timers", "learner_update_timer"),
               "rllib_return_mean": _get(result, "env_runners", "episode_return_mean")}
        append_jsonl(out, rec)
        if args["ckpt_every"] and it % args["ckpt_every"] == 0 and steps < args["steps"]:
            staging = work / "checkpoint.new"
            shutil.rmtree(staging, ignore_errors=True)
            algo.save_to_path(str(staging / "algo"))
            (staging / "ok").write_text(str(steps))
            shutil.rmtree(ckpt, ignore_errors=True)
            staging.rename(ckpt)
            append_jsonl(out, {"kind": "ckpt", "iter": it, "env_steps": steps, "wall_s": rec["wall_s"],
                               "t": time.time()})
    done = {"kind": "done", "seed": args["seed"], "env_steps": steps, "wall_s": wall0 + time.perf_counter() - t_loop,
            "setup_s": setup_s, "t": time.time()}
    append_jsonl(out, done)
    algo.stop()
    ray.shutdown()
    shutil.rmtree(ckpt, ignore_errors=True)
    print(json.dumps(done), flush=True)


# -- peer: our own JAX PPO on EnvPool (bench/peer_ppo.py) at equal work -----------------------------------------

PEER = Path(__file__).resolve().parent / "peer_ppo.py"
PEER_SECTION = "hopper-peer"
PEER_TARGET_RATIO = 2.2  # issue 45: ours ≥ 2.2× the EnvPool peer's steps/s at equal work


def peer_hyper_parameters(actors: int) -> dict[str, Any]:
    """bench/peer_ppo.py's flags from what our Trainer runs on Hopper-v5 (the mujoco preset at ``actors`` actors): the
    same batch (actors × fragment_length), minibatch size, epochs and PPO constants, so equal work."""
    from minionsrl.config import TrainConfig, resolve  # lazily: the RLlib venv imports this file, without minionsrl

    d = resolve(TrainConfig(env_id=ENV, actors=actors, run_dir="unused"), "mujoco")
    lr, batch = d.learner, actors * d.env.fragment_length
    return {"num-envs": actors, "num-steps": d.env.fragment_length,
            "minibatch-size": lr.minibatch_size or batch // lr.num_minibatches, "update-epochs": lr.update_epochs,
            "learning-rate": lr.learning_rate, "gamma": lr.gamma, "gae-lambda": lr.gae_lambda,
            "clip-coef": lr.clip_coef, "ent-coef": lr.ent_coef, "vf-coef": lr.vf_coef,
            "max-grad-norm": lr.max_grad_norm, "clip-obs": lr.clip_obs, "clip-reward": lr.clip_reward}


def _measured(fn) -> dict[str, Any]:
    """Run ``fn()`` (which waits for a child process) and add what the machine did meanwhile: start and end time,
    the 1-min load average before and after, and the CPU seconds of the children reaped during it (the child and
    the processes it reaped: our rollout functions, EnvPool's threads)."""
    import resource

    def cpu() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    load0, cpu0, t0 = _load1(), cpu(), time.time()
    result = fn()
    return {**result, "start": t0, "end": time.time(), "load_before": load0, "load_after": _load1(),
            "cpu_s": cpu() - cpu0}


def _load1() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def run_peer(seed: int, steps: int, hp: dict[str, Any], threads: int, eval_episodes: int,
             log_path: Path | None = None, raw_steps: int = 0) -> dict[str, Any]:
    """bench/peer_ppo.py in a fresh process; its ``done`` (or ``raw``) line plus ``process_wall_s``. The per-update
    lines go to ``log_path`` when given."""
    cmd = [sys.executable, str(PEER), "--seed", str(seed), "--num-threads", str(threads), "--quiet"]
    if raw_steps:
        cmd += ["--raw", "--raw-steps", str(raw_steps), "--num-envs", str(hp["num-envs"])]
    else:
        cmd += ["--total-timesteps", str(steps), "--eval-episodes", str(eval_episodes)]
        cmd += [x for k, v in hp.items() for x in (f"--{k}", str(v))]
        if log_path is not None:
            log_path.unlink(missing_ok=True)
            cmd += ["--out", str(log_path)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"peer failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    start = next((x for x in lines if x["kind"] == "start"), {})
    return {**lines[-1], "compile_s": start.get("compile_s", lines[-1].get("compile_s")), "process_wall_s": wall}


def _ours_run(out_dir: Path, seed: int, steps: int, actors: int, eval_episodes: int, keep: bool) -> dict[str, Any]:
    run_dir = out_dir / "runs" / f"peer-ours-s{seed}-{steps}-{int(time.time())}"
    m = run_minionsrl(dict(env_id=ENV, preset="auto", actors=actors, seed=seed, total_timesteps=steps, eval_every=0,
                           eval_episodes=eval_episodes, progress=False, tensorboard=False, run_dir=str(run_dir)))
    m["learner_share"] = learner_share(str(run_dir))
    m.update(_loop(str(run_dir)))
    if not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return m


def _loop(run_dir: str) -> dict[str, float]:
    """Our training loop as the peer's is timed: from the end of round 1 (start-up and the first compilation done) to
    the end of the last round's update (its final evaluation apart), and the steps learned in it."""
    from minionsrl.loop.metrics import read_metrics  # lazily, as above

    rows = read_metrics(run_dir)
    first, last = rows[0], rows[-1]
    return {"loop_s": float(last["wall_s"]) - float(first["wall_s"]) - float(last["eval_s"] or 0.0),
            "loop_steps": float(last["env_steps"]) - float(first["env_steps"])}


_OURS_KEYS = ("env_steps", "wall_s", "process_wall_s", "train_return_last100", "final_eval_return", "learner_share",
              "loop_s", "loop_steps")


def peer_window(args: argparse.Namespace, records: list[dict[str, Any]], hp: dict[str, Any]) -> None:
    """Per seed, back to back in fresh processes: ours and the peer (order alternating by seed), then the pool's
    raw stepping."""
    w = args.window_steps

    def one(kind: str, seed: int) -> dict[str, Any]:
        if kind == "ours":
            m = _ours_run(Path(args.out_dir), seed, w, args.actors, 1, keep=False)
            return {k: m.get(k) for k in _OURS_KEYS}
        return run_peer(seed, w, hp, args.peer_threads, 0, raw_steps=args.raw_steps if kind == "raw" else 0)

    order = [(seed, kind) for i, seed in enumerate(args.seeds)
             for kind in (("ours", "peer") if i % 2 == 0 else ("peer", "ours")) + (("raw",) if args.raw_steps else ())]
    log(f"windows: ours and the peer {w:,} steps each, raw stepping {args.raw_steps:,} steps, per seed")
    _run_phase(args, records, hp, "window", w, order, one)


def peer_full(args: argparse.Namespace, records: list[dict[str, Any]], hp: dict[str, Any]) -> None:
    """Per seed: ours, then the peer, each ``--steps`` steps with a 10-episode deterministic evaluation at the end."""
    n = args.steps

    def one(kind: str, seed: int) -> dict[str, Any]:
        if kind == "ours":
            m = _ours_run(Path(args.out_dir), seed, n, args.actors, 10, keep=True)
            return {k: m.get(k) for k in (*_OURS_KEYS, "run_dir")}
        log_path = Path(args.out_dir) / "peer_runs" / f"peer-s{seed}-{n}.jsonl"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        return run_peer(seed, n, hp, args.peer_threads, 10, log_path)

    log(f"full runs: ours and the peer {n:,} steps each, per seed")
    _run_phase(args, records, hp, "full", n, [(seed, kind) for seed in args.seeds for kind in ("ours", "peer")], one)


def _run_phase(args: argparse.Namespace, records: list[dict[str, Any]], hp: dict[str, Any], phase: str, steps: int,
               order: list[tuple[int, str]], one) -> None:
    """Measure ``one(kind, seed)`` for each (seed, kind) of ``order`` not measured yet (all with ``--fresh``), each
    result appended to peer_hopper.jsonl and the section written again as it comes."""
    out = Path(args.out_dir) / "peer_hopper.jsonl"
    for seed, kind in order:
        name = f"{kind}-{phase}"
        if not args.fresh and find_result(records, kind=name, seed=seed, steps=steps, actors=args.actors,
                                          peer_threads=args.peer_threads) is not None:
            log(f"{phase} seed {seed}: {kind} already measured, skipped (--fresh measures again)")
            continue
        log(f"{phase} seed {seed}: {kind}")
        rec = {**_measured(lambda k=kind, s=seed: one(k, s)), "kind": name, "seed": seed, "steps": steps,
               "actors": args.actors, "peer_threads": args.peer_threads}
        append_jsonl(out, rec)
        records.append(rec)
        sps = rec.get("steps_per_s") or ratio(rec["env_steps"], rec.get("wall_s"))
        log(f"{phase} seed {seed}: {kind} done: {fmt(sps, 0)} train {fmt(rec.get('train_return_last100'))}, "
            f"eval {fmt(rec.get('final_eval_return', rec.get('eval_return')))}")
        write_peer_section(args, records, hp)


def _sps(rec: dict[str, Any]) -> float:
    """Training-loop steps/s, start-up and the first compilation apart on both sides: ours from the end of round 1
    to the end of the last update (:func:`_loop`), the peer its loop."""
    if rec["kind"].startswith("ours"):
        return rec["loop_steps"] / rec["loop_s"]
    return rec["env_steps"] / rec["loop_s"]


def _ci(values: list[float], digits: int = 0, over: list[float] | None = None) -> str:
    from minionsrl.experiments.compare import bootstrap_ci  # lazily, as above

    if not values:
        return "—"
    lo, hi = bootstrap_ci(values, over=over)
    point = sum(values) / len(values) if over is None else sum(values) / sum(over)
    return f"{fmt(point, digits)} [{fmt(lo, digits)}, {fmt(hi, digits)}]"


def _loads(rec: dict[str, Any]) -> str:
    return f"{fmt(rec.get('load_before'), 1)}→{fmt(rec.get('load_after'), 1)}"


def render_peer(args: argparse.Namespace, records: list[dict[str, Any]], hp: dict[str, Any]) -> str | None:
    """The BENCHMARKS section from the latest record per (kind, seed, steps); None while there is none to show."""
    w, n = args.window_steps, args.steps
    win_rows, ratios, raw_sps, win_seeds = [], [], [], []
    for seed in sorted({r["seed"] for r in records if r["kind"].endswith("-window") and r["steps"] == w}):
        o = find_result(records, kind="ours-window", seed=seed, steps=w)
        p = find_result(records, kind="peer-window", seed=seed, steps=w)
        raw = find_result(records, kind="raw-window", seed=seed, steps=w)
        if raw:
            raw_sps.append(raw["steps_per_s"])
        if not (o and p):
            continue
        win_seeds.append(seed)
        rr = ratio(_sps(o), _sps(p))
        ratios.append(rr)
        win_rows.append([seed, "ours → peer" if o["start"] < p["start"] else "peer → ours", _sps(o), _sps(p), rr,
                         raw["steps_per_s"] if raw else None, p["compile_s"], o["cpu_s"], p["cpu_s"],
                         ratio(o["env_steps"], o["cpu_s"]), ratio(p["env_steps"], p["cpu_s"]),
                         f"{_loads(o)} / {_loads(p)}", f"{_hm(min(o['start'], p['start']))}–"
                         f"{_hm(max(o['end'], p['end']))}"])
    full_rows, full = [], []
    for seed in sorted({r["seed"] for r in records if r["kind"].endswith("-full") and r["steps"] == n}):
        o = find_result(records, kind="ours-full", seed=seed, steps=n)
        p = find_result(records, kind="peer-full", seed=seed, steps=n)
        if not (o and p):
            continue
        full.append((o, p))
        full_rows.append([seed, o["train_return_last100"], o["final_eval_return"], o["wall_s"], _sps(o),
                          p["train_return_last100"], p["eval_return"], p["loop_s"], _sps(p), ratio(_sps(o), _sps(p)),
                          f"{_loads(o)} / {_loads(p)}", f"{_hm(o['start'])}–{_hm(p['end'])}"])
    if not win_rows and not full_rows:
        return None
    mean_ratio = mean(ratios)
    raw_mean = mean(raw_sps)
    parts = [f"""## Hopper-v5: ours beside a JAX PPO on EnvPool at equal work

The peer is `bench/peer_ppo.py`: our own JAX PPO on EnvPool {_dist('envpool')} (`make_gymnasium`,
{hp['num-envs']} envs, synchronous, {args.peer_threads} worker thread(s)), written after CleanRL's
`ppo_continuous_action.py` recipe (separate 64-64 tanh actor and critic, orthogonal init, state-independent log-std,
observation and reward normalisation clipped at 10, GAE, clipped surrogate with value clipping, entropy 0, Adam eps
1e-5, global-norm clip 0.5, learning rate annealed), with one jitted policy call per env step and the whole update
(epochs × minibatches) as one jitted program; it imports no minionsrl. **Equal work**: it runs the settings our
Trainer resolves for Hopper-v5 (`mujoco` preset, {args.actors} actors): batch {hp['num-envs']} × {hp['num-steps']},
minibatches of {hp['minibatch-size']}, {hp['update-epochs']} epochs, lr {hp['learning-rate']}, γ {hp['gamma']},
λ {hp['gae-lambda']}, clip {hp['clip-coef']}; like ours it bootstraps time-limit truncations with V(final
observation) and keeps one set of normalisation statistics over all envs, and runs one XLA thread. Steps/s is each
training loop's, start-up and the first compilation apart on both sides: ours from the end of its first round to
the end of its last update (metrics.csv), the peer's loop. "Raw EnvPool" is random-action stepping of the
same pool ({hp['num-envs']} envs, {args.peer_threads} thread(s), reset after done): the env engine's ceiling. CPU s:
the process tree's user + system seconds, start-up and compilation included. Each run is a fresh process; the
machine is shared (the load columns give the 1-min load average before → after each run).
"""]
    if win_rows:
        ci = f"{_ci(ratios, 2)} (95% bootstrap interval over seeds)" if len(ratios) > 1 else fmt(mean_ratio, 2)
        parts.append(f"""### Throughput: {w:,}-step windows, side by side

{markdown_table(["seed", "order", "ours steps/s", "peer steps/s", "ours / peer", "raw EnvPool steps/s",
                 "peer compile s", "ours CPU s", "peer CPU s", "ours steps per CPU s", "peer steps per CPU s",
                 "load (ours / peer)", "measured"], win_rows, digits=[0, 0, 0, 0, 2, 0, 1, 1, 1, 0, 0, 0, 0])}

Ours / peer over {len(ratios)} seed(s): mean {ci}; target ≥ {PEER_TARGET_RATIO}:
{met(mean_ratio is not None and mean_ratio >= PEER_TARGET_RATIO)}. Raw EnvPool stepping: {fmt(raw_mean, 0)} steps/s
(mean).
""")
    if full_rows:
        o_tr = [o["train_return_last100"] for o, _ in full]
        p_tr = [p["train_return_last100"] for _, p in full]
        o_ev = [o["final_eval_return"] for o, _ in full]
        p_ev = [p["eval_return"] for _, p in full]
        d_tr = [a - b for a, b in zip(o_tr, p_tr, strict=True)]
        d_ev = [a - b for a, b in zip(o_ev, p_ev, strict=True)]
        o_wall = [o["wall_s"] for o, _ in full]
        p_loop = [p["loop_s"] for _, p in full]
        env_only = n / raw_mean if raw_mean else None
        summary = markdown_table(
            ["", "ours", "peer", "ours − peer (paired)"],
            [["train return, last 100 episodes", _ci(o_tr), _ci(p_tr), _ci(d_tr)],
             ["deterministic eval return (10 episodes)", _ci(o_ev), _ci(p_ev), _ci(d_ev)],
             [f"training-loop wall s for {n:,} steps", _ci(o_wall), _ci(p_loop), "—"]], digits=0)
        limit = (f" The env-only limit: {n:,} steps of raw EnvPool stepping take {fmt(env_only, 0)} s at the windows' "
                 f"mean rate; our mean wall time is {fmt(ratio(mean(o_wall), env_only), 2)}× that."
                 if env_only else "")
        incomplete = ("" if len(full) >= len(args.seeds) else
                      f"\n**{len(full)} of {len(args.seeds)} seeds finished** when this was written.\n")
        parts.append(f"""### Returns and wall time at {n:,} steps

Per seed, ours then the peer, each {n:,} steps in a fresh process, one 10-episode deterministic evaluation at
the end (ours: its final evaluation; the peer: a fresh pool, mean action, frozen statistics).
{incomplete}
{markdown_table(["seed", "ours train (last 100)", "ours eval", "ours wall s", "ours steps/s", "peer train (last 100)",
                 "peer eval", "peer loop s", "peer steps/s", "ours / peer steps/s", "load (ours / peer)",
                 "measured"], full_rows, digits=[0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0])}

Means over {len(full)} seed(s), [95% bootstrap interval]; "equal within seed noise" where the paired difference's
interval holds 0. Wall time over {n:,} steps, ours / peer: {_ci(o_wall, 2, over=p_loop)} (ratio of summed times;
below 1 is ours faster).{limit}

{summary}
""")
    shown = [r for r in records if r["steps"] == (w if r["kind"].endswith("-window") else n)]
    parts.append(provenance(min(r["start"] for r in shown), max(r["end"] for r in shown))
                 + f"\n- envpool {_dist('envpool')}; the peer: `bench/peer_ppo.py`, one JSON line per update in "
                 "`bench/out/peer_runs/` for the full runs.")
    return "\n".join(parts)


def _dist(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def write_peer_section(args: argparse.Namespace, records: list[dict[str, Any]], hp: dict[str, Any]) -> None:
    text = render_peer(args, records, hp)
    if text is not None:  # no section before there is a result
        write_section(PEER_SECTION, text, Path(args.doc) if args.doc else None)


def peer_main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Hopper-v5: ours beside bench/peer_ppo.py (JAX PPO on EnvPool) at equal "
                                            "work")
    p.add_argument("phase", nargs="?", default="window", choices=("window", "full", "all", "report", "budget"),
                   help="window (default): the throughput windows; full: the returns runs; all: both")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--steps", type=int, default=1_000_000, help="env steps of each full (returns) run")
    p.add_argument("--window-steps", type=int, default=200_000, help="env steps of each throughput window")
    p.add_argument("--raw-steps", type=int, default=100_000, help="raw EnvPool stepping per seed (0: none)")
    p.add_argument("--actors", type=int, default=ACTORS)
    p.add_argument("--peer-threads", type=int, default=2, help="EnvPool worker threads of the peer (2: the faster "
                                                                "here, bench/peer_ppo.py says)")
    p.add_argument("--budget-steps", type=int, default=3072, help="budget: steps of each step-cost measurement")
    p.add_argument("--budget-repeats", type=int, default=5, help="budget: interleaved repeats of each")
    p.add_argument("--render", action="store_true", help="budget: write its section from its latest run, measuring "
                                                         "nothing")
    p.add_argument("--fresh", action="store_true", help="measure again what earlier runs already measured")
    p.add_argument("--out-dir", default=str(OUT), help="results (peer_hopper.jsonl), run dirs and the peer's logs")
    p.add_argument("--doc", default=None, help="write the section to this file (default: the BENCHMARKS section)")
    args = p.parse_args(argv)
    records = load_jsonl(Path(args.out_dir) / "peer_hopper.jsonl")
    hp = peer_hyper_parameters(args.actors)
    if args.phase == "budget":
        peer_budget_main(args, hp)
        return
    if args.phase in ("all", "window"):
        peer_window(args, records, hp)
    if args.phase in ("all", "full"):
        peer_full(args, records, hp)
    write_peer_section(args, records, hp)
    print(render_peer(args, records, hp) or "No results yet.")



# -- budget: where a Hopper round's time and CPU go, beside its limits ---------------------------------------------

BUDGET_SECTION = "hopper-round-budget"
BUDGET_FIRST = 3  # rounds up to this one (start-up, the first compilations, cold instances) are left out


def _step_costs(steps: int, repeats: int) -> dict[str, float]:
    """CPU ms an agent step of Hopper-v5 inside one function, this process, BLAS on one thread (as in a function),
    the median of ``repeats`` interleaved measurements of each: the function's env and policy without our loop
    (Gymnasium's step on random actions, the policy's forward pass before each, episodes reset as they end), split
    into the physics (Gymnasium's own ``mujoco.mj_step`` calls, timed where it makes them), the policy's forward
    pass and Gymnasium's work around the physics, in proportion to their wall time in that loop; and the rollout
    function's own loop (:func:`minionsrl.function.rollout.rollout`, episodes carried), whose excess over the first is
    our loop's work (the median of each repeat's difference)."""
    import mujoco
    import numpy as np
    from sampling import Learner  # the policy the raw steppers run

    from minionsrl.function.envs import make_env
    from minionsrl.function.rollout import rollout  # pins BLAS to one thread, as a function does

    learner = Learner(512)
    snap = learner.snapshot()
    policy, env = snap.numpy_policy(), make_env(learner.spec)
    actions = np.random.default_rng(0).uniform(-1, 1, (steps, learner.arch.action_dim)).astype(np.float32)
    mj_step, in_physics = mujoco.mj_step, [0.0]

    def timed_mj_step(*a: Any, **kw: Any) -> None:  # Gymnasium's MujocoEnv calls mujoco.mj_step at each step
        t = time.perf_counter()
        mj_step(*a, **kw)
        in_physics[0] += time.perf_counter() - t

    def env_and_policy() -> dict[str, float]:
        in_physics[0], in_policy = 0.0, 0.0
        obs, _ = env.reset(seed=1)
        mujoco.mj_step = timed_mj_step
        try:
            c0, w0 = time.process_time(), time.perf_counter()
            for a in actions:
                t = time.perf_counter()
                policy.forward(np.asarray(obs, dtype=np.float32))
                in_policy += time.perf_counter() - t
                obs, _, term, trunc, _ = env.step(a)
                if term or trunc:
                    obs, _ = env.reset()
            cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        finally:
            mujoco.mj_step = mj_step
        per = 1000 * cpu / wall / steps  # CPU ms a step per wall second of this loop
        return {"physics": in_physics[0] * per, "policy": in_policy * per,
                "gymnasium": (wall - in_physics[0] - in_policy) * per, "env_policy": 1000 * cpu / steps}

    carry: list[Any] = [None]

    def ours() -> float:
        c0 = time.process_time()
        for seed in range(steps // 512):
            carry[0] = rollout(env, snap, policy, 512, seed, 0.99, carry[0]).meta["carry"]
        return 1000 * (time.process_time() - c0) / steps

    measured = []
    for _ in range(repeats):
        one = env_and_policy()
        one["rollout"] = ours()
        one["loop"] = one["rollout"] - one["env_policy"]
        measured.append(one)
    env.close()
    return {k: statistics.median(m[k] for m in measured) for k in measured[0]}


def budget_child_main(argv: list[str]) -> None:
    """``budget-child JSON``: train ours in this process (mujoco preset) and print one JSON line: each round's wall
    split, and the CPU seconds between the ends of round BUDGET_FIRST and of the last round of the learner's
    thread, the rest of this process (XLA's threads, the backend's, the checkpoint writers) and its child processes
    (the function instances, reaped ones too), with the CPU the functions spent inside their handler
    (invocations.csv: training and the last round's final evaluation apart)."""
    import threading

    import psutil

    from minionsrl import TrainConfig, train
    from minionsrl.experiments.training import Callback
    from minionsrl.loop.metrics import read_metrics, read_rows

    job = json.loads(argv[0])
    me, marks = psutil.Process(), {}

    def snap(learner_tid: int) -> dict[str, Any]:
        process = me.cpu_times()
        learner = next((t.user_time + t.system_time for t in me.threads() if t.id == learner_tid), 0.0)
        kids = {}
        for kid in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                c = kid.cpu_times()
                kids[kid.pid] = c.user + c.system
        return {"t": time.perf_counter(), "learner": learner, "process": process.user + process.system,
                "reaped": process.children_user + process.children_system, "kids": kids}

    class Mark(Callback):
        def on_round(self, row: Any, trainer: Any) -> None:
            if row.round == BUDGET_FIRST or row.env_steps >= job["steps"]:
                marks[row.round] = snap(threading.get_native_id())

    train(TrainConfig(env_id=ENV, preset="auto", actors=job["actors"], seed=job["seed"], total_timesteps=job["steps"],
                      eval_every=0, eval_episodes=1, progress=False, tensorboard=False, run_dir=job["run_dir"]),
          callback=Mark(), plots=False)
    if len(marks) != 2:
        raise RuntimeError(f"the run did not pass round {BUDGET_FIRST} and end at {job['steps']:,} steps: {marks}")
    (r0, a), (r1, b) = sorted(marks.items())
    every = [{k: float(r[k] or 0.0) for k in ("round", "env_steps", "round_s", "sample_s", "learn_s", "eval_s")}
             for r in read_metrics(job["run_dir"])]
    rows = [r for r in every if r0 < r["round"] <= r1]
    before = next(r["env_steps"] for r in every if r["round"] == r0)
    handler = {"train": 0.0, "eval": 0.0}
    for r in read_rows(Path(job["run_dir"]) / "invocations.csv"):
        if r0 < int(r["round"]) <= r1 and r["cpu_s"]:
            handler[r["kind"]] = handler.get(r["kind"], 0.0) + float(r["cpu_s"])
    lived = sum(v - a["kids"].get(pid, 0.0) for pid, v in b["kids"].items())  # one started since: counted from 0
    print(json.dumps({
        "rows": rows, "first": r0, "last": r1, "steps": int(rows[-1]["env_steps"] - before),
        "wall_s": b["t"] - a["t"], "final_eval_s": rows[-1]["eval_s"],
        "learner_cpu_s": b["learner"] - a["learner"],
        "other_threads_cpu_s": (b["process"] - a["process"]) - (b["learner"] - a["learner"]),
        "instances_cpu_s": lived + b["reaped"] - a["reaped"],
        "instances_started": len(set(b["kids"]) - set(a["kids"])),
        "instances_ended": len(set(a["kids"]) - set(b["kids"])),
        "handler_cpu_s": handler["train"], "final_eval_cpu_s": handler["eval"]}))


def peer_budget(args: argparse.Namespace, hp: dict[str, Any]) -> dict[str, Any]:
    """One script run, in this order: the function's step costs, the rollout function on every core, ours (in a
    child process, its rounds and CPU split), the peer for as many steps, then the peer's pool stepping raw."""
    from sampling import ParallelRaw

    cores, steps, t0, batch = n_cores(), args.window_steps, time.time(), hp["num-envs"] * hp["num-steps"]
    if args.budget_steps < 512 or args.budget_steps % 512:
        raise SystemExit(f"--budget-steps {args.budget_steps}: give a multiple of 512 (the rollout's fragments)")
    if steps < (BUDGET_FIRST + 2) * batch:
        raise SystemExit(f"--window-steps {steps:,}: give at least {(BUDGET_FIRST + 2) * batch:,} (rounds past "
                         f"round {BUDGET_FIRST} of {batch:,} steps each are the ones measured)")
    log(f"budget: step costs ({args.budget_steps:,} steps x {args.budget_repeats})")
    step = _step_costs(args.budget_steps, args.budget_repeats)
    log(f"budget: the rollout function on {cores} processes at once")
    raw = ParallelRaw(cores, 512)
    try:
        raw.block(1)  # warm-up
        blocks = [raw.block(args.budget_steps // 512) for _ in range(args.budget_repeats)]
    finally:
        raw.close()
    log(f"budget: ours, {steps:,} steps")
    run_dir = Path(args.out_dir) / "runs" / f"budget-s{args.seeds[0]}-{int(time.time())}"
    job = {"seed": args.seeds[0], "steps": steps, "actors": args.actors, "run_dir": str(run_dir)}
    ours_run = run_child("budget-child", job, None, script=__file__)
    shutil.rmtree(run_dir, ignore_errors=True)
    log(f"budget: the peer, {steps:,} steps, then its pool stepping raw")
    peer = run_peer(args.seeds[0], steps, hp, args.peer_threads, 0)
    pool = run_peer(args.seeds[0], 0, hp, args.peer_threads, 0, raw_steps=args.raw_steps)
    rec = {"kind": "budget", "start": t0, "end": time.time(), "cores": cores, "step_ms": step,
           "raw_rollout_sps": statistics.median(b["sps"] for b in blocks),
           "raw_rollout_cpu_share": statistics.median(x for b in blocks for x in b["per_process_cpu_over_wall"]),
           "ours": ours_run, "peer_sps": peer["steps_per_s"], "pool_sps": pool["steps_per_s"], "steps": steps,
           "batch": batch, "actors": args.actors, "seed": args.seeds[0], "peer_threads": args.peer_threads,
           "command": reproduce_command(), "load_end": _load1()}
    append_jsonl(Path(args.out_dir) / "peer_budget.jsonl", rec)
    return rec


def render_budget(rec: dict[str, Any]) -> str:
    """The section: the round's wall split, the CPU a step by where it runs, the function's step by part, and the
    limits beside ours and the peer (one run of each)."""
    o, step, cores, batch = rec["ours"], rec["step_ms"], rec["cores"], rec["batch"]
    rows = [dict(r) for r in o["rows"]]
    rows[-1]["round_s"] -= rows[-1]["eval_s"]  # the run's final evaluation is not a training round's (§17 times it so)
    rows[-1]["eval_s"] = 0.0
    mean = {k: statistics.mean(r[k] for r in rows) for k in ("round_s", "sample_s", "learn_s", "eval_s")}
    wall_s = o["wall_s"] - o["final_eval_s"]
    per_round = wall_s / len(rows)
    at_raw = batch / rec["raw_rollout_sps"]
    ours_sps = o["steps"] / wall_s
    wall = [["sampling at the rollout function's rate on every core", at_raw],
            ["the rest of sampling (planning, dispatch, gather, decode, the last functions' tail)",
             mean["sample_s"] - at_raw],
            ["the update (learn_s; with the wait for the previous round's checkpoint)", mean["learn_s"]],
            ["evaluation (eval_s)", mean["eval_s"]],
            ["the detectors and the stop decision", mean["round_s"] - mean["sample_s"] - mean["learn_s"]
             - mean["eval_s"]],
            ["between rounds (billing, logging, the checkpoint's start, callbacks)", per_round - mean["round_s"]],
            ["**a round** (the window's wall time / its rounds)", per_round]]
    wall = [[name, 1000 * s, 100 * s / per_round] for name, s in wall]
    per = 1000 / o["steps"]
    cpu = [["the functions, inside their handler", o["handler_cpu_s"]],
           ["the function instances, outside it (worker loop, wire, any instance's start)",
            o["instances_cpu_s"] - o["handler_cpu_s"] - o["final_eval_cpu_s"]],
           ["the learner's thread", o["learner_cpu_s"]],
           ["the rest of the learner process (XLA's compiled update, the backend's threads, checkpoint writers)",
            o["other_threads_cpu_s"]]]
    total = sum(c for _, c in cpu)
    cpu = [[name, per * c, 100 * c / total] for name, c in cpu] + [["**all**", per * total, 100.0]]
    fn = [["the physics (Gymnasium's mujoco.mj_step calls)", step["physics"]],
          ["Gymnasium's step around it (obs, reward, health, mj_rnePostConstraint, wrappers)", step["gymnasium"]],
          ["the policy's forward pass (NumPy)", step["policy"]],
          ["the rollout loop's own work (noise, clip, buffers, carry)", step["loop"]],
          ["**the rollout function's step** (measured)", step["rollout"]]]
    target = PEER_TARGET_RATIO * rec["peer_sps"]
    limits = [["the physics alone on every core (cores / its CPU a step)", cores * 1000 / step["physics"]],
              ["the rollout function alone, on every core at once", rec["raw_rollout_sps"]],
              ["the synchronous round (batch / (batch at that rate + the update))", batch / (at_raw + mean["learn_s"])],
              ["ours' CPU ceiling (cores / all its CPU a step, every core busy)", cores * 1000 / (per * total)],
              ["**ours**, measured", ours_sps], ["the peer (bench/peer_ppo.py), measured", rec["peer_sps"]],
              ["the peer's pool stepping random actions (raw EnvPool)", rec["pool_sps"]],
              [f"the target, {PEER_TARGET_RATIO}× the peer", target]]
    limits = [[name, sps, 1000 * cores / sps] for name, sps in limits]
    changed = (f" {o['instances_started']} function instance(s) started and {o['instances_ended']} ended in it."
               if o["instances_started"] or o["instances_ended"] else "")
    return f"""## Hopper-v5: where a round's time and CPU go, beside its limits
<!-- headline: Hopper, {rec['actors']} actors, one run: ours {fmt(ours_sps, 0)} steps/s, \
{fmt(ours_sps / rec['peer_sps'], 2)}× the EnvPool peer (target {PEER_TARGET_RATIO}×: \
{"met" if ours_sps >= target else "not met"}); {PEER_TARGET_RATIO}× it is {fmt(target, 0)}, \
{"above" if target > rec['raw_rollout_sps'] else "within"} the rollout function alone on every core \
({fmt(rec['raw_rollout_sps'], 0)}) -->

One script run on {cores} cores, at the peer's equal work (mujoco preset, {rec['actors']} actors ×
{batch // rec['actors']}, the update of §17), in this order: the rollout function's step by part (one process,
BLAS on one thread, medians of interleaved repeats), the rollout function alone on every core at once, ours for
{rec['steps']:,} steps (rounds after {BUDGET_FIRST}: start-up, first compilations and cold instances apart; without
the final evaluation, as §17 times it; the means of {len(rows)} rounds), then the peer for as many steps and its
pool stepping raw. One run of each, ours first (§17 has the ratio side by side over 5 seeds): ours
{fmt(ours_sps, 0)} steps/s against the peer's {fmt(rec['peer_sps'], 0)},
**{fmt(ours_sps / rec['peer_sps'], 2)}×** (target {PEER_TARGET_RATIO}×: {met(ours_sps >= target)}).

**A round's wall time** (means):

{markdown_table(["part", "ms / round", "% of a round"], wall, digits=[0, 1, 1])}

**CPU a step, by where it runs** (rounds {o['first'] + 1}–{o['last']}, {o['steps']:,} steps;
{fmt(total / wall_s, 2)} of {cores} cores busy).{changed}

{markdown_table(["where", "CPU ms / step", "% of all"], cpu, digits=[0, 3, 1])}

**The rollout function's step, by part** (the first three split the env-and-policy loop's CPU by their wall time in
it; the loop's own work is what the rollout function takes beyond that loop):

{markdown_table(["part", "CPU ms / step"], fn, digits=[0, 3])}

**Limits, steps/s** (and the CPU a step each leaves on {cores} cores):

{markdown_table(["", "steps/s", f"CPU ms / step on {cores} cores"], limits, digits=[0, 0, 3])}

{_budget_verdict(rec, step, per * total, target)}

{provenance(rec['start'], rec['end'], command=rec.get('command', '.venv/bin/python bench/hopper.py peer budget'))}
"""


def _budget_verdict(rec: dict[str, Any], step: dict[str, float], ours_ms: float, target: float) -> str:
    """What the limits say of the target, in words, from this run's figures."""
    cores, raw, physics = rec["cores"], rec["raw_rollout_sps"], rec["cores"] * 1000 / step["physics"]
    text = (f"What it says: on {cores} cores the target leaves {fmt(1000 * cores / target, 3)} CPU ms for each step, "
            f"all of it: env, policy, update and the round's own work. The rollout function's step takes "
            f"{fmt(step['rollout'], 3)} in one process; run on every core at once it steps at "
            f"{fmt(1000 * cores / raw, 3)} ms a step per core (each process busy "
            f"{fmt(100 * rec.get('raw_rollout_cpu_share', float('nan')), 0)}% of its wall time); our whole step "
            f"(functions, instances, learner) takes {fmt(ours_ms, 3)}. "
            f"The peer's own env engine, stepping random actions with no policy, gives {fmt(rec['pool_sps'], 0)} "
            f"steps/s, {'less' if rec['pool_sps'] < target else 'more'} than the target. ")
    if target <= raw:
        return text + (f"The rollout function on every core ({fmt(raw, 0)} steps/s) is past it: what stands between "
                       "is the update and the round's own work.")
    text += (f"Hiding the whole update would give at most the rollout function on every core, {fmt(raw, 0)} steps/s, "
             f"{fmt(raw / target, 2)} of the target: neither overlap nor a hidden update reaches it here")
    if physics <= target:
        return text + f"; nor would any step on these cores: the physics alone gives {fmt(physics, 0)}."
    return text + (f", only a step cheaper than Gymnasium's Hopper step and a policy call (the physics alone: "
                   f"{fmt(step['physics'], 3)} ms, {fmt(physics, 0)} steps/s on every core).")


def peer_budget_main(args: argparse.Namespace, hp: dict[str, Any]) -> None:
    """Measure (or, with ``--render``, take the latest run of peer_budget.jsonl) and write the section."""
    rec = load_jsonl(Path(args.out_dir) / "peer_budget.jsonl")[-1] if args.render else peer_budget(args, hp)
    text = render_budget(rec)
    write_section(BUDGET_SECTION, text, Path(args.doc) if args.doc else None)
    print(text)


MODES = {"sb3": main, "rllib": rllib_main, "rllib-worker": rllib_worker_main, "peer": peer_main,
         "budget-child": budget_child_main}


if __name__ == "__main__":
    run_modes(MODES)
