"""A real llama-server on the synthetic tiny model: start, pin, verify, answer, stop."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import httpx
import pytest

from pytest_moeperf.errors import MeasurementError, ServerError
from pytest_moeperf.host.machine import process_cpus
from pytest_moeperf.llama.server import LlamaServer
from pytest_moeperf.measure.meter import Meter, Request, sample_from, server_vocab
from pytest_moeperf.measure.workload import Workload

ARGS = ["-c", "1024", "-t", "2", "-np", "1"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped) counts as gone
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


def test_completion_answers_with_timings(llama_build, tiny_model, tmp_path):
    with LlamaServer(llama_build.server, tiny_model, ARGS, log_path=tmp_path / "s.log") as s:
        assert s.url.startswith("http://127.0.0.1:")
        r = httpx.post(
            f"{s.url}/completion",
            timeout=60,
            json={
                "prompt": [5, 6, 7, 8, 9, 10, 11],
                "n_predict": 8,
                "ignore_eos": True,
                "cache_prompt": False,
            },
        )
        assert r.status_code == 200
        body = r.json()
        assert body["timings"]["prompt_n"] == 7
        assert body["timings"]["predicted_n"] == 8
        assert body["timings"]["predicted_per_second"] > 0
        text = httpx.post(
            f"{s.url}/completion",
            timeout=60,
            json={"prompt": "Hello, MoE! ünïcødé", "n_predict": 4},
        ).json()
        assert text["timings"]["prompt_n"] > 0
    assert not s.is_running()


def test_pinned_server_runs_on_the_asked_cpu(llama_build, tiny_model, tmp_path):
    with LlamaServer(
        llama_build.server, tiny_model, ARGS, log_path=tmp_path / "s.log", cpus=frozenset({0})
    ) as s:
        assert process_cpus(s.pid) == frozenset({0})


def test_pinning_check_fails_when_affinity_differs(llama_build, tiny_model, tmp_path):
    """A launcher that re-pins the server elsewhere is caught from /proc/<pid>/status."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    other = sorted(os.sched_getaffinity(0))[1]
    wrapper = tmp_path / "repinning-llama-server"
    wrapper.write_text(
        "#!/usr/bin/env python3\nimport os, sys\n"
        f"os.sched_setaffinity(0, {{{other}}})\n"
        f"os.execv({str(llama_build.server)!r}, [{str(llama_build.server)!r}] + sys.argv[1:])\n"
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    s = LlamaServer(wrapper, tiny_model, ARGS, log_path=tmp_path / "s.log", cpus=frozenset({0}))
    with pytest.raises(
        ServerError, match=r"pinning did not take: asked CPUs 0, .*Cpus_allowed_list"
    ):
        s.start()
        time.sleep(0.2)  # not reached when the check works
    assert s.process is not None and not _alive(s.process.pid)


def test_dead_server_reports_exit_code_and_log_tail(llama_build, tiny_model, tmp_path):
    s = LlamaServer(
        llama_build.server, tiny_model, [*ARGS, "--no-such-flag"], log_path=tmp_path / "s.log"
    )
    with pytest.raises(ServerError) as err:
        s.start()
    msg = str(err.value)
    assert "exited with code" in msg and "no-such-flag" in msg and str(tmp_path) in msg


def test_startup_timeout_stops_the_server(llama_build, tiny_model, tmp_path):
    s = LlamaServer(
        llama_build.server, tiny_model, ARGS, log_path=tmp_path / "s.log", startup_timeout=0.0
    )
    with pytest.raises(ServerError, match="startup timeout"):
        s.start()
    assert s.process is not None and not _alive(s.process.pid)


def test_measure_gives_exact_token_counts(llama_build, tiny_model, tmp_path):
    with (
        LlamaServer(llama_build.server, tiny_model, ARGS, log_path=tmp_path / "s.log") as s,
        Meter(s.url, vocab=server_vocab(s.url) or 0) as meter,
    ):
        # a decode sample counts decode steps: tgM has M - 1 after the first sampled token
        for name, tokens in [("pp64", 64), ("tg16", 15), ("pp32 @ d64", 32), ("tg8 @ d32", 7)]:
            m = meter.measure(
                Workload.parse(name), configuration="default", build="b", repetitions=3
            )
            assert len(m.samples) == 3
            assert all(x.tokens == tokens for x in m.samples)
            assert m.summary.median > 0


def test_prefix_cache_hit_is_an_error_not_a_sample(llama_build, tiny_model, tmp_path):
    with (
        LlamaServer(llama_build.server, tiny_model, ARGS, log_path=tmp_path / "s.log") as s,
        Meter(s.url, vocab=server_vocab(s.url) or 0) as meter,
    ):
        body = {"prompt": list(range(10, 74)), "n_predict": 1, "cache_prompt": True, "id_slot": 0}
        meter.post(body)
        reply = meter.post(body)
        with pytest.raises(MeasurementError, match="prefix cache"):
            sample_from(Workload.parse("pp64"), Request(body, 64, None), reply)


def test_streamed_measurement_gives_the_same_counts(llama_build, tiny_model, tmp_path):
    """The gate measures with streamed replies (older builds answer a plain /completion of
    random tokens with HTTP 500); the timings read from the last event count the same."""
    with (
        LlamaServer(llama_build.server, tiny_model, ARGS, log_path=tmp_path / "s.log") as s,
        Meter(s.url, vocab=server_vocab(s.url) or 0, stream=True) as meter,
    ):
        for name, tokens in [("pp64", 64), ("tg16", 15)]:
            m = meter.measure(Workload.parse(name), configuration="c", build="b", repetitions=2)
            assert [x.tokens for x in m.samples] == [tokens, tokens]
