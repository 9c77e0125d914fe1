"""Pre-flight: what on this host would make a configuration's verdicts blind, said before its
first measurement instead of after a spent budget.

- Other processes on the CPUs a server is pinned to (a production llama-server, a compile):
  every verdict there would end undecided for a busy host. Read from ``/proc/<pid>/stat``
  twice, a short interval apart: each process's CPU time in between and the CPU it last ran
  on.
- ``kernel.numa_balancing`` on, for a server pinned to a NUMA node: llama.cpp warns it is
  harmful (ADR-0042 measured it no lever once the process and its memory are node-local, so
  this is a note, not a refusal).
- The page cache filling the node a server's private copy of the weights must land on (a
  ``-lm none`` server: ADR-0042's ~74 GB pinned buffer needed a one-off ``drop_caches`` because
  the GGUF's page cache filled node 1): the copy spills to the other node.

Every reader takes its root (``/proc``, ``/sys``) so that tests feed recorded trees.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .machine import node_meminfo

GIB = 2**30
BUSY_SHARE = 0.05
"""A process using more than this share of one CPU on the pinned CPUs is named."""
WINDOW = 0.25
"""Seconds between the two reads of every process's CPU time."""


@dataclass(frozen=True)
class Neighbour:
    """A process that used the pinned CPUs during the window."""

    pid: int
    name: str
    share: float
    """CPUs' worth of time it used (0.5 = half a CPU)."""


def _stat(proc: Path, pid: str) -> tuple[str, int, int] | None:
    """(name, user + system ticks, the CPU it last ran on) of ``proc/pid/stat``."""
    try:
        text = (proc / pid / "stat").read_text()
    except OSError:
        return None
    name = text[text.find("(") + 1 : text.rfind(")")]
    fields = text.rsplit(")", 1)[1].split()
    try:
        return name, int(fields[11]) + int(fields[12]), int(fields[36])
    except (IndexError, ValueError):
        return None


def _snapshot(proc: Path, skip: set[int]) -> dict[int, tuple[str, int, int]]:
    out = {}
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) in skip:
            continue
        got = _stat(proc, entry.name)
        if got is not None:
            out[int(entry.name)] = got
    return out


def neighbours(
    cpus: Iterable[int],
    *,
    ours: Iterable[int] = (),
    window: float = WINDOW,
    proc: Path = Path("/proc"),
    ticks: int | None = None,
) -> list[Neighbour]:
    """The processes (other than *ours* and this one) that used more than :data:`BUSY_SHARE`
    of a CPU on *cpus* over *window* seconds, busiest first."""
    wanted = set(cpus)
    skip = {os.getpid(), *ours}
    hz = ticks or os.sysconf("SC_CLK_TCK")
    before = _snapshot(proc, skip)
    time.sleep(window)
    after = _snapshot(proc, skip)
    found = []
    for pid, (name, used, cpu) in after.items():
        if pid not in before or cpu not in wanted:
            continue
        share = (used - before[pid][1]) / hz / window
        if share > BUSY_SHARE:
            found.append(Neighbour(pid, name, share))
    return sorted(found, key=lambda n: -n.share)


def numa_balancing(proc: Path = Path("/proc")) -> bool:
    """Whether ``kernel.numa_balancing`` is on."""
    try:
        return (proc / "sys" / "kernel" / "numa_balancing").read_text().strip() not in ("", "0")
    except OSError:
        return False


@dataclass(frozen=True)
class NodeMemory:
    """A NUMA node's memory (its ``meminfo``, or the host's where it is the only node)."""

    total: int
    free: int
    file_pages: int
    """Page cache on the node (bytes): reclaimable, but a pinned allocation does not wait."""


def node_memory(node: int, root: Path = Path("/")) -> NodeMemory | None:
    """The memory of NUMA node *node* (:func:`~pytest_moeperf.host.machine.node_meminfo`);
    ``None`` where the kernel shows none."""
    kib = node_meminfo(node, root)
    if "MemTotal" not in kib:
        return None
    return NodeMemory(
        total=kib["MemTotal"], free=kib.get("MemFree", 0), file_pages=kib.get("FilePages", 0)
    )


def preflight_lines(
    name: str,
    *,
    cpus: Iterable[int] | None,
    numa_node: int | None,
    private_bytes: int,
    busy_limit: float,
    others: list[Neighbour],
    balancing: bool,
    memory: NodeMemory | None,
) -> list[str]:
    """What to say before the first measurement of configuration *name*: the neighbours on
    its CPUs (and whether they make its verdicts blind: more than *busy_limit* of its CPUs),
    ``numa_balancing`` on for a node-pinned server, and a node whose free memory cannot hold
    the server's private copy of the weights (*private_bytes*) while the page cache fills it.
    Each line says what to do."""
    lines = []
    if others:
        n = len(set(cpus)) if cpus is not None else os.cpu_count() or 1
        busy = sum(o.share for o in others) / n
        named = ", ".join(f"pid {o.pid} {o.name} {100 * o.share:.0f} %" for o in others[:4])
        blind = (
            f": every verdict on them will end undecided for a busy host (over "
            f"{100 * busy_limit:.0f} %) until they stop"
            if busy > busy_limit
            else ": expect wider intervals"
        )
        lines.append(
            f"{name}: other processes use its CPUs ({100 * busy:.0f} % of them: {named}){blind}; "
            "stop them, or pin the configuration elsewhere"
        )
    if balancing and numa_node is not None:
        lines.append(
            f"{name}: kernel.numa_balancing is on while the server is pinned to node "
            f"{numa_node}; llama-server warns it is harmful (ADR-0042 measured no difference "
            "once pinned): sysctl -w kernel.numa_balancing=0 to rule it out"
        )
    if memory is not None and numa_node is not None and private_bytes > memory.free:
        if memory.file_pages > private_bytes - memory.free:
            lines.append(
                f"{name}: node {numa_node} has {memory.free / GIB:.1f} GiB free and "
                f"{memory.file_pages / GIB:.1f} GiB of page cache; the server's private copy of "
                f"the weights ({private_bytes / GIB:.1f} GiB) would spill to another node: as "
                "root, sync; echo 1 > /proc/sys/vm/drop_caches before the run (ADR-0042's step)"
            )
        else:
            lines.append(
                f"{name}: node {numa_node} has {memory.free / GIB:.1f} GiB free, less than the "
                f"server's private copy of the weights ({private_bytes / GIB:.1f} GiB): it will "
                "spill to another node; free memory there or pin to a larger node"
            )
    return lines
