"""Synthetic mixture-of-experts models that llama-server loads.

A :class:`ModelSpec` describes a random-weight model of llama.cpp's ``qwen3moe`` architecture.
The same spec (seed included) always gives byte-identical GGUF files, so a model cached on one
run or by one pytest-xdist worker serves every other. Weights are random: the models are for
measuring speed, not for producing sensible text.

The big matrices are ``f16`` (the default) or quantized to ``q8_0``/``q4_0`` with the
``gguf`` package's quantizers; a spec with ``split`` > 1 is written as llama.cpp's split GGUF
(``NAME-00001-of-00003.gguf`` and its siblings, with the ``split.*`` keys ``gguf-split``
writes), whose first shard is what ``llama-server -m`` takes. Files are written tensor by
tensor in chunks of a few MB, so a model of many GB never sits in memory
(:mod:`.synthetic_gguf` writes, checks and caches the files; this module is the spec, its
presets and its tensors).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as GGMLType

from ..errors import ModelError
from .model_bytes import shard_path

ARCH = "qwen3moe"
"""The llama.cpp architecture the synthetic models use."""

FORMAT_VERSION = 1
"""Version of the file layout written here; part of every spec digest, so changing the writer
invalidates cached models."""

DIGEST_KEY = "moeperf.spec_digest"
"""GGUF metadata key holding :meth:`ModelSpec.digest` of the spec a file was written for (in
every shard of a split model)."""

SPEC_KEY = "moeperf.spec"
"""GGUF metadata key holding the spec as JSON, for people inspecting a file."""

N_SPECIAL = 3
"""``<unk>``, ``<s>``, ``</s>``."""

MIN_VOCAB = N_SPECIAL + 256
"""Special tokens plus one token per byte, so that any text tokenizes."""

BYTE_TOKEN_IDS = range(N_SPECIAL, N_SPECIAL + 256)
"""Ids of the byte-fallback tokens ``<0x00>``..``<0xFF>``: generating them can produce invalid
UTF-8, which some llama-server builds (b11053) reject with HTTP 500."""

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS

QUANT_TYPES: tuple[str, ...] = ("f16", "q8_0", "q4_0")
"""Types of the big matrices (token embeddings, attention, experts, output); norms and the
router stay f32."""

QUANT_BLOCK = 32
"""Weights per block of ``q8_0`` and ``q4_0``: every quantized row is a whole number of
blocks."""

STRING_FIELDS: tuple[str, ...] = ("quant",)
"""The spec fields that hold text; every other field is an integer."""

_GGML_TYPE: dict[str, GGMLType] = {q: GGMLType[q.upper()] for q in QUANT_TYPES}
_FILE_TYPE: dict[str, gguf.LlamaFileType] = {
    q: gguf.LlamaFileType[f"MOSTLY_{q.upper()}"] for q in QUANT_TYPES
}
_LATER_FIELD_DEFAULTS: dict[str, int | str] = {"quant": "f16", "split": 1}
"""Fields added after files were first cached: at these values they stay out of the digest and
the spec key, so the files of such specs keep their names and bytes."""

_ALIGNMENT = gguf.GGUF_DEFAULT_ALIGNMENT
_CHUNK_ELEMENTS = 1 << 22
"""Weights generated and encoded at a time (16 MB of f32): the writer's memory stays at a few
chunks whatever the model's size."""


@dataclass(frozen=True)
class ModelSpec:
    """The dimensions, weight type, file count and seed of a synthetic ``qwen3moe`` model.

    ``n_embd`` hidden size, ``n_head``/``n_head_kv`` query/key-value heads of ``head_dim``
    each, ``n_expert`` experts per layer of which ``n_expert_used`` are routed per token, each
    ``n_ff_exp`` wide, ``n_vocab`` tokens, ``n_ctx`` trained context length, ``quant`` the type
    of the big matrices (one of :data:`QUANT_TYPES`), ``split`` the number of files (shards).
    Invalid values raise :class:`ModelError`.
    """

    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    n_vocab: int
    n_ctx: int
    seed: int = 0
    quant: str = "f16"
    split: int = 1

    def __post_init__(self) -> None:
        _check_spec(self)

    def digest(self) -> str:
        """A stable sha256 hex digest of this spec and the writer's :data:`FORMAT_VERSION`
        (``quant`` and ``split`` count only when not ``f16`` and 1)."""
        payload = {"format_version": FORMAT_VERSION, "arch": ARCH, **_spec_payload(self)}
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def estimated_bytes(self) -> int:
        """The approximate size of the model's files together in bytes (exact for the tensor
        data, estimated for the metadata)."""
        data = sum(_padded(t.nbytes) for t in _tensor_plan(self))
        # token text (up to ~8 bytes), its length (8), score (4) and type (4), plus fixed keys
        metadata = 4096 + self.n_vocab * 24 + 1024 * (self.split - 1)
        return data + metadata


_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelSpec))
_INT_FIELDS: tuple[str, ...] = tuple(f for f in _FIELDS if f not in STRING_FIELDS)


def _spec_payload(spec: ModelSpec) -> dict[str, int | str]:
    fields: dict[str, int | str] = dataclasses.asdict(spec)
    for name, default in _LATER_FIELD_DEFAULTS.items():
        if fields[name] == default:
            del fields[name]
    return fields


# ----------------------------------------------------------------------------------------------
# spec checks


def _n_tensors(spec: ModelSpec) -> int:
    return 3 + 12 * spec.n_layer


def _check_spec(spec: ModelSpec) -> None:
    for name in _INT_FIELDS:
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"model spec {name}={value!r} is not an integer: use a whole number")
        low = 0 if name == "seed" else 1
        if value < low:
            raise ModelError(f"model spec {name}={value} is too small: use a value >= {low}")
    if not isinstance(spec.quant, str) or spec.quant not in QUANT_TYPES:
        raise ModelError(
            f"model spec quant={spec.quant!r} is unknown: use one of {', '.join(QUANT_TYPES)}"
        )
    if spec.seed >= 2**64:
        raise ModelError(f"model spec seed={spec.seed} is too large: use a value < 2**64")
    for name, limit in (("n_layer", MAX_LAYERS), ("n_expert", MAX_EXPERTS)):
        value = getattr(spec, name)
        if value > limit:
            raise ModelError(f"model spec {name}={value} exceeds llama.cpp's limit: use <= {limit}")
    if spec.n_expert_used > spec.n_expert:
        raise ModelError(
            f"model spec n_expert_used={spec.n_expert_used} exceeds n_expert={spec.n_expert}: "
            f"use n_expert_used <= n_expert"
        )
    if spec.n_head % spec.n_head_kv != 0:
        divisors = [d for d in range(1, spec.n_head + 1) if spec.n_head % d == 0]
        raise ModelError(
            f"model spec n_head_kv={spec.n_head_kv} does not divide n_head={spec.n_head}: "
            f"use one of {', '.join(map(str, divisors))}"
        )
    if spec.head_dim % 2 != 0:
        raise ModelError(
            f"model spec head_dim={spec.head_dim} is odd: RoPE needs an even head_dim, use e.g. 16"
        )
    if spec.n_vocab < MIN_VOCAB:
        raise ModelError(
            f"model spec n_vocab={spec.n_vocab} is too small: use >= {MIN_VOCAB} "
            f"({N_SPECIAL} special tokens + 256 byte tokens)"
        )
    if spec.split > _n_tensors(spec):
        raise ModelError(
            f"model spec split={spec.split} exceeds the model's {_n_tensors(spec)} tensors "
            f"(one shard holds at least one): use split <= {_n_tensors(spec)}"
        )
    if spec.quant != "f16":
        _check_rows(spec)


def _check_rows(spec: ModelSpec) -> None:
    """Every quantized row (ggml's ``ne0``) is a whole number of :data:`QUANT_BLOCK` weights."""
    block, q = QUANT_BLOCK, spec.quant
    for name in ("n_embd", "n_ff_exp"):
        value = getattr(spec, name)
        if value % block:
            below, above = value // block * block, (value // block + 1) * block
            use = f"{below} or {above}" if below else str(above)
            raise ModelError(
                f"model spec {name}={value} is not a multiple of {block}, the block size of "
                f"quant={q}: use {name}={use}, or quant=f16"
            )
    rows = spec.n_head * spec.head_dim
    if rows % block:
        head_dim = next(
            d for d in itertools.count(spec.head_dim + 2, 2) if spec.n_head * d % block == 0
        )
        raise ModelError(
            f"model spec n_head*head_dim={spec.n_head}*{spec.head_dim}={rows} is not a multiple "
            f"of {block}, the block size of quant={q}: use e.g. head_dim={head_dim}, or quant=f16"
        )


# fmt: off
PRESETS: dict[str, ModelSpec] = {
    "tiny": ModelSpec(n_layer=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_expert=4,
                      n_expert_used=2, n_ff_exp=64, n_vocab=512, n_ctx=4096),
    "bench": ModelSpec(n_layer=8, n_embd=1024, n_head=16, n_head_kv=4, head_dim=64, n_expert=8,
                       n_expert_used=2, n_ff_exp=1024, n_vocab=4096, n_ctx=4096),
    "large": ModelSpec(n_layer=16, n_embd=2048, n_head=16, n_head_kv=4, head_dim=128,
                       n_expert=64, n_expert_used=8, n_ff_exp=1024, n_vocab=32000,
                       n_ctx=16384, quant="q4_0", split=3),
}
# fmt: on
"""Named specs: ``tiny`` (well under 1 MB, for tests of the machinery), ``bench`` (about
460 MB of f16 weights, big enough for prefill and decode times to be measurable on a CPU) and
``large`` (about 3.8 GB of q4_0 weights in 3 shards, 6.7 G weights of which about 1 G are read
per decoded token: the shape of a production MoE, shrunk to fit two private copies in 24 GB)."""


def model_spec(preset: str = "tiny", **overrides: int | str) -> ModelSpec:
    """The spec of *preset* with some fields replaced by *overrides*.

    Raises :class:`ModelError` for an unknown preset or field, or an invalid value."""
    if preset not in PRESETS:
        raise ModelError(f"model preset {preset!r} is unknown: use one of {', '.join(PRESETS)}")
    for name in overrides:
        if name not in _FIELDS:
            raise ModelError(
                f"model spec field {name!r} is unknown: use one of {', '.join(_FIELDS)}"
            )
    return dataclasses.replace(PRESETS[preset], **overrides)  # type: ignore[arg-type]  # checked in __post_init__


def summary(spec: ModelSpec) -> str:
    """Size, weight type and file count, e.g. ``3.8 GB q4_0 in 3 files``."""
    n = spec.estimated_bytes()
    if n >= 1e9:
        size = f"{n / 1e9:.1f} GB"
    elif n >= 1e7:
        size = f"{n / 1e6:.0f} MB"
    else:
        size = f"{n / 1e6:.1f} MB"
    files = f" in {spec.split} files" if spec.split > 1 else ""
    return f"{size} {spec.quant}{files}"


def describe(spec: ModelSpec) -> str:
    """One line for progress output: layers, hidden size, experts, vocabulary, size and type."""
    return (
        f"{ARCH} {spec.n_layer} layers, {spec.n_embd} hidden, {spec.n_expert} experts "
        f"({spec.n_expert_used} used), vocab {spec.n_vocab}, {summary(spec)}"
    )


def _base_name(spec: ModelSpec) -> str:
    base = dataclasses.replace(spec, seed=0)
    name = next((n for n, p in PRESETS.items() if p == base), "custom")
    return f"{name}-{spec.digest()[:16]}"


def file_name(spec: ModelSpec) -> str:
    """The cache file name of *spec*: ``<preset or custom>-<digest[:16]>.gguf``, or for a split
    model its first shard's ``<preset or custom>-<digest[:16]>-00001-of-0000N.gguf``."""
    if spec.split == 1:
        return f"{_base_name(spec)}.gguf"
    return gguf.SHARD_NAME_FORMAT.format(_base_name(spec), 1, spec.split)


def shard_paths(spec: ModelSpec, path: Path) -> list[Path]:
    """The files of the model of *spec* named by *path*: ``[path]``, or for a split model
    ``NAME-00001-of-0000N.gguf`` ... ``NAME-0000N-of-0000N.gguf`` beside it, where ``NAME`` is
    *path*'s name less ``.gguf`` and less any ``-0000i-of-0000N`` ending."""
    path = Path(path)
    if spec.split == 1:
        return [path]
    return [shard_path(path, i, spec.split) for i in range(1, spec.split + 1)]


# ----------------------------------------------------------------------------------------------
# layout and contents


@dataclass(frozen=True)
class _Tensor:
    name: str
    ggml_shape: tuple[int, ...]  # ggml order: ne0 (contiguous) first
    gtype: GGMLType
    fan_in: int  # 0: all ones (norm weights)

    @property
    def np_shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.ggml_shape))

    @property
    def nbytes(self) -> int:
        block, type_size = gguf.GGML_QUANT_SIZES[self.gtype]
        return math.prod(self.ggml_shape) // block * type_size


@functools.lru_cache(maxsize=16)
def _tensor_plan(spec: ModelSpec) -> tuple[_Tensor, ...]:
    e, v, d = spec.n_embd, spec.n_vocab, spec.head_dim
    q, kv = spec.n_head * d, spec.n_head_kv * d
    ff, x = spec.n_ff_exp, spec.n_expert
    w, f32 = _GGML_TYPE[spec.quant], GGMLType.F32  # w: the big matrices
    plan = [_Tensor("token_embd.weight", (e, v), w, 1)]
    for i in range(spec.n_layer):
        b = f"blk.{i}."
        plan += [
            _Tensor(b + "attn_norm.weight", (e,), f32, 0),
            _Tensor(b + "attn_q.weight", (e, q), w, e),
            _Tensor(b + "attn_k.weight", (e, kv), w, e),
            _Tensor(b + "attn_v.weight", (e, kv), w, e),
            _Tensor(b + "attn_output.weight", (q, e), w, q),
            _Tensor(b + "attn_q_norm.weight", (d,), f32, 0),
            _Tensor(b + "attn_k_norm.weight", (d,), f32, 0),
            _Tensor(b + "ffn_norm.weight", (e,), f32, 0),
            _Tensor(b + "ffn_gate_inp.weight", (e, x), f32, e),
            _Tensor(b + "ffn_gate_exps.weight", (e, ff, x), w, e),
            _Tensor(b + "ffn_up_exps.weight", (e, ff, x), w, e),
            _Tensor(b + "ffn_down_exps.weight", (ff, e, x), w, ff),
        ]
    plan += [
        _Tensor("output_norm.weight", (e,), f32, 0),
        _Tensor("output.weight", (e, v), w, e),
    ]
    return tuple(plan)


@functools.lru_cache(maxsize=16)
def _shard_plan(spec: ModelSpec) -> tuple[tuple[_Tensor, ...], ...]:
    """The tensors of each shard, in file order: shard *j* starts at the first tensor with at
    least *j*/``split`` of the data before it, and every shard holds at least one tensor."""
    plan = _tensor_plan(spec)
    n = spec.split
    before = list(itertools.accumulate((_padded(t.nbytes) for t in plan), initial=0))
    total = before[-1]
    starts = [0]
    for j in range(1, n):
        k = next(k for k, b in enumerate(before) if b * n >= j * total)
        starts.append(min(max(k, starts[-1] + 1), len(plan) - (n - j)))
    starts.append(len(plan))
    return tuple(plan[a:b] for a, b in itertools.pairwise(starts))


def _tensor_seed(seed: int, name: str) -> int:
    h = hashlib.sha256(f"{FORMAT_VERSION}:{seed}:{name}".encode()).digest()
    return int.from_bytes(h[:16], "little")


def _tensor_chunks(spec: ModelSpec, t: _Tensor) -> Iterator[np.ndarray]:
    """The f32 values of *t* as consecutive blocks of rows (``ne0`` wide) of a few MB each.

    One generator stream per tensor, drawn in order: the chunks concatenated equal one draw of
    the whole tensor (so chunking left the f16 files' bytes as they were)."""
    ne0 = t.ggml_shape[0]
    rows = math.prod(t.ggml_shape[1:])
    if t.fan_in == 0:
        yield np.ones((rows, ne0), dtype=np.float32)
        return
    rng = np.random.default_rng(_tensor_seed(spec.seed, t.name))
    scale = np.float32(1.0 / np.sqrt(t.fan_in))
    step = max(1, _CHUNK_ELEMENTS // ne0)
    for start in range(0, rows, step):
        a = rng.standard_normal((min(step, rows - start), ne0), dtype=np.float32)
        a *= scale
        yield a


def _padded(n: int) -> int:
    """*n* bytes rounded up to GGUF's alignment."""
    return (n + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT
