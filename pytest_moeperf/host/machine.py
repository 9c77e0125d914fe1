"""The host: CPU lists, NUMA nodes, and the fingerprint a measurement was taken on."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .gpus import nvidia_host
from .process import proc_stat

NODE_ROOT = Path("/sys/devices/system/node")


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPUs named by a kernel-style list such as ``"10-19,30-39"`` or ``"0"``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise ConfigError(
                f"CPU list {text!r}: {part!r} is not a CPU number or range "
                "(write e.g. '10-19,30-39')"
            ) from None
        if first < 0 or last < first:
            raise ConfigError(f"CPU list {text!r}: range {part!r} is empty or negative")
        cpus.update(range(first, last + 1))
    if not cpus:
        raise ConfigError(f"CPU list {text!r} names no CPU")
    return frozenset(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """The kernel-style list of *cpus*: ``{0, 1, 2, 5}`` -> ``"0-2,5"``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def numa_nodes() -> dict[int, frozenset[int]]:
    """NUMA node number -> its CPUs, from sysfs (one node 0 with every CPU when sysfs has none)."""
    nodes: dict[int, frozenset[int]] = {}
    for entry in NODE_ROOT.glob("node[0-9]*"):  # none where there is no such directory
        try:
            text = (entry / "cpulist").read_text()
        except OSError:
            continue
        if text.strip():
            nodes[int(entry.name[4:])] = parse_cpu_list(text)
    if not nodes:
        nodes[0] = frozenset(range(os.cpu_count() or 1))
    return dict(sorted(nodes.items()))


def online_cpus() -> frozenset[int]:
    """The CPUs this process may run on."""
    return frozenset(os.sched_getaffinity(0))


def process_cpus(pid: int) -> frozenset[int]:
    """The CPUs process *pid* is allowed on, read from ``/proc/<pid>/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return parse_cpu_list(line.split(":", 1)[1])
    raise OSError(f"/proc/{pid}/status has no Cpus_allowed_list")


def read_text(path: str | Path) -> str | None:
    """The stripped text of a (sysfs, procfs) file; ``None`` when it cannot be read."""
    try:
        return Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cpu_model() -> str:
    text = read_text("/proc/cpuinfo") or ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def read_meminfo(path: Path) -> dict[str, int]:
    """Bytes per field of the ``/proc/meminfo`` at *path* (``{}`` when unreadable)."""
    out: dict[str, int] = {}
    for line in (read_text(path) or "").splitlines():
        name, _, value = line.partition(":")
        if value.split() and value.split()[0].isdigit():
            out[name] = int(value.split()[0]) * 1024
    return out


def memory_available() -> int:
    """Bytes of memory this host can give new processes without swapping (``MemAvailable``;
    ``MemFree`` on kernels without it; 0 when unknown)."""
    info = read_meminfo(Path("/proc/meminfo"))
    return info.get("MemAvailable", info.get("MemFree", 0))


def parse_node_meminfo(text: str) -> dict[str, int]:
    """Bytes per field of a ``/sys/devices/system/node/nodeN/meminfo`` text
    (``Node 0 MemTotal:  196934028 kB``); the huge page counts (no unit) are left out."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*Node\s+\d+\s+(\S+):\s+(\d+)\s+kB\s*$", line)
        if m:
            out[m[1]] = int(m[2]) * 1024
    return out


def node_meminfo(node: int, root: Path = Path("/")) -> dict[str, int]:
    """Bytes per field of NUMA node *node*'s ``meminfo`` under *root* (``MemTotal``,
    ``MemFree``, ``FilePages``, ...; ``{}`` where the kernel shows none). When *node* is the
    host's only node, ``/proc/meminfo``'s figures instead (``FilePages`` as ``Cached + Buffers
    + SwapCached``): the host's memory is all that node's, and a VM's node file can count less
    of it (7.8 to 10.3 GiB of 23.5 on this project's VM, whose memory is plugged in after
    boot)."""
    base = root / "sys" / "devices" / "system" / "node"
    if [p.name for p in base.glob("node[0-9]*")] == [f"node{node}"]:
        host = read_meminfo(root / "proc" / "meminfo")
        if host.get("MemTotal"):
            cached = sum(host.get(k, 0) for k in ("Cached", "Buffers", "SwapCached"))
            return {**host, "FilePages": cached}
    return parse_node_meminfo(read_text(base / f"node{node}" / "meminfo") or "")


def file_digest(path: Path, limit: int) -> str:
    """sha256 of a file's first *limit* bytes, hex."""
    with path.open("rb") as fh:
        return hashlib.sha256(fh.read(limit)).hexdigest()


def host_fingerprint() -> dict[str, Any]:
    """Facts about this host that throughput depends on."""
    nodes = numa_nodes()
    nv = nvidia_host()
    gpu_rows = nv.gpus if nv else ()
    return {
        "hostname": platform.node(),
        "cpu_model": _cpu_model(),
        "cpus": os.cpu_count() or 0,
        "numa_nodes": {str(n): format_cpu_list(c) for n, c in nodes.items()},
        "memory_gib": round(read_meminfo(Path("/proc/meminfo")).get("MemTotal", 0) / 2**30, 1),
        "gpus": [g.name for g in gpu_rows],
        "gpu_memory": [f"{g.memory_mib} MiB" for g in gpu_rows],
        "gpu_driver": nv.driver if nv else "",
        "gpu_cuda": nv.cuda if nv else "",
        "gpu_compute": [g.compute_cap for g in gpu_rows],
        "gpu_pcie": [g.pcie for g in gpu_rows],
        "numa_balancing": read_text("/proc/sys/kernel/numa_balancing") or "",
        "kernel": platform.release(),
    }


HOST_KEYS: dict[str, type | tuple[type, ...]] = {
    "hostname": str,
    "cpu_model": str,
    "cpus": int,
    "numa_nodes": int,
    "gpus": list,
}
"""The facts of :func:`host_fingerprint` that name a host (a profile's ``host`` table holds
some of them; ``numa_nodes`` is their count)."""


def host_identity(fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of *fingerprint* that name its host (:data:`HOST_KEYS`), as a profile's
    ``host`` table writes them; those the fingerprint lacks are left out."""
    out: dict[str, Any] = {}
    for key in HOST_KEYS:
        value = fingerprint.get(key)
        if key == "numa_nodes" and isinstance(value, Mapping):
            value = len(value)
        if value not in (None, "", [], 0):
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def identity_differences(wanted: Mapping[str, Any], fingerprint: Mapping[str, Any]) -> list[str]:
    """One line per fact of *wanted* (a profile's ``host`` table) this host does not have:
    ``hostname: 'prod-01' asked, this host 'ci-7'``; empty when it is that host."""
    here = host_identity(fingerprint)
    return [
        f"{key}: {value!r} asked, this host {here.get(key)!r}"
        for key, value in wanted.items()
        if here.get(key) != value
    ]


def _cpu_times(cpus: Iterable[int] | None = None) -> tuple[int, int, int]:
    """(busy, total, steal) jiffies from /proc/stat: of all CPUs, or summed over *cpus*.
    ``guest`` time is already part of ``user`` and is not counted twice."""
    lines = (read_text("/proc/stat") or "cpu 0 0 0 1").splitlines()
    wanted = {"cpu"} if cpus is None else {f"cpu{c}" for c in cpus}
    busy = total = steal = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if name not in wanted:
            continue
        fields = [int(x) for x in rest.split()][:8]  # user .. steal
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        busy += sum(fields) - idle
        total += sum(fields)
        steal += fields[7] if len(fields) > 7 else 0
    return busy, total, steal


def _process_ticks(pid: int) -> int:
    """CPU time (user + system, clock ticks) process *pid* has used, its threads included."""
    fields = proc_stat(pid)  # utime and stime are fields 14 and 15 of proc(5)
    return int(fields[11]) + int(fields[12]) if fields else 0


class OtherWork:
    """Measures, between :meth:`start` and :meth:`share`, the share of the CPUs' time (of
    *cpus*, the CPUs a server is pinned to; of all CPUs when ``None``) that processes other
    than *ours* keep busy, and the share the hypervisor stole (:meth:`steal`): other tenants
    on the CPUs we measure on mean noisy numbers. Our own CPU time is subtracted wherever it
    ran, so the share on pinned CPUs is a lower bound when we are not pinned there."""

    def __init__(self, *ours: int, cpus: Iterable[int] | None = None) -> None:
        self.ours = (os.getpid(), *ours)
        self.cpus = None if cpus is None else frozenset(cpus)
        self.start()

    def _now(self) -> tuple[int, int, int, int]:
        busy, total, steal = _cpu_times(self.cpus)
        return busy, total, steal, sum(_process_ticks(p) for p in self.ours)

    def start(self) -> None:
        self._begin = self._now()
        self._end: tuple[int, int, int, int] | None = None

    def _delta(self) -> tuple[int, ...]:
        if self._end is None:
            self._end = self._now()
        return tuple(b - a for a, b in zip(self._begin, self._end, strict=True))

    def share(self) -> float:
        """Other work's share of the CPUs' time (0..1), steal not counted. The first call of
        :meth:`share` or :meth:`steal` ends the span."""
        busy, total, steal, ours = self._delta()
        return max(0.0, (busy - steal - ours) / total) if total > 0 else 0.0

    def steal(self) -> float:
        """The share of the CPUs' time the hypervisor gave to other guests (0..1)."""
        _busy, total, steal, _ours = self._delta()
        return max(0.0, steal / total) if total > 0 else 0.0

    def idle(self) -> float:
        """The share of the CPUs' time nothing ran (0..1): a server whose threads cover its
        CPUs leaves them idle only when it is stopped or throttled."""
        busy, total, _steal, _ours = self._delta()
        return max(0.0, (total - busy) / total) if total > 0 else 0.0


def busy_fraction(seconds: float = 0.25) -> float:
    """The share of all CPUs' time spent busy over the next *seconds* (0..1): other work on
    the host while nothing of ours runs means measurements will be noisy."""
    b0, t0, _ = _cpu_times()
    time.sleep(seconds)
    b1, t1, _ = _cpu_times()
    return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0
