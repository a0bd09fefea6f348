"""The bad inputs ``minionsrl train`` must refuse in one line before any work: the cases, and how one runs.
tests/test_bad_input.py checks each; ``bench/robustness.py bad-input`` tables the exact error of each in
docs/results/bad-input.md."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

FAST = ["--max-rounds", "1", "--actors", "1", "--fragment-length", "16", "--eval-episodes", "1", "--no-progress",
        "--no-tensorboard"]
_REAL_FIND_SPEC = importlib.util.find_spec


@dataclass
class Case:
    """One bad input: the flags given (after ``minionsrl train``), files it needs, and the field it is about."""

    field: str
    flags: list[str]
    files: dict[str, str] = field(default_factory=dict)
    note: str = ""
    hide: str = ""  # a module made unimportable for this case (an extra that is not installed)


CASES = [
    Case("env_id", ["--env-id", "CartPol-v1"]),
    Case("env_id", ["--env-id", "nosuchpkg.envs:MyEnv"]),
    Case("env_kwargs", ["--env-kwargs", '{"no_such_kwarg": 1}']),
    Case("env_kwargs", ["--config", "kwargs.yaml"], {"kwargs.yaml": "env_kwargs: {start: 2024-01-01}\n"}),
    Case("env_kwargs", ["--env-kwargs", '{"api_key": "sk-live-0123456789"}'], note="a credential in the config"),
    Case("env_kwargs", ["--env-kwargs", "[1, 2]"]),
    Case("actors", ["--actors", "many"]),
    Case("update_epochs", ["--config", "types.yaml"], {"types.yaml": "update_epochs: four\n"}),
    Case("actors", ["--actors", "0"]),
    Case("actors", ["--actors", "5000"]),
    Case("learning_rate", ["--learning-rate", "-0.1"]),
    Case("learning_rate", ["--learning-rate", "nan"]),
    Case("learning_rate", ["--config", "lr.yaml"], {"lr.yaml": "learning_rat: 0.001\n"}),
    Case("gamma", ["--gamma", "1.5"]),
    Case("fragment_length", ["--fragment-length", "0"]),
    Case("hidden_sizes", ["--hidden-sizes", "64", "0"]),
    Case("hidden_sizes", ["--config", "hs.yaml"], {"hs.yaml": "hidden_sizes: 64\n"}),
    Case("hidden_sizes", ["--hidden-sizes", *["16384"] * 8], note="3.8 G parameters: each width fits, the whole not"),
    Case("seed", ["--seed", "-1"]),
    Case("seed", ["--seed", str(2**40)]),
    Case("n_min", ["--scaler", "nitro", "--n-min", "32", "--n-max", "16"]),
    Case("scaler", ["--scaler", "magic"]),
    Case("scheduler", ["--scaler", "minions", "--scheduler", "missing.safetensors"]),
    Case("backend", ["--backend", "lambda"]),
    Case("backend", ["--backend", "ray"], hide="ray", note="with ray hidden from the interpreter (not installed)"),
    Case("backend", ["--backend", "lithops"], hide="lithops", note="with lithops hidden from the interpreter"),
    Case("lithops_config", ["--backend", "lithops", "--lithops-config", "missing.yaml"]),
    Case("ray_address", ["--backend", "ray", "--ray-address", "ray://admin:hunter2@head:10001"],
         note="a password in a URL"),
    Case("prices", ["--prices", "missing.yaml"]),
    Case("prices", ["--prices", "prices.yaml"], {"prices.yaml": "aws_lambda: 0.0000166667\n"}),
    Case("prices", ["--prices", "negative.yaml"], {"negative.yaml": "aws_lambda: {x86_usd_per_gb_s: -1}\n"}),
    Case("platform", ["--platform", "gcp"]),
    Case("function_memory_mb", ["--function-memory-mb", "64"]),
    Case("budget_usd", ["--budget-usd", "0"]),
    Case("budget_usd", ["--budget-usd", "1e-7"], note="less than one round can cost"),
    Case("fault_*", ["--fault-raise", "0.6", "--fault-kill", "0.6"]),
    Case("fault_hang", ["--fault-hang", "0.1"]),
    Case("min_reply_fraction", ["--min-reply-fraction", "0"]),
    Case("max_retries", ["--max-retries", "-1"]),
    Case("round_deadline_s", ["--round-deadline-s", "-5"]),
    Case("config", ["--config", "missing.yaml"]),
    Case("config", ["--config", "broken.yaml"], {"broken.yaml": "actors: [8\n"}),
    Case("run_dir", ["--run-dir", "/proc/minionsrl-run"]),
    Case("run_dir", ["--run-dir", "done"], note="a directory that holds a run, without --resume"),
    Case("run_dir", ["--resume", "--run-dir", "empty"], note="--resume of a directory without a run"),
    Case("run_dir", ["--resume"], note="--resume without --run-dir"),
    Case("run_dir", ["--resume", "--run-dir", "done", "--learning-rate", "0.1"],
         note="--resume with another config"),
    Case("checkpoint", ["--resume", "--run-dir", "broken-ckpt"], note="--resume from a corrupted checkpoint"),
]


def prepare(workdir: Path) -> None:
    """Runs the cases need: a finished run (``done``), a copy of it with its checkpoint cut short, an empty dir."""
    from minionsrl import cli

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert cli.main(["train", *FAST, "--env-id", "CartPole-v1", "--run-dir", str(workdir / "done")]) == 0
    shutil.copytree(workdir / "done", workdir / "broken-ckpt")
    ckpt = workdir / "broken-ckpt" / "checkpoints" / "latest.safetensors"
    ckpt.write_bytes(ckpt.read_bytes()[:100])
    (workdir / "empty").mkdir()


def command(case: Case) -> list[str]:
    """The full argument list: fast defaults for a fresh run (never on --resume), then the case's flags."""
    return ["train", *(case.flags if "--resume" in case.flags else [*FAST, "--run-dir", "run", *case.flags])]


def run_case(case: Case, workdir: Path) -> tuple[int, str]:
    """Run one case with ``workdir`` as the current directory; return (exit code, stderr)."""
    from minionsrl import cli

    for name, text in case.files.items():
        (workdir / name).write_text(text)

    def find_spec(name: str, *args):
        return None if case.hide and name.split(".")[0] == case.hide else _REAL_FIND_SPEC(name, *args)

    err, cwd = io.StringIO(), os.getcwd()
    os.chdir(workdir)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), \
                mock.patch("importlib.util.find_spec", find_spec):
            try:
                rc = cli.main(command(case))
            except SystemExit as exc:  # argparse
                rc = int(exc.code or 0)
    finally:
        os.chdir(cwd)
        shutil.rmtree(workdir / "run", ignore_errors=True)  # a case that got through must not spoil the next
    return rc, err.getvalue()
