"""The defaults of pytest-moeperf, named once: the pytest options, the ``moeperf`` command's
arguments, the profile keys and the README's option table all read them from here (help texts
are formatted from these constants, never written as literals)."""

from __future__ import annotations

STARTUP_TIMEOUT = 300.0
"""Seconds a llama-server may take to load its model and answer ``/health``."""
REQUEST_TIMEOUT = 600.0
"""Seconds one measured request may take."""
STOP_GRACE = 10.0
"""Seconds a process group has after SIGTERM before it is killed (a server, a compile)."""
KILL_WAIT = 10.0
"""Seconds to wait for a process group to be gone after SIGKILL."""

BUDGET = 180.0
"""Seconds a verdict (claim, dead end, baseline check, gate row) may keep measuring."""
MAX_ROUNDS = 200
"""The most paired rounds (or repetitions, for a baseline check) a verdict may take."""
FIRST_LOOK = 6
"""Paired rounds before a verdict's first look (at least; a profile's repetitions may add)."""
REPETITIONS = 3
"""Timed repetitions of a plain measurement (as in ADR-0042's llama-bench tables)."""
MARGIN = 0.05
"""The smallest change that counts (0.05: 5 %): gates, ``compare``, dead ends."""
FAMILY_ALPHA = 0.05
"""The chance a gate calls any row slower (or faster) beyond the margin when none is: each
row of a family of k is judged at FAMILY_ALPHA / k, and Holm's step-down decides the rest."""
PRIOR_PROCESS_TERM = 0.05
"""The prior upper bound on a process pair's offset (log standard deviation) of a host whose term
is not calibrated: a verdict's early looks (before its third process block, where its own blocks
cannot yet show the term) judge their interval with the term taken at this bound, so that a large
effect decides on its first process pair. 5 %: over three times the loudest term this project has
measured on a real host (1.2-1.5 %, ``moeperf calibrate`` and ``benchmarks/process_term.py``), the
loudest of ``benchmarks/error_rates.py``'s hosts, and above the 3.6 % a wrapper drawing each
process's own speed made (``benchmarks/process_slowdown.py``). A host louder than it errs more
often at those early looks (7 %: about 10 % over all looks; ``error_rates.py --louder``,
docs/campaigns.md); ``moeperf calibrate`` or the host's stored history gives its own."""
EARLY_SHARE = 0.3
"""The share of a verdict's error rate its early looks spend (Bonferroni over them): the looks
at :data:`EARLY_ROUNDS` and those of the round schedule before the first look of the main
schedule (on a host not calibrated, its third whole process block)."""
EARLY_ROUNDS = (4,)
"""Rounds at which a verdict looks early, besides the round schedule: a change of 3x shows in
four rounds, the fewest whose round spread an early look can trust (its own rounds' spread on 3
degrees of freedom; on 1, after two rounds, the interval's Welch-Satterthwaite t missed 4-6
times its share of the error rate where the round spread is as large as the process term's
prior bound: ``benchmarks/error_rates.py``, docs/campaigns.md). No early look comes before it."""
ROUND_SPREAD = 0.05
"""The spread of one paired round's log-ratio a host is taken to have until it was calibrated
or its stored verdicts say (5 %; this project's 2-core VMs read 5-10 %, ADR-0042's host about
3 %): with :data:`PROCESS_TERM` it sizes the process blocks (Kalibera and Jones)."""
PROCESS_TERM = 0.015
"""A process pair's offset of a verdict's log-ratio on this project's hosts (log standard
deviation: process pairs of one configuration differ by about 1.5 %, where pages and threads
landed). No verdict rests on it: a host not calibrated estimates the term from each verdict's
own process blocks, a calibrated one from ``moeperf calibrate``'s. It only sizes what a
calibrated host whose figures hold no term can resolve, before it measures, and the process
blocks of a host whose term is not known."""
LINK_TERM = 0.02
"""The log standard deviation a gate's paired change has between sessions (the change of one
build pair is not quite the same on another day), per link of an accepted chain, until the
host's accepted history measures it: 2 % a link. A chain cannot measure it from its own links
(each was gated once), so the default is an upper figure, not a typical one: at a true 2 %,
a prior of 1 % let chains of 3 and 10 links miss their true change 12.5-14 % of the time where
they said 5 % (``benchmarks/error_rates.py``). A build pair gated and accepted again on another
day measures the host's own."""
LINK_PRIOR_LINKS = 4.0
"""How many repeated links' worth of evidence :data:`LINK_TERM` counts as, pooled with the
build pairs a host accepted more than once: with few repeats the term stays near
:data:`LINK_TERM`."""
CONFIDENCE = 0.95
"""The confidence of an interval that is not sequential (a stored figure's, a log's, a single
look's): 95 %, two-sided."""
MIN_REL_SPREAD = 0.01
"""The least relative spread a side's samples are taken to have (a few that happen to agree
say little about the next ones)."""
TOLERANCE = 0.05
"""A baseline file's default tolerance: 5 % worse than the baseline still passes."""
SESSION_GAP = 3600.0
"""Seconds between two stored runs of a host for them to count as two sessions in a baseline
check's between-session term (runs closer together are one session: on this project's VMs the
same configuration drifted -13 % in 40 minutes and -20 % in an hour, so runs minutes apart read
the host as steadier than it is)."""
MIN_SESSIONS = 3
"""Sessions of a host (:data:`SESSION_GAP` apart) a baseline check needs before its
between-session term is measured; with fewer it is judged once, on the samples in hand, with
the term held at :data:`SESSION_PRIOR_BOUND`, and skips saying so unless that decides."""
SESSION_PRIOR_BOUND = 0.20
"""The prior upper bound on a host's between-session term (log standard deviation of a
session's level) while its sessions have not measured it: the largest move this project has
seen on one host within an hour (-20 %). A baseline check judged at it decides only where its
samples lie beyond the limit by more than any plausible session-to-session move (a baseline
recorded minutes ago that every server beats twice over, or one no server reaches): nearer
the limit it says what it lacks."""
SESSION_SPREAD = 0.10
"""The between-session spread (log standard deviation of a session's level) a comparison of
production logs assumes until the logs' own sessions say otherwise: on this project's VMs the same
configuration drifted -13 % in 40 minutes and -20 % in an hour."""
SESSION_PRIOR_SESSIONS = 4.0
"""How many sessions' worth of evidence :data:`SESSION_SPREAD` counts as, pooled with the
logs' own sessions: with few sessions the comparison stays near it (conservative)."""

BUSY_LIMIT = 0.25
"""Share of a server's CPUs other work may take while it is measured for the numbers to
decide a verdict or be accepted as baselines."""
PROBE_TOLERANCE = 0.15
"""Two calibration probes further apart than this share are two hosts, or a host that
changed under the run. On this project's 2-core VMs, six probes in a row wandered by up to
+-11 % (the shared host underneath moves, as llama.cpp's own samples do); the hosts it must
tell apart differ by 30 % and more (pp512 420, 620 and 1160 tok/s on three VMs identical to
/proc/cpuinfo)."""
BANDWIDTH_MOVE = 0.5
"""How far the probe's memory bandwidth must move, at the least, to be the host changing under
a run (compute keeps :data:`PROBE_TOLERANCE`). The two-thread streaming read swings on this
project's 2-core VMs while llama.cpp does not: 36-52 GB/s on one VM while mmap tg64 stayed at
200-207 tok/s, and 20.3 -> 26-28 GB/s (+32-40 %) on another while its tg64 held 128.8 tok/s
(cv 1.0 %), where four of seven verdicts of the README's run ended undecided for it. A
throttled or halved host moves both figures, compute first."""
REPROBE_SECONDS = 30.0
"""A verdict re-probes its CPUs when their last probe is older than this (a few seconds of
work): often enough to notice the host changing under a run, rarely enough to cost little."""
NUMA_MIN_SHARE = 0.9
"""Share of a NUMA-pinned server's memory that must lie on its node."""


# -- what a value of these settings must be: checked once here, by the pytest options, the
# -- moeperf command's arguments and the profile keys alike (one line naming the option) ------


class SettingError(ValueError):
    """A setting's value is not one it can take; the message names the option and says what
    to give instead (the caller turns it into its own one-line error)."""


def _finite(value: float) -> bool:
    return value == value and value not in (float("inf"), float("-inf"))


def check_seconds(value: float | None, option: str, what: str, *, example: float) -> None:
    """*value* is seconds > 0 (``None``: not given)."""
    if value is not None and not (_finite(value) and value > 0):
        raise SettingError(f"{option} {value!r}: give seconds > 0 ({what}), e.g. {example:g}")


def check_budget(value: float | None, option: str, what: str = "a verdict") -> None:
    """A verdict's time budget: seconds > 0."""
    if value is not None and not (_finite(value) and value > 0):
        raise SettingError(
            f"{option} {value!r}: give the seconds {what} may measure, e.g. {BUDGET:g}"
        )


def check_share(
    value: float | None, option: str, *, low: float, high: float, closed: str, example: float
) -> None:
    """*value* is a share between *low* and *high*; *closed* names the ends that are allowed
    (``"low"``, ``"high"``, ``"both"`` or ``""``)."""
    if value is None:
        return
    above = value >= low if closed in ("low", "both") else value > low
    below = value <= high if closed in ("high", "both") else value < high
    if not (_finite(value) and above and below):
        left = "[" if closed in ("low", "both") else "("
        right = "]" if closed in ("high", "both") else ")"
        raise SettingError(
            f"{option} {value!r} must be a share in {left}{low:g}, {high:g}{right}, "
            f"e.g. {example:g}"
        )


def check_margin(value: float, option: str) -> None:
    """The smallest change that counts: a share in (0, 1)."""
    if not (_finite(value) and 0 < value < 1):
        raise SettingError(
            f"{option} {value!r}: give the smallest change that counts as a share between 0 "
            f"and 1, e.g. {MARGIN:g}"
        )


def check_busy_limit(value: float | None, option: str) -> None:
    check_share(value, option, low=0, high=1, closed="high", example=BUSY_LIMIT)


def check_probe_tolerance(value: float, option: str) -> None:
    check_share(value, option, low=0, high=1, closed="", example=0.1)


def check_numa_min_share(value: float, option: str) -> None:
    check_share(value, option, low=0, high=1, closed="both", example=NUMA_MIN_SHARE)


def check_rounds(value: int, option: str, *, at_least: int, what: str) -> None:
    """A count of rounds (or repetitions) of at least *at_least*."""
    if value < at_least:
        raise SettingError(f"{option} {value} must be >= {at_least} ({what})")


def check_reprobe(value: float, option: str) -> None:
    """Seconds after which a verdict probes its CPUs again: >= 0 (0: before every verdict)."""
    if not (_finite(value) and value >= 0):
        raise SettingError(f"{option} {value!r} must be >= 0 (0: before every verdict)")
