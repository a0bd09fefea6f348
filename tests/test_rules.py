"""The config's rules in one home: every rule of ``config.RULES`` is broken by a case here and is then the one
``validate`` names (that no module outside minionsrl/config/ holds a config rule: test_layout)."""

from __future__ import annotations

import pytest

from minionsrl import config
from minionsrl.errors import ConfigError
from minionsrl.function import extras

BASE = {"env_id": "CartPole-v1", "total_timesteps": 2048, "run_dir": "runs/rules"}

# rule name -> the fields that break it (on a resolved CartPole config)
BROKEN = {
    "env_kwargs hold JSON values only": {"env_kwargs": {"g": float("nan")}},
    "a round's size is a batch or a fragment length, not both": {"train_batch_size": 512, "fragment_length": 16},
    "run_dir is a name the file system takes": {"run_dir": "  "},
    "--track names a W&B project": {"track": True, "wandb_project_name": ""},
    "hidden_sizes are integers in 1..16384": {"hidden_sizes": [64, 0]},
    "lr_min < lr_max": {"lr_min": 1.0, "lr_max": 0.5},
    "minibatches by count or by size, not both": {"minibatch_size": 64, "num_minibatches": 4},
    "--pipeline only with ppo": {"algo": "appo", "pipeline": True},
    "--lr-schedule agrees with --anneal-lr": {"lr_schedule": "constant", "anneal_lr": True},
    "desired_kl only with the adaptive learning rate": {"lr_schedule": "constant", "desired_kl": 0.01},
    "the adaptive learning rate not with IMPALA": {"algo": "impala", "lr_schedule": "adaptive"},
    "the adaptive learning rate with no batch scaling": {"lr_schedule": "adaptive", "lr_batch_scaling": "sqrt"},
    "kl_target starts from kl_coef > 0": {"kl_target": 0.01, "kl_coef": 0.0},
    "no KL penalty with IMPALA": {"algo": "impala", "kl_coef": 0.2},
    "n_min <= n_max": {"n_min": 64, "n_max": 8},
    "the backend's extra is installed": {"backend": "ray"},
    "the injected fault rates add up to at most 1": {"fault_raise": 0.6, "fault_kill": 0.6},
    "no secret in the config (it is written to config.yaml and sent to functions)": {"env_kwargs": {"api_key": "x"}},
    "a round's batch splits into whole steps over its functions": {"train_batch_size": 4, "fragment_length": None,
                                                                  "actors": 8},
    "injected hangs have a deadline": {"fault_hang": 0.1},
    "--actors auto with ppo's synchronous round": {"scaler": "auto", "algo": "appo"},
    "round_deadline_s only with ppo's round barrier": {"algo": "appo", "round_deadline_s": 10.0},
    "the run can end": {"total_timesteps": None},
}


@pytest.fixture(scope="module")
def base() -> config.TrainConfig:
    return config.resolve(config.build(BASE), "classic")


def test_every_rule_is_named_once_and_broken_by_a_case():
    names = [r.name for r in config.RULES]
    assert len(names) == len(set(names))
    assert set(names) == set(BROKEN)


@pytest.mark.parametrize("rule", config.RULES, ids=lambda r: r.name)
def test_a_broken_rule_is_the_one_validate_names(rule, base, monkeypatch):
    monkeypatch.setattr(extras, "installed", lambda module: False)  # the one rule that reads the machine
    rule.check(base)  # the base keeps it
    broken = base.replace(**BROKEN[rule.name])
    with pytest.raises(ConfigError) as raised:
        rule.check(broken)
    message = str(raised.value)
    named = message.split(":")[0]
    assert "\n" not in message and (named in config.FIELDS or named == "fault_*"  # one line, the field first
                                    or message.startswith(("--backend ray needs", "set total_timesteps")))
    with pytest.raises(ConfigError) as first:
        config.validate(broken)
    assert str(first.value) == message  # no earlier rule stands in front of it
    if rule.after_presets:
        config.validate(broken, require_stop=False)  # a preset may still keep it
    else:
        with pytest.raises(ConfigError):
            config.validate(broken, require_stop=False)


def test_the_async_hang_names_the_deadline_it_can_have(base):
    with pytest.raises(ConfigError, match="invocation_timeout_s with an asynchronous algo"):
        config.validate(base.replace(algo="appo", fault_hang=0.1))
