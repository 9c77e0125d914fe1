"""What a llama-server log says: startup performance warnings and per-request timings.

Three things are read from a log (plain, gzip, bzip2 or xz, possibly rotated):

* the performance warnings llama.cpp prints at startup (:data:`STARTUP_WARNINGS`,
  :func:`scan_startup`) -- ADR-0042's remedy had been printed at every launch for a month;
* the per-request ``slot print_timing`` blocks (:func:`parse_timings`), one
  :class:`RequestTiming` per request;
* the real-traffic table of ADR-0042 built from them (:func:`traffic_stats`,
  :func:`format_traffic_table`), also offered as ``moeperf logstats`` (:func:`logstats_main`).

Timing semantics: ``prompt_tokens`` are the newly prefilled tokens only (prefix-cache hits are
not in them); ``gen_tokens`` are all generated tokens as printed. Rates are tokens / ms over
the printed figures, so builds that print their own tokens-per-second differently (b11434
divides by ``n_gen - 1``) are still compared like for like.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import io
import json
import lzma
import math
import re
import statistics
import sys
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from ..errors import MoeperfError
from ..fs import write_output
from ..measure.mix import Mix, Shape

__all__ = [
    "STARTUP_WARNINGS",
    "Aggregate",
    "KnownWarning",
    "LogError",
    "ParsedLog",
    "RequestTiming",
    "StartupFinding",
    "TimingParser",
    "TrafficStats",
    "add_logstats_arguments",
    "format_traffic_table",
    "logstats_main",
    "mix_of",
    "parse_log_files",
    "parse_timings",
    "read_log_lines",
    "rotated_series",
    "run_logstats",
    "scan_startup",
    "traffic_stats",
]


class LogError(MoeperfError):
    """A log file is unreadable, corrupt, or not a llama-server log."""


# --------------------------------------------------------------------------------------------
# Line normalisation: colours, the optional time/level prefix, --log-jsonl records
# --------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# common/log.cpp with --log-prefix/--log-timestamps: "M.SS.mmm.uuu " then a level letter.
_PREFIX = re.compile(r"^(?:\d+(?:\.\d+){2,3} )?(?:[IWEDT] )?")


def _messages(raw: str) -> list[str]:
    """The log messages carried by one raw line, colour codes and time/level prefix removed."""
    line = raw.rstrip("\r\n")
    if "\x1b" in line:
        line = _ANSI.sub("", line)
    if line.startswith('{"') and '"msg"' in line:  # --log-jsonl
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and isinstance(record.get("msg"), str):
            return record["msg"].splitlines() or [""]
    return [_PREFIX.sub("", line, count=1)]


# Lines only llama-server / libllama write; one of them anywhere makes a file a server log.
_SERVER_ANYWHERE = re.compile(
    r"\bslot +\w+: +id +-?\d+ \| task|\b(?:srv|que|res|cmn) +\w+: |print_timing"
)
_SERVER_START = re.compile(
    r"^(?:main: |build: |system info: |llama_\w+: |llm_\w+: |print_info: |load_tensors: "
    r"|common_\w+: |ggml_\w+: |gguf_\w+: )"
)


def _is_server_line(text: str) -> bool:
    return bool(_SERVER_START.match(text) or _SERVER_ANYWHERE.search(text))


# --------------------------------------------------------------------------------------------
# Startup warnings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownWarning:
    """One kind of performance warning llama.cpp can print, and what to do about it."""

    id: str
    regex: str
    """Searched in each log message (time/level prefix removed); first matching entry wins."""
    meaning: str
    advice: str
    _compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", re.compile(self.regex))

    def search(self, text: str) -> bool:
        """Whether *text* is an instance of this warning."""
        return self._compiled.search(text) is not None


# Exact texts, llama.cpp b11434 source (file:line), quoted in each regex's comment.
STARTUP_WARNINGS: tuple[KnownWarning, ...] = (
    KnownWarning(
        id="mmap-tensor-overrides",
        # src/llama-model-loader.cpp:1246 "llama_model_loader: tensor overrides to CPU are used
        # with mmap enabled - consider using --load-mode none for better performance"
        regex=r"tensor overrides to CPU are used with mmap enabled",
        meaning="weights overridden to CPU (-ot ...=CPU, -ncmoe, -cmoe) are mmap-ed from the "
        "GGUF, so every prefill micro-batch copies them through the page cache instead of DMA "
        "from pinned RAM",
        advice="add --load-mode none (-lm none): ADR-0042 measured prefill 189 -> 390 tok/s "
        "(llama-bench) and 97 -> 219 tok/s on real traffic, at the cost of pinned RAM for the "
        "CPU-resident weights and a slower cold start",
    ),
    KnownWarning(
        id="numa-balancing",
        # ggml/src/ggml-cpu/ggml-cpu.c:714 "/proc/sys/kernel/numa_balancing is enabled, this has
        # been observed to impair performance" (printed only with --numa)
        regex=r"numa_balancing is enabled, this has been observed to impair performance",
        meaning="the kernel's automatic NUMA balancing may migrate the server's pages and "
        "threads between nodes",
        advice="measure with `sysctl kernel.numa_balancing=0` before persisting it: ADR-0042 "
        "found no decode change once the process was pinned (taskset + --numa isolate) and "
        "its memory node-local",
    ),
    KnownWarning(
        id="op-device-mismatch",
        # src/llama-context.cpp:539 "%s: layer %d is assigned to device %s but %s is assigned to
        # device %s (usually due to missing support)"
        regex=r"is assigned to device \S+ but .+ is assigned to device .*usually due to missing"
        r" support",
        meaning="a fused operation (e.g. Flash Attention) would run on a different device "
        "than its layer, usually the CPU because the backend lacks the kernel",
        advice="expect the operation to be disabled (next line); use a build or backend that "
        "supports it, or turn it off explicitly so runs are comparable",
    ),
    KnownWarning(
        id="fused-op-disabled",
        # src/llama-context.cpp:552 "%s: %s not supported, set to disabled"
        # e.g. "Flash Attention not supported, set to disabled"
        regex=r"not supported, set to disabled",
        meaning="auto-detection turned a fused operation off (Flash Attention, fused Gated "
        "Delta Net, ...), which usually costs prefill speed and KV memory",
        advice="check the backend/build supports the op for this model and KV type; pin "
        "-fa on/off explicitly in the profile so baselines do not depend on detection",
    ),
    KnownWarning(
        id="cpu-buffer-fallback",
        # src/llama-model-loader.cpp:1404 "%s: tensor '%s' (%s) (and %zu others) cannot be used
        # with preferred buffer type %s, using %s instead" (debug level in b11434, -v)
        regex=r"cannot be used with preferred buffer type \S+, using \S+ instead",
        meaning="tensors could not go to the preferred (GPU/host/repack) buffer and were put in "
        "a plain buffer instead",
        advice="check which tensors (their type may lack a kernel on that backend); a "
        "different quantisation or --repack/--no-repack setting may avoid it",
    ),
    KnownWarning(
        id="pinned-memory-failed",
        # ggml/src/ggml-cuda/ggml-cuda.cu:1283/5037 "%s: failed to allocate|register %.2f MiB of
        # pinned memory: %s"; ggml-vulkan-buffers.cpp:253 "WARNING: failed to allocate %.2f MB
        # of pinned memory"; ggml-vulkan.cpp:13101 "ggml_vulkan: Failed to allocate pinned
        # memory (%s)"
        regex=r"(?i:failed to (?:allocate|register) (?:[\d.]+ MB |[\d.]+ MiB )?(?:of )?pinned "
        r"memory)",
        meaning="host buffers could not be page-locked, so host-device copies (expert uploads "
        "during prefill) go through a slower pageable path",
        advice="raise the memlock limit (ulimit -l / LimitMEMLOCK=) or free RAM; with "
        "--load-mode none the CPU-resident weights need that much pinned memory",
    ),
    KnownWarning(
        id="mlock-failed",
        # src/llama-mmap.cpp:732 "warning: failed to mlock %zu-byte buffer (after previously
        # locking %zu bytes): %s"; :789 "warning: mlock not supported on this system"
        regex=r"failed to mlock|mlock not supported on this system",
        meaning="model memory could not be locked and may be paged out, making later requests "
        "fault pages back in",
        advice="raise the memlock limit (ulimit -l) or drop mlock from --load-mode",
    ),
    KnownWarning(
        id="buffered-io-fallback",
        # src/llama-mmap.cpp:191 "Failed to open file '%s' with error: %s. Falling back to
        # buffered I/O"; :293 "%s: Falling back to buffered IO due to %s"
        regex=r"Falling back to buffered I(?:/)?O",
        meaning="direct I/O (--load-mode dio) was not possible; the model was read through the "
        "page cache",
        advice="expect slower, page-cache-polluting loads; use a file system that supports "
        "O_DIRECT or another --load-mode",
    ),
    KnownWarning(
        id="no-tensor-cores",
        # ggml/src/ggml-cuda/ggml-cuda.cu:370 "The following devices will have suboptimal
        # performance due to a lack of tensor cores:"
        regex=r"will have suboptimal performance due to a lack of tensor cores",
        meaning="a Turing GPU without tensor cores (GTX 16xx) runs the slower MMA-less kernels",
        advice="build with CMAKE_CUDA_ARCHITECTURES=61-virtual;80-virtual and "
        "-DGGML_CUDA_FORCE_MMQ=ON, as the next log lines suggest",
    ),
    KnownWarning(
        id="cache-reuse-disabled",
        # tools/server/server-context.cpp:1314/1326 "cache_reuse is not supported by
        # multimodal|this context, it will be disabled"; :3464 "cache reuse is not supported -
        # ignoring n_cache_reuse = %d"
        regex=r"cache[_ ]reuse is not supported",
        meaning="--cache-reuse (KV shifting to reuse non-prefix chunks) is off for this model, "
        "so such prompts are prefilled again",
        advice="do not count on --cache-reuse here; compare prefill with it removed",
    ),
    KnownWarning(
        id="speculative-unsupported",
        # tools/server/server-context.cpp:1375 "speculative decoding not supported by this
        # context"
        regex=r"speculative decoding not supported by this context",
        meaning="the draft model / speculative options were ignored",
        advice="remove the speculative flags, or decode numbers will be attributed to them wrongly",
    ),
    KnownWarning(
        id="graph-reuse-disabled",
        # src/llama-context.cpp:287 "%s: graph reuse disabled" (LLAMA_GRAPH_REUSE_DISABLE)
        regex=r": graph reuse disabled",
        meaning="LLAMA_GRAPH_REUSE_DISABLE is set: every decode step rebuilds its graph",
        advice="unset LLAMA_GRAPH_REUSE_DISABLE in the server's environment",
    ),
    KnownWarning(
        id="kv-cache-retry",
        # tools/server/server-context.cpp:4061 "failed to find free space in the KV cache,
        # retrying with smaller batch size, off = %d, n_batch = %d, ret = %d"
        regex=r"failed to find free space in the KV cache, retrying with smaller batch size",
        meaning="the KV cache was full for a batch, which was retried in smaller pieces",
        advice="raise -c (context) or lower -np/-b; prefill of that request ran with a smaller "
        "batch",
    ),
    KnownWarning(
        id="op-not-supported",
        # ggml/src/ggml-cuda/ggml-cuda.cu:4456 "%s: op not supported %s (%s)"
        regex=r"\bop not supported\b",
        meaning="a backend was handed an operation it has no kernel for",
        advice="report it with the build and flags; the run that printed it is not a valid "
        "measurement",
    ),
    KnownWarning(
        id="falling-back",
        # catch-all, e.g. ggml/src/ggml-sycl/fattn-onednn.cpp:220 "%s: oneDNN did not fuse the
        # SDPA graph; falling back to TILE kernel", ggml-cuda.cu:158 "hipMallocManaged
        # unsupported, falling back to hipMalloc.", src/llama-adapter.cpp:343 "... cannot use
        # buft '%s', fallback to CPU"
        regex=r"(?i:\bfall(?:ing)?[ -]?back to (?!reasoning))",
        meaning="a backend or loader chose a slower fallback path",
        advice="read the line: it names what fell back and to what",
    ),
)


@dataclass(frozen=True)
class StartupFinding:
    """A warning of :data:`STARTUP_WARNINGS` seen in a log (first occurrence)."""

    id: str
    line: str
    """The first matching line, as written (colour codes removed)."""
    line_no: int
    """1-based line number of that line in its file."""
    advice: str
    count: int = 1
    """How many lines matched (one per server start for most startup warnings)."""
    path: str | None = None


class _StartupScanner:
    """Attributes lines to warnings, keeping the first line and a count per warning id."""

    def __init__(self, warnings: Sequence[KnownWarning] = STARTUP_WARNINGS) -> None:
        self._warnings = tuple(warnings)
        self._found: dict[str, StartupFinding] = {}
        try:  # one alternation rejects most lines in a single search
            self._prefilter: re.Pattern[str] | None = re.compile(
                "|".join(f"(?:{w.regex})" for w in self._warnings)
            )
        except re.error:
            self._prefilter = None

    def feed(self, text: str, line: str, line_no: int, path: str | None) -> None:
        if not self._warnings or (self._prefilter and not self._prefilter.search(text)):
            return
        for w in self._warnings:
            if w.search(text):
                seen = self._found.get(w.id)
                if seen is None:
                    line = _ANSI.sub("", line.rstrip("\r\n"))
                    self._found[w.id] = StartupFinding(w.id, line, line_no, w.advice, 1, path)
                else:
                    self._found[w.id] = StartupFinding(
                        seen.id, seen.line, seen.line_no, seen.advice, seen.count + 1, seen.path
                    )
                return

    def findings(self) -> list[StartupFinding]:
        return list(self._found.values())


def scan_startup(
    text: str, warnings: Sequence[KnownWarning] = STARTUP_WARNINGS
) -> list[StartupFinding]:
    """The performance warnings in a server log's text, one finding per warning id, in order of
    first appearance."""
    scanner = _StartupScanner(warnings)
    for line_no, raw in enumerate(text.splitlines(), start=1):
        for message in _messages(raw):
            scanner.feed(message, raw, line_no, None)
    return scanner.findings()


# --------------------------------------------------------------------------------------------
# Per-request timings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestTiming:
    """One request's ``print_timing`` block. A field is None when its line was not seen."""

    slot: int
    task: int
    prompt_tokens: int | None
    """Newly prefilled tokens (prefix-cache hits excluded)."""
    prompt_ms: float | None
    gen_tokens: int | None
    gen_ms: float | None
    total_tokens: int | None = None
    total_ms: float | None = None
    complete: bool = False
    """Both the ``prompt eval time`` and the ``eval time`` lines were seen."""
    end_s: float | None = None
    """When its ``eval time`` line was written, seconds since the server started, where the
    log has timestamps (``--log-timestamps``)."""

    @property
    def prefill_tps(self) -> float | None:
        """Prefill tok/s of this request (None without prompt line or time)."""
        return _rate(self.prompt_tokens, self.prompt_ms)

    @property
    def decode_tps(self) -> float | None:
        """Decode tok/s of this request, generated tokens / eval time."""
        return _rate(self.gen_tokens, self.gen_ms)


def _rate(tokens: int | None, ms: float | None) -> float | None:
    if tokens is None or ms is None or ms <= 0:
        return None
    return tokens * 1000.0 / ms


@dataclass
class _Partial:
    slot: int
    task: int
    prompt: tuple[int, float] | None = None
    gen: tuple[int, float] | None = None
    total: tuple[int, float] | None = None
    end_s: float | None = None

    def finish(self) -> RequestTiming:
        p, g, t = self.prompt, self.gen, self.total
        return RequestTiming(
            slot=self.slot,
            task=self.task,
            prompt_tokens=p[0] if p else None,
            prompt_ms=p[1] if p else None,
            gen_tokens=g[0] if g else None,
            gen_ms=g[1] if g else None,
            total_tokens=t[0] if t else None,
            total_ms=t[1] if t else None,
            complete=p is not None and g is not None,
            end_s=self.end_s,
        )


# common/log.cpp's --log-timestamps prefix: minutes.seconds.milliseconds.microseconds
_TIMESTAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ")


def _timestamp(raw: str) -> float | None:
    """Seconds since the server started, from a raw line's ``--log-timestamps`` prefix."""
    head = raw[:64]
    stamp = _TIMESTAMP.match(_ANSI.sub("", head) if "\x1b" in head else head)
    if stamp is None:
        return None
    return int(stamp[1]) * 60 + int(stamp[2]) + int(stamp[3]) / 1e3 + int(stamp[4]) / 1e6
# "slot %12.*s: id %2d | task %d | " (tools/server/server-common.h); print_timings is cut to
# "print_timing", release padded to "     release".
_SLOT = re.compile(r"\bslot +(?P<func>\w+): +id +(?P<slot>-?\d+) \| task +(?P<task>-?\d+) \|")
# Anchored at the start of what follows "| ": "eval time" never matches "prompt eval time".
_KIND = re.compile(r"\s*(?P<kind>prompt eval|eval|total) time =")
_VALUES = re.compile(r"\s*(?:prompt eval|eval|total) time = *(?P<ms>\S+) ms / *(?P<tok>\S+) tokens")
_Key = tuple[int, int]


class TimingParser:
    """Incremental ``print_timing`` parser: feed lines, collect finished requests.

    Blocks are keyed by (slot, task), so blocks of different slots may interleave. A request
    is emitted when its ``total time`` line or its slot's ``release`` line arrives, when a new
    block starts on the same slot, or at :meth:`finish`. A block cut short (prompt line without
    eval line, e.g. at end of file) is emitted with ``complete=False``, never dropped silently
    and never an error. The pre-2025 layout, where the three timing lines followed a bare
    ``slot print_timing: id N | task T |`` header, is read too.
    """

    def __init__(self) -> None:
        self.lines = 0
        """Raw lines fed."""
        self.server_lines = 0
        """Lines that only llama-server or libllama write."""
        self.malformed = 0
        """Timing lines whose numbers could not be read (ignored)."""
        self._pending: dict[_Key, _Partial] = {}
        self._header: _Key | None = None
        self._raw = ""

    def feed(self, raw: str) -> list[RequestTiming]:
        """Consume one raw log line; returns the requests it finished."""
        return self._feed_messages(_messages(raw), raw)

    def _feed_messages(self, messages: list[str], raw: str = "") -> list[RequestTiming]:
        self._raw = raw  # its timestamp is read only where a request's end is recorded
        self.lines += 1
        out: list[RequestTiming] = []
        server = False
        for text in messages:
            server = self._message(text, out) or server
        if server:
            self.server_lines += 1
        return out

    def finish(self) -> list[RequestTiming]:
        """End of input: the requests still open, in the order they started."""
        out = [p.finish() for p in self._pending.values()]
        self._pending.clear()
        self._header = None
        return out

    def _message(self, text: str, out: list[RequestTiming]) -> bool:
        """Apply one message; whether it is a llama-server line."""
        m = _SLOT.search(text) if "| task" in text else None
        if m is None:
            if self._header is not None:
                kind = _KIND.match(text)
                if kind:
                    self._timing(self._header, kind["kind"], text, out)
                    if kind["kind"] == "total":
                        self._header = None
                    return True
                if text.strip():
                    self._header = None
            return _is_server_line(text)
        self._header = None
        key = (int(m["slot"]), int(m["task"]))
        func, rest = m["func"], text[m.end() :]
        if func.startswith("print_timing"):
            kind = _KIND.match(rest)
            if kind:
                self._timing(key, kind["kind"], rest, out)
            elif not rest.strip():
                self._header = key
        elif func == "release":
            done = self._pending.pop(key, None)
            if done is not None:
                out.append(done.finish())
        return True

    def _timing(self, key: _Key, kind: str, rest: str, out: list[RequestTiming]) -> None:
        values = _parse_values(rest)
        if values is None:
            self.malformed += 1
            return
        if kind == "total":
            done = self._pending.pop(key, None) or _Partial(*key)
            done.total = values
            out.append(done.finish())
            return
        part = self._pending.get(key)
        if kind == "prompt eval" or part is None or part.gen is not None:
            # a new block on this slot: whatever was open on it was cut short
            for other in [k for k in self._pending if k[0] == key[0]]:
                out.append(self._pending.pop(other).finish())
            part = self._pending[key] = _Partial(*key)
        if kind == "prompt eval":
            part.prompt = values
        else:
            part.gen = values
            part.end_s = _timestamp(self._raw)


def _parse_values(rest: str) -> tuple[int, float] | None:
    m = _VALUES.match(rest)
    if m is None:
        return None
    try:
        ms, tokens = float(m["ms"]), int(m["tok"])
    except ValueError:
        return None
    if not math.isfinite(ms) or ms < 0 or tokens < 0:
        return None
    return tokens, ms


def parse_timings(lines: Iterable[str]) -> Iterator[RequestTiming]:
    """The requests in a llama-server log's lines, in the order they finished.

    Incomplete blocks (cut at end of input or by a restart) are yielded with
    ``complete=False``; other subsystems' lines and garbage are ignored.
    """
    parser = TimingParser()
    for line in lines:
        yield from parser.feed(line)
    yield from parser.finish()


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------

_SNIFF_BYTES = 65536
_SNIFF_LINES = 20000


def _decompressor(path: Path, f: IO[bytes]) -> IO[bytes]:
    head = f.read(6)
    f.seek(0)
    if head.startswith(b"\x1f\x8b"):
        return cast(IO[bytes], gzip.GzipFile(fileobj=f, mode="rb"))
    if head.startswith(b"BZh"):
        return bz2.BZ2File(f, mode="rb")
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(f, mode="rb")
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        raise LogError(f"{path} is zstd-compressed: decompress it first (zstd -d)")
    return f


def read_log_lines(path: str | Path) -> Iterator[str]:
    """The lines of a log file without line endings; gzip, bzip2 and xz files (known by their
    magic bytes, whatever their name) are decompressed. Undecodable bytes become U+FFFD."""
    p = Path(path)
    try:
        f = open(p, "rb")  # closed by the with below
    except OSError as e:
        raise LogError(f"cannot read {p}: {e.strerror or e}") from e
    with f:
        try:
            stream = _decompressor(p, f)
            if b"\x00" in stream.read(_SNIFF_BYTES):
                raise LogError(f"{p} does not look like a llama-server log (binary data)")
            f.seek(0)
            stream = _decompressor(p, f)
            text = io.TextIOWrapper(stream, encoding="utf-8", errors="replace", newline=None)
            for line in text:
                yield line.rstrip("\n")
        except (EOFError, OSError, lzma.LZMAError, zlib.error) as e:
            raise LogError(f"cannot read {p}: truncated or corrupt ({e})") from e


_ROTATED = re.compile(r"^[.-](?P<tag>\d+)(?:\.(?:gz|bz2|xz|zst))?$")


def rotated_series(path: str | Path) -> list[Path]:
    """*path* preceded by its rotated predecessors (``PATH.1``, ``PATH.2.gz``,
    ``PATH-20261017``...), oldest first."""
    p = Path(path)
    older: list[tuple[int, bool, Path]] = []
    if p.parent.is_dir():
        for sibling in p.parent.iterdir():
            if not sibling.name.startswith(p.name) or sibling == p:
                continue
            m = _ROTATED.match(sibling.name[len(p.name) :])
            if m is None or not sibling.is_file():
                continue
            tag = m["tag"]
            dated = len(tag) == 8  # PATH-YYYYMMDD: larger is newer; PATH.N: larger is older
            older.append((int(tag) if dated else -int(tag), dated, sibling))
    older.sort(key=lambda t: (t[1], t[0]))
    return [s for _, _, s in older] + [p]


@dataclass(frozen=True)
class ParsedLog:
    """Everything read from one log (one file or one rotated series)."""

    paths: tuple[str, ...]
    timings: tuple[RequestTiming, ...]
    lines: int
    server_lines: int
    malformed: int
    """Timing lines whose numbers could not be read."""
    findings: tuple[StartupFinding, ...]


def _not_a_log(path: Path, lines: int) -> LogError:
    return LogError(
        f"{path} does not look like a llama-server log "
        f"(no print_timing or server lines in {lines} lines)"
    )


def parse_log_files(paths: Iterable[str | Path]) -> ParsedLog:
    """Timings and startup warnings of log files read as one stream, in the order given
    (a block cut by rotation is joined). Raises :class:`LogError` for a file that is not a
    llama-server log; a server log with no requests gives no timings."""
    parser = TimingParser()
    scanner = _StartupScanner()
    timings: list[RequestTiming] = []
    names: list[str] = []
    for path in paths:
        p = Path(path)
        names.append(str(p))
        lines_before, server_before = parser.lines, parser.server_lines
        for line_no, raw in enumerate(read_log_lines(p), start=1):
            messages = _messages(raw)
            timings.extend(parser._feed_messages(messages, raw))
            for message in messages:
                if "print_timing" not in message:  # never a warning; most of a long log
                    scanner.feed(message, raw, line_no, str(p))
            if parser.server_lines == server_before and line_no >= _SNIFF_LINES:
                raise _not_a_log(p, line_no)
        n_lines = parser.lines - lines_before
        if n_lines and parser.server_lines == server_before:
            raise _not_a_log(p, n_lines)
    if not names:
        raise LogError("no log file given")
    if not parser.server_lines:  # only empty files
        raise _not_a_log(Path(names[0]), parser.lines)
    timings.extend(parser.finish())
    return ParsedLog(
        paths=tuple(names),
        timings=tuple(timings),
        lines=parser.lines,
        server_lines=parser.server_lines,
        malformed=parser.malformed,
        findings=tuple(scanner.findings()),
    )


# --------------------------------------------------------------------------------------------
# Traffic statistics (ADR-0042 "real agent traffic")
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aggregate:
    """Tokens and milliseconds summed over *n* requests."""

    n: int
    tokens: int
    ms: float

    @property
    def tok_per_s(self) -> float | None:
        """sum(tokens) / sum(time): the throughput of the whole traffic, not a mean of rates."""
        return self.tokens * 1000.0 / self.ms if self.ms > 0 else None


@dataclass(frozen=True)
class TrafficStats:
    """ADR-0042's real-traffic figures for one log."""

    requests: int
    """Complete requests (prompt and eval lines both seen)."""
    incomplete: int
    prefill_min: int
    prefill_large_min: int
    decode_min: int
    prefill: Aggregate
    """Requests with >= prefill_min newly prefilled tokens."""
    prefill_large: Aggregate
    """Requests with >= prefill_large_min newly prefilled tokens."""
    decode: Aggregate
    """Requests with >= decode_min generated tokens."""
    decode_median: float | None
    """Median of the per-request decode tok/s of the *decode* requests."""
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form, rates included."""

        def agg(a: Aggregate) -> dict[str, Any]:
            return {"n": a.n, "tokens": a.tokens, "ms": a.ms, "tok_per_s": a.tok_per_s}

        return {
            "requests": self.requests,
            "incomplete": self.incomplete,
            "thresholds": {
                "prefill_min": self.prefill_min,
                "prefill_large_min": self.prefill_large_min,
                "decode_min": self.decode_min,
            },
            "prefill": agg(self.prefill),
            "prefill_large": agg(self.prefill_large),
            "decode": agg(self.decode),
            "decode_median": self.decode_median,
            "notes": list(self.notes),
        }


def _aggregate(pairs: list[tuple[int, float]]) -> Aggregate:
    return Aggregate(n=len(pairs), tokens=sum(t for t, _ in pairs), ms=sum(ms for _, ms in pairs))


def traffic_stats(
    timings: Iterable[RequestTiming],
    *,
    prefill_min: int = 256,
    prefill_large_min: int = 4000,
    decode_min: int = 32,
) -> TrafficStats:
    """Aggregate prefill and decode throughput of complete requests above size thresholds;
    incomplete blocks are counted and left out."""
    for name, value in (
        ("prefill_min", prefill_min),
        ("prefill_large_min", prefill_large_min),
        ("decode_min", decode_min),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    requests = incomplete = 0
    prefill: list[tuple[int, float]] = []
    large: list[tuple[int, float]] = []
    decode: list[tuple[int, float]] = []
    for t in timings:
        if not t.complete:
            incomplete += 1
            continue
        requests += 1
        assert t.prompt_tokens is not None and t.prompt_ms is not None
        assert t.gen_tokens is not None and t.gen_ms is not None
        if t.prompt_tokens >= prefill_min:
            prefill.append((t.prompt_tokens, t.prompt_ms))
        if t.prompt_tokens >= prefill_large_min:
            large.append((t.prompt_tokens, t.prompt_ms))
        if t.gen_tokens >= decode_min:
            decode.append((t.gen_tokens, t.gen_ms))
    rates = [tok * 1000.0 / ms for tok, ms in decode if ms > 0]
    notes: list[str] = []
    if requests == 0:
        notes.append("no completed requests in the log (no print_timing blocks)")
    if incomplete:
        notes.append(
            f"{incomplete:,} incomplete print_timing block(s) left out "
            "(cut at end of file, by a restart, or by rotation)"
        )
    return TrafficStats(
        requests=requests,
        incomplete=incomplete,
        prefill_min=prefill_min,
        prefill_large_min=prefill_large_min,
        decode_min=decode_min,
        prefill=_aggregate(prefill),
        prefill_large=_aggregate(large),
        decode=_aggregate(decode),
        decode_median=statistics.median(rates) if rates else None,
        notes=tuple(notes),
    )


def mix_of(timings: Iterable[RequestTiming], source: str) -> tuple[Mix, list[str]]:
    """The request mix of a log's complete requests, in the order they arrived: newly prefilled
    tokens as the prompt (prefix-cache hits are not in the log's figures, so the replay sends
    fresh tokens only) and generated tokens; with timestamps (``--log-timestamps``) the gaps
    between arrivals (arrival = the ``eval time`` line's time - prompt and eval time). Also
    notes on what was left out or changed."""
    done = [t for t in timings if t.complete]
    notes = []
    if not done:
        raise LogError(f"{source}: no complete print_timing blocks: no requests to make a mix of")
    timed = all(t.end_s is not None for t in done)

    def arrival(t: RequestTiming) -> float:
        assert t.end_s is not None and t.prompt_ms is not None and t.gen_ms is not None
        return t.end_s - (t.prompt_ms + t.gen_ms) / 1000.0

    if timed:
        done.sort(key=arrival)
    else:
        notes.append("the log has no timestamps: the mix has no arrival gaps (--log-timestamps)")
    shapes = []
    clamped = 0
    previous: float | None = None
    for t in done:
        assert t.prompt_tokens is not None and t.gen_tokens is not None
        prompt, gen = max(t.prompt_tokens, 1), max(t.gen_tokens, 1)
        clamped += (prompt, gen) != (t.prompt_tokens, t.gen_tokens)
        gap = None
        if timed:
            now = arrival(t)
            gap = 0.0 if previous is None else max(now - previous, 0.0) * 1000.0
            previous = now
        shapes.append(Shape(prompt, gen, gap_ms=gap))
    if clamped:
        notes.append(f"{clamped} request(s) with 0 new prompt or 0 generated tokens sent as 1")
    return Mix(tuple(shapes), source), notes


def _cell(rate: float | None, n: int, digits: int) -> str:
    if rate is None:
        return f"— (n={n:,})"
    return f"{rate:,.{digits}f} tok/s (n={n:,})"


def format_traffic_table(stats_by_label: dict[str, TrafficStats]) -> str:
    """ADR-0042's real-traffic table, one column per label, then each label's notes.

    Row thresholds are taken from the first column; columns built with other thresholds are
    marked in the notes.
    """
    if not stats_by_label:
        return ""
    labels = list(stats_by_label)
    first = stats_by_label[labels[0]]
    rows: list[list[str]] = [["metric", *labels]]
    rows.append(
        [
            f"prefill, requests with ≥{first.prefill_min:,} new tokens, aggregate",
            *(_cell(s.prefill.tok_per_s, s.prefill.n, 1) for s in stats_by_label.values()),
        ]
    )
    rows.append(
        [
            f"prefill, requests with ≥{first.prefill_large_min:,} new tokens, aggregate",
            *(
                _cell(s.prefill_large.tok_per_s, s.prefill_large.n, 1)
                for s in stats_by_label.values()
            ),
        ]
    )
    rows.append(
        [
            f"decode, requests with ≥{first.decode_min:,} generated, aggregate",
            *(_cell(s.decode.tok_per_s, s.decode.n, 2) for s in stats_by_label.values()),
        ]
    )
    rows.append(
        [
            "decode, median",
            *(
                "—" if s.decode_median is None else f"{s.decode_median:,.2f} tok/s"
                for s in stats_by_label.values()
            ),
        ]
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]

    def render(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    out = [render(rows[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out.extend(render(r) for r in rows[1:])
    notes: list[str] = []
    for label, s in stats_by_label.items():
        if (s.prefill_min, s.prefill_large_min, s.decode_min) != (
            first.prefill_min,
            first.prefill_large_min,
            first.decode_min,
        ):
            notes.append(
                f"{label}: thresholds {s.prefill_min}/{s.prefill_large_min}/{s.decode_min} "
                "differ from the row labels"
            )
        notes.extend(f"{label}: {note}" for note in s.notes)
    if notes:
        out.append("")
        out.extend(f"- {note}" for note in notes)
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# moeperf logstats
# --------------------------------------------------------------------------------------------

_PROG = "moeperf logstats"


def _non_negative(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {n}")
    return n


def add_logstats_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare ``moeperf logstats``'s arguments on *parser*."""
    parser.description = (
        "Real-traffic prefill/decode throughput from llama-server print_timing lines (the "
        "ADR-0042 table), one column per log, and the performance warnings each log contains."
    )
    parser.add_argument(
        "logs", nargs="+", metavar="SERVER.log", help="llama-server log (plain, gzip, bz2, xz)"
    )
    parser.add_argument(
        "--prefill-min",
        type=_non_negative,
        default=256,
        metavar="N",
        help="prefill row: requests with >= N newly prefilled tokens (default 256)",
    )
    parser.add_argument(
        "--prefill-large-min",
        type=_non_negative,
        default=4000,
        metavar="N",
        help="large-prefill row: requests with >= N newly prefilled tokens (default 4000)",
    )
    parser.add_argument(
        "--decode-min",
        type=_non_negative,
        default=32,
        metavar="N",
        help="decode rows: requests with >= N generated tokens (default 32)",
    )
    parser.add_argument(
        "--rotated",
        action="store_true",
        help="also read each log's rotated predecessors (LOG.1, LOG.2.gz, ...), oldest first",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--mix",
        metavar="FILE",
        help="also write the log's request mix (prompt and generated tokens of each request, "
        "and arrival gaps where the log has timestamps) as a mix file a profile's traffic "
        "table can name; one log only",
    )


def _labels(paths: Sequence[str]) -> list[str]:
    names = [Path(p).name for p in paths]
    if len(set(names)) == len(names):
        return names
    if len(set(paths)) == len(paths):
        return [str(p) for p in paths]
    return [f"{i + 1}:{p}" for i, p in enumerate(paths)]


def run_logstats(args: argparse.Namespace) -> int:
    """Run ``moeperf logstats`` with parsed *args*; 0 on success, 2 on a user error."""
    mix_path = args.mix
    if mix_path and len(args.logs) != 1:
        print(
            f"{_PROG}: error: --mix writes the mix of one log; {len(args.logs)} were given "
            "(use --rotated for a log's rotated predecessors)",
            file=sys.stderr,
        )
        return 2
    try:
        labels = _labels(args.logs)
        parsed: dict[str, ParsedLog] = {}
        stats: dict[str, TrafficStats] = {}
        for label, log in zip(labels, args.logs, strict=True):
            series = rotated_series(log) if args.rotated else [Path(log)]
            parsed[label] = parse_log_files(series)
            stats[label] = traffic_stats(
                parsed[label].timings,
                prefill_min=args.prefill_min,
                prefill_large_min=args.prefill_large_min,
                decode_min=args.decode_min,
            )
        if mix_path:
            label = labels[0]
            mix, mix_notes = mix_of(parsed[label].timings, str(args.logs[0]))
            write_output(Path(mix_path), json.dumps(mix.to_dict(), indent=1) + "\n", "--mix")
    except MoeperfError as e:
        print(f"{_PROG}: error: {e}", file=sys.stderr)
        return 2
    if mix_path:
        print(
            f"mix: {mix.describe()}{', with arrival gaps' if mix.has_gaps else ''} -> {mix_path}",
            file=sys.stderr,
        )
        for note in mix_notes:
            print(f"mix: {note}", file=sys.stderr)
    if args.json:
        doc = {
            label: {
                "paths": list(p.paths),
                "lines": p.lines,
                "malformed_timing_lines": p.malformed,
                "stats": stats[label].to_dict(),
                "startup_findings": [asdict(f) for f in p.findings],
            }
            for label, p in parsed.items()
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(format_traffic_table(stats))
    extra: list[str] = []
    for label, p in parsed.items():
        if p.malformed:
            extra.append(f"{label}: {p.malformed:,} print_timing line(s) with unreadable numbers")
        for f in p.findings:
            times = f" ({f.count:,} times)" if f.count > 1 else ""
            extra.append(
                f"{label}: warning {f.id}{times} at {f.path}:{f.line_no}: {f.line.strip()}"
            )
            extra.append(f"{' ' * len(label)}  -> {f.advice}")
    if extra:
        print("\nread from the logs:")
        print("\n".join(f"- {e}" if not e.startswith(" ") else f"  {e}" for e in extra))
    return 0


def logstats_main(argv: list[str] | None = None) -> int:
    """``moeperf logstats`` as a stand-alone command; returns the exit status."""
    parser = argparse.ArgumentParser(prog=_PROG)
    add_logstats_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed by argparse
        return e.code if isinstance(e.code, int) else 2
    return run_logstats(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(logstats_main())
