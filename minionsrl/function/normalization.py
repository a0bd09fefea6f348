"""Running mean/variance statistics for observation normalisation and reward scaling.

Actors normalise with the statistics the learner published for the round and send back the moments
of what they saw; the learner merges those moments in invocation order (so the result does not
depend on arrival order) before publishing the next round. Free of any framework: rollout functions use it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The clip of normalised observations and of scaled rewards (±10: Gymnasium's NormalizeObservation and
# NormalizeReward wrappers as CleanRL uses them); the one default of --clip-obs, --clip-reward and the policy snapshot.
CLIP_DEFAULT = 10.0


def scale_of(var: np.ndarray | float) -> np.ndarray:
    """What normalised observations and scaled rewards are divided by: the running std, kept off 0 by Gymnasium's
    (and CleanRL's) epsilon of 1e-8 on the variance."""
    return np.sqrt(var + 1e-8)


@dataclass
class Moments:
    """Mean, variance and count of a batch of samples (the unit actors send back)."""

    mean: np.ndarray
    var: np.ndarray
    count: float

    @classmethod
    def of(cls, samples: np.ndarray) -> Moments:
        """The mean, variance and count of ``samples`` (rows), in float64 (no rows: the identity, count 0)."""
        samples = np.asarray(samples, dtype=np.float64)
        if len(samples) == 0:
            shape = samples.shape[1:]
            return cls(np.zeros(shape), np.ones(shape), 0.0)
        with np.errstate(all="ignore"):  # an env's inf gives NaN moments, which the learner refuses in one line
            return cls(samples.mean(axis=0), samples.var(axis=0), float(len(samples)))


class RunningMeanStd:
    """Parallel-algorithm running moments (Chan et al.), as in CleanRL / Stable-Baselines3."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4) -> None:
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = float(epsilon)

    def update(self, moments: Moments) -> None:
        """Merge the moments of a new batch into the running statistics."""
        if moments.count <= 0:
            return
        delta = moments.mean - self.mean
        total = self.count + moments.count
        new_mean = self.mean + delta * moments.count / total
        m2 = self.var * self.count + moments.var * moments.count + delta**2 * self.count * moments.count / total
        # np.asarray: with shape () NumPy would hand back scalars, which checkpoints cannot hold
        self.mean, self.var, self.count = np.asarray(new_mean), np.asarray(m2 / total), float(total)

    def state_dict(self) -> dict[str, np.ndarray | float]:
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.mean = np.asarray(state["mean"], dtype=np.float64).copy()
        self.var = np.asarray(state["var"], dtype=np.float64).copy()
        self.count = float(state["count"])


def clip(x: np.ndarray, low: np.ndarray | float, high: np.ndarray | float) -> np.ndarray:
    """``np.clip(x, low, high)``'s values (NaN kept) at a third of its cost a call: on the few numbers of one step,
    np.clip's argument handling is most of its time, and rollout functions call it at every step."""
    return np.minimum(np.maximum(x, low), high)


class ObsNormalizer:
    """Observations as a policy reads them, in rollout functions and in :func:`minionsrl.load_policy`: frozen
    normalisation with the published statistics (float32 identity when disabled); image stacks pass through as
    they come (uint8: the network scales them)."""

    def __init__(self, mean: np.ndarray | None, var: np.ndarray | None, clip: float, image: bool) -> None:
        self.enabled = mean is not None
        self.image = image
        if image and self.enabled:
            raise ValueError("image observations are not normalised with running statistics")
        if self.enabled:
            self.mean = mean
            self.inv_std = 1.0 / scale_of(var)
            self.clip = clip

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self.image:
            return obs
        if not self.enabled:
            if getattr(obs, "dtype", None) == np.float32:
                return np.asarray(obs)
            # a number of the env's beyond float32 becomes inf quietly (no RuntimeWarning in the function's output),
            # to be refused in one line that blames the env (fragment.Fragment.from_wire)
            with np.errstate(over="ignore"):
                return np.asarray(obs, dtype=np.float32)
        return clip((obs - self.mean) * self.inv_std, -self.clip, self.clip).astype(np.float32)
