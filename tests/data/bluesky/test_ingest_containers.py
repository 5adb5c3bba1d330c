"""Containers (JSONL, .jsonl.zst, dictionary zstd frames) and exact malformed-line counting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import zstandard

from aumann.data.bluesky.ingest import IngestOptions, ingest
from aumann.data.bluesky.jetstream import (
    ZstdDictionaryError,
    decode_frames_to_jsonl,
    detect_container,
    iter_frames,
    write_frames,
)
from tests.data.bluesky.jetstream_builder import DAY0_US, MALFORMED_LINES, PROFILES_CSV, build
from tests.paths import JETSTREAM_SAMPLE, SHARED_MISSING

GOOD = (b'{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","time_us":1775779300000000,"kind":"commit","commit":'
        b'{"rev":"r1","operation":"create","collection":"app.bsky.feed.like","rkey":"k1","record":'
        b'{"subject":{"uri":"at://did:plc:bbbbbbbbbbbbbbbbbbbbbbbb/app.bsky.feed.post/p","cid":"c"}}}}')
GOOD2 = GOOD.replace(b'"k1"', b'"k2"').replace(b'"r1"', b'"r2"')

# Lines DuckDB's reader could mishandle; each must be exactly one malformed line.
EDGE_LINES = {
    **MALFORMED_LINES,
    "unterminated_string": b'{"did":"abc',
    "two_objects_on_one_line": b'{"did":"did:plc:x","time_us":1,"kind":"identity"}{"did":"did:plc:y","time_us":2,'
                               b'"kind":"identity"}',
    "lone_cr_garbage": b"abc\rdef",
    "nul_bytes": b"\x00\x00\x00",
    "number": b"42",
    "null": b"null",
    "open_brace": b"{",
    "deep_nesting": b"[" * 3000 + b"]" * 3000,
    "bad_escape": b'{"did":"\\q","time_us":1,"kind":"identity"}',
    "time_us_negative": b'{"did":"did:plc:x","time_us":-5,"kind":"identity"}',
    "time_us_too_large": b'{"did":"did:plc:x","time_us":99999999999999999999999,"kind":"identity"}',
    "time_us_year_10000": b'{"did":"did:plc:x","time_us":253402300800000000,"kind":"identity"}',
    "missing_did": b'{"time_us":1775779300000000,"kind":"identity"}',
}


@pytest.mark.parametrize("name", sorted(EDGE_LINES), ids=str)
def test_each_malformed_line_is_counted_once(tmp_path: Path, name: str):
    f = tmp_path / "day.jsonl"
    f.write_bytes(GOOD + b"\n" + EDGE_LINES[name] + b"\n\n" + GOOD2 + b"\n")
    _counts, report = ingest([f], options=IngestOptions(threads=1))
    assert report.malformed_lines == 1, name
    assert report.valid_events == 2 and report.by_kind == {"commit": 2}


def test_wrong_field_types_inside_records_do_not_invalidate_lines(tmp_path: Path):
    # An unknown lexicon reusing record field names with other types is a valid event.
    line = {"did": "did:plc:x", "time_us": 1775779300000000, "kind": "commit",
            "commit": {"rev": "r", "operation": "create", "collection": "com.example.thing", "rkey": "k",
                       "record": {"text": {"a": 1}, "facets": "str", "tags": {"x": 1}, "reply": 5, "subject": [1]}}}
    # A record that is not an object: the envelope is valid, so the event counts (record fields read as null).
    odd_record = GOOD2.replace(b'"record":{"subject":{"uri":"at://did:plc:bbbbbbbbbbbbbbbbbbbbbbbb/'
                               b'app.bsky.feed.post/p","cid":"c"}}', b'"record":"text"')
    assert odd_record != GOOD2
    f = tmp_path / "day.jsonl"
    f.write_bytes(json.dumps(line).encode() + b"\n" + GOOD + b"\n" + odd_record + b"\n")
    _, report = ingest([f], options=IngestOptions(threads=1))
    assert report.malformed_lines == 0 and report.valid_events == 3
    assert report.by_collection_operation["com.example.thing"] == {"create": 1}


def test_utf8_text_and_facets_match(tmp_path: Path):
    rec = {"text": "Ünïcödé — Earth Day 🌍", "facets": [{"index": {"byteStart": 0, "byteEnd": 5},
                                                        "features": [{"$type": "app.bsky.richtext.facet#tag",
                                                                      "tag": "WrestleMania"}]}]}
    post = {"did": "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "time_us": DAY0_US + 5, "kind": "commit",
            "commit": {"rev": "r9", "operation": "create", "collection": "app.bsky.feed.post", "rkey": "pp",
                       "record": rec}}
    f = tmp_path / "day.jsonl"
    f.write_bytes(json.dumps(post, ensure_ascii=False).encode() + b"\n" + GOOD + b"\n")
    counts, _ = ingest([f], filters=None, options=IngestOptions(threads=1))
    assert sorted(counts.daily["topic"]) == ["earth-day-climate", "wrestlemania"]


def _reference(tmp_path: Path):
    cap, _expected = build()
    files = cap.write(tmp_path / "plain")
    prof = tmp_path / "profiles.csv"
    prof.write_text(PROFILES_CSV)
    counts, report = ingest(files, profiles=prof, options=IngestOptions(threads=1))
    return files, prof, counts, report


def _same(a, b, ra, rb):
    assert a.users.equals(b.users) and a.daily.equals(b.daily) and a.follows.equals(b.follows)
    da, db = ra.to_dict(), rb.to_dict()
    for key in ("events", "malformed_lines", "dropped_users", "days", "duplicates", "valid_events"):
        assert da[key] == db[key], key


def test_zstd_jsonl_gives_identical_counts(tmp_path: Path):
    files, prof, counts, report = _reference(tmp_path)
    zfiles = []
    for f in files:
        z = f.with_suffix(".jsonl.zst")
        z.write_bytes(zstandard.ZstdCompressor(level=3).compress(f.read_bytes()))
        assert detect_container(z) == "zstd"
        zfiles.append(z)
    zc, zr = ingest(zfiles, profiles=prof, options=IngestOptions(threads=1))
    _same(counts, zc, report, zr)
    assert {f["container"] for f in zr.files} == {"zstd"}


def _dictionary() -> zstandard.ZstdCompressionDict:
    samples = []
    for i in range(400):
        samples.append(json.dumps({"did": f"did:plc:{i:024d}", "time_us": DAY0_US + i * 7919, "kind": "commit",
                                   "commit": {"rev": f"3m{i:011d}", "operation": "create",
                                              "collection": ("app.bsky.feed.like", "app.bsky.feed.post")[i % 2],
                                              "rkey": f"3k{i:011d}", "record": {"text": f"post {i} " * (i % 5)}}},
                                  separators=(",", ":")).encode())
    return zstandard.train_dictionary(2048, samples)


def test_dictionary_frames_give_identical_counts(tmp_path: Path):
    files, prof, counts, report = _reference(tmp_path)
    zdict = _dictionary()
    dict_path = tmp_path / "zstd_dictionary"
    dict_path.write_bytes(zdict.as_bytes())
    framed = []
    for f in files:
        messages = [m for m in f.read_bytes().split(b"\n") if m]  # one frame per websocket message
        framed.append(write_frames(messages, f.with_suffix(".zframes"), zdict.as_bytes()))
        assert detect_container(framed[-1]) == "zstd-frames"
    fc, fr = ingest(framed, profiles=prof, options=IngestOptions(threads=1, zstd_dictionary=dict_path))
    _same(counts, fc, report, fr)
    assert fr.malformed_frames == 0
    with pytest.raises(ZstdDictionaryError, match=f"dictionary ID {zdict.dict_id()}.*--zstd-dictionary"):
        ingest(framed, options=IngestOptions(threads=1))
    other = zstandard.train_dictionary(1024, [b'{"x":%d,"y":"abc%d"}' % (i, i * 7) for i in range(300)])
    with pytest.raises(ZstdDictionaryError, match="the dictionary given has ID"):
        ingest(framed, options=IngestOptions(threads=1, zstd_dictionary=other.as_bytes()))


def test_frames_without_dictionary_are_detected_by_content(tmp_path: Path):
    f = write_frames([GOOD, GOOD2], tmp_path / "x.zframes")
    assert detect_container(f) == "zstd-frames"
    _, report = ingest([f], options=IngestOptions(threads=1))
    assert report.valid_events == 2 and report.malformed_lines == 0


def test_corrupt_frames_are_counted_and_decoding_resynchronises(tmp_path: Path):
    messages = [GOOD.replace(b'"k1"', b'"k%d"' % i).replace(b'"r1"', b'"r%d"' % i) for i in range(50)]
    f = write_frames(messages, tmp_path / "x.zframes")
    data = bytearray(f.read_bytes())
    sizes = [len(zstandard.ZstdCompressor(level=3).compress(m)) for m in messages]
    start = sum(sizes[:10])
    data[start + 4] = 0xFF  # break frame 10's header (reserved bit)
    f.write_bytes(bytes(data) + b"\x28\xb5\x2f\xfd\x00")  # and a truncated tail frame
    payloads = list(iter_frames(f))
    assert sum(p is None for p in payloads) == 2
    assert sum(p is not None for p in payloads) == 49
    out = tmp_path / "x.jsonl"
    st = decode_frames_to_jsonl(f, out)
    assert (st.frames, st.malformed_frames) == (51, 2)
    _, report = ingest([f], options=IngestOptions(threads=1))
    assert report.valid_events == 49 and report.malformed_frames == 2 and report.malformed_lines == 2


def _lines(n: int) -> list[bytes]:
    return [GOOD.replace(b'"k1"', b'"k%d"' % i).replace(b'"r1"', b'"r%d"' % i) for i in range(n)]


def test_truncated_zstd_stream_is_reported_and_keeps_what_decodes(tmp_path: Path):
    data = zstandard.ZstdCompressor(level=3).compress(b"\n".join(_lines(2000)) + b"\n")
    f = tmp_path / "cut.jsonl.zst"
    f.write_bytes(data[: len(data) * 2 // 3])  # a capture killed mid-write
    _, report = ingest([f], options=IngestOptions(threads=1))
    assert report.damaged_files == 1 and "truncated" in report.files[0]["damaged_stream"]
    assert 0 < report.valid_events < 2000
    assert report.malformed_lines <= 1  # at most the line cut by the damage
    assert report.valid_events + report.malformed_lines == report.rows_read


def test_damaged_zstd_stream_falls_back_to_what_decodes(tmp_path: Path):
    cctx = zstandard.ZstdCompressor(level=3)
    good = cctx.compress(b"\n".join(_lines(100)) + b"\n")
    bad = bytearray(cctx.compress(b"\n".join(_lines(3000)[100:]) + b"\n"))
    bad[len(bad) // 2: len(bad) // 2 + 40] = b"\xff" * 40  # corrupt the second frame's data
    f = tmp_path / "bad.jsonl.zst"
    f.write_bytes(good + bytes(bad))
    _, report = ingest([f], options=IngestOptions(threads=1))
    assert report.damaged_files == 1 and report.files[0]["damaged_stream"]
    assert report.valid_events >= 100
    assert report.valid_events + report.malformed_lines == report.rows_read


@pytest.mark.parametrize("tail", [b"garbage\n", b"\x28\xb5\x2f\xfd\x00", b"\x00" * 3])
def test_bytes_after_the_last_complete_frame_lose_nothing_it_held(tmp_path: Path, tail: bytes):
    """A complete frame then a few bytes of garbage (a writer restarted mid-header): every event of the frame is
    kept, the file is reported damaged (a buffered decoder used to drop the last chunk it had decoded)."""
    cctx = zstandard.ZstdCompressor(level=3)
    frames = cctx.compress(b"\n".join(_lines(2500)[:1200]) + b"\n") + cctx.compress(
        b"\n".join(_lines(2500)[1200:]) + b"\n")
    f = tmp_path / "tail.jsonl.zst"
    f.write_bytes(frames + tail)
    _, report = ingest([f], options=IngestOptions(threads=1))
    assert report.valid_events == 2500 and report.malformed_lines == 0
    assert report.damaged_files == 1 and report.files[0]["damaged_stream"]
    from aumann.data.bluesky.jetstream import decode_zstd_stream_to_jsonl

    st = decode_zstd_stream_to_jsonl(f, tmp_path / "out.jsonl", chunk_size=4096)  # small reads: frames span them
    assert (tmp_path / "out.jsonl").read_bytes() == b"\n".join(_lines(2500)) + b"\n" and st.error


def test_complete_zstd_streams_are_not_flagged(tmp_path: Path):
    from aumann.data.bluesky.jetstream import zstd_stream_problem

    cctx = zstandard.ZstdCompressor(level=3, write_checksum=True)
    f = tmp_path / "ok.jsonl.zst"
    f.write_bytes(cctx.compress(b"\n".join(_lines(500)) + b"\n") + cctx.compress(b"\n".join(_lines(3)) + b"\n"))
    assert zstd_stream_problem(f) is None


@pytest.mark.parametrize("cut", [100, 700])  # inside the first line; after several lines, inside one
def test_a_jsonl_zst_whose_frames_end_mid_line_is_a_stream_not_frames(tmp_path: Path, cut: int):
    """An ordinary .jsonl.zst in several frames (a writer that closes a frame every N bytes) whose first frame ends
    mid-line was read as per-message frames: each frame became a line, so the cut event was lost and counted as
    two malformed lines (lines_read 41 for a 40-line file). zstd -d reads it as the 40 lines it holds."""
    text = b"\n".join(_lines(40)) + b"\n"
    cctx = zstandard.ZstdCompressor(level=3)
    f = tmp_path / "day.jsonl.zst"
    f.write_bytes(cctx.compress(text[:cut]) + cctx.compress(text[cut:]))
    assert detect_container(f) == "zstd"
    _, report = ingest([f], options=IngestOptions(threads=1))
    assert (report.valid_events, report.malformed_lines, report.lines_read) == (40, 0, 40)


@pytest.mark.parametrize("where", ["first", "between", "last"])
def test_zstd_skippable_frames_are_skipped_not_refused_or_flagged(tmp_path: Path, where: str):
    """A skippable frame (magic 0x184D2A5?: pzstd writes one before every frame, the seekable format one after the
    last) holds no content. A .jsonl.zst that started with one was refused as 'binary but not in a layout aumann
    reads'; one with it between or after frames was reported as a damaged stream ('no zstd frame at byte ...')."""
    from aumann.data.bluesky.jetstream import zstd_stream_problem

    cctx = zstandard.ZstdCompressor(level=3)
    skip = (0x184D2A5E).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"\x00\x01\x02\x03\x04"
    a, b = cctx.compress(b"\n".join(_lines(40)[:15]) + b"\n"), cctx.compress(b"\n".join(_lines(40)[15:]) + b"\n")
    f = tmp_path / "day.jsonl.zst"
    f.write_bytes({"first": skip + a + b, "between": a + skip + b, "last": a + b + skip}[where])
    assert detect_container(f) == "zstd" and zstd_stream_problem(f) is None
    _, report = ingest([f], options=IngestOptions(threads=1))
    assert (report.valid_events, report.malformed_lines, report.lines_read, report.damaged_files) == (40, 0, 40, 0)
    assert "damaged_stream" not in report.files[0]


GOLDEN = JETSTREAM_SAMPLE


@pytest.mark.skipif(not GOLDEN.exists(), reason=SHARED_MISSING)
def test_real_sample_reads_the_same_from_every_container(tmp_path: Path):
    raw = GOLDEN.read_bytes()
    z = tmp_path / "golden.jsonl.zst"
    z.write_bytes(zstandard.ZstdCompressor(level=3).compress(raw))
    zdict = _dictionary()
    framed = write_frames([m for m in raw.split(b"\n") if m], tmp_path / "golden.zframes", zdict.as_bytes())
    reports = [ingest([f], options=IngestOptions(threads=1, zstd_dictionary=zdict.as_bytes()))[1].to_dict()
               for f in (GOLDEN, z, framed)]
    for r in reports:
        assert r["events"] == reports[0]["events"]
        assert r["events"]["by_kind"] == {"commit": 8, "identity": 1, "account": 1}
        assert r["malformed_lines"] == 0 and r["users_kept"] == 4


def test_empty_and_blank_files_are_harmless(tmp_path: Path):
    empty, blank, good = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    empty.write_bytes(b"")
    blank.write_bytes(b"\n\n  \n")
    good.write_bytes(GOOD + b"\n")
    _, report = ingest([empty, blank, good], options=IngestOptions(threads=1))
    assert [f["rows"] for f in report.files] == [0, 0, 1]
    assert report.malformed_lines == 0 and report.valid_events == 1


@pytest.mark.parametrize("damaged", [False, True])
def test_a_zstd_capture_decoded_to_scratch_is_zstd_again_not_its_whole_text(tmp_path: Path, monkeypatch, damaged):
    """A .jsonl.zst with a byte-order mark (or a damaged stream) is decoded into a scratch copy for DuckDB: it was the
    whole decoded text, 8 MiB here for a file of a few KB, 1 GiB for a 34 KB capture of line ends (a 4 MB one would
    fill 120 GiB). The copy is zstd again, and reads the same events. (2²³ blank lines: more than 10⁷ is a newline
    bomb, refused.)"""
    import aumann.data.bluesky.ingest as ing

    copies: list[tuple[Path, int]] = []
    for name in ("copy_without_bom", "decode_zstd_stream_to_jsonl"):
        real = getattr(ing, name)

        def spy(src, dst, *a, _real=real, **kw):
            st = _real(src, dst, *a, **kw)
            copies.append((Path(dst), Path(dst).stat().st_size))
            return st

        monkeypatch.setattr(ing, name, spy)
    text = b"\n".join(_lines(300)) + b"\n" + b"\n" * (1 << 23)
    cctx = zstandard.ZstdCompressor(level=19)
    data = cctx.compress(text if damaged else b"\xef\xbb\xbf" + text)
    if damaged:  # a second frame damaged mid-data: DuckDB refuses the stream, what decodes is read from the copy
        bad = bytearray(zstandard.ZstdCompressor(level=3).compress(b"\n".join(_lines(3000)[300:]) + b"\n"))
        bad[len(bad) // 2: len(bad) // 2 + 40] = b"\xff" * 40
        data += bytes(bad)
    f = tmp_path / "cap.jsonl.zst"
    f.write_bytes(data)
    _, report = ingest([f], options=IngestOptions(threads=1))
    assert report.valid_events >= 300 and report.blank_lines == 1 << 23
    assert copies and all(size < 10 * len(data) for _, size in copies), (copies, len(data))
    assert report.files[0]["decoded_bytes"] >= len(text)
    assert [p.name for p, _ in copies] == ["zstd-0.jsonl.zst" if damaged else "bom-0.jsonl.zst"]
    assert report.damaged_files == int(damaged)
