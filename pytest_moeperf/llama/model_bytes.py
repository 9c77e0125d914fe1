"""What one decode step must read from memory, from a GGUF file's own tensor table.

Decode of a Mixture-of-Experts model is bound by memory bandwidth: each generated token reads
every dense weight once, the routed experts' share of the expert weights, one row of each
lookup table (token embeddings), and the KV cache up to the current depth. With the host's
bandwidth (the calibration probe's, or a figure the profile states) that gives a roofline:
the decode rate no build can beat on this host, and a measured rate as a fraction of it.

The estimate counts bytes as stored (quantized sizes included) and assumes an f16 KV cache
in every layer (for hybrid models with few attention layers it overstates the KV part); it
ignores caches, which is why a small model can exceed 100 % on a CPU with a large L3.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelError

_EXPERT_MARK = "_exps."
"""Routed-expert tensors: ``blk.N.ffn_{gate,up,down}_exps.weight`` (shared experts are
``_shexp`` and count as dense)."""
_LOOKUP_SUFFIX = "token_embd.weight"
"""Lookup tables: one row read per token (``token_embd``, ``per_layer_token_embd``)."""
KV_BYTES_PER_ELEMENT = 2  # f16, llama.cpp's default cache type


@dataclass(frozen=True)
class DecodeBytes:
    """The bytes one decode step reads, by kind."""

    dense: int
    """Weights every token reads in full (attention, norms, router, shared experts, output)."""
    experts_active: int
    """The routed experts' share: all expert bytes x experts used / experts."""
    lookup: int
    """One row of each lookup table."""
    kv_per_token_of_depth: int
    """KV-cache bytes read per token of context already in the cache."""
    experts_used: int
    experts: int
    experts_total: int = 0
    """All routed-expert bytes (what a server holds, not what a token reads)."""
    lookup_total: int = 0
    """All bytes of the lookup tables."""
    n_layer: int = 0
    n_embd: int = 0
    n_vocab: int = 0
    stored: int = 0
    """Every tensor byte of the file."""
    n_ctx_train: int = 0
    """The context the model was trained for (what ``-c 0`` gives)."""

    def per_token(self, depth: int = 0) -> int:
        """Bytes read to generate one token with *depth* tokens already in the context."""
        return self.dense + self.experts_active + self.lookup + self.kv_per_token_of_depth * depth

    def limit(self, bandwidth_gbs: float, depth: int = 0) -> float:
        """The decode rate (tok/s) memory bandwidth *bandwidth_gbs* allows at *depth*."""
        return bandwidth_gbs * 1e9 / self.per_token(depth)


def _value(fields: Any, key: str) -> Any:
    field = fields.get(key)
    if field is None:
        return None
    value = field.contents()
    return value


def decode_bytes(model: Path) -> DecodeBytes:
    """Read *model*'s tensor table and metadata (no weights are loaded) and count what a
    decode step reads; a file that is not a readable GGUF is a :class:`ModelError`."""
    try:
        from gguf import GGUFReader

        reader = GGUFReader(model)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"{model}: not a readable GGUF file ({exc})") from None
    fields = reader.fields
    arch = _value(fields, "general.architecture")
    if not isinstance(arch, str):
        raise ModelError(f"{model}: GGUF without general.architecture")
    n_experts = int(_value(fields, f"{arch}.expert_count") or 0)
    n_used = int(_value(fields, f"{arch}.expert_used_count") or 0)
    dense = experts = lookup = 0
    has_output = False
    embd_bytes = lookup_total = stored = 0
    n_vocab = 0
    for t in reader.tensors:
        size = int(t.n_bytes)
        stored += size
        if t.name.endswith(_LOOKUP_SUFFIX):
            rows = int(t.shape[-1]) if len(t.shape) > 1 else 1
            lookup += size // max(rows, 1)
            lookup_total += size
            if t.name == _LOOKUP_SUFFIX:
                n_vocab = rows
            if t.name == _LOOKUP_SUFFIX:
                embd_bytes = size
        elif _EXPERT_MARK in t.name:
            experts += size
        else:
            dense += size
            has_output = has_output or t.name == "output.weight"
    if not has_output:  # tied embeddings: the output projection reads token_embd in full
        dense += embd_bytes
    active = experts * n_used // n_experts if n_experts and n_used else experts
    n_layer = int(_value(fields, f"{arch}.block_count") or 0)
    heads_kv = _value(fields, f"{arch}.attention.head_count_kv")
    heads = _value(fields, f"{arch}.attention.head_count")
    embd = int(_value(fields, f"{arch}.embedding_length") or 0)
    if isinstance(heads_kv, list):  # per-layer counts
        kv_heads_total = sum(int(h) for h in heads_kv)
    else:
        kv_heads_total = int(heads_kv if heads_kv is not None else heads or 0) * n_layer
    head_count = heads[0] if isinstance(heads, list) else heads
    key_len = _value(fields, f"{arch}.attention.key_length")
    value_len = _value(fields, f"{arch}.attention.value_length")
    default_dim = embd // int(head_count) if head_count else 0
    k_dim = int(key_len) if key_len is not None else default_dim
    v_dim = int(value_len) if value_len is not None else default_dim
    kv = kv_heads_total * (k_dim + v_dim) * KV_BYTES_PER_ELEMENT
    return DecodeBytes(
        dense=dense,
        experts_active=active,
        lookup=lookup,
        kv_per_token_of_depth=kv,
        experts_used=n_used,
        experts=n_experts,
        experts_total=experts,
        lookup_total=lookup_total,
        n_layer=n_layer,
        n_embd=embd,
        n_vocab=n_vocab,
        stored=stored,
        n_ctx_train=int(_value(fields, f"{arch}.context_length") or 0),
    )
