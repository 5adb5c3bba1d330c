"""Trace readers against independent counts of the committed samples (written by each simulator's own code),
and their refusals: truncated SQLite, wrong schema, malformed line N, missing fields, skip counts."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from aumann.data.traces import detect_format, load_spec, read_trace
from aumann.errors import TraceError, TraceFormatError, TraceRecordError, TraceSchemaError, TraceSpecError

DATA = Path(__file__).parent / "traces"
OASIS = DATA / "oasis_twitter.db"
REDDIT = DATA / "oasis_reddit.db"
AS2 = DATA / "agentsociety2_run"
CONCORDIA = DATA / "concordia_log.json"
OTLP = DATA / "otlp_spans.jsonl"
CSV = DATA / "events.csv"


def cell(panel, step, agent, feature) -> float:
    t = list(panel.steps.tolist()).index(step)
    i = list(panel.agent_ids.tolist()).index(agent)
    return float(panel.values[t, i, panel.features.index(feature)])


# ---------------------------------------------------------------- detection
@pytest.mark.parametrize(("path", "fmt"), [(OASIS, "oasis"), (REDDIT, "oasis"), (AS2 / "trace", "otel"),
                                           (OTLP, "otel"), (CONCORDIA, "concordia"), (CSV, "table"),
                                           (AS2 / "replay", "table")])
def test_detect_format(path, fmt):
    assert detect_format(path) == fmt


def test_detect_refuses_unknown(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello\n")
    with pytest.raises(TraceFormatError, match="cannot tell the format"):
        detect_format(p)


# ---------------------------------------------------------------- OASIS
def test_oasis_default_spec_counts_match_sql():
    r = read_trace(OASIS)
    con = sqlite3.connect(OASIS)
    rows = con.execute("SELECT user_id, created_at, action, count(*) FROM trace GROUP BY 1, 2, 3").fetchall()
    assert rows
    for uid, t, action, n in rows:
        assert cell(r.panel, t, uid, action) == n
    total = con.execute("SELECT count(*) FROM trace").fetchone()[0]
    assert r.panel.values.sum() == total == r.report.records
    assert r.report.n_skipped == 0
    assert sorted(r.panel.features) == sorted(a for (a,) in con.execute("SELECT DISTINCT action FROM trace"))
    assert r.panel.steps.tolist() == list(range(6))


def test_oasis_alive_from_sign_up():
    """Agents 10 and 11 sign up at steps 2 and 3 (the sample's late joiners): absent before."""
    p = read_trace(OASIS).panel
    con = sqlite3.connect(OASIS)
    first = dict(con.execute("SELECT user_id, min(created_at) FROM trace GROUP BY 1").fetchall())
    assert first[10] == 2 and first[11] == 3
    for i, aid in enumerate(p.agent_ids.tolist()):
        assert p.alive[:, i].tolist() == [t >= first[aid] for t in range(p.T)]


def test_oasis_reddit_timestamps_need_a_bin():
    with pytest.raises(TraceRecordError, match=r"row 1: created_at holds .*--bin 1h"):
        read_trace(REDDIT)
    r = read_trace(REDDIT, bin="1h")
    assert r.panel.steps[0] == "2025-03-01T09:00:00Z" and r.panel.T == 6
    con = sqlite3.connect(REDDIT)
    n = con.execute("SELECT count(*) FROM trace WHERE action = 'create_post' AND user_id = 0").fetchone()[0]
    assert r.panel.values[:, list(r.panel.agent_ids).index(0), r.panel.features.index("create_post")].sum() == n


def test_oasis_truncated_database(tmp_path):
    bad = tmp_path / "trunc.db"
    data = OASIS.read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    with pytest.raises(TraceFormatError, match=r"trunc\.db"):
        read_trace(bad, format="oasis")


HOLD_EXCLUSIVE = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
c.execute("COMMIT")
"""


@pytest.mark.parametrize("released", [True, False])
def test_oasis_database_locked_by_a_writer_is_said_while_waiting_and_not_called_damaged(tmp_path, monkeypatch, capsys,
                                                                                        released):
    """An OASIS database another process holds locked (a simulation still writing it) was waited on for 5 s without a
    word, then refused as "cannot be read as SQLite: database is locked (a truncated or damaged file?)". One line on
    stderr now says what is waited on; a lock released in time reads the trace, one held past the wait is told as
    locked, with what to do."""
    import subprocess
    import sys
    import threading

    from aumann.data.traces import oasis

    db = shutil.copy(OASIS, tmp_path / "oasis.db")
    monkeypatch.setattr(oasis, "WAIT_NOTICE_SECONDS", 0.1, raising=False)  # (raising: the test fails on the behaviour)
    monkeypatch.setattr(oasis, "BUSY_SECONDS", 5.0 if released else 0.8, raising=False)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_EXCLUSIVE, str(db)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        if released:
            threading.Timer(0.6, holder.communicate, args=("",)).start()
        capsys.readouterr()
        if released:
            got = read_trace(db, format="oasis")
            assert got.panel.values.shape == read_trace(OASIS, format="oasis").panel.values.shape
        else:
            with pytest.raises(TraceFormatError, match=r"is locked by another process \(waited 0.8 s; an OASIS "
                                                       r"simulation still writing it\?\)") as info:
                read_trace(db, format="oasis")
            assert "damaged" not in str(info.value)
        err = capsys.readouterr().err
    finally:
        if holder.poll() is None:
            holder.communicate("")
    waits = [line for line in err.splitlines() if line.startswith("waiting for the OASIS database")]
    assert len(waits) == 1 and str(db) in waits[0] and "another process holds it locked" in waits[0], err


def test_oasis_not_sqlite(tmp_path):
    bad = tmp_path / "x.db"
    bad.write_bytes(b"not a database at all")
    with pytest.raises(TraceFormatError, match="not an SQLite database"):
        read_trace(bad, format="oasis")


def test_oasis_wrong_schema(tmp_path):
    db = tmp_path / "other.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE events (who INTEGER)")
    con.commit()
    with pytest.raises(TraceSchemaError, match=r"no table 'trace'.*\['events'\]"):
        read_trace(db, format="oasis")
    con.execute("CREATE TABLE trace (user_id INTEGER, action TEXT)")
    con.commit()
    with pytest.raises(TraceSchemaError, match=r"no column\(s\) \['created_at'\]"):
        read_trace(db, format="oasis")


def test_an_oasis_view_over_a_missing_table_is_a_format_error(tmp_path):
    """A trace table that is a view over a table that is gone raised sqlite3.OperationalError ('no such table')
    out of PRAGMA table_info, a traceback."""
    db = tmp_path / "v.db"
    shutil.copy(OASIS, db)
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE trace RENAME TO trace_old")
    con.execute("CREATE TABLE gone AS SELECT * FROM trace_old")
    con.execute("CREATE VIEW trace AS SELECT * FROM gone")
    con.execute("DROP TABLE gone")
    con.commit()
    con.close()
    with pytest.raises(TraceFormatError, match=r"v\.db': cannot read the columns of 'trace': no such table"):
        read_trace(db, format="oasis")


def test_oasis_missing_field_names_row_and_skip_counts(tmp_path):
    db = tmp_path / "holes.db"
    shutil.copy(OASIS, db)
    con = sqlite3.connect(db)
    con.execute("INSERT INTO trace VALUES (NULL, 3, 'like_post', '{}')")
    bad_row = con.execute("SELECT max(rowid) FROM trace").fetchone()[0]
    con.execute("INSERT INTO trace VALUES (4, NULL, 'like_post', '{\"x\": 1}')")
    con.commit()
    with pytest.raises(TraceRecordError, match=rf"holes\.db row {bad_row}: no usable agent id"):
        read_trace(db)
    r = read_trace(db, on_bad="skip")
    assert r.report.skipped == {"no usable agent id in field 'user_id'": 1, "no step value in field 'created_at'": 1}
    assert r.report.skipped_at["no usable agent id in field 'user_id'"] == [f"{db} row {bad_row}"]
    assert r.panel.values.sum() == read_trace(OASIS).panel.values.sum()


def test_oasis_info_fields_and_exposure():
    spec = load_spec({"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
                      "action": {"field": "action"},
                      "features": [{"kind": "count", "name": "posts", "actions": ["create_post"]},
                                   {"kind": "sum", "name": "liked_ids", "field": "info/post_id",
                                    "actions": ["like_post"]},
                                   {"kind": "exposure", "of": "posts",
                                    "edges": {"table": "follow", "since": "created_at"}}]})
    p = read_trace(OASIS, spec).panel
    con = sqlite3.connect(OASIS)
    likes = con.execute("SELECT user_id, created_at, info FROM trace WHERE action = 'like_post'").fetchall()
    want = Counter()
    for uid, t, info in likes:
        want[(uid, t)] += json.loads(info)["post_id"]
    for (uid, t), v in want.items():
        assert cell(p, t, uid, "liked_ids") == v
    # exposure: Σ over followees (edges since ≤ t) of their posts at t, from the follow table
    posts = p.values[:, :, p.features.index("posts")]
    exp = np.zeros_like(posts)
    pos = {a: i for i, a in enumerate(p.agent_ids.tolist())}
    for src, dst, since in con.execute("SELECT follower_id, followee_id, created_at FROM follow"):
        for t in range(p.T):
            if since <= t:
                exp[t, pos[src]] += posts[t, pos[dst]]
    assert exp.sum() > 0
    np.testing.assert_array_equal(p.values[:, :, p.features.index("exposure_posts")], exp)


def _edge_spec(edges: Path) -> dict:
    return {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "count", "name": "posts"},
                         {"kind": "exposure", "name": "exp", "of": "posts",
                          "edges": {"path": str(edges), "source": "src", "target": "dst"}}]}


def test_edge_endpoints_that_are_unicode_digits_or_dashes_are_ids_not_a_value_error(tmp_path):
    # '²'.isdigit() is True and int('²') raised a bare ValueError (a traceback from `aumann attribute`)
    events = tmp_path / "ev.csv"
    events.write_text("agent,tick\na1,0\n²,0\n--5,0\n7,0\n")
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n²,a1\n--5,a1\n7,²\n")
    p = read_trace(events, load_spec(_edge_spec(edges))).panel
    exp = dict(zip(p.agent_ids.tolist(), p.values[0, :, p.features.index("exp")].tolist()))
    assert exp == {"a1": 0.0, "²": 1.0, "--5": 1.0, "7": 1.0}
    assert p.meta["edges"]["exp"]["used"] == 3


def test_edge_file_endpoints_are_read_as_ids_whatever_their_type(tmp_path):
    events = tmp_path / "ev.csv"
    events.write_text("agent,tick\na1,0\nb,0\n7,0\n")
    # a CSV column of integers with an id that is text past DuckDB's sniffing sample: a raw ConversionException
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n" + "".join(f"{i},{i + 1}\n" for i in range(100, 30100)) + "b,a1\n7,a1\n")
    p = read_trace(events, load_spec(_edge_spec(edges))).panel
    exp = dict(zip(p.agent_ids.tolist(), p.values[0, :, p.features.index("exp")].tolist()))
    assert exp == {"a1": 0.0, "b": 1.0, "7": 1.0}
    # JSON lines whose endpoints are of two types: "b" was read as the JSON text '"b"' and dropped as unknown
    edges = tmp_path / "edges.jsonl"
    edges.write_text('{"src": "b", "dst": "a1"}\n{"src": 7, "dst": "a1"}\n')
    p = read_trace(events, load_spec(_edge_spec(edges))).panel
    assert dict(zip(p.agent_ids.tolist(), p.values[0, :, p.features.index("exp")].tolist())) == exp
    assert p.meta["edges"]["exp"] == {"edges": 2, "used": 2, "unknown_endpoint": 0, "skipped": 0, "duplicate": 0}


def test_json_edge_endpoints_beyond_two_to_the_64_reach_their_own_agents(tmp_path):
    """JSON endpoints beyond 2⁶⁴ were read as doubles: an edge from 2⁷⁰ + 1 became one from 2⁷⁰ (the same double),
    exposure credited to the wrong agent, silently."""
    big = 2**70
    events = tmp_path / "ev.jsonl"
    events.write_text("".join(json.dumps({"agent": a, "tick": 0}) + "\n" for a in (big, big + 1, 5, 5)))
    edges = tmp_path / "edges.jsonl"
    edges.write_text(json.dumps({"src": big + 1, "dst": 5}) + "\n")
    p = read_trace(events, load_spec(_edge_spec(edges))).panel
    exp = dict(zip(p.agent_ids.tolist(), p.values[0, :, p.features.index("exp")].tolist()))
    assert exp == {str(big): 0.0, str(big + 1): 2.0, "5": 0.0}


def test_an_edge_file_line_duckdb_cannot_cast_is_a_bad_row_named_by_its_line(tmp_path):
    """A since value below the rows DuckDB's sniffer reads that is no integer stopped the whole read
    (TraceFormatError "DuckDB stopped reading edge file"), --skip-bad or not; it is a bad row, as in an event table."""
    events = tmp_path / "ev.csv"
    events.write_text("agent,tick\na1,0\nb,0\n")
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst,since\n" + "".join(f"a1,b,{i}\n" for i in range(30000)) + "a1,b,soon\n")
    spec = _edge_spec(edges)
    spec["features"][1]["edges"]["since"] = "since"
    with pytest.raises(TraceRecordError, match=r"edges\.csv line 30002: a CSV value that does not read as its column"):
        read_trace(events, load_spec(spec))
    r = read_trace(events, load_spec(dict(spec, on_bad="skip")))
    assert r.report.edges_skipped == {"a CSV value that does not read as its column's detected type": 1}
    assert r.report.edges_skipped_at["a CSV value that does not read as its column's detected type"] == [
        f"{edges} line 30002"]
    assert r.panel.meta["edges"]["exp"]["used"] == 30000 and r.panel.meta["edges"]["exp"]["skipped"] == 1


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_file_names_with_glob_characters_are_read_as_themselves(tmp_path, kind):
    """DuckDB expands every file name it is given as a glob: 'ev[1].csv' read 'ev1.csv' instead (or was 'no table
    files' when given itself), and a folder holding 'a*.csv' beside 'ab.csv' read ab.csv twice, silently."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(f, agent, amount):
        rows = {"agent": [agent], "tick": [0], "action": ["buy"], "amount": [amount]}
        if kind == "parquet":
            pq.write_table(pa.table(rows), f)
        elif kind == "csv":
            f.write_text("agent,tick,action,amount\n" + f"{agent},0,buy,{amount}\n")
        else:
            f.write_text(json.dumps({k: v[0] for k, v in rows.items()}) + "\n")

    d = tmp_path / "t"
    d.mkdir()
    for name, agent, amount in [("a*", "star", 1), ("ab", "ab", 2), ("x[1]", "bracket", 3), ("x1", "one", 4),
                                ("q?", "question", 5)]:
        write(d / f"{name}.{kind}", agent, amount)
    p = read_trace(d, TABLE_SPEC).panel
    assert sorted(p.agent_ids.tolist()) == ["ab", "bracket", "one", "question", "star"]
    assert p.values[..., p.features.index("amount")].sum() == 1 + 2 + 3 + 4 + 5
    one = read_trace(d / f"x[1].{kind}", TABLE_SPEC)
    assert one.panel.agent_ids.tolist() == ["bracket"] and one.report.sources == [str(d / f"x[1].{kind}")]
    assert read_trace(str(d / f"x*.{kind}"), TABLE_SPEC).panel.agent_ids.tolist() == ["bracket", "one"]
    edges = d.parent / f"e[1].{kind}"  # an edge file named alike
    if kind == "csv":
        edges.write_text("follower_id,followee_id\nab,star\n")
    elif kind == "jsonl":
        edges.write_text(json.dumps({"follower_id": "ab", "followee_id": "star"}) + "\n")
    else:
        pq.write_table(pa.table({"follower_id": ["ab"], "followee_id": ["star"]}), edges)
    (d.parent / f"e1.{kind}").write_bytes(b"garbage")
    spec = {**TABLE_SPEC, "features": [*TABLE_SPEC["features"], {"kind": "exposure", "name": "seen", "of": "amount",
                                                                 "edges": {"path": str(edges)}}]}
    assert cell(read_trace(d, spec).panel, 0, "ab", "seen") == 1


def test_a_glob_takes_regular_files_only_and_a_fifo_or_device_is_refused_by_name(tmp_path):
    spec = load_spec({"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
                      "features": [{"kind": "count", "name": "n"}]})
    shutil.copy(DATA / "events.csv", tmp_path / "a.csv")
    (tmp_path / "sub.csv").mkdir()  # a folder the glob matches: IsADirectoryError out of the reader
    os.mkfifo(tmp_path / "pipe.csv")  # a FIFO it matches: the read hung on it
    want = read_trace(tmp_path / "a.csv", spec).panel
    got = read_trace(tmp_path / "*.csv", spec).panel
    np.testing.assert_array_equal(got.values, want.values)
    assert got.agent_ids.tolist() == want.agent_ids.tolist()
    for p in (tmp_path / "pipe.csv", Path("/dev/zero")):  # was "... is empty: no header, no rows"
        with pytest.raises(TraceFormatError, match="not a regular file or a directory"):
            read_trace(p, spec)
    with pytest.raises(TraceFormatError, match="not a regular file or a directory"):
        read_trace(Path("/dev/zero"), format="concordia")  # was "Concordia log '/dev/zero' does not exist"


# ---------------------------------------------------------------- OpenTelemetry (AgentSociety 2 + OTLP)
def _as2_spans():
    for f in sorted((AS2 / "trace").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            yield json.loads(line)


def test_agentsociety2_default_spec_counts_with_trace_inheritance():
    r = read_trace(AS2 / "trace")
    spans = list(_as2_spans())
    tick = {s["trace_id"]: s["attributes"]["agent.tick"] for s in spans if "agent.tick" in s["attributes"]}
    want = Counter((s["resource"]["agent.id"], tick[s["trace_id"]], s["name"]) for s in spans
                   if s["trace_id"] in tick)
    for (aid, t, name), n in want.items():
        assert cell(r.panel, t, aid, name) == n
    n_init = sum(s["name"] == "agent.init" for s in spans)
    assert n_init == 8 and r.report.n_skipped == n_init  # agent.init spans: no tick in their trace
    assert r.panel.values.sum() == sum(want.values())
    # agent 8 joins at tick 2 (the sample): absent before
    i8 = list(r.panel.agent_ids).index(8)
    assert r.panel.alive[:, i8].tolist() == [False, False, True, True, True]


def test_otel_single_file_equals_directory(tmp_path):
    one = tmp_path / "all.jsonl"
    one.write_text("".join(f.read_text() for f in sorted((AS2 / "trace").glob("*.jsonl"))))
    a, b = read_trace(AS2 / "trace").panel, read_trace(one, format="otel").panel
    assert a.equals(b) or np.array_equal(a.values, b.values)


def test_otel_malformed_line_n(tmp_path):
    d = tmp_path / "trace"
    shutil.copytree(AS2 / "trace", d)
    f = sorted(d.glob("*.jsonl"))[1]
    lines = f.read_text().splitlines()
    lines.insert(2, '{"resource": {"agent.id": 3}, "trace_id": "ab", "name": "x"')  # cut short
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceFormatError, match=rf"{f.name} line 3: not a JSON object"):
        read_trace(d)
    r = read_trace(d, on_bad="skip")
    assert r.report.skipped["line is not a JSON object"] == 1
    assert r.report.skipped_at["line is not a JSON object"] == [f"{f} line 3"]


def test_otel_an_overlong_line_is_skipped_and_counted_under_skip(tmp_path, monkeypatch):
    """A span line beyond the line cap (64 MiB) ended the read even with on_bad = 'skip', which skips every other
    malformed line: now it is refused with the hint, or skipped, read on to its end, and counted."""
    from aumann.data.traces import otel

    d = tmp_path / "trace"
    shutil.copytree(AS2 / "trace", d)
    f = sorted(d.glob("*.jsonl"))[1]
    lines = f.read_text().splitlines()
    cap = max(len(x) for x in lines) + 10
    lines.insert(2, json.dumps({"resource": {"agent.id": 3}, "name": "x", "pad": "p" * (5 * cap)}))
    f.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(otel, "MAX_LINE", cap)
    with pytest.raises(TraceFormatError, match=rf"{f.name} line 3: longer than .*on_bad = 'skip' skips and counts"):
        read_trace(d)
    r = read_trace(d, on_bad="skip")
    reason = next(k for k in r.report.skipped if k.startswith("line longer than"))
    assert r.report.skipped[reason] == 1 and r.report.skipped_at[reason] == [f"{f} line 3"]
    assert r.panel.values.sum() == read_trace(AS2 / "trace").panel.values.sum()  # the lines after it all read


def test_otel_missing_agent_field(tmp_path):
    f = tmp_path / "spans.jsonl"
    f.write_text(json.dumps({"resource": {}, "trace_id": "a1", "span_id": "1", "name": "agent.step",
                             "attributes": {"agent.tick": 0}}) + "\n")
    with pytest.raises(TraceRecordError, match=r"spans\.jsonl line 1: no usable agent id in field 'resource/agent.id'"):
        read_trace(f, format="otel")


def _spans(path: Path, agents: list) -> Path:
    path.write_text("".join(json.dumps({"resource": {"agent.id": a}, "trace_id": f"t{i}", "span_id": f"s{i}",
                                        "name": "agent.step", "attributes": {"agent.tick": i % 2}}) + "\n"
                            for i, a in enumerate(agents)))
    return path


def test_agent_ids_beyond_int64_are_kept_as_text_not_an_overflow_error(tmp_path):
    """An integer id beyond int64 (a span's 2⁷⁰, a Parquet uint64 column's 2⁶⁴ − 1) made the panel's id array
    raise a bare OverflowError; such ids are text, every digit kept, and distinct ids stay distinct."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = read_trace(_spans(tmp_path / "s.jsonl", [2**70, 2**70 + 1, 3, -(2**63) - 1]), format="otel").panel
    assert sorted(p.agent_ids.tolist()) == sorted(str(v) for v in [2**70, 2**70 + 1, 3, -(2**63) - 1])
    f = tmp_path / "u.parquet"
    pq.write_table(pa.table({"agent": pa.array([2**64 - 1, 2**63, 2**64 - 1], pa.uint64()), "tick": [0, 1, 1],
                             "action": ["a", "a", "b"], "amount": [1.0, 2.0, 3.0]}), f)
    p = read_trace(f, TABLE_SPEC).panel
    assert sorted(p.agent_ids.tolist()) == [str(2**64 - 1), str(2**63)]
    assert cell(p, 1, str(2**64 - 1), "amount") == 3.0
    assert read_trace(_spans(tmp_path / "small.jsonl", [2**63 - 1, 3]), format="otel").panel.agent_ids.dtype == np.int64


@pytest.mark.parametrize("kind", ["otel", "jsonl", "parquet"])
def test_an_agent_id_that_is_a_list_in_every_record_is_unusable_not_a_pandas_error(tmp_path, kind):
    """Lists of one length in every record of a batch (an OTel arrayValue agent.id, a JSON array, a Parquet list
    column) became a 2-D array, and pandas' factorize raised 'Buffer has wrong number of dimensions'."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if kind == "otel":
        f, spec = _spans(tmp_path / "s.jsonl", [[1, 2], [3, 4]]), None
        read = {"format": "otel"}
    else:
        rows = {"agent": [[1], [2]], "tick": [0, 1], "action": ["a", "b"], "amount": [1, 2]}
        f = tmp_path / f"t.{kind}"
        if kind == "parquet":
            pq.write_table(pa.table(rows), f)
        else:
            f.write_text("".join(json.dumps(dict(zip(rows, v))) + "\n" for v in zip(*rows.values())))
        spec, read = TABLE_SPEC, {}
    field = "resource/agent.id" if kind == "otel" else "agent"
    with pytest.raises(TraceRecordError, match=rf"{f.name} (line|row) 1: no usable agent id in field '{field}'"):
        read_trace(f, spec, **read)
    with pytest.raises(TraceError, match=r"no usable events \(2 record\(s\) read\).*skipped 2: no usable agent id"):
        read_trace(f, spec, on_bad="skip", **read)


def test_otlp_json_lines_with_a_spec(tmp_path):
    spec = tmp_path / "otlp.toml"
    spec.write_text('format = "otel"\n[agent]\nfield = "resource/agent.name"\n[step]\nfield = "attributes/sim.step"\n'
                    '[action]\nfield = "name"\n[[features]]\nkind = "count"\nname = "calls"\n'
                    '[[features]]\nkind = "sum"\nname = "tokens"\nfield = "attributes/gen_ai.usage.output_tokens"\n'
                    '[[features]]\nkind = "mean"\nname = "ms"\nfield = "duration_ns"\n')
    p = read_trace(OTLP, spec).panel
    assert set(p.agent_ids.tolist()) == {"alice", "bob", "carol"}
    assert cell(p, 0, "alice", "calls") == 3 and cell(p, 2, "bob", "calls") == 1
    assert cell(p, 1, "alice", "tokens") == 40 + 50 + 60
    assert cell(p, 1, "alice", "ms") == 250_000_000


@pytest.mark.parametrize(("bad", "why"), [
    ({"resourceSpans": {"a": 1}}, "resourceSpans is a JSON object, not an array"),
    ({"resourceSpans": [1]}, "a resourceSpans entry is a JSON number, not an object"),
    ({"resourceSpans": [{"resource": "x"}]}, "a resource is a JSON string, not an object"),
    ({"resourceSpans": [{"scopeSpans": "zz"}]}, "scopeSpans is a JSON string, not an array"),
    ({"resourceSpans": [{"scopeSpans": [{"spans": "notalist"}]}]}, "spans is a JSON string, not an array"),
    ({"resourceSpans": [{"scopeSpans": [{"spans": [1, {"name": "x"}]}]}]}, "a span is a JSON number, not an object"),
    ({"resourceSpans": [{"resource": {"attributes": [{"key": "agent.name", "value": {"arrayValue": "x"}}]}}]},
     "an arrayValue is a JSON string, not an object"),
    ({"name": "x", "context": "str"}, "context is a JSON string, not an object")])
def test_an_otlp_line_of_the_wrong_shape_is_a_bad_line(tmp_path, bad, why):
    """An OTLP (or SDK) line whose parts have the wrong JSON type raised AttributeError ('str' object has no
    attribute 'get') out of the reader; a span that was not an object, or spans that were not an array, were
    dropped without a count. Such a line is refused by its number, or skipped and counted."""
    spec = tmp_path / "otlp.toml"
    spec.write_text('format = "otel"\n[agent]\nfield = "resource/agent.name"\n[step]\nfield = "attributes/sim.step"\n'
                    '[[features]]\nkind = "count"\nname = "calls"\n')
    lines = OTLP.read_text().splitlines()
    f = tmp_path / "spans.jsonl"
    f.write_text("\n".join([*lines[:1], json.dumps(bad), *lines[1:]]) + "\n")
    with pytest.raises(TraceFormatError, match=rf"spans\.jsonl line 2: not an OpenTelemetry span line \({why}\)"):
        read_trace(f, spec)
    r = read_trace(f, spec, on_bad="skip")
    assert r.report.skipped == {"line is not an OpenTelemetry span line (a part of the wrong JSON type)": 1}
    assert r.report.skipped_at[next(iter(r.report.skipped))] == [f"{f} line 2"]
    np.testing.assert_array_equal(r.panel.values, read_trace(OTLP, spec).panel.values)



@pytest.mark.parametrize("empty", [
    {"resourceSpans": []},
    {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": []}]},
    {"resourceSpans": [{"scopeSpans": [{"scope": {"name": "s"}, "spans": []}, {"spans": []}]}]}],
    ids=["no-resource", "no-scope", "empty-spans"])
@pytest.mark.parametrize("on_bad", ["error", "skip"])
def test_an_otlp_envelope_holding_no_spans_is_counted_and_reported(tmp_path, empty, on_bad):
    """An OTLP line whose envelope holds no span was counted as a record read and then vanished: not in the skipped
    counts, not in the report, so ``records`` exceeded what the report accounted for. It is skipped and counted by
    its line, under either on_bad (no bad record: it holds nothing to read, and it was never refused)."""
    spec = tmp_path / "otlp.toml"
    spec.write_text('format = "otel"\n[agent]\nfield = "resource/agent.name"\n[step]\nfield = "attributes/sim.step"\n'
                    '[[features]]\nkind = "count"\nname = "calls"\n')
    lines = OTLP.read_text().splitlines()
    f = tmp_path / "spans.jsonl"
    f.write_text("\n".join([*lines[:1], json.dumps(empty), *lines[1:]]) + "\n")
    r = read_trace(f, spec, on_bad=on_bad)
    assert r.report.skipped == {"an OTLP envelope holding no spans": 1}
    assert r.report.skipped_at == {"an OTLP envelope holding no spans": [f"{f} line 2"]}
    assert r.report.records == len(lines) + 1
    assert any("skipped 1: an OTLP envelope holding no spans" in line for line in r.report.lines())
    np.testing.assert_array_equal(r.panel.values, read_trace(OTLP, spec).panel.values)


# ---------------------------------------------------------------- Concordia
def test_concordia_default_spec():
    r = read_trace(CONCORDIA)
    doc = json.loads(CONCORDIA.read_text())
    store = doc["content_store"]
    for e in doc["entries"]:
        if e["component_name"] != "entity_action":
            continue
        v = e["deduplicated_data"]["value"]["__act__"]["Value"]
        text = store[v["_ref"]] if isinstance(v, dict) else v
        assert cell(r.panel, e["step"], e["entity_name"], "acted") == 1
        assert cell(r.panel, e["step"], e["entity_name"], "action_chars") == len(text)
    assert r.report.filtered == {"component_name not in where": 5}  # the game master's entries
    assert r.panel.alive is None  # born = "start": every acting entity from the first step


def test_concordia_action_match_classifies_free_text():
    spec = load_spec({"format": "concordia", "where": {"component_name": ["entity_action"]},
                      "agent": {"field": "entity_name"}, "step": {"field": "step"},
                      "action": {"field": "deduplicated_data/value/__act__/Value",
                                 "match": {"contribute_all": "all 10 coins", "contribute": "contributes \\d",
                                           "keep": "keeps the coins"}},
                      "features": [{"kind": "count_each"}]})
    p = read_trace(CONCORDIA, spec).panel
    assert p.values[:, list(p.agent_ids).index("Alice"), p.features.index("contribute_all")].sum() == 5
    assert p.values[:, list(p.agent_ids).index("Bob"), p.features.index("contribute_all")].tolist() == [0, 0, 1, 1, 1]
    assert p.values.sum() == 20  # 4 entities × 5 steps, each classified once


def test_concordia_refs_need_match():
    spec = load_spec({"format": "concordia", "where": {"component_name": ["entity_action"]},
                      "agent": {"field": "entity_name"}, "step": {"field": "step"},
                      "action": {"field": "deduplicated_data/value/__act__/Value"}})
    with pytest.raises(TraceSpecError, match="match"):
        read_trace(CONCORDIA, spec)


def test_concordia_truncated_and_wrong_schema(tmp_path):
    cut = tmp_path / "cut.json"
    data = CONCORDIA.read_bytes()
    cut.write_bytes(data[: int(len(data) * 0.8)])
    with pytest.raises(TraceFormatError, match=r"cut\.json.*(ends early|truncated)"):
        read_trace(cut, format="concordia")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"steps": [1, 2]}))
    with pytest.raises(TraceSchemaError, match=r"no entries.*\['steps'\]"):
        read_trace(other, format="concordia")


@pytest.mark.parametrize("where", ["entry", "content_store", "after"])
def test_a_concordia_log_nested_deep_is_refused_by_its_place_not_killed_for_memory(tmp_path, where):
    """ijson keeps a path prefix per open level: its memory grows with the square of the depth. A 40 KB log
    nested 20,000 deep took 1 GB; 400 KB nested 200,000 deep was killed for memory (exit 137, no message)."""
    import time

    deep = "[" * 200_000 + "]" * 200_000
    doc = json.loads(CONCORDIA.read_text())
    text = json.dumps(doc)
    if where == "entry":
        text = text.replace('"entries": [', '"entries": [{"step": 0, "entity_name": "x", "deduplicated_data": '
                            + deep + "}, ", 1)
    elif where == "content_store":
        text = text.replace('"content_store": {', '"content_store": {"deep": ' + deep + ", ", 1)
    else:  # in a part the reader never builds, after the entries
        text = text[:-1] + ', "entity_memories_deep": ' + deep + "}"
    f = tmp_path / "deep.json"
    f.write_text(text)
    t0 = time.perf_counter()
    with pytest.raises(TraceFormatError, match=r"deep\.json: JSON nested more than 512 levels deep"):
        read_trace(f, format="concordia")  # the default spec measures texts: the content store is read too
    assert time.perf_counter() - t0 < 30


def test_concordia_brackets_and_escapes_inside_texts_are_not_nesting(tmp_path):
    """The nesting guard counts brackets outside strings only: texts full of brackets, escaped quotes and
    backslashes (split across the reader's chunks) read as before."""
    doc = json.loads(CONCORDIA.read_text())
    noise = '[{\\"' * 5000 + "\\" * 3 + '"[' * 700
    for e in doc["entries"]:
        e["summary"] = noise
    doc["content_store"]["zz"] = noise
    f = tmp_path / "noisy.json"
    f.write_text(json.dumps(doc))
    a, b = read_trace(f).panel, read_trace(CONCORDIA).panel
    np.testing.assert_array_equal(a.values, b.values)
    assert a.agent_ids.tolist() == b.agent_ids.tolist()


# ---------------------------------------------------------------- long tables (DuckDB)
TABLE_SPEC = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
              "action": {"field": "action"},
              "features": [{"kind": "count_each"}, {"kind": "sum", "name": "amount", "field": "amount"},
                           {"kind": "mean", "name": "mean_amount", "field": "amount"},
                           {"kind": "last", "name": "last_amount", "field": "amount"},
                           {"kind": "sum", "name": "total_amount", "field": "amount", "cumulative": True}]}


def test_csv_table_features_match_pandas():
    import pandas as pd

    p = read_trace(CSV, TABLE_SPEC).panel
    df = pd.read_csv(CSV)
    for (agent, tick), g in df.groupby(["agent", "tick"]):
        assert cell(p, tick, agent, "amount") == g.amount.sum()
        assert cell(p, tick, agent, "mean_amount") == pytest.approx(g.amount.mean())
        assert cell(p, tick, agent, "last_amount") == g.amount.iloc[-1]
        assert cell(p, tick, agent, "buy") == (g.action == "buy").sum()
        assert cell(p, tick, agent, "total_amount") == df[(df.agent == agent) & (df.tick <= tick)].amount.sum()


def test_agentsociety2_replay_table_glob_last_value():
    spec = {"format": "table", "agent": {"field": "agent_id"}, "step": {"field": "step"},
            "features": [{"kind": "last", "name": "followers", "field": "followers_count"},
                         {"kind": "last", "name": "posts", "field": "posts_count"}]}
    p = read_trace(AS2 / "replay" / "social_media_agent_state.*.jsonl", spec).panel
    rows = [json.loads(x) for f in (AS2 / "replay").glob("social_media_agent_state.*.jsonl")
            for x in f.read_text().splitlines()]
    for row in rows:
        assert cell(p, row["step"], row["agent_id"], "followers") == row["followers_count"]
    assert p.T == 5 and p.N == 8


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
@pytest.mark.parametrize(("tick", "why"), [
    ("9223372036854775807", "is out of range"), ("9007199254740993", "is out of range"),  # int64 max; 2⁵³ + 1
    ("-9007199254740993", "is out of range"), ("1e300", "is out of range"), ("2.5", "is not an integer step")])
def test_a_step_beyond_two_to_the_53_is_out_of_range_not_a_non_integer(tmp_path, kind, tick, why):
    """An integer step too large to count in float64 is named as out of range (it was called "not an integer
    step"); 2⁵³ + 1 in an integer column is judged on the integer, not on its float64 rounding to 2⁵³."""
    if kind == "csv":
        f = tmp_path / "ev.csv"
        f.write_text(f"agent,tick,action,amount\na,0,buy,1\nb,{tick},buy,2\n")
    else:
        f = tmp_path / "ev.jsonl"
        f.write_text('{"agent": "a", "tick": 0, "action": "buy", "amount": 1}\n'
                     f'{{"agent": "b", "tick": {tick}, "action": "buy", "amount": 2}}\n')
    where = "line 3" if kind == "csv" else "row 2"  # a CSV record is named by its line, the header line 1
    with pytest.raises(TraceRecordError, match=rf"ev\.{kind} {where}: step field 'tick' {why}"):
        read_trace(f, TABLE_SPEC)
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert list(r.report.skipped.values()) == [1] and why in next(iter(r.report.skipped))
    assert r.panel.N == 1


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_a_table_with_a_column_named_filename_is_read(tmp_path, kind):
    """DuckDB's file-name column was named ``filename``: a table with a column of that name (a log of file events)
    was refused whole ('Binder Error: Option filename adds column "filename"'), edge files alike; the column is
    the table's own, readable as any field."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {"filename": ["x.txt", "y.txt", "x.txt"], "tick": [0, 1, 1], "action": ["open", "open", "save"],
            "amount": [1, 2, 3]}
    f = tmp_path / f"t.{kind}"
    if kind == "parquet":
        pq.write_table(pa.table(rows), f)
    elif kind == "csv":
        f.write_text(",".join(rows) + "\n" + "".join(",".join(map(str, v)) + "\n" for v in zip(*rows.values())))
    else:
        f.write_text("".join(json.dumps(dict(zip(rows, v))) + "\n" for v in zip(*rows.values())))
    spec = {**TABLE_SPEC, "agent": {"field": "filename"}}
    p = read_trace(f, spec).panel
    assert p.agent_ids.tolist() == ["x.txt", "y.txt"]
    assert cell(p, 1, "x.txt", "save") == 1 and cell(p, 1, "y.txt", "amount") == 2
    edges = tmp_path / f"e.{kind}"
    erows = {"follower_id": ["x.txt"], "followee_id": ["y.txt"], "filename": ["z"]}
    if kind == "parquet":
        pq.write_table(pa.table(erows), edges)
    elif kind == "csv":
        edges.write_text("follower_id,followee_id,filename\nx.txt,y.txt,z\n")
    else:
        edges.write_text(json.dumps({k: v[0] for k, v in erows.items()}) + "\n")
    spec["features"] = [*spec["features"], {"kind": "exposure", "name": "seen", "of": "amount",
                                            "edges": {"path": str(edges)}}]
    p = read_trace(f, spec).panel
    assert cell(p, 1, "x.txt", "seen") == 2 and cell(p, 1, "y.txt", "seen") == 0


@pytest.mark.parametrize(("feature", "values", "step", "why"), [
    ({"kind": "sum"}, [1e308, 1e308], 0, "beyond float64's range"),
    ({"kind": "sum", "cumulative": True}, [1e308, 1e308], 1, "beyond float64's range"),
    ({"kind": "last", "dtype": "float32"}, [1.0, 1e39], 0, "beyond float32's range")])
def test_a_total_beyond_the_dtype_is_refused_by_its_place_not_as_nan_in_the_trace(tmp_path, feature, values, step,
                                                                                  why):
    """Finite values whose sum (or running total) overflows float64, or a value beyond float32 with
    dtype = 'float32', became inf in the panel: the read ended in 'NonFiniteError: panel has 1 NaN/inf value(s)',
    which the trace never held, after numpy's 'overflow encountered' warning."""
    import warnings

    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"agent": "a", "tick": i if feature.get("cumulative") else 0, "v": v}) + "\n"
                         for i, v in enumerate(values)))
    dtype = feature.pop("dtype", "float64")
    spec = {"format": "table", "dtype": dtype, "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{**feature, "name": "v", "field": "v"}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TraceError, match=rf"feature 'v' of agent 'a' at step {step} \(1 value\(s\) in all\) is "
                                             rf"{why}"):
            read_trace(f, spec)
    with pytest.raises(TraceError, match=r"agent #0 \(real_people: ids are not shown\)"):
        read_trace(f, {**spec, "real_people": True})


def test_table_bad_row_and_missing_column(tmp_path):
    f = tmp_path / "ev.csv"
    f.write_text("agent,tick,action,amount\na,0,buy,1\nb,zero,buy,2\nc,1,sell,3\n")
    with pytest.raises(TraceRecordError, match=r"ev\.csv line 3: step field 'tick' is not an integer step"):
        read_trace(f, TABLE_SPEC)
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert r.report.skipped == {"step field 'tick' is not an integer step": 1}
    assert r.panel.N == 2
    spec = dict(TABLE_SPEC, agent={"field": "who"})
    with pytest.raises(TraceSchemaError, match=r"no column\(s\) \['who'\]"):
        read_trace(f, spec)


_MIX_SPEC = {"format": "table", "where": {"kind": ["real"]}, "agent": {"field": "agent", "exclude": ["env"]},
             "step": {"field": "tick"}, "action": {"field": "action", "exclude": ["noise"]},
             "features": [{"kind": "count_each"}, {"kind": "sum", "name": "amount", "field": "amount"}]}
_MIX_ROWS = [{"agent": "a", "kind": "real", "tick": 0, "action": "buy", "amount": 1},
             {"agent": "env", "kind": "real", "tick": 0, "action": "buy", "amount": 1},
             {"agent": "b", "kind": "real", "tick": 1, "action": "noise", "amount": 2},
             {"agent": "b", "kind": "fake", "tick": 1, "action": "buy", "amount": 4}]


@pytest.mark.parametrize("odd", [{"agent": 5}, {"action": 7}, {"kind": 1}, {"amount": "3"}, {"tick": "1"},
                                 {"agent": {"id": "c"}}])
def test_one_value_of_another_json_type_changes_no_other_value(tmp_path, odd):
    """One record whose field holds another JSON type (a number among strings) makes DuckDB read the whole column
    as JSON text; every other record must still read as itself: ids, actions, where and exclude lists unchanged."""
    f = tmp_path / "ev.jsonl"
    extra = dict({"agent": "c", "kind": "real", "tick": 1, "action": "buy", "amount": 8}, **odd)
    f.write_text("".join(json.dumps(r) + "\n" for r in [*_MIX_ROWS, extra]))
    r = read_trace(f, _MIX_SPEC, on_bad="skip")
    same = tmp_path / "same.jsonl"  # the same records without the odd one
    same.write_text("".join(json.dumps(r) + "\n" for r in _MIX_ROWS))
    plain = read_trace(same, _MIX_SPEC)
    assert cell(r.panel, 0, "a", "buy") == cell(plain.panel, 0, "a", "buy") == 1
    assert "env" not in [str(a) for a in r.panel.agent_ids] and "b" in [str(a) for a in r.panel.agent_ids]
    assert r.report.filtered["agent excluded"] == 1
    feats = [f for f in r.panel.features if f != "amount"]
    assert "noise" not in feats and all('"' not in f for f in feats)
    if "kind" in odd:  # kind 1 is not "real": filtered like the fake one
        assert r.report.filtered["kind not in where"] == 2
    elif "agent" in odd and isinstance(odd["agent"], dict):  # an object is no agent id: skipped and counted
        assert r.report.skipped == {"no usable agent id in field 'agent'": 1}
    else:
        assert r.report.filtered["kind not in where"] == 1 and not r.report.skipped
        who = str(odd.get("agent", "c"))
        assert who in [str(a) for a in r.panel.agent_ids]
        if "amount" in odd:
            assert cell(r.panel, 1, "c", "amount") == 3
        if "action" in odd:
            assert "7" in feats


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_long_integer_ids_stay_distinct_and_readable_in_tables(tmp_path, kind):
    """Integer ids too long for DuckDB's integers: a JSON number beyond 2⁶⁴ was read as a double (2⁷⁰ and 2⁷⁰ + 1
    became one agent, labelled 1.18e+21, and 3 became '3.0'); a CSV column with a 40-digit id was BIGNUM, which
    Arrow hands over as bytes (every id of the column, 3 included, became b'\\x80...'). A 40-digit step is out of
    range, a 40-digit value a number."""
    big = [2**70, 2**70 + 1] if kind == "jsonl" else [10**39 + 7, 10**39 + 8]
    rows = [(big[0], 0, "buy", 1), (big[1], 0, "buy", 2), (3, 1, "buy", 4)]
    f = tmp_path / f"t.{kind}"
    if kind == "csv":
        f.write_text("agent,tick,action,amount\n" + "".join(f"{a},{t},{x},{v}\n" for a, t, x, v in rows)
                     + f"5,2,buy,{10**39}\n")
    else:
        f.write_text("".join(json.dumps({"agent": a, "tick": t, "action": x, "amount": v}) + "\n"
                             for a, t, x, v in rows) + json.dumps({"agent": 5, "tick": 2, "action": "buy",
                                                                   "amount": 10**39}) + "\n")
    p = read_trace(f, TABLE_SPEC).panel
    assert sorted(p.agent_ids.tolist()) == sorted([str(big[0]), str(big[1]), "3", "5"])
    assert cell(p, 0, str(big[0]), "amount") == 1 and cell(p, 0, str(big[1]), "amount") == 2
    assert cell(p, 1, "3", "amount") == 4 and cell(p, 2, "5", "amount") == 1e39
    if kind == "csv":
        f.write_text("agent,tick,action,amount\n" + f"a,{10**39},buy,1\n")
        with pytest.raises(TraceRecordError, match=r"t\.csv line 2: step field 'tick' is out of range"):
            read_trace(f, TABLE_SPEC)


@pytest.mark.parametrize("batch_size", [1, 3, 4, 65536])
def test_an_agent_id_written_as_a_number_and_as_text_is_one_agent(tmp_path, batch_size):
    """1 in some records and "1" in others (a JSON writer that sometimes quotes, an OTel intValue beside a
    stringValue) were two agents with one label '1', and the panel refused it: 'DuplicateIdError: agent_ids must
    be unique; repeated: ['1']' after the whole read. They are one agent: counts and sums add up, last takes the
    later event in log order (across batches too), and the report says how many ids were merged."""
    rows = [(1, 0, "buy", 1), ("1", 0, "buy", 9), (2, 0, "sell", 4), ("1", 1, "buy", 3), (1, 1, "buy", 5),
            ("2", 2, "sell", 6), (3, 2, "buy", 2)]
    spec = {**TABLE_SPEC, "batch_size": batch_size}

    def read(name, rs):
        f = tmp_path / name
        f.write_text("".join(json.dumps({"agent": a, "tick": t, "action": x, "amount": v}) + "\n"
                             for a, t, x, v in rs))
        return read_trace(f, spec)

    r = read("mixed.jsonl", rows)
    plain = read("plain.jsonl", [(int(a), t, x, v) for a, t, x, v in rows])
    assert r.panel.agent_ids.tolist() == plain.panel.agent_ids.tolist() == [1, 2, 3]
    np.testing.assert_array_equal(r.panel.values, plain.panel.values)
    np.testing.assert_array_equal(r.panel.alive, plain.panel.alive)
    assert cell(r.panel, 0, 1, "last_amount") == 9 and cell(r.panel, 1, 1, "last_amount") == 5
    assert cell(r.panel, 0, 1, "amount") == 10 and cell(r.panel, 0, 1, "mean_amount") == 5
    assert r.report.merged_ids == 2 and plain.report.merged_ids == 0
    assert any("written both as a number and as text" in line for line in r.report.lines())
    # the later event wins even when it comes in a smaller batch after a larger one
    tail = read("tail.jsonl", [(2, 0, "sell", 1)] * 3 + [("1", 0, "buy", 9), (1, 0, "buy", 1)])
    assert cell(tail.panel, 0, 1, "last_amount") == 1
    text = read("text.jsonl", [(a, t, x, v) for a, t, x, v in rows] + [("c", 3, "buy", 1)])  # with a name: text
    assert text.panel.agent_ids.tolist() == ["1", "2", "3", "c"]
    # ids that are one label only because numpy's text drops a trailing NUL are not merged, nor a repeated label
    with pytest.raises(TraceError, match=r"agent ids 'a' and 'a\\x00' in field 'agent' would be one label 'a'"):
        read("nul.jsonl", [("a", 0, "buy", 1), ("a\0", 0, "buy", 2)])


@pytest.mark.parametrize("fmt", ["jsonl", "spans"])
def test_ids_and_actions_that_differ_after_a_nul_character_stay_apart(tmp_path, fmt):
    """pandas 2.x and 3.0.x factorize an array of text as C strings, which end at the first NUL: the agents 'a\\0b'
    and 'a\\0c' were one agent (their events added up, the other id gone without a word), and the actions
    'buy\\0x' and 'buy\\0y' one count_each column."""
    rows = [("a\0b", 0, "buy\0x"), ("a\0c", 0, "buy\0y"), ("a\0c", 1, "buy\0y"), ("d", 1, "buy\0x")]
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "action": {"field": "action"},
            "features": [{"kind": "count", "name": "n"}, {"kind": "count_each", "prefix": "did_"}]}
    if fmt == "jsonl":
        f = tmp_path / "nul.jsonl"
        f.write_text("".join(json.dumps({"agent": a, "tick": t, "action": x}) + "\n" for a, t, x in rows))
    else:
        f = tmp_path / "nul_spans.jsonl"
        f.write_text("".join(json.dumps({"trace_id": f"t{i}", "span_id": f"s{i}", "name": "act",
                                         "attributes": {"agent": a, "tick": t, "action": x}}) + "\n"
                             for i, (a, t, x) in enumerate(rows)))
        spec = dict(spec, format="otel", agent={"field": "attributes/agent"}, step={"field": "attributes/tick"},
                    action={"field": "attributes/action"})
    p = read_trace(f, spec).panel
    assert p.agent_ids.tolist() == ["a\0b", "a\0c", "d"]
    assert p.values[:, :, p.features.index("n")].tolist() == [[1, 1, 0], [0, 1, 1]]
    did = sorted(name for name in p.features if name.startswith("did"))
    assert len(did) == 2, p.features
    assert sum(p.values[:, :, p.features.index(name)].sum() for name in did) == 4


@pytest.mark.parametrize(("tail", "where"), [('{"agent":"a1","tick":1,"act', "row 61"), ("[1,2,3]\n", "row 61"),
                                             ("7\n", "row 61"), ("garbage{\n", "row 61")])
def test_a_bad_json_line_in_a_table_is_refused_by_its_row_or_skipped_and_counted(tmp_path, tail, where):
    rows = [{"agent": f"a{i % 7}", "tick": i % 5, "action": "buy" if i % 3 else "sell", "amount": i % 17}
            for i in range(60)]
    f = tmp_path / "ev.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    with pytest.raises(TraceRecordError, match=rf"ev\.jsonl {where}: not a JSON object holding any of the spec's"):
        read_trace(f, TABLE_SPEC)
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert r.report.n_skipped == 1 and r.report.records == 61
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in rows))
    np.testing.assert_array_equal(r.panel.values, read_trace(good, TABLE_SPEC).panel.values)


@pytest.mark.parametrize("where", ["other field", "agent field", "after a line that is not an object"])
def test_a_json_line_nested_beyond_duckdb_is_one_bad_record_not_the_end_of_the_table(tmp_path, where):
    """One line nested deeper than DuckDB's 128 levels failed the whole table ('DuckDB cannot read ...: JSON exceeds
    maximum recursion depth of 128'), --skip-bad or not, naming no line. A deep field the spec does not read is
    read past; a deep value in a field it reads is an unusable value of its row."""
    deep = "[" * 100_000 + "]" * 100_000
    rows = [json.dumps({"agent": f"a{i % 3}", "tick": i % 4, "action": "buy", "amount": i}) for i in range(30)]
    if where == "other field":
        rows.insert(5, '{"agent": "a1", "tick": 1, "action": "buy", "amount": 2, "blob": ' + deep + "}")
    else:
        rows.insert(5, '{"agent": ' + deep + ', "tick": 1, "action": "buy", "amount": 2}')
        if where.startswith("after"):
            rows.insert(0, "[1, 2]")
    f = tmp_path / "deep.jsonl"
    f.write_text("\n".join(rows) + "\n")
    if where == "other field":
        r = read_trace(f, TABLE_SPEC)
        assert r.report.records == 31 and r.report.n_skipped == 0 and cell(r.panel, 1, "a1", "amount") > 2
        return
    row = 7 if where.startswith("after") else 6
    first = "row 1: not a JSON object" if where.startswith("after") else f"row {row}: no usable agent id"
    with pytest.raises(TraceRecordError, match=rf"deep\.jsonl {first}"):
        read_trace(f, TABLE_SPEC)
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert r.report.skipped["no usable agent id in field 'agent'"] == 1
    assert r.report.skipped_at["no usable agent id in field 'agent'"] == [f"{f} row {row}"]


def test_a_json_line_that_is_not_an_object_keeps_nested_fields_readable(tmp_path):
    """With one non-object line DuckDB reads each line as one JSON value; the reader then reads the spec's fields
    by name, nested ones too."""
    f = tmp_path / "ev.jsonl"
    rows = [{"who": {"id": f"a{i % 3}"}, "tick": i % 4, "n": i} for i in range(20)]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows) + "[1, 2]\n")
    spec = {"format": "table", "agent": {"field": "who/id"}, "step": {"field": "tick"},
            "features": [{"kind": "sum", "name": "n", "field": "n"}]}
    r = read_trace(f, spec, on_bad="skip")
    assert r.report.n_skipped == 1
    for row in rows:
        assert cell(r.panel, row["tick"], row["who"]["id"], "n") == sum(
            x["n"] for x in rows if x["tick"] == row["tick"] and x["who"]["id"] == row["who"]["id"])


def test_a_json_table_with_a_byte_order_mark_reads_like_one_without(tmp_path):
    rows = "".join(json.dumps({"agent": f"a{i % 3}", "tick": i % 4, "action": "buy", "amount": i}) + "\n"
                   for i in range(30))
    plain, bom = tmp_path / "plain.jsonl", tmp_path / "bom.jsonl"
    plain.write_text(rows)
    bom.write_bytes(b"\xef\xbb\xbf" + rows.encode())
    a, b = read_trace(plain, TABLE_SPEC), read_trace(bom, TABLE_SPEC)
    np.testing.assert_array_equal(a.panel.values, b.panel.values)
    assert b.report.n_skipped == 0 and b.report.records == 30


@pytest.mark.parametrize("kind", ["gzipped table", "span file", "gzipped span file", "concordia", "span folder"])
def test_every_text_trace_with_a_byte_order_mark_reads_like_one_without(tmp_path, kind):
    """A leading UTF-8 byte-order mark (Windows tools write one) made line 1 of a span file bad JSON and the file
    undetectable ('format table has no default spec'), a Concordia log 'malformed in content_store (a truncated
    log?)' and undetectable, and row 1 of a gzipped JSON lines table 'not a JSON object'."""
    import gzip

    if kind == "gzipped table":
        rows = "".join(json.dumps({"agent": f"a{i % 3}", "tick": i % 4, "action": "buy", "amount": i}) + "\n"
                       for i in range(30))
        src, spec = rows.encode(), TABLE_SPEC
        name = "t.jsonl.gz"
    elif kind == "concordia":
        src, spec, name = CONCORDIA.read_bytes(), None, "log.json"
    else:
        src = "".join(f.read_text() for f in sorted((AS2 / "trace").glob("*.jsonl"))).encode()
        spec, name = None, "spans.jsonl.gz" if kind == "gzipped span file" else "spans.jsonl"
    for sub, data in (("plain", src), ("bom", b"\xef\xbb\xbf" + src)):
        d = tmp_path / sub
        d.mkdir()
        f = d / name
        f.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
        if kind == "span folder":  # a shard of a run directory
            (d / "trace_00.jsonl").write_bytes(f.read_bytes())
            f.unlink()
    path = (lambda sub: tmp_path / sub) if kind == "span folder" else (lambda sub: tmp_path / sub / name)
    a, b = read_trace(path("plain"), spec), read_trace(path("bom"), spec)
    assert a.report.format == b.report.format == {"gzipped table": "table", "concordia": "concordia"}.get(kind, "otel")
    np.testing.assert_array_equal(a.panel.values, b.panel.values)
    assert b.report.n_skipped == a.report.n_skipped and b.report.records == a.report.records


@pytest.mark.parametrize(("bad", "why"), [("a1,1,buy,3,9,9\n", "too many columns"), ("a1,1\n", "missing columns")])
def test_a_csv_line_with_the_wrong_number_of_fields_is_refused_by_its_line_or_skipped(tmp_path, bad, why):
    body = "".join(f"a{i % 7},{i % 5},{'buy' if i % 3 else 'sell'},{i % 17}\n" for i in range(60))
    f = tmp_path / "ev.csv"
    lines = body.splitlines(keepends=True)
    f.write_text("agent,tick,action,amount\n" + "".join(lines[:25]) + bad + "".join(lines[25:]))
    line = 27  # the header, 25 good rows, then the bad one
    with pytest.raises(TraceRecordError, match=rf"ev\.csv line {line}: a CSV line that does not split into the "
                                               rf"header's columns \({why}"):
        read_trace(f, TABLE_SPEC)
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert r.report.n_skipped == 1 and r.report.records == 61
    assert list(r.report.skipped_at.values()) == [[f"{f} line {line}"]]
    good = tmp_path / "good.csv"
    good.write_text("agent,tick,action,amount\n" + body)
    np.testing.assert_array_equal(r.panel.values, read_trace(good, TABLE_SPEC).panel.values)


def test_a_csv_record_after_left_out_lines_is_named_by_its_own_line(tmp_path):
    """A row after a left-out line (wrong number of fields), a blank line or a record over several lines was
    named by the count of rows DuckDB read: one lower per such line before it. It is named by its line."""
    f = tmp_path / "ev.csv"
    good = "".join(f"a{i % 7},{i % 5},buy,{i}\n" for i in range(20))  # lines 2-21
    f.write_text('agent,tick,action,amount\n' + good + 'b,1,buy,2,9\nc,1,buy\n\n"d\nd",1,buy,3\ne,zero,buy,4\n'
                 "f,2,sell,5\ng,3,sell,x\n")
    with pytest.raises(TraceRecordError, match=r"ev\.csv line 27: step field 'tick' is not an integer step"):
        read_trace(f, TABLE_SPEC)  # a bad value is named as the read meets it, left-out lines after the read
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert r.report.skipped_at == {"step field 'tick' is not an integer step": [f"{f} line 27"],
                                   "field 'amount' is not a finite number": [f"{f} line 29"],
                                   "a CSV line that does not split into the header's columns": [f"{f} line 22",
                                                                                               f"{f} line 23"]}
    assert r.report.records == 26 and r.report.n_skipped == 4
    f.write_text('agent,tick,action,amount\n' + good + 'b,1,buy,2,9\n\n"d\nd",1,buy,3\ne,zero,buy,4\n')
    with pytest.raises(TraceRecordError, match=r"ev\.csv line 26: step field 'tick' is not an integer step"):
        read_trace(f, TABLE_SPEC)
    f.write_text('agent,tick,action,amount\n' + good + 'b,1,buy,2,9\nc,1,buy\n\n"d\nd",1,buy,3\ne,zero,buy,4\n'
                 "f,2,sell,5\ng,3,sell,x\n")
    two = tmp_path / "two"  # a directory of shards: each file's own lines
    two.mkdir()
    (two / "a.csv").write_text("agent,tick,action,amount\na,0,buy,1\n")
    (two / "b.csv").write_text(f.read_text())
    r = read_trace(two, TABLE_SPEC, on_bad="skip")
    assert r.report.skipped_at["step field 'tick' is not an integer step"] == [f"{two} at b.csv line 27"]


@pytest.mark.parametrize("step", ["0x10", "0b11", "1_000", "0X1F"])
def test_a_step_in_another_base_is_not_an_integer_step(tmp_path, step):
    """DuckDB's integer cast reads 0x10 as 16 (0b11 as 3, 1_000 as 1000): in a column of decimal steps such a
    value became a step. A step is a decimal integer; the others are refused by their line, or skipped."""
    f = tmp_path / "ev.csv"
    f.write_text(f"agent,tick,action,amount\na,0,buy,1\nb,{step},buy,2\nc,1,sell,{step}\n")
    with pytest.raises(TraceRecordError, match=r"ev\.csv line 3: step field 'tick' is not an integer step"):
        read_trace(f, TABLE_SPEC)
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert r.report.skipped == {"step field 'tick' is not an integer step": 1,
                                "field 'amount' is not a finite number": 1}
    assert r.panel.steps.tolist() == [0] and r.report.records == 3


@pytest.mark.parametrize("tail", ['"c x",2,sell,3\n"d,3,sell,4\n', '"c x",2,sell,3\n"d,3,sell,4',
                                  '"d,3,sell,4\n"c x",2,sell,3\n'])
def test_an_unterminated_quote_is_a_bad_line_not_a_record(tmp_path, tail):
    """An unterminated quote made DuckDB's sniffer read the file without quoting: the bad line became a record
    ('"d' an agent) and every quoted value kept its quotes. The line is refused by its number, or skipped and
    counted (with everything after it: the quote runs to the end of the file); quoted values read unquoted."""
    f = tmp_path / "ev.csv"
    f.write_text("agent,tick,action,amount\na,0,buy,1\nb,1,buy,2\n" + tail)
    line = 5 if tail.startswith('"c') else 4
    with pytest.raises(TraceRecordError, match=rf"ev\.csv line {line}: a CSV line with an unterminated quote"):
        read_trace(f, TABLE_SPEC)
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert r.report.skipped_at == {"a CSV line with an unterminated quote (or text after a closing quote)":
                                   [f"{f} line {line}"]}
    assert r.report.n_skipped == 1
    ids = [str(a) for a in r.panel.agent_ids]
    assert not any('"' in a for a in ids) and ("c x" in ids) == (line == 5)


def test_time_bins_and_alive_rules(tmp_path):
    f = tmp_path / "log.csv"
    f.write_text("who,at,what\n"
                 "x,2025-01-01T00:10:00Z,post\ny,2025-01-01T00:20:00Z,post\n"
                 "x,2025-01-01T01:05:00Z,leave\ny,2025-01-01T01:30:00Z,post\n"
                 "z,2025-01-01T02:00:00Z,post\n"
                 "x,2025-01-01T04:00:00Z,post\nz,2025-01-01T04:10:00Z,post\n")
    base = {"format": "table", "agent": {"field": "who"}, "step": {"field": "at", "bin": "1h"},
            "action": {"field": "what", "exclude": ["leave"]}, "features": [{"kind": "count_each"}]}
    p = read_trace(f, dict(base, alive={"leave_actions": ["leave"]})).panel
    assert p.steps.tolist() == [f"2025-01-01T0{h}:00:00Z" for h in range(5)]
    al = {a: p.alive[:, i].tolist() for i, a in enumerate(p.agent_ids.tolist())}
    assert al["x"] == [True, True, False, False, True]  # left after step 1, back with its event at step 4
    assert al["y"] == [True, True, True, True, True]
    assert al["z"] == [False, False, True, True, True]
    p2 = read_trace(f, dict(base, alive={"inactive_after": 2})).panel
    al2 = {a: p2.alive[:, i].tolist() for i, a in enumerate(p2.agent_ids.tolist())}
    assert al2["y"] == [True, True, True, False, False]  # events at steps 0, 1: alive through 1 + 2 − 1
    assert al2["z"] == [False, False, True, True, True]


def test_time_bins_beyond_pandas_nanosecond_range(tmp_path):
    """Times after 2262-04-11 (or before 1677-09-21) bin where they are: datetime64[ns] used to wrap them
    584 years silently (2300 read as 1715) and reorder a trace crossing 2262-04-11T23:47:16Z."""
    from aumann.data.traces.events import StepCoder

    spec = {"format": "table", "agent": {"field": "who"}, "step": {"field": "at", "bin": "1h"},
            "features": [{"kind": "sum", "name": "amount", "field": "amount"}]}
    f = tmp_path / "y2300.csv"
    f.write_text("who,at,amount\na,2300-01-01T00:30:00Z,1\nb,2300-01-01T01:30:00Z,2\na,2300-01-01T02:30:00Z,4\n")
    p = read_trace(f, spec).panel
    assert p.steps.tolist() == [f"2300-01-01T0{h}:00:00Z" for h in range(3)]
    assert cell(p, "2300-01-01T01:00:00Z", "b", "amount") == 2
    f2 = tmp_path / "cross.csv"  # one text with nanoseconds makes pandas parse the whole batch in ns
    f2.write_text("who,at,amount\na,2262-04-11T22:30:00.000000001Z,1\nb,2262-04-11T23:30:00Z,2\n"
                  "a,2262-04-12T00:30:00Z,4\n")
    p2 = read_trace(f2, spec).panel
    cross = ["2262-04-11T22:00:00Z", "2262-04-11T23:00:00Z", "2262-04-12T00:00:00Z"]
    assert p2.steps.tolist() == cross
    assert [cell(p2, s, a, "amount") for s, a in zip(cross, "aba", strict=True)] == [1, 2, 4]
    coder = StepCoder(load_spec(dict(spec, step={"field": "at", "bin": "1h", "origin": "2300-01-01T00:00:00Z"})))
    steps, miss, bad, _, _ = coder.code(["2300-01-01T05:30:00Z", "1500-01-01T00:30:00.123456789+02:00"])
    assert steps.tolist() == [5, -7012658] and not (miss | bad).any()
    us = np.array(["2300-01-01T05:30", "2024-01-01T00:30"], dtype="datetime64[us]")
    assert coder.code(us)[0].tolist() == [5, -2419368]
    ns = np.array(["2024-01-01T00:30"], dtype="datetime64[ns]")  # read in its own unit, not as bare integers
    assert coder.code(ns)[0].tolist() == [-2419368]

    db = tmp_path / "far.db"  # text beyond what pandas or Python parse: refused as out of range, or skipped
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE trace(user_id INTEGER, created_at TEXT, action TEXT, info TEXT)")
    con.executemany("INSERT INTO trace VALUES (?, ?, 'post', '{}')", [(1, "2300-01-01T00:30:00Z"),
                                                                       (2, "12024-01-01T00:00:00Z")])
    con.commit()
    con.close()
    oasis = {"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at", "bin": "1h"},
             "action": {"field": "action"}}
    with pytest.raises(TraceRecordError, match=r"far\.db row 2: step field 'created_at' is out of range: a times"):
        read_trace(db, oasis)
    r = read_trace(db, dict(oasis, on_bad="skip"))
    assert r.report.n_skipped == 1 and r.panel.steps.tolist() == ["2300-01-01T00:00:00Z"]


def test_text_times_outside_nanoseconds_parse_where_pandas_parses_only_nanoseconds(tmp_path):
    """pandas 2.x parses text in nanoseconds only (1677-09-21 to 2262-04-11): span steps in 2300 were each skipped as
    'not a timestamp' and a step.origin in 2300 refused. They bin where they are, by the calendar (2400-02-29 is a
    day, 2300-02-29 none), a zone's offset and a fraction taken as pandas takes them nearer to now."""
    from aumann.data.traces.events import StepCoder

    texts = ["2300-01-02T00:30:00Z", "2400-02-29T23:59:59.5+02:00", "2300-02-29T00:00:00Z", "2300-01-03T01:00:00+02:00"]
    f = tmp_path / "far_spans.jsonl"
    f.write_text("".join(json.dumps({"trace_id": f"t{i}", "span_id": f"s{i}", "name": "act",
                                     "attributes": {"who": f"a{i}", "at": t}}) + "\n" for i, t in enumerate(texts)))
    spec = {"format": "otel", "agent": {"field": "attributes/who"},
            "step": {"field": "attributes/at", "bin": "1d", "origin": "2300-01-01T00:00:00Z"},
            "features": [{"kind": "count", "name": "n"}]}
    r = read_trace(f, spec, on_bad="skip")
    assert r.report.n_skipped == 1 and r.report.skipped == {
        "step field 'attributes/at' is not a timestamp (ISO-8601 text or a number)": 1}
    p = r.panel
    days = (np.datetime64("2400-02-29", "D") - np.datetime64("2300-01-02", "D")).astype(int)
    assert len(p.steps) == days + 1 and p.steps[0] == "2300-01-02T00:00:00Z" and p.steps[-1] == "2400-02-29T00:00:00Z"
    assert cell(p, "2300-01-02T00:00:00Z", "a0", "n") == 1 and cell(p, "2400-02-29T00:00:00Z", "a1", "n") == 1
    assert cell(p, "2300-01-02T00:00:00Z", "a3", "n") == 1  # 01:00+02:00 is 23:00 UTC the day before
    coder = StepCoder(load_spec(dict(spec, step={"field": "at", "bin": "1h", "origin": "2300-01-01T00:00:00Z"})))
    far = ["1500-03-01T00:30:00.123456789-01:00", "9999-12-31T23:00:00Z", "0001-01-01T01:00:00Z", "1000-02-29T00:00Z"]
    steps, missing, bad, _, _ = coder.code(far)
    utc = ["1500-03-01T01:30:00", "9999-12-31T23:00:00", "0001-01-01T01:00:00"]  # 1000 was no leap year
    hours = [int((np.datetime64(t, "s") - np.datetime64("2300-01-01T00:00:00", "s")) // np.timedelta64(3600, "s"))
             for t in utc]
    assert steps[:3].tolist() == hours and not (missing | bad)[:3].any() and bad[3]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet", "spans", "oasis"])
def test_time_after_year_9999_is_out_of_range_in_every_reader(tmp_path, fmt):
    """The text 12024-01-01T00:00:00Z (a year of five digits) is out of range in every reader, as docs/traces.md says
    and as a number that is a time after 9999 is: DuckDB types a CSV or JSON lines column of such text as a
    timestamp, and the table reader binned it (a step labelled 12012-08-23T00:00:00Z, text that the span and OASIS
    readers refuse), while the span and OASIS readers, parsing the text themselves, refused it. A Parquet timestamp
    after 9999 is refused too. With --skip-bad the record is skipped and counted, the rest binned alike."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [("a", "2300-01-01T00:30:00Z", 1), ("b", "12024-01-01T00:00:00Z", 2)]
    spec = {"format": "table", "agent": {"field": "who"}, "step": {"field": "at", "bin": "1000w"},
            "features": [{"kind": "sum", "name": "amount", "field": "amount"}]}
    if fmt == "csv":
        f = tmp_path / "far.csv"
        f.write_text("who,at,amount\n" + "".join(f"{a},{t},{x}\n" for a, t, x in rows))
    elif fmt == "jsonl":
        f = tmp_path / "far.jsonl"
        f.write_text("".join(json.dumps({"who": a, "at": t, "amount": x}) + "\n" for a, t, x in rows))
    elif fmt == "parquet":  # a timestamp[us] column: pyarrow holds years past 9999, pandas' datetime64[ns] does not
        f = tmp_path / "far.parquet"
        us = [np.datetime64("2300-01-01T00:30:00", "us").astype(np.int64),
              np.datetime64("9999-12-31T00:00:00", "us").astype(np.int64) + 2024 * 365 * 86400 * 10**6]
        pq.write_table(pa.table({"who": ["a", "b"], "at": pa.array(us, pa.int64()).cast(pa.timestamp("us", "UTC")),
                                 "amount": [1, 2]}), f)
    elif fmt == "spans":
        f = tmp_path / "far_spans.jsonl"
        f.write_text("".join(json.dumps({"trace_id": f"t{i}", "span_id": f"s{i}", "name": "act",
                                         "attributes": {"who": a, "at": t, "amount": x}}) + "\n"
                             for i, (a, t, x) in enumerate(rows)))
        spec = dict(spec, format="otel", agent={"field": "attributes/who"},
                    step={"field": "attributes/at", "bin": "1000w"},
                    features=[{"kind": "sum", "name": "amount", "field": "attributes/amount"}])
    else:
        f = tmp_path / "far.db"
        con = sqlite3.connect(f)
        con.execute("CREATE TABLE trace(user_id TEXT, created_at TEXT, action TEXT, info TEXT)")
        con.executemany("INSERT INTO trace VALUES (?, ?, 'post', ?)", [(a, t, json.dumps({"amount": x}))
                                                                      for a, t, x in rows])
        con.commit()
        con.close()
        spec = {"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at", "bin": "1000w"},
                "features": [{"kind": "sum", "name": "amount", "field": "info/amount"}]}
    field = spec["step"]["field"]
    with pytest.raises(TraceRecordError, match=rf"(row|line) [23]: step field '{field}' is out of range: a timestamp "
                                               r"with a year of five or more digits \(after 9999\)"):
        read_trace(f, spec)
    r = read_trace(f, dict(spec, on_bad="skip"))
    width = 1000 * 7 * 86400  # the 1000-week bin of 2300-01-01T00:30Z, from the epoch (in numpy's seconds: pandas
    # 2.x subtracts these Timestamps in nanoseconds, which overflow)
    start = np.datetime64(int(np.datetime64("2300-01-01T00:30:00", "s").astype(np.int64)) // width * width, "s")
    assert r.report.n_skipped == 1 and r.panel.steps.tolist() == [f"{start}Z"]
    assert r.panel.values.sum() == 1


def test_step_start_and_stop_count_against_max_steps_and_max_cells(tmp_path):
    """[step] start / stop stretch the panel: the limits apply to that span, before it is allocated (a
    stop of 5000 under max_steps = 10 built 5,001 steps; a stop of 2⁶² was a bare MemoryError)."""
    from aumann.errors import TraceError

    f = tmp_path / "ev.csv"
    f.write_text("agent,tick,amount\na1,0,5\na2,1,3\na1,2,1\n")
    spec = {"format": "table", "max_steps": 10, "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "sum", "name": "amount", "field": "amount"}]}
    assert read_trace(f, dict(spec, step={"field": "tick", "start": -3, "stop": 6})).panel.T == 10
    for step in ({"stop": 5000}, {"start": -5000}, {"stop": 2**62}, {"start": -(2**62), "stop": 2**62}):
        with pytest.raises(TraceError, match=r"the trace spans [\d,]+ steps with step\.start / step\.stop, more "
                                             r"than max_steps = 10"):
            read_trace(f, dict(spec, step={"field": "tick", **step}))
    with pytest.raises(TraceError, match=r"would hold 200 values .* more than max_cells = 100"):
        read_trace(f, dict(spec, max_steps=1000, max_cells=100, step={"field": "tick", "stop": 99}))


# ---------------------------------------------------------------- synthetic generator
def test_synthetic_oasis_round_trip(tmp_path):
    from aumann.data.traces import synth

    db = synth.write_oasis(tmp_path / "s.db", 5000, agents=50, steps=7, seed=3)
    r = read_trace(db)
    _, _, act = synth.events(5000, 50, 7, seed=3)
    assert r.report.records == 5000 + 50
    for k, name in enumerate(synth.ACTIONS):
        assert r.panel.values[:, :, r.panel.features.index(name)].sum() == (act == k).sum()
    assert r.panel.values[:, :, r.panel.features.index("sign_up")].sum() == 50
    d = synth.write_otel(tmp_path / "otel", 2000, agents=30, steps=4, seed=1)
    r2 = read_trace(d)
    assert r2.report.records == 2000 and r2.report.n_skipped == 0
    assert r2.panel.values.sum() == 2000


def test_oasis_bad_info_json_and_non_numeric_field(tmp_path):
    db = tmp_path / "info.db"
    shutil.copy(OASIS, db)
    con = sqlite3.connect(db)
    con.execute("INSERT INTO trace VALUES (2, 4, 'like_post', '{\"post_id\": ')")
    row = con.execute("SELECT max(rowid) FROM trace").fetchone()[0]
    con.execute("INSERT INTO trace VALUES (3, 4, 'like_post', '{\"post_id\": \"seven\"}')")
    con.commit()
    spec = {"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
            "action": {"field": "action"}, "features": [{"kind": "sum", "name": "ids", "field": "info/post_id"}]}
    with pytest.raises(TraceRecordError, match=rf"info\.db row {row}: column 'info' is not valid JSON"):
        read_trace(db, spec)
    r = read_trace(db, dict(spec, on_bad="skip"))
    assert r.report.skipped == {"column 'info' is not valid JSON": 1, "field 'info/post_id' is not a finite number": 1}
    assert r.report.missing_values["info/post_id"] > 0  # rows whose info has no post_id (sign_up, follow, ...)


@pytest.mark.parametrize("own", [["rowid"], ["ROWID", "_rowid_"], ["rowid", "_rowid_", "oid"]],
                         ids=["rowid", "ROWID+_rowid_", "all_three"])
def test_oasis_table_with_its_own_rowid_column(tmp_path, own):
    """A trace table with a column named rowid hides SQLite's row id: the reader read that column as row
    numbers (int('a'): a raw ValueError traceback from `aumann attribute --trace`). It now reaches the row
    id through _rowid_ / oid, and refuses, typed, a table that hides all three."""
    db = tmp_path / "own.db"
    con = sqlite3.connect(db)
    extra = ", ".join(f"{c} TEXT" for c in own)
    con.execute(f"CREATE TABLE trace(user_id INTEGER, created_at INTEGER, action TEXT, info TEXT, {extra})")
    rows = [(1, 0, "post", "{}"), (2, 1, "like", "{}"), (1, 1, "post", "{}"), (3, 1.5, "post", "{}")]
    con.executemany(f"INSERT INTO trace VALUES (?, ?, ?, ?{', ?' * len(own)})",
                    [(*r, *(["a"] * len(own))) for r in rows])
    con.commit()
    con.close()
    if len(own) == 3:
        with pytest.raises(TraceSchemaError, match=r"own\.db': table 'trace' has its own columns named rowid, "
                                                   r"_rowid_ and oid, which hide SQLite's row id"):
            read_trace(db)
        return
    with pytest.raises(TraceRecordError, match=r"own\.db row 4: step field 'created_at' is not an integer step"):
        read_trace(db)
    r = read_trace(db, on_bad="skip")
    assert r.report.skipped_at == {"step field 'created_at' is not an integer step": [f"{db} row 4"]}
    assert cell(r.panel, 1, 1, "post") == 1 and cell(r.panel, 1, 2, "like") == 1 and r.panel.T == 2
    con = sqlite3.connect(db)
    con.execute("UPDATE trace SET created_at = '2025-03-01 10:00:00' WHERE oid = 3")
    con.commit()
    con.close()
    with pytest.raises(TraceRecordError, match=r"own\.db row 3: created_at holds '2025-03-01 10:00:00', a timestamp"):
        read_trace(db)


def test_synthetic_concordia_round_trip(tmp_path):
    from aumann.data.traces import synth

    p = synth.write_concordia(tmp_path / "c.json", 3000, agents=40, steps=6, seed=2, jsonl=tmp_path / "c.jsonl")
    r = read_trace(p)
    a, _, act = synth.events(3000, 40, 6, seed=2)
    assert r.report.records == 3000 and r.panel.values[:, :, r.panel.features.index("acted")].sum() == 3000
    texts = list(json.loads(p.read_text())["content_store"].values())  # one per action type, in ACTIONS order
    assert r.panel.values[:, :, r.panel.features.index("action_chars")].sum() == sum(len(texts[k]) for k in act)
    i = list(r.panel.agent_ids).index(f"agent{a[0]}")
    assert r.panel.values[:, i, 0].sum() == (a == a[0]).sum()
    assert len((tmp_path / "c.jsonl").read_text().splitlines()) == 3000


@pytest.mark.parametrize("name", ["ev.csv", "ev.jsonl"])
def test_an_empty_table_says_it_is_empty(tmp_path, name):
    f = tmp_path / name
    f.write_text("")
    with pytest.raises(TraceFormatError, match=r"ev\.(csv|jsonl)' is empty: no header, no rows"):
        read_trace(f, TABLE_SPEC)


def test_lines_before_a_csv_header_are_refused_or_counted_and_rows_keep_their_own_lines(tmp_path):
    """DuckDB's sniffer skips lines before a CSV header (``# exported by ...``) without a word: they were dropped
    silently, and every row after them was named by a line too low by their number (the line map took the
    first line for the header). They are refused under on_bad = "error", naming them, or skipped and counted;
    every row is named by the file's own line."""
    good = "".join(f"a{i % 7},{i % 5},buy,{i}\n" for i in range(20))  # lines 4-23
    f = tmp_path / "ev.csv"
    f.write_text("# exported by sim v1\n# 2026-01-01\nagent,tick,action,amount\n" + good + "e,zero,buy,4\n")
    with pytest.raises(TraceRecordError, match=r"ev\.csv line 1: a line before the CSV header \(2 such line\(s\)"):
        read_trace(f, TABLE_SPEC)
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert r.report.skipped_at == {"a line before the CSV header (DuckDB's sniffer skips it)": [f"{f} line 1",
                                                                                                 f"{f} line 2"],
                                   "step field 'tick' is not an integer step": [f"{f} line 24"]}
    assert r.report.records == 23 and r.report.n_skipped == 3
    clean = tmp_path / "clean.csv"
    clean.write_text("agent,tick,action,amount\n" + good)
    np.testing.assert_array_equal(r.panel.values, read_trace(clean, TABLE_SPEC).panel.values)


@pytest.mark.parametrize("first", ["exported", "v1;", "2026-01-01"], ids=["word", "semicolon", "date"])
def test_a_one_field_line_before_a_csv_header_is_refused_or_counted_like_any_line_before_it(tmp_path, first):
    """A one-field line before the header is taken by DuckDB's sniffer for the header itself (lines of several
    fields it skips): the spec's columns were "missing". The table is read from its header on, and the line is
    refused under on_bad = "error" or skipped and counted, as the lines before a header are; every row keeps its
    own line (a bad one on line 6 is named line 6, and a row DuckDB leaves out too)."""
    f = tmp_path / "ev.csv"
    f.write_text(f"{first}\nagent,tick,action,amount\na,0,buy,1\nb,1,sell,2\nc,1,buy,3,extra\nd,zero,buy,4\n"
                 "e,2,buy,5\n")
    with pytest.raises(TraceRecordError, match=r"ev\.csv line 1: a line before the CSV header \(1 such line"):
        read_trace(f, TABLE_SPEC)
    r = read_trace(f, TABLE_SPEC, on_bad="skip")
    assert r.report.skipped_at == {
        "a line before the CSV header (DuckDB's sniffer skips it)": [f"{f} line 1"],
        "a CSV line that does not split into the header's columns": [f"{f} line 5"],
        "step field 'tick' is not an integer step": [f"{f} line 6"]}
    assert r.report.records == 6 and r.report.n_skipped == 3
    clean = tmp_path / "clean.csv"
    clean.write_text("agent,tick,action,amount\na,0,buy,1\nb,1,sell,2\ne,2,buy,5\n")
    np.testing.assert_array_equal(r.panel.values, read_trace(clean, TABLE_SPEC).panel.values)
    # shards of one table share their header line: one without the line before it is named, not misread
    d = tmp_path / "shards"
    d.mkdir()
    (d / "a.csv").write_text(f"{first}\nagent,tick,action,amount\na,0,buy,1\n")
    (d / "b.csv").write_text("agent,tick,action,amount\nb,1,sell,2\n")
    with pytest.raises(TraceSchemaError, match=r"line 2 of .*a\.csv holds them.*b\.csv holds them on line 1"):
        read_trace(d, TABLE_SPEC)
    f.write_text("x\ny\n")  # no header anywhere: the plain schema error
    with pytest.raises(TraceSchemaError, match=r"its columns are \['x'\]$"):
        read_trace(f, TABLE_SPEC)


def test_read_trace_of_real_people_keys_the_panel_by_opaque_indices(tmp_path):
    """docs/traces.md: with real_people = true agents become opaque indices with activity tiers. read_trace did
    that only in the CLI: from Python the panel came back keyed by the real ids (and an Attribution made from it,
    saved, carried them), against the spec's own flag."""
    f = tmp_path / "t.jsonl"
    rows = [("alice@example.org", 0, 5.0), ("bob@example.org", 0, 1.0), ("carol@example.org", 1, 2.0)]
    f.write_text("".join(json.dumps({"agent": a, "tick": t, "v": v}) + "\n" for a, t, v in rows))
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "sum", "name": "v", "field": "v"}]}
    plain = read_trace(f, spec)
    assert plain.identifiers is None and list(plain.panel.agent_ids) == [a for a, _, _ in rows]
    real = read_trace(f, {**spec, "real_people": True})
    assert real.panel.agent_ids.tolist() == [0, 1, 2]
    assert real.identifiers == [{"index": i, "id": a} for i, (a, _, _) in enumerate(rows)]
    assert not any("@" in str(v) for v in real.panel.agent_ids)
    assert real.panel.meta["identifiers"] == "opaque" and "tier" in real.panel.groups
    np.testing.assert_array_equal(real.panel.values, plain.panel.values)


def test_an_agent_id_of_true_or_false_is_refused_not_merged_with_agent_1(tmp_path):
    """Python's True == 1: agent true, agent 1 and agent 1.0 became one agent labelled 'True' (the events of agent
    1 credited to it), while "1" stayed apart, with merged_ids 0. true/false is no id: refused by its place."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps({"agent": a, "tick": 0, "v": v}) + "\n"
                         for a, v in [(True, 1.0), (1, 2.0), ("1", 4.0), (1.0, 8.0), (False, 16.0)]))
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "sum", "name": "v", "field": "v"}]}
    with pytest.raises(TraceRecordError, match=r"t\.jsonl row 1: agent id in field 'agent' is true/false, not an id"):
        read_trace(f, spec)
    r = read_trace(f, {**spec, "on_bad": "skip"})
    assert r.panel.agent_ids.tolist() == [1] and r.panel.values.ravel().tolist() == [14.0]
    assert r.report.skipped == {"agent id in field 'agent' is true/false, not an id": 2} and r.report.merged_ids == 1
    pq.write_table(pa.table({"agent": [True, False], "tick": [0, 0], "v": [1.0, 2.0]}), tmp_path / "b.parquet")
    with pytest.raises(TraceRecordError, match="is true/false, not an id"):
        read_trace(tmp_path / "b.parquet", spec)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_columns_differing_only_in_case_are_named_in_the_error(tmp_path, kind):
    """DuckDB's column names are case-insensitive: of 'Agent' and 'agent' the second is read as 'agent_1', and a
    spec naming 'agent' was told the file has no such column, listing 'agent_1' without saying why."""
    f = tmp_path / f"t.{kind}"
    if kind == "csv":
        f.write_text("Agent,agent,tick,v\nA,x,0,1\nB,y,0,2\n")
    else:
        f.write_text("".join(json.dumps({"Agent": a, "agent": b, "tick": 0, "v": v}) + "\n"
                             for a, b, v in [("A", "x", 1), ("B", "y", 2)]))
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "sum", "name": "v", "field": "v"}]}
    with pytest.raises(TraceSchemaError, match=r"differing only in case .* renamed \['agent_1'\]"):
        read_trace(f, spec)
    assert read_trace(f, {**spec, "agent": {"field": "Agent"}}).panel.agent_ids.tolist() == ["A", "B"]


@pytest.mark.parametrize("cut", [100, 1000, 3000])
def test_an_oasis_database_cut_inside_its_last_page_is_refused_not_read_as_zero_rows(tmp_path, cut):
    """SQLite reads the missing tail of a page as zeros: the sample cut 1000 bytes short gave 74 rows, 10 of them
    replaced by rowid 0 with NULL columns, refused as 'row 0: no usable agent id' (and under --skip-bad the real rows
    were lost, counted as bad records)."""
    bad = tmp_path / "cut.db"
    data = OASIS.read_bytes()
    bad.write_bytes(data[:-cut])
    for on_bad in ("error", "skip"):
        with pytest.raises(TraceFormatError, match=r"cut\.db' is cut short: .* pages of 4,096 bytes"):
            read_trace(bad, on_bad=on_bad)


def test_oasis_integer_steps_stored_as_text_are_steps_not_reddit_timestamps(tmp_path):
    """A trace table whose created_at has TEXT affinity stores the Twitter clock's str(time_step) as '3': every such
    database was refused as "holds '0', a timestamp ... (OASIS's Reddit mode records clock time): bin it with --bin
    1h". It reads like the INTEGER column; text that is neither a step nor a time is refused by its row."""
    db = tmp_path / "text_steps.db"
    src = sqlite3.connect(OASIS)
    rows = src.execute("SELECT user_id, created_at, action, info FROM trace ORDER BY rowid").fetchall()
    src.close()
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE trace (user_id INTEGER, created_at TEXT, action TEXT, info TEXT)")
    con.executemany("INSERT INTO trace VALUES (?, ?, ?, ?)", [(u, str(t), a, i) for u, t, a, i in rows])
    con.commit()
    assert con.execute("SELECT count(*) FROM trace WHERE typeof(created_at) = 'text'").fetchone()[0] == len(rows)
    got, want = read_trace(db).panel, read_trace(OASIS).panel
    assert np.array_equal(got.values, want.values) and list(got.steps) == list(want.steps)
    assert np.array_equal(got.alive, want.alive) and got.features == want.features
    con.execute("INSERT INTO trace VALUES (1, 'soon', 'like_post', '{}')")
    con.commit()
    row = con.execute("SELECT max(rowid) FROM trace").fetchone()[0]
    with pytest.raises(TraceRecordError, match=rf"text_steps\.db row {row}: step field 'created_at' is not an "
                                               "integer step"):
        read_trace(db)


def test_a_directory_of_spans_whose_first_shard_is_empty_is_still_spans(tmp_path):
    """An empty (or blank) first shard made detection look no further: the directory was detected as a long table
    and `read_trace(run/trace)` refused it with "format 'table' has no default spec"."""
    run = tmp_path / "trace"
    shutil.copytree(AS2 / "trace", run)
    (run / "trace_00.jsonl").write_text("")
    (run / "trace_01.jsonl").write_text("\n\n")
    assert detect_format(run) == "otel"
    got, want = read_trace(run), read_trace(AS2 / "trace")
    assert np.array_equal(got.panel.values, want.panel.values) and got.report.blank_lines == 2


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_a_column_the_spec_reads_named_twice_is_refused_not_the_first_read_silently(tmp_path, kind):
    """`a,t,x,x`: DuckDB renames the second x to x_1, and a spec summing x summed the first column without a word
    (sum_x = [[1, 0], [0, 2]], the 100 and 200 of the other x gone). A column x and a column x_1 are two columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = {"format": "table", "agent": {"field": "a"}, "step": {"field": "t"},
            "features": [{"kind": "sum", "field": "x"}]}
    path = tmp_path / f"dup.{kind}"
    if kind == "csv":
        path.write_text("a,t,x,x\n1,0,1,100\n2,1,2,200\n")
    else:
        pq.write_table(pa.Table.from_arrays([pa.array([1, 2]), pa.array([0, 1]), pa.array([1, 2]),
                                             pa.array([100, 200])], names=["a", "t", "x", "x"]), path)
    with pytest.raises(TraceSchemaError, match=r"dup\.\w+' names column\(s\) \['x'\] more than once"):
        read_trace(path, spec)
    ok = tmp_path / f"ok.{kind}"
    if kind == "csv":
        ok.write_text("a,t,x,x_1\n1,0,1,100\n2,1,2,200\n")
    else:
        pq.write_table(pa.table({"a": [1, 2], "t": [0, 1], "x": [1, 2], "x_1": [100, 200]}), ok)
    assert read_trace(ok, spec).panel.values[..., 0].tolist() == [[1.0, 0.0], [0.0, 2.0]]


def test_a_count_each_that_counts_no_action_is_a_spec_error_not_a_numpy_error(tmp_path):
    """A misspelled [action] field, or an include list matching no action, left count_each with no feature: alone,
    numpy's bare ValueError 'need at least one array to stack' out of read_trace; beside a count, the panel silently
    had no per-action counts."""
    base = {"format": "otel", "agent": {"field": "resource/agent.name"}, "step": {"field": "attributes/sim.step"}}
    for features in ([{"kind": "count_each"}], [{"kind": "count_each"}, {"kind": "count"}]):
        with pytest.raises(TraceSpecError, match=r"count_each feature counted no action.*none of the 15 event\(s\) has "
                                                 r"a value in the action field 'nam'"):
            read_trace(OTLP, {**base, "action": {"field": "nam"}, "features": features})
    spec = {"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
            "action": {"field": "action", "include": ["create_posts"]}, "features": [{"kind": "count_each"}]}
    with pytest.raises(TraceSpecError, match=r"\[action\] include = \['create_posts'\] left out every action"):
        read_trace(OASIS, spec)
    spec["action"]["include"] = ["create_post"]
    assert read_trace(OASIS, spec).panel.features == ("create_post",)


@pytest.mark.parametrize("kind", ["csv", "jsonl", "otel", "otel.gz", "concordia"])
def test_a_utf16_trace_is_refused_naming_its_encoding(tmp_path, kind):
    """A UTF-16 file (a Windows tool's export, PowerShell's `>`) failed on what it decoded to: a CSV's columns were
    ['\\x001\\x00', ...] ("has no column(s) ['agent', ...]"), span and Concordia files were detected as long tables
    ("format 'table' has no default spec"), and with the format given line 1 was "not a JSON object"."""
    import gzip

    src = {"csv": CSV, "jsonl": CSV, "otel": OTLP, "otel.gz": OTLP, "concordia": CONCORDIA}[kind]
    text = src.read_text(encoding="utf-8")
    if kind == "jsonl":
        import pandas as pd

        text = pd.read_csv(CSV).to_json(orient="records", lines=True)
    name = {"csv": "t.csv", "jsonl": "t.jsonl", "otel": "s.jsonl", "otel.gz": "s.jsonl.gz", "concordia": "c.json"}[kind]
    path = tmp_path / name
    data = text.encode("utf-16")
    path.write_bytes(gzip.compress(data) if kind.endswith(".gz") else data)
    fmt = {"csv": "table", "jsonl": "table", "otel": "otel", "otel.gz": "otel", "concordia": "concordia"}[kind]
    spec = {"otel": EXAMPLE_OTLP, "otel.gz": EXAMPLE_OTLP}.get(kind, EXAMPLE_EVENTS if fmt == "table" else None)
    with pytest.raises(TraceFormatError, match=r"is UTF-16 text \(it starts with the byte-order mark FF FE\)"):
        detect_format(path)
    with pytest.raises(TraceFormatError, match=rf"{re.escape(name)}' is UTF-16 text"):
        read_trace(path, spec, format=fmt)
    path.write_text(text, encoding="utf-8")
    if not kind.endswith(".gz"):
        assert read_trace(path, spec, format=fmt).report.events > 0


EXAMPLE_OTLP = Path(__file__).resolve().parents[2] / "docs" / "examples" / "traces" / "otlp.toml"
EXAMPLE_EVENTS = Path(__file__).resolve().parents[2] / "docs" / "examples" / "traces" / "events.toml"


@pytest.mark.parametrize(("entries", "kind"), [({"0": {"step": 1}}, "a JSON object"), ([], "an empty array"),
                                               ("x", "a string")])
def test_concordia_entries_that_are_not_a_list_of_entries_say_what_they_are(tmp_path, entries, kind):
    """'entries' as an object (or empty) was refused with "has no entries: not a Concordia structured log ...;
    top-level keys: ['content_store', 'entries']", which named the key it said was missing."""
    log = tmp_path / "c.json"
    log.write_text(json.dumps({"content_store": {}, "entries": entries}))
    with pytest.raises(TraceSchemaError, match=rf"c\.json: 'entries' holds no entry: it is {kind} \("):
        read_trace(log, format="concordia")


@pytest.mark.parametrize("batch_size", [1, 2, 65536])
def test_last_under_trace_inheritance_keeps_log_order(tmp_path, batch_size):
    """A span waiting for its trace's step was handed to the builder when the step span came, after the spans that
    follow it in the log: agent 1's x at tick 0 is 1 (line 1, trace T1), 2 (line 2, trace T2), so its last is 2; the
    panel said 1. Across shards too: shard b's line 1 comes after shard a's lines."""
    lines = [{"span_id": "1", "trace_id": "T1", "name": "child", "resource": {"agent.id": 1}, "attributes": {"x": 1}},
             {"span_id": "2", "trace_id": "T2", "name": "step", "resource": {"agent.id": 1},
              "attributes": {"agent.tick": 0, "x": 2}},
             {"span_id": "3", "trace_id": "T1", "name": "step", "resource": {"agent.id": 1},
              "attributes": {"agent.tick": 0}}]
    f = tmp_path / "spans.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    spec = {"format": "otel", "agent": {"field": "resource/agent.id"},
            "step": {"field": "attributes/agent.tick", "inherit": "trace"},
            "features": [{"kind": "last", "field": "attributes/x"}, {"kind": "sum", "field": "attributes/x"}],
            "batch_size": batch_size}
    assert read_trace(f, spec).panel.values[0, 0].tolist() == [2.0, 3.0]
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "a.jsonl").write_text(json.dumps(lines[0]) + "\n" + json.dumps(lines[2]) + "\n")
    (shards / "b.jsonl").write_text(json.dumps({**lines[1], "attributes": {"agent.tick": 0, "x": 5}}) + "\n")
    assert read_trace(shards, spec).panel.values[0, 0].tolist() == [5.0, 6.0]


@pytest.mark.parametrize(("column", "step"), [
    ([f"2025-03-01T08:00:00.{k * 100:03d}Z" for k in range(10)], {"bin": "100ms"}),
    ([1740816000000 + k * 100 for k in range(10)], {"bin": "100ms", "unit": "ms"}),
    ([f"{k / 10:.1f}" for k in range(10)], {"bin": 0.1}),
])
def test_a_time_at_a_bin_start_is_in_that_bin_whatever_the_width(tmp_path, column, step):
    """floor((t − origin) / width) in float64 put a time at a bin's start into the bin before when the width is no
    binary fraction: 0.3 / 0.1 = 2.9999999999999996, so of events at 0.0, 0.1, …, 0.9 with bin = 0.1 those at 0.3 and
    0.6 fell a bin early (and 08:00:00.100, .300, .600, .900 with 100 ms bins); bin labels read 0.30000000000000004."""
    f = tmp_path / "t.csv"
    f.write_text("a,t\n" + "".join(f"{k},{v}\n" for k, v in enumerate(column)))
    p = read_trace(f, {"format": "table", "agent": {"field": "a"}, "step": {"field": "t", **step},
                       "features": [{"kind": "count"}]}).panel
    assert p.T == 10 and np.array_equal(p.values[:, :, 0], np.eye(10))  # event k in bin k, each bin once
    if step["bin"] == 0.1:
        assert p.steps.tolist() == [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    else:
        assert p.steps.tolist()[3] == "2025-03-01T08:00:00.300000Z"


@pytest.mark.parametrize("kind", ["csv", "parquet", "jsonl"])
def test_timestamps_in_an_unbinned_step_field_say_to_bin_them(tmp_path, kind):
    """A long table whose step column holds times (ISO text, a Parquet timestamp with a time zone) was refused with
    'step field 't' is not an integer step', which said nothing of --bin (OASIS's reader alone gave the hint)."""
    import pandas as pd

    times = pd.to_datetime(["2025-03-01 00:59:59", "2025-03-01 01:00:00"]).tz_localize("Europe/Paris")
    df = pd.DataFrame({"a": [1, 2], "t": times})
    path = tmp_path / f"t.{kind}"
    if kind == "parquet":
        df.to_parquet(path)
    elif kind == "csv":
        df.assign(t=[t.isoformat() for t in times]).to_csv(path, index=False)
    else:
        df.assign(t=[t.isoformat() for t in times]).to_json(path, orient="records", lines=True)
    spec = {"format": "table", "agent": {"field": "a"}, "step": {"field": "t"}, "features": [{"kind": "count"}]}
    with pytest.raises(TraceRecordError, match=r"t\.\w+ (row|line) \d: step field 't' holds a timestamp, not an "
                                               r"integer step: bin it into steps with --bin 1h"):
        read_trace(path, spec)
    p = read_trace(path, spec, bin="1h").panel
    assert p.steps.tolist() == ["2025-02-28T23:00:00Z", "2025-03-01T00:00:00Z"]
def _damaged_gzip(data: bytes, at: str) -> bytes:
    """``data`` gzipped, then damaged: ``crc`` flips a byte of the trailer's CRC (the data decode as written, the
    check fails), ``deflate`` flips bytes of the compressed data near the end (they decode into other bytes, or
    fail), ``early`` flips bytes near the start."""
    import gzip

    b = bytearray(gzip.compress(data))
    if at == "crc":
        b[-6] ^= 0x55
    else:
        lo = len(b) - 3000 if at == "deflate" else 20
        for i in range(lo, lo + 40):
            b[i] ^= 0x55
    return bytes(b)


@pytest.mark.parametrize("at", ["crc", "deflate", "early"])
@pytest.mark.parametrize("kind", ["csv", "quoted csv", "jsonl"])
def test_a_damaged_gzipped_table_is_refused_by_name(tmp_path, kind, at):
    """DuckDB checks no gzip CRC: a table whose compressed bytes were damaged was read as the wrong bytes decode
    (1,484 rows of 200,000 left out as bad lines, the others' amounts summed as decoded), and the Python passes over
    the file raised gzip's BadGzipFile ('CRC check failed') or zlib.error out of read_trace."""
    import random

    rnd = random.Random(1)
    q = '"' if kind == "quoted csv" else ""
    rows = [(f"a{rnd.randint(0, 99)}", i // 1000, rnd.randint(0, 100)) for i in range(200_000)]
    if kind == "jsonl":
        text = "".join(json.dumps({"agent": a, "tick": t, "action": "buy", "amount": v}) + "\n" for a, t, v in rows)
    else:
        text = f"{q}agent{q},tick,action,amount\n" + "".join(f"{q}{a}{q},{t},buy,{v}\n" for a, t, v in rows)
    f = tmp_path / ("t.jsonl.gz" if kind == "jsonl" else "t.csv.gz")
    f.write_bytes(_damaged_gzip(text.encode(), at))
    for on_bad in ("error", "skip"):
        with pytest.raises(TraceFormatError, match=r"t\.(csv|jsonl)\.gz' is a damaged or truncated gzip file"):
            read_trace(f, TABLE_SPEC, on_bad=on_bad)


def test_a_damaged_gzipped_edge_file_is_refused_by_name(tmp_path):
    """An exposure feature's gzipped edge file is checked like a table: DuckDB read its damaged bytes as decoded."""
    import random

    rnd = random.Random(2)
    edges = "follower_id,followee_id\n" + "".join(f"{rnd.randint(1, 12)},{rnd.randint(1, 12)}\n" for _ in range(50_000))
    f = tmp_path / "edges.csv.gz"
    f.write_bytes(_damaged_gzip(edges.encode(), "crc"))
    spec = {"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
            "action": {"field": "action"},
            "features": [{"kind": "count", "name": "posts", "actions": ["create_post"]},
                         {"kind": "exposure", "of": "posts", "edges": {"path": str(f)}}]}
    with pytest.raises(TraceFormatError, match=r"edges\.csv\.gz' is a damaged or truncated gzip file"):
        read_trace(OASIS, spec)


@pytest.mark.parametrize("on_bad", ["error", "skip"])
def test_a_damaged_gzipped_span_shard_is_refused_by_its_line(tmp_path, on_bad):
    """A span shard whose deflate data are damaged raised zlib.error ('Error -3 while decompressing data') out of
    read_trace: neither the OSError nor the EOFError the reader caught."""
    d = tmp_path / "trace"
    d.mkdir()
    for f in sorted((AS2 / "trace").glob("*.jsonl")):
        (d / (f.name + ".gz")).write_bytes(__import__("gzip").compress(f.read_bytes()))
    big = "".join(f.read_text() for f in sorted((AS2 / "trace").glob("*.jsonl"))) * 20
    (d / "trace_ff.jsonl.gz").write_bytes(_damaged_gzip(big.encode(), "early"))
    with pytest.raises(TraceFormatError, match=r"trace_ff\.jsonl\.gz line 1: cannot read on: Error -3"):
        read_trace(d, on_bad=on_bad)


@pytest.mark.parametrize("first", ["", "\n\n", "GZ"])
def test_a_span_folder_whose_first_shard_is_empty_is_read_as_spans(tmp_path, first):
    """A run directory's shard that holds no span (opened, nothing written yet; or blank lines) and sorts first made
    the folder undetectable as spans: it was read as a long table, 'format 'table' has no default spec'."""
    import gzip

    d = tmp_path / "trace"
    shutil.copytree(AS2 / "trace", d)
    if first == "GZ":
        (d / "trace_00.jsonl.gz").write_bytes(gzip.compress(b""))
    else:
        (d / "trace_00.jsonl").write_text(first)
    assert detect_format(d) == "otel"
    a, b = read_trace(AS2 / "trace"), read_trace(d)
    np.testing.assert_array_equal(a.panel.values, b.panel.values)
    assert a.report.records == b.report.records and b.report.n_skipped == a.report.n_skipped


@pytest.mark.parametrize("since", [False, True])
def test_an_edge_listed_twice_counts_its_target_once_from_its_earliest_since(tmp_path, since):
    """Exposure is Σ over the agent's targets j of j's feature: an edge file listing a follow twice (a re-follow
    logged again, an edge list with repeats) counted j's posts twice (agent c's exposure at tick 2 was 5, not 3)."""
    events = tmp_path / "ev.csv"
    events.write_text("agent,tick\na,0\nb,0\nb,1\nc,1\na,2\nb,2\nb,2\n")
    edges = tmp_path / "edges.csv"
    rows = [("c", "a", 1), ("c", "b", 2), ("c", "a", 2), ("c", "b", 0), ("a", "b", 0), ("a", "b", 0)]
    edges.write_text("src,dst,since\n" + "".join(f"{x},{y},{t}\n" for x, y, t in rows))
    spec = _edge_spec(edges)
    if since:
        spec["features"][1]["edges"]["since"] = "since"
    p = read_trace(events, load_spec(spec)).panel
    posts = p.values[:, :, p.features.index("posts")]
    pos = {a: i for i, a in enumerate(p.agent_ids.tolist())}
    first: dict[tuple[str, str], int] = {}  # the independent reference: each (source, target) once, earliest since
    for x, y, t in rows:
        first[(x, y)] = min(first.get((x, y), t), t)
    exp = np.zeros_like(posts)
    for (x, y), t0 in first.items():
        for t in range(p.T):
            if not since or t0 <= t:
                exp[t, pos[x]] += posts[t, pos[y]]
    np.testing.assert_array_equal(p.values[:, :, p.features.index("exp")], exp)
    assert exp[2, pos["c"]] == 3.0  # a's 1 post and b's 2 at tick 2, each followee once
    assert p.meta["edges"]["exp"]["duplicate"] == 3 and p.meta["edges"]["exp"]["used"] == 6


@pytest.mark.parametrize("gz", [False, True])
def test_a_csv_header_naming_a_spec_column_twice_is_refused(tmp_path, gz):
    """A header 'agent,tick,action,amount,amount' (a join's two amounts) was read with the first amount summed, the
    second silently left out as DuckDB's 'amount_1' (a 1 where the row's other amount is 5). A column repeated that
    the spec does not read is no matter."""
    import gzip

    text = "agent,tick,action,amount,amount,note,note\na1,0,buy,1,5,x,y\na2,1,buy,2,6,x,y\n"
    f = tmp_path / ("t.csv.gz" if gz else "t.csv")
    f.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    with pytest.raises(TraceSchemaError, match=r"t\.csv(\.gz)?' names column\(s\) \['amount'\] more than once"):
        read_trace(f, TABLE_SPEC)
    spec = {**TABLE_SPEC, "features": [{"kind": "count_each"}]}  # amount unread: read as usual
    assert read_trace(f, spec).panel.values.sum() == 2


def test_a_folder_given_as_a_concordia_log_is_named_a_folder(tmp_path):
    """A folder read with format = 'concordia' was said not to exist."""
    d = tmp_path / "run"
    d.mkdir()
    spec = {"format": "concordia", "agent": {"field": "entity_name"}, "step": {"field": "step"},
            "features": [{"kind": "count", "name": "acted"}]}
    with pytest.raises(TraceFormatError, match=r"run' is not a file \(a Concordia log is one JSON document\)"):
        read_trace(d, spec)
    with pytest.raises(TraceFormatError, match=r"gone\.json' does not exist"):
        read_trace(tmp_path / "gone.json", spec)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symbolic links")
@pytest.mark.parametrize("kind", ["span folder", "table folder", "table glob"])
def test_a_shard_that_links_to_a_file_that_is_gone_is_refused_by_name(tmp_path, kind):
    """A shard that is a link to a file since removed (a run's shards linked from a scratch folder) was left out
    without a word: the read went on without its spans or rows. A link to a file that exists, inside the folder or
    not, is read as the file."""
    d = tmp_path / "run"
    d.mkdir()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if kind == "span folder":
        shards = sorted((AS2 / "trace").glob("*.jsonl"))
        shutil.copy(shards[0], d / shards[0].name)
        shutil.copy(shards[1], outside / shards[1].name)
        os.symlink(outside / shards[1].name, d / shards[1].name)
        spec, path, name = None, d, "trace_ff.jsonl"
    else:
        (d / "a.csv").write_text("agent,tick,action,amount\na1,0,buy,1\n")
        (outside / "b.csv").write_text("agent,tick,action,amount\na2,1,buy,2\n")
        os.symlink(outside / "b.csv", d / "b.csv")
        spec, path, name = TABLE_SPEC, d if kind == "table folder" else d / "*.csv", "c.csv"
    good = read_trace(path, spec)
    assert good.report.records == (sum(len(s.read_text().splitlines()) for s in shards[:2])
                                   if kind == "span folder" else 2)
    os.symlink(outside / "removed" / name, d / name)
    with pytest.raises(TraceFormatError, match=rf"{name}' is a link to '.*removed.*{name}', which does not exist"):
        read_trace(path, spec)


@pytest.mark.parametrize("given", [False, True])
@pytest.mark.parametrize("trace", ["oasis", "concordia", "spans", "table"])
def test_a_trace_that_cannot_be_opened_is_named(tmp_path, monkeypatch, trace, given):
    """A trace file the user may not read (written by another user, a container's root) raised a bare
    PermissionError out of the OASIS and Concordia readers, and detection called it 'cannot tell the format' or a
    long table ('format table has no default spec'). (Permissions are simulated: the tests may run as root.)"""
    import builtins

    src = {"oasis": OASIS, "concordia": CONCORDIA, "spans": OTLP, "table": CSV}[trace]
    f = tmp_path / src.name
    shutil.copy(src, f)
    real = builtins.open

    def denied(file, *args, **kwargs):
        if str(file) == str(f):
            raise PermissionError(13, "Permission denied", str(file))
        return real(file, *args, **kwargs)

    spec = {"oasis": None, "concordia": None, "spans": DATA.parent.parent.parent / "docs/examples/traces/otlp.toml",
            "table": TABLE_SPEC}[trace]
    fmt = {"spans": "otel"}.get(trace, trace) if given else None
    monkeypatch.setattr(builtins, "open", denied)
    with pytest.raises(TraceFormatError, match=rf"{src.name}'?:? .*Permission denied"):
        read_trace(f, spec, format=fmt)


def test_edge_since_timestamp_after_year_9999_is_out_of_range(tmp_path):
    """A Parquet edge file's since timestamp after the year 9999 was a bare OverflowError out of the reader (pyarrow's
    to_pylist makes Python datetimes, which stop there); it is out of range, named by its edge, as the event step is.
    In range, a timestamp since is the time its ISO text in a CSV edge file is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ev = tmp_path / "ev.csv"
    ev.write_text("agent,at\n1,2026-01-01T00:30:00Z\n2,2026-01-01T01:30:00Z\n1,2026-01-01T01:45:00Z\n")
    since = ["2026-01-01T01:00:00", "2026-01-01T00:00:00"]
    us = [np.datetime64(s, "us").astype(np.int64) for s in since]
    (tmp_path / "e.csv").write_text("src,dst,since\n" + "".join(f"{a},{b},{s}Z\n" for a, b, s in zip([1, 2], [2, 1],
                                                                                                     since)))
    for name, far in (("e.parquet", False), ("far.parquet", True)):
        vals = us if not far else [us[0], np.datetime64("9999-12-31T00:00:00", "us").astype(np.int64) + 10**15]
        pq.write_table(pa.table({"src": [1, 2], "dst": [2, 1],
                                 "since": pa.array(vals, pa.int64()).cast(pa.timestamp("us", "UTC"))}), tmp_path / name)

    def spec(edges):
        return {"format": "table", "agent": {"field": "agent"}, "step": {"field": "at", "bin": "1h"},
                "features": [{"kind": "count", "name": "n"},
                             {"kind": "exposure", "name": "seen", "of": "n",
                              "edges": {"path": str(tmp_path / edges), "source": "src", "target": "dst",
                                        "since": "since"}}]}

    a, b = read_trace(ev, spec("e.parquet")).panel, read_trace(ev, spec("e.csv")).panel
    np.testing.assert_array_equal(a.values, b.values)
    assert a.values[:, :, 1].tolist() == [[0, 1], [1, 1]]  # 2 sees 1 from hour 0, 1 sees 2 from hour 1
    with pytest.raises(TraceRecordError, match=r"far\.parquet row 2: since = 100\d\d-.* is out of range \(a year "
                                               r"after 9999\)"):
        read_trace(ev, spec("far.parquet"))


def test_oasis_text_not_utf8_is_named(tmp_path):
    """A Latin-1 string stored as TEXT in an OASIS database stopped the read as "(a truncated or damaged database?)";
    then as "reading stopped after row 0: ... text that is not UTF-8", --skip-bad or not. The error now names the
    table, the row id, the column and the byte; with on_bad = 'skip' the rows holding such text are skipped and
    counted by row id, and every other row is read (pandas over the rows that are UTF-8 gives the same panel)."""
    import pandas as pd

    db = tmp_path / "latin1.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE trace(user_id INTEGER, created_at INTEGER, action TEXT, info TEXT)")
    latin = "CAST(X'4A6F73E9' AS TEXT)"  # 'José' in Latin-1
    rows = [(1, 0, "'post'", "'{}'"), (2, 0, latin, "'{}'"), (3, 0, "'post'", "'{}'"), (1, 1, "'like'", "'{}'"),
            (2, 1, "'post'", "CAST(X'7B2261223A22E9227D' AS TEXT)"), (3, 1, "'post'", "'{}'"), (1, 2, "'post'", "'{}'"),
            (2, 2, latin, "'{}'"), (3, 2, "'like'", "'{}'")]
    for r in rows:
        con.execute(f"INSERT INTO trace VALUES ({', '.join(map(str, r))})")
    con.execute("CREATE VIEW v AS SELECT * FROM trace")
    con.commit()
    con.text_factory = bytes
    ref = pd.DataFrame(con.execute("SELECT rowid, user_id, created_at, action, info FROM trace").fetchall(),
                       columns=["rowid", "user_id", "created_at", "action", "info"])
    con.close()
    spec = {"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
            "action": {"field": "action"}, "features": [{"kind": "count_each"}]}
    with pytest.raises(TraceRecordError, match=r"latin1\.db table 'trace' row 2: column 'action' holds text that is "
                                               r"not UTF-8 \(byte 0xE9 at byte 3 of the value; Latin-1 or Windows-1252 "
                                               r"text stored as TEXT\?"):
        read_trace(db, spec)
    why = ("holds text that is not UTF-8 (Latin-1 or Windows-1252 text stored as TEXT? traces are read as UTF-8: "
           "rewrite those values as UTF-8)")
    # only the columns the spec reads count: info is read where a feature reaches into it
    for reads_info in (False, True):
        read = ["action", "info"] if reads_info else ["action"]
        utf8 = ref[[all(_is_utf8(v) for v in row) for row in ref[read].itertuples(index=False)]]
        bad = [int(i) for i in ref.rowid[~ref.rowid.isin(utf8.rowid)]]
        assert bad == ([2, 5, 8] if reads_info else [2, 8])
        counts = utf8.assign(action=utf8.action.str.decode("utf-8")).pivot_table(
            index="created_at", columns=["action", "user_id"], values="rowid", aggfunc="count", fill_value=0)
        s = dict(spec, features=[{"kind": "count_each"}] + ([{"kind": "sum", "name": "a", "field": "info/a"}]
                                                             if reads_info else []))
        for batch in (65536, 2, 1):  # bad rows in the first batch, across batches, a batch of bad rows only
            for table in ("trace", "v"):  # a table resumes after the row id, a view after the rows read
                r = read_trace(db, dict(s, on_bad="skip", batch_size=batch, table=table))
                assert r.report.records == 9 and r.report.n_skipped == len(bad), (batch, table)
                assert r.report.skipped == {f"column 'action' {why}": 2, **({f"column 'info' {why}": 1}
                                                                             if reads_info else {})}
                assert sorted(loc for locs in r.report.skipped_at.values() for loc in locs) == [
                    f"{db} row {i}" for i in bad]
                p = r.panel
                assert list(p.features) == ["like", "post"] + (["a"] if reads_info else [])
                assert list(p.agent_ids) == sorted(utf8.user_id.unique())  # agent 2 holds no UTF-8 row with info
                for k, feat in enumerate(p.features[:2]):
                    for j, agent in enumerate(p.agent_ids):
                        want = counts[(feat, agent)].tolist() if (feat, agent) in counts else [0, 0, 0]
                        assert p.values[:, j, k].tolist() == want, (batch, table, feat, agent)
                if reads_info:
                    assert not p.values[:, :, 2].any()  # the '{}' of every UTF-8 row holds no a


def _is_utf8(v: bytes) -> bool:
    try:
        v.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_oasis_read_stopping_in_the_first_rows_is_not_after_row_0(tmp_path):
    """A read that stops in the first batch said "reading stopped after row 0" (no row 0 was read): it says it
    stopped in the table's first rows, and after the last row id read once a batch was read."""
    db = tmp_path / "view.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t(user_id INTEGER, created_at INTEGER, info TEXT)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(1, 0, '{"a": 1}'), (2, 0, '{"a": 2}'), (3, 1, "not json")])
    con.execute("CREATE VIEW v AS SELECT rowid AS id, user_id, created_at, json_extract(info, '$.a') AS a FROM t")
    con.commit()
    con.close()
    spec = {"format": "oasis", "table": "v", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
            "features": [{"kind": "sum", "name": "a", "field": "a"}]}
    with pytest.raises(TraceFormatError, match=r"reading table 'v' stopped in its first rows: malformed JSON"):
        read_trace(db, spec)
    with pytest.raises(TraceFormatError, match=r"reading table 'v' stopped after 1 row\(s\): malformed JSON"):
        read_trace(db, dict(spec, batch_size=1))  # (sqlite3 steps one row ahead of the rows it returns)
    # a table whose page in the middle is damaged: named after the last row id read
    bad = tmp_path / "damaged.db"
    con = sqlite3.connect(bad)
    con.execute("PRAGMA page_size = 4096")
    con.execute("CREATE TABLE trace(user_id INTEGER, created_at INTEGER, action TEXT, info TEXT)")
    con.executemany("INSERT INTO trace VALUES (?, ?, 'post', ?)", [(i % 7, i // 100, "x" * 200) for i in range(400)])
    con.commit()
    con.close()
    data = bytearray(bad.read_bytes())
    page = len(data) // 4096 // 2
    data[page * 4096:(page + 1) * 4096] = b"\xff" * 4096
    bad.write_bytes(bytes(data))
    spec = {"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at", "bin": 1},
            "action": {"field": "action"}, "batch_size": 50}
    with pytest.raises(TraceFormatError, match=r"damaged\.db'?: reading table 'trace' stopped after row id "
                                               r"[1-9][0-9]*0: database disk image is malformed"):
        read_trace(bad, spec)


def test_oasis_rows_in_log_order_under_a_covering_index(tmp_path):
    """Rows are read in rowid (log) order: where the table had an index holding every column the spec reads, SQLite
    scanned that index instead, and ``last`` took the value of the largest key (5), not of the agent's last event
    (2)."""
    db = tmp_path / "indexed.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE trace(user_id INTEGER, created_at INTEGER, action TEXT, info TEXT, amount REAL)")
    con.executemany("INSERT INTO trace VALUES (?, ?, 'post', '{}', ?)",
                    [(1, 0, 5.0), (2, 0, 7.0), (1, 0, 2.0), (2, 1, 1.0), (2, 1, 3.0)])
    con.execute("CREATE INDEX by_key ON trace(user_id, created_at, amount)")
    con.commit()
    plan = con.execute("EXPLAIN QUERY PLAN SELECT rowid, amount, created_at, user_id FROM trace").fetchall()
    import pandas as pd

    ref = {k: g.iloc[-1] for k, g in pd.read_sql("SELECT * FROM trace ORDER BY rowid", con).groupby(
        ["created_at", "user_id"])["amount"]}
    con.close()
    assert "COVERING INDEX" in str(plan)  # the scan the reader got without ORDER BY
    spec = {"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
            "features": [{"kind": "last", "name": "amount", "field": "amount"}]}
    p = read_trace(db, spec).panel
    assert p.values[:, :, 0].tolist() == [[2.0, 7.0], [2.0, 3.0]]  # agent 1's last carried into step 1
    assert all(p.values[t, list(p.agent_ids).index(a), 0] == v for (t, a), v in ref.items())


def test_a_json_line_with_a_lone_surrogate_escape_is_named_as_such_not_as_malformed_json(tmp_path):
    """``{"agent": "a\\udcff"}`` is well-formed JSON whose text is half of a UTF-16 pair; DuckDB refuses it and the row
    was called "malformed or truncated JSON". It is named for what it is; a pair (an emoji) is read as its character."""
    ev = tmp_path / "ev.jsonl"
    ev.write_text('{"agent": "b", "tick": 0}\n{"agent": "a\\udcff", "tick": 0}\n'
                  '{"agent": "c\\ud83d\\ude00", "tick": 0}\n{"agent": "d", "tick": 0\n')
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "count", "name": "posts"}]}
    with pytest.raises(TraceRecordError, match=r"ev\.jsonl row 2: a JSON \\u escape of a lone surrogate \(\\udcff: "):
        read_trace(ev, load_spec(spec))
    r = read_trace(ev, load_spec(dict(spec, on_bad="skip")))
    assert r.panel.agent_ids.tolist() == ["b", "c\U0001f600"]
    assert sorted(k.split(" (")[0] for k in r.report.skipped) == [
        "a JSON \\u escape of a lone surrogate", "not a JSON object holding any of the spec's fields"]
