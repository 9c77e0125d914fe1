"""llama.cpp's flag spellings are known in one place, ``llama/flags.py``: every spelling of a
flag reads alike, and no other package module spells a flag's alias."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pytest_moeperf
from pytest_moeperf.llama.bench import bench_args
from pytest_moeperf.llama.flags import (
    SPELLINGS,
    bench_fields,
    canonical,
    flag_value,
    flag_values,
    has_flag,
    spellings,
    without_flags,
)
from pytest_moeperf.llama.footprint import estimate
from pytest_moeperf.llama.model_bytes import DecodeBytes
from pytest_moeperf.measure.workload import Workload

PACKAGE = Path(pytest_moeperf.__file__).parent


@pytest.mark.parametrize(("name", "value"), [("-ngl", "12"), ("-ncmoe", "8"), ("-ts", "3,1")])
def test_every_spelling_reads_the_same_value(name: str, value: str) -> None:
    translations = set()
    for spelling in spellings(name):
        flags = [spelling, value]
        assert canonical(spelling) == name
        assert flag_value(["-t", "4", *flags, "-c", "512"], name) == value
        assert flag_values([*flags, "-t", "4", *flags], name) == [value, value]
        assert without_flags(["-t", "4", *flags], valued=(name,)) == ["-t", "4"]
        translations.add(repr((bench_fields(flags), bench_args(flags, [Workload("tg", 64)], 1))))
        if spelling.startswith("--"):
            assert flag_value([f"{spelling}={value}"], name) == value
            assert bench_fields([f"{spelling}={value}"]) == bench_fields(flags)
    assert len(spellings(name)) > 1 and len(translations) == 1


def test_a_switch_in_any_spelling_and_names_outside_the_table() -> None:
    assert all(has_flag(["-t", "4", s], "-cmoe") for s in ("-cmoe", "--cpu-moe"))
    assert not has_flag(["--cpu-moe=1"], "-cmoe")  # a switch takes no value: not that flag
    assert without_flags(["--cpu-moe", "-ncmoe", "4", "x"], ("-ncmoe",), ("-cmoe",)) == ["x"]
    assert without_flags(["--threads", "4", "-t", "2"], ("-t",), exact=True) == ["--threads", "4"]
    assert spellings("--numa") == ("--numa",) and canonical("--numa=2") == "--numa=2"
    assert flag_value(["--moe-cache-mib=64"], "--moe-cache-mib") == "64"


def test_footprint_reads_no_repack_in_either_spelling() -> None:
    gib = 2**30
    model = DecodeBytes(
        dense=gib, experts_active=0, lookup=0, kv_per_token_of_depth=1024, experts_used=8,
        experts=64, experts_total=8 * gib, n_layer=8, stored=9 * gib, repacked_dense=gib,
    )  # fmt: skip
    short, long_, none = (estimate(model, "m", f, gpus=0) for f in (["-nr"], ["--no-repack"], []))
    assert short == long_ and short.private < none.private


def _literals(path: Path) -> list[tuple[int, str]]:
    """The string constants of *path* starting with ``-``, except the option strings of our
    own CLI's ``add_argument`` calls (``-v/--verbose``, ``--seed`` are moeperf's options, not
    llama-server's ``--verbose`` or ``--seed``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    ours = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_argument"
        for arg in node.args
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("-")
        and id(node) not in ours
    ]


def test_no_module_but_flags_spells_a_flags_alias() -> None:
    aliases = {s for name, all_ in SPELLINGS.items() for s in all_ if s != name}
    found = [
        f"{path.relative_to(PACKAGE)}:{line}: {text!r} (name it {canonical(text.split('=')[0])})"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "llama" / "flags.py"
        for line, text in _literals(path)
        if text in aliases or text.split("=", 1)[0] in aliases
    ]
    assert not found, "llama.cpp flag aliases outside llama/flags.py:\n" + "\n".join(found)
