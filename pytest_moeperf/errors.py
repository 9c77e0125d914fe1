"""Errors a user can act on.

Every error raised on purpose by pytest-moeperf is a :class:`MoeperfError`. Its message is a
single line that names the file, option, flag or build concerned and says what to do; the
command line and the pytest plugin print that line instead of a traceback.
"""

from __future__ import annotations


class MoeperfError(Exception):
    """A problem with input or environment, explained in one line."""


class BuildError(MoeperfError):
    """llama.cpp could not be fetched or built, or a given binary is unusable."""


class ModelError(MoeperfError):
    """The synthetic model spec is invalid or a model file is unusable."""


class ConfigError(MoeperfError):
    """A profile or configuration file is invalid."""


class BaselineError(MoeperfError):
    """A baseline file is invalid or cannot be written."""


class ServerError(MoeperfError):
    """A llama-server did not start, died, or was not pinned as asked."""


class MeasurementError(MoeperfError):
    """A request's timings do not measure what was asked (wrong token counts, bad reply)."""


class ResultsError(MoeperfError):
    """A results file (written by a run, read by replay) is invalid."""


class OutputError(MoeperfError):
    """A file the user asked for cannot be written where they said (no such directory, or
    something that is not a regular file is in the way)."""


class Unavailable(MoeperfError):
    """What a test needs is not here (a NUMA node, a build's flag, replayed data): the test is
    skipped with this reason, not failed."""


class StartupWarning(UserWarning):
    """A performance warning llama-server printed while starting (see ``logs.STARTUP_WARNINGS``);
    ``--moeperf-strict-warnings`` makes it a failure."""


class StoreError(MoeperfError):
    """The results store cannot be opened, read or written (down, unreachable, locked, of a
    newer schema); the run's results file is written all the same."""
