"""The machine's processes: stopping a process group, whether its leader is our child (a
llama-server, a build step) or a process that is not (a server a killed session left).

Waits are on events: a child's exit through :meth:`subprocess.Popen.wait`, another process's
through a pidfd (Linux 5.3 and later); ``/proc/<pid>/stat`` is read in a loop only where the
kernel offers no pidfd.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from ..defaults import KILL_WAIT, STOP_GRACE

_POLL_S = 0.05
"""How often ``/proc`` is read while waiting where there is no pidfd to wait on."""


def hear_ctrl_c() -> None:
    """In a child's process, before it runs (``preexec_fn``): SIGINT back to its default. A
    pytest started in the background of a shell (``pytest ... &``, nohup, many CI runners)
    ignores SIGINT, and an ignored signal stays ignored across exec, so the child would never
    hear a Ctrl-C (Python installs no KeyboardInterrupt handler; dmon never flushes)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop_group(
    process: subprocess.Popen[Any] | int,
    *,
    group: bool = True,
    grace: float = STOP_GRACE,
    kill_wait: float = KILL_WAIT,
) -> bool:
    """Stop *process* and the process group it leads; return whether *process* is gone.

    SIGTERM goes to the group with SIGCONT (so that a stopped process gets it), and the whole
    group has *grace* seconds to end: time for a process that passes SIGTERM on to end first
    (ninja does, to the compilers it runs in groups of their own). Then SIGKILL to the group and
    *kill_wait* seconds for *process* to be gone, and SIGKILL once more to whatever is left of
    the group.

    *process* is our child (a :class:`subprocess.Popen` started with ``start_new_session``: it is
    waited for and reaped; one already reaped is left alone, its pid may be another's now) or
    the pid of a process that is not (waited for until it has exited; its parent reaps it).
    With ``group=False`` the signals go to *process* alone (a pid that leads no group)."""
    leader: _ChildExit | _PidExit
    if isinstance(process, subprocess.Popen):
        if process.poll() is not None:
            return True
        leader = _ChildExit(process)
    elif process > 0:
        leader = _PidExit(process)
    else:  # kill() and killpg() of 0 or less would reach our own group, or every process
        raise ValueError(f"pid {process} is no process to stop")
    pid = leader.pid
    try:
        _send(pid, group, signal.SIGTERM, signal.SIGCONT)
        deadline = time.monotonic() + grace
        if leader.wait(grace) and (not group or _group_ends(pid, deadline)):
            return True
        _send(pid, group, signal.SIGKILL)
        gone = leader.wait(kill_wait)
        if group:
            # the group's id is not given to a new process while members are left
            _send(pid, group, signal.SIGKILL)
        return gone
    finally:
        leader.close()


def proc_stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` that follow the command name (state, ppid, pgrp, ...:
    field 3 on, as ``proc(5)`` counts them); ``None`` when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def running(pid: int) -> bool:
    """Whether *pid* is a process that has not exited (a zombie, exited but not yet reaped by
    its parent, has)."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def started(pid: int) -> int | None:
    """When process *pid* started (clock ticks after boot, ``/proc/<pid>/stat`` field 22);
    ``None`` when there is no such process, or it has exited (a zombie)."""
    fields = proc_stat(pid) if pid > 0 else None
    if fields is None or fields[0] == "Z" or len(fields) < 20:
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def _send(pid: int, group: bool, *signals: signal.Signals) -> None:
    """Send *signals* to the group *pid* leads, or to *pid* alone; a process already gone, or
    one that is not ours to signal, is passed over."""
    for sig in signals:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            (os.killpg if group else os.kill)(pid, sig)


def _members(pgid: int) -> list[int]:
    """The processes of group *pgid* that have not exited, from ``/proc``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = proc_stat(int(name))
            if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
                found.append(int(name))
    return found


def _group_ends(pgid: int, deadline: float) -> bool:
    """Wait until every process of group *pgid* has exited; whether that came before
    *deadline* (``time.monotonic()``). Members forked meanwhile are waited for too."""
    while members := _members(pgid):
        if time.monotonic() >= deadline:
            return False
        for pid in members:
            watch = _PidExit(pid)
            try:
                if not watch.wait(deadline - time.monotonic()):
                    return False
            finally:
                watch.close()
    return True


class _ChildExit:
    """The exit of our child: waited for (and reaped) by :meth:`subprocess.Popen.wait`."""

    def __init__(self, process: subprocess.Popen[Any]) -> None:
        self.process = process
        self.pid = process.pid

    def wait(self, timeout: float) -> bool:
        """Whether the child exited within *timeout* seconds."""
        try:
            self.process.wait(timeout=max(timeout, 0.0))
        except subprocess.TimeoutExpired:
            return False
        return True

    def close(self) -> None:
        """Nothing to release."""


class _PidExit:
    """The exit of a process that need not be our child: a pidfd, opened before any signal so
    that it stays this process's even if the pid is reused, becomes readable when the process
    exits; where the kernel has no pidfd, ``/proc/<pid>/stat`` is read until it says so."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd: int | None = None
        self.exited = False
        pidfd_open = getattr(os, "pidfd_open", None)  # Linux only
        if pidfd_open is None:
            return
        try:
            self.fd = pidfd_open(pid)
        except ProcessLookupError:
            self.exited = True
        except OSError:  # no pidfd here (a kernel before 5.3, a seccomp filter)
            pass

    def wait(self, timeout: float) -> bool:
        """Whether the process exited within *timeout* seconds."""
        if self.exited:
            return True
        if self.fd is not None:
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            self.exited = bool(poller.poll(max(timeout, 0.0) * 1000))
            return self.exited
        deadline = time.monotonic() + timeout
        while running(self.pid):
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL_S)
        self.exited = True
        return True

    def close(self) -> None:
        """Release the pidfd."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
