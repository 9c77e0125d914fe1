"""The defaults are named once (``defaults.py``) and everything that states one says the same:
the pytest options' help texts, the ``moeperf`` command's arguments and the reference's table
of options (``docs/reference/options.md``); every option, profile key and environment variable
the code knows has its row there. A setting's bad value is refused by the one check its option
and argument share."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_moeperf import defaults
from pytest_moeperf.commands import make_parser
from pytest_moeperf.defaults import SettingError
from pytest_moeperf.plugin import hooks
from pytest_moeperf.run import profiles

ROOT = Path(__file__).resolve().parents[2]
OPTIONS = ROOT / "docs" / "reference" / "options.md"
PROFILE_KEYS = ROOT / "docs" / "reference" / "profile-keys.md"
ENVIRONMENT = ROOT / "docs" / "reference" / "environment.md"

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
    row = next(
        line for line in OPTIONS.read_text().splitlines() if line.startswith(f"| `{option} ")
    )
    m = re.search(r"\(default[^)0-9]*?([0-9]+(?:\.[0-9]+)?)", row)
    assert m, f"the reference's row of {option} states no default: {row}"
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


def test_every_environment_variable_the_project_reads_is_in_the_reference():
    """A variable the package, its scripts, CI or the profiles read (``MOEPERF_*``) has a row
    of the reference's table: ``MOEPERF_SMOKE_BUDGET`` and ``_NCMOE`` were read by
    ``scripts/gpu-smoke.sh`` and missing from it."""
    listed = set(re.findall(r"`(MOEPERF_[A-Z_]*[A-Z])`", ENVIRONMENT.read_text()))
    read = set()
    for folder in ("pytest_moeperf", "scripts", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if (
                path.is_file()
                and path.suffix in (".py", ".sh", "")
                and "__pycache__" not in str(path)
            ):
                read |= set(re.findall(r"MOEPERF_[A-Z_]*[A-Z]", path.read_text(errors="replace")))
    read |= set(re.findall(r"\$(MOEPERF_[A-Z_]*[A-Z])", (ROOT / "moeperf.toml").read_text()))
    read -= {"MOEPERF_EXAMPLE"}  # a constant's name in plugin/markers.py, not a variable
    assert sorted(read - listed) == []


def test_every_pytest_option_and_profile_key_has_its_row_in_the_reference():
    """The reference cannot drift from the code: each ``--moeperf-*`` option the plugin adds
    and each key a profile, a configuration or a traffic table takes is in its table."""
    parser = pytest.Parser(_ispytest=True)
    hooks.pytest_addoption(parser)
    options = {
        name
        for group in parser._groups
        for option in group.options
        for name in option.names()
        if name.startswith("--moeperf")
    }
    assert options
    table = OPTIONS.read_text()
    assert sorted(o for o in options if f"`{o}" not in table) == []
    keys = profiles._PROFILE_KEYS | profiles._TRAFFIC_KEYS
    text = PROFILE_KEYS.read_text()
    assert sorted(k for k in keys if f"`{k}`" not in text) == []


def test_the_command_reference_is_generated_from_the_parser_and_the_tables_name_no_stranger():
    """The reference's list of ``moeperf`` options is the parser's own (made when the site is
    built); the hand-written tables name no option or profile key the code does not know."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("hook", ROOT / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    assert hook.PLACEHOLDER in OPTIONS.read_text()
    page = hook.on_page_markdown(OPTIONS.read_text(), None)
    parser = make_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for verb, p in sub.choices.items():
        assert f"### `moeperf {verb}`" in page
        for action in p._actions:
            for name in action.option_strings:
                assert name in ("-h", "--help") or f"`{name}`" in page, (verb, name)
    pytest_parser = pytest.Parser(_ispytest=True)
    hooks.pytest_addoption(pytest_parser)
    known = {n for g in pytest_parser._groups for o in g.options for n in o.names()}
    named = set(re.findall(r"^\| `(--moeperf-[a-z-]+)", OPTIONS.read_text(), re.MULTILINE))
    assert sorted(named - known) == []
    keys = profiles._PROFILE_KEYS | profiles._TRAFFIC_KEYS
    rows = set(re.findall(r"^\| `([a-z_]+)`", PROFILE_KEYS.read_text(), re.MULTILINE))
    assert sorted(rows - keys) == []
