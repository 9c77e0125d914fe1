"""No orphan servers: pid files of running servers, and stopping those a killed session left.

Every server writes ``<cache>/servers/<pid>.json`` (its start time and command line, and its
owner's pid and start time) while it runs. A later session stops a server whose owner is gone,
but only when the process with that pid still has the recorded start time and command line,
so nothing else that reused the pid is touched.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
from pathlib import Path
from typing import Any

from ..fs import atomic_write_text, cache_dir
from ..host.process import started, stop_group

PR_SET_PDEATHSIG = 1


def servers_dir() -> Path:
    return cache_dir() / "servers"


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")[:-1]
    except OSError:
        return []


def die_with_parent(parent: int | None = None) -> None:
    """In a child between fork and exec: be killed when the parent dies (Linux only).

    The signal comes when the *thread* that forked dies, so start servers from the thread
    that lives as long as the session (pytest's main thread). With *parent* (the forking
    process's pid, taken before the fork), a parent that died before the request took effect
    is noticed, and the child kills itself instead of running on unowned."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def end_with_controller() -> None:
    """In an xdist worker: die the moment the controller that started it dies (a SIGKILLed
    ``pytest -n 2``), instead of measuring on, and starting servers, for a session nobody
    reads. The kernel sends SIGKILL when the parent's thread that spawned the worker ends
    (xdist spawns workers from the controller's main thread, which ends only with it); the
    worker's servers die with it (:func:`die_with_parent`), and the next session clears their
    pid files. A worker whose controller is already gone (the init process adopted it) ends
    at once."""
    die_with_parent()
    if os.getppid() == 1:
        os.kill(os.getpid(), signal.SIGKILL)


def record(pid: int, command: list[str]) -> Path:
    """Write the pid file of a started server."""
    path = servers_dir() / f"{pid}.json"
    owner = os.getpid()
    data = {
        "pid": pid,
        "start_time": started(pid),
        "cmdline": command,
        "owner_pid": owner,
        "owner_start_time": started(owner),
    }
    atomic_write_text(path, json.dumps(data))
    return path


def forget(pid: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        (servers_dir() / f"{pid}.json").unlink()


def _same_process(pid: int, start: Any, command: Any) -> bool:
    return start is not None and started(pid) == start and cmdline(pid) == command


def reap() -> list[int]:
    """Stop servers whose owning session is gone; returns the pids stopped.

    A pid file is acted on only when its owner (pid and start time) no longer runs; its
    server is stopped only when the process with that pid still has the recorded start time
    and command line (so a pid reused by something else is never touched). The file is then
    removed, unless the server would not die (it is tried again next time)."""
    stopped = []
    folder = servers_dir()
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text())
            pid, owner = int(data["pid"]), int(data["owner_pid"])
        except (OSError, ValueError, KeyError, TypeError):
            path.unlink(missing_ok=True)
            continue
        if _same_process(owner, data.get("owner_start_time"), cmdline(owner)):
            continue  # its session is still running
        if _same_process(pid, data.get("start_time"), data.get("cmdline")):
            try:  # its process group too where it leads one, as servers do
                group = os.getpgid(pid) == pid
            except (ProcessLookupError, PermissionError):
                group = False
            if not stop_group(pid, group=group, grace=5.0, kill_wait=5.0):  # SIGCONT, TERM, KILL
                continue
            stopped.append(pid)
        path.unlink(missing_ok=True)
    return stopped
