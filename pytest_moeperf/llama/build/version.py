"""llama-server binaries and what they say about themselves.

:class:`Build` is one llama.cpp build: a llama-server, llama-bench beside it when known, its
build number. ``--version`` and ``--help`` are parsed, and asked once per binary (path, mtime
and size). :func:`binary_build` wraps a user's own llama-server; :func:`resolve_server_binary`
finds which one the user asked for (command line > ini option > ``LLAMA_SERVER``).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from ...errors import BuildError

ENV_SERVER = "LLAMA_SERVER"
_RUN_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------------------------
# Parsing `llama-server --version` and `--help`


@dataclass(frozen=True)
class BuildVersion:
    """What ``llama-server --version`` says about itself."""

    number: int | None  # None when the binary does not know (build 0: built without git)
    raw: str  # the whole output


# version: 0.6.0-dev (build 11434, commit unknown)
_VERSION_NEW = re.compile(
    r"^version:\s*\S+\s*\(build\s+(?P<number>\d+),\s*commit\s+[^)\s]+\)",
    re.M,
)
# version: 11053 (abcdef12)
_VERSION_OLD = re.compile(r"^version:\s*(?P<number>\d+)\s*\([^)\s]+\)", re.M)


def parse_version(text: str) -> BuildVersion | None:
    """Parse the output of ``llama-server --version`` (stdout and stderr together); ``None``
    when it holds no ``version:`` line."""
    m = _VERSION_NEW.search(text) or _VERSION_OLD.search(text)
    if not m:
        return None
    number = int(m.group("number"))
    return BuildVersion(number=number if number > 0 else None, raw=text)


_FLAG = re.compile(r"^--?[A-Za-z][A-Za-z0-9_.+-]*$")
# the option column ends at the first run of two spaces that does not follow a comma
_COLUMN_END = re.compile(r"(?<![,\s])\s{2,}")
_MAX_OPTION_INDENT = 8  # help text continues at column 40; options start at column 0 (or 2)


def parse_help_flags(text: str) -> frozenset[str]:
    """Every flag spelled in the option column of ``--help`` output: short and long forms and
    negative forms (``-lm``, ``--load-mode``, ``--repack``, ``-nr``, ``--no-repack``)."""
    flags: set[str] = set()
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped.startswith("-") or len(line) - len(stripped) > _MAX_OPTION_INDENT:
            continue
        column = _COLUMN_END.split(stripped, maxsplit=1)[0]
        for alternative in re.split(r",\s*", column):
            token = alternative.split(" ", 1)[0].strip()
            if _FLAG.match(token):
                flags.add(token)
            elif not token.startswith("-"):
                break  # a value hint with a comma in it: the flags are over
    return frozenset(flags)


def _flag_of(arg: str) -> str | None:
    """The flag an argument spells (``--flag=value`` -> ``--flag``), ``None`` for a value
    (``-1``, ``exps=CPU``, ``4``)."""
    name = arg.split("=", 1)[0] if arg.startswith("--") else arg
    return name if _FLAG.match(name) else None


# --------------------------------------------------------------------------------------------
# Build


CacheKey = tuple[str, int, int]
_version_cache: dict[CacheKey, BuildVersion] = {}
_flags_cache: dict[CacheKey, frozenset[str]] = {}
_cache_guard = threading.Lock()
_T = TypeVar("_T")


def cached(cache: dict[CacheKey, _T], binary: Path) -> _T | None:
    """What *cache* holds for *binary* as it is now (path, mtime, size), if anything."""
    with _cache_guard:
        return cache.get(_binary_key(binary))


def remember(cache: dict[CacheKey, _T], binary: Path, value: _T) -> _T:
    """*value*, kept in *cache* for *binary* as it is now."""
    with _cache_guard:
        cache[_binary_key(binary)] = value
    return value


def _binary_key(path: Path) -> CacheKey:
    try:
        st = path.stat()
    except OSError as e:
        raise BuildError(
            f"llama-server binary {path} cannot be read ({e.strerror}): "
            "give the path of an existing llama-server"
        ) from e
    return (str(path.absolute()), st.st_mtime_ns, st.st_size)


def ask_binary(path: Path, option: str) -> tuple[int, str]:
    """Run ``<path> <option>``; return its exit status and stdout+stderr."""
    try:
        proc = subprocess.run(
            [str(path), option],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=_RUN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise BuildError(
            f"{path} {option} did not finish within {_RUN_TIMEOUT_S:.0f} s: "
            "give the path of llama.cpp's llama-server"
        ) from e
    except OSError as e:
        raise BuildError(
            f"{path} cannot be run ({e.strerror}): give the path of a llama-server "
            "built for this machine"
        ) from e
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def _short(text: str, limit: int = 120) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


def label_number(label: str) -> int | None:
    """The build number a build label names (``"b11434"`` -> 11434; :attr:`Build.label`), or
    ``None`` for another label (a binary's path, a gate's side)."""
    m = re.fullmatch(r"b(\d+)", label)
    return int(m[1]) if m else None


@dataclass(frozen=True)
class Build:
    """One llama.cpp build: a llama-server binary, llama-bench beside it when known."""

    server: Path
    bench: Path | None = None
    number: int | None = None

    @property
    def label(self) -> str:
        """``"b11434"`` when the build number is known, else the binary's path."""
        return f"b{self.number}" if self.number is not None else str(self.server)

    def version(self) -> BuildVersion:
        """``llama-server --version``, parsed; asked once per binary (path and mtime)."""
        known = cached(_version_cache, self.server)
        if known is not None:
            return known
        rc, out = ask_binary(self.server, "--version")
        parsed = parse_version(out)
        if parsed is None:
            raise BuildError(
                f"{self.server} does not answer --version like llama-server "
                f"(exit {rc}, output {_short(out)!r}): give the path of llama.cpp's llama-server"
            )
        return remember(_version_cache, self.server, parsed)

    def flags(self) -> frozenset[str]:
        """Every flag ``llama-server --help`` spells; asked once per binary (path and mtime)."""
        known = cached(_flags_cache, self.server)
        if known is not None:
            return known
        rc, out = ask_binary(self.server, "--help")
        parsed = parse_help_flags(out)
        if not parsed:
            raise BuildError(
                f"{self.server} --help lists no options (exit {rc}, output {_short(out)!r}): "
                "give the path of llama.cpp's llama-server"
            )
        return remember(_flags_cache, self.server, parsed)

    def missing_flags(self, args: Sequence[str]) -> list[str]:
        """The flags in an argument list that this build does not know, in order, once each.
        Values are not flags (``-1``, ``exps=CPU``); ``--flag=value`` counts as ``--flag``."""
        known = self.flags()
        missing: list[str] = []
        for arg in args:
            flag = _flag_of(str(arg))
            if flag is not None and flag not in known and flag not in missing:
                missing.append(flag)
        return missing


# --------------------------------------------------------------------------------------------
# A user's own binary


def resolve_server_binary(
    cli: str | None, ini: str | None, env: Mapping[str, str] | None = None
) -> tuple[Path, str] | None:
    """The user's own llama-server: the ``--llama-server`` option, else the ini option
    ``llama_server``, else ``$LLAMA_SERVER``; with where it came from. ``None`` when none is
    given (empty values count as not given)."""
    environ = os.environ if env is None else env
    for value, source in (
        (cli, "--llama-server"),
        (ini, "ini llama_server"),
        (environ.get(ENV_SERVER), ENV_SERVER),
    ):
        if value is not None and str(value).strip():
            return Path(str(value).strip()).expanduser(), source
    return None


def binary_build(path: str | Path) -> Build:
    """Wrap a user's own llama-server; ``llama-bench`` next to it is picked up when present.

    Raises :class:`BuildError` naming the path when it does not exist, is not an executable
    file, or does not answer ``--version`` like llama-server."""
    p = Path(path).expanduser().absolute()
    if not p.exists():
        raise BuildError(
            f"llama-server binary {p} does not exist: give the path of a built "
            "llama-server (e.g. build/bin/llama-server) or use a build number"
        )
    if p.is_dir():
        raise BuildError(
            f"llama-server binary {p} is a directory: give the path of the "
            f"llama-server file inside it (e.g. {p / 'bin' / 'llama-server'})"
        )
    if not os.access(p, os.X_OK):
        raise BuildError(
            f"llama-server binary {p} is not executable: run `chmod +x {p}` or give another binary"
        )
    bench = p.parent / "llama-bench"
    build = Build(server=p, bench=bench if bench.is_file() and os.access(bench, os.X_OK) else None)
    number = build.version().number  # raises when it is not a llama-server
    return build if number is None else replace(build, number=number)
