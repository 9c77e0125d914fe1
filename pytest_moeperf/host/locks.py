"""Cross-process locks on the CPUs and GPUs a measurement uses, so that no two measurements
share a CPU or a GPU at the same time (pytest-xdist workers, two sessions on one host), while
measurements on disjoint CPUs and GPUs (two NUMA nodes, each with its own GPU) may run at once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..fs import cache_dir, file_lock
from .machine import online_cpus


@contextlib.contextmanager
def measuring(cpus: frozenset[int] | None, gpus: frozenset[int] = frozenset()) -> Iterator[None]:
    """Hold an exclusive lock on each CPU of *cpus* (every CPU of this process when ``None``:
    an unpinned server may run anywhere) and on each GPU of *gpus* (nvidia-smi indices) for
    the block. Locks are taken in one order (CPUs, then GPUs, each ascending), so two holders
    never deadlock; the kernel drops them when a holder dies."""
    folder = cache_dir() / "locks"
    names = [f"cpu{c}" for c in sorted(cpus if cpus is not None else online_cpus())]
    names += [f"gpu{g}" for g in sorted(gpus)]
    with contextlib.ExitStack() as held:
        for name in names:
            held.enter_context(file_lock(folder / f"{name}.lock"))
        yield
