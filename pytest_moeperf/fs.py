"""The cache directory, cross-process file locks, atomic writes, and values as the TOML
writer (tomlkit) writes them."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import MoeperfError, OutputError

CACHE_ENV = "MOEPERF_CACHE_DIR"


def cache_dir() -> Path:
    """The root of pytest-moeperf's cache: ``$MOEPERF_CACHE_DIR``, else ``$XDG_CACHE_HOME``
    (default ``~/.cache``) ``/pytest-moeperf``. Created on first use."""
    env = os.environ.get(CACHE_ENV)
    if env:
        root = Path(env).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        root = Path(xdg) / "pytest-moeperf"
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on *path* (created if missing) for the block.

    The lock is released by the kernel when the holder dies, so a killed process never leaves
    a stale lock behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def check_output(path: Path, what: str) -> None:
    """Refuse an output path the user gave (*what*: the option that named it, e.g.
    ``--json``) whose directory does not exist (it is not created for them) or where
    something other than a regular file would be replaced (a directory, a device, a FIFO, a
    symbolic link): one :class:`~pytest_moeperf.errors.OutputError` line naming both."""
    parent = path.parent
    if not parent.is_dir():
        raise OutputError(
            f"{what} {path}: directory {parent} does not exist; create it or name another path"
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputError(f"{what} {path}: cannot check it: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a directory"
            if stat.S_ISDIR(st.st_mode)
            else "a symbolic link"
            if stat.S_ISLNK(st.st_mode)
            else "not a regular file"
        )
        raise OutputError(f"{what} {path}: is {kind}; refusing to replace it (name a regular file)")


def atomic_write_bytes(path: Path, data: bytes, *, parents: bool = True) -> None:
    """Write *data* to *path* so that readers see either the old file or the whole new one.

    The file gets the mode any new file gets (0666 less the umask), not the temporary file's
    0600. With *parents* (for the cache and the history folder) missing directories are
    created; without, a missing directory is an error."""
    if parents:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), 0o666 & ~_umask())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str, *, parents: bool = True) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), parents=parents)


def write_output(path: Path, data: str | bytes, what: str) -> None:
    """Write a file the user asked for (*what* names the option), atomically, after
    :func:`check_output`; a failure to write is an :class:`OutputError` naming it."""
    check_output(path, what)
    try:
        atomic_write_bytes(
            path, data.encode("utf-8") if isinstance(data, str) else data, parents=False
        )
    except OSError as e:
        raise OutputError(f"{what} {path}: cannot write: {e.strerror or e}") from None


def load_json(path: Path, where: str, error: type[MoeperfError]) -> Any:
    """The JSON document in *path*; one *error* line starting with *where* (the file as the
    caller names it) when it cannot be read or is not JSON."""
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise error(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise error(f"{where}: not JSON ({exc})") from None


def kept_array(name: str, shape: tuple[int, ...], compute: Callable[[], Any]) -> Any:
    """The float64 array *compute* gives, computed once and kept as ``<cache>/<name>`` (a
    ``.npy`` file, written atomically); a file that cannot be read or has another *shape* is
    computed again, and a cache that cannot be written only costs the next run the time."""
    import io

    import numpy as np

    path = cache_dir() / name
    try:
        stored = np.load(path)
        if stored.shape == shape:
            return np.asarray(stored, dtype=np.float64)
    except (OSError, ValueError):
        pass
    values = np.asarray(compute(), dtype=np.float64)
    buffer = io.BytesIO()
    np.save(buffer, values)
    try:
        atomic_write_bytes(path, buffer.getvalue())
    except OSError:
        pass  # a read-only cache: computed again next time
    return values


def toml_item(value: Any, *, sort_keys: bool = False) -> Any:
    """*value* (bool, number, string, date or time, list, table) as tomlkit writes it: a table
    inline (its keys sorted with *sort_keys*), a date or time as its ISO text; ``TypeError``
    for anything else. tomlkit quotes keys and escapes strings (control characters, ``\\x7f``)
    as TOML wants them."""
    import datetime as dt

    import tomlkit  # here, not at import: only the commands that write TOML need it

    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list | tuple):
        array = tomlkit.array()
        array.extend(toml_item(v, sort_keys=sort_keys) for v in value)
        return array
    if isinstance(value, dict):
        table = tomlkit.inline_table()
        keys = sorted(value) if sort_keys else list(value)
        table.update({k: toml_item(value[k], sort_keys=sort_keys) for k in keys})
        return table
    raise TypeError(f"{value!r} ({type(value).__name__}) has no TOML form")
