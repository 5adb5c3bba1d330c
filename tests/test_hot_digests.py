"""Big archives are hashed as they are written and leave the page cache; the report of a run just written trusts
those checksums while the files are unchanged."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from aumann import io
from aumann.errors import PathEscapeError


@pytest.fixture
def counted_reads(monkeypatch):
    reads = []
    real = io.sha256_file
    monkeypatch.setattr(io, "sha256_file", lambda p, **kw: reads.append(os.path.basename(p)) or real(p, **kw))
    return reads


def _write(path, seed, within):
    arrays = {"x": np.random.default_rng(seed).random(40_000)}  # 320 kB of float64: stored, not deflated
    return io.write_npz(path, arrays, within=within)


needs_fadvise = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise on this platform")


@needs_fadvise
def test_a_big_archive_is_hashed_as_it_is_written_and_dropped_from_the_cache(tmp_path, monkeypatch,
                                                                             counted_reads):
    monkeypatch.setattr(io, "HOT_DIGEST_FROM", 100_000)
    advice = []
    real_fadvise = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise",
                        lambda fd, off, n, how: advice.append(how) or real_fadvise(fd, off, n, how))
    _write(tmp_path / "big.npz", 0, tmp_path)
    assert counted_reads == []  # hashed as it was written: never read back
    assert advice == [os.POSIX_FADV_DONTNEED]
    want = hashlib_sha256(tmp_path / "big.npz")
    assert io.file_digests(tmp_path, ["big.npz"]) == {"big.npz": want}  # the checksum taken at the write
    assert counted_reads == []
    assert io.check_digests(tmp_path, {"big.npz": want}) == []  # resume always reads
    assert counted_reads == ["big.npz"]


def test_the_checksum_taken_while_writing_is_the_files(tmp_path, monkeypatch):
    """Members deflated in parallel blocks, deflated whole, stored, and the metadata record: the file is the
    bytes written in order (data descriptors, no seek back), so the remembered checksum is the file's; numpy
    and our own checked reader read it back."""
    import zipfile

    monkeypatch.setattr(io, "HOT_DIGEST_FROM", 1)
    monkeypatch.setattr(io, "PARALLEL_DEFLATE_FROM", 1 << 16)
    rng = np.random.default_rng(5)
    arrays = {"panel": np.repeat(rng.integers(0, 3, (300, 100)).astype(np.float32), 8, axis=1),  # blocks
              "ids": np.arange(5000), "phi": rng.random(20_000), "empty": np.zeros((0, 3))}
    path = io.write_npz(tmp_path / "a.npz", arrays, meta={"k": [1, 2]}, within=tmp_path)
    assert io.file_digests(tmp_path, ["a.npz"]) == {"a.npz": hashlib_sha256(path)}
    with zipfile.ZipFile(path) as zf:
        assert all(i.flag_bits & 0x08 for i in zf.infolist())  # sizes after the data: nothing rewritten
        assert zf.testzip() is None
    with np.load(path) as z:
        for k, v in arrays.items():
            np.testing.assert_array_equal(z[k], v)
    got, meta = io.read_npz(path, error=ValueError, within=tmp_path)
    assert meta == {"k": [1, 2]} and all(np.array_equal(got[k], v) for k, v in arrays.items())
    again = io.write_npz(tmp_path / "b.npz", arrays, meta={"k": [1, 2]}, within=tmp_path)
    assert again.read_bytes() == path.read_bytes()  # the same arrays, the same bytes


def test_a_small_archive_is_not_hashed_at_the_write(tmp_path, counted_reads):
    _write(tmp_path / "small.npz", 0, tmp_path)
    assert counted_reads == []
    io.file_digests(tmp_path, ["small.npz"])
    assert counted_reads == ["small.npz"]


def hashlib_sha256(path):
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reused_checksums_hold_only_for_the_same_unchanged_files(tmp_path, monkeypatch, counted_reads):
    monkeypatch.setattr(io, "HOT_DIGEST_FROM", 100_000)
    _write(tmp_path / "a.npz", 1, tmp_path)
    _write(tmp_path / "b.npz", 2, tmp_path)
    want = {"a.npz": hashlib_sha256(tmp_path / "a.npz"), "b.npz": hashlib_sha256(tmp_path / "b.npz")}
    counted_reads.clear()
    assert io.check_digests(tmp_path, want, reuse=True) == []
    assert counted_reads == []  # both unchanged since they were written here
    # another valid archive copied over a (a new inode): read, and refused
    shutil.copyfile(tmp_path / "b.npz", tmp_path / "copy.npz")
    os.replace(tmp_path / "copy.npz", tmp_path / "a.npz")
    bad = io.check_digests(tmp_path, want, reuse=True)
    assert [name for name, _ in bad] == ["a.npz"] and counted_reads == ["a.npz"]
    # edited in place (same inode, a new modification time): read, and refused
    with open(tmp_path / "b.npz", "r+b") as fh:
        fh.seek(200)
        fh.write(b"\\x00")
    bad = io.check_digests(tmp_path, want, reuse=True)
    assert sorted(name for name, _ in bad) == ["a.npz", "b.npz"]
    assert counted_reads[-1] == "b.npz"


def test_reused_checksums_still_refuse_a_link_out_of_the_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "HOT_DIGEST_FROM", 100_000)
    run = tmp_path / "run"
    run.mkdir()
    _write(run / "a.npz", 3, run)  # remembered under run/a.npz at its write
    want = hashlib_sha256(run / "a.npz")
    # moved out of the run directory and linked back: the link leads to the same device, inode, size and mtime
    os.replace(run / "a.npz", tmp_path / "outside.npz")
    (run / "a.npz").symlink_to(tmp_path / "outside.npz")
    bad = io.check_digests(run, {"a.npz": want}, reuse=True)
    assert len(bad) == 1 and bad[0][0] == "a.npz" and "outside" in bad[0][1]
    with pytest.raises(PathEscapeError):
        io.file_digests(run, ["a.npz"])


@needs_fadvise
def test_the_write_stands_when_the_page_cache_advice_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "HOT_DIGEST_FROM", 100_000)

    def refuse(*_a):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    path = _write(tmp_path / "big.npz", 4, tmp_path)
    assert io.file_digests(tmp_path, ["big.npz"]) == {"big.npz": hashlib_sha256(path)}
    np.testing.assert_array_equal(io.read_npz(path, error=io.OutputError)[0]["x"],
                                  np.random.default_rng(4).random(40_000))
