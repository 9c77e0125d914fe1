"""Baseline checks on a host whose level drifts between sessions: how often they pass, fail or
decide nothing, by the rule the fixture uses and by the rules it replaced.

A stored baseline is another session's number. Each simulated session of the host has its own
level (log-normal, SD *session*), each sample of it a spread of its own (SD *sample*); the
store holds *k* earlier sessions of the same build, a day apart (one run each), the baseline is
the first one's samples, and today's session measures *n* samples at a true change (1.00:
nothing changed; 0.80: a real 20 % slowdown). Every check is the real
:func:`pytest_moeperf.verdicts.baseline_check.judge_baseline`; the rules differ only in the
between-session term it is given:

- **measured** (the fixture's): the term measured from the stored sessions
  (:func:`pytest_moeperf.verdicts.creep.session_term`, a t on their degrees of freedom), and
  while fewer than ``MIN_SESSIONS`` are stored, held at its prior bound
  (``SESSION_PRIOR_BOUND``, 20 %) and judged once: undecided there is a skip, said at once;
- **prior 10 % worth 4** (the rule before): the stored sessions pooled with a prior of 10 %
  that counts as 4 sessions (:func:`pytest_moeperf.verdicts.creep.session_spread`);
- **none**: no between-session term, the samples' interval alone (what a check that forgets
  the host drifts would say).

A check that *fails* when nothing changed is a false alarm; one that does not fail at 0.80 (a
real slowdown beyond any tolerance here) missed it.

    python benchmarks/baseline_sessions.py --runs 1000
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np

from pytest_moeperf.defaults import MIN_SESSIONS
from pytest_moeperf.verdicts.baseline_check import judge_baseline
from pytest_moeperf.verdicts.creep import SessionTerm, session_spread, session_term

DAY = 24 * 3600.0
SAMPLES = 10
"""Samples today's check holds (a measurement's repetitions and a few looks' more)."""
SAMPLE_SD = 0.05
"""Spread of one sample within a session (log): this project's VMs read 5-10 %."""

Rule = Callable[[list[list[float]]], SessionTerm | None]


def measured(sessions: list[list[float]]) -> SessionTerm | None:
    term = session_term((i * DAY, float(np.median(s))) for i, s in enumerate(sessions))
    return term.at_prior()


def prior_worth_four(sessions: list[list[float]]) -> SessionTerm | None:
    spread = session_spread([float(np.median(s)) for s in sessions])
    # held as known (many degrees of freedom: a normal quantile), as that rule judged it
    return SessionTerm(spread.log_sd, 10**6, len(sessions))


def none(sessions: list[list[float]]) -> SessionTerm | None:
    return None


RULES: dict[str, Rule] = {
    "measured": measured,
    "prior 10 % worth 4 (before)": prior_worth_four,
    "none": none,
}


def cell(
    rule: Rule, session: float, stored: int, truth: float, tolerance: float, runs: int, seed: int
) -> dict[str, float]:
    """Shares of *runs* checks that passed, failed and stayed undecided."""
    rng = np.random.default_rng(seed)
    said = {"pass": 0, "fail": 0, "undecided": 0}
    for _ in range(runs):
        levels = rng.normal(0.0, session, stored + 1)
        sessions = [
            list(100.0 * np.exp(level + rng.normal(0.0, SAMPLE_SD, SAMPLES))) for level in levels
        ]
        today = sessions.pop()
        today = [v * truth for v in today]
        baseline = sessions[0]
        check = judge_baseline(
            today,
            float(np.median(baseline)),
            tolerance,
            baseline=baseline,
            session=rule(sessions),
        )
        said[check.outcome] += 1
    return {k: v / runs for k, v in said.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000, help="seeded checks a cell")
    args = p.parse_args(argv)
    print(
        f"samples {SAMPLES} a session at SD {100 * SAMPLE_SD:g} %; undecided with the measured "
        f"rule and fewer than {MIN_SESSIONS} stored sessions is a skip said before measuring\n"
    )
    print("| session SD | tolerance | stored sessions | truth | rule | pass | fail | undecided |")
    print("|" + "---|" * 8)
    i = 0
    for session in (0.03, 0.10):
        for tolerance in (0.05, 0.15):
            for stored in (1, 3, 5, 10, 30):
                for truth in (1.0, 0.8):
                    for name, rule in RULES.items():
                        i += 1
                        c = cell(rule, session, stored, truth, tolerance, args.runs, 1000 * i)
                        print(
                            f"| {100 * session:g} % | {100 * tolerance:g} % | {stored} "
                            f"| {truth:.2f} | {name} | {100 * c['pass']:.1f} % "
                            f"| {100 * c['fail']:.1f} % | {100 * c['undecided']:.1f} % |",
                            flush=True,
                        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
