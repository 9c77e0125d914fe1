"""The ``moeperf`` fixture: what a perf test uses to start servers, measure and judge claims."""

from __future__ import annotations

import pytest

from .config import Configuration, HostLacks, Profile
from .errors import ConfigError
from .judge import Claim, Operand, Verdict, judge_claim
from .measurement import Measurement
from .report import claim_failure
from .server import LlamaServer
from .session import PerfSession
from .workload import Workload


class MoePerf:
    """Measures named configurations of a profile for one test, and judges claims on them.

    ``moeperf.measure("lm-none", "pp512")`` returns the session's measurement of that workload
    on that configuration (taking it on first use); ``moeperf.check("lm-none.pp512 >= 0.9 *
    mmap.pp512")`` judges a claim. A configuration this host or build cannot run skips the
    test with the reason."""

    def __init__(self, session: PerfSession, nodeid: str, profile: str | None = None) -> None:
        self.session = session
        self.nodeid = nodeid
        self.profile_name = profile
        self.touched: list[Measurement] = []
        self.verdicts: list[Verdict] = []

    @property
    def profile(self) -> Profile:
        return self.session.profile(self.profile_name)

    def configuration(self, name: str) -> Configuration:
        return self.profile.configuration(name)

    def server(self, configuration: str) -> LlamaServer:
        """The running llama-server of *configuration* (started on first use)."""
        try:
            return self.session.server(self.profile, self.configuration(configuration)).server
        except HostLacks as exc:
            pytest.skip(str(exc))

    def measure(
        self, configuration: str, workload: str | Workload, repetitions: int | None = None
    ) -> Measurement:
        """The measurement of *workload* (``"pp512"``, ``"tg64 @ d512"``) on *configuration*."""
        w = workload if isinstance(workload, Workload) else Workload.parse(workload)
        try:
            m = self.session.measure(
                self.profile, self.configuration(configuration), w, repetitions
            )
        except HostLacks as exc:
            pytest.skip(str(exc))
        self.touched = [t for t in self.touched if t.key != m.key] + [m]
        return m

    def median(self, configuration: str, workload: str | Workload) -> float:
        """Median tok/s of :meth:`measure`."""
        return self.measure(configuration, workload).summary.median

    def _operand(self, op: Operand, repetitions: int | None) -> Measurement:
        if op.build is not None:
            raise ConfigError(
                f"claim operand {op}: a build qualifier needs the build gate; "
                "write the configuration without [build] here"
            )
        return self.measure(op.configuration, op.workload, repetitions)

    def _interleaved(self, c: Claim, n: int) -> tuple[Measurement, Measurement]:
        """Both sides of *c* with at least *n* samples, taken one repetition at a time in turn
        (A B A B ...), so a slow drift of the host falls on both alike."""
        left = right = None
        for i in range(1, n + 1):
            left = self._operand(c.left, i)
            right = self._operand(c.right, i)
        assert left is not None and right is not None
        return left, right

    def judge(self, claim: str | Claim) -> Verdict:
        """The verdict of *claim* (holds / fails / inconclusive) on this session's measurements.

        When it is inconclusive, both sides get more repetitions, up to
        ``--moeperf-max-repetitions``, as long as that could decide it."""
        c = claim if isinstance(claim, Claim) else Claim.parse(claim)
        left, right = self._interleaved(c, self.session.options.repetitions or
                                        self.profile.repetitions)
        verdict = judge_claim(c, left.values, right.values)
        limit = self.session.options.max_repetitions
        while verdict.outcome == "inconclusive" and verdict.more_repetitions:
            n = min(len(left.samples), len(right.samples))
            if n >= limit:
                break
            left, right = self._interleaved(c, min(limit, n + verdict.more_repetitions))
            verdict = judge_claim(c, left.values, right.values)
        self.verdicts.append(verdict)
        self.session.verdicts.append((self.nodeid, verdict))
        return verdict

    def check(self, claim: str | Claim) -> Verdict:
        """Judge *claim*; fail the test with the measured table when it fails, and skip it
        (or fail, with ``--moeperf-inconclusive=fail``) when the noise is too wide to tell."""
        verdict = self.judge(claim)
        if verdict.outcome == "fails":
            pytest.fail(claim_failure(verdict, self.touched), pytrace=False)
        if verdict.outcome == "inconclusive":
            message = f"inconclusive: {verdict.explain()}"
            if self.session.options.inconclusive == "fail":
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        return verdict
