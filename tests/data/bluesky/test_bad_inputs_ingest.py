"""Ingestion of damaged and unusual inputs (issue 10): nothing is lost silently, every line is accounted for.

* ``ingest_report.json`` has ``lines_read`` and ``blank_lines`` beside ``malformed_lines``, and
  ``lines_read = valid + malformed + blank`` for the report and for every file — checked by a hypothesis
  property test on random garbage lines, which also checks that no valid event is lost;
* a UTF-8 BOM does not cost the first event (plain JSONL, .jsonl.zst, frames);
* ``[u32 length][zstd frame]`` records (either byte order, truncated tail) are detected and decoded;
* frames compressed with a dictionary but without its ID decode when ``--zstd-dictionary`` is given;
* an explicit ``--days`` window is capped like the automatic one (``--max-days`` raises the cap);
* a damaged single file is reported as damaged; a binary file in no known layout is refused;
* a repeated key is read with its first occurrence (documented decision);
* damaged ``counts.json`` / truncated Parquet tables / undecodable profile CSVs are typed errors.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aumann.data.bluesky.counts import RawCounts
from aumann.data.bluesky.filters import FilterConfig
from aumann.data.bluesky.ingest import IngestOptions, ingest
from aumann.errors import IngestError, UnsafeNameError, ZstdDictionaryError

A = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
B = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
T0 = 1_775_779_300_000_000  # 2026-04-10
OPEN = FilterConfig(min_account_age_days=0, bot_handle_patterns=[], require_non_self_engagement=False)


def event(i: int, did: str = A, target: str = B) -> bytes:
    return json.dumps({"did": did, "time_us": T0 + i, "kind": "commit",
                       "commit": {"rev": f"r{i}", "operation": "create", "collection": "app.bsky.feed.like",
                                  "rkey": f"k{i}", "record": {"subject": {"uri": f"at://{target}/app.bsky.feed"
                                                                                 f".post/p", "cid": "c"}}}},
                      separators=(",", ":")).encode()


def events(n: int) -> list[bytes]:
    return [event(i) if i % 2 else event(i, did=B, target=A) for i in range(n)]


def _ingest(files, **opt):
    return ingest(files, filters=OPEN, options=IngestOptions(threads=1, **opt))


def _identity(report) -> None:
    d = report.to_dict()
    assert d["lines_read"] == d["valid_events"] + d["malformed_lines"] + d["blank_lines"]
    for f in d["files"]:
        assert f["lines_read"] == f["valid"] + f["malformed"] + f["blank_lines"], f


# ---------------------------------------------------------------------------------------------- property test
_WS = b" \t\r\x0b\x0c"


def _is_blank(line: bytes) -> bool:
    return line.strip(_WS) == b""


garbage = st.one_of(
    st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b" ", b"\t", b"\r", b"  \t \r", b"\x0b", b"\x0c", b"\x00", b"\xef\xbb\xbf", b"\xc2\xa0",
                     b"{", b"}", b"[]", b"null", b"42", b'"did"', b'{"did":"did:plc:x"}', b'{"time_us":1}',
                     b'{"did":"did:plc:x","time_us":1,"kind":1}', b"\xff\xfe\xfd", b"{\"a\":\"\\ud800\"}",
                     b'{"did":"did:plc:x","time_us":-1,"kind":"identity"}', b"[" * 200]),
    st.text(max_size=40).map(lambda t: t.encode("utf-8").replace(b"\n", b"")),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(st.integers(min_value=0, max_value=10**6), garbage), min_size=1, max_size=40),
       bom=st.booleans(), trailing_newline=st.booleans(), crlf=st.booleans())
def test_every_line_is_accounted_for_and_no_valid_event_is_lost(tmp_path_factory, lines, bom, trailing_newline,
                                                                crlf):
    out, valid, seen = [], 0, set()
    for item in lines:
        if isinstance(item, int):
            if item in seen:  # distinct events only: a replayed one would be a duplicate, still valid
                continue
            seen.add(item)
            out.append(event(item) if item % 2 else event(item, did=B, target=A))
            valid += 1
        else:
            out.append(item)
    sep = b"\r\n" if crlf else b"\n"
    data = (b"\xef\xbb\xbf" if bom else b"") + sep.join(out) + (sep if trailing_newline else b"")
    # what a reader sees: one leading BOM removed, lines split at "\n" (a last line may lack it)
    content = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    seen_lines = content.split(b"\n")
    if content.endswith(b"\n") or content == b"":
        seen_lines = seen_lines[:-1]
    n_lines = len(seen_lines)
    blank = sum(_is_blank(ln) for ln in seen_lines)
    path = tmp_path_factory.mktemp("prop") / "day.jsonl"
    path.write_bytes(data)
    if valid == 0:
        with pytest.raises(IngestError):
            _ingest([path])
        return
    _, report = _ingest([path])
    _identity(report)
    assert report.valid_events == valid  # zero events lost
    assert report.blank_lines == blank
    assert report.lines_read == n_lines
    assert report.malformed_lines == n_lines - valid - blank
    assert sum(report.by_kind.values()) == valid


# ---------------------------------------------------------------------------------------------- BOM
def test_bom_does_not_cost_the_first_event(tmp_path):
    body = b"\n".join(events(6)) + b"\n"
    plain = tmp_path / "bom.jsonl"
    plain.write_bytes(b"\xef\xbb\xbf" + body)
    zst = tmp_path / "bom.jsonl.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(b"\xef\xbb\xbf" + body))
    for f in (plain, zst):
        _, report = _ingest([f])
        assert (report.valid_events, report.malformed_lines, report.lines_read) == (6, 0, 6), f.name
        assert report.files[0]["bom"] is True
        _identity(report)


# ---------------------------------------------------------------------------------------------- containers
@pytest.mark.parametrize("order", ["little", "big"])
@pytest.mark.parametrize("payload", ["zstd", "json"])
def test_length_prefixed_records_are_detected_and_decoded(tmp_path, order, payload):
    msgs = events(8)
    c = zstandard.ZstdCompressor()
    blobs = [c.compress(m) for m in msgs] if payload == "zstd" else msgs
    f = tmp_path / "capture.bin"
    f.write_bytes(b"".join(len(b).to_bytes(4, order) + b for b in blobs))
    _, report = _ingest([f])
    assert report.files[0]["container"] == "length-prefixed"
    assert (report.valid_events, report.malformed_lines) == (8, 0)
    _identity(report)
    f.write_bytes(f.read_bytes()[:-5])  # a capture killed mid-record: the cut record is counted, not lost silently
    _, report = _ingest([f])
    assert (report.valid_events, report.malformed_lines, report.malformed_frames) == (7, 1, 1)
    _identity(report)


def test_frames_without_dictionary_id_decode_with_the_given_dictionary(tmp_path):
    msgs = events(12)
    zd = zstandard.train_dictionary(2048, msgs * 40)
    dict_path = tmp_path / "dict"
    dict_path.write_bytes(zd.as_bytes())
    c = zstandard.ZstdCompressor(dict_data=zd, write_dict_id=False)
    f = tmp_path / "frames.zst"
    f.write_bytes(b"".join(c.compress(m) for m in msgs))
    _, report = _ingest([f], zstd_dictionary=dict_path)
    assert report.files[0]["container"] == "zstd-frames" and report.valid_events == 12
    with pytest.raises(IngestError, match="--zstd-dictionary"):  # without it: damage, and the hint
        _ingest([f])
    rec = tmp_path / "records.bin"
    c_id = zstandard.ZstdCompressor(dict_data=zd)
    rec.write_bytes(b"".join(len(b).to_bytes(4, "little") + b for b in (c_id.compress(m) for m in msgs)))
    with pytest.raises(ZstdDictionaryError, match=str(zd.dict_id())):
        _ingest([rec])
    assert _ingest([rec], zstd_dictionary=dict_path)[1].valid_events == 12


def test_binary_file_in_no_known_layout_is_refused_by_name(tmp_path):
    f = tmp_path / "noise.bin"
    noise = bytearray(np.random.default_rng(7).bytes(4000))
    noise[100:102] = b"\n{"  # a line that starts like JSON does not make noise a JSONL capture
    f.write_bytes(bytes(noise))
    good = tmp_path / "good.jsonl"
    good.write_bytes(b"\n".join(events(4)) + b"\n")
    with pytest.raises(IngestError, match=r"noise\.bin") as info:
        _ingest([good, f])
    assert "binary" in str(info.value)


def test_a_damaged_single_file_is_reported_as_damaged(tmp_path):
    full = zstandard.ZstdCompressor().compress(b"\n".join(events(50)) + b"\n")
    f = tmp_path / "cut.jsonl.zst"
    f.write_bytes(full[:20])
    with pytest.raises(IngestError, match=r"1 damaged.*cut\.jsonl\.zst.*truncated"):
        _ingest([f])


def test_empty_and_blank_only_files_say_what_they_held(tmp_path):
    e = tmp_path / "empty.jsonl"
    e.write_bytes(b"")
    b = tmp_path / "blank.jsonl"
    b.write_bytes(b"\n \n\t\n")
    with pytest.raises(IngestError, match=r"blank\.jsonl.*3 line\(s\) read, 0 malformed, 3 blank"):
        _ingest([e, b])


# ---------------------------------------------------------------------------------------------- windows
@pytest.mark.parametrize("days, needle", [(("2026-04-10", "2206-04-10"), "--max-days"),
                                          (("2026-04-10", "2027-06-10"), "cap of 400"),
                                          (("2026-04-12", "2026-04-10"), "end before"),
                                          (("2026-13-10", "2026-04-12"), "2026-13-10"),
                                          (("2026-04-10",), "pair")])
def test_explicit_days_windows_are_checked_and_capped(tmp_path, days, needle):
    f = tmp_path / "d.jsonl"
    f.write_bytes(b"\n".join(events(4)) + b"\n")
    with pytest.raises(IngestError, match=needle):
        _ingest([f], days=days)


def test_max_days_raises_the_cap_on_purpose(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_bytes(b"\n".join(events(4)) + b"\n")
    _, report = _ingest([f], days=("2026-04-10", "2027-06-10"), max_days=500)
    assert len(report.days) == 427 and report.valid_events == 4


@pytest.mark.parametrize("kw, needle", [({"threads": -2}, "threads"), ({"threads": 2.5}, "threads"),
                                        ({"memory_limit": "banana"}, "memory_limit"),
                                        ({"memory_limit": "10B"}, "memory_limit"), ({"max_days": 0}, "max_days"),
                                        ({"progress": "yes"}, "progress")])
def test_ingest_options_are_validated(kw, needle):
    with pytest.raises(IngestError, match=needle):
        IngestOptions(**kw)


# ---------------------------------------------------------------------------------------------- repeated keys
def test_a_repeated_key_is_read_with_its_first_occurrence(tmp_path):
    good = events(3)
    first_ok = good[0].replace(b'"time_us":', b'"time_us":' + str(T0).encode() + b',"time_us":', 1)
    first_ok = first_ok.replace(b'"time_us":' + str(T0).encode() + b',"time_us":' + str(T0).encode(),
                                b'"time_us":' + str(T0).encode() + b',"time_us":"bogus"')
    first_bogus = good[1].replace(b'"time_us":', b'"time_us":"bogus","time_us":', 1)
    assert first_ok.count(b'"time_us"') == 2 and first_bogus.count(b'"time_us"') == 2
    f = tmp_path / "dup.jsonl"
    f.write_bytes(b"\n".join([first_ok, first_bogus, good[2]]) + b"\n")
    _, report = _ingest([f])
    assert (report.valid_events, report.malformed_lines) == (2, 1)


def test_kind_is_a_string_read_exactly_however_it_is_spelled(tmp_path):
    """``kind`` must be a JSON string (read as JSON text, ingest_sql.SCAN); ``"commit"`` has a fast path there, so
    every other spelling must still go the general way: an escaped ``commit`` is ``commit``, ``Commit`` or
    ``"commit"`` with quotes inside is a valid event of another kind, a non-string kind is a malformed line."""
    def with_kind(i: int, raw: bytes) -> bytes:
        line = event(i)
        assert line.count(b'"kind":"commit"') == 1
        return line.replace(b'"kind":"commit"', b'"kind":' + raw)

    odd = [b'"\\u0063ommit"', b'"Commit"', b'"\\"commit\\""', b'"commit "', b'5', b'1.5', b'null', b'["commit"]',
           b'{"k":"commit"}', b'true']
    f = tmp_path / "kinds.jsonl"
    f.write_bytes(b"\n".join([*events(2), *(with_kind(10 + i, k) for i, k in enumerate(odd))]) + b"\n")
    _, report = _ingest([f])
    _identity(report)
    assert (report.valid_events, report.malformed_lines) == (2 + 4, 6)
    assert report.by_kind["commit"] == 3  # the two plain ones and the escaped one
    assert report.by_collection_operation == {"app.bsky.feed.like": {"create": 3}}
    assert sorted(report.by_kind) == sorted(["commit", "Commit", '\\"commit\\"', "commit "])


@pytest.mark.parametrize("subject", ["{oops", "{", '{"uri":"at://x'])
def test_a_repost_whose_subject_is_a_string_opening_a_brace_is_one_malformed_engagement(tmp_path, subject):
    """``record.subject`` is read as text, so a string starting with ``{`` looks like a strongRef object; its
    ``uri`` was extracted as JSON and a string that is not JSON threw, and the whole file was refused."""
    repost = json.loads(event(9))
    repost["commit"].update(collection="app.bsky.feed.repost", record={"subject": subject})
    f = tmp_path / "day.jsonl"
    f.write_bytes(b"\n".join([*events(4), json.dumps(repost).encode()]) + b"\n")
    counts, report = _ingest([f])
    _identity(report)
    assert (report.valid_events, report.malformed_lines, report.malformed_engagements) == (5, 0, 1)
    assert report.by_collection_operation["app.bsky.feed.repost"] == {"create": 1}
    assert set(counts.users["did"]) == {A, B}


@pytest.mark.parametrize("did", ["did:", "did:plc", "did:plc:", "did::x", "did:PLC:x", "plc:aaaa", "did:plc:a b"])
def test_an_event_whose_did_is_not_a_did_is_a_malformed_line_not_a_user(tmp_path, did):
    """An event with DID ``did:`` (anything starting ``did:``) counted as a user's event, where a profile row
    with it is invalid. A DID is ``did:<method>:<id>``; any other ``did`` makes the line malformed, counted."""
    f = tmp_path / "day.jsonl"
    f.write_bytes(b"\n".join([*events(4), event(9, did=did)]) + b"\n")
    counts, report = _ingest([f])
    _identity(report)
    assert (report.valid_events, report.malformed_lines, report.lines_read) == (4, 1, 5)
    assert set(counts.users["did"]) == {A, B}


# ---------------------------------------------------------------------------------------------- stored counts
@pytest.fixture(scope="module")
def counts_dir(tmp_path_factory) -> Path:
    from aumann.data.bluesky.synth import SynthConfig, generate, write_synth

    d = tmp_path_factory.mktemp("counts") / "c"
    write_synth(generate(SynthConfig(users=300, days=2, seed=0)), d)
    return d


def _damage(src: Path, dst: Path, name: str, fn) -> Path:
    shutil.copytree(src, dst)
    fn(dst / name)
    return dst


DAMAGE = {
    "counts_json_truncated": ("counts.json", lambda p: p.write_bytes(p.read_bytes()[:25]), IngestError,
                              "counts.json"),
    "counts_json_binary": ("counts.json", lambda p: p.write_bytes(b"\xff\xfe\x00"), IngestError, "counts.json"),
    "counts_json_array": ("counts.json", lambda p: p.write_text("[1, 2]"), IngestError, "counts.json"),
    "counts_json_no_topics": ("counts.json", lambda p: p.write_text(json.dumps({"days": ["2026-04-07"]})),
                              IngestError, "topics"),
    "counts_json_topic_escape": ("counts.json", lambda p: p.write_text(json.dumps(
        {**json.loads(p.read_text()), "topics": [*json.loads(p.read_text())["topics"], "../../x"]})),
        UnsafeNameError, "../../x"),
    "users_parquet_truncated": ("users.parquet", lambda p: p.write_bytes(p.read_bytes()[:100]), IngestError,
                                "users.parquet"),
    "daily_parquet_missing": ("daily.parquet", lambda p: p.unlink(), IngestError, "daily.parquet"),
    # a null count in a nullable integer column passed the dtype check and ended in pandas' ValueError traceback
    "users_followers_null": ("users.parquet", lambda p: pd.read_parquet(p).assign(
        followers=lambda u: pd.array([None, *u["followers"][1:]], dtype="Int64")).to_parquet(p, index=False),
        IngestError, "users['followers'] holds 1 missing value(s)"),
    "daily_posts_null": ("daily.parquet", lambda p: pd.read_parquet(p).assign(
        posts=lambda d: pd.array([*d["posts"][:-1], None], dtype="Int64")).to_parquet(p, index=False),
        IngestError, "daily['posts'] holds 1 missing value(s)"),
    "follows_parquet_random": ("follows.parquet", lambda p: p.write_bytes(np.random.default_rng(3).bytes(200)),
                               IngestError,
                               "follows.parquet"),
}


@pytest.mark.parametrize("case", sorted(DAMAGE), ids=str)
def test_damaged_raw_counts_are_typed_errors_naming_the_file(counts_dir, tmp_path, case):
    name, fn, error, needle = DAMAGE[case]
    d = _damage(counts_dir, tmp_path / "c", name, fn)
    with pytest.raises(error) as info:
        RawCounts.load(d)
    assert needle in str(info.value)


def test_undecodable_profile_csv_is_a_typed_error(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_bytes(b"\n".join(events(4)) + b"\n")
    prof = tmp_path / "profiles.csv"
    prof.write_bytes(b"did,followers_count\n" + A.encode() + b",\xff\xfe\n")
    with pytest.raises(IngestError, match=r"profiles\.csv"):
        ingest([f], profiles=prof, filters=OPEN, options=IngestOptions(threads=1))
    prof.write_bytes(b"\x00\xff\xfe garbage \x81")
    with pytest.raises(IngestError, match=r"profiles\.csv"):
        ingest([f], profiles=prof, filters=OPEN, options=IngestOptions(threads=1))


@pytest.mark.parametrize("bad_row", [b"did:plc:cccc,6,carol\xff.example\n",  # not UTF-8 (read at DESCRIBE)
                                     b"did:plc:cccc,6,carol.example,x,y\n"])  # columns beyond the sniffed rows
def test_a_profile_csv_error_names_no_users_row(tmp_path, bad_row):
    """DuckDB quotes a row in its CSV errors ('Original Line: did:plc:...,alice.example'), and the IngestError
    passed it on: a real user's DID and handle on stderr and in logs. The error now keeps DuckDB's problem and
    line number only."""
    f = tmp_path / "d.jsonl"
    f.write_bytes(b"\n".join(events(4)) + b"\n")
    prof = tmp_path / "profiles.csv"
    rows = b"".join(b"did:plc:u%d,5,user%d.example\n" % (i, i) for i in range(25_000 if b"x,y" in bad_row else 1))
    prof.write_bytes(b"did,followers_count,handle\n" + rows + bad_row)
    with pytest.raises(IngestError, match=r"profiles\.csv.*CSV Error on Line") as info:
        ingest([f], profiles=prof, filters=OPEN, options=IngestOptions(threads=1))
    assert "did:plc:" not in str(info.value) and ".example" not in str(info.value), str(info.value)


@pytest.mark.parametrize("rows", [
    "did:plc:aaaa,10,2024-01-01,alice\ndid:plc:bbbb,5\ndid:plc:cccc,7,2024-02-01,carol\n",  # a short row
    "did:plc:aaaa,10,2024-01-01,alice\ndid:plc:bbbb,5,2024-01-01,bob,x\ndid:plc:cccc,7,2024-02-01,carol\n",  # long
    "did:plc:aaaa,10,2024-01-01,alice\ndid:plc:cccc,7,2024-02-01,carol\ndid:plc:bbbb,5,,\ndid:plc:dddd\n",
])
def test_a_profile_row_with_too_few_fields_is_an_invalid_row_and_the_header_is_read(tmp_path, rows):
    """One row shorter than the header made DuckDB's sniffer read the header as a single column, and the snapshot
    was refused as lacking its columns: "lacks columns ['did', 'followers_count']; it has
    ['did,followers_count,created_at,handle']". The row is now counted as invalid (its fields may be shifted)."""
    import duckdb

    from aumann.data.bluesky.ingest_report import IngestReport
    from aumann.data.bluesky.profiles import load_profiles

    prof = tmp_path / "profiles.csv"
    prof.write_text("did,followers_count,created_at,handle\n" + rows)
    con, report = duckdb.connect(), IngestReport()
    load_profiles(con, prof, report)
    n = rows.count("\n")
    empty = ",," in rows  # an empty created_at and handle is a full row
    assert report.profiles == {"rows": n, "invalid_rows": 1, "duplicate_dids": 0, "unparseable_created_at": 0}
    got = con.execute("SELECT did, followers_count, handle FROM prof ORDER BY did").fetchall()
    assert got == [("did:plc:aaaa", 10, "alice")] + ([("did:plc:bbbb", 5, None)] if empty else []) + [
        ("did:plc:cccc", 7, "carol")]


def test_a_short_profile_row_past_the_sniffed_rows_is_an_invalid_row_not_an_error(tmp_path):
    """Past the rows DuckDB sniffs, a short row ended the build in a CSV error; it is now an invalid row."""
    f = tmp_path / "d.jsonl"
    f.write_bytes(b"\n".join(events(4)) + b"\n")
    prof = tmp_path / "profiles.csv"
    prof.write_bytes(b"did,followers_count,handle\n" + b"".join(b"did:plc:u%d,5,user%d.example\n" % (i, i)
                                                                for i in range(25_000)) + b"did:plc:cccc,6\n")
    _, report = ingest([f], profiles=prof, filters=OPEN, options=IngestOptions(threads=1))
    assert report.profiles == {"rows": 25_001, "invalid_rows": 1, "duplicate_dids": 0, "unparseable_created_at": 0}


@pytest.mark.parametrize(("did", "count", "valid"), [
    ("did:plc:aaaa", "7", True), ("did:web:example.com", " 7 ", True), ("did:plc:aaaa", "1000000000000", True),
    ("did:plc:aaaa", "10.7", False), ("did:plc:aaaa", "7.0", False), ("did:plc:aaaa", "1e3", False),  # not whole
    ("did:plc:aaaa", "1000000000001", False), ("did:plc:aaaa", "99999999999999999999", False),  # > 10¹²
    ("did:plc:aaaa", "-1", False), ("did:plc:aaaa", "0x10", False), ("did:plc:aaaa", "", False),
    ("did:", "7", False), ("did:plc:", "7", False), ("did::x", "7", False), ("plc:aaaa", "7", False)])
def test_a_profile_row_is_valid_only_with_a_did_and_a_whole_count(tmp_path, did, count, valid):
    """A fractional count was rounded (10.7 → 11) and a count above 10¹² passed the snapshot only to fail later as a
    damaged counts table; a DID of just ``did:`` was valid. Each is now an invalid row, skipped and counted."""
    import duckdb

    from aumann.data.bluesky.ingest_report import IngestReport
    from aumann.data.bluesky.profiles import load_profiles

    prof = tmp_path / "profiles.csv"
    prof.write_text(f'did,followers_count\n{did},"{count}"\n')
    con, report = duckdb.connect(), IngestReport()
    load_profiles(con, prof, report)
    assert report.profiles == {"rows": 1, "invalid_rows": 0 if valid else 1, "duplicate_dids": 0,
                               "unparseable_created_at": 0}
    got = con.execute("SELECT did, followers_count FROM prof").fetchall()
    assert got == ([(did, int(count))] if valid else [])


@pytest.mark.parametrize("created", ["2999-01-01T00:00:00Z", "0001-01-01", "infinity", "1500-06-01"])
def test_a_created_at_outside_the_timestamp_range_is_unknown_not_a_crash(tmp_path, created):
    """``created_at`` 2999-01-01 (or year 1, or ``infinity``) parsed in DuckDB but ended the build in pandas'
    OutOfBoundsDatetime traceback; it is now an unknown age, counted in ``unparseable_created_at``."""
    f = tmp_path / "day.jsonl"
    f.write_bytes(event(0) + b"\n")
    prof = tmp_path / "profiles.csv"
    prof.write_text(f"did,followers_count,created_at\n{A},5,{created}\n{B},3,2020-01-01T00:00:00Z\n")
    counts, report = ingest([f], profiles=prof, filters=FilterConfig(bot_handle_patterns=[]),
                            options=IngestOptions(threads=1))
    assert report.profiles == {"rows": 2, "invalid_rows": 0, "duplicate_dids": 0, "unparseable_created_at": 1}
    assert counts.users["followers"].tolist() == [5] and counts.users["created_at"].isna().tolist() == [True]


# ------------------------------------------------------------------------- found by probing beyond the issue
@pytest.mark.parametrize("name, head", [("gz", b"\x1f\x8b\x08\x00"), ("bzip2", b"BZh91AY&SY"),
                                        ("xz", b"\xfd7zXZ\x00\x00"), ("zip", b"PK\x03\x04\x14\x00")])
def test_other_compressed_formats_are_refused_naming_the_format(tmp_path, name, head):
    f = tmp_path / f"capture.jsonl.{name}"
    f.write_bytes(head + np.random.default_rng(3).bytes(500))
    with pytest.raises(IngestError, match=rf"capture\.jsonl\.{name}") as info:
        _ingest([f])
    assert {"gz": "gzip"}.get(name, name) in str(info.value) and "Nothing was ingested" in str(info.value)


def test_the_same_file_given_twice_is_refused(tmp_path):
    good = tmp_path / "day.jsonl"
    good.write_bytes(b"\n".join(events(6)) + b"\n")
    with pytest.raises(IngestError, match=r"day\.jsonl.*twice"):
        _ingest([good, good])
    link = tmp_path / "alias.jsonl"
    link.symlink_to(good)
    with pytest.raises(IngestError, match=r"alias\.jsonl.*twice.*day\.jsonl"):
        _ingest([good, link])  # the same file under another name: its events would be counted twice


@pytest.mark.parametrize("text, needle", [
    (b"min_account_age_days = 3\n[filters]\n", "min_account_age_days"),  # meant inside [filters]
    (b"[filter]\nmin_account_age_days = 3\n", "filter"),  # a misspelt table would be ignored
    (b"", "no [filters]"),
    (b"filters = 3\n", "must be a table"),
])
def test_a_filters_file_never_ignores_what_it_holds(tmp_path, text, needle):
    from aumann.data.bluesky.filters import load_filters
    from aumann.errors import ConfigError

    f = tmp_path / "filters.toml"
    f.write_bytes(text)
    with pytest.raises(ConfigError, match=r"filters\.toml") as info:
        load_filters(f)
    assert needle in str(info.value)


def test_a_small_file_whose_only_complete_line_is_garbage_is_still_jsonl(tmp_path):
    # found by the property test: "\x00\n{event}" without a final newline was refused as binary (events lost)
    f = tmp_path / "day.jsonl"
    f.write_bytes(b"\x00\n" + event(0))
    _, report = _ingest([f])
    _identity(report)
    d = report.to_dict()
    assert (d["valid_events"], d["malformed_lines"], d["lines_read"]) == (1, 1, 2)
