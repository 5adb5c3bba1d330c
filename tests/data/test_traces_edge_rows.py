"""A bad edge row is treated as a bad event record is: refused naming its line (CSV) or row (JSON lines, Parquet, an
OASIS table) under ``on_bad = "error"``, skipped and counted by reason with its first locations under ``"skip"``,
the count reported wherever the records' skips are (the report's lines, ``trace_report.json``, ``summary.json``,
``manifest.json``, ``report.html``). Before, a line that did not split failed the whole file (or was read from a wrong
header), an empty or ``true`` endpoint was a silent ``unknown_endpoint``, a bad ``since`` was refused under
``--skip-bad`` too and named by its position among the edges, and a Latin-1 line stopped the read."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from aumann.cli import main
from aumann.data.traces import read_trace
from aumann.errors import TraceError, TraceRecordError

DATA = Path(__file__).parent / "traces"
GOOD = [("1", "2", "0"), ("2", "3", "1"), ("3", "4", "0")]


def _events(tmp_path: Path) -> Path:
    ev = tmp_path / "ev.csv"
    ev.write_text("agent,t,action\n" + "".join(f"{a},{t},post\n" for a in (1, 2, 3, 4) for t in (0, 1)))
    return ev


def _spec(edges: Path, on_bad: str = "error") -> dict:
    return {"format": "table", "on_bad": on_bad, "agent": {"field": "agent"}, "step": {"field": "t"},
            "features": [{"kind": "count", "name": "posts"},
                         {"kind": "exposure", "name": "seen", "of": "posts",
                          "edges": {"path": str(edges), "source": "src", "target": "dst", "since": "since"}}]}


def _csv(tmp_path: Path, bad: bytes | None) -> Path:
    f = tmp_path / "edges.csv"
    body = b"src,dst,since\n" + b"".join(f"{a},{b},{c}\n".encode() for a, b, c in GOOD)
    f.write_bytes(body + (bad or b""))
    return f


#: (a bad last line of a CSV edge file, the reason it is counted under, the error's words)
CSV_BAD = [
    (b"4,1,0,9\n", "a CSV line that does not split into the header's columns", "does not split"),
    (b"4\n", "a CSV line that does not split into the header's columns", "does not split"),
    (b'4,"1,0\n', "a CSV line with an unterminated quote (or text after a closing quote)", "unterminated quote"),
    (b"4,Jos\xe9,0\n", "not UTF-8 text", "not UTF-8 text"),
    (b"4,,0\n", "no usable agent id in edge field 'dst'", "no usable agent id in edge field 'dst'"),
    (b",1,0\n", "no usable agent id in edge field 'src'", "no usable agent id in edge field 'src'"),
    (b"4,1,abc\n", "edge field 'since' is not a step/timestamp, or out of range", "since = 'abc' is not a step"),
]


@pytest.mark.parametrize(("bad", "reason", "said"), CSV_BAD, ids=[b[0].decode("latin-1").strip() for b in CSV_BAD])
def test_a_bad_csv_edge_line_is_refused_by_its_line_or_skipped_and_counted(tmp_path, bad, reason, said):
    ev = _events(tmp_path)
    edges = _csv(tmp_path, bad)
    with pytest.raises(TraceRecordError, match=rf"edges\.csv line 5: .*{said}"):
        read_trace(ev, _spec(edges))
    r = read_trace(ev, _spec(edges, "skip"))
    (got, n), = r.report.edges_skipped.items()
    assert got.startswith(reason) and n == 1
    assert r.report.edges_skipped_at[got][0].endswith("edges.csv line 5")
    assert r.report.n_skipped == 0  # the event records' skips are apart
    assert r.panel.meta["edges"]["seen"]["skipped"] == 1 and r.panel.meta["edges"]["seen"]["used"] == 3
    want = read_trace(ev, _spec(_csv(tmp_path / "..", None))).panel  # the same file without the bad line
    np.testing.assert_array_equal(r.panel.values, want.values)
    assert any("skipped 1 edge row(s): " + got in line for line in r.report.lines())


def test_a_bad_csv_edge_line_is_named_by_its_line_in_the_file(tmp_path):
    """The line in the file, counted as the event tables count it: blank lines and a value over two lines too."""
    ev = _events(tmp_path)
    edges = tmp_path / "edges.csv"
    edges.write_text('src,dst,since\n1,2,0\n\n"2",3,"1"\n3,"4\n",0\n4,,0\n')
    with pytest.raises(TraceRecordError, match=r"edges\.csv line 7: no usable agent id in edge field 'dst'"):
        read_trace(ev, _spec(edges))


@pytest.mark.parametrize(("line", "reason"), [
    ("{not json", "not a JSON object holding the edge's fields"),
    ('{"src": 4, "dst": true, "since": 0}', "no usable agent id in edge field 'dst'"),
    ('{"src": 4, "dst": "", "since": 0}', "no usable agent id in edge field 'dst'"),
    ('{"src": 4, "dst": [1], "since": 0}', "no usable agent id in edge field 'dst'"),
    ('{"src": 4, "dst": 1, "since": "soon"}', "edge field 'since' is not a step/timestamp"),
])
def test_a_bad_json_lines_edge_row_is_refused_by_its_row_or_skipped_and_counted(tmp_path, line, reason):
    ev = _events(tmp_path)
    edges = tmp_path / "edges.jsonl"
    edges.write_text("".join(json.dumps({"src": int(a), "dst": int(b), "since": int(c)}) + "\n" for a, b, c in GOOD[:2])
                     + line + "\n" + json.dumps({"src": 3, "dst": 4, "since": 0}) + "\n")
    with pytest.raises(TraceRecordError, match=r"edges\.jsonl row 3: "):
        read_trace(ev, _spec(edges))
    r = read_trace(ev, _spec(edges, "skip"))
    (got, n), = r.report.edges_skipped.items()
    assert got.startswith(reason) and n == 1
    assert r.report.edges_skipped_at[got] == [f"{edges} row 3"]
    assert r.panel.meta["edges"]["seen"]["used"] == 3


def test_a_null_endpoint_of_a_parquet_edge_file_is_a_bad_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ev = _events(tmp_path)
    edges = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"src": [1, 2, None, 3], "dst": [2, 3, 1, 4], "since": [0, 1, 0, 0]}), edges)
    with pytest.raises(TraceRecordError, match=r"edges\.parquet row 3: no usable agent id in edge field 'src'"):
        read_trace(ev, _spec(edges))
    r = read_trace(ev, _spec(edges, "skip"))
    assert r.report.edges_skipped == {"no usable agent id in edge field 'src'": 1}
    assert r.panel.meta["edges"]["seen"] == {"edges": 4, "used": 3, "unknown_endpoint": 0, "skipped": 1,
                                             "no_since": 0, "duplicate": 0}


def test_an_endpoint_no_agent_has_is_not_a_bad_row(tmp_path):
    """A good id of an agent that never acted: dropped and counted as unknown_endpoint, never refused."""
    ev = _events(tmp_path)
    r = read_trace(ev, _spec(_csv(tmp_path, b"4,99,0\n")))
    assert r.panel.meta["edges"]["seen"]["unknown_endpoint"] == 1 and r.report.edges_skipped == {}


#: an OASIS spec whose exposure feature reads the database's follow table
OASIS_FOLLOW_SPEC = {"format": "oasis", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
                     "action": {"field": "action"},
                     "features": [{"kind": "count", "name": "posts", "actions": ["create_post"]},
                                  {"kind": "exposure", "of": "posts", "edges": {"table": "follow"}}]}


def _oasis_db(tmp_path, statement: str):
    """A copy of the sample OASIS database with ``statement`` applied to it."""
    db = tmp_path / "t.db"
    shutil.copy(DATA / "oasis_twitter.db", db)
    con = sqlite3.connect(db)
    con.execute(statement)
    con.commit()
    con.close()
    return db


def test_a_null_followee_in_an_oasis_follow_table_is_refused_by_its_rowid(tmp_path):
    db = _oasis_db(tmp_path, "INSERT INTO follow (follow_id, follower_id, followee_id, created_at) "
                                  "VALUES (900, 1, NULL, 0)")
    spec = OASIS_FOLLOW_SPEC
    with pytest.raises(TraceRecordError, match=r"t\.db table 'follow' row 900: no usable agent id in edge field "
                                               r"'followee_id'"):
        read_trace(db, spec)
    r = read_trace(db, spec, on_bad="skip")
    assert r.report.edges_skipped == {"no usable agent id in edge field 'followee_id'": 1}
    assert r.report.edges_skipped_at["no usable agent id in edge field 'followee_id'"] == [
        f"{db} table 'follow' row 900"]


def test_two_exposure_features_of_one_edge_file_count_its_bad_rows_once(tmp_path):
    ev = _events(tmp_path)
    spec = _spec(_csv(tmp_path, b"4,,0\n"), "skip")
    spec["features"].append(dict(spec["features"][1], name="seen_again"))
    r = read_trace(ev, spec)
    assert r.report.edges_skipped == {"no usable agent id in edge field 'dst'": 1}


def test_skipped_edge_rows_surface_where_skipped_records_do(tmp_path):
    ev = _events(tmp_path)
    spec = tmp_path / "spec.toml"
    edges = _csv(tmp_path, b"4,,0\n4,1,0,9\n")
    spec.write_text(f"""format = "table"
[agent]
field = "agent"
[step]
field = "t"
[[features]]
kind = "count"
name = "posts"
[[features]]
kind = "exposure"
name = "seen"
of = "posts"
[features.edges]
path = '{edges}'
source = "src"
target = "dst"
since = "since"
""")
    out = tmp_path / "out"
    args = ["attribute", "--trace", str(ev), "--spec", str(spec), "--indicator", "lin", "--out", str(out)]
    assert main(args) == 2  # refused without --skip-bad
    assert main([*args, "--skip-bad", "--static"]) == 0
    rep = json.loads((out / "trace_report.json").read_text())
    assert rep["n_edges_skipped"] == 2 and rep["n_skipped"] == 0
    assert rep["edges_skipped"] == {"no usable agent id in edge field 'dst'": 1,
                                    "a CSV line that does not split into the header's columns": 1}
    assert rep["edges"]["seen"]["skipped"] == 2
    assert json.loads((out / "summary.json").read_text())["trace"]["n_edges_skipped"] == 2
    assert json.loads((out / "manifest.json").read_text())["trace"]["n_edges_skipped"] == 2
    html = (out / "report.html").read_text()
    assert "skipped edge row" in html and "2 edge row(s)" in html


def test_non_utf8_text_in_an_oasis_follow_table_is_a_bad_row_not_a_failed_read(tmp_path):
    """sqlite3's decoding failed the whole edge read ("cannot read edge table 'follow': Could not decode to UTF-8"),
    --skip-bad or not; the trace table already treats such a row as a bad record."""
    db = _oasis_db(tmp_path, "UPDATE follow SET followee_id = CAST(X'4a6fe9' AS TEXT) WHERE follow_id = 2")
    spec = OASIS_FOLLOW_SPEC
    with pytest.raises(TraceRecordError, match=r"table 'follow' row 2: column 'followee_id' holds text that is not "
                                               r"UTF-8 \(byte 0xE9 at byte 2 of the value"):
        read_trace(db, spec)
    r = read_trace(db, spec, on_bad="skip")
    assert r.report.n_edges_skipped == 1
    info = r.report.edges["exposure_posts"]
    assert info["skipped"] == 1 and info["edges"] == info["used"] + info["unknown_endpoint"] + info["skipped"]


def test_the_first_bad_row_is_named_before_a_later_line_duckdb_left_out(tmp_path):
    """As in an event table, rows DuckDB read are judged before the lines it left out: a bad endpoint on line 4 was
    hidden behind a line on line 5 that does not split."""
    ev = _events(tmp_path)
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst,since\n1,2,0\n3,4,0\n4,,0\n1,3,0,9\n")
    with pytest.raises(TraceRecordError, match=r"edges\.csv line 4: no usable agent id in edge field 'dst'"):
        read_trace(ev, _spec(edges))
    r = read_trace(ev, _spec(edges, "skip"))
    assert r.report.n_edges_skipped == 2


def test_a_row_of_an_oasis_edge_view_is_named_by_its_place_not_row_none(tmp_path):
    """A view has no row id (SQLite gives it as NULL): a bad row of an edge table that is a view was named
    "table 'fv' row None". It is named by its place in the view, as a trace view's rows are."""
    db = _oasis_db(tmp_path, "INSERT INTO follow (follow_id, follower_id, followee_id, created_at) "
                             "VALUES (900, 1, NULL, 0)")
    con = sqlite3.connect(db)
    n = con.execute("SELECT count(*) FROM follow").fetchone()[0]
    con.execute("CREATE VIEW fv AS SELECT * FROM follow ORDER BY follow_id")
    con.commit()
    con.close()
    spec = json.loads(json.dumps(OASIS_FOLLOW_SPEC))
    spec["features"][1]["edges"]["table"] = "fv"
    with pytest.raises(TraceRecordError, match=rf"t\.db table 'fv' row {n}: no usable agent id in edge field "
                                               r"'followee_id'"):
        read_trace(db, spec)
    r = read_trace(db, spec, on_bad="skip")
    assert r.report.edges_skipped_at == {"no usable agent id in edge field 'followee_id'": [f"{db} table 'fv' row {n}"]}


def test_a_reddit_timestamp_in_an_oasis_trace_view_is_not_named_row_none(tmp_path):
    """The check for clock-time steps under integer steps named the first such row by its row id: in a view, which
    has none, "t.db row None: created_at holds ...". It names the view."""
    db = _oasis_db(tmp_path, "UPDATE trace SET created_at = '2025-03-01 10:00' WHERE rowid = 3")
    con = sqlite3.connect(db)
    con.execute("CREATE VIEW tv AS SELECT * FROM trace")
    con.commit()
    con.close()
    spec = dict(OASIS_FOLLOW_SPEC, table="tv")
    with pytest.raises(TraceRecordError, match=r"t\.db view 'tv' \(its rows have no row id\): created_at holds "
                                               r"'2025-03-01 10:00', a timestamp, not an integer step") as err:
        read_trace(db, spec)
    assert "None" not in str(err.value)
    with pytest.raises(TraceRecordError, match=r"t\.db row 3: created_at holds '2025-03-01 10:00', a timestamp"):
        read_trace(db, OASIS_FOLLOW_SPEC)  # a table's row: by its row id, as before


def _blob_db(tmp_path, *statements: str) -> Path:
    db = _oasis_db(tmp_path, statements[0])
    con = sqlite3.connect(db)
    for st in statements[1:]:
        con.execute(st)
    con.commit()
    con.close()
    return db


def test_an_oasis_endpoint_stored_as_a_utf8_blob_reaches_its_agent(tmp_path):
    """A followee_id stored as BLOB b'2' (bytes, not TEXT or INTEGER) was the id "b'2'": its edge was dropped as an
    unknown_endpoint. A BLOB is read as the UTF-8 text it spells, as the table reader reads a binary column."""
    want = read_trace(DATA / "oasis_twitter.db", OASIS_FOLLOW_SPEC)
    db = _blob_db(tmp_path, "UPDATE follow SET followee_id = CAST(CAST(followee_id AS TEXT) AS BLOB) "
                            "WHERE follow_id IN (2, 3)", "UPDATE follow SET follower_id = CAST('5' AS BLOB) "
                            "WHERE follow_id = 1")
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM follow WHERE typeof(followee_id) = 'blob' "
                       "OR typeof(follower_id) = 'blob'").fetchone()[0] == 3
    con.close()
    got = read_trace(db, OASIS_FOLLOW_SPEC)
    assert got.report.edges == want.report.edges and got.report.edges["exposure_posts"]["unknown_endpoint"] == 0
    np.testing.assert_array_equal(got.panel.values, want.panel.values)


def test_an_oasis_endpoint_blob_that_is_not_utf8_is_a_bad_row_not_an_unknown_endpoint(tmp_path):
    """A BLOB that spells no UTF-8 text (X'FF01') where an agent id belongs is a value of the wrong type, not a good id
    of an agent that never acted: refused by its row (or skipped and counted), as non-UTF-8 TEXT in the table is."""
    db = _blob_db(tmp_path, "UPDATE follow SET followee_id = X'FF01' WHERE follow_id = 2")
    with pytest.raises(TraceRecordError, match=r"t\.db table 'follow' row 2: column 'followee_id' holds a BLOB that "
                                               r"is not UTF-8 text \(X'FF01'\), and no agent has it as its id"):
        read_trace(db, OASIS_FOLLOW_SPEC)
    r = read_trace(db, OASIS_FOLLOW_SPEC, on_bad="skip")
    why = "column 'followee_id' holds a BLOB that is not UTF-8 text, where an agent id belongs"
    assert r.report.edges_skipped == {why: 1} and r.report.edges_skipped_at == {why: [f"{db} table 'follow' row 2"]}
    info = r.report.edges["exposure_posts"]
    assert info["unknown_endpoint"] == 0 and info["skipped"] == 1
    assert info["edges"] == info["used"] + info["unknown_endpoint"] + info["skipped"]


def test_an_oasis_blob_id_that_is_not_utf8_still_reaches_the_agent_of_the_same_blob(tmp_path):
    """Binary ids in both tables (the trace's user_id and the follow table's endpoints the same bytes) join as
    before: such a BLOB is refused only where no agent has it as its id."""
    db = _blob_db(tmp_path, "UPDATE trace SET user_id = X'FF01' WHERE user_id = 2",
                  "UPDATE follow SET followee_id = X'FF01' WHERE followee_id = 2",
                  "UPDATE follow SET follower_id = X'FF01' WHERE follower_id = 2")
    r = read_trace(db, OASIS_FOLLOW_SPEC)
    assert r.report.edges_skipped == {}
    assert r.report.edges == read_trace(DATA / "oasis_twitter.db", OASIS_FOLLOW_SPEC).report.edges


def test_an_oasis_user_id_blob_that_is_not_utf8_is_an_agent_labelled_by_its_hex_and_counted(tmp_path):
    """A user_id stored as a BLOB that spells no UTF-8 text (X'FF01': a binary id) was the agent "b'\\xff\\x01'",
    Python's repr, without a word. Such a BLOB is an id, as the follow table's endpoints read it (an endpoint of the
    same bytes reaches it): the agent is labelled X'FF01', as the readers' messages show a BLOB and as SQLite writes
    it, its records counted (``blob_ids``) and said in the summary; ``[agent] exclude`` names it so too."""
    db = _blob_db(tmp_path, "UPDATE trace SET user_id = X'FF01' WHERE user_id = 2",
                  "UPDATE follow SET followee_id = X'FF01' WHERE followee_id = 2",
                  "UPDATE follow SET follower_id = X'FF01' WHERE follower_id = 2")
    n = sqlite3.connect(db).execute("SELECT count(*) FROM trace WHERE user_id = X'FF01'").fetchone()[0]
    assert n > 0
    r = read_trace(db, OASIS_FOLLOW_SPEC)
    ids = [str(i) for i in r.panel.agent_ids]
    assert "X'FF01'" in ids and not any(i.startswith("b'") for i in ids)
    assert r.report.blob_ids == n and r.report.to_dict()["blob_ids"] == n
    assert any(line.strip().startswith(f"{n:,} record(s) give the agent id as bytes that are not UTF-8 text")
               for line in r.report.lines())
    assert r.report.edges == read_trace(DATA / "oasis_twitter.db", OASIS_FOLLOW_SPEC).report.edges  # still joined
    spec = {**OASIS_FOLLOW_SPEC, "agent": {"field": "user_id", "exclude": ["X'FF01'"]}}
    excluded = read_trace(db, spec, on_bad="skip")  # (its BLOB endpoints then reach no agent: bad edge rows)
    assert "X'FF01'" not in [str(i) for i in excluded.panel.agent_ids]
    assert excluded.report.filtered == {"agent excluded": n}
    plain = read_trace(DATA / "oasis_twitter.db", OASIS_FOLLOW_SPEC)
    assert plain.report.blob_ids == 0 and not any("not UTF-8" in line for line in plain.report.lines())


def test_an_oasis_action_blob_that_is_not_utf8_is_labelled_by_its_hex_and_counted(tmp_path):
    """An action stored as a BLOB that spells no UTF-8 text (X'FF01') was the action "b'\\xff\\x01'", Python's repr:
    a count_each feature named n_b'\\xff\\x01', without a word. It is labelled as an agent id of such bytes is,
    X'FF01' (a feature's actions list names it so), and its records are counted (``blob_actions``) and said."""
    db = _blob_db(tmp_path, "UPDATE trace SET action = X'FF01' WHERE action = 'like_post'")
    n = sqlite3.connect(db).execute("SELECT count(*) FROM trace WHERE action = X'FF01'").fetchone()[0]
    assert n > 0
    spec = {**OASIS_FOLLOW_SPEC, "features": [{"kind": "count_each", "prefix": "n_"},
                                              {"kind": "count", "name": "blobs", "actions": ["X'FF01'"]}]}
    r = read_trace(db, spec)
    assert "n_X'FF01'" in r.panel.features and not any("b'" in f for f in r.panel.features)
    assert r.panel.values[..., r.panel.features.index("blobs")].sum() == n
    assert r.report.blob_actions == n and r.report.to_dict()["blob_actions"] == n and r.report.blob_ids == 0
    assert any(line.strip().startswith(f"{n:,} record(s) give the action as bytes that are not UTF-8 text")
               for line in r.report.lines())
    plain = read_trace(DATA / "oasis_twitter.db", OASIS_FOLLOW_SPEC)
    assert plain.report.blob_actions == 0 and not any("not UTF-8" in line for line in plain.report.lines())


def test_oasis_trace_columns_stored_as_utf8_blobs_read_as_their_text(tmp_path):
    """A user_id stored as BLOB b'1' was the agent "b'1'", another than 1, and an action stored as BLOB
    b'create_post' matched no feature's actions (every post uncounted, without a word)."""
    want = read_trace(DATA / "oasis_twitter.db", OASIS_FOLLOW_SPEC)
    db = _blob_db(tmp_path, "UPDATE trace SET user_id = CAST(CAST(user_id AS TEXT) AS BLOB) WHERE rowid % 2 = 0",
                  "UPDATE trace SET action = CAST(action AS BLOB)")
    got = read_trace(db, OASIS_FOLLOW_SPEC)
    assert sorted(map(str, got.panel.agent_ids)) == sorted(map(str, want.panel.agent_ids))
    assert got.panel.values.sum() == want.panel.values.sum() > 0
    assert got.report.edges == want.report.edges


def test_an_oasis_blob_id_and_a_text_id_spelling_its_label_are_not_merged_into_one_agent(tmp_path):
    """A user_id BLOB X'FF01' is labelled by the text X'FF01'; a user_id stored as that very text is another user.
    Both were read as one agent "X'FF01'", their events added up and counted as ``merged_ids`` ("written both as a
    number and as text"), silently: two users' activity attributed to one. Refused, naming both, as two ids that
    would be one label (an id ending with a NUL) are."""
    db = _blob_db(tmp_path, "UPDATE trace SET user_id = X'FF01' WHERE user_id = 2",
                  "UPDATE trace SET user_id = 'X''FF01''' WHERE user_id = 3")
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(DISTINCT user_id) FROM trace WHERE user_id IN (X'FF01', 'X''FF01''')"
                       ).fetchone()[0] == 2
    con.close()
    with pytest.raises(TraceError, match=r"agent ids b'\\xff\\x01' \(bytes that are no UTF-8 text\) and "
                                         r"\"X'FF01'\" \(text\) in field 'user_id' would be one label \"X'FF01'\""):
        read_trace(db, OASIS_FOLLOW_SPEC)


@pytest.mark.parametrize("batch_size", [65536, 1])
def test_an_oasis_blob_action_and_a_text_action_spelling_its_label_are_not_one_count_each_feature(tmp_path, batch_size):
    """An action BLOB X'FF01' is labelled by the text X'FF01'; an action stored as that very text is another action.
    Both were one count_each feature n_X'FF01', their events added up, silently. Refused naming both, as an agent id
    BLOB and its text are, in one batch or in batches of their own (``batch_size = 1``)."""
    db = _blob_db(tmp_path, "UPDATE trace SET action = X'FF01' WHERE action = 'like_post'",
                  "UPDATE trace SET action = 'X''FF01''' WHERE action = 'create_post'")
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(DISTINCT action) FROM trace WHERE action IN (X'FF01', 'X''FF01''')"
                       ).fetchone()[0] == 2
    con.close()
    spec = {**OASIS_FOLLOW_SPEC, "features": [{"kind": "count_each", "prefix": "n_"}], "batch_size": batch_size}
    with pytest.raises(TraceError, match=r"actions b'\\xff\\x01' \(bytes that are no UTF-8 text\) and "
                                         r"\"X'FF01'\" \(text\) in field 'action' would be one count_each feature"):
        read_trace(db, spec)
    (tmp_path / "alone").mkdir()
    alone = _blob_db(tmp_path / "alone", "UPDATE trace SET action = X'FF01' WHERE action = 'like_post'")
    assert "n_X'FF01'" in read_trace(alone, spec).panel.features  # a BLOB action alone is read as before
