"""Threads and memory of a process, read from fake ``/proc`` and ``/sys`` trees."""

from __future__ import annotations

from pathlib import Path

from pytest_moeperf.host.placement import (
    page_cache_kib,
    parse_numa_maps,
    parse_status,
    stray_threads,
    threads,
)

MODEL = "/cache/models/bench.gguf"
NUMA_MAPS = f"""\
7f0000000000 default file={MODEL} mapped=100 mapmax=2 N0=60 N1=40 kernelpagesize_kB=4
7f1000000000 default file={MODEL} mapped=28 N0=28 kernelpagesize_kB=4
7f2000000000 default anon=512 dirty=512 N1=512 kernelpagesize_kB=4
7f3000000000 default anon=2 dirty=2 N0=2 kernelpagesize_kB=2048
55d000000000 default heap anon=10 dirty=10 N0=10 kernelpagesize_kB=4
7f4000000000 default file=/usr/lib/libc.so.6 mapped=300 N1=300 kernelpagesize_kB=4
7f5000000000 default file=/dev/shm/x mapped=7 N1=7 kernelpagesize_kB=4
7f6000000000 default stack anon=3 dirty=3 N0=3 kernelpagesize_kB=4
7f7000000000 default
"""


def test_numa_maps_counts_the_model_file_and_anonymous_bytes_per_node():
    placed = parse_numa_maps(NUMA_MAPS, MODEL)
    assert placed.model == {0: 88 * 4096, 1: 40 * 4096}
    assert placed.anon == {1: 512 * 4096, 0: 2 * 2 * 2**20 + 13 * 4096}
    both = 88 * 4096 + 4 * 2**20 + 13 * 4096
    total = both + 40 * 4096 + 512 * 4096
    assert placed.share(0) == both / total
    text = placed.describe(0)
    assert text.startswith("on node 0: model file 69 % of 0 MiB; anonymous ")
    assert parse_numa_maps(NUMA_MAPS, None).model == {}
    assert parse_numa_maps("", MODEL).share(0) is None
    assert parse_numa_maps("", MODEL).describe(1) == "on node 1: no resident pages"


def _proc(root: Path, pid: int, tasks: dict[int, tuple[str, str]]) -> Path:
    for tid, (name, cpus) in tasks.items():
        d = root / str(pid) / "task" / str(tid)
        d.mkdir(parents=True)
        (d / "status").write_text(f"Name:\t{name}\nState:\tS\nCpus_allowed_list:\t{cpus}\n")
    return root


def test_threads_outside_the_pinned_cpus_are_stray(tmp_path):
    proc = _proc(
        tmp_path,
        42,
        {
            42: ("llama-server", "0-3"),
            43: ("llama-server", "2"),
            44: ("worker", "0,5"),
            45: ("w", "4-7"),
        },
    )
    assert [t.tid for t in threads(42, proc)] == [42, 43, 44, 45]
    stray = stray_threads(42, frozenset({0, 1, 2, 3}), proc)
    assert [t.describe() for t in stray] == [
        "thread 44 ('worker') on CPUs 0,5",
        "thread 45 ('w') on CPUs 4-7",
    ]
    assert threads(7, proc) == []  # a process that is gone


def test_status_fields():
    assert parse_status("Name:\tllama-server\nCpus_allowed_list:\t0-1\n") == (
        "llama-server",
        frozenset({0, 1}),
    )
    assert parse_status("Name:\tx\n") == ("x", None)


def test_page_cache_of_a_node(tmp_path):
    nodes = tmp_path / "sys/devices/system/node"
    for n in (0, 1):
        (nodes / f"node{n}").mkdir(parents=True)
    (nodes / "node1" / "meminfo").write_text(
        "Node 1 MemTotal:       65536000 kB\nNode 1 FilePages:      40000000 kB\n"
    )
    assert page_cache_kib(1, tmp_path) == (40000000, 65536000)
    assert page_cache_kib(0, tmp_path) == (0, 0)
    assert page_cache_kib(0, tmp_path / "nowhere") == (0, 0)
