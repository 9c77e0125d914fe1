"""Premises of the tests that need something of the host: a decided verdict, a side slowed
enough to show. A test checks what must hold on any machine first (a slowed side is never
"faster" or "unchanged"; an undecided verdict says so and exits 3), then skips naming the
premise the host could not give, instead of failing because the machine was busy."""

from __future__ import annotations

from typing import Any

import pytest

NEVER_FOR_A_SLOWDOWN = ("faster", "small-faster", "unchanged", "small-slower")
"""What a verdict of a side slowed to a fraction of its speed may never say."""


def slower_or_skip(verdict: dict[str, Any], what: str) -> None:
    """*verdict* (a gate row's, as its JSON holds it) of a side slowed far beyond the margin:
    never a pass of any kind; undecided skips the test naming the premise."""
    outcome = verdict["outcome"]
    assert outcome not in NEVER_FOR_A_SLOWDOWN, verdict
    if outcome == "undecided":
        pytest.skip(
            f"premise unmet: {what} ended undecided on this host (ratio {verdict['ratio']:.3f} "
            f"[{verdict['low']:.3f}, {verdict['high']:.3f}] after {verdict.get('rounds')} rounds"
            f"{'; ' + verdict['reason'] if verdict.get('reason') else ''}): nothing wrong was "
            "said, but the test's point needs a decided verdict"
        )
    assert outcome == "slower", verdict


def baseline_applies_or_skip(stdout: str) -> None:
    """An inner run's baseline check needs the baseline's host to be this one: its probe,
    taken at accept, within the run's probe tolerance of this run's. Another xdist worker or
    a build beside these cores can move the probe further between two runs; the check then
    rightly skips ("holds no numbers of this host"), and so does the test, naming why."""
    lines = stdout.splitlines()
    for line in lines:
        if "holds no numbers of this host" in line:
            pytest.skip(f"premise unmet: the probe moved between accept and check: {line.strip()}")
    # a check judged once on the samples in hand (its host has too few sessions stored) needs
    # samples that clear its limit: beside another worker's load the tiny model's swing by 10x
    # or more (cv 127 % seen), and a check that then says it cannot decide is right to
    busy = next((x for x in lines if "other processes use its CPUs" in x), None)
    if busy is not None and any("baseline check not measured further" in x for x in lines):
        pytest.skip(f"premise unmet: a quiet host for the samples in hand: {busy.strip()}")


def accepted_or_skip(stdout: str) -> None:
    """An inner ``--moeperf-accept`` run needs a host that stayed as its first probe found
    it; one whose probe moved beyond the tolerance by the end is rightly refused (nothing
    written), and the test skips naming that premise."""
    for line in stdout.splitlines():
        if "--moeperf-accept refused" in line and "host changed under the run" in line:
            pytest.skip(f"premise unmet: the host moved under the accepting run: {line.strip()}")
