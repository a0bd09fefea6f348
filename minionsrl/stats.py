"""What one round measured: :class:`RoundStats`, the contract between the round loop and what reads a round; and
what a whole run did: :class:`RunSummary`; and what a round's warm functions did, per sample
(:class:`FunctionStats`, the round model's input).

The trainer builds one per round; the scaler picks the next ``n`` from it, ``minionsrl plan`` and the ``auto``
scaler feed the round model from it, the logger writes it as a row of ``metrics.csv`` (:meth:`RoundStats.to_row`,
its fields in column order), a callback gets it as it is, and the checkpoint keeps the last one. Its fields are the
file's columns, declared once here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypedDict

# FunctionStats' fields -> their metrics columns
FUNCTION_COLUMNS = {"sample_s": "function_sample_s", "slowest_sample_s": "function_slowest_sample_s",
                    "init_s": "function_init_s", "busy_share": "function_busy_share",
                    "bytes_per_sample": "function_bytes_per_sample"}


@dataclass(frozen=True)
class FunctionStats:
    """What one warm rollout function does, per sample: the round model's input (:mod:`minionsrl.forecast`), a
round's ``function_*`` columns."""

    sample_s: float  # own-instance seconds per sample (env step, its waits, inference): the mean function's: n
    # functions bill n times the mean, whatever the spread
    slowest_sample_s: float  # the same, the slowest function's: a round waits for it
    init_s: float  # a warm invocation's init (the round's policy load, its env reset)
    busy_share: float  # of its own time, the share it keeps a CPU busy
    bytes_per_sample: float  # reply bytes per sample

    def columns(self) -> dict[str, float]:
        """The stats as metrics columns (``function_sample_s``, …)."""
        return {column: getattr(self, name) for name, column in FUNCTION_COLUMNS.items()}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> FunctionStats | None:
        """The stats a metrics row carries (None when its round had no warm function, or the row is an older
        run's)."""
        values = {name: row.get(column) for name, column in FUNCTION_COLUMNS.items()}
        if any(v is None or v == "" for v in values.values()):
            return None
        return cls(**{name: float(v) for name, v in values.items()})

    def blend(self, new: FunctionStats, weight: float) -> FunctionStats:
        """An exponentially weighted average: ``weight`` on these stats, the rest on ``new``."""
        return FunctionStats(**{name: weight * getattr(self, name) + (1 - weight) * getattr(new, name)
                                for name in FUNCTION_COLUMNS})


@dataclass(frozen=True)
class RoundStats:
    """One round's row (``None``: not measured that round, an empty cell in ``metrics.csv``)."""

    round: int
    env_steps: int  # learned on so far
    n_actors: int
    wall_s: float  # since the run started (earlier sessions of a resumed run included)
    round_s: float
    sample_s: float
    learn_s: float  # the update, without the detectors
    eval_s: float
    eval_return_mean: float | None  # the round's policy, evaluated (deterministic); a round without one: None
    train_return_mean: float | None  # the episodes that ended in the round's fragments
    episodes: int
    # the update's statistics, CleanRL's names (the last minibatch's; clipfrac over the update)
    policy_loss: float | None
    value_loss: float | None
    entropy: float | None
    approx_kl: float | None
    clipfrac: float | None
    explained_variance: float | None
    learning_rate: float | None  # the rate the update started with
    sps: float  # samples learned on per second of the round
    cost_serverless_usd: float
    cost_server_usd: float
    cum_cost_serverless_usd: float
    cum_cost_server_usd: float
    projected_round_s: float  # the round on the platform's instances (DESIGN §4)
    projected_learner_s: float  # of it, the learner's own-instance part
    cost_storage_usd: float  # of the serverless cost, the storage requests
    cold_starts: int  # invocations that started an instance
    # what one warm function did, per sample: the round model's input (minionsrl/forecast.py), as `plan` measures it
    function_sample_s: float | None
    function_slowest_sample_s: float | None
    function_init_s: float | None
    function_busy_share: float | None
    function_bytes_per_sample: float | None
    # the same bills with the hosts over this machine's wall time, where functions queue on a few cores
    cost_serverless_wall_usd: float
    cost_server_wall_usd: float
    scaler_score: float | None
    # the detectors (the learner's; which run follows the scaler's needs and --detectors)
    convexity_ratio: float | None
    lambda_min: float | None
    lambda_max: float | None
    gns: float | None
    detector_s: float
    # faults (minionsrl/loop/retry.py: fault_counts)
    failed: int
    retried: int
    timed_out: int
    duplicates: int
    lost: int
    throttled: int
    # asynchronous learners (APPO, IMPALA): fragments used by the update; pipelined and asynchronous rounds: the
    # policy lag of their fragments in versions
    fragments: int | None
    policy_lag_mean: float | None
    policy_lag_max: int | None
    stale_retries: int | None

    def to_row(self) -> dict[str, Any]:
        """The row of ``metrics.csv``, in column order (every field a scalar: a shallow copy)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __getitem__(self, name: str) -> Any:
        """A callback written for a dict row (``row["eval_return_mean"]``) gets one line saying what it is now."""
        raise TypeError(f"a round's stats are typed: read row.{name}, not row[{name!r}] (row.to_row() is the "
                        f"metrics.csv dict)")

    @classmethod
    def from_row(cls, row: dict[str, Any], complete: bool = True) -> RoundStats:
        """A row back as stats: a checkpoint's (numbers as JSON kept them) or a CSV's (strings); an empty cell is
        ``None``. ``complete``: every column must be there (else a ``ValueError`` names the first missing); without
        it a missing column is ``None`` too (a partial row, in tests)."""
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in row]
        if complete and missing:
            raise ValueError(f"the round's row has no {missing[0]!r}")
        values = {}
        for f in dataclasses.fields(cls):
            value, integer = row.get(f.name), f.type.startswith("int")
            if value is None or value == "":
                values[f.name] = None
            elif isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ValueError(f"the round's {f.name} is {value!r}, not a number")
            elif integer or isinstance(value, str):
                values[f.name] = int(value) if integer else float(value)
            else:
                values[f.name] = value  # as the run wrote it: a row written again prints as it did
        return cls(**values)

    def function_stats(self) -> FunctionStats | None:
        """What one warm function did in the round (None when none ran warm)."""
        return FunctionStats.from_row({column: getattr(self, column) for column in FUNCTION_COLUMNS.values()})


METRIC_COLUMNS = [f.name for f in dataclasses.fields(RoundStats)]  # metrics.csv's header


class RunSummary(TypedDict):
    """What a finished run returns (``minionsrl.train``, ``Trainer.run``) and ``summary.json`` holds: the run's outcome,
    what stopped it, what it cost, and its config (a dict at run time: ``summary["final_eval_return"]``). A number
    that does not exist (no evaluation yet) is None: JSON has no NaN."""

    run_dir: str  # where it ran: ``load_policy(summary)`` loads its policy from there
    env_id: str
    seed: int
    scaler: str
    backend: str
    rounds: int
    env_steps: int
    wall_s: float
    stopped_by: str | None
    stop_checkpoint: str  # the checkpoint of the policy the stop condition holds for
    final_eval_return: float | None  # the last round's policy, evaluated (deterministic)
    best_eval_return: float | None  # the best evaluated policy's (round best_round, checkpoints/best.safetensors)
    best_round: int | None
    train_return_last100: float | None  # the mean of the last 100 training episodes (CleanRL's figure)
    train_return_last100_rounds: list[int] | None  # the rounds those episodes ended in, first and last
    functions_ran_on: str | None
    cost_usd: dict[str, float]  # serverless, server, serverless_wall, server_wall
    projected_cloud_s: float
    priced_as: str  # the deployment the projected seconds and the serverless dollars price (deployments.Deployment)
    learner_host: str | None
    config: dict[str, Any]  # TrainConfig.to_dict()
