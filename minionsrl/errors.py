"""Exceptions shared across modules; each carries a one-line message meant for the user."""


# how the command's one line names a SIGTERM (and its exit status), whenever it lands: during the imports too
TERMINATED, TERMINATED_CODE = "terminated (SIGTERM)", 143

class ConfigError(ValueError):
    """Bad input (config field, env id, file): raised before any work starts."""


class NotStarted(RuntimeError):
    """The platform the functions run on did not start (a private Ray cluster on a machine too busy): no round ran."""


class InvocationError(RuntimeError):
    """A rollout function failed and the backend could not recover the invocation."""


class Resumable(InvocationError):
    """The run cannot go on here, but its last checkpoint stands: the message ends in "continue with --resume",
    and the command line adds the run dir to it."""


class ClusterLost(Resumable):
    """The cluster the functions run on went away as a whole (a Ray head lost): the run stops at its last
    checkpoint, and ``--resume`` continues it once a cluster is back."""


MAX_LINE = 800  # characters of an error's one line (a value quoted in it may be huge)


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` as one line of at most ``limit`` characters: line breaks become spaces, and a longer text is cut
    in the middle (its start names the problem, its end what to do)."""
    text = " ".join(text.split("\n"))
    if len(text) <= limit:
        return text
    half = (limit - 5) // 2
    return f"{text[:half]} […] {text[-half:]}"


class EpisodesNotCarried(UserWarning):
    """The env's episodes cannot continue across rounds (its state is not one minionsrl can read): each fragment
    starts new ones, and a fragment shorter than an episode cuts it (said once, before any work)."""


class EvaluationCut(UserWarning):
    """Evaluation episodes ran to ``eval_max_steps`` and were cut there: their returns are of the steps played
    (said once a run)."""


class Diverged(ConfigError):
    """An update made the loss, the weights or the optimiser state non-finite: the run stops before anything of
    that update is checkpointed or published."""
