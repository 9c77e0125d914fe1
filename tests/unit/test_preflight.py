"""Pre-flight, on recorded /proc and /sys trees: the neighbours on a configuration's CPUs,
numa_balancing on for a node-pinned server, a node whose page cache leaves no room for a
server's private copy of the weights; each said with what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_moeperf.host import preflight
from pytest_moeperf.host.preflight import (
    Neighbour,
    neighbours,
    node_memory,
    numa_balancing,
    preflight_lines,
)

GIB = 2**30


def _stat(pid: int, name: str, ticks: int, cpu: int) -> str:
    # pid (comm) state ppid ... utime(14) stime(15) ... processor(39)
    fields = ["S", "1"] + ["0"] * 9 + [str(ticks), "0"] + ["0"] * 23 + [str(cpu)] + ["0"] * 5
    return f"{pid} ({name}) " + " ".join(fields) + "\n"


def _proc(root: Path, procs: dict[int, tuple[str, int, int]]) -> None:
    for pid, (name, ticks, cpu) in procs.items():
        (root / str(pid)).mkdir(parents=True, exist_ok=True)
        (root / str(pid) / "stat").write_text(_stat(pid, name, ticks, cpu))


def test_neighbours_are_the_busy_processes_on_the_pinned_cpus(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    _proc(proc, {10: ("llama-server", 1000, 1), 11: ("cc1plus", 500, 0), 12: ("idle", 7, 1)})
    _proc(proc, {13: ("ours", 0, 1)})

    def later(seconds: float) -> None:  # a quarter second passes: 100 ticks a second
        _proc(
            proc,
            {
                10: ("llama-server", 1000 + 24, 1),  # 0.96 of a CPU, on CPU 1
                11: ("cc1plus", 500 + 25, 0),  # busy, but on CPU 0
                12: ("idle", 7, 1),
                13: ("ours", 25, 1),
            },
        )

    monkeypatch.setattr(preflight.time, "sleep", later)
    got = neighbours([1], ours=[13], window=0.25, proc=proc, ticks=100)
    assert got == [Neighbour(10, "llama-server", pytest.approx(0.96))]


def test_numa_balancing_and_node_memory_are_read(tmp_path):
    (tmp_path / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "sys" / "kernel" / "numa_balancing").write_text("1\n")
    assert numa_balancing(tmp_path) and not numa_balancing(tmp_path / "nowhere")
    nodes = tmp_path / "sys" / "devices" / "system" / "node"
    for n in (0, 1):
        (nodes / f"node{n}").mkdir(parents=True)
    (nodes / "node1" / "meminfo").write_text(
        "Node 1 MemTotal:       197000000 kB\nNode 1 MemFree:         20000000 kB\n"
        "Node 1 FilePages:      150000000 kB\n"
    )
    got = node_memory(1, tmp_path)
    assert got is not None and got.free == 20_000_000 * 1024
    assert got.file_pages == 150_000_000 * 1024 and node_memory(0, tmp_path) is None


def test_the_only_node_has_the_hosts_memory(tmp_path):
    """A one-node host's node is all its memory: /proc/meminfo's figures, not the node file's
    (this project's VM: the node file said 7.8 GiB, /proc/meminfo 24 GiB)."""
    node = tmp_path / "sys" / "devices" / "system" / "node" / "node0"
    node.mkdir(parents=True)
    (node / "meminfo").write_text("Node 0 MemTotal:  8178000 kB\nNode 0 MemFree:  4000000 kB\n")
    got = node_memory(0, tmp_path)
    assert got is not None and got.total == 8_178_000 * 1024  # no /proc/meminfo: the node's
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text(
        "MemTotal:       24684092 kB\nMemFree:        18892668 kB\nBuffers:  100 kB\n"
        "Cached:          3000000 kB\nSwapCached:  0 kB\n"
    )
    got = node_memory(0, tmp_path)
    assert got is not None and (got.total, got.free) == (24_684_092 * 1024, 18_892_668 * 1024)
    assert got.file_pages == 3_000_100 * 1024


def test_the_lines_say_what_blinds_a_configuration_and_what_to_do():
    memory = preflight.NodeMemory(total=197 * GIB, free=20 * GIB, file_pages=140 * GIB)
    lines = preflight_lines(
        "adr-0042.lm-none-node1",
        cpus=range(10, 20),
        numa_node=1,
        private_bytes=74 * 10**9,
        busy_limit=0.25,
        others=[Neighbour(4242, "llama-server", 9.5)],
        balancing=True,
        memory=memory,
    )
    assert len(lines) == 3
    assert lines[0] == (
        "adr-0042.lm-none-node1: other processes use its CPUs (95 % of them: pid 4242 "
        "llama-server 950 %): every verdict on them will end undecided for a busy host (over "
        "25 %) until they stop; stop them, or pin the configuration elsewhere"
    )
    assert "kernel.numa_balancing is on" in lines[1] and "sysctl -w" in lines[1]
    assert "node 1 has 20.0 GiB free and 140.0 GiB of page cache" in lines[2]
    assert "drop_caches" in lines[2]
    quiet = preflight_lines(
        "embedded.mmap",
        cpus=[0, 1],
        numa_node=None,
        private_bytes=GIB,
        busy_limit=0.25,
        others=[],
        balancing=True,  # not pinned to a node: nothing to say
        memory=None,
    )
    assert quiet == []
