"""The llama-server process: start pinned on 127.0.0.1, verify, wait for health, stop."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import httpcore  # noqa: F401 (see below)
import httpx

from ..defaults import STARTUP_TIMEOUT, STOP_GRACE
from ..errors import MeasurementError, MoeperfError, ServerError
from ..host.machine import format_cpu_list, process_cpus
from ..host.placement import stray_threads, threads
from ..host.process import stop_group
from . import orphans

# httpx imports httpcore on first use and keeps a map of the httpcore exception classes it
# saw first. pytester drops the modules a test imported when the test ends, so a first use
# inside such a test (an inline inner session) would leave later httpx calls in the process
# with a stale map: httpcore's errors would escape unmapped (not httpx.HTTPError). Imported
# with the plugin, httpcore is never dropped.

HOST = "127.0.0.1"
_BIND_FAILURES = ("couldn't bind", "address already in use", "failed to bind")

BIND_ATTEMPTS = 3
"""Free ports a server is started on before a lost race for one is an error."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """One llama-server process.

    The command line is ``binary -m model --host 127.0.0.1 --port PORT *args``, run without a
    shell in its own process group, pinned to *cpus* before it executes (and checked from
    ``/proc/<pid>/status`` afterwards), with stdout and stderr written to *log_path*.
    """

    def __init__(
        self,
        binary: Path,
        model: Path,
        args: Sequence[str] = (),
        *,
        log_path: Path,
        cpus: frozenset[int] | None = None,
        env: Mapping[str, str] | None = None,
        name: str = "llama-server",
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self.binary = Path(binary)
        self.model = Path(model)
        self.args = list(args)
        self.log_path = Path(log_path)
        self.cpus = cpus
        self.env = dict(env or {})
        self.name = name
        self.startup_timeout = startup_timeout
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_seconds: float | None = None
        self.stopped_at: float | None = None
        """When the last process was seen gone (also written into the log)."""

    # -- what it is -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self.port is None:
            raise ServerError(f"{self.name}: not started")
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def command(self, port: int) -> list[str]:
        """The argument list the server is started with."""
        head = [str(self.binary), "-m", str(self.model), "--host", HOST, "--port", str(port)]
        return [*head, *self.args]

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        """The last *lines* lines of the log ('' when it does not exist)."""
        try:
            data = self.log_path.read_bytes()[-16384:]
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])

    def cite_log(self, lines: int = 15) -> str:
        """``log PATH, last lines:`` and those lines, or that the log is empty: an error never
        ends in a heading with nothing under it."""
        return _cite(self.log_path, self.log_tail(lines))

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> LlamaServer:
        """Start the server and return once ``/health`` answers 200.

        Raises :class:`ServerError` when the process dies (with its exit code and log tail),
        is not pinned as asked, or is not ready within *startup_timeout* seconds."""
        if self.is_running():
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(BIND_ATTEMPTS):
            with contextlib.suppress(_BindLost):
                self._start_once()
                return self
        raise ServerError(
            f"{self.name}: lost the race for a free port {BIND_ATTEMPTS} times; log {self.log_path}"
        )

    def _start_once(self) -> None:
        self.stopped_at = None
        port = free_port()
        cpus = self.cpus
        env = {**os.environ, **self.env}
        parent = os.getpid()

        def pin() -> None:  # runs in the child between fork and exec
            orphans.die_with_parent(parent)
            if cpus is not None:
                os.sched_setaffinity(0, cpus)

        t0 = time.monotonic()
        with self.log_path.open("ab") as log:
            log.write(
                f"# moeperf: {' '.join(self.command(port))}\n"
                f"# moeperf: spawned at {time.time():.6f} (unix time; the times of "
                "--log-timestamps count from about here)\n".encode()
            )
            log.flush()
            try:
                self.process = subprocess.Popen(
                    self.command(port),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    preexec_fn=pin,
                )
            except OSError as exc:
                raise ServerError(f"{self.name}: cannot run {self.binary}: {exc}") from None
        try:
            self.port = port
            orphans.record(self.process.pid, self.command(port))
            self._verify_pinning()
            self._wait_healthy(t0)
        except (MoeperfError, _BindLost):
            self.stop()
            raise
        except BaseException as exc:  # Ctrl-C, SIGTERM, pytest-timeout
            self.interrupted(exc, f"starting {self.name}, {time.monotonic() - t0:.1f} s in")
            raise
        self.ready_seconds = time.monotonic() - t0

    def _verify_pinning(self) -> None:
        if self.cpus is None or self.process is None:
            return
        try:
            actual = process_cpus(self.process.pid)
        except OSError:
            return  # already gone: the health loop reports the exit
        if actual != self.cpus:
            raise ServerError(
                f"{self.name}: pinning did not take: asked CPUs {format_cpu_list(self.cpus)}, "
                f"/proc/{self.process.pid}/status says Cpus_allowed_list {format_cpu_list(actual)}"
            )

    def verify_threads(self) -> None:
        """Raise :class:`ServerError` naming each thread of the server that may run outside
        its pinned CPUs (checked after warmup: llama.cpp starts its compute threads then, and
        ``--numa distribute|isolate`` re-pins them). Nothing to check when unpinned."""
        if self.cpus is None or not self.is_running() or self.process is None:
            return
        stray = stray_threads(self.process.pid, self.cpus)
        if not stray:
            return
        total = len(threads(self.process.pid))
        named = "; ".join(t.describe() for t in stray[:8])
        more = f" and {len(stray) - 8} more" if len(stray) > 8 else ""
        raise ServerError(
            f"{self.name}: {len(stray)} of {total} threads may run outside the pinned CPUs "
            f"{format_cpu_list(self.cpus)}: {named}{more} (/proc/{self.process.pid}/task/*/status "
            "Cpus_allowed_list). llama.cpp's --numa distribute spreads compute threads over "
            "every node; pin with numa_node and --numa isolate (or no --numa), and check that "
            "nothing else (taskset, a cgroup) moves the server's threads"
        )

    def _wait_healthy(self, t0: float) -> None:
        assert self.process is not None
        deadline = t0 + self.startup_timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    log = self.log_tail(40)
                    if any(s in log.lower() for s in _BIND_FAILURES):
                        raise _BindLost()
                    raise ServerError(
                        f"{self.name}: llama-server exited with code {code} before it was ready; "
                        f"{self.cite_log(15)}"
                    )
                # checked before asking: a server first seen ready after the budget is late
                # (and a budget of 0 always times out)
                left = deadline - time.monotonic()
                if left < 0:
                    raise ServerError(
                        f"{self.name}: not ready after {self.startup_timeout:.0f} s "
                        f"(startup timeout); {self.cite_log(15)}"
                    )
                try:
                    reply = client.get(f"{self.url}/health", timeout=min(2.0, max(left, 0.1)))
                    if reply.status_code == 200:
                        self._verify_pinning()
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)

    def stop(self) -> int | None:
        """Stop the server and its process group (children of a wrapper script): SIGTERM,
        with SIGCONT so that a stopped server gets it, and SIGKILL after :data:`STOP_GRACE`
        (:func:`~pytest_moeperf.host.process.stop_group`); returns its exit code. Safe to call
        twice."""
        proc = self.process
        if proc is None:
            return None
        stop_group(proc, grace=STOP_GRACE)
        code = proc.poll()
        if code is not None:
            orphans.forget(proc.pid)  # else the next session's reaper tries again
            if self.stopped_at is None:
                self.stopped_at = time.time()
                with contextlib.suppress(OSError), self.log_path.open("ab") as log:
                    log.write(
                        f"# moeperf: stopped at {self.stopped_at:.6f} (unix time; "
                        f"pid {proc.pid}, exit {code})\n".encode()
                    )
        return code

    # -- what went wrong ------------------------------------------------------------------------
    def interrupted(self, exc: BaseException, phase: str) -> None:
        """Stop the server after *exc* (an interruption: Ctrl-C, SIGTERM, pytest-timeout)
        broke off *phase* (``"measuring tg64 on mmap (b11434)"``): a request may still be in
        flight, so its state is unknown (a later use starts a fresh one). Adds to *exc* the
        phase and the log's last lines from before the stop."""
        last = self.log_tail(10)
        self.stop()
        exc.add_note(
            f"moeperf: interrupted while {phase}; server stopped; {_cite(self.log_path, last)}"
        )

    def request_failed(self, exc: MeasurementError) -> MeasurementError:
        """The error to raise for a request to this server that failed with *exc*.

        A request that got no answer within the request timeout leaves a hung server: it is
        stopped (a later use starts a fresh one). A server that died says its exit code. Both
        name the log and show its last lines; other errors are returned as they are."""
        timed_out = isinstance(exc.__context__, httpx.TimeoutException) or (
            "(request timeout)" in str(exc)
        )
        last = self.log_tail(15)  # what it was doing, before stopping it adds its exit lines
        if timed_out:
            self.stop()
            what = f"{self.name} hung and was stopped"
        elif self.process is not None and not self.is_running():
            what = f"{self.name}: llama-server exited with code {self.process.poll()}"
        else:
            return exc
        return MeasurementError(f"{exc}; {what}; {_cite(self.log_path, last)}")

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid} on {self.url}" if self.is_running() else "stopped"
        return f"<LlamaServer {self.name} {state}>"


def _cite(path: Path, last: str) -> str:
    """The log's last lines under a heading that says whose they are: only the plugin's own
    ``# moeperf:`` lines mean llama-server wrote nothing."""
    if not last.strip():
        return f"log {path} is empty (llama-server wrote nothing to it)"
    if all(line.startswith("# moeperf:") for line in last.splitlines() if line.strip()):
        return f"log {path}: llama-server wrote nothing to it; the plugin's lines:\n{last}"
    return f"log {path}, last lines:\n{last}"


class _BindLost(Exception):
    """The server could not bind the port chosen for it (someone else took it)."""
