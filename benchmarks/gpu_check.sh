#!/usr/bin/env bash
# One short, prepared GPU check for a machine with an NVIDIA device (none was
# available when the CuPy paths were written: they have never run).
# Usage, from the repository root:  bash benchmarks/gpu_check.sh [OUT_DIR]
# Installs the gpu extra, runs the gpu-marked tests, then the Monte Carlo
# benchmark (its cupy column and feature samples per second) and a short
# attention benchmark; logs go to OUT_DIR (default: gpu-check).
set -uo pipefail
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
python3 -m pip install -q -e ".[test,gpu]" > "$out/install.log" 2>&1 || { echo "install failed"; tail "$out/install.log"; exit 1; }
python3 -c "import cupy; print('cupy', cupy.__version__, cupy.cuda.runtime.getDeviceCount(), 'device(s)')" | tee "$out/cupy.txt"
python3 -m pytest -m gpu -q -rs 2>&1 | tee "$out/pytest-gpu.log"
python3 benchmarks/bench_mc.py --quick 2>&1 | tee "$out/bench_mc.log"
