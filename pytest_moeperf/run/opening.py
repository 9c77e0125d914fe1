"""The session of a pytest run or of a command, on this host's live servers or on a stored run
(``--moeperf-replay``): the one place that chooses, so that the session, the gate, bisect,
calibrate and the sweeps import nothing of the live host."""

from __future__ import annotations

from collections.abc import Callable

from .live import LiveHost
from .options import Options
from .session import PerfSession


def perf_session(
    options: Options,
    report: Callable[[str], None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> PerfSession:
    """A session whose host is the stored run ``options.replay`` names, or else this host's
    live servers (*report* gets the lines shown with ``-v``, *progress* those of long work)."""
    if options.replay is not None:
        return PerfSession(options, report, progress)
    say = report or (lambda line: None)
    live = LiveHost(options, say, progress or say)
    return PerfSession(options, report, progress, source=live, servers=live.stage)
