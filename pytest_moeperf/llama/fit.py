"""A server's flags fitted to the GPUs' free memory: what ``moeperf init`` writes must start
where it is written, and the scheduler (:mod:`pytest_moeperf.run.pool`) refuses a server whose
estimate (:func:`~pytest_moeperf.llama.footprint.estimate`) exceeds a GPU's room.

The levers, tried in this order, least costly first, each kept once it is taken:

1. a smaller micro-batch (``-ub``, halved down to :data:`MIN_UBATCH`): each GPU in use holds a
   compute buffer that grows with it (prefill gets slower, decode does not);
2. one GPU instead of several (the one with the most room, ``-sm none -mg``): each GPU in use
   also holds a CUDA context and its own compute buffer;
3. a shorter context (``-c``, halved down to :data:`MIN_CONTEXT`): the KV cache;
4. fewer layers on the GPUs (``-ngl``, halved down to 0): the weights (decode gets slower).

Experts are not a lever here: a profile ``moeperf init`` writes keeps them in RAM already.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .flags import flag_int, flag_value
from .footprint import DEFAULT_CTX, DEFAULT_UBATCH, GIB, Footprint, estimate
from .model_bytes import DecodeBytes

MIN_UBATCH = 128
MIN_CONTEXT = 2048


@dataclass(frozen=True)
class Fitted:
    """Flags that fit (or the least that was tried), what changed and why."""

    flags: tuple[str, ...]
    """Flags to append to the configuration's own (the last of a flag wins)."""
    gpus: tuple[int, ...]
    """The GPUs it uses."""
    footprint: Footprint
    fits: bool
    changes: tuple[str, ...] = ()
    """One line per lever taken."""


def _per_gpu_over(fp: Footprint, gpus: Sequence[int], rooms: Mapping[int, int]) -> dict[int, int]:
    """Bytes each GPU of *gpus* is short of (empty: it fits)."""
    need = fp.per_gpu(gpus)
    return {g: b - rooms.get(g, 0) for g, b in need.items() if b > rooms.get(g, 0)}


def _halvings(start: int, floor: int) -> list[int]:
    """*start* halved, each value down to *floor*: ``2048 -> [1024, 512, 256, 128]``."""
    out = []
    while start // 2 >= floor:
        start //= 2
        out.append(start)
    return out


Candidate = tuple[tuple[str, ...], tuple[int, ...], tuple[str, ...]]
"""Flags to append, the GPUs used, and what changed (one line per lever)."""


def _candidates(
    flags: Sequence[str], gpus: tuple[int, ...], rooms: Mapping[int, int], n_layer: int
) -> list[Candidate]:
    """The levers of the module, in order: every candidate keeps the ones before it."""
    ub0 = flag_int(flag_value(flags, "-ub"), DEFAULT_UBATCH)
    ctx0 = flag_int(flag_value(flags, "-c"), DEFAULT_CTX)
    ngl0 = min(flag_int(flag_value(flags, "-ngl"), 999), n_layer)
    out: list[Candidate] = [((), gpus, ())]
    ubs = _halvings(ub0, MIN_UBATCH)
    out += [
        (("-ub", str(ub)), gpus, (f"-ub {ub0} -> {ub}: each GPU's compute buffer grows with it",))
        for ub in ubs
    ]
    flat_ub: tuple[str, ...] = ("-ub", str(ubs[-1])) if ubs else ()
    ub_line = (f"-ub {ub0} -> {ubs[-1]}",) if ubs else ()
    if len(gpus) > 1:
        best = max(gpus, key=lambda g: rooms[g])
        one = ("-sm", "none", "-mg", str(best))
        why = (
            f"one GPU (GPU{best}, {rooms[best] / GIB:.2f} GiB free) instead of {len(gpus)}: each "
            "GPU in use holds a CUDA context and a compute buffer",
        )
        out.append((one, (best,), why))
        out += [((*one, "-ub", str(u)), (best,), (*why, f"-ub {ub0} -> {u}")) for u in ubs]
    for ctx in _halvings(ctx0, MIN_CONTEXT):
        out.append(
            ((*flat_ub, "-c", str(ctx)), gpus, (*ub_line, f"-c {ctx0} -> {ctx}: the KV cache"))
        )
    low_ctx: tuple[str, ...] = ("-c", str(MIN_CONTEXT)) if ctx0 > MIN_CONTEXT else ()
    ctx_line = (f"-c {ctx0} -> {MIN_CONTEXT}",) if low_ctx else ()
    for ngl in [*_halvings(ngl0, 1), 0]:
        out.append(
            (
                (*flat_ub, *low_ctx, "-ngl", str(ngl)),
                gpus,
                (
                    *ub_line,
                    *ctx_line,
                    f"-ngl {ngl0} -> {ngl} of {n_layer} layers: the weights themselves do not fit; "
                    "decode reads the rest from RAM",
                ),
            )
        )
    return out


def fit_gpus(
    model: DecodeBytes,
    model_path: str,
    flags: Sequence[str],
    rooms: Mapping[int, int],
) -> Fitted:
    """*flags* (a configuration's whole argument list) fitted to *rooms* (bytes each GPU has
    for it, by index): the first of the module's levers that fits, its lines saying what did
    not fit as given."""
    gpus = tuple(sorted(rooms))
    first = estimate(model, model_path, flags, gpus=gpus, free=rooms)
    over = _per_gpu_over(first, gpus, rooms)
    if not gpus or not over:
        return Fitted((), gpus, first, True)
    need = first.per_gpu(gpus)
    short = ", ".join(
        f"GPU{g} {need[g] / GIB:.2f} GiB against {rooms[g] / GIB:.2f} free" for g in sorted(over)
    )
    for extra, used, changes in _candidates(flags, gpus, rooms, max(model.n_layer, 1))[1:]:
        fp = estimate(model, model_path, [*flags, *extra], gpus=used, free=rooms)
        if not _per_gpu_over(fp, used, rooms):
            return Fitted(extra, used, fp, True, (f"as given: {short}", *changes))
    return Fitted((), gpus, first, False, (f"as given: {short}",))
