"""The pytest side: hooks, options, the ``moeperf`` fixture, markers and the summary (the only
modules that import pytest)."""
