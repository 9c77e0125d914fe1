"""Two production logs compared, old against new, row by row: ADR-0042's real-traffic table
with a verdict per row (``moeperf logstats OLD.log NEW.log``).

Two logs are two sessions, often days apart, and a shared host moves 10-20 % between hours.
So a row's interval of ``new / old`` carries, on the log scale:

- **each log's request spread**: the standard deviation of a bootstrap over its requests
  (:func:`~pytest_moeperf.verdicts.reference.bootstrap_draws`), which narrows as a log grows;
- **a between-session term**: the spread of one session's level, measured from the sessions
  the logs themselves hold (each server restart, and each hour of a log with timestamps:
  :func:`~pytest_moeperf.llama.logs.log_sessions`) where a session has enough requests,
  pooled with the prior :data:`~pytest_moeperf.defaults.SESSION_SPREAD` (10 %) worth
  :data:`~pytest_moeperf.defaults.SESSION_PRIOR_SESSIONS` (:func:`session_spread`). Each log's
  level is one session's, so the difference carries twice its variance; it does not narrow
  with more requests. The same requests twice are one session and one sample: neither term.

Each row is judged by the ``change`` rule (:class:`~pytest_moeperf.verdicts.sequential.Rule`)
at :data:`~pytest_moeperf.defaults.FAMILY_ALPHA` over the rows, as a gate's rows, and says
which term dominates its width.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from ..defaults import CONFIDENCE, FAMILY_ALPHA, MARGIN, SESSION_SPREAD
from ..llama.logs import RequestTiming, log_sessions
from ..measure.stats import bounded_exp
from .creep import SessionSpread, session_spread
from .outcomes import Decision, GateOutcome
from .reference import (
    Metric,
    Statistic,
    bootstrap_draws,
    log_requests,
    rate_text,
    statistic_of,
)
from .sequential import Rule

MIN_SESSION_REQUESTS = 20
"""Requests a session needs in a row to count towards the between-session term."""
REQUEST_TERM = "request spread"
SESSION_TERM = "between-session term"


@dataclass(frozen=True)
class LogRow:
    """One row of the table: which requests (``prefill``/``decode``/``all`` tokens, at least
    *min_tokens* of them) and which statistic."""

    label: str
    metric: Metric
    statistic: Statistic
    min_tokens: int


def log_rows(
    prefill_min: int = 256, prefill_large_min: int = 4000, decode_min: int = 32
) -> list[LogRow]:
    """ADR-0042's rows (``moeperf logstats``' thresholds), and every request's tokens over its
    time."""
    prefill = "prefill, requests with ≥{:,} new tokens, aggregate"
    decode = f"decode, requests with ≥{decode_min:,} generated, aggregate"
    return [
        LogRow(prefill.format(prefill_min), "prefill", "aggregate", prefill_min),
        LogRow(prefill.format(prefill_large_min), "prefill", "aggregate", prefill_large_min),
        LogRow(decode, "decode", "aggregate", decode_min),
        LogRow("decode, median", "decode", "median", decode_min),
        LogRow("all requests, prompt and generated tokens over their time", "all", "aggregate", 0),
    ]


@dataclass(frozen=True)
class LogChange:
    """One row of two logs: each log's statistic and requests, ``new / old`` with its
    interval, the terms of its width and the verdict."""

    label: str
    outcome: Decision
    n_old: int
    n_new: int
    old: float | None = None
    new: float | None = None
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    request_sd: float = 0.0
    """Log standard deviation of the difference from both logs' requests."""
    session: SessionSpread | None = None
    """The between-session term (``None``: the same requests twice, one session)."""
    confidence: float = CONFIDENCE

    @property
    def session_sd(self) -> float:
        """Log standard deviation of the difference from the two sessions' levels."""
        return 0.0 if self.session is None else self.session.difference_sd

    @property
    def dominant(self) -> str:
        """Which term sets most of the width."""
        return SESSION_TERM if self.session_sd > self.request_sd else REQUEST_TERM

    def explain(self) -> str:
        """``decode, ... aggregate: 12.71 / 14.60 tok/s = 0.87 [0.70, 1.08] (-12.9 %),
        between-session term dominates: undecided``."""
        if self.ratio is None or self.low is None or self.high is None:
            return (
                f"{self.label}: too few requests (old {self.n_old:,}, new {self.n_new:,}): "
                f"{self.outcome}"
            )
        return (
            f"{self.label}: {_rate(self.new)} / {_rate(self.old)} tok/s = {self.ratio:.2f} "
            f"[{self.low:.2f}, {self.high:.2f}] ({100 * (self.ratio - 1):+.1f} %), "
            f"{self.dominant} dominates: {self.outcome}"
        )


def _rate(value: float | None) -> str:
    return "—" if value is None else rate_text(value)


def _session_levels(timings: Sequence[RequestTiming], row: LogRow) -> list[float]:
    """The row's statistic in each session of a log that has enough requests of it."""
    parts = (log_requests(part, row.metric, row.min_tokens) for part in log_sessions(timings))
    return [statistic_of(r, row.statistic) for r in parts if len(r) >= MIN_SESSION_REQUESTS]


def _log_sd(requests: Sequence[tuple[int, float]], row: LogRow, seed: int) -> tuple[float, float]:
    value, drawn = bootstrap_draws(requests, row.statistic, seed=seed)
    drawn = drawn[drawn > 0]
    return value, float(np.std(np.log(drawn), ddof=1)) if len(drawn) > 1 else math.inf


def compare_logs(
    old: Sequence[RequestTiming],
    new: Sequence[RequestTiming],
    rows: Sequence[LogRow],
    *,
    prior: float = SESSION_SPREAD,
    seed: int = 0,
) -> list[LogChange]:
    """Each of *rows* that either log has requests of (the others are left out), the *new*
    log's over the *old* log's, judged by the change rule at :data:`MARGIN` and
    :data:`FAMILY_ALPHA` over those rows (two-sided) with both logs' request spread and the
    between-session term (see the module), whose *prior* is a session level's log standard
    deviation where the logs hold too few sessions to measure it."""
    same = tuple(old) == tuple(new)
    requests = {
        r: (log_requests(old, r.metric, r.min_tokens), log_requests(new, r.metric, r.min_tokens))
        for r in rows
    }
    # a row neither log has a request of says nothing, and is no member of the family
    rows = [r for r in rows if requests[r][0] or requests[r][1]]
    alpha = FAMILY_ALPHA / max(1, len(rows))
    z = statistics.NormalDist().inv_cdf(1 - alpha / 2)
    rule = Rule("change", margin=MARGIN)
    out = []
    for row in rows:
        a, b = requests[row]
        session = (
            None
            if same
            else session_spread(_session_levels(old, row), _session_levels(new, row), prior=prior)
        )
        change = LogChange(
            row.label, "undecided", len(a), len(b), session=session, confidence=1 - alpha
        )
        if len(a) < 2 or len(b) < 2:
            out.append(change)
            continue
        old_value, old_sd = _log_sd(a, row, seed)
        new_value, new_sd = _log_sd(b, row, seed + 1)
        # the same requests twice: one sample, whose ratio to itself is exactly 1
        request_sd = 0.0 if same else math.hypot(old_sd, new_sd)
        sd = math.hypot(request_sd, change.session_sd)
        ratio = new_value / old_value
        low, high = ratio * bounded_exp(-z * sd), ratio * bounded_exp(z * sd)
        outcome = rule.outcome(ratio, low, high, final=True) or "undecided"
        out.append(
            replace(
                change,
                outcome=outcome,
                old=old_value,
                new=new_value,
                ratio=ratio,
                low=low,
                high=high,
                request_sd=request_sd,
            )
        )
    return out


def logs_outcome(changes: Sequence[LogChange]) -> GateOutcome:
    """As a gate's: ``slower`` when a row is, else ``undecided`` when one is, else ``passed``."""
    outcomes = {c.outcome for c in changes}
    if "slower" in outcomes:
        return "slower"
    return "undecided" if "undecided" in outcomes or not changes else "passed"
