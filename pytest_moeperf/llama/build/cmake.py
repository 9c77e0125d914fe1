"""CMake's two steps of a build: configure (:data:`BASE_CMAKE_ARGS`, the build number, the
caller's arguments) and compile ``llama-server`` and ``llama-bench``, with a progress line every
5 % and, when a step fails, the lines that explain it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from ...errors import BuildError
from .job import BuildJob, Progress
from .runner import _c_locale_env, _run_logged, _StepFailed, _zero_ccache
from .version import _short

TARGETS = ("llama-server", "llama-bench")
#: CMake arguments of every build (``-DLLAMA_BUILD_NUMBER=<n>`` and the caller's arguments
#: follow them, so a caller's ``-DGGML_NATIVE=OFF`` wins).
BASE_CMAKE_ARGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    # no web UI: trees that build it (b10429 has `LLAMA_BUILD_UI`, on by default) would run
    # `npm ci` inside the build, which needs the npm registry and hung for minutes here
    "-DLLAMA_BUILD_UI=OFF",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
_ERROR_LINES = 20


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
        cmd += [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={job.ccache}" for lang in ("C", "CXX")]
    cmd += job.cmake_args
    try:
        _run_logged(cmd, job, env=_c_locale_env(job))
    except _StepFailed as e:
        raise BuildError(
            f"cmake could not configure llama.cpp b{job.number} (exit {e.rc}): "
            f"{_cmake_error(e.tail)}; check the cmake arguments {list(job.cmake_args)}"
        ) from None


_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE_STATUS = re.compile(r"^\[\s*(\d+)%\]")


class _PercentReporter:
    """Turns ``[N/M]`` (Ninja) or ``[ NN%]`` (Make) lines into a progress line at each 5 %."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
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
        bucket = pct // 5
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
    cmd = [str(tc.cmake), "--build", str(build_dir), "--config", "Release"]
    cmd += ["--target", *TARGETS, f"-j{job.jobs}"]
    try:
        _run_logged(cmd, job, on_line=_PercentReporter(job.progress), env=_c_locale_env(job))
    except _StepFailed as e:
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
