"""The defaults are named once (``defaults.py``) and everything that states one says the same:
the pytest options' help texts, the ``moeperf`` command's arguments and the README's table of
options. A setting's bad value is refused by the one check its option and argument share."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_moeperf import defaults
from pytest_moeperf.commands import make_parser
from pytest_moeperf.defaults import SettingError

README = Path(__file__).resolve().parents[2] / "README.md"

STATED = {
    "--moeperf-repetitions": defaults.REPETITIONS,
    "--moeperf-budget": defaults.BUDGET,
    "--moeperf-max-rounds": defaults.MAX_ROUNDS,
    "--moeperf-startup-timeout": defaults.STARTUP_TIMEOUT,
    "--moeperf-request-timeout": defaults.REQUEST_TIMEOUT,
    "--moeperf-probe-tolerance": defaults.PROBE_TOLERANCE,
    "--moeperf-reprobe-seconds": defaults.REPROBE_SECONDS,
    "--moeperf-busy-limit": defaults.BUSY_LIMIT,
    "--moeperf-numa-min-share": defaults.NUMA_MIN_SHARE,
}


def _readme_default(option: str) -> float:
    row = next(line for line in README.read_text().splitlines() if line.startswith(f"| `{option} "))
    m = re.search(r"\(default[^)0-9]*?([0-9]+(?:\.[0-9]+)?)", row)
    assert m, f"the README's row of {option} states no default: {row}"
    return float(m.group(1))


@pytest.mark.parametrize("option", sorted(STATED))
def test_the_readme_states_the_defaults_the_code_has(option):
    assert _readme_default(option) == STATED[option]


def test_the_commands_take_their_defaults_from_the_constants():
    parser = make_parser()
    gate = parser.parse_args(["gate", "--baseline", "1", "--candidate", "2"])
    assert gate.margin == defaults.MARGIN
    assert gate.startup_timeout == defaults.STARTUP_TIMEOUT
    assert gate.repetitions == defaults.FIRST_LOOK and gate.max_rounds == defaults.MAX_ROUNDS
    sweep = parser.parse_args(["sweep"])
    assert sweep.repetitions == defaults.REPETITIONS


@pytest.mark.parametrize(
    ("check", "value", "line"),
    [
        (lambda v: defaults.check_seconds(v, "--x", "a timeout", example=300), -5.0,
         "--x -5.0: give seconds > 0"),
        (lambda v: defaults.check_seconds(v, "--x", "a timeout", example=300), float("nan"),
         "--x nan: give seconds > 0"),
        (lambda v: defaults.check_budget(v, "--x"), 0.0, "--x 0.0: give the seconds a verdict"),
        (lambda v: defaults.check_margin(v, "--x"), 1.0, "--x 1.0: give the smallest change"),
        (lambda v: defaults.check_busy_limit(v, "--x"), 0.0, "--x 0.0 must be a share in (0, 1]"),
        (lambda v: defaults.check_numa_min_share(v, "--x"), 1.5, "must be a share in [0, 1]"),
        (lambda v: defaults.check_probe_tolerance(v, "--x"), 1.0, "must be a share in (0, 1)"),
        (lambda v: defaults.check_reprobe(v, "--x"), -1.0, "--x -1.0 must be >= 0"),
    ],
)  # fmt: skip
def test_each_check_refuses_with_one_line_naming_the_option(check, value, line):
    with pytest.raises(SettingError) as exc:
        check(value)
    assert line in str(exc.value) and "\n" not in str(exc.value)


def test_each_check_takes_its_edges():
    defaults.check_busy_limit(1.0, "--x")
    defaults.check_numa_min_share(0.0, "--x")
    defaults.check_reprobe(0.0, "--x")
    defaults.check_seconds(None, "--x", "a timeout", example=1)
    defaults.check_budget(None, "--x")


def test_every_environment_variable_the_project_reads_is_in_the_readmes_table():
    """A variable the package, its scripts, CI or the profiles read (``MOEPERF_*``) has a row
    of the README's table: ``MOEPERF_SMOKE_BUDGET`` and ``_NCMOE`` were read by
    ``scripts/gpu-smoke.sh`` and missing from it."""
    root = README.parent
    text = README.read_text()
    table = text[text.index("### Every environment variable") :]
    table = table[: table.index("\n## ")]
    listed = set(re.findall(r"`(MOEPERF_[A-Z_]*[A-Z])`", table))
    read = set()
    for folder in ("pytest_moeperf", "scripts", ".ci"):
        for path in (root / folder).rglob("*"):
            if (
                path.is_file()
                and path.suffix in (".py", ".sh", "")
                and "__pycache__" not in str(path)
            ):
                read |= set(re.findall(r"MOEPERF_[A-Z_]*[A-Z]", path.read_text(errors="replace")))
    read |= set(re.findall(r"\$(MOEPERF_[A-Z_]*[A-Z])", (root / "moeperf.toml").read_text()))
    read -= {"MOEPERF_EXAMPLE"}  # a constant's name in plugin/markers.py, not a variable
    assert sorted(read - listed) == []
