"""Run outputs: ``metrics.csv`` (a row per round), ``invocations.csv`` (a row per invocation), ``scaler.csv`` (a
row per change of the actor count, with the scaler's reason) and TensorBoard scalars under CleanRL's tag names.

On resume, rows past the last checkpointed round are dropped first, so a killed run leaves no
duplicate or missing rounds.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
import os
import socket
import struct
import time
from pathlib import Path
from typing import Any

from minionsrl import files
from minionsrl.backends.base import InvocationRecord
from minionsrl.errors import ConfigError
from minionsrl.function.extras import check_tensorboard
from minionsrl.function.fragment import Fragment
from minionsrl.loop.retry import OK, Attempt, Outcome
from minionsrl.numbers import is_number
from minionsrl.redact import redact_text
from minionsrl.stats import METRIC_COLUMNS, RoundStats

# Columns that depend only on the seed and the config (compared by the determinism test).
LEARNING_COLUMNS = [
    "round", "env_steps", "n_actors", "eval_return_mean", "train_return_mean", "episodes", "policy_loss",
    "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance", "learning_rate", "scaler_score",
    "convexity_ratio", "gns",
]
# status: ok | failed | timed_out | cancelled (a straggler at the round deadline) | duplicate (a second delivery)
# | stray (a reply to no invocation sent) | throttled (the platform refused the call) | oom (out of memory)
INVOCATION_COLUMNS = ["round", *InvocationRecord.__dataclass_fields__, "slot", "attempt", "seed", "steps", "fault",
                      "digest"]
# the round whose actor count the scaler changed, the count, and why (Scaler.reason): words, apart from metrics.csv's
# numbers
SCALER_COLUMNS = ["round", "n_actors", "reason"]

TENSORBOARD_TAGS = {
    "train_return_mean": "charts/episodic_return", "eval_return_mean": "eval/return_mean",
    "learning_rate": "charts/learning_rate", "sps": "charts/SPS", "n_actors": "charts/n_actors",
    "policy_loss": "losses/policy_loss", "value_loss": "losses/value_loss", "entropy": "losses/entropy",
    "approx_kl": "losses/approx_kl", "clipfrac": "losses/clipfrac",
    "explained_variance": "losses/explained_variance", "round_s": "time/round_s",
    "sample_s": "time/sample_s", "learn_s": "time/learn_s", "detector_s": "time/detector_s",
    "cum_cost_serverless_usd": "cost/cum_serverless_usd", "cum_cost_server_usd": "cost/cum_server_usd",
    "convexity_ratio": "detectors/convexity_ratio", "gns": "detectors/gns", "scaler_score": "charts/scaler_score",
    "policy_lag_mean": "charts/policy_lag_mean",
}


def tensorboard_scalars(stats: RoundStats) -> dict[str, float]:
    """A round's numbers under their TensorBoard tags (what it left empty, or not finite, is left out): what
    TensorBoard and Weights & Biases plot."""
    return {tag: value for key, tag in TENSORBOARD_TAGS.items() if is_number(value := getattr(stats, key))}


_WRITERS = itertools.count()  # TensorBoard writers opened by this process


class RunLog:
    """Appends round and invocation rows to CSV files and scalars to TensorBoard."""

    def __init__(self, run_dir: Path, resume_round: int | None, resume_step: int, tensorboard: bool,
                 metrics_round: int | None = None) -> None:
        """``resume_round``: the checkpoint's round (rows after it are dropped); ``metrics_round``: the last
        round whose metrics row is kept, when it differs (a row held for its evaluation is written again)."""
        self.run_dir = run_dir
        self.metrics_path = run_dir / files.METRICS
        self.invocations_path = run_dir / files.INVOCATIONS
        self.scaler_path = run_dir / files.SCALER
        self._files: list[Any] = []
        self._failed = False  # a write failed: what is still buffered cannot be written either
        self._tb = None
        check_tensorboard(tensorboard)  # one line naming the tb extra, before any file is opened
        path = run_dir
        try:
            kept_metrics = resume_round if metrics_round is None else metrics_round
            for path, columns, keep in ((self.metrics_path, METRIC_COLUMNS, kept_metrics),
                                        (self.invocations_path, INVOCATION_COLUMNS, resume_round),
                                        (self.scaler_path, SCALER_COLUMNS, resume_round)):
                _prepare_csv(path, columns, keep)
            for path in (self.metrics_path, self.invocations_path, self.scaler_path):
                self._files.append(files.open_for_write(path, "a", newline=""))  # kept open for the run
        except OSError as exc:
            self._failed = True
            self.close()
            raise self._error(path, exc) from exc
        self._metrics, self._invocations, self._scaler = self._files
        self._mw = csv.DictWriter(self._metrics, METRIC_COLUMNS)
        self._iw = csv.DictWriter(self._invocations, INVOCATION_COLUMNS, extrasaction="ignore")
        self._sw = csv.DictWriter(self._scaler, SCALER_COLUMNS)
        if tensorboard:
            try:
                self._tb = EventFile(run_dir / files.TENSORBOARD, resume_step + 1 if resume_round else None)
            except OSError as exc:
                self._failed = True
                self.close()
                raise self._error(run_dir / files.TENSORBOARD, exc) from exc

    def _error(self, path: Path, exc: OSError) -> ConfigError:
        """A write that failed (a full disk, a run dir made read-only) as one line: the run stops there and
        continues, once that is fixed, from its last checkpoint (rows after it are dropped then)."""
        return ConfigError(f"{path.name}: cannot write {str(path)!r} ({exc.strerror or exc}); free space (or make "
                           f"the run dir writable), then continue with --resume --run-dir {str(self.run_dir)!r}")

    def log_invocations(self, invocations: list[dict[str, Any]]) -> None:
        """Write invocation rows (flushed): a round's, or those of a round that failed."""
        self._write(self._invocations, self.invocations_path, lambda: self._iw.writerows(invocations))

    def log_round(self, stats: RoundStats, invocations: list[dict[str, Any]]) -> None:
        """Write one round: its invocation rows, then its metrics row (flushed, fsync-free)."""
        self.log_invocations(invocations)
        row = stats.to_row()
        self._write(self._metrics, self.metrics_path, lambda: self._mw.writerow({k: _fmt(v) for k, v in row.items()}))
        if self._tb is not None:
            scalars = tensorboard_scalars(stats)
            self._write(self._tb, self._tb.path, lambda: self._tb.add_scalars(scalars, stats.env_steps))

    def log_scaler(self, round_idx: int, n_actors: int, reason: str) -> None:
        """Write why the scaler gave round ``round_idx`` ``n_actors`` actors (flushed)."""
        row = {"round": round_idx, "n_actors": n_actors, "reason": reason}
        self._write(self._scaler, self.scaler_path, lambda: self._sw.writerow(row))

    def log_config(self, values: dict[str, Any], step: int) -> None:
        """The resolved config as TensorBoard text (CleanRL's ``hyperparameters`` table), at ``step``: a resumed
        session logs its own, whose stop conditions may differ."""
        if self._tb is not None:
            cells = {k: str(_fmt(v)).replace("|", "\\|") for k, v in values.items()}
            table = "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in cells.items())
            self._write(self._tb, self._tb.path, lambda: self._tb.add_text("hyperparameters", table, step))

    def _write(self, fh: Any, path: Path, write: Any) -> None:
        try:
            write()
            fh.flush()
        except OSError as exc:
            self._failed = True
            raise self._error(path, exc) from exc

    def close(self) -> None:
        """Close the files; after a failed write, what could not be written is dropped (the error was raised)."""
        error = None
        for fh in self._files:
            try:
                fh.close()
            except OSError as exc:
                error = error or self._error(Path(fh.name), exc)
        self._files = []
        if self._tb is not None:
            try:
                self._tb.close()
            except OSError as exc:
                error = error or self._error(self._tb.path, exc)
            self._tb = None
        if error is not None and not self._failed:
            self._failed = True
            raise error


class EventFile:
    """A TensorBoard event file written in the learner's thread, flushed every round. tensorboardX's own writer
    writes from a thread of its own: when the disk fills that thread dies, its queue fills, and the learner
    blocks for ever; here a failed write is an ``OSError`` the loop reports (one line, and the run stops at its
    last checkpoint). The file is created exclusively, never through a planted link."""

    def __init__(self, logdir: Path, purge_step: int | None) -> None:
        from tensorboardX.proto.event_pb2 import Event, SessionLog  # imported when first needed

        self._event = Event
        logdir.mkdir(parents=True, exist_ok=True)
        # the process id and a counter in the name, as torch's writer has: a session resumed within the second
        # of the last one must not reuse its file
        self.path = logdir / (f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}."
                              f"{next(_WRITERS)}")
        self._fh = open(self.path, "wb", opener=files.exclusive_opener)  # noqa: SIM115 - kept open for the run
        self._record(Event(wall_time=time.time(), file_version="brain.Event:2"))
        if purge_step is not None:  # TensorBoard hides what an earlier session logged from this step on
            self._record(Event(wall_time=time.time(), step=purge_step,
                               session_log=SessionLog(status=SessionLog.START)))
        self.flush()

    def add_scalars(self, scalars: dict[str, float], step: int) -> None:
        """One event per scalar at ``step``."""
        from tensorboardX.summary import scalar

        for tag, value in scalars.items():
            self._record(self._event(wall_time=time.time(), step=int(step), summary=scalar(tag, float(value))))

    def add_text(self, tag: str, text: str, step: int) -> None:
        """A text summary (TensorBoard's Text tab) at ``step``."""
        from tensorboardX.summary import text as text_summary

        self._record(self._event(wall_time=time.time(), step=int(step), summary=text_summary(tag, text)))

    def _record(self, event: Any) -> None:
        """A TFRecord: length, its masked CRC, the data, its masked CRC."""
        from tensorboardX.record_writer import masked_crc32c

        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        crcs = [struct.pack("<I", masked_crc32c(b)) for b in (header, data)]
        self._fh.write(header + crcs[0] + data + crcs[1])

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def invocation_rows(round_idx: int, outcomes: list[Outcome]) -> list[dict[str, Any]]:
    """A round's rows of invocations.csv: training before evaluation, by slot and attempt (then arrival)."""
    attempts = sorted((a for g in outcomes for a in g.attempts),
                      key=lambda a: (a.reply.record.kind != "train", a.slot, a.attempt))
    return [_invocation_row(round_idx, a) for a in attempts]


def _invocation_row(round_idx: int, attempt: Attempt) -> dict[str, Any]:
    """The record, the slot's seed and attempt, its steps per environment (training), the status and, for an
    accepted fragment, a digest of its arrays (a fault-free run of the same seed must show the same)."""
    req, record = attempt.request, attempt.reply.record
    accepted = attempt.status == OK and record.kind == "train"
    train = req is not None and req.kind == "train"
    return {"round": round_idx, **record.row(), "error": redact_text(record.error), "status": attempt.status,
            "slot": attempt.slot, "attempt": attempt.attempt, "seed": "" if req is None else req.seed,
            "steps": req.steps if train else "", "fault": ((req and req.fault) or {}).get("kind", ""),
            "digest": Fragment.digest(attempt.result) if accepted else ""}


def _fmt(value: Any) -> Any:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _prepare_csv(path: Path, columns: list[str], resume_round: int | None) -> None:
    """Create the file with its header, or on resume keep only rows up to ``resume_round`` (those of
    ``metrics.csv`` checked: every column of it is a number, or empty)."""
    rows = [] if resume_round is None or not path.exists() else [
        r for r in _whole_rows(path) if int(r["round"]) <= resume_round]
    if columns is METRIC_COLUMNS:
        _check_numbers(path, rows)
    with files.replacing(path, newline="") as fh:
        writer = csv.DictWriter(fh, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _check_numbers(path: Path, rows: list[dict[str, str]]) -> None:
    """Refuse, with one line, a ``metrics.csv`` row kept on resume that holds something other than a number
    where the run writes numbers (the plots and the summary read them back)."""
    for row in rows:
        for name in METRIC_COLUMNS:
            value = (row.get(name) or "").strip()
            try:
                float(value or 0)
            except ValueError:
                raise ConfigError(f"{path.name}: round {row['round']} holds {value[:40]!r} in column {name!r}, not a "
                                  f"number; restore {str(path)!r} from the run (or empty that field), then "
                                  "--resume") from None


def _whole_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a run's CSV file that were written whole, with an integer round. A row torn by a kill or a
    full disk (its last line cut short, NUL bytes a crash left) is dropped; it can only be one written after
    the last checkpoint, which a resumed run drops anyway (but a "12" cut to "1" must not pass for round 1)."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    text = text[: text.rfind("\n") + 1]  # every row ends with a newline: a last line without one is torn
    return [r for r in _csv_rows(path, text) if r.get("round", "").isdigit()]


def _csv_rows(path: Path, text: str) -> list[dict[str, str]]:
    """Rows with as many fields as the header (others are torn), NUL bytes ignored; a file that is not CSV
    is one line."""
    reader = csv.reader(io.StringIO(text.replace("\0", ""), newline=""))
    try:
        header = next(reader, [])
        return [dict(zip(header, fields, strict=True)) for fields in reader if len(fields) == len(header)]
    except csv.Error as exc:
        raise ConfigError(f"{path.name}: {str(path)!r} cannot be read ({exc}); restore it or start a new run") from exc


def read_rows(path: str | Path, missing_ok: bool = False) -> list[dict[str, str]]:
    """Rows of a CSV file as dicts of strings, without rows torn by a crash; ``[]`` for a file not written
    yet if ``missing_ok``."""
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        if missing_ok:
            return []
        raise
    return _csv_rows(Path(path), text)


def read_metrics(run_dir: str | Path) -> list[dict[str, str]]:
    """Rows of a run's ``metrics.csv`` as dicts of strings."""
    return read_rows(Path(run_dir) / files.METRICS)
