"""Exceptions shared across modules; each carries a one-line message meant for the user."""


class ConfigError(ValueError):
    """Bad input (config field, env id, file): raised before any work starts."""


class InvocationError(RuntimeError):
    """A rollout function failed and the backend could not recover the invocation."""


class ClusterLost(InvocationError):
    """The cluster the functions run on went away as a whole (a Ray head lost): the run stops at its last
    checkpoint, and ``--resume`` continues it once a cluster is back."""
