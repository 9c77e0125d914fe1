"""pytest-xdist and the CPU and GPU locks: measurements of two workers on the same CPU, or on
disjoint CPUs but the same GPU, never run at the same time; on disjoint CPUs and GPUs they may.

An inner ``pytest -n 2 -m perf`` runs two tests, one per worker; both start their server,
meet at a barrier (so they are ready to measure at the same moment), and measure. The
evidence is twofold: the results files (one per worker) record each measurement's
wall-clock span, and the servers' own logs (``--log-timestamps``) record when each request
ran (times since the server started, put on the wall clock by the ``spawned at`` line the
plugin writes into each log)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from _procs import project_fixture, survivors  # noqa: F401 (the fixture `project`)

REPETITIONS = 20
WORKLOAD = "tg512"  # ~50 ms a repetition pinned to one core: about 1 s a measurement
CLOCK_SLACK = 0.3
"""Seconds by which two servers' log-derived request times may seem to overlap. A server
starts its log clock a little after the ``spawned at`` time (fork, exec, library loading), so
its times come out early by that much; the gap between two measurements taking turns on a CPU
is at least the 0.25 s idle-host check, so only a delay of more than 0.55 s would show here.
Measurements running at once would share most of their ~1 s."""
SPAN_SLACK = 0.5
"""Seconds by which a server's log-derived requests may seem to start before the measurement's
span (the same delay, generously bounded): a sanity check of the clock conversion."""

CONFIG = """
[profiles.locks]
build = 11434
model = "synthetic:tiny"
flags = ["-c", "2048", "-t", "1", "-np", "1", "--log-timestamps"]

[profiles.locks.configurations.first]
cpus = "0"
[profiles.locks.configurations.second]
cpus = "0"
[profiles.locks.configurations.other]
cpus = "1"
# a GPU declared on a host that may have none: the lock is taken all the same
[profiles.locks.configurations.gpu-first]
cpus = "0"
gpus = [0]
[profiles.locks.configurations.gpu-other]
cpus = "1"
gpus = [0]
"""

TESTS = """
import os
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.moeperf(profile="locks")


def barrier(where="arrived"):
    \"\"\"Wait for the other worker's test to arrive here too.\"\"\"
    Path(f"{{where}}-{{os.environ['PYTEST_XDIST_WORKER']}}").touch()
    deadline = time.monotonic() + 60
    while len(list(Path().glob(f"{{where}}-*"))) < 2:
        if time.monotonic() > deadline:
            pytest.fail(f"the other test never got to {{where!r}} in another worker")
        time.sleep(0.005)


@pytest.mark.moeperf(configurations=["{a}"])
def test_a(moeperf):
    moeperf.server("{a}")
    barrier()
    moeperf.measure("{a}", "{workload}", repetitions={reps})


@pytest.mark.moeperf(configurations=["{b}"])
def test_b(moeperf):
    moeperf.server("{b}")
    barrier()
    moeperf.measure("{b}", "{workload}", repetitions={reps})
"""

_STAMP = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) \S (.*)$")
_SPAWNED = re.compile(r"^# moeperf: spawned at ([0-9.]+)")


def request_window(log: Path) -> tuple[float, float, int]:
    """When the server of *log* worked on requests, on the wall clock: the launch of its first
    request, the release of its last, and how many requests it ran."""
    spawned: float | None = None
    launches: list[float] = []
    releases: list[float] = []
    for line in log.read_text(errors="replace").splitlines():
        if m := _SPAWNED.match(line):
            spawned = float(m[1])
        elif (m := _STAMP.match(line)) and spawned is not None:
            at = spawned + int(m[1]) * 60 + int(m[2]) + int(m[3]) / 1e3 + int(m[4]) / 1e6
            if "launch_slot_" in m[5]:
                launches.append(at)
            elif "release:" in m[5] and "stop processing" in m[5]:
                releases.append(at)
    assert launches and len(launches) == len(releases), log.read_text()
    return min(launches), max(releases), len(launches)


def overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Seconds two intervals share (0 when disjoint)."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def run_two_workers(project, a: str, b: str) -> dict[str, dict]:
    """Run test_a on *a* and test_b on *b* in two workers; the measurements by configuration,
    each with the results file it came from."""
    project.makefile(".toml", moeperf=CONFIG)
    project.makepyfile(test_locks=TESTS.format(a=a, b=b, workload=WORKLOAD, reps=REPETITIONS))
    result = project.runpytest_subprocess(
        "-n", "2", "-m", "perf", "--moeperf-config", "moeperf.toml", timeout=300
    )
    result.assert_outcomes(passed=2)
    found = {}
    files = sorted((project.path / ".moeperf").glob("results-*.json"))
    for f in files:
        for m in json.loads(f.read_text())["measurements"]:
            found[m["configuration"]] = {**m, "file": f.name}
    assert len(files) == 2, "one results file per worker"
    assert set(found) == {a, b}
    assert found[a]["file"] != found[b]["file"], "both measured in one worker"
    for m in found.values():
        assert len(m["samples"]) == REPETITIONS
        assert len(m["conditions"]["spans"]) == 1
    assert survivors(project.path) == {}
    return found


def assert_never_at_once(found: dict[str, dict]) -> None:
    """The two measurements' spans (one clock: time.time() of the same host) do not overlap
    at all; the servers' logs show the same within the clock conversion's slack."""
    spans = sorted(tuple(m["conditions"]["spans"][0]) for m in found.values())
    earlier, later = spans
    assert earlier[1] <= later[0], f"spans overlap by {earlier[1] - later[0]:.3f} s: {spans}"
    # the servers' own logs agree: each ran its requests inside its span, not at once
    windows = {}
    for name, m in found.items():
        start, end, n = request_window(Path(m["conditions"]["log"]))
        assert n == REPETITIONS + 1  # the warmup and the repetitions
        span = m["conditions"]["spans"][0]
        assert span[0] - SPAN_SLACK <= start and end <= span[1] + SPAN_SLACK, (
            name,
            (start, end),
            span,
        )
        windows[name] = (start, end)
    shared = overlap(*windows.values())
    print(f"spans {spans}; request windows from the logs {windows}")
    assert shared <= CLOCK_SLACK, f"the logs show both servers at work for {shared:.3f} s"


def test_measurements_on_the_same_cpu_never_overlap(project):
    """Both pinned to CPU 0, ready at the same moment: one measures while the other waits
    for the CPU's lock."""
    assert_never_at_once(run_two_workers(project, "first", "second"))


def test_measurements_on_the_same_declared_gpu_never_overlap(project):
    """CPU 0 and CPU 1, but both declare GPU 0 (``gpus = [0]``; this host need not have it):
    ready at the same moment, one measures while the other waits for the GPU's lock."""
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    assert_never_at_once(run_two_workers(project, "gpu-first", "gpu-other"))


HOLD = """
    # then take the measurement lock of its CPUs again, as a measurement does, and wait
    # inside it for the other worker to be inside its own: possible only when the two locks
    # do not exclude each other
    from pytest_moeperf.host.locks import measuring

    with measuring(moeperf.configuration("{name}").pinning.resolve()):
        barrier("inside-its-cpus-lock")
"""


def test_measurements_on_disjoint_cpus_may_overlap(project):
    """CPU 0 and CPU 1: both measure, and each can hold its CPUs' lock while the other holds
    its own (an event, not a timing: each waits inside its lock for the other to arrive)."""
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    tests = TESTS.format(a="first", b="other", workload=WORKLOAD, reps=REPETITIONS)
    head, test_b = tests.split('@pytest.mark.moeperf(configurations=["other"])')
    tests = (
        head.rstrip() + "\n" + HOLD.format(name="first") + "\n\n"
        '@pytest.mark.moeperf(configurations=["other"])'
        + test_b.rstrip()
        + "\n"
        + HOLD.format(name="other")
    )
    project.makefile(".toml", moeperf=CONFIG)
    project.makepyfile(test_locks=tests)
    result = project.runpytest_subprocess(
        "-n", "2", "-m", "perf", "--moeperf-config", "moeperf.toml", timeout=300
    )
    result.assert_outcomes(passed=2)
    assert survivors(project.path) == {}
