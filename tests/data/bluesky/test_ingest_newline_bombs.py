"""Jetstream ingest: a compressed capture that decodes to more than 10,000,000 blank lines (a "newline bomb") is
refused naming the file, as the trace readers refuse a gzipped one; the cap and its count are exact."""

from __future__ import annotations

import random

import pytest
import zstandard

from aumann.data.bluesky.filters import FilterConfig
from aumann.data.bluesky.ingest import IngestOptions, ingest
from aumann.data.bluesky.jetstream import MAX_BLANK_LINES, BlankLines, write_frames
from aumann.errors import IngestError

A = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
B = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
OPEN = FilterConfig(min_account_age_days=0, bot_handle_patterns=[], require_non_self_engagement=False)


def _event(i: int) -> bytes:
    return (f'{{"did":"{A}","time_us":{1775520000000000 + i},"kind":"commit","commit":{{"rev":"r{i}",'
            f'"operation":"create","collection":"app.bsky.graph.follow","rkey":"k{i}",'
            f'"record":{{"subject":"{B}","createdAt":"2026-04-07T00:00:00Z"}}}}}}').encode()


def _zst(path, *parts: bytes) -> None:
    """A zstd stream of ``parts`` (written piece by piece: 10 MB of line ends compress to a few hundred bytes)."""
    with open(path, "wb") as fh, zstandard.ZstdCompressor(level=3).stream_writer(fh) as w:
        for p in parts:
            w.write(p)


def _ingest(f):
    return ingest([f], filters=OPEN, options=IngestOptions(threads=1))


def test_the_trace_readers_cap_is_the_same():
    from aumann.data.traces.duck import MAX_BLANK_LINES as TRACES

    assert MAX_BLANK_LINES == TRACES == 10_000_000


@pytest.mark.parametrize("blank", [b"\n", b" \t\r\n", b"\r\n"])
@pytest.mark.parametrize("bom", [False, True])
def test_a_zstd_newline_bomb_is_refused_naming_the_file(tmp_path, blank, bom):
    """Before: 1 GiB of line ends (33 KB as .jsonl.zst) was read by DuckDB, then counted, 1.75 s per GiB, and the
    ingest ended in "no user passes the filters"; 4 MiB on disk would hold 130 GiB of them."""
    f = tmp_path / "capture.jsonl.zst"
    _zst(f, (b"\xef\xbb\xbf" if bom else b"") + _event(0) + b"\n", blank * (MAX_BLANK_LINES + 1), _event(1) + b"\n")
    with pytest.raises(IngestError, match=r"capture\.jsonl\.zst.*more than 10,000,000 blank lines.*newline bomb"):
        _ingest(f)


def test_a_capture_with_exactly_the_cap_of_blank_lines_is_read(tmp_path):
    f = tmp_path / "capture.jsonl.zst"
    _zst(f, _event(0) + b"\n", b"\n" * (MAX_BLANK_LINES - 2), b" \n\n", _event(1) + b"\n")
    _, report = _ingest(f)
    assert report.valid_events == 2 and report.blank_lines == MAX_BLANK_LINES


def test_a_zstd_frames_newline_bomb_is_refused_before_it_fills_the_temp_folder(tmp_path):
    f = tmp_path / "capture.frames"
    write_frames([_event(i) for i in range(8)] + [b"\n" * 1_000_000] * 11, f)
    with pytest.raises(IngestError, match=r"capture\.frames.*more than 10,000,000 blank lines"):
        _ingest(f)
    f.unlink()
    write_frames([_event(i) for i in range(8)] + [b"\n" * 1_000_000] * 9, f)
    _, report = _ingest(f)
    assert report.files[0]["container"] == "zstd-frames" and report.valid_events == 8
    assert report.blank_lines == 9_000_000


def test_a_length_prefixed_newline_bomb_is_refused(tmp_path):
    c = zstandard.ZstdCompressor()
    blobs = [c.compress(_event(i)) for i in range(8)] + [c.compress(b"\n" * 1_000_000)] * 11
    f = tmp_path / "capture.bin"
    f.write_bytes(b"".join(len(b).to_bytes(4, "little") + b for b in blobs))
    with pytest.raises(IngestError, match=r"capture\.bin.*more than 10,000,000 blank lines"):
        _ingest(f)


def _naive_blank_lines(text: bytes) -> int:
    lines = text.split(b"\n")[:-1]  # the lines a "\n" ends
    return sum(1 for line in lines if not line.strip(b" \t\r"))


@pytest.mark.parametrize("seed", range(20))
def test_blank_lines_are_counted_exactly_however_the_blocks_fall(tmp_path, seed):
    rng = random.Random(seed)
    pieces = [b"{}\n", b"{\"a\": 1}\n", b"\n", b" \n", b"\r\n", b"\t \r\n", b" {}\n", b"x\n", b"{", b" ", b"\r"]
    text = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 400)))
    blanks = BlankLines(tmp_path / "x", limit=10**9)
    pos, newlines = 0, 0
    while pos < len(text):
        n = rng.randrange(1, 40)
        newlines += blanks.feed(text[pos:pos + n])
        pos += n
    assert blanks.count == _naive_blank_lines(text) and newlines == text.count(b"\n")


def test_detecting_the_container_of_a_bomb_does_not_decode_it_whole(tmp_path):
    """Detection decoded the first frame whole, in memory, to see whether it held one message: a 66 KB .jsonl.zst of
    line ends took 2.1 GB (a 1 MiB one would take 32 GiB, before the blank-line cap could count anything). It now
    looks at 16 MiB of a frame at most."""
    import tracemalloc

    from aumann.data.bluesky.jetstream import detect_container

    f = tmp_path / "capture.jsonl.zst"
    _zst(f, _event(0) + b"\n", *[b"\n" * (1 << 20)] * 256)  # 256 MiB decoded, a few KB on disk
    tracemalloc.start()
    try:
        assert detect_container(f) == "zstd"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


def _big_frame(size: int, declared: bool) -> bytes:
    """One zstd frame of ``size`` bytes of ``x`` (a few KB), its size in its header or not."""
    import io

    buf = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(buf, size=size if declared else -1, closefd=False) as w:
        for _ in range(size >> 20):
            w.write(b"x" * (1 << 20))
    return buf.getvalue()


@pytest.mark.parametrize("declared", [True, False])
@pytest.mark.parametrize("container", ["zstd-frames", "length-prefixed"])
def test_a_frame_that_decodes_past_the_message_bound_is_a_malformed_frame_not_decoded(tmp_path, declared, container):
    """Each frame of a zstd-frames or length-prefixed file was decoded whole, in memory: a frame of a few KB held
    hundreds of MiB (a 1 MiB one, 32 GiB). A frame that decodes past MAX_MESSAGE_BYTES (64 MiB) is now a malformed
    frame, counted, and no more than the bound is decoded."""
    import tracemalloc

    from aumann.data.bluesky.jetstream import MAX_MESSAGE_BYTES, decode_frames_to_jsonl, decode_records_to_jsonl

    c = zstandard.ZstdCompressor()
    frames = [c.compress(_event(i)) for i in range(8)] + [_big_frame(2 * MAX_MESSAGE_BYTES, declared)]
    f = tmp_path / "capture.bin"
    if container == "zstd-frames":
        f.write_bytes(b"".join(frames))
        decode = decode_frames_to_jsonl
    else:
        f.write_bytes(b"".join(len(b).to_bytes(4, "little") + b for b in frames))
        decode = decode_records_to_jsonl
    tracemalloc.start()
    try:
        st = decode(f, tmp_path / "out.jsonl")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (st.frames, st.malformed_frames) == (9, 1)
    assert (zstandard.get_frame_parameters(frames[-1]).content_size == 2 * MAX_MESSAGE_BYTES) == declared
    assert peak < 2 * MAX_MESSAGE_BYTES + (32 << 20), peak
    _, report = _ingest(f)
    assert report.files[0]["container"] == container and report.valid_events == 8 and report.malformed_frames == 1


def test_a_scratch_copy_of_a_bomb_decodes_a_little_at_a_time(tmp_path):
    """The copy of a .jsonl.zst with a byte-order mark (or a damaged one) fed the decoder 64 KiB at a time: 64 KiB of
    a stream of line ends decoded into one piece of 2 GiB. It is fed 1 KiB at a time (32 MiB decoded at most)."""
    import tracemalloc

    from aumann.data.bluesky.jetstream import decode_zstd_stream_to_jsonl

    f = tmp_path / "capture.jsonl.zst"
    _zst(f, b"\xef\xbb\xbf" + _event(0) + b"\n", *[b"x" * (1 << 20)] * 512)  # 512 MiB decoded, a few KB on disk
    tracemalloc.start()
    try:
        st = decode_zstd_stream_to_jsonl(f, tmp_path / "copy.jsonl.zst", recompress=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert st.bytes_out == len(_event(0)) + 1 + (512 << 20) and st.error is None
    assert peak < 128 << 20, peak
