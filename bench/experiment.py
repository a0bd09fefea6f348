"""Run a comparison spec (``bench/specs/*.yaml``) with ``minionsrl compare``: the one harness of the experiments.

A spec holds ``compare:`` (``minionsrl compare``'s options: ``scalers``, ``seeds``, ``rounds`` or ``until``/``target``,
``dollar_budget``, ``out``), ``base:`` (a config file the runs share) and ``config:`` (config fields over it); see
:func:`minionsrl.experiments.compare.read_spec`. The shared fields are written to ``OUT/config.yaml`` and the
comparison runs as ``minionsrl compare --config OUT/config.yaml ...`` (OUT: the spec's ``out``, by default
``bench/out/specs/NAME``), so finished runs are reused and a cut one resumes. ``--dry-run`` prints that command.

    .venv/bin/python bench/experiment.py bench/specs/async-algos-cartpole.yaml [--dry-run]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import yaml

from minionsrl import cli
from minionsrl.experiments.compare import read_spec

ROOT = Path(__file__).resolve().parent.parent


def command(spec: Path, **options: str) -> list[str]:
    """``minionsrl compare``'s arguments for ``spec``, its shared config written where ``--config`` reads it.
    ``options`` (``scalers``, ``seeds``, ``out``...) replace the spec's own."""
    argv, fields = read_spec(spec)
    if "--out" not in argv:
        argv += ["--out", str(Path("bench", "out", "specs", spec.stem))]
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    out = Path(argv[argv.index("--out") + 1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(fields, sort_keys=False))
    return ["compare", "--config", str(out / "config.yaml"), *argv]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="+", type=Path, help="spec files, run one after another")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args()
    for spec in args.specs:
        argv = command(spec)
        print("minionsrl " + " ".join(map(shlex.quote, argv)), file=sys.stderr)
        if not args.dry_run and (rc := cli.main(argv)) != 0:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
