"""The servers a session keeps alive, and the scheduler that decides which may live together.

A server starts only where its memory fits beside the ones alive: the host's RAM (its
``MemAvailable`` when the pool is made, or ``--moeperf-host-memory``) and each GPU's memory.
Before a start that would not fit, idle servers are stopped, least recently used first;
servers a verdict is measuring right now (:meth:`ServerPool.using`) are never stopped for
another. Two sides that cannot live together are measured across restarts
(:func:`pytest_moeperf.run.rounds.measure_rounds`)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ServerError
from ..host.gpus import nvidia_host
from ..host.machine import memory_available
from ..host.placement import Placement, node_pages, page_cache_kib
from ..llama.build import Build
from ..llama.footprint import GIB, Footprint
from ..llama.server import LlamaServer
from ..llama.startup import StartupFinding, scan_startup
from .profiles import Configuration, HostLacks

ServerKey = tuple[str, str, str]  # (profile, configuration, build label)
GPU_MEMORY_SHARE = 0.95
"""Share of a GPU's memory the servers on it may be estimated to fill."""


@dataclass
class ServerRecord:
    """A started server and what it was used for."""

    server: LlamaServer
    configuration: Configuration
    build: Build
    label: str
    """The build's label in this session (``b11434``, or a profile's ``builds`` key)."""
    gpus: frozenset[int] = frozenset()
    """The GPUs its server may use, locked while it measures."""
    placement: Placement | None = None
    """Where a NUMA-pinned server's memory lies (read once, after its warmup)."""
    footprint: Footprint | None = None
    """The memory it was estimated to hold when the scheduler let it start."""
    warmed: bool = False
    """Whether this process has served its warmup request (each new process needs one)."""


def _last_start(log: Path) -> str:
    """The part of a server log written since its last start (each start writes a
    ``# moeperf:`` command line first; a restarted server appends to the same log)."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return text[text.rfind("# moeperf:") :] if "# moeperf:" in text else text


@dataclass
class Capacity:
    """What the servers together may hold: RAM bytes, and memory bytes of each GPU."""

    ram: int
    gpu: dict[int, int] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"RAM {self.ram / GIB:.2f} GiB"]
        parts += [f"GPU{g} {b / GIB:.1f} GiB" for g, b in sorted(self.gpu.items())]
        return ", ".join(parts)


def held(records: Iterable[tuple[Footprint, frozenset[int]]]) -> tuple[int, dict[int, int]]:
    """RAM and per-GPU memory that servers of these footprints hold together: private RAM
    adds up, a mapped model file's pages count once (the largest share any server keeps),
    VRAM is spread evenly over each server's GPUs."""
    private = 0
    shared: dict[str, int] = {}
    vram: dict[int, int] = {}
    for fp, gpus in records:
        private += fp.private
        shared[fp.model] = max(shared.get(fp.model, 0), fp.shared)
        for g in gpus:
            vram[g] = vram.get(g, 0) + fp.vram // max(len(gpus), 1)
    return private + sum(shared.values()), vram


class ServerPool:
    """Running servers by (profile, configuration, build label), started and stopped under
    the memory capacity, with what each printed at start and how long each start took."""

    def __init__(
        self,
        capacity: Capacity | Callable[[], Capacity],
        *,
        report: Callable[[str], None],
    ) -> None:
        self._capacity = capacity
        """The capacity, or how to read it when a server first asks (``host_capacity``)."""
        self.report = report
        self.servers: dict[ServerKey, ServerRecord] = {}
        self.findings: dict[ServerKey, list[StartupFinding]] = {}
        """Performance warnings each server printed at its (last) start."""
        self.starts: dict[ServerKey, list[float]] = {}
        """Seconds each start of a server took until ``/health`` answered (its load time)."""
        self._touched: dict[ServerKey, float] = {}
        self._in_use: dict[ServerKey, int] = {}

    @staticmethod
    def host_capacity(ram: int | None, gpu_memory: dict[int, int] | None = None) -> Capacity:
        """*ram* bytes (``None``: this host's ``MemAvailable`` now; no limit where the kernel
        does not say) and *gpu_memory* (bytes per GPU, of which :data:`GPU_MEMORY_SHARE` is
        usable; ``None``: the GPUs nvidia-smi lists)."""
        if gpu_memory is None:
            nv = nvidia_host()
            gpu_memory = {g.index: g.memory_mib * 2**20 for g in nv.gpus} if nv else {}
        return Capacity(
            ram=ram if ram is not None else (memory_available() or sys.maxsize),
            gpu={g: int(b * GPU_MEMORY_SHARE) for g, b in gpu_memory.items()},
        )

    @property
    def capacity(self) -> Capacity:
        if not isinstance(self._capacity, Capacity):
            self._capacity = self._capacity()
        return self._capacity

    def alive(self) -> dict[ServerKey, ServerRecord]:
        return {k: r for k, r in self.servers.items() if r.server.is_running()}

    def running(self, key: ServerKey) -> ServerRecord | None:
        rec = self.servers.get(key)
        if rec is not None and rec.server.is_running():
            self._touched[key] = time.monotonic()
            return rec
        return None

    def fits(self, needs: Iterable[tuple[Footprint, frozenset[int]]]) -> bool:
        """Whether servers of these footprints fit the capacity together."""
        ram, vram = held(needs)
        if ram > self.capacity.ram:
            return False
        return all(used <= self.capacity.gpu.get(g, used) for g, used in vram.items())

    @contextlib.contextmanager
    def using(self, keys: Iterable[ServerKey]) -> Iterator[None]:
        """The servers of *keys* are measured in this block: none is stopped to make room."""
        held_keys = list(keys)
        for k in held_keys:
            self._in_use[k] = self._in_use.get(k, 0) + 1
        try:
            yield
        finally:
            for k in held_keys:
                self._in_use[k] -= 1
                if not self._in_use[k]:
                    del self._in_use[k]

    def make_room(self, key: ServerKey, need: Footprint, gpus: frozenset[int], name: str) -> None:
        """Stop idle servers, least recently used first, until one of *need* fits beside the
        rest. :class:`HostLacks` when it cannot fit even alone; :class:`ServerError` when
        only servers in use stand in the way."""
        if not self.fits([(need, gpus)]):
            raise HostLacks(
                f"{name} needs {need.describe()} (estimated); this host has "
                f"{self.capacity.describe()} for servers: give the servers more memory "
                "(--moeperf-host-memory, the gate's --host-memory, MOEPERF_HOST_MEMORY), or set "
                "ram_gib / vram_gib in the configuration if the estimate is wrong"
            )
        alive = {k: r for k, r in self.alive().items() if k != key}
        busy = {k: r for k, r in alive.items() if k in self._in_use}
        if not self.fits(
            [(need, gpus)] + [(r.footprint, r.gpus) for r in busy.values() if r.footprint]
        ):  # stopping idle servers would not help: say so before stopping any
            names = ", ".join(r.server.name for r in busy.values())
            raise ServerError(
                f"{name} ({need.describe()}) does not fit beside the servers being measured "
                f"({names}; {self.capacity.describe()} for servers)"
            )

        def together() -> list[tuple[Footprint, frozenset[int]]]:
            return [(need, gpus)] + [
                (r.footprint, r.gpus) for r in alive.values() if r.footprint is not None
            ]

        for k in sorted(alive, key=lambda k: self._touched.get(k, 0.0)):
            if self.fits(together()):
                return
            if k in self._in_use:
                continue
            self.stop(k, why=f"to make room for {name}")
            del alive[k]
        # every idle server is stopped now, and the ones in use leave room (checked above)

    def start(self, key: ServerKey, server: LlamaServer, rec: ServerRecord) -> ServerRecord:
        """Start *server* as *rec* (after :meth:`make_room`), read its startup warnings and
        record its load time."""
        server.start()
        self.findings[key] = scan_startup(_last_start(server.log_path))
        self.servers[key] = rec
        self.starts.setdefault(key, []).append(server.ready_seconds or 0.0)
        self._touched[key] = time.monotonic()
        return rec

    def stop(self, key: ServerKey, why: str = "") -> None:
        """Stop the server of *key* (one that died by itself is reaped and its log told)."""
        rec = self.servers.get(key)
        if rec is None:
            return
        was_running = rec.server.is_running()
        rec.server.stop()
        if was_running:
            self.report(f"moeperf: stopped {rec.server.name}" + (f" ({why})" if why else ""))

    def forget(self, which: Callable[[ServerKey], bool]) -> None:
        """Drop what the pool keeps of the (stopped) servers *which* selects: their load
        times and startup warnings (a gate's sides about to name other builds)."""
        for table in (self.starts, self.findings, self._touched):
            for k in [k for k in table if which(k)]:
                del table[k]

    def stop_all(self, keep: Callable[[ServerKey], bool] = lambda k: False) -> None:
        """Stop every running server except those *keep* selects."""
        for key in list(self.servers):
            if not keep(key):
                self.stop(key)

    def placement(
        self, key: ServerKey, rec: ServerRecord, node: int, min_share: float
    ) -> Placement:
        """Where the server's model and heap pages lie, from ``/proc/PID/numa_maps``; a share
        on *node* below *min_share* becomes a startup finding of the server (a warning,
        or a failure with strict warnings), with a note on page cache that crowds the node."""
        model = os.path.realpath(rec.server.model)
        pages = node_pages(rec.server.pid or 0, model)
        if pages is None:
            return Placement(node, None, "no /proc/PID/numa_maps on this host")
        share = pages.share(node)
        text = pages.describe(node)
        cache, total = page_cache_kib(node)
        placed = Placement(node, share, text, dict(pages.model), dict(pages.anon), cache, total)
        self.report(f"moeperf: {rec.server.name} memory {text}")
        if share is not None and share < min_share:
            crowded = ""
            if total and cache > total / 2:
                crowded = (
                    f"; page cache holds {cache / 2**20:.1f} of node {node}'s "
                    f"{total / 2**20:.1f} GiB: drop it before the run "
                    "(sync; echo 1 > /proc/sys/vm/drop_caches)"
                )
            self.findings.setdefault(key, []).append(
                StartupFinding(
                    id="numa-placement",
                    line=f"{100 * share:.0f} % of the server's memory {text}",
                    line_no=0,
                    advice=(
                        f"below {100 * min_share:.0f} % "
                        "(--moeperf-numa-min-share): the server reads memory across nodes; "
                        "start it cold on its node (no other process touching the model "
                        f"first), or use -lm none so the copy is made on node {node}{crowded}"
                    ),
                )
            )
        return placed
