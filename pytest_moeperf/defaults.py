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
TOLERANCE = 0.05
"""A baseline file's default tolerance: 5 % worse than the baseline still passes."""

BUSY_LIMIT = 0.25
"""Share of a server's CPUs other work may take while it is measured for the numbers to
decide a verdict or be accepted as baselines."""
PROBE_TOLERANCE = 0.15
"""Two calibration probes further apart than this share are two hosts, or a host that
changed under the run."""
REPROBE_SECONDS = 30.0
"""A verdict re-probes its CPUs when their last probe is older than this (a few seconds of
work): often enough to notice the host changing under a run, rarely enough to cost little."""
NUMA_MIN_SHARE = 0.9
"""Share of a NUMA-pinned server's memory that must lie on its node."""
