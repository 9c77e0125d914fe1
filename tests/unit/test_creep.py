"""Change across days without comparing days: the accepted chain of paired gates (stored with
each accepted entry, walked back, summed), the between-session term of baseline checks, and
the host's noise figures from ``moeperf calibrate``."""

from __future__ import annotations

import math
import random

import pytest

from pytest_moeperf.defaults import LINK_TERM, SESSION_PRIOR_BOUND
from pytest_moeperf.errors import BaselineError
from pytest_moeperf.measure.measurement import Conditions, Measurement, Sample
from pytest_moeperf.measure.stats import RatioInterval, with_session_term
from pytest_moeperf.measure.student import t_quantile
from pytest_moeperf.measure.workload import Workload
from pytest_moeperf.store.accept import accept_measurements, accept_noise
from pytest_moeperf.store.accepted import accepted_chain, repeated_links
from pytest_moeperf.store.baselines import load_baselines, parse_baselines
from pytest_moeperf.store.database import store_url
from pytest_moeperf.store.hosts import BaselineHost
from pytest_moeperf.store.record import RunRecord
from pytest_moeperf.store.runstore import open_store
from pytest_moeperf.store.sessions import session_levels
from pytest_moeperf.verdicts.baseline_check import judge_baseline
from pytest_moeperf.verdicts.calibration import NoiseFigure, noise_figure
from pytest_moeperf.verdicts.creep import (
    PairedChange,
    SessionTerm,
    judge_chain,
    link_spread,
    session_spread,
    session_term,
)

W = Workload.parse("pp512")
FP = {"cpu_model": "test cpu", "cpus": 2}


def _m(build: str, value: float, configuration: str = "mmap") -> Measurement:
    samples = tuple(Sample(512, 512_000 / v) for v in (value, value * 1.01, value * 0.99))
    return Measurement(configuration, build, W, samples, Conditions(profile="p"))


# -- the chain ---------------------------------------------------------------------------------
def test_a_paired_change_keeps_its_fields_and_refuses_bad_ones():
    c = PairedChange("b1", -0.0123456789, 0.004, 40)
    assert PairedChange.from_dict(c.to_dict()) == PairedChange("b1", -0.0123457, 0.004, 40)
    for bad, word in (
        ({"against": "", "log_ratio": 0, "se": 0, "rounds": 1}, "against"),
        ({"against": "b1", "log_ratio": "x", "se": 0, "rounds": 1}, "log_ratio"),
        ({"against": "b1", "log_ratio": 0, "se": -1, "rounds": 1}, "standard error"),
        ({"against": "b1", "log_ratio": 0, "se": 0, "rounds": 0}, "rounds"),
        ({"against": "b1", "log_ratio": 0, "se": 0, "rounds": 1, "sd": 1}, "unknown field 'sd'"),
    ):
        with pytest.raises(ValueError, match=word):
            PairedChange.from_dict(bad)


def test_the_chain_sums_its_links_and_adds_their_errors_in_quadrature():
    links = [
        ("b2", PairedChange("b1", -0.025, 0.003, 50)),
        ("b3", PairedChange("b2", -0.025, 0.004, 50)),
    ]
    today = PairedChange("b3", -0.025, 0.012, 20)
    # a host whose history measured no between-session term: the links' own errors alone
    chained = judge_chain(links, today, margin=0.05, label="mmap.pp512", link_term=0.0)
    parts = [(0.003**2, 49), (0.004**2, 49), (0.012**2, 19)]  # each change's rounds less one
    variance = sum(v for v, _ in parts)
    df = variance**2 / sum(v * v / k for v, k in parts)  # Satterthwaite's: about 29
    assert 25 < df < 35
    assert chained.ratio == pytest.approx(math.exp(-0.075))
    q = t_quantile(0.975, df)
    assert chained.low == pytest.approx(math.exp(-0.075 - q * math.sqrt(variance)), rel=1e-6)
    # the degrees of freedom a change recorded are its evidence, not its rounds
    few = judge_chain(links, PairedChange("b3", -0.025, 0.012, 20, df=2.0), link_term=0.0)
    assert few.low < chained.low and few.high > chained.high
    assert chained.since == "b1" and chained.builds == ("b1", "b2", "b3")
    # -7.2 % [-9.6, -4.8]: past 1 but holding the margin's edge: undecided, not slower
    assert chained.outcome == "undecided"
    assert "[0.903, 0.953] (-7.2 %): undecided" in chained.explain()
    # each link alone is within the margin; the same links with small errors add up to slower
    sharp = judge_chain(links, PairedChange("b3", -0.025, 0.003, 80), margin=0.05, link_term=0)
    assert sharp.outcome == "slower" and "since b1 (3 paired gates)" in sharp.explain()
    alone = judge_chain([], PairedChange("b3", -0.025, 0.003, 80), margin=0.05, link_term=0)
    assert alone.outcome == "small-slower" and alone.since == "b3"


def test_every_link_carries_a_between_session_term_by_default():
    """A build pair's change moves between sessions (2 % a link by default): the chain's
    error holds it for every link, the same sharp links no longer add up to a decided
    slowdown, and a term that is not a number >= 0 is refused. The host's measured term
    (a prior worth four links and its repeats) brings its degrees of freedom."""
    links = [
        ("b2", PairedChange("b1", -0.025, 0.003, 50)),
        ("b3", PairedChange("b2", -0.025, 0.004, 50)),
    ]
    today = PairedChange("b3", -0.025, 0.003, 80)
    chained = judge_chain(links, today, margin=0.05)
    parts = [(0.003**2, 49), (0.004**2, 49), (0.003**2, 79)]
    variance = sum(v for v, _ in parts) + 3 * LINK_TERM**2  # a known term: no df of its own
    df = variance**2 / sum(v * v / k for v, k in parts)
    assert LINK_TERM == 0.02
    assert chained.link_term == LINK_TERM and chained.to_dict()["link_term"] == LINK_TERM
    low = math.exp(-0.075 - t_quantile(0.975, df) * math.sqrt(variance))
    assert chained.low == pytest.approx(low, rel=1e-6)
    measured = judge_chain(links, today, margin=0.05, link_term=link_spread([]))
    assert measured.low < chained.low  # the prior is worth four links: a t on few df
    assert chained.outcome == "undecided"
    with pytest.raises(ValueError, match="link term"):
        judge_chain(links, today, link_term=-0.01)


def test_the_link_term_is_measured_from_repeated_pairs_and_pooled_with_the_prior():
    """Build pairs accepted again on other days say how far a pair's change moves between
    sessions beyond the changes' own errors: with none the term is the prior, a few repeats
    move it a little, many decide it (to 3 % where they scatter by 3 %, to zero where they
    agree within their errors), and the chain's interval widens or narrows with it."""
    none = link_spread([])
    assert none.log_sd == pytest.approx(LINK_TERM) and none.repeats == 0
    assert "the prior" in none.describe() and "accepted again" in none.describe()
    rng = random.Random(7)

    def pairs(n_pairs, k, term, se=0.004):
        return [
            [
                PairedChange("b1", rng.gauss(-0.01, term) + rng.gauss(0, se), se, 40)
                for _ in range(k)
            ]
            for _ in range(n_pairs)
        ]

    few = link_spread(pairs(1, 2, 0.03))
    assert few.repeats == 1 and few.pairs == 1
    assert 0.0 <= few.log_sd < 0.03  # one repeat worth 1 against the prior's 4
    many = link_spread(pairs(200, 3, 0.03))
    assert many.log_sd == pytest.approx(0.03, rel=0.1)
    assert "from 400 repeats of 200 build pairs" in many.describe()
    agreeing = link_spread(pairs(400, 3, 0.0))
    assert agreeing.log_sd < 0.002  # their own errors explain the scatter: no term left
    links = [("b2", PairedChange("b1", -0.02, 0.004, 40))]
    today = PairedChange("b2", -0.02, 0.004, 40)
    wide = judge_chain(links, today, link_term=many)
    narrow = judge_chain(links, today, link_term=agreeing)
    assert wide.low < narrow.low and wide.link_term == many.log_sd
    assert wide.to_dict()["link_basis"] == many.describe()
    single = [[PairedChange("b1", -0.01, 0.004, 40)]]  # a pair accepted once says nothing
    assert link_spread(single) == none
    with pytest.raises(ValueError, match="prior"):
        link_spread([], prior=-0.01)


def test_repeated_links_are_one_hosts_pairs_accepted_on_other_days(tmp_path):
    """Accepting b2 against b1 again moves the first acceptance to history: the pair has two
    links; b3's single link and another host's acceptances are no repeats."""
    path = _file_with_chain(tmp_path)
    again = PairedChange("b1", -0.03, 0.005, 40)
    accept_measurements(
        path,
        "p",
        [_m("b2", 98.0)],
        FP,
        source="gate",
        date="2026-11-09",
        changes={("mmap", "pp512"): again},
    )
    bf = load_baselines(path)
    host = bf.hosts[0].id
    assert repeated_links(bf, host) == [[PairedChange("b1", -0.01, 0.005, 40), again]]
    assert repeated_links(bf, "no-such-host") == []
    spread = link_spread(repeated_links(bf, host))
    # (0.02^2 / 2 - 0.005^2) with 1 degree of freedom, beside 4 of the 2 % prior
    assert spread.log_sd == pytest.approx(math.sqrt((4 * 4e-4 + 2e-4 - 2.5e-5) / 5))


def _file_with_chain(tmp_path):
    path = tmp_path / "p.toml"
    accept_measurements(path, "p", [_m("b1", 100.0)], FP, source="perf", date="2026-11-01")
    for build, against, day in (("b2", "b1", "2026-11-02"), ("b3", "b2", "2026-11-03")):
        change = PairedChange(against, -0.01, 0.005, 40)
        accept_measurements(
            path,
            "p",
            [_m(build, 99.0)],
            FP,
            source="gate",
            date=day,
            changes={("mmap", "pp512"): change},
        )
    return path


def test_an_accepted_gate_stores_its_link_and_the_chain_is_walked_back(tmp_path):
    bf = load_baselines(_file_with_chain(tmp_path))
    host = bf.hosts[0].id
    assert bf.find("b3", "mmap", "pp512", host=host).change == PairedChange("b2", -0.01, 0.005, 40)
    assert bf.find("b1", "mmap", "pp512", host=host).change is None
    chain = accepted_chain(bf, host, "mmap", "pp512", "b3")
    assert [(b, c.against) for b, c in chain] == [("b2", "b1"), ("b3", "b2")]
    assert accepted_chain(bf, host, "mmap", "pp512", "b1") == []  # the start of the chain
    assert accepted_chain(bf, host, "mmap", "pp512", "b9") is None  # never accepted here
    assert accepted_chain(bf, "no-such-host", "mmap", "pp512", "b3") is None


def test_a_chain_whose_older_end_the_file_lacks_starts_there(tmp_path):
    path = tmp_path / "p.toml"
    change = PairedChange("b0", -0.01, 0.005, 40)  # b0 was never accepted into this file
    accept_measurements(
        path,
        "p",
        [_m("b1", 99.0)],
        FP,
        source="g",
        date="2026-11-02",
        changes={("mmap", "pp512"): change},
    )
    bf = load_baselines(path)
    chain = accepted_chain(bf, bf.hosts[0].id, "mmap", "pp512", "b1")
    assert chain == [("b1", change)]
    assert judge_chain(chain, PairedChange("b1", 0.0, 0.005, 40)).since == "b0"


def test_a_bad_change_field_names_the_file_and_entry():
    text = (
        'schema = 2\nprofile = "p"\n\n[[entry]]\nbuild = "b1"\nconfiguration = "mmap"\n'
        'workload = "pp512"\nvalue = 1.0\nrel_spread = 0.01\ndate = "d"\nsource = "s"\n'
        'change = { against = "b0", log_ratio = 0.1, se = 0.01 }\n'
    )
    with pytest.raises(BaselineError, match=r"x\.toml.*change: rounds None must be a whole"):
        parse_baselines(text, name="x.toml")


# -- the between-session term -----------------------------------------------------------------
def test_the_session_spread_starts_at_the_prior_and_follows_many_sessions():
    none = session_spread([])
    assert none.log_sd == pytest.approx(0.10) and none.sessions == 0
    rng = random.Random(1)
    steady = [100 * math.exp(rng.gauss(0, 0.02)) for _ in range(60)]
    many = session_spread(steady)
    assert 0.018 < many.log_sd < 0.035  # the prior's 4 sessions weigh little against 60
    few = session_spread(steady[:3])
    assert few.log_sd > 0.07  # three steady sessions do not yet overrule the prior
    assert "from 3 sessions and a prior of 10.5 % worth 4" in few.describe()


HOUR = 3600.0


def test_the_session_term_is_measured_from_sessions_an_hour_apart():
    rng = random.Random(1)
    days = [(i * 24 * HOUR, 100 * math.exp(rng.gauss(0, 0.03))) for i in range(30)]
    term = session_term(days)
    assert term.measured and term.sessions == 30 and term.df == 29
    assert 0.02 < term.log_sd < 0.04  # the host's own spread, no prior pulling it
    # runs minutes apart are one session: their level is their mean
    burst = [(i * 60.0, v) for i, v in enumerate([100.0, 80.0, 120.0])]
    one = session_term(burst)
    assert (one.sessions, one.runs, one.measured) == (1, 3, False)
    assert "not measured (1 session stored; 3 needed)" in one.describe()
    assert session_term([]).describe() == "between sessions: no session of this host stored"
    assert session_term(days[:2]).reach(0.95) == math.inf  # two sessions are not enough
    # a t on the sessions' degrees of freedom: three sessions reach far wider than thirty
    three = session_term(days[:3])
    assert three.reach(0.95) / three.log_sd > 2 * term.reach(0.95) / term.log_sd


def test_the_session_term_widens_a_baseline_check_that_more_samples_cannot_narrow():
    measured = [97.0, 98.0, 96.5, 97.5, 98.5, 97.2]
    stored = [100.0, 101.0, 99.5, 100.5]
    plain = judge_baseline(measured, 100.25, 0.15, baseline=stored)
    assert plain.outcome == "passed"
    loud = session_term([(i * 24 * HOUR, v) for i, v in enumerate([100.0, 80.0, 120.0])])
    wide = judge_baseline(measured, 100.25, 0.15, baseline=stored, session=loud)
    assert wide.outcome == "undecided" and wide.low < plain.low
    line = wide.explain()
    assert "between sessions" in line and "more repetitions cannot decide" in line
    # a host whose sessions agree: the term is small and the check decides
    rng = random.Random(2)
    steady = [(i * 24 * HOUR, 100 * math.exp(rng.gauss(0, 0.01))) for i in range(8)]
    check = judge_baseline(measured, 100.25, 0.15, baseline=stored, session=session_term(steady))
    assert check.outcome == "passed"
    # a term not measured is none at all: the check is the samples' (the fixture skips it)
    unmeasured = judge_baseline(
        measured, 100.25, 0.15, baseline=stored, session=SessionTerm(0.5, 1, 1)
    )
    assert unmeasured.low == plain.low


def test_a_term_not_measured_is_held_at_its_prior_bound_and_decides_only_beyond_it():
    """The fixture judges a check whose host has too few sessions once, on the samples in hand,
    with the term at SESSION_PRIOR_BOUND: a number every server beats twice over passes, one
    no server reaches fails, and one 3 % inside its limit stays undecided (it skips)."""
    measured = [97.0, 98.0, 96.5, 97.5, 98.5, 97.2]
    stored = [100.0, 101.0, 99.5, 100.5]
    bounded = SessionTerm(0.0, 1, 1).at_prior()
    assert bounded.prior == SESSION_PRIOR_BOUND and not bounded.measured
    assert "held at a prior bound of 20 %" in bounded.describe()
    near = judge_baseline(measured, 100.25, 0.15, baseline=stored, session=bounded)
    assert near.outcome == "undecided"
    beaten = judge_baseline(measured, 30.0, 0.15, session=bounded)
    assert beaten.outcome == "passed"
    unreached = judge_baseline(measured, 400.0, 0.15, session=bounded)
    assert unreached.outcome == "failed"
    # a measured term is its own: the bound does not replace it
    rng = random.Random(2)
    steady = session_term([(i * 24 * HOUR, 100 * math.exp(rng.gauss(0, 0.01))) for i in range(8)])
    assert steady.at_prior() is steady


def test_with_session_term_adds_in_quadrature_and_raises_the_floor():
    iv = RatioInterval(1.0, math.exp(-0.03), math.exp(0.04), 0.95, "bootstrap", floor=0.01)
    wide = with_session_term(iv, 0.05)
    z = 1.959964
    assert math.log(wide.high) == pytest.approx(math.hypot(0.04, z * 0.05), rel=1e-5)
    assert -math.log(wide.low) == pytest.approx(math.hypot(0.03, z * 0.05), rel=1e-5)
    assert wide.floor == pytest.approx(math.hypot(0.01, z * 0.05), rel=1e-5)
    assert with_session_term(iv, 0.0) is iv
    with pytest.raises(ValueError, match="log_sd"):
        with_session_term(iv, -1.0)


def _record(fingerprint: dict, value: float, build: str = "b1") -> RunRecord:
    return RunRecord(
        fingerprint=fingerprint,
        fingerprints={"p": fingerprint},
        measurements=[_m(build, value)],
    )


def test_session_levels_are_this_hosts_runs_of_this_build_once_each(tmp_path):
    """Through the real (SQLite) store: its query narrows to the build, configuration and
    workload; the host's own runs are told apart by their fingerprints."""
    host = BaselineHost("host-1", dict(FP))
    other = {"cpu_model": "other cpu", "cpus": 2}
    store = open_store(store_url("", tmp_path))
    for record in (
        _record(FP, 100.0),
        _record(FP, 90.0),
        _record(other, 50.0),  # another host
        _record(FP, 70.0, build="b2"),  # another build
    ):
        assert store.add_run(record)
    points = store.session_points(profile="p", configuration="mmap", workload="pp512", build="b1")
    assert len(points) == 3  # b2 is not read
    assert all(p.written > 0 for p in points)  # each run's time, for its session
    got = session_levels(points, host, cpus=None, stored=[("2026-11-30", 100.0), ("x", 95.0)])
    assert [v for _, v in got] == [pytest.approx(100.0), pytest.approx(90.0), 95.0]
    assert got[-1][0] == 0.0  # a date that is not one: the epoch (a session of its own)
    narrowed = store.session_points(
        profile="p", configuration="mmap", workload="pp512", build="b1", cpu_model="other cpu"
    )
    assert [p.median for p in narrowed] == [pytest.approx(50.0)]
    store.close()


# -- the host's noise figures ------------------------------------------------------------------
def test_the_noise_figure_of_ar1_rounds():
    rng = random.Random(3)
    gates = []
    for _ in range(8):
        x, d = 0.0, []
        for _ in range(200):
            x = 0.5 * x + rng.gauss(0, 0.05)
            d.append(x + 0.01)
        gates.append(d)
    f = noise_figure(
        ["unchanged"] * 6 + ["small-faster", "slower"],
        gates,
        [0.04, 0.05],
        build="b1",
        date="2026-12-01",
        budget=180.0,
    )
    assert 0.4 < f.lag1 < 0.6 and f.gates == 8 and f.rounds == 1600
    assert f.round_spread == pytest.approx(0.05 / math.sqrt(1 - 0.25), rel=0.1)
    assert (f.false_alarms, f.spurious, f.undecided) == (1, 1, 0)
    assert f.mde == pytest.approx(0.045)
    with pytest.raises(ValueError, match="at least one A/A gate"):
        noise_figure([], [], [], build="b", date="d", budget=1.0)


def test_noise_figures_are_stored_with_the_host_and_read_back(tmp_path):
    path = _file_with_chain(tmp_path)
    figure = NoiseFigure("b1", "2026-12-01", 4, 220, 0.061, 0.03, 0.042, 180.0, 0, 1, 0)
    bf, host = accept_noise(path, "p", FP, {"mmap.pp512": figure})
    assert host == "host-1" and load_baselines(path).hosts[0].noise == {"mmap.pp512": figure}
    assert len(bf.entries) == 3  # nothing else moved
    assert '[host.noise."mmap.pp512"]' in path.read_text()
    # a later accept of numbers keeps the host's figures
    accept_measurements(path, "p", [_m("b4", 98.0)], FP, source="perf", date="2026-12-02")
    assert load_baselines(path).hosts[0].noise["mmap.pp512"] == figure
    # another host's figures go to a host of their own
    _, other = accept_noise(path, "p", {"cpu_model": "other", "cpus": 4}, {"mmap.pp512": figure})
    assert other == "host-2"
    assert figure.sample_spread == pytest.approx(math.expm1(0.061 / math.sqrt(2)))
    assert "round spread 6.1 %, lag-1 +0.03, MDE 4.2 % at 180 s" in figure.describe()


def test_storing_noise_keeps_the_fingerprint_the_numbers_were_taken_with(tmp_path):
    """A calibration of today must not rewrite the probes yesterday's entries are held
    against, nor drop the probe of a CPU set it did not measure (here: CPU 0 of one-core)."""
    rest = {"bandwidth_cv": 0.05, "compute_cv": 0.02, "samples": 7, "seconds": 2.0}
    probes = {
        "0": {"cpus": "0", "bandwidth_gbs": 13.4, "compute_gops": 2.34, **rest},
        "0-1": {"cpus": "0-1", "bandwidth_gbs": 22.5, "compute_gops": 4.14, **rest},
    }
    path = tmp_path / "p.toml"
    accept_measurements(
        path, "p", [_m("b1", 100.0)], {**FP, "probes": probes}, source="perf", date="d1"
    )
    today = {**FP, "kernel": "new", "probes": {"0-1": {**probes["0-1"], "bandwidth_gbs": 21.0}}}
    figure = NoiseFigure("b1", "2026-12-01", 4, 220, 0.061, 0.03, 0.042, 180.0, 0, 1, 0)
    accept_noise(path, "p", today, {"mmap.pp512": figure})
    (host,) = load_baselines(path).hosts
    assert host.fingerprint["probes"]["0-1"]["bandwidth_gbs"] == 22.5
    assert "kernel" not in host.fingerprint and host.noise == {"mmap.pp512": figure}
    # accepting numbers brings the facts up to date and keeps the probes it did not take
    accept_measurements(path, "p", [_m("b2", 101.0)], today, source="perf", date="d2")
    (host,) = load_baselines(path).hosts
    assert host.fingerprint["kernel"] == "new"
    assert host.fingerprint["probes"]["0-1"]["bandwidth_gbs"] == 21.0
    assert host.fingerprint["probes"]["0"]["bandwidth_gbs"] == 13.4


def test_a_bad_noise_figure_names_the_file_and_says_what_to_do(tmp_path):
    path = _file_with_chain(tmp_path)
    text = path.read_text().replace(
        "[[entry]]",
        '[host.noise."mmap.pp512"]\nbuild = "b1"\ndate = "d"\nround_spread = -1\nmde = 0.1\n'
        "budget = 1.0\n\n[[entry]]",
        1,
    )
    with pytest.raises(
        BaselineError,
        match=r"p\.toml: host #1 at line 7: noise\.mmap\.pp512: round_spread -1 must be >= 0; "
        "run moeperf calibrate again",
    ):
        parse_baselines(text, name=str(path))
