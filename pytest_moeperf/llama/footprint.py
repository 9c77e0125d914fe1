"""How much memory a llama-server will hold, estimated from its model file and flags, so that
a session starts a server only where it fits beside the ones alive.

The estimate follows llama.cpp's placement: ``-ngl`` layers (all, on a host with GPUs, when
not given) go to the GPUs with their KV cache, ``-ncmoe N`` / ``-cmoe`` / ``-ot ...exps=CPU``
keep expert tensors in system RAM, lookup tables stay in RAM. Weights in RAM are pages of the
mapped file under ``mmap`` loading (page cache: shared by every server of that file) or a
private copy under ``-lm none`` / ``--no-mmap`` (ADR-0042: a ~74 GB pinned buffer per
server). It is an estimate: a profile's ``ram_gib`` / ``vram_gib`` replace it where the truth is
known."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .flags import flag_int, flag_value, flag_values
from .model_bytes import DecodeBytes

GIB = 2**30
DEFAULT_CTX = 4096
DEFAULT_UBATCH = 512
ACTIVATIONS_PER_EMBD = 80
"""Compute buffer: about this many f32 activations of ``n_embd`` per micro-batch token (the
FFN's, the routed experts' and attention's intermediate tensors), plus the logits of the
micro-batch. With :data:`PROCESS_BYTES` calibrated on the embedded profile's server (bench
model, ``-c 4096``): 271 MiB of anonymous memory measured after pp512 and tg64, 264 MiB
estimated."""
PROCESS_BYTES = 64 * 2**20
"""The process itself: heap, vocabulary, HTTP threads."""


@dataclass(frozen=True)
class Footprint:
    """Bytes a server holds: *private* RAM (heap: copies, KV cache, buffers), *shared* RAM
    (resident pages of the mapped *model* file, counted once per file), and *vram* spread over
    its GPUs."""

    private: int
    shared: int
    vram: int
    model: str

    def describe(self) -> str:
        parts = [f"RAM {self.private / GIB:.2f} GiB"]
        if self.shared:
            parts.append(f"+ {self.shared / GIB:.2f} GiB of mapped model (shared)")
        if self.vram:
            parts.append(f"VRAM {self.vram / GIB:.2f} GiB")
        return " ".join(parts)


def estimate(
    model: DecodeBytes,
    model_path: str,
    flags: Sequence[str],
    *,
    gpus: int,
) -> Footprint:
    """The :class:`Footprint` of a server of *model* with *flags* that may use *gpus* GPUs
    (0: everything stays in RAM, whatever ``-ngl`` says)."""
    n_layer = max(model.n_layer, 1)
    ngl_text = flag_value(flags, "-ngl", "--gpu-layers", "--n-gpu-layers")
    if gpus == 0:
        on_gpu = 0.0
    elif ngl_text is None or ngl_text in {"all", "auto"} or flag_int(ngl_text, 0) < 0:
        on_gpu = 1.0  # llama.cpp's default and -1: as many layers as fit, all here
    else:
        on_gpu = min(flag_int(ngl_text, n_layer), n_layer) / n_layer
    experts_in_ram = 1.0 - on_gpu
    if on_gpu:
        overrides = [
            o for v in flag_values(flags, "-ot", "--override-tensor") for o in v.split(",")
        ]
        if (
            "-cmoe" in flags
            or "--cpu-moe" in flags
            or any("exps" in o and o.upper().endswith("=CPU") for o in overrides)
        ):
            experts_in_ram = 1.0
        else:
            ncmoe = flag_value(flags, "-ncmoe", "--n-cpu-moe")
            if ncmoe is not None:
                experts_in_ram = max(experts_in_ram, min(flag_int(ncmoe, 0), n_layer) / n_layer)
    dense_stored = max(model.stored - model.experts_total - model.lookup_total, 0)
    in_ram = int(
        dense_stored * (1.0 - on_gpu) + model.experts_total * experts_in_ram + model.lookup_total
    )
    in_vram = max(model.stored - in_ram, 0)
    ctx = flag_int(flag_value(flags, "-c", "--ctx-size"), DEFAULT_CTX)
    if ctx <= 0:  # -c 0: the model's training context
        ctx = model.n_ctx_train or DEFAULT_CTX
    kv = model.kv_per_token_of_depth * ctx
    ubatch = flag_int(flag_value(flags, "-ub", "--ubatch-size"), DEFAULT_UBATCH)
    compute = 4 * ubatch * (ACTIVATIONS_PER_EMBD * model.n_embd + model.n_vocab)
    private_copy = flag_value(flags, "-lm", "--load-mode") == "none" or "--no-mmap" in flags
    ram_weights_private = in_ram if private_copy else 0
    return Footprint(
        private=ram_weights_private + int(kv * (1.0 - on_gpu)) + compute + PROCESS_BYTES,
        shared=0 if private_copy else in_ram,
        vram=(in_vram + int(kv * on_gpu) + compute) if on_gpu else 0,
        model=model_path,
    )
