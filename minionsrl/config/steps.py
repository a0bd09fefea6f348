"""How many steps each rollout function of a round takes: the one rule (DESIGN §1).

With a fragment length T every function steps T steps in each of its E environments, so a round of n functions
learns on n·E·T samples: more actors, a larger batch. With a batch size B the round's batch is B whatever n: each
function steps about B / (n·E), the remainder spread one step each over the first functions, so a round's
fragments differ by one step at most and add up to exactly B; more actors then buy a shorter round, not a larger
batch (the way massively parallel PPO, rsl_rl, Brax or Isaac Gym, gets its speed).
"""

from __future__ import annotations

from dataclasses import dataclass

from minionsrl.errors import ConfigError


@dataclass(frozen=True)
class StepPlan:
    """The steps per rollout function of a round of ``n`` functions: ``fragment_length`` each, or
    ``train_batch_size`` in all (exactly one of the two is set), with ``envs`` environments per function."""

    fragment_length: int | None = None
    train_batch_size: int | None = None
    envs: int = 1

    def __post_init__(self) -> None:
        if (self.fragment_length is None) == (self.train_batch_size is None):
            raise ConfigError("train_batch_size: set exactly one of train_batch_size and fragment_length")

    @property
    def constant_batch(self) -> bool:
        """Whether the round's batch stays ``train_batch_size`` whatever the actor count."""
        return self.train_batch_size is not None

    def steps(self, n: int) -> list[int]:
        """The steps of each of ``n`` functions (per environment), in slot order: the first ones take the
        remainder of ``train_batch_size / (n·envs)``, one step each."""
        if self.train_batch_size is None:
            assert self.fragment_length is not None
            return [self.fragment_length] * n
        base, extra = divmod(self.train_batch_size // self.envs, n)
        return [base + (slot < extra) for slot in range(n)]

    def slot_steps(self, slot: int, n: int) -> int:
        """The steps of function ``slot`` of a round of ``n`` (per environment)."""
        return self.steps(n)[slot]

    def round_batch(self, n: int) -> int:
        """The samples of a round of ``n`` functions."""
        return sum(self.steps(n)) * self.envs

    def most_actors_within(self, episode_steps: int) -> int | None:
        """The most functions whose every fragment holds ``episode_steps`` steps (None: any count, as a fixed
        fragment length does not shrink with the count; 0: none, as a fixed one is shorter)."""
        if self.train_batch_size is None:
            assert self.fragment_length is not None
            return None if self.fragment_length >= episode_steps else 0
        return self.train_batch_size // self.envs // episode_steps

    def check(self, most_actors: int) -> None:
        """Raise a one-line :class:`ConfigError` if a round of up to ``most_actors`` functions cannot split
        ``train_batch_size`` into whole steps, at least one per environment."""
        if self.train_batch_size is None:
            return
        if self.train_batch_size % self.envs:
            raise ConfigError(f"train_batch_size: {self.train_batch_size} is not a multiple of envs_per_function "
                              f"{self.envs} (a function steps its environments together); make it one")
        if self.train_batch_size < most_actors * self.envs:
            raise ConfigError(f"train_batch_size: {self.train_batch_size} steps cannot be split over up to "
                              f"{most_actors} functions x {self.envs} environment(s), one step each at least; "
                              f"raise train_batch_size to >= {most_actors * self.envs} or allow fewer actors "
                              "(--actors / --n-max)")
