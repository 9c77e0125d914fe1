"""One vocabulary of outcomes and one table of exit statuses, which every command reads and
docs/guide/output.md shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

import pytest

from pytest_moeperf.verdicts.outcomes import (
    EXIT_STATUS,
    UPGRADE_EXIT_STATUS,
    BisectOutcome,
    ChangeOutcome,
    ChangePointOutcome,
    CheckOutcome,
    ClaimOutcome,
    GateOutcome,
    RaceOutcome,
    StepOutcome,
    UpgradeOutcome,
    exit_status,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "guide" / "output.md"
KINDS = (
    ClaimOutcome,
    ChangeOutcome,
    CheckOutcome,
    GateOutcome,
    StepOutcome,
    BisectOutcome,
    RaceOutcome,
    ChangePointOutcome,
)
OUTCOMES = tuple(dict.fromkeys(word for kind in KINDS for word in get_args(kind)))
"""Every outcome word of every kind."""


def documented(header: str = "| outcome | of | exit status |") -> dict[str, int]:
    """The outcome table of docs/guide/output.md under *header*: its ``| `word` | of | status
    |`` rows."""
    text = DOC.read_text()
    table = text[text.index(header) :].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([a-z-]+)` \| [^|]+ \| (\d) \|$", table, flags=re.M)
    return {word: int(status) for word, status in rows}


def test_the_documented_upgrade_table_is_the_one_an_upgrade_check_exits_by():
    assert documented("| upgrade outcome | when | exit status |") == UPGRADE_EXIT_STATUS
    assert set(UPGRADE_EXIT_STATUS) == set(get_args(UpgradeOutcome))


def test_the_documented_table_is_the_table_the_commands_exit_by():
    assert documented() == EXIT_STATUS


def test_every_outcome_word_that_ends_a_command_has_an_exit_status():
    inner = {"faster", "unchanged", "small-faster", "small-slower", "good", "bad"}  # rows, steps
    assert set(OUTCOMES) - inner == set(EXIT_STATUS)
    assert "pass" not in OUTCOMES and "fail" not in OUTCOMES  # passed and failed, everywhere


@pytest.mark.parametrize(
    "outcome, policy, status",
    [("undecided", "exit-3", 3), ("undecided", "pass", 0), ("undecided", "fail", 1),
     ("slower", "pass", 1), ("passed", "fail", 0), ("tie", "exit-3", 3)],
)  # fmt: skip
def test_a_gates_undecided_policy_changes_only_undecided(outcome, policy, status):
    assert exit_status(outcome, policy) == status
