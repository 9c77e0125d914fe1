"""Traffic arithmetic and inputs: mixes, percentiles, a pass's samples, counters, names.

No server here: passes are built from records as the sender fills them. The integration tests
send real traffic to a real llama-server (tests/integration/test_traffic_live.py).
"""

from __future__ import annotations

import json

import pytest

from pytest_moeperf.config.profiles import parse_profiles, traffic_of
from pytest_moeperf.errors import ConfigError
from pytest_moeperf.measure.measurement import Measurement
from pytest_moeperf.measure.mix import Mix, Shape
from pytest_moeperf.measure.traffic import (
    Pass,
    RequestRecord,
    Traffic,
    TrafficRun,
    arrival_times,
    counter_deltas,
    parse_prometheus,
    request_body,
)
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.verdicts.claims import Claim

MIX = Mix((Shape(100, 10), Shape(50, 20)), "test")


def record(
    i: int,
    *,
    ttft: float,
    e2e: float,
    itl: list[float],
    pn: int,
    pms: float,
    gn: int,
    gms: float,
    error: str | None = None,
) -> RequestRecord:
    r = RequestRecord(
        i,
        MIX.shape(i),
        ttft_ms=ttft,
        e2e_ms=e2e,
        itl_ms=itl,
        prompt_n=pn,
        prompt_ms=pms,
        predicted_n=gn,
        predicted_ms=gms,
        error=error,
    )
    return r


def test_a_pass_sums_tokens_over_time_and_takes_percentiles_of_answered_requests():
    records = [
        record(0, ttft=100, e2e=400, itl=[10, 30], pn=100, pms=200, gn=10, gms=300),
        record(1, ttft=300, e2e=900, itl=[20], pn=50, pms=50, gn=20, gms=600),
        record(2, ttft=0, e2e=0, itl=[], pn=0, pms=0, gn=0, gms=0, error="HTTP 503: busy"),
    ]
    p = Pass(records, wall_ms=1000.0, traffic=Traffic(MIX, concurrency=2, requests=3))
    assert p.errors == 1
    prefill = p.sample(Workload.traffic("prefill"))
    assert (prefill.tokens, prefill.ms) == (150, 250)  # 600 tok/s, not the mean of 500 and 1000
    assert prefill.tok_per_s == pytest.approx(600.0)
    decode = p.sample(Workload.traffic("decode"))
    assert decode.tok_per_s == pytest.approx(30 * 1000 / 900)
    assert p.sample(Workload.traffic("requests")).tok_per_s == pytest.approx(2.0)
    assert p.sample(Workload.traffic("ttft_p50")).ms == pytest.approx(200.0)
    assert p.sample(Workload.traffic("itl_p50")).ms == pytest.approx(20.0)  # over every gap
    assert p.sample(Workload.traffic("e2e_p99")).ms == pytest.approx(895.0)
    fig = p.figures()
    assert fig["errors"] == 1 and fig["requests"] == 3 and fig["ttft_p90"] == pytest.approx(280)
    assert fig["goodput_rps"] == pytest.approx(2.0)  # no targets: every answered request


def test_goodput_counts_requests_within_the_targets():
    records = [
        record(0, ttft=100, e2e=400, itl=[10], pn=100, pms=200, gn=10, gms=300),
        record(1, ttft=300, e2e=900, itl=[20], pn=50, pms=50, gn=20, gms=600),
    ]
    t = Traffic(MIX, requests=2, ttft_target_ms=200)
    assert Pass(records, 2000.0, t).good == 1
    assert Pass(records, 2000.0, t).goodput == pytest.approx(0.5)
    both = Traffic(MIX, requests=2, ttft_target_ms=500, e2e_target_ms=500)
    assert Pass(records, 2000.0, both).good == 1


def test_a_latency_measurement_is_in_milliseconds_and_lower_is_better():
    w = Workload.parse("traffic.ttft_p99")
    assert w.name == "traffic.ttft_p99" and not w.higher_is_better and w.unit == "ms"
    p = Pass(
        [record(0, ttft=120, e2e=400, itl=[10], pn=100, pms=200, gn=10, gms=300)],
        500.0,
        Traffic(MIX, requests=1),
    )
    m = Measurement("traffic", "b1", w, (p.sample(w),))
    assert m.values == [pytest.approx(120.0)]
    rate = Workload.parse("traffic.decode")
    assert rate.higher_is_better and rate.unit == "tok/s"
    with pytest.raises(ConfigError, match="is a latency"):
        w.require_rate("the gate")
    assert rate.require_rate("the gate") is rate


def test_no_value_for_itl_when_no_request_generated_two_tokens():
    mix = Mix((Shape(10, 1),), "t")
    r = RequestRecord(
        0,
        mix.shape(0),
        ttft_ms=5.0,
        e2e_ms=6.0,
        prompt_n=10,
        prompt_ms=4.0,
        predicted_n=1,
        predicted_ms=1.0,
    )
    assert Pass([r], 10.0, Traffic(mix, requests=1)).sample(Workload.traffic("itl_p50")) is None


@pytest.mark.parametrize(
    "name, error",
    [
        ("traffic.speed", "traffic has no metric 'speed'"),
        ("traffic", "not a llama-bench name or a traffic metric"),
        ("traffic.ttft_p95", "traffic has no metric 'ttft_p95'"),
    ],
)
def test_unknown_traffic_metrics_are_named(name, error):
    with pytest.raises(ConfigError, match=error):
        Workload.parse(name)


def test_claims_name_traffic_metrics():
    c = Claim.parse("lm-none.traffic.prefill >= 2.0 * mmap.traffic.prefill")
    assert c.left.configuration == "lm-none" and c.left.workload == Workload.traffic("prefill")
    assert str(c.right) == "mmap.traffic.prefill"
    assert c.left.id == "lm-none.traffic.prefill"
    c = Claim.parse("traffic.traffic.ttft_p99 <= 1.5 * mmap[b11053].traffic.ttft_p99")
    assert c.left.configuration == "traffic" and c.right.build == "b11053"
    assert Claim.parse("a.tg64@d512 <= 0.9 * a.tg64").left.id == "a.tg64-d512"


def test_mix_items_and_files(tmp_path):
    mix = Mix.from_items(
        [[512, 64], {"prompt": 100, "gen": 5, "cached": 50, "gap_ms": 12.5}], "here"
    )
    assert mix.shapes[1] == Shape(100, 5, 50, 12.5)
    path = tmp_path / "mix.json"
    path.write_text(json.dumps(mix.to_dict()))
    assert Mix.load(path).shapes == mix.shapes
    path.write_text('{"requests": []}')
    with pytest.raises(ConfigError, match=r"not a mix file.*moeperf logstats"):
        Mix.load(path)
    with pytest.raises(ConfigError, match="cannot read it"):
        Mix.load(tmp_path / "missing.json")
    with pytest.raises(ConfigError, match=r"request 2 .*not a whole number"):
        Mix.from_items([[1, 2], [1.5, 2]], "here")
    with pytest.raises(ConfigError, match="cached between 0 and prompt - 1"):
        Mix.from_items([{"prompt": 10, "gen": 2, "cached": 10}], "here")
    with pytest.raises(ConfigError, match="unknown key"):
        Mix.from_items([{"prompt": 10, "gen": 2, "speed": 1}], "here")
    with pytest.raises(ConfigError, match="has no requests"):
        Mix.from_items([], "here")


def test_request_bodies_are_fresh_random_tokens_unless_the_shape_says_cached():
    a = request_body(Shape(20, 4), seed=1, vocab=1000)
    b = request_body(Shape(20, 4), seed=2, vocab=1000)
    assert len(a["prompt"]) == 20 and a["prompt"] != b["prompt"]
    assert a["n_predict"] == 4 and a["ignore_eos"] and not a["cache_prompt"] and a["stream"]
    c1 = request_body(Shape(20, 4, cached=8), seed=1, vocab=1000)
    c2 = request_body(Shape(20, 4, cached=8), seed=2, vocab=1000)
    assert c1["prompt"][:8] == c2["prompt"][:8] and c1["prompt"][8:] != c2["prompt"][8:]
    assert c1["cache_prompt"]
    assert request_body(Shape(5, 2), seed=1, vocab=100, ban_tokens=[3])["logit_bias"] == [
        [3, False]
    ]


def test_open_loop_arrivals():
    t = Traffic(MIX, requests=200, rate=4.0)
    times = arrival_times(t, seed=1)
    assert times[0] == 0.0 and times == sorted(times) and len(times) == 200
    assert 200 / times[-1] == pytest.approx(4.0, rel=0.25)  # Poisson at about the rate
    assert arrival_times(t, seed=1) == times
    gaps = Mix((Shape(5, 2), Shape(5, 2, gap_ms=250.0), Shape(5, 2, gap_ms=500.0)), "log")
    assert arrival_times(Traffic(gaps, requests=3, arrivals="log"), 0) == [0.0, 0.25, 0.75]
    with pytest.raises(ConfigError, match="needs a mix with gap_ms"):
        Traffic(MIX, arrivals="log")


def test_prometheus_text_and_counter_deltas():
    text = (
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
        "# TYPE llamacpp:prompt_tokens_total counter\n"
        "llamacpp:prompt_tokens_total 1200\n"
        "llamacpp:tokens_predicted_total 80\n"
        "llamacpp:requests_processing 1\n"
        "garbage line here\n"
    )
    before = parse_prometheus(text)
    assert before["llamacpp:prompt_tokens_total"] == 1200.0
    after = parse_prometheus(text.replace("1200", "1712").replace(" 80", " 96"))
    assert counter_deltas(before, after) == {
        "llamacpp:prompt_tokens_total": 512.0,
        "llamacpp:tokens_predicted_total": 16.0,
    }
    assert counter_deltas("HTTP 501", after) == {}


def test_a_run_keeps_every_request_and_its_overall_figures():
    t = Traffic(MIX, concurrency=2, requests=2)
    p1 = Pass([record(0, ttft=100, e2e=400, itl=[10], pn=100, pms=200, gn=10, gms=300)], 500.0, t)
    p2 = Pass([record(1, ttft=300, e2e=900, itl=[20], pn=50, pms=50, gn=20, gms=600)], 1000.0, t)
    run = TrafficRun(t, [p1, p2])
    d = run.to_dict()
    assert d["concurrency"] == 2 and len(d["passes"]) == 2
    assert d["passes"][1]["records"][0]["ttft_ms"] == 300
    assert d["overall"]["prefill_rate"] == pytest.approx(600.0)
    assert d["overall"]["requests_rate"] == pytest.approx(2 / 1.5, rel=1e-3)


PROFILE = """
[profiles.p]
model = "m.gguf"
[profiles.p.traffic]
mix = [[64, 8], [32, 16]]
concurrency = 2
[profiles.p.configurations.a]
[profiles.p.configurations.b]
traffic = {concurrency = 4, requests = 12}
[profiles.p.configurations.f]
traffic = {mix = "mixes/prod.json", arrivals = "log"}
"""


def test_profiles_declare_traffic_and_configurations_override_it(tmp_path):
    import tomllib

    profiles = parse_profiles(tomllib.loads(PROFILE), "moeperf.toml", tmp_path)
    p = profiles["p"]
    a = traffic_of(p, p.configurations["a"], tmp_path)
    b = traffic_of(p, p.configurations["b"], tmp_path)
    assert (a.concurrency, a.requests, b.concurrency, b.requests) == (2, 8, 4, 12)
    assert a.mix.shapes == (Shape(64, 8), Shape(32, 16))
    with pytest.raises(ConfigError, match=r"mixes/prod\.json: cannot read it"):
        traffic_of(p, p.configurations["f"], tmp_path)
    (tmp_path / "mixes").mkdir()
    mix = Mix((Shape(5, 2), Shape(6, 3, gap_ms=40.0)), "prod.log")
    (tmp_path / "mixes" / "prod.json").write_text(json.dumps(mix.to_dict()))
    f = traffic_of(p, p.configurations["f"], tmp_path)
    assert f.open_loop and f.mix.shapes == mix.shapes


@pytest.mark.parametrize(
    "table, error",
    [
        ("traffic = {mix = [[64, 8]], clients = 2}", r"unknown key\(s\) clients"),
        ("traffic = {mix = [[64, 8]], concurrency = 0}", "concurrency and requests must be >= 1"),
        ("traffic = {mix = 5}", "mix must be a list"),
        ("traffic = {mix = [[64, 8]], rate = -1}", r"rate -1\.0 must be > 0"),
        ("traffic = {mix = [[64, 8]], arrivals = 'burst'}", "use 'poisson' or 'log'"),
        ("traffic = {mix = [[64, 8]], ttft_target_ms = 'fast'}", "ttft_target_ms must be"),
        ("traffic = {mix = [[0, 8]]}", "request 1 .*prompt and gen must be >= 1"),
    ],
)
def test_bad_traffic_tables_name_the_configuration_and_key(table, error):
    import tomllib

    text = f"[profiles.p]\nmodel = 'm.gguf'\n[profiles.p.configurations.a]\n{table}\n"
    with pytest.raises(ConfigError, match=error) as info:
        parse_profiles(tomllib.loads(text), "moeperf.toml")
    assert "moeperf.toml: profile 'p', configuration 'a'" in str(info.value)


def test_traffic_metrics_need_a_traffic_table(tmp_path):
    import tomllib

    p = parse_profiles(
        tomllib.loads("[profiles.p]\nmodel = 'm.gguf'\n[profiles.p.configurations.a]\n"), "x.toml"
    )["p"]
    with pytest.raises(ConfigError, match="configuration 'a' has no traffic table"):
        traffic_of(p, p.configurations["a"], tmp_path)


def test_long_prefill_counts_only_the_requests_of_at_least_n_new_tokens():
    """ADR-0042's >= 4,000-token row: ``traffic.prefill_N`` is the aggregate over the requests
    with at least N new tokens, a rate like ``prefill``."""
    records = [
        record(0, ttft=1, e2e=2, itl=[1], pn=4096, pms=16000, gn=8, gms=500),
        record(1, ttft=1, e2e=2, itl=[1], pn=300, pms=1000, gn=8, gms=500),
        record(2, ttft=1, e2e=2, itl=[1], pn=5000, pms=24000, gn=8, gms=500),
    ]
    p = Pass(records, wall_ms=1000.0, traffic=Traffic(MIX, concurrency=2, requests=3))
    w = Workload.parse("traffic.prefill_4000")
    assert w.name == "traffic.prefill_4000" and w.higher_is_better and w.unit == "tok/s"
    long = p.sample(w)
    assert (long.tokens, long.ms) == (9096, 40000)
    assert p.sample(Workload.parse("traffic.prefill_6000")) is None  # no such request
    for bad in ("traffic.prefill_0", "traffic.prefill_x", "traffic.decode_4000"):
        with pytest.raises(ConfigError, match="prefill_N"):
            Workload.parse(bad)
