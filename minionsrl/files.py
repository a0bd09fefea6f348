"""Files of a run directory, written and read so that a crafted run directory cannot abuse them.

A run directory is data: it may come from someone else, and ``--resume``, ``eval`` and ``plot`` open it. Every
file the run writes is opened without following a symbolic link (``O_NOFOLLOW``), and a file replaced whole is
written to a temporary file created exclusively beside it (``O_CREAT | O_EXCL``), then renamed over it: a link
planted under either name is never written through. Before a run dir is used, :func:`check_run_dir` refuses
one whose files are links or special files (FIFOs, devices, sockets). Reads refuse special files (a FIFO would
hang, ``/dev/zero`` never ends) and cap sizes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from minionsrl.errors import ConfigError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# size caps of what is read: a config is a page of YAML; a checkpoint of the largest network (the Nature CNN,
# its Adam moments and normalisers) is tens of megabytes
MAX_CONFIG_BYTES = 1 << 20
MAX_CHECKPOINT_BYTES = 1 << 31
# A run dir's files, each named once here (the roles that write them: loop.session, loop.metrics)
CONFIG = "config.yaml"  # the resolved config: what a resume, `eval` and `load_policy` rebuild the run from
METRICS = "metrics.csv"  # a row per round
INVOCATIONS = "invocations.csv"  # a row per function invocation
SCALER = "scaler.csv"  # a row per round whose actor count the scaler changed, with its reason in words
SUMMARY = "summary.json"  # written when the run ends
PLOTS = "plots"  # the end-of-run figures
# the run dir's subfolders the run writes into (their files are checked too)
CHECKPOINTS = "checkpoints"  # a run dir's checkpoints (minionsrl.loop.checkpoint names the files in it)
TENSORBOARD = "tensorboard"
RUN_SUBDIRS = (CHECKPOINTS, TENSORBOARD)


def run_dir_flag(run_dir: str | Path) -> str:
    """``--run-dir DIR`` for a command line that continues the run in ``run_dir`` (quoted for a shell)."""
    return f"--run-dir {shlex.quote(str(Path(run_dir)))}"


def config_path(run_dir: str | Path, what: str, fix: str = "check --run-dir") -> Path:
    """``RUN_DIR/config.yaml``; one line naming ``what`` and ``fix`` if the folder holds no run."""
    path = Path(run_dir) / CONFIG
    if not path.exists():
        raise ConfigError(f"{what}: {str(run_dir)!r} holds no run (no {CONFIG}); {fix}")
    return path


def _refuse(path: Path, what: str) -> ConfigError:
    return ConfigError(f"run_dir: {str(path)!r} is {what}; a run dir's files must be its own regular files: "
                       "remove it, or choose another --run-dir")


def _kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a directory" if stat.S_ISDIR(mode) else "not a regular file"


def check_run_dir(run_dir: str | Path) -> None:
    """Refuse (one line) a run dir holding a symbolic link or a special file where the run reads or writes:
    its own entries, and those of ``checkpoints/`` and ``tensorboard/``. The run dir itself may be a link."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return
    for folder in (run_dir, *(run_dir / sub for sub in RUN_SUBDIRS)):
        try:
            entries = list(os.scandir(folder))
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            raise _refuse(folder, "not a directory") from None
        except OSError as exc:
            raise ConfigError(f"run_dir: {str(folder)!r} cannot be read ({exc.strerror or exc}); "
                              "check its permissions or choose another --run-dir") from exc
        for entry in entries:
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISREG(mode) or (stat.S_ISDIR(mode) and folder == run_dir):
                continue
            raise _refuse(Path(entry.path), _kind(mode))


def _checked_fd(fd: int, path: str | os.PathLike[str]) -> int:
    """``fd`` if it is a regular file; closed and refused otherwise."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _refuse(Path(path), _kind(mode))
    return fd


def nofollow_opener(path: str | os.PathLike[str], flags: int) -> int:
    """An ``opener`` for :func:`open` that does not follow a link and accepts only a regular file (a FIFO is
    opened non-blocking so that it is refused, not waited on)."""
    try:
        fd = os.open(path, flags | NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if os.path.islink(path):  # ELOOP: name the link, not "too many levels of symbolic links"
            raise _refuse(Path(path), "a symbolic link") from exc
        if exc.errno == errno.ENXIO:  # a FIFO nobody reads
            raise _refuse(Path(path), "a FIFO") from exc
        raise
    fd = _checked_fd(fd, path)
    os.set_blocking(fd, True)
    return fd


def exclusive_opener(path: str | os.PathLike[str], flags: int) -> int:
    """An ``opener`` for a temporary file: whatever holds the name (a stale temporary file, a planted link) is
    removed — a link itself, never its target — and the file is created anew, exclusively."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return os.open(path, flags | os.O_CREAT | os.O_EXCL | NOFOLLOW | os.O_CLOEXEC, 0o644)


def open_for_write(path: str | Path, mode: str = "w", **kwargs: Any) -> IO[Any]:
    """:func:`open` for writing (``w``, ``a``, ``wb``…) that refuses a link or a special file at ``path``."""
    return open(path, mode, opener=nofollow_opener, **kwargs)


def tmp_path(path: Path) -> Path:
    """The temporary file beside ``path`` that it is written through (``.NAME.tmp``)."""
    return path.with_name(f".{path.name}.tmp")


@contextlib.contextmanager
def replacing(path: str | Path, mode: str = "w", durable: bool = False, **kwargs: Any) -> Iterator[IO[Any]]:
    """Write a file whole: into an exclusively created temporary file beside ``path``, renamed over ``path``
    once closed (a link at ``path`` is replaced, not followed); on an error the temporary file is removed
    and ``path`` is left as it was. ``durable``: the file's bytes, then the rename, reach the disk before this
    returns (what a power cut must not lose: checkpoints)."""
    path = Path(path)
    tmp = tmp_path(path)
    try:
        with open(tmp, mode, opener=exclusive_opener, **kwargs) as fh:
            yield fh
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    if durable:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself
        finally:
            os.close(dir_fd)


def write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with ``text`` (through :func:`replacing`)."""
    with replacing(path) as fh:
        fh.write(text)


def read_bytes(path: str | Path, limit: int, what: str) -> bytes:
    """The bytes of the regular file at ``path`` (a link to one is followed), at most ``limit`` of them; a
    special file or a larger file is refused with one line starting with ``what``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{what}: {str(path)!r} cannot be read ({exc.strerror or exc})") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
        os.close(fd)
        why = (f"{_kind(st.st_mode)}, not a regular file" if not stat.S_ISREG(st.st_mode)
               else f"{st.st_size} bytes, over the {limit}-byte limit")
        raise ConfigError(f"{what}: {str(path)!r} is refused ({why})")
    with open(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise ConfigError(f"{what}: {str(path)!r} is refused (over the {limit}-byte limit)")
    return data


# -- YAML with limits --------------------------------------------------------------------------------
MAX_YAML_DEPTH = 64  # nesting of mappings and sequences
MAX_YAML_NODES = 100_000  # values once aliases are expanded (an alias bomb expands exponentially)


class _LimitedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses deep nesting (before recursing into it) and duplicate keys."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _YamlLimit(f"nested more than {MAX_YAML_DEPTH} levels deep")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *base" may override, by design
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, list | dict):
                continue  # PyYAML refuses an unhashable key itself
            if key in seen:
                line = key_node.start_mark.line + 1
                raise _YamlLimit(f"duplicate key {str(key)[:40]!r} at line {line}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


class _YamlLimit(Exception):
    """A YAML document over a limit, or ambiguous."""


def _count_nodes(value: Any) -> None:
    """Walk ``value`` as its consumers will (shared objects once per reference), stopping past the limit."""
    stack, count = [value], 0
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_YAML_NODES:
            raise _YamlLimit(f"more than {MAX_YAML_NODES} values once its aliases are expanded")
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def read_yaml(path: str | Path, what: str, limit: int = MAX_CONFIG_BYTES) -> Any:
    """The YAML document in ``path``, read with limits: a regular file of at most ``limit`` bytes, UTF-8, nested
    at most :data:`MAX_YAML_DEPTH` deep, at most :data:`MAX_YAML_NODES` values with aliases expanded, and no
    duplicate keys. Anything else is one line starting with ``what``."""
    return parse_yaml(read_bytes(path, limit, what), f"{what} {str(path)!r}")


def parse_yaml(data: bytes | str, what: str) -> Any:
    """A YAML document (see :func:`read_yaml`) from text; ``what`` names it in the error."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} is not UTF-8 text (byte {exc.start}); save it as UTF-8") from exc
    loader = _LimitedLoader(text)
    try:
        value = loader.get_single_data()
        _count_nodes(value)
    except _YamlLimit as exc:
        raise ConfigError(f"{what} is refused: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or (str(exc).splitlines()[0] if str(exc) else "parse error")
        raise ConfigError(f"{what} is not valid YAML ({problem}{where}); fix its syntax") from exc
    finally:
        loader.dispose()
    return value
