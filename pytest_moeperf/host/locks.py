"""Cross-process locks on the CPUs and GPUs a measurement uses, so that no two measurements
share a CPU or a GPU at the same time (pytest-xdist workers, two sessions on one host), while
measurements on disjoint CPUs and GPUs (two NUMA nodes, each with its own GPU) may run at once."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

from ..fs import cache_dir
from .machine import online_cpus


@contextlib.contextmanager
def measuring(cpus: frozenset[int] | None, gpus: frozenset[int] = frozenset()) -> Iterator[None]:
    """Hold an exclusive lock on each CPU of *cpus* (every CPU of this process when ``None``:
    an unpinned server may run anywhere) and on each GPU of *gpus* (nvidia-smi indices) for
    the block. Locks are taken in one order (CPUs, then GPUs, each ascending), so two holders
    never deadlock; the kernel drops them when a holder dies."""
    folder = cache_dir() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"cpu{c}" for c in sorted(cpus if cpus is not None else online_cpus())]
    names += [f"gpu{g}" for g in sorted(gpus)]
    fds: list[int] = []
    try:
        for name in names:
            fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
            fds.append(fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        for fd in reversed(fds):
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
