"""Timeouts on real servers: each budget stops the server and says which phase hung, with the
server's log tail; nothing survives (processes left in the inner project, polled up to 10 s).

- server start: ``--moeperf-startup-timeout`` (a fake llama-server that never listens);
- one request: ``--moeperf-request-timeout`` (a server frozen with SIGSTOP);
- the whole test: pytest-timeout, with its signal method (the test fails, the server is
  stopped at teardown) and its thread method (pytest exits at once; PDEATHSIG)."""

from __future__ import annotations

import stat

from _procs import (
    ALIVE,
    pid_files,
    project_fixture,  # noqa: F401 (the fixture `project`)
    survivors,
)

from pytest_moeperf.host.process import running


def test_startup_timeout_stops_the_server_and_shows_its_log(project, llama_build):
    """A server that never becomes ready: the test fails naming the startup timeout and the
    log's last lines, and its whole process group (a wrapper script and its child) is gone."""
    fake = project.path / "bin" / "llama-server"
    fake.parent.mkdir()
    fake.write_text(
        "#!/bin/sh\n"
        'case "$1" in --version|--help) exec ' + f'"{llama_build.server}" "$@";; esac\n'
        'echo "fake llama-server: stuck loading the model"\n'
        "sleep 600\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    project.makepyfile(
        test_start="""
import pytest

@pytest.mark.moeperf(configurations=["default"])
def test_start(moeperf):
    moeperf.server("default")
"""
    )
    result = project.runpytest_subprocess(
        "-m", "perf", f"--llama-server={fake}", "--moeperf-startup-timeout=2", timeout=60
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*ServerError: default (*): not ready after 2 s (startup timeout); log *, last lines:",
            "fake llama-server: stuck loading the model",
        ]
    )
    assert survivors(project.path) == {}
    assert pid_files(project.path) == []


def test_request_timeout_stops_the_hung_server_and_shows_its_log(project):
    """A server that stops answering mid-run (SIGSTOP): the request times out, the error
    names the request timeout and shows the log tail, the hung server is stopped, and the
    next test that needs the configuration gets a fresh one."""
    project.makepyfile(
        test_hang=f"""
import os
import signal
import pytest
{ALIVE}

@pytest.mark.moeperf(configurations=["default"])
def test_hangs(moeperf):
    moeperf.measure("default", "pp16")
    pid = moeperf.server("default").pid
    Path("server.pid").write_text(str(pid))
    os.kill(pid, signal.SIGSTOP)
    moeperf.measure("default", "tg16")

@pytest.mark.moeperf(configurations=["default"])
def test_next_test_gets_a_fresh_server(moeperf):
    old = int(Path("server.pid").read_text())
    assert not alive(old)
    fresh = moeperf.server("default")  # started, and answered /health
    assert fresh.pid != old and fresh.is_running()
"""
    )
    result = project.runpytest_subprocess("-m", "perf", "--moeperf-request-timeout=2", timeout=120)
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*MeasurementError: http://127.0.0.1:*/completion: no answer within 2.0 s (request "
            "timeout); default (*) hung and was stopped; log *, last lines:",
            "*print_timing*",
        ]
    )
    assert survivors(project.path) == {}
    assert pid_files(project.path) == []


SLEEPS_AND_MEASURES = f"""
import time
import pytest
{ALIVE}

@pytest.mark.moeperf(configurations=["default"])
def test_sleeps_after_starting(moeperf):
    Path("sleeper.pid").write_text(str(moeperf.server("default").pid))
    time.sleep(60)

@pytest.fixture
def cpu0_probed(moeperf):
    # its server and the host's probe before the test's clock starts (timeout_func_only)
    moeperf.measure("cpu0", "tg64", repetitions=1)
    return moeperf

@pytest.mark.moeperf(configurations=["cpu0"])
def test_measures_forever(cpu0_probed):
    moeperf = cpu0_probed
    Path("measurer.pid").write_text(str(moeperf.server("cpu0").pid))
    moeperf.measure("cpu0", "tg64@d16", repetitions=1_000_000)

@pytest.mark.perf
def test_both_servers_are_gone_before_the_next_test():
    for name in ("sleeper", "measurer"):
        assert not alive(int(Path(f"{{name}}.pid").read_text())), name
"""


def test_pytest_timeout_signal_method_stops_the_server_and_says_where(project):
    """pytest-timeout (signal method) fails a test that hangs after starting its server and
    one that hangs mid-measurement; each server is stopped right after its test, and the
    measurement's failure says what it was measuring on which server, with the log tail."""
    project.makepyfile(test_slow=SLEEPS_AND_MEASURES)
    result = project.runpytest_subprocess(
        "-m",
        "perf",
        "--timeout=3",
        "--timeout-method=signal",
        "-o",
        "timeout_func_only=true",
        timeout=120,
    )
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*Timeout (>3.0s) from pytest-timeout*",
            "*moeperf: interrupted while measuring tg64 @ d16 on cpu0 (*); server stopped; log *",
        ]
    )
    assert survivors(project.path) == {}
    assert pid_files(project.path) == []


def test_pytest_timeout_thread_method_exit_takes_the_server_along(project):
    """pytest-timeout's thread method ends pytest with os._exit: no cleanup runs, and the
    server dies with its parent."""
    project.makepyfile(test_slow=SLEEPS_AND_MEASURES)
    result = project.runpytest_subprocess(
        "-m",
        "perf",
        "--timeout=3",
        "--timeout-method=thread",
        "-o",
        "timeout_func_only=true",
        timeout=120,
    )
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*Timeout*"])
    pid = int((project.path / "sleeper.pid").read_text())
    assert survivors(project.path) == {}
    assert not running(pid)
