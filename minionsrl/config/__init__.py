"""The run configuration, by role, reachable from the CLI (``--kebab-case``) and YAML (flat or sectioned).

- :mod:`~minionsrl.config.roles`: one small dataclass per role (env, run, learner, scaling, functions, eval,
  cost, faults), each with its fields, their defaults, help and value rules;
- :mod:`~minionsrl.config.presets`: the preset tables (CleanRL's defaults per family, the zoo's rows per env,
  the papers' learner, per algo);
- :mod:`~minionsrl.config.rules`: every rule between fields (within a role and across roles), named, in one list;
- :mod:`~minionsrl.config.train`: :class:`TrainConfig` (the roles together) and the one place that builds it from
  flat or sectioned values, applies the presets, checks the rules and writes ``config.yaml``;
- :mod:`~minionsrl.config.fields`: what a field is made of (declaration, value rules, type conversion);
- :mod:`~minionsrl.config.steps`: :class:`StepPlan`, the steps each rollout function of a round takes.

Resolution order: field defaults ← YAML file (``--config``) ← command-line flags ← preset (fills whatever is
still unset, chosen from the environment's family; under ``--preset auto`` the env's own ``ENV_PRESETS`` row,
where it has one, over the family's). ``config.yaml`` in the run directory holds the fully resolved result, one
section per role. Every field is validated before any work starts; a bad one raises a one-line
:class:`~minionsrl.errors.ConfigError` naming the field and the fix.
"""

from minionsrl.config.fields import check_path
from minionsrl.config.presets import (
    ALGO_PRESETS,
    DEFAULT_DESIRED_KL,
    ENV_PRESETS,
    NITRO_PRESET,
    PRESET_NAMES,
    PRESETS,
    preset_flags,
    preset_values,
)
from minionsrl.config.roles import (
    ALGOS,
    BACKENDS,
    DETECTOR_PLACEMENTS,
    DEVICES,
    LEARNER_BUDGETS,
    LR_SCHEDULES,
    OBJECTIVES,
    ROLES,
    SCALERS,
    CostConfig,
    EnvConfig,
    EvalConfig,
    FaultsConfig,
    FunctionsConfig,
    LearnerConfig,
    RunConfig,
    ScalingConfig,
    lr_schedule_of,
)
from minionsrl.config.rules import RULES, STOPS, Rule
from minionsrl.config.steps import StepPlan
from minionsrl.config.train import (
    FIELDS,
    ROLE_OF,
    UNBOUNDED_STEPS,
    TrainConfig,
    auto_actors,
    build,
    dump,
    field_kind,
    fields_of,
    flat_values,
    help_text,
    learner_settings,
    load_yaml,
    resolve,
    validate,
)

__all__ = [
    "ALGOS", "ALGO_PRESETS", "BACKENDS", "DEFAULT_DESIRED_KL", "DETECTOR_PLACEMENTS", "DEVICES", "ENV_PRESETS",
    "FIELDS", "LEARNER_BUDGETS", "LR_SCHEDULES", "NITRO_PRESET", "OBJECTIVES", "PRESETS", "PRESET_NAMES", "ROLES",
    "ROLE_OF", "RULES", "SCALERS", "STOPS", "UNBOUNDED_STEPS", "CostConfig", "EnvConfig", "EvalConfig", "FaultsConfig",
    "FunctionsConfig", "LearnerConfig", "Rule", "RunConfig", "ScalingConfig", "StepPlan", "TrainConfig", "auto_actors",
    "build", "check_path", "dump", "field_kind", "fields_of", "flat_values", "help_text", "learner_settings",
    "load_yaml", "lr_schedule_of", "preset_flags", "preset_values", "resolve", "validate",
]
