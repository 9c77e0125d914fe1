"""The GGUF files of a synthetic model (:mod:`.synthetic_model`): written tensor by tensor in
chunks, quantized on a few threads while the next chunk is generated, a split model's shards
with the ``split.*`` keys ``gguf-split`` writes, each file under a temporary name and renamed
into place only once all are complete; checked by their first bytes (spec digest, size); and
kept in the cache, written once for every pytest-xdist worker."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import string
import struct
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from io import BufferedWriter
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as GGMLType

from .. import fs
from ..errors import ModelError
from .synthetic_model import (
    _ALIGNMENT,
    _FILE_TYPE,
    ARCH,
    DIGEST_KEY,
    MIN_VOCAB,
    SPEC_KEY,
    ModelSpec,
    _base_name,
    _n_tensors,
    _padded,
    _shard_plan,
    _spec_payload,
    _Tensor,
    _tensor_chunks,
    describe,
    file_name,
    shard_paths,
)

_ROPE_FREQ_BASE = 1_000_000.0
_RMS_EPS = 1e-6


_ENCODERS = max(1, min(4, (os.cpu_count() or 2) - 1))
"""Threads quantizing chunks while the calling thread generates the next ones (numpy releases
the GIL in both)."""


_PROGRESS_EVERY_S = 10.0
"""Seconds between progress lines while a model is written (none for a quicker write)."""


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
    sizes = _expected_sizes(spec)
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
    for i, (shard, size) in enumerate(zip(paths, _expected_sizes(spec), strict=True)):
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
    for t in _shard_plan(spec)[shard]:  # the type is t.gtype (raw_dtype), f16 and f32 too
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


@functools.lru_cache(maxsize=16)
def _expected_sizes(spec: ModelSpec) -> tuple[int, ...]:
    """The exact size of each file of *spec*: its header, padded, and its tensors, each
    padded."""
    sizes = []
    try:
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
    except OSError as e:
        raise ModelError(
            f"cannot work out the size of model {file_name(spec)}: {e}; "
            "set TMPDIR to a writable directory"
        ) from e
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

    def take(n: int) -> int:
        """Where the next *n* bytes start; :class:`_ShortHeader` when *head* ends first."""
        nonlocal pos
        if len(head) < pos + n:
            raise _ShortHeader
        pos += n
        return pos - n

    def read_str() -> str:
        (n,) = struct.unpack_from("<Q", head, take(8))
        if n > 4096:
            raise ValueError("implausible string length")
        start = take(n)
        return head[start : start + n].decode("utf-8", errors="replace")

    _n_tensors, n_kv = struct.unpack_from("<QQ", head, take(16))
    out: dict[str, str | int | float] = {}
    with contextlib.suppress(ValueError):
        for _ in range(min(n_kv, max_keys)):
            key = read_str()
            (vtype,) = struct.unpack_from("<I", head, take(4))
            if vtype == gguf.GGUFValueType.STRING:
                out[key] = read_str()
            elif vtype in _SCALARS:
                fmt = _SCALARS[vtype]
                (out[key],) = struct.unpack_from(fmt, head, take(struct.calcsize(fmt)))
            else:
                break
    return out
