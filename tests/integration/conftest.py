"""Inner pytest projects for the plugin's end-to-end tests."""

from __future__ import annotations

import pytest

INI = "[pytest]\n{settings}filterwarnings = ignore::pytest.PytestAssertRewriteWarning\n"


@pytest.fixture
def perf_project(pytester, llama_build, tiny_model, monkeypatch):
    """A factory of inner pytest projects whose servers run the test build (warm in the cache)
    on real models: ``perf_project(config=TOML, tests=SOURCE)``, or ``profile=`` for a
    built-in one. Run them with ``runpytest_subprocess`` (a fresh interpreter each)."""
    monkeypatch.setenv("LLAMA_SERVER", str(llama_build.server))

    def make(*, config: str | None = None, tests: str | None = None, profile: str | None = None):
        settings = ""
        if config is not None:
            pytester.makefile(".toml", moeperf=config)
            settings += "moeperf_config = moeperf.toml\n"
        if profile is not None:
            settings += f"moeperf_profile = {profile}\n"
        pytester.makeini(INI.format(settings=settings))
        if tests is not None:
            pytester.makepyfile(tests)
        return pytester

    return make
