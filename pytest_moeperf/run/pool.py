"""The servers a session keeps alive, and the scheduler that decides which may live together.

A server starts only where its memory fits beside the ones alive: the host's RAM (its
``MemAvailable`` when the pool first needs it, or ``--moeperf-host-memory``) and each GPU's
memory free now (what other processes hold, read from nvidia-smi before each start, is not
the servers'). Before a start that would not fit, idle servers are stopped, least recently
used first; servers a verdict is measuring right now (:meth:`ServerPool.using`) are never
stopped for another. Two sides that cannot live together are measured across restarts
(:func:`pytest_moeperf.run.rounds.measure_rounds`).

Every pytest-moeperf process on the host shares one memory ledger
(:mod:`pytest_moeperf.host.ledger`): a server's estimate is written there before it starts
and removed when it stops, and a start also counts the other processes' servers. Where those
stand in the way, this process stops its own idle servers and then waits (the others stop
their idle servers for a waiting process when their measurement ends) until the memory is
free, at most :data:`MEMORY_WAIT` seconds. Whether two sides are measured together or across
restarts depends on the host alone, never on what another process holds at that moment."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from math import inf
from pathlib import Path

from ..config.profiles import Configuration, HostLacks
from ..errors import ServerError
from ..host.gpus import GpuRoom, nvidia_host, read_gpu_room
from ..host.ledger import Charge, Entry, MemoryLedger, parent
from ..host.machine import memory_available
from ..host.placement import Placement, node_pages, page_cache_kib
from ..llama.build import Build
from ..llama.footprint import GIB, Footprint
from ..llama.server import LlamaServer
from ..llama.startup import StartupFinding, offload_failure, scan_startup
from ..store.journal import Journal, ServerKey

MEMORY_WAIT = 1800.0
"""Seconds a server may wait for memory that other processes' servers hold (another xdist
worker, a gate beside the suite) before its test fails naming them."""
LEDGER_POLL = 0.5
"""Seconds between looks at the ledger while waiting."""
GpuReader = Callable[
    [Mapping[int, Mapping[int, int]], Callable[[int], bool]], dict[int, GpuRoom] | None
]
"""How the pool reads each GPU's room now (:func:`pytest_moeperf.host.gpus.read_gpu_room`)."""


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


def last_start(log: Path) -> str:
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
    gpu_notes: dict[int, str] = field(default_factory=dict)
    """Who else holds memory on each GPU (:meth:`GpuRoom.describe`), for the messages."""
    ram_free_now: bool = False
    """*ram* is the host's ``MemAvailable`` when it was read: servers running then (other
    processes') are not in it and are given back."""

    def describe(self) -> str:
        parts = [f"RAM {self.ram / GIB:.2f} GiB"]
        parts += [f"GPU{g} {b / GIB:.2f} GiB" for g, b in sorted(self.gpu.items())]
        return ", ".join(parts)

    def take_rooms(self, rooms: Mapping[int, GpuRoom]) -> None:
        """Each GPU's room now, and who else holds memory there."""
        self.gpu = {g: r.room for g, r in rooms.items()}
        self.gpu_notes = {g: r.describe() for g, r in rooms.items() if r.room < r.total}


def charge_of(fp: Footprint, gpus: frozenset[int]) -> Charge:
    return Charge(fp.private, fp.shared, fp.model, tuple(sorted(fp.per_gpu(gpus).items())))


def held(
    records: Iterable[tuple[Footprint, frozenset[int]]], others: Iterable[Charge] = ()
) -> tuple[int, dict[int, int]]:
    """RAM and per-GPU memory that servers of these footprints (and of the other processes'
    *others*) hold together: private RAM adds up, a mapped model file's pages count once (the
    largest share any server keeps), VRAM as each footprint places it on its GPUs."""
    private = 0
    shared: dict[str, int] = {}
    vram: dict[int, int] = {}
    for c in [*(charge_of(fp, gpus) for fp, gpus in records), *others]:
        private += c.private
        shared[c.model] = max(shared.get(c.model, 0), c.shared)
        for g, b in c.vram:
            vram[g] = vram.get(g, 0) + b
    return private + sum(shared.values()), vram


def _ledger_key(key: ServerKey) -> str:
    return "|".join(key)


class ServerPool:
    """Running servers by (profile, configuration, build label), started and stopped under
    the memory capacity, with what each printed at start and how long each start took.

    A pool that reads the host's capacity (given a callable) shares the host's memory ledger
    and reads each GPU's room before each start; one given a fixed :class:`Capacity` does
    neither (the GPUs' room, when given a *gpu_reader*)."""

    def __init__(
        self,
        capacity: Capacity | Callable[[], Capacity],
        *,
        report: Callable[[str], None],
        gpu_reader: GpuReader | None = None,
        journal: Journal | None = None,
    ) -> None:
        self._capacity = capacity
        """The capacity, or how to read it when a server first asks (``host_capacity``)."""
        reads_host = not isinstance(capacity, Capacity)
        self.ledger = MemoryLedger() if reads_host else None
        """The memory ledger shared with the host's other pytest-moeperf processes."""
        self._gpu_reader = gpu_reader if gpu_reader is not None or not reads_host else read_gpu_room
        self.report = report
        self.servers: dict[ServerKey, ServerRecord] = {}
        self.journal = journal if journal is not None else Journal()
        """The run's journal, where each start's load time and startup warnings are appended."""
        self._touched: dict[ServerKey, float] = {}
        self._in_use: Counter[ServerKey] = Counter()

    @staticmethod
    def host_capacity(ram: int | None) -> Capacity:
        """*ram* bytes (``None``: this host's ``MemAvailable`` now; no limit where the kernel
        does not say) and what nvidia-smi says is free on each GPU now
        (:func:`~pytest_moeperf.host.gpus.read_gpu_room`)."""
        cap = Capacity(
            ram=ram if ram is not None else (memory_available() or sys.maxsize),
            ram_free_now=ram is None,
        )
        if nvidia_host() is not None:
            rooms = read_gpu_room({})
            if rooms:
                cap.take_rooms(rooms)
        return cap

    @property
    def capacity(self) -> Capacity:
        if not isinstance(self._capacity, Capacity):
            cap = self._capacity()
            if cap.ram_free_now and cap.ram < sys.maxsize and self.ledger is not None:
                # other processes' running servers are already out of MemAvailable
                me = os.getpid()
                cap.ram += sum(
                    e.charge.private for e in self.ledger.entries() if e.server and e.owner != me
                )
            self._capacity = cap
        return self._capacity

    def counted(self, entries: Iterable[Entry]) -> list[Charge]:
        """Other processes' ledger *entries* as this pool counts them. Against the host's free
        memory, all of them: every server holds real memory. Against a RAM budget given by hand
        (``--moeperf-host-memory``: what *this session's* servers may hold together), the RAM
        of this session's own processes only (its xdist workers, children of one controller),
        so that another session on the host (a gate beside the suite, a test's inner run) is
        not charged to this one's budget; their VRAM counts always (the cards are shared)."""
        if self.capacity.ram_free_now:
            return [e.charge for e in entries]
        # the pid that stands for this pytest session: an xdist worker's controller, else us
        root = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()
        out = []
        for e in entries:
            ours = e.owner == root or parent(e.owner) == root
            out.append(e.charge if ours else Charge(model=e.charge.model, vram=e.charge.vram))
        return out

    def refresh_gpus(self) -> None:
        """Read each GPU's room now (before a start): the card's memory less what everything
        but pytest-moeperf's servers holds (their own memory is charged as estimated)."""
        if self._gpu_reader is None:
            return
        entries = self.ledger.entries() if self.ledger is not None else []
        ours = {e.server: e.charge.vram_by_gpu() for e in entries if e.server}
        for rec in self.servers.values():  # without a ledger: this pool's own
            pid = rec.server.pid
            if pid and rec.footprint is not None and rec.server.is_running():
                ours.setdefault(pid, rec.footprint.per_gpu(rec.gpus))
        owners = {e.owner for e in entries} | {os.getpid()}
        rooms = self._gpu_reader(ours, lambda pid: parent(pid) in owners)
        if rooms:
            self.capacity.take_rooms(rooms)

    def alive(self) -> dict[ServerKey, ServerRecord]:
        return {k: r for k, r in self.servers.items() if r.server.is_running()}

    def running(self, key: ServerKey) -> ServerRecord | None:
        rec = self.servers.get(key)
        if rec is not None and rec.server.is_running():
            self._touched[key] = time.monotonic()
            return rec
        return None

    def fits(
        self, needs: Iterable[tuple[Footprint, frozenset[int]]], others: Sequence[Charge] = ()
    ) -> bool:
        """Whether servers of these footprints fit the capacity together (beside the other
        processes' *others*)."""
        ram, vram = held(needs, others)
        if ram > self.capacity.ram:
            return False
        return all(used <= self.capacity.gpu.get(g, used) for g, used in vram.items())

    def _lacks(self, name: str, need: Footprint, gpus: frozenset[int]) -> str:
        """Why a server of *need* cannot fit even alone, and what to do."""
        cap = self.capacity
        short = [
            (g, b) for g, b in sorted(need.per_gpu(gpus).items()) if g in cap.gpu and b > cap.gpu[g]
        ]
        if short and held([(need, gpus)])[0] <= cap.ram:
            g, b = short[0]
            note = cap.gpu_notes.get(g)
            return (
                f"{name} needs {b / GIB:.2f} GiB on GPU{g} (estimated: {need.describe()}); "
                f"GPU{g} has {cap.gpu[g] / GIB:.2f} GiB free for servers"
                + (f" ({note})" if note else "")
                + ": free that GPU, give the configuration others (gpus = [...], -ts, -dev), "
                "or set vram_gib in the configuration if the estimate is wrong"
            )
        return (
            f"{name} needs {need.describe()} (estimated); this host has "
            f"{cap.describe()} for servers: give the servers more memory "
            "(--moeperf-host-memory, the gate's --host-memory, MOEPERF_HOST_MEMORY), or set "
            "ram_gib / vram_gib in the configuration if the estimate is wrong"
        )

    @contextlib.contextmanager
    def using(self, keys: Iterable[ServerKey]) -> Iterator[None]:
        """The servers of *keys* are measured in this block: none is stopped to make room.
        When nothing is measured any more and another process waits for memory, idle servers
        are stopped for it."""
        held_keys = Counter(keys)
        self._in_use += held_keys
        try:
            yield
        finally:
            self._in_use -= held_keys  # a key whose count reaches 0 is dropped
            if not self._in_use:
                self.yield_to_waiters()

    def yield_to_waiters(self) -> None:
        """Stop idle servers (not those in use), least recently used first, while another
        process waits for memory that does not fit beside everything the ledger holds, and
        stopping them lets it fit."""
        if self.ledger is None:
            return
        with self.ledger.book() as book:
            waiting = book.waiting_others()
            charges = {e.key: e.charge for e in book.mine()}
            others = self.counted(book.others())
        if not waiting:
            return
        w = waiting[0]
        idle = [k for k in self.alive() if k not in self._in_use]
        staying = [c for k, c in charges.items() if k not in {_ledger_key(i) for i in idle}]
        if not self.fits([], [*others, *staying, w.charge]):
            return  # it waits for more than this process could give
        for k in sorted(idle, key=lambda k: self._touched.get(k, 0.0)):
            if self.fits([], [*others, *charges.values(), w.charge]):
                return
            self.stop(k, why=f"{w.name} of pid {w.owner} waits for memory")
            charges.pop(_ledger_key(k), None)

    def make_room(self, key: ServerKey, need: Footprint, gpus: frozenset[int], name: str) -> None:
        """Stop idle servers, least recently used first, until one of *need* fits beside the
        rest, then reserve it in the ledger, waiting for other processes' servers where they
        stand in the way. :class:`HostLacks` when it cannot fit even alone; :class:`ServerError`
        when only servers in use stand in the way, or after :data:`MEMORY_WAIT` seconds."""
        self.refresh_gpus()
        if not self.fits([(need, gpus)]):
            raise HostLacks(self._lacks(name, need, gpus), "ram_gib / vram_gib (free memory)")
        alive = {k: r for k, r in self.alive().items() if k != key}
        busy = {k: r for k, r in alive.items() if k in self._in_use}

        def together(recs: Iterable[ServerRecord]) -> list[tuple[Footprint, frozenset[int]]]:
            return [(need, gpus)] + [(r.footprint, r.gpus) for r in recs if r.footprint is not None]

        if not self.fits(together(busy.values())):
            # stopping idle servers would not help: say so before stopping any
            names = ", ".join(r.server.name for r in busy.values())
            raise ServerError(
                f"{name} ({need.describe()}) does not fit beside the servers being measured "
                f"({names}; {self.capacity.describe()} for servers)"
            )
        for k in sorted(alive, key=lambda k: self._touched.get(k, 0.0)):
            if self.fits(together(alive.values())):
                break
            if k in self._in_use:
                continue
            self.stop(k, why=f"to make room for {name}")
            del alive[k]
        # every idle server that stood in the way is stopped, the ones in use leave room
        if self.ledger is not None:
            self._reserve(key, need, gpus, name)

    def _stop_idle(self, why: str) -> bool:
        """Stop every idle server of this pool; whether there was one."""
        idle = [k for k in self.alive() if k not in self._in_use]
        for k in idle:
            self.stop(k, why=why)
        return bool(idle)

    def _reserve(self, key: ServerKey, need: Footprint, gpus: frozenset[int], name: str) -> None:
        """Write *need* into the ledger once it fits beside this pool's servers and the other
        processes' (a waiter that would fit now, but not beside this one, goes first); until
        then stop this pool's idle servers, then wait."""
        assert self.ledger is not None
        mine = charge_of(need, gpus)
        deadline = time.monotonic() + MEMORY_WAIT
        waited = False
        try:
            while True:
                blocking = self._booked(key, mine, name, waited=waited)
                if blocking is None:
                    return
                if not waited:
                    waited = True
                    if self._stop_idle(why=f"{name} waits for memory other processes hold"):
                        continue
                    self.report(
                        f"moeperf: {name} waits for memory that other processes' servers hold: "
                        + "; ".join(blocking)
                    )
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"{name} ({need.describe()}) waited {MEMORY_WAIT:.0f} s for memory that "
                        f"other processes' servers hold ({'; '.join(blocking) or 'none left'}; "
                        f"{self.capacity.describe()} for servers): run fewer xdist workers or "
                        "give the servers more memory (--moeperf-host-memory)"
                    )
                time.sleep(LEDGER_POLL)
        finally:
            if waited:
                with self.ledger.book() as book:
                    book.unwait()

    def _booked(self, key: ServerKey, mine: Charge, name: str, *, waited: bool) -> list[str] | None:
        """One look at the ledger: *mine* booked where it fits beside this pool's servers and
        the other processes' and no one waiting longer would fit now but not beside it
        (``None``); else what holds the memory, *mine* among the waiters from the first look."""
        assert self.ledger is not None
        own = [
            charge_of(r.footprint, r.gpus)
            for k, r in self.alive().items()
            if k != key and r.footprint is not None
        ]
        with self.ledger.book() as book:
            others = self.counted(book.others())
            everyone = [*others, *(e.charge for e in book.mine())]
            since = min((w.since for w in book.waiters if w.owner == book.me), default=inf)
            ahead = [
                w
                for w in book.waiting_others()
                if w.since < since
                and self.fits([], [*everyone, w.charge])
                and not self.fits([], [*everyone, w.charge, mine])
            ]
            if not ahead and self.fits([], [*others, *own, mine]):
                book.put(_ledger_key(key), name, mine)
                book.unwait()
                return None
            if not waited:
                book.wait(name, mine)
            blocking = [f"{w.name} of pid {w.owner}, waiting longer" for w in ahead]
            return blocking + [e.describe() for e in book.others()]

    def unreserve(self, key: ServerKey) -> None:
        """Take back the ledger entry of a server that did not start."""
        if self.ledger is not None:
            self.ledger.release(_ledger_key(key))

    def start(self, key: ServerKey, server: LlamaServer, rec: ServerRecord) -> ServerRecord:
        """Start *server* as *rec* (after :meth:`make_room`), read its startup warnings and
        record its load time; its ledger entry gets the server's pid (or goes, when the start
        fails). A server on GPUs whose log says, since this start, that it offloaded no layer
        is stopped: a :class:`ServerError` with that line (a CUDA build that found no usable
        GPU measures the CPU); an earlier start's lines in the same log do not count."""
        try:
            server.start()
        except BaseException:
            self.unreserve(key)
            raise
        if self.ledger is not None and server.pid:
            self.ledger.started(_ledger_key(key), server.pid)
        startup = last_start(server.log_path)
        self.journal.found(key, scan_startup(startup), start=True)
        self.servers[key] = rec
        self.journal.started(key, server.ready_seconds or 0.0)
        self._touched[key] = time.monotonic()
        line = offload_failure(startup, rec.configuration.server_args) if rec.gpus else None
        if line is not None:
            self.stop(key, "offloaded nothing")
            raise ServerError(
                f"{server.name} was asked to use GPUs but its log says {line!r} "
                f"(log {server.log_path}): build {rec.label} found no usable GPU; check "
                "CUDA_VISIBLE_DEVICES, the driver (nvidia-smi) and the build's CUDA backend"
            )
        return rec

    def stop(self, key: ServerKey, why: str = "") -> None:
        """Stop the server of *key* (one that died by itself is reaped and its log told), and
        take its entry out of the ledger."""
        rec = self.servers.get(key)
        if rec is None:
            self.unreserve(key)
            return
        was_running = rec.server.is_running()
        if self.ledger is not None:
            self.ledger.stopping(_ledger_key(key))
        try:
            rec.server.stop()
        finally:
            self.unreserve(key)
        if was_running:
            self.report(f"moeperf: stopped {rec.server.name}" + (f" ({why})" if why else ""))

    def forget(self, which: Callable[[ServerKey], bool]) -> None:
        """Drop what the pool keeps of the (stopped) servers *which* selects: the
        memory they touched (a gate's sides about to name other builds; the journal forgets their
        starts and warnings)."""
        for k in [k for k in self._touched if which(k)]:
            del self._touched[k]

    def stop_all(self, keep: Callable[[ServerKey], bool] = lambda k: False) -> None:
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
            self.journal.found(
                key,
                [
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
                ],
                start=False,
            )
        return placed
