"""The session's settings (:class:`Options`), from command-line and ini options: what the
servers, the host watch, the builds and the session read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..defaults import (
    BUSY_LIMIT,
    MAX_ROUNDS,
    NUMA_MIN_SHARE,
    PROBE_TOLERANCE,
    REPROBE_SECONDS,
    REQUEST_TIMEOUT,
    STARTUP_TIMEOUT,
)


@dataclass
class Options:
    """The session's settings, from command-line and ini options."""

    profile: str = "embedded"
    profile_named: bool = False
    """:attr:`profile` was named by ``--moeperf-profile``: it must exist and be used by a
    collected test (the ini's is the project's default, which a run of some tests may not
    use)."""
    config_file: Path | None = None
    pyproject: Path | None = None
    llama_server: tuple[Path, str] | None = None
    repetitions: int | None = None
    max_rounds: int = MAX_ROUNDS
    """The most rounds (or repetitions, for a baseline check) a verdict may take."""
    budget: float | None = None
    """Seconds a verdict may keep measuring; ``None``: the profile's ``budget``."""
    undecided: str = "skip"
    allow_empty: bool = False
    """Exit 0 from a perf session that decided no verdict (else exit 5)."""
    startup_timeout: float = STARTUP_TIMEOUT
    request_timeout: float = REQUEST_TIMEOUT
    stream: bool = False
    """Measure with streamed replies from the start (the gate does, so both builds are
    measured alike; a meter switches by itself for builds that need it)."""
    configuration_timeout: float | None = None
    """Seconds all measurements of one (configuration, build) may take in a session."""
    results_dir: Path = Path(".moeperf")
    store: str = ""
    """The results store's URL as named (``--moeperf-store``, ``$MOEPERF_STORE``, ``store =``);
    empty: the default SQLite file in :attr:`results_dir`."""
    results_file: Path | None = None
    report_file: Path | None = None
    replay: Path | None = None
    accept: bool = False
    bench: bool = False
    strict_warnings: bool = False
    rootdir: Path = Path(".")
    probe_tolerance: float = PROBE_TOLERANCE
    """Two probes differing by more than this share are two hosts (baselines do not apply),
    or a host that changed under the run (verdicts become undecided)."""
    reprobe_seconds: float = REPROBE_SECONDS
    """A verdict re-probes its CPUs when their last probe is older than this."""
    busy_limit: float = BUSY_LIMIT
    """Share of a server's CPUs other work may take while it is measured for the numbers to
    decide a verdict or be accepted as baselines."""
    numa_min_share: float = NUMA_MIN_SHARE
    """Share of a NUMA-pinned server's memory that must lie on its node; below it the test
    warns (fails with ``strict_warnings``)."""
    host_memory: int | None = None
    """Bytes of RAM the session's servers may hold together; ``None``: the host's
    ``MemAvailable`` when the session starts."""
    process_block: int | None = None
    """Paired rounds per pair of server processes (0: never restart); ``None``: the profile's
    ``process_block``, else where the variance is and what a restart costs."""
    measure_anyway: bool = False
    """Measure a verdict's budget even where it says before measuring that it cannot decide
    (``--moeperf-measure-anyway``: the numbers, for a user who wants them)."""
    pinned: tuple[int | str, int] | None = None
    """``--moeperf-pinned``: the build every profile's own build is taken as in this run (a
    build number or a binary, with its build number); ``None``: the profiles' own."""
    candidate: tuple[int | str, str] | None = None
    """``--moeperf-candidate``: the build an upgrade check judges every perf test on beside
    the pinned one (a build number or a binary), with its label (``b11800``, ``pr-29887``)."""
    dry_run: bool = False
    """With :attr:`accept` in an upgrade check: print what accepting would write, write
    nothing."""
    upgrade_report: Path | None = None
    """Where the upgrade check's table goes as markdown (its JSON beside it)."""
    history: bool = True
    """Whether a host not calibrated takes its round spread and process term from its own
    verdicts' process blocks (stored, and this run's earlier ones) once they hold enough
    degrees of freedom (``--moeperf-no-history``: each verdict's own blocks alone)."""
