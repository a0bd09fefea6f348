"""The ``minionsrl`` command: ``train``, ``eval``, ``compare``, ``motivate``, ``scale``, ``scheduler train``, ``plot``.

Every field of :class:`~minionsrl.config.TrainConfig` is a flag (``learning_rate`` →
``--learning-rate``, booleans also as ``--no-...``); ``--config FILE.yaml`` supplies any of them and
flags given on the command line win.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from minionsrl import config, files
from minionsrl.config import FIELDS
from minionsrl.errors import (
    TERMINATED,
    TERMINATED_CODE,
    ClusterLost,
    ConfigError,
    InvocationError,
    NotStarted,
    Resumable,
    one_line,
)
from minionsrl.redact import redact_text


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a run: its message says how to continue it."""

    what, code = "interrupted", 130


class Terminated(KeyboardInterrupt):
    """SIGTERM: a run ends as Ctrl-C ends it (:func:`_sigterm_as_interrupt`)."""

    what, code = TERMINATED, TERMINATED_CODE


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[Callable[[], None]]:
    """While the block runs, SIGTERM raises :class:`Terminated` in the main thread, so that a run stops as on
    Ctrl-C: the backend closes (its instances, its temporary folder, a private Ray cluster) and one line says how
    to resume. A second SIGTERM kills at once. Yields a function that installs the handler again: Ray's driver
    puts its own in place while it starts (which prints a C++ stack dump, then exits).

    A signal's handler runs wherever the main thread is, and where Python cannot raise (a garbage collector's
    callback, such as JAX's, a ``__del__``, a weakref's callback) it prints "Exception ignored" and goes on: the
    run would carry on as if never signalled. Such a :class:`Terminated` reaches ``sys.unraisablehook``, which
    sends the signal to the main thread again once the hook has returned, to be raised in ordinary code."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return
    before, before_hook = signal.getsignal(signal.SIGTERM), sys.unraisablehook
    in_hook = threading.Event()  # set while the hook runs: raising there would be lost too

    def again() -> None:
        while in_hook.is_set():
            time.sleep(0.001)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

    def send_again() -> None:
        threading.Thread(target=again, name="sigterm-again", daemon=True).start()

    def terminated(signum: int, frame: Any) -> None:
        if in_hook.is_set():
            send_again()
            return
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise Terminated

    def install() -> None:
        signal.signal(signal.SIGTERM, terminated)

    def unraisable(info: Any) -> None:
        if not (isinstance(info.exc_value, Terminated) and threading.current_thread() is threading.main_thread()):
            before_hook(info)
            return
        in_hook.set()
        try:
            install()
            send_again()
        finally:
            in_hook.clear()

    install()
    sys.unraisablehook = unraisable
    try:
        yield install
    finally:
        signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)
        if sys.unraisablehook is unraisable:
            sys.unraisablehook = before_hook


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's default in its help, unless there is none to show (None, a switch's False, a config flag's
    default, which its help states itself)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, False) or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line (no usage block) and exit code 2, like every other bad input; a flag
    is never abbreviated (``--learning-rat`` is an error, not ``--learning-rate``), and the help shows defaults.
    Subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"minionsrl: error: {one_line(redact_text(message))}; see `{self.prog} --help`\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """argparse's, but flags it does not know are explained by the subcommand they were given to: another
        library's name (CleanRL's ``--num-envs``: ``--actors`` here) or the closest flag of that subcommand."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = _subcommand(self, parsed)
            parser.error(_unrecognized(extras, parser))
        return parsed


def _subcommand(parser: argparse.ArgumentParser, parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost subcommand's parser that ``parsed`` went through (``minionsrl scheduler train``'s)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and getattr(parsed, action.dest, None) in action.choices:
            return _subcommand(action.choices[getattr(parsed, action.dest)], parsed)
    return parser


def _unrecognized(extras: list[str], parser: argparse.ArgumentParser) -> str:
    """What is wrong with the arguments ``parser`` did not take, one clause each: a flag another library names so
    (CleanRL's, Stable-Baselines3's) with ours, a mistyped flag with the closest of ``parser``'s; the values
    after an unknown flag are not reported on their own."""
    from minionsrl.words import did_you_mean, foreign_name

    known = [o for o in parser._option_string_actions if o.startswith("--")]
    clauses, stray = [], []
    for arg in extras:
        if not arg.startswith("-") or arg == "-":
            if not clauses:  # a value of no flag: argparse's own words
                stray.append(arg)
            continue
        name = arg.partition("=")[0]
        clauses.append(foreign_name(name, as_flag=True, known=known)
                       or f"unrecognized argument {name}{did_you_mean(name, known)}")
    return "; ".join([*([f"unrecognized arguments: {' '.join(stray)}"] if stray else []), *clauses])


class _HelpAll(argparse.Action):
    """``--help-all``: the help with the rarely used flags too (fault injection, Nitro's and the detectors' knobs,
    backend internals), which ``--help`` leaves out."""

    def __init__(self, option_strings: list[str], dest: str, hidden: dict[argparse.Action, str], **kwargs: Any):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)
        self.hidden = hidden

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        for action, text in self.hidden.items():
            action.help = text
        parser.epilog = None
        parser.print_help()
        parser.exit()


def _add_config_flags(parser: argparse.ArgumentParser, roles: tuple[str, ...] = tuple(config.ROLES),
                      skip: frozenset[str] = frozenset()) -> None:
    """A flag per config field of ``roles`` but ``skip`` (``learning_rate`` → ``--learning-rate``; booleans also
    ``--no-…``), one help section per role; the rarely used ones are listed by ``--help-all`` only."""
    hidden: dict[argparse.Action, str] = {}
    for role in roles:
        group = parser.add_argument_group(f"{role} options", config.ROLES[role].__doc__.splitlines()[0])
        for name in config.fields_of((role,)):
            if name in skip:
                continue
            f, kind = FIELDS[name], config.field_kind(name)
            text = config.help_text(name).replace("%", "%%")
            # the default is not argparse's (a flag not given must not override the YAML): the help states it
            kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS,
                                      "help": argparse.SUPPRESS if f.metadata["rare"] else text}
            kwargs.update(_FLAG_KINDS[kind])
            if "choices" in f.metadata:
                kwargs["choices"] = f.metadata["choices"]
            if "words" in f.metadata:  # a number, or one of these words (--actors auto)
                kwargs["type"] = _or_words(kwargs["type"], f.metadata["words"])
            action = group.add_argument("--" + name.replace("_", "-"), *f.metadata.get("aliases", ()), **kwargs)
            if f.metadata["rare"]:
                hidden[action] = text
    if hidden:
        parser.add_argument("--help-all", action=_HelpAll, hidden=hidden,
                            help=f"show this help with the {len(hidden)} rarely used options too")
        parser.epilog = (f"{len(hidden)} rarely used options (fault injection, Nitro's and the detectors' knobs, "
                         "backend internals) are left out here: --help-all lists them. Every option can also be "
                         "set in a YAML file (--config), flat or in sections named as above.")


def _whole(text: str) -> int:
    """An integer flag's value: ``100000``, or a float that is a whole number (``1e5``, as Python's
    ``TrainConfig(total_timesteps=1e5)`` takes it)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value != int(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(value)


def _or_words(parse: Any, words: tuple[str, ...]) -> Any:
    """An argparse type that takes ``words`` as they are and anything else as ``parse`` does."""

    def value(text: str) -> Any:
        if text in words:
            return text
        try:
            return parse(text)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise argparse.ArgumentTypeError(f"{text!r} is neither a number nor {' or '.join(words)}") from exc

    return value


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


_FLAG_KINDS: dict[str, dict[str, Any]] = {
    "bool": {"action": argparse.BooleanOptionalAction}, "int": {"type": _whole}, "float": {"type": float},
    "str": {}, "list": {"nargs": "+", "type": _whole, "metavar": "N"},
    "dict": {"type": _json_object, "metavar": "JSON"},
}


def build_parser() -> argparse.ArgumentParser:
    """The ``minionsrl`` command line: one subcommand a job, each with its flags grouped by role."""
    from minionsrl import __version__

    parser = _Parser(prog="minionsrl", description="Deep RL with serverless actors.")
    parser.add_argument("--version", action="version", version=f"minionsrl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train a policy", usage="%(prog)s [--config FILE.yaml] [--resume] [options]")
    train.add_argument("--config", metavar="FILE.yaml", help="YAML file with any config fields")
    train.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its checkpoint")
    _add_config_flags(train)

    cmp = sub.add_parser("compare", help="scalers x seeds on one env: CSV, Markdown table, PNG curves",
                         usage="%(prog)s --scalers ARMS [--seeds K] (--rounds N | --until target --target R) [options]")
    cmp.add_argument("--scalers", required=True,
                     help="comma-separated arms scaler[:n][@backend][/learner-budget][+field=value...][*seeds], "
                     "e.g. fixed:16@server,fixed:16,nitro,fixed:64/per-round,kungfu*5,fixed:64+pipeline; "
                     "critical:time, critical:cost or auto:cost sets the objective; +field=value sets a config field "
                     "for that arm (+field alone: true); *K runs seeds 1..K for that arm")
    cmp.add_argument("--seeds", type=int, default=3, help="seeds 1..K per arm")
    cmp.add_argument("--rounds", type=int, default=None,
                     help="rounds per run, at most (--total-timesteps, or the preset's, also ends a run); needed "
                     "unless --until target")
    cmp.add_argument("--until", choices=("rounds", "target"), default="rounds",
                     help="rounds: every run ends at --rounds (or its steps); target: each run goes on until its "
                     "evaluation reaches --target, or a cap stops it (--time-budget-s projected seconds, "
                     "--budget-usd dollars; --rounds and --total-timesteps cap it too when given)")
    cmp.add_argument("--out", default=None, help="output directory (default runs/compare-<env>)")
    cmp.add_argument("--target", type=float, default=None, help="report the time and dollars to reach this eval "
                     "return")
    cmp.add_argument("--dollar-budget", type=float, default=None, help="report each arm's return when it had spent "
                     "this many dollars (default: the cheapest run's total)")
    cmp.add_argument("--config", metavar="FILE.yaml", help="YAML file with config fields shared by every run")
    _add_config_flags(cmp)

    pln = sub.add_parser("plan", help="forecast seconds and dollars per actor count for this env, from a short probe",
                         usage="%(prog)s [--cap N] [--json FILE] [--out DIR] [train's options]")
    pln.add_argument("--cap", type=int, default=256, help="the largest actor count forecast (powers of two up to it)")
    pln.add_argument("--json", metavar="FILE", default=None, help="also write the forecast's rows as JSON")
    pln.add_argument("--out", default=None, help="output directory for plan.md and plan.png (default runs/plan-<env>)")
    pln.add_argument("--config", metavar="FILE.yaml", help="YAML file with config fields")
    _add_config_flags(pln)

    scl = sub.add_parser("scale", help="invoke 1..N concurrent functions: invoke and collect overhead",
                         usage="%(prog)s [--max-actors N] [--steps T] [options]")
    scl.add_argument("--max-actors", type=int, default=64, help="largest number of concurrent invocations")
    scl.add_argument("--steps", type=int, default=1, help="env steps per function (1: measure pure overhead)")
    scl.add_argument("--repeats", type=int, default=5, help="warm rounds per count (median reported)")
    scl.add_argument("--out", default=None, help="output directory (default runs/scale-<backend>)")
    scl.add_argument("--config", metavar="FILE.yaml", help="YAML file with config fields")
    _add_config_flags(scl, ("env", "run", "functions", "cost"))

    mot = sub.add_parser("motivate", help="boost one round from saved checkpoints; correlate the gain with "
                         "the convexity ratio and the noise scale")
    mot.add_argument("--run-dir", required=True, nargs="+",
                     help="runs trained with --keep-checkpoints-every K (one per seed: their checkpoints are pooled)")
    mot.add_argument("--base", type=int, default=8, help="actors of the ordinary round")
    mot.add_argument("--boost", type=int, default=64, help="actors of the boosted round")
    mot.add_argument("--eval-episodes", type=int, default=20, help="evaluation episodes after each round")
    mot.add_argument("--out", default=None, help="output directory (default RUN_DIR/motivate)")

    sched = sub.add_parser("scheduler", help="the MinionsRL learned scheduler")
    sched_sub = sched.add_subparsers(dest="scheduler_command", required=True)
    st = sched_sub.add_parser("train", help="train the scheduler over many complete training jobs",
                              usage="%(prog)s --target R [--jobs J] [options]")
    st.add_argument("--jobs", type=int, default=100, help="training jobs (MDP episodes)")
    st.add_argument("--target", type=float, required=True, help="target eval return that ends a job")
    st.add_argument("--rounds", type=int, default=60, help="most rounds per job")
    st.add_argument("--out", default="runs/scheduler.safetensors", help="where to save the scheduler")
    st.add_argument("--beta", type=float, default=0.1, help="reward per projected round-second")
    st.add_argument("--lam", type=float, default=0.0, help="reward per round-dollar (budget-aligned when > 0)")
    st.add_argument("--scheduler-gamma", type=float, default=None,
                    help="the scheduler's discount per round (default 0.9; --gamma is the training jobs' own)")
    st.add_argument("--config", metavar="FILE.yaml", help="YAML file with config fields of every job")
    # every job runs the scheduler, within n_min..n_max
    _add_config_flags(st, skip=frozenset(config.fields_of(("scaling",))) - {"actors", "n_min", "n_max"})

    plot = sub.add_parser("plot", help="PNG plots of a run: return vs env steps and projected time, cost, actors")
    plot.add_argument("--run-dir", required=True, help="run directory written by `minionsrl train`")

    ev = sub.add_parser("eval", help="evaluate a trained run's policy")
    ev.add_argument("--run-dir", required=True, help="run directory written by `minionsrl train`")
    ev.add_argument("--which", choices=("latest", "best"), default="latest",
                    help="the last round's policy, or the one with the best evaluation return "
                    "(checkpoints/best.safetensors)")
    ev.add_argument("--episodes", type=int, default=10, help="episodes to run")
    ev.add_argument("--seed", type=int, default=10_000, help="seed of the first episode")
    ev.add_argument("--capture-video", action="store_true", help="record MP4 videos into RUN_DIR/videos")
    ev.add_argument("--trust-run-code", action="store_true",
                    help="import a custom env's module from the run dir (then the current folder) when it is not on "
                         "the Python path: only for runs you trust, as it runs their code")
    return parser


WHERE_TO_CONNECT = ("ray_address", "lithops_config")


def train_config(args: argparse.Namespace) -> tuple[config.TrainConfig, bool]:
    """Merge defaults, the run dir's saved config (on --resume), --config YAML and flags."""
    given = {k: v for k, v in vars(args).items() if k in FIELDS}
    values: dict[str, Any] = {}
    if getattr(args, "resume", False):
        if "run_dir" not in given:
            raise ConfigError("--resume needs --run-dir DIR naming the run to continue")
        values.update(config.load_yaml(files.config_path(given["run_dir"], "--resume"), saved=True))
        for name in WHERE_TO_CONNECT:  # a run dir is data, not trusted to say where to connect (Ray unpickles)
            if values.get(name) and name not in given:
                flag = "--" + name.replace("_", "-")
                print(f"minionsrl: --resume: not connecting to {name} {values[name]!r} from the run dir's "
                      f"{files.CONFIG}; pass {flag} {values[name]} to use it", file=sys.stderr)
                values[name] = None
    if args.config:
        values.update(config.load_yaml(args.config))
    values.update(given)
    return config.build(values), getattr(args, "resume", False)


# fields of which a run sets one: giving one on --resume puts it in place of the run's other
_ONE_OF = {"train_batch_size": "fragment_length", "fragment_length": "train_batch_size",
           "minibatch_size": "num_minibatches", "num_minibatches": "minibatch_size"}
# flags that say another field's value: the run changes that one (CleanRL's --anneal-lr is an lr_schedule)
_SAYS: dict[str, tuple[str, Callable[[Any], Any]]] = {"anneal_lr": ("lr_schedule", config.lr_schedule_of)}


def _shown(value: Any) -> str:
    """A config value as a refusal quotes it."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


def _as_given(name: str, value: Any, source: str | None) -> str:
    """How the user gave field ``name``: its flag with the value, or its line in the ``--config`` file ``source``."""
    if source is not None:
        return f"{name}: {_shown(value)} in {source}"
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    if isinstance(value, list):
        return " ".join([flag, *map(str, value)])
    return f"{flag} {json.dumps(value) if isinstance(value, dict) else value}"


def _repriced(cfg: config.TrainConfig) -> str | None:
    """Where a resumed run prices another deployment than it did (``--backend ray`` on a local run), what it was
    priced as and what it is now: a resume may change where the functions run, not what is learned."""
    from minionsrl.deployments import deployment_of

    saved = config.build(config.load_yaml(files.config_path(cfg.run.run_dir, "--resume"), saved=True))
    was, now = (deployment_of(c.cost.deployment, c.functions.backend).priced_as(c.cost.platform) for c in (saved, cfg))
    return None if was == now else f"--resume: this run was priced as {was}; it is priced as {now}"


def check_resume_changes(args: argparse.Namespace, cfg: config.TrainConfig) -> None:
    """On --resume, refuse flags (and ``--config`` values) that change what the run learns, naming each flag and
    what it changes (a resumed run keeps the settings it was learning with). A value that differs from the saved
    config's but resolves to the same run (as the saved one was resolved) is fine; the run dir's own checks follow
    in :class:`~minionsrl.loop.session.Session`."""
    from minionsrl.prepare import prepare_config

    saved = config.build(config.load_yaml(files.config_path(cfg.run.run_dir, "--resume"), saved=True))
    user = {name: args.config for name in config.flat_values(config.load_yaml(args.config))} if args.config else {}
    user.update({name: None for name in vars(args) if name in FIELDS})  # a flag wins over the file
    changed = [name for name in user
               if FIELDS[name].metadata["learning"] and cfg.get(name) != saved.get(name)]
    if not changed:
        return
    try:
        resolved, _ = prepare_config(cfg)
    except ConfigError:
        try:  # a config that fails without these changes too is not theirs to answer for: Session says why
            prepare_config(cfg.replace(**{name: saved.get(name) for name in changed}))
        except ConfigError:
            return
    else:
        if resolved.learning_fields() == saved.learning_fields():  # the same run, however it was written
            return
    reasons = []
    for name in changed:
        what = f"{name} ({_shown(saved.get(name))} → {_shown(cfg.get(name))})"
        if name in _SAYS and cfg.get(name) is not None:
            said, value = _SAYS[name]
            what = f"{said} ({_shown(saved.get(said))} → {_shown(value(cfg.get(name)))})"
        other = _ONE_OF.get(name)
        if other and saved.get(other) is not None and other not in user and cfg.get(name) is not None:
            what = f"{other} ({_shown(saved.get(other))} → unset) and {what}"
        reasons.append(f"{_as_given(name, cfg.get(name), user[name])} changes {what}")
    them = "it" if len(reasons) == 1 else "them"
    raise ConfigError(f"--resume: {'; '.join(reasons)}; a resumed run goes on learning as it started: resume "
                      f"without {them}, or start a new run with another --run-dir")


def cmd_train(args: argparse.Namespace) -> int:
    """``minionsrl train``: one run (resumed where its run dir holds one); 0 when it ends."""
    from minionsrl.build import make_trainer
    from minionsrl.experiments.training import run_trainer
    from minionsrl.loop import tracking
    from minionsrl.progress import TrainingDisplay, print_summary

    cfg, resume = train_config(args)
    if resume:
        check_resume_changes(args, cfg)
        repriced = _repriced(cfg)
    tracking.check(cfg)
    with _sigterm_as_interrupt() as reinstall:
        trainer = make_trainer(cfg, resume=resume)
        reinstall()  # over Ray's, if its driver started
        if resume and repriced:
            print(f"minionsrl: {repriced} from round {trainer.round + 1} on; its totals add both", file=sys.stderr)
        try:
            with TrainingDisplay(trainer.cfg, enabled=trainer.cfg.run.progress, start_steps=trainer.env_steps,
                                 start_round=trainer.round,
                                 projected_s=lambda: trainer.state.billed.projected_s,
                                 priced_as=trainer.ledger.priced_as,
                                 reason=lambda: trainer.scaler.reason) as display:
                summary = run_trainer(trainer, show=display.update)  # the rounds, the plots (and W&B: --track)
        except KeyboardInterrupt as exc:
            stopped = Interrupted(f"continue with --resume {files.run_dir_flag(trainer.run_dir)}")
            if isinstance(exc, Terminated):
                stopped.what, stopped.code = Terminated.what, Terminated.code
            raise stopped from None
        except Resumable as exc:  # the one line names the run to resume
            raise type(exc)(f"{exc} {files.run_dir_flag(trainer.run_dir)}") from None
    print_summary(summary, trainer.run_dir)
    return 0


def _plot_run(run_dir: Any) -> list[Any]:
    from minionsrl.experiments.training import plot_run

    return plot_run(run_dir)


def _check_run_dir_arg(run_dir: str) -> None:
    """An empty --run-dir would be the current folder: refused, as ``train`` refuses it."""
    if not run_dir.strip():
        raise ConfigError("--run-dir: an empty path; name the run directory (`.` for the current folder)")


def cmd_plot(args: argparse.Namespace) -> int:
    """``minionsrl plot``: the plots of a run dir from its metrics.csv, written beside it; prints their paths."""
    from pathlib import Path

    _check_run_dir_arg(args.run_dir)
    run_dir = Path(args.run_dir)
    if not (run_dir / files.METRICS).exists():
        raise ConfigError(f"--run-dir: {str(run_dir)!r} holds no {files.METRICS}")
    try:
        paths = _plot_run(run_dir)
    except ConfigError:
        raise
    except OSError as exc:  # a read-only run dir, a full disk
        raise ConfigError(f"plot: cannot write into {str(run_dir)!r} ({exc.strerror or exc}); make it "
                          "writable") from exc
    except (ValueError, KeyError) as exc:  # a metrics.csv edited by hand: a missing column, a non-number
        raise ConfigError(f"plot: {str(run_dir / files.METRICS)!r} cannot be plotted ({type(exc).__name__}: {exc}); "
                          "restore it from the run") from exc
    for path in paths:
        print(path)
    return 0


def _no_run_dir(args: argparse.Namespace, command: str) -> None:
    """Refuse ``--run-dir`` where a command writes elsewhere (it takes train's flags, this one too)."""
    if "run_dir" in vars(args):  # a flag not given is not set (argparse.SUPPRESS)
        raise ConfigError(f"--run-dir: {command} writes its runs and files under --out; give --out instead")


def cmd_plan(args: argparse.Namespace) -> int:
    """``minionsrl plan``: a short probe on this machine, then seconds and dollars per actor count; prints the
    forecast (Markdown) and writes it with its frontier plot."""
    from minionsrl.experiments.plan import run_plan

    if args.cap < 1:
        raise ConfigError(f"--cap: {args.cap} actors; give a cap of at least 1")
    _no_run_dir(args, "plan")
    cfg, _ = train_config(args)
    out = args.out or f"runs/plan-{cfg.env.env_id.replace('/', '-').replace(':', '-')}"
    text, _ = run_plan(cfg, args.cap, out, args.json, say=lambda line: print(line, file=sys.stderr, flush=True))
    print(text)
    print(f"written: {out}/plan.md, {out}/plan.png" + (f", {args.json}" if args.json else ""))
    return 0


def cmd_scale(args: argparse.Namespace) -> int:
    """``minionsrl scale``: a round's time as the actors grow on a backend; prints the table."""
    from pathlib import Path

    from minionsrl.experiments.scale import run_scale

    if args.max_actors < 1 or args.steps < 1 or args.repeats < 1:
        raise ConfigError("--max-actors, --steps and --repeats must be >= 1")
    cfg, _ = train_config(args)
    out = args.out or f"runs/scale-{cfg.functions.backend}"
    run_scale(cfg, args.max_actors, args.steps, args.repeats, out)
    print(Path(out, "scale.md").read_text())
    return 0


def cmd_motivate(args: argparse.Namespace) -> int:
    """``minionsrl motivate``: does boosting one round pay, from runs' kept checkpoints; prints the result."""
    from minionsrl.experiments.motivate import run_motivate

    if min(args.base, args.boost, args.eval_episodes) < 1:
        raise ConfigError("--base, --boost and --eval-episodes must be >= 1")
    out = args.out or f"{args.run_dir[0]}/motivate"
    print(json.dumps(run_motivate(args.run_dir, args.base, args.boost, args.eval_episodes, out), indent=2))
    return 0


def cmd_scheduler(args: argparse.Namespace) -> int:
    """``minionsrl scheduler``: train the MinionsRL scheduler over training jobs (resumable)."""
    import dataclasses

    from minionsrl.experiments.scheduler import train_scheduler
    from minionsrl.prepare import prepare_config
    from minionsrl.scaling.minions import SchedulerHyper

    if args.jobs < 1 or args.rounds < 1:
        raise ConfigError("--jobs and --rounds must be >= 1")
    hyper = SchedulerHyper(beta=args.beta, lam=args.lam)
    if args.scheduler_gamma is not None:
        if not 0.0 < args.scheduler_gamma <= 1.0:
            raise ConfigError(f"--scheduler-gamma: {args.scheduler_gamma:g} is not in (0, 1]; use e.g. 0.9")
        hyper = dataclasses.replace(hyper, gamma=args.scheduler_gamma)
    base, _ = train_config(args)
    if base.scaling.actors == "auto":
        raise ConfigError("--actors auto: the scheduler's training jobs run the counts it chooses; drop --actors auto")
    base = base.replace(max_rounds=args.rounds, total_timesteps=None, scaler="fixed")
    prepare_config(base.replace(run_dir="unused", target_return=args.target))
    path = train_scheduler(base, args.jobs, args.target, args.out, n_max=base.scaling.n_max,
                           hyper=hyper,
                           on_job=lambda row: print(json.dumps(row), file=sys.stderr))
    print(f"scheduler saved to {path} (learning curve: {path.with_suffix('.curve.csv')})")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``minionsrl compare``: arms × seeds side by side; prints the table and where the outputs are."""
    from pathlib import Path

    from minionsrl.experiments.compare import Arm, run_compare
    from minionsrl.prepare import prepare_config

    _no_run_dir(args, "compare")
    arms = [Arm.parse(a) for a in args.scalers.split(",") if a.strip()]
    if not arms:
        raise ConfigError("--scalers: name at least one arm")
    twice = sorted({arm.label for arm in arms if [a.label for a in arms].count(arm.label) > 1})
    if twice:  # its runs would be one arm's, counted as two
        raise ConfigError(f"--scalers: {', '.join(twice)} is named more than once; name each arm once")
    if args.seeds < 1 or (args.rounds is not None and args.rounds < 1):
        raise ConfigError("--seeds and --rounds must be >= 1")
    if args.dollar_budget is not None and not args.dollar_budget > 0:
        raise ConfigError("--dollar-budget must be > 0")
    base, _ = train_config(args)
    base = config.auto_actors(base)  # --actors auto: the base's scaler is auto (an arm's own scaler replaces it)
    if args.until == "target":
        if args.target is None:
            raise ConfigError("--until target: name the return to reach with --target")
        if base.cost.time_budget_s is None and base.cost.budget_usd is None:
            raise ConfigError("--until target: cap the runs that never reach it with --time-budget-s (projected "
                              "seconds) or --budget-usd")
        # no step budget of the preset's: the target or the cap ends a run, and the learning rate anneals over the cap
        base = base.replace(target_return=args.target, max_rounds=args.rounds,
                            total_timesteps=base.run.total_timesteps or config.UNBOUNDED_STEPS)
    elif args.rounds is None:
        raise ConfigError("--rounds: give the rounds per run (or --until target with a cap)")
    else:
        base = base.replace(max_rounds=args.rounds)  # --total-timesteps, when given, stops runs too
    for arm in arms:  # every arm's config is checked before the first run starts
        prepare_config(arm.apply(base).replace(run_dir="unused"))
    out = args.out or f"runs/compare-{base.env.env_id.replace(':', '_').replace('/', '_')}"
    run_compare(base, arms, list(range(1, args.seeds + 1)), out, args.target,
                on_run=lambda label, seed: print(f"compare: {label} seed {seed}", file=sys.stderr),
                dollar_budget=args.dollar_budget)
    print(Path(out, "compare.md").read_text())
    print(f"outputs in {out}/ (compare.csv, compare.md, pareto.png, return_vs_round.png, return_vs_steps.png, "
          "return_vs_dollars.png, return_vs_projected_time.png, actors_per_round.png)")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """``minionsrl eval``: a run's policy over fresh episodes (optionally a video); prints the result."""
    from minionsrl.experiments.evaluate import evaluate_run

    _check_run_dir_arg(args.run_dir)
    result = evaluate_run(args.run_dir, episodes=args.episodes, seed=args.seed, capture_video=args.capture_video,
                          trust_run_code=args.trust_run_code, which=args.which)
    print(json.dumps(result, indent=2))
    return 0


# a run that fails: the line's label and the exit status, by the first kind the error is (bad input is 2)
FAILURES: list[tuple[type[Exception], str, int]] = [
    (ConfigError, "error", 2), (ClusterLost, "cluster lost", 1), (Resumable, "stopped", 1),
    (InvocationError, "invocation failed", 1), (NotStarted, "not started", 1)]
FAILURE_TYPES = tuple(kind for kind, _, _ in FAILURES)


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None,
                  line: str | None = None, default: Callable[..., None] = warnings.showwarning) -> None:
    """minionsrl's own warnings as one line on stderr, as its errors are (``minionsrl: warning: …``); others as
    Python shows them."""
    if category.__module__.startswith("minionsrl"):
        print(f"minionsrl: warning: {one_line(str(message))}", file=sys.stderr)
    else:
        default(message, category, filename, lineno, file, line)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv``; the exit status (2 with one line for bad input, before any work)."""
    args = build_parser().parse_args(argv)
    warnings.showwarning = _show_warning
    try:
        commands = {"train": cmd_train, "eval": cmd_eval, "compare": cmd_compare, "plot": cmd_plot, "plan": cmd_plan,
                    "scale": cmd_scale, "motivate": cmd_motivate, "scheduler": cmd_scheduler}
        with _sigterm_as_interrupt():  # every command's temporary folders and processes close on SIGTERM too
            return commands[args.command](args)
    except FAILURE_TYPES as exc:
        label, code = next((label, code) for kind, label, code in FAILURES if isinstance(exc, kind))
        print(f"minionsrl: {label}: {one_line(redact_text(str(exc)))}", file=sys.stderr)
        return code
    except KeyboardInterrupt as exc:
        stopped = exc if isinstance(exc, Interrupted | Terminated) else Interrupted()
        print(f"minionsrl: {stopped.what}" + (f"; {one_line(str(exc))}" if isinstance(exc, Interrupted) and str(exc)
                                               else ""), file=sys.stderr)
        if argv is None:  # the program: its work is closed; leave before the interpreter's teardown (_leave_now)
            _leave_now(stopped.code)
        return stopped.code


def _leave_now(code: int) -> None:
    """Exit with ``code`` at once, the streams flushed: after Ctrl-C or SIGTERM every command has closed its
    backend, run dir and temporary folders on the way out, and an interrupt that landed inside a JAX compilation
    leaves XLA's state such that the interpreter's teardown segfaults (exit -11 after the one line)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
