"""Upgrade day: may this host move to build N? Every decision of a suite judged on the pinned
build and on the candidate, set side by side with the record's figure, and what changed.

A :class:`Decision` is one judged thing of one side: a claim, a dead end, a change a test
compared, a baseline check, a gate row (the candidate against the pinned build, so it has no
pinned side of its own), the greedy output of both builds, or a test's own assertion. Paired by
their key (the test without its side, and what it judged), they make the rows of one table
(:func:`upgrade_rows`), and the candidate's column alone makes the answer
(:func:`upgrade_outcome`), whose exit status is :data:`~.outcomes.UPGRADE_EXIT_STATUS`'s.
Pure functions over values: the plugin, the stored runs of the dashboard's compare page and
the tests build the same table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .judge import Verdict
from .outcomes import UpgradeOutcome

DecisionKind = Literal["claim", "dead end", "change", "baseline", "gate", "output", "test"]

GOOD = frozenset(
    {"holds", "passed", "faster", "small-faster", "small-slower", "unchanged", "same-output"}
)
"""Outcomes that keep a decision: a claim or dead end that holds, a check that passed, a gate
row not slower beyond the margin, the same greedy output."""
BAD = frozenset({"fails", "failed", "slower", "different-output"})
"""Outcomes that break one: a claim that fails, a dead end that reopened, a failed check or
test, a slower gate row, a different output."""
NOT_JUDGED = "not judged"
"""The outcome of a side that did not judge the decision (its test skipped before it did)."""


_WIDE = 1000.0
"""An interval end beyond this (or below its inverse) is shown as beyond it: a verdict whose
rounds spread that far has no end worth a digit."""


def ratio_text(v: Verdict) -> str:
    """``0.524 [0.501, 0.548]``: a verdict's ratio and interval as the table shows them."""

    def end(x: float) -> str:
        if x > _WIDE:
            return f">{_WIDE:g}"
        return "<0.001" if 0 < x < 1 / _WIDE else f"{x:.3f}"

    return f"{v.ratio:.3f} [{end(v.low)}, {end(v.high)}]"


SIDES = ("pinned", "candidate")
"""The two sides of an upgrade check, as a test's parameter names them (``test_x[pinned]``)."""


def base_test(nodeid: str, side: str | None = None) -> str:
    """*nodeid* without its side (``t.py::test_x[mmap-pinned]`` -> ``t.py::test_x[mmap]``):
    of *side*, or of either when none is given."""
    for name in SIDES if side is None else (side,):
        nodeid = nodeid.replace(f"[{name}]", "").replace(f"-{name}]", "]")
    return nodeid


def verdict_decision(test: str, asked: str, v: Verdict, record: str = "") -> Decision:
    """The decision a verdict of *test* is: a claim, a dead end (``<``) or a compared change
    (``~``), with its ratio and interval."""
    kind: DecisionKind = (
        "change" if v.relation == "~" else "dead end" if v.relation == "<" else "claim"
    )
    return Decision(test, asked, kind, v.outcome, ratio_text(v), record, why=v.reason or "")


def standing(kind: str, outcome: str) -> str:
    """``good``, ``bad``, ``undecided`` or ``none`` (not judged) of one side's *outcome*. A
    change a test compared is neither good nor bad by its word (the test's own assertion says
    which it wanted, a decision of kind ``test``): it stands good once decided."""
    if outcome == NOT_JUDGED:
        return "none"
    if outcome == "undecided":
        return "undecided"
    if kind == "change":
        return "good"
    return "bad" if outcome in BAD else "good"


@dataclass(frozen=True)
class Decision:
    """One side's judgement of one decision of the suite."""

    test: str
    """The test, without its side (``tests/perf/test_embedded.py::test_x``)."""
    asked: str
    """What it judged: a claim (``one-core.pp512 / mmap.pp512 <= 0.70``), a check
    (``baseline mmap.pp512``), a gate row (``mmap.tg64``)."""
    kind: DecisionKind
    outcome: str
    """The outcome word (:mod:`.outcomes`), or :data:`NOT_JUDGED`."""
    figure: str = ""
    """The numbers: ``0.52 [0.50, 0.54]``, a gate row's ``75.1 / 160.2 tok/s``."""
    record: str = ""
    """The record's figure of it (the reference column), empty where the record has none."""
    rerun: str = ""
    """The command that measures it again."""
    why: str = ""
    """Why it is undecided or not judged, when it is."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.test, self.asked)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v != "" or k in ("test", "asked")}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Decision:
        kind = str(d["kind"])
        if kind not in ("claim", "dead end", "change", "baseline", "gate", "output", "test"):
            raise ValueError(f"decision {dict(d)!r}: unknown kind {kind!r}")
        return cls(
            str(d["test"]),
            str(d["asked"]),
            kind,  # type: ignore[arg-type]
            str(d["outcome"]),
            str(d.get("figure", "")),
            str(d.get("record", "")),
            str(d.get("rerun", "")),
            str(d.get("why", "")),
        )


_CHANGED: dict[tuple[str, str], str] = {
    ("good", "good"): "",
    ("good", "bad"): "worse",
    ("good", "undecided"): "undecided on the candidate",
    ("good", "none"): "not judged on the candidate",
    ("bad", "good"): "better",
    ("bad", "bad"): "fails on both",
    ("bad", "undecided"): "undecided on the candidate (fails on the pinned build)",
    ("bad", "none"): "not judged on the candidate",
    ("undecided", "good"): "decided on the candidate",
    ("undecided", "bad"): "worse (undecided on the pinned build)",
    ("undecided", "undecided"): "undecided on both",
    ("undecided", "none"): "not judged on the candidate",
    ("none", "good"): "judged on the candidate only",
    ("none", "bad"): "worse (not judged on the pinned build)",
    ("none", "undecided"): "undecided on the candidate",
    ("none", "none"): "judged on neither",
}
"""What changed, by the two sides' standings (pinned, candidate)."""
CHANGED_BY_STANDING = {f"{a}|{b}": word for (a, b), word in _CHANGED.items()}
"""The same, keyed ``"good|bad"``: the table the dashboard's compare page reads what changed
from, with :func:`changed`'s one rule beside it (the same standing, another outcome word:
``unchanged -> slower``)."""

_GATE_CHANGED = {
    "good": "",
    "bad": "worse",
    "undecided": "undecided on the candidate",
    "none": "not judged",
}


def changed(pinned: Decision | None, candidate: Decision | None) -> str:
    """What changed from the pinned build's judgement to the candidate's (empty: nothing).
    A gate row and an output check are judged once, of both builds together."""
    if candidate is not None and candidate.kind in ("gate", "output"):
        word = _GATE_CHANGED[standing(candidate.kind, candidate.outcome)]
        if candidate.outcome == "faster":
            return "better"
        return word
    before = standing(pinned.kind, pinned.outcome) if pinned else "none"
    after = standing(candidate.kind, candidate.outcome) if candidate else "none"
    word = _CHANGED[(before, after)]
    if word == "" and pinned and candidate and pinned.outcome != candidate.outcome:
        return f"{pinned.outcome} -> {candidate.outcome}"  # a compared change that moved
    return word


@dataclass(frozen=True)
class UpgradeRow:
    """One decision of the suite on both builds."""

    test: str
    asked: str
    kind: str
    pinned: Decision | None
    candidate: Decision | None
    changed: str

    @property
    def record(self) -> str:
        return next((d.record for d in (self.candidate, self.pinned) if d and d.record), "")

    @property
    def finding(self) -> bool:
        """A row to act on: the candidate breaks the decision or cannot decide it."""
        return self.candidate is not None and standing(
            self.candidate.kind, self.candidate.outcome
        ) in ("bad", "undecided")

    def to_dict(self) -> dict[str, Any]:
        return {
            "test": self.test,
            "asked": self.asked,
            "kind": self.kind,
            "pinned": self.pinned.to_dict() if self.pinned else None,
            "candidate": self.candidate.to_dict() if self.candidate else None,
            "record": self.record,
            "changed": self.changed,
            "finding": self.finding,
        }


def upgrade_rows(pinned: Sequence[Decision], candidate: Sequence[Decision]) -> list[UpgradeRow]:
    """The decisions of both sides paired by key, in the order they were first judged (the
    pinned side's, then what only the candidate judged). A test that judged several things
    with one label keeps them apart by their order."""
    a, b = _numbered(pinned), _numbered(candidate)
    rows = []
    for key in dict.fromkeys([*a, *b]):
        p, c = a.get(key), b.get(key)
        first = p or c
        assert first is not None
        rows.append(UpgradeRow(first.test, first.asked, first.kind, p, c, changed(p, c)))
    return rows


def _numbered(decisions: Sequence[Decision]) -> dict[tuple[str, str, int], Decision]:
    seen: dict[tuple[str, str], int] = {}
    out = {}
    for d in decisions:
        n = seen[d.key] = seen.get(d.key, -1) + 1
        out[(*d.key, n)] = d
    return out


def upgrade_outcome(rows: Sequence[UpgradeRow]) -> UpgradeOutcome:
    """The answer, from the candidate's column: ``worse`` when it breaks a decision (a claim
    that fails, a dead end that reopened, a failed check or test, a slower gate row, another
    output), else ``undecided`` when it left one undecided, else ``nothing-judged`` when it
    decided none, else ``holds``: every decision holds on the candidate."""
    judged = [
        standing(r.candidate.kind, r.candidate.outcome) for r in rows if r.candidate is not None
    ]
    if "bad" in judged:
        return "worse"
    if "undecided" in judged:
        return "undecided"
    if "good" not in judged:
        return "nothing-judged"
    return "holds"
