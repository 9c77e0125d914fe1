"""Every kind of result's outcome, in one vocabulary (the same word for the same meaning
wherever it appears), and the one table from an outcome to the exit status of the command that
reports it (``moeperf gate``, ``bisect``, ``tune``, ``logstats``, ``changes``).
docs/guide/output.md shows the table; ``tests/unit/test_outcomes.py`` holds the two equal.

``pytest -m perf`` keeps pytest's own statuses (a failed test is 1); how a verdict becomes a
test outcome is the plugin's (docs/guide/output.md)."""

from __future__ import annotations

from typing import Literal, get_args

ClaimOutcome = Literal["holds", "fails", "undecided"]
"""A claim's, a dead end's or a traffic reference's verdict."""

ChangeOutcome = Literal[
    "faster", "slower", "small-faster", "small-slower", "unchanged", "undecided"
]
"""A change's verdict (a gate's row): small-faster and small-slower lie within the margin."""

Decision = ClaimOutcome | ChangeOutcome
"""What the decision loop reads off an interval, by its rule's kind."""

CheckOutcome = Literal["passed", "failed", "undecided"]
"""A baseline check: this run's figure against a stored baseline."""

GateOutcome = Literal["passed", "slower", "different-output", "undecided"]
"""A gate of a candidate build against a baseline build (its rows are :data:`Decision`\\ s of
changes), and a comparison of two servers' logs."""

StepOutcome = Literal["good", "bad", "undecided"]
"""A bisect step: the build at it is as fast as the good end (good) or as slow as the bad."""

BisectOutcome = Literal["found", "no-slowdown", "undecided"]
"""A bisect: the first bad build found, no slowdown between the ends, or undecided."""

RaceOutcome = Literal["winner", "tie", "unconfirmed", "none"]
"""A knob's race in ``moeperf tune``: a confirmed winner, a tie, a leader its confirmation did
not hold, or nothing measured."""

ChangePointOutcome = Literal["alarm", "quiet"]
"""``moeperf changes``: a change point after the last accepted baseline (alarm), or none."""

UpgradeOutcome = Literal["holds", "worse", "undecided", "nothing-judged"]
"""An upgrade check (``pytest -m perf --moeperf-candidate N``): every decision of the suite
holds on the candidate, one changed for the worse, one is undecided on it, or it judged none."""

EXIT_STATUS: dict[str, int] = {
    "passed": 0,
    "holds": 0,
    "found": 0,
    "winner": 0,
    "quiet": 0,
    "fails": 1,
    "failed": 1,
    "slower": 1,
    "different-output": 1,
    "no-slowdown": 1,
    "alarm": 1,
    "undecided": 3,
    "tie": 3,
    "unconfirmed": 3,
    "none": 3,
}
"""A command's exit status by the outcome it reports: 0 what was asked holds, 1 it does not
(a regression, a failed check, no slowdown where one was to be found), 3 the evidence could not
decide (2 is a usage or input error, before any outcome)."""


UPGRADE_EXIT_STATUS: dict[str, int] = {
    "holds": 0,
    "worse": 1,
    "nothing-judged": 5,
    "undecided": 6,
}
"""The exit status of a pytest session that checked an upgrade, by its outcome: pytest's own
statuses where they mean the same (0 green, 1 a failure, 5 nothing to judge, as the plugin's
nothing-judged), and 6, a status pytest never gives, for undecided (3 is pytest's internal
error, 4 its usage error)."""


DECISIONS: tuple[str, ...] = tuple(dict.fromkeys(get_args(ClaimOutcome) + get_args(ChangeOutcome)))
"""Every word of a :data:`Decision`, each once."""


def exit_status(outcome: str, undecided: str = "exit-3") -> int:
    """The exit status of a command whose result is *outcome*; *undecided* (a gate's
    ``--undecided``: ``exit-3``, ``pass`` or ``fail``) says what an undecided one exits."""
    status = EXIT_STATUS[outcome]
    if status == 3 and undecided in ("pass", "fail"):
        return 0 if undecided == "pass" else 1
    return status
