"""The ``minionsrl`` command: ``train`` and ``eval``.

Every field of :class:`~minionsrl.config.TrainConfig` is a flag (``learning_rate`` →
``--learning-rate``, booleans also as ``--no-...``); ``--config FILE.yaml`` supplies any of them and
flags given on the command line win.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from minionsrl import config
from minionsrl.config import FIELDS
from minionsrl.errors import ConfigError, InvocationError


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    for name, f in FIELDS.items():
        flag = "--" + name.replace("_", "-")
        kind = str(f.type)
        kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": f.metadata.get("help", "")}
        if "bool" in kind:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif kind == "list":
            kwargs.update(nargs="+", type=int, metavar="N")
        elif kind == "dict":
            kwargs.update(type=_json_object, metavar="JSON")
        elif kind.startswith("int"):
            kwargs.update(type=int)
        elif kind.startswith("float"):
            kwargs.update(type=float)
        if "choices" in f.metadata:
            kwargs["choices"] = f.metadata["choices"]
        parser.add_argument(flag, **kwargs)


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minionsrl", description="Deep RL with serverless actors.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a policy", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    train.add_argument("--config", metavar="FILE.yaml", help="YAML file with any config fields")
    train.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its checkpoint")
    _add_config_flags(train)

    ev = sub.add_parser("eval", help="evaluate a trained run's policy")
    ev.add_argument("--run-dir", required=True, help="run directory written by `minionsrl train`")
    ev.add_argument("--episodes", type=int, default=10, help="episodes to run")
    ev.add_argument("--seed", type=int, default=10_000, help="seed of the first episode")
    ev.add_argument("--capture-video", action="store_true", help="record MP4 videos into RUN_DIR/videos")
    return parser


def train_config(args: argparse.Namespace) -> tuple[config.TrainConfig, bool]:
    """Merge defaults, the run dir's saved config (on --resume), --config YAML and flags."""
    given = {k: v for k, v in vars(args).items() if k in FIELDS}
    values: dict[str, Any] = {}
    if args.resume:
        if "run_dir" not in given:
            raise ConfigError("--resume needs --run-dir DIR naming the run to continue")
        from pathlib import Path

        saved = Path(given["run_dir"]) / "config.yaml"
        if not saved.exists():
            raise ConfigError(f"--resume: {given['run_dir']!r} holds no run (no config.yaml); check --run-dir")
        values.update(config.load_yaml(saved))
    if args.config:
        values.update(config.load_yaml(args.config))
    values.update(given)
    return config.build(values), args.resume


def cmd_train(args: argparse.Namespace) -> int:
    from minionsrl.progress import TrainingDisplay
    from minionsrl.trainer import Trainer

    cfg, resume = train_config(args)
    trainer = Trainer(cfg, resume=resume)
    with TrainingDisplay(trainer.cfg, enabled=trainer.cfg.progress, start_steps=trainer.env_steps,
                         start_round=trainer.round) as display:
        summary = trainer.run(on_round=display.update)
    display.print_summary(summary, trainer.run_dir)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from minionsrl.evaluate import evaluate_run

    result = evaluate_run(args.run_dir, episodes=args.episodes, seed=args.seed, capture_video=args.capture_video)
    print(json.dumps(result, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return cmd_train(args) if args.command == "train" else cmd_eval(args)
    except ConfigError as exc:
        print(f"minionsrl: error: {exc}", file=sys.stderr)
        return 2
    except InvocationError as exc:
        print(f"minionsrl: invocation failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("minionsrl: interrupted; continue with --resume --run-dir DIR", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
