"""The unpaired judges the unit tests call by the kind of verdict: a claim, a change and a dead
end, each :func:`~pytest_moeperf.verdicts.judge.judge_unpaired` under its rule (the package
judges through the rounds loop, which calls ``judge_unpaired`` for sides it cannot pair)."""

from __future__ import annotations

from pytest_moeperf.defaults import MARGIN
from pytest_moeperf.verdicts.claims import Claim
from pytest_moeperf.verdicts.judge import Values, Verdict, judge_unpaired
from pytest_moeperf.verdicts.sequential import Rule


def judge_claim(claim: Claim, left: Values, right: Values, *, seed: int = 0) -> Verdict:
    """Judge *claim* on the left and right measurements (samples or stored figures).

    ``holds`` when the whole interval of ``left / right`` lies on the claim's side of its
    factor, ``fails`` when it lies wholly on the other side, ``undecided`` otherwise."""
    return judge_unpaired(claim.rule, left, right, label=f"{claim.left} / {claim.right}", seed=seed)


def judge_change(
    candidate: Values,
    baseline: Values,
    *,
    margin: float = MARGIN,
    seed: int = 0,
    label: str = "candidate / baseline",
) -> Verdict:
    """Gate verdict on ``candidate / baseline`` (e.g. a new build against the old one on the
    same flags), with *margin* the smallest change that matters (0.05 = 5 %).

    Unpaired samples (or stored figures), judged once on a bootstrap interval by the rule of
    :class:`~pytest_moeperf.verdicts.sequential.Rule` ``change``: slower / faster beyond the
    margin, small-slower / small-faster (a real change within it), unchanged, or undecided.
    Gates and ``moeperf.compare`` judge paired rounds instead (:func:`judge_rounds`)."""
    rule = Rule("change", margin=margin)
    return judge_unpaired(rule, candidate, baseline, label=label, seed=seed)


def judge_dead_end(config: Values, other: Values, *, label: str = "dead end / other") -> Verdict:
    """Is a dead end still slower? On the interval of ``config / other``:

    - ``holds``: ``high < 1``, the configuration is surely slower: the dead end stands;
    - ``fails``: ``low >= 1 - MARGIN``, it is as fast (within the margin) or faster: the dead
      end may have reopened;
    - ``undecided`` otherwise."""
    return judge_unpaired(Rule("dead_end"), config, other, label=label)
