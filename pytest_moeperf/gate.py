"""The build gate: the same configurations on a baseline build and a candidate build,
measured interleaved (A B A B ...), with one verdict per configuration and workload.

Verdicts come from :func:`pytest_moeperf.judge.judge_change` on a seeded bootstrap interval
(95 %) of the ratio of medians, candidate / baseline: ``faster`` or ``slower`` only when the
whole interval is past 1 ± half the margin and the ratio is past the margin, ``unchanged``
when the whole interval lies within 1 ± margin, ``inconclusive`` otherwise — a noisy host
(busy with other work, or a CV above 15 %) yields "inconclusive", never "slower". An
inconclusive row gets more rounds, up to a limit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .config import Configuration, Pinning, Profile
from .errors import ConfigError, Unavailable
from .host.machine import busy_fraction
from .measure.measurement import Measurement
from .measure.workload import Workload
from .report.tables import markdown_table, text_table
from .session import PerfSession
from .verdicts.judge import Verdict, judge_change, too_noisy, undecided

BASELINE, CANDIDATE = "baseline", "candidate"


@dataclass(frozen=True)
class BuildUnderTest:
    """One side of the gate: a build number (built by the embedded builder) or a binary."""

    target: int | str
    """Build number, or path to a llama-server binary."""
    cpus: str | None = None
    """Pin this side's servers to these CPUs instead of the configuration's pinning."""

    @property
    def name(self) -> str:
        base = (
            f"b{self.target}"
            if isinstance(self.target, int)
            else os.path.basename(str(self.target))
        )
        return f"{base} (cpus {self.cpus})" if self.cpus else base


@dataclass(frozen=True)
class GateRow:
    """The verdict of one configuration and workload."""

    configuration: str
    workload: Workload
    baseline: Measurement
    candidate: Measurement
    verdict: Verdict


@dataclass
class GateResult:
    """Every row of a gate run, and the host's state around it."""

    baseline: str
    candidate: str
    margin: float
    rows: list[GateRow]
    host_busy_before: float
    loadavg_before: tuple[float, float, float]
    notes: list[str]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """Configurations a build or this host cannot run: (configuration, why)."""

    @property
    def slower(self) -> list[GateRow]:
        return [r for r in self.rows if r.verdict.outcome == "slower"]

    @property
    def passed(self) -> bool:
        """No metric is slower beyond the margin."""
        return not self.slower

    def table_rows(self) -> tuple[list[str], list[list[str]]]:
        headers = [
            "configuration",
            "metric",
            f"baseline {self.baseline} tok/s",
            f"candidate {self.candidate} tok/s",
            "speedup",
            "verdict",
        ]
        rows = []
        for r in self.rows:
            v = r.verdict
            mark = " *" if v.outcome in ("slower", "inconclusive") else ""
            why = ""
            if v.outcome == "inconclusive":
                cv = max(r.baseline.summary.cv, r.candidate.summary.cv)
                why = f" ({too_noisy([r.baseline, r.candidate]) or f'cv {100 * cv:.0f} %'})"
            rows.append(
                [
                    r.configuration,
                    r.workload.name,
                    f"{r.baseline.summary.median:.1f}",
                    f"{r.candidate.summary.median:.1f}",
                    f"{v.ratio:.3f}x [{v.low:.3f}, {v.high:.3f}]",
                    f"{v.outcome}{why}{mark}",
                ]
            )
        for name, why in self.skipped:
            rows.append([name, "-", "-", "-", "-", f"skipped ({why})"])
        return headers, rows

    def text(self) -> str:
        head = (
            f"build gate: candidate {self.candidate} vs baseline {self.baseline}, margin "
            f"{100 * self.margin:.0f} %; host {100 * self.host_busy_before:.0f} % busy "
            f"before start, load average {self.loadavg_before[0]:.2f}"
        )
        lines = [head, "", text_table(*self.table_rows())]
        lines += [f"note: {n}" for n in self.notes]
        lines.append(
            "verdict: " + ("pass" if self.passed else f"FAIL: {len(self.slower)} metric(s) slower")
        )
        return "\n".join(lines)

    def markdown(self) -> str:
        lines = [
            f"# Build gate: {self.candidate} vs {self.baseline}",
            "",
            f"Margin {100 * self.margin:.0f} %; host {100 * self.host_busy_before:.0f} % "
            f"busy before start, load average {self.loadavg_before[0]:.2f}.",
            "",
            markdown_table(*self.table_rows()),
            "",
        ]
        lines += [f"- note: {n}" for n in self.notes]
        lines.append("")
        lines.append("**" + ("pass" if self.passed else "FAIL: slower") + "**")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "margin": self.margin,
            "passed": self.passed,
            "host_busy_before": self.host_busy_before,
            "loadavg_before": list(self.loadavg_before),
            "notes": self.notes,
            "skipped": [{"configuration": c, "reason": why} for c, why in self.skipped],
            "rows": [
                {
                    "configuration": r.configuration,
                    "workload": r.workload.name,
                    "verdict": r.verdict.outcome,
                    "ratio": r.verdict.ratio,
                    "low": r.verdict.low,
                    "high": r.verdict.high,
                    "baseline": r.baseline.to_dict(),
                    "candidate": r.candidate.to_dict(),
                }
                for r in self.rows
            ],
        }

    def json_text(self) -> str:
        return json.dumps(self.to_json(), indent=1) + "\n"


def _side(config: Configuration, side: BuildUnderTest) -> Configuration:
    if side.cpus is None:
        return config
    return replace(config, pinning=Pinning(cpus=side.cpus, numa=config.pinning.numa))


def _rounds(
    session: PerfSession,
    profile: Profile,
    sides: tuple[tuple[str, Configuration], tuple[str, Configuration]],
    workload: Workload,
    n: int,
) -> tuple[Measurement, Measurement]:
    """Both sides with *n* samples each, one repetition of each in turn (A B A B ...)."""
    got: list[Measurement] = []
    for i in range(1, n + 1):
        got = [session.measure(profile, cfg, workload, i, label) for label, cfg in sides]
    return got[0], got[1]


def run_gate(
    session: PerfSession,
    profile: Profile,
    baseline: BuildUnderTest,
    candidate: BuildUnderTest,
    *,
    configurations: Sequence[str] | None = None,
    workloads: Sequence[Workload] | None = None,
    repetitions: int = 5,
    max_repetitions: int = 9,
    margin: float = 0.05,
    on_row: Callable[[GateRow], None] | None = None,
) -> GateResult:
    """Measure every (configuration, workload) on both builds, one repetition of each in turn,
    and judge the change; inconclusive rows get more rounds up to *max_repetitions*."""
    gated = replace(
        profile, builds={BASELINE: baseline.target, CANDIDATE: candidate.target}, build=None
    )
    names = list(configurations or profile.configurations)
    loads = list(workloads or profile.workloads)
    if not loads:
        raise ConfigError(
            f"profile {profile.name!r} ({profile.source}) lists no workloads: add "
            'workloads = ["pp512", "tg64"] to it, or pass -w pp512'
        )
    busy = busy_fraction(1.0)
    loadavg = os.getloadavg()
    notes = []
    if busy > 0.25:
        notes.append(
            f"the host was {100 * busy:.0f} % busy with other work before the gate: "
            "expect wide intervals and inconclusive verdicts"
        )
    rows: list[GateRow] = []
    skipped: list[tuple[str, str]] = []
    for name in names:
        config = profile.configuration(name)
        sides = ((BASELINE, _side(config, baseline)), (CANDIDATE, _side(config, candidate)))
        try:  # a configuration a build (or this host) cannot run is a skipped row
            for side, cfg in sides:
                session.server(gated, cfg, side)
        except Unavailable as exc:
            why = str(exc)
            for side, build in ((BASELINE, baseline), (CANDIDATE, candidate)):
                why = why.replace(f"build {side} ", f"build {build.name} ")
            skipped.append((name, why))
            session.stop_servers()
            continue
        for w in loads:
            label = f"{name}.{w.name} {candidate.name} / {baseline.name}"
            got = _rounds(session, gated, sides, w, repetitions)
            verdict = judge_change(got[1].values, got[0].values, margin=margin, label=label)
            while verdict.outcome == "inconclusive" and verdict.more_repetitions:
                n = len(got[0].samples)
                if n >= max_repetitions:
                    break
                got = _rounds(
                    session, gated, sides, w, min(max_repetitions, n + verdict.more_repetitions)
                )
                verdict = judge_change(got[1].values, got[0].values, margin=margin, label=label)
            moved = session.moved_under(got)
            reasons = [too_noisy(got), *([f"host changed: {'; '.join(moved)}"] if moved else [])]
            verdict = undecided(verdict, "; ".join(r for r in reasons if r) or None)
            row = GateRow(name, w, got[0], got[1], verdict)
            rows.append(row)
            if on_row:
                on_row(row)
        session.stop_servers()
    after = busy_fraction(0.5)
    if after > 0.25:
        notes.append(f"the host was {100 * after:.0f} % busy with other work right after the gate")
    moved = session.host_moved(list(session.probes), force=True)  # the host at the end
    if moved:
        why = f"host changed during the gate: {'; '.join(moved)}"
        notes.append(why + "; every verdict is undecided")
        rows = [replace(r, verdict=undecided(r.verdict, why)) for r in rows]
    notes += [f"host probe: {p.describe()}" for p in session.probes.values()]
    return GateResult(baseline.name, candidate.name, margin, rows, busy, loadavg, notes, skipped)
