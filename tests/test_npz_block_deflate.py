"""Big .npz members are deflated in blocks on two threads (io._BlockDeflate): one valid deflate stream that
numpy, zipfile and our reader read back exactly, the same bytes on every write, about the size of one stream."""

from __future__ import annotations

import zipfile
import zlib

import numpy as np
import pytest

from aumann import io
from aumann.errors import OutputError


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(io, "PARALLEL_DEFLATE_FROM", 1)
    monkeypatch.setattr(io, "_DEFLATE_BLOCK", 4096)


def _arrays(rng: np.random.Generator) -> dict[str, np.ndarray]:
    walk = np.cumsum(rng.integers(-3, 4, size=300_000)).astype(np.int32)  # compressible, with long matches
    return {"walk": walk, "panel": (rng.random((40, 500, 6)) < 0.2).astype(np.float32) * rng.random((40, 500, 6),
                                                                                                   dtype=np.float32),
            "exact_block": np.zeros(4096 * 3, dtype=np.uint8), "tiny": np.arange(5)}


def test_block_deflated_members_read_back_exactly(tmp_path, small_blocks):
    arrays = _arrays(np.random.default_rng(0))
    path = io.write_npz(tmp_path / "a.npz", arrays)
    with zipfile.ZipFile(path) as zf:
        assert zf.testzip() is None  # every member's CRC checks
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in zf.infolist())
    with np.load(path) as got:
        for k, v in arrays.items():
            np.testing.assert_array_equal(got[k], v)
    back, _ = io.read_npz(path, error=OutputError)
    for k, v in arrays.items():
        np.testing.assert_array_equal(back[k], v)


def test_the_same_arrays_give_the_same_bytes_and_about_one_streams_size(tmp_path, small_blocks, monkeypatch):
    arrays = _arrays(np.random.default_rng(1))
    a = io.write_npz(tmp_path / "a.npz", arrays).read_bytes()
    b = io.write_npz(tmp_path / "b.npz", arrays).read_bytes()
    assert a == b
    monkeypatch.setattr(io, "PARALLEL_DEFLATE_FROM", 2**62)  # one stream, as before
    one = io.write_npz(tmp_path / "c.npz", arrays).read_bytes()
    assert one != a and len(a) <= 1.05 * len(one)


def test_each_block_is_primed_with_the_window_before_it(small_blocks):
    rng = np.random.default_rng(2)
    data = bytes(rng.integers(0, 256, size=10_000, dtype=np.uint8)) * 15  # repeats reach across 4 KiB blocks
    d = io._BlockDeflate(1)
    out = d.compress(data[:70_000]) + d.compress(memoryview(data)[70_000:]) + d.flush()
    assert zlib.decompress(out, -15) == data
    assert len(out) < len(zlib.compress(data, 1)) * 1.05


def test_small_members_keep_the_single_stream(tmp_path, monkeypatch):
    def refuse(level: int) -> None:
        raise AssertionError("a small member took the block path")

    monkeypatch.setattr(io, "_BlockDeflate", refuse)
    path = io.write_npz(tmp_path / "a.npz", {"x": np.arange(100_000, dtype=np.float32)})
    with np.load(path) as got:
        np.testing.assert_array_equal(got["x"], np.arange(100_000, dtype=np.float32))
    monkeypatch.setattr(io, "PARALLEL_DEFLATE_FROM", 1)
    with pytest.raises(AssertionError, match="block path"):
        io.write_npz(tmp_path / "b.npz", {"x": np.arange(100_000, dtype=np.float32)})
