"""Fuzz the Jetstream readers: JSONL capture lines through ingestion (every line accounted for, no valid event
lost), the live-capture writer (a message is filed by its day or counted as unparsed), and the profile CSV."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from hypothesis import strategies as st

from aumann.data.bluesky.capture import DailyWriter
from aumann.data.bluesky.ingest_report import IngestReport
from aumann.data.bluesky.profiles import load_profiles
from aumann.errors import IngestError
from tests.data.bluesky.test_bad_inputs_ingest import _identity, _ingest, event
from tests.fuzz.harness import fuzz_target, scratch_dir, typed_or_result

values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(),
                                st.text(max_size=10)),
                      lambda inner: st.one_of(st.lists(inner, max_size=3),
                                              st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=12)


def _mutated(i: int, key: str, value: object) -> bytes:
    obj = json.loads(event(i))
    target = obj["commit"] if key.startswith("commit.") else obj
    target[key.removeprefix("commit.")] = value
    return json.dumps(obj).encode()


line = st.one_of(
    st.integers(0, 10**6).map(event),
    st.builds(_mutated, st.integers(0, 10**6), st.sampled_from(["did", "time_us", "kind", "commit", "commit.record",
                                                               "commit.collection", "commit.operation", "commit.rev"]),
              values),
    st.builds(lambda n: b'{"did":"did:plc:x","time_us":1,"kind":"commit","commit":' + b"[" * n + b"]" * n + b"}",
              st.integers(0, 5000)),
    st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"")),
    st.sampled_from([b"", b"\xef\xbb\xbf", b"{\"time_us\":1e400}", b"{\"time_us\":9223372036854775808}",
                     b"[" * 10000, b"\x00" * 10]),
)


@fuzz_target(examples=15, seconds=120, lines=st.lists(line, min_size=1, max_size=30))
def test_fuzz_jsonl_ingestion(lines):
    with scratch_dir() as d:
        path = Path(d) / "day.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        result, err = typed_or_result(_ingest, [path])
        if err is None:
            _, report = result
            _identity(report)  # lines_read = valid + malformed + blank, per file too
        else:
            assert isinstance(err, IngestError)


message = st.one_of(line, st.builds(lambda t: json.dumps({"time_us": t}).encode(),
                                    st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=5))))


@fuzz_target(examples=25, messages=st.lists(message, min_size=1, max_size=20), as_text=st.booleans())
def test_fuzz_capture_writer(messages, as_text):
    with scratch_dir() as d:
        files = DailyWriter(d)
        try:
            for m in messages:
                files.write(m.decode("utf-8", "replace") if as_text else m)
        finally:
            files.close()
        written = sum(sum(1 for _ in p.open("rb")) for p in Path(d).glob("*.jsonl"))
        assert written == files.stats.messages == len(messages)


csv_cell = st.one_of(st.text(max_size=12), st.sampled_from(["did:plc:a", "did:plc:b", "-1", "1e400", "9" * 20,
                                                            "2026-01-01", "x,y", '"', "\r", "NaN", ""]))


@fuzz_target(examples=20, header=st.lists(st.sampled_from(["did", "followers_count", "created_at", "handle", "x"]),
                                          min_size=1, max_size=5),
             rows=st.lists(st.lists(csv_cell, min_size=1, max_size=5), max_size=8), raw=st.binary(max_size=40))
def test_fuzz_profile_csv(header, rows, raw):
    with scratch_dir() as d:
        path = Path(d) / "profiles.csv"
        text = ",".join(header) + "\n" + "\n".join(",".join(r) for r in rows) + "\n"
        path.write_bytes(text.encode("utf-8", "surrogatepass") + raw)
        report = IngestReport()
        con = duckdb.connect()
        try:
            _, err = typed_or_result(load_profiles, con, path, report)
        finally:
            con.close()
        if err is None:
            p = report.profiles
            assert p["rows"] >= p["invalid_rows"] + p["duplicate_dids"] >= 0
        else:
            assert isinstance(err, IngestError)
