"""Synthetic mixture-of-experts models that llama-server loads.

A :class:`ModelSpec` describes a random-weight model of llama.cpp's ``qwen3moe`` architecture.
The same spec (seed included) always gives byte-identical GGUF files, so a model cached on one
run or by one pytest-xdist worker serves every other. Weights are random: the models are for
measuring speed, not for producing sensible text.

The big matrices are ``f16`` (the default) or quantized to ``q8_0``/``q4_0`` with the
``gguf`` package's quantizers; a spec with ``split`` > 1 is written as llama.cpp's split GGUF
(``NAME-00001-of-00003.gguf`` and its siblings, with the ``split.*`` keys ``gguf-split``
writes), whose first shard is what ``llama-server -m`` takes. Files are written tensor by
tensor in chunks of a few MB, so a model of many GB never sits in memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import string
import struct
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from io import BufferedWriter
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as GGMLType

from .. import fs
from ..errors import ModelError

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

_GGML_TYPE: dict[str, GGMLType] = {
    "f16": GGMLType.F16,
    "q8_0": GGMLType.Q8_0,
    "q4_0": GGMLType.Q4_0,
}
_FILE_TYPE: dict[str, gguf.LlamaFileType] = {
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
}
_LATER_FIELD_DEFAULTS: dict[str, int | str] = {"quant": "f16", "split": 1}
"""Fields added after files were first cached: at these values they stay out of the digest and
the spec key, so the files of such specs keep their names and bytes."""

_ROPE_FREQ_BASE = 1_000_000.0
_RMS_EPS = 1e-6
_ALIGNMENT = gguf.GGUF_DEFAULT_ALIGNMENT
_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_CHUNK_ELEMENTS = 1 << 22
"""Weights generated and encoded at a time (16 MB of f32): the writer's memory stays at a few
chunks whatever the model's size."""
_ENCODERS = max(1, min(4, (os.cpu_count() or 2) - 1))
"""Threads quantizing chunks while the calling thread generates the next ones (numpy releases
the GIL in both)."""
_PROGRESS_EVERY_S = 10.0
"""Seconds between progress lines while a model is written (none for a quicker write)."""


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
    if spec.n_layer > MAX_LAYERS:
        raise ModelError(
            f"model spec n_layer={spec.n_layer} exceeds llama.cpp's limit: use <= {MAX_LAYERS}"
        )
    if spec.n_expert > MAX_EXPERTS:
        raise ModelError(
            f"model spec n_expert={spec.n_expert} exceeds llama.cpp's limit: use <= {MAX_EXPERTS}"
        )
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


PRESETS: dict[str, ModelSpec] = {
    "tiny": ModelSpec(
        n_layer=2,
        n_embd=64,
        n_head=4,
        n_head_kv=2,
        head_dim=16,
        n_expert=4,
        n_expert_used=2,
        n_ff_exp=64,
        n_vocab=512,
        n_ctx=4096,
    ),
    "bench": ModelSpec(
        n_layer=8,
        n_embd=1024,
        n_head=16,
        n_head_kv=4,
        head_dim=64,
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=1024,
        n_vocab=4096,
        n_ctx=4096,
    ),
    "large": ModelSpec(
        n_layer=16,
        n_embd=2048,
        n_head=16,
        n_head_kv=4,
        head_dim=128,
        n_expert=64,
        n_expert_used=8,
        n_ff_exp=1024,
        n_vocab=32000,
        n_ctx=16384,
        quant="q4_0",
        split=3,
    ),
}
"""Named specs: ``tiny`` (well under 1 MB, for tests of the machinery), ``bench`` (about
460 MB of f16 weights, big enough for prefill and decode times to be measurable on a CPU) and
``large`` (about 3.8 GB of q4_0 weights in 3 shards, 6.7 G weights of which about 1 G are read
per decoded token: the shape of a production MoE, shrunk to fit two private copies in 24 GB)."""


def preset_names() -> list[str]:
    """The names of :data:`PRESETS`, smallest first."""
    return list(PRESETS)


def model_spec(preset: str = "tiny", **overrides: int | str) -> ModelSpec:
    """The spec of *preset* with some fields replaced by *overrides*.

    Raises :class:`ModelError` for an unknown preset or field, or an invalid value."""
    if preset not in PRESETS:
        raise ModelError(
            f"model preset {preset!r} is unknown: use one of {', '.join(preset_names())}"
        )
    for name in overrides:
        if name not in _FIELDS:
            raise ModelError(
                f"model spec field {name!r} is unknown: use one of {', '.join(_FIELDS)}"
            )
    return dataclasses.replace(PRESETS[preset], **overrides)  # type: ignore[arg-type]  # checked in __post_init__


def summary(spec: ModelSpec) -> str:
    """Size, weight type and file count, e.g. ``3.8 GB q4_0 in 3 files``."""
    n = spec.estimated_bytes()
    size = (
        f"{n / 1e9:.1f} GB"
        if n >= 1e9
        else f"{n / 1e6:.0f} MB"
        if n >= 1e7
        else (f"{n / 1e6:.1f} MB")
    )
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
    m = _SPLIT_NAME.match(path.name)
    prefix = m.group("prefix") if m else path.name.removesuffix(".gguf")
    return [
        path.with_name(gguf.SHARD_NAME_FORMAT.format(prefix, i, spec.split))
        for i in range(1, spec.split + 1)
    ]


def tensor_names(spec: ModelSpec) -> list[str]:
    """The names of the model's tensors, in file order (across shards)."""
    return [t.name for t in _tensor_plan(spec)]


def generate_tensor(spec: ModelSpec, name: str) -> np.ndarray:
    """The contents of tensor *name* in numpy order (the reverse of ggml's dimension order),
    regenerated independently of every other tensor: as written for f16 and f32 tensors, the
    f32 values before quantization for q8_0 and q4_0 ones."""
    for t in _tensor_plan(spec):
        if t.name == name:
            data = np.concatenate(list(_tensor_chunks(spec, t))).reshape(t.np_shape)
            return data.astype(np.float16) if t.gtype == GGMLType.F16 else data
    raise ModelError(f"tensor {name!r} is not part of this model: use one of tensor_names(spec)")


def write_model(spec: ModelSpec, path: Path, progress: Callable[[str], None] | None = None) -> Path:
    """Write the GGUF model of *spec* at *path* (every shard of a split model: see
    :func:`shard_paths`) and return the path of its first file, the one ``llama-server -m``
    takes.

    Each file is written under a temporary name and renamed into place only once all are
    complete: a failure leaves no new file behind (and, when it happens while writing, the
    previous files in place). Writes longer than :data:`_PROGRESS_EVERY_S` report the
    shard and GB written through *progress*. Raises :class:`ModelError` when the files cannot
    be written."""
    targets = shard_paths(spec, Path(path))
    sizes = _sizes(spec)
    parent = targets[0].parent
    temps: list[Path] = []
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _check_free_space(parent, sum(sizes), targets[0])
        for target in targets:
            fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent)
            os.close(fd)
            temps.append(Path(tmp_name))
    except OSError as e:
        _unlink(temps)
        raise ModelError(
            f"cannot write model {targets[0]}: {e}; choose a writable directory"
        ) from e
    placed: list[Path] = []
    try:
        meter = _Meter(progress, sum(sizes), len(targets))
        pool = ThreadPoolExecutor(_ENCODERS, thread_name_prefix="moeperf-quantize")
        try:
            for i, tmp in enumerate(temps):
                _write_shard(spec, i, tmp, pool, meter)
                tmp.chmod(0o644)  # mkstemp creates 0600; cached models are shared read-only
                _fsync(tmp)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        # the first shard last: whoever finds it complete finds the others complete too
        for tmp, target in reversed(list(zip(temps, targets, strict=True))):
            os.replace(tmp, target)
            placed.append(target)
    except BaseException as e:
        _unlink(temps + placed)
        if isinstance(e, OSError):
            raise ModelError(
                f"cannot write model {targets[0]}: {e}; check free space and permissions"
            ) from e
        raise
    return targets[0]


def expected_size(spec: ModelSpec) -> int:
    """The exact size in bytes of the model of *spec*, all its files together."""
    return sum(_sizes(spec))


def validate_model(path: Path, spec: ModelSpec) -> str | None:
    """``None`` if *path* (the first shard of a split model) and every other file of the model
    are complete files of exactly *spec*, else why not (``"missing"``, ``"not a GGUF file"``,
    ``"written for another spec ..."``, ``"truncated: 1234 of 5678 bytes"``, ...; for a split
    model prefixed by the shard, e.g. ``"shard 2 of 3 NAME-00002-of-00003.gguf: missing"``,
    except ``"missing"`` for a missing first shard).

    Reads only the start of each file; a file of the right size and spec whose tensor data was
    altered in place is not detected."""
    paths = shard_paths(spec, Path(path))
    n = len(paths)
    for i, (shard, size) in enumerate(zip(paths, _sizes(spec), strict=True)):
        reason = _check_file(shard, spec, i, size)
        if reason is None:
            continue
        if n == 1 or (i == 0 and reason == "missing"):
            return reason
        return f"shard {i + 1} of {n} {shard.name}: {reason}"
    return None


def ensure_model(
    spec: ModelSpec,
    cache_root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The path of a complete model of *spec* in the cache (its first shard if split), written
    if missing.

    The file is ``<cache_root or fs.cache_dir()>/models/`` :func:`file_name`, its shards beside
    it. Concurrent callers (pytest-xdist workers) write it once; an unusable cached model (a
    shard missing, truncated or of another spec) is reported through *progress* and rewritten,
    never returned. Temporary files that an interrupted writer left beside it are removed: only
    this function should write into the cache's ``models`` folder."""
    say = progress or (lambda _msg: None)
    root = Path(cache_root) if cache_root is not None else fs.cache_dir()
    models = root / "models"
    path = models / file_name(spec)
    if validate_model(path, spec) is None:
        return path
    with fs.file_lock(models / f"{path.name}.lock"):
        reason = validate_model(path, spec)
        if reason is None:
            return path  # another process wrote it while we waited
        shards = shard_paths(spec, path)
        for shard in shards:
            for stale in models.glob(f".{shard.name}.*.tmp"):
                say(f"removing {stale}, left by an interrupted model write")
                _unlink([stale])
        if reason != "missing":
            say(f"cached model {path} is unusable ({reason}); rebuilding it")
        _unlink(shards)  # frees their space before the new files are written
        say(f"writing synthetic model ({describe(spec)}) to {path}")
        write_model(spec, path, progress=say)
        reason = validate_model(path, spec)
        if reason is not None:
            raise ModelError(f"model {path} is unusable right after writing it ({reason})")
    return path


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


def _encode(chunk: np.ndarray, gtype: GGMLType) -> np.ndarray:
    """*chunk* (rows of f32) as the bytes of *gtype*, by the ``gguf`` package's quantizers."""
    return gguf.quants.quantize(chunk, gtype)


def _encoded_chunks(spec: ModelSpec, t: _Tensor, pool: ThreadPoolExecutor) -> Iterator[np.ndarray]:
    """The file bytes of *t*, chunk by chunk: generated here, encoded by *pool* meanwhile."""
    pending: deque[Future[np.ndarray]] = deque()
    for chunk in _tensor_chunks(spec, t):
        pending.append(pool.submit(_encode, chunk, t.gtype))
        if len(pending) > _ENCODERS:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


class _Meter:
    """Progress lines while a model is written: at most one per :data:`_PROGRESS_EVERY_S`."""

    def __init__(self, say: Callable[[str], None] | None, total: int, shards: int) -> None:
        self.say, self.total, self.shards = say, total, shards
        self.done = 0
        self.start = self.last = time.monotonic()

    def add(self, n: int, shard: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.say is None or now - self.last < _PROGRESS_EVERY_S:
            return
        self.last = now
        where = f" (shard {shard + 1} of {self.shards})" if self.shards > 1 else ""
        rate = self.done / 1e6 / max(now - self.start, 1e-9)
        self.say(
            f"wrote {self.done / 1e9:.2f} of {self.total / 1e9:.2f} GB{where}, {rate:.0f} MB/s"
        )


def _write_shard(
    spec: ModelSpec, i: int, path: Path, pool: ThreadPoolExecutor, meter: _Meter
) -> None:
    writer = _header_writer(spec, i)
    try:
        writer.write_header_to_file(path)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        assert writer.fout is not None
        fh = writer.fout[0]
        meter.add(fh.tell(), i)
        for t in _shard_plan(spec)[i]:
            _pad(fh)  # the first: the end of the tensor infos
            written = 0
            for block in _encoded_chunks(spec, t, pool):
                data = block.reshape(-1).view(np.uint8)
                fh.write(data.tobytes())  # a copy of one chunk (4 Mi weights) at most
                written += data.size
                meter.add(data.size, i)
            if written != t.nbytes:
                raise AssertionError(f"{t.name}: wrote {written} bytes, expected {t.nbytes}")
            _pad(fh)
        writer.flush()
    finally:
        writer.close()


def _pad(fh: BufferedWriter) -> None:
    pad = -fh.tell() % _ALIGNMENT
    if pad:
        fh.write(bytes(pad))


def _filler_pieces() -> Iterator[str]:
    """Unique printable token texts, SentencePiece style (``▁`` marks a leading space)."""
    yield "\u2581"
    yield from (c for c in string.printable if c not in string.whitespace)
    letters = string.ascii_lowercase
    for n in itertools.count(1):
        for combo in itertools.product(letters, repeat=n):
            word = "".join(combo)
            yield "\u2581" + word
            if n > 1:
                yield word


def _vocab(spec: ModelSpec) -> tuple[list[str], list[float], list[int]]:
    tt = gguf.TokenType
    tokens = ["<unk>", "<s>", "</s>"]
    types = [tt.UNKNOWN, tt.CONTROL, tt.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [tt.BYTE] * 256
    n_filler = spec.n_vocab - len(tokens)
    tokens += list(itertools.islice(_filler_pieces(), n_filler))
    types += [tt.NORMAL] * n_filler
    scores = [0.0] * MIN_VOCAB + [-float(i) for i in range(n_filler)]
    return tokens, scores, [int(t) for t in types]


def _header_writer(spec: ModelSpec, shard: int = 0) -> gguf.GGUFWriter:
    """A writer holding the metadata and tensor infos of file *shard* of *spec*, with no file
    opened yet. Every file starts with ``general.architecture`` and the digest (which
    :func:`_leading_keys` reads cheaply), then, when split, the ``split.*`` keys that
    ``gguf-split`` writes; the first file alone holds the model's metadata."""
    w = gguf.GGUFWriter(None, ARCH)  # general.architecture is the first key
    w.add_string(DIGEST_KEY, spec.digest())
    if shard == 0:
        w.add_string(SPEC_KEY, json.dumps(_spec_payload(spec), sort_keys=True))
    if spec.split > 1:
        w.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_NO, shard)
        w.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_COUNT, spec.split)
        w.add_int32(gguf.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, _n_tensors(spec))
    if shard == 0:
        _add_model_metadata(w, spec)
    for t in _shard_plan(spec)[shard]:
        if t.gtype in (GGMLType.F16, GGMLType.F32):
            dtype = np.dtype(np.float16 if t.gtype == GGMLType.F16 else np.float32)
            w.add_tensor_info(t.name, t.np_shape, dtype, t.nbytes)
        else:
            w.add_tensor_info(t.name, t.np_shape, np.dtype(np.float32), t.nbytes, t.gtype)
    return w


def _add_model_metadata(w: gguf.GGUFWriter, spec: ModelSpec) -> None:
    w.add_name(f"moeperf synthetic {ARCH} {_base_name(spec)}")
    w.add_file_type(_FILE_TYPE[spec.quant])
    w.add_context_length(spec.n_ctx)
    w.add_embedding_length(spec.n_embd)
    w.add_block_count(spec.n_layer)
    w.add_feed_forward_length(spec.n_ff_exp)
    w.add_head_count(spec.n_head)
    w.add_head_count_kv(spec.n_head_kv)
    w.add_key_length(spec.head_dim)
    w.add_value_length(spec.head_dim)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_rope_freq_base(_ROPE_FREQ_BASE)
    w.add_layer_norm_rms_eps(_RMS_EPS)
    w.add_expert_count(spec.n_expert)
    w.add_expert_used_count(spec.n_expert_used)
    w.add_expert_feed_forward_length(spec.n_ff_exp)
    tokens, scores, types = _vocab(spec)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    if spec.quant != "f16":
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _padded(n: int) -> int:
    return (n + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


def _sizes(spec: ModelSpec) -> tuple[int, ...]:
    try:
        return _expected_sizes(spec)
    except OSError as e:
        raise ModelError(
            f"cannot work out the size of model {file_name(spec)}: {e}; "
            "set TMPDIR to a writable directory"
        ) from e


@functools.lru_cache(maxsize=16)
def _expected_sizes(spec: ModelSpec) -> tuple[int, ...]:
    """The exact size of each file of *spec*: its header, padded, and its tensors, each
    padded."""
    sizes = []
    with tempfile.TemporaryDirectory(prefix="moeperf-header-") as d:
        for i, tensors in enumerate(_shard_plan(spec)):
            probe = Path(d) / f"header-{i}.gguf"
            writer = _header_writer(spec, i)
            try:
                writer.write_header_to_file(probe)
                writer.write_kv_data_to_file()
                writer.write_ti_data_to_file()
                writer.flush()
            finally:
                writer.close()
            header = probe.stat().st_size
            sizes.append(_padded(header) + sum(_padded(t.nbytes) for t in tensors))
    return tuple(sizes)


def _check_free_space(folder: Path, needed: int, target: Path) -> None:
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return  # writing will tell
    if free < needed:
        raise ModelError(
            f"cannot write model {target}: it needs {needed / 1e9:.2f} GB and {folder} has "
            f"{free / 1e9:.2f} GB free; free space or write elsewhere (MOEPERF_CACHE_DIR sets "
            "the cache)"
        )


def _unlink(paths: list[Path]) -> None:
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------------------
# cheap header reading


class _ShortHeader(Exception):
    pass


_SCALARS: dict[int, str] = {
    gguf.GGUFValueType.UINT8: "<B",
    gguf.GGUFValueType.INT8: "<b",
    gguf.GGUFValueType.UINT16: "<H",
    gguf.GGUFValueType.INT16: "<h",
    gguf.GGUFValueType.UINT32: "<I",
    gguf.GGUFValueType.INT32: "<i",
    gguf.GGUFValueType.UINT64: "<Q",
    gguf.GGUFValueType.INT64: "<q",
    gguf.GGUFValueType.FLOAT32: "<f",
    gguf.GGUFValueType.FLOAT64: "<d",
    gguf.GGUFValueType.BOOL: "<?",
}


def _check_file(path: Path, spec: ModelSpec, shard: int, expected: int) -> str | None:
    """Why *path* is not file *shard* (from 0) of *spec*, of *expected* bytes, or ``None``."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(64 * 1024)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"unreadable: {e}"
    if head[:4] != b"GGUF":
        return "not a GGUF file"
    try:
        keys = _leading_keys(head)
    except _ShortHeader:
        if size < expected:
            return f"truncated: {size} of {expected} bytes"
        return "not a GGUF file written by pytest-moeperf (unreadable header)"
    digest = keys.get(DIGEST_KEY)
    if not isinstance(digest, str):
        return "not a GGUF file written by pytest-moeperf"
    if digest != spec.digest():
        return f"written for another spec (digest {digest[:16]}, expected {spec.digest()[:16]})"
    if spec.split > 1:
        split = gguf.Keys.Split
        no, count = keys.get(split.LLM_KV_SPLIT_NO), keys.get(split.LLM_KV_SPLIT_COUNT)
        if (no, count) != (shard, spec.split):
            return f"its header says shard {no} (from 0) of {count}, not {shard} of {spec.split}"
    if size < expected:
        return f"truncated: {size} of {expected} bytes"
    if size != expected:
        return f"wrong size: {size} bytes, expected {expected}"
    return None


def _leading_keys(head: bytes, max_keys: int = 8) -> dict[str, str | int | float]:
    """The string and scalar metadata at the start of a GGUF header, up to the first array."""
    pos = 4 + 4  # magic, version
    if len(head) < pos + 16:
        raise _ShortHeader
    _n_tensors, n_kv = struct.unpack_from("<QQ", head, pos)
    pos += 16

    def read_str() -> str:
        nonlocal pos
        if len(head) < pos + 8:
            raise _ShortHeader
        (n,) = struct.unpack_from("<Q", head, pos)
        if n > 4096:
            raise ValueError("implausible string length")
        if len(head) < pos + 8 + n:
            raise _ShortHeader
        raw = head[pos + 8 : pos + 8 + n]
        pos += 8 + n
        return raw.decode("utf-8", errors="replace")

    out: dict[str, str | int | float] = {}
    try:
        for _ in range(min(n_kv, max_keys)):
            key = read_str()
            if len(head) < pos + 4:
                raise _ShortHeader
            (vtype,) = struct.unpack_from("<I", head, pos)
            pos += 4
            if vtype == gguf.GGUFValueType.STRING:
                out[key] = read_str()
            elif vtype in _SCALARS:
                fmt = _SCALARS[vtype]
                if len(head) < pos + struct.calcsize(fmt):
                    raise _ShortHeader
                (out[key],) = struct.unpack_from(fmt, head, pos)
                pos += struct.calcsize(fmt)
            else:
                break
    except ValueError:
        pass
    return out
