"""Cross-process locks on the CPUs a measurement uses, so that no two measurements share a CPU
at the same time (pytest-xdist workers, two sessions on one host), while measurements on
disjoint CPUs (two NUMA nodes) may run at once."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from ..fs import cache_dir
from .machine import online_cpus


@contextlib.contextmanager
def measuring(cpus: frozenset[int] | None) -> Iterator[None]:
    """Hold an exclusive lock on each CPU of *cpus* (every CPU of this process when ``None``:
    an unpinned server may run anywhere) for the block. Locks are taken in CPU order, so two
    holders never deadlock; the kernel drops them when a holder dies."""
    folder = cache_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    fds: list[int] = []
    try:
        for cpu in sorted(cpus if cpus is not None else online_cpus()):
            fd = os.open(folder / f"cpu{cpu}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(fds):
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
