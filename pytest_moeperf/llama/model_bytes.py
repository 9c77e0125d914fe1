"""What one decode step must read from memory, from a GGUF file's own tensor table.

Decode of a Mixture-of-Experts model is bound by memory bandwidth: each generated token reads
every dense weight once, the routed experts' share of the expert weights, one row of each
lookup table (token embeddings), and the KV cache up to the current depth. With the host's
bandwidth (the calibration probe's, or a figure the profile states) that gives a roofline:
the decode rate no build can beat on this host, and a measured rate as a fraction of it.

The estimate counts bytes as stored (quantized sizes included) and an f16 KV cache in the
attention layers only: a hybrid model's recurrent layers (Gated DeltaNet, Mamba) hold a fixed
state per sequence instead (:attr:`DecodeBytes.recurrent_per_seq`), which a decode step reads
once. Counting the KV cache in every layer overstated ADR-0042's model (12 attention layers of
48) four times: 12 GiB at ``-c 131072`` where llama.cpp allocates 3. It ignores caches, which
is why a small model can exceed 100 % on a CPU with a large L3.

A split model (llama.cpp's ``gguf-split``: ``NAME-00001-of-00003.gguf`` and its siblings) is
read whole: the first shard holds the metadata and ``split.count``, every shard its own
tensors, and the counts here cover all of them. Name the first shard, as ``llama-server -m``
wants it.
"""

from __future__ import annotations

import re
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelError

_EXPERT_MARK = "_exps."
"""Routed-expert tensors: ``blk.N.ffn_{gate,up,down}_exps.weight`` (shared experts are
``_shexp`` and count as dense)."""
_LOOKUP_SUFFIX = "token_embd.weight"
"""Lookup tables: one row read per token (``token_embd``, ``per_layer_token_embd``)."""
REPACKED_TYPES = frozenset({2, 12, 20})
"""GGML types whose weight matrices llama.cpp's CPU backend repacks into its own interleaved
layout (``ggml-cpu/repack.cpp``: Q4_0, Q4_K and IQ4_NL, on x86 with AVX2 and on ARM): such a
tensor cannot stay a page of the mapped file, so a CPU server holds it in anonymous memory
even under mmap (measured: a 3.8 GB q4_0 model mapped by a CPU-only b11434 server held 3.71
GiB of anonymous memory; ``--no-repack`` turns it off)."""
KV_BYTES_PER_ELEMENT = 2  # f16, llama.cpp's default cache type
STATE_BYTES_PER_ELEMENT = 4
"""A recurrent layer's state is f32 (llama.cpp's default ``type_r``/``type_s``)."""
FULL_ATTENTION_INTERVAL = {"qwen3next": 4}
"""Architectures whose every N-th layer (1-based) is full attention and the rest recurrent,
where the GGUF gives no ``full_attention_interval`` (llama.cpp's own default)."""
_SPLIT_NAME = re.compile(r"(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")
"""llama.cpp's split file name (``llama_split_path``: ``%s-%05d-of-%05d.gguf``)."""
SPLIT_COUNT = "split.count"
SPLIT_NO = "split.no"
SPLIT_TENSORS = "split.tensors.count"


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
    repacked_dense: int = 0
    """Of the dense weights, the bytes of matrices of :data:`REPACKED_TYPES`."""
    repacked_experts: int = 0
    """Of the routed experts, the bytes of matrices of :data:`REPACKED_TYPES`."""
    lookup_total: int = 0
    """All bytes of the lookup tables."""
    recurrent_per_seq: int = 0
    """Bytes of the recurrent layers' state of one sequence (a slot): ``(conv_kernel - 1) x
    (inner + 2 x groups x state)`` plus ``state x inner`` f32 values a recurrent layer (0: a
    model without recurrent layers)."""
    attention_layers: int = 0
    """Layers that hold a KV cache."""
    n_layer: int = 0
    n_embd: int = 0
    n_vocab: int = 0
    stored: int = 0
    """Every tensor byte of the file."""
    n_ctx_train: int = 0
    """The context the model was trained for (what ``-c 0`` gives)."""
    architecture: str = ""
    """``general.architecture`` (``qwen3moe``)."""
    shards: int = 1
    """Files of the model: 1, or the ``split.count`` of a split model."""
    file_bytes: int = 0
    """Bytes of its files together (header and padding included)."""

    def per_token(self, depth: int = 0) -> int:
        """Bytes read to generate one token with *depth* tokens already in the context."""
        fixed = self.dense + self.experts_active + self.lookup + self.recurrent_per_seq
        return fixed + self.kv_per_token_of_depth * depth

    def limit(self, bandwidth_gbs: float, depth: int = 0) -> float:
        """The decode rate (tok/s) memory bandwidth *bandwidth_gbs* allows at *depth*."""
        return bandwidth_gbs * 1e9 / self.per_token(depth)


def _value(fields: Any, key: str) -> Any:
    field = fields.get(key)
    return None if field is None else field.contents()


def split_name(name: str) -> tuple[str, int, int] | None:
    """(prefix, shard number from 1, shard count) of a split file name such as
    ``Qwen-UD-Q4_K_XL-00001-of-00003.gguf``; ``None`` for any other name."""
    m = _SPLIT_NAME.fullmatch(name)
    return (m["prefix"], int(m["no"]), int(m["count"])) if m else None


def shard_path(first: Path, number: int, count: int) -> Path:
    """Shard *number* (from 1) of *count* beside *first*, named as llama.cpp names it."""
    parts = split_name(first.name)
    prefix = parts[0] if parts else first.name.removesuffix(".gguf")
    return first.with_name(f"{prefix}-{number:05d}-of-{count:05d}.gguf")


def model_shards(model: Path) -> tuple[Path, ...]:
    """The files of *model*: ``(model,)``, or every shard of a split model given by its first
    shard (``NAME-00001-of-00003.gguf``), in order. Only names and presence are checked here
    (:func:`decode_bytes` checks the headers too); a :class:`ModelError` names a directory,
    a missing file or shard, or a shard other than the first."""
    if model.is_dir():
        raise ModelError(
            f"{model}: is a directory; name the GGUF file (the first shard of a split model)"
        )
    if not model.is_file():
        raise ModelError(f"{model}: no such file; name a GGUF model file")
    parts = split_name(model.name)
    if parts is None:
        return (model,)
    _prefix, number, count = parts
    if count < 1 or not 1 <= number <= count:
        raise ModelError(
            f"{model}: shard {number} of {count} is not a split file name llama.cpp writes; "
            "name the first shard NAME-00001-of-0000N.gguf"
        )
    if number != 1:
        first = shard_path(model, 1, count)
        raise ModelError(
            f"{model}: is shard {number} of {count} of a split model; name its first shard "
            f"{first.name} (llama-server -m reads the others from it)"
        )
    shards = tuple(shard_path(model, i, count) for i in range(1, count + 1))
    for i, shard in enumerate(shards, start=1):
        if not shard.is_file():
            raise ModelError(
                f"{shard}: shard {i} of {count} of {model.name} is missing; put every shard "
                "in the same directory as the first"
            )
    return shards


def _reader(path: Path) -> Any:
    try:
        from gguf import GGUFReader

        return GGUFReader(path)
    except (OSError, ValueError, KeyError, IndexError, struct.error) as exc:
        raise ModelError(
            f"{path}: not a readable GGUF file ({exc}); check the download or name another file"
        ) from None


def _int_field(fields: Any, key: str) -> int | None:
    value = _value(fields, key)
    return None if value is None else int(value)


def _check_split(model: Path, shards: tuple[Path, ...], readers: list[Any]) -> None:
    """The headers agree with the file names: ``split.count`` of the first shard is the number
    of shards, each shard's ``split.no`` its place, ``split.tensors.count`` the tensors found."""
    fields = readers[0].fields
    declared = _int_field(fields, SPLIT_COUNT) or 1
    if declared != len(shards):
        if len(shards) == 1:
            raise ModelError(
                f"{model}: its header says split into {declared} files but the name does not "
                f"end in -00001-of-{declared:05d}.gguf; keep the names gguf-split wrote"
            )
        raise ModelError(
            f"{model}: the name says {len(shards)} shards but its header's split.count is "
            f"{declared}; the shards do not belong together (download them again)"
        )
    if len(shards) == 1:
        return
    for i, (shard, reader) in enumerate(zip(shards, readers, strict=True)):
        number = _int_field(reader.fields, SPLIT_NO)
        if number is not None and number != i:
            raise ModelError(
                f"{shard}: its header says it is shard {number + 1}, its name shard {i + 1}; "
                "keep the names gguf-split wrote"
            )
    tensors = sum(len(r.tensors) for r in readers)
    expected = _int_field(fields, SPLIT_TENSORS)
    if expected is not None and expected != tensors:
        raise ModelError(
            f"{model}: split.tensors.count is {expected} but its {len(shards)} shards hold "
            f"{tensors} tensors; a shard is truncated or from another model (download again)"
        )


def _attention_layers(fields: Any, arch: str, n_layer: int, heads_kv: Any, heads: Any) -> int:
    """Layers with a KV cache: those with KV heads where the counts are per layer; none of a
    model without heads (Mamba); every N-th of a hybrid with a full-attention interval; all
    of any other model."""
    if isinstance(heads_kv, list):
        return sum(1 for h in heads_kv if int(h) > 0)
    if not isinstance(heads, list) and not int(heads_kv if heads_kv is not None else heads or 0):
        return 0
    interval = int(
        _value(fields, f"{arch}.full_attention_interval") or FULL_ATTENTION_INTERVAL.get(arch, 0)
    )
    if interval > 1:
        return sum(1 for i in range(n_layer) if (i + 1) % interval == 0)
    return n_layer


def _recurrent_state(fields: Any, arch: str) -> int:
    """Bytes of one recurrent layer's state of one sequence (llama.cpp's ``n_embd_r`` +
    ``n_embd_s``, f32); 0 for a model without ``ssm.*`` sizes."""
    conv = int(_value(fields, f"{arch}.ssm.conv_kernel") or 0)
    inner = int(_value(fields, f"{arch}.ssm.inner_size") or 0)
    state = int(_value(fields, f"{arch}.ssm.state_size") or 0)
    groups = int(_value(fields, f"{arch}.ssm.group_count") or 0)
    rolling = max(conv - 1, 0) * (inner + 2 * groups * state)
    return (rolling + state * inner) * STATE_BYTES_PER_ELEMENT


@dataclass
class _Tally:
    """A model's tensor bytes by kind, summed over its tensor table: the fields of
    :class:`DecodeBytes` of the same names."""

    dense: int = 0
    experts_total: int = 0
    lookup: int = 0
    lookup_total: int = 0
    repacked_dense: int = 0
    repacked_experts: int = 0
    stored: int = 0
    n_vocab: int = 0


def _tally(readers: list[Any]) -> _Tally:
    """The bytes of every tensor of *readers* (the shards) by kind: one row of each lookup
    table per token, the routed experts, the dense rest; a model without ``output.weight``
    (tied embeddings) reads ``token_embd`` in full as its output projection."""
    tally = _Tally()
    has_output = False
    embd_bytes = 0
    for t in (t for r in readers for t in r.tensors):
        size = int(t.n_bytes)
        tally.stored += size
        repacked = size if int(t.tensor_type) in REPACKED_TYPES and len(t.shape) >= 2 else 0
        if t.name.endswith(_LOOKUP_SUFFIX):
            rows = int(t.shape[-1]) if len(t.shape) > 1 else 1
            tally.lookup += size // max(rows, 1)
            tally.lookup_total += size
            if t.name == _LOOKUP_SUFFIX:
                tally.n_vocab, embd_bytes = rows, size
        elif _EXPERT_MARK in t.name:
            tally.experts_total += size
            tally.repacked_experts += repacked
        else:
            tally.dense += size
            tally.repacked_dense += repacked
            has_output = has_output or t.name == "output.weight"
    if not has_output:  # tied embeddings: the output projection reads token_embd in full
        tally.dense += embd_bytes
    return tally


def _kv_per_token(
    fields: Any, arch: str, attention: int, heads_kv: Any, heads: Any, embd: int
) -> int:
    """KV-cache bytes per token of depth: keys and values of every KV head of the *attention*
    layers (head sizes from the GGUF, else ``n_embd / heads``), f16."""
    if isinstance(heads_kv, list):  # per-layer counts
        kv_heads_total = sum(int(h) for h in heads_kv)
    else:
        kv_heads_total = int(heads_kv if heads_kv is not None else heads or 0) * attention
    head_count = heads[0] if isinstance(heads, list) else heads
    key_len = _value(fields, f"{arch}.attention.key_length")
    value_len = _value(fields, f"{arch}.attention.value_length")
    default_dim = embd // int(head_count) if head_count else 0
    k_dim = int(key_len) if key_len is not None else default_dim
    v_dim = int(value_len) if value_len is not None else default_dim
    return kv_heads_total * (k_dim + v_dim) * KV_BYTES_PER_ELEMENT


def decode_bytes(model: Path) -> DecodeBytes:
    """Read *model*'s tensor table and metadata (no weights are loaded) and count what a
    decode step reads; every shard of a split model is read (:func:`model_shards`). A file
    that is not a readable GGUF, or shards that do not belong together, are a
    :class:`ModelError` naming the file."""
    shards = model_shards(model)
    readers = [_reader(p) for p in shards]
    _check_split(model, shards, readers)
    fields = readers[0].fields
    arch = _value(fields, "general.architecture")
    if not isinstance(arch, str):
        raise ModelError(f"{model}: GGUF without general.architecture; not a llama.cpp model")
    n_experts = int(_value(fields, f"{arch}.expert_count") or 0)
    n_used = int(_value(fields, f"{arch}.expert_used_count") or 0)
    tally = _tally(readers)
    experts = tally.experts_total
    active = experts * n_used // n_experts if n_experts and n_used else experts
    n_layer = int(_value(fields, f"{arch}.block_count") or 0)
    heads_kv = _value(fields, f"{arch}.attention.head_count_kv")
    heads = _value(fields, f"{arch}.attention.head_count")
    embd = int(_value(fields, f"{arch}.embedding_length") or 0)
    attention = _attention_layers(fields, arch, n_layer, heads_kv, heads)
    return DecodeBytes(
        **asdict(tally),
        experts_active=active,
        kv_per_token_of_depth=_kv_per_token(fields, arch, attention, heads_kv, heads, embd),
        experts_used=n_used,
        experts=n_experts,
        recurrent_per_seq=_recurrent_state(fields, arch) * (n_layer - attention),
        attention_layers=attention,
        n_layer=n_layer,
        n_embd=embd,
        n_ctx_train=int(_value(fields, f"{arch}.context_length") or 0),
        architecture=arch,
        shards=len(shards),
        file_bytes=sum(p.stat().st_size for p in shards),
    )
