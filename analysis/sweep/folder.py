"""The output folder: its lock (one writer), its creation, and durable appends to the table."""

from __future__ import annotations

import contextlib
import os
import time

from .spec import SweepError

#: The lock file: held (``flock``) by the one sweep writing the folder; holds its pid.
LOCK_NAME = ".sweep.lock"
#: Seconds between ``fsync`` calls on the results file (and one at the end).
SYNC_INTERVAL = 1.0


class SweepIOError(OSError):
    """The output folder cannot be created, locked or written, or a Dask scheduler
    cannot be reached; the message says which, on one line."""


@contextlib.contextmanager
def folder_io(out_dir, verb="write in"):
    """Turn an OSError of the folder's files into a one-line :class:`SweepIOError`."""
    try:
        yield
    except SweepIOError:
        raise
    except OSError as exc:
        raise SweepIOError(f"cannot {verb} the output folder {out_dir}: {_reason(exc)}") from exc


def _reason(exc):
    text = exc.strerror or " ".join(str(exc).split())
    return f"{text} ({exc.filename})" if exc.filename is not None else text


class FolderLock:
    """An exclusive ``flock`` on ``out_dir/.sweep.lock``, which records the holder's pid.

    The kernel releases it when the last descriptor of the holder's open
    file closes, however the process ends: a killed sweep leaves no stale
    lock (the file may stay; the next sweep takes it over).
    """

    def __init__(self, out_dir):
        import fcntl

        path = os.path.join(out_dir, LOCK_NAME)
        while True:
            with folder_io(out_dir):
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _lock_holder(fd)
                os.close(fd)
                raise SweepError(f"another sweep (pid {pid}) is writing {out_dir}") from None
            except BaseException:
                os.close(fd)
                raise
            # a holder removes the file as it ends: make sure we hold the file that is there now
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            own = os.fstat(fd)
            if st is not None and (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
                break
            os.close(fd)
        self.fd, self.path, self.inode = fd, path, (own.st_dev, own.st_ino)
        try:
            with folder_io(out_dir):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            self.release()
            raise

    def release(self):
        if self.fd is None:
            return
        try:
            os.unlink(self.path)  # while still holding it (see the inode check above)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def _lock_holder(fd):
    """The pid a lock file records ('?' if its holder has not written it yet)."""
    for _ in range(20):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
        time.sleep(0.01)
    return "?"


def make_folder(out_dir):
    """Create ``out_dir`` (and missing parents); return the folders created, deepest first."""
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise SweepIOError(f"the output folder {out_dir} exists and is not a folder")
    missing = []
    path = os.path.abspath(out_dir)
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if missing and not os.path.isdir(path):
        raise SweepIOError(f"cannot create the output folder {out_dir}: {path} is not a folder")
    with folder_io(out_dir, "create"):
        os.makedirs(out_dir, exist_ok=True)
    return missing


def remove_folders(folders):
    """Remove folders this run created (deepest first), as long as they are empty."""
    for path in folders:
        try:
            os.rmdir(path)
        except OSError:
            break


class Appender:
    """Appends complete lines to the results file; ``fsync`` at most every
    :data:`SYNC_INTERVAL` seconds, and on :meth:`close`.

    A failed write (a full disk) is cut back to the last complete line, so
    the file never ends in half a row while the process lives. Lines are
    given ending in LF and written ending in ``newline`` (the file's own).
    """

    def __init__(self, path, out_dir, newline="\n"):
        self.path, self.out_dir, self.newline = path, out_dir, newline
        with folder_io(out_dir):
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            self.size = os.fstat(self.fd).st_size
        self.rows = 0
        self.synced = time.monotonic()

    def append(self, text, n_rows):
        if self.newline != "\n":  # rows hold no line end but their last (notes are one line)
            text = text.replace("\n", self.newline)
        raw = text.encode()
        data = memoryview(raw)
        try:
            with folder_io(self.out_dir):
                try:
                    while data:
                        data = data[os.write(self.fd, data):]
                    if time.monotonic() - self.synced >= SYNC_INTERVAL:
                        self.sync()
                except OSError as exc:  # os.write names no file: name the table
                    if exc.filename is not None:
                        raise
                    raise OSError(exc.errno, exc.strerror, self.path) from exc
        except BaseException:
            try:
                os.ftruncate(self.fd, self.size)
            except OSError:
                pass
            raise
        self.size += len(raw)
        self.rows += n_rows

    def sync(self):
        os.fsync(self.fd)
        self.synced = time.monotonic()

    def close(self):
        if self.fd is None:
            return
        try:
            with folder_io(self.out_dir):
                self.sync()
        finally:
            os.close(self.fd)
            self.fd = None
