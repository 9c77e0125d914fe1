"""What a perf session judged, counted from its tests' reports: the verdicts each test decided
or left undecided (and why), and the tests that skipped (and why). A session that ran perf
tests and decided no verdict is not green: :data:`NOTHING_JUDGED` is its exit status, as
pytest's own exit 5 says "no tests ran".

Each test's report carries its verdicts as a user property (:func:`verdict_property`), so the
count is the same under xdist, where the reports reach the controller from the workers.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

NOTHING_JUDGED = 5
"""The exit status of a perf session that decided no verdict (pytest's "no tests ran")."""
PROPERTY = "moeperf_verdicts"
"""The user property a perf test's report carries: ``{"decided": n, "undecided": [why, ...],
"host": "gpu-01/3fa2c1d04b"}`` (the host the verdicts are of, as the store files it)."""
BUDGET_SPENT = "budget spent before the interval decided"
"""Why a verdict is undecided when no host condition made it so."""
_SHOWN = 3
_WIDTH = 90


def verdict_property(
    outcomes: Iterable[tuple[str, str | None]], host: str = ""
) -> tuple[str, dict[str, Any]]:
    """The user property of a test whose verdicts had these (outcome, reason) pairs, judged on
    *host*."""
    pairs = list(outcomes)
    undecided = [reason or BUDGET_SPENT for outcome, reason in pairs if outcome == "undecided"]
    return PROPERTY, {
        "decided": len(pairs) - len(undecided),
        "undecided": undecided,
        "host": host,
    }


def _kind(text: str) -> str:
    """A reason with its measured figures (shares, decimals) taken out, so that reasons of
    one kind count together: ``host 43 % busy with other work`` and ``host 61 % busy ...``
    are one; names and whole numbers (a NUMA node, a GPU count) stay."""
    text = text.strip().splitlines()[0] if text.strip() else "no reason given"
    text = re.sub(r"^Skipped: ", "", text)
    text = re.sub(r"[0-9]+(?:\.[0-9]+)? ?%", "N %", text)  # shares and measured figures
    text = re.sub(r"[0-9]+\.[0-9]+", "N", text)  # (names and counts stay)
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3] + "..."


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@dataclass(eq=False)  # hashable, as a registered plugin is
class Judged:
    """The count of a session's perf tests: verdicts decided, verdicts undecided by reason,
    tests skipped by reason, tests that judged nothing."""

    tests: int = 0
    decided: int = 0
    undecided: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    unjudged: int = 0
    """Perf tests that passed without judging a verdict (a measurement and a plain assert)."""
    failed: int = 0
    hosts: Counter[str] = field(default_factory=Counter)
    """Verdicts (decided or not) per host they are of: under xdist's remote gateways, one
    session's tests measure on several hosts."""
    exit_status: int | None = None
    """The exit status the count gave the session (:data:`NOTHING_JUDGED`), once it did."""

    def add(self, report: pytest.TestReport) -> None:
        """Count one report of a perf test: a test is counted at its call, or at a setup
        that did not pass (an error, a skip); its verdicts come with its call."""
        if "perf" not in report.keywords:
            return
        self.failed += report.failed
        if not (report.when == "call" or (report.when == "setup" and not report.passed)):
            return
        self.tests += 1
        verdicts: dict[str, Any] = next(
            (v for k, v in report.user_properties if k == PROPERTY and isinstance(v, dict)), {}
        )
        decided, undecided = int(verdicts.get("decided", 0)), list(verdicts.get("undecided", []))
        self.decided += decided
        self.undecided.update(_kind(r) for r in undecided)
        if verdicts.get("host") and (decided or undecided):
            self.hosts[str(verdicts["host"])] += decided + len(undecided)
        if report.skipped and not hasattr(report, "wasxfail") and not undecided:
            self.skipped[_kind(_skip_reason(report))] += 1  # skipped, not for a verdict
        elif report.passed and not (decided or undecided):
            self.unjudged += 1

    pytest_runtest_logreport = add  # registered as a plugin: every report, as it arrives

    @property
    def nothing_judged(self) -> bool:
        """Perf tests ran and none of them decided a verdict."""
        return self.tests > 0 and self.decided == 0

    def line(self) -> str:
        """One line: what was decided, undecided and skipped, with the commonest reasons."""
        n_undecided = sum(self.undecided.values())
        n_skipped = sum(self.skipped.values())
        parts = [f"{self.decided} verdict{'s' * (self.decided != 1)} decided"]
        if n_undecided:
            parts.append(f"{n_undecided} undecided ({_commonest(self.undecided)})")
        if n_skipped:
            parts.append(f"{n_skipped} test{'s' * (n_skipped != 1)} skipped "
                         f"({_commonest(self.skipped)})")  # fmt: skip
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.unjudged:
            parts.append(f"{self.unjudged} passed without a verdict")
        if self.hosts:
            parts.append("of " + ", ".join(f"{h} ({n})" for h, n in sorted(self.hosts.items())))
        return f"{self.tests} perf test{'s' * (self.tests != 1)}: " + "; ".join(parts)


def _commonest(reasons: Counter[str]) -> str:
    shown: Sequence[tuple[str, int]] = reasons.most_common(_SHOWN)
    text = ", ".join(f"{n} x {why}" for why, n in shown)
    rest = sum(reasons.values()) - sum(n for _, n in shown)
    return text + (f", {rest} more" if rest else "")
