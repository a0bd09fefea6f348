"""The whole run configuration (:class:`TrainConfig`: one object per role), and the one place that reads it from
flat or sectioned values, fills it from the presets, checks the rules between roles, and writes it."""

from __future__ import annotations

import dataclasses
import difflib
import math
import time
from pathlib import Path
from typing import Any

import yaml

from minionsrl.config import roles
from minionsrl.config.fields import check_value, coerce, default_of, kind_of
from minionsrl.config.presets import (
    ALGO_PRESETS,
    DEFAULT_DESIRED_KL,
    ENV_PRESETS,
    NITRO_PRESET,
    PRESETS,
    cli_value,
    env_preset,
    preset_values,
)
from minionsrl.config.roles import ROLES, lr_schedule_of
from minionsrl.config.rules import RULES
from minionsrl.errors import ConfigError
from minionsrl.words import foreign_name

# every field by its flat name (unique across the roles), and the role that owns it
FIELDS: dict[str, dataclasses.Field] = {f.name: f for cls in ROLES.values() for f in dataclasses.fields(cls)}
ROLE_OF: dict[str, str] = {f.name: role for role, cls in ROLES.items() for f in dataclasses.fields(cls)}
FIELDS_OF: dict[str, list[str]] = {role: [n for n, r in ROLE_OF.items() if r == role] for role in ROLES}
assert len(FIELDS) == sum(len(dataclasses.fields(cls)) for cls in ROLES.values()), "a field name in two roles"
UNBOUNDED_STEPS = 10**12  # "no step budget" (compare --until target): the preset's would stop a run before its target



@dataclasses.dataclass(frozen=True, init=False)
class TrainConfig:
    """Everything that defines a training run, one object per role (:mod:`minionsrl.config.roles`).

    ``TrainConfig(env_id="Hopper-v5", learning_rate=1e-3)`` takes any field by its flat name, and a whole role by
    the role's name (``TrainConfig(learner=LearnerConfig(...))``); the rest keep their defaults. A field is read
    through its role (``cfg.learner.learning_rate``), or by its flat name (``cfg.learning_rate``, :meth:`get`).
    """

    env: roles.EnvConfig
    run: roles.RunConfig
    learner: roles.LearnerConfig
    scaling: roles.ScalingConfig
    functions: roles.FunctionsConfig
    eval: roles.EvalConfig
    cost: roles.CostConfig
    faults: roles.FaultsConfig

    def __init__(self, **values: Any) -> None:
        for name in values:
            if name not in FIELDS and name not in ROLES:
                raise ConfigError(f"TrainConfig: {unknown_field(name)}")
        for role, cls in ROLES.items():
            part = values.get(role, cls())
            if not isinstance(part, cls):
                raise TypeError(f"TrainConfig: {role} must be a {cls.__name__}, not {type(part).__name__}")
            # a value's type is checked as the CLI and YAML check it, so that a Python caller's '50k' or 1.5 for an
            # integer is the same one line, not a TypeError rounds later; but env_id's, whose own check says what to
            # write for an env class or instance given there (check_env_id)
            own = {name: value if name == "env_id" else coerce(name, field_kind(name), value,
                                                               FIELDS[name].metadata.get("words", ()))
                   for name, value in values.items() if ROLE_OF.get(name) == role}
            object.__setattr__(self, role, dataclasses.replace(part, **own) if own else part)

    def get(self, name: str) -> Any:
        """A field's value by its flat name (``cfg.get("learning_rate")`` is ``cfg.learner.learning_rate``)."""
        if name not in ROLE_OF:
            raise AttributeError(f"no config field {name!r}{_did_you_mean(name)}")
        return getattr(getattr(self, ROLE_OF[name]), name)

    def __getattr__(self, name: str) -> Any:
        """A field read by its flat name, as it is written (``cfg.seed`` is ``cfg.run.seed``); called only for a
        name that is no attribute (a role is one)."""
        if name.startswith("__") or name in ROLES:  # copy and pickle probe dunders; a role not yet set
            raise AttributeError(name)
        return self.get(name)

    def replace(self, **values: Any) -> TrainConfig:
        """A copy with some fields (by flat name) or whole roles replaced."""
        return TrainConfig(**{**{role: getattr(self, role) for role in ROLES}, **values})

    def to_dict(self) -> dict[str, Any]:
        """Every field by its flat name, in the roles' order."""
        return {name: value for section in self.sections().values() for name, value in section.items()}

    def sections(self) -> dict[str, dict[str, Any]]:
        """The fields by role, as ``config.yaml`` holds them."""
        return {role: dataclasses.asdict(getattr(self, role)) for role in ROLES}

    def learning_fields(self) -> dict[str, Any]:
        """Fields that change what is learned (a resumed run must keep them); stop conditions, outputs, where
        functions run and how faults are handled do not (the same learning on every backend)."""
        return {k: v for k, v in self.to_dict().items() if FIELDS[k].metadata["learning"]}


TRAIN_ARGS = ("resume", "on_round", "plots", "callback")  # train()'s own arguments, beside its config


def unknown_field(name: Any) -> str:
    """The one line for a name that is no field here: another library's word (CleanRL's, SB3's) with ours and what
    it means, train()'s own argument, or the closest field."""
    foreign = foreign_name(str(name), as_flag=False, known=FIELDS)
    if foreign:
        return foreign
    if name in TRAIN_ARGS:
        return f"unknown config field {name!r}; {name} is train()'s own argument: train(cfg, {name}=...)"
    return f"unknown config field {name!r}{_did_you_mean(name)}"


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(str(name), [*FIELDS, *ROLES], n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def field_kind(name: str) -> str:
    """A field's value type: bool, int, float, str, list or dict (``X | None`` is X)."""
    return kind_of(FIELDS[name])


def fields_of(roles: tuple[str, ...] = tuple(ROLES)) -> list[str]:
    """The fields of the given roles, in the roles' and then the declarations' order."""
    return [name for role in roles for name in FIELDS_OF[role]]


def flat_values(values: dict[str, Any]) -> dict[str, Any]:
    """Field values by flat name from flat (``learning_rate: 3e-4``) or sectioned (``learner: {learning_rate:
    3e-4}``) ones, or a mix; ``-`` in a name reads as ``_``. An unknown name, a field in another role's section
    or a field given twice is a one-line :class:`ConfigError`."""
    flat: dict[str, Any] = {}

    def put(name: Any, value: Any, section: str | None = None) -> None:
        name = name.replace("-", "_") if isinstance(name, str) else name
        if name in ROLES:
            example = f"{name}: {{{FIELDS_OF[name][0]}: ...}}"
            raise ConfigError(f"{name}: a role's section holds its fields (e.g. {example}); write a mapping there")
        if name not in FIELDS:  # CleanRL's and SB3's names get ours (n_steps: fragment_length)
            raise ConfigError(unknown_field(name))
        if section is not None and ROLE_OF[name] != section:
            raise ConfigError(f"{name}: a field of {ROLE_OF[name]}, not of {section}; move it there (or write it "
                              "flat, outside any section)")
        if name in flat:
            raise ConfigError(f"{name}: given twice (flat and in its section, or in two); keep one")
        flat[name] = value

    for name, value in values.items():
        if name in ROLES and isinstance(value, dict):
            for key, v in value.items():
                put(key, v, name)
        else:
            put(name, value)
    return flat


def build(values: dict[str, Any]) -> TrainConfig:
    """Make a config from field values, flat or sectioned (:func:`flat_values`), checking names and types
    (presets are applied later)."""
    return TrainConfig(**flat_values(values))


def resolve(cfg: TrainConfig, family: str) -> TrainConfig:
    """Fill unset fields from the preset (``auto``: by env family, with the env's ``ENV_PRESETS`` row over it) and
    a default run dir; validate. The one place presets are applied."""
    cfg = auto_actors(cfg)
    validate(cfg, require_stop=False)  # the user's own values first, before a preset can hide a contradiction
    family = family if family in PRESETS else "classic"
    preset_name = family if cfg.run.preset in ("auto", "nitro") else cfg.run.preset
    preset = {**PRESETS[preset_name], **env_preset(cfg.env.env_id, cfg.run.preset, cfg.learner.algo),
              **(NITRO_PRESET if cfg.run.preset == "nitro" else {}), **ALGO_PRESETS[cfg.learner.algo]}
    if "num_minibatches" in preset:  # a preset's minibatch count replaces the family's minibatch size
        preset.pop("minibatch_size", None)
    learner = cfg.learner
    # a minibatch size or count given by the user replaces the preset's way of splitting the batch, and a batch
    # size the preset's fragment length
    user_split = {"minibatch_size", "num_minibatches"} if {learner.minibatch_size, learner.num_minibatches} != {
        None} else set()
    if cfg.env.constant_batch:
        user_split.add("fragment_length")
    cfg = cfg.replace(**{k: v for k, v in preset.items() if cfg.get(k) is None and k not in user_split})
    # one field for the rate's schedule in the resolved config: --lr-schedule, else what anneal_lr says (the user's
    # --(no-)anneal-lr, else the preset's); the adaptive rate's target KL
    schedule = cfg.learner.lr_schedule or lr_schedule_of(cfg.learner.anneal_lr)
    cfg = cfg.replace(lr_schedule=schedule, anneal_lr=None,
                      desired_kl=(cfg.learner.desired_kl or DEFAULT_DESIRED_KL) if schedule == "adaptive" else None)
    if cfg.scaling.scaler == "auto" and not cfg.env.constant_batch:
        # the batch --actors functions would sample, whatever the count auto picks: more actors buy a shorter round,
        # not fewer updates (a batch grown with n learned little on Hopper: docs/results/time-to-target-answer.md)
        plan = cfg.env.step_plan()
        cfg = cfg.replace(train_batch_size=plan.round_batch(int(cfg.scaling.actors)), fragment_length=None)
    auto = cfg.scaling.scaler == "auto"
    if cfg.scaling.n_max is None:
        cfg = cfg.replace(n_max=auto_n_max(cfg) if auto else roles.DEFAULT_N_MAX)
    if cfg.scaling.initial_actors is None and not auto:  # auto's: from the env check, as it is built
        cfg = cfg.replace(initial_actors=roles.DEFAULT_INITIAL_ACTORS)
    cfg = cfg.replace(objective=cfg.scaling.objective or ("time" if cfg.scaling.scaler == "auto" else "cost"))
    if cfg.run.run_dir is None:
        safe_env = cfg.env.env_id.replace("/", "_").replace(":", "_")
        cfg = cfg.replace(run_dir=f"runs/{safe_env}__{cfg.run.seed}__{time.strftime('%Y%m%d-%H%M%S')}")
    validate(cfg)
    return cfg


def learner_settings(family: str = "classic", **overrides: Any) -> roles.LearnerConfig:
    """The learner's settings as a run resolves them: ``family``'s preset (CleanRL's ``ppo.py`` for ``classic``)
    under ``overrides`` (any config fields by flat name). For building a learner or its update by hand (tests,
    benchmarks) with the defaults a run would have."""
    return resolve(TrainConfig().replace(**{"preset": family, **overrides}), family).learner


def auto_n_max(cfg: TrainConfig) -> int:
    """The most actors ``--actors auto`` weighs where the user sets no ``n_max``: as many as keep every fragment of
    its batch at :data:`~roles.SHORTEST_FRAGMENT` steps or more, within Lambda's concurrency, and never under
    ``n_min``. The round model's knee picks within it: more functions only where they still shorten a round."""
    most = cfg.env.step_plan().most_actors_within(roles.SHORTEST_FRAGMENT)
    return max(cfg.scaling.n_min, min(roles.LAMBDA_CONCURRENCY, roles.LAMBDA_CONCURRENCY if most is None else most))


def auto_initial(n_min: int, n_max: int) -> int:
    """The count ``--actors auto`` measures its first two rounds at, where the user sets no ``initial_actors`` and the
    learner's check of the env timed no step that mostly waits (``scaling.auto.first_count``): the middle of its
    range on a log scale, as a power of two, the larger of two equally near (32 of 8 to 64 or 128).
    Its pick can lie anywhere in the range (16 on Hopper, 64 on an env whose steps wait), so the middle keeps the
    rounds it measures within sqrt(n_max / n_min) times the pick's count either way; of a tie, the larger, since a
    round too few functions share costs a waiting env the most time."""
    power = 2 ** math.floor(math.log2(n_min * n_max) / 2 + 0.5)  # log2 of a power of two is exact: a tie stays one
    return min(max(power, n_min), n_max)


def auto_actors(cfg: TrainConfig) -> TrainConfig:
    """``actors: auto`` is the ``auto`` scaler, its batch that of the default actor count."""
    if cfg.scaling.actors != "auto":
        return cfg
    if cfg.scaling.scaler not in ("fixed", "auto"):
        raise ConfigError(f"actors: auto picks the actor count itself; drop --scaler {cfg.scaling.scaler}, or give "
                          "--actors a number")
    return cfg.replace(scaler="auto", actors=default_of(FIELDS["actors"]))


def validate(cfg: TrainConfig, require_stop: bool = True) -> None:
    """Check every field against its own rules, then every rule of :data:`~minionsrl.config.rules.RULES` (those the
    presets may still keep only where ``require_stop``: the config they filled); raise a one-line
    :class:`ConfigError` for the first broken one."""
    for name, f in FIELDS.items():
        check_value(name, cfg.get(name), f.metadata)
    for rule in RULES:
        if require_stop or not rule.after_presets:
            rule.check(cfg)


def help_text(name: str) -> str:
    """A field's ``--help`` line: its help and its default, or, where a preset decides it, the preset's values
    (per family, then where ``--preset nitro`` or an algo changes them, then the envs whose ``ENV_PRESETS`` row
    sets it under ``--preset auto``), as CleanRL's tyro help shows defaults."""
    f = FIELDS[name]
    text = f.metadata["help"]
    default = default_of(f)
    if default is not None:
        return f"{text} (default: {cli_value(default)})"
    families, overlays = preset_values(name)
    per_env = ", ".join(f"{env_id} {cli_value(row[name])}" for env_id, row in ENV_PRESETS.items() if name in row)
    per_env = f" (auto, per env: {per_env})" if per_env else ""
    if families:
        return f"{text} (default: from the preset: {'; '.join(filter(None, (families, overlays)))}){per_env}"
    if overlays:
        return f"{text} (default: unset; from the preset: {overlays}){per_env}"
    return text if "default" in text else f"{text} (default: unset)"


# fields renamed since a run could write its config.yaml under the old name: a saved run reads as today's
RENAMED = {"batch_size": "train_batch_size"}  # SB3's batch_size is a minibatch: the word is refused now


def load_yaml(path: str | Path, saved: bool = False) -> dict[str, Any]:
    """Read a YAML config file, flat or sectioned by role, into field values by flat name (:func:`flat_values`),
    with the limits of :func:`minionsrl.files.read_yaml` (size, nesting, aliases, duplicate keys). ``saved``: a
    run's own ``config.yaml``, whose older field names (:data:`RENAMED`) read as today's; a user's file gets the
    one-line correction instead."""
    from minionsrl import files

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {str(path)!r} does not exist; pass an existing YAML file to --config")
    data = files.read_yaml(path, "config file") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping of field: value")
    return flat_values(_renamed(data) if saved else data)


def _renamed(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (flat, or sectioned by role) with the :data:`RENAMED` fields under today's names."""
    return {RENAMED.get(k, k): _renamed(v) if k in ROLES and isinstance(v, dict) else v for k, v in data.items()}


def dump(cfg: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML, one section per role (readable back with ``--config``)."""
    from minionsrl import files

    # a learner killed while writing it leaves the previous one; a link planted in the run dir is not followed
    files.write_text(Path(path), yaml.safe_dump(cfg.sections(), sort_keys=False))
