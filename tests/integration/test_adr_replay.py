"""ADR-0042's own numbers, replayed through the ADR suite: the record's verdicts come out, and a
dead end that comes back to life fails strictly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def adr(pytester):
    pytester.makeini(
        "[pytest]\nmoeperf_config = moeperf.toml\n"
        "filterwarnings = ignore::pytest.PytestAssertRewriteWarning\n"
    )
    (pytester.path / "moeperf.toml").write_text((ROOT / "moeperf.toml").read_text())
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "adr-0042.toml").write_text(
        (ROOT / "baselines" / "adr-0042.toml").read_text()
    )
    (pytester.path / "test_adr_0042.py").write_text(
        (ROOT / "tests" / "perf" / "test_adr_0042.py").read_text()
    )
    return pytester


def test_replaying_the_adr_gives_the_adrs_verdicts(adr):
    result = adr.runpytest_subprocess(
        "-m",
        "perf",
        "-v",
        "--moeperf-replay",
        "baselines/adr-0042.toml",
        "-p",
        "no:randomly",
        "--moeperf-report",
        "report.md",
    )
    # the startup-warning test skips: the record keeps no server's startup log
    result.assert_outcomes(passed=13, skipped=1, xfailed=5)
    out = result.stdout.str()
    assert re.search(r"lm-none-node1.pp2048 / mmap.pp2048 >= 2.00 +2.071 .* holds", out)
    assert re.search(r"cache-2gib.tg128 / mmap.tg128 < 1 \(dead end\) +0.295 .* holds", out)
    assert re.search(r"cache-6gib.tg128 / mmap.tg128 <= 0.70 +0.640 .* holds", out)
    assert re.search(r"mmap\[b11713\].tg128 / mmap\[b11053\].tg128 ~ 1 +1.387 .* faster", out)
    assert re.search(r"mmap\[b11713\].pp2048 / mmap\[b11053\].pp2048 ~ 1 +1.068 .* faster", out)
    # the real-traffic table: the aggregate rows stand for the profile's traffic metrics
    assert re.search(
        r"serve-new.traffic.prefill / serve-legacy.traffic.prefill >= 1.90 +2.255 .* holds", out
    )
    assert re.search(
        r"serve-new.traffic.decode / serve-legacy.traffic.decode >= 0.90 +1.070 .* holds", out
    )
    report = (adr.path / "report.md").read_text()
    assert "| cache-6gib.tg128 / mmap.tg128 <= 0.70 | 0.640 |" in report


def test_a_dead_end_that_comes_back_to_life_fails_strictly(adr):
    baseline = adr.path / "baselines" / "adr-0042.toml"
    text = baseline.read_text()
    # a future build where the 2 GiB cache decodes at 15.9 tok/s, as fast as no cache (15.92)
    revived = re.sub(
        r'(configuration = "cache-2gib"\nworkload = "tg128"\nvalue = )4\.69', r"\g<1>15.9", text
    )
    assert revived != text
    baseline.write_text(revived)
    result = adr.runpytest_subprocess(
        "-m",
        "perf",
        "--moeperf-replay",
        "baselines/adr-0042.toml",
        "-k",
        "cache_is_slower",
    )
    result.assert_outcomes(failed=1, xfailed=4)
    result.stdout.fnmatch_lines(
        [
            "*dead end may have reopened*cache-2gib is no longer slower than mmap in tg128*",
            "*Re-measure cache-2gib against mmap*",
        ]
    )


def test_the_adr_suite_skips_naming_what_is_missing_off_the_production_host(adr, monkeypatch):
    for var in ("MOEPERF_ADR_SERVER", "MOEPERF_ADR_SERVER_OLD", "MOEPERF_ADR_MODEL"):
        monkeypatch.delenv(var, raising=False)
    result = adr.runpytest_subprocess("-m", "perf", "-rs", "-k", "twice_the_prefill")
    result.assert_outcomes(skipped=2)
    # this host has one NUMA node, or lacks the binary: either is named
    result.stdout.re_match_lines([r".*(NUMA node \d does not exist|MOEPERF_ADR|unset).*"])


def test_a_failure_shows_the_adrs_own_numbers_beside_the_replayed_ones(adr):
    """lm-none-node1's prefill replayed at 300 tok/s instead of the ADR's 391.4: the claim
    fails, and its message and the summary show the profile's reference (the unchanged file,
    baselines/adr-0042.toml) beside the replayed numbers."""
    text = (adr.path / "baselines" / "adr-0042.toml").read_text()
    cell = r'(configuration = "lm-none-node1"\nworkload = "pp2048"\nvalue = )391\.4(\n[^\[]*)'
    entry = re.search(cell, text)
    assert entry is not None and "samples" not in entry.group(2)  # the value is all there is
    changed = re.sub(cell, r"\g<1>300.0\g<2>", text)
    (adr.path / "replayed.toml").write_text(changed)
    result = adr.runpytest_subprocess(
        "-m",
        "perf",
        "--moeperf-replay",
        "replayed.toml",
        "-p",
        "no:randomly",
        "-k",
        "twice_the_prefill",
        "--moeperf-report",
        "report.md",
    )
    result.assert_outcomes(passed=1, failed=1)
    line = (
        "ADR-0042 391.4 / 189.0 = 2.07 | here 300.0 / 189.0 = 1.59 [1.54, 1.63] | bound >= 2.00 "
        "| fails"
    )
    result.stdout.fnmatch_lines(
        [
            "claim fails: lm-none-node1.pp2048 / mmap.pp2048 = 1.59 [1.54, 1.63] >= 2.00: fails",
            "against ADR-0042 (baselines/adr-0042.toml), numbers of host adr-0042: a reference "
            "beside this host's, never a change:",
            line,
            "",
            "configuration  pp2048 ADR-0042  pp2048 here  tg128 ADR-0042  tg128 here  build",
            "*",
            "mmap                     189.0        189.0           15.92  -           b11713",
            "lm-none-node1            391.4        300.0           15.71  -           b11713",
        ]
    )
    # the summary's table of every row, the ADR's ratio beside the replayed one
    result.stdout.re_match_lines(
        [
            r"lm-none-node0.pp2048 / mmap.pp2048 +>= 2.00 +389.9 / 189.0 = 2.06 +"
            r"389.9 / 189.0 = 2.06 \[2.01, 2.12\] +holds",
            r"lm-none-node1.pp2048 / mmap.pp2048 +>= 2.00 +391.4 / 189.0 = 2.07 +"
            r"300.0 / 189.0 = 1.59 \[1.54, 1.63\] +fails \*",
        ]
    )
    report = (adr.path / "report.md").read_text()
    assert "## Against the reference ADR-0042" in report
    assert "| lm-none-node1 | 391.4 | 300.0 | 15.71 | - | b11713 |" in report
    assert (adr.path / "report.reference-adr-0042.png").read_bytes()[:4] == b"\x89PNG"


def test_a_changed_traffic_figure_fails_with_the_adrs_own_beside_it(adr):
    """serve-new's real-traffic prefill replayed at 150 tok/s instead of the ADR's 218.5: the
    claim fails, and the line beside it shows the record's 218.5 (the profile's reference)."""
    text = (adr.path / "baselines" / "adr-0042.toml").read_text()
    cell = r'(configuration = "serve-new"\nworkload = "prefill-aggregate>=256"\nvalue = )218\.5'
    changed = re.sub(cell, r"\g<1>150.0", text)
    assert changed != text
    (adr.path / "replayed.toml").write_text(changed)
    result = adr.runpytest_subprocess(
        "-m", "perf", "--moeperf-replay", "replayed.toml", "-p", "no:randomly",
        "-k", "traffic_prefill_doubles",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "claim fails: serve-new.traffic.prefill / serve-legacy.traffic.prefill = 1.55 *"
            ">= 1.90: fails",
            "ADR-0042 218.5 / 96.90 = 2.25 | here 150.0 / 96.90 = 1.55 * | bound >= 1.90 | fails",
        ]
    )


@pytest.mark.parametrize(
    "configuration, workload, value, test",
    [
        ("cache-4gib", "pp2048", "150.0", "test_the_cache_leaves_prefill_unchanged[cache-4gib]"),
        ("lm-none-cache-2.5gib-gpu0-far", "tg128", "12.0", "socket_is_not_why"),
        ("lm-none-node1", "tg128", "14.0", "node1_is_not_slower"),
        ("serve-new", "prefill-aggregate>=4000", "150.0", "long_prompts"),
    ],
)
def test_each_number_the_suite_tests_fails_its_test_when_the_record_changes(
    adr, configuration, workload, value, test
):
    """The record's facts that are tests: the cache leaves prefill unchanged (189.9 with 4 GiB),
    the near and far single-card caches 1 % apart (13.47 far), node 1's decode lead of 1.35x
    (15.71), the >= 4,000-token traffic row (242.0). A record with that number changed fails
    its test, and only its test."""
    text = (adr.path / "baselines" / "adr-0042.toml").read_text()
    name, load = re.escape(configuration), re.escape(workload)
    cell = rf'(configuration = "{name}"\nworkload = "{load}"\nvalue = )[0-9.]+'
    changed = re.sub(cell, rf"\g<1>{value}", text)
    assert changed != text
    (adr.path / "replayed.toml").write_text(changed)
    result = adr.runpytest_subprocess(
        "-m", "perf", "--moeperf-replay", "replayed.toml", "-p", "no:randomly", "-rf"
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1, result.stdout.str()
    failed = [line for line in result.stdout.lines if line.startswith("FAILED ")]
    assert len(failed) == 1 and test in failed[0], failed
