"""Shared helpers of the benchmark scripts: machine facts, Markdown tables, the BENCHMARKS.md writer,
JSON-lines result files, and the two timed child processes (a minionsrl run and an SB3 PPO run).

Every benchmark starts what it times in a fresh subprocess, so the number includes what a user
waits for (interpreter start, imports, process pools) and one run cannot warm up the next.
This file is also the child's entry point (``python bench/common.py {minionsrl,sb3} JSON``) and makes docs/BENCHMARKS.md
from docs/benchmarks/ (``python bench/common.py doc``; ``doc --check`` only says whether it is up to date).
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
DOC = ROOT / "docs" / "BENCHMARKS.md"
SECTIONS_DIR = ROOT / "docs" / "benchmarks"  # one file a section, NN-name.md: BENCHMARKS.md is made from them
PYTHON = sys.executable

_DOC_INTRO = """# Benchmarks

<!-- Generated: do not edit. Edit docs/benchmarks/NN-name.md (a benchmark rewrites its own, between its markers)
and run `.venv/bin/python bench/common.py doc`. -->

What `minionsrl` costs and gives, against Stable-Baselines3 PPO where there is a peer, measured by the scripts in
`bench/`. Each benchmark writes its own section (`docs/benchmarks/NN-name.md`, numbered here in that order) and
names the machine, date, versions, commit and the command that reproduces it; this page is assembled from those
files by `.venv/bin/python bench/common.py doc` (every benchmark run does it too). The experiments that compare
arms over seeds are `bench/specs/*.yaml`, run by `.venv/bin/python bench/experiment.py SPEC` (`minionsrl compare`).
The machine is small (2 cores) and is shared, so absolute times are noisy; every comparison is measured side by
side in one script run: read the **ratios**, and read them as ranges. SB3 runs with one torch thread, as our
learner does (section 1 says why). Raw results go to `bench/out/` (not committed). Section 14 was measured on a
lent GPU machine and names it.

Kept elsewhere: the torch era's learner benchmarks ([archive/benchmarks-torch-era.md](archive/benchmarks-torch-era.md)),
how some numbers came to be ([archive/benchmarks-history.md](archive/benchmarks-history.md)) and the one-off studies'
scripts ([archive/bench/](archive/bench/README.md)).
"""

# -- machine and versions ------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def n_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("minionsrl", "jax", "optax", "numpy", "gymnasium", "mujoco", "torch", "stable-baselines3", "ray",
                 "lithops"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def git_commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "minionsrl"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.strip()
        return rev + (" + uncommitted changes in minionsrl/" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def reproduce_command() -> str:
    """The command line of this script run, as a user would type it from the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        script_arg = str(script.relative_to(ROOT))
    except ValueError:
        script_arg = str(script)
    args = [a for a in sys.argv[1:] if a != "--reuse"]  # --reuse only re-renders earlier results
    return " ".join([".venv/bin/python", shlex.quote(script_arg), *map(shlex.quote, args)])


def provenance(started: float, ended: float | None = None, command: str | None = None) -> str:
    """The lines that end every section: machine, date, versions, commit, command.

    ``started``/``ended``: the first measurement's start and the last one's end (default: now).
    """
    v = versions()
    when = dt.datetime.fromtimestamp(started).strftime("%Y-%m-%d %H:%M")
    took = ((ended or time.time()) - started) / 60
    return "\n".join([
        f"- Machine: {n_cores()} cores (`nproc`), {cpu_model()}; load average at the end {load_average()} "
        "(shared with other work).",
        f"- Date: {when}, measurements took {took:.1f} min; commit {git_commit()}.",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()) + ".",
        f"- Reproduce: `{command or reproduce_command()}`",
    ])


# -- Markdown ------------------------------------------------------------------------------------


def fmt(value: Any, digits: int = 1) -> str:
    """A table cell: floats rounded, None as an em dash, bools as yes/no."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:  # NaN
            return "—"
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def met(ok: bool) -> str:
    """A target's verdict for a table cell."""
    return "yes" if ok else "**no**"


def sb3_threads_note(threads: int) -> str:
    """How SB3's torch threads were set, for the method paragraph of a section."""
    if threads == 0:
        return "SB3 ran with torch's default intra-op threads (one per core)."
    return (f"SB3 ran with `torch.set_num_threads({threads})`, as our learner does. With torch's default (one "
            "thread per core) SB3 was up to 9× slower on this shared machine (likely its worker threads spinning): "
            "4,096 CartPole steps took 18.2 s with 1 thread and 160.6 s with 2, and one full 100k-step CartPole "
            "run took 1,142 s (`--sb3-threads 0` reproduces that setting).")


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], digits: int | Sequence[int] = 1) -> str:
    """Render rows as a GitHub Markdown table (numbers right-aligned); ``digits`` per table or per column."""
    from minionsrl.experiments import tables  # lazily: the RLlib venv runs bench/hopper.py, without minionsrl

    per_col = [digits] * len(headers) if isinstance(digits, int) else list(digits)
    numeric = [all(isinstance(row[i], int | float) or row[i] is None for row in rows) and bool(rows)
               for i in range(len(headers))]
    return tables.markdown_table(headers, rows, [lambda c, d=d: fmt(c, d) for d in per_col], right=numeric)


def write_section(name: str, markdown: str, doc: Path | None = None) -> None:
    """Replace the section ``name`` (between its markers) of ``doc``, or append it there. Without ``doc``: the
    BENCHMARKS section, in its file under docs/benchmarks/ (a new one is numbered last), then BENCHMARKS.md is
    made again (:func:`write_doc`)."""
    if doc is None:
        start = f"<!-- bench:{name} start -->"
        found = [p for p in sorted(SECTIONS_DIR.glob("*.md")) if start in p.read_text()]
        doc = found[0] if found else SECTIONS_DIR / f"{len(list(SECTIONS_DIR.glob('*.md'))) + 1:02d}-{name}.md"
        _replace_section(doc, name, markdown)
        write_doc()
    else:
        _replace_section(doc, name, markdown)


def _replace_section(doc: Path, name: str, markdown: str) -> None:
    start, end = f"<!-- bench:{name} start -->", f"<!-- bench:{name} end -->"
    block = f"{start}\n{markdown.strip()}\n{end}"
    text = doc.read_text() if doc.exists() else ""
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + block + "\n"
    _write(doc, text)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


HEADLINE = re.compile(r"^<!-- headline: (.+?) -->\n", re.M)  # a section's answer in one line, inside its markers


def summary_row(number: int, text: str) -> list[str]:
    """A section's row of the summary table: its title, its headline, the date it was measured and the command
    that measures it again. The headline is written inside the section's markers, so a benchmark that rewrites its
    section drops it (a stale figure never stands beside a new date) until one is written for the new numbers."""
    title = re.search(r"^## (?:\d+\. )?(.+)$", text, re.M)
    headline = HEADLINE.search(text)
    date = re.search(r"^- Date: (\S+)", text, re.M) or re.search(r"\b(20\d\d-\d\d-\d\d)\b", text)
    command = (re.search(r"^- Reproduce: `([^`]+)`", text, re.M)
               or re.search(r"`((?:\.venv/bin/python|bash) bench/[^`]+)`", text))
    return [f"§{number} {title.group(1) if title else '?'}",
            headline.group(1) if headline else "(rerun since its headline: read the section)",
            date.group(1) if date else "—", f"`{command.group(1)}`" if command else "—"]


def render_doc(sections: Path = SECTIONS_DIR) -> str:
    """docs/BENCHMARKS.md as made from the section files, in their order, each heading numbered by its place,
    after a summary table of their headlines."""
    texts = [re.sub(r"^<!-- bench:\S+ (start|end) -->\n", "", p.read_text(), flags=re.M).strip()
             for p in sorted(sections.glob("*.md"))]
    rows = [summary_row(number, text) for number, text in enumerate(texts, 1)]
    parts = [_DOC_INTRO, "## Summary\n\n" + markdown_table(["section", "answer", "measured", "command"], rows) + "\n"]
    for number, text in enumerate(texts, 1):
        text = re.sub(r"^## (\d+\. )?", f"## {number}. ", HEADLINE.sub("", text), count=1, flags=re.M)
        parts.append(text + "\n")
    return "\n".join(parts)


def write_doc() -> None:
    """Make docs/BENCHMARKS.md again from docs/benchmarks/."""
    _write(DOC, render_doc())


def run_modes(modes: dict[str, Callable[[list[str]], int | None]]) -> None:
    """The entry point of a script that holds several benchmarks: ``script.py [MODE] [flags]``, MODE one of
    ``modes`` (the first when none is named), its flags read by that mode's own parser (``sys.argv`` stays whole, so
    :func:`reproduce_command` names the mode)."""
    args = sys.argv[1:]
    mode = args.pop(0) if args and args[0] in modes else next(iter(modes))
    sys.exit(modes[mode](args))


# -- results -------------------------------------------------------------------------------------


def kept(path: Path, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A result kept as JSON at ``path``: read when it is there, else made by ``make`` and written first (an
    experiment that spans sessions: delete the file to measure it again)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(make(), indent=1))
    return json.loads(path.read_text())


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one result and flush it to disk at once, so a cut session still leaves data."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def load_jsonl(path: Path) -> list[dict[str, Any]]:
    """Results already written by an earlier (possibly cut) run of a script; [] if none."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def find_result(records: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    """The last record whose fields equal ``match`` (for ``--reuse``), or None."""
    hits = [r for r in records if all(r.get(k) == v for k, v in match.items())]
    return hits[-1] if hits else None


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# -- timed child processes -----------------------------------------------------------------------


def run_child(mode: str, args: dict[str, Any], timeout_s: float | None,
              script: str = __file__) -> dict[str, Any]:
    """Run ``python SCRIPT MODE JSON`` (default: bench/common.py) and return the last line it printed, as JSON, plus
    the process wall time."""
    t0 = time.perf_counter()
    proc = subprocess.run([PYTHON, str(Path(script).resolve()), mode, json.dumps(args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} child failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = wall
    return result


def run_minionsrl(config: dict[str, Any], timeout_s: float | None = None) -> dict[str, Any]:
    """Train with ``make_trainer(TrainConfig(**config)).run()`` in a fresh process (PPO, APPO or IMPALA).

    Returns summary.json's fields (without the config) plus ``process_wall_s`` (launch to exit),
    ``first_target_steps`` (env steps at the first evaluation reaching ``target_return``, if any).
    """
    return run_child("minionsrl", config, timeout_s)


def run_sb3(env_id: str, seed: int, steps: int, eval_episodes: int = 0, threads: int | None = 1,
            timeout_s: float | None = None) -> dict[str, Any]:
    """SB3 PPO with its defaults, ``PPO("MlpPolicy", env_id, seed=seed).learn(steps)`` in a fresh process.

    ``threads``: ``torch.set_num_threads`` before anything runs (None: torch's default, one per core).
    One thread is the default here because torch's intra-op threads, on a shared 2-core machine, made
    SB3 up to 9x slower (spinning worker threads), which would flatter every ratio against it.
    Returns ``learn_s`` (learn() alone), ``setup_s`` (imports + constructing PPO), ``eval_return`` (mean of
    ``evaluate_policy`` over ``eval_episodes`` deterministic episodes, timed apart in ``eval_s``) and
    ``process_wall_s``; ``train_s`` = setup + learn is what a user waits for to get the trained policy.
    """
    if importlib.util.find_spec("stable_baselines3") is None:
        raise SystemExit("Stable-Baselines3 (the baseline) is not installed in this venv: `make .venv/.bench` "
                         "installs it and torch==2.13.0 (`make bench` does too, then runs every benchmark)")
    return run_child("sb3", {"env_id": env_id, "seed": seed, "steps": steps, "eval_episodes": eval_episodes,
                              "threads": threads}, timeout_s)


def _child_minionsrl(config: dict[str, Any]) -> dict[str, Any]:
    from minionsrl.build import make_trainer
    from minionsrl.config import TrainConfig
    from minionsrl.loop.metrics import read_metrics

    summary = make_trainer(TrainConfig(**config)).run()
    summary.pop("config", None)
    target = config.get("target_return")
    summary["first_target_steps"] = None
    if target is not None:
        for row in read_metrics(config["run_dir"]):
            value = row.get("eval_return_mean")
            if value not in (None, "") and float(value) >= target:
                summary["first_target_steps"] = int(float(row["env_steps"]))
                break
    summary["run_dir"] = config["run_dir"]
    return summary


def _child_sb3(args: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    import torch

    if args["threads"] is not None:
        torch.set_num_threads(args["threads"])
    from stable_baselines3 import PPO
    from stable_baselines3.common.evaluation import evaluate_policy

    model = PPO("MlpPolicy", args["env_id"], seed=args["seed"])
    t1 = time.perf_counter()
    model.learn(args["steps"])
    t2 = time.perf_counter()
    result: dict[str, Any] = {"setup_s": t1 - t0, "learn_s": t2 - t1, "train_s": t2 - t0, "steps": args["steps"],
                              "torch_threads": torch.get_num_threads()}
    if args["eval_episodes"]:
        mean_ret, std_ret = evaluate_policy(model, model.get_env(), n_eval_episodes=args["eval_episodes"],
                                            deterministic=True)
        result.update(eval_return=float(mean_ret), eval_return_std=float(std_ret), eval_s=time.perf_counter() - t2)
    return result


if __name__ == "__main__":
    if sys.argv[1:] in (["doc"], ["doc", "--check"]):  # BENCHMARKS.md from docs/benchmarks/, or whether it is so
        if sys.argv[2:] and DOC.read_text() != render_doc():
            sys.exit("docs/BENCHMARKS.md is not what docs/benchmarks/ makes: run .venv/bin/python bench/common.py doc")
        if not sys.argv[2:]:
            write_doc()
        sys.exit(0)
    mode, payload = sys.argv[1], json.loads(sys.argv[2])
    child = {"minionsrl": _child_minionsrl, "sb3": _child_sb3}[mode]
    print(json.dumps(child(payload)), flush=True)
