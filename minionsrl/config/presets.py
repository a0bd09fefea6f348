"""The presets: the hyper-parameters a run takes where the user set none, per env family (CleanRL's defaults),
per env (rl-baselines3-zoo's tuned rows), for the papers' learner (``--preset nitro``) and per algo. Plain tables:
:func:`minionsrl.config.resolve` is the one place that applies them."""

from __future__ import annotations

import json
import shlex
from typing import Any

PRESET_NAMES = ("auto", "classic", "mujoco", "atari", "nitro")
DEFAULT_DESIRED_KL = 0.01  # rsl_rl's default desired_kl: the adaptive learning rate's target when none is given

# CleanRL's defaults: ppo.py (classic control) and ppo_continuous_action.py (MuJoCo). Fragment
# length and evaluation cadence are ours (DESIGN §1: T = 128 for classic control, 512 for MuJoCo).
PRESETS: dict[str, dict[str, Any]] = {
    "classic": dict(total_timesteps=500_000, fragment_length=128, eval_every=5, learning_rate=2.5e-4,
                    anneal_lr=True, gamma=0.99, gae_lambda=0.95, update_epochs=4, minibatch_size=128,
                    norm_adv=True, clip_coef=0.2, clip_vloss=True, ent_coef=0.01, vf_coef=0.5,
                    max_grad_norm=0.5, normalize_obs=False, normalize_reward=False, kl_coef=0.0),
    "mujoco": dict(total_timesteps=1_000_000, fragment_length=512, eval_every=10, learning_rate=3e-4,
                   anneal_lr=True, gamma=0.99, gae_lambda=0.95, update_epochs=10, minibatch_size=64,
                   norm_adv=True, clip_coef=0.2, clip_vloss=True, ent_coef=0.0, vf_coef=0.5,
                   max_grad_norm=0.5, normalize_obs=True, normalize_reward=True, kl_coef=0.0),
    # ppo_atari.py: 8 envs x 128 steps in 4 minibatches (256), clip 0.1, 10M steps.
    "atari": dict(total_timesteps=10_000_000, fragment_length=128, eval_every=50, learning_rate=2.5e-4,
                  anneal_lr=True, gamma=0.99, gae_lambda=0.95, update_epochs=4, minibatch_size=256,
                  norm_adv=True, clip_coef=0.1, clip_vloss=True, ent_coef=0.01, vf_coef=0.5,
                  max_grad_norm=0.5, normalize_obs=False, normalize_reward=False, kl_coef=0.0),
}
# The papers' learner (--preset nitro), applied over the family preset: PPO as the published Nitro code ran it
# on RLlib — one full-batch minibatch per epoch (so the SGD steps per round do not depend on n), 30 epochs,
# lr 5e-5, GAE lambda 1.0, clip 0.3, the squared value error clipped at 10, value coefficient 1.0, no entropy
# bonus, no gradient clipping, no observation filter, and the adaptive KL penalty (0.2, target 0.01).
NITRO_PRESET: dict[str, Any] = dict(num_minibatches=1, update_epochs=30, learning_rate=5e-5, anneal_lr=False,
                                    gae_lambda=1.0, clip_coef=0.3, vf_clip=10.0, vf_coef=1.0, ent_coef=0.0,
                                    max_grad_norm=0.0, kl_coef=0.2, kl_target=0.01, normalize_obs=False,
                                    normalize_reward=False)
# Per-env settings over the family preset, for the classic-control envs whose family preset does not learn them
# within rl-baselines3-zoo's PPO step budget (bench/classic_control.py, docs/BENCHMARKS.md). ``--preset auto``
# applies the env's row on top of its family's preset; naming a preset (``--preset classic``) gives the bare
# family values. Keyed by the exact Gymnasium id. Adapted from the zoo's tuned hyperparams/ppo.yml: its
# n_envs x n_steps is our actors (8 by default) x fragment_length, so that a round's batch matches the zoo's;
# "normalize" is our normalize_obs and normalize_reward; budgets are the zoo's or fewer steps, as far as our
# probes needed. The zoo's state-dependent exploration (gSDE, on Pendulum and MountainCarContinuous) has no
# counterpart here: Pendulum adds reward scaling instead (without it, a probe ended at -1,137 after 100k steps).
# LunarLander's returns are in the hundreds and unscaled, so the value loss is not clipped (the zoo's SB3 does
# not clip it either): clipped at 0.2 per update, a probe's value function lagged and ended at 102 after 1M steps.
# CartPole-v1 takes the zoo's tuned row (32 steps x 8 actors, 20 epochs of one 256-sample minibatch): the bare
# classic preset ended at 437.6 +- 64.1 at the zoo's 100k steps (349, 463, 500 on seeds 1-3), this row at 500 in
# probes; an evaluation every 10 of its short rounds, so that evaluating (up to 5,000 steps) does not dwarf them.
# The value loss is unclipped, as in SB3 (its clip_range_vf is None), which the zoo's row was tuned on: with the
# classic preset's clipped value, SB3's five lines at 50k steps handed back a last policy below 475 on 5 of 10 seeds
# (114 to 414); unclipped, on 0 of 20 at 50k and 0 of 10 at 100k (seeds 1-10 at 50k: bench/handed_back.py,
# docs/results/handed-back.md). The zoo's row also anneals
# the clip range (lin_0.2); --anneal-clip does, but the row leaves it off: on 10 seeds it left more last policies
# below 475 than the row without it (50k steps: 6 against 2; docs/results/cartpole-seeds.md).
ENV_PRESETS: dict[str, dict[str, Any]] = {
    "CartPole-v1": dict(total_timesteps=100_000, fragment_length=32, eval_every=10, learning_rate=1e-3, gamma=0.98,
                        gae_lambda=0.8, update_epochs=20, minibatch_size=256, ent_coef=0.0, clip_vloss=False),
    "Acrobot-v1": dict(total_timesteps=200_000, fragment_length=512, learning_rate=3e-4, anneal_lr=False,
                       gae_lambda=0.94, minibatch_size=64, ent_coef=0.0, normalize_obs=True, normalize_reward=True),
    "MountainCar-v0": dict(total_timesteps=300_000, fragment_length=256, eval_every=10, learning_rate=3e-4,
                           anneal_lr=False, gae_lambda=0.98, minibatch_size=64, ent_coef=0.0, normalize_obs=True,
                           normalize_reward=True),
    "MountainCarContinuous-v0": dict(total_timesteps=20_000, fragment_length=8, eval_every=20, learning_rate=7.77e-5,
                                     gamma=0.9999, gae_lambda=0.9, update_epochs=10, minibatch_size=256,
                                     clip_coef=0.1, ent_coef=0.00429, vf_coef=0.19, max_grad_norm=5.0,
                                     normalize_obs=True, normalize_reward=True),
    "Pendulum-v1": dict(total_timesteps=100_000, fragment_length=512, learning_rate=1e-3, anneal_lr=False,
                        gamma=0.9, update_epochs=10, minibatch_size=64, ent_coef=0.0, normalize_reward=True),
    "LunarLander-v3": dict(total_timesteps=1_000_000, fragment_length=2048, learning_rate=3e-4, anneal_lr=False,
                           gamma=0.999, gae_lambda=0.98, minibatch_size=64, clip_vloss=False),
}
# Applied over the family preset. IMPALA takes one pass, one SGD step per group of whole fragments
# (Espeholt et al. 2018); APPO keeps PPO's epochs, minibatches and clipping.
ALGO_PRESETS: dict[str, dict[str, Any]] = {"ppo": {}, "appo": {}, "impala": dict(update_epochs=1)}


def env_preset(env_id: str, preset: str, algo: str) -> dict[str, Any]:
    """The env's own settings over its family preset (:data:`ENV_PRESETS`): only under ``--preset auto`` and for
    PPO (the rows are the zoo's PPO settings; APPO and IMPALA keep the family's)."""
    return dict(ENV_PRESETS.get(env_id, {})) if preset == "auto" and algo == "ppo" else {}


def preset_values(name: str) -> tuple[str, str]:
    """What the presets set a field to: per family (``classic 0.00025, mujoco 0.0003, atari 0.00025``, or one
    value where all agree), and where ``--preset nitro`` or an algo changes it (``nitro 5e-05``); "" for none."""
    families = {family: values[name] for family, values in PRESETS.items() if name in values}
    distinct = {cli_value(v) for v in families.values()}
    per_family = (next(iter(distinct)) if len(distinct) == 1 and len(families) == len(PRESETS) else
                  ", ".join(f"{family} {cli_value(v)}" for family, v in families.items()))
    overlays = {"nitro": NITRO_PRESET, **{f"algo {algo}": values for algo, values in ALGO_PRESETS.items()}}
    changed = [f"{label} {cli_value(values[name])}" for label, values in overlays.items() if name in values]
    # a preset's minibatch count replaces the family's minibatch size (resolve)
    changed += [f"{label} unset" for label, values in overlays.items()
                if name == "minibatch_size" and "num_minibatches" in values]
    return per_family, ", ".join(changed)


def preset_flags(values: dict[str, Any]) -> str:
    """Config values as the command-line flags that set them (``--fragment-length 512 --no-anneal-lr``), each
    value quoted for a POSIX shell where it needs it (``--env-kwargs '{"g": 9.8}'``): an ``ENV_PRESETS`` row is
    ``--preset classic`` plus these flags."""
    return " ".join((f"--{name}" if value else f"--no-{name}") if isinstance(value, bool) else
                    f"--{name} {cli_value(value) if isinstance(value, list) else shlex.quote(cli_value(value))}"
                    for name, value in ((k.replace("_", "-"), v) for k, v in values.items()))


def cli_value(value: Any) -> str:
    """A value as it is written on the command line (``--hidden-sizes 64 64``, ``--env-kwargs '{}'``)."""
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)
