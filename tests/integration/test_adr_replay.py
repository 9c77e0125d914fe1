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
    result.assert_outcomes(passed=7, xfailed=5, skipped=1)  # the real-traffic claim: no mix here
    out = result.stdout.str()
    assert re.search(r"lm-none-node1.pp2048 / mmap.pp2048 >= 2.00 +2.071 .* holds", out)
    assert re.search(r"cache-2gib.tg128 / mmap.tg128 < 1 \(dead end\) +0.295 .* holds", out)
    assert re.search(r"cache-6gib.tg128 / mmap.tg128 <= 0.70 +0.640 .* holds", out)
    assert re.search(r"mmap\[b11713\].tg128 / mmap\[b11053\].tg128 ~ 1 +1.387 .* faster", out)
    assert re.search(r"mmap\[b11713\].pp2048 / mmap\[b11053\].pp2048 ~ 1 +1.068 .* faster", out)
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
