"""``count_lines``: the mapped, sliced and threaded count agrees with ``bytes.count`` on every shape of file."""

from __future__ import annotations

import pytest
import zstandard

from aumann.data.bluesky import jetstream
from aumann.data.bluesky.jetstream import count_lines

CASES = [
    b"",
    b"\n",
    b"no newline at all",
    b'{"a":1}\n{"b":2}\n',
    b'{"a":1}\n{"b":2}',  # a last line without "\n"
    b"\n\n   \n\t\n" + b'{"x":1}\r\n' * 1000,
    bytes(range(256)) * 4099,  # "\n" at positions that straddle every slice boundary below
]


@pytest.mark.parametrize("content", CASES)
@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 20])
@pytest.mark.parametrize("threaded", [False, True])
def test_count_lines_matches_bytes_count(tmp_path, monkeypatch, content, chunk, threaded):
    monkeypatch.setattr(jetstream, "_THREADED_COUNT_FROM", 0 if threaded else 1 << 62)
    path = tmp_path / "f.jsonl"
    path.write_bytes(content)
    expected = content.count(b"\n") + (bool(content) and not content.endswith(b"\n"))
    assert count_lines(path, chunk_size=chunk) == expected
    zpath = tmp_path / "f.jsonl.zst"
    zpath.write_bytes(zstandard.ZstdCompressor().compress(content))
    assert count_lines(zpath, compressed=True, chunk_size=max(chunk, 64)) == expected
