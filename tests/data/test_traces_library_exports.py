"""Event tables and edge files written by the libraries users export with (pandas, pyarrow, DuckDB, NetworkX), and
corrupted variants of them: each reads as the same panel, or is refused naming what is wrong and what to do."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from aumann.data.traces import detect_format, read_trace
from aumann.errors import TraceFormatError, TraceRecordError, TraceSchemaError


@pytest.fixture
def graph() -> nx.DiGraph:
    g = nx.gnp_random_graph(10, 0.3, seed=1, directed=True)
    for i, (u, v) in enumerate(g.edges()):
        g.edges[u, v]["since"] = i % 3
    return g


@pytest.fixture
def events(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"agent": rng.integers(0, 10, 200), "tick": rng.integers(0, 5, 200)})
    df.to_csv(tmp_path / "ev.csv", index=False)
    return tmp_path / "ev.csv"


def _spec(path: Path, since: str | None = "since", **kw) -> dict:
    e = {"path": str(path), "source": "source", "target": "target"}
    if since:
        e["since"] = since
    return {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "count", "name": "n"}, {"kind": "exposure", "name": "seen", "of": "n", "edges": e}],
            **kw}


def test_networkx_edge_lists_through_pandas_writers_read_alike(tmp_path, graph, events):
    el = nx.to_pandas_edgelist(graph)
    el.to_csv(tmp_path / "e.csv", index=False)
    el.to_parquet(tmp_path / "e.parquet")
    el.to_json(tmp_path / "e.jsonl", orient="records", lines=True)
    got = [read_trace(events, _spec(tmp_path / f"e.{k}")) for k in ("csv", "parquet", "jsonl")]
    for r in got[1:]:
        np.testing.assert_array_equal(r.panel.values, got[0].panel.values)
    assert got[0].report.edges["seen"] == {"edges": graph.number_of_edges(), "used": graph.number_of_edges(),
                                           "unknown_endpoint": 0, "skipped": 0, "no_since": 0, "duplicate": 0}


def test_a_json_lines_edge_row_giving_an_endpoint_twice_is_a_bad_row(tmp_path, graph, events):
    """DuckDB read the first of {"source": 1, "source": 2}, silently; an event table refuses such a row."""
    el = nx.to_pandas_edgelist(graph)
    el.to_json(tmp_path / "e.jsonl", orient="records", lines=True)
    f = tmp_path / "e.jsonl"
    f.write_text(f.read_text() + '{"source": 1, "source": 2, "target": 3, "since": 0}\n')
    n = graph.number_of_edges()
    with pytest.raises(TraceRecordError, match=rf"e\.jsonl row {n + 1}: a JSON object gives key 'source' twice"):
        read_trace(events, _spec(f))
    r = read_trace(events, _spec(f, on_bad="skip"))
    assert r.report.edges_skipped == {"a JSON object gives key 'source' twice (which value is meant is ambiguous)": 1}
    assert r.report.edges["seen"]["edges"] == n + 1 and r.report.edges["seen"]["used"] == n


def test_a_json_lines_edge_line_that_is_an_array_is_a_bad_row_not_a_missing_column(tmp_path, events):
    """One such line made DuckDB read every line as one 'json' column: "has no column(s) ['source', 'target']"."""
    f = tmp_path / "e.jsonl"
    f.write_text('[1, 2]\n{"source": 1, "target": 2}\n')
    with pytest.raises(TraceRecordError, match=r"e\.jsonl row 1: not a JSON object holding the edge's fields"):
        read_trace(events, _spec(f, since=None))
    r = read_trace(events, _spec(f, since=None, on_bad="skip"))
    assert r.report.n_edges_skipped == 1 and r.report.edges["seen"]["used"] == 1


def test_a_parquet_since_of_timestamps_with_unbinned_steps_is_refused_as_a_file(tmp_path, graph, events):
    """Each row was "not a step/timestamp", and under --skip-bad every edge was skipped: the spec and the file
    disagree, no row is at fault."""
    el = nx.to_pandas_edgelist(graph)
    el["since"] = pd.Timestamp("2026-01-01", tz="UTC") + pd.to_timedelta(el["since"], unit="h")
    el.to_parquet(tmp_path / "e.parquet")
    for on_bad in ("error", "skip"):
        with pytest.raises(TraceSchemaError, match=r"since field 'since' holds timestamps .* integer steps: bin"):
            read_trace(events, _spec(tmp_path / "e.parquet", on_bad=on_bad))


@pytest.mark.parametrize("delimiter", [" ", ","])
def test_a_networkx_edge_list_without_header_is_named_as_such(tmp_path, graph, events, delimiter):
    f = tmp_path / "e.csv"
    nx.write_edgelist(graph, f, data=False, delimiter=delimiter)
    with pytest.raises(TraceSchemaError, match=r"its first line holds values, not column names.*write_edgelist"):
        read_trace(events, _spec(f, since=None))


def test_an_empty_edge_file_is_named_empty(tmp_path, events):
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(TraceFormatError, match=r"edge file .*e\.csv' is empty"):
        read_trace(events, _spec(tmp_path / "e.csv", since=None))


def test_a_hive_partitioned_parquet_dataset_is_named_as_such(tmp_path):
    """pandas' to_parquet(partition_cols=...) keeps the column in the folder names: "no table files" said nothing."""
    df = pd.DataFrame({"agent": [1, 2, 1], "tick": [0, 0, 1], "action": ["post", "like", "post"]})
    d = tmp_path / "ds"
    df.to_parquet(d, partition_cols=["action"])
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "action": {"field": "action"},
            "features": [{"kind": "count_each"}]}
    with pytest.raises(TraceFormatError, match=r"Hive-partitioned dataset \(folders action=like, action=post\): "
                                               r"column 'action' is in the folder names only"):
        read_trace(d, spec)
    with pytest.raises(TraceFormatError, match="Hive-partitioned"):
        detect_format(d)
    pd.read_parquet(d).to_parquet(tmp_path / "one.parquet")  # what the error says to do
    assert read_trace(tmp_path / "one.parquet", spec).report.events == 3


def test_duckdb_copy_exports_read_as_the_pandas_ones(tmp_path):
    import duckdb

    rng = np.random.default_rng(1)
    df = pd.DataFrame({"agent": rng.integers(0, 10, 100), "tick": rng.integers(0, 5, 100),
                       "amount": rng.random(100).round(3)})
    df.to_csv(tmp_path / "ref.csv", index=False)
    con = duckdb.connect()
    con.register("df", df)
    for name, opts in (("d.parquet", "FORMAT parquet"), ("d.json", "FORMAT json"), ("d.csv.gz", "FORMAT csv, "
                                                                                                 "COMPRESSION gzip")):
        con.execute(f"COPY df TO '{tmp_path / name}' ({opts})")
    con.close()
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "sum", "name": "amount", "field": "amount"}]}
    ref = read_trace(tmp_path / "ref.csv", spec).panel.values
    for name in ("d.parquet", "d.json", "d.csv.gz"):
        np.testing.assert_array_equal(read_trace(tmp_path / name, spec).panel.values, ref)
    assert json.loads((tmp_path / "d.json").read_text().splitlines()[0])  # DuckDB's json is JSON lines


def test_a_gzipped_concordia_log_reads_as_the_log(tmp_path):
    """``log.json.gz`` (gzip.compress of SimulationLog.to_json) was detected as a JSON lines table, and read as a
    Concordia log ijson met the compressed bytes: "the JSON ends early or is malformed ... invalid char"."""
    import gzip

    log = Path(__file__).parent / "traces" / "concordia_log.json"
    gz = tmp_path / "log.json.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    assert detect_format(gz) == "concordia"
    a, b = read_trace(gz), read_trace(log)
    np.testing.assert_array_equal(a.panel.values, b.panel.values)
    assert a.report.records == b.report.records > 0
    data = gz.read_bytes()
    (tmp_path / "cut.json.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match=r"cut\.json\.gz' is a damaged or truncated gzip file"):
        read_trace(tmp_path / "cut.json.gz", format="concordia")


_BEHAVIORSPACE = ('"BehaviorSpace results (NetLogo 6.4.0)"\n"wolf-sheep.nlogo"\n"experiment"\n'
                  '"01/02/2026 10:00:00:000 +0100"\n"min-pxcor","max-pxcor"\n"-25","25"\n'
                  '"[run number]","initial-number-sheep","[step]","count sheep"\n'
                  + "".join(f'"{r}","100","{s}","{100 - s + r}"\n' for r in (1, 2) for s in range(4)))


@pytest.mark.parametrize("edge", [False, True])
def test_a_quoted_csv_cut_off_mid_value_is_one_bad_line(tmp_path, edge):
    """A BehaviorSpace table (every field quoted) whose run was killed while writing its last line: the unterminated
    quote made DuckDB's sniffer read without a quote character, and the header's names kept their quotes, so every
    column the spec names was "missing" ('"[run number]"'), --skip-bad or not. The same for a quoted edge file."""
    spec = {"format": "table", "agent": {"field": "[run number]"}, "step": {"field": "[step]"},
            "csv": {"header_line": 7}, "features": [{"kind": "last", "name": "sheep", "field": "count sheep"}]}
    ev = tmp_path / "bs.csv"
    ev.write_text(_BEHAVIORSPACE + ('' if edge else '"3","100","0","9'))
    if edge:
        (tmp_path / "e.csv").write_text('"src","dst"\n"1","2"\n"2","1"\n"1","')
        spec["features"].append({"kind": "exposure", "name": "seen", "of": "sheep",
                                 "edges": {"path": str(tmp_path / "e.csv"), "source": "src", "target": "dst"}})
    where = r"e\.csv line 4" if edge else r"bs\.csv line 16"
    with pytest.raises(TraceRecordError, match=rf"{where}: a CSV line with an unterminated quote"):
        read_trace(ev, spec)
    r = read_trace(ev, spec, on_bad="skip")
    assert r.panel.agent_ids.tolist() == [1, 2] and r.panel.T == 4
    assert (r.report.n_edges_skipped if edge else r.report.n_skipped) == 1


def test_spans_pretty_printed_by_the_console_exporter_are_named_as_such(tmp_path):
    """OpenTelemetry's ConsoleSpanExporter writes ``span.to_json()`` (indent=4) one after another: detection took the
    file for a long table, and read as spans every line was "not a JSON object"."""
    span = {"name": "llm.call", "context": {"trace_id": "0x5b8aa5a2d2c872e8321cf37308d69df2",
                                            "span_id": "0x051581bf3cb55c13", "trace_state": "[]"},
            "kind": "SpanKind.INTERNAL", "parent_id": None, "start_time": "2026-01-01T00:00:00.000000Z",
            "end_time": "2026-01-01T00:00:01.000000Z", "status": {"status_code": "UNSET"},
            "attributes": {"sim.step": 1, "gen_ai.usage.output_tokens": 12}, "events": [], "links": [],
            "resource": {"attributes": {"agent.name": "alice"}, "schema_url": ""}}
    spec = Path(__file__).parents[2] / "docs" / "examples" / "traces" / "otlp.toml"
    compact, console = tmp_path / "compact.jsonl", tmp_path / "console.jsonl"
    compact.write_text(json.dumps(span) + "\n")
    console.write_text(json.dumps(span, indent=4) + "\n")
    assert read_trace(compact, spec).report.events == 1
    assert detect_format(console) == "otel"
    with pytest.raises(TraceFormatError, match=r"console\.jsonl holds pretty-printed JSON .*ConsoleSpanExporter.*"
                                               r"formatter=lambda s: s\.to_json\(indent=None\)"):
        read_trace(console, spec)
