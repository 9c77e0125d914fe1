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

from ..defaults import FAMILY_ALPHA, FIRST_LOOK, MARGIN, MAX_ROUNDS, MIN_REL_SPREAD
from ..errors import ConfigError, Unavailable
from ..host.machine import busy_fraction
from ..measure.dependence import DEFAULT_DEPENDENCE
from ..measure.measurement import Measurement
from ..measure.output import OutputCheck, greedy_tokens
from ..measure.stats import paired_interval
from ..measure.workload import Workload
from ..report.tables import start_lines
from ..store.accepted import accepted_chain, host_for, repeated_links
from ..verdicts.attribution import attribute
from ..verdicts.creep import ChainedChange, PairedChange, judge_chain, link_spread
from ..verdicts.gate import GateResult, GateRow, holm, row_p_values
from ..verdicts.judge import Verdict
from ..verdicts.sequential import Plan, Rule
from .crosscheck import bench_in_rounds
from .live import LiveSource
from .profiles import Configuration, HostLacks, Pinning, Profile, host_owns
from .rounds import Decided, decide_pair
from .session import PerfSession
from .source import Side

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


def _side(config: Configuration, side: BuildUnderTest) -> Configuration:
    if side.cpus is None:
        return config
    return replace(config, pinning=Pinning(cpus=side.cpus, numa=config.pinning.numa))


def _chained(
    session: PerfSession,
    live: LiveSource,
    profile: Profile,
    candidate: Measurement,
    baseline: str,
    change: PairedChange,
    margin: float,
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
        live.fingerprint(profile, label=CANDIDATE),
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
    """The row's paired change: the trimmed mean of its rounds' log-ratios and its standard
    error with the rounds' dependence (process term, drift), as its verdict's interval has it."""
    a, b = got.rounds
    dependence = got.plan.dependence if got.plan else DEFAULT_DEPENDENCE
    iv = paired_interval(
        a, b, blocks=got.blocks or None, min_rel_spread=MIN_REL_SPREAD, dependence=dependence
    )
    return PairedChange(against, math.log(iv.ratio), iv.se, iv.rounds)


def run_gate(
    session: PerfSession,
    live: LiveSource,
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
    live.forget(gated.name, (BASELINE, CANDIDATE))  # an earlier gate's sides, other builds
    skipped: list[tuple[str, str]] = []
    for name in list(names):  # what this host or a build lacks, before any server starts
        try:
            live.launcher.check(gated, [gated.configuration(name)], (BASELINE, CANDIDATE))
        except HostLacks as exc:
            owner = host_owns(profile, live.host) if exc.key else None
            if owner is not None:
                raise ConfigError(f"{exc} ({owner}: fix {exc.key} or the host)") from None
            skipped.append((name, _named(str(exc), baseline, candidate)))
            names.remove(name)
    family = max(len(names), 1) * len(loads)
    # each row at the family's share (Bonferroni); Holm at the end only notes rows that lean
    plan = Plan(
        first_look=first_look,
        max_rounds=max_rounds,
        alpha=FAMILY_ALPHA / family,
        dependence=session.dependence(profile),
    )
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
    row_budget = budget or session.budget(profile)
    rows: list[GateRow] = []
    outputs: list[OutputCheck] = []
    for name in names:
        config = profile.configuration(name)
        sides = ((BASELINE, _side(config, baseline)), (CANDIDATE, _side(config, candidate)))
        try:  # a configuration a build (or this host) cannot run is a skipped row
            for side, cfg in sides:
                live.server(gated, cfg, side)
        except Unavailable as exc:
            skipped.append((name, _named(str(exc), baseline, candidate)))
            live.stop_servers()
            continue
        if check_output:
            outputs.append(_output_check(live, gated, sides))
        for w in loads:
            label = f"{name}.{w.name} {candidate.name} / {baseline.name}"
            a, b = Side(sides[0][1], w, BASELINE), Side(sides[1][1], w, CANDIDATE)
            beside, bench = (
                bench_in_rounds(live, gated, a, b) if attribute_bench else (None, ([], []))
            )
            # both builds run the same configuration in the same rounds, so a host that speeds
            # up or slows down moves both sides alike and the per-round ratios stand
            row_plan = replace(plan, noise=session.noise(profile, [f"{name}.{w.name}"]))
            got = decide_pair(
                live,
                gated,
                rule,
                a,
                b,
                label=label,
                plan=row_plan,
                budget=row_budget,
                busy_limit=limit,
                host_decides=False,
                on_look=functools.partial(on_look, name) if on_look else None,
                after_round=beside,
            )
            if got.resolution:  # said before the row measured; kept with the gate
                notes.append(got.resolution)
            change = _paired_change(got, baseline.name) if len(got.rounds[0]) >= 2 else None
            oldest = (
                _chained(session, live, profile, got.b, baseline.name, change, margin)
                if change
                else None
            )
            where = (
                attribute(got.rounds, bench, margin=margin, plan=plan, label=label)
                if beside
                else None
            )
            d = [math.log(y / x) for x, y in zip(*got.rounds, strict=True)]
            p_slower, p_faster = row_p_values(d, got.blocks, got.plan or plan, margin)
            row = GateRow(
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
            rows.append(row)
            if on_row:
                on_row(row)
        live.stop_servers()
    rows = holm(rows, FAMILY_ALPHA)
    notes.append(
        f"family: {family} row(s), each judged at {100 * FAMILY_ALPHA / family:.2g} % over its "
        f"looks, so the chance of any false slower or faster row is at most "
        f"{100 * FAMILY_ALPHA:.0f} %; Holm's step-down only notes rows that lean (it never "
        "decides a row its own interval left undecided)"
    )
    notes += [
        f"creep: every link of an accepted chain carries {basis}"
        for basis in sorted({r.oldest.link_basis for r in rows if r.oldest})
    ]
    calibrated = plan.dependence != DEFAULT_DEPENDENCE
    notes.append(
        f"dependence: every row's error carries {plan.dependence.describe()} "
        + (
            "(this host's, from moeperf calibrate)"
            if calibrated
            else "(the defaults: moeperf calibrate measures this host's)"
        )
    )
    after = busy_fraction(0.5)
    if after > limit:
        notes.append(f"the host was {100 * after:.0f} % busy with other work right after the gate")
    # the host at the end: a change is reported (and --accept, which stores absolute numbers,
    # refuses), but the ratios stand
    moved = live.host_moved([], force=True)
    if moved:
        notes.append(
            f"host changed during the gate: {'; '.join(moved)}; both sides were measured in "
            "the same rounds, so the ratios stand, but these numbers are no baselines"
        )
    notes += [f"host probe: {p.describe()}" for p in live.probes.values()]
    notes += start_lines(live.load_times(), live.setup_seconds)
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


def _named(why: str, baseline: BuildUnderTest, candidate: BuildUnderTest) -> str:
    """*why* with the gate's sides (``build baseline``) named by their builds."""
    for side, build in ((BASELINE, baseline), (CANDIDATE, candidate)):
        why = why.replace(f"build {side} ", f"build {build.name} ")
    return why


def _output_check(
    live: LiveSource, profile: Profile, sides: Sequence[tuple[str, Configuration]]
) -> OutputCheck:
    """The correctness guard of one configuration: the same greedy request to both sides."""
    got = []
    for side, config in sides:
        rec = live.server(profile, config, side)
        got.append(
            greedy_tokens(
                rec.server.url,
                vocab=live.vocab(rec),
                ban_tokens=live.banned_tokens(profile),
                timeout=live.options.request_timeout,
            )
        )
    return OutputCheck(sides[0][1].name, got[0], got[1])
