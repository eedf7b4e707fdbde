"""The Numba kernel says so on stderr before it compiles, and only then."""

import numpy as np

from rfkernels.engine import cpu as _mc_numba


def _args(out):
    return (np.uint32(1), np.uint32(2), np.uint64(0), np.int64(4), np.int64(4), False, True,
            np.int64(_mc_numba.POSITIVE), 0.5, out)


def test_compile_line_printed_once_before_compiling(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(_mc_numba, "_reduced_estimates_kernel", lambda *a: calls.append(a))
    monkeypatch.setattr(_mc_numba, "compile_pending", lambda: not calls)
    out = np.empty(3)
    _mc_numba.reduced_estimates(*_args(out))
    _mc_numba.reduced_estimates(*_args(out))
    err = capsys.readouterr().err
    assert err.count("compiling the Numba Monte Carlo kernel once") == 1
    assert len(err.splitlines()) == 1 and len(calls) == 2


def test_compile_pending_reads_memory_and_disk_cache():
    class Index:
        def __init__(self, entries):
            self.entries = entries

        def _load_index(self):
            return self.entries

    class Cache:
        def __init__(self, entries):
            self._cache_file = Index(entries)

    class Fake:
        def __init__(self, signatures, entries):
            self.signatures = signatures
            self._cache = Cache(entries)

    assert _mc_numba.compile_pending(Fake([], {})) is True
    assert _mc_numba.compile_pending(Fake([], {"sig": 1})) is False
    assert _mc_numba.compile_pending(Fake(["sig"], {})) is False
    assert _mc_numba.compile_pending(object()) is True  # unknown Numba internals: may compile


def test_warm_kernel_prints_nothing(capsys):
    out = np.empty(4)
    _mc_numba.reduced_estimates(*_args(out))  # compiles or loads once
    capsys.readouterr()
    _mc_numba.reduced_estimates(*_args(out))
    assert capsys.readouterr().err == ""
    assert np.all(np.isfinite(out))
