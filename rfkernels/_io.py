"""Writing results safely and recording where they came from.

Every output file of the toolkit (sweep tables, study CSVs, JSON sidecars,
figure data) goes through :func:`atomic_write`: a temporary file beside the
target, flushed and fsynced, then renamed over it, so a reader never sees a
half-written file and a killed run never leaves one behind.
"""

from __future__ import annotations

import os
import platform
import subprocess
import tempfile


def atomic_write(path, content):
    """Write ``content`` (text, or a callable ``content(fh)``) to ``path`` atomically."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            if callable(content):
                content(fh)
            else:
                fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def git_revision():
    """The git commit of the installed source tree, or None outside a checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def package_versions():
    """Versions of rfkernels, Python and the numerical dependencies, for sidecars."""
    import numba
    import numpy
    import scipy

    from . import __version__

    return {"rfkernels": __version__, "python": platform.python_version(), "numpy": numpy.__version__,
            "scipy": scipy.__version__, "numba": numba.__version__}
