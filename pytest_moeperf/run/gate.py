"""The build gate: the same configurations on a baseline build and a candidate build,
measured in paired rounds (A B, B A, A B, ...), with one verdict per configuration and workload.

Each row is a sequential verdict (:func:`pytest_moeperf.run.rounds.measure_rounds`) on the
per-round ratios candidate / baseline: rounds are added until the interval decides
(faster / slower beyond the margin, small-faster / small-slower within it, unchanged) or the
row's time budget is spent (undecided, with the smallest change it could have seen: its
MDE). The candidate is also set beside the oldest and the newest baseline accepted into the
profile's baseline file on this host, so that a chain of small accepted slowdowns shows.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigError, Unavailable
from ..host.machine import busy_fraction
from ..measure.measurement import Measurement
from ..measure.output import OutputCheck, greedy_tokens
from ..measure.workload import Workload
from ..report.tables import markdown_table, start_lines, text_table
from ..store.baselines import BaselineEntry
from ..store.hosts import accepted_history, host_for
from ..verdicts.attribution import Attribution, attribute
from ..verdicts.judge import Verdict, busy_reason, judge_change, undecided
from ..verdicts.sequential import Plan, Rule
from .profiles import Configuration, Pinning, Profile
from .rounds import Side, bench_in_rounds, measure_rounds
from .session import PerfSession

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
    seconds: float = 0.0
    """Wall time of the row's rounds."""
    oldest: Verdict | None = None
    """The candidate against the oldest baseline accepted on this host (unpaired)."""
    newest: Verdict | None = None
    """The candidate against the newest baseline accepted on this host (unpaired)."""
    attribution: Attribution | None = None
    """llama-bench in the same rounds: where the change is (``--attribute``)."""


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
    undecided_policy: str = "exit-3"
    """What undecided rows make of the gate: ``exit-3``, ``pass`` or ``fail``."""
    outputs: list[OutputCheck] = field(default_factory=list)
    """The correctness guard of each configuration: greedy tokens on both builds."""
    allow_different: bool = False
    """Whether different output may pass (``--allow-different-output``)."""

    @property
    def different(self) -> list[OutputCheck]:
        return [c for c in self.outputs if not c.same]

    @property
    def slower(self) -> list[GateRow]:
        return [r for r in self.rows if r.verdict.outcome == "slower"]

    @property
    def undecided(self) -> list[GateRow]:
        return [r for r in self.rows if r.verdict.outcome == "undecided"]

    @property
    def crept(self) -> list[GateRow]:
        """Rows whose candidate is slower than the oldest accepted baseline: the cumulative
        change of the accepted chain is a regression."""
        return [r for r in self.rows if r.oldest is not None and r.oldest.outcome == "slower"]

    @property
    def creep_notes(self) -> list[str]:
        """One line per row slower than the oldest accepted baseline."""
        return [
            f"{r.configuration}.{r.workload.name} is slower than the oldest accepted baseline "
            f"({r.oldest.label}: {_versus(r.oldest)}): the accepted chain adds up to a "
            "regression (--accept refuses it without --allow-creep)"
            for r in self.crept
            if r.oldest is not None
        ]

    @property
    def passed(self) -> bool:
        """No metric is slower beyond the margin."""
        return not self.slower

    def exit_code(self, undecided: str | None = None) -> int:
        """0 pass, 1 a regression, 3 undecided rows; *undecided* (default: the gate's
        :attr:`undecided_policy`) ``pass`` makes those 0, ``fail`` 1."""
        policy = undecided or self.undecided_policy
        if self.slower or (self.different and not self.allow_different):
            return 1
        if self.undecided and policy != "pass":
            return 1 if policy == "fail" else 3
        return 0

    def summary(self) -> str:
        """The last line: ``pass``, ``FAIL: ...`` or ``UNDECIDED: ...``."""
        if self.different and not self.allow_different:
            slower = f"; {len(self.slower)} metric(s) slower" if self.slower else ""
            return (
                f"FAIL: the candidate's output differs on {len(self.different)} configuration(s)"
                f"{slower} (--allow-different-output to judge speed alone)"
            )
        if self.slower:
            return f"FAIL: {len(self.slower)} metric(s) slower"
        if not self.undecided:
            return "pass"
        what = f"{len(self.undecided)} metric(s) undecided (budget spent)"
        if self.undecided_policy == "pass":
            return f"pass ({what}, --undecided pass)"
        if self.undecided_policy == "fail":
            return f"FAIL: {what}"
        return f"UNDECIDED: {what}"

    def table_rows(self) -> tuple[list[str], list[list[str]]]:
        headers = [
            "configuration",
            "metric",
            f"baseline {self.baseline} tok/s",
            f"candidate {self.candidate} tok/s",
            "ratio [interval]",
            "rounds",
            "verdict",
            "vs oldest accepted",
        ]
        attributed = any(r.attribution for r in self.rows)
        if attributed:
            headers += ["server/bench [interval]", "where the change is"]
        rows = []
        for r in self.rows:
            v = r.verdict
            mark = " *" if v.outcome in ("slower", "undecided") else ""
            why = ""
            if v.outcome == "undecided" and v.reason:
                why = f" ({v.reason})"
            elif v.outcome == "undecided" and v.mde_text:
                why = f" (MDE ±{100 * (v.mde or 0):.1f} %)"
            rows.append(
                [
                    r.configuration,
                    r.workload.name,
                    f"{r.baseline.summary.median:.1f}",
                    f"{r.candidate.summary.median:.1f}",
                    f"{v.ratio:.3f}x [{v.low:.3f}, {v.high:.3f}]",
                    f"{v.rounds or '-'} ({r.seconds:.0f} s)",
                    f"{v.outcome}{why}{mark}",
                    _versus(r.oldest),
                    *(_attributed(r) if attributed else []),
                ]
            )
        for name, why in self.skipped:
            rows.append(
                [name, "-", "-", "-", "-", "-", f"skipped ({why})", "-"]
                + (["-", "-"] if attributed else [])
            )
        return headers, rows

    def text(self) -> str:
        head = (
            f"build gate: candidate {self.candidate} vs baseline {self.baseline}, margin "
            f"{100 * self.margin:.0f} %; host {100 * self.host_busy_before:.0f} % busy "
            f"before start, load average {self.loadavg_before[0]:.2f}"
        )
        lines = [head, "", text_table(*self.table_rows())]
        lines += [f"output: {line}" for line in self.output_lines]
        lines += [f"note: {n}" for n in [*self.notes, *self.creep_notes]]
        lines.append("verdict: " + self.summary())
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
        lines += [f"- output: {line}" for line in self.output_lines]
        lines += [f"- note: {n}" for n in [*self.notes, *self.creep_notes]]
        lines.append("")
        lines.append("**" + self.summary() + "**")
        return "\n".join(lines)

    @property
    def output_lines(self) -> list[str]:
        """One line per configuration's correctness guard."""
        return [c.describe(self.baseline, self.candidate) for c in self.outputs]

    def to_json(self) -> dict[str, Any]:
        return {
            "outputs": [c.to_dict() for c in self.outputs],
            "baseline": self.baseline,
            "candidate": self.candidate,
            "margin": self.margin,
            "passed": self.passed,
            "exit_code": self.exit_code(),
            "host_busy_before": self.host_busy_before,
            "loadavg_before": list(self.loadavg_before),
            "notes": self.notes,
            "skipped": [{"configuration": c, "reason": why} for c, why in self.skipped],
            "rows": [
                {
                    "configuration": r.configuration,
                    "workload": r.workload.name,
                    "verdict": r.verdict.outcome,
                    "explain": r.verdict.explain(),
                    "ratio": r.verdict.ratio,
                    "low": r.verdict.low,
                    "high": r.verdict.high,
                    "rounds": r.verdict.rounds,
                    "mde": r.verdict.mde,
                    "method": r.verdict.method,
                    "seconds": r.seconds,
                    "vs_oldest": _verdict_json(r.oldest),
                    "vs_newest": _verdict_json(r.newest),
                    "attribution": r.attribution.to_dict() if r.attribution else None,
                    "where": r.attribution.where(r.verdict) if r.attribution else None,
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


def _attributed(r: GateRow) -> list[str]:
    a = r.attribution
    if a is None:
        return ["-", "-"]
    sb = a.server_bench
    return [f"{sb.ratio:.3f} [{sb.low:.3f}, {sb.high:.3f}]", a.where(r.verdict)]


def _versus(v: Verdict | None) -> str:
    if v is None:
        return "-"
    return (
        f"{v.change_pct:+.1f} % [{100 * (v.low - 1):+.1f}, {100 * (v.high - 1):+.1f}] {v.outcome}"
    )


def _verdict_json(v: Verdict | None) -> dict[str, Any] | None:
    if v is None:
        return None
    return {
        "against": v.label,
        "ratio": v.ratio,
        "low": v.low,
        "high": v.high,
        "verdict": v.outcome,
    }


def _history(
    session: PerfSession, profile: Profile, candidate: Measurement
) -> list[BaselineEntry]:
    """The baselines accepted on this host for the candidate's configuration and workload,
    oldest first (none when the file holds no numbers of this host)."""
    bf = session.baselines(profile)
    if bf is None:
        return []
    cpus = candidate.extra.get("probe_cpus")
    host, _ = host_for(
        bf,
        session.fingerprint(profile, label=CANDIDATE),
        str(cpus) if cpus else None,
        session.options.probe_tolerance,
    )
    if host is None:
        return []
    return accepted_history(bf, host.id, candidate.configuration, candidate.workload.name)


def _accepted(
    history: Sequence[BaselineEntry], candidate: Measurement, margin: float
) -> tuple[Verdict | None, Verdict | None]:
    """The candidate against the oldest and the newest of *history* (this host's accepted
    entries of its configuration and workload, oldest first), unpaired."""
    if not history or not candidate.values:
        return None, None

    def against(e: BaselineEntry) -> Verdict:
        label = f"{e.build} accepted {e.date}"
        return judge_change(candidate.values, e.operand, margin=margin, label=label)

    oldest = against(history[0])
    return oldest, oldest if len(history) == 1 else against(history[-1])


def run_gate(
    session: PerfSession,
    profile: Profile,
    baseline: BuildUnderTest,
    candidate: BuildUnderTest,
    *,
    configurations: Sequence[str] | None = None,
    workloads: Sequence[Workload] | None = None,
    first_look: int = 6,
    max_rounds: int = 200,
    budget: float | None = None,
    margin: float = 0.05,
    undecided_policy: str = "exit-3",
    allow_different: bool = False,
    check_output: bool = True,
    attribute_bench: bool = False,
    on_row: Callable[[GateRow], None] | None = None,
    on_look: Callable[[str, Verdict, float], None] | None = None,
) -> GateResult:
    """Measure every (configuration, workload) on both builds in paired rounds and judge the
    change sequentially: looks on the schedule of ``Plan(first_look, max_rounds)``, each row
    within *budget* seconds (default: the profile's ``budget``). Each row's candidate is set
    beside the oldest and newest baselines the profile's file holds of this host. Unless
    *check_output* is false, each configuration's correctness guard runs first: a different
    output fails the gate unless *allow_different*. With *attribute_bench*, each round also
    runs llama-bench of both builds (same model, flags, pinning), and each row says whether its
    change is in the server layer or in the compute."""
    gated = replace(
        profile, builds={BASELINE: baseline.target, CANDIDATE: candidate.target}, build=None
    )
    names = list(configurations or profile.configurations)
    loads = [w.require_rate("the gate") for w in workloads or profile.workloads]
    if not loads:
        raise ConfigError(
            f"profile {profile.name!r} ({profile.source}) lists no workloads: add "
            'workloads = ["pp512", "tg64"] to it, or pass -w pp512'
        )
    session.forget(gated.name, (BASELINE, CANDIDATE))  # an earlier gate's sides, other builds
    plan = Plan(first_look=first_look, max_rounds=max_rounds)
    rule = Rule("change", margin=margin)
    limit = session.options.busy_limit
    busy = busy_fraction(1.0)
    loadavg = os.getloadavg()
    notes = []
    if busy > limit:
        notes.append(
            f"the host was {100 * busy:.0f} % busy with other work before the gate: "
            "expect wide intervals and undecided verdicts"
        )
    rows: list[GateRow] = []
    outputs: list[OutputCheck] = []
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
        if check_output:
            outputs.append(_output_check(session, gated, sides))
        for w in loads:
            label = f"{name}.{w.name} {candidate.name} / {baseline.name}"
            a, b = Side(sides[0][1], w, BASELINE), Side(sides[1][1], w, CANDIDATE)
            beside, bench = (
                bench_in_rounds(session, gated, a, b) if attribute_bench else (None, ([], []))
            )
            got = measure_rounds(
                session,
                gated,
                rule,
                a,
                b,
                label=label,
                plan=plan,
                budget=budget,
                on_look=functools.partial(on_look, name) if on_look else None,
                after_round=beside,
            )
            ms = [got.a, got.b]
            verdict = undecided(got.verdict, busy_reason(ms, limit))
            paired = replace(got.b, samples=got.b.samples[got.first[1] :])
            oldest, newest = _accepted(_history(session, profile, paired), paired, margin)
            where = (
                attribute(got.rounds, bench, margin=margin, plan=plan, label=label)
                if beside
                else None
            )
            row = GateRow(name, w, got.a, got.b, verdict, got.seconds, oldest, newest, where)
            rows.append(row)
            if on_row:
                on_row(row)
        session.stop_servers()
    after = busy_fraction(0.5)
    if after > limit:
        notes.append(f"the host was {100 * after:.0f} % busy with other work right after the gate")
    # Both builds run the same configuration in the same rounds, so a host that speeds up or
    # slows down during the gate moves both sides alike and the per-round ratios stand; the
    # change is reported (and --accept, which stores absolute numbers, refuses).
    moved = session.hostwatch.host_moved(list(session.probes), force=True)  # the host at the end
    if moved:
        notes.append(
            f"host changed during the gate: {'; '.join(moved)}; both sides were measured in "
            "the same rounds, so the ratios stand, but these numbers are no baselines"
        )
    notes += [f"host probe: {p.describe()}" for p in session.probes.values()]
    notes += start_lines(session.load_times())
    return GateResult(
        baseline.name,
        candidate.name,
        margin,
        rows,
        busy,
        loadavg,
        notes,
        skipped,
        undecided_policy,
        outputs,
        allow_different,
    )


def _output_check(
    session: PerfSession, profile: Profile, sides: Sequence[tuple[str, Configuration]]
) -> OutputCheck:
    """The correctness guard of one configuration: the same greedy request to both sides."""
    got = []
    for side, config in sides:
        rec = session.server(profile, config, side)
        got.append(
            greedy_tokens(
                rec.server.url,
                vocab=session.vocab(rec),
                ban_tokens=session.banned_tokens(profile),
                timeout=session.options.request_timeout,
            )
        )
    return OutputCheck(sides[0][1].name, got[0], got[1])
