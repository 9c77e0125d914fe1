"""The upgrade check's pieces that need no server: the decision table and its answer, builds
that are what they say (a binary's --version against the build it is given as), the profile a
test or a verb names none of, and the sides of an upgrade check's options."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_moeperf.config.profiles import default_profile, load_profiles, upgraded
from pytest_moeperf.errors import ConfigError, MoeperfError
from pytest_moeperf.llama.build import version
from pytest_moeperf.plugin.options import upgrade_options
from pytest_moeperf.plugin.upgrade import report_decisions
from pytest_moeperf.report.upgrade import UpgradeCheck, upgrade_json, upgrade_markdown, upgrade_text
from pytest_moeperf.run.artifacts import Artifacts
from pytest_moeperf.verdicts.outcomes import UPGRADE_EXIT_STATUS
from pytest_moeperf.verdicts.upgrade import (
    NOT_JUDGED,
    Decision,
    base_test,
    changed,
    upgrade_outcome,
    upgrade_rows,
)

T = "tests/perf/test_embedded.py::"


def claim(outcome: str, test: str = "test_one_core", asked: str = "one-core.pp512 / mmap.pp512",
          kind: str = "claim") -> Decision:  # fmt: skip
    return Decision(T + test, asked, kind, outcome, "0.52 [0.50, 0.54]")  # type: ignore[arg-type]


# -- the table ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "before, after, word",
    [
        ("holds", "holds", ""),
        ("holds", "fails", "worse"),
        ("holds", "undecided", "undecided on the candidate"),
        ("fails", "holds", "better"),
        ("fails", "fails", "fails on both"),
        ("undecided", "holds", "decided on the candidate"),
        ("undecided", "fails", "worse (undecided on the pinned build)"),
    ],
)
def test_what_changed_is_read_off_both_sides(before, after, word):
    assert changed(claim(before), claim(after)) == word


def test_a_dead_end_that_reopens_on_the_candidate_is_worse():
    kind = "dead end"
    row = upgrade_rows([claim("holds", kind=kind)], [claim("fails", kind=kind)])[0]
    assert row.changed == "worse" and row.finding
    assert upgrade_outcome([row]) == "worse"


def test_a_compared_change_that_moved_is_told_but_is_not_itself_a_finding():
    a, b = claim("unchanged", kind="change"), claim("slower", kind="change")
    assert changed(a, b) == "unchanged -> slower"
    assert not upgrade_rows([a], [b])[0].finding  # the test's own assertion says if it matters


def test_a_gate_row_is_judged_once_of_both_builds():
    row = Decision("moeperf-upgrade::gate[embedded]", "mmap.tg64", "gate", "slower", "75 / 160")
    rows = upgrade_rows([], [row])
    assert rows[0].pinned is None and rows[0].changed == "worse"
    assert upgrade_outcome(rows) == "worse"
    faster = Decision(row.test, row.asked, "gate", "faster")
    assert changed(None, faster) == "better"


def test_decisions_pair_by_test_and_what_it_judged_in_order():
    pinned = [claim("holds", asked="a"), claim("holds", asked="a"), claim("holds", asked="b")]
    candidate = [claim("holds", asked="b"), claim("holds", asked="a"), claim("fails", asked="a")]
    rows = upgrade_rows(pinned, candidate)
    assert [(r.asked, r.changed) for r in rows] == [("a", ""), ("a", "worse"), ("b", "")]


@pytest.mark.parametrize(
    "candidate, outcome",
    [
        (["holds", "passed", "unchanged"], "holds"),
        (["holds", "undecided"], "undecided"),
        (["undecided", "fails"], "worse"),
        ([NOT_JUDGED], "nothing-judged"),
    ],
)
def test_the_answer_is_the_candidates_column(candidate, outcome):
    pinned = [claim("holds", asked=str(i)) for i in range(len(candidate))]
    after = [claim(o, asked=str(i)) for i, o in enumerate(candidate)]
    assert upgrade_outcome(upgrade_rows(pinned, after)) == outcome


def test_exit_statuses_of_an_upgrade_keep_clear_of_pytests_own():
    assert UPGRADE_EXIT_STATUS == {"holds": 0, "worse": 1, "nothing-judged": 5, "undecided": 6}
    assert 3 not in UPGRADE_EXIT_STATUS.values()  # pytest's internal error


def test_a_test_that_fails_its_own_assertion_is_a_decision_of_its_own():
    compare = claim("slower", kind="change")
    got = report_decisions([compare], compare.test, "failed", "AssertionError", "pytest ...")
    assert [d.kind for d in got] == ["change", "test"] and got[1].outcome == "failed"
    skipped = report_decisions([], T + "x", "skipped", "no baseline", "")
    assert skipped[0].outcome == NOT_JUDGED and skipped[0].why == "no baseline"
    assert report_decisions([claim("fails")], T + "x", "failed", "", "")[-1].kind == "claim"


def test_the_side_comes_off_the_test_id():
    assert base_test(T + "test_x[pinned]", "pinned") == T + "test_x"
    assert base_test(T + "test_x[mmap-pp512-candidate]", "candidate") == T + "test_x[mmap-pp512]"


def test_the_table_reads_as_text_markdown_and_json():
    pinned = [claim("holds"), claim("holds", test="test_dead", kind="dead end")]
    figure = "75.0 / 160.0 tok/s = 0.469 [0.45, 0.49]"
    gate = Decision(
        "moeperf-upgrade::gate[embedded]", "mmap.tg64", "gate", "slower", figure,
        rerun="moeperf gate ...",
    )  # fmt: skip
    candidate = [claim("holds"), claim("fails", test="test_dead", kind="dead end"), gate]
    candidate[1] = Decision(**{**candidate[1].__dict__, "rerun": "pytest -m perf x"})
    check = UpgradeCheck("b10423", "b10429", upgrade_rows(pinned, candidate), 600.0)
    text = upgrade_text(check)
    assert "pinned b10423" in text and "candidate b10429" in text
    assert "finding: test_dead: one-core.pp512 / mmap.pp512: worse; measure again: pytest" in text
    assert "finding: gate[embedded]: mmap.tg64: worse; measure again: moeperf gate" in text
    assert text.splitlines()[-1].startswith("upgrade b10423 -> b10429: worse:")
    assert check.exit_status == 1
    md = upgrade_markdown(check)
    assert "| decision | pinned b10423 | candidate b10429 | record | changed |" in md
    back = json.loads(upgrade_json(check))
    assert back["outcome"] == "worse" and back["exit_status"] == 1 and len(back["rows"]) == 3
    assert [Decision.from_dict(r["candidate"]) for r in back["rows"]] == candidate


def test_the_answer_counts_what_is_worse_apart_from_what_is_undecided():
    pinned = [claim("holds"), claim("holds", test="t2"), claim("holds", test="t3")]
    candidate = [claim("fails"), claim("undecided", test="t2"), claim("undecided", test="t3")]
    check = UpgradeCheck("b10423", "b10429", upgrade_rows(pinned, candidate))
    assert check.answer().endswith(
        "b10429 changes 1 decision(s) for the worse: stay on b10423 (2 more left undecided)"
    )
    check = UpgradeCheck("b10423", "b10429", upgrade_rows(pinned, [claim("holds"), *candidate[1:]]))
    assert "b10429 left 2 decision(s) undecided" in check.answer()


# -- builds are what they say ---------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _fresh_caches(monkeypatch):
    monkeypatch.setattr(version, "_version_cache", {})
    monkeypatch.setattr(version, "_flags_cache", {})


def server(path: Path, number: int) -> Path:
    path.write_text(
        "#!/bin/sh\n"
        f'echo "version: 0.6.0-dev (build {number}, commit 2744e48d1)" >&2\n'
        'echo "  -lm, --load-mode MODE   how"\n'
    )
    path.chmod(0o755)
    return path


def profiles_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "moeperf.toml"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_profiles_binary_that_prints_another_build_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("ADR_SERVER", str(server(tmp_path / "llama-server", 11800)))
    path = profiles_file(
        tmp_path,
        """\
        [profiles.p]
        build = 11713
        binary = "$ADR_SERVER"
        model = "m.gguf"
        [profiles.p.configurations.mmap]
        """,
    )
    profile = load_profiles(path)["p"]
    artifacts = Artifacts(SimpleNamespace(llama_server=None, rootdir=tmp_path), print)
    with pytest.raises(ConfigError) as exc:
        artifacts.build_for(profile, profile.configuration("mmap"))
    message = str(exc.value)
    assert "\n" not in message and "prints build 11800" in message and "not b11713" in message
    monkeypatch.setenv("ADR_SERVER", str(server(tmp_path / "llama-server-2", 11713)))
    assert artifacts.build_for(profile, profile.configuration("mmap"))[0] == "b11713"


def test_the_llama_server_option_cannot_stand_in_for_another_build(tmp_path):
    path = profiles_file(
        tmp_path,
        """\
        [profiles.p]
        build = 11713
        model = "m.gguf"
        builds = { b11053 = "old/llama-server" }
        [profiles.p.configurations.mmap]
        """,
    )
    (tmp_path / "old").mkdir()
    server(tmp_path / "old" / "llama-server", 11053)
    new = server(tmp_path / "llama-server", 11800)
    profile = load_profiles(path)["p"]
    artifacts = Artifacts(
        SimpleNamespace(llama_server=(new, "--llama-server"), rootdir=tmp_path), print
    )
    mmap = profile.configuration("mmap")
    with pytest.raises(ConfigError, match=r"--llama-server .* prints build 11800.*not b11713"):
        artifacts.build_for(profile, mmap, "b11713")  # mmap[b11713] of the build test
    assert artifacts.build_for(profile, mmap, "b11053")[0] == "b11053"
    server(tmp_path / "old" / "llama-server", 11054)
    version._version_cache.clear()
    with pytest.raises(ConfigError, match=r"builds.b11053: .* prints build 11054"):
        Artifacts(SimpleNamespace(llama_server=None, rootdir=tmp_path), print).build_for(
            profile, mmap, "b11053"
        )


def test_a_gate_names_a_binary_by_its_version_never_its_file_name(tmp_path):
    from pytest_moeperf.commands.gate import side

    binary = server(tmp_path / "llama-server", 11800)
    assert side(str(binary)).name == "b11800"
    assert side(str(binary), label="pr-29887").name == "pr-29887"
    server(binary, 0)
    version._version_cache.clear()
    with pytest.raises(MoeperfError, match=r"prints no build number.*--candidate-label"):
        side(str(binary))


# -- the sides of an upgrade check ----------------------------------------------------------------
def test_upgrade_options_name_each_side(tmp_path):
    cand, pin = upgrade_options("11800", None, None)
    assert cand == (11800, "b11800") and pin is None
    binary = server(tmp_path / "llama-server", 11790)
    assert upgrade_options(str(binary), None, None)[0] == (str(binary), "b11790")
    assert upgrade_options(str(binary), "pr-29887", "11713") == (
        (str(binary), "pr-29887"),
        (11713, 11713),
    )
    for args, match in [
        ((None, "pr-1", None), "give --moeperf-candidate"),
        (("11800", "123", None), "not a bare number"),
        (("11713", None, "11713"), "is the pinned build b11713"),
        ((str(tmp_path / "nowhere"), None, None), "--moeperf-candidate .*nowhere.* does not exist"),
    ]:
        with pytest.raises(MoeperfError, match=match):
            upgrade_options(*args)
    server(binary, 0)
    version._version_cache.clear()
    with pytest.raises(MoeperfError, match="--moeperf-candidate-label"):
        upgrade_options(str(binary), None, None)


def test_an_upgraded_profile_knows_the_candidate_and_takes_the_pinned_build():
    profiles = load_profiles(None)
    up = upgraded(profiles, (10423, 10423), (10429, "b10429"))
    assert up["embedded"].build == 10423 and up["embedded"].builds["b10429"] == 10429
    assert profiles["embedded"].build == 11434  # the profiles as loaded are left alone


# -- the profile of a test or verb that names none ------------------------------------------------
def test_the_default_profile_follows_the_project(tmp_path, monkeypatch):
    path = profiles_file(
        tmp_path,
        """\
        default_profile = "mine"
        [profiles.mine]
        build = 11434
        model = "synthetic:tiny"
        [profiles.mine.configurations.default]
        """,
    )
    assert default_profile(None, None, None) == ("embedded", "the built-in default")
    assert default_profile(None, path, None)[0] == "mine"
    assert default_profile("embedded-tiny", path, None)[0] == "embedded-tiny"  # the ini first
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.pytest.ini_options]\nmoeperf_profile = "embedded-tiny"\n')
    assert default_profile(None, path, pyproject)[0] == "embedded-tiny"
    path.write_text(path.read_text().replace('"mine"\n', '"nosuch"\n', 1))
    with pytest.raises(ConfigError, match=r"default_profile = 'nosuch': no such profile"):
        default_profile(None, path, None)
    # a file with an error elsewhere names its default all the same: the error is told where
    # a test or verb reads that profile, as without a default (not at pytest's start)
    path.write_text(
        path.read_text().replace(
            "[profiles.mine.configurations.default]",
            "[profiles.mine.configurations.default]\nflagz = []",
        )
    )
    assert default_profile("mine", path, None)[0] == "mine"


def test_a_verbs_profile_and_its_help_follow_the_project(tmp_path, monkeypatch):
    from pytest_moeperf.commands import make_parser
    from pytest_moeperf.commands.common import profile_of

    profiles_file(
        tmp_path,
        """\
        default_profile = "embedded-tiny"
        """,
    )
    monkeypatch.chdir(tmp_path)
    parser = make_parser()
    args = parser.parse_args(["gate", "--baseline", "11434", "--candidate", "11401"])
    assert profile_of(args) == "embedded-tiny"
    gate = parser._subparsers._group_actions[0].choices["gate"]  # type: ignore[union-attr]
    assert "default here: embedded-tiny" in gate.format_help().replace("\n", " ").replace(
        "                        ", ""
    )
    args = parser.parse_args(
        ["gate", "--profile", "embedded", "--baseline", "1", "--candidate", "2"]
    )
    assert profile_of(args) == "embedded"


# -- accept moves the pin -------------------------------------------------------------------------
PINNED_FILE = """\
# our host: the pin is what production runs
[profiles.prod]
build = 11401  # moved by an accepted upgrade check
model = "synthetic:tiny"
baseline = "baselines/prod.toml"
builds = { b11053 = 11053 }

# the default server
[profiles.prod.configurations.mmap]
description = "default load mode"
"""


def test_accept_moves_the_pin_and_keeps_comments_and_the_old_build(tmp_path):
    from pytest_moeperf.run.pin import pin_moves

    path = tmp_path / "moeperf.toml"
    path.write_text(PINNED_FILE)
    profile = load_profiles(path)["prod"]
    [move] = pin_moves([profile], (11434, "b11434"), tmp_path)
    assert path.read_text() == PINNED_FILE  # nothing written before it is asked
    move.write()
    after = path.read_text()
    moved = load_profiles(path)["prod"]
    assert moved.build == 11434 and moved.builds == {"b11053": 11053, "b11401": 11401}
    for kept in ("# our host: the pin is what production runs", "# moved by an accepted",
                 "# the default server", 'description = "default load mode"'):  # fmt: skip
        assert kept in after
    assert "-build = 11401" in move.diff() and "+build = 11434" in move.diff()


def test_a_first_builds_table_goes_beside_build_not_under_the_next_tables_comment(tmp_path):
    from pytest_moeperf.run.pin import pin_moves

    path = tmp_path / "moeperf.toml"
    path.write_text(PINNED_FILE.replace("builds = { b11053 = 11053 }\n", ""))
    [move] = pin_moves([load_profiles(path)["prod"]], (11434, "b11434"), tmp_path)
    lines = move.after.splitlines()
    at = lines.index("build = 11434  # moved by an accepted upgrade check")
    assert lines[at + 1] == "builds = {b11401 = 11401}", move.after
    assert lines[lines.index("# the default server") + 1] == "[profiles.prod.configurations.mmap]"
    assert load_profiles(path)["prod"].builds == {}  # nothing written before it is asked


def test_a_binary_pin_keeps_the_old_binary_where_it_is(tmp_path, monkeypatch):
    from pytest_moeperf.run.pin import pin_moves

    old = server(tmp_path / "old-server", 11713)
    new = server(tmp_path / "new-server", 11800)
    monkeypatch.setenv("PROD_SERVER", str(old))
    path = tmp_path / "moeperf.toml"
    path.write_text(PINNED_FILE.replace("build = 11401", 'build = 11713\nbinary = "$PROD_SERVER"'))
    [move] = pin_moves([load_profiles(path)["prod"]], (str(new), "b11800"), tmp_path)
    move.write()
    moved = load_profiles(path)["prod"]
    assert moved.build == 11800 and moved.binary == str(new.resolve())
    assert moved.builds["b11713"] == str(old.resolve())  # not "$PROD_SERVER", repointed later


def test_a_pin_that_cannot_move_is_refused_before_anything_is_written(tmp_path):
    from pytest_moeperf.run.pin import pin_moves

    with pytest.raises(ConfigError, match=r"profile 'embedded' is built in .* copy it into"):
        pin_moves([load_profiles(None)["embedded"]], (11401, "b11401"), tmp_path)
    path = tmp_path / "moeperf.toml"
    path.write_text(PINNED_FILE)
    with pytest.raises(ConfigError, match=r"label of its own, not its build number"):
        pin_moves([load_profiles(path)["prod"]], ("/opt/pr/llama-server", "pr-29887"), tmp_path)
    assert path.read_text() == PINNED_FILE


def test_no_command_writes_a_reference_file(tmp_path):
    from pytest_moeperf.run.options import Options
    from pytest_moeperf.run.session import PerfSession

    path = tmp_path / "moeperf.toml"
    path.write_text(
        PINNED_FILE.replace('baseline = "baselines/prod.toml"', 'baseline = "record.toml"')
        + '\n[profiles.record]\nbuild = 11401\nmodel = "synthetic:tiny"\n'
        'reference = "record.toml"\n[profiles.record.configurations.mmap]\n'
    )
    profiles = load_profiles(path)
    session = PerfSession.__new__(PerfSession)  # only what writable_baseline reads
    session.options = Options(rootdir=tmp_path)
    session._profiles = profiles
    with pytest.raises(ConfigError, match=r"record.toml is profile 'record''s reference"):
        session.writable_baseline(profiles["prod"], "--moeperf-accept")


def test_a_reason_several_tests_share_is_said_once_with_their_names():
    from pytest_moeperf.report.tables import said_once

    why = "baseline check not measured further: between sessions 20 % (prior bound): ..."
    lines = [f"mmap.pp512: {why}", "mmap.pp512 / one-core.pp512: budget 180 s", f"mmap.tg64: {why}"]
    assert said_once(lines) == [
        f"mmap.pp512, mmap.tg64: {why}",
        "mmap.pp512 / one-core.pp512: budget 180 s",
    ]
