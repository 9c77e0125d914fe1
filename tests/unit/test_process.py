"""Stopping a process group (``host/process.py``) on real processes: our children and processes
that are not, alone and in groups, ending on SIGTERM, ignoring it, or stopped.

The assertions are on what happened to the processes (their exit codes, their exit seen
through a pidfd), never on how long it took: a slow machine only makes the tests slower. The
processes never end by themselves (``sleep infinity``), so neither can a clock that jumps."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import IO

import pytest

from pytest_moeperf.host.process import running, stop_group

SHORT = 0.5
"""The grace of a test whose process ignores SIGTERM: the test waits it out."""
LONG = 60.0
"""How long a test waits for an event that comes at once when the code works."""

LAUNCH = (
    "import subprocess, sys\n"
    "own_group = sys.argv[1] == 'True'\n"
    "for script in sys.argv[2:]:\n"
    "    pid = subprocess.Popen(['sh', '-c', script], start_new_session=own_group).pid\n"
    "    print(pid, file=sys.stderr, flush=True)\n"
)
"""Starts each script (in a session of its own, or in the launcher's process group), says its
pid on stderr and exits without waiting: the scripts run on, nobody's children here."""
EXIT_3_ON_SIGTERM = (
    "import signal, sys\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    signal.pause()\n"
)
"""Exits 3 on SIGTERM, and forks nothing: a shell stopped inside ``vfork()`` (dash runs its
commands so) never shows as stopped."""


class Started:
    """What a test started: when it ends, whatever is left of its process groups is killed,
    its children reaped and its pipes closed (a failing test leaves no process behind)."""

    def __init__(self) -> None:
        self.groups: list[int] = []
        self.children: list[subprocess.Popen[str]] = []

    def spawn(self, script: str) -> subprocess.Popen[str]:
        """``sh -c script``, our child, leading a process group of its own."""
        return self.popen(["sh", "-c", script])

    def launch(self, *scripts: str, own_group: bool) -> tuple[list[int], IO[str]]:
        """``sh -c script`` for each script, none of them our child, each leading a process
        group of its own or all in one group led by nobody: their pids, and their stdout."""
        launcher = self.popen([sys.executable, "-c", LAUNCH, str(own_group), *scripts])
        assert launcher.stderr is not None and launcher.stdout is not None
        pids = [int(launcher.stderr.readline()) for _ in scripts]
        self.groups.extend(pids if own_group else [])
        assert launcher.wait() == 0
        return pids, launcher.stdout

    def popen(self, argv: list[str]) -> subprocess.Popen[str]:
        """*argv*, our child, leading a process group of its own."""
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.children.append(proc)
        self.groups.append(proc.pid)
        return proc

    def end(self) -> None:
        for pgid in self.groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for proc in self.children:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


@pytest.fixture
def started() -> Iterator[Started]:
    done = Started()
    yield done
    done.end()


def exits(pid: int) -> bool:
    """Whether *pid* exits within :data:`LONG` seconds (seen through its pidfd)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], LONG)[0])
    finally:
        os.close(fd)


def no_signal(*args: object) -> None:
    raise AssertionError("a signal was sent")


def line(out: IO[str] | None) -> str:
    assert out is not None
    return out.readline().strip()


# --------------------------------------------------------------------------------------------
# our children


def test_a_child_ends_on_sigterm(started):
    proc = started.spawn("exec sleep infinity")
    assert stop_group(proc) is True
    assert proc.returncode == -signal.SIGTERM


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(started):
    proc = started.spawn("trap '' TERM; echo ready; exec sleep infinity")
    assert line(proc.stdout) == "ready"
    assert stop_group(proc, grace=SHORT) is True
    assert proc.returncode == -signal.SIGKILL


def test_a_stopped_child_gets_sigterm(started):
    """SIGCONT comes with SIGTERM: a stopped process runs its SIGTERM handler (exit 3)."""
    proc = started.popen([sys.executable, "-c", EXIT_3_ON_SIGTERM])
    assert line(proc.stdout) == "ready"
    os.killpg(proc.pid, signal.SIGSTOP)
    seen = os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
    assert seen is not None and seen.si_code == os.CLD_STOPPED
    assert stop_group(proc) is True
    assert proc.returncode == 3


def test_the_whole_group_of_a_child_ends(started):
    proc = started.spawn("sleep infinity & echo $!; wait")
    member = int(line(proc.stdout))
    assert stop_group(proc) is True
    assert proc.returncode == -signal.SIGTERM
    assert exits(member)


def test_what_is_left_of_the_group_is_killed(started):
    """The leader ends on SIGTERM, a member that ignores it is killed after the grace."""
    proc = started.spawn("trap '' TERM; sleep infinity & trap - TERM; echo $!; wait")
    member = int(line(proc.stdout))
    assert stop_group(proc, grace=SHORT) is True
    assert proc.returncode == -signal.SIGTERM
    assert exits(member)


def test_a_reaped_child_is_left_alone(started, monkeypatch):
    proc = started.spawn("exit 7")
    assert proc.wait() == 7
    monkeypatch.setattr(os, "killpg", no_signal)  # its pid may be another's now
    monkeypatch.setattr(os, "kill", no_signal)
    assert stop_group(proc) is True


def test_the_return_says_a_process_is_not_gone(started, monkeypatch):
    proc = started.spawn("exec sleep infinity")
    with monkeypatch.context() as m:
        m.setattr(os, "killpg", lambda pid, sig: None)  # signals that never arrive
        assert stop_group(proc, grace=SHORT, kill_wait=SHORT) is False
    assert proc.poll() is None


def test_no_process_zero():
    with pytest.raises(ValueError, match="pid 0"):
        stop_group(0)


# --------------------------------------------------------------------------------------------
# processes that are not our children (a server a killed session left)


def test_a_group_leader_that_is_not_our_child(started):
    (pid,), out = started.launch("sleep infinity & echo $!; echo ready; wait", own_group=True)
    member = int(line(out))
    assert line(out) == "ready"
    assert running(pid)
    assert stop_group(pid) is True
    assert exits(pid) and exits(member)


def test_a_process_that_is_not_our_child_and_ignores_sigterm(started):
    (pid,), out = started.launch("trap '' TERM; echo ready; exec sleep infinity", own_group=True)
    assert line(out) == "ready"
    assert stop_group(pid, grace=SHORT) is True
    assert exits(pid)


def test_without_a_group_only_the_process_is_stopped(started):
    forever = "exec sleep infinity"
    (pid, other), _out = started.launch(forever, forever, own_group=False)
    assert os.getpgid(pid) != pid  # both in the launcher's group
    assert stop_group(pid, group=False) is True
    assert exits(pid)
    assert running(other)


def test_without_pidfd_proc_is_read(started, monkeypatch):
    (pid,), out = started.launch("trap '' TERM; echo ready; exec sleep infinity", own_group=True)
    assert line(out) == "ready"
    monkeypatch.delattr(os, "pidfd_open")
    assert stop_group(pid, group=False, grace=SHORT) is True
    assert not running(pid)  # what /proc said when stop_group saw it gone
