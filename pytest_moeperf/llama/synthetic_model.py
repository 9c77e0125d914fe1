"""Synthetic mixture-of-experts models that llama-server loads.

A :class:`ModelSpec` describes a random-weight model of llama.cpp's ``qwen3moe`` architecture.
The same spec (seed included) always gives a byte-identical GGUF file, so a file cached on one
run or by one pytest-xdist worker serves every other. Weights are random: the models are for
measuring speed, not for producing sensible text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import itertools
import json
import os
import string
import struct
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from .. import fs
from ..errors import ModelError

ARCH = "qwen3moe"
"""The llama.cpp architecture the synthetic models use."""

FORMAT_VERSION = 1
"""Version of the file layout written here; part of every spec digest, so changing the writer
invalidates cached models."""

DIGEST_KEY = "moeperf.spec_digest"
"""GGUF metadata key holding :meth:`ModelSpec.digest` of the spec a file was written for."""

SPEC_KEY = "moeperf.spec"
"""GGUF metadata key holding the spec as JSON, for people inspecting a file."""

N_SPECIAL = 3
"""``<unk>``, ``<s>``, ``</s>``."""

MIN_VOCAB = N_SPECIAL + 256
BYTE_TOKEN_IDS = range(N_SPECIAL, N_SPECIAL + 256)
"""Ids of the byte-fallback tokens ``<0x00>``..``<0xFF>``: generating them can produce invalid
UTF-8, which some llama-server builds (b11053) reject with HTTP 500."""
"""Special tokens plus one token per byte, so that any text tokenizes."""

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS

_ROPE_FREQ_BASE = 1_000_000.0
_RMS_EPS = 1e-6
_ALIGNMENT = gguf.GGUF_DEFAULT_ALIGNMENT


@dataclass(frozen=True)
class ModelSpec:
    """The dimensions and seed of a synthetic ``qwen3moe`` model.

    ``n_embd`` hidden size, ``n_head``/``n_head_kv`` query/key-value heads of ``head_dim``
    each, ``n_expert`` experts per layer of which ``n_expert_used`` are routed per token, each
    ``n_ff_exp`` wide, ``n_vocab`` tokens, ``n_ctx`` trained context length. Invalid values
    raise :class:`ModelError`.
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

    def __post_init__(self) -> None:
        _check_spec(self)

    def digest(self) -> str:
        """A stable sha256 hex digest of this spec and the writer's :data:`FORMAT_VERSION`."""
        payload = {"format_version": FORMAT_VERSION, "arch": ARCH, **dataclasses.asdict(self)}
        text = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def estimated_bytes(self) -> int:
        """The approximate size of the model file in bytes (exact for the tensor data, estimated
        for the metadata)."""
        data = sum(_padded(t.nbytes) for t in _tensor_plan(self))
        # token text (up to ~8 bytes), its length (8), score (4) and type (4), plus fixed keys
        metadata = 4096 + self.n_vocab * 24
        return data + metadata


_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelSpec))


# ----------------------------------------------------------------------------------------------
# spec checks


def _check_spec(spec: ModelSpec) -> None:
    for name in _FIELDS:
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"model spec {name}={value!r} is not an integer: give a whole number")
        low = 0 if name == "seed" else 1
        if value < low:
            raise ModelError(f"model spec {name}={value} is too small: use a value >= {low}")
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
        raise ModelError(f"model spec head_dim={spec.head_dim} is odd: RoPE needs an even head_dim")
    if spec.n_vocab < MIN_VOCAB:
        raise ModelError(
            f"model spec n_vocab={spec.n_vocab} is too small: use >= {MIN_VOCAB} "
            f"({N_SPECIAL} special tokens + 256 byte tokens)"
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
}
"""Named specs: ``tiny`` (well under 1 MB, for tests of the machinery) and ``bench`` (about
460 MB of f16 weights, big enough for prefill and decode times to be measurable on a CPU)."""


def preset_names() -> list[str]:
    """The names of :data:`PRESETS`, smallest first."""
    return list(PRESETS)


def model_spec(preset: str = "tiny", **overrides: int) -> ModelSpec:
    """The spec of *preset* with some fields replaced by *overrides*.

    Raises :class:`ModelError` for an unknown preset or field, or an invalid value."""
    if preset not in PRESETS:
        raise ModelError(
            f"model preset {preset!r} is unknown: use one of {', '.join(preset_names())}"
        )
    for name, value in overrides.items():
        if name not in _FIELDS:
            raise ModelError(
                f"model spec field {name!r} is unknown: use one of {', '.join(_FIELDS)}"
            )
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"model spec {name}={value!r} is not an integer: give a whole number")
    return dataclasses.replace(PRESETS[preset], **overrides)


def describe(spec: ModelSpec) -> str:
    """One line for progress output: layers, hidden size, experts, vocabulary and size."""
    mb = spec.estimated_bytes() / 1e6
    size = f"{mb:.0f} MB" if mb >= 10 else f"{mb:.1f} MB"
    return (
        f"{ARCH} {spec.n_layer} layers, {spec.n_embd} hidden, {spec.n_expert} experts "
        f"({spec.n_expert_used} used), vocab {spec.n_vocab}, {size}"
    )


def file_name(spec: ModelSpec) -> str:
    """The cache file name of *spec*: ``<preset or custom>-<digest[:16]>.gguf``."""
    base = dataclasses.replace(spec, seed=0)
    name = next((n for n, p in PRESETS.items() if p == base), "custom")
    return f"{name}-{spec.digest()[:16]}.gguf"


def tensor_names(spec: ModelSpec) -> list[str]:
    """The names of the model's tensors, in file order."""
    return [t.name for t in _tensor_plan(spec)]


def generate_tensor(spec: ModelSpec, name: str) -> np.ndarray:
    """The contents of tensor *name* as written to the file, in numpy order (the reverse of
    ggml's dimension order), regenerated independently of every other tensor."""
    for t in _tensor_plan(spec):
        if t.name == name:
            return _tensor_data(spec, t)
    raise ModelError(f"tensor {name!r} is not part of this model: use one of tensor_names(spec)")


def write_model(spec: ModelSpec, path: Path) -> None:
    """Write the GGUF model of *spec* to *path*.

    Readers see either no file (or the previous one) or the complete new file: nothing is left
    at *path* or beside it when writing fails. Raises :class:`ModelError` when the file cannot
    be written."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise ModelError(f"cannot write model {path}: {e}; choose a writable directory") from e
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        plan = _tensor_plan(spec)
        writer = _header_writer(spec, plan)
        try:
            writer.write_header_to_file(tmp)
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            for t in plan:
                writer.write_tensor_data(_tensor_data(spec, t))
            writer.flush()
        finally:
            writer.close()
        tmp.chmod(0o644)  # mkstemp creates 0600; cached models are shared read-only
        _fsync(tmp)
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(e, OSError):
            raise ModelError(
                f"cannot write model {path}: {e}; check free space and permissions"
            ) from e
        raise


def expected_size(spec: ModelSpec) -> int:
    """The exact size in bytes of the model file of *spec*."""
    try:
        return _expected_size(spec)
    except OSError as e:
        raise ModelError(
            f"cannot work out the size of model {file_name(spec)}: {e}; "
            "set TMPDIR to a writable directory"
        ) from e


def validate_model(path: Path, spec: ModelSpec) -> str | None:
    """``None`` if *path* is a complete model file of exactly *spec*, else why it is not
    (``"missing"``, ``"not a GGUF file"``, ``"written for another spec ..."``,
    ``"truncated: 1234 of 5678 bytes"``, ...).

    Reads only the start of the file; a file of the right size and spec whose tensor data was
    altered in place is not detected."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(64 * 1024)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"unreadable: {e}"
    expected = expected_size(spec)
    if head[:4] != b"GGUF":
        return "not a GGUF file"
    try:
        strings = _leading_strings(head)
    except _ShortHeader:
        if size < expected:
            return f"truncated: {size} of {expected} bytes"
        return "not a GGUF file written by pytest-moeperf (unreadable header)"
    digest = strings.get(DIGEST_KEY)
    if digest is None:
        return "not a GGUF file written by pytest-moeperf"
    if digest != spec.digest():
        return f"written for another spec (digest {digest[:16]}, expected {spec.digest()[:16]})"
    if size < expected:
        return f"truncated: {size} of {expected} bytes"
    if size != expected:
        return f"wrong size: {size} bytes, expected {expected}"
    return None


def ensure_model(
    spec: ModelSpec,
    cache_root: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The path of a complete model file of *spec* in the cache, written if missing.

    The file is ``<cache_root or fs.cache_dir()>/models/<name>-<digest[:16]>.gguf``. Concurrent
    callers (pytest-xdist workers) write it once; an unusable cached file is reported through
    *progress* and rewritten, never returned. Temporary files that an interrupted writer left
    beside it are removed: only this function should write into the cache's ``models``
    folder."""
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
        for stale in models.glob(f".{path.name}.*.tmp"):
            say(f"removing {stale}, left by an interrupted model write")
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        if reason != "missing":
            say(f"cached model {path} is unusable ({reason}); rebuilding it")
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        say(f"writing synthetic model ({describe(spec)}) to {path}")
        write_model(spec, path)
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
    dtype: type[np.floating]
    fan_in: int  # 0: all ones (norm weights)

    @property
    def np_shape(self) -> tuple[int, ...]:
        return tuple(reversed(self.ggml_shape))

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.ggml_shape:
            n *= d
        return n * np.dtype(self.dtype).itemsize


@functools.lru_cache(maxsize=16)
def _tensor_plan(spec: ModelSpec) -> tuple[_Tensor, ...]:
    e, v, d = spec.n_embd, spec.n_vocab, spec.head_dim
    q, kv = spec.n_head * d, spec.n_head_kv * d
    ff, x = spec.n_ff_exp, spec.n_expert
    f16, f32 = np.float16, np.float32
    plan = [_Tensor("token_embd.weight", (e, v), f16, 1)]
    for i in range(spec.n_layer):
        b = f"blk.{i}."
        plan += [
            _Tensor(b + "attn_norm.weight", (e,), f32, 0),
            _Tensor(b + "attn_q.weight", (e, q), f16, e),
            _Tensor(b + "attn_k.weight", (e, kv), f16, e),
            _Tensor(b + "attn_v.weight", (e, kv), f16, e),
            _Tensor(b + "attn_output.weight", (q, e), f16, q),
            _Tensor(b + "attn_q_norm.weight", (d,), f32, 0),
            _Tensor(b + "attn_k_norm.weight", (d,), f32, 0),
            _Tensor(b + "ffn_norm.weight", (e,), f32, 0),
            _Tensor(b + "ffn_gate_inp.weight", (e, x), f32, e),
            _Tensor(b + "ffn_gate_exps.weight", (e, ff, x), f16, e),
            _Tensor(b + "ffn_up_exps.weight", (e, ff, x), f16, e),
            _Tensor(b + "ffn_down_exps.weight", (ff, e, x), f16, ff),
        ]
    plan += [
        _Tensor("output_norm.weight", (e,), f32, 0),
        _Tensor("output.weight", (e, v), f16, e),
    ]
    return tuple(plan)


def _tensor_seed(seed: int, name: str) -> int:
    h = hashlib.sha256(f"{FORMAT_VERSION}:{seed}:{name}".encode()).digest()
    return int.from_bytes(h[:16], "little")


def _tensor_data(spec: ModelSpec, t: _Tensor) -> np.ndarray:
    if t.fan_in == 0:
        return np.ones(t.np_shape, dtype=t.dtype)
    rng = np.random.default_rng(_tensor_seed(spec.seed, t.name))
    a = rng.standard_normal(t.np_shape, dtype=np.float32)
    a *= np.float32(1.0 / np.sqrt(t.fan_in))
    return a.astype(t.dtype, copy=False)


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


def _header_writer(spec: ModelSpec, plan: tuple[_Tensor, ...]) -> gguf.GGUFWriter:
    """A writer holding all metadata and tensor infos of *spec*, with no file opened yet."""
    w = gguf.GGUFWriter(None, ARCH)  # general.architecture is the first key
    w.add_string(DIGEST_KEY, spec.digest())  # second key: _leading_strings finds it cheaply
    w.add_string(SPEC_KEY, json.dumps(dataclasses.asdict(spec), sort_keys=True))
    w.add_name(f"moeperf synthetic {ARCH} {file_name(spec).removesuffix('.gguf')}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
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
    for t in plan:
        w.add_tensor_info(t.name, t.np_shape, np.dtype(t.dtype), t.nbytes)
    return w


def _padded(n: int) -> int:
    return (n + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT


@functools.lru_cache(maxsize=16)
def _expected_size(spec: ModelSpec) -> int:
    plan = _tensor_plan(spec)
    writer = _header_writer(spec, plan)
    with tempfile.TemporaryDirectory(prefix="moeperf-header-") as d:
        probe = Path(d) / "header.gguf"
        try:
            writer.write_header_to_file(probe)
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            writer.flush()
        finally:
            writer.close()
        header = probe.stat().st_size
    return _padded(header) + sum(_padded(t.nbytes) for t in plan)


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


def _leading_strings(head: bytes, max_keys: int = 8) -> dict[str, str]:
    """The string-valued metadata at the start of a GGUF header, up to the first other type."""
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

    out: dict[str, str] = {}
    try:
        for _ in range(min(n_kv, max_keys)):
            key = read_str()
            if len(head) < pos + 4:
                raise _ShortHeader
            (vtype,) = struct.unpack_from("<I", head, pos)
            pos += 4
            if vtype != gguf.GGUFValueType.STRING:
                break
            out[key] = read_str()
    except ValueError:
        pass
    return out
