"""The trace readers agree with each other on the same records: the span reader (Python's json, line by line) and
the long-table reader (DuckDB) on line ends, repeated keys and NaN; detection reports damage instead of guessing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from aumann.data.traces import read_trace
from aumann.errors import TraceFormatError, TraceRecordError

DATA = Path(__file__).parent / "traces"

TABLE = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "action": {"field": "action"},
         "features": [{"kind": "count", "name": "n"}, {"kind": "sum", "name": "amount", "field": "amount"}]}
SPANS = {"format": "otel", "agent": {"field": "resource/agent.id"}, "step": {"field": "attributes/agent.tick"},
         "action": {"field": "name"},
         "features": [{"kind": "count", "name": "n"}, {"kind": "sum", "name": "amount", "field": "attributes/amount"}]}


def row(agent: str, action: str = "act", amount: str = "1", tick: int = 0) -> str:
    return f'{{"agent": "{agent}", "tick": {tick}, "action": "{action}", "amount": {amount}}}'


def span(agent: str, action: str = "act", amount: str = "1", tick: int = 0, sid: str | None = None) -> str:
    sid = sid or agent + action
    return (f'{{"trace_id": "t{sid}", "span_id": "{sid}", "name": "{action}", "resource": {{"agent.id": "{agent}"}}, '
            f'"attributes": {{"agent.tick": {tick}, "amount": {amount}}}}}')


def both(tmp_path: Path, lines: list[tuple[str, str]], sep: bytes = b"\n", **kw):
    """(table read, span read) of the same records, ``lines`` = [(table line, span line)], joined by ``sep``."""
    t, s = tmp_path / "table.jsonl", tmp_path / "spans.jsonl"
    t.write_bytes(sep.join(a.encode() for a, _ in lines) + b"\n")
    s.write_bytes(sep.join(b.encode() for _, b in lines) + b"\n")
    return read_trace(t, TABLE, **kw), read_trace(s, SPANS, **kw)


# ---------------------------------------------------------------- line ends
@pytest.mark.parametrize("where", ["between records", "inside a value"])
def test_a_bare_carriage_return_is_part_of_its_line_in_both_readers(tmp_path, where):
    # a bare \r split a span line in two (Python's universal newlines): two records where the table reader (DuckDB)
    # saw one bad line, or, inside a value, two bad lines with the lines after them misnumbered
    if where == "between records":
        t = row("a") + "\r" + row("b") + "\n" + row("c")
        s = span("a") + "\r" + span("b") + "\n" + span("c")
    else:
        t = row("a", action="x\r") + "\n" + row("c")
        s = span("a", action="x\r") + "\n" + span("c")
    tp, sp = tmp_path / "t.jsonl", tmp_path / "s.jsonl"
    tp.write_bytes(t.encode() + b"\n")
    sp.write_bytes(s.encode() + b"\n")
    for path, spec, unit in [(tp, TABLE, "row"), (sp, SPANS, "line")]:
        got = read_trace(path, spec, on_bad="skip")
        assert got.report.records == 2
        assert got.panel.agent_ids.tolist() == ["c"]
        assert got.report.n_skipped == 1
        assert next(iter(got.report.skipped_at.values())) == [f"{path} {unit} 1"]
    with pytest.raises(TraceFormatError, match=r"line 1: .*bare carriage return"):
        read_trace(sp, SPANS)


def test_crlf_line_ends_read_like_newlines_in_both_readers(tmp_path):
    tab, spa = both(tmp_path, [(row("a"), span("a")), (row("b"), span("b"))], sep=b"\r\n")
    for got in (tab, spa):
        assert got.report.records == 2 and got.report.n_skipped == 0
        assert got.panel.agent_ids.tolist() == ["a", "b"]


# ---------------------------------------------------------------- a line over the length limit
@pytest.mark.parametrize("size", [3 * 2**19, 10 * 2**20], ids=["within a block", "read on past blocks"])
@pytest.mark.parametrize("place", ["middle", "after a blank line", "last, no line end", "gzipped"])
def test_a_json_line_over_the_object_limit_is_one_bad_record_in_both_readers(tmp_path, monkeypatch, size, place):
    # a JSON lines table with one line over DuckDB's maximum_object_size (64 MiB; from about there to twice that, as
    # the line fell in DuckDB's buffers) failed the whole file, --skip-bad or not ('DuckDB cannot read ...:
    # "maximum_object_size" ... exceeded'), where the span reader skips and counts such a line; both limits are 1 MiB
    # here (the table reader's test file is a few MiB, not 130)
    import gzip

    from aumann.data.traces import duck, otel

    monkeypatch.setattr(duck, "MAX_OBJECT", 2**20)
    monkeypatch.setattr(otel, "MAX_LINE", 2**20)
    good = [(row(f"a{i % 7}", tick=i % 5, amount=str(i)), span(f"a{i % 7}", tick=i % 5, amount=str(i), sid=f"s{i}"))
            for i in range(1000)]
    pad = "p" * size
    long = (row("z", amount="5").replace("}", f', "pad": "{pad}"}}'),
            span("z", amount="5", sid="long").replace('"name"', f'"pad": "{pad}", "name"'))
    at = 999 if place.startswith("last") else 500
    lines = [*good[:at], long, *good[at:]]
    if place == "after a blank line":
        lines.insert(at, ("", ""))
    row_no, line_no = at + 1, at + 1 + (place == "after a blank line")
    end = b"" if place.startswith("last") else b"\n"
    files = {}
    for k, name in enumerate(["table.jsonl", "spans.jsonl"]):
        data = b"\n".join(x[k].encode() for x in lines) + end
        f = tmp_path / (name + ".gz" if place == "gzipped" else name)
        f.write_bytes(gzip.compress(data, 1) if place == "gzipped" else data)
        files[name] = f
    t, s = files["table.jsonl"], files["spans.jsonl"]
    with pytest.raises(TraceRecordError, match=rf"{t.name} row {row_no} \(line {line_no}\): line longer than 1 MiB"):
        read_trace(t, TABLE)
    with pytest.raises(TraceFormatError, match=rf"{s.name} line {line_no}: longer than 1 MiB"):
        read_trace(s, SPANS)
    tab, spa = read_trace(t, TABLE, on_bad="skip"), read_trace(s, SPANS, on_bad="skip")
    assert tab.report.skipped == spa.report.skipped == {"line longer than 1 MiB": 1}
    assert tab.report.skipped_at["line longer than 1 MiB"] == [f"{t} row {row_no}"]
    assert spa.report.skipped_at["line longer than 1 MiB"] == [f"{s} line {line_no}"]
    assert tab.report.records == spa.report.records == 1001
    # the other 1,000 records, every one of them, as both readers read them without the long line
    plain = tmp_path / "plain.jsonl"
    plain.write_text("\n".join(a for a, _ in good) + "\n")
    ref = read_trace(plain, TABLE)
    assert ref.report.records == 1000 and "z" not in ref.panel.agent_ids.tolist()
    for got in (tab, spa):
        assert got.panel.agent_ids.tolist() == ref.panel.agent_ids.tolist()
        np.testing.assert_array_equal(got.panel.values, ref.panel.values)
    assert ref.panel.values.sum() == 1000 + sum(range(1000))  # (the count and the amount of each record)


def test_a_json_line_at_the_object_limit_is_read(tmp_path, monkeypatch):
    # the limit is the longest line held (its line end not counted), not one byte less
    from aumann.data.traces import duck

    monkeypatch.setattr(duck, "MAX_OBJECT", 2**20)
    head = row("z", amount="5").replace("}", ', "pad": "')
    line = head + "p" * (2**20 - len(head) - 2) + '"}'
    assert len(line) == 2**20
    f = tmp_path / "t.jsonl"
    f.write_text(row("a") + "\n" + line + "\r\n" + row("b") + "\n")
    got = read_trace(f, TABLE)
    assert got.report.records == 3 and got.report.n_skipped == 0
    assert sorted(got.panel.agent_ids.tolist()) == ["a", "b", "z"]
    f.write_text(row("a") + "\n" + line + "p\n" + row("b") + "\n")  # one byte over (bad JSON too, but never read)
    with pytest.raises(TraceRecordError, match=r"t\.jsonl row 2 \(line 2\): line longer than 1 MiB"):
        read_trace(f, TABLE)


# ---------------------------------------------------------------- detection reports damage
def _spans_gz(tmp_path: Path, damage: str) -> Path:
    import gzip

    text = "".join(f.read_text() for f in sorted((DATA / "agentsociety2_run" / "trace").glob("*.jsonl")))
    raw = bytearray(gzip.compress(text.encode() * 5))
    if damage == "header byte":
        raw[20] ^= 0xFF  # the deflate block's header, the first bytes after gzip's 10-byte header
    else:  # cut short within the first line
        raw = raw[:40]
    p = tmp_path / "spans.jsonl.gz"
    p.write_bytes(bytes(raw))
    return p


@pytest.mark.parametrize("damage", ["header byte", "cut short"])
@pytest.mark.parametrize("given", ["file", "folder"])
def test_a_damaged_gzipped_span_file_read_without_a_spec_is_named_damaged_not_a_table(tmp_path, damage, given):
    # its first line could not be read, so the span sniff said no and the table sniff said yes by the name: 'format
    # 'table' has no default spec: give --spec'
    from aumann.data.traces import detect_format

    p = _spans_gz(tmp_path, damage)
    if given == "folder":
        (tmp_path / "trace").mkdir()
        p = p.rename(tmp_path / "trace" / p.name).parent
    for call in (lambda: detect_format(p), lambda: read_trace(p)):
        with pytest.raises(TraceFormatError, match=r"spans\.jsonl\.gz' is a damaged or truncated gzip file"):
            call()


def test_an_agentsociety2_run_folder_names_the_traces_it_holds(tmp_path, capsys):
    # 'cannot tell the format of run': the folder holds spans (trace/) and replay tables (replay/), two traces
    import shutil

    from aumann.cli import main

    run = tmp_path / "run"
    shutil.copytree(DATA / "agentsociety2_run", run)
    with pytest.raises(TraceFormatError, match=r"AgentSociety 2 run folder.*--trace .*run/trace\).*replay/"
                                               r"social_media_agent_state\.\*\.jsonl"):
        read_trace(run)
    assert main(["attribute", "--trace", str(run), "--indicator", "lin", "--out", str(tmp_path / "o")]) == 2
    assert f"--trace {run / 'trace'}" in capsys.readouterr().err
    assert read_trace(run / "trace").report.records > 0  # what it names reads


# ---------------------------------------------------------------- edge files: the event tables' checks
def _exposure_spec(edges: Path) -> dict:
    return {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "count", "name": "posts"},
                         {"kind": "exposure", "name": "seen", "of": "posts",
                          "edges": {"path": str(edges), "source": "src", "target": "dst"}}]}


def _write(path: Path, header: list[str], rows: list[list[str]], encoding: str = "utf-8") -> Path:
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols = [pa.array([r[i] for r in rows]) for i in range(len(header))]
        pq.write_table(pa.Table.from_arrays(cols, names=header), path)
    elif path.suffix == ".jsonl":
        import json

        path.write_bytes("".join(json.dumps(dict(zip(header, r))) + "\n" for r in rows).encode(encoding))
    else:
        path.write_bytes(("\n".join(",".join(x) for x in [header, *rows]) + "\n").encode(encoding))
    return path


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_an_edge_file_naming_an_endpoint_column_twice_is_refused_as_event_tables_are(tmp_path, kind):
    # src,dst,dst: DuckDB read the first dst and renamed the other dst_1, so a's edge went to b (seen = 1 at a) where
    # the file may have meant c, without a word
    from aumann.errors import TraceSchemaError

    events = _write(tmp_path / "ev.csv", ["agent", "tick"], [["a", "0"], ["b", "0"], ["c", "0"]])
    edges = _write(tmp_path / f"edges.{kind}", ["src", "dst", "dst"], [["a", "b", "c"]])
    with pytest.raises(TraceSchemaError) as got:
        read_trace(events, _exposure_spec(edges))
    same = _write(tmp_path / f"ev2.{kind}", ["agent", "tick", "tick"], [["a", "0", "1"]])
    with pytest.raises(TraceSchemaError) as want:
        read_trace(same, _exposure_spec(edges))
    assert str(got.value) == str(want.value).replace(str(same), str(edges)).replace(
        "['tick']", "['dst']").replace("['agent', 'tick', 'tick']", "['src', 'dst', 'dst']")


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_utf16_edge_file_is_refused_naming_its_encoding_as_event_tables_are(tmp_path, kind):
    # DuckDB's 'Invalid unicode (byte sequence mismatch) detected' / 'UTF-16 encoding is not supported'
    events = _write(tmp_path / "ev.csv", ["agent", "tick"], [["a", "0"], ["b", "0"]])
    edges = _write(tmp_path / f"edges.{kind}", ["src", "dst"], [["a", "b"]], encoding="utf-16")
    with pytest.raises(TraceFormatError) as got:
        read_trace(events, _exposure_spec(edges))
    ev16 = _write(tmp_path / f"ev16.{kind}", ["agent", "tick"], [["a", "0"]], encoding="utf-16")
    with pytest.raises(TraceFormatError) as want:
        read_trace(ev16, _exposure_spec(edges))
    assert "is UTF-16 text (it starts with the byte-order mark FF FE)" in str(got.value)
    assert str(got.value) == str(want.value).replace(str(ev16), str(edges))


@pytest.mark.parametrize("events", ["numbers", "text"])
def test_a_csv_edge_endpoint_spelling_a_whole_number_reaches_the_agent_its_event_table_has(tmp_path, events):
    # a CSV column of numbers reads 1.0 as the id 1, but edge endpoints are read as text: '1.0' reached no agent
    ids = ["1.0", "2"] + (["x"] if events == "text" else [])
    ev = _write(tmp_path / "ev.csv", ["agent", "tick"], [[i, "0"] for i in ids])
    for dst in ("1.0", "1", "1e0"):
        edges = _write(tmp_path / "edges.csv", ["src", "dst"], [["2", dst]])
        got = read_trace(ev, _exposure_spec(edges))
        agents = got.panel.agent_ids.tolist()
        assert sorted(map(str, agents)) == (["1", "2"] if events == "numbers" else ["1.0", "2", "x"])
        seen = got.panel.values[0, :, 1].tolist()
        if events == "text" and dst != "1.0":  # text ids: '1' and '1e0' are no agent of the table
            assert got.panel.meta["edges"]["seen"]["unknown_endpoint"] == 1 and sum(seen) == 0, dst
        else:
            assert got.panel.meta["edges"]["seen"]["used"] == 1, dst
            assert seen[agents.index("2" if events == "text" else 2)] == 1, dst


@pytest.mark.parametrize(("agents", "kind", "dst", "reached"), [
    ([1, 2], "csv", " 1", None),  # spaces around an id are part of it: ' 1' is no agent 1 (it was)
    ([1, 2], "csv", "01", None),  # a leading zero makes text: '01' is no agent 1 (it was)
    ([1, 2], "csv", "+1", None),
    ([1, 2], "csv", "1.0", 1),  # a CSV column of numbers reads 1.0 as the id 1: an edge file's text does too
    ([1, 2], "csv", "1e0", 1),
    ([1, 2], "csv", "1", 1),  # 1 and "1" are one agent
    ([1, 1, "01", 2], "csv", "1", 1),  # the edge went to '01', whose text also read as the number 1
    ([1, 1, "01", 2], "csv", "01", "01"),
    (["1.0", "2"], "csv", "1.0", "1.0"),  # an agent whose id is the text itself comes first
    ([1, 2], "jsonl", "1.0", None),  # a JSON text "1.0" is the text it is, as an agent id written so is
    ([1, 2], "jsonl", True, "bad"),  # a JSON true is no id (it reached agent 1: True == 1 in a dict): a bad row
    ([1, 2], "jsonl", 1.0, 1),
])
def test_an_edge_endpoint_reaches_the_agent_the_ids_rule_names(tmp_path, agents, kind, dst, reached):
    ev = tmp_path / "ev.jsonl"
    ev.write_text("".join(json.dumps({"agent": a, "tick": 0}) + "\n" for a in agents))
    edges = tmp_path / f"edges.{kind}"
    if kind == "csv":
        edges.write_text(f"src,dst\n2,{dst}\n")
    else:
        edges.write_text(json.dumps({"src": 2, "dst": dst}) + "\n")
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "count", "name": "n"}, {"kind": "exposure", "name": "exp", "of": "n",
                                                           "edges": {"path": str(edges), "source": "src",
                                                                     "target": "dst"}}]}
    if reached == "bad":  # as an event whose agent id is true: refused, or skipped and counted
        with pytest.raises(TraceRecordError, match=r"edges\.jsonl row 1: no usable agent id in edge field 'dst'"):
            read_trace(ev, spec)
        spec["on_bad"] = "skip"
    got = read_trace(ev, spec).panel
    ids = [str(a) for a in got.agent_ids.tolist()]
    exp = got.values[0, ids.index("2"), 1]
    if reached == "bad":
        assert got.meta["edges"]["exp"]["skipped"] == 1 and got.meta["edges"]["exp"]["unknown_endpoint"] == 0
        assert exp == 0
    elif reached is None:
        assert got.meta["edges"]["exp"]["unknown_endpoint"] == 1 and exp == 0
    else:
        assert got.meta["edges"]["exp"]["used"] == 1
        assert exp == agents.count(reached)  # the posts of the agent reached (1 has two where '01' is there)


@pytest.mark.parametrize("kind", ["csv", "csv quoted", "csv.gz quoted", "jsonl", "jsonl.gz"])
def test_an_edge_file_with_a_byte_order_mark_reads_like_one_without_as_event_tables_do(tmp_path, kind):
    # DuckDB refused a JSON lines edge file starting with a UTF-8 byte-order mark ('byte order mark (BOM) is not
    # supported'), which the event tables read; after the mark a quoted first CSV column name kept its quotes
    # ('"src"'), in an event table too
    import gzip
    import json

    ext = kind.split()[0]
    if ext.startswith("csv"):
        text = ('"src",dst\n' if "quoted" in kind else "src,dst\n") + "a,b\nc,b\n"
    else:
        text = "".join(json.dumps({"src": s, "dst": "b"}) + "\n" for s in "ac")
    events = _write(tmp_path / "ev.csv", ["agent", "tick"], [["a", "0"], ["b", "0"], ["c", "1"]])
    want = None
    for bom in (b"", b"\xef\xbb\xbf"):
        data = bom + text.encode()
        edges = tmp_path / f"edges{len(bom)}.{ext}"
        edges.write_bytes(gzip.compress(data) if ext.endswith(".gz") else data)
        got = read_trace(events, _exposure_spec(edges))
        assert got.panel.meta["edges"]["seen"]["used"] == 2
        if want is None:
            want = got.panel.values
        np.testing.assert_array_equal(got.panel.values, want)
    ev = tmp_path / "quoted.csv"  # the same in an event table
    ev.write_bytes(b'\xef\xbb\xbf"agent",tick\na,0\nb,0\nc,1\n')
    np.testing.assert_array_equal(read_trace(ev, _exposure_spec(tmp_path / f"edges0.{ext}")).panel.values, want)


# ---------------------------------------------------------------- NaN and empty text: one rule
def _nan_traces(tmp_path: Path, value: str) -> dict[str, tuple[Path, dict]]:
    """The records (a, 0, 2), (b, 0, <value>), (b, 1, 3) in every reader's format, ``value`` as each writes it."""
    import sqlite3

    import pyarrow as pa
    import pyarrow.parquet as pq

    text = {"NaN": "NaN", "nan": "nan", "empty": ""}[value]
    out: dict[str, tuple[Path, dict]] = {}
    p = tmp_path / "numbers.csv"  # a column DuckDB reads as numbers
    p.write_text(f"agent,tick,action,amount\na,0,act,2\nb,0,act,{text}\nb,1,act,3\n")
    out["csv"] = (p, TABLE)
    p = tmp_path / "words.csv"  # a column DuckDB reads as text (a later value is a word: refused on its own)
    p.write_text(f"agent,tick,action,amount\na,0,act,2\nb,0,act,{text}\nb,1,act,3\nc,1,act,many\n")
    out["csv text column"] = (p, TABLE)
    json_forms = {"bare NaN": "NaN", "quoted": f'"{text}"'} if value == "NaN" else {"quoted": f'"{text}"'}
    for form, tok in json_forms.items():
        p = tmp_path / f"t-{form}.jsonl"
        p.write_text("\n".join([row("a", amount="2"), row("b", amount=tok), row("b", amount="3", tick=1)]) + "\n")
        out[f"jsonl {form}"] = (p, TABLE)
        p = tmp_path / f"s-{form}.jsonl"
        spans = [span("a", amount="2"), span("b", amount=tok), span("b", amount="3", tick=1, sid="b1")]
        p.write_text("\n".join(spans) + "\n")
        out[f"spans {form}"] = (p, SPANS)
    for form, col in {"text": pa.array(["2", text, "3"]),
                      "float": pa.array([2.0, float("nan") if value != "empty" else None, 3.0])}.items():
        p = tmp_path / f"p-{form}.parquet"
        pq.write_table(pa.table({"agent": ["a", "b", "b"], "tick": [0, 0, 1], "action": ["act"] * 3, "amount": col}), p)
        out[f"parquet {form}"] = (p, TABLE)
    p = tmp_path / "oasis.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE trace (user_id TEXT, created_at INTEGER, action TEXT, amount)")
    con.executemany("INSERT INTO trace VALUES (?, ?, ?, ?)", [("a", 0, "act", 2), ("b", 0, "act", text),
                                                              ("b", 1, "act", 3)])
    con.commit()
    con.close()
    out["oasis text"] = (p, {**TABLE, "format": "oasis", "agent": {"field": "user_id"},
                             "step": {"field": "created_at"}})
    return out


@pytest.mark.parametrize("value", ["NaN", "nan", "empty"])
def test_nan_and_empty_text_are_missing_values_in_every_reader(tmp_path, value):
    # "NaN" in a CSV column of numbers was a missing value, in a column DuckDB read as text, a JSON string, a Parquet
    # text column or an SQLite text value it was a bad record (refused, or skipped with its event and its count)
    for name, (path, spec) in _nan_traces(tmp_path, value).items():
        got = read_trace(path, spec, on_bad="skip")
        p = got.panel
        a, b = p.agent_ids.tolist().index("a"), p.agent_ids.tolist().index("b")
        assert p.values[:, [a, b], :].tolist() == [[[1, 2], [1, 0]], [[0, 0], [1, 3]]], name  # n, amount
        assert got.report.missing_values.get(spec["features"][1]["field"]) == 1, name
        assert got.report.n_skipped == (1 if name == "csv text column" else 0), name  # the word 'many' only
        assert any("1 event(s) without a value in field" in line for line in got.report.lines()), name


@pytest.mark.parametrize("value", ['"NaN"', '""', "NaN", "null"])
def test_a_step_that_is_nan_or_empty_text_has_no_step_in_both_readers(tmp_path, value):
    t, s = tmp_path / "t.jsonl", tmp_path / "s.jsonl"
    t.write_text(row("a") + "\n" + row("b").replace('"tick": 0', f'"tick": {value}') + "\n")
    s.write_text(span("a") + "\n" + span("b").replace('"agent.tick": 0', f'"agent.tick": {value}') + "\n")
    for path, spec, unit in [(t, TABLE, "row"), (s, SPANS, "line")]:
        with pytest.raises(Exception, match=rf"{unit} 2: no step value in field"):
            read_trace(path, spec)


# ---------------------------------------------------------------- agent ids 1 and 1.0
@pytest.mark.parametrize("first", ["1.0 first", "1 first"])
def test_a_whole_valued_float_agent_id_is_the_integer_id_in_any_order(tmp_path, first):
    # OASIS's user_id as INTEGER in one row and REAL in another (a table without INTEGER affinity keeps 1.0 a REAL):
    # Python's 1 == 1.0 merged them into whichever came first, silently; 1.0 first made every id text ('1.0', '2')
    import sqlite3

    ids = [1.0, 1, 2] if first == "1.0 first" else [1, 1.0, 2]
    db = tmp_path / "oasis.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE trace (user_id, created_at, action, info)")  # no affinity: 1.0 stays REAL
    con.executemany("INSERT INTO trace VALUES (?, 0, 'post', '{}')", [(i,) for i in ids])
    con.commit()
    assert [r[0] for r in con.execute("SELECT typeof(user_id) FROM trace")].count("real") == 1
    con.close()
    sp = tmp_path / "spans.jsonl"
    sp.write_text("".join(span("x", sid=str(k)).replace('"agent.id": "x"', f'"agent.id": {i}') + "\n"
                          for k, i in enumerate(ids)))
    csv = tmp_path / "table.csv"  # DuckDB's sniffer reads the column as DOUBLE: the ids were text, '1.0' and '1'
    csv.write_text("agent,tick,action,amount\n" + "".join(f"{i},0,post,1\n" for i in ids))
    js = tmp_path / "table.jsonl"
    js.write_text("".join(row("x").replace('"x"', str(i)) + "\n" for i in ids))
    reads = {"oasis": read_trace(db), "spans": read_trace(sp, SPANS), "csv": read_trace(csv, TABLE),
             "jsonl": read_trace(js, TABLE)}
    for name, got in reads.items():
        assert got.panel.agent_ids.tolist() == [1, 2], name
        assert got.panel.agent_ids.dtype.kind == "i", name
        assert got.panel.values[0, :, 0].tolist() == [2, 1], name  # events of agent 1, of agent 2
        assert got.report.float_ids == 1, name
        assert any("1 record(s) give the agent id as a whole-valued float" in line for line in got.report.lines())


@pytest.mark.parametrize("text", ["in the first rows", "further down"])
def test_a_csv_agent_column_holding_text_reads_every_id_as_written(tmp_path, text):
    # a column of numbers is read as numbers (1.0 is the id 1); one that also holds text is text: '1.0' is not '1',
    # as a JSON "1.0" is not "1", wherever the text is (DuckDB's sniffer looks at the first 20,480 rows only)
    pad = [] if text == "in the first rows" else ["7.5"] * 25_000
    p = tmp_path / "ids.csv"
    p.write_text("agent,tick,action,amount\n" + "".join(f"{i},0,post,1\n" for i in [*pad, "1.0", "1", "x"]))
    got = read_trace(p, TABLE)
    assert sorted(got.panel.agent_ids.tolist()) == sorted({*pad, "1.0", "1", "x"})
    assert got.report.float_ids == 0 and got.report.n_skipped == 0
    q = tmp_path / "numbers.csv"  # the same further down, without the text: numbers
    q.write_text("agent,tick,action,amount\n" + "".join(f"{i},0,post,1\n" for i in [*pad, "1.0", "1", "1e0"]))
    got = read_trace(q, TABLE)
    assert got.panel.agent_ids.tolist() == ([1] if not pad else ["1", "7.5"])  # 7.5 and 1: read as text labels
    assert got.panel.values[0, got.panel.agent_ids.tolist().index(1 if not pad else "1"), 0] == 3
    assert got.report.float_ids == 2  # 1.0 and 1e0


@pytest.mark.parametrize("odd", ["0x10", "1_000", "x further down", "1.0 further down"])
def test_a_csv_agent_column_of_integers_reads_other_values_as_written_not_cast(tmp_path, odd):
    # DuckDB's sniffer takes the column for integers, and its cast read 0x10 as 16 and 1_000 as 1000 (two agents
    # merged into one, silently), and refused text below the rows it sniffed as a bad line ('a CSV value that does
    # not read as its column's detected type'), where the JSON lines table reads each id as written
    value = odd.split()[0]
    pad = ["7"] * (25_000 if "further" in odd else 0)
    ids = [*pad, "1", value, "16", "1000"]
    csv = tmp_path / "ids.csv"
    csv.write_text("agent,tick,action,amount\n" + "".join(f"{i},0,post,1\n" for i in ids))
    js = tmp_path / "ids.jsonl"  # integers as JSON numbers, the rest as JSON text
    js.write_text("".join(row("x").replace('"x"', i if i.isdigit() or i == "1.0" else f'"{i}"') + "\n" for i in ids))
    tab, jsl = read_trace(csv, TABLE), read_trace(js, TABLE)
    for got in (tab, jsl):
        assert got.report.n_skipped == 0
        assert got.panel.agent_ids.tolist() == jsl.panel.agent_ids.tolist()
        np.testing.assert_array_equal(got.panel.values, jsl.panel.values)
    n = len(set(ids)) - (value == "1.0")  # 1.0 is the id 1 in a column of numbers
    assert tab.panel.N == n


def test_a_nan_agent_id_in_a_float_column_is_no_id(tmp_path):
    # a Parquet column of float ids: NaN was an agent of its own, 'nan', and the others were text ('1.0', '2.0')
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"agent": [1.0, float("nan"), 2.0], "tick": [0, 0, 0], "action": ["a"] * 3,
                             "amount": [1.0] * 3}), p)
    got = read_trace(p, TABLE, on_bad="skip")
    assert got.panel.agent_ids.tolist() == [1, 2]
    assert got.report.skipped == {"no usable agent id in field 'agent'": 1}
    with pytest.raises(Exception, match="row 2: no usable agent id"):
        read_trace(p, TABLE)


def test_an_infinite_agent_id_is_no_id_in_csv_and_json_lines(tmp_path):
    # 1e400 and 1e500 both read as inf: in a CSV column of numbers they were one agent 'inf' (n = 2), silently, and
    # the other ids became text ('2'); an id that is not a finite number is no id, as NaN is
    csv = tmp_path / "ids.csv"
    csv.write_text("agent,tick,action,amount\n1e400,0,a,1\n1e500,0,a,2\n2,1,a,3\n")
    jl = tmp_path / "ids.jsonl"
    jl.write_text('{"agent": 1e400, "tick": 0, "action": "a", "amount": 1}\n'
                  '{"agent": 2, "tick": 1, "action": "a", "amount": 3}\n')
    for path, bad in ((csv, 2), (jl, 1)):
        got = read_trace(path, TABLE, on_bad="skip")
        assert got.panel.agent_ids.tolist() == [2], path.name
        assert got.report.skipped == {"no usable agent id in field 'agent'": bad}, path.name
        with pytest.raises(Exception, match="no usable agent id"):
            read_trace(path, TABLE)


@pytest.mark.parametrize("late", ["a fraction", "a text id", "a text amount"])
def test_a_json_lines_value_below_the_rows_duckdb_samples_reads_as_the_span_reader_reads_it(tmp_path, late):
    # DuckDB's JSON reader takes a field's type from the first 20,480 records and casts the rest to it: an amount of
    # 2.5 below integers was read as 2, silently, and a text agent id below integer ids became NULL ('no usable agent
    # id'); the span reader (Python's json) reads each value as written
    n = 20_480 + 5
    odd = {"a fraction": ('"b"', "2.5"), "a text id": ('"x"', "2"), "a text amount": ('"b"', '"many"')}[late]
    t_lines = [row("x").replace('"x"', "7") for _ in range(n)] + [
        row("x").replace('"x"', odd[0]).replace('"amount": 1', f'"amount": {odd[1]}')]
    s_lines = [span("x", sid=str(k)).replace('"agent.id": "x"', '"agent.id": 7') for k in range(n)] + [
        span("x", sid="last").replace('"agent.id": "x"', f'"agent.id": {odd[0]}').replace(
            '"amount": 1', f'"amount": {odd[1]}')]
    tab, spa = both(tmp_path, list(zip(t_lines, s_lines)), on_bad="skip")
    for got in (tab, spa):
        assert got.panel.agent_ids.tolist() == spa.panel.agent_ids.tolist()
        np.testing.assert_array_equal(got.panel.values, spa.panel.values)
        assert [(r.split("'")[-2].split("/")[-1], k) for r, k in got.report.skipped.items()] == (
            [("amount", 1)] if late == "a text amount" else [])  # 'amount' / 'attributes/amount': not a number
    ids = spa.panel.agent_ids.tolist()
    if late == "a text amount":
        assert ids == [7]
    else:
        assert spa.panel.values[0, ids.index(odd[0].strip('"'))].tolist() == [1, 2.5 if late == "a fraction" else 2]


# ---------------------------------------------------------------- a key given twice
@pytest.mark.parametrize(("twice", "path"), [("agent", "agent"), ("amount", "amount"), ("tick", "tick")])
def test_a_key_the_spec_reads_given_twice_is_one_bad_record_in_both_readers(tmp_path, twice, path):
    # {"agent": "x", "agent": "y"}: DuckDB (long tables) read the first value, Python's json (spans) the last, so the
    # two readers built different agents, amounts and steps from the same line
    first = {"agent": '"x", "agent": "y"', "amount": '5, "amount": 9', "tick": '0, "tick": 1'}[twice]
    t_line = ('{"agent": ' + ('"b"' if twice != "agent" else first) + ', "tick": ' + (first if twice == "tick" else "0")
              + ', "action": "act", "amount": ' + (first if twice == "amount" else "1") + "}")
    s_first = first.replace('"agent":', '"agent.id":').replace('"tick":', '"agent.tick":')
    s_line = ('{"trace_id": "tb", "span_id": "b", "name": "act", "resource": {"agent.id": '
              + (s_first if twice == "agent" else '"b"') + '}, "attributes": {"agent.tick": '
              + (s_first if twice == "tick" else "0") + ', "amount": ' + (s_first if twice == "amount" else "1") + "}}")
    tab, spa = both(tmp_path, [(row("a"), span("a")), ("", ""), (t_line, s_line), (row("c"), span("c"))],
                    on_bad="skip")
    spath = {"agent": "resource/agent.id", "amount": "attributes/amount", "tick": "attributes/agent.tick"}[twice]
    for got, p, unit, where in [(tab, path, "row", 2), (spa, spath, "line", 3)]:
        assert got.panel.agent_ids.tolist() == ["a", "c"]
        reason = f"a JSON object gives key {p!r} twice (which value is meant is ambiguous)"
        assert got.report.skipped == {reason: 1}
        assert got.report.skipped_at[reason] == [f"{tmp_path / ('table' if unit == 'row' else 'spans')}.jsonl "
                                                 f"{unit} {where}"]
    with pytest.raises(Exception, match=r"table\.jsonl row 2: a JSON object gives key"):
        read_trace(tmp_path / "table.jsonl", TABLE)
    with pytest.raises(Exception, match=r"spans\.jsonl line 3: a JSON object gives key"):
        read_trace(tmp_path / "spans.jsonl", SPANS)


def test_a_key_given_twice_that_the_spec_does_not_read_is_no_bad_record(tmp_path):
    tab, spa = both(tmp_path, [(row("a").replace("}", ', "note": 1, "note": 2}'),
                                span("a").replace('"name"', '"note": 1, "note": 2, "name"'))])
    for got in (tab, spa):
        assert got.panel.agent_ids.tolist() == ["a"] and got.report.n_skipped == 0


def test_a_key_given_twice_is_found_past_a_block_and_named_by_its_row(tmp_path, monkeypatch):
    # rows as DuckDB counts them (blank lines are no rows) across the blocks the first look reads
    from aumann.data.traces import jsonlines

    lines = [row(f"a{i}") if i % 7 else "" for i in range(1, 400)]
    lines[300] = row("z").replace('"agent": "z"', '"agent": "z", "agent": "y"')
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    rows = [x for x in lines if x]
    want = rows.index(lines[300]) + 1
    real = jsonlines._opens

    class Small:  # 100-byte blocks
        def __init__(self, f):
            self.fh = real(f)

        def read(self, n=-1):
            return self.fh.read(100 if n > 100 else n)

        def seek(self, *a):
            return self.fh.seek(*a)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

    monkeypatch.setattr(jsonlines, "_opens", Small)
    got = read_trace(p, TABLE, on_bad="skip")
    assert next(iter(got.report.skipped_at.values())) == [f"{p} row {want}"]
    assert got.report.records == len(rows) and got.panel.N == len(rows) - 1


@pytest.mark.parametrize(("where", "key"), [("resource", "agent.id"), ("attributes", "amount"),
                                            ("attributes", "tick"), ("attributes", "note")])
def test_an_otlp_attribute_list_giving_a_key_the_spec_reads_twice_is_one_bad_record(tmp_path, where, key):
    # [{"key": "agent.id", ...}, {"key": "agent.id", ...}]: the last value won, silently, where a flat span line
    # giving a key twice ({"agent.id": "x", "agent.id": "y"}) is a bad record
    import json

    def attr(k: str, v: object) -> dict:
        return {"key": k, "value": {"stringValue": v} if isinstance(v, str) else {"intValue": str(v)}}

    def envelope(agent: str, twice: bool) -> str:
        res = [attr("agent.id", agent)] + ([attr("agent.id", "z")] if twice and where == "resource" else [])
        sp = [{"traceId": f"t{agent}{n}", "spanId": f"{n}", "name": "act",
               "attributes": [attr("tick", 0), attr("amount", 1), attr("note", "x")]
               + ([attr(key, 7)] if twice and where == "attributes" and n == 0 else [])} for n in range(2)]
        return json.dumps({"resourceSpans": [{"resource": {"attributes": res},
                                              "scopeSpans": [{"scope": {}, "spans": sp}]}]})

    spec = {"format": "otel", "agent": {"field": "resource/agent.id"}, "step": {"field": "attributes/tick"},
            "features": [{"kind": "count", "name": "n"}, {"kind": "sum", "name": "amount",
                                                          "field": "attributes/amount"}]}
    p = tmp_path / "otlp.jsonl"
    p.write_text(envelope("a", False) + "\n" + envelope("b", True) + "\n")
    got = read_trace(p, spec, on_bad="skip")
    if key == "note":  # a key the spec does not read may repeat
        assert got.report.n_skipped == 0 and got.panel.values[0].tolist() == [[2, 2], [2, 2]]
        return
    reason = f"a JSON object gives key '{where}/{key}' twice (which value is meant is ambiguous)"
    n = 2 if where == "resource" else 1  # the resource's key: both its spans; a span's own key: that span
    assert got.report.skipped == {reason: n} and got.report.skipped_at[reason] == [f"{p} line 2"] * n
    assert got.panel.agent_ids.tolist() == (["a"] if n == 2 else ["a", "b"])
    assert got.panel.values[0].tolist() == ([[2, 2]] if n == 2 else [[2, 2], [1, 1]])
    with pytest.raises(TraceRecordError, match=rf"otlp\.jsonl line 2: a JSON object gives key '{where}/{key}' twice"):
        read_trace(p, spec)


# an OTLP envelope line, as text (a key given twice cannot be written with json.dumps): resource a with spans 1 and 2
# in one scope, resource b with span 3; each span at tick 0 with amount = its number
_ATTR = '{"key": "%s", "value": {"%s": "%s"}}'


def _span(t: str, n: int, twice: str = "") -> str:
    sid = f'"spanId": "{n}"' + (', "spanId": "8"' if twice.endswith("/spanId") else "")
    tid = f'"traceId": "{t}{n}"' + (', "traceId": "t8"' if twice.endswith("/traceId") else "")
    tick = _ATTR % ("tick", "intValue", 0)
    amount = _ATTR % ("amount", "intValue", n)
    if twice == "attributes/amount":  # the value object gives its value twice
        amount = amount.replace('"intValue": "2"', '"intValue": "2", "intValue": "5"')
    if twice.endswith("/attributes/key"):  # an attribute object gives its key twice
        tick = tick.replace('"key": "tick"', '"key": "tick", "key": "note"')
    attrs = f'"attributes": [{tick}, {amount}]'
    if twice.endswith("/spans/attributes"):
        attrs = f'"attributes": [], {attrs}'
    return f'{{{tid}, {sid}, "name": "act", {attrs}}}'


def _envelope(twice: str = "", a: str = "a", b: str = "b", t: str = "t") -> str:
    """The envelope with one key given twice where ``twice`` says (in resource a's objects, or in span 2)."""
    s1, s2, s3 = _span(t, 1), _span(t, 2, twice), _span(t, 3)
    spans = f'"spans": [{s1}, {s2}]'
    if twice == "resourceSpans/scopeSpans/spans":  # json kept the second list: spans 1 and 2 were lost
        spans = f'"spans": [{s1}, {s2}], "spans": [{_span(t, 9)}]'
    scope = '"scope": {"name": "sim"}' + (', "scope": {}' if twice == "resourceSpans/scopeSpans/scope" else "")
    again = ', "attributes": []' if twice == "resourceSpans/resource/attributes" else ""
    res = f'"resource": {{"attributes": [{_ATTR % ("agent.id", "stringValue", a)}]{again}}}'
    if twice == "resourceSpans/resource":
        res = '"resource": {"attributes": []}, ' + res
    scopes = f'"scopeSpans": [{{{scope}, {spans}}}]'
    if twice == "resourceSpans/scopeSpans":
        scopes += f', "scopeSpans": [{{"scope": {{}}, "spans": [{_span(t, 9)}]}}]'
    res_a = f"{{{res}, {scopes}}}"
    agent_b = _ATTR % ("agent.id", "stringValue", b)
    res_b = f'{{"resource": {{"attributes": [{agent_b}]}}, "scopeSpans": [{{"scope": {{}}, "spans": [{s3}]}}]}}'
    if twice == "resourceSpans":
        return f'{{"resourceSpans": [{res_a}], "resourceSpans": [{res_b}]}}'
    return f'{{"resourceSpans": [{res_a}, {res_b}]}}'


@pytest.mark.parametrize(("twice", "lost"), [
    ("resourceSpans", "line"), ("resourceSpans/resource", "line"), ("resourceSpans/scopeSpans", "line"),
    ("resourceSpans/resource/attributes", "line"), ("resourceSpans/scopeSpans/scope", "line"),
    ("resourceSpans/scopeSpans/spans", "line"), ("resourceSpans/scopeSpans/spans/spanId", "span"),
    ("resourceSpans/scopeSpans/spans/traceId", "span"), ("resourceSpans/scopeSpans/spans/attributes", "span"),
    ("resourceSpans/scopeSpans/spans/attributes/key", "span"), ("attributes/amount", "span")])
def test_an_otlp_envelope_object_giving_a_key_twice_is_a_bad_record_not_its_last_value(tmp_path, twice, lost):
    # {"spans": [s1, s2], "spans": [s9]}: Python's json kept the last list, and spans s1 and s2 were dropped without a
    # word; a span giving spanId or attributes twice was read by its last value. An object above the spans giving a key
    # twice makes the line one bad record; a span (or its attribute) giving one twice, that span
    import json

    spec = {"format": "otel", "agent": {"field": "resource/agent.id"}, "step": {"field": "attributes/tick"},
            "features": [{"kind": "count", "name": "n"}, {"kind": "sum", "name": "amount",
                                                          "field": "attributes/amount"}]}
    line = _envelope(twice)
    assert line != _envelope() and json.loads(line) and json.loads(_envelope())
    p = tmp_path / "otlp.jsonl"
    p.write_text(_envelope(a="z", b="y", t="u") + "\n" + line + "\n")
    with pytest.raises(TraceRecordError, match=rf"otlp\.jsonl line 2: a JSON object gives key '{twice}' twice"):
        read_trace(p, spec)
    got = read_trace(p, spec, on_bad="skip")
    reason = f"a JSON object gives key {twice!r} twice (which value is meant is ambiguous)"
    assert got.report.skipped == {reason: 1} and got.report.skipped_at[reason] == [f"{p} line 2"]
    ids = got.panel.agent_ids.tolist()
    # y, z: the first line as it was (count, amount); a, b: what is left of the second (span 2 of a, or nothing)
    want = {"y": [1, 3], "z": [2, 3]} | ({} if lost == "line" else {"a": [1, 1], "b": [1, 3]})
    assert {i: got.panel.values[0, ids.index(i)].tolist() for i in ids} == want


def test_an_sdk_span_line_giving_a_key_twice_is_a_bad_record(tmp_path):
    # ReadableSpan.to_json() lines: a context giving span_id twice, or attributes giving a key the spec reads twice,
    # were read by their last value
    import json

    def sdk(sid: str, agent: str, amount: int) -> str:
        return json.dumps({"name": "act", "context": {"trace_id": "t", "span_id": sid}, "parent_id": None,
                           "attributes": {"agent": agent, "tick": 0, "amount": amount}})

    spec = {"format": "otel", "agent": {"field": "attributes/agent"}, "step": {"field": "attributes/tick"},
            "features": [{"kind": "sum", "name": "amount", "field": "attributes/amount"}]}
    cases = {"context/span_id": sdk("2", "b", 2).replace('"span_id": "2"', '"span_id": "2", "span_id": "9"'),
             "attributes/amount": sdk("2", "b", 2).replace('"amount": 2', '"amount": 2, "amount": 5'),
             "attributes": sdk("2", "b", 2).replace('"attributes": {', '"attributes": {"agent": "c"}, "attributes": {'),
             }
    for path, bad in cases.items():
        p = tmp_path / "sdk.jsonl"
        p.write_text(sdk("1", "a", 1) + "\n" + bad + "\n")
        with pytest.raises(TraceRecordError, match=rf"sdk\.jsonl line 2: a JSON object gives key '{path}' twice"):
            read_trace(p, spec)
        got = read_trace(p, spec, on_bad="skip")
        assert got.panel.agent_ids.tolist() == ["a"] and got.report.n_skipped == 1, path


@pytest.mark.parametrize("how", ["span_id", "escaped key", "spaced colon"])
def test_a_flat_span_line_giving_a_key_twice_is_found_however_it_is_written(tmp_path, how):
    # the span reader looked for a repeated key by its text: "agent\u002eid" (the same key, escaped) or a key written
    # '"agent.id"  :' slipped past, and the span_id (which tells spans apart) was not looked at: the last value won
    bad = {"span_id": span("b").replace('"span_id": "bact"', '"span_id": "bact", "span_id": "c"'),
           "escaped key": span("b").replace('"agent.id": "b"', '"agent.id": "b", "agent\\u002eid": "x"'),
           "spaced colon": span("b").replace('"agent.id": "b"', '"agent.id": "b", "agent.id"  : "x"')}[how]
    p = tmp_path / "spans.jsonl"
    assert bad != span("b")
    p.write_text(span("a") + "\n" + bad + "\n")
    with pytest.raises(TraceRecordError, match=r"spans\.jsonl line 2: a JSON object gives key '(span_id|resource/"
                                               r"agent\.id)' twice"):
        read_trace(p, SPANS)
    got = read_trace(p, SPANS, on_bad="skip")
    assert got.panel.agent_ids.tolist() == ["a"] and got.report.n_skipped == 1


@pytest.mark.parametrize("how", ["escaped", "spaced colon"])
def test_a_key_given_twice_however_written_is_one_bad_record_in_both_readers(tmp_path, how):
    # {"agent": "b", "\u0061gent": "y"}: the same key twice, which both readers found by its text only; DuckDB read
    # "b", Python's json "y"
    twice = {"escaped": '"agent": "b", "\\u0061gent": "y"', "spaced colon": '"agent": "b", "agent"   : "y"'}[how]
    t_line = row("b").replace('"agent": "b"', twice)
    s_line = span("b").replace('"agent.id": "b"', twice.replace('"agent"', '"agent.id"').replace(
        "\\u0061gent", "agent\\u002eid"))
    assert t_line != row("b") and s_line != span("b")
    tab, spa = both(tmp_path, [(row("a"), span("a")), (t_line, s_line)], on_bad="skip")
    for got, p in [(tab, "agent"), (spa, "resource/agent.id")]:
        assert got.panel.agent_ids.tolist() == ["a"]
        assert got.report.skipped == {f"a JSON object gives key {p!r} twice (which value is meant is ambiguous)": 1}


# ---------------------------------------------------------------- events read twice
@pytest.mark.parametrize("batch_size", [1, 3, 65536])
def test_a_span_read_twice_counts_once_and_is_reported(tmp_path, batch_size):
    # a shard copied into the run folder again (a log shipped twice) counted every span twice: twice the LLM calls
    import shutil

    from aumann.data.traces import default_spec

    spec = default_spec("otel").model_dump()
    spec["batch_size"] = batch_size
    d = tmp_path / "trace"
    shutil.copytree(DATA / "agentsociety2_run" / "trace", d)
    shards = sorted(d.glob("*.jsonl"))
    again = shards[0].read_text() + shards[1].read_text()
    (d / "trace_zz.jsonl").write_text(again)  # sorts last: every span of it was read before
    n_again = sum(1 for line in again.splitlines() if line.strip())
    base, got = read_trace(DATA / "agentsociety2_run" / "trace", spec), read_trace(d, spec)
    np.testing.assert_array_equal(got.panel.values, base.panel.values)
    np.testing.assert_array_equal(got.panel.alive, base.panel.alive)
    assert got.report.filtered == {**base.report.filtered,
                                   "duplicate span: the same span (trace_id, span_id and content) was read before "
                                   "(a log shipped twice?)": n_again}
    assert any("filtered" in line and "duplicate span" in line for line in got.report.lines())


def test_only_a_span_written_again_as_it_was_is_a_duplicate_and_rows_without_ids_all_count(tmp_path):
    s = tmp_path / "s.jsonl"
    s.write_text("\n".join([span("a", sid="1"),
                            span("a", sid="1").replace('"trace_id": "t1"', '"trace_id": "t2"'),  # another trace
                            span("a", sid="1")]) + "\n")  # a copy
    got = read_trace(s, SPANS)
    assert got.panel.values[0, 0].tolist() == [2, 2] and sum(got.report.filtered.values()) == 1
    t = tmp_path / "t.jsonl"  # a table has no event id: the same action twice is two actions
    t.write_text(row("a") + "\n" + row("a") + "\n")
    got = read_trace(t, TABLE)
    assert got.panel.values[0, 0, 0] == 2 and not got.report.filtered



_DIGESTS = """
import json, sys
from aumann.data.traces.otel import _span_content, _span_ident
lines = [json.loads(x) for x in sys.stdin.read().splitlines()]
print(json.dumps([[_span_ident(s), _span_content(s, json.dumps(s), e)] for s in lines for e in (False, True)]))
"""


def test_a_span_s_identity_and_content_digests_are_the_same_in_every_process():
    # a span's identity and content were Python's hash() of texts, which PYTHONHASHSEED keys per process: which two
    # spans collided (one dropped as a copy of the other, or skipped as conflicting) changed from run to run
    import os
    import subprocess
    import sys

    spans = "\n".join([span("a", sid="1"), span("b", sid="2"), span("a", sid="1", amount="5"),
                       json.dumps({"trace_id": "\ud800", "span_id": 7, "name": "lone surrogate"})])
    got = []
    for seed in ("0", "1"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(Path(__file__).parents[2])}
        run = subprocess.run([sys.executable, "-c", _DIGESTS], input=spans, env=env, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr
        got.append(json.loads(run.stdout))
    assert got[0] == got[1]
    (i1, c1), _, (i2, c2), _, (i3, c3), _, (i4, _), _ = got[0]
    assert i1 == i3 != i2 and len({c1, c2, c3}) == 3 and isinstance(i4, int)  # the same ids, other content

CONFLICTING = ("conflicting span: the trace_id and span_id of a span read before, with other content (two runs' logs "
               "in one folder, or a writer that reuses span ids?): the first is kept")


def _otlp(spans: list[tuple[str, str, str, int]]) -> str:
    """One OTLP/JSON envelope line of spans (trace_id, span_id, agent, amount), all at tick 0."""
    import json

    def attr(k: str, v: object) -> dict:
        return {"key": k, "value": {"stringValue": v} if isinstance(v, str) else {"intValue": str(v)}}

    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {}, "spans": [
        {"traceId": t, "spanId": s, "name": "act",
         "attributes": [attr("agent", a), attr("tick", 0), attr("amount", x)]} for t, s, a, x in spans]}]}]})


OTLP = {"format": "otel", "agent": {"field": "attributes/agent"}, "step": {"field": "attributes/tick"},
        "features": [{"kind": "count", "name": "n"}, {"kind": "sum", "name": "amount", "field": "attributes/amount"}]}


@pytest.mark.parametrize("where", ["lines", "shards", "one envelope", "envelopes"])
@pytest.mark.parametrize("batch_size", [1, 65536])
def test_a_span_reusing_the_ids_of_another_with_other_content_is_refused_or_skipped_keeping_the_first(
        tmp_path, where, batch_size):
    # the same trace_id and span_id with another agent or amount (two runs' logs concatenated, a writer reusing ids):
    # read as a second span, both counted, silently; in one OTLP envelope the second was dropped as a 'duplicate'
    d = tmp_path / "trace"
    d.mkdir()
    if where in ("lines", "shards"):
        first, other = span("a", sid="1"), span("b", sid="1", amount="5")  # trace t1, span 1 both
        lines = [span("c", sid="2"), first, span("c", sid="3"), other, first]
        if where == "lines":
            (d / "s.jsonl").write_text("\n".join(lines) + "\n")
            at1, at2 = f"{d / 's.jsonl'} line 2", f"{d / 's.jsonl'} line 4"
        else:
            (d / "s1.jsonl").write_text("\n".join(lines[:3]) + "\n")
            (d / "s2.jsonl").write_text("\n".join(lines[3:]) + "\n")
            at1, at2 = f"{d / 's1.jsonl'} line 2", f"{d / 's2.jsonl'} line 1"
        spec = SPANS
    else:
        a, b, c2, c3 = ("t1", "1", "a", 1), ("t1", "1", "b", 5), ("t2", "2", "c", 1), ("t3", "3", "c", 1)
        lines = [_otlp([c2, a, b]), _otlp([c3, a])] if where == "one envelope" else [
            _otlp([c2, a]), _otlp([c3, b]), _otlp([a])]
        (d / "s.jsonl").write_text("\n".join(lines) + "\n")
        at1, at2 = f"{d / 's.jsonl'} line 1", f"{d / 's.jsonl'} line " + ("1" if where == "one envelope" else "2")
        spec = OTLP
    spec = {**spec, "batch_size": batch_size}
    got = read_trace(d, spec, on_bad="skip")
    ids = got.panel.agent_ids.tolist()
    assert sorted(ids) == ["a", "c"]  # the first kept, b's span skipped, the copy of the first dropped
    assert got.panel.values[0, ids.index("a")].tolist() == [1, 1]
    assert got.panel.values[0, ids.index("c")].tolist() == [2, 2]
    assert got.report.skipped == {CONFLICTING: 1} and got.report.skipped_at[CONFLICTING] == [at2]
    assert sum(v for k, v in got.report.filtered.items() if k.startswith("duplicate span")) == 1
    assert any(line.startswith("  skipped 1: conflicting span") for line in got.report.lines())
    with pytest.raises(TraceRecordError) as err:
        read_trace(d, spec)
    assert str(err.value).startswith(f"{at2}: a span with the trace_id 't1' and span_id '1' of the span at {at1}, "
                                     "with other content")


def test_a_bad_record_before_a_conflicting_span_is_named_first(tmp_path):
    s = tmp_path / "s.jsonl"
    s.write_text("\n".join([span("a", sid="1", tick='"soon"'), span("b", sid="1"), span("c", sid="2")]) + "\n")
    with pytest.raises(TraceRecordError, match=r"s\.jsonl line 1: step field 'attributes/agent\.tick' is not"):
        read_trace(s, SPANS)
    got = read_trace(s, SPANS, on_bad="skip")  # the first is bad, the second conflicts with it: both skipped
    assert got.report.n_skipped == 2 and got.report.skipped[CONFLICTING] == 1
    assert got.panel.agent_ids.tolist() == ["c"]


def _concordia(tmp_path: Path, coins: list[str]) -> Path:
    entries = ", ".join(f'{{"step": {i // 2}, "entity_name": "{"AB"[i % 2]}", "component_name": "entity_action", '
                        f'"summary": "NaN, Infinity and -Infinity in a text \\"NaN\\"", "coins": {c}}}'
                        for i, c in enumerate(coins))
    p = tmp_path / "log.json"
    p.write_text('{"content_store": {}, "entries": [' + entries + "]}")
    return p


CONCORDIA = {"format": "concordia", "agent": {"field": "entity_name"}, "step": {"field": "step"},
             "features": [{"kind": "count", "name": "n"}, {"kind": "sum", "name": "coins", "field": "coins"}]}


def test_a_concordia_log_holding_nan_reads_it_as_a_missing_value(tmp_path):
    # Python's json.dumps writes a float NaN as a bare NaN: ijson took it for the end of the document, and the whole
    # log was refused as "the JSON ends early (a truncated log?)"
    got = read_trace(_concordia(tmp_path, ["2", "NaN", '"NaN"', "3"]), CONCORDIA)
    assert got.panel.values[:, :, 1].tolist() == [[2, 0], [0, 3]]
    assert got.panel.values[:, :, 0].tolist() == [[1, 1], [1, 1]]
    assert got.report.missing_values == {"coins": 2}


@pytest.mark.parametrize("token", ["Infinity", "-Infinity"])
def test_a_concordia_log_holding_infinity_refuses_that_entry_as_other_readers_do(tmp_path, token):
    p = _concordia(tmp_path, ["2", token, "3", "4"])
    with pytest.raises(Exception, match=r"entry 2: field 'coins' is not a finite number"):
        read_trace(p, CONCORDIA)
    got = read_trace(p, CONCORDIA, on_bad="skip")
    assert got.report.skipped == {"field 'coins' is not a finite number": 1}
    assert got.panel.values[:, :, 1].tolist() == [[2, 0], [3, 4]]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_nan_and_infinity_cut_by_any_chunk_read_alike_and_texts_keep_them(tmp_path, size):
    import io

    import ijson

    from aumann.data.traces.concordia import _Nesting

    raw = _concordia(tmp_path, ["NaN", "-Infinity", "Infinity", "-1", "NaN"]).read_bytes()

    class Tiny(io.BytesIO):
        def read(self, n=-1):
            return super().read(size if n is None or n < 0 else min(n, size))

    items = list(ijson.items(_Nesting(Tiny(raw), tmp_path), "entries.item", use_float=True))
    assert [e["coins"] for e in items] == [None, "-Infinity", "Infinity", -1, None]
    assert {e["summary"] for e in items} == {'NaN, Infinity and -Infinity in a text "NaN"'}


@pytest.mark.parametrize("odd", ["01", "+1"])
@pytest.mark.parametrize("where", ["first", "below the sniffed rows"])
def test_a_csv_agent_column_holding_01_is_text_wherever_the_01_sits(tmp_path, odd, where):
    # DuckDB's sniffer takes a column holding 01 or +1 for text (zero-padded ids stay as written) and one of 1, 2, ...
    # for integers: where the 01 came below the 20,480 sniffed rows, its cast read 01 as 1 (merged with 1, silently),
    # and a column holding 1.0 further down was one of numbers (01, 1 and 1.0 one agent), where the same values with
    # the 01 first were five agents. The same values made other agents by where they sat
    pad = ["7"] * 25_000
    for last in ("1.0", "x"):
        ids = [odd, "1", *pad, "2", last] if where == "first" else ["1", "2", *pad, odd, last]
        csv = tmp_path / "ids.csv"
        csv.write_text("agent,tick,action,amount\n" + "".join(f"{i},0,post,1\n" for i in ids))
        got = read_trace(csv, TABLE)
        assert got.report.n_skipped == 0
        assert sorted(got.panel.agent_ids.tolist()) == sorted([odd, "1", "2", "7", last]), last


@pytest.mark.parametrize("ids", [(-1, -2), (1, 2**61), (5, 5 + 2**61 - 1), (1, True)])
def test_span_ids_that_are_unequal_numbers_are_two_spans(tmp_path, ids):
    # a span's identity was Python's hash of (trace_id, span_id), and Python hashes a number as its value modulo
    # 2^61 - 1 (and -1 as -2): the second span was refused as a conflicting span of the first, or skipped under skip
    import json

    p = tmp_path / "spans.jsonl"
    p.write_text("".join(json.dumps({"trace_id": "t", "span_id": sid, "name": "act", "resource": {"agent.id": agent},
                                     "attributes": {"agent.tick": 0, "amount": amount}}) + "\n"
                         for sid, agent, amount in zip(ids, ("alice", "bob"), (1, 2))))
    got = read_trace(p, SPANS)
    assert got.report.n_skipped == 0
    assert got.panel.N == 2 and float(got.panel.values.sum()) == 5.0  # counts 1 + 1, amounts 1 + 2


# ---------------------------------------------------------------- labels as written: numbers in CSV, nested JSON fields
_LABELS = [(1, 0, "1.50", "12:00", "550E8400-E29B-41D4-A716-446655440000", 1.0),
           (2, 0, "1.5", "13:00", "550e8400-e29b-41d4-a716-446655440000", 2.0),
           (1, 1, "1.50", "12:00", "550E8400-E29B-41D4-A716-446655440000", 4.0),
           (2, 1, "2.00", "12:00", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", 8.0)]


def _labels(tmp_path: Path, fmt: str, nested: bool) -> tuple[Path, dict]:
    """The events of :data:`_LABELS` as ``fmt`` writes them, with the spec reading them: ``price``, ``slot`` and ``id``
    flat (CSV's price a column DuckDB types as DOUBLE), or slot and id nested in ``meta``."""
    import pandas as pd

    def rec(a, t, p, s, u, x):
        labels = {"slot": s, "id": u}
        return {"agent": a, "tick": t, "amount": x, "price": p, **({"meta": labels} if nested else labels)}

    recs = [rec(*r) for r in _LABELS]
    pre = "attributes/" if fmt == "spans" else ""
    spec = {"format": "otel" if fmt == "spans" else "table", "agent": {"field": pre + "agent"},
            "step": {"field": pre + "tick"}, "features": [{"kind": "sum", "name": "amount", "field": pre + "amount"}]}
    f = tmp_path / f"labels.{'jsonl' if fmt == 'spans' else fmt}"
    if fmt == "csv":
        f.write_text("agent,tick,amount,price,slot,id\n" + "".join(f"{a},{t},{x},{p},{s},{u}\n"
                                                                   for a, t, p, s, u, x in _LABELS))
    elif fmt == "jsonl":
        f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    elif fmt == "parquet":
        pd.DataFrame(recs).to_parquet(f)
    else:
        f.write_text("".join(json.dumps({"trace_id": f"t{i}", "span_id": f"s{i}", "name": "act", "attributes": r})
                             + "\n" for i, r in enumerate(recs)))
    return f, spec


@pytest.mark.parametrize(("fmt", "nested"), [("csv", False), ("jsonl", False), ("parquet", False), ("spans", False),
                                             ("jsonl", True), ("parquet", True), ("spans", True)])  # (CSV: no nesting)
def test_labels_compared_as_written_in_every_reader(tmp_path, fmt, nested):
    """``[where]`` and action values are compared as written in every reader: a CSV column DuckDB typed as DOUBLE
    keyed ``1.50`` as ``1.5`` (``[where] price = ["1.50"]`` matched no CSV record, every JSON lines, Parquet and span
    record holding the text); a nested JSON lines field (``meta/slot``) DuckDB typed as a time or a UUID was the time
    ``12:00:00`` and the UUID in lowercase (the top-level fields were read as written already): each matched no
    record, where the span reader and Parquet matched them. Every reader builds the same panel from the same events."""
    f, spec = _labels(tmp_path, fmt, nested)
    pre = "attributes/" if fmt == "spans" else ""
    slot, uid = (f"{pre}meta/slot", f"{pre}meta/id") if nested else (f"{pre}slot", f"{pre}id")
    cases = [({f"{pre}price": ["1.50"]}, [[1.0, 0.0], [4.0, 0.0]]),
             ({f"{pre}price": ["1.5", "2.00"]}, [[0.0, 2.0], [0.0, 8.0]]),
             ({slot: ["12:00"]}, [[1.0, 0.0], [4.0, 8.0]]),
             ({uid: ["550E8400-E29B-41D4-A716-446655440000"]}, [[1.0, 0.0], [4.0, 0.0]])]
    for where, want in cases:
        r = read_trace(f, dict(spec, where=where))
        got = np.zeros((2, 2))
        for i, a in enumerate(r.panel.agent_ids.tolist()):
            for t, s in enumerate(r.panel.steps.tolist()):
                got[s, int(a) - 1] = r.panel.values[t, i, 0]
        assert got.tolist() == want, (where, got.tolist())
    # an action read from the field: one count per value as written
    r = read_trace(f, dict(spec, action={"field": slot}, features=[{"kind": "count_each"}]))
    assert list(r.panel.features) == ["12:00", "13:00"]
    r = read_trace(f, dict(spec, action={"field": uid}, features=[{"kind": "count_each"}]))
    assert sorted(r.panel.features) == sorted({u for *_, u, _ in _LABELS})


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet", "spans"])
def test_a_number_in_where_matches_text_that_spells_it(tmp_path, fmt):
    """A number in a ``[where]`` list matches text that spells it in decimal (``1.5``: ``"1.50"``; ``2``: ``"2.00"``)
    in every reader: a CSV column of numbers is read as written, and ``[where] price = [1.5]`` matched no CSV cell
    written ``1.50`` (it had matched while DuckDB read the column as DOUBLE). Text in the list still matches text as
    written (``["1.5"]`` is not ``"1.50"``: the test above), and a code with a leading zero is no number."""
    f, spec = _labels(tmp_path, fmt, False)
    pre = "attributes/" if fmt == "spans" else ""
    for where, want in (([1.5], [[1.0, 2.0], [4.0, 0.0]]), ([2], [[0.0, 0.0], [0.0, 8.0]]),
                        ([1.5, 2.0], [[1.0, 2.0], [4.0, 8.0]])):
        r = read_trace(f, dict(spec, where={f"{pre}price": where}))
        got = np.zeros((2, 2))
        for i, a in enumerate(r.panel.agent_ids.tolist()):
            for t, s in enumerate(r.panel.steps.tolist()):
                got[s, int(a) - 1] = r.panel.values[t, i, 0]
        assert got.tolist() == want, (where, got.tolist())


def test_a_number_in_where_does_not_match_a_code_with_a_leading_zero(tmp_path):
    f = tmp_path / "codes.jsonl"
    f.write_text("".join(json.dumps({"agent": a, "tick": 0, "amount": 1.0, "zip": z}) + "\n"
                         for a, z in ((1, "01"), (2, "1"), (3, " 1"), (4, 1))))
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "sum", "name": "amount", "field": "amount"}], "where": {"zip": [1]}}
    r = read_trace(f, spec)
    assert sorted(r.panel.agent_ids.tolist()) == [2, 4]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "spans"])
def test_where_on_the_agent_field_names_ids_as_the_agent_column_reads_them(tmp_path, fmt):
    """A CSV agent column of numbers reads ``1.0`` as the id 1 (as a JSON ``1.0`` is), but ``[where] agent = [1]`` on it
    compared the text ``1.0`` and filtered every record; it now compares the ids the agent column reads, in every
    reader alike."""
    rows = [("1.0", 0, 1.0), ("2.0", 0, 2.0), ("1.0", 1, 4.0)]
    if fmt == "csv":
        f = tmp_path / "ev.csv"
        f.write_text("agent,tick,amount\n" + "".join(f"{a},{t},{x}\n" for a, t, x in rows))
        spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}}
    elif fmt == "jsonl":
        f = tmp_path / "ev.jsonl"
        f.write_text("".join(json.dumps({"agent": float(a), "tick": t, "amount": x}) + "\n" for a, t, x in rows))
        spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}}
    else:
        f = tmp_path / "spans.jsonl"
        f.write_text("".join(json.dumps({"trace_id": f"t{i}", "span_id": f"s{i}", "name": "act",
                                         "attributes": {"agent": float(a), "tick": t, "amount": x}}) + "\n"
                             for i, (a, t, x) in enumerate(rows)))
        spec = {"format": "otel", "agent": {"field": "attributes/agent"}, "step": {"field": "attributes/tick"}}
    amount = "attributes/amount" if fmt == "spans" else "amount"
    r = read_trace(f, dict(spec, where={spec["agent"]["field"]: [1]},
                           features=[{"kind": "sum", "name": "amount", "field": amount}]))
    assert r.panel.agent_ids.tolist() == [1] and r.panel.values[:, 0, 0].tolist() == [1.0, 4.0]
    assert sum(r.report.filtered.values()) == 1


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "spans"])
def test_flag_column_in_where_and_a_sum_counts_one_and_zero(tmp_path, fmt):
    """A CSV column of true and false that ``[where]`` reads is read as text (compared as written); a ``sum`` of the
    same column then met the text 'true', "not a finite number", and the read was refused, where JSON lines and spans
    count 1 and 0 (as the CSV column does when no [where] reads it). Every reader now builds the same panel."""
    rows = [(1, 0, "true"), (2, 0, "false"), (1, 1, "true"), (2, 1, "true")]
    if fmt == "csv":
        f = tmp_path / "ev.csv"
        f.write_text("agent,tick,flag\n" + "".join(f"{a},{t},{x}\n" for a, t, x in rows))
        pre, spec = "", {"format": "table"}
    elif fmt == "jsonl":
        f = tmp_path / "ev.jsonl"
        f.write_text("".join(json.dumps({"agent": a, "tick": t, "flag": x == "true"}) + "\n" for a, t, x in rows))
        pre, spec = "", {"format": "table"}
    else:
        f = tmp_path / "spans.jsonl"
        f.write_text("".join(json.dumps({"trace_id": f"t{i}", "span_id": f"s{i}", "name": "act",
                                         "attributes": {"agent": a, "tick": t, "flag": x == "true"}}) + "\n"
                             for i, (a, t, x) in enumerate(rows)))
        pre, spec = "attributes/", {"format": "otel"}
    spec.update(agent={"field": pre + "agent"}, step={"field": pre + "tick"},
                features=[{"kind": "sum", "name": "flags", "field": pre + "flag"}])
    r = read_trace(f, dict(spec, where={pre + "flag": [True]}))
    assert r.panel.values[:, :, 0].tolist() == [[1.0, 0.0], [1.0, 1.0]]
    assert sum(r.report.filtered.values()) == 1
    r = read_trace(f, spec)  # no [where]: the same sums
    assert r.panel.values[:, :, 0].tolist() == [[1.0, 0.0], [1.0, 1.0]]
