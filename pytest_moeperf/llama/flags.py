"""Reading llama-server argument lists: a flag's value, and the GPUs a server of these flags
uses."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Collection, Mapping, Sequence

from ..host.gpus import visible_gpus


def flag_value(flags: Sequence[str], *names: str) -> str | None:
    """The value of the last of *names* in *flags*, as llama-server reads it (the last one
    wins): ``-c 4096``, or ``--ctx-size=4096`` for a long name; ``None`` when absent."""
    value = None
    for i, arg in enumerate(flags):
        for name in names:
            if arg == name and i + 1 < len(flags):
                value = flags[i + 1]
            elif name.startswith("--") and arg.startswith(name + "="):
                value = arg.split("=", 1)[1]
    return value


def flag_int(value: str | None, default: int) -> int:
    """*value* as an integer (surrounding blanks allowed), else *default*."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def flag_values(flags: Sequence[str], *names: str) -> list[str]:
    """Every value of *names* in *flags*, in order (options that accumulate, like ``-ot``)."""
    out = []
    for i, arg in enumerate(flags):
        for name in names:
            if arg == name and i + 1 < len(flags):
                out.append(flags[i + 1])
            elif name.startswith("--") and arg.startswith(name + "="):
                out.append(arg.split("=", 1)[1])
    return out


def gpus_used(
    declared: Sequence[int] | None,
    flags: Sequence[str],
    env: Mapping[str, str],
    host_gpus: int,
) -> frozenset[int]:
    """The GPUs (nvidia-smi indices) a server with these *flags* and *env* may use:
    *declared* when given; else the ``CUDA_VISIBLE_DEVICES`` list (of *env*, else this
    process's), narrowed by ``-dev CUDA<n>,...`` (``none``: no GPU) and by the devices that
    ``-ts`` gives a non-zero share; else every one of the host's *host_gpus*."""
    if declared is not None:
        return frozenset(declared)
    spec = env.get("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    visible = visible_gpus(spec) if spec is not None else list(range(host_gpus))
    dev = flag_value(flags, "-dev", "--device")
    if dev is not None:
        if dev.strip().lower() == "none":
            return frozenset()
        picked = []
        for name in dev.split(","):
            m = re.fullmatch(r"\s*CUDA(\d+)\s*", name)
            if m and int(m.group(1)) < len(visible):
                picked.append(visible[int(m.group(1))])
        visible = picked
    split = flag_value(flags, "-ts", "--tensor-split")
    if split is not None:
        shares = re.split(r"[,/]", split)
        with contextlib.suppress(ValueError):
            visible = [g for i, g in enumerate(visible) if i >= len(shares) or float(shares[i]) > 0]
    return frozenset(visible)


def offloads_layers(gpus: Collection[int], flags: Sequence[str]) -> bool:
    """Whether a server with these *flags* on *gpus* keeps layers on a GPU: any GPU, and
    ``-ngl`` anything but 0 (absent, ``auto``, ``all``, negative or a count: a CUDA build
    offloads every layer by default). ``-ngl 0`` still runs large batches' matmuls on the
    main GPU (op offload), but every weight lives in system RAM."""
    if not gpus:
        return False
    ngl = flag_value(flags, "-ngl", "--gpu-layers", "--n-gpu-layers")
    return ngl is None or ngl.strip() != "0"
