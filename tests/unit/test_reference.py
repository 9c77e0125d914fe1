"""A recorded reference beside this host's numbers: which entry stands for a measurement, the
reference row of a claim or dead end and its tables (exact strings), a profile's bad
``reference``, the plot's labels, and ``moeperf logstats --baseline`` against the ADR's
real-traffic table."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _cli import logstats
from _judges import judge_claim, judge_dead_end

from pytest_moeperf.errors import ConfigError
from pytest_moeperf.measure.measurement import Conditions, Measurement
from pytest_moeperf.measure.stats import Figure
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.report.plot import PlotMark, mark_label, plot_marks
from pytest_moeperf.report.reference import (
    configuration_rows,
    reference_failure,
    reference_line,
    reference_rows,
)
from pytest_moeperf.report.tables import text_table
from pytest_moeperf.run.session import Options, PerfSession
from pytest_moeperf.store.baselines import BaselineEntry, load_baselines
from pytest_moeperf.store.replay import find_stored, read_stored
from pytest_moeperf.verdicts.claims import Claim
from pytest_moeperf.verdicts.reference import (
    Reference,
    judge_traffic,
    pick_figure,
    traffic_outcome,
)

ROOT = Path(__file__).resolve().parents[2]
ADR_FILE = ROOT / "baselines" / "adr-0042.toml"
ADR = load_baselines(ADR_FILE)
REFERENCE = Reference(
    "ADR-0042", "baselines/adr-0042.toml", ADR.entries, ("adr-0042",), profile="adr-0042"
)
PP, TG = Workload.parse("pp2048"), Workload.parse("tg128")


def stored(config: str, workload: Workload, value: float, build: str = "b11713") -> Measurement:
    """A measurement as a replay of stored figures gives it."""
    return Measurement(
        config, build, workload, (), Conditions(profile="adr-0042"), figure=Figure(value, 0.01)
    )


def claim_row(node1_pp: float, build: str = "b11713"):
    left, right = stored("lm-none-node1", PP, node1_pp, build), stored("mmap", PP, 189.0, build)
    claim = Claim.parse("lm-none-node1.pp2048 >= 2.0 * mmap.pp2048")
    verdict = judge_claim(claim, left.operand, right.operand)
    return REFERENCE.row("t.py::test_prefill[lm-none-node1]", verdict, left, right), left, right


# --- which entry ------------------------------------------------------------------------------


def test_the_measured_builds_entry_else_the_newest_saying_which():
    mmap = pick_figure(ADR.entries, "mmap", "pp2048", "b11053")
    assert mmap is not None and (mmap.value, mmap.matched, mmap.note) == (176.9, True, "")
    newer = BaselineEntry("b11800", "mmap", "pp2048", 201.0, "2026-11-02", "rerun", host="x")
    older = BaselineEntry("b11700", "mmap", "pp2048", 150.0, "2026-09-01", "old", host="x")
    f = pick_figure([*ADR.entries, newer, older], "mmap", "pp2048", "b11900")
    assert f is not None and (f.value, f.build, f.host) == (201.0, "b11800", "x")
    assert f.note == "b11800 of 2026-11-02, the newest (measured b11900)"
    assert pick_figure(ADR.entries, "mmap", "tg128 @ d8192", "b11713") is None
    assert pick_figure(ADR.entries, "serve-new", "decode-median", "b11713") is None  # not bench


def test_a_records_aggregate_traffic_row_stands_for_the_profiles_traffic_metric():
    """traffic.prefill of serve-new is the ADR's "prefill, requests with >= 256 new tokens,
    aggregate" (218.5, the lowest threshold of two), traffic.decode its ">= 32 generated"
    aggregate; a metric the record has no row for has no figure, and replay gives the same
    numbers as figures with their spread."""
    prefill = pick_figure(ADR.entries, "serve-new", "traffic.prefill", "b11713")
    assert prefill is not None and (prefill.value, prefill.matched) == (218.5, True)
    legacy = pick_figure(ADR.entries, "serve-legacy", "traffic.prefill", "b11053")
    assert legacy is not None and legacy.value == 96.9
    decode = pick_figure(ADR.entries, "serve-new", "traffic.decode", "b11900")
    assert decode is not None and (decode.value, decode.build) == (14.6, "b11713")
    assert pick_figure(ADR.entries, "serve-new", "traffic.ttft_p99", "b11713") is None
    assert pick_figure(ADR.entries, "mmap", "traffic.prefill", "b11713") is None
    stored, _profile = read_stored(ADR_FILE)
    new = find_stored(
        stored.measurements, ADR_FILE, "adr-0042", "serve-new", Workload.traffic("prefill"), None
    )
    assert new.figure == Figure(218.5, 0.05) and new.build == "b11713"
    assert "stands for traffic.prefill" in new.conditions.source
    old = find_stored(
        stored.measurements, ADR_FILE, "adr-0042", "serve-legacy", Workload.traffic("decode"), None
    )
    assert old.figure == Figure(13.64, 0.05) and old.build == "b11053"


# --- the row and its tables ------------------------------------------------------------------


def test_a_claims_row_shows_the_references_numbers_beside_this_hosts():
    row, _, _ = claim_row(300.0)
    assert row.reference_ratio == pytest.approx(391.4 / 189.0)
    assert reference_line(row) == (
        "ADR-0042 391.4 / 189.0 = 2.07 | here 300.0 / 189.0 = 1.59 [1.54, 1.63] | "
        "bound >= 2.00 | fails"
    )


def test_another_build_says_which_entry_stands_in():
    row, _, _ = claim_row(300.0, build="b11900")
    assert reference_line(row) == (
        "ADR-0042 391.4 / 189.0 = 2.07 | here 300.0 / 189.0 = 1.59 [1.54, 1.63] | "
        "bound >= 2.00 | fails | "
        "ADR-0042 lm-none-node1 pp2048 is b11713 of 2026-10-17, the newest (measured b11900) | "
        "ADR-0042 mmap pp2048 is b11713 of 2026-10-17, the newest (measured b11900)"
    )


def test_a_dead_ends_row_and_a_missing_entry():
    left, right = stored("cache-2gib", TG, 15.9), stored("mmap", TG, 15.92)
    verdict = judge_dead_end(left.operand, right.operand, label="cache-2gib.tg128 / mmap.tg128")
    row = REFERENCE.row("t.py::test_cache[cache-2gib]", verdict, left, right)
    assert reference_line(row) == (
        "ADR-0042 4.69 / 15.92 = 0.29 | here 15.90 / 15.92 = 1.00 [0.97, 1.03] | "
        "bound < 1 (reopened at >= 0.95) | fails"
    )
    odd = stored("one-core", TG, 3.1)
    lonely = REFERENCE.row("t.py::test_x", verdict, odd, right)
    assert lonely.reference_ratio is None
    assert reference_line(lonely).startswith("ADR-0042 — / 15.92 = — | here 3.10 / 15.92")
    assert reference_line(lonely).endswith("| ADR-0042 has no one-core tg128")


def test_the_tables_in_the_adrs_layout():
    row, left, right = claim_row(300.0)
    old = stored("mmap", TG, 11.5, build="b11053")
    assert text_table(*reference_rows([row])) == "\n".join(
        [
            "claim                               bound    ADR-0042              "
            "here [interval]                    verdict  test",
            "----------------------------------  -------  --------------------  "
            "---------------------------------  -------  ---------------------------",
            "lm-none-node1.pp2048 / mmap.pp2048  >= 2.00  391.4 / 189.0 = 2.07  "
            "300.0 / 189.0 = 1.59 [1.54, 1.63]  fails *  test_prefill[lm-none-node1]",
        ]
    )
    # the record's row order (mmap b11053 first), the profile's workloads as columns
    assert text_table(*configuration_rows([left, right, old], REFERENCE, [PP, TG])) == "\n".join(
        [
            "configuration  pp2048 ADR-0042  pp2048 here  tg128 ADR-0042  tg128 here  build",
            "-------------  ---------------  -----------  --------------  ----------  ------",
            "mmap                     176.9  -                     11.48       11.50  b11053",
            "mmap                     189.0        189.0           15.92  -           b11713",
            "lm-none-node1            391.4        300.0           15.71  -           b11713",
        ]
    )


def test_the_failure_message_names_the_reference_and_its_host():
    row, left, right = claim_row(300.0)
    text = reference_failure(REFERENCE, row, [left, right], [PP, TG])
    assert text.splitlines()[:2] == [
        "against ADR-0042 (baselines/adr-0042.toml), numbers of host adr-0042: a reference "
        "beside this host's, never a change:",
        "ADR-0042 391.4 / 189.0 = 2.07 | here 300.0 / 189.0 = 1.59 [1.54, 1.63] | "
        "bound >= 2.00 | fails",
    ]
    assert "lm-none-node1            391.4        300.0           15.71  -" in text


# --- the profile's key -----------------------------------------------------------------------


def _session(tmp_path: Path, reference: str) -> PerfSession:
    text = (ROOT / "moeperf.toml").read_text()
    text, n = re.subn(r'(?m)^reference = ".*"$', f"reference = {reference!r}", text)
    assert n == 1
    (tmp_path / "moeperf.toml").write_text(text)
    options = Options(
        profile="adr-0042",
        config_file=tmp_path / "moeperf.toml",
        rootdir=tmp_path,
        replay=ADR_FILE,
    )
    return PerfSession(options)


def test_a_bad_reference_path_is_one_line_naming_the_key_and_file(tmp_path):
    session = _session(tmp_path, "baselines/nope.toml")
    with pytest.raises(ConfigError) as err:
        session.reference(session.profile())
    message = str(err.value)
    assert "\n" not in message
    assert message == (
        f"{tmp_path / 'moeperf.toml'}: profile 'adr-0042': reference = 'baselines/nope.toml': "
        f"no such baseline file {tmp_path / 'baselines' / 'nope.toml'}; point it at a baseline "
        "file (baselines/*.toml) or remove the key"
    )
    (tmp_path / "broken.toml").write_text("schema = 2\nprofile = 3\n")
    session = _session(tmp_path, "broken.toml")
    with pytest.raises(ConfigError, match=r"reference = 'broken.toml': .*broken.toml: profile 3"):
        session.reference(session.profile())


def test_the_adr_profile_names_its_reference():
    session = PerfSession(
        Options(
            profile="adr-0042", config_file=ROOT / "moeperf.toml", rootdir=ROOT, replay=ADR_FILE
        )
    )
    ref = session.reference(session.profile())
    assert ref is not None
    assert (ref.label, ref.path, ref.hosts) == (
        "ADR-0042",
        "baselines/adr-0042.toml",
        ("adr-0042",),
    )
    assert session.reference(session.profile("embedded")) is None


# --- the plot's labels -----------------------------------------------------------------------


def test_the_plot_draws_another_hosts_numbers_as_a_reference_without_a_change():
    ms = [stored("mmap", PP, 300.0), stored("lm-none-node1", PP, 380.0)]
    this_host = dict(ADR.fingerprint)
    other = {**this_host, "cpu_model": "AMD Ryzen 9 7950X", "cpus": 32}
    mine = plot_marks(ms, {"adr-0042": ADR}, {"adr-0042": this_host})
    assert mine[("mmap", "b11713", "pp2048")] == PlotMark(189.0)
    assert mark_label(mine[("mmap", "b11713", "pp2048")], 300.0) == "baseline 189.0\n(+58.7 %)"
    theirs = plot_marks(
        ms, {"adr-0042": ADR}, {"adr-0042": other}, references={"adr-0042": REFERENCE}
    )
    assert theirs[("mmap", "b11713", "pp2048")] == PlotMark(
        189.0, "ADR-0042 reference (host adr-0042)"
    )
    plain = plot_marks(ms, {"adr-0042": ADR}, {"adr-0042": other})
    mark = plain[("lm-none-node1", "b11713", "pp2048")]
    assert mark == PlotMark(391.4, "reference (host adr-0042)")
    assert mark_label(mark, 380.0) == "reference (host adr-0042)\n391.4"  # no change


# --- logstats --baseline ---------------------------------------------------------------------


def _head(task: int) -> str:
    return f"slot print_timing: id  0 | task {task} | "


def _block(task: int, p_tok: int, p_ms: float, g_tok: int, g_ms: float) -> list[str]:
    """A request's print_timing block in llama-server's format (see test_logs.py)."""
    return [
        _head(task) + f"prompt eval time = {p_ms:10.2f} ms / {p_tok:5d} tokens "
        f"({p_ms / p_tok:8.2f} ms per token, {p_tok * 1000 / p_ms:8.2f} tokens per second)",
        _head(task) + f"       eval time = {g_ms:10.2f} ms / {g_tok:5d} tokens "
        f"({g_ms / g_tok:8.2f} ms per token, {g_tok * 1000 / g_ms:8.2f} tokens per second)",
        _head(task) + f"      total time = {p_ms + g_ms:10.2f} ms / {p_tok + g_tok:5d} tokens",
    ]


def adr_log(path: Path, prefill: float = 1.0, decode: float = 1.0) -> Path:
    """A log at *prefill* and *decode* times ADR-0042's new column (prefill >= 256: 218.5
    tok/s aggregate, >= 4,000: 242.0; decode 14.60 aggregate): ten 5,000-token and twelve
    1,000-token prompts, each generating 200 tokens, rates jittered by a few per cent."""
    jitter = [1.0, 1.03, 0.97, 1.02, 0.98, 1.01, 0.99]
    large = [(5000, 5000 / (242.0 * jitter[i % 7]) * 1000) for i in range(10)]
    k = sum(t for t, _ in large) * 1000 / 242.0 / sum(ms for _, ms in large)
    large = [(t, ms * k) for t, ms in large]
    small = [(1000, 1000 / (150.0 * jitter[i % 7]) * 1000) for i in range(12)]
    want = sum(t for t, _ in large + small) * 1000 / 218.5 - sum(ms for _, ms in large)
    k = want / sum(ms for _, ms in small)
    lines = []
    for i, (tokens, ms) in enumerate(large + [(t, ms * k) for t, ms in small]):
        gen_ms = 200 / (14.6 * jitter[(i + 3) % 7]) * 1000
        lines += _block(i + 1, tokens, ms / prefill, 200, gen_ms / decode)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_log_at_half_the_adrs_prefill_fails_naming_the_row(tmp_path, capsys):
    log = adr_log(tmp_path / "prod.log", prefill=0.5)
    rc = logstats([str(log), "--baseline", str(ADR_FILE), "--column", "serve-new"])
    out = capsys.readouterr().out
    assert rc == 1
    assert re.search(
        r"\| prefill, requests with ≥256 new tokens, aggregate +\| 109\.3 \(n=22\) +\| "
        r"0\.50 \[0\.\d\d, 0\.\d\d\] +\| 218\.5 ± 5 % +\| 207\.6 +\| fails \* +\|",
        out,
    )
    assert "verdict: fails (prefill, requests with ≥256 new tokens, aggregate; prefill, " in out


def test_a_log_above_the_adrs_level_holds_and_one_at_it_is_undecided(tmp_path, capsys):
    """The file's traffic figures carry rel_spread 0.05 beside a 5 % tolerance: a log must be
    about 5 % above a figure to show that it holds; one exactly at it cannot tell."""
    above = adr_log(tmp_path / "above.log", prefill=1.1, decode=1.1)
    assert logstats([str(above), "--baseline", str(ADR_FILE), "--configuration", "serve-new"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("verdict: holds")
    dropped = adr_log(tmp_path / "dropped.log", decode=0.87)  # 13 % slower decode
    assert logstats([str(dropped), "--baseline", str(ADR_FILE), "--column", "serve-new"]) == 3
    assert (
        "undecided: decode, requests with ≥32 generated, aggregate: the record's 5 % spread "
        "dominates the width (the log's 22 requests give ±0."
    ) in capsys.readouterr().out
    level = adr_log(tmp_path / "level.log")
    assert logstats([str(level), "--baseline", str(ADR_FILE), "--column", "serve-new"]) == 3
    out = capsys.readouterr().out
    assert "| 218.5 (n=22)" in out and "verdict: undecided" in out


def test_logstats_baseline_errors_are_one_line_and_exit_2(tmp_path, capsys):
    log = adr_log(tmp_path / "prod.log")
    assert logstats([str(log), "--baseline", str(ADR_FILE)]) == 2
    assert capsys.readouterr().err == (
        f"moeperf logstats: error: --baseline {ADR_FILE}: holds the traffic of serve-legacy, "
        "serve-new; name one with --configuration (or --column)\n"
    )
    assert logstats([str(log), "--baseline", str(ADR_FILE), "--column", "old"]) == 2
    assert "--configuration old: " in capsys.readouterr().err
    assert logstats([str(log), "--column", "serve-new"]) == 2
    assert "give --baseline FILE too" in capsys.readouterr().err
    assert logstats([str(log), "--baseline", str(tmp_path / "nope.toml")]) == 2
    assert capsys.readouterr().err == (
        f"moeperf logstats: error: --baseline {tmp_path / 'nope.toml'}: no such baseline file\n"
    )


def test_the_traffic_verdict_and_its_interval_are_seeded():
    requests = [(1000 + 10 * i, 4000.0 + 37 * (i % 5)) for i in range(40)]
    one = judge_traffic(requests, "aggregate", 250.0, label="p", workload="w", tolerance=0.05)
    two = judge_traffic(requests, "aggregate", 250.0, label="p", workload="w", tolerance=0.05)
    assert one == two and one.outcome == "holds" and one.low is not None and one.low >= 0.95
    low = judge_traffic(requests, "median", 400.0, label="p", workload="w", tolerance=0.05)
    assert low.outcome == "fails" and low.high is not None and low.high < 0.95
    none = judge_traffic([], "aggregate", 250.0, label="p", workload="w", tolerance=0.05)
    assert none.outcome == "undecided" and "no requests" in none.explain()
    assert traffic_outcome([one, none]) == "undecided"
    assert traffic_outcome([one, none, low]) == "fails"
