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
import threading

_UMASK_LOCK = threading.Lock()


def current_umask():
    """The process umask, read without changing it where the OS allows (Linux)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:  # elsewhere: set and restore (not atomic across threads that change it)
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def atomic_write(path, content):
    """Write ``content`` (text, or a callable ``content(fh)``) to ``path`` atomically."""
    path = os.path.realpath(os.fspath(path))  # a link is followed, as open() does, not replaced
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp creates 0600; give what open() gives
        with os.fdopen(fd, "w", newline="") as fh:
            if callable(content):
                content(fh)
            else:
                fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if exc.filename is None:  # a write or fsync (a full disk, a quota): say which file
            raise OSError(exc.errno, exc.strerror or str(exc), path) from exc
        raise
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def refuse_dangling_link(out):
    """FileExistsError when ``out``, or a folder above it, is a symbolic link to nothing.

    Such a path does not exist, so it would pass for a new folder, yet creating it
    fails ("File exists") only once the work is done.
    """
    path = os.path.abspath(os.fspath(out))
    while True:
        if os.path.islink(path) and not os.path.exists(path):
            where = "is" if path == os.path.abspath(os.fspath(out)) else f"is under {path}, which is"
            raise FileExistsError(
                f"--out {out} {where} a symbolic link to {os.readlink(path)}, which does not "
                "exist; refusing to write through it (nothing was changed): choose a folder, or "
                "create the link's target first")
        parent = os.path.dirname(path)
        if parent == path or os.path.isdir(path):
            return
        path = parent


def check_output_folder(out, owned, command, what):
    """The absolute folder ``out`` after refusing one a command must not or cannot write.

    The one rule of every command that writes a folder (``rfkernels
    figures``, ``rfkernels diagnose``): the folder may be missing (nothing
    is created here), empty, or hold only entries for which
    ``owned(name, full_path)`` is true (the caller's earlier outputs).
    Raises ``FileExistsError`` when ``out`` or a folder above it is a
    symbolic link to nothing (:func:`refuse_dangling_link`),
    ``NotADirectoryError`` when ``out`` or a folder above it is a
    file, ``FileExistsError`` naming the first entry that is not owned,
    ``PermissionError`` when nothing can be written in the nearest existing
    folder (a probe file, removed at once: ``os.access`` is not enough for
    root, ACLs or read-only mounts). ``command`` names the command and
    ``what`` its outputs in the messages.
    """
    refuse_dangling_link(out)
    path = os.path.abspath(os.fspath(out))
    probe = path
    while not os.path.exists(probe):  # the nearest existing folder above
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        where = "is a file" if probe == path else f"is under {probe}, which is a file"
        raise NotADirectoryError(f"--out {out} {where}, not a folder; choose a folder for {what}")
    if probe == path:
        for entry in sorted(os.listdir(path)):
            if not owned(entry, os.path.join(path, entry)):
                raise FileExistsError(
                    f"--out {out} holds {entry!r}, which is not an output of rfkernels {command}; "
                    "refusing to write there (nothing was changed): choose an empty or new "
                    f"folder, or an earlier output folder of rfkernels {command}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".rfkernels-{command}-probe.", dir=probe)
    except OSError as exc:
        raise PermissionError(f"--out {out}: cannot write in {probe} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(tmp)
    return path


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

    from .version import __version__

    return {"rfkernels": __version__, "python": platform.python_version(), "numpy": numpy.__version__,
            "scipy": scipy.__version__, "numba": numba.__version__}
