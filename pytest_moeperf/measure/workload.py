"""Workloads: what is measured, named as llama-bench names it (``pp2048``, ``tg128 @ d8192``),
or a metric of traffic (``traffic.prefill``, ``traffic.ttft_p99``): many requests of a mix at
once, as a server sees them in production (:mod:`pytest_moeperf.measure.traffic`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ConfigError

_NAME = re.compile(r"^\s*(pp|tg)(\d+)\s*(?:@\s*d(\d+))?\s*$")
_TRAFFIC = re.compile(r"^\s*traffic\.(\w+)\s*$")

TRAFFIC_RATES = ("prefill", "decode", "throughput", "requests")
"""Traffic metrics that are rates: higher is better, like ``ppN`` and ``tgN`` (what each is:
docs/guide/traffic.md)."""
PERCENTILES = (50, 90, 99)
TRAFFIC_LATENCIES = tuple(f"{what}_p{q}" for what in ("ttft", "itl", "e2e") for q in PERCENTILES)
"""Traffic metrics that are latencies in milliseconds (time to first token, inter-token, end
to end): lower is better."""
TRAFFIC_METRICS = (*TRAFFIC_RATES, *TRAFFIC_LATENCIES)
LONG_PREFILL = re.compile(r"^prefill_([1-9]\d*)$")
"""``prefill_N``: the prefill rate of the requests with at least N new tokens (ADR-0042's
``>= 4,000`` row is ``traffic.prefill_4000``), a rate like ``prefill``."""


def is_traffic_metric(metric: str) -> bool:
    """A metric of :data:`TRAFFIC_METRICS`, or ``prefill_N`` (:data:`LONG_PREFILL`)."""
    return metric in TRAFFIC_METRICS or LONG_PREFILL.match(metric) is not None


_METRICS_TEXT = f"{', '.join(TRAFFIC_METRICS)} or prefill_N (requests of >= N new tokens)"


@dataclass(frozen=True, order=True)
class Workload:
    """Prefill (``pp``) of *tokens* prompt tokens, or decode (``tg``) of *tokens* generated
    tokens, after *depth* tokens already in the context; or one *metric* of the profile's
    traffic (kind ``traffic``, no tokens)."""

    kind: str
    tokens: int
    depth: int = 0
    metric: str = ""

    def __post_init__(self) -> None:
        if self.kind == "traffic":
            if not is_traffic_metric(self.metric) or self.tokens or self.depth:
                raise ConfigError(f"traffic metric {self.metric!r}: use one of {_METRICS_TEXT}")
            return
        if self.kind not in ("pp", "tg"):
            raise ConfigError(
                f"workload kind {self.kind!r}: use 'pp' (prefill), 'tg' (decode) or 'traffic'"
            )
        if self.tokens < 1 or self.depth < 0 or self.metric:
            raise ConfigError(
                f"workload {self.kind}{self.tokens} @ d{self.depth}: "
                "tokens must be >= 1 and depth >= 0"
            )

    @classmethod
    def traffic(cls, metric: str) -> Workload:
        return cls("traffic", 0, 0, metric)

    @classmethod
    def parse(cls, name: str) -> Workload:
        """``"pp512"``, ``"tg64"``, ``"tg128 @ d8192"`` (or ``"tg128@d8192"``),
        ``"traffic.prefill"``."""
        if t := _TRAFFIC.match(name):
            if not is_traffic_metric(t.group(1)):
                raise ConfigError(
                    f"workload {name!r}: traffic has no metric {t.group(1)!r}; use one of "
                    f"{_METRICS_TEXT}"
                )
            return cls.traffic(t.group(1))
        m = _NAME.match(name)
        if not m:
            raise ConfigError(
                f"workload {name!r} is not a llama-bench name or a traffic metric: write ppN, "
                "tgN, 'tgN @ dD' or traffic.METRIC (e.g. traffic.prefill, traffic.ttft_p99)"
            )
        return cls(m.group(1), int(m.group(2)), int(m.group(3) or 0))

    @property
    def name(self) -> str:
        if self.is_traffic:
            return f"traffic.{self.metric}"
        base = f"{self.kind}{self.tokens}"
        return f"{base} @ d{self.depth}" if self.depth else base

    @property
    def compact(self) -> str:
        """The name without spaces, as a claim writes it (``tg128@d8192``)."""
        return self.name.replace(" ", "")

    def table_order(self) -> tuple[bool, int, int]:
        """Where tables and plots show it: prefill first, then by depth and tokens."""
        return (self.kind != "pp", self.depth, self.tokens)

    @property
    def is_prefill(self) -> bool:
        return self.kind == "pp"

    @property
    def is_traffic(self) -> bool:
        return self.kind == "traffic"

    @property
    def higher_is_better(self) -> bool:
        """False for latencies (milliseconds), true for every rate."""
        return self.metric not in TRAFFIC_LATENCIES

    def require_rate(self, where: str) -> Workload:
        """This workload, or :class:`ConfigError` for a latency: *where* (a gate, bisect, a
        dead end) judges "slower" as a smaller number, which a latency is not."""
        if not self.higher_is_better:
            raise ConfigError(
                f"{where}: {self} is a latency (lower is better) and {where} judges rates; "
                "use traffic.prefill, traffic.decode or traffic.requests, or write a claim "
                f"(e.g. 'new.{self} <= 1.1 * old.{self}')"
            )
        return self

    @property
    def unit(self) -> str:
        if self.metric in TRAFFIC_LATENCIES:
            return "ms"
        if self.metric == "requests":
            return "req/s"
        return "tok/s"

    def __str__(self) -> str:
        return self.name
