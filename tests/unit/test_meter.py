"""Request shapes and sample checks (no server: the replies are hand-made)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_moeperf.errors import MeasurementError
from pytest_moeperf.measure.meter import FIRST_ID, build_requests, prompt_ids, sample_from
from pytest_moeperf.measure.stats import summarize
from pytest_moeperf.measure.workload import Workload

workloads = st.one_of(
    st.builds(Workload, st.just("pp"), st.integers(1, 4096), st.integers(0, 8192)),
    st.builds(Workload, st.just("tg"), st.integers(2, 4096), st.integers(0, 8192)),
)


@given(workloads, st.integers(0, 10_000), st.integers(FIRST_ID + 2, 200_000))
def test_requests_ask_for_exactly_the_workload(w, seed, vocab):
    reqs = build_requests(w, seed=seed, vocab=vocab)
    timed = reqs[-1]
    ids = timed.body["prompt"]
    assert all(FIRST_ID <= i < vocab for i in ids)
    if w.is_prefill:
        assert timed.expect_prompt_n == w.tokens
        assert len(ids) == w.depth + w.tokens
        assert timed.body["cache_prompt"] is (w.depth > 0)
        if w.depth:
            assert reqs[0].body["prompt"] == ids[: w.depth]
    else:
        assert timed.body["n_predict"] == w.tokens and timed.body["ignore_eos"] is True
        assert timed.expect_predicted_n == w.tokens
        assert len(ids) == max(w.depth, 1) and timed.body["cache_prompt"] is False


def test_repetitions_get_distinct_prompts():
    a = prompt_ids(512, seed=1, vocab=4096)
    b = prompt_ids(512, seed=2, vocab=4096)
    assert a != b and a[:4] != b[:4]
    assert prompt_ids(512, seed=1, vocab=4096) == a


def test_workload_names_are_llama_bench_names():
    assert Workload.parse("tg128 @ d8192").name == "tg128 @ d8192"
    assert Workload.parse("tg128@d8192") == Workload("tg", 128, 8192)
    assert Workload.parse("pp2048").name == "pp2048"
    with pytest.raises(Exception, match="not a llama-bench name"):
        Workload.parse("prefill")


def _reply(prompt_n=512, prompt_ms=800.0, predicted_n=1, predicted_ms=10.0):
    return {
        "timings": {
            "prompt_n": prompt_n,
            "prompt_ms": prompt_ms,
            "predicted_n": predicted_n,
            "predicted_ms": predicted_ms,
        },
        "stop_type": "eos",
        "tokens_evaluated": prompt_n,
    }


def test_prefill_sample_from_timings():
    w = Workload.parse("pp512")
    req = build_requests(w, seed=0, vocab=4096)[-1]
    s = sample_from(w, req, _reply())
    assert s.tokens == 512 and s.tok_per_s == pytest.approx(640.0)


def test_prefix_cache_hit_is_named():
    w = Workload.parse("pp512")
    req = build_requests(w, seed=0, vocab=4096)[-1]
    with pytest.raises(MeasurementError, match=r"prompt_n=12 tokens, expected 512.*prefix cache"):
        sample_from(w, req, _reply(prompt_n=12))


def test_early_stop_is_named():
    w = Workload.parse("tg64")
    req = build_requests(w, seed=0, vocab=4096)[-1]
    with pytest.raises(MeasurementError, match=r"predicted_n=10 tokens, expected 64.*early stop"):
        sample_from(w, req, _reply(prompt_n=1, predicted_n=10))


def test_missing_timings_is_named():
    w = Workload.parse("tg64")
    req = build_requests(w, seed=0, vocab=4096)[-1]
    with pytest.raises(MeasurementError, match="no 'timings'"):
        sample_from(w, req, {"content": "x"})


@given(st.lists(st.floats(1, 1e5), min_size=1, max_size=50))
def test_summary_is_ordered(values):
    s = summarize(values)
    assert s.min <= s.median <= s.max
    assert 0 <= s.mad <= s.max - s.min
    assert s.n == len(values)


def test_decode_rate_counts_decode_steps():
    """predicted_ms spans M - 1 decode steps: tg64 in 630 ms is 100 tok/s, like llama-bench."""
    w = Workload.parse("tg64")
    req = build_requests(w, seed=0, vocab=4096)[-1]
    s = sample_from(w, req, _reply(prompt_n=1, predicted_n=64, predicted_ms=630.0))
    assert s.tok_per_s == pytest.approx(100.0)


def test_tg1_has_no_decode_step():
    with pytest.raises(MeasurementError, match="at least 2 generated tokens"):
        build_requests(Workload.parse("tg1"), seed=0, vocab=4096)


def test_a_sample_of_several_requests_sums_their_tokens_and_times():
    from pytest_moeperf.measure.measurement import Sample
    from pytest_moeperf.measure.meter import Meter

    seeds: list[int] = []

    class Counted(Meter):
        def run_once(self, workload: Workload, seed: int) -> Sample:
            seeds.append(seed)
            return Sample(64, 10.0 + len(seeds))

    meter = Counted("http://127.0.0.1:9", vocab=4096)
    try:
        m = meter.measure(
            Workload.parse("pp64"), configuration="c", build="b", repetitions=2,
            warmup=False, requests_per_sample=3,
        )  # fmt: skip
    finally:
        meter.close()
    assert [s.tokens for s in m.samples] == [192, 192]
    assert [s.ms for s in m.samples] == [11 + 12 + 13, 14 + 15 + 16]
    assert len(set(seeds)) == 6  # every request its own prompt
    with pytest.raises(ValueError, match="requests_per_sample"):
        meter.measure(Workload.parse("pp64"), configuration="c", build="b", requests_per_sample=0)
