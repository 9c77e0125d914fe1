"""Helpers of the fault-injection tests: inner pytest projects with their own cache, and the
processes they leave behind.

Every process an inner session starts (llama-server, a wrapper's children) runs in the inner
project's directory, so "ours" is: a live process whose working directory is inside that
project. Nothing else on the host is counted, and nothing else is ever killed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_moeperf.host.process import hear_ctrl_c, running
from pytest_moeperf.llama import orphans

INI = (
    "[pytest]\nmoeperf_profile = embedded-tiny\n"
    "filterwarnings = ignore::pytest.PytestAssertRewriteWarning\n"
)

ALIVE = """
from pathlib import Path


def alive(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
"""
"""Source of ``alive(pid)`` for inner test files (a zombie is not alive)."""


def processes_in(root: Path) -> dict[int, str]:
    """Live processes (not zombies, not this one) whose working directory is inside *root*,
    with their command lines."""
    root = root.resolve()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if (cwd == root or root in cwd.parents) and running(pid):
            found[pid] = " ".join(orphans.cmdline(pid))
    return found


def wait_until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll *check* every 50 ms until it is true or *timeout* seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def survivors(root: Path, timeout: float = 10.0) -> dict[int, str]:
    """The processes still running in *root* after waiting up to *timeout* seconds for them
    to go (empty when none is left)."""
    wait_until(lambda: not processes_in(root), timeout)
    return processes_in(root)


def kill_all_in(root: Path) -> None:
    """Kill what a failed test left in *root* (only processes inside it: ours)."""
    for pid in processes_in(root):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def server_logs(root: Path) -> list[Path]:
    return sorted((root / ".moeperf" / "logs").rglob("*.log"))


def pid_files(root: Path) -> list[Path]:
    return sorted((root / "cache" / "servers").glob("*.json"))


@pytest.fixture(name="project")
def project_fixture(
    pytester: pytest.Pytester, llama_build, tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[pytest.Pytester]:
    """An inner pytest project on the embedded-tiny profile with its own cache directory
    (``cache/``: pid files and CPU locks of this project only; the tiny model shared)."""
    cache = pytester.path / "cache"
    cache.mkdir()
    (cache / "models").symlink_to(tiny_model.parent, target_is_directory=True)
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(cache))
    monkeypatch.setenv("LLAMA_SERVER", str(llama_build.server))
    pytester.makeini(INI)
    yield pytester
    kill_all_in(pytester.path)


def run_perf(
    project: pytest.Pytester, config: str, tests: dict[str, str], *args: str, timeout: float = 300
) -> pytest.RunResult:
    """Write *config* as the project's ``moeperf.toml`` and *tests* (module name -> source),
    then run ``pytest -m perf *args`` on them in a subprocess."""
    project.makefile(".toml", moeperf=config)
    project.makepyfile(**tests)
    return project.runpytest_subprocess(
        "-m",
        "perf",
        "--moeperf-config",
        "moeperf.toml",
        "-p",
        "no:cacheprovider",
        *args,
        timeout=timeout,
    )


def spawn(project: pytest.Pytester, *args: str) -> subprocess.Popen[bytes]:
    """Start an inner ``pytest *args`` in *project* without waiting; its output goes to
    ``inner.out`` in the project."""
    out = (project.path / "inner.out").open("wb")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
            cwd=project.path,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=hear_ctrl_c,
            start_new_session=True,  # its own process group, as a terminal would give it
        )
    finally:
        out.close()


def output(project: pytest.Pytester) -> str:
    return (project.path / "inner.out").read_text(errors="replace")


def wait_for_measuring(
    project: pytest.Pytester, proc: subprocess.Popen[bytes], started: int = 1
) -> list[Path]:
    """Wait until *started* servers of *project* are up and one of them is answering a
    measurement request (its log shows a launched request); return the logs of those
    answering. Fails when the inner session ends first."""

    def logs_with(text: str) -> list[Path]:
        return [
            log for log in server_logs(project.path) if text in log.read_text("utf-8", "replace")
        ]

    def ready() -> bool:
        return len(logs_with("listening on")) >= started and len(logs_with("launch_slot_")) >= 1

    assert wait_until(lambda: proc.poll() is not None or ready(), 120), (
        "no measurement started within 120 s"
    )
    assert proc.poll() is None, f"inner session ended early:\n{output(project)}"
    return logs_with("launch_slot_")


def cgroup_for_throttling(name: str) -> Path | None:
    """A new cgroup whose members get a fifth of one CPU, 2 ms in every 10 ms so that even a
    short request is slowed (v1 ``cpu`` controller or v2 ``cpu.max``), or ``None`` where
    cgroups cannot be written here."""
    v2 = Path("/sys/fs/cgroup")
    v1 = v2 / "cpu"
    try:
        if (v1 / "cpu.cfs_quota_us").is_file():
            group = v1 / name
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text("10000")
            (group / "cpu.cfs_quota_us").write_text("2000")
            return group
        controllers = v2 / "cgroup.controllers"
        if controllers.is_file() and "cpu" in controllers.read_text().split():
            group = v2 / name
            group.mkdir()
            (group / "cpu.max").write_text("2000 10000")
            return group
    except OSError:
        return None
    return None


@contextlib.contextmanager
def capped_cgroup(name: str) -> Iterator[Path]:
    """A cgroup capped to a fifth of a CPU (the test skips where none can be made); whatever
    still runs in it is killed afterwards and the group removed."""
    group = cgroup_for_throttling(f"{name}-{os.getpid()}")
    if group is None:
        pytest.skip("cgroups cannot be written here: no way to slow a real server")
    try:
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        with contextlib.suppress(OSError):
            group.rmdir()


def throttled_server(group: Path, server: str, tmp_path: Path) -> str:
    """A llama-server wrapper that joins *group* before running *server*."""
    wrapper = tmp_path / "llama-server-throttled"
    wrapper.write_text(f'#!/bin/sh\necho $$ > {group / "cgroup.procs"}\nexec {server} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)
