"""The ``moeperf`` fixture: what a perf test uses to start servers and measure them."""

from __future__ import annotations

import pytest

from .config import Configuration, HostLacks, Profile
from .measurement import Measurement
from .server import LlamaServer
from .session import PerfSession
from .workload import Workload


class MoePerf:
    """Measures named configurations of a profile for one test.

    ``moeperf.measure("lm-none", "pp512")`` returns the session's measurement of that
    workload on that configuration (taking it on first use); a configuration this host or build
    cannot run skips the test with the reason."""

    def __init__(self, session: PerfSession, profile: str | None = None) -> None:
        self.session = session
        self.profile_name = profile
        self.touched: list[Measurement] = []

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
        self.touched.append(m)
        return m

    def median(self, configuration: str, workload: str | Workload) -> float:
        """Median tok/s of :meth:`measure`."""
        return self.measure(configuration, workload).summary.median
