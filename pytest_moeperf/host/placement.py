"""Where a running process really is: the CPUs each of its threads may run on
(``/proc/PID/task/*/status``) and the NUMA node of its memory (``/proc/PID/numa_maps``).

A server pinned at start can drift: llama.cpp's ``--numa distribute|isolate`` re-pins its
compute threads, and the kernel places pages where they are first touched, so a model read by
a thread on the wrong node lives there for the whole run (ADR-0042's node 0 vs node 1
decision is about exactly this)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .machine import format_cpu_list, node_meminfo, parse_cpu_list


@dataclass(frozen=True)
class Thread:
    tid: int
    name: str
    cpus: frozenset[int]

    def describe(self) -> str:
        return f"thread {self.tid} ({self.name!r}) on CPUs {format_cpu_list(self.cpus)}"


def parse_status(text: str) -> tuple[str, frozenset[int] | None]:
    """``Name`` and ``Cpus_allowed_list`` of a ``/proc/.../status`` file."""
    name, cpus = "", None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Cpus_allowed_list":
            cpus = parse_cpu_list(value.strip())
    return name, cpus


def threads(pid: int, proc: Path = Path("/proc")) -> list[Thread]:
    """Every thread of *pid* with the CPUs it may run on (threads that end while being read
    are left out); ``[]`` when the process is gone."""
    out: list[Thread] = []
    try:
        tids = sorted(int(p.name) for p in (proc / str(pid) / "task").iterdir() if p.name.isdigit())
    except OSError:
        return out
    for tid in tids:
        with contextlib.suppress(OSError):
            name, cpus = parse_status((proc / str(pid) / "task" / str(tid) / "status").read_text())
            if cpus is not None:
                out.append(Thread(tid, name, cpus))
    return out


def stray_threads(pid: int, cpus: frozenset[int], proc: Path = Path("/proc")) -> list[Thread]:
    """The threads of *pid* that may run on a CPU outside *cpus* (a thread narrowed to a
    subset of them, as ``--numa isolate`` does, is not stray)."""
    return [t for t in threads(pid, proc) if not t.cpus <= cpus]


_NODE = re.compile(r"^N(\d+)=(\d+)$")


@dataclass
class NodePages:
    """Bytes of a process's memory per NUMA node, in two kinds: pages of *model* (a mapped
    file: ``mmap`` loading) and anonymous pages (the heap: ``-lm none`` copies, KV cache,
    compute buffers)."""

    model: dict[int, int] = field(default_factory=dict)
    anon: dict[int, int] = field(default_factory=dict)

    @staticmethod
    def _share(pages: dict[int, int], node: int) -> float | None:
        total = sum(pages.values())
        return pages.get(node, 0) / total if total else None

    def share(self, node: int) -> float | None:
        """The share of model and anonymous bytes together that lie on *node*."""
        both = {n: self.model.get(n, 0) + self.anon.get(n, 0) for n in {*self.model, *self.anon}}
        return self._share(both, node)

    def describe(self, node: int) -> str:
        parts = []
        for what, pages in (("model file", self.model), ("anonymous", self.anon)):
            share = self._share(pages, node)
            if share is not None:
                mib = sum(pages.values()) / 2**20
                parts.append(f"{what} {100 * share:.0f} % of {mib:.0f} MiB")
        return f"on node {node}: " + ("; ".join(parts) or "no resident pages")


@dataclass(frozen=True)
class Placement:
    """Where a NUMA-pinned server's memory lies, read once after its warmup: the share of its
    model file's and anonymous pages on its *node*, those bytes per node, and how much of the
    node the page cache holds (a crowded node is why a copy lands elsewhere)."""

    node: int
    share: float | None
    text: str
    model_bytes: dict[int, int] = field(default_factory=dict)
    anon_bytes: dict[int, int] = field(default_factory=dict)
    page_cache_kib: int | None = None
    node_memory_kib: int | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            **asdict(self),
            "model_bytes": {str(n): b for n, b in self.model_bytes.items()},
            "anon_bytes": {str(n): b for n, b in self.anon_bytes.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Placement:
        """A placement from its stored form; ``ValueError`` or ``TypeError`` when malformed."""

        def per_node(value: Any) -> dict[int, int]:
            return {int(n): int(b) for n, b in dict(value or {}).items()}

        share = d.get("share")
        cache, total = d.get("page_cache_kib"), d.get("node_memory_kib")
        return cls(
            node=int(d["node"]),
            share=None if share is None else float(share),
            text=str(d.get("text", "")),
            model_bytes=per_node(d.get("model_bytes")),
            anon_bytes=per_node(d.get("anon_bytes")),
            page_cache_kib=None if cache is None else int(cache),
            node_memory_kib=None if total is None else int(total),
        )


def parse_numa_maps(text: str, model: str | None) -> NodePages:
    """Resident bytes per node of the mappings of the file *model* and of anonymous memory in
    a ``/proc/PID/numa_maps`` text (``N<node>=<pages>`` times ``kernelpagesize_kB``)."""
    placed = NodePages()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        page = 4096
        nodes: dict[int, int] = {}
        target: dict[int, int] | None = None
        for f in fields[2:]:
            if f.startswith("kernelpagesize_kB="):
                with contextlib.suppress(ValueError):
                    page = int(f.split("=", 1)[1]) * 1024
            elif m := _NODE.match(f):
                nodes[int(m[1])] = int(m[2])
        files = [f[5:] for f in fields[2:] if f.startswith("file=")]
        if files and model is not None and files[0] == model:
            target = placed.model
        elif not files and any(f.startswith("anon=") for f in fields[2:]):
            target = placed.anon
        if target is None:
            continue
        for node, pages in nodes.items():
            target[node] = target.get(node, 0) + pages * page
    return placed


def node_pages(pid: int, model: str | None, proc: Path = Path("/proc")) -> NodePages | None:
    """:func:`parse_numa_maps` of a running process; ``None`` where the kernel has no
    ``numa_maps`` (no NUMA support) or the process is gone."""
    try:
        text = (proc / str(pid) / "numa_maps").read_text()
    except OSError:
        return None
    return parse_numa_maps(text, model)


def page_cache_kib(node: int, root: Path = Path("/")) -> tuple[int, int]:
    """(``FilePages``, ``MemTotal``) of *node* in KiB
    (:func:`~pytest_moeperf.host.machine.node_meminfo`), ``(0, 0)`` where unknown: page cache
    that fills a node leaves a freshly loaded model less room there."""
    values = node_meminfo(node, root)
    return values.get("FilePages", 0) // 1024, values.get("MemTotal", 0) // 1024
