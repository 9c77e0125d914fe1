"""Running a build's steps: one step as a process in a session of its own, its output
appended to the job's log and its last lines kept for the error; the environment cmake, ninja
and ccache run in (C locale, the compiler cache every build of a cache root shares) and
ccache's counters; a full disk, named with the free space where it matters.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ... import fs
from ...errors import BuildError
from ...host.process import stop_group
from .job import BuildJob
from .version import _RUN_TIMEOUT_S

_TAIL_LINES = 200


class _StepFailed(Exception):
    """A step that exited non-zero (127: it could not be started), with its last lines."""

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
) -> None:
    """Run *cmd*, appending its output to the job's log; raise :class:`_StepFailed` with the
    output's tail on a non-zero exit (:func:`_disk_full`'s error when it says the disk is
    full)."""
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
            raise _step_failed(job, 127, [f"{cmd[0]}: {e.strerror}"]) from e
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
            # SIGTERM first, with time to pass it on: ninja ends the compilers it runs (each in
            # a process group of its own, out of reach of a signal to this one)
            stop_group(proc)
            raise
        log.write(f"# exit {rc}\n")
    if rc != 0:
        raise _step_failed(job, rc, list(tail))


def _c_locale_env(job: BuildJob) -> dict[str, str]:
    """The environment of a step: C locale, no ``MAKEFLAGS``, and ccache's settings.

    Every build of a cache root shares one ccache directory. Each build compiles in a work
    directory of its own (``builds/.work-KEY-PID``): with the builds directory as the base
    directory, ccache rewrites the paths below it to relative ones, so neighbouring builds,
    whose sources mostly agree, hit each other's objects."""
    env = dict(os.environ)
    env["LC_ALL"] = "C"
    env.pop("MAKEFLAGS", None)
    if job.ccache is not None and job.ccache_dir is not None:
        env["CCACHE_DIR"] = str(job.ccache_dir)
        env["CCACHE_BASEDIR"] = str(job.work.parent)
        env["CCACHE_NOHASHDIR"] = "true"
        env["CCACHE_MAXSIZE"] = "5G"
    return env


def _ccache(job: BuildJob, option: str) -> str:
    """``ccache <option>``'s output in the build's cache folder; ``""`` without a compiler
    cache or where it fails."""
    if job.ccache is None or job.ccache_dir is None:
        return ""
    job.ccache_dir.mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.run(
            [str(job.ccache), option],
            capture_output=True,
            text=True,
            env=_c_locale_env(job),
            timeout=_RUN_TIMEOUT_S,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def ccache_stats(job: BuildJob) -> dict[str, int]:
    """Hits and misses of the compiler cache since :func:`_zero_ccache` (empty without one)."""
    out = _ccache(job, "--print-stats")
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    want = {
        "direct_cache_hit": "direct_hits",
        "preprocessed_cache_hit": "preprocessed_hits",
        "cache_miss": "misses",
    }
    return {name: int(stats[key]) for key, name in want.items() if stats.get(key, "").isdigit()}


def _zero_ccache(job: BuildJob) -> None:
    _ccache(job, "--zero-stats")


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


def _step_failed(job: BuildJob, rc: int, tail: list[str]) -> BuildError | _StepFailed:
    """The error of a step that exited *rc* with output *tail*: :func:`_disk_full`'s when the
    output says the disk is full."""
    if any("No space left on device" in line or "ENOSPC" in line for line in tail):
        return _disk_full(job)
    return _StepFailed(rc, tail)
