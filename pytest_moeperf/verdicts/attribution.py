"""Where a change lives: in the server layer, or in the compute llama-bench also runs.

In each round of a gate row both builds' llama-server and both builds' llama-bench (same model,
flags and pinning) give a sample. The bench's own change, each side's server/bench ratio and
the change of that ratio between the builds are then paired verdicts with intervals like the
row's. A server that slows while its llama-bench does not is a change in the server layer
(HTTP, slots, sampling, scheduling): the class of regression llama-bench alone never sees.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .judge import Verdict, judge_rounds
from .sequential import Plan, Rule

DIRECTIONS = {"slower": -1, "small-slower": -1, "faster": 1, "small-faster": 1}


@dataclass(frozen=True)
class Attribution:
    """The bench's change, the candidate's server/bench ratio and the layer's change."""

    bench: Verdict
    """llama-bench candidate / baseline, paired by round."""
    server_bench: Verdict
    """The candidate's server tok/s / its llama-bench tok/s, paired by round."""
    baseline_server_bench: Verdict
    """The same for the baseline build."""
    layer: Verdict
    """(candidate server / bench) / (baseline server / bench): the change of the server layer."""

    def where(self, server: Verdict) -> str:
        """Where the row's change is, in words (``-`` when the row did not change)."""
        moved = DIRECTIONS.get(server.outcome, 0)
        if not moved:
            return "-"
        way = "slower" if moved < 0 else "faster"
        # the bench counts as moved only beyond the margin: a change within it is no change
        bench = DIRECTIONS.get(self.bench.outcome, 0) if "small" not in self.bench.outcome else 0
        layer = DIRECTIONS.get(self.layer.outcome, 0)
        if layer == moved and bench != moved:
            return (
                f"server layer: llama-bench {self.bench.outcome} "
                f"({self.bench.change_pct:+.1f} %), the server {way} beyond it "
                f"({self.layer.change_pct:+.1f} % [{100 * (self.layer.low - 1):+.1f}, "
                f"{100 * (self.layer.high - 1):+.1f}])"
            )
        if bench == moved and layer != moved:
            return (
                f"compute: llama-bench {way} alike ({self.bench.change_pct:+.1f} %), "
                f"server/bench {self.layer.outcome}"
            )
        if bench == moved and layer == moved:
            return "both: llama-bench and the server layer"
        return f"unclear: llama-bench {self.bench.outcome}, server/bench {self.layer.outcome}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "bench": self.bench.to_dict(),
            "server_bench": self.server_bench.to_dict(),
            "baseline_server_bench": self.baseline_server_bench.to_dict(),
            "layer": self.layer.to_dict(),
        }


def server_over_bench(
    server: Sequence[float],
    bench: Sequence[float],
    *,
    margin: float,
    plan: Plan,
    label: str,
    blocks: Sequence[int] | None = None,
) -> Verdict | None:
    """One side's server tok/s over its llama-bench tok/s, paired by round, with its interval
    (the rounds both have); ``None`` with fewer than 2. *blocks*: each round's process block,
    as the row's own verdict had them (without them the rounds are one process pair)."""
    n = min(len(server), len(bench))
    if n < 2:
        return None
    change = Rule("change", margin=margin)
    return judge_rounds(
        change, list(bench[:n]), list(server[:n]), plan, spent=True, label=label,
        blocks=_first(blocks, n),
    )[0]  # fmt: skip


def _first(blocks: Sequence[int] | None, n: int) -> list[int] | None:
    """The first *n* rounds' blocks; ``None`` (one process pair) where fewer are known."""
    return list(blocks[:n]) if blocks and len(blocks) >= n else None


def attribute(
    server: tuple[Sequence[float], Sequence[float]],
    bench: tuple[Sequence[float], Sequence[float]],
    *,
    margin: float,
    plan: Plan,
    label: str,
    blocks: Sequence[int] | None = None,
) -> Attribution | None:
    """The attribution of a row from its per-round server values (baseline, candidate) and
    llama-bench values (baseline, candidate); ``None`` with fewer than 2 rounds of both.
    *blocks*: each round's process block, as the row's own verdict had them (llama-bench runs
    beside the servers, so its rounds share their blocks)."""
    n = min(len(server[0]), len(server[1]), len(bench[0]), len(bench[1]))
    if n < 2:
        return None
    sa, sb = list(server[0][:n]), list(server[1][:n])
    row_blocks = _first(blocks, n)
    ba, bb = list(bench[0][:n]), list(bench[1][:n])
    change = Rule("change", margin=margin)

    def judge(a: list[float], b: list[float], what: str) -> Verdict:
        """``b / a`` of the rounds (server/bench: the server over its bench, as
        :func:`server_over_bench`)."""
        return judge_rounds(
            change, a, b, plan, spent=True, label=f"{label} {what}", blocks=row_blocks
        )[0]

    return Attribution(
        bench=judge(ba, bb, "llama-bench"),
        server_bench=judge(bb, sb, "candidate server/bench"),
        baseline_server_bench=judge(ba, sa, "baseline server/bench"),
        layer=judge(
            [s / b for s, b in zip(sa, ba, strict=True)],
            [s / b for s, b in zip(sb, bb, strict=True)],
            "server layer",
        ),
    )
