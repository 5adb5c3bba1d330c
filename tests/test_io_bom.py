"""The one helper for a leading UTF-8 byte-order mark (aumann.io), which the trace readers and the Jetstream
ingester both use."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("head", [b"", b"\xef", b"\xef\xbb", b'{"a"', b"\xef\xbb\xbf", b"\xef\xbb\xbf\xef\xbb\xbf{"])
def test_copy_without_bom_drops_only_one_leading_mark(tmp_path, head):
    """The one BOM helper both JSON readers use: exactly one leading mark goes, every other byte stays (a
    file shorter than a mark, a partial mark, a doubled mark), across the chunk boundary too."""
    from aumann.io import BOM, copy_without_bom, starts_with_bom

    body = head + b'{"x": 1}\n' * 40
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(body)
    want = body[len(BOM):] if body.startswith(BOM) else body
    assert starts_with_bom(src) is body.startswith(BOM)
    assert copy_without_bom(src, dst, chunk_size=7) == len(want)
    assert dst.read_bytes() == want
