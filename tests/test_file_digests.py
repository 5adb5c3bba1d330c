"""io.file_digests reads a file once per version: a run's record lists its panel and attributions twice."""

from __future__ import annotations

import os

import pytest

from aumann import io
from aumann.errors import PathEscapeError


def test_an_unchanged_file_is_hashed_once_and_a_changed_one_again(tmp_path, monkeypatch):
    (tmp_path / "a.bin").write_bytes(b"x" * 1000)
    (tmp_path / "b.bin").write_bytes(b"y" * 10)
    reads = []
    real = io.sha256_file
    monkeypatch.setattr(io, "sha256_file", lambda p, **kw: reads.append(os.path.basename(p)) or real(p, **kw))
    first = io.file_digests(tmp_path, ["a.bin", "b.bin"])
    assert first == {"a.bin": io.sha256_bytes(b"x" * 1000), "b.bin": io.sha256_bytes(b"y" * 10)}
    assert io.file_digests(tmp_path, ["a.bin", "b.bin"]) == first
    assert reads == ["a.bin", "b.bin"]  # the second call read nothing
    io.write_bytes(tmp_path / "a.bin", b"z" * 1000, within=tmp_path)  # atomic rewrite, same size: a new inode
    second = io.file_digests(tmp_path, ["a.bin", "b.bin"])
    assert second["a.bin"] == io.sha256_bytes(b"z" * 1000) and second["b.bin"] == first["b.bin"]
    with open(tmp_path / "b.bin", "r+b") as fh:  # edited in place: a new modification time and size
        fh.write(b"yy" * 10)
    assert io.file_digests(tmp_path, ["b.bin"])["b.bin"] == io.sha256_bytes(b"yy" * 10)
    assert reads == ["a.bin", "b.bin", "a.bin", "b.bin"]


def test_a_cached_file_swapped_for_a_link_outside_is_still_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "a.bin").write_bytes(b"x")
    (tmp_path / "secret").write_bytes(b"s")
    io.file_digests(run, ["a.bin"])
    (run / "a.bin").unlink()
    (run / "a.bin").symlink_to(tmp_path / "secret")
    with pytest.raises(PathEscapeError):
        io.file_digests(run, ["a.bin"])
