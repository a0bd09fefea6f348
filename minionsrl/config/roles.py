"""The run configuration by role: one small frozen dataclass per part of the round loop, each with its fields,
their defaults, help and value rules.

==============  ===============================================================================================
role            what it says
==============  ===============================================================================================
``env``         the environment, and the steps a rollout function takes in it (T, or a round's batch B)
``run``         the preset, when the run stops, its seed, where it writes
``learner``     the algorithm and its hyper-parameters, the network, where the update runs
``scaling``     how many actors a round gets: the scaler, its bounds, its knobs and its detectors
``functions``   where the rollout functions run (the backend) and how (concurrency, timeouts, the cluster)
``eval``        when the policy is evaluated, and on how many episodes
``cost``        what the ledger bills (platform, memory, prices) and the budgets that stop a run
``faults``      how failed invocations are retried and tolerated, and the faults injected for tests
==============  ===============================================================================================

Field names are unique across the roles, so a field is reached by its flat name too (``--learning-rate``,
``learning_rate:`` in YAML) and by its role (``cfg.learner.learning_rate``). A field that is ``None`` is
"from the preset" (:mod:`minionsrl.config.presets`); the rules between fields, within a role or across roles,
are named and listed in :mod:`minionsrl.config.rules`.
"""

from __future__ import annotations

from dataclasses import dataclass

from minionsrl.config.fields import setting
from minionsrl.config.presets import ENV_PRESETS, PRESET_NAMES
from minionsrl.config.steps import StepPlan
from minionsrl.deployments import BACKENDS, COLD_START_S, DEPLOYMENTS, IDLE_TIMEOUT_S, PLATFORMS
from minionsrl.function.faults import DEFAULT_MEMORY_MB
from minionsrl.function.faults import KINDS as fault_kinds
from minionsrl.function.normalization import CLIP_DEFAULT

ALGOS = ("ppo", "appo", "impala")
DEVICES = ("auto", "cpu", "cuda")
LEARNER_BUDGETS = ("per-sample", "per-round", "fixed-compute")
LR_SCHEDULES = ("anneal", "constant", "adaptive")


def lr_schedule_of(anneal_lr: bool | None) -> str:
    """The ``lr_schedule`` CleanRL's ``--anneal-lr`` / ``--no-anneal-lr`` (a preset's ``anneal_lr``) says."""
    return "anneal" if anneal_lr else "constant"
SCALERS = ("fixed", "auto", "minions", "nitro", "critical", "hydrozoa", "kungfu", "gns-boost", "min", "max", "random")
OBJECTIVES = ("cost", "time")  # what the critical and auto scalers minimise
DETECTOR_PLACEMENTS = ("before", "after")  # where the detectors read a round's batch (learner/detectors.py)


class Role:
    """A part of the run configuration: its fields (the rules among them: :data:`minionsrl.config.rules.RULES`)."""


@dataclass(frozen=True)
class EnvConfig(Role):
    """The environment and the steps each rollout function takes in it."""

    env_id: str = setting("CartPole-v1", "Gymnasium id or custom entry point package.module:ClassName")
    env_kwargs: dict = setting({}, "keyword arguments for the environment constructor (JSON on the CLI)")
    fragment_length: int | None = setting(None, "steps per rollout function (T): a round's batch grows with the "
                                          "actors; exclusive with train_batch_size", min=1, max=1_000_000)
    train_batch_size: int | None = setting(None, "samples per round whatever the actor count (RLlib's word): each "
                                           "function steps about train_batch_size / (actors x envs_per_function), so "
                                           "more actors buy a shorter round, not a larger batch; exclusive with "
                                           "fragment_length; SB3's batch_size is a minibatch: minibatch_size here",
                                           min=1, max=100_000_000)
    env_step_latency_ms: float = setting(0.0, "wait this long in every env step (a remote simulator, game server or "
                                         "model-judged reward), sleeping, not burning CPU; training and in-run "
                                         "evaluation (0: off)", min=0.0, max=10_000.0, learning=False)
    envs_per_function: int = setting(1, "environments one rollout function steps together, its policy run once per "
                                     "step on all of them (RLlib's num_envs_per_env_runner); fragments stay one per "
                                     "environment", min=1, max=256)
    env_check_timeout_s: float = setting(60.0, "the learner's check of the env (build, reset, a few random steps) "
                                         "fails after this long: a constructor or step that never returns",
                                         positive=True, learning=False, rare=True)
    carry_episodes: bool = setting(True, "continue episodes across rounds by sending the env state with the request "
                                   "(MuJoCo, classic control); off: every fragment starts an episode")

    @property
    def constant_batch(self) -> bool:
        """Whether a round's batch is ``train_batch_size`` whatever the actor count (known before a preset sets T)."""
        return self.train_batch_size is not None

    def step_plan(self) -> StepPlan:
        """The steps each rollout function takes (:class:`StepPlan`), once a preset set the fragment length."""
        return StepPlan(None if self.constant_batch else self.fragment_length, self.train_batch_size,
                        self.envs_per_function)


@dataclass(frozen=True)
class RunConfig(Role):
    """The preset, when the run stops (with the cost role's budgets), its seed and where it writes."""

    preset: str = setting("auto", "hyper-parameter preset: auto picks by env family, then applies the env's own row of "
                          f"ENV_PRESETS where it has one ({', '.join(ENV_PRESETS)}; README)", choices=PRESET_NAMES)
    total_timesteps: int | None = setting(None, "stop after this many environment steps", min=1, learning=False)
    max_rounds: int | None = setting(None, "stop after this many rounds", min=1, learning=False)
    target_return: float | None = setting(None, "stop once the mean evaluation return reaches this", learning=False)
    seed: int = setting(1, "seed of the run (weights, actor seeds, minibatch order)", min=0, max=2**32 - 1)
    run_dir: str | None = setting(None, "output directory (default runs/<env>__<seed>__<time>)", learning=False)
    checkpoint_every: int = setting(1, "write a checkpoint every this many rounds", min=1, learning=False)
    keep_checkpoints_every: int = setting(0, "also keep checkpoints/round-NNNNN.safetensors every this many rounds "
                                          "(0: never)", min=0, learning=False, rare=True)
    tensorboard: bool = setting(True, "write TensorBoard event files", learning=False)
    track: bool = setting(False, "log the run to Weights & Biases: the TensorBoard scalars, the config and the plots "
                          "(the wandb extra; WANDB_MODE=offline keeps it in RUN_DIR/wandb)", learning=False)
    wandb_project_name: str = setting("minionsrl", "W&B project of --track", learning=False, rare=True)
    wandb_entity: str | None = setting(None, "W&B team or user of --track (default: your W&B default entity)",
                                       learning=False, rare=True)
    progress: bool = setting(True, "show a live progress display", learning=False)


@dataclass(frozen=True)
class LearnerConfig(Role):
    """The algorithm, its hyper-parameters (unset: the preset's), the network and where the update runs."""

    algo: str = setting("ppo", "learner: ppo (synchronous rounds) or appo/impala (asynchronous, V-trace)",
                        choices=ALGOS)
    pipeline: bool = setting(False, "ppo: send the next round's functions before this round's update, so they sample "
                             "with the policy one update older (a policy lag of one, which PPO's ratio corrects) "
                             "while the learner works: the update leaves the round's critical path")
    async_fragments: int | None = setting(None, "appo/impala: update once this many fragments have arrived (default: "
                                          "half of those in flight, at least 1)", min=1)
    vtrace_rho_bar: float = setting(1.0, "appo/impala: V-trace clipping of the importance weight rho", positive=True,
                                    rare=True)
    vtrace_c_bar: float = setting(1.0, "appo/impala: V-trace clipping of the trace coefficient c", positive=True,
                                  rare=True)
    # at most what the learner's float32 holds (beyond, it would be infinite)
    learning_rate: float | None = setting(None, "Adam learning rate", positive=True, max=3.4e38)
    # CleanRL's flag, kept as a way to say --lr-schedule anneal (or constant): the resolved config holds lr_schedule
    anneal_lr: bool | None = setting(None, "anneal the learning rate linearly to 0 over total_timesteps (--lr-schedule "
                                     "anneal; --no-anneal-lr: constant)")
    # rl-baselines3-zoo's rows anneal both (clip_range: lin_0.2); one schedule, the learning rate's, drives the two.
    # Unset is off, and no family preset sets it: a run dir saved before the field existed resumes as the same run
    anneal_clip: bool | None = setting(None, "anneal the clipping coefficient (--clip-coef) linearly to 0 with the "
                                       "learning rate's schedule (the zoo's lin_ clip_range) (default: off)")
    lr_schedule: str | None = setting(None, "learning rate per round: anneal (--anneal-lr), constant (--no-anneal-lr) "
                                      "or adaptive (steered by the KL, towards --desired-kl; rsl_rl's and rl_games' "
                                      "rule) (default: the preset's --anneal-lr)", choices=LR_SCHEDULES)
    desired_kl: float | None = setting(None, "adaptive learning rate: after each epoch, the rate /1.5 when the "
                                       "epoch's mean KL is above 2x this, x1.5 below half of it (default 0.01)",
                                       positive=True)
    lr_min: float = setting(1e-5, "adaptive learning rate: lower bound", positive=True, rare=True)
    lr_max: float = setting(1e-2, "adaptive learning rate: upper bound", positive=True, rare=True)
    gamma: float | None = setting(None, "discount factor", min=0.0, max=1.0)
    gae_lambda: float | None = setting(None, "GAE lambda", min=0.0, max=1.0)
    update_epochs: int | None = setting(None, "epochs over each round's batch", min=1)
    minibatch_size: int | None = setting(None, "minibatch size (the count follows the round's batch); exclusive with "
                                         "num_minibatches", min=1)
    num_minibatches: int | None = setting(None, "minibatches per epoch (minibatch = batch / K: the SGD steps per "
                                          "round stay fixed as actors grow); exclusive with minibatch_size", min=1)
    learner_budget: str = setting("per-sample", "how the update's work follows the actor count: per-sample "
                                  "(minibatches of a fixed size: SGD steps grow with n), per-round (a fixed number of "
                                  "minibatches) or fixed-compute (a fixed number of steps of a fixed size: fewer "
                                  "epochs as n grows); the reference is a batch of --reference-actors functions",
                                  choices=LEARNER_BUDGETS)
    reference_actors: int | None = setting(None, "the actor count whose batch the learner budget and the "
                                           "learning-rate rule are relative to (default: --actors); a comparison "
                                           "gives every arm the same one", min=1, rare=True)
    lr_batch_scaling: str = setting("none", "learning rate for larger batches: none, or sqrt (times sqrt(batch / "
                                    "reference batch))", choices=("none", "sqrt"), rare=True)
    norm_adv: bool | None = setting(None, "normalise advantages per minibatch")
    clip_coef: float | None = setting(None, "surrogate clipping coefficient", positive=True)
    clip_vloss: bool | None = setting(None, "clip the value loss")
    ent_coef: float | None = setting(None, "entropy bonus coefficient", min=0.0)
    vf_coef: float | None = setting(None, "value loss coefficient", min=0.0)
    max_grad_norm: float | None = setting(None, "gradient clipping norm (0: no clipping)", min=0.0)
    vf_clip: float | None = setting(None, "clip the squared value error at this (RLlib's vf_clip_param; replaces "
                                    "clip_vloss)", positive=True, rare=True)
    kl_coef: float | None = setting(None, "initial coefficient of an adaptive KL penalty (0: none)", min=0.0)
    kl_target: float | None = setting(None, "target KL of the adaptive penalty: its coefficient x1.5 above 2x the "
                                      "target, halved below half of it", positive=True, rare=True)
    target_kl: float | None = setting(None, "stop the epochs early above this approx KL", positive=True)
    normalize_obs: bool | None = setting(None, "normalise observations with running statistics")
    normalize_reward: bool | None = setting(None, "scale rewards by the std of discounted returns")
    clip_obs: float = setting(CLIP_DEFAULT, "clip normalised observations to +-this", positive=True, rare=True)
    clip_reward: float = setting(CLIP_DEFAULT, "clip scaled rewards to +-this", positive=True, rare=True)
    hidden_sizes: list = setting([64, 64], "hidden layer sizes of actor and critic")
    learner_threads: int = setting(1, "CPU threads of the learner's compiled update (XLA); 1 leaves the other cores "
                                   "to the rollout functions", min=1, rare=True)
    device: str = setting("auto", "where the learner runs (update, detectors, V-trace): auto (a GPU when there is "
                          "one), cpu or cuda; rollout functions never need one", choices=DEVICES, learning=False)


# n_max where the user gives none: the published scalers' bound (Nitro's 64), and for auto the limits of what it
# weighs: fragments no shorter than 64 steps and AWS Lambda's default concurrency quota (1,000 functions at once per
# account and region). At 4,096 samples a round, 128 functions of 32 steps learn less a round than 64 of 64 and never
# reached a target sooner on Hopper (docs/LAYOUTS.md, 20 seeds), Hopper waiting 5 ms a step,
# and the two envs a user would write (docs/results/autopilot.md); their shorter round does not make up for it
# (HalfCheetah learns alike in every layout, the exception measured)
DEFAULT_N_MAX = 64
DEFAULT_INITIAL_ACTORS = 16  # n_0 where the user gives none (Nitro's published one); auto picks its own
SHORTEST_FRAGMENT = 64
LAMBDA_CONCURRENCY = 1000


@dataclass(frozen=True)
class ScalingConfig(Role):
    """How many actors each round gets: the scaler, the bounds it chooses within, its knobs, its detectors."""

    scaler: str = setting("fixed", "how many actors each round gets", choices=SCALERS)
    actors: int | str = setting(8, "number of actors per round (fixed scaler), or auto: the count the round model "
                                "picks from the run's own rounds, within --n-min and --n-max, the batch kept at what "
                                "the default 8 sample (--scaler auto --actors N: N's batch; see --objective)",
                                min=1, max=4096, words=("auto",))
    n_min: int = setting(8, "fewest actors a scaler may choose", min=1, max=4096)
    n_max: int | None = setting(None, "most actors a scaler may choose (default: 64; auto: as many as keep every "
                                "fragment at 64 steps or more, within Lambda's 1,000 concurrent functions)", min=1,
                                max=4096)
    initial_actors: int | None = setting(None, "actors in round 1 for nitro, critical and auto (n_0); default: 16 "
                                         "(Nitro's); for auto, where the env check's step mostly waits, the round "
                                         "model's knee on it, else the middle of its range: the power of two "
                                         "nearest sqrt(n_min * n_max)", min=1, max=4096)
    objective: str | None = setting(None, "what critical and auto minimise: dollars (cost) or projected seconds "
                                    "(time); default: time for auto (the knee: more actors stop paying past it), "
                                    "cost for critical (per unit of progress)", choices=OBJECTIVES,
                                    aliases=("--optimize",))
    nitro_window: int = setting(6, "nitro: window W of decayed convexity ratios", min=1, rare=True)
    nitro_decay: float = setting(0.96, "nitro: decay delta of the metric and the floor", positive=True, max=1.0,
                                 rare=True)
    nitro_floor: str = setting("r2", "nitro: floor n_max*delta^(r*r) ('r2', published) or delta^r ('r')",
                               choices=("r2", "r"), rare=True)
    nitro_window_mode: str = setting("decayed", "nitro: window holds decayed ratios, or also the raw ones (published "
                                     "code)", choices=("decayed", "decayed+raw"), rare=True)
    scheduler: str | None = setting(None, "minions: scheduler artefact (default: the one shipped for the env's "
                                    "family, trained on CartPole or on Hopper)")
    detectors: str = setting("auto", "compute convexity ratio and noise scale: auto (when the scaler needs them), on, "
                             "off", choices=("auto", "on", "off"))
    detector_placement: str = setting("before", "where the detectors read the round's batch: before the update, at "
                                      "the policy that sampled it (McCandlish et al.'s noise scale), or after it "
                                      "(Nitro's published placement)", choices=DETECTOR_PLACEMENTS, rare=True)
    lanczos_iterations: int = setting(100, "Lanczos iterations of the curvature detector, at most", min=2, rare=True)
    lanczos_tol: float = setting(1e-2, "the curvature detector stops once two iterations in a row moved neither "
                                 "extreme eigenvalue by more than this fraction of the larger (0: all "
                                 "--lanczos-iterations)", min=0.0, rare=True)
    # 1,024 rows keep the detector under 10% of a projected round; Nitro's n from them agrees with a 4,096-row
    # estimate about as often as a second 4,096-row draw does (docs/BENCHMARKS.md §11)
    detector_samples: int = setting(1024, "curvature detector: random subsample of the round batch (0: all of it)",
                                    min=0, rare=True)

    @property
    def most_actors(self) -> int:
        """The most actors a round of this run can have: the fixed count, or the scaler's ``n_max`` (before the
        config is resolved, the default's)."""
        return self.actors if self.scaler == "fixed" else self.n_max or DEFAULT_N_MAX


@dataclass(frozen=True)
class FunctionsConfig(Role):
    """Where the rollout functions run (the backend) and how: concurrency, timeouts, the cluster to join."""

    backend: str = setting("local", "where rollout functions run", choices=tuple(BACKENDS), learning=False)
    max_concurrency: int | None = setting(None, "local backend: concurrent instances (default: CPU count)", min=1,
                                          learning=False)
    idle_timeout_s: float = setting(IDLE_TIMEOUT_S, "local backend: reap instances idle this long", positive=True,
                                    learning=False, rare=True)
    server_wait_startup: bool = setting(False, "server backend: really wait the start-up delay of added hosts",
                                        learning=False, rare=True)
    invocation_timeout_s: float | None = setting(None, "stop (and retry) an invocation running longer than this; "
                                                 "default: 10x the longest of its kind so far, at least 60 s, at most "
                                                 "Lambda's 900 s (300 s before one has run)", positive=True,
                                                 learning=False)
    ray_address: str | None = setting(None, "ray backend: join the Ray cluster at this address (default: start a "
                                      "local one)", learning=False)
    ray_num_cpus: float = setting(1.0, "ray backend: CPUs reserved by each invocation", positive=True, learning=False,
                                  rare=True)
    lithops_config: str | None = setting(None, "lithops backend: Lithops config file (default: Lithops' own lookup)",
                                         learning=False)


@dataclass(frozen=True)
class EvalConfig(Role):
    """When the deterministic policy is evaluated, and on how many episodes."""

    eval_every: int | None = setting(None, "evaluate every this many rounds (0: only at the end)", min=0,
                                     learning=False)
    eval_episodes: int = setting(10, "episodes per evaluation (deterministic policy)", min=1, learning=False)
    eval_max_steps: int = setting(27_000, "cut an evaluation episode still running after this many steps (an env "
                                  "without a time limit); envs with one end sooner", min=1, learning=False)
    eval_overlap: bool = setting(True, "run a round's evaluation beside the next round's functions (they use the same "
                                 "policy), its row written once it returns; off: after the update, as the round's "
                                 "last step. The last round always evaluates after its update", learning=False)


@dataclass(frozen=True)
class CostConfig(Role):
    """What the cost ledger bills, and the budgets (dollars, projected seconds) that stop a run."""

    prices: str | None = setting(None, "price catalogue YAML for the cost ledger (default: the shipped one)")
    platform: str = setting("aws_lambda_x86", "function platform the ledger bills", choices=PLATFORMS)
    deployment: str | None = setting(None, "the path to the functions the projected time and dollars price "
                                     "(summary.json's priced_as): lithops (Lambda through Lithops, what --backend "
                                     "lithops runs), direct (a direct Invoke: a what-if, no backend ships it), ray, "
                                     "servers; default: the backend's own (local and lithops: lithops)",
                                     choices=tuple(DEPLOYMENTS), learning=False)
    function_memory_mb: float = setting(DEFAULT_MEMORY_MB, "memory of one function (1769 MB = 1 vCPU on Lambda); the "
                                        "local backend stops an instance that holds more, as the platform would "
                                        "(status oom)", min=128, max=10240)
    cold_start_s: float = setting(COLD_START_S, "modelled cold start of a cloud function, for the projected cloud time",
                                  min=0.0, rare=True)
    budget_usd: float | None = setting(None, "stop before a round that would take the serverless cost past this",
                                       positive=True, learning=False)
    time_budget_s: float | None = setting(None, "stop before a round that would take the projected cloud time "
                                          "(seconds) past this", positive=True, learning=False)


@dataclass(frozen=True)
class FaultsConfig(Role):
    """How failed invocations are retried and tolerated, and the faults injected to test that."""

    max_retries: int = setting(3, "retry a failed invocation (raised, timed out, died, malformed) up to this many "
                               "times", min=0, max=100, learning=False)
    round_deadline_s: float | None = setting(None, "after this long a round proceeds with the fragments that arrived "
                                             "(stragglers are cancelled and billed)", positive=True, learning=False)
    min_reply_fraction: float = setting(0.5, "fewest fragments a round may proceed with, as a fraction of its actors; "
                                        "fewer fail the run", positive=True, max=1.0, learning=False, rare=True)
    fault_raise: float = setting(0.0, "fault injection: probability that an invocation raises", min=0.0, max=1.0,
                                 learning=False, rare=True)
    fault_hang: float = setting(0.0, "fault injection: probability that an invocation hangs past its deadline", min=0.0,
                                max=1.0, learning=False, rare=True)
    fault_kill: float = setting(0.0, "fault injection: probability that an invocation's instance is SIGKILLed", min=0.0,
                                max=1.0, learning=False, rare=True)
    fault_duplicate: float = setting(0.0, "fault injection: probability that an invocation's reply arrives twice",
                                     min=0.0, max=1.0, learning=False, rare=True)
    fault_malformed: float = setting(0.0, "fault injection: probability that an invocation returns corrupted bytes",
                                     min=0.0, max=1.0, learning=False, rare=True)
    fault_seed: int = setting(0, "fault injection: seed of the draws (which attempt of which slot gets which fault)",
                              min=0, learning=False, rare=True)
    fault_throttle: float = setting(0.0, "fault injection: probability that the platform refuses an invocation "
                                    "(throttled: backed off and retried)", min=0.0, max=1.0, learning=False, rare=True)
    fault_oom: float = setting(0.0, "fault injection: probability that an invocation allocates past its function's "
                               "memory", min=0.0, max=1.0, learning=False, rare=True)

    @property
    def rates(self) -> dict[str, float]:
        """The injected faults' probabilities, by kind."""
        return {kind: getattr(self, f"fault_{kind}") for kind in fault_kinds}


# The roles in the order the help page and config.yaml show them.
ROLES: dict[str, type[Role]] = {"env": EnvConfig, "run": RunConfig, "learner": LearnerConfig, "scaling": ScalingConfig,
                          "functions": FunctionsConfig, "eval": EvalConfig, "cost": CostConfig, "faults": FaultsConfig}
