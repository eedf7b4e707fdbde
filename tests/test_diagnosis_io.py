"""File input of ``rfkernels diagnose`` (:mod:`rfkernels.analysis.diagnosis.inputs`)."""

import hashlib
import json
import zipfile

import numpy as np
import pytest
from numpy.lib import format as npy_format

import rfkernels.validation
from rfkernels.analysis.diagnosis import LoadedQKV, load_qkv


def _arrays():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((5, 3)).astype(np.float32)
    k = rng.integers(-4, 4, size=(7, 3))
    v = rng.standard_normal((7, 2)) + 1j * rng.standard_normal((7, 2))
    return q, k, v


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line(excinfo):
    text = str(excinfo.value)
    assert "\n" not in text, text
    return text


def _huge_header(path, shape=(10**7, 10**7)):
    """A valid .npy header claiming ``shape`` of float64, followed by no data."""
    with open(path, "wb") as fp:
        npy_format.write_array_header_1_0(
            fp, {"descr": "<f8", "fortran_order": False, "shape": shape})


@pytest.fixture
def no_data_read(monkeypatch):
    """Fail the test if any array data is read."""
    def refuse(*args, **kwargs):
        raise AssertionError("array data was read")
    monkeypatch.setattr(npy_format, "read_array", refuse)


# -- round trips ------------------------------------------------------------------------------

@pytest.mark.parametrize("compressed", [False, True])
def test_npz_with_v_round_trips(tmp_path, compressed):
    q, k, v = _arrays()
    path = tmp_path / "qkv.npz"
    (np.savez_compressed if compressed else np.savez)(path, q=q, k=k, v=v, extra=np.zeros(2))
    out = load_qkv(path)
    assert isinstance(out, LoadedQKV)
    for got, want in [(out.q, q), (out.k, k), (out.v, v)]:
        assert got.dtype == want.dtype  # as stored: float32, int64, complex128
        np.testing.assert_array_equal(got, want)
    digest = _sha256(path)
    for role, arr in zip("qkv", (q, k, v)):
        assert out.sources[role] == {
            "file": str(path.absolute()), "member": f"{role}.npy", "shape": list(arr.shape),
            "dtype": str(arr.dtype), "sha256": digest, "ignored": ["extra.npy"],
        }
    json.dumps(out.sources, allow_nan=False)  # strict JSON
    with pytest.raises(AttributeError):
        out.q = k  # frozen


def test_npz_without_v(tmp_path):
    q, k, _ = _arrays()
    path = tmp_path / "qk.npz"
    np.savez(path, k=k, q=q)
    out = load_qkv(str(path))
    np.testing.assert_array_equal(out.q, q)
    np.testing.assert_array_equal(out.k, k)
    assert out.v is None
    assert out.sources["v"] is None
    assert out.sources["k"]["member"] == "k.npy"
    assert out.sources["q"]["ignored"] == []
    json.dumps(out.sources, allow_nan=False)


@pytest.mark.parametrize("n", [2, 3])
def test_npy_files_round_trip_in_order_q_k_v(tmp_path, n):
    arrays = _arrays()[:n]
    paths = [tmp_path / f"{name}.npy" for name in ("first", "second", "third")[:n]]
    for path, arr in zip(paths, arrays):
        np.save(path, arr)
    out = load_qkv([str(paths[0])] + paths[1:])  # str and PathLike mixed
    got = (out.q, out.k, out.v)
    for role, path, arr, g in zip("qkv", paths, arrays, got):
        assert g.dtype == arr.dtype
        np.testing.assert_array_equal(g, arr)
        assert out.sources[role] == {
            "file": str(path.absolute()), "member": None, "shape": list(arr.shape),
            "dtype": str(arr.dtype), "sha256": _sha256(path), "ignored": [],
        }
    if n == 2:
        assert out.v is None and out.sources["v"] is None
    json.dumps(out.sources, allow_nan=False)


def test_npy_layout_and_byte_order_kept(tmp_path):
    q = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    k = np.arange(6, dtype=">i4").reshape(3, 2)
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "k.npy", k)
    out = load_qkv([tmp_path / "q.npy", tmp_path / "k.npy"])
    assert out.q.flags.f_contiguous and not out.q.flags.c_contiguous
    assert out.k.dtype == np.dtype(">i4")
    assert out.sources["k"]["dtype"] == ">i4"
    np.testing.assert_array_equal(out.k, k)


def test_relative_path_recorded_absolute(tmp_path, monkeypatch):
    q, k, _ = _arrays()
    np.savez(tmp_path / "qk.npz", q=q, k=k)
    monkeypatch.chdir(tmp_path)
    out = load_qkv("qk.npz")
    assert out.sources["q"]["file"] == str(tmp_path / "qk.npz")


# -- wrong forms ------------------------------------------------------------------------------

@pytest.mark.parametrize("names", [
    ["a.npz", "b.npy"],
    ["a.npy", "b.npy", "c.npy", "d.npy"],
    ["a.npy"],
    "a.npy",
    ["a.npz", "b.npz"],
    ["a.txt"],
    ["a.npy", "b.txt"],
    "a.csv",
    [],
])
def test_wrong_combinations_refused_before_opening(tmp_path, names):
    # none of the files exists: the form is checked before anything is opened
    paths = str(tmp_path / names) if isinstance(names, str) else [tmp_path / n for n in names]
    with pytest.raises(ValueError, match=r"expected one \.npz file .* two or three \.npy files"):
        load_qkv(paths)


# -- OS errors --------------------------------------------------------------------------------

def test_missing_file_raises_file_not_found_with_filename(tmp_path):
    np.save(tmp_path / "q.npy", np.zeros(2))
    missing = tmp_path / "k.npy"
    with pytest.raises(FileNotFoundError) as excinfo:
        load_qkv([tmp_path / "q.npy", missing])
    assert excinfo.value.filename == str(missing)


def test_directory_raises_is_a_directory(tmp_path):
    folder = tmp_path / "qkv.npz"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as excinfo:
        load_qkv(folder)
    assert excinfo.value.filename == str(folder)


# -- not NumPy files --------------------------------------------------------------------------

def test_text_file_named_npy_refused(tmp_path):
    np.save(tmp_path / "q.npy", np.zeros(2))
    text = tmp_path / "x.npy"
    text.write_text("1.0 2.0 3.0\n4.0 5.0 6.0\n")
    with pytest.raises(ValueError, match="x.npy: not a NumPy .npy file") as excinfo:
        load_qkv([tmp_path / "q.npy", text])
    _one_line(excinfo)


@pytest.mark.parametrize("content", [b"", b"\x93NUM", b"\x93NUMPY\x01\x00\x10"])
def test_truncated_magic_or_header_refused(tmp_path, content):
    np.save(tmp_path / "q.npy", np.zeros(2))
    (tmp_path / "k.npy").write_bytes(content)
    with pytest.raises(ValueError, match="k.npy: not a NumPy .npy file") as excinfo:
        load_qkv([tmp_path / "q.npy", tmp_path / "k.npy"])
    _one_line(excinfo)


def test_truncated_data_refused(tmp_path):
    np.save(tmp_path / "q.npy", np.zeros(2))
    full = tmp_path / "full.npy"
    np.save(full, np.arange(100.0))
    cut = tmp_path / "k.npy"
    cut.write_bytes(full.read_bytes()[:-8])
    with pytest.raises(ValueError, match="k.npy: not a NumPy .npy file .*truncated.*800 bytes"):
        load_qkv([tmp_path / "q.npy", cut])


def test_zip_without_arrays_refused(tmp_path):
    path = tmp_path / "x.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("notes.txt", "hello")
    with pytest.raises(ValueError, match="x.npz: not a NumPy .npz file .*notes.txt") as excinfo:
        load_qkv(path)
    _one_line(excinfo)


def test_not_a_zip_named_npz_refused(tmp_path):
    path = tmp_path / "x.npz"
    np.save(tmp_path / "x.npy", np.zeros(3))
    path.write_bytes((tmp_path / "x.npy").read_bytes())
    with pytest.raises(ValueError, match="x.npz: not a NumPy .npz file"):
        load_qkv(path)


def test_npz_member_not_npy_refused(tmp_path):
    path = tmp_path / "x.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("q.npy", "not an array")
        zf.writestr("k.npy", "not an array")
    with pytest.raises(ValueError, match="x.npz, member q.npy: not a NumPy .npy file"):
        load_qkv(path)


def test_npz_missing_k_lists_arrays_found(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, q=np.zeros(3), w=np.ones(3), values=np.ones(3))
    found = r"x.npz: no array named 'k' \(arrays found: q, w, values\)"
    with pytest.raises(ValueError, match=found) as excinfo:
        load_qkv(path)
    _one_line(excinfo)


def test_npz_missing_q_refused(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, Q=np.zeros(3), k=np.ones(3))
    with pytest.raises(ValueError, match=r"no array named 'q' \(arrays found: Q, k\)"):
        load_qkv(path)


# -- dtypes -----------------------------------------------------------------------------------

def test_object_npy_refused_without_unpickling(tmp_path, monkeypatch):
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("unpickled")
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    np.save(tmp_path / "q.npy", np.zeros(2))
    np.save(tmp_path / "k.npy", np.array([1.0, "a", None], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="k.npy: a numeric array is expected.*object") as excinfo:
        load_qkv([tmp_path / "q.npy", tmp_path / "k.npy"])
    _one_line(excinfo)


def test_object_npz_member_refused(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, q=np.array([{"a": 1}], dtype=object), k=np.zeros(2), allow_pickle=True)
    with pytest.raises(ValueError, match="x.npz, member q.npy: a numeric array is expected"):
        load_qkv(path)


@pytest.mark.parametrize("dtype", [[("a", "<f8"), ("b", "<i4")], "V8"])
def test_structured_and_void_refused(tmp_path, dtype):
    np.save(tmp_path / "q.npy", np.zeros(3, dtype=dtype))
    np.save(tmp_path / "k.npy", np.zeros(2))
    with pytest.raises(ValueError, match="q.npy: a numeric array is expected.*structured or void"):
        load_qkv([tmp_path / "q.npy", tmp_path / "k.npy"])


# -- memory -----------------------------------------------------------------------------------

def test_huge_npy_header_raises_memory_error_before_reading(tmp_path, no_data_read):
    _huge_header(tmp_path / "q.npy")
    np.save(tmp_path / "k.npy", np.zeros(2))
    with pytest.raises(MemoryError, match="loading q, k"):
        load_qkv([tmp_path / "q.npy", tmp_path / "k.npy"])


def test_huge_npz_member_raises_memory_error_before_reading(tmp_path, no_data_read):
    _huge_header(tmp_path / "big.npy")
    path = tmp_path / "x.npz"
    np.save(tmp_path / "small.npy", np.zeros(2))
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(tmp_path / "small.npy", "q.npy")
        zf.write(tmp_path / "big.npy", "k.npy")
    with pytest.raises(MemoryError, match="loading q, k from"):
        load_qkv(path)


@pytest.mark.parametrize("fits", [True, False])
def test_memory_estimate_counts_float64_copies(tmp_path, monkeypatch, fits):
    # float32 arrays of 1000 + 500 elements: stored 4 bytes + the float64 copy, counted as
    # 2 * 8 bytes per element = 24000 bytes; check_memory allows 0.8 of the machine
    np.save(tmp_path / "q.npy", np.zeros(1000, dtype=np.float32))
    np.save(tmp_path / "k.npy", np.zeros(500, dtype=np.float32))
    total = 24000 / 0.8 + (1 if fits else -1)
    monkeypatch.setattr(rfkernels.validation, "available_memory", lambda: total)
    paths = [tmp_path / "q.npy", tmp_path / "k.npy"]
    if fits:
        assert load_qkv(paths).q.shape == (1000,)
    else:
        with pytest.raises(MemoryError):
            load_qkv(paths)
