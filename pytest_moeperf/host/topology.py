"""The host's topology as ``moeperf init`` needs it: NUMA nodes (their CPUs, physical cores and
memory), the kernel settings ADR-0042 looked at (``numa_balancing``, transparent huge pages,
the CPU governor) and each GPU with the NUMA node its PCI slot hangs off and its memory in use.

Every reader takes the file system root (``/`` on a live host, a recorded tree in tests) and
the text ``nvidia-smi`` printed (``None``: ask it now), so a recorded host reads like a live
one. A GPU's node comes from ``/sys/bus/pci/devices/<bus id>/numa_node``, else from the
"NUMA Affinity" column of ``nvidia-smi topo -m``; ``-1`` or ``N/A`` there means the firmware
does not say, and the node is ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .gpus import _mib, _rows, _smi
from .machine import format_cpu_list, node_meminfo, parse_cpu_list, read_meminfo, read_text

GPU_QUERY = ("index", "name", "memory.total", "memory.used", "pci.bus_id")
"""``nvidia-smi --query-gpu`` fields, in the order :func:`parse_gpu_query` reads them."""
GIB = 2**30

_NODE_DIR = "sys/devices/system/node"
_CPU_DIR = "sys/devices/system/cpu"
_PCI_DIR = "sys/bus/pci/devices"
_NUMA_BALANCING = "proc/sys/kernel/numa_balancing"
_THP = "sys/kernel/mm/transparent_hugepage/enabled"
_GOVERNOR = "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class NumaNode:
    """One NUMA node: its CPUs, how many physical cores they are, and its memory."""

    node: int
    cpus: frozenset[int]
    physical_cores: int | None
    """Cores, hyperthread siblings counted once (``None``: sysfs does not say)."""
    memory_total: int
    """Bytes of RAM on the node (0: unknown)."""
    memory_free: int
    """Bytes free on the node now (``MemFree``: the page cache counts as used)."""
    page_cache: int = 0
    """Bytes of file pages on the node (``FilePages``): a GGUF read before fills it, and a
    ``-lm none`` copy placed later then lands on the other node (ADR-0042's drop_caches)."""

    @property
    def threads(self) -> int:
        """The ``-t`` for a server on this node: its physical cores, else its CPUs."""
        return self.physical_cores or len(self.cpus)

    def describe(self) -> str:
        cores = f", {self.physical_cores} cores" if self.physical_cores else ""
        mem = (
            f", {self.memory_total / GIB:.1f} GiB ({self.memory_free / GIB:.1f} GiB free, "
            f"{self.page_cache / GIB:.1f} GiB page cache)"
            if self.memory_total
            else ""
        )
        return f"node {self.node}: CPUs {format_cpu_list(self.cpus)}{cores}{mem}"


@dataclass(frozen=True)
class GpuSlot:
    """One GPU as ``moeperf init`` sees it: where it sits and how full it is."""

    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int
    bus_id: str
    numa_node: int | None
    """The NUMA node of its PCI slot (``None``: neither sysfs nor ``nvidia-smi topo`` says)."""

    def describe(self) -> str:
        node = f"node {self.numa_node}" if self.numa_node is not None else "node unknown"
        return (
            f"GPU{self.index} {self.name}, {self.memory_used_mib}/{self.memory_total_mib} MiB "
            f"used, {self.bus_id or 'bus ?'}, {node}"
        )


@dataclass(frozen=True)
class Topology:
    """What ``moeperf init`` reads of a host."""

    nodes: tuple[NumaNode, ...]
    gpus: tuple[GpuSlot, ...]
    numa_balancing: str
    """``/proc/sys/kernel/numa_balancing`` ("0", "1"; "" where absent)."""
    transparent_hugepages: str
    """The selected THP mode ("always", "madvise", "never"; "" where absent)."""
    governor: str
    """cpu0's cpufreq governor ("performance", "powersave"; "" where absent, as in a VM)."""

    @property
    def memory_total(self) -> int:
        return sum(n.memory_total for n in self.nodes)

    @property
    def vram_total_mib(self) -> int:
        return sum(g.memory_total_mib for g in self.gpus)

    @property
    def vram_free_mib(self) -> int:
        return sum(max(g.memory_total_mib - g.memory_used_mib, 0) for g in self.gpus)

    def node(self, number: int) -> NumaNode:
        for n in self.nodes:
            if n.node == number:
                return n
        raise KeyError(number)

    def describe(self) -> list[str]:
        """Lines for a summary: nodes, GPUs, kernel settings."""
        lines = [n.describe() for n in self.nodes]
        lines += [g.describe() for g in self.gpus] or ["no NVIDIA GPU"]
        lines.append(
            f"numa_balancing {self.numa_balancing or '?'}, transparent hugepages "
            f"{self.transparent_hugepages or '?'}, governor {self.governor or 'not reported'}"
        )
        return lines


def parse_thp(text: str) -> str:
    """The selected mode of ``always [madvise] never``; "" when none is bracketed."""
    m = re.search(r"\[(\w+)\]", text)
    return m[1] if m else ""


def _physical_cores(root: Path, cpus: frozenset[int]) -> int | None:
    """Distinct sibling sets of *cpus* (``core_cpus_list``, else ``thread_siblings_list``);
    ``None`` when a CPU's topology is not in sysfs."""
    cores: set[frozenset[int]] = set()
    for cpu in cpus:
        topo = root / _CPU_DIR / f"cpu{cpu}" / "topology"
        text = read_text(topo / "core_cpus_list") or read_text(topo / "thread_siblings_list")
        if not text:
            return None
        try:
            cores.add(parse_cpu_list(text))
        except ConfigError:
            return None
    return len(cores) or None


def read_nodes(root: Path = Path("/")) -> tuple[NumaNode, ...]:
    """The NUMA nodes under *root*'s sysfs, by number; a kernel without NUMA support (no node
    directories) is one node 0 with every online CPU, its memory from ``/proc/meminfo``."""
    found: list[tuple[int, frozenset[int], dict[str, int]]] = []
    for entry in sorted((root / _NODE_DIR).glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        text = read_text(entry / "cpulist")
        if not text:
            continue  # a memory-only node (CXL, HBM): nothing to pin a server to
        number = int(entry.name[4:])
        found.append((number, parse_cpu_list(text), node_meminfo(number, root)))
    if not found:
        cpus = parse_cpu_list(read_text(root / _CPU_DIR / "online") or "0")
        host = read_meminfo(root / "proc/meminfo")
        found = [(0, cpus, {**host, "FilePages": host.get("Cached", 0)})]
    return tuple(
        NumaNode(
            node=number,
            cpus=cpus,
            physical_cores=_physical_cores(root, cpus),
            memory_total=mem.get("MemTotal", 0),
            memory_free=mem.get("MemFree", 0),
            page_cache=mem.get("FilePages", 0),
        )
        for number, cpus, mem in found
    )


def parse_gpu_query(text: str) -> list[tuple[int, str, int, int, str]]:
    """(index, name, MiB total, MiB used, bus id) of each row of ``nvidia-smi
    --query-gpu=index,name,memory.total,memory.used,pci.bus_id --format=csv,noheader,nounits``;
    rows that do not parse are skipped."""
    return [
        (int(index), name, _mib(total), _mib(used), bus)
        for index, name, total, used, bus in _rows(text, len(GPU_QUERY))
    ]


def sysfs_bus_id(bus_id: str) -> str:
    """nvidia-smi's ``00000000:3B:00.0`` as sysfs names the device: ``0000:3b:00.0``."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) != 3 or not re.fullmatch(r"[0-9a-f]+", parts[0]):
        return bus_id.strip().lower()
    domain, bus, slot = parts
    return f"{int(domain, 16):04x}:{bus}:{slot}"


def _node_number(text: str | None) -> int | None:
    m = re.fullmatch(r"\s*(\d+)\s*", text or "")
    return int(m[1]) if m else None  # -1, N/A, a range: the firmware does not say


def parse_topo_numa(text: str) -> dict[int, int | None]:
    """GPU index -> the "NUMA Affinity" of its row in ``nvidia-smi topo -m`` output (``None``
    where it says N/A or the column is missing)."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header: list[str] | None = None
    out: dict[int, int | None] = {}
    for line in lines:
        cells = [c.strip() for c in re.split(r"\t| {2,}", line)]
        named = [c for c in cells if c]
        if header is None:
            if "NUMA Affinity" in named:
                header = named
            continue
        if not named or not re.fullmatch(r"GPU\d+", named[0]):
            if out and (not line.strip() or line.startswith("Legend")):
                break
            continue
        values = named[1:]  # aligned with the header's named columns
        col = header.index("NUMA Affinity")
        out[int(named[0][3:])] = _node_number(values[col]) if col < len(values) else None
    return out


def read_gpus(
    root: Path = Path("/"),
    query: str | None = None,
    topo: str | None = None,
) -> tuple[GpuSlot, ...]:
    """The GPUs ``nvidia-smi`` lists (*query*: its output, ``None``: ask it), each with the node
    of its PCI device in *root*'s sysfs, else from ``nvidia-smi topo -m`` (*topo*: its output,
    ``None``: ask it when needed). No ``nvidia-smi``, or no GPU: ``()``."""
    if query is None:
        query = _smi(f"--query-gpu={','.join(GPU_QUERY)}", "--format=csv,noheader,nounits") or ""
    rows = parse_gpu_query(query)
    pci = root / _PCI_DIR
    nodes = {
        index: _node_number(read_text(pci / sysfs_bus_id(bus) / "numa_node")) if bus else None
        for index, _name, _total, _used, bus in rows
    }
    if rows and any(n is None for n in nodes.values()):
        from_topo = parse_topo_numa(topo if topo is not None else _smi("topo", "-m") or "")
        nodes = {i: n if n is not None else from_topo.get(i) for i, n in nodes.items()}
    return tuple(
        GpuSlot(index, name, total, used, bus, nodes[index])
        for index, name, total, used, bus in rows
    )


def read_topology(
    root: Path = Path("/"),
    *,
    gpu_query: str | None = None,
    gpu_topo: str | None = None,
) -> Topology:
    """This host's (or the recorded host under *root*'s) :class:`Topology`; *gpu_query* and
    *gpu_topo* are recorded ``nvidia-smi`` outputs (``None``: ask it now)."""
    return Topology(
        nodes=read_nodes(root),
        gpus=read_gpus(root, gpu_query, gpu_topo),
        numa_balancing=read_text(root / _NUMA_BALANCING) or "",
        transparent_hugepages=parse_thp(read_text(root / _THP) or ""),
        governor=read_text(root / _GOVERNOR) or "",
    )
