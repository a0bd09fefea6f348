"""The round model: what a round of ``n`` rollout functions would take, in seconds and dollars, from what one
function does. One place, shared by ``minionsrl plan`` (from its probe), the ``auto`` scaler (from the run's own
rounds) and the ledger, whose billing rule prices the modelled round (:meth:`~minionsrl.cost.CostLedger.model_round`).

A function is described by :class:`FunctionStats`: own-instance seconds (wall less the wait for a CPU of this
machine) per sample of the mean function (what ``n`` of them bill) and of the slowest (what a round waits for), a
warm invocation's init, the share of its time it keeps a CPU busy, and its reply's bytes per sample. The metrics
row of every round carries them (``function_*`` columns), so a round's stats are the model's input as a user reads
them.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np

from minionsrl.backends.base import OK, InvocationRecord
from minionsrl.cost import CostLedger, ModelledRound
from minionsrl.stats import FunctionStats

KNEE_GAIN = 0.10  # the knee: the least n past which doubling n saves less than this share of the time
def is_warm_train(record: InvocationRecord) -> bool:
    """Whether a record measures a running function: a successful training invocation of an instance already
    started (a cold one's init is the instance's start)."""
    return record.kind == "train" and record.status == OK and not record.cold


def warm_train(records: list[InvocationRecord]) -> list[InvocationRecord]:
    """The records that measure a running function (:func:`is_warm_train`)."""
    return [r for r in records if is_warm_train(r)]


def per_sample_s(record: InvocationRecord, samples: float) -> float:
    """A function's own-instance seconds per sample (its stepping, less its wait for a CPU of this machine)."""
    return max(record.run_s - record.run_wait_s, 0.0) / samples


def own_init_s(record: InvocationRecord) -> float:
    """A warm invocation's own-instance init, with the policy load its instance did for an earlier one."""
    return max(record.init_s - record.init_wait_s, 0.0) + record.reused_policy_s


def busy_share(record: InvocationRecord) -> float:
    """Of a function's own-instance time, the share it kept a CPU busy."""
    own = own_init_s(record) + max(record.run_s - record.run_wait_s, 0.0)
    return min(record.cpu_s / max(own, 1e-9), 1.0)


def function_stats(records: list[tuple[InvocationRecord, float]]) -> FunctionStats | None:
    """The stats of a round's warm training functions, each record with the samples it took (None: none ran
    warm). Its own samples, not the round's batch over its count: an asynchronous round collects replies sent
    when the count was another."""
    warm = [(r, samples) for r, samples in records if samples > 0 and is_warm_train(r)]
    if not warm:
        return None
    rates = [per_sample_s(r, samples) for r, samples in warm]
    return FunctionStats(sample_s=float(np.mean(rates)), slowest_sample_s=max(rates),
                         init_s=float(np.median([own_init_s(r) for r, _ in warm])),
                         busy_share=float(np.median([busy_share(r) for r, _ in warm])),
                         bytes_per_sample=float(np.median([r.bytes_out / samples for r, samples in warm])))


def env_check_stats(own_s: float, cpu_s: float, latency_s: float, bytes_per_sample: float) -> FunctionStats:
    """A function's stats as the learner's check of the env saw a step, before any round ran: its own-instance
    seconds a random step (wall less the wait for a CPU here, with the env's own waits, and ``latency_s`` added to
    each), the CPU seconds of it, and ``bytes_per_sample``; no spread between functions, no init, no policy
    inference. What ``--actors auto`` starts from, until its own warm rounds measure the functions."""
    sample_s = max(own_s, 0.0) + max(latency_s, 0.0)
    busy = min(max(cpu_s, 0.0) / sample_s, 1.0) if sample_s > 0 else 1.0
    return FunctionStats(sample_s=sample_s, slowest_sample_s=sample_s, init_s=0.0, busy_share=busy,
                         bytes_per_sample=bytes_per_sample)


def model_round(ledger: CostLedger, learner_s: float, stats: FunctionStats, n: int, samples: float) -> ModelledRound:
    """A round of ``n`` functions of ``samples`` samples each that do what ``stats`` says (the slowest of them
    ``stats.slowest_sample_s``), after a learner part of ``learner_s``, as ``ledger`` would bill it: the others
    share what is left of ``n`` times the mean, so that the ``n`` bill ``n`` times the mean (not ``n - 1`` means
    and the slowest on top)."""
    others = (n * stats.sample_s - stats.slowest_sample_s) / (n - 1) if n > 1 else stats.sample_s
    run_s = samples * max(others, 0.0)
    function = InvocationRecord(invocation_id="model", kind="train", init_s=stats.init_s, run_s=run_s,
                                cpu_s=stats.busy_share * (stats.init_s + run_s),
                                bytes_out=int(samples * stats.bytes_per_sample))
    slowest = replace(function, run_s=samples * stats.slowest_sample_s)
    return ledger.model_round(learner_s, function, n, slowest)


def knee(points: list[tuple[int, float]], gain: float = KNEE_GAIN) -> int:
    """Of ``(n, seconds)`` points in increasing ``n``, the least ``n`` past which the next point saves less than
    ``gain`` of the time per doubling of ``n`` (a step of 32 to 48 is held to the 6% that compounds to 10% over a
    doubling): where more functions stop paying. A larger ``gain`` never gives a larger ``n``."""
    return next((a for (a, sa), (b, sb) in itertools.pairwise(points)
                 if sb > (1 - gain) ** math.log2(b / a) * sa), points[-1][0])


def doubling_counts(n_min: int, n_max: int) -> list[int]:
    """The counts a forecast weighs between ``n_min`` and ``n_max``: the powers of two between them, and both."""
    powers = {2**i for i in range(n_max.bit_length()) if n_min <= 2**i <= n_max}
    return sorted(powers | {n_min, n_max})
