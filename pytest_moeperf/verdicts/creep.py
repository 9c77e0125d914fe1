"""Change across days without comparing days: the accepted chain of paired gates, and the
between-session term of a baseline check.

A gate compares two builds in the same rounds, so the host's drift between hours (10-20 % on
this project's VMs) falls on both sides alike. Comparing today's candidate with numbers stored
on another day would put that drift into the verdict. So nothing here is compared unpaired
across days:

- **Creep.** Each gate that is accepted stores its paired change (:class:`PairedChange`: the
  log-ratio of candidate over baseline, its standard error, the build it was paired with).
  The change since the oldest build of the chain is the sum of the chain's links and this
  gate's own, with the standard errors added in quadrature (:func:`judge_chain`): every link
  was measured in rounds of its own day, and no day's level enters. A build pair's change is
  not quite the same on another day either, so every link also carries a between-session
  term: without it a chain's stated 95 % covered about 88 % at 1 % a link. A host measures
  its own from the build pairs it accepted more than once (:func:`link_spread`: how far the
  repeats of one pair stand apart beyond their own errors), pooled with the prior
  (:data:`~pytest_moeperf.defaults.LINK_TERM`, 2 % a link) so that a few repeats move it
  little and many decide it, down to zero where the repeats agree within their errors.
- **Baseline checks.** An absolute check does compare two sessions: the stored median and
  today's. Its interval gains a between-session term (:func:`session_term`), measured per
  host, configuration and workload from the levels of its sessions (stored runs an hour apart
  or more) of the same build, a t on their degrees of freedom and no prior: until
  :data:`~pytest_moeperf.defaults.MIN_SESSIONS` sessions exist, a check is judged once on the
  samples it has with the term held at its prior bound
  (:data:`~pytest_moeperf.defaults.SESSION_PRIOR_BOUND`) and stands only beyond it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..defaults import (
    CONFIDENCE,
    LINK_PRIOR_LINKS,
    LINK_TERM,
    MARGIN,
    MIN_SESSIONS,
    SESSION_GAP,
    SESSION_PRIOR_BOUND,
    SESSION_PRIOR_SESSIONS,
    SESSION_SPREAD,
)
from ..measure.stats import bounded_exp
from ..measure.student import t_quantile
from .sequential import Rule

CHAIN_CONFIDENCE = CONFIDENCE
"""The confidence of the chained change's interval (two-sided): a false "slower than the
oldest accepted" (which refuses an accept) at most 2.5 % of the time."""


@dataclass(frozen=True)
class PairedChange:
    """One accepted gate's paired change of a configuration and workload: what the chain is
    made of."""

    against: str
    """The build the accepted one was gated against (the link's older end)."""
    log_ratio: float
    """The trimmed mean of the rounds' ``log(candidate / baseline)``."""
    se: float
    """Its standard error (the verdict's own: from its process blocks, or the host's calibrated
    term pooled with them, and drift)."""
    rounds: int
    df: float | None = None
    """The degrees of freedom of :attr:`se` (its blocks', or its verdict's Satterthwaite
    mix); ``None``: not recorded (an entry of before they were), taken as its rounds less one."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.log_ratio) and math.isfinite(self.se) and self.se >= 0):
            raise ValueError(
                f"paired change {self.log_ratio!r} +- {self.se!r}: give a finite log-ratio "
                "and a standard error >= 0"
            )
        if self.rounds < 1:
            raise ValueError(f"paired change over {self.rounds} rounds: give rounds >= 1")
        if self.df is not None and not (math.isfinite(self.df) and self.df > 0):
            raise ValueError(f"paired change with df {self.df!r}: give degrees of freedom > 0")

    @property
    def evidence(self) -> float:
        """The degrees of freedom of its standard error (recorded, or its rounds less one)."""
        return self.df if self.df is not None else float(max(1, self.rounds - 1))

    def to_dict(self) -> dict[str, Any]:
        """The baseline file's ``change = { ... }`` of an entry."""
        d: dict[str, Any] = {
            "against": self.against,
            "log_ratio": float(f"{self.log_ratio:.6g}"),
            "se": float(f"{self.se:.6g}"),
            "rounds": self.rounds,
        }
        if self.df is not None:
            d["df"] = float(f"{self.df:.4g}")
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PairedChange:
        """From :meth:`to_dict`; ``ValueError`` (naming the field) when malformed."""
        unknown = sorted(set(d) - {"against", "log_ratio", "se", "rounds", "df"})
        if unknown:
            raise ValueError(
                f"unknown field {unknown[0]!r} (known: against, log_ratio, se, rounds, df)"
            )
        against = d.get("against")
        if not isinstance(against, str) or not against:
            raise ValueError(f"against {against!r} must name the build it was gated against")
        for name in ("log_ratio", "se"):
            if isinstance(d.get(name), bool) or not isinstance(d.get(name), int | float):
                raise ValueError(f"{name} {d.get(name)!r} must be a number")
        rounds = d.get("rounds")
        if isinstance(rounds, bool) or not isinstance(rounds, int):
            raise ValueError(f"rounds {rounds!r} must be a whole number")
        df = d.get("df")
        if df is not None and (isinstance(df, bool) or not isinstance(df, int | float)):
            raise ValueError(f"df {df!r} must be a number")
        return cls(
            against,
            float(d["log_ratio"]),
            float(d["se"]),
            rounds,
            None if df is None else float(df),
        )


@dataclass(frozen=True)
class ChainedChange:
    """The change of a candidate since the oldest build of its accepted chain."""

    since: str
    """The oldest build of the chain."""
    builds: tuple[str, ...]
    """The chain's builds, oldest first, the gate's baseline last (the candidate follows)."""
    ratio: float
    low: float
    high: float
    outcome: str
    """Of :class:`~pytest_moeperf.verdicts.sequential.Rule` ``change``: ``slower`` when the
    whole interval lies past the margin."""
    margin: float = MARGIN
    confidence: float = CHAIN_CONFIDENCE
    label: str = ""
    link_term: float = LINK_TERM
    """The between-session term each link carried (log standard deviation)."""
    link_basis: str = ""
    """Where :attr:`link_term` came from (:meth:`LinkSpread.describe`)."""

    def explain(self) -> str:
        """``mmap.pp512 since b11400 (3 gates) = 0.93 [0.90, 0.96] (-7.0 %): slower``."""
        gates = len(self.builds)
        return (
            f"{self.label} since {self.since} ({gates} paired gate{'s' * (gates != 1)}) = "
            f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}] "
            f"({100 * (self.ratio - 1):+.1f} %): {self.outcome}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field but :attr:`label`, and its line."""
        fields = {k: v for k, v in asdict(self).items() if k != "label"}
        return {**fields, "builds": list(self.builds), "explain": self.explain()}


def judge_chain(
    links: Sequence[tuple[str, PairedChange]],
    current: PairedChange,
    *,
    margin: float = MARGIN,
    label: str = "",
    link_term: float | LinkSpread = LINK_TERM,
) -> ChainedChange:
    """The candidate's change since the oldest build of *links* (each ``(build, its accepted
    change)``, oldest first; every link's ``against`` is the build before it, the first's is
    the chain's start) plus *current* (this gate's paired change over the newest link's
    build): the sum of the log-ratios, its standard error the root of the sum of squares (each
    change's own, and *link_term* for each: a build pair's change moves between sessions), a
    t interval at :data:`CHAIN_CONFIDENCE` on the degrees of freedom of that sum
    (Satterthwaite's: each change's own, and the link term's evidence: its prior's worth and
    the repeats a host measured it from), judged by the ``change`` rule at its end. *link_term*
    is a log standard deviation (taken as known), or the host's measured :class:`LinkSpread`."""
    basis = link_term.describe() if isinstance(link_term, LinkSpread) else ""
    term_df = math.inf
    if isinstance(link_term, LinkSpread):
        term_df = link_term.prior_links + link_term.repeats
        link_term = link_term.log_sd
    if not (math.isfinite(link_term) and link_term >= 0):
        raise ValueError(f"link term {link_term!r} must be a finite number >= 0")
    changes = [c for _, c in links] + [current]
    centre = sum(c.log_ratio for c in changes)
    parts = [(c.se**2, c.evidence) for c in changes] + [(len(changes) * link_term**2, term_df)]
    variance = sum(v for v, _ in parts)
    se = math.sqrt(variance)
    spread = sum(v * v / df for v, df in parts if math.isfinite(df))
    df = variance**2 / spread if spread > 0 else math.inf
    if math.isfinite(df):
        q = t_quantile(0.5 + CHAIN_CONFIDENCE / 2, max(df, 1.0))
    else:
        q = statistics.NormalDist().inv_cdf(0.5 + CHAIN_CONFIDENCE / 2)
    low, high = bounded_exp(centre - q * se), bounded_exp(centre + q * se)
    ratio = math.exp(centre)
    outcome = Rule("change", margin=margin).outcome(ratio, low, high, final=True)
    since = links[0][1].against if links else current.against
    return ChainedChange(
        since=since,
        builds=(since, *(b for b, _ in links)),
        ratio=ratio,
        low=low,
        high=high,
        outcome=str(outcome),
        margin=margin,
        label=label,
        link_term=link_term,
        link_basis=basis,
    )


@dataclass(frozen=True)
class LinkSpread:
    """How much one build pair's paired change moves between sessions on a host (log scale):
    the between-session term each link of a chain carries."""

    log_sd: float
    pairs: int
    """Build pairs (of a configuration and workload) the host accepted more than once."""
    repeats: int
    """Degrees of freedom those repeats gave: each pair's acceptances less one."""
    prior: float = LINK_TERM
    prior_links: float = LINK_PRIOR_LINKS

    def describe(self) -> str:
        """``between sessions 0.6 % a link (from 3 repeats of 2 build pairs and a prior of
        1.0 % worth 4)``; the prior alone says how to measure the host's own."""
        if not self.repeats:
            return (
                f"between sessions {100 * self.log_sd:.1f} % a link (the prior: this host has "
                "accepted no build pair twice; a pair gated and accepted again on another day "
                "measures it)"
            )
        return (
            f"between sessions {100 * self.log_sd:.1f} % a link (from {self.repeats} "
            f"repeat{'s' * (self.repeats != 1)} of {self.pairs} build pair"
            f"{'s' * (self.pairs != 1)} and a prior of {100 * self.prior:.1f} % worth "
            f"{self.prior_links:g})"
        )


def link_spread(
    repeated: Sequence[Sequence[PairedChange]],
    *,
    prior: float = LINK_TERM,
    prior_links: float = LINK_PRIOR_LINKS,
) -> LinkSpread:
    """The between-session term of a link from *repeated*: groups of paired changes of one
    build pair (and configuration and workload), each accepted in a session of its own. A
    group's variance of log-ratios holds the term and the changes' own errors, so each group
    gives ``variance - mean(se^2)`` with ``k - 1`` degrees of freedom; these are pooled with
    the *prior* (log standard deviation) counted as *prior_links* degrees of freedom, and the
    sum floored at zero: a host whose repeats agree within their own errors drives it to zero,
    one with few repeats stays near the prior."""
    if not (math.isfinite(prior) and prior >= 0) or prior_links <= 0:
        raise ValueError(f"prior {prior!r} and prior_links {prior_links!r} must be >= 0, > 0")
    pooled, df, pairs = prior**2 * prior_links, 0, 0
    for group in repeated:
        if len(group) < 2:
            continue
        own = statistics.fmean(c.se**2 for c in group)
        k = len(group) - 1
        pooled += (statistics.variance([c.log_ratio for c in group]) - own) * k
        df += k
        pairs += 1
    return LinkSpread(
        log_sd=math.sqrt(max(pooled, 0.0) / (prior_links + df)),
        pairs=pairs,
        repeats=df,
        prior=prior,
        prior_links=prior_links,
    )


@dataclass(frozen=True)
class SessionSpread:
    """The spread of one build's session medians on one host (log scale): how far two
    sessions' levels stand apart when nothing changed."""

    log_sd: float
    """The standard deviation of one session's level (a median's log)."""
    sessions: int
    """Session medians it was estimated from."""
    prior: float
    """The prior it was pooled with (:data:`~pytest_moeperf.defaults.SESSION_SPREAD`, or the
    host's calibrated figure)."""
    prior_sessions: float = SESSION_PRIOR_SESSIONS

    @property
    def difference_sd(self) -> float:
        """The log standard deviation of the difference of two sessions' levels."""
        return math.sqrt(2.0) * self.log_sd

    def describe(self) -> str:
        """``between sessions 7.1 % (from 4 sessions and a prior of 10 %)``."""
        seen = f"{self.sessions} session{'s' * (self.sessions != 1)}"
        return (
            f"between sessions {100 * math.expm1(self.log_sd):.1f} % (from {seen} and a prior "
            f"of {100 * math.expm1(self.prior):.1f} % worth {self.prior_sessions:g})"
        )


def session_spread(
    *groups: Sequence[float],
    prior: float = SESSION_SPREAD,
    prior_sessions: float = SESSION_PRIOR_SESSIONS,
) -> SessionSpread:
    """The between-session spread of session levels (tok/s): each of *groups* holds the levels
    of the sessions of one thing that did not change (one build's session medians; one log's
    sessions). The variances of their logs, each around its group's own mean, are pooled with
    a *prior* (log standard deviation) that counts as *prior_sessions* degrees of freedom, so
    that with few sessions it stays near the prior (conservative) and with many it follows
    them. A session level's variance holds its within-session noise too, so it overstates the
    term, never understates it."""
    if prior < 0 or prior_sessions <= 0:
        raise ValueError(f"prior {prior!r} and prior_sessions {prior_sessions!r} must be >= 0, > 0")
    pooled, df, sessions = prior**2 * prior_sessions, 0, 0
    for levels in groups:
        logs = [math.log(m) for m in levels if m > 0 and math.isfinite(m)]
        sessions += len(logs)
        if len(logs) >= 2:
            pooled += statistics.variance(logs) * (len(logs) - 1)
            df += len(logs) - 1
    return SessionSpread(
        log_sd=math.sqrt(pooled / (prior_sessions + df)),
        sessions=sessions,
        prior=prior,
        prior_sessions=prior_sessions,
    )


@dataclass(frozen=True)
class SessionTerm:
    """How far one host's level of one build, configuration and workload wanders between its
    sessions, measured from its own sessions (no prior): the spread of their log levels, with
    the degrees of freedom it has (sessions less one), so that a baseline check's interval
    widens by a t on them. Runs closer together than :data:`SESSION_GAP` are one session (a
    host's level lingers for minutes to hours: sessions taken back to back would read it as
    steadier than it is)."""

    log_sd: float
    """The standard deviation of one session's level (the log of its median)."""
    sessions: int
    """Sessions it was measured from (runs :data:`SESSION_GAP` apart or more)."""
    runs: int
    """Stored runs (and accepted values) those sessions hold."""
    prior: float = 0.0
    """A stated upper bound (log standard deviation) standing in for the term while it is not
    measured (0: none; :meth:`at_prior`)."""

    def at_prior(self, bound: float = SESSION_PRIOR_BOUND) -> SessionTerm:
        """This term, held at *bound* while it is not measured (a measured one is unchanged)."""
        return self if self.measured else SessionTerm(self.log_sd, self.sessions, self.runs, bound)

    def widening(self) -> tuple[float, float | None] | None:
        """What widens a ratio of two sessions' levels: the log standard deviation of their
        difference and its degrees of freedom (``None``: a normal quantile, at the prior bound),
        or ``None`` when neither measured nor bounded."""
        if self.measured:
            return math.sqrt(2.0) * self.log_sd, self.df
        if self.prior > 0:
            return math.sqrt(2.0) * self.prior, None
        return None

    @property
    def measured(self) -> bool:
        """Whether there are sessions enough to say it (:data:`MIN_SESSIONS`)."""
        return self.sessions >= MIN_SESSIONS

    @property
    def df(self) -> int:
        return max(self.sessions - 1, 0)

    def reach(self, confidence: float) -> float:
        """What the term alone puts around a ratio of two sessions' levels (log half-width at
        *confidence*, a t on its degrees of freedom); ``inf`` while it is not measured."""
        if not self.measured:
            return math.inf
        return t_quantile(0.5 + confidence / 2, self.df) * math.sqrt(2.0) * self.log_sd

    def describe(self) -> str:
        """``between sessions 3.1 % (from 5 sessions of 9 runs, an hour apart or more)``."""
        if not self.sessions:
            return "between sessions: no session of this host stored"
        if not self.measured:
            bound = f", held at a prior bound of {100 * self.prior:g} %" if self.prior else ""
            return (
                f"between sessions: not measured ({self.sessions} session"
                f"{'s' * (self.sessions != 1)} stored; {MIN_SESSIONS} needed){bound}"
            )
        return (
            f"between sessions {100 * math.expm1(self.log_sd):.1f} % (from {self.sessions} "
            f"sessions of {self.runs} runs, {SESSION_GAP / 3600:g} h apart or more)"
        )


def session_term(levels: Iterable[tuple[float, float]], gap: float = SESSION_GAP) -> SessionTerm:
    """The between-session term of *levels* (each a stored run's time, seconds since the
    epoch, and its median): runs within *gap* of the first run of their session are that
    session, whose level is their logs' mean; the term is the sessions' levels' standard
    deviation (none below two sessions). A session's level holds its own within-session
    noise too, so it overstates the term, never understates it."""
    runs = sorted((t, math.log(m)) for t, m in levels if m > 0 and math.isfinite(m))
    sessions: list[list[float]] = []
    start = -math.inf
    for at, level in runs:
        if at - start >= gap:
            sessions.append([])
            start = at
        sessions[-1].append(level)
    means = [statistics.fmean(s) for s in sessions]
    sd = statistics.stdev(means) if len(means) >= 2 else 0.0
    return SessionTerm(sd, len(means), len(runs))
