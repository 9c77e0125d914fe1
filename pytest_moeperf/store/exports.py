"""The exports of a run's results: the same numbers in the layouts that pytest-benchmark's and
llama.cpp's comparison tools read, which :func:`~pytest_moeperf.store.history.write_history`
stores next to each results file.

- :func:`benchmark_json`: a pytest-benchmark saved run (one benchmark per measurement, the
  seconds of each request as its timing data);
- :func:`llama_bench_rows`: ``llama-bench -o jsonl`` rows (one per measurement; the fields a
  server run cannot know are approximated as docs/reference/options.md lists).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_benchmark import __version__ as PYTEST_BENCHMARK_VERSION
from pytest_benchmark.stats import Stats

from .. import __version__
from ..host.machine import parse_cpu_list
from ..llama.build import label_number
from ..llama.flags import bench_fields
from ..measure.measurement import Measurement
from .record import RunRecord, parse_date

_DEFAULTS: dict[str, Any] = {
    "n_batch": 2048,
    "n_ubatch": 512,
    "cpu_mask": "0x0",
    "cpu_strict": False,
    "poll": 50,
    "type_k": "f16",
    "type_v": "f16",
    "n_gpu_layers": -1,
    "n_cpu_moe": 0,
    "split_mode": "layer",
    "main_gpu": 0,
    "no_kv_offload": False,
    "flash_attn": -1,
    "devices": "auto",
    "tensor_split": "0.00",
    "tensor_buft_overrides": "none",
    "load_mode": "auto",
    "lazy_mode": "auto",
    "embeddings": False,
    "no_op_offload": 0,
    "no_host": False,
    "repack": True,
    "fit_target": 0,
    "fit_min_ctx": 0,
}
"""llama-server b11434's defaults, for the setting fields no flag sets (all but
``n_threads``)."""

SETTING_FIELDS: tuple[str, ...] = ("n_batch", "n_ubatch", "n_threads", *list(_DEFAULTS)[2:])
"""llama-bench row fields that come from the configuration's flags (or their defaults)."""

# --------------------------------------------------------------------------------------------
# pytest-benchmark's saved-run layout


def benchmark_name(m: Measurement) -> str:
    """``configuration[build]-workload``, the workload written as llama.cpp's compare script
    writes it (``tg64@d512``)."""
    return f"{m.configuration}[{m.build}]-{m.workload.compact}"


def benchmark_json(record: RunRecord) -> dict[str, Any]:
    """*record* as one pytest-benchmark saved run: one benchmark per measurement with
    samples, grouped by profile and workload. Its timing data are the seconds of each request
    (prompt or decode time as llama-server timed it, one round per repetition); throughput in
    tok/s and what was run are in ``extra_info``."""
    measured = [m for m in record.measurements if m.samples]
    date = parse_date(record.date)
    return {
        "machine_info": _machine_info(dict(record.fingerprint)),
        "commit_info": {
            "id": "+".join(dict.fromkeys(m.build for m in measured)) or "unknown",
            "time": None,
            "author_time": None,
            "dirty": False,
            "project": "llama.cpp",
            "branch": "(unknown)",
        },
        "benchmarks": [_benchmark(m) for m in measured],
        "datetime": (date or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).isoformat(),
        "version": PYTEST_BENCHMARK_VERSION,
        "moeperf_plugin_version": record.plugin_version or __version__,
    }


def _machine_info(fp: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "node": str(fp.get("hostname", platform.node())),
        "processor": str(fp.get("cpu_model", platform.processor())),
        "machine": platform.machine(),
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": platform.python_version(),
        "python_build": list(platform.python_build()),
        "release": str(fp.get("kernel", platform.release())),
        "system": platform.system(),
        "cpu": {
            "brand_raw": str(fp.get("cpu_model", "")),
            "count": fp.get("cpus", os.cpu_count() or 0),
            "arch_string_raw": platform.machine(),
        },
        "moeperf_fingerprint": dict(fp),
    }


def _benchmark(m: Measurement) -> dict[str, Any]:
    stats = Stats()
    for sample in m.samples:
        stats.update(sample.ms / 1000.0)
    st = stats.as_dict()
    st["data"] = list(stats.data)
    st["iterations"] = 1
    s = m.summary
    profile = m.conditions.profile
    name = benchmark_name(m)
    return {
        "group": f"{profile} {m.workload.name}".strip(),
        "name": name,
        "fullname": f"{profile}::{m.configuration}-{m.workload.compact}",
        "params": {
            "profile": profile,
            "configuration": m.configuration,
            "build": m.build,
            "workload": m.workload.name,
        },
        "param": m.build,
        "extra_info": {
            "unit": "tok/s",
            "tok_per_s_median": s.median,
            "tok_per_s_min": s.min,
            "tok_per_s_max": s.max,
            "tok_per_s_mad": s.mad,
            "tok_per_s_cv": s.cv,
            "tok_per_s": m.values,
            "tokens": [x.tokens for x in m.samples],
            "profile": profile,
            "configuration": m.configuration,
            "build": m.build,
            "workload": m.workload.name,
            "kind": m.workload.kind,
            "depth": m.workload.depth,
            "flags": list(m.conditions.flags),
            "pinning": m.conditions.pinning,
            "model": m.conditions.model,
        },
        "options": {
            "disable_gc": False,
            "timer": "llama-server timings (prompt_ms / predicted_ms)",
            "min_rounds": len(m.samples),
            "max_time": 0,
            "min_time": 0,
            "warmup": True,
        },
        "stats": st,
    }


# --------------------------------------------------------------------------------------------
# llama-bench's JSONL rows


def _pinned_cpus(pinning: str, fingerprint: Mapping[str, Any]) -> frozenset[int] | None:
    """The CPUs a measurement's ``pinning`` (``"cpus 0-3"``, ``"node 1, --numa isolate"``)
    named, resolved against the fingerprint's NUMA nodes; ``None`` when unpinned or unknown."""
    cpus: frozenset[int] | None = None
    try:
        m = re.search(r"\bnode (\d+)", pinning)
        if m:
            nodes = fingerprint.get("numa_nodes") or {}
            text = nodes.get(m.group(1)) if isinstance(nodes, Mapping) else None
            if text:
                cpus = parse_cpu_list(str(text))
        m = re.search(r"\bcpus ([0-9,\-]+)", pinning)
        if m:
            listed = parse_cpu_list(m.group(1))
            cpus = listed if cpus is None else (cpus & listed or listed)
    except Exception:
        return None
    return cpus


def _test_time(m: Measurement, record: RunRecord) -> str:
    spans = m.conditions.spans
    when: dt.datetime | None = None
    try:
        end = float(spans[-1][1])
        when = dt.datetime.fromtimestamp(end, dt.UTC)
    except (IndexError, TypeError, ValueError):
        when = parse_date(record.date)
    when = when or dt.datetime.now(dt.UTC)
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _stdev(values: Sequence[float]) -> float:
    """llama-bench's sample standard deviation (0 for fewer than two values)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def _settings(
    flags: list[str], cpus: frozenset[int] | None, fp: Mapping[str, Any]
) -> dict[str, Any]:
    """llama-bench's setting fields of a server started with *flags*: its defaults where no
    flag sets one, the threads and CPU mask of the *cpus* pinned to (else the host's)."""
    fields = {**_DEFAULTS, **bench_fields(flags)}
    if "n_threads" not in fields:
        fields["n_threads"] = len(cpus) if cpus else int(fp.get("cpus") or os.cpu_count() or 1)
    if fields["cpu_mask"] == "0x0" and cpus:
        fields["cpu_mask"] = hex(sum(1 << c for c in cpus))
    return fields


def _bench_row(m: Measurement, record: RunRecord, fp: Mapping[str, Any]) -> dict[str, Any]:
    """The ``llama-bench -o jsonl`` row of measurement *m* of *record*, on the host whose
    fingerprint is *fp*."""
    profile = m.conditions.profile
    flags = list(m.conditions.flags)
    pinning = m.conditions.pinning
    fields = _settings(flags, _pinned_cpus(pinning, fp), fp)
    gpus = [str(g) for g in (fp.get("gpus") or [])]
    model = str(m.conditions.model or fp.get("model") or "")
    model_name = Path(model).name if model else "unknown"
    number = label_number(m.build)
    samples_ns = [round(s.ms * 1e6) for s in m.samples]
    samples_ts = [s.tok_per_s for s in m.samples]
    wl = m.workload
    return {
        "build_commit": m.build,
        "build_number": number or 0,
        "cpu_info": str(fp.get("cpu_model", "")),
        "gpu_info": ", ".join(gpus),
        "backends": "CUDA" if gpus else "CPU",
        "model_filename": model,
        "model_type": f"{model_name} [{m.configuration}]",
        "model_size": int(fp.get("model_bytes") or 0),
        "model_n_params": 0,
        **{k: fields[k] for k in SETTING_FIELDS},
        "n_prompt": wl.tokens if wl.is_prefill else 0,
        "n_gen": 0 if wl.is_prefill else wl.tokens,
        "n_depth": wl.depth,
        "test_time": _test_time(m, record),
        "avg_ns": int(sum(samples_ns) // len(samples_ns)),
        "stddev_ns": int(_stdev([float(x) for x in samples_ns])),
        "avg_ts": statistics.fmean(samples_ts),
        "stddev_ts": _stdev(samples_ts),
        "samples_ns": samples_ns,
        "samples_ts": samples_ts,
        "use_mmap": fields["load_mode"] in ("auto", "mmap", "mmap+mlock"),
        "moeperf_profile": profile,
        "moeperf_configuration": m.configuration,
        "moeperf_workload": wl.name,
        "moeperf_flags": flags,
        "moeperf_pinning": pinning,
    }


def llama_bench_rows(record: RunRecord) -> list[dict[str, Any]]:
    """One ``llama-bench -o jsonl`` row per measurement with samples, in llama-bench b11434's
    field order and types (``test::get_fields()``, then ``samples_ns`` and ``samples_ts``), then
    ``use_mmap`` (older llama-bench builds and older ``compare-llama-bench.py`` key on it
    instead of ``load_mode``) and the ``moeperf_*`` fields that identify the row in
    pytest-moeperf (``compare-llama-bench.py`` drops fields it does not know). Fields a server
    run cannot know are approximations (docs/reference/options.md lists them)."""
    host = dict(record.fingerprint)
    per_profile = record.fingerprints
    rows = []
    for m in record.measurements:
        if not m.samples or m.workload.is_traffic:  # llama-bench has no traffic
            continue
        fp = {**host, **dict(per_profile.get(m.conditions.profile) or {})}
        row = _bench_row(m, record, fp)
        if all(math.isfinite(v) for v in row["samples_ts"]):
            rows.append(row)
    return rows
