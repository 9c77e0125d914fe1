"""The performance warnings llama.cpp prints at startup: the table of known warnings
(:data:`STARTUP_WARNINGS`), what a log showed of them (:class:`StartupFinding`) and the scanner
(:func:`scan_startup`) -- ADR-0042's remedy had been printed at every launch for a month.

Also how a raw log line becomes its messages (colour codes, the time/level prefix and
``--log-jsonl`` records removed), which :mod:`.logs` reads the ``print_timing`` blocks with.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .flags import flag_value

# --------------------------------------------------------------------------------------------
# Line normalisation: colours, the optional time/level prefix, --log-jsonl records
# --------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# common/log.cpp with --log-prefix/--log-timestamps: "M.SS.mmm.uuu " then a level letter.
_PREFIX = re.compile(r"^(?:\d+(?:\.\d+){2,3} )?(?:[IWEDT] )?")


def without_colours(text: str) -> str:
    """*text* without ANSI colour codes (a log written with colours on)."""
    return _ANSI.sub("", text) if "\x1b" in text else text


def log_messages(raw: str) -> list[str]:
    """The log messages carried by one raw line, colour codes and time/level prefix removed."""
    line = without_colours(raw.rstrip("\r\n"))
    if line.startswith('{"') and '"msg"' in line:  # --log-jsonl
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict) and isinstance(record.get("msg"), str):
            return record["msg"].splitlines() or [""]
    return [_PREFIX.sub("", line, count=1)]


# --------------------------------------------------------------------------------------------
# Startup warnings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KnownWarning:
    """One kind of performance warning llama.cpp can print, and what to do about it."""

    id: str
    regex: str
    """Searched in each log message (time/level prefix removed); first matching entry wins."""
    advice: str


# Exact texts, llama.cpp b11434 source (file:line), quoted in each regex's comment.
STARTUP_WARNINGS: tuple[KnownWarning, ...] = (
    KnownWarning(
        id="mmap-tensor-overrides",
        # src/llama-model-loader.cpp:1246 "llama_model_loader: tensor overrides to CPU are used
        # with mmap enabled - consider using --load-mode none for better performance"
        regex=r"tensor overrides to CPU are used with mmap enabled",
        advice="add --load-mode none (-lm none): ADR-0042 measured prefill 189 -> 390 tok/s "
        "(llama-bench) and 97 -> 219 tok/s on real traffic, at the cost of pinned RAM for the "
        "CPU-resident weights and a slower cold start",
    ),
    KnownWarning(
        id="numa-balancing",
        # ggml/src/ggml-cpu/ggml-cpu.c:714 "/proc/sys/kernel/numa_balancing is enabled, this has
        # been observed to impair performance" (printed only with --numa)
        regex=r"numa_balancing is enabled, this has been observed to impair performance",
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
        advice="expect the operation to be disabled (next line); use a build or backend that "
        "supports it, or turn it off explicitly so runs are comparable",
    ),
    KnownWarning(
        id="fused-op-disabled",
        # src/llama-context.cpp:552 "%s: %s not supported, set to disabled"
        # e.g. "Flash Attention not supported, set to disabled"
        regex=r"not supported, set to disabled",
        advice="check the backend/build supports the op for this model and KV type; pin "
        "-fa on/off explicitly in the profile so baselines do not depend on detection",
    ),
    KnownWarning(
        id="cpu-buffer-fallback",
        # src/llama-model-loader.cpp:1404 "%s: tensor '%s' (%s) (and %zu others) cannot be used
        # with preferred buffer type %s, using %s instead" (debug level in b11434, -v)
        regex=r"cannot be used with preferred buffer type \S+, using \S+ instead",
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
        advice="raise the memlock limit (ulimit -l / LimitMEMLOCK=) or free RAM; with "
        "--load-mode none the CPU-resident weights need that much pinned memory",
    ),
    KnownWarning(
        id="mlock-failed",
        # src/llama-mmap.cpp:732 "warning: failed to mlock %zu-byte buffer (after previously
        # locking %zu bytes): %s"; :789 "warning: mlock not supported on this system"
        regex=r"failed to mlock|mlock not supported on this system",
        advice="raise the memlock limit (ulimit -l) or drop mlock from --load-mode",
    ),
    KnownWarning(
        id="buffered-io-fallback",
        # src/llama-mmap.cpp:191 "Failed to open file '%s' with error: %s. Falling back to
        # buffered I/O"; :293 "%s: Falling back to buffered IO due to %s"
        regex=r"Falling back to buffered I(?:/)?O",
        advice="expect slower, page-cache-polluting loads; use a file system that supports "
        "O_DIRECT or another --load-mode",
    ),
    KnownWarning(
        id="no-tensor-cores",
        # ggml/src/ggml-cuda/ggml-cuda.cu:370 "The following devices will have suboptimal
        # performance due to a lack of tensor cores:"
        regex=r"will have suboptimal performance due to a lack of tensor cores",
        advice="build with CMAKE_CUDA_ARCHITECTURES=61-virtual;80-virtual and "
        "-DGGML_CUDA_FORCE_MMQ=ON, as the next log lines suggest",
    ),
    KnownWarning(
        id="cache-reuse-disabled",
        # tools/server/server-context.cpp:1314/1326 "cache_reuse is not supported by
        # multimodal|this context, it will be disabled"; :3464 "cache reuse is not supported -
        # ignoring n_cache_reuse = %d"
        regex=r"cache[_ ]reuse is not supported",
        advice="do not count on --cache-reuse here; compare prefill with it removed",
    ),
    KnownWarning(
        id="speculative-unsupported",
        # tools/server/server-context.cpp:1375 "speculative decoding not supported by this
        # context"
        regex=r"speculative decoding not supported by this context",
        advice="remove the speculative flags, or decode numbers will be attributed to them wrongly",
    ),
    KnownWarning(
        id="graph-reuse-disabled",
        # src/llama-context.cpp:287 "%s: graph reuse disabled" (LLAMA_GRAPH_REUSE_DISABLE)
        regex=r": graph reuse disabled",
        advice="unset LLAMA_GRAPH_REUSE_DISABLE in the server's environment",
    ),
    KnownWarning(
        id="kv-cache-retry",
        # tools/server/server-context.cpp:4061 "failed to find free space in the KV cache,
        # retrying with smaller batch size, off = %d, n_batch = %d, ret = %d"
        regex=r"failed to find free space in the KV cache, retrying with smaller batch size",
        advice="raise -c (context) or lower -np/-b; prefill of that request ran with a smaller "
        "batch",
    ),
    KnownWarning(
        id="op-not-supported",
        # ggml/src/ggml-cuda/ggml-cuda.cu:4456 "%s: op not supported %s (%s)"
        regex=r"\bop not supported\b",
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
        advice="read the line: it names what fell back and to what",
    ),
)

_ANY_WARNING = re.compile("|".join(f"(?:{w.regex})" for w in STARTUP_WARNINGS))


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


class StartupScanner:
    """Attributes log messages to warnings, keeping the first line and a count per warning id."""

    def __init__(self) -> None:
        self._found: dict[str, StartupFinding] = {}

    def feed(self, text: str, line: str, line_no: int, path: str | None) -> None:
        """Look at one message *text* of the raw *line*, line *line_no* of *path*."""
        if not _ANY_WARNING.search(text):  # one alternation rejects most lines in one search
            return
        for w in STARTUP_WARNINGS:
            if re.search(w.regex, text):
                seen = self._found.get(w.id)
                if seen is None:
                    line = without_colours(line.rstrip("\r\n"))
                    self._found[w.id] = StartupFinding(w.id, line, line_no, w.advice, 1, path)
                else:
                    self._found[w.id] = replace(seen, count=seen.count + 1)
                return

    def findings(self) -> list[StartupFinding]:
        """One finding per warning seen, in order of first appearance."""
        return list(self._found.values())


def scan_startup(text: str) -> list[StartupFinding]:
    """The performance warnings in a server log's text, one finding per warning id, in order of
    first appearance."""
    scanner = StartupScanner()
    for line_no, raw in enumerate(text.splitlines(), start=1):
        for message in log_messages(raw):
            scanner.feed(message, raw, line_no, None)
    return scanner.findings()


# --------------------------------------------------------------------------------------------
# GPU offload: a server asked to offload that put nothing on a GPU
# --------------------------------------------------------------------------------------------

_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def offload_failure(text: str, flags: Sequence[str]) -> str | None:
    """The log line of a server that offloaded no layer although *flags* ask for some
    (``-ngl`` not 0): llama.cpp's ``load_tensors: offloaded 0/49 layers to GPU``
    (``src/llama-model.cpp``); ``None`` when the log says layers went to a GPU, or does not
    say (a build or verbosity that does not print the line)."""
    if (flag_value(flags, "-ngl") or "").strip() == "0":
        return None
    for raw in text.splitlines():
        for message in log_messages(raw):
            m = _OFFLOADED.search(message)
            if m and int(m.group(1)) == 0 and int(m.group(2)) > 0:
                return message.strip()
    return None
