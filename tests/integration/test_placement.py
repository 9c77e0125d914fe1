"""Where a real server's threads and memory are: every thread of a pinned server is checked
after warmup (one re-pinned worker thread fails the test, naming it), and a NUMA-pinned
server's memory is read from ``/proc/PID/numa_maps``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _procs import project_fixture, run_perf, survivors  # noqa: F401 (the fixture `project`)

from pytest_moeperf.host.machine import parse_cpu_list

CONFIG = """
[profiles.placed]
build = 11434
model = "synthetic:tiny"
flags = ["-c", "1024", "-t", "2", "-np", "1"]
workloads = ["tg16"]

[profiles.placed.configurations.cpu0]
cpus = "0"
[profiles.placed.configurations.node0]
numa_node = 0
"""

REPIN = """
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.moeperf(profile="placed")


@pytest.mark.moeperf(configurations=["cpu0"])
def test_repinned_thread(moeperf):
    moeperf.measure("cpu0", "tg16", repetitions=1)  # warmup: the compute threads exist
    pid = moeperf.server("cpu0").pid
    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert tids, "llama-server runs no thread besides its main one"
    moved = tids[-1]
    os.sched_setaffinity(moved, {1})  # what a stray --numa distribute or taskset would do
    Path("moved").write_text(str(moved))
    moeperf.measure("cpu0", "tg16", repetitions=2)
"""

NODE = """
import pytest

pytestmark = pytest.mark.moeperf(profile="placed")


@pytest.mark.moeperf(configurations=["node0"])
def test_node0(moeperf):
    moeperf.measure("node0", "tg16", repetitions=2)
"""


def test_a_worker_thread_moved_off_the_pinned_cpus_fails_naming_it(project):
    if not {0, 1} <= os.sched_getaffinity(0):
        pytest.skip("needs CPUs 0 and 1")
    result = run_perf(project, CONFIG, {"test_repin": REPIN})
    result.assert_outcomes(failed=1)
    moved = int((project.path / "moved").read_text())
    out = result.stdout.str()
    assert f"thread {moved} (" in out, out
    assert "may run outside the pinned CPUs 0" in out, out
    assert "on CPUs 1" in out, out
    assert survivors(project.path) == {}


def test_a_numa_pinned_server_reports_its_memory_on_the_node(project):
    if not os.path.exists("/proc/self/numa_maps"):
        pytest.skip("this kernel has no /proc/PID/numa_maps")
    nodes = [n for n in os.listdir("/sys/devices/system/node") if n.startswith("node")]
    if not parse_cpu_list(Path("/sys/devices/system/node/node0/cpulist").read_text()) <= (
        os.sched_getaffinity(0)
    ):
        pytest.skip("node 0 has CPUs this runner may not use")
    result = run_perf(project, CONFIG, {"test_node": NODE}, "-v")
    result.assert_outcomes(passed=1)
    (results,) = (project.path / ".moeperf").glob("results-*.json")
    (m,) = json.loads(results.read_text())["measurements"]
    placed = m["conditions"]["placement"]
    print(placed)
    assert placed["node"] == 0
    assert sum(placed["model_bytes"].values()) > 0, "the model file's pages were not found"
    if nodes == ["node0"]:  # one node: every page is on it
        assert placed["share"] == 1.0
        assert "model file 100 %" in placed["text"]
    assert "memory on node 0: model file" in result.stdout.str()
