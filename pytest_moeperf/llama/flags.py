"""llama.cpp's flags: every spelling llama-server accepts for each (:data:`SPELLINGS`, the one
place that lists them: every other module, ``llama/bench.py``'s translation too, names a flag
by its canonical short name), reading a server's argument list (a flag's value, the GPUs a
server of these flags uses, the experts' tensor pattern and ``-fa``'s spellings), and the
llama-bench fields an argument list sets (what llama-bench's JSON rows would say of it:
:func:`bench_fields`)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from ..host.gpus import visible_gpus

_SPELLED = """
-t --threads
-tb --threads-batch
-C --cpu-mask
-c --ctx-size
-n --predict --n-predict
-b --batch-size
-ub --ubatch-size
-fa --flash-attn
-kvo --kv-offload
-nkvo --no-kv-offload
-nr --no-repack
-ctk --cache-type-k
-ctv --cache-type-v
-lm --load-mode
-lzm --lazy-mode
-dev --device
-ot --override-tensor
-cmoe --cpu-moe
-ncmoe --n-cpu-moe
-ngl --gpu-layers --n-gpu-layers
-sm --split-mode
-ts --tensor-split
-mg --main-gpu
-fit --fit
-fitt --fit-target
-fitc --fit-ctx
-v --verbose --log-verbose
-lv --verbosity --log-verbosity
-s --seed
--temp --temperature
-ctxcp --ctx-checkpoints --swa-checkpoints
-cms --checkpoint-min-step
-cram --cache-ram
-kvu --kv-unified
-no-kvu --no-kv-unified
-sp --special
-np --parallel
-cb --cont-batching
-nocb --no-cont-batching
-a --alias
--ui --webui
--no-ui --no-webui
--embedding --embeddings
-to --timeout
-rea --reasoning
-sps --slot-prompt-similarity
"""
SPELLINGS: dict[str, tuple[str, ...]] = {
    line.split()[0]: tuple(line.split()) for line in _SPELLED.strip().splitlines()
}
"""Each llama-server flag of several spellings (``--help`` of b11434; a negative form such as
``-nkvo`` is a flag of its own) by its canonical name, the first spelling: ``-ngl`` ->
``("-ngl", "--gpu-layers", "--n-gpu-layers")``. A flag of one spelling (``--numa``) is not
listed: that spelling is its canonical name."""
_CANONICAL = {spelling: name for name, all_ in SPELLINGS.items() for spelling in all_}


def spellings(name: str) -> tuple[str, ...]:
    """Every spelling of the flag of canonical name *name*; ``(name,)`` for one not listed."""
    return SPELLINGS.get(name, (name,))


def canonical(arg: str) -> str:
    """The canonical name of the flag *arg* spells exactly (``--gpu-layers`` -> ``-ngl``; not
    ``--gpu-layers=4``); *arg* itself when it is no spelling :data:`SPELLINGS` lists."""
    return _CANONICAL.get(arg, arg)


def flag_value(flags: Sequence[str], *names: str) -> str | None:
    """The value of the last of *names* (canonical names: any spelling counts) in *flags*, as
    llama-server reads it (the last one wins): ``-c 4096``, or ``--ctx-size=4096`` for a long
    spelling; ``None`` when absent."""
    values = flag_values(flags, *names)
    return values[-1] if values else None


def flag_values(flags: Sequence[str], *names: str) -> list[str]:
    """Every value of *names* (canonical names: any spelling counts) in *flags*, in order
    (options that accumulate, like ``-ot``)."""
    out = []
    for i, arg in enumerate(flags):
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if canonical(name) not in names:
            continue
        if eq:
            out.append(inline)
        elif i + 1 < len(flags):
            out.append(flags[i + 1])
    return out


def has_flag(flags: Sequence[str], name: str) -> bool:
    """Whether *flags* hold the flag of canonical name *name* (one without a value, ``-cmoe``),
    in any spelling."""
    return any(spelling in flags for spelling in spellings(name))


def flag_int(value: str | None, default: int) -> int:
    """*value* as an integer (surrounding blanks allowed), else *default*."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return default


def _long_valued(arg: str) -> str | None:
    """The canonical name of ``--long=value``'s flag; ``None`` for any other argument."""
    name, eq, _ = arg.partition("=")
    return canonical(name) if eq and arg.startswith("--") else None


def without_flags(
    flags: Sequence[str],
    valued: Collection[str] = (),
    bare: Collection[str] = (),
    *,
    exact: bool = False,
) -> list[str]:
    """*flags* without each flag of *valued* and its value (the next argument, or the value of
    ``--long=value``), and without each of *bare* (a flag that takes no value): in every
    spelling of these canonical names, or only as given (and only apart from its value) when
    *exact*."""
    out: list[str] = []
    skip = False
    for arg in flags:
        name = arg if exact else canonical(arg)
        if skip:
            skip = False
        elif name in valued:
            skip = True
        elif name in bare or (not exact and _long_valued(arg) in valued):
            continue
        else:
            out.append(arg)
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
    dev = flag_value(flags, "-dev")
    if dev is not None:
        if dev.strip().lower() == "none":
            return frozenset()
        picked = []
        for name in dev.split(","):
            index = cuda_device(name)
            if index is not None and index < len(visible):
                picked.append(visible[index])
        visible = picked
    split = flag_value(flags, "-ts")
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
    ngl = flag_value(flags, "-ngl")
    return ngl is None or ngl.strip() != "0"


EXPERTS_PATTERN = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
"""llama.cpp's routed-expert tensors (``LLM_FFN_EXPS_REGEX``): what ``-cmoe`` and ``-ncmoe`` put
on the CPU."""


def flash_attn(value: str) -> Literal["on", "off", "auto"] | None:
    """``-fa``'s value in llama.cpp's words (server and llama-bench accept the same spellings);
    ``None`` for one neither knows."""
    v = value.strip().lower()
    if v in ("on", "enabled", "true", "1"):
        return "on"
    if v in ("off", "disabled", "false", "0"):
        return "off"
    if v in ("auto", "-1"):
        return "auto"
    return None


_BENCH_OPTIONS: dict[str, str] = {
    "-t": "threads",
    "-b": "batch",
    "-ub": "ubatch",
    "-C": "cpu_mask",
    "--cpu-strict": "cpu_strict",
    "--poll": "poll",
    "-ctk": "type_k",
    "-ctv": "type_v",
    "-ngl": "ngl",
    "-ncmoe": "ncmoe",
    "-sm": "split_mode",
    "-mg": "main_gpu",
    "-fa": "flash_attn",
    "-dev": "devices",
    "-ts": "tensor_split",
    "-ot": "override",
    "-lm": "load_mode",
    "-lzm": "lazy_mode",
    "-nopo": "no_op_offload",  # llama-bench's spelling
    "-fitt": "fit_target",
    "-fitc": "fit_min_ctx",
}
"""llama-server options (canonical names) that take a value and map to a llama-bench field."""

_BENCH_SWITCHES: dict[str, tuple[str, Any]] = {
    "-nkvo": ("no_kv_offload", True),
    "-kvo": ("no_kv_offload", False),
    "--embedding": ("embeddings", True),
    "--no-host": ("no_host", True),
    "--repack": ("repack", True),
    "-nr": ("repack", False),
    "--no-mmap": ("load_mode", "none"),
    "--mmap": ("load_mode", "mmap"),
    "--mlock": ("mlock", True),
    "-cmoe": ("cpu_moe", True),
    "--no-op-offload": ("no_op_offload", 1),
    "--op-offload": ("no_op_offload", 0),
}
"""llama-server options (canonical names) without a value that map to a llama-bench field."""

_EXPS_CPU = EXPERTS_PATTERN + "=CPU"
"""The tensor override ``--cpu-moe`` adds (llama.cpp's LLM_FFN_EXPS_REGEX on the CPU)."""


def _options(flags: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """The last value of each option :func:`bench_fields` knows, and every ``-ot`` override
    (with ``-cmoe``'s), in order."""
    seen: dict[str, Any] = {}
    overrides: list[str] = []
    args = [str(a) for a in flags]
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        name = canonical(name)
        i += 1
        if name in _BENCH_SWITCHES:
            switch, setting = _BENCH_SWITCHES[name]
            if switch == "cpu_moe":
                overrides.append(_EXPS_CPU)
            else:
                seen[switch] = setting
            continue
        option = _BENCH_OPTIONS.get(name)
        if option is None:
            continue
        if eq:
            value = inline
        elif i < len(args):
            value = args[i]
            i += 1
        else:
            break
        if option == "override":
            overrides += [p.strip() for p in value.split(",") if p.strip()]
        else:
            seen[option] = value
    return seen, overrides


_INT_FIELDS = {
    "batch": ("n_batch", 2048),
    "ubatch": ("n_ubatch", 512),
    "poll": ("poll", 50),
    "ncmoe": ("n_cpu_moe", 0),
    "main_gpu": ("main_gpu", 0),
    "no_op_offload": ("no_op_offload", 0),
    "fit_min_ctx": ("fit_min_ctx", 0),
}
"""Options whose value is llama-bench's integer field of the same meaning, and its default."""
_TEXT_FIELDS = ("type_k", "type_v", "split_mode", "lazy_mode")
_BOOL_FIELDS = ("no_kv_offload", "embeddings", "no_host", "repack")


def _special_fields(seen: Mapping[str, Any]) -> dict[str, Any]:
    """The fields whose values llama-bench writes in its own way."""
    out: dict[str, Any] = {}
    if "threads" in seen and flag_int(seen["threads"], 0) > 0:
        out["n_threads"] = flag_int(seen["threads"], 0)
    if "cpu_mask" in seen:
        mask = str(seen["cpu_mask"]).strip()
        out["cpu_mask"] = mask if mask.lower().startswith("0x") else f"0x{mask}"
    if "cpu_strict" in seen:
        out["cpu_strict"] = bool(flag_int(seen["cpu_strict"], 0))
    if "ngl" in seen:
        ngl = str(seen["ngl"]).strip()
        out["n_gpu_layers"] = {"auto": -1, "all": -2}.get(ngl, flag_int(ngl, -1))
    if "flash_attn" in seen:
        out["flash_attn"] = {"on": 1, "off": 0}.get(flash_attn(str(seen["flash_attn"])) or "", -1)
    if "devices" in seen:
        out["devices"] = "/".join(d.strip() for d in str(seen["devices"]).split(","))
    if "tensor_split" in seen:
        parts = [p for p in re.split(r"[,/]+", str(seen["tensor_split"])) if p.strip()]
        with contextlib.suppress(ValueError):
            out["tensor_split"] = "/".join(f"{float(p):.2f}" for p in parts) or "0.00"
    if "fit_target" in seen:
        out["fit_target"] = flag_int(str(seen["fit_target"]).split(",")[0], 0)
    mode = seen.get("load_mode")
    if seen.get("mlock"):
        mode = "mmap+mlock" if mode in (None, "auto", "mmap") else "mlock"
    if mode is not None:
        out["load_mode"] = str(mode).strip()
    return out


def bench_fields(flags: Sequence[str]) -> dict[str, Any]:
    """The llama-bench fields a llama-server argument list sets explicitly (``-t 10`` ->
    ``n_threads: 10``, ``-lm none`` -> ``load_mode: "none"``, ``-fa 1`` -> ``flash_attn: 1``);
    options it does not know are left out. The last occurrence of an option wins, as in
    llama-server, except ``-ot`` which accumulates."""
    seen, overrides = _options(flags)
    out: dict[str, Any] = {
        field: flag_int(seen[option], default)
        for option, (field, default) in _INT_FIELDS.items()
        if option in seen
    }
    out.update({key: str(seen[key]).strip() for key in _TEXT_FIELDS if key in seen})
    out.update(_special_fields(seen))
    if overrides:
        out["tensor_buft_overrides"] = ";".join(overrides)
    out.update({key: bool(seen[key]) for key in _BOOL_FIELDS if key in seen})
    return out


def cuda_device(name: str) -> int | None:
    """The device index a ``-dev`` entry names (``"CUDA1"`` -> 1, spaces allowed), or
    ``None`` for another name."""
    m = re.fullmatch(r"\s*CUDA(\d+)\s*", name)
    return int(m[1]) if m else None
