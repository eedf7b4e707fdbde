"""rfkernels.storage: atomic writes keep the permissions ``open()`` would give."""

import os
import stat

import pytest

from rfkernels.storage import atomic_write, current_umask


@pytest.fixture
def umask():
    def set_mask(mask):
        os.umask(mask)

    old = os.umask(0o022)
    os.umask(old)
    yield set_mask
    os.umask(old)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077, 0o027])
def test_atomic_write_mode_follows_umask(tmp_path, umask, mask):
    umask(mask)
    assert current_umask() == mask
    new = tmp_path / "new.csv"
    atomic_write(new, "a,b\n")
    plain = tmp_path / "plain.csv"
    with open(plain, "w") as fh:
        fh.write("a,b\n")
    assert _mode(new) == _mode(plain) == 0o666 & ~mask
    assert new.read_text() == "a,b\n"


def test_atomic_write_rewrite_gets_umask_mode_and_leaves_no_temp(tmp_path, umask):
    umask(0o022)
    path = tmp_path / "results.csv"
    path.write_text("old\n")
    os.chmod(path, 0o600)
    atomic_write(path, lambda fh: fh.write("new\n"))
    assert path.read_text() == "new\n"
    assert _mode(path) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("old\n")

    def boom(fh):
        fh.write("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(path, boom)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]


def test_atomic_write_through_a_symlink_writes_its_target(tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("old\n")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    atomic_write(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
