"""Whether a build can offload to CUDA: ``--list-devices`` output (recorded from b11434) and a
build cache entry's ``build.json``."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from pytest_moeperf.llama.build import Build
from pytest_moeperf.llama.devices import (
    backends_of_listing,
    backends_of_record,
    build_backends,
    cuda_in_cmake_args,
    parse_list_devices,
)
from pytest_moeperf.llama.startup import offload_failure

DATA = Path(__file__).parent / "data"
CPU_LISTING = (DATA / "llama-server-b11434-list-devices.txt").read_text().split("\n", 1)[1]
# common/arg.cpp's format, "  %s: %s (%zu MiB, %zu MiB free)", one line per GPU
CUDA_LISTING = (
    "Available devices:\n"
    "  CUDA0: NVIDIA H200 (143167 MiB, 142600 MiB free)\n"
    "  CUDA1: NVIDIA H200 (143167 MiB, 20000 MiB free)\n"
)


def test_a_cpu_build_lists_no_device():
    assert parse_list_devices(CPU_LISTING) == []
    found = backends_of_listing(Path("llama-server"), 0, CPU_LISTING)
    assert found.cuda is False and "(none)" in found.evidence


def test_a_cuda_build_lists_its_gpus():
    assert [n for n, _d in parse_list_devices(CUDA_LISTING) or []] == ["CUDA0", "CUDA1"]
    found = backends_of_listing(Path("llama-server"), 0, CUDA_LISTING)
    assert found.cuda is True and "NVIDIA H200" in found.evidence


def test_a_cuda_build_without_a_gpu_cannot_be_told_and_says_why():
    text = "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device\n" + CPU_LISTING
    found = backends_of_listing(Path("llama-server"), 0, text)
    assert found.cuda is None and "failed to initialize CUDA" in found.evidence
    assert backends_of_listing(Path("old"), 1, "error: invalid argument").cuda is None


def test_cmake_args_and_the_cache_record(tmp_path):
    assert cuda_in_cmake_args(["-DGGML_NATIVE=ON", "-DGGML_CUDA=ON"])
    assert not cuda_in_cmake_args(["-DGGML_CUDA=OFF"])
    record = tmp_path / "build.json"
    record.write_text(json.dumps({"cmake_args": [], "base_cmake_args": ["-DGGML_NATIVE=ON"]}))
    cpu = backends_of_record(record)
    assert cpu is not None and cpu.cuda is False and "cmake_args: none" in cpu.evidence
    record.write_text(json.dumps({"cmake_args": ["-DGGML_CUDA=ON"], "base_cmake_args": []}))
    cuda = backends_of_record(record)
    assert cuda is not None and cuda.cuda is True
    record.write_text("{not json")
    assert backends_of_record(record) is None


def test_a_binary_is_asked_once(tmp_path):
    calls = tmp_path / "calls"
    server = tmp_path / "llama-server"
    server.write_text(f"#!/bin/sh\necho x >> {calls}\nprintf 'Available devices:\\n  (none)\\n'\n")
    server.chmod(server.stat().st_mode | stat.S_IXUSR)
    assert build_backends(Build(server)).cuda is False
    assert build_backends(Build(server)).cuda is False
    assert calls.read_text().count("x") == 1


# llama.cpp's src/llama-model.cpp: "%s: offloaded %d/%d layers to GPU" (after "%s: offloading
# %d repeating layers to GPU"), with the server's time/level prefix
NOTHING = (
    "0.00.006.579 I srv    load_model: loading model 'm.gguf'\n"
    "0.00.981.001 I load_tensors: offloading 0 repeating layers to GPU\n"
    "0.00.981.002 I load_tensors: offloaded 0/49 layers to GPU\n"
)


def test_a_server_asked_to_offload_that_offloaded_nothing_is_named_by_its_line():
    assert offload_failure(NOTHING, ["-ngl", "999"]) == "load_tensors: offloaded 0/49 layers to GPU"
    assert offload_failure(NOTHING, []) is not None  # llama.cpp's default offloads


def test_offload_by_design_or_a_log_that_does_not_say_is_no_failure():
    assert offload_failure(NOTHING, ["-ngl", "0"]) is None
    some = NOTHING.replace("offloaded 0/49", "offloaded 49/49")
    assert offload_failure(some, ["-ngl", "999"]) is None
    assert offload_failure("0.00.019.958 I srv  llama_server: model loaded\n", []) is None
