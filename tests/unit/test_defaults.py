"""The defaults are named once (``defaults.py``) and everything that states one says the same:
the pytest options' help texts, the ``moeperf`` command's arguments and the reference's table
of options (generated into ``docs/reference/options.md`` from the options' help when the site
is built); every option, profile key and environment variable the code knows has its row
there. A setting's bad value is refused by the one check its option and argument share."""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

from pytest_moeperf import defaults
from pytest_moeperf.commands import make_parser
from pytest_moeperf.config import profiles
from pytest_moeperf.defaults import SettingError
from pytest_moeperf.host.machine import HOST_KEYS
from pytest_moeperf.plugin import hooks

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


@cache
def _hook() -> ModuleType:
    """``docs/hooks/reference.py``, the MkDocs hook that generates the reference's tables."""
    spec = importlib.util.spec_from_file_location("hook", ROOT / "docs" / "hooks" / "reference.py")
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def _built(page: Path) -> str:
    """*page* as the site shows it: the hook's tables in place of its placeholders."""
    text = page.read_text()
    built = _hook().on_page_markdown(text, None)
    assert "<!-- generated:" not in built, f"{page.name}: a placeholder the hook does not know"
    return built


def _readme_default(option: str) -> float:
    row = next(line for line in _built(OPTIONS).splitlines() if line.startswith(f"| `{option} "))
    m = re.search(r"\bdefault\b[^)0-9]*?([0-9]+(?:\.[0-9]+)?)", row)
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


def _rows(page: str) -> list[list[str]]:
    """The cells of every row of *page*'s tables (not their heads or rules)."""
    return [
        [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        for line in page.splitlines()
        if line.startswith("| ") and not line.startswith(("| option |", "| key |"))
    ]


def test_every_pytest_option_and_profile_key_has_its_row_in_the_reference():
    """The reference cannot drift from the code: each option and ini key the plugin adds and
    each key a profile, a configuration, a traffic table or a host table takes is in the
    built page's table."""
    parser = pytest.Parser(_ispytest=True)
    hooks.pytest_addoption(parser)
    options = {
        name for group in parser._groups for option in group.options for name in option.names()
    }
    assert len(options) > 20 and set(parser._inidict)
    rows = _rows(_built(OPTIONS))
    named = {n.split()[0] for row in rows for n in re.findall(r"`([^`]+)`", row[0])}
    assert sorted(options - named) == []
    inis = {row[1].strip("`") for row in rows if row[1]}
    assert sorted(set(parser._inidict) - inis) == []
    keys = profiles._PROFILE_KEYS | profiles._TRAFFIC_KEYS
    rows = _rows(_built(PROFILE_KEYS))
    listed = {k for row in rows for k in re.findall(r"`([^`]+)`", row[0])}
    assert sorted(keys - listed) == []
    host = next(row for row in rows if row[0] == "`host`")
    assert sorted(k for k in HOST_KEYS if f"`{k}`" not in host[-1]) == []


def test_the_command_reference_is_generated_from_the_parser_and_the_tables_name_no_stranger():
    """The reference's list of ``moeperf`` options is the parser's own (made when the site is
    built); the hand-written tables name no option or profile key the code does not know."""
    hook = _hook()
    assert hook.PLACEHOLDER in OPTIONS.read_text()
    assert hook.PYTEST_OPTIONS in OPTIONS.read_text()
    assert hook.PROFILE_KEYS in PROFILE_KEYS.read_text()
    assert hook.TRAFFIC_KEYS in PROFILE_KEYS.read_text()
    page = _built(OPTIONS)
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
    rows = _rows(page.split("## The `moeperf` command")[0])
    named = {n.split()[0] for row in rows for n in re.findall(r"`([^`]+)`", row[0])}
    assert named and sorted(named - known) == []
    keys = profiles._PROFILE_KEYS | profiles._TRAFFIC_KEYS
    listed = {k for row in _rows(_built(PROFILE_KEYS)) for k in re.findall(r"`([^`]+)`", row[0])}
    assert listed and sorted(listed - keys) == []
