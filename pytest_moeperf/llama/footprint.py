"""How much memory a llama-server will hold, estimated from its model file and flags, so that
a session starts a server only where it fits beside the ones alive.

The estimate follows llama.cpp's placement: ``-ngl`` layers (all, on a host with GPUs, when
not given) go to the GPUs with their KV cache (``-nkvo`` keeps the KV cache in RAM),
``-ncmoe N`` / ``-cmoe`` / ``-ot ...exps=CPU`` keep expert tensors in system RAM, lookup tables
stay in RAM. Weights in RAM are pages of the mapped file under ``mmap`` loading (page cache:
shared by every server of that file) or a private copy of the CPU-resident tensors only under
``-lm none`` / ``--no-mmap``, of which the weights the GPUs read from RAM (the experts kept on
the CPU, and dense layers ``-ngl`` leaves there) are a pinned host buffer. ADR-0042 measured
that buffer at ~74 GB per server: its routed experts, not the 105 GiB file, nor the "112 GB of
experts in RAM" that ADR-0038 counted with the n-gram table.

On the GPUs, layers and their KV cache are split the way llama.cpp splits them: all on the
``-mg`` main GPU with ``-sm none``; by the ``-ts`` proportions when given; else by each GPU's
free memory at load (llama.cpp's default, ``llama_model_load``: "default split, by free
memory"), which the caller passes as *free*, evenly where it does not know it. A
``--moe-cache-mib`` expert cache (the record's build; not in the published builds up to
b11434) is split the same way. Each GPU in use also holds a compute buffer and the CUDA
context. It is an estimate: a profile's ``ram_gib`` / ``vram_gib`` replace it where the truth
is known, and llama.cpp's ``--fit`` (on by default since about b7400) may shrink what was left
unset (``-ngl``, ``-c``) to fit, which this does not model."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .flags import flag_int, flag_value, flag_values, has_flag
from .model_bytes import DecodeBytes

GIB = 2**30
MIB = 2**20
DEFAULT_CTX = 4096
DEFAULT_UBATCH = 512
DEFAULT_SLOTS = 4
"""llama-server's slots when ``-np`` is not given (or ``-1``, auto): 4. A hybrid model holds
its recurrent state once per slot."""
ACTIVATIONS_PER_EMBD = 80
"""Compute buffer: about this many f32 activations of ``n_embd`` per micro-batch token (the
FFN's, the routed experts' and attention's intermediate tensors), plus the logits of the
micro-batch. With :data:`PROCESS_BYTES` calibrated on the embedded profile's server (bench
model, ``-c 4096``): 271 MiB of anonymous memory measured after pp512 and tg64, 264 MiB
estimated. Each GPU in use holds one too (llama.cpp reserves a compute buffer per backend)."""
PROCESS_BYTES = 64 * MIB
"""The process itself: heap, vocabulary, HTTP threads."""
CUDA_CONTEXT_BYTES = 256 * MIB
"""What a CUDA process holds on each GPU it uses before any buffer of its own: the context and
the loaded kernels (nvidia-smi's per-process figure counts them). Typical of CUDA 12 with lazy
module loading; not measured by this project (no GPU host has run it yet)."""


@dataclass(frozen=True)
class Footprint:
    """Bytes a server holds: *private* RAM (heap: copies, KV cache, buffers), *shared* RAM
    (resident pages of the mapped *model* file, counted once per file), and *vram* spread over
    its GPUs."""

    private: int
    shared: int
    vram: int
    model: str
    pinned: int = 0
    """Of *private*: the page-locked host buffer of a private copy (``-lm none``) whose weights
    the GPUs read from RAM (ADR-0042's ~74 GB pinned buffer)."""
    vram_split: tuple[tuple[int, int], ...] = ()
    """*vram* by GPU, ``(GPU, bytes)``, as the estimate placed it; empty: spread evenly."""

    def per_gpu(self, gpus: Iterable[int]) -> dict[int, int]:
        """Bytes on each of *gpus*: the estimate's split where it names these GPUs, else
        *vram* spread evenly (a footprint made without knowing the GPUs)."""
        used = sorted(set(gpus))
        if self.vram_split and all(g in used for g, _b in self.vram_split):
            return {g: b for g, b in self.vram_split if b}
        if not used or not self.vram:
            return {}
        return dict.fromkeys(used, self.vram // len(used))

    def describe(self) -> str:
        parts = [f"RAM {self.private / GIB:.2f} GiB"]
        if self.pinned:
            parts.append(f"({self.pinned / GIB:.2f} GiB pinned)")
        if self.shared:
            parts.append(f"+ {self.shared / GIB:.2f} GiB of mapped model (shared)")
        if self.vram:
            parts.append(f"VRAM {self.vram / GIB:.2f} GiB")
            if len(self.vram_split) > 1:
                each = ", ".join(f"GPU{g} {b / GIB:.2f}" for g, b in self.vram_split)
                parts.append(f"({each})")
        return " ".join(parts)


def layer_shares(
    flags: Sequence[str], devices: Sequence[int], free: Mapping[int, int] | None = None
) -> dict[int, float]:
    """The share of the offloaded layers (with their KV cache) each of *devices* (the GPUs
    llama.cpp sees, in its order) gets: everything on ``-mg`` (a position in *devices*,
    default 0) under ``-sm none``; the ``-ts`` proportions by position when any is non-zero
    (positions it does not name get none, as in llama.cpp); else in proportion to *free*
    bytes per GPU, llama.cpp's default; evenly where *free* does not say."""
    if not devices:
        return {}
    if (flag_value(flags, "-sm") or "").strip() == "none":
        main = flag_int(flag_value(flags, "-mg"), 0)
        return {devices[main if 0 <= main < len(devices) else 0]: 1.0}
    weights = [0.0] * len(devices)
    split = flag_value(flags, "-ts")
    if split is not None:
        with contextlib.suppress(ValueError):
            for i, text in enumerate(re.split(r"[,/]", split)[: len(devices)]):
                weights[i] = max(float(text), 0.0) if text.strip() else 0.0
    if not sum(weights) and free is not None and all(free.get(d, 0) > 0 for d in devices):
        weights = [float(free[d]) for d in devices]
    if not sum(weights):
        weights = [1.0] * len(devices)
    total = sum(weights)
    return {d: w / total for d, w in zip(devices, weights, strict=True) if w > 0}


def _on_gpu(flags: Sequence[str], devices: Sequence[int], n_layer: int) -> float:
    """The share of the model's layers ``-ngl`` offloads to *devices*: none without GPUs, all
    where ``-ngl`` is not given or is ``all``, ``auto`` or negative."""
    ngl_text = flag_value(flags, "-ngl")
    if not devices:
        return 0.0
    if ngl_text is None or ngl_text in {"all", "auto"} or flag_int(ngl_text, 0) < 0:
        return 1.0  # llama.cpp's default and -1: as many layers as fit, all here
    return min(flag_int(ngl_text, n_layer), n_layer) / n_layer


def _experts_in_ram(flags: Sequence[str], on_gpu: float, n_layer: int) -> float:
    """The share of the routed experts kept in system RAM: those of the layers left on the
    CPU, all of them under ``-cmoe`` or ``-ot ...exps=CPU``, the first N layers' under
    ``-ncmoe N``."""
    if not on_gpu:
        return 1.0 - on_gpu
    overrides = [o for v in flag_values(flags, "-ot") for o in v.split(",")]
    if has_flag(flags, "-cmoe") or any(
        "exps" in o and o.upper().endswith("=CPU") for o in overrides
    ):
        return 1.0
    ncmoe = flag_value(flags, "-ncmoe")
    if ncmoe is None:
        return 1.0 - on_gpu
    return max(1.0 - on_gpu, min(flag_int(ncmoe, 0), n_layer) / n_layer)


def _kv_bytes(model: DecodeBytes, flags: Sequence[str]) -> int:
    """The KV cache of the attention layers at the ``-c`` context, and a hybrid's recurrent
    state of each ``-np`` slot."""
    ctx = flag_int(flag_value(flags, "-c"), DEFAULT_CTX)
    if ctx <= 0:  # -c 0: the model's training context
        ctx = model.n_ctx_train or DEFAULT_CTX
    slots = flag_int(flag_value(flags, "-np"), DEFAULT_SLOTS)
    return model.kv_per_token_of_depth * ctx + model.recurrent_per_seq * (
        slots if slots > 0 else DEFAULT_SLOTS
    )


def _vram_split(
    flags: Sequence[str],
    devices: Sequence[int],
    free: Mapping[int, int] | None,
    layered: int | None,
    compute: int,
    experts_in_ram: bool,
) -> dict[int, int]:
    """Bytes on each GPU: *layered* bytes (offloaded weights and KV cache) and a
    ``--moe-cache-mib`` expert cache (where experts stay in RAM) split as :func:`layer_shares`
    says, plus a *compute* buffer and the CUDA context on each GPU in use; with no layer
    offloaded (*layered* ``None``), the main GPU's compute buffer alone (op offload)."""
    if devices and layered is not None:
        shares = layer_shares(flags, devices, free)
        cache = flag_int(flag_value(flags, "--moe-cache-mib"), 0) * MIB if experts_in_ram else 0
        return {
            gpu: int((layered + max(cache, 0)) * share) + compute + CUDA_CONTEXT_BYTES
            for gpu, share in shares.items()
        }
    if devices and "--no-op-offload" not in flags:
        # -ngl 0 on a GPU build: large batches still run on the main GPU (op offload)
        main = layer_shares([*flags, "-sm", "none"], devices)
        return dict.fromkeys(main, compute + CUDA_CONTEXT_BYTES)
    return {}


def estimate(
    model: DecodeBytes,
    model_path: str,
    flags: Sequence[str],
    *,
    gpus: int | Sequence[int],
    free: Mapping[int, int] | None = None,
) -> Footprint:
    """The :class:`Footprint` of a server of *model* with *flags* that may use *gpus* (the
    GPUs in llama.cpp's device order, or how many: then numbered 0, 1, ...; none: everything
    stays in RAM, whatever ``-ngl`` says), splitting layers by *free* bytes per GPU where no
    ``-ts`` is given (see :func:`layer_shares`)."""
    devices = list(range(gpus)) if isinstance(gpus, int) else list(gpus)
    n_layer = max(model.n_layer, 1)
    on_gpu = _on_gpu(flags, devices, n_layer)
    experts_in_ram = _experts_in_ram(flags, on_gpu, n_layer)
    dense_stored = max(model.stored - model.experts_total - model.lookup_total, 0)
    dense_in_ram = int(dense_stored * (1.0 - on_gpu))
    experts_ram = int(model.experts_total * experts_in_ram)
    in_ram = dense_in_ram + experts_ram + model.lookup_total
    in_vram = max(model.stored - in_ram, 0)
    # the KV cache of the attention layers, and a hybrid's recurrent state of each slot
    kv = _kv_bytes(model, flags)
    kv_on_gpu = 0 if has_flag(flags, "-nkvo") else int(kv * on_gpu)
    ubatch = flag_int(flag_value(flags, "-ub"), DEFAULT_UBATCH)
    compute = 4 * ubatch * (ACTIVATIONS_PER_EMBD * model.n_embd + model.n_vocab)
    private_copy = flag_value(flags, "-lm") == "none" or "--no-mmap" in flags
    # a CPU server repacks Q4_0/Q4_K/IQ4_NL matrices into anonymous memory, mmap or not (with
    # GPUs, which host buffer the CPU-resident weights get is not modelled: none counted)
    repacked = 0
    if not devices and not has_flag(flags, "-nr"):
        repacked = model.repacked_dense + int(model.repacked_experts * experts_in_ram)
    # the pinned host buffer holds what the GPUs read from RAM; lookup tables are read a row
    # at a time on the CPU and stay in a plain buffer (ADR-0042's 74 GB is its experts alone)
    pinned = dense_in_ram + experts_ram if private_copy and devices else 0
    layered = in_vram + kv_on_gpu if on_gpu else None
    split = _vram_split(flags, devices, free, layered, compute, bool(experts_ram))
    return Footprint(
        private=(in_ram if private_copy else repacked) + (kv - kv_on_gpu) + compute + PROCESS_BYTES,
        shared=0 if private_copy else in_ram,
        vram=sum(split.values()),
        model=model_path,
        pinned=pinned,
        vram_split=tuple(sorted(split.items())),
    )
