"""`moeperf logstats` on two real server logs (two configurations, real requests of mixed
sizes): its aggregates equal an independent sum over the timings the client received."""

from __future__ import annotations

import json
import random
import statistics

import httpx

from pytest_moeperf.commands import main
from pytest_moeperf.llama.server import LlamaServer

SIZES = [(40, 8), (300, 40), (520, 3), (900, 64), (260, 33), (1200, 16), (120, 100)]


def _traffic(url: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    timings = []
    with httpx.Client(base_url=url, timeout=120) as client:
        for prompt, gen in SIZES:
            body = {
                "prompt": [rng.randrange(3, 500) for _ in range(prompt)],
                "n_predict": gen,
                "ignore_eos": True,
                "cache_prompt": False,
            }
            timings.append(client.post("/completion", json=body).json()["timings"])
    return timings


def _expected(timings: list[dict]) -> dict:
    pre = [t for t in timings if t["prompt_n"] >= 256]
    large = [t for t in timings if t["prompt_n"] >= 800]
    dec = [t for t in timings if t["predicted_n"] >= 32]
    return {
        "prefill": (len(pre), sum(t["prompt_n"] for t in pre), sum(t["prompt_ms"] for t in pre)),
        "prefill_large": (
            len(large),
            sum(t["prompt_n"] for t in large),
            sum(t["prompt_ms"] for t in large),
        ),
        "decode": (
            len(dec),
            sum(t["predicted_n"] for t in dec),
            sum(t["predicted_ms"] for t in dec),
        ),
        "decode_median": statistics.median(
            t["predicted_n"] * 1000 / t["predicted_ms"] for t in dec
        ),
    }


def test_logstats_matches_client_timings(llama_build, tiny_model, tmp_path, capsys):
    logs, client = [], []
    for name, cpus, seed in (("two-cores", None, 1), ("cpu0", frozenset({0}), 2)):
        log = tmp_path / f"{name}.log"
        with LlamaServer(
            llama_build.server,
            tiny_model,
            ["-c", "2048", "-t", "2", "-np", "1"],
            log_path=log,
            cpus=cpus,
        ) as server:
            client.append(_traffic(server.url, seed))
        logs.append(str(log))
    argv = ["logstats", *logs, "--prefill-min", "256", "--prefill-large-min", "800"]
    argv += ["--decode-min", "32"]
    # two logs are compared, cpu0's against two cores': exit 0/1/3 as that comparison says
    rc = main(argv)
    table = capsys.readouterr().out
    assert "two-cores" in table and "cpu0" in table and "(n=" in table
    assert "cpu0.log against two-cores.log" in table
    assert main([*argv, "--json"]) == rc
    doc = json.loads(capsys.readouterr().out)
    assert rc == {"passed": 0, "slower": 1, "undecided": 3}[doc["compare"]["outcome"]]
    for label, timings in zip(("two-cores.log", "cpu0.log"), client, strict=True):
        stats = next(v["stats"] for k, v in doc.items() if k.startswith(label.split(".")[0]))
        want = _expected(timings)
        assert stats["requests"] == len(SIZES)
        for row in ("prefill", "prefill_large", "decode"):
            n, tokens, ms = want[row]
            assert stats[row]["n"] == n and stats[row]["tokens"] == tokens
            assert abs(stats[row]["ms"] - ms) <= 0.01 * n  # the log prints ms with 2 decimals
        assert abs(stats["decode_median"] - want["decode_median"]) <= 0.01 * want["decode_median"]
