"""The build gate: the same configurations on a baseline build and a candidate build,
measured in paired rounds (A B, B A, A B, ...), with one verdict per configuration and workload.

Each row goes through the one decision loop (:func:`pytest_moeperf.run.rounds.decide_pair`) on
the per-round ratios candidate / baseline: rounds are added until the interval decides
(faster / slower beyond the margin, small-faster / small-slower within it, unchanged) or the
row's time budget is spent (undecided, with the smallest change it could have seen: its
MDE). Each row also says the candidate's change since the oldest build of the accepted chain
on this host (each accepted gate's paired change, summed with this row's): a chain of small
accepted slowdowns shows, and no number of another day is compared with one of today.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..config.profiles import Configuration, HostLacks, Pinning, Profile, host_owns
from ..defaults import FAMILY_ALPHA, FIRST_LOOK, MARGIN, MAX_ROUNDS, MIN_REL_SPREAD
from ..errors import ConfigError, Unavailable
from ..measure.measurement import Measurement
from ..measure.output import OutputCheck
from ..measure.stats import paired_interval
from ..measure.workload import Workload
from ..report.tables import start_lines
from ..store.accepted import accepted_chain, host_for, repeated_links
from ..verdicts.attribution import attribute
from ..verdicts.creep import ChainedChange, PairedChange, judge_chain, link_spread
from ..verdicts.gate import GateResult, GateRow, holm
from ..verdicts.judge import Verdict
from ..verdicts.sequential import Plan, Rule
from .crosscheck import bench_in_rounds
from .rounds import Decided, decide_pair
from .session import PerfSession
from .source import Host, Side, Stage, block_length

BASELINE, CANDIDATE = "baseline", "candidate"


class StoredStage:
    """The stage of a stored gate judged again (``moeperf gate --replay``): no server starts,
    every row's rounds come from the gate's run record, a configuration the gate skipped is
    skipped again for its stored reason, and the host's load is the one the gate measured
    before its first row (the file keeps no other)."""

    def __init__(
        self,
        busy: float,
        loadavg: tuple[float, float, float],
        skipped: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._load: list[tuple[float, tuple[float, float, float]]] = [(busy, loadavg)]
        self._skipped = dict(skipped)

    def check(
        self, profile: Profile, configurations: Sequence[Configuration], labels: Sequence[str]
    ) -> None:
        for c in configurations:
            if c.name in self._skipped:
                raise HostLacks(self._skipped[c.name])

    def forget(self, profile: str, labels: Sequence[str]) -> None:
        pass

    def start(self, profile: Profile, configuration: Configuration, label: str | None) -> None:
        pass

    def stop_servers(self, keep: Callable[[tuple[str, str, str]], bool] | None = None) -> None:
        pass

    def greedy(
        self, profile: Profile, configuration: Configuration, label: str | None
    ) -> tuple[int, ...]:
        raise ConfigError("a stored gate keeps no output to check again: replay it without")

    def host_load(self, seconds: float) -> tuple[float, tuple[float, float, float]]:
        return self._load.pop() if self._load else (0.0, (0.0, 0.0, 0.0))

    def bench_sample(
        self, profile: Profile, configuration: Configuration, workload: Workload,
        label: str | None = None,
    ) -> float:  # fmt: skip
        raise ConfigError("a stored gate keeps no llama-bench rounds: replay it without")


@dataclass(frozen=True)
class BuildUnderTest:
    """One side of the gate: a build number (built by the embedded builder) or a binary."""

    target: int | str
    """Build number, or path to a llama-server binary."""
    cpus: str | None = None
    """Pin this side's servers to these CPUs instead of the configuration's pinning."""
    label: str | None = None
    """What the side is called: a binary's build as its ``--version`` reads (``b11800``), or
    the name its user gave it (``pr-29887``); ``None``: ``b<number>`` of a build number."""

    @property
    def name(self) -> str:
        target = self.target
        base = self.label or (f"b{target}" if isinstance(target, int) else os.path.basename(target))
        return f"{base} (cpus {self.cpus})" if self.cpus else base


def _side(config: Configuration, side: BuildUnderTest) -> Configuration:
    if side.cpus is None:
        return config
    return replace(config, pinning=Pinning(cpus=side.cpus, numa=config.pinning.numa))


def _chained(
    session: PerfSession,
    profile: Profile,
    candidate: Measurement,
    baseline: str,
    change: PairedChange,
    margin: float,
    label: str = CANDIDATE,
) -> ChainedChange | None:
    """The candidate's change since the oldest build of the accepted chain that ends at the
    *baseline* build on this host: the chain's paired links plus this row's *change*, never
    the candidate against numbers of another day (``None`` when the file holds no numbers of
    this host, or this host never accepted *baseline*). Each link carries the between-session
    term this host's repeated acceptances measure (:func:`link_spread`)."""
    bf = session.baselines(profile)
    if bf is None:
        return None
    host, _ = host_for(
        bf,
        session.source.fingerprint(profile, label=label),
        candidate.conditions.probe_cpus,
        session.options.probe_tolerance,
    )
    if host is None:
        return None
    links = accepted_chain(bf, host.id, candidate.configuration, candidate.workload.name, baseline)
    if links is None:
        return None
    label = f"{candidate.configuration}.{candidate.workload.name}"
    spread = link_spread(repeated_links(bf, host.id))
    return judge_chain(links, change, margin=margin, label=label, link_term=spread)


def _paired_change(got: Decided, against: str) -> PairedChange:
    """The row's paired change: the trimmed mean of the rounds its last look judged and its
    standard error and degrees of freedom with the rounds' dependence (process blocks, the
    host's calibration, drift), as its verdict's interval has them."""
    a, b = got.values
    plan = got.plan or Plan(block=block_length(got.blocks))
    n = max(2, plan.judged(len(a)))
    iv = paired_interval(
        a[:n],
        b[:n],
        blocks=got.blocks[:n] or None,
        min_rel_spread=MIN_REL_SPREAD,
        dependence=plan.dependence,
    )
    return PairedChange(against, math.log(iv.ratio), iv.se, iv.rounds, iv.df)


def run_gate(
    session: PerfSession,
    profile: Profile,
    baseline: BuildUnderTest,
    candidate: BuildUnderTest,
    *,
    configurations: Sequence[str] | None = None,
    workloads: Sequence[Workload] | None = None,
    first_look: int = FIRST_LOOK,
    max_rounds: int = MAX_ROUNDS,
    budget: float | None = None,
    margin: float = MARGIN,
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
    beside the chained change since the oldest accepted build on this host. Unless
    *check_output* is false, each configuration's correctness guard runs first: a different
    output fails the gate unless *allow_different*. With *attribute_bench*, each round also
    runs llama-bench of both builds (same model, flags, pinning), and each row says whether its
    change is in the server layer or in the compute. The host beside the rounds is the
    session's stage (its servers, or a stored gate's)."""
    stage = session.stage_for("a gate")
    gated = replace(
        profile, builds={BASELINE: baseline.target, CANDIDATE: candidate.target}, build=None
    )
    loads = [w.require_rate("the gate") for w in workloads or profile.workloads]
    if not loads:
        raise ConfigError(
            f"profile {profile.name!r} ({profile.source}) lists no workloads: add "
            'workloads = ["pp512", "tg64"] to it, or pass -w pp512'
        )
    stage.forget(gated.name, (BASELINE, CANDIDATE))  # an earlier gate's sides, other builds
    names, skipped = _runnable(
        session.source, stage, profile, gated, configurations, (baseline, candidate)
    )
    family = max(len(names), 1) * len(loads)
    # each row at the family's share (Bonferroni); Holm at the end only notes rows that lean
    plan = Plan(
        first_look=first_look,
        max_rounds=max_rounds,
        alpha=FAMILY_ALPHA / family,
        dependence=session.dependence(profile),
    )
    gating = _Gating(
        session,
        stage,
        profile,
        gated,
        (baseline, candidate),
        Rule("change", margin=margin),
        plan,
        budget or session.budget(profile),
        attribute_bench,
        on_look,
    )
    busy, loadavg = stage.host_load(1.0)
    notes = []
    if busy > session.options.busy_limit:
        notes.append(
            f"the host was {100 * busy:.0f} % busy with other work before the gate: "
            "expect wide intervals and undecided verdicts"
        )
    rows: list[GateRow] = []
    outputs: list[OutputCheck] = []
    for name in names:
        config = profile.configuration(name)
        sides = ((BASELINE, _side(config, baseline)), (CANDIDATE, _side(config, candidate)))
        try:  # a configuration a build (or this host) cannot run is a skipped row
            for side, cfg in sides:
                stage.start(gated, cfg, side)
        except Unavailable as exc:
            skipped.append((name, _named(str(exc), baseline, candidate)))
            stage.stop_servers()
            continue
        if check_output:
            guard = [stage.greedy(gated, cfg, side) for side, cfg in sides]
            outputs.append(OutputCheck(sides[0][1].name, guard[0], guard[1]))
        for w in loads:
            row = gating.row(name, sides, w, notes)
            rows.append(row)
            if on_row:
                on_row(row)
        stage.stop_servers()
    rows = holm(rows, FAMILY_ALPHA)
    notes += _closing_notes(session, stage, rows, family, plan)
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


def upgrade_row(
    session: PerfSession,
    profile: Profile,
    name: str,
    w: Workload,
    candidate: str,
    *,
    family: int,
    check_output: bool,
    margin: float = MARGIN,
) -> tuple[GateRow, OutputCheck | None, list[str]]:
    """One gate row of an upgrade check: configuration *name*'s workload *w* on the candidate
    (label *candidate* of *profile*'s ``builds``) against the profile's own, pinned build, in
    paired rounds through the one decision loop, on the servers the suite's tests already run
    (started where they are not), each row at the family's share of the error rate (Bonferroni
    over the check's *family* rows). With *check_output*, both builds' greedy output first.
    Returns the row, the output check and what the row said before it measured; a
    configuration a build or the host cannot run is :class:`Unavailable`."""
    stage = session.stage_for("an upgrade row")
    pinned = profile.build_label or "pinned"
    config = profile.configuration(name)
    sides = ((BASELINE, config), (CANDIDATE, config))
    labels: tuple[str | None, str] = (None, candidate)
    for label in labels:
        stage.start(profile, config, label)
    output = None
    if check_output:
        guard = [stage.greedy(profile, config, label) for label in labels]
        output = OutputCheck(name, guard[0], guard[1])
    plan = Plan(
        first_look=FIRST_LOOK,
        max_rounds=max(FIRST_LOOK, session.options.max_rounds),
        alpha=FAMILY_ALPHA / max(family, 1),
        dependence=session.dependence(profile),
    )
    gating = _Gating(
        session,
        stage,
        profile,
        profile,
        (BuildUnderTest(pinned, label=pinned), BuildUnderTest(candidate, label=candidate)),
        Rule("change", margin=margin),
        plan,
        session.budget(profile),
        False,
        None,
        labels,
    )
    notes: list[str] = []
    return gating.row(name, sides, w, notes), output, notes


def _runnable(
    source: Host,
    stage: Stage,
    profile: Profile,
    gated: Profile,
    configurations: Sequence[str] | None,
    builds: tuple[BuildUnderTest, BuildUnderTest],
) -> tuple[list[str], list[tuple[str, str]]]:
    """The configurations the gate can run, and those it skips with why: what this host or a
    build lacks, checked before any server starts (an error on the profile's own host)."""
    names: list[str] = []
    skipped: list[tuple[str, str]] = []
    for name in configurations or profile.configurations:
        try:
            stage.check(gated, [gated.configuration(name)], (BASELINE, CANDIDATE))
        except HostLacks as exc:
            owner = host_owns(profile, source.host) if exc.key else None
            if owner is not None:
                raise ConfigError(f"{exc} ({owner}: fix {exc.key} or the host)") from None
            skipped.append((name, _named(str(exc), *builds)))
            continue
        names.append(name)
    return names, skipped


@dataclass(frozen=True)
class _Gating:
    """What every row of one gate is measured and judged with."""

    session: PerfSession
    stage: Stage
    profile: Profile
    gated: Profile
    """The profile with the gate's two builds as its ``baseline`` and ``candidate``."""
    builds: tuple[BuildUnderTest, BuildUnderTest]
    rule: Rule
    plan: Plan
    budget: float | None
    attribute_bench: bool
    on_look: Callable[[str, Verdict, float], None] | None
    labels: tuple[str | None, str] = (BASELINE, CANDIDATE)
    """The build labels the two sides' servers run under in :attr:`gated` (``None``: its own
    build): the gate's ``baseline`` and ``candidate``; an upgrade check's pinned build and
    candidate, whose servers the suite's tests share."""

    def row(
        self,
        name: str,
        sides: tuple[tuple[str, Configuration], tuple[str, Configuration]],
        w: Workload,
        notes: list[str],
    ) -> GateRow:
        """Configuration *name*'s row of workload *w*: its paired rounds through the decision
        loop, its chained change, where the change lies (with ``--attribute``), its Holm
        p-values. What the row said before measuring goes to *notes*."""
        baseline, candidate = self.builds
        session, margin = self.session, self.rule.margin
        label = f"{name}.{w.name} {candidate.name} / {baseline.name}"
        a, b = Side(sides[0][1], w, self.labels[0]), Side(sides[1][1], w, self.labels[1])
        beside, bench = (
            bench_in_rounds(self.stage, self.gated, a, b)
            if self.attribute_bench
            else (None, ([], []))
        )
        # both builds run the same configuration in the same rounds, so a host that speeds
        # up or slows down moves both sides alike and the per-round ratios stand
        row_plan = replace(self.plan, noise=session.noise(self.profile, [f"{name}.{w.name}"]))
        got = decide_pair(
            session.source,
            self.gated,
            self.rule,
            a,
            b,
            label=label,
            plan=row_plan,
            budget=self.budget,
            busy_limit=session.options.busy_limit,
            host_decides=False,
            on_look=functools.partial(self.on_look, name) if self.on_look else None,
            after_round=beside,
        )
        if got.resolution:  # said before the row measured; kept with the gate
            notes.append(got.resolution)
        session.journal.judged(got.record(f"gate {name}.{w.name}", label))
        change = _paired_change(got, baseline.name) if len(got.values[0]) >= 2 else None
        oldest = None
        if change:
            oldest = _chained(
                session, self.profile, got.b, baseline.name, change, margin, self.labels[1]
            )
        judged_by = got.plan or self.plan  # the plan the row's rounds were judged by
        where = None
        if beside:
            where = attribute(
                got.values, bench, margin=margin, plan=judged_by, label=label, blocks=got.blocks
            )
        d = [math.log(y / x) for x, y in zip(*got.values, strict=True)]
        p_slower, p_faster = judged_by.margin_p(d, margin, got.blocks)
        return GateRow(
            name,
            w,
            got.a,
            got.b,
            got.verdict,
            got.seconds,
            oldest,
            change,
            where,
            p_slower=p_slower,
            p_faster=p_faster,
            log_ratios=tuple(d),
            blocks=tuple(got.blocks),
        )


def _closing_notes(
    session: PerfSession, stage: Stage, rows: Sequence[GateRow], family: int, plan: Plan
) -> list[str]:
    """What the gate says under its rows: the family's error rate, the creep and dependence
    terms its errors carry, a busy or moved host at the end, its probes and server starts."""
    source = session.source
    notes = [
        f"family: {family} row(s), each judged at {100 * FAMILY_ALPHA / family:.2g} % over its "
        f"looks, so the chance of any false slower or faster row is at most "
        f"{100 * FAMILY_ALPHA:.0f} %; Holm's step-down only notes rows that lean (it never "
        "decides a row its own interval left undecided)"
    ]
    notes += [
        f"creep: every link of an accepted chain carries {basis}"
        for basis in sorted({r.oldest.link_basis for r in rows if r.oldest})
    ]
    whose = (
        "(this host's, from moeperf calibrate)"
        if plan.dependence.calibrated
        else "(not calibrated: rows judge whole process blocks from the third on; "
        "moeperf calibrate measures this host's term, which lets rows decide sooner)"
    )
    notes.append(f"dependence: every row's error carries {plan.dependence.describe()} {whose}")
    after, _ = stage.host_load(0.5)
    if after > session.options.busy_limit:
        notes.append(f"the host was {100 * after:.0f} % busy with other work right after the gate")
    # the host at the end: a change is reported (and --accept, which stores absolute numbers,
    # refuses), but the ratios stand
    moved = source.host_moved([], force=True)
    if moved:
        notes.append(
            f"host changed during the gate: {'; '.join(moved)}; both sides were measured in "
            "the same rounds, so the ratios stand, but these numbers are no baselines"
        )
    notes += [f"host probe: {p.describe()}" for p in source.probes.values()]
    notes += start_lines(source.journal.load_times(), source.journal.setup_seconds)
    return notes


def _named(why: str, baseline: BuildUnderTest, candidate: BuildUnderTest) -> str:
    """*why* with the gate's sides (``build baseline``) named by their builds."""
    for side, build in ((BASELINE, baseline), (CANDIDATE, candidate)):
        why = why.replace(f"build {side} ", f"build {build.name} ")
    return why
