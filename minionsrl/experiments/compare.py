"""``minionsrl compare``: scalers × seeds on one env → CSV, Markdown table and PNG curves (DESIGN §7).

An *arm* is ``scaler[:n][@backend][/learner-budget][+field=value...]``: ``fixed:16@server`` is the
server-based baseline, ``fixed:16`` the same actors as functions, ``nitro`` the Nitro scaler,
``fixed:64/per-round`` 64 actors whose learner keeps the reference's minibatch count, ``fixed:64+pipeline``
pipelined rounds and ``fixed:64+fragment_length=512+lr_schedule=adaptive`` a batch that grows with ``n``
(naming one of ``fragment_length`` and ``train_batch_size`` unsets the other) with a KL-adaptive learning rate.
Each (arm, seed) is one ordinary run in ``OUT/runs/<arm>__s<seed>``; finished runs are reused and
interrupted ones resumed, so a cut comparison continues where it stopped (across sessions too).

Per arm it reports the mean over seeds, with a bootstrap 95% interval where there are enough seeds for one
(:data:`MIN_SEEDS_FOR_INTERVAL`; fewer: the lowest and highest value), the dollars to reach the target
return, the return at a fixed dollar budget (the cheapest arm's total unless given), and which arms are
on the Pareto front of (dollars, final return); curves of return vs round, env steps, dollars and
projected cloud time. compare.csv keeps a column per figure under its field name; compare.md titles them in
words and says what each is (:data:`COLUMNS`).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from minionsrl import config, files
from minionsrl.config import TrainConfig
from minionsrl.deployments import pays_servers
from minionsrl.errors import ConfigError
from minionsrl.experiments import tables
from minionsrl.experiments.plots import forward_fill, line_plot, scatter_plot
from minionsrl.loop.metrics import read_metrics
from minionsrl.scaling.registry import SCALERS

RUN_COLUMNS = ["arm", "scaler", "backend", "priced_as", "learner_budget", "seed", "rounds", "env_steps",
               "final_eval_return", "best_eval_return", "train_return_last100", "wall_s", "projected_cloud_s",
               "cost_serverless_usd", "cost_server_usd", "cost_usd", "mean_actors", "detector_share",
               "time_to_target_s", "projected_time_to_target_s", "usd_to_target", "rounds_to_target",
               "return_at_budget"]


# the scalers an arm may give an objective: critical:time, auto:cost
OBJECTIVE_SCALERS = tuple(name for name, entry in SCALERS.items() if entry.weighs_objective)

@dataclass(frozen=True)
class Arm:
    """One configuration under comparison."""

    scaler: str
    actors: int | None = None
    backend: str = "local"
    learner_budget: str | None = None  # None: the base config's
    objective: str | None = None  # critical's; None: the base config's
    seeds: int | None = None  # seeds 1..K for this arm; None: the comparison's --seeds
    options: tuple[tuple[str, Any], ...] = ()  # (config field, value) the arm sets over the base config

    @property
    def label(self) -> str:
        """The arm's name in tables and run dirs, e.g. ``fixed-64+pipeline`` or ``critical-time``."""
        name = self.scaler if self.actors is None else f"{self.scaler}-{self.actors}"
        name = name if self.objective is None else f"{name}-{self.objective}"
        name = name if self.backend == "local" else f"{name}@{self.backend}"
        name = name if self.learner_budget is None else f"{name}+{self.learner_budget}"
        return "".join([name, *(f"+{k}" if v is True else f"+{k}={v}" for k, v in self.options)])

    @classmethod
    def parse(cls, text: str) -> Arm:
        """``scaler[:n][@backend][/learner-budget][*seeds]``, e.g. ``fixed:16@server``, ``fixed:64/per-round`` or
        ``kungfu*5`` (seeds 1-5 for this arm, whatever ``--seeds`` says); for the critical scaler ``critical:time``
        or ``critical:cost`` names its objective in place of ``n``."""
        text, _, seeds = text.strip().partition("*")
        if seeds and not (seeds.isdigit() and int(seeds) >= 1):
            raise ConfigError(f"--scalers: {text}*{seeds}: the seed count after '*' must be a positive integer")
        text, *options = text.split("+")
        arm = dataclasses.replace(cls._parse(text), options=tuple(_option(o, text) for o in options))
        return dataclasses.replace(arm, seeds=int(seeds)) if seeds else arm

    @classmethod
    def _parse(cls, text: str) -> Arm:
        text, _, budget = text.partition("/")
        if budget and budget not in config.LEARNER_BUDGETS:
            raise ConfigError(f"--scalers: learner budget {budget!r} is not one of {', '.join(config.LEARNER_BUDGETS)}")
        body, _, backend = text.partition("@")
        scaler, _, n = body.partition(":")
        if scaler not in config.SCALERS:
            raise ConfigError(f"--scalers: {scaler!r} is not one of {', '.join(config.SCALERS)}")
        if backend and backend not in config.BACKENDS:
            raise ConfigError(f"--scalers: backend {backend!r} in {text!r} is not one of {', '.join(config.BACKENDS)}")
        weighs = scaler in OBJECTIVE_SCALERS
        if weighs and n in config.OBJECTIVES:
            return cls(scaler, None, backend or "local", budget or None, objective=n)
        if n and not n.isdigit():
            raise ConfigError(f"--scalers: {text!r}: the actor count after ':' must be a positive integer"
                              + (f" or an objective ({', '.join(config.OBJECTIVES)})" if weighs else ""))
        return cls(scaler, int(n) if n else None, backend or "local", budget or None)

    def apply(self, cfg: TrainConfig) -> TrainConfig:
        """The base config with this arm's scaler, backend, actors and learner budget; the budget stays relative
        to the base config's actors, so ``fixed:64/per-round`` keeps the minibatch count of the base's batch."""
        changes: dict[str, Any] = {"scaler": self.scaler, "backend": self.backend,
                                   "reference_actors": cfg.learner.reference_actors or cfg.scaling.actors}
        if self.actors is not None:
            changes["actors"] = self.actors
        if self.learner_budget is not None:
            changes["learner_budget"] = self.learner_budget
        if self.objective is not None:
            changes["objective"] = self.objective
        for name, value in self.options:
            changes[name] = value
            exclusive = {"fragment_length": "train_batch_size", "train_batch_size": "fragment_length"}.get(name)
            if exclusive:  # the round's size is set one way or the other
                changes[exclusive] = None
        return cfg.replace(**changes)


def _option(text: str, arm: str) -> tuple[str, Any]:
    """``field=value`` (a YAML scalar, checked as the config checks it) or ``field`` (true) of an arm."""
    name, eq, value = text.partition("=")
    name = name.strip().replace("-", "_")
    try:
        parsed = yaml.safe_load(value) if eq else True
    except yaml.YAMLError:
        parsed = value
    try:
        checked = config.build({name: parsed})
    except ConfigError as exc:
        raise ConfigError(f"--scalers: {arm}+{text}: {exc}") from None
    return name, checked.get(name)


def run_compare(base: TrainConfig, arms: list[Arm], seeds: list[int], out_dir: str | Path,
                target_return: float | None = None, on_run: Callable[[str, int], None] | None = None,
                dollar_budget: float | None = None) -> list[dict[str, Any]]:
    """Run (or reuse) every arm × seed, then write compare.csv, compare.md and the plots."""
    from minionsrl.build import make_trainer

    out_dir = Path(out_dir)
    (out_dir / "runs").mkdir(parents=True, exist_ok=True)
    results = []
    arm_seeds = {arm: list(range(1, arm.seeds + 1)) if arm.seeds else seeds for arm in arms}
    for seed in sorted(set().union(*arm_seeds.values())):  # seed-major: a cut comparison still covers every arm
        for arm in (a for a in arms if seed in arm_seeds[a]):
            run_dir = out_dir / "runs" / f"{arm.label}__s{seed}"
            if on_run is not None:
                on_run(arm.label, seed)
            if not (run_dir / files.SUMMARY).exists():
                cfg = arm.apply(base).replace(seed=seed, run_dir=str(run_dir), progress=False)
                make_trainer(cfg, resume=(run_dir / files.METRICS).exists()).run()
            results.append(run_row(arm, seed, run_dir, target_return))
    if dollar_budget is None:  # the cheapest run's total: every arm has spent at least that much
        dollar_budget = min(r["cost_usd"] for r in results)
    for row in results:
        row["return_at_budget"] = _return_at(read_metrics(Path(out_dir) / "runs" / f"{row['arm']}__s{row['seed']}"),
                                             _cost_column(row["priced_as"], row["backend"]), dollar_budget)
    _write_outputs(results, arms, out_dir, base.env.env_id, target_return, dollar_budget)
    return results


def _pays(priced_as: str, backend: str) -> str:
    """What an arm really pays (a key of a run's ``cost_usd``): the server bill where its runs priced a deployment
    on servers (the server backend, a Ray cluster), the functions' otherwise."""
    return "server" if pays_servers(priced_as) or backend == "server" else "serverless"  # the backend: older runs


def _cost_column(priced_as: str, backend: str) -> str:
    """What an arm really pays, cumulated over its rounds (a metrics.csv column)."""
    return f"cum_cost_{_pays(priced_as, backend)}_usd"


def _return_at(rows: list[dict[str, str]], cost_column: str, dollars: float) -> float | None:
    """The last evaluation return known when the run had spent ``dollars`` (None: none by then)."""
    known = None
    for r in rows:
        if float(r[cost_column]) > dollars * (1 + 1e-9):
            break
        if r["eval_return_mean"]:
            known = float(r["eval_return_mean"])
    return known


def run_row(arm: Arm, seed: int, run_dir: Path, target: float | None) -> dict[str, Any]:
    """One finished run's row of compare.csv (:data:`RUN_COLUMNS` but ``return_at_budget``)."""
    summary = json.loads((run_dir / files.SUMMARY).read_text())
    rows = read_metrics(run_dir)
    cost = summary["cost_usd"]
    reached = [int(r["round"]) for r in rows
               if target is not None and r["eval_return_mean"] and float(r["eval_return_mean"]) >= target]
    first = reached[0] if reached else None
    return {
        "arm": arm.label, "scaler": arm.scaler, "backend": arm.backend,
        "priced_as": summary.get("priced_as", ""),  # runs older than the field priced a direct invoke
        "learner_budget": summary["config"].get("learner_budget", "per-sample"),  # runs older than the option
        "seed": seed, "rounds": summary["rounds"],
        "env_steps": summary["env_steps"], "final_eval_return": summary["final_eval_return"],
        "best_eval_return": summary["best_eval_return"], "train_return_last100": summary["train_return_last100"],
        "wall_s": summary["wall_s"], "projected_cloud_s": summary["projected_cloud_s"],
        "cost_serverless_usd": cost["serverless"], "cost_server_usd": cost["server"],
        "cost_usd": cost[_pays(summary.get("priced_as", ""), arm.backend)],
        "mean_actors": float(np.mean([int(r["n_actors"]) for r in rows])),
        # the scaler's detectors against the rounds it ran them in, as the cloud would run them (docs/COST.md)
        "detector_share": (sum(float(r["detector_s"] or 0.0) for r in rows)
                           / sum(float(r["projected_round_s"]) for r in rows)),
        "time_to_target_s": float(rows[first - 1]["wall_s"]) if first else None,
        "projected_time_to_target_s": sum(float(r["projected_round_s"]) for r in rows[:first]) if first else None,
        "usd_to_target": (float(rows[first - 1][_cost_column(summary.get("priced_as", ""), arm.backend)]) if first
                          else None),
        # the round whose policy's evaluation first reached it (evaluations come every ``eval_every`` rounds and
        # after the last)
        "rounds_to_target": first,
    }


def bootstrap_ci(values: list[float], level: float = 0.95, draws: int = 2000, seed: int = 0,
                 over: list[float] | None = None) -> tuple[float, float]:
    """A percentile bootstrap interval of the mean over seeds, or, given ``over`` (a paired value per seed: the
    baseline's on the same seed), of the ratio ``sum(values) / sum(over)``, the seeds resampled in pairs. A single
    seed is its own interval."""
    vals = np.asarray(values, dtype=np.float64)
    base = None if over is None else np.asarray(over, dtype=np.float64)
    if len(vals) < 2:
        point = vals[0] if base is None else vals[0] / base[0]
        return float(point), float(point)
    picks = np.random.default_rng(seed).integers(0, len(vals), (draws, len(vals)))
    means = vals[picks].mean(axis=1) if base is None else vals[picks].sum(axis=1) / base[picks].sum(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def diff_bootstrap_ci(a: list[float], b: list[float], level: float = 0.95, draws: int = 2000,
                      seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval of ``mean(a) − mean(b)`` for two arms measured on their own (unpaired: each
    resampled by itself); at least two values each."""
    rng = np.random.default_rng(seed)
    d = rng.choice(a, (draws, len(a))).mean(1) - rng.choice(b, (draws, len(b))).mean(1)
    lo, hi = np.quantile(d, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


# below this many seeds a percentile bootstrap of the mean resamples too few values to be an interval one can
# trust (over 2 seeds it can only say "between the two"): the cell shows the lowest and highest value instead
MIN_SEEDS_FOR_INTERVAL = 5

# compare.md's columns: compare.csv's field name -> (the title a user reads, what it is); "{budget}" is the dollars
COLUMNS: dict[str, tuple[str, str]] = {
    "final_eval_return": ("final eval return", "the evaluation return after the last round"),
    "best_eval_return": ("best eval return", "the best evaluation return of the run"),
    "wall_s": ("wall s", "seconds the run took on this machine"),
    "projected_cloud_s": ("projected cloud s", "seconds the run would take in the cloud (docs/COST.md)"),
    "cost_serverless_usd": ("$ as functions", "the bill as serverless functions"),
    "cost_server_usd": ("$ on servers", "the bill on servers"),
    "cost_usd": ("$ paid", "what the arm pays: $ on servers for an arm on servers or a Ray cluster, $ as functions "
                 "otherwise"),
    "mean_actors": ("actors a round", "the mean actor count over rounds"),
    "detector_share": ("detectors' share", "the share of the projected rounds the scaler's detectors took"),
    "time_to_target_s": ("wall s to target", "seconds on this machine until an evaluation reached the target"),
    "projected_time_to_target_s": ("projected s to target", "projected cloud seconds until then"),
    "usd_to_target": ("$ to target", "dollars paid until then"),
    "rounds_to_target": ("rounds to target", "the round whose policy's evaluation first reached it"),
    "return_at_budget": ("return at ${budget}", "the run's latest evaluation return when its bill reached ${budget}: "
                         "the cheapest run's whole bill unless --dollar-budget says otherwise, so that every arm is "
                         "compared at a spend each reached"),
}


def _summary_cell(values: list[Any]) -> str:
    """A column's values over an arm's seeds: the mean [bootstrap 95% interval] with enough seeds for one, the mean
    (lowest–highest) with fewer, a single value as it is, ``–`` for none; over fewer seeds than the arm ran, how
    many (``(1 of 2 seeds)``)."""
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return "–"
    of = f" ({len(vals)} of {len(values)} seeds)" if len(vals) < len(values) else ""
    if len(vals) == 1:
        return f"{vals[0]:.4g}{of}"
    if len(vals) < MIN_SEEDS_FOR_INTERVAL:
        return f"{np.mean(vals):.4g} ({min(vals):.4g}–{max(vals):.4g}){of}"
    lo, hi = bootstrap_ci(vals)
    return f"{np.mean(vals):.4g} [{lo:.4g}, {hi:.4g}]{of}"


def pareto_front(points: dict[str, tuple[float, float]]) -> list[str]:
    """Labels whose (cost, return) no other point beats: as cheap or cheaper and as good or better, one
    strictly."""
    return [a for a, (ca, ra) in points.items()
            if not any((cb <= ca and rb >= ra) and (cb < ca or rb > ra) for b, (cb, rb) in points.items() if b != a)]


def target_front(results: list[dict[str, Any]], arms: list[Arm]) -> list[str]:
    """The arms no other beats on both mean projected seconds and mean dollars to the target, among the arms whose
    every seed reached it (one that sometimes never gets there has no mean to compare)."""
    points = {}
    for arm in arms:
        rows = [r for r in results if r["arm"] == arm.label]
        if rows and all(r["usd_to_target"] is not None for r in rows):
            points[arm.label] = (float(np.mean([r["usd_to_target"] for r in rows])),
                                 -float(np.mean([r["projected_time_to_target_s"] for r in rows])))
    return pareto_front(points)


def _shown_columns(target: float | None, dollar_budget: float | None) -> list[str]:
    """compare.csv's columns that compare.md summarises per arm."""
    cols = ["final_eval_return", "best_eval_return", "wall_s", "projected_cloud_s", "cost_serverless_usd",
            "cost_server_usd", "cost_usd", "mean_actors", "detector_share"]
    if target is not None:
        cols += ["time_to_target_s", "projected_time_to_target_s", "usd_to_target", "rounds_to_target"]
    if dollar_budget is not None:
        cols += ["return_at_budget"]
    return cols


def markdown_table(results: list[dict[str, Any]], arms: list[Arm], target: float | None,
                   dollar_budget: float | None = None) -> str:
    """Per arm, over seeds: the mean with its spread (:func:`_summary_cell`), columns titled as :data:`COLUMNS`
    says; the Pareto front of (dollars, return)."""
    cols = _shown_columns(target, dollar_budget)
    front = pareto_front(_arm_points(results, arms))
    to_target = target_front(results, arms) if target is not None else []
    table = []
    for arm in arms:
        rows = [r for r in results if r["arm"] == arm.label]
        reached = [f"{sum(r['usd_to_target'] is not None for r in rows)}/{len(rows)}"] if target is not None else []
        table.append([arm.label, len(rows), *reached, *(_summary_cell([r[c] for r in rows]) for c in cols),
                      "yes" if arm.label in front else "",
                      *(["yes" if arm.label in to_target else ""] if target is not None else [])])
    titles = [_title(c, dollar_budget) for c in cols]
    head = ["arm", "seeds", *(["reached"] if target is not None else []), *titles, "Pareto",
            *(["Pareto to target"] if target is not None else [])]
    return tables.markdown_table(head, table)


def _dollars(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


def _title(column: str, dollar_budget: float | None) -> str:
    """A column's title in compare.md."""
    return COLUMNS[column][0].format(budget=_dollars(dollar_budget))


def legend(columns: list[str], target: float | None, dollar_budget: float | None) -> str:
    """What compare.md's cells and columns are, one line each (``columns``: compare.csv's names shown)."""
    budget = _dollars(dollar_budget)
    lines = [f"Each cell is over the arm's seeds: with {MIN_SEEDS_FOR_INTERVAL} values or more, the mean [bootstrap "
             f"95% interval]; with 2 to {MIN_SEEDS_FOR_INTERVAL - 1}, the mean (lowest–highest), as a bootstrap over "
             "so few seeds understates the spread; one value, as it is; –, none; (k of n seeds) where only k of the "
             "arm's n seeds have a value (the others never reached the target, or had no evaluation by that spend). "
             "compare.csv has every run's values under the names in parentheses below.", ""]
    if target is not None:
        lines.append(f"- **reached**: the seeds whose evaluation got to the target {target:g}; the cells to the "
                     "target are over those seeds")
    for column in columns:
        title, meaning = COLUMNS[column]
        lines.append(f"- **{title.format(budget=budget)}** (`{column}`): {meaning.format(budget=budget)}")
    lines.append("- **Pareto**: no other arm is as cheap and as good (mean $ paid, mean final eval return; "
                 "`pareto.png`)")
    if target is not None:
        lines.append("- **Pareto to target**: among arms whose every seed reached the target, none is both faster "
                     "(projected seconds) and cheaper")
    return "\n".join(lines)


def _arm_points(results: list[dict[str, Any]], arms: list[Arm]) -> dict[str, tuple[float, float]]:
    """Each arm's mean (dollars, final return) over its seeds."""
    points = {}
    for arm in arms:
        rows = [r for r in results if r["arm"] == arm.label and r["final_eval_return"] is not None]
        if rows:
            points[arm.label] = (float(np.mean([r["cost_usd"] for r in rows])),
                                 float(np.mean([r["final_eval_return"] for r in rows])))
    return points


def _write_outputs(results: list[dict[str, Any]], arms: list[Arm], out_dir: Path, env_id: str,
                   target: float | None, dollar_budget: float) -> None:
    with open(out_dir / "compare.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, RUN_COLUMNS)
        writer.writeheader()
        writer.writerows(results)
    table = markdown_table(results, arms, target, dollar_budget)
    priced = sorted({str(r.get("priced_as") or "") for r in results} - {""})
    table += f"\n\nProjected seconds and dollars price: {', '.join(priced)}." if priced else ""
    (out_dir / "compare.md").write_text(f"# compare: {env_id}\n\n{table}\n\n"
                                        f"{legend(_shown_columns(target, dollar_budget), target, dollar_budget)}\n")
    points = _arm_points(results, arms)
    front = pareto_front(points)
    scatter_plot([c for c, _ in points.values()], [r for _, r in points.values()], "mean cost (USD)",
                 "mean final eval return", f"{env_id}: dollars vs return (Pareto front labelled)",
                 out_dir / "pareto.png", labels=[a if a in front else "" for a in points], fit=False)
    curves: dict[str, dict[str, tuple]] = {"return": {}, "dollars": {}, "actors": {}, "steps": {}, "projected": {}}
    bands: dict[str, tuple] = {}
    for arm in arms:
        runs = [read_metrics(out_dir / "runs" / f"{arm.label}__s{r['seed']}") for r in results if r["arm"] == arm.label]
        length = min(len(m) for m in runs)
        rounds = np.arange(1, length + 1)
        returns = np.array([forward_fill([float(x["eval_return_mean"]) if x["eval_return_mean"] else None
                                          for x in m[:length]]) for m in runs])
        pays = _cost_column(next(r["priced_as"] for r in results if r["arm"] == arm.label), arm.backend)
        dollars = np.array([[float(x[pays]) for x in m[:length]] for m in runs])
        steps = np.array([[int(x["env_steps"]) for x in m[:length]] for m in runs])
        projected = np.array([np.cumsum([float(x["projected_round_s"]) for x in m[:length]]) for m in runs])
        actors = np.array([[int(x["n_actors"]) for x in m[:length]] for m in runs])
        with warnings.catch_warnings():  # rounds before the first evaluation are all-NaN: left blank
            warnings.simplefilter("ignore", RuntimeWarning)
            mean_return = np.nanmean(returns, axis=0)
            bands[arm.label] = (np.nanmin(returns, axis=0), np.nanmax(returns, axis=0))
        curves["return"][arm.label] = (rounds, mean_return)
        curves["dollars"][arm.label] = (dollars.mean(axis=0), mean_return)
        curves["actors"][arm.label] = (rounds, actors.mean(axis=0))
        curves["steps"][arm.label] = (steps.mean(axis=0), mean_return)
        curves["projected"][arm.label] = (projected.mean(axis=0), mean_return)
    line_plot(curves["return"], "round", "eval return (mean over seeds; band: min–max)", f"{env_id}: return",
              out_dir / "return_vs_round.png", bands)
    line_plot(curves["dollars"], "cumulative cost (USD)", "eval return", f"{env_id}: return vs dollars",
              out_dir / "return_vs_dollars.png")
    line_plot(curves["actors"], "round", "actors (mean over seeds)", f"{env_id}: actors per round",
              out_dir / "actors_per_round.png")
    line_plot(curves["steps"], "env steps", "eval return", f"{env_id}: return vs env steps",
              out_dir / "return_vs_steps.png")
    line_plot(curves["projected"], "projected cloud time (s)", "eval return", f"{env_id}: return vs projected time",
              out_dir / "return_vs_projected_time.png")


# -- comparison specs -------------------------------------------------------------------------------------------
# A spec is one comparison in a YAML file (bench/specs/): ``compare:`` holds ``minionsrl compare``'s options,
# ``base:`` names a config file the runs share (e.g. docs/results/hopper.yaml) and ``config:`` config fields over it.
SPEC_OPTIONS = ("scalers", "seeds", "rounds", "until", "target", "dollar_budget", "out")


def read_spec(path: str | Path) -> tuple[list[str], dict[str, Any]]:
    """A spec as ``minionsrl compare``'s options (all but ``--config``) and the config fields its runs share (the
    base file's, then ``config:``'s), both checked: every arm parses and every field is a config field. A relative
    ``base:`` is read from the repository root, where the spec runs. ConfigError, naming the spec, otherwise."""
    path = Path(path)
    spec = files.read_yaml(path, "comparison spec") or {}
    if not isinstance(spec, dict) or set(spec) - {"compare", "base", "config"}:
        raise ConfigError(f"{path}: a spec holds compare:, base: and config: only")
    options, fields = spec.get("compare") or {}, config.flat_values(spec.get("config") or {})
    unknown = set(options) - set(SPEC_OPTIONS) if isinstance(options, dict) else {"(not a mapping)"}
    if unknown or "scalers" not in options:
        raise ConfigError(f"{path}: compare: takes {', '.join(SPEC_OPTIONS)} (scalers needed); not {sorted(unknown)}")
    scalers = options["scalers"]
    scalers = ",".join(scalers) if isinstance(scalers, list) else str(scalers)
    for arm in scalers.split(","):
        Arm.parse(arm)
    if spec.get("base"):
        fields = {**config.load_yaml(spec["base"]), **fields}
    config.build(fields)  # unknown fields and bad values are refused here, before any run
    argv = []
    for name in SPEC_OPTIONS:
        value = scalers if name == "scalers" else options.get(name)
        if value is not None:
            argv += ["--" + name.replace("_", "-"), str(value)]
    return argv, fields
