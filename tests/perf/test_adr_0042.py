"""ADR-0042, "Expert Offloading Is Not the Lever", as tests.

Each decision of the record is a test on the `adr-0042` profile (moeperf.toml). On the
production host (MOEPERF_ADR_SERVER, MOEPERF_ADR_SERVER_OLD and MOEPERF_ADR_MODEL set) the
servers are started and measured; elsewhere the tests skip and say what is missing. The
verdicts are proven on the record's own numbers by replay:

    pytest -m perf --moeperf-replay baselines/adr-0042.toml tests/perf/test_adr_0042.py
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.moeperf(profile="adr-0042")

MISS_PATH = (
    "ADR-0042 decision 1: the cache's miss path (~250 expert uploads of ~2.7 MB per token) is "
    "serialised against compute"
)


def dead_end(config: str, slower_than: str):
    return pytest.param(
        config,
        marks=pytest.mark.dead_end(
            config=config, slower_than=slower_than, metric="tg128", reason=MISS_PATH
        ),
        id=config,
    )


@pytest.mark.parametrize(
    "cache",
    [
        dead_end("cache-2gib", "mmap"),
        dead_end("cache-4gib", "mmap"),
        dead_end("cache-6gib", "mmap"),
        # The single-card rows run with -lm none: compared with -lm none, no cache.
        dead_end("lm-none-cache-2.5gib-gpu0-near", "lm-none-node1"),
        dead_end("lm-none-cache-2.5gib-gpu0-far", "lm-none-node1"),
    ],
)
def test_gpu_expert_cache_is_slower_than_no_cache(moeperf, cache):
    """Decision 1: --moe-cache-mib is slower than no cache at every size that fits."""


@pytest.mark.moeperf(configurations=["cache-2gib", "cache-4gib", "cache-6gib", "mmap"])
@pytest.mark.parametrize("cache", ["cache-2gib", "cache-4gib", "cache-6gib"])
def test_the_cache_leaves_prefill_unchanged(moeperf, cache):
    """Evidence: pp2048 187.5, 189.9 and 189.3 with the cache against 189.0 without: the cache
    is bypassed for batches above 32 tokens, so prefill neither gains nor loses."""
    verdict = moeperf.compare(f"{cache}.pp2048", "mmap.pp2048", margin=0.05)
    assert verdict.outcome == "unchanged", verdict.explain()


@pytest.mark.moeperf(
    configurations=["lm-none-cache-2.5gib-gpu0-near", "lm-none-cache-2.5gib-gpu0-far"]
)
def test_the_cards_socket_is_not_why_the_cache_loses(moeperf):
    """Evidence, the mechanism: moving the process across the socket from the card changed the
    cached decode by 1 % (13.31 near, 13.47 far): the miss path is slow on its own."""
    verdict = moeperf.compare(
        "lm-none-cache-2.5gib-gpu0-far.tg128", "lm-none-cache-2.5gib-gpu0-near.tg128", margin=0.05
    )
    assert verdict.outcome == "unchanged", verdict.explain()


@pytest.mark.moeperf(configurations=["mmap", "lm-none-node1"])
def test_mmap_with_tensor_overrides_prints_the_load_mode_hint(moeperf):
    """Decision 4's clue: the old server printed "tensor overrides to CPU are used with mmap
    enabled - consider using --load-mode none" at every start; -lm none does not print it."""
    assert "mmap-tensor-overrides" in moeperf.startup_warnings("mmap")
    assert "mmap-tensor-overrides" not in moeperf.startup_warnings("lm-none-node1")


@pytest.mark.moeperf(configurations=["cache-6gib", "mmap"])
def test_even_an_80_percent_hit_rate_is_over_30_percent_slower(moeperf):
    """Evidence: 6 GiB split (79-80 % hits) is 36 % slower than no cache in decode; the claim
    asks for at least 30 %, six points of room for another host's noise."""
    moeperf.check("cache-6gib.tg128 <= 0.70 * mmap.tg128")


@pytest.mark.moeperf(configurations=["lm-none-node0", "lm-none-node1", "mmap"])
@pytest.mark.parametrize("node", ["lm-none-node0", "lm-none-node1"])
def test_load_mode_none_keeps_twice_the_prefill_of_mmap(moeperf, node):
    """Decision 4: -lm none, 189 -> 390 tok/s prefill in llama-bench."""
    moeperf.check(f"{node}.pp2048 >= 2.0 * mmap.pp2048")


@pytest.mark.moeperf(configurations=["mmap"])
@pytest.mark.parametrize("metric, at_least", [("tg128", 1.30), ("pp2048", 1.03)])
def test_new_build_beats_the_old_on_identical_flags(moeperf, metric, at_least):
    """Decision 3: b11713 over b11053, +39 % decode and +7 % prefill: faster by more than the
    claim's own margin (at 5 % the prefill's interval, +3.9 to +9.8 %, holds the edge)."""
    verdict = moeperf.compare(
        f"mmap[b11713].{metric}", f"mmap[b11053].{metric}", margin=at_least - 1
    )
    assert verdict.outcome == "faster", verdict.explain()
    moeperf.check(f"mmap[b11713].{metric} >= {at_least} * mmap[b11053].{metric}")


@pytest.mark.moeperf(configurations=["lm-none-node0", "lm-none-node1"])
def test_node1_is_not_slower_than_node0_in_decode(moeperf):
    """Decision 5: pinned to node 1 decode measured 15.7 tok/s, on node 0 11.7: a lead of
    1.35x. Not slower, and the lead is at least 1.25x (ten points of room for another day)."""
    moeperf.check("lm-none-node1.tg128 >= lm-none-node0.tg128")
    moeperf.check("lm-none-node1.tg128 >= 1.25 * lm-none-node0.tg128")


@pytest.mark.moeperf(configurations=["lm-none-node0", "lm-none-node1"])
def test_prefill_is_equal_across_nodes(moeperf):
    """Decision 5: prefill was equal on both nodes."""
    verdict = moeperf.compare("lm-none-node1.pp2048", "lm-none-node0.pp2048", margin=0.05)
    assert verdict.outcome == "unchanged", verdict.explain()


@pytest.mark.moeperf(configurations=["serve-legacy", "serve-new"])
def test_real_traffic_prefill_doubles_with_load_mode_none(moeperf):
    """The real-traffic table: prefill 96.9 -> 218.5 tok/s aggregate over requests of >= 256
    new tokens ("2.2x faster on real traffic"), decode 13.64 -> 14.60 ("unchanged in practice,
    within the spread of the old log"), on the production mix. The record's traffic figures
    carry 5 % a side (baselines/adr-0042.toml), so its own ratios read 2.25 [1.96, 2.59] and
    1.07 [0.93, 1.23]: the claims ask what those numbers can show, prefill at least 1.9x and
    decode no more than 10 % slower."""
    moeperf.check("serve-new.traffic.prefill >= 1.9 * serve-legacy.traffic.prefill")
    moeperf.check("serve-new.traffic.decode >= 0.9 * serve-legacy.traffic.decode")


@pytest.mark.moeperf(configurations=["serve-legacy", "serve-new"])
def test_long_prompts_on_real_traffic_gain_as_much(moeperf):
    """The real-traffic table's >= 4,000-token row: prefill 113.3 -> 242.0 tok/s (2.14x), the
    requests the agent's worst turns are made of. Its own ratio reads 2.14 [1.86, 2.45] at 5 %
    a side; the claim asks at least 1.8x."""
    moeperf.check("serve-new.traffic.prefill_4000 >= 1.8 * serve-legacy.traffic.prefill_4000")
