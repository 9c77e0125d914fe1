"""The llama-server process: start pinned on 127.0.0.1, verify, wait for health, stop."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from . import orphans
from .errors import ServerError
from .host import format_cpu_list, process_cpus

HOST = "127.0.0.1"
_BIND_FAILURES = ("couldn't bind", "address already in use", "failed to bind")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 20) -> str:
    """The last *lines* lines of a text file ('' when it does not exist)."""
    try:
        data = path.read_bytes()[-16384:]
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


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
        startup_timeout: float = 120.0,
        stop_timeout: float = 10.0,
        bind_attempts: int = 3,
    ) -> None:
        self.binary = Path(binary)
        self.model = Path(model)
        self.args = list(args)
        self.log_path = Path(log_path)
        self.cpus = cpus
        self.env = dict(env or {})
        self.name = name
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.bind_attempts = bind_attempts
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_seconds: float | None = None
        self.started_at: float | None = None

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
        return [
            str(self.binary),
            "-m",
            str(self.model),
            "--host",
            HOST,
            "--port",
            str(port),
            *self.args,
        ]

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        return tail(self.log_path, lines)

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> LlamaServer:
        """Start the server and return once ``/health`` answers 200.

        Raises :class:`ServerError` when the process dies (with its exit code and log tail),
        is not pinned as asked, or is not ready within *startup_timeout* seconds."""
        if self.is_running():
            return self
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, self.bind_attempts + 1):
            try:
                self._start_once()
                return self
            except _BindLost:
                if attempt == self.bind_attempts:
                    raise ServerError(
                        f"{self.name}: lost the race for a free port {attempt} times; "
                        f"log {self.log_path}"
                    ) from None
        raise AssertionError("unreachable")

    def _start_once(self) -> None:
        port = free_port()
        cpus = self.cpus
        env = {**os.environ, **self.env}

        def pin() -> None:  # runs in the child between fork and exec
            orphans.die_with_parent()
            if cpus is not None:
                os.sched_setaffinity(0, cpus)

        t0 = time.monotonic()
        with self.log_path.open("ab") as log:
            log.write(f"# moeperf: {' '.join(self.command(port))}\n".encode())
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
        self.port = port
        self.started_at = time.time()
        orphans.record(self.process.pid, self.command(port))
        try:
            self._verify_pinning()
            self._wait_healthy(t0)
        except BaseException:
            self.stop()
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
                        f"log {self.log_path}, last lines:\n{self.log_tail(15)}"
                    )
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        self._verify_pinning()
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"{self.name}: not ready after {self.startup_timeout:.0f} s "
                        f"(startup timeout); log {self.log_path}, last lines:\n{self.log_tail(15)}"
                    )
                time.sleep(0.05)

    def stop(self) -> int | None:
        """Stop the server (SIGTERM to its process group, SIGKILL after *stop_timeout*);
        returns its exit code. Safe to call twice."""
        proc = self.process
        if proc is None:
            return None
        if proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, self.stop_timeout), (signal.SIGKILL, 10.0)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        orphans.forget(proc.pid)
        return proc.poll()

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid} on {self.url}" if self.is_running() else "stopped"
        return f"<LlamaServer {self.name} {state}>"


class _BindLost(Exception):
    """The server could not bind the port chosen for it (someone else took it)."""
