"""The history folder (``.moeperf/``): every run's results, kept next to the same numbers in
the layouts that pytest-benchmark's and llama.cpp's comparison tools read.

One run writes (``<stamp>`` is ``YYYYmmdd-HHMMSS-<pid>`` unless given)::

    .moeperf/results-<stamp>.json                       the run record
    .moeperf/benchmarks/<machine-id>/NNNN_<stamp>.json  a pytest-benchmark saved run
    .moeperf/llama-bench/<stamp>.jsonl                  ``llama-bench -o jsonl`` rows of this run
    .moeperf/llama-bench.jsonl                          those rows of every run, appended

so that these work on it::

    py.test-benchmark --storage file://.moeperf/benchmarks list
    py.test-benchmark --storage file://.moeperf/benchmarks compare [--between mean,ops]
    python llama.cpp/scripts/compare-llama-bench.py -t llama-bench \\
        -i .moeperf/llama-bench.jsonl -b b11053 -c b11713

(``-t llama-bench`` is needed: the script cannot tell the tool of a JSONL file by itself.)
The two layouts are made by :mod:`pytest_moeperf.store.exports`.

Every file is written atomically, and a results file that cannot be read back is reported and
reported by :func:`read_results` and skipped by whoever reads the folder, never fatal.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from pytest_benchmark.utils import get_machine_id

from ..fs import atomic_write_text, file_lock
from .exports import benchmark_json, llama_bench_rows
from .record import RunRecord

RESULTS_GLOB = "results-*.json"
BENCHMARKS_DIR = "benchmarks"
"""pytest-benchmark storage root inside the history folder (``--storage file://...``)."""
LLAMA_BENCH_DIR = "llama-bench"
LLAMA_BENCH_ALL = "llama-bench.jsonl"
LOCK_NAME = ".history.lock"


# --------------------------------------------------------------------------------------------
# Writing


def default_stamp() -> str:
    """The stamp of a run written now by this process: ``YYYYmmdd-HHMMSS-<pid>``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def write_history(record: RunRecord, folder: Path, *, stamp: str | None = None) -> list[Path]:
    """Store one run's *record* in the history
    *folder*: the results file, a pytest-benchmark saved run, this run's llama-bench JSONL rows,
    and those rows appended to the folder's cumulative JSONL. Returns the paths written, the
    results file first. Each file is replaced atomically; concurrent writers (xdist workers)
    take turns."""
    stamp = stamp or default_stamp()
    if not re.fullmatch(r"[A-Za-z0-9._-]+", stamp):
        raise ValueError(f"history stamp {stamp!r}: use letters, digits, '.', '_' and '-'")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with file_lock(folder / LOCK_NAME):
        path = folder / f"results-{stamp}.json"
        atomic_write_text(path, record.json_text())
        written.append(path)

        bench = benchmark_json(record)
        if bench["benchmarks"]:
            machine = folder / BENCHMARKS_DIR / get_machine_id()
            path = machine / f"{_next_number(machine)}_{stamp}.json"
            atomic_write_text(path, json.dumps(bench, indent=4, ensure_ascii=True) + "\n")
            written.append(path)

        rows = llama_bench_rows(record)
        if rows:
            text = "".join(json.dumps(r) + "\n" for r in rows)
            path = folder / LLAMA_BENCH_DIR / f"{stamp}.jsonl"
            atomic_write_text(path, text)
            written.append(path)
            path = folder / LLAMA_BENCH_ALL
            try:
                before = path.read_text(encoding="utf-8")
            except FileNotFoundError:
                before = ""
            if before and not before.endswith("\n"):
                before += "\n"
            atomic_write_text(path, before + text)
            written.append(path)
    return written


def _next_number(machine_dir: Path) -> str:
    """The next ``NNNN`` of pytest-benchmark's file storage in *machine_dir*."""
    found = machine_dir.glob("[0-9][0-9][0-9][0-9]_*.json")
    return f"{max((int(p.name[:4]) for p in found), default=0) + 1:04d}"


# --------------------------------------------------------------------------------------------
# Reading


def read_results(path: Path) -> tuple[RunRecord | None, str | None]:
    """A results file's record, or why it cannot be used (replay reads it the same way: one
    reader, one version)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, f"unreadable ({type(exc).__name__}: {exc.strerror or exc})"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"not UTF-8 text (byte {exc.start})"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON (line {exc.lineno}: {exc.msg})"
    try:
        return RunRecord.from_dict(data), None
    except ValueError as exc:
        return None, str(exc)
