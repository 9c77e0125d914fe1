"""What a perf session shows at its end: the terminal summary (the host as probed, throughput
in the layout of the ADR's tables, what the GPUs did, traffic, claims, the claims beside a
profile's recorded reference, baseline checks, llama-bench beside the servers, startup
warnings) and the markdown report with its PNGs."""

from __future__ import annotations

import pytest

from ..errors import StoreError
from ..fs import write_output
from ..measure.measurement import Measurement
from ..measure.workload import Workload
from ..report.plot import plot_marks, plot_report, reference_figure, save_png
from ..report.reference import reference_markdown, reference_text
from ..report.tables import (
    BASELINE_HEADERS,
    BENCH_ROUND_HEADERS,
    TRAFFIC_HEADERS,
    baseline_rows,
    bench_round_rows,
    gpu_telemetry_lines,
    host_lines,
    markdown_report,
    roofline_warnings,
    said_once,
    start_lines,
    startup_lines,
    summary_rows,
    text_table,
    traffic_rows,
    verdict_rows,
)
from ..run.crosscheck import bench_rows
from ..run.session import PerfSession
from ..verdicts.reference import Reference, ReferenceRow
from .judged import Judged
from .options import report_png


def _host_lines(perf: PerfSession) -> list[str]:
    """The host as this run measured it, and how long its servers took to start."""
    return host_lines(
        perf.journal.probes.values(), perf.journal.host_changes, perf.measurements.values()
    ) + start_lines(perf.journal.load_times(), perf.journal.setup_seconds)


def _references(
    perf: PerfSession,
) -> list[tuple[Reference, list[ReferenceRow], list[Measurement], tuple[Workload, ...]]]:
    """Per profile with a recorded reference: the reference, its claims' and dead ends' rows,
    the profile's measurements and its workloads."""
    rows: dict[str, list[ReferenceRow]] = {}
    for r in perf.reference_rows:
        rows.setdefault(r.profile, []).append(r)
    out = []
    for name, mine in rows.items():
        profile = perf.profile(name)
        ref = perf.reference(profile)
        if ref is None:
            continue
        ms = [m for m in perf.measurements.values() if m.conditions.profile == name]
        out.append((ref, mine, ms, profile.workloads))
    return out


def claims_rate_line(count: int, alpha: float = 0.05) -> str:
    """What the error rate of each claim means at this many claims (they are not corrected as
    a family: each stands for itself, as the decision record's rows do)."""
    some = 1 - (1 - alpha) ** count
    return (
        f"each verdict's interval misses the true ratio with at most {100 * alpha:.0f} % over "
        f"all its looks; at {count} verdicts that is up to {100 * some:.0f} % that some one "
        f"does ({alpha * count:.2f} expected), as each stands for itself"
    )


def write_report(perf: PerfSession) -> None:
    """The markdown report, and beside it a PNG of throughput (with run-over-run history)."""
    assert perf.options.report_file is not None
    report = perf.options.report_file
    record = perf.record or perf.journal.freeze()
    fp = next(iter(record.fingerprints.values()), record.fingerprint)
    png = report_png(report)
    sections = []
    for ref, rows, ms, workloads in _references(perf):
        section = reference_markdown(ref, rows, ms, workloads)
        if ms:  # the reference against this host, beside the report's own PNG
            path = png.with_name(f"{png.stem}.reference-{ref.profile}.png")
            save_png(reference_figure(ref, ms, workloads), path, "--moeperf-report")
            perf.report_files.append(path)
            section += f"\n![{ref.label} beside this host]({path.name})\n"
        sections.append(section)
    text = markdown_report(
        list(perf.measurements.values()),
        perf.baseline_rows,
        [(v.test, v.verdict) for v in perf.journal.verdicts],
        fp,
        startup_lines(perf.journal.findings),
        bench_rows(perf) if perf.journal.bench else None,
        host_lines=_host_lines(perf),
        traffic=record.traffic,
        sections=sections,
    )
    if perf.measurements:
        try:
            history = perf.history(record)
        except StoreError as exc:  # the report is still written, without the history
            history, perf.history_problems = [], [f"history not drawn: {exc}"]
        profiles = sorted({k[0] for k in perf.measurements})
        marks = plot_marks(
            perf.measurements.values(),
            {p: perf.baselines(perf.profile(p)) for p in profiles},
            record.fingerprints,
            tolerance=perf.options.probe_tolerance,
            references={p: r for p in profiles if (r := perf.reference(perf.profile(p)))},
        )
        plot_report(record, history, png, baselines=marks)
        perf.report_files.append(png)
        text += f"\n![throughput per configuration and workload]({png.name})\n"
    write_output(report, text, "--moeperf-report")
    perf.report_files.insert(0, report)


def terminal_summary(perf: PerfSession, reporter: pytest.TerminalReporter) -> None:
    """The session's tables, at the end of the terminal output."""
    write = reporter.write_line
    if perf.finish_error:
        write(f"moeperf: error: {perf.finish_error}", red=True)
    if not perf.measurements:
        return
    reporter.section("moeperf: throughput (median of repetitions)")
    for line in _host_lines(perf):
        write(line, yellow=line.startswith("host changed"))
    headers, rows = summary_rows(perf.measurements.values())
    if rows:
        write(text_table(headers, rows))
        for line in roofline_warnings(perf.measurements.values()):
            write(f"warning: {line}", yellow=True)
    _measured_blocks(perf, reporter)
    _bench_blocks(perf, reporter)
    for path in perf.accepted:
        write(f"accepted as new baselines: {path}")
    if perf.accept_lines:
        moved = "would move (--moeperf-dry-run)" if perf.options.dry_run else "moved"
        write(f"the pin {moved}:")
        for diff in perf.accept_lines:
            for line in diff.splitlines():
                write(line)
    for line in perf.history_problems:
        write(f"moeperf: skipped history file: {line}", yellow=True)
    for path in perf.report_files:
        write(f"report: {path}")
    if perf.results_path is not None:
        write(f"results: {perf.results_path}")


def _block(reporter: pytest.TerminalReporter, *lines: str) -> None:
    """A blank line, then *lines*: one block of the terminal summary."""
    for line in ("", *lines):
        reporter.write_line(line)


def _measured_blocks(perf: PerfSession, reporter: pytest.TerminalReporter) -> None:
    """The summary's blocks of what the servers did: the GPUs, traffic, the claims' verdicts
    and what they said before deciding, the claims beside a recorded reference, baseline
    checks."""
    if gpus := gpu_telemetry_lines(perf.measurements.values()):
        title = "GPUs while measuring (nvidia-smi dmon: median sm, max memory, median PCIe):"
        _block(reporter, title, *(f"  {line}" for line in gpus))
    # the record written at session finish holds every pass already: not serialised again
    if traffic := traffic_rows(perf.record.traffic if perf.record else perf.journal.traffic_runs()):
        title = "traffic (all passes; prefill and decode summed as logstats):"
        _block(reporter, title, text_table(TRAFFIC_HEADERS, traffic))
    if verdicts := perf.journal.verdicts:
        table = text_table(*verdict_rows([(v.test, v.verdict) for v in verdicts]))
        _block(reporter, table, claims_rate_line(len(verdicts)))
    if perf.journal.notices:  # what verdicts said before measuring (or after their first round)
        _block(
            reporter,
            "said before deciding (resolution, budgets):",
            *(f"  {n}" for n in said_once(perf.journal.notices)),
        )
    for ref, ref_rows, ms, workloads in _references(perf):
        _block(reporter, *reference_text(ref, ref_rows, ms, workloads))
    if perf.baseline_rows:
        _block(reporter, text_table(BASELINE_HEADERS, baseline_rows(perf.baseline_rows)))


def _bench_blocks(perf: PerfSession, reporter: pytest.TerminalReporter) -> None:
    """The summary's blocks of llama-bench beside the servers (in their rounds, and the
    cross-check with its errors), and llama-server's startup warnings."""
    if perf.journal.bench_rounds:
        title = "llama-bench in the same rounds as the servers (same build, model, flags, pinning):"
        rows = bench_round_rows(perf.journal.bench_rounds)
        _block(reporter, title, text_table(BENCH_ROUND_HEADERS, rows))
    if perf.journal.bench or perf.bench_errors:
        _block(
            reporter,
            "llama-bench cross-check (same model, flags, pinning):",
            text_table(*bench_rows(perf)),
        )
        for line in perf.bench_errors:
            reporter.write_line(f"  {line}", yellow=True)
    if startup := startup_lines(perf.journal.findings):
        _block(reporter, "llama-server startup warnings:", *(f"  {line}" for line in startup))


def judged_summary(judged: Judged, allow_empty: bool, reporter: pytest.TerminalReporter) -> None:
    """The session's last line of its own: what its perf tests judged; in red, with the exit
    status, when they decided nothing."""
    if judged.exit_status is not None:
        reporter.write_line(
            f"moeperf: nothing judged, exit {judged.exit_status}: {judged.line()} "
            "(--moeperf-allow-empty to exit 0)",
            red=True,
        )
    elif judged.nothing_judged and allow_empty and not judged.failed:
        reporter.write_line(
            f"moeperf: nothing judged (--moeperf-allow-empty): {judged.line()}", yellow=True
        )
    else:
        reporter.write_line(f"moeperf: judged: {judged.line()}")
