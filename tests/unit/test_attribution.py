"""Where a change lives, judged on the row's own process blocks: a server-layer slowdown that
llama-bench does not share is found on a host not calibrated (before, the attribution's
verdicts read the row's rounds as one process pair and never decided)."""

from __future__ import annotations

import math
import random

from pytest_moeperf.verdicts.attribution import attribute, server_over_bench
from pytest_moeperf.verdicts.sequential import Plan

BLOCK = 5
ROUNDS = 60  # the main looks spend 70 % of the error rate: early looks hold the rest


def _rounds(seed: int, layer: float) -> tuple[tuple[list[float], ...], list[int]]:
    """Server and llama-bench tok/s of both builds, a fresh process pair every BLOCK rounds
    (an offset of log-SD 1 % a side), round noise of log-SD 2 %; the candidate's server
    layer at *layer* of the baseline's, its compute unchanged."""
    rng = random.Random(seed)
    sa: list[float] = []
    sb: list[float] = []
    ba: list[float] = []
    bb: list[float] = []
    blocks = [i // BLOCK for i in range(ROUNDS)]
    offsets: dict[int, tuple[float, float]] = {}
    for k in blocks:
        if k not in offsets:
            offsets[k] = (rng.gauss(0, 0.01), rng.gauss(0, 0.01))
        oa, ob = offsets[k]
        compute_a = 100 * math.exp(oa + rng.gauss(0, 0.02))
        compute_b = 100 * math.exp(ob + rng.gauss(0, 0.02))
        ba.append(compute_a)
        bb.append(compute_b)
        sa.append(0.8 * compute_a * math.exp(rng.gauss(0, 0.02)))
        sb.append(0.8 * layer * compute_b * math.exp(rng.gauss(0, 0.02)))
    return (sa, sb, ba, bb), blocks


def test_a_server_layer_slowdown_is_found_on_the_rows_blocks() -> None:
    plan = Plan(block=BLOCK).within(ROUNDS)
    (sa, sb, ba, bb), blocks = _rounds(seed=3, layer=0.85)
    got = attribute((sa, sb), (ba, bb), margin=0.05, plan=plan, label="row", blocks=blocks)
    assert got is not None
    assert got.layer.outcome == "slower", got.layer.explain
    assert got.bench.outcome in ("unchanged", "small-slower", "small-faster"), got.bench.explain
    assert got.layer.reason is None
    # without the blocks the rounds are one process pair, which decides nothing (the bug)
    alone = attribute((sa, sb), (ba, bb), margin=0.05, plan=plan, label="row")
    assert alone is not None and alone.layer.outcome == "undecided"


def test_a_sides_server_over_bench_has_an_interval_on_the_rows_blocks() -> None:
    plan = Plan(block=BLOCK).within(ROUNDS)
    (sa, _, ba, _), blocks = _rounds(seed=5, layer=1.0)
    ratio = server_over_bench(sa, ba, margin=0.05, plan=plan, label="side", blocks=blocks)
    assert ratio is not None and ratio.reason is None
    assert ratio.low < 0.8 < ratio.high  # the server serves 80 % of its bench
    assert ratio.outcome == "slower"
    # blocks shorter than the rounds are not guessed at: the rounds are one pair
    short = server_over_bench(sa, ba, margin=0.05, plan=plan, label="side", blocks=blocks[:3])
    assert short is not None and short.outcome == "undecided"
