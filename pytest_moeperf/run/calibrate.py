"""``moeperf calibrate``: the gate's own error rates on this host, measured. A/A gates (the same
build on both sides, each side its own servers) of chosen configurations, one after another;
per metric, what they said and the noise under it (:func:`noise_figure`).

No peer tool measures its own false-alarm rate on the host it runs on. Here every A/A gate is
the real gate (its paired rounds, process blocks, per-look levels and family), so a false
alarm counted here is one a user's gate would raise.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..config.profiles import Profile
from ..defaults import BUDGET, MARGIN
from ..measure.workload import Workload
from ..verdicts.calibration import NoiseFigure, noise_figure
from ..verdicts.gate import GateResult, GateRow
from .gate import BuildUnderTest, run_gate
from .session import PerfSession

GATES = 4
"""A/A gates ``moeperf calibrate`` runs by default."""


@dataclass
class Calibration:
    """Every A/A gate's rows, per metric (``mmap.pp512``), and the figures they make."""

    build: str
    budget: float
    margin: float
    rows: dict[str, list[GateRow]] = field(default_factory=dict)

    def figures(self, date: str | None = None) -> dict[str, NoiseFigure]:
        """Each metric's noise figure (dated *date*, default today)."""
        day = date or dt.date.today().isoformat()
        return {
            metric: noise_figure(
                [r.verdict.outcome for r in rows],
                [r.log_ratios for r in rows],
                [r.verdict.mde for r in rows if r.verdict.mde is not None],
                build=self.build,
                date=day,
                budget=self.budget,
                blocks=[r.blocks for r in rows],
                seconds=[r.seconds for r in rows],
            )
            for metric, rows in self.rows.items()
        }


def run_calibration(
    session: PerfSession,
    profile: Profile,
    build: BuildUnderTest,
    *,
    configurations: Sequence[str],
    workloads: Sequence[Workload] | None = None,
    gates: int = GATES,
    budget: float | None = None,
    margin: float = MARGIN,
    on_gate: Callable[[int, GateResult], None] | None = None,
) -> Calibration:
    """*gates* A/A gates of *build* against itself on *configurations* (and *workloads*,
    default the profile's), each as ``moeperf gate`` would run it; *on_gate* hears each as it
    ends."""
    if gates < 1:
        raise ValueError(f"gates {gates!r}: run at least one A/A gate")
    seconds = budget or session.budget(profile) or BUDGET  # an A/A figure names its budget
    calibration = Calibration(build.name, seconds, margin)
    # each A/A gate on its own blocks, not on the terms the earlier ones showed: the false
    # alarms it counts are those of a verdict on this host as it was (calibrated or not)
    history, session.options.history = session.options.history, False
    try:
        for i in range(gates):
            result = run_gate(
                session,
                profile,
                build,
                build,
                configurations=configurations,
                workloads=workloads,
                budget=seconds,
                margin=margin,
                check_output=False,  # the same binary: its output is its own
            )
            for row in result.rows:
                calibration.rows.setdefault(row.name, []).append(row)
            if on_gate:
                on_gate(i, result)
    finally:
        session.options.history = history
    return calibration
