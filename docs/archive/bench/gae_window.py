"""Why do short fragments lag on Hopper (issue 21)? Long fragments with GAE cut as short ones cut it.

At a constant batch of 4,096, 128 functions × 32 steps learn less per round on Hopper-v5 than 8 × 512, in our PPO
and in Stable-Baselines3's alike (docs/LAYOUTS.md). The likely cause: a fragment's advantages chain only to its own
end, where they bootstrap with the value function, so the shorter the fragment, the more of every advantage is the
value function's guess (a step sits 16 steps from its cut on average at T = 32, 256 at T = 512; (γλ)^16 ≈ 0.37).
But short fragments change more than that: 128 episodes in flight instead of 8, each round's states spread over more
of them. This separates the two: the 8 × 512 layout (8 episodes in flight, the same samples) with GAE cut every W
steps as a fragment of W steps would cut it (the chain stops after step W·k − 1, which bootstraps with the next
step's value, exactly as a fragment's last step bootstraps with its ``last_value``). If 8 × 512 cut every 32 steps
lags as 128 × 32 does, the lag is GAE's; if it learns as 8 × 512, it is the layout's.

The cut is applied by wrapping :func:`minionsrl.learner.advantages.compute_gae` where the batch reads it, in the
training's own process (``--worker``); everything else is ``minionsrl train`` with bench/layouts.py's arguments.
Runs are compared with bench/layouts.py's records of the same seeds (same code, learning repeats bit for bit),
and ``--windows 512`` (no cut) checks that: its runs must repeat the 8 × 512 records exactly.

    .venv/bin/python bench/gae_window.py --windows 32 --seeds 1 2 3 4 5   # run what is missing, print the table
    .venv/bin/python bench/gae_window.py --reuse --windows 32 64 128 --seeds 1 2 3 4 5 6 7 8 9 10
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
from common import OUT, load_jsonl, log, markdown_table, run_all
from layouts import BATCH, command, diff_ci, is_run_of, mean_ci, record, run_train
from layouts import RESULTS as LAYOUT_RESULTS

RESULTS = OUT / "gae_window.jsonl"
ACTORS = 8  # the long-fragment layout whose GAE is cut: 8 × 512
ENV = "hopper"


def windowed(compute_gae: Any, window: int) -> Any:
    """``compute_gae`` with every fragment's advantage chain also cut after steps window·k − 1 (not the last step,
    which the fragment itself cuts): there the step bootstraps with the next step's value, as a fragment's last step
    bootstraps with its ``last_value``, and the chain restarts. A step that ends an episode keeps its own rule."""
    def gae(rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            trunc_values: np.ndarray, last_values: np.ndarray, gamma: float, lam: float) -> Any:
        steps = rewards.shape[1]
        cut = np.zeros(steps, dtype=bool)
        cut[window - 1:steps - 1:window] = True
        cut = cut[None, :] & ~terminated & ~truncated
        # a cut bootstraps with the same value an uncut step would (the next step's), so every TD error is unchanged
        next_values = np.concatenate([values[:, 1:], values[:, -1:]], axis=1)
        return compute_gae(rewards, values, terminated, truncated | cut, np.where(cut, next_values, trunc_values),
                           last_values, gamma, lam)
    return gae


def worker(window: int, train_args: list[str]) -> int:
    """``minionsrl train train_args`` in this process, the batch's GAE cut every ``window`` steps."""
    from minionsrl import cli
    from minionsrl.learner import batch

    batch.compute_gae = windowed(batch.compute_gae, window)
    return cli.main(train_args)


def run_path(window: int, seed: int) -> Path:
    return OUT / "layouts" / f"gae{window}-a{ACTORS}-s{seed}"


def train(window: int, seed: int) -> dict[str, Any]:
    path = run_path(window, seed)
    run_train(path, [sys.executable, __file__, "--worker", str(window), "--", *command(ENV, ACTORS, seed, path)],
              f"window {window} seed {seed}")
    return {**record(ENV, ACTORS, seed, path), "gae_window": window}


def tables(windows: list[int], seeds: list[int]) -> str:
    """Eval return per evaluated round: 8 × 512, 8 × 512 cut every W, and the layout of W-step fragments, each
    beside 8 × 512 (mean difference over the seeds, bootstrap interval)."""
    layouts = [r for r in load_jsonl(LAYOUT_RESULTS) if is_run_of(r, ENV, "minionsrl") and r["seed"] in seeds]
    cut = [r for r in load_jsonl(RESULTS) if r["seed"] in seeds and r["gae_window"] in windows]
    ref = {r["seed"]: r for r in layouts if r["actors"] == ACTORS}
    arms: list[tuple[str, dict[int, dict[str, Any]]]] = [(f"{ACTORS}x{BATCH // ACTORS}", ref)]
    for w in sorted(windows):
        arms.append((f"{ACTORS}x{BATCH // ACTORS}, GAE cut every {w}",
                     {r["seed"]: r for r in cut if r["gae_window"] == w}))
        if BATCH // w != ACTORS and BATCH // w in {r["actors"] for r in layouts}:
            arms.append((f"{BATCH // w}x{w}", {r["seed"]: r for r in layouts if r["actors"] == BATCH // w}))
    rounds = sorted({k for _, rs in arms for r in rs.values() for k in r["evals"]}, key=int)
    rows = []
    for name, rs in arms:
        common = sorted(set(rs) & set(ref))
        row = [name, len(common), mean_ci([rs[s]["final_eval"] for s in common])]
        for k in rounds:
            a = [rs[s]["evals"][k] for s in common if k in rs[s]["evals"]]
            b = [ref[s]["evals"][k] for s in common if k in rs[s]["evals"]]
            row.append(f"{np.mean(a):,.0f}" + ("" if rs is ref else f" ({diff_ci(a, b)})") if a else "")
        rows.append(row)
    headers = ["arm", "seeds", "final eval", *(f"round {k} ({round(int(k) * BATCH / 1000)}k)" for k in rounds)]
    return markdown_table(headers, rows)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        sys.exit(worker(int(sys.argv[2]), sys.argv[4:]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[32], help="GAE cut every W steps (512: none)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="run and tabulate these")
    parser.add_argument("--jobs", type=int, default=2, help="trainings at a time (the machine has 2 cores)")
    parser.add_argument("--reuse", action="store_true", help="only re-render from the results already measured")
    args = parser.parse_args()
    if not args.reuse:
        done = {(r["gae_window"], r["seed"]) for r in load_jsonl(RESULTS)}
        todo = [(w, s) for s in args.seeds for w in args.windows if (w, s) not in done]
        log(f"{len(todo)} runs to go")
        run_all(todo, train, lambda w, s: f"window {w} seed {s}", RESULTS, args.jobs)
    print(tables(args.windows, args.seeds))


if __name__ == "__main__":
    main()
