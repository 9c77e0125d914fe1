"""One memory ledger for every pytest-moeperf process on this host (pytest-xdist workers, a
gate beside the suite, two sessions): what each process's servers hold, so that a process
starting a server counts the others' servers too and never overcommits the host.

The ledger is a small JSON file beside the CPU and GPU locks (``<cache>/locks``), read and
written under its own file lock. Each process that starts a server writes an :class:`Entry`
(its pid, the server's pid once started, the RAM and per-GPU VRAM it is charged) before the
server starts, and removes it when the server stops. A process that cannot fit its server
beside the others' writes a :class:`Waiter`, so that the others stop idle servers for it.
Entries of a process that is gone, or of a server that is gone, are pruned by whoever reads
the ledger next (a pid counts as alive only with the start time it was recorded with: a
reused pid is another process). The bytes are the scheduler's estimates, not measurements.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..fs import atomic_write_text, cache_dir, file_lock
from .process import proc_stat, started

LEDGER_FILE = "memory-ledger.json"
LEDGER_LOCK = "memory-ledger.lock"
VERSION = 1
GIB = 2**30


def alive(pid: int, start: int) -> bool:
    """Whether *pid* is the live process that started at *start* (0: any start)."""
    now = started(pid)
    return now is not None and (not start or now == start)


def parent(pid: int) -> int:
    """The parent of *pid* (0 when unknown)."""
    stat = proc_stat(pid)
    try:
        return int(stat[1]) if stat else 0
    except ValueError:
        return 0


@dataclass(frozen=True)
class Charge:
    """The memory a server is charged: *private* RAM, *shared* RAM (pages of the mapped
    *model* file, counted once per file whoever maps it), and bytes on each GPU."""

    private: int = 0
    shared: int = 0
    model: str = ""
    vram: tuple[tuple[int, int], ...] = ()
    """``(GPU index, bytes)`` pairs."""

    def vram_by_gpu(self) -> dict[int, int]:
        return dict(self.vram)

    def describe(self) -> str:
        parts = [f"RAM {(self.private + self.shared) / GIB:.2f} GiB"]
        parts += [f"GPU{g} {b / GIB:.2f} GiB" for g, b in self.vram if b]
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "private": self.private,
            "shared": self.shared,
            "model": self.model,
            "vram": {str(g): b for g, b in self.vram},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Charge:
        vram = data.get("vram") or {}
        return cls(
            private=int(data.get("private", 0)),
            shared=int(data.get("shared", 0)),
            model=str(data.get("model", "")),
            vram=tuple(sorted((int(g), int(b)) for g, b in dict(vram).items())),
        )


@dataclass(frozen=True)
class Entry:
    """A server of process *owner* (started at *owner_start*): reserved before it starts
    (*server* 0), its pid filled in once it runs."""

    owner: int
    owner_start: int
    key: str
    """The server's key in its owner's pool (``profile|configuration|build``)."""
    name: str
    charge: Charge
    server: int = 0
    server_start: int = 0
    since: float = 0.0

    def live(self) -> bool:
        """Whether its owner, and its server once started, are still there."""
        if not alive(self.owner, self.owner_start):
            return False
        return not self.server or alive(self.server, self.server_start)

    def describe(self) -> str:
        server = f"server pid {self.server}" if self.server else "starting or stopping"
        return f"{self.name} ({server}, of pid {self.owner}): {self.charge.describe()}"

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        return cls(
            owner=int(data["owner"]),
            owner_start=int(data.get("owner_start", 0)),
            key=str(data["key"]),
            name=str(data.get("name", data["key"])),
            charge=Charge.from_dict(data.get("charge") or {}),
            server=int(data.get("server", 0)),
            server_start=int(data.get("server_start", 0)),
            since=float(data.get("since", 0.0)),
        )


@dataclass(frozen=True)
class Waiter:
    """A process waiting for room for a server of *charge*."""

    owner: int
    owner_start: int
    name: str
    charge: Charge
    since: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Waiter:
        return cls(
            owner=int(data["owner"]),
            owner_start=int(data.get("owner_start", 0)),
            name=str(data.get("name", "")),
            charge=Charge.from_dict(data.get("charge") or {}),
            since=float(data.get("since", 0.0)),
        )


def _to_dict(record: Entry | Waiter) -> dict[str, Any]:
    """A ledger record's fields in their order, its charge in :meth:`Charge.to_dict`'s form."""
    values = {f.name: getattr(record, f.name) for f in fields(record)}
    return {**values, "charge": record.charge.to_dict()}  # in its place among the fields


@dataclass
class Book:
    """The ledger's live contents while its lock is held, as seen by process *me*."""

    me: int
    me_start: int
    entries: list[Entry] = field(default_factory=list)
    waiters: list[Waiter] = field(default_factory=list)
    changed: bool = False

    def others(self) -> list[Entry]:
        """The entries of every other process."""
        return [e for e in self.entries if e.owner != self.me]

    def mine(self) -> list[Entry]:
        return [e for e in self.entries if e.owner == self.me]

    def waiting_others(self) -> list[Waiter]:
        """Other processes waiting for room, longest waiting first."""
        return sorted((w for w in self.waiters if w.owner != self.me), key=lambda w: w.since)

    def put(self, key: str, name: str, charge: Charge) -> Entry:
        """Reserve *charge* for this process's server *key* (replacing its earlier entry)."""
        self.drop(key)
        entry = Entry(self.me, self.me_start, key, name, charge, since=time.time())
        self.entries.append(entry)
        self.changed = True
        return entry

    def started(self, key: str, server: int) -> None:
        """The server of this process's *key* runs as *server* now."""
        for i, e in enumerate(self.entries):
            if e.owner == self.me and e.key == key:
                self.entries[i] = replace(e, server=server, server_start=started(server) or 0)
                self.changed = True

    def drop(self, key: str) -> bool:
        """Remove this process's entry *key*; whether there was one."""
        before = len(self.entries)
        self.entries = [e for e in self.entries if not (e.owner == self.me and e.key == key)]
        self.changed |= len(self.entries) != before
        return len(self.entries) != before

    def wait(self, name: str, charge: Charge) -> None:
        """Say this process waits for room for a server of *charge* (one wait at a time)."""
        self.unwait()
        self.waiters.append(Waiter(self.me, self.me_start, name, charge, time.time()))
        self.changed = True

    def unwait(self) -> None:
        before = len(self.waiters)
        self.waiters = [w for w in self.waiters if w.owner != self.me]
        self.changed |= len(self.waiters) != before


class MemoryLedger:
    """The ledger file in *folder* (default: the cache directory's ``locks``)."""

    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder

    @property
    def folder(self) -> Path:
        return self._folder if self._folder is not None else cache_dir() / "locks"

    @property
    def path(self) -> Path:
        return self.folder / LEDGER_FILE

    def _read(self) -> tuple[list[Entry], list[Waiter]]:
        """The entries and waiters written; an unreadable or unknown ledger counts as empty
        (it is rewritten: the live processes' next starts and stops fill it again)."""
        try:
            data = json.loads(self.path.read_text())
            if not isinstance(data, dict) or data.get("version") != VERSION:
                return [], []
            entries = [Entry.from_dict(e) for e in data.get("entries", [])]
            waiters = [Waiter.from_dict(w) for w in data.get("waiting", [])]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return [], []
        return entries, waiters

    @contextlib.contextmanager
    def book(self) -> Iterator[Book]:
        """The ledger under its lock, entries of dead processes and servers pruned; written
        back when it changed. Not reentrant: do not stop a server (which releases its entry)
        inside the block."""
        me = os.getpid()
        with file_lock(self.folder / LEDGER_LOCK):
            entries, waiters = self._read()
            live = [e for e in entries if e.live()]
            waiting = [w for w in waiters if alive(w.owner, w.owner_start)]
            book = Book(me, started(me) or 0, live, waiting)
            book.changed = len(live) != len(entries) or len(waiting) != len(waiters)
            yield book
            if book.changed:
                data = {
                    "version": VERSION,
                    "entries": [e.to_dict() for e in book.entries],
                    "waiting": [w.to_dict() for w in book.waiters],
                }
                atomic_write_text(self.path, json.dumps(data, indent=1) + "\n")

    def entries(self) -> list[Entry]:
        """Every live entry now (this process's too)."""
        with self.book() as book:
            return list(book.entries)

    def started(self, key: str, server: int) -> None:
        with self.book() as book:
            book.started(key, server)

    def stopping(self, key: str) -> None:
        """This process stops its server *key*: the entry is held by this process alone until
        :meth:`release`, not freed the moment the server's pid is gone (its process group, and
        what the stop writes to its log, may not be done yet)."""
        self.started(key, 0)

    def release(self, key: str) -> None:
        """This process's server *key* stopped (or never started)."""
        with self.book() as book:
            book.drop(key)
