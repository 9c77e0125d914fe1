"""llama-server log reading: startup warnings, print_timing blocks, the ADR-0042 traffic table."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import math
import statistics
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from _cli import logstats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_moeperf.errors import MoeperfError
from pytest_moeperf.llama.logs import (
    LogError,
    RequestTiming,
    TimingParser,
    parse_log_files,
    read_log_lines,
    rotated_series,
    traffic_stats,
)
from pytest_moeperf.llama.startup import STARTUP_WARNINGS, log_messages, scan_startup
from pytest_moeperf.report.logstats import format_traffic_table

DATA = Path(__file__).parent / "data" / "logs"


def parse_timings(lines: Iterable[str]) -> Iterator[RequestTiming]:
    """The requests in *lines* in the order they finished, read as parse_log_files reads them."""
    parser = TimingParser()
    for line in lines:
        yield from parser.feed(log_messages(line), line)
    yield from parser.finish()


# ------------------------------------------------------------------------------------------
# Rendering in llama-server's exact formats (tools/server/server-context.cpp, b11434)
# ------------------------------------------------------------------------------------------


def _head(slot: int, task: int, func: str = "print_timing") -> str:
    return f"slot {func[:12]:>12}: id {slot:2d} | task {task} | "


def _tps(tokens: int, ms: float) -> float:
    return 1e3 / ms * tokens if ms > 0 else 0.0


def prompt_line(slot: int, task: int, tokens: int, ms: float) -> str:
    per = ms / tokens if tokens else 0.0
    return _head(slot, task) + (
        f"prompt eval time = {ms:10.2f} ms / {tokens:5d} tokens "
        f"({per:8.2f} ms per token, {_tps(tokens, ms):8.2f} tokens per second)"
    )


def eval_line(slot: int, task: int, tokens: int, ms: float) -> str:
    steps = max(tokens - 1, 0)  # b11434 divides by n_gen - 1
    per = ms / steps if steps else 0.0
    return _head(slot, task) + (
        f"       eval time = {ms:10.2f} ms / {tokens:5d} tokens "
        f"({per:8.2f} ms per token, {_tps(steps, ms):8.2f} tokens per second)"
    )


def total_line(slot: int, task: int, tokens: int, ms: float) -> str:
    return _head(slot, task) + f"      total time = {ms:10.2f} ms / {tokens:5d} tokens"


def block(
    slot: int, task: int, p_tok: int, p_ms: float, g_tok: int, g_ms: float, *, release: bool = True
) -> list[str]:
    lines = [
        prompt_line(slot, task, p_tok, p_ms),
        eval_line(slot, task, g_tok, g_ms),
        total_line(slot, task, p_tok + g_tok, p_ms + g_ms),
        _head(slot, task) + f"   graphs reused = {g_tok:10d}",
    ]
    if release:
        lines.append(
            _head(slot, task, "release")
            + f"stop processing: n_tokens = {p_tok + g_tok - 1}, truncated = 0"
        )
    return lines


PREFIXES = [
    "",
    "I ",
    "0.02.509.778 I ",
    "12.59.999.001 I ",
    "\x1b[34m0.00.013.953\x1b[0m \x1b[32mI ",
]

NOISE = [
    "srv  log_server_r: request: POST /completion 127.0.0.1 200",
    "que    start_loop: processing new tasks",
    "srv  update_slots: all slots are idle",
    "slot launch_slot_: id  3 | task 99999 | processing task, is_child = 0",
    "slot update_slots: id  1 | task 77777 | prompt processing progress, n_tokens = 512",
    "slot print_timing: id  2 | task 88888 | n_gen =    100, tg =  29.44 t/s, tg_3s =  29.73 t/s",
    "slot print_timing: id  2 | task 88888 | prompt processing, n_tokens =   2048, progress = 0.50,"
    " t =   4.10 s / 499.51 tokens per second",
    "llama_perf_context_print:        eval time =    1219.07 ms /    53 runs   (   23.00 ms per"
    " token,    43.48 tokens per second)",
    "llama_perf_context_print: prompt eval time =      49.48 ms /    11 tokens",
    "       eval time =    1219.07 ms /    53 tokens (stray, no header)",
    "W llama_context: n_ctx_seq (8192) > n_ctx_train (4096) -- possible training context overflow",
    "",
    "\ufffd\ufffd garbage | task | eval time = lots",
]


# ------------------------------------------------------------------------------------------
# Per-request timings: format cases
# ------------------------------------------------------------------------------------------


def test_block_without_prefix_parses_all_fields():
    [t] = parse_timings(block(0, 1234, 2432, 20000.0, 400, 30000.0))
    assert t == RequestTiming(
        slot=0,
        task=1234,
        prompt_tokens=2432,
        prompt_ms=20000.0,
        gen_tokens=400,
        gen_ms=30000.0,
        complete=True,
    )


@pytest.mark.parametrize("prefix", PREFIXES)
def test_time_and_level_prefix_is_ignored(prefix):
    lines = [prefix + line for line in block(3, 7, 512, 812.5, 64, 1000.01)]
    [t] = parse_timings(lines)
    assert (t.slot, t.task, t.prompt_tokens, t.prompt_ms, t.gen_tokens, t.gen_ms) == (
        3,
        7,
        512,
        812.5,
        64,
        1000.01,
    )
    assert t.complete


def test_eval_line_never_matches_inside_prompt_eval():
    # only the prompt line: nothing may be taken as decode
    [t] = parse_timings([prompt_line(0, 1, 100, 50.0)])
    assert t.gen_tokens is None and t.gen_ms is None
    assert not t.complete
    # the reference rendering from the evidence file, verbatim
    lines = [
        "0.02.509.778 I slot print_timing: id  0 | task 0 | prompt eval time =     721.46 ms /"
        "   300 tokens (    2.40 ms per token,   415.82 tokens per second)",
        "0.02.509.779 I slot print_timing: id  0 | task 0 |        eval time =     539.09 ms /"
        "    40 tokens (   13.82 ms per token,    72.34 tokens per second)",
    ]
    [t] = parse_timings(lines)
    assert (t.prompt_tokens, t.gen_tokens) == (300, 40)


def test_total_line_is_optional_and_release_closes_the_block():
    lines = [
        prompt_line(1, 5, 300, 100.0),
        eval_line(1, 5, 40, 400.0),
        _head(1, 5, "release") + "stop processing: n_tokens = 339, truncated = 0",
    ]
    [t] = parse_timings(lines)
    assert t.complete and (t.prompt_tokens, t.gen_tokens) == (300, 40)


def test_interleaved_slots_are_keyed_by_slot_and_task():
    a = block(0, 10, 1000, 2000.0, 50, 500.0)
    b = block(1, 11, 300, 600.0, 80, 1600.0)
    c = block(2, 12, 5, 1.0, 1, 0.5)
    lines = [x for trio in zip(a, b, c, strict=True) for x in trio]
    got = {(t.slot, t.task): t for t in parse_timings(lines)}
    assert set(got) == {(0, 10), (1, 11), (2, 12)}
    assert all(t.complete for t in got.values())
    assert (got[(0, 10)].prompt_tokens, got[(0, 10)].gen_tokens) == (1000, 50)
    assert (got[(1, 11)].prompt_tokens, got[(1, 11)].gen_tokens) == (300, 80)
    assert (got[(2, 12)].prompt_ms, got[(2, 12)].gen_ms) == (1.0, 0.5)


def test_other_subsystems_and_garbage_are_ignored():
    lines = [*NOISE, *block(0, 1, 10, 1.0, 2, 1.0), *NOISE, "\x00\x01binary", "x" * 10000]
    [t] = parse_timings(lines)
    assert t.complete and (t.prompt_tokens, t.gen_tokens) == (10, 2)


def test_block_cut_at_eof_is_yielded_incomplete():
    lines = [*block(0, 1, 100, 10.0, 5, 5.0), prompt_line(1, 2, 5000, 9000.0)]
    done, cut = list(parse_timings(lines))
    assert done.complete
    assert (cut.slot, cut.task, cut.prompt_tokens, cut.gen_tokens) == (1, 2, 5000, None)
    assert not cut.complete


def test_block_cut_by_a_new_block_on_the_same_slot():
    # the server restarted (task ids start again) before printing the eval line
    lines = [prompt_line(0, 40, 100, 10.0), "main: loading model", *block(0, 0, 7, 1.0, 3, 2.0)]
    cut, done = list(parse_timings(lines))
    assert (cut.task, cut.complete) == (40, False)
    assert (done.task, done.complete) == (0, True)


def test_eval_without_prompt_at_start_of_a_rotated_file_is_incomplete():
    lines = [eval_line(0, 3, 30, 300.0), total_line(0, 3, 130, 310.0)]
    [t] = parse_timings(lines)
    assert not t.complete and t.prompt_tokens is None and t.gen_tokens == 30


def test_unreadable_numbers_are_counted_not_fatal():
    parser = TimingParser()
    lines = [
        _head(0, 1) + "prompt eval time =        nan ms /    12 tokens (x)",
        _head(0, 1) + "       eval time = 12,5 ms / 3 tokens",
    ]
    out = [t for line in lines for t in parser.feed(log_messages(line), line)]
    out += parser.finish()
    assert out == [] and parser.malformed == 2


def test_non_finite_rates_in_parentheses_are_fine():
    line = _head(0, 1) + (
        "prompt eval time =       0.00 ms /     0 tokens (    -nan ms per token,      inf tokens"
        " per second)"
    )
    [t] = parse_timings([line, eval_line(0, 1, 1, 0.0)])
    assert (t.prompt_tokens, t.prompt_ms, t.gen_tokens, t.gen_ms) == (0, 0.0, 1, 0.0)
    assert t.complete


def test_pre_2025_multiline_layout():
    timings = list(parse_timings(read_log_lines(DATA / "legacy-multiline.log")))
    assert [(t.task, t.prompt_tokens, t.gen_tokens, t.complete) for t in timings] == [
        (0, 11, 53, True),
        (54, 2432, 400, True),
    ]


def test_log_jsonl_records():
    msg = prompt_line(0, 9, 64, 32.0) + "\n"
    lines = [
        json.dumps({"type": "log", "time": 1, "level": "info", "msg": msg}),
        json.dumps({"type": "log", "time": 2, "level": "info", "msg": eval_line(0, 9, 8, 80.0)}),
        '{"type": "log", "msg": ',  # broken JSON: ignored
    ]
    [t] = parse_timings(lines)
    assert (t.prompt_tokens, t.gen_tokens, t.complete) == (64, 8, True)


# ------------------------------------------------------------------------------------------
# Round trip: random traffic rendered, mixed and parsed back
# ------------------------------------------------------------------------------------------

requests_st = st.lists(
    st.tuples(
        st.integers(0, 3),  # slot
        st.integers(0, 200_000),  # prompt tokens
        st.floats(0, 2e6, allow_nan=False, allow_infinity=False),  # prompt ms
        st.integers(0, 5000),  # generated tokens
        st.floats(0, 2e6, allow_nan=False, allow_infinity=False),  # eval ms
    ),
    max_size=25,
)


garbage_st = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e"),
    max_size=60,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=requests_st, cut=st.booleans(), data=st.data())
def test_round_trip_counts_and_sums(requests, cut, data):
    queues: dict[int, list[str]] = {}
    expected: dict[tuple[int, int], tuple[int, float, int, float]] = {}
    for task, (slot, p_tok, p_ms, g_tok, g_ms) in enumerate(requests):
        task_id = task * 7 + 3
        expected[(slot, task_id)] = (p_tok, p_ms, g_tok, g_ms)
        queues.setdefault(slot, []).extend(block(slot, task_id, p_tok, p_ms, g_tok, g_ms))
    lines: list[str] = []
    cursors = dict.fromkeys(queues, 0)
    while cursors:
        slot = data.draw(st.sampled_from(sorted(cursors)))
        lines.append(data.draw(st.sampled_from(PREFIXES)) + queues[slot][cursors[slot]])
        cursors[slot] += 1
        if cursors[slot] == len(queues[slot]):
            del cursors[slot]
        if data.draw(st.booleans()):
            noise = data.draw(st.sampled_from(NOISE) | garbage_st)
            lines.append(data.draw(st.sampled_from(PREFIXES)) + noise)
    if cut:
        lines.append(prompt_line(9, 10**6, 4321, 1.5))

    timings = list(parse_timings(lines))

    complete = {(t.slot, t.task): t for t in timings if t.complete}
    incomplete = [t for t in timings if not t.complete]
    assert len(complete) == sum(1 for t in timings if t.complete)  # no duplicates
    assert set(complete) == set(expected)
    assert [(t.slot, t.task) for t in incomplete] == ([(9, 10**6)] if cut else [])
    for key, (p_tok, p_ms, g_tok, g_ms) in expected.items():
        t = complete[key]
        assert (t.prompt_tokens, t.gen_tokens) == (p_tok, g_tok)
        assert t.prompt_ms == pytest.approx(p_ms, abs=0.0051)
        assert t.gen_ms == pytest.approx(g_ms, abs=0.0051)
    n = len(expected)
    assert sum(t.prompt_tokens or 0 for t in complete.values()) == sum(
        e[0] for e in expected.values()
    )
    assert sum(t.gen_tokens or 0 for t in complete.values()) == sum(e[2] for e in expected.values())
    assert sum(t.prompt_ms or 0 for t in complete.values()) == pytest.approx(
        sum(e[1] for e in expected.values()), abs=0.0051 * n + 1e-6
    )
    assert sum(t.gen_ms or 0 for t in complete.values()) == pytest.approx(
        sum(e[3] for e in expected.values()), abs=0.0051 * n + 1e-6
    )

    stats = traffic_stats(timings)
    assert stats.requests == n and stats.incomplete == (1 if cut else 0)
    big = [e for e in expected.values() if e[0] >= 256]
    assert stats.prefill.n == len(big)
    assert stats.prefill.tokens == sum(e[0] for e in big)
    assert stats.prefill.ms == pytest.approx(sum(e[1] for e in big), abs=0.0051 * n + 1e-6)


# ------------------------------------------------------------------------------------------
# Traffic statistics and the table
# ------------------------------------------------------------------------------------------


def _req(task: int, p_tok: int, p_ms: float, g_tok: int, g_ms: float) -> RequestTiming:
    return RequestTiming(0, task, p_tok, p_ms, g_tok, g_ms, complete=True)


def test_aggregate_is_sum_over_sum_not_mean_of_rates():
    timings = [
        _req(1, 1000, 10_000.0, 100, 10_000.0),  # 100 tok/s prefill, 10 tok/s decode
        _req(2, 300, 1_000.0, 40, 1_000.0),  # 300 tok/s prefill, 40 tok/s decode
        _req(3, 255, 1.0, 31, 1.0),  # below both thresholds
        _req(4, 5000, 20_000.0, 32, 2_000.0),  # large prefill, decode at the threshold
    ]
    s = traffic_stats(timings)
    assert s.requests == 4 and s.incomplete == 0
    assert s.prefill.n == 3
    assert s.prefill.tok_per_s == pytest.approx(6300 / 31.0 * 1000 / 1000)
    assert s.prefill.tok_per_s != pytest.approx((100 + 300 + 250) / 3)
    assert (s.prefill_large.n, s.prefill_large.tok_per_s) == (1, pytest.approx(250.0))
    assert s.decode.n == 3
    assert s.decode.tok_per_s == pytest.approx(172 / 13.0)
    assert s.decode_median == pytest.approx(statistics.median([10.0, 40.0, 16.0]))


def test_thresholds_are_inclusive_and_configurable():
    timings = [_req(1, 100, 100.0, 10, 100.0), _req(2, 99, 1.0, 9, 1.0)]
    s = traffic_stats(timings, prefill_min=100, prefill_large_min=100, decode_min=10)
    assert (s.prefill.n, s.prefill_large.n, s.decode.n) == (1, 1, 1)
    with pytest.raises(ValueError):
        traffic_stats(timings, decode_min=-1)


def test_incomplete_blocks_are_left_out_and_noted():
    timings = [_req(1, 400, 100.0, 40, 100.0), RequestTiming(1, 2, 9000, 1.0, None, None)]
    s = traffic_stats(timings)
    assert (s.requests, s.incomplete, s.prefill.n, s.prefill_large.n) == (1, 1, 1, 0)
    assert any("incomplete" in note for note in s.notes)


def test_no_requests_gives_n_zero_and_a_note():
    s = traffic_stats([])
    assert (s.requests, s.prefill.n, s.decode.n, s.decode_median) == (0, 0, 0, None)
    assert s.prefill.tok_per_s is None
    assert any("no completed requests" in note for note in s.notes)


def test_adr_like_table():
    """Traffic built to give ADR-0042's figures reproduces them, sum/sum per row."""
    # legacy: 100 large prefills at 113.3 tok/s, 501 at 1,000 tokens, 446 small prompts;
    # decode: 524 requests at 14.28 tok/s, 523 at 13.00 tok/s
    prompts = [(5000, 44130.63)] * 100 + [(1000, 11810.73)] * 501 + [(100, 1000.0)] * 446
    gens = [(1428, 100_000.0)] * 524 + [(1300, 100_000.0)] * 523
    legacy = [_req(i, *p, *g) for i, (p, g) in enumerate(zip(prompts, gens, strict=True))]
    # new: 1 large prefill at 242.0 tok/s, 21 at 2,000 tokens, 21 small prompts;
    # decode: 22 requests at 14.62 tok/s, 21 at 14.58 tok/s
    prompts = [(4840, 20_000.0)] + [(2000, 9255.5)] * 21 + [(100, 1000.0)] * 21
    gens = [(1462, 100_000.0)] * 22 + [(1458, 100_000.0)] * 21
    new = [_req(i, *p, *g) for i, (p, g) in enumerate(zip(prompts, gens, strict=True))]

    table = format_traffic_table({"legacy": traffic_stats(legacy), "new": traffic_stats(new)})

    lines = table.splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == ["metric", "legacy", "new"]
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:4]] for r in lines[2:6]}
    assert rows == {
        "prefill, requests with ≥256 new tokens, aggregate": [
            "96.9 tok/s (n=601)",
            "218.5 tok/s (n=22)",
        ],
        "prefill, requests with ≥4,000 new tokens, aggregate": [
            "113.3 tok/s (n=100)",
            "242.0 tok/s (n=1)",
        ],
        "decode, requests with ≥32 generated, aggregate": [
            "13.64 tok/s (n=1,047)",
            "14.60 tok/s (n=43)",
        ],
        "decode, median": ["14.28 tok/s", "14.62 tok/s"],
    }
    assert len({len(line) for line in lines[:6]}) == 1  # aligned columns
    assert len(lines) == 6  # no notes


def test_table_notes_and_threshold_mismatch():
    table = format_traffic_table(
        {"a.log": traffic_stats([]), "b.log": traffic_stats([], decode_min=1)}
    )
    assert "- a.log: no completed requests" in table
    assert "- b.log: thresholds 256/4000/1 differ" in table
    assert format_traffic_table({}) == ""


# ------------------------------------------------------------------------------------------
# Files: plain, compressed, rotated, not a log
# ------------------------------------------------------------------------------------------


def _lines(n0: int, n: int) -> list[str]:
    return [x for i in range(n0, n0 + n) for x in block(i % 2, i, 300 + i, 100.0, 40, 400.0)]


def test_read_plain_gzip_bz2_xz_by_magic_not_name(tmp_path):
    text = "\n".join(_lines(0, 3)) + "\n"
    files = {
        "plain.gz": text.encode(),  # a name that lies
        "gz.log": gzip.compress(text.encode()),
        "bz.1": bz2.compress(text.encode()),
        "xz": lzma.compress(text.encode()),
        "crlf.log": text.replace("\n", "\r\n").encode(),
    }
    for name, payload in files.items():
        (tmp_path / name).write_bytes(payload)
        assert list(read_log_lines(tmp_path / name)) == text.splitlines(), name
        parsed = parse_log_files([tmp_path / name])
        assert [t.task for t in parsed.timings] == [0, 1, 2]


def test_undecodable_bytes_do_not_stop_reading(tmp_path):
    p = tmp_path / "latin1.log"
    p.write_bytes(b"srv  load_model: caf\xe9 \xff\n" + "\n".join(_lines(0, 1)).encode())
    assert [t.task for t in parse_log_files([p]).timings] == [0]


def test_rotated_series_order_and_a_block_split_across_rotation(tmp_path):
    log = tmp_path / "server.log"
    first, second = _lines(0, 2), _lines(2, 2)
    split = block(0, 99, 5000, 9000.0, 64, 3000.0)
    (tmp_path / "server.log.2.gz").write_bytes(gzip.compress("\n".join(first).encode()))
    # logrotate's delaycompress names: ".1" plain, and a gzip ".3" without suffix
    (tmp_path / "server.log.1").write_text("\n".join([*second, split[0]]) + "\n")
    (tmp_path / "server.log.3").write_bytes(gzip.compress(b"srv  load_model: oldest\n"))
    log.write_text("\n".join(split[1:]) + "\n")
    (tmp_path / "server.log.bak").write_text("not part of the series")
    (tmp_path / "server.logger").write_text("not part of the series")
    series = rotated_series(log)
    assert [p.name for p in series] == [
        "server.log.3",
        "server.log.2.gz",
        "server.log.1",
        "server.log",
    ]
    parsed = parse_log_files(series)
    assert [(t.task, t.complete) for t in parsed.timings] == [
        (0, True),
        (1, True),
        (2, True),
        (3, True),
        (99, True),
    ]
    # the current file alone: the split block is missing its prompt line
    alone = parse_log_files([log]).timings
    assert [(t.task, t.complete) for t in alone] == [(99, False)]


def test_rotated_series_by_date(tmp_path):
    log = tmp_path / "s.log"
    for name in ["s.log-20261017.gz", "s.log-20261001", "s.log"]:
        (tmp_path / name).write_text("srv  x: y\n")
    assert [p.name for p in rotated_series(log)] == ["s.log-20261001", "s.log-20261017.gz", "s.log"]


def test_non_log_file_is_a_clear_error(tmp_path):
    with pytest.raises(LogError) as e:
        parse_log_files([DATA / "not-a-log.csv"])
    assert str(e.value) == (
        f"{DATA / 'not-a-log.csv'} does not look like a llama-server log "
        "(no print_timing or server lines in 3 lines)"
    )
    assert isinstance(e.value, MoeperfError)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    with pytest.raises(LogError, match=r"empty\.log does not look .* in 0 lines\)"):
        parse_log_files([empty])
    binary = tmp_path / "model.gguf"
    binary.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(range(256)) * 10)
    with pytest.raises(LogError, match="binary data"):
        parse_log_files([binary])


def test_a_non_log_among_logs_is_named(tmp_path):
    good = tmp_path / "server.log"
    good.write_text("\n".join(_lines(0, 1)))
    with pytest.raises(LogError, match=r"not-a-log\.csv does not look"):
        parse_log_files([good, DATA / "not-a-log.csv"])


def test_unreadable_and_corrupt_files(tmp_path):
    with pytest.raises(LogError, match=r"cannot read .*missing\.log"):
        parse_log_files([tmp_path / "missing.log"])
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(gzip.compress(("\n".join(_lines(0, 50)) + "\n").encode())[:-30])
    with pytest.raises(LogError, match="truncated or corrupt"):
        parse_log_files([cut])
    zst = tmp_path / "z.log"
    zst.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 10)
    with pytest.raises(LogError, match="zstd"):
        parse_log_files([zst])


def test_server_log_without_requests_is_an_empty_table():
    parsed = parse_log_files([DATA / "no-requests-b11434.log"])
    assert parsed.timings == () and parsed.lines == 11 and parsed.server_lines == 11
    s = traffic_stats(parsed.timings)
    assert s.requests == 0 and s.notes
    table = format_traffic_table({"no-requests": s})
    assert "— (n=0)" in table and "no completed requests" in table


# ------------------------------------------------------------------------------------------
# Startup warnings
# ------------------------------------------------------------------------------------------

# The exact texts in llama.cpp b11434's source, formatted as it would print them.
WARNING_SAMPLES = {
    "mmap-tensor-overrides": "W llama_model_loader: tensor overrides to CPU are used with mmap "
    "enabled - consider using --load-mode none for better performance",
    "numa-balancing": "W /proc/sys/kernel/numa_balancing is enabled, this has been observed to "
    "impair performance",
    "op-device-mismatch": "W llama_context: layer 12 is assigned to device CUDA0 but Flash "
    "Attention is assigned to device CPU (usually due to missing support)",
    "fused-op-disabled": "W llama_context: Flash Attention not supported, set to disabled",
    "cpu-buffer-fallback": "D load_tensors: tensor 'token_embd.weight' (q4_K) (and 47 others) "
    "cannot be used with preferred buffer type CUDA_Host, using CPU instead",
    "pinned-memory-failed": "ggml_backend_cuda_host_buffer_type_alloc_buffer: failed to allocate "
    "76032.00 MiB of pinned memory: out of memory",
    "mlock-failed": "W warning: failed to mlock 1048576-byte buffer (after previously locking 0 "
    "bytes): Cannot allocate memory",
    "buffered-io-fallback": "W load_all_data: Falling back to buffered IO due to Invalid argument",
    "no-tensor-cores": "The following devices will have suboptimal performance due to a lack of "
    "tensor cores:",
    "cache-reuse-disabled": "W srv    load_model: cache_reuse is not supported by this context, "
    "it will be disabled",
    "speculative-unsupported": "W srv    load_model: speculative decoding not supported by this "
    "context",
    "graph-reuse-disabled": "W llama_context: graph reuse disabled",
    "kv-cache-retry": "W srv  update_slots: failed to find free space in the KV cache, retrying "
    "with smaller batch size, off = 0, n_batch = 1024, ret = 1",
    "op-not-supported": "E ggml_backend_cuda_graph_compute: op not supported blk.3.ffn (MUL_MAT)",
    "falling-back": "W ggml_sycl_op_flash_attn: oneDNN did not fuse the SDPA graph; falling back "
    "to TILE kernel",
}


def test_warning_table_is_well_formed():
    ids = [w.id for w in STARTUP_WARNINGS]
    assert len(ids) == len(set(ids))
    assert set(ids) == set(WARNING_SAMPLES)
    for w in STARTUP_WARNINGS:
        assert w.advice and w.regex


@pytest.mark.parametrize(("wid", "line"), sorted(WARNING_SAMPLES.items()))
def test_each_warning_text_is_recognised(wid, line):
    prefixed = "0.00.029.064 " + line
    [finding] = scan_startup(f"srv  x: before\n{prefixed}\nsrv  x: after\n")
    assert (finding.id, finding.line_no, finding.line, finding.count) == (wid, 2, prefixed, 1)
    assert finding.advice == next(w.advice for w in STARTUP_WARNINGS if w.id == wid)


def test_findings_are_deduplicated_per_id_with_first_line_and_count():
    findings = scan_startup((DATA / "startup-warnings.log").read_text())
    assert [(f.id, f.line_no, f.count) for f in findings] == [
        ("numa-balancing", 2, 2),
        ("mmap-tensor-overrides", 4, 2),
        ("op-device-mismatch", 5, 1),
        ("fused-op-disabled", 6, 1),
    ]
    assert "--load-mode none" in findings[1].advice


def test_no_false_positives_on_a_real_log():
    findings = scan_startup((DATA / "real-b11434.log").read_text())
    assert [(f.id, f.line_no) for f in findings] == [("mmap-tensor-overrides", 5)]
    assert scan_startup("\n".join(NOISE)) == []


def test_parse_log_files_reports_findings_with_path():
    parsed = parse_log_files([DATA / "startup-warnings.log"])
    assert parsed.findings[0].path == str(DATA / "startup-warnings.log")
    assert [t.task for t in parsed.timings] == [0]


# ------------------------------------------------------------------------------------------
# The real server log (llama-server b11434, see real-b11434.client-timings.json)
# ------------------------------------------------------------------------------------------


def test_real_log_matches_the_clients_timings():
    doc = json.loads((DATA / "real-b11434.client-timings.json").read_text())
    client = doc["timings"]
    parsed = parse_log_files([DATA / "real-b11434.log"])
    assert parsed.malformed == 0
    assert all(t.complete for t in parsed.timings)
    assert sorted((t.prompt_tokens, t.gen_tokens) for t in parsed.timings) == sorted(
        (c["prompt_n"], c["predicted_n"]) for c in client
    )
    for thresholds in [(256, 4000, 32), (0, 3000, 1), (1000, 1000, 100)]:
        s = traffic_stats(
            parsed.timings,
            prefill_min=thresholds[0],
            prefill_large_min=thresholds[1],
            decode_min=thresholds[2],
        )
        pre = [c for c in client if c["prompt_n"] >= thresholds[0]]
        large = [c for c in client if c["prompt_n"] >= thresholds[1]]
        dec = [c for c in client if c["predicted_n"] >= thresholds[2]]
        assert s.prefill.n == len(pre) and s.prefill_large.n == len(large)
        assert s.decode.n == len(dec)
        assert s.prefill.tokens == sum(c["prompt_n"] for c in pre)
        assert s.prefill.ms == pytest.approx(sum(c["prompt_ms"] for c in pre), abs=0.005 * 8)
        assert s.decode.tokens == sum(c["predicted_n"] for c in dec)
        assert s.decode.ms == pytest.approx(sum(c["predicted_ms"] for c in dec), abs=0.005 * 8)
        rates = [c["predicted_n"] * 1000 / c["predicted_ms"] for c in dec]
        assert s.decode_median == pytest.approx(statistics.median(rates), rel=1e-4)


# ------------------------------------------------------------------------------------------
# moeperf logstats
# ------------------------------------------------------------------------------------------


def test_logstats_table_and_warnings(capsys):
    rc = logstats([str(DATA / "real-b11434.log"), str(DATA / "no-requests-b11434.log")])
    out = capsys.readouterr().out
    assert rc == 3  # two logs are compared, and one without requests decides nothing
    header = out.splitlines()[0]
    assert [c.strip() for c in header.strip("|").split("|")] == [
        "metric",
        "real-b11434.log",
        "no-requests-b11434.log",
    ]
    assert "211.3 tok/s (n=6)" in out
    assert "— (n=0)" in out
    assert "no-requests-b11434.log: no completed requests" in out
    assert "warning mmap-tensor-overrides at" in out and "--load-mode none" in out


def test_logstats_json(capsys):
    rc = logstats([str(DATA / "real-b11434.log"), "--json", "--prefill-large-min", "3000"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    entry = doc["real-b11434.log"]
    assert entry["stats"]["prefill"]["n"] == 6
    assert entry["stats"]["prefill_large"]["n"] == 1
    assert entry["stats"]["thresholds"]["prefill_large_min"] == 3000
    assert math.isclose(entry["stats"]["prefill"]["tok_per_s"], 6700 / 31.70298, rel_tol=1e-3)
    assert entry["startup_findings"][0]["id"] == "mmap-tensor-overrides"


def test_logstats_errors_are_one_line_and_exit_2(capsys, tmp_path):
    rc = logstats([str(DATA / "not-a-log.csv")])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == (
        f"moeperf logstats: error: {DATA / 'not-a-log.csv'} does not look like a llama-server "
        "log (no print_timing or server lines in 3 lines)\n"
    )
    assert logstats([str(tmp_path / "nope.log")]) == 2
    assert capsys.readouterr().err.startswith("moeperf logstats: error: cannot read ")
    assert logstats(["x.log", "--decode-min", "-3"]) == 2
    assert "moeperf logstats: error:" in capsys.readouterr().err
    assert logstats([]) == 2


def test_logstats_same_file_names_get_distinct_labels(capsys, tmp_path):
    for d in ("legacy", "new"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "server.log").write_text("\n".join(_lines(0, 1)))
    rc = logstats([str(tmp_path / "legacy" / "server.log"), str(tmp_path / "new" / "server.log")])
    header = capsys.readouterr().out.splitlines()[0]
    assert rc == 3  # two logs are compared: one request each decides nothing
    assert str(tmp_path / "legacy" / "server.log") in header
    assert str(tmp_path / "new" / "server.log") in header


def test_logstats_rotated(capsys, tmp_path):
    log = tmp_path / "server.log"
    (tmp_path / "server.log.1").write_text("\n".join(_lines(0, 2)))
    log.write_text("\n".join(_lines(2, 1)))
    logstats([str(log), "--json", "--prefill-min", "0"])
    assert json.loads(capsys.readouterr().out)["server.log"]["stats"]["requests"] == 1
    logstats([str(log), "--json", "--rotated", "--prefill-min", "0"])
    doc = json.loads(capsys.readouterr().out)["server.log"]
    assert doc["stats"]["requests"] == 3
    assert doc["paths"] == [str(tmp_path / "server.log.1"), str(log)]


def test_logstats_reads_a_legacy_multiline_log(capsys):
    assert logstats([str(DATA / "legacy-multiline.log"), "--decode-min", "50"]) == 0
    out = capsys.readouterr().out
    assert "decode, requests with ≥50 generated, aggregate" in out
    assert "14.51 tok/s (n=2)" in out  # (53 + 400) tokens / (1.21907 + 30) s


def test_a_timestamped_log_gives_a_mix_with_arrival_gaps(tmp_path, capsys):
    from pytest_moeperf.commands import main
    from pytest_moeperf.llama.logs import mix_of
    from pytest_moeperf.measure.mix import Mix

    def stamp(seconds: float) -> str:
        minutes, rest = divmod(seconds, 60)
        whole = int(rest)
        ms, us = divmod(round((rest - whole) * 1e6), 1000)
        return f"{int(minutes)}.{whole:02d}.{ms:03d}.{us:03d} I "

    # request 7 arrives at 10.0 s (prompt 0.5 s + eval 1.5 s, logged at 12.0 s), request 8
    # at 10.75 s on the other slot (logged at 11.5 s: it finished first), request 9 at 70.5 s
    lines = [
        stamp(11.25) + prompt_line(1, 8, 64, 250.0),
        stamp(11.5) + eval_line(1, 8, 16, 500.0),
        stamp(10.5) + prompt_line(0, 7, 512, 500.0),
        stamp(12.0) + eval_line(0, 7, 40, 1500.0),
        stamp(70.5) + prompt_line(0, 9, 0, 0.0),
        stamp(71.0) + eval_line(0, 9, 8, 500.0),
    ]
    timings = list(parse_timings(lines))
    ends = {t.task: t.end_s for t in timings}
    assert ends == {7: pytest.approx(12.0), 8: pytest.approx(11.5), 9: pytest.approx(71.0)}
    mix, notes = mix_of(timings, "prod.log")
    assert [(s.prompt, s.gen) for s in mix.shapes] == [(512, 40), (64, 16), (1, 8)]
    gaps = [s.gap_ms for s in mix.shapes]
    assert gaps[0] == 0.0 and gaps[1] == pytest.approx(750.0) and gaps[2] == pytest.approx(59750.0)
    assert notes == ["1 request(s) with 0 new prompt or 0 generated tokens sent as 1"]
    # without timestamps: log order, no gaps, said so
    plain = parse_timings([prompt_line(0, 1, 300, 100.0), eval_line(0, 1, 40, 400.0)])
    mix2, notes2 = mix_of(plain, "x.log")
    assert not mix2.has_gaps and "no timestamps" in notes2[0]
    # the command writes it
    log = tmp_path / "prod.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "mix.json"
    assert main(["logstats", str(log), "--mix", str(out)]) == 0
    assert "3 request shape(s)" in capsys.readouterr().err
    assert Mix.load(out).shapes == mix.shapes
    assert main(["logstats", str(log), str(log), "--mix", str(out)]) == 2
    assert "--mix writes the mix of one log; 2 were given" in capsys.readouterr().err
