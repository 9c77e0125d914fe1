"""What a llama-server log says about its requests: the per-request timings and the
real-traffic figures of ADR-0042.

Read from a log (plain, gzip, bzip2 or xz, possibly rotated):

* the per-request ``slot print_timing`` blocks (:class:`TimingParser`), one
  :class:`RequestTiming` per request, with the startup warnings of :mod:`.startup` alongside
  (:func:`parse_log_files`);
* the real-traffic figures of ADR-0042 built from them (:func:`traffic_stats`) and the
  request mix a replay sends (:func:`mix_of`); ``moeperf logstats`` prints them as a table.

Timing semantics: ``prompt_tokens`` are the newly prefilled tokens only (prefix-cache hits are
not in them); ``gen_tokens`` are all generated tokens as printed. Rates are tokens / ms over
the printed figures, so builds that print their own tokens-per-second differently (b11434
divides by ``n_gen - 1``) are still compared like for like.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import math
import re
import statistics
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from ..errors import MoeperfError
from ..measure.mix import Mix, Shape
from .startup import StartupFinding, StartupScanner, log_messages, without_colours


class LogError(MoeperfError):
    """A log file is unreadable, corrupt, or not a llama-server log."""


# Lines only llama-server / libllama write; one of them anywhere makes a file a server log.
_SERVER_ANYWHERE = re.compile(
    r"\bslot +\w+: +id +-?\d+ \| task|\b(?:srv|que|res|cmn) +\w+: |print_timing"
)
_SERVER_START = re.compile(
    r"^(?:main: |build: |system info: |llama_\w+: |llm_\w+: |print_info: |load_tensors: "
    r"|common_\w+: |ggml_\w+: |gguf_\w+: )"
)

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
    complete: bool = False
    """Both the ``prompt eval time`` and the ``eval time`` lines were seen."""
    end_s: float | None = None
    """When its ``eval time`` line was written, seconds since the server started, where the
    log has timestamps (``--log-timestamps``)."""


@dataclass
class _Partial:
    slot: int
    task: int
    prompt: tuple[int, float] | None = None
    gen: tuple[int, float] | None = None
    end_s: float | None = None

    def finish(self) -> RequestTiming:
        p, g = self.prompt, self.gen
        return RequestTiming(
            slot=self.slot,
            task=self.task,
            prompt_tokens=p[0] if p else None,
            prompt_ms=p[1] if p else None,
            gen_tokens=g[0] if g else None,
            gen_ms=g[1] if g else None,
            complete=p is not None and g is not None,
            end_s=self.end_s,
        )


# common/log.cpp's --log-timestamps prefix: minutes.seconds.milliseconds.microseconds
_TIMESTAMP = re.compile(r"^(\d+)\.(\d{2})\.(\d{3})\.(\d{3}) ")


def _timestamp(raw: str) -> float | None:
    """Seconds since the server started, from a raw line's ``--log-timestamps`` prefix."""
    stamp = _TIMESTAMP.match(without_colours(raw[:64]))
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

    def feed(self, messages: list[str], raw: str) -> list[RequestTiming]:
        """Consume one raw log line, split into its *messages* (:func:`.startup.log_messages`);
        returns the requests it finished."""
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
            return bool(_SERVER_START.match(text) or _SERVER_ANYWHERE.search(text))
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
            out.append((self._pending.pop(key, None) or _Partial(*key)).finish())
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
    scanner = StartupScanner()
    timings: list[RequestTiming] = []
    names: list[str] = []
    for path in paths:
        p = Path(path)
        names.append(str(p))
        lines_before, server_before = parser.lines, parser.server_lines
        for line_no, raw in enumerate(read_log_lines(p), start=1):
            messages = log_messages(raw)
            timings.extend(parser.feed(messages, raw))
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


SESSION_SECONDS = 3600.0
"""A log with timestamps is cut into sessions of this many seconds of a server's uptime: a
shared host moves 10-20 % between hours."""


def log_sessions(
    timings: Sequence[RequestTiming], seconds: float = SESSION_SECONDS
) -> list[list[RequestTiming]]:
    """A log's requests in sessions, in order: a new one at each server restart (a task id
    below half the highest the server had reached, past 10; or a timestamp that goes back) and,
    where the log has timestamps (``--log-timestamps``), at each *seconds* of uptime."""
    sessions: list[list[RequestTiming]] = []
    key: tuple[int, int] | None = None
    top, last, restarts = -1, None, 0
    for t in timings:
        went_back = t.end_s is not None and last is not None and t.end_s < last - 1.0
        if (top > 10 and t.task < top // 2) or went_back:
            restarts, top, last = restarts + 1, -1, None
        top = max(top, t.task)
        last = t.end_s if t.end_s is not None else last
        k = (restarts, int(t.end_s // seconds) if t.end_s is not None else 0)
        if k != key:
            sessions.append([])
            key = k
        sessions[-1].append(t)
    return sessions


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
