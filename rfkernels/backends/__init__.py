"""Array backends: NumPy (reference), Numba (CPU kernels) and CuPy (GPU).

The vectorised code of the toolkit is written once against an array
namespace ``xp`` (NumPy or CuPy); :func:`get_array_module` picks it from the
inputs and :func:`array_namespace` from a backend name. Numba adds kernels in
private modules of this package; it has no array type of its own and uses
NumPy arrays.

CuPy is optional. It is detected once, lazily; set the environment variable
``RFKERNELS_DISABLE_CUPY=1`` to ignore an installed CuPy.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np

from ..validation import check_choice

#: Backend names accepted by ``backend=`` arguments.
BACKENDS = ("numpy", "numba", "cupy")

_cupy = None
_cupy_checked = False


def cupy_available():
    """True when CuPy is importable, not disabled, and sees a CUDA device."""
    return _import_cupy(raise_error=False) is not None


def _import_cupy(raise_error=True):
    global _cupy, _cupy_checked
    if not _cupy_checked:
        _cupy_checked = True
        disabled = os.environ.get("RFKERNELS_DISABLE_CUPY", "0") not in ("", "0")
        if not disabled and importlib.util.find_spec("cupy") is not None:
            try:
                import cupy

                if cupy.cuda.runtime.getDeviceCount() > 0:
                    _cupy = cupy
            except Exception:  # no driver, no device, broken install
                _cupy = None
    if _cupy is None and raise_error:
        raise ImportError(
            "backend='cupy' needs CuPy and a CUDA device; install the GPU extra "
            "with `pip install 'rfkernels[gpu]'` (CUDA 12) or "
            "`pip install 'rfkernels[gpu-cuda13]'` (CUDA 13) on a machine with an "
            "NVIDIA GPU (unset RFKERNELS_DISABLE_CUPY if it is set)"
        )
    return _cupy


def check_backend(backend):
    """Validate a backend name and, for ``'cupy'``, that CuPy is usable."""
    check_choice(backend, "backend", BACKENDS)
    if backend == "cupy":
        _import_cupy()
    return backend


def array_namespace(backend):
    """The array module (``numpy`` or ``cupy``) a backend computes with."""
    check_backend(backend)
    return _import_cupy() if backend == "cupy" else np


def get_array_module(*arrays):
    """``cupy`` if any argument is a CuPy array, else ``numpy``."""
    for a in arrays:
        mod = type(a).__module__
        if mod.startswith("cupy"):
            return _import_cupy()
    return np


def to_numpy(a):
    """A NumPy copy of a NumPy or CuPy array (no copy for NumPy input)."""
    if type(a).__module__.startswith("cupy"):
        return a.get()
    return np.asarray(a)
