"""The build gate's verdicts: one row per configuration and workload (candidate / baseline,
paired by round), the correctness guard of each configuration, and what they make of the
gate: pass, a regression, or undecided rows, with the exit status that says so."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ..measure.measurement import Measurement
from ..measure.output import OutputCheck
from ..measure.workload import Workload
from .attribution import Attribution
from .creep import ChainedChange, PairedChange
from .judge import Verdict
from .outcomes import GateOutcome, exit_status

UNDECIDED_POLICIES = ("exit-3", "pass", "fail")
"""What undecided rows make of a gate: exit status 3, a pass (0) or a failure (1)."""


@dataclass(frozen=True)
class GateRow:
    """The verdict of one configuration and workload."""

    configuration: str
    workload: Workload
    baseline: Measurement
    """The baseline build's measurement, every sample (one unpaired, to start its server)."""
    candidate: Measurement
    verdict: Verdict
    """candidate / baseline, paired by round."""
    seconds: float = 0.0
    """Wall time of the row's rounds."""
    oldest: ChainedChange | None = None
    """The candidate's change since the oldest build of the accepted chain that ends at the
    baseline's build on this host: the chain's paired links and this row, summed (``None``:
    the baseline's build was never accepted here)."""
    change: PairedChange | None = None
    """This row's paired change (what ``--accept`` stores as the candidate's link)."""
    attribution: Attribution | None = None
    """llama-bench in the same rounds: where the change is (``--attribute``)."""
    p_slower: float = 1.0
    """The sequential p-value against "no slowdown beyond the margin" (the family's Holm
    reads it)."""
    p_faster: float = 1.0
    """The same against "no speedup beyond the margin"."""
    family: str = ""
    """How the family of rows decided this row beyond its own interval (Holm), when it did."""
    log_ratios: tuple[float, ...] = ()
    """Each round's ``log(candidate / baseline)``, in round order."""
    blocks: tuple[int, ...] = ()
    """The process block of each round (empty: one process pair)."""

    @property
    def name(self) -> str:
        """``mmap.pp512``."""
        return f"{self.configuration}.{self.workload.name}"


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
    """What undecided rows make of the gate: one of :data:`UNDECIDED_POLICIES`."""
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
            f"{r.oldest.explain()}: the accepted chain adds up to a regression (--accept "
            "refuses it without --allow-creep)"
            for r in self.crept
            if r.oldest is not None
        ]

    @property
    def outcome(self) -> GateOutcome:
        """What the gate found: ``different-output`` (unless allowed), ``slower``, ``undecided``
        (undecided rows, or a configuration skipped: never measured), else ``passed``. The
        undecided policy does not change it; it changes the exit code."""
        if self.different and not self.allow_different:
            return "different-output"
        if self.slower:
            return "slower"
        if self.undecided or self.skipped or not self.rows:
            return "undecided"
        return "passed"

    @property
    def passed(self) -> bool:
        """What the exit code says: 0, and nothing else, is a pass."""
        return self.exit_code() == 0

    def exit_code(self, undecided: str | None = None) -> int:
        """0 pass, 1 a regression or different output, 3 undecided rows or a configuration
        not measured; *undecided* (default: the gate's :attr:`undecided_policy`) ``pass``
        makes undecided rows 0 and ``fail`` 1. A skipped configuration is never a pass: 3,
        or 1 under ``fail``."""
        policy = undecided or self.undecided_policy
        unmeasured = bool(self.skipped) or not self.rows
        return exit_status(self.outcome, "exit-3" if unmeasured and policy == "pass" else policy)

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
        parts = []
        if self.skipped:
            names = ", ".join(c for c, _ in self.skipped)
            parts.append(
                f"{len(self.skipped)} configuration(s) not measured ({names}; never a pass: "
                "gate the configurations both builds can run with -c)"
            )
        elif not self.rows:
            parts.append("no row measured")
        if self.undecided:
            parts.append(f"{len(self.undecided)} metric(s) undecided (budget spent)")
        if not parts:
            return "passed"
        what = "; ".join(parts)
        if self.passed:
            return f"passed ({what}, --undecided pass)"
        if self.exit_code() == 1:
            return f"FAIL: {what}"
        return f"UNDECIDED: {what}"

    @property
    def output_lines(self) -> list[str]:
        """One line per configuration's correctness guard."""
        return [c.describe(self.baseline, self.candidate) for c in self.outputs]


def versus(v: ChainedChange | None) -> str:
    """``-2.6 % [-4.9, -0.3] since b11400 (2 gates): small-slower``: the chained change since
    the oldest accepted build."""
    if v is None:
        return "-"
    gates = len(v.builds)
    return (
        f"{100 * (v.ratio - 1):+.1f} % [{100 * (v.low - 1):+.1f}, {100 * (v.high - 1):+.1f}] "
        f"since {v.since} ({gates} gate{'s' * (gates != 1)}): {v.outcome}"
    )


def holm(rows: Sequence[GateRow], alpha: float) -> list[GateRow]:
    """The gate's rows with the family's false-alarm rate held at *alpha*: each row's own
    interval is judged at alpha / k over its looks (Bonferroni), and Holm's step-down over
    the rows' sequential p-values (each direction on its own, the j-th smallest of k tested at
    alpha / (k - j + 1)) says which rows the family would reject. Holm never decides a row
    whose own interval is undecided: such a row stays undecided, with a note of how it
    leans; a row its interval decided is always among those Holm rejects (the same error)."""
    out = list(rows)
    k = len(out)
    for way in ("slower", "faster"):
        ps = [r.p_slower if way == "slower" else r.p_faster for r in out]
        for j, i in enumerate(sorted(range(k), key=lambda i: ps[i])):
            row, p = out[i], ps[i]
            level = alpha / (k - j)
            if p > level:
                break
            if row.verdict.outcome == "undecided" and row.verdict.reason is None:
                note = (
                    f"leans {way}: Holm across {k} rows would reject at p {p:.4f} <= "
                    f"{level:.4f}, but its own interval holds a decision point: undecided"
                )
                out[i] = replace(row, family=note)
    return out
