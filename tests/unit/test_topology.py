"""The host's topology from recorded sysfs trees and nvidia-smi outputs: ADR-0042's host shape
(two nodes, a GPU on each) and this project's 2-CPU VM (one node, no GPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

from _hosts import recorded_topology

from pytest_moeperf.host.machine import parse_node_meminfo
from pytest_moeperf.host.topology import (
    GIB,
    parse_gpu_query,
    parse_thp,
    parse_topo_numa,
    read_gpus,
    read_nodes,
    read_topology,
    sysfs_bus_id,
)

DATA = Path(__file__).parent / "data"
ADR = DATA / "host-adr"
VM = DATA / "host-vm"


def test_the_adr_host_has_two_nodes_of_ten_cores_and_a_gpu_on_each():
    topo = recorded_topology(ADR)
    n0, n1 = topo.nodes
    assert n0.cpus == frozenset([*range(0, 10), *range(20, 30)])
    assert n1.cpus == frozenset([*range(10, 20), *range(30, 40)])
    assert (n0.physical_cores, n1.physical_cores) == (10, 10)
    assert (n0.threads, n1.threads) == (10, 10)  # ADR-0042's -t 10
    assert round(topo.memory_total / GIB) == 377  # the record's "376 GB" host
    assert 0 < n1.memory_free < n1.memory_total and n1.page_cache > 0
    g0, g1 = topo.gpus
    assert (g0.index, g0.numa_node, g1.index, g1.numa_node) == (0, 0, 1, 1)
    assert g0.name == "NVIDIA GeForce RTX 2080 Ti" and g0.memory_total_mib == 11264
    assert (g0.memory_used_mib, g0.bus_id) == (1, "00000000:3B:00.0")
    assert (topo.numa_balancing, topo.transparent_hugepages, topo.governor) == (
        "1",
        "madvise",
        "powersave",
    )
    assert topo.vram_total_mib == 2 * 11264
    lines = topo.describe()
    assert lines[0].startswith("node 0: CPUs 0-9,20-29, 10 cores, ")
    assert "GPU1 NVIDIA GeForce RTX 2080 Ti, 1/11264 MiB used, 00000000:D8:00.0, node 1" in lines


def test_a_gpus_node_falls_back_on_nvidia_smi_topo_when_sysfs_does_not_say(tmp_path):
    query = (ADR / "nvidia-smi-query.txt").read_text()
    topo = (ADR / "nvidia-smi-topo.txt").read_text()
    # no /sys/bus/pci here at all
    assert [g.numa_node for g in read_gpus(tmp_path, query, topo)] == [0, 1]
    # sysfs says -1 (firmware without the information) for GPU1: topo -m fills it in
    pci = tmp_path / "sys/bus/pci/devices"
    (pci / "0000:3b:00.0").mkdir(parents=True)
    (pci / "0000:3b:00.0" / "numa_node").write_text("0\n")
    (pci / "0000:d8:00.0").mkdir()
    (pci / "0000:d8:00.0" / "numa_node").write_text("-1\n")
    assert [g.numa_node for g in read_gpus(tmp_path, query, topo)] == [0, 1]
    # neither says: unknown, not guessed
    assert [g.numa_node for g in read_gpus(tmp_path, query, "")] == [0, None]


def test_topo_rows_with_na_ansi_and_spaces_instead_of_tabs():
    text = (
        "\x1b[4m\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
        "GPU0\t X \t0-95\tN/A\t\tN/A\n\nLegend:\n  X    = Self\n"
    )
    assert parse_topo_numa(text) == {0: None}
    spaced = (
        "        GPU0    GPU1    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
        "GPU0     X      SYS     0-9,20-29       0               N/A\n"
        "GPU1    SYS      X      10-19,30-39     1               N/A\n"
    )
    assert parse_topo_numa(spaced) == {0: 0, 1: 1}
    assert parse_topo_numa("") == {}


def test_the_vm_is_one_node_of_two_cpus_without_gpu_or_governor():
    topo = recorded_topology(VM)
    (node,) = topo.nodes
    assert (node.node, node.cpus, node.physical_cores) == (0, frozenset({0, 1}), 2)
    assert node.memory_total > 0
    assert topo.gpus == ()
    assert topo.governor == "" and topo.transparent_hugepages == "madvise"
    assert "no NVIDIA GPU" in topo.describe()


def test_a_kernel_without_numa_is_one_node_of_every_online_cpu(tmp_path):
    (tmp_path / "sys/devices/system/cpu").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/online").write_text("0-3\n")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal: 8000 kB\nMemFree: 4000 kB\n")
    (node,) = read_nodes(tmp_path)
    assert node.cpus == frozenset(range(4)) and node.physical_cores is None
    assert (node.memory_total, node.memory_free) == (8000 * 1024, 4000 * 1024)
    assert node.threads == 4  # without sibling lists every CPU counts


def test_missing_topology_files_read_as_unknown(tmp_path):
    shutil.copytree(VM / "sys/devices/system/node", tmp_path / "sys/devices/system/node")
    topo = read_topology(tmp_path, gpu_query="", gpu_topo="")
    assert topo.nodes[0].physical_cores is None
    assert (topo.numa_balancing, topo.transparent_hugepages, topo.governor) == ("", "", "")


def test_small_parsers():
    assert parse_thp("always [madvise] never") == "madvise" and parse_thp("") == ""
    info = parse_node_meminfo("Node 1 MemTotal:  100 kB\nNode 1 HugePages_Total:     0\n")
    assert info == {"MemTotal": 102400}
    assert sysfs_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert sysfs_bus_id("00000001:AF:00.0") == "0001:af:00.0"
    assert sysfs_bus_id("3B:00.0") == "0000:3b:00.0"
    rows = parse_gpu_query("0, NVIDIA H200, 143771, 4, 00000000:00:06.0\nnot a row\n")
    assert rows == [(0, "NVIDIA H200", 143771, 4, "00000000:00:06.0")]
