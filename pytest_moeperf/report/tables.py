"""Tables in the ADR's layout: terminal text and markdown."""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..host.probe import Probe
from ..llama.startup import StartupFinding
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..store.record import BenchRound
from ..verdicts.baseline_check import BaselineRow
from ..verdicts.judge import Verdict


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A plain-text table with aligned columns (numbers right-aligned)."""
    body = [list(map(str, r)) for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in body)]) for i, h in enumerate(headers)]

    def fmt(cells: Sequence[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            numeric = (i > 0 and c[:1].isdigit()) or (c[:1] in "+-" and c[1:2].isdigit())
            out.append(c.rjust(widths[i]) if numeric else c.ljust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(headers), sep, *(fmt(r) for r in body)])


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """The same table as GitHub markdown."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(map(str, r)).replace("\n", " ") + " |" for r in rows]
    return "\n".join(lines)


def achieved_bandwidth(ms: Iterable[Measurement]) -> dict[str, float]:
    """The best memory bandwidth each roofline's source was seen to reach (GB/s): its own
    figure, or what a decode on it achieved (its tok/s times the bytes a step reads), when
    llama.cpp reads faster than the probe's streaming read."""
    best: dict[str, float] = {}
    for m in ms:
        r = m.conditions.roofline
        if r is None or not m.values:
            continue
        seen = m.summary.median * r.bytes_per_token / 1e9
        best[r.bandwidth_source] = max(best.get(r.bandwidth_source, 0.0), r.bandwidth_gbs, seen)
    return best


def roofline_warnings(measurements: Iterable[Measurement]) -> list[str]:
    """One line per decode faster than its bandwidth limit: that limit (the probe's streaming
    read, or a stated figure) was no limit, and the table shows the bandwidth llama.cpp was
    seen to reach instead."""
    lines = []
    for m in measurements:
        r = m.conditions.roofline
        if r is None or not m.values or not r.limit_tok_s:
            continue
        share = m.summary.median / r.limit_tok_s
        if share > 1:
            seen = m.summary.median * r.bytes_per_token / 1e9
            lines.append(
                f"{m.configuration} {m.workload} decodes at {100 * share:.0f} % of the limit of "
                f"the {r.bandwidth_source} ({r.bandwidth_gbs:.1f} GB/s): llama.cpp reads "
                f"{seen:.1f} GB/s there, so that figure is no upper bound; the decode limits "
                "shown use the best bandwidth seen"
            )
    return lines


def gpu_telemetry_lines(measurements: Iterable[Measurement]) -> list[str]:
    """One line per measurement that sampled its GPUs, in the order measured:
    ``experts-on-cpu pp512 (b11434): GPU0, sm 12 %, 1.2 GiB, PCIe rx 11.8 GB/s (max 24.1),
    tx 0.2 GB/s (max 0.2), 4 samples``."""
    return [
        f"{m.configuration} {m.workload} ({m.build}): {t.describe()}"
        for m in measurements
        if (t := m.conditions.gpu_telemetry) is not None
    ]


def summary_rows(measurements: Iterable[Measurement]) -> tuple[list[str], list[list[str]]]:
    """One row per (configuration, build), one column per workload, in the shape of ADR-0042's
    llama-bench table: configuration | pp tok/s | tg tok/s | spread | build."""
    ms = [m for m in measurements if not m.workload.is_traffic]  # traffic: traffic_rows
    workloads = sorted({m.workload for m in ms}, key=Workload.table_order)
    groups: dict[tuple[str, str, str], dict[str, Measurement]] = {}
    for m in ms:
        profile = m.conditions.profile
        groups.setdefault((profile, m.configuration, m.build), {})[m.workload.name] = m
    profiles = {k[0] for k in groups}
    roofline = any(m.conditions.roofline for m in ms)
    bandwidth = achieved_bandwidth(ms)
    headers = ["configuration", *(f"{w.name} tok/s" for w in workloads), "spread (cv)"]
    headers += ["decode / bandwidth limit"] if roofline else []
    headers.append("build")
    rows = []
    for (profile, config, build), by_w in groups.items():
        name = f"{profile}/{config}" if len(profiles) > 1 else config
        cells, spreads, limits = [name], [], []
        for w in workloads:
            here = by_w.get(w.name)
            if here is None:
                cells.append("-")
                continue
            cells.append(f"{here.summary.median:.1f}")
            spreads.append(_spread(here))
            if (limit := _bandwidth_limit(here, bandwidth)) is not None:
                limits.append(limit)
        rows.append(
            [
                *cells,
                ", ".join(spreads) or "-",
                *([", ".join(limits) or "-"] if roofline else []),
                build,
            ]
        )
    return headers, rows


def _spread(m: Measurement) -> str:
    """A measurement's spread as the summary says it: its samples' CV, or a stored figure's."""
    if m.figure is not None and not m.samples:
        return f"{m.workload.kind} ±{100 * m.figure.rel_spread:.1f}% (stored)"
    return f"{m.workload.kind} {100 * m.summary.cv:.1f}%"


def _bandwidth_limit(m: Measurement, bandwidth: Mapping[str, float]) -> str | None:
    """A decode's share of its memory-bandwidth ceiling (the best bandwidth seen of its source
    raising it), ``None`` without a roofline."""
    limit = m.conditions.roofline
    if limit is None or not limit.limit_tok_s:
        return None
    best = bandwidth.get(limit.bandwidth_source, limit.bandwidth_gbs)
    ceiling = limit.limit_tok_s * best / limit.bandwidth_gbs
    seen = " (seen)" if best > limit.bandwidth_gbs else ""
    return f"{m.workload.name} {100 * m.summary.median / ceiling:.0f}% of {ceiling:.0f}{seen}"


TRAFFIC_HEADERS = [
    "traffic",
    "load",
    "requests",
    "prefill tok/s",
    "decode tok/s",
    "all-request tok/s",
    "TTFT p50/p90/p99 ms",
    "ITL p50/p90/p99 ms",
    "e2e p50/p90/p99 ms",
    "req/s",
    "goodput req/s",
    "errors",
]


def traffic_rows(runs: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """One row per server's traffic (all its passes; :data:`TRAFFIC_HEADERS`): aggregate
    prefill and decode tok/s as ADR-0042's real-traffic table sums them, latency percentiles,
    requests and goodput per second, errors."""
    rows = []
    for name, run in runs.items():
        fig = run.get("overall") or {}
        if not fig:
            continue

        def num(key: str, digits: int = 1, fig: Mapping[str, Any] = fig) -> str:
            v = fig.get(key)
            return "-" if v is None else f"{v:.{digits}f}"

        def pct(what: str) -> str:
            return "/".join(num(f"{what}_p{q}", 0) for q in (50, 90, 99))

        conc, rate = run.get("concurrency"), run.get("rate")
        load = f"{conc} clients" if conc else (f"{rate:g} req/s" if rate else "log arrivals")
        passes = len(run.get("passes") or [])
        rows.append(
            [
                name,
                load,
                f"{fig.get('requests', 0)} ({passes} passes)",
                num("prefill_rate"),
                num("decode_rate", 2),
                num("throughput_rate", 2),
                pct("ttft"),
                pct("itl"),
                pct("e2e"),
                num("requests_rate", 3),
                num("goodput_rps", 3),
                str(fig.get("errors", 0)),
            ]
        )
    return rows


BENCH_ROUND_HEADERS = ["side", "server / llama-bench [interval]", "rounds", "test"]


def bench_round_rows(rows: Iterable[BenchRound]) -> list[list[str]]:
    """One row per side of a paired verdict whose llama-bench ran in the same rounds
    (``--moeperf-bench``): the server's throughput over llama-bench's, with its interval."""
    return [
        [
            r.side,
            f"{r.verdict.ratio:.3f} [{r.verdict.low:.3f}, {r.verdict.high:.3f}]",
            str(r.verdict.rounds or "-"),
            r.test,
        ]
        for r in rows
    ]


def startup_lines(findings: Mapping[tuple[str, str, str], Sequence[StartupFinding]]) -> list[str]:
    """One line per performance warning a server printed at start, by (profile,
    configuration, build label)."""
    return [
        f"{config} ({label}): [{f.id}] {f.line.strip()} -> {f.advice}"
        for (_profile, config, label), found in findings.items()
        for f in found
    ]


def host_lines(
    probes: Iterable[Probe], changes: Sequence[str] = (), measurements: Iterable[Measurement] = ()
) -> list[str]:
    """The host as the run measured it: one line per probed CPU set, the most other work and
    steal seen on a server's CPUs while it was measured, then how the host changed."""
    lines = [f"host probe: {p.describe()}" for p in probes]
    loads = [
        (m.conditions.host_busy, m.conditions.steal, m.configuration)
        for m in measurements
        if m.samples and m.conditions.accounted
    ]
    if loads:
        busy, _, where = max(loads)
        steal, _, at = max((s, b, c) for b, s, c in loads)
        lines.append(
            f"while measuring, on the server's CPUs: other work up to {100 * busy:.0f} % "
            f"({where}), steal up to {100 * steal:.0f} % ({at})"
        )
    if changes:
        lines.append("host changed under the run (later verdicts undecided): " + "; ".join(changes))
    return lines


def start_lines(starts: Mapping[str, Sequence[float]], setup: float = 0.0) -> list[str]:
    """One line of server load times (seconds from spawn to ``/health`` answering 200) per
    server that was started, by name: a metric of its own (ADR-0042's ``-lm none`` start took
    60-90 s), and how many processes the verdicts measured; with *setup*, the seconds all
    starts took with their builds and models, which no verdict's budget counts."""
    parts = []
    for name, seconds in starts.items():
        if not seconds:
            continue
        med = statistics.median(seconds)
        if len(seconds) == 1:
            parts.append(f"{name} {med:.2f} s")
        else:
            parts.append(
                f"{name} {len(seconds)} starts, median {med:.2f} s "
                f"({min(seconds):.2f}..{max(seconds):.2f})"
            )
    lines = ["server load time: " + "; ".join(parts)] if parts else []
    if setup > 0:
        lines.append(
            f"setup outside every verdict's budget: {setup:.1f} s (builds, models, server starts)"
        )
    return lines


def measured_table(measurements: Sequence[Measurement]) -> str:
    """A text table, one row per measurement: configuration | workload | median | min..max |
    n | build."""
    ms = list(measurements)
    units = {m.workload.unit for m in ms}
    unit = units.pop() if len(units) == 1 else ""
    headers = ["configuration", "workload", f"median {unit}".strip(), "min..max", "n", "build"]
    rows = []
    for m in ms:
        s = m.summary
        rows.append(
            [
                m.configuration,
                m.workload.name,
                f"{s.median:.1f}" + ("" if unit else f" {m.workload.unit}"),
                f"{s.min:.1f}..{s.max:.1f}",
                str(s.n),
                m.build,
            ]
        )
    return text_table(headers, rows)


def claim_failure(verdict: Verdict, measurements: Sequence[Measurement]) -> str:
    """The failure message of a claim: the claim's ratio and interval, then the measured
    rows it rests on."""
    return "\n".join(
        [
            f"claim fails: {verdict.explain()}",
            f"({int(verdict.confidence * 100)} % interval of the ratio of medians, "
            f"{verdict.method})",
            "",
            measured_table(measurements),
        ]
    )


def verdict_rows(verdicts: Iterable[tuple[str, Verdict]]) -> tuple[list[str], list[list[str]]]:
    """One row per judged claim: claim | ratio | interval | verdict | test."""
    headers = ["claim", "ratio", "interval", "verdict", "test"]
    rows = []
    for nodeid, v in verdicts:
        bound = {"~": "~ 1", "<": "< 1 (dead end)"}.get(
            v.relation, f"{v.relation} {v.threshold:.2f}"
        )
        mark = " *" if v.outcome in ("fails", "undecided") else ""
        rows.append(
            [
                f"{v.label} {bound}",
                f"{v.ratio:.3f}",
                f"[{v.low:.3f}, {v.high:.3f}]",
                v.outcome + mark,
                nodeid.split("::")[-1],
            ]
        )
    return headers, rows


BASELINE_HEADERS = [
    "configuration",
    "workload",
    "baseline",
    "measured",
    "change (%)",
    "verdict",
    "build",
]


def baseline_rows(rows: Iterable[BaselineRow]) -> list[list[str]]:
    """configuration | workload | baseline | measured | change (%) | verdict | build, the
    failing cells marked with ``*``."""
    out = []
    for r in rows:
        c, m = r.check, r.measurement
        bad = " *" if c.outcome in ("failed", "undecided") else ""
        interval = f" {c.interval_pct}" if c.interval_pct else ""
        out.append(
            [
                m.configuration,
                m.workload.name,
                f"{c.baseline:.1f}",
                f"{c.measured:.1f}{bad}",
                f"{c.change_pct:+.1f}{interval}{bad}",
                f"{c.outcome}{bad}",
                m.build,
            ]
        )
    return out


def baseline_failure(rows: Sequence[BaselineRow], path: object) -> str:
    """The failure message of a baseline check: every row the test touched, in the ADR's
    layout, failing cells marked."""
    worst = [r for r in rows if r.check.outcome == "failed"]
    head = "; ".join(r.check.explain() for r in worst)
    return "\n".join(
        [f"below baseline ({path}): {head}", "", text_table(BASELINE_HEADERS, baseline_rows(rows))]
    )


def markdown_report(
    measurements: Sequence[Measurement],
    rows: Sequence[BaselineRow],
    verdicts: Sequence[tuple[str, Verdict]],
    fingerprint: Mapping[str, Any],
    startup: Sequence[str] = (),
    bench: tuple[list[str], list[list[str]]] | None = None,
    host_lines: Sequence[str] = (),
    traffic: Mapping[str, Mapping[str, Any]] | None = None,
    sections: Sequence[str] = (),
) -> str:
    """The run as a markdown document: the host as measured, throughput, what the GPUs did
    (where sampled), traffic, baselines, claims, *sections* (markdown of their own, such as
    the claims against a recorded reference) and the host's fingerprint."""
    parts = ["# pytest-moeperf report", ""]

    def section(title: str, *body: str) -> None:
        parts.extend([f"## {title}", "", *body, ""])

    if host_lines:
        parts += [*(f"- {line}" for line in host_lines), ""]
    headers, summary = summary_rows(measurements)
    if summary:
        section("Throughput (median of repetitions)", markdown_table(headers, summary))
    if gpus := gpu_telemetry_lines(measurements):
        section(
            "GPUs while measuring (nvidia-smi dmon: median sm, max memory, median PCIe)",
            *(f"- {line}" for line in gpus),
        )
    if traffic and (lines := traffic_rows(traffic)):
        section(
            "Traffic (all passes; prefill and decode summed as logstats sums them)",
            markdown_table(TRAFFIC_HEADERS, lines),
        )
    if rows:
        section("Against baselines", markdown_table(BASELINE_HEADERS, baseline_rows(rows)))
    if verdicts:
        section("Claims", markdown_table(*verdict_rows(verdicts)))
    for text in sections:
        parts += [text.rstrip("\n"), ""]
    if bench:
        section("llama-bench cross-check (same model, flags, pinning)", markdown_table(*bench))
    if startup:
        section("llama-server startup warnings", *(f"- {line}" for line in startup))
    if fingerprint:
        fields = [[k, str(v)] for k, v in fingerprint.items()]
        section("Host", markdown_table(["field", "value"], fields))
    return "\n".join(parts)


_SAID = re.compile(r"^(?P<label>[^\s:]+(?: / [^\s:]+)?): (?P<rest>.+)$", re.S)


def said_once(lines: Iterable[str]) -> list[str]:
    """*lines* (``label: reason``) with a reason several labels share said once, after all
    their labels (``mmap.pp512, mmap.tg64: baseline check not measured further: ...``), in the
    order each reason was first said."""
    by_reason: dict[str, list[str]] = {}
    for line in lines:
        m = _SAID.match(line)
        label, rest = (m["label"], m["rest"]) if m else ("", line)
        labels = by_reason.setdefault(rest, [])
        if label and label not in labels:
            labels.append(label)
    return [
        f"{', '.join(labels)}: {rest}" if labels else rest for rest, labels in by_reason.items()
    ]
