"""Two production logs compared, old against new (``moeperf logstats OLD.log NEW.log``): each
row's interval carries both logs' request spread and a between-session term, says which
dominates, and the exit status is a gate's."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
from _cli import logstats

from pytest_moeperf.defaults import SESSION_SPREAD
from pytest_moeperf.llama.logs import RequestTiming, log_sessions, parse_log_files
from pytest_moeperf.verdicts.logchange import (
    SESSION_TERM,
    compare_logs,
    log_rows,
    logs_outcome,
)


def _stamp(seconds: float) -> str:
    """common/log.cpp's ``--log-timestamps`` prefix (minutes.seconds.ms.us)."""
    us = round(seconds * 1e6)
    return f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d} "


def write_log(
    path: Path,
    requests: int,
    *,
    prefill: float = 200.0,
    decode: float = 15.0,
    seed: int = 0,
    noise: float = 0.10,
    restarts: int = 0,
    gap: float | None = None,
) -> Path:
    """A llama-server log of *requests* requests (prompts of 300-6,000 tokens, 40-400
    generated) at about *prefill* and *decode* tok/s, each request's rates off by a lognormal
    *noise*; the server restarted *restarts* times (task ids start again), and with *gap*
    seconds between requests, ``--log-timestamps`` prefixes."""
    rng = random.Random(seed)
    lines: list[str] = []
    per = math.ceil(requests / (restarts + 1))
    clock = 0.0
    for i in range(requests):
        task = i % per + 1
        if task == 1:
            clock = 0.0
        p_tok, g_tok = rng.randint(300, 6000), rng.randint(40, 400)
        p_ms = p_tok / (prefill * math.exp(rng.gauss(0, noise))) * 1000
        g_ms = g_tok / (decode * math.exp(rng.gauss(0, noise))) * 1000
        clock += (gap or 0.0) + (p_ms + g_ms) / 1000
        pre = _stamp(clock) if gap is not None else ""
        head = f"{pre}slot print_timing: id  0 | task {task} | "
        lines += [
            f"{head}prompt eval time = {p_ms:10.2f} ms / {p_tok:5d} tokens "
            f"({p_ms / p_tok:8.2f} ms per token, {p_tok * 1000 / p_ms:8.2f} tokens per second)",
            f"{head}       eval time = {g_ms:10.2f} ms / {g_tok:5d} tokens "
            f"({g_ms / g_tok:8.2f} ms per token, {g_tok * 1000 / g_ms:8.2f} tokens per second)",
            f"{head}      total time = {p_ms + g_ms:10.2f} ms / {p_tok + g_tok:5d} tokens",
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def timings(path: Path) -> tuple[RequestTiming, ...]:
    return parse_log_files([path]).timings


ROWS = log_rows()


def test_a_log_against_itself_is_unchanged_with_no_session_term(tmp_path, capsys):
    log = write_log(tmp_path / "a.log", 300)
    changes = compare_logs(timings(log), timings(log), ROWS)
    assert [c.outcome for c in changes] == ["unchanged"] * len(ROWS)
    assert all(c.session is None and c.ratio == 1.0 for c in changes)
    assert logs_outcome(changes) == "passed"
    assert logstats([str(log), str(log)]) == 0
    out = capsys.readouterr().out
    assert "between sessions: none (the same requests twice are one session)" in out
    assert out.rstrip().endswith("verdict: passed")


def test_a_row_neither_log_has_requests_of_is_left_out(tmp_path, capsys):
    """Prompts of at most 6,000 tokens and a large-prefill row at 8,000: the row is no member
    of the family and cannot keep a log against itself from passing."""
    log = write_log(tmp_path / "a.log", 100)
    rows = log_rows(prefill_large_min=8000)
    changes = compare_logs(timings(log), timings(log), rows)
    assert len(changes) == len(rows) - 1 and all(c.outcome == "unchanged" for c in changes)
    assert changes[0].confidence == pytest.approx(1 - 0.05 / 4)
    assert logstats([str(log), str(log), "--prefill-large-min", "8000"]) == 0
    out = capsys.readouterr().out
    assert "left out, no request of them in either log: prefill, requests with ≥8,000" in out


def test_a_halved_prefill_is_slower_and_exits_1(tmp_path, capsys):
    old = write_log(tmp_path / "old.log", 200, seed=1)
    new = write_log(tmp_path / "new.log", 200, seed=2, prefill=100.0)
    rc = logstats([str(old), str(new)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "verdict: slower (prefill, requests with ≥256 new tokens, aggregate; " in out
    # the same through --baseline naming the older log
    assert logstats([str(new), "--baseline", str(old)]) == 1
    capsys.readouterr()
    assert logstats([str(new), "--baseline", str(old), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["compare"]["old"] == "old.log" and doc["compare"]["outcome"] == "slower"
    prefill = doc["compare"]["rows"][0]
    assert prefill["outcome"] == "slower" and prefill["ratio"] == pytest.approx(0.5, rel=0.1)
    decode = doc["compare"]["rows"][2]
    assert decode["outcome"] != "slower"


def test_the_interval_narrows_with_requests_but_never_below_the_session_term(tmp_path):
    """A 15 % slower decode: at 400 requests a side the interval is narrower than at 50, but
    never narrower than the between-session term alone (each log one session's level, the
    prior 10 %), which then dominates; neither decides a 15 % change against it."""
    widths = {}
    for n in (50, 400):
        old = write_log(tmp_path / f"old{n}.log", n, seed=3)
        new = write_log(tmp_path / f"new{n}.log", n, seed=4, decode=15.0 * 0.85)
        (c,) = [
            c for c in compare_logs(timings(old), timings(new), ROWS) if "decode, req" in c.label
        ]
        assert c.ratio == pytest.approx(0.85, rel=0.05)
        assert c.session is not None and c.session.log_sd == pytest.approx(SESSION_SPREAD)
        z = math.log(c.high / c.ratio) / math.hypot(c.request_sd, c.session_sd)
        floor = math.exp(2 * z * c.session_sd)
        assert c.high / c.low >= floor
        assert c.outcome == "undecided"
        widths[n] = (c.high / c.low, c.dominant)
    assert widths[400][0] < widths[50][0]
    assert widths[400][1] == SESSION_TERM


def test_two_healthy_logs_are_never_slower(tmp_path):
    """Logs of the same server level, each its own noise: over 20 pairs no row says slower."""
    outcomes = []
    for seed in range(20):
        old = write_log(tmp_path / "old.log", 120, seed=100 + seed)
        new = write_log(tmp_path / "new.log", 120, seed=200 + seed)
        outcomes += [c.outcome for c in compare_logs(timings(old), timings(new), ROWS)]
    assert "slower" not in outcomes and "faster" not in outcomes


def test_sessions_are_restarts_and_hours(tmp_path):
    restarted = timings(write_log(tmp_path / "r.log", 90, restarts=2))
    assert [len(s) for s in log_sessions(restarted)] == [30, 30, 30]
    stamped = timings(write_log(tmp_path / "t.log", 60, gap=300.0))  # ~5.5 min a request
    hours = log_sessions(stamped)
    assert len(hours) >= 5 and sum(len(s) for s in hours) == 60
    assert all(int(s[0].end_s // 3600) == int(s[-1].end_s // 3600) for s in hours)


def test_the_session_term_is_measured_from_the_logs_own_sessions(tmp_path):
    """Logs of many steady sessions (restarts) measure a term below the 10 % prior; logs whose
    sessions differ by 25 % measure one above it."""
    steady_old = timings(write_log(tmp_path / "a.log", 600, restarts=11, seed=5, noise=0.02))
    steady_new = timings(write_log(tmp_path / "b.log", 600, restarts=11, seed=6, noise=0.02))
    (row,) = [r for r in ROWS if r.label.startswith("decode, requests")]
    (c,) = compare_logs(steady_old, steady_new, [row])
    assert c.session is not None and c.session.sessions == 24
    assert c.session.log_sd < 0.5 * SESSION_SPREAD and c.outcome != "slower"
    lines = []
    for k, level in enumerate([15.0, 19.0, 12.0, 18.0] * 3):
        part = write_log(tmp_path / f"p{k}.log", 50, decode=level, seed=k, noise=0.02)
        lines.append(part.read_text())
    (tmp_path / "moving.log").write_text("".join(lines))
    moving = timings(tmp_path / "moving.log")
    (c,) = compare_logs(moving, steady_new, [row])
    assert c.session is not None and c.session.log_sd > SESSION_SPREAD


def test_a_stated_session_spread_replaces_the_prior(tmp_path, capsys):
    """On a host known to hold its level to 2 % between sessions, the 15 % slower decode of
    400 requests a side is decided."""
    old = write_log(tmp_path / "old.log", 400, seed=3)
    new = write_log(tmp_path / "new.log", 400, seed=4, decode=15.0 * 0.85)
    assert logstats([str(old), str(new)]) == 3
    capsys.readouterr()
    assert logstats([str(old), str(new), "--session-spread", "0.02"]) == 1
    assert "between sessions 2.0 %" in capsys.readouterr().out
    assert logstats([str(old), str(new), "--session-spread", "10"]) == 2
    assert "must be in [0, 1), got 10 (0.10 is 10 %)" in capsys.readouterr().err


def test_two_log_usage_errors_are_one_line(tmp_path, capsys):
    log = write_log(tmp_path / "a.log", 10)
    assert logstats([str(log), str(log), "--baseline", str(log)]) == 2
    assert "--baseline judges one log; 2 were given" in capsys.readouterr().err
    assert logstats([str(log), "--baseline", str(tmp_path / "none.log")]) == 2
    assert capsys.readouterr().err.startswith("moeperf logstats: error: cannot read ")
    assert logstats([str(log), "--baseline", str(log), "--column", "new"]) == 2
    assert "give --baseline FILE too" in capsys.readouterr().err
