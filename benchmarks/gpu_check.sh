#!/usr/bin/env bash
# One short, prepared GPU check for a machine with an NVIDIA device and no
# package registry (Python, cupy-cuda13x and numba preinstalled).
# Usage, from the repository root:  bash benchmarks/gpu_check.sh [OUT_DIR]
# Optional: WHEELS=DIR with numba-cuda (and its dependencies) as wheels, installed
# offline when numba-cuda is missing. Logs go to OUT_DIR (default: gpu-check).
# Steps: install the checkout without dependencies, report what is there,
# run the gpu-marked tests, then the Monte Carlo benchmark (cupy column, and
# the CUDA kernel alone when numba-cuda works).
set -uo pipefail
out=${1:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
status=0
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed (see $out/nvidia-smi.txt)"
python3 -m pip install --no-deps --no-build-isolation -e . > "$out/install.log" 2>&1 \
  || { echo "install of the checkout failed"; tail "$out/install.log"; exit 1; }
python3 -c "import cupy; print('cupy', cupy.__version__, cupy.cuda.runtime.getDeviceCount(), 'device(s)')" \
  2>&1 | tee "$out/cupy.txt" || status=1

if ! python3 -c "import numba_cuda" 2>/dev/null && [ -n "${WHEELS:-}" ]; then
  python3 -m pip install --no-index --find-links "$WHEELS" numba-cuda > "$out/numba-cuda-install.log" 2>&1 \
    || echo "offline install of numba-cuda from $WHEELS failed (see $out/numba-cuda-install.log)"
fi
# numba-cuda must import, see the device, and compile (NVVM from the CUDA toolkit)
python3 - > "$out/numba-cuda.txt" 2>&1 <<'EOF'
import numpy as np
import numba_cuda
from numba import cuda

print("numba-cuda", numba_cuda.__version__, "device:", cuda.get_current_device().name)

@cuda.jit
def twice(a):
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i] *= 2.0

a = cuda.to_device(np.ones(4))
twice[1, 4](a)
assert a.copy_to_host().tolist() == [2.0] * 4
print("numba-cuda compiles and runs kernels")
EOF
if [ $? -eq 0 ]; then
  cat "$out/numba-cuda.txt"
else
  echo "NUMBA-CUDA NOT USABLE: the GPU Monte Carlo kernel cannot run here; its tests skip and"
  echo "bench_mc.py times only the cupy column. Cause (from $out/numba-cuda.txt):"
  tail -3 "$out/numba-cuda.txt"
  echo "(install numba-cuda and the CUDA toolkit's NVVM, e.g. pip install 'numba-cuda[cu13]', or pass WHEELS=DIR)"
fi

python3 -m pytest -m gpu -q -rs -s -p no:cacheprovider 2>&1 | tee "$out/pytest-gpu.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
python3 benchmarks/bench_mc.py --quick --no-cold 2>&1 | tee "$out/bench_mc.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit $status
