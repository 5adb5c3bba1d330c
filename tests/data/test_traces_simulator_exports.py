"""Traces as other simulators' tools write them (pandas, pyarrow, NetLogo, agent logs), read against independent
computations of the same numbers (pandas by hand)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from aumann.data.traces import read_trace
from aumann.errors import TraceSchemaError


def _spec(step: dict | None = None, **extra) -> dict:
    return {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick", **(step or {})},
            "features": [{"kind": "count"}, {"kind": "sum", "name": "amount", "field": "amount"}], **extra}


# ---------------------------------------------------------------- Parquet durations (pandas timedelta64)
def _durations(tmp_path, unit: str = "us"):
    """Events at 0 s, 1 s, 2 s and 3,601 s of simulated time, as pandas writes a timedelta column to Parquet
    (pyarrow: INT64 counts of ``unit`` with the unit in the Arrow schema only)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    secs = [0, 1, 2, 3601]
    df = pd.DataFrame({"agent": [1, 2, 1, 2], "tick": pd.to_timedelta(secs, unit="s"), "amount": [1.5, 2.5, 3.5, 4.5],
                       "waited": pd.to_timedelta([1, 0, 2, 0.5 if unit != "s" else 1], unit="s")})
    t = pa.Table.from_pandas(df, preserve_index=False)
    t = t.set_column(1, "tick", t.column("tick").cast(pa.duration(unit)))
    t = t.set_column(3, "waited", t.column("waited").cast(pa.duration(unit)))
    f = tmp_path / f"durations_{unit}.parquet"
    pq.write_table(t, f)
    return f, df, secs


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_parquet_duration_step_binned_in_seconds(tmp_path, unit):
    """A duration step was DuckDB's BIGINT count of the file's unit: with bin = '1h', 1 s of a pandas timedelta
    (microseconds) was the 10⁶-th second, 3,601 s a trace of 1,000,278 hour bins (refused by max_steps) or, for
    shorter runs, hundreds of bins of nothing; the step is now the duration in seconds, binned."""
    f, df, secs = _durations(tmp_path, unit)
    r = read_trace(f, _spec({"bin": "1h"}))
    hours = [s // 3600 for s in secs]
    ref = df.assign(h=hours).pivot_table(index="h", columns="agent", values="amount", aggfunc="sum").fillna(0)
    assert r.panel.T == 2
    assert list(r.panel.steps) == ["1970-01-01T00:00:00Z", "1970-01-01T01:00:00Z"]
    np.testing.assert_array_equal(r.panel.values[:, :, r.panel.features.index("amount")], ref.to_numpy())
    # a numeric bin counts the spec's unit (seconds) too: bins of 2 s
    r2 = read_trace(f, _spec({"bin": 2}))
    assert list(r2.panel.steps) == list(range(0, 3602, 2))
    assert r2.panel.values[:, :, 0].sum() == 4 and r2.panel.values[1, 0, 0] == 1  # agent 1's event at 2 s


def test_parquet_duration_step_in_the_spec_unit(tmp_path):
    """With ``unit = 'ms'`` a numeric bin counts milliseconds, whatever the file's unit (nanoseconds here)."""
    f, _, _ = _durations(tmp_path, "ns")
    r = read_trace(f, _spec({"bin": 1000, "unit": "ms"}))
    assert r.panel.T == 3602 and r.panel.steps[-1] == 3_601_000
    assert [int(r.panel.values[t, :, 0].sum()) for t in (0, 1, 2, 3601)] == [1, 1, 1, 1]


def test_parquet_duration_step_without_bin_refused(tmp_path):
    """Unbinned, the microseconds were the integer steps 0 … 3,601,000: refused by max_steps here, a panel of
    thousands of empty steps for a run of milliseconds. A duration is no integer step: refused, naming --bin."""
    f, _, _ = _durations(tmp_path)
    with pytest.raises(TraceSchemaError, match=r"step field 'tick' holds durations \(a Parquet duration\[us\].*--bin"):
        read_trace(f, _spec())


def test_parquet_duration_value_in_seconds(tmp_path):
    """A numeric field holding durations sums seconds (it summed microseconds: 3.5 s was 3,500,000)."""
    f, df, _ = _durations(tmp_path, "us")
    spec = _spec(features=[{"kind": "sum", "name": "waited", "field": "waited"}])
    spec["step"] = {"field": "agent"}  # any integer step: one per agent
    r = read_trace(f, spec)
    by_agent = df.groupby("agent")["waited"].sum().dt.total_seconds()
    np.testing.assert_allclose(r.panel.values[:, :, 0].sum(axis=0), by_agent.to_numpy())
    assert r.panel.values.sum() == pytest.approx(3.5)  # 1 + 0 + 2 + 0.5 s


def test_parquet_duration_units_differ_between_shards_refused(tmp_path):
    import shutil

    a, _, _ = _durations(tmp_path, "us")
    b, _, _ = _durations(tmp_path, "ns")
    shards = tmp_path / "shards"
    shards.mkdir()
    shutil.copy(a, shards / "part-0.parquet")
    shutil.copy(b, shards / "part-1.parquet")
    with pytest.raises(TraceSchemaError, match=r"field 'tick' is a Parquet duration of more than one unit"):
        read_trace(shards, _spec({"bin": "1h"}))


# ---------------------------------------------------------------- Parquet strings stored as bytes
def _bytes_table(tmp_path):
    """Strings as BYTE_ARRAY without the UTF-8 annotation (Arrow ``binary``; Spark's binaryAsString, Impala, Hive)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {"agent": ["a", "b", "a", "ü"], "tick": [0, 0, 1, 1], "action": ["buy", "sell", "buy", "buy"],
            "amount": [1.0, 2.0, 3.0, 4.0], "kind": ["x", "y", "x", "x"]}
    f = tmp_path / "bytes.parquet"
    pq.write_table(pa.table({k: pa.array([s.encode() for s in v], pa.binary()) if isinstance(v[0], str) else v
                             for k, v in rows.items()}), f)
    return f, pd.DataFrame(rows)


def test_parquet_bytes_strings_read_as_their_text(tmp_path):
    """The agent b'a' was labelled "b'a'", the action b'buy' was the feature "b'buy'", so ``actions = ['buy']`` kept
    nothing (the amount was 0 throughout, without a word) and ``[where] kind = ['x']`` filtered every record."""
    f, df = _bytes_table(tmp_path)
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "action": {"field": "action"},
            "where": {"kind": ["x"]},
            "features": [{"kind": "count_each"}, {"kind": "sum", "name": "amount", "field": "amount",
                                                    "actions": ["buy"]}]}
    r = read_trace(f, spec)
    kept = df[df.kind == "x"]
    ref = kept[kept.action == "buy"].pivot_table(index="tick", columns="agent", values="amount", aggfunc="sum")
    assert list(r.panel.agent_ids) == sorted(kept.agent.unique()) == ["a", "ü"]
    assert list(r.panel.features) == ["buy", "amount"]
    np.testing.assert_array_equal(r.panel.values[:, :, 1], ref.fillna(0).to_numpy())
    assert r.report.filtered == {"kind not in where": 1}


def test_parquet_bytes_edge_endpoints_reach_their_agents(tmp_path):
    """An edge file of bytes endpoints reached no agent (b'a' is not 'a'): every edge was an unknown endpoint and the
    exposure 0 throughout."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f, _ = _bytes_table(tmp_path)
    e = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"src": pa.array([b"a", b"b"], pa.binary()),
                             "dst": pa.array([b"b", b"a"], pa.binary())}), e)
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "count", "name": "acts"},
                         {"kind": "exposure", "name": "seen", "of": "acts",
                          "edges": {"path": str(e), "source": "src", "target": "dst"}}]}
    r = read_trace(f, spec)
    acts = r.panel.values[:, :, 0]
    a, b = list(r.panel.agent_ids).index("a"), list(r.panel.agent_ids).index("b")
    np.testing.assert_array_equal(r.panel.values[:, a, 1], acts[:, b])  # a follows b
    np.testing.assert_array_equal(r.panel.values[:, b, 1], acts[:, a])
    assert r.panel.meta["edges"]["seen"]["used"] == 2


# ---------------------------------------------------------------- epochs in another unit than [step] unit
def test_epoch_milliseconds_read_as_seconds_refused(tmp_path):
    """pandas' ``to_json`` writes datetimes as epoch milliseconds. Read in the default unit (seconds) they were times
    in the year 58270, binned where they fell: 4 events of one hour became 2,334 hourly steps, without a word. A
    number that is a time after the year 9999 in ``unit`` is out of range (as ISO text with such a year is), named
    with the unit to set; in its own unit the trace bins as pandas does."""
    from aumann.errors import TraceRecordError

    df = pd.DataFrame({"agent": [1, 2, 1, 2], "amount": [1, 2, 3, 4],
                       "ts": pd.to_datetime(["2026-04-20 12:00", "2026-04-20 12:30", "2026-04-20 13:10",
                                             "2026-04-20 14:20"])})
    f = tmp_path / "pandas.jsonl"  # as pandas 2's to_json(orient="records", lines=True) writes them
    f.write_text("".join(json.dumps({"agent": a, "ts": int(t.timestamp() * 1000), "amount": v}) + "\n"
                         for a, t, v in zip(df.agent, df.ts, df.amount)))
    assert '"ts": 1776686400000' in f.read_text()
    spec = _spec({"bin": "1h"}, features=[{"kind": "sum", "name": "amount", "field": "amount"}])
    spec["step"]["field"] = "ts"
    with pytest.raises(TraceRecordError, match=r"pandas\.jsonl row 1: step field 'ts' is out of range: .*"
                                               r"\[step\] unit = 's' \(an epoch in ms, us or ns\?"):
        read_trace(f, spec)
    r = read_trace(f, dict(spec, step={"field": "ts", "bin": "1h", "unit": "ms"}))
    ref = df.assign(h=df.ts.dt.floor("1h")).pivot_table(index="h", columns="agent", values="amount", aggfunc="sum")
    assert list(r.panel.steps) == [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in ref.index]
    np.testing.assert_array_equal(r.panel.values[:, :, 0], ref.fillna(0).to_numpy())


def test_epoch_out_of_range_is_skipped_and_counted(tmp_path):
    """The last second of 9999 is a time; the first of 10000 out of range, skipped and counted under --skip-bad."""
    f = tmp_path / "edge.csv"
    f.write_text("agent,tick,amount\na,253402300799,1\nb,253402300800,2\nc,-62135596801,4\n")
    r = read_trace(f, _spec({"bin": "1d"}, on_bad="skip"))
    assert list(r.panel.agent_ids) == ["a"] and list(r.panel.steps) == ["9999-12-31T00:00:00Z"]
    (reason, n), = r.report.skipped.items()
    assert n == 2 and "out of range" in reason and r.report.skipped_at[reason] == [f"{f} line 3", f"{f} line 4"]


# ---------------------------------------------------------------- Parquet pandas Periods
@pytest.mark.parametrize("bin_", [None, "1d"])
def test_parquet_pandas_periods_refused(tmp_path, bin_):
    """A pandas Period is stored as its ordinal (days since 1970 for a daily period): binned by day, the four days
    2026-04-20 … 23 were the seconds 20563 … 20566, one bin at 1970-01-01 holding every event; unbinned, the steps
    20563 … Refused, naming what to write instead; their start times bin as pandas does."""
    df = pd.DataFrame({"agent": [1, 2, 1, 2], "amount": [1.5, 2.5, 3.5, 4.5],
                       "tick": pd.period_range("2026-04-20", periods=4, freq="D")})
    f = tmp_path / "periods.parquet"
    df.to_parquet(f)
    spec = _spec({"bin": bin_} if bin_ else None)
    with pytest.raises(TraceSchemaError, match=r"step field 'tick' of .*periods\.parquet' holds pandas Periods.*"
                                               r"start_time"):
        read_trace(f, spec)
    df.assign(tick=df.tick.dt.start_time).to_parquet(f)
    r = read_trace(f, _spec({"bin": "1d"}))
    assert list(r.panel.steps) == [f"2026-04-{d}T00:00:00Z" for d in (20, 21, 22, 23)]
    ref = df.pivot_table(index="tick", columns="agent", values="amount", aggfunc="sum").fillna(0)
    np.testing.assert_array_equal(r.panel.values[:, :, 1], ref.to_numpy())


# ---------------------------------------------------------------- action and [where] values that look like times
_SLOTS = [  # agent, tick, action, slot, amount
    (1, 0, "2026-04-20T12:00:00", "12:00", 1.0), (2, 0, "2026-04-20T12:30:00", "12:30", 2.0),
    (1, 1, "2026-04-20T12:00:00", "12:00", 3.0), (2, 1, "2026-04-20", "13:00", 4.0), (2, 2, "2026-04-20", "12:00", 5.0)]


def _slot_files(tmp_path):
    """The same events as a CSV table, a JSON lines table and flat span lines: {name: (path, spec)}."""
    import csv

    spec = {"format": "table", "where": {"slot": ["12:00"]}, "agent": {"field": "agent"}, "step": {"field": "tick"},
            "action": {"field": "action"}, "features": [
                {"kind": "count_each"},
                {"kind": "sum", "name": "noon", "field": "amount", "actions": ["2026-04-20T12:00:00"]}]}
    out = {}
    p = tmp_path / "slots.csv"
    with open(p, "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([("agent", "tick", "action", "slot", "amount"), *_SLOTS])
    out["csv"] = (p, spec)
    p = tmp_path / "slots.jsonl"
    p.write_text("".join(json.dumps(dict(zip(("agent", "tick", "action", "slot", "amount"), e))) + "\n"
                         for e in _SLOTS))
    out["jsonl"] = (p, spec)
    p = tmp_path / "spans.jsonl"
    p.write_text("".join(json.dumps({"trace_id": f"t{k}", "span_id": f"s{k}", "name": "act",
                                     "resource": {"agent.id": a}, "attributes": {"tick": t, "action": act, "slot": s,
                                                                                 "amount": x}}) + "\n"
                         for k, (a, t, act, s, x) in enumerate(_SLOTS)))
    spans = {"format": "otel", "where": {"attributes/slot": ["12:00"]}, "agent": {"field": "resource/agent.id"},
             "step": {"field": "attributes/tick"}, "action": {"field": "attributes/action"},
             "features": [spec["features"][0], {**spec["features"][1], "field": "attributes/amount"}]}
    out["spans"] = (p, spans)
    return out


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "spans"])
def test_time_like_actions_and_where_values_as_written(tmp_path, fmt):
    """DuckDB took the text "12:00" for the time 12:00:00 and "2026-04-20T12:00:00" for a timestamp (printed
    "2026-04-20 12:00:00"): [where] slot = ["12:00"] matched no record of a CSV or JSON lines table (every one filtered,
    "no usable events") and the action was not the one written, so actions = [...] kept nothing; the span reader,
    reading the JSON as it is, matched them. Every reader now compares them as written."""
    path, spec = _slot_files(tmp_path)[fmt]
    r = read_trace(path, spec)
    df = pd.DataFrame(_SLOTS, columns=["agent", "tick", "action", "slot", "amount"])
    kept = df[df.slot == "12:00"]
    assert list(r.panel.features) == [*sorted(kept.action.unique()), "noon"]
    noon = kept[kept.action == "2026-04-20T12:00:00"].pivot_table(index="tick", columns="agent", values="amount",
                                                                  aggfunc="sum")
    noon = noon.reindex(index=range(3), columns=[1, 2]).fillna(0)
    np.testing.assert_array_equal(r.panel.values[:, :, -1], noon.to_numpy())
    assert r.report.filtered == {"attributes/slot not in where" if fmt == "spans" else "slot not in where": 2}


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_boolean_words_in_where_as_written(tmp_path, fmt):
    """R's write.csv writes logicals as TRUE and FALSE, which DuckDB's CSV sniffer reads as booleans (keyed 'true'):
    [where] flag = ["TRUE"] matched no record of the CSV table, while the JSON lines table of the same text matched
    it. Both compare the text as written; a lowercase true still matches [true] in a CSV table."""
    rows = [(1, 0, "TRUE", 1.0), (2, 0, "FALSE", 2.0), (1, 1, "TRUE", 3.0)]
    f = tmp_path / f"flags.{fmt}"
    if fmt == "csv":
        f.write_text("agent,tick,flag,amount\n" + "".join(f"{a},{t},{x},{v}\n" for a, t, x, v in rows))
    else:
        f.write_text("".join(json.dumps(dict(zip(("agent", "tick", "flag", "amount"), r))) + "\n" for r in rows))
    spec = _spec(where={"flag": ["TRUE"]}, features=[{"kind": "sum", "name": "amount", "field": "amount"}])
    r = read_trace(f, spec)
    assert list(r.panel.agent_ids) == [1] and r.panel.values[:, 0, 0].tolist() == [1.0, 3.0]
    assert r.report.filtered == {"flag not in where": 1}
    if fmt == "csv":
        f.write_text(f.read_text().replace("TRUE", "true").replace("FALSE", "false"))
        r = read_trace(f, dict(spec, where={"flag": [True]}))
        assert r.panel.values.sum() == 4.0 and r.report.filtered == {"flag not in where": 1}


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_parquet_duration_edge_since_scaled_as_the_step(tmp_path, unit):
    """An edge file's ``since`` that pandas wrote as a timedelta (a Parquet duration) is the time the event table's
    duration step is: it was DuckDB's raw count of the file's unit, so an edge from 1 s on (10⁶ microseconds) existed
    from the 10⁶-th second, after every event, and exposure was 0 throughout. Read, it is the same edge list written
    as seconds in a CSV or JSON lines file. Unbinned, a duration is no step: refused, as the event step is."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f, _, _ = _durations(tmp_path, unit)  # events of agents 1 and 2 at 0 s, 1 s, 2 s, 3,601 s
    edges = pd.DataFrame({"src": [1, 2], "dst": [2, 1], "since": [3600, 0]})  # 1 sees 2 from the second hour
    t = pa.Table.from_pandas(edges.assign(since=pd.to_timedelta(edges["since"], unit="s")), preserve_index=False)
    t = t.set_column(2, "since", t.column("since").cast(pa.duration(unit)))
    pq.write_table(t, tmp_path / "edges.parquet")
    edges.to_csv(tmp_path / "edges.csv", index=False)
    edges.to_json(tmp_path / "edges.jsonl", orient="records", lines=True)

    def spec(path, step=None):
        return {"format": "table", "agent": {"field": "agent"}, "step": step or {"field": "tick", "bin": "1h"},
                "features": [{"kind": "count", "name": "n"},
                             {"kind": "exposure", "name": "seen", "of": "n",
                              "edges": {"path": str(path), "source": "src", "target": "dst", "since": "since"}}]}

    got = {k: read_trace(f, spec(tmp_path / f"edges.{k}")).panel for k in ("parquet", "csv", "jsonl")}
    n = got["csv"].values[:, :, 0]
    assert n.tolist() == [[2, 1], [0, 1]]  # hour 0: agent 1 twice, agent 2 once; hour 1: agent 2
    assert got["csv"].values[:, :, 1].tolist() == [[0, 2], [1, 0]]  # 1 sees 2's event of hour 1 only
    for k in ("parquet", "jsonl"):
        np.testing.assert_array_equal(got[k].values, got["csv"].values, err_msg=k)
    with pytest.raises(TraceSchemaError, match=r"edge file 'edges\.parquet': since field 'since' holds durations "
                                               rf"\(a Parquet duration\[{unit}\]"):
        read_trace(f, spec(tmp_path / "edges.parquet", step={"field": "agent"}))


# ---------------------------------------------------------------- NetLogo BehaviorSpace "table" output
_PREAMBLE = ['"BehaviorSpace results (NetLogo 6.4.0)"', '"/home/u/Wolf Sheep Predation.nlogo"', '"experiment"',
             '"11/29/2026 17:50:50:123 +0000"', '"min-pxcor","max-pxcor","min-pycor","max-pycor"',
             '"-25","25","-25","25"']


def _behaviorspace(tmp_path, reporter: str = "count sheep"):
    """A BehaviorSpace table as NetLogo writes it: six lines before the header, every field quoted, CRLF."""
    rows = [f'"[run number]","initial-number-sheep","grass?","[step]","{reporter}","mean [energy] of sheep"']
    for run in (1, 2):
        for step in range(4):
            rows.append(f'"{run}","{50 * run}","true","{step}","{100 + run * step}","{1.5 * step}"')
    f = tmp_path / "Wolf Sheep Predation experiment-table.csv"
    f.write_bytes(("\r\n".join(_PREAMBLE + rows) + "\r\n").encode())
    return f


def test_netlogo_behaviorspace_table(tmp_path):
    """Its six preamble lines are refused by their line (or, with on_bad = 'skip', skipped and counted): the table
    read is pandas' read of it from the header on."""
    from aumann.errors import TraceRecordError

    f = _behaviorspace(tmp_path)
    spec = {"format": "table", "agent": {"field": "[run number]"}, "step": {"field": "[step]"},
            "features": [{"kind": "last", "name": "sheep", "field": "count sheep"},
                         {"kind": "last", "name": "energy", "field": "mean [energy] of sheep"}]}
    with pytest.raises(TraceRecordError, match=r"experiment-table\.csv line 1: a line before the CSV header \(6 such"):
        read_trace(f, spec)
    r = read_trace(f, dict(spec, on_bad="skip"))
    df = pd.read_csv(f, skiprows=6)
    for k, col in enumerate(["count sheep", "mean [energy] of sheep"]):
        ref = df.pivot(index="[step]", columns="[run number]", values=col)
        np.testing.assert_array_equal(r.panel.values[:, :, k], ref.to_numpy())
    assert r.report.skipped == {"a line before the CSV header (DuckDB's sniffer skips it)": 6}
    assert r.report.records == 6 + len(df)


@pytest.mark.parametrize("reporter", ["count sheep", "count sheep / count wolves"])
def test_netlogo_behaviorspace_header_line(tmp_path, reporter):
    """With ``[csv] header_line = 7`` the six lines before the header are not read: the table is pandas'
    ``read_csv(skiprows=6)`` exactly, nothing skipped, and a bad row below the header is still refused by its line
    (``--skip-bad`` was the only way to read such a file, and it skipped bad rows too without a word)."""
    from aumann.errors import TraceRecordError, TraceSpecError

    f = _behaviorspace(tmp_path, reporter)
    spec = {"format": "table", "agent": {"field": "[run number]"}, "step": {"field": "[step]"},
            "csv": {"header_line": 7},
            "features": [{"kind": "last", "name": "sheep", "field": reporter.replace("/", "\\/")},
                         {"kind": "sum", "name": "energy", "field": "mean [energy] of sheep"}]}
    r = read_trace(f, spec)
    df = pd.read_csv(f, skiprows=6)
    assert list(r.panel.features) == ["sheep", "energy"]
    for k, col in enumerate([reporter, "mean [energy] of sheep"]):
        ref = df.pivot(index="[step]", columns="[run number]", values=col)
        np.testing.assert_array_equal(r.panel.values[:, :, k], ref.to_numpy())
    assert list(r.panel.agent_ids) == [1, 2] and list(r.panel.steps) == [0, 1, 2, 3]
    assert r.report.skipped == {} and r.report.records == len(df) == 8
    # a bad row below the header: refused by its line (6 preamble lines, the header, 8 rows: line 16)
    with open(f, "ab") as fh:
        fh.write(b'"1","50","true","x","1","2"\r\n')
    with pytest.raises(TraceRecordError, match=r"experiment-table\.csv line 16: step field '\[step\]' is not an "
                                               "integer step"):
        read_trace(f, spec)
    r2 = read_trace(f, dict(spec, on_bad="skip"))
    assert r2.report.skipped == {"step field '[step]' is not an integer step": 1}
    np.testing.assert_array_equal(r2.panel.values, r.panel.values)
    # a header_line that misses the header says which line holds it
    with pytest.raises(TraceSchemaError, match=r"header_line = 6, but line 6 of .* does not hold the spec's columns "
                                               r".*\(line 7 holds them: header_line = 7\)"):
        read_trace(f, dict(spec, csv={"header_line": 6}))
    # a table that is not CSV has no header line
    pq_file = tmp_path / "t.parquet"
    df.to_parquet(pq_file)
    with pytest.raises(TraceSpecError, match=r"\[csv\] header_line applies to CSV tables"):
        read_trace(pq_file, spec)


def test_behaviorspace_header_line_of_shards(tmp_path):
    """Shards of one table share the declared header line: read together (a bad row named by its shard and line),
    and a shard whose header sits on another line is refused naming it, not read from the wrong line."""
    from aumann.errors import TraceRecordError

    d = tmp_path / "runs"
    d.mkdir()
    for run in (1, 2):
        f = _behaviorspace(tmp_path, "count sheep")
        f.rename(d / f"run{run}.csv")
    spec = {"format": "table", "agent": {"field": "[run number]"}, "step": {"field": "[step]"},
            "csv": {"header_line": 7}, "features": [{"kind": "sum", "name": "sheep", "field": "count sheep"}]}
    r = read_trace(d, spec)
    ref = pd.concat([pd.read_csv(d / f"run{k}.csv", skiprows=6) for k in (1, 2)]).pivot_table(
        index="[step]", columns="[run number]", values="count sheep", aggfunc="sum")
    np.testing.assert_array_equal(r.panel.values[:, :, 0], ref.to_numpy())
    (d / "run2.csv").write_bytes((d / "run2.csv").read_bytes().replace(b'"25"\r\n"[run', b'"25"\r\n\r\n"[run'))
    with pytest.raises(TraceSchemaError, match=r"line 7 of '.*run2\.csv' does not hold the spec's columns .*\(line 8 "
                                               r"holds them: header_line = 8; the files of a table share their header"):
        read_trace(d, spec)
    (d / "run2.csv").write_bytes((d / "run1.csv").read_bytes() + b'"2","50","true","3","oops","1"\r\n')
    with pytest.raises(TraceRecordError, match=r"run2\.csv line 16: field 'count sheep' is not a finite number"):
        read_trace(d, spec)


@pytest.mark.parametrize("preamble", [True, False])
def test_column_name_with_a_slash(tmp_path, preamble):
    """A BehaviorSpace reporter such as 'count sheep / count wolves' is a column name holding '/', which a field path
    splits into nested keys: the column could not be read, and the error said the table had no column 'count sheep /
    count wolves' (listing it among its columns, or, below the preamble, only the preamble's first line). ``\\/`` is a
    '/' inside a key, and the error says so."""
    f = _behaviorspace(tmp_path, "count sheep / count wolves")
    if not preamble:
        f.write_bytes(b"\r\n".join(f.read_bytes().split(b"\r\n")[6:]))
    spec = {"format": "table", "on_bad": "skip", "agent": {"field": "[run number]"}, "step": {"field": "[step]"},
            "features": [{"kind": "last", "name": "ratio", "field": "count sheep / count wolves"}]}
    with pytest.raises(TraceSchemaError, match=r"a field path splits at '/' into nested keys, so \['count sheep / "
                                               r"count wolves'\] name\(s\) a key inside a column.*field = 'count "
                                               r"sheep \\/ count wolves'"):
        read_trace(f, spec)
    spec["features"][0]["field"] = "count sheep \\/ count wolves"
    r = read_trace(f, spec)
    ref = pd.read_csv(f, skiprows=6 if preamble else 0).pivot(index="[step]", columns="[run number]",
                                                              values="count sheep / count wolves")
    np.testing.assert_array_equal(r.panel.values[:, :, 0], ref.to_numpy())


# ---------------------------------------------------------------- UUID-shaped text in JSON lines
_U = "550e8400-e29b-41d4-a716-446655440000"


@pytest.mark.parametrize("fmt", ["jsonl", "spans"])
def test_uuid_text_is_as_written(tmp_path, fmt):
    """DuckDB's JSON detection types a field of UUID-shaped strings as UUID and writes it in lowercase: the agents
    '550E8400-...' and '550e8400-...' were one agent (its sum 3, merged without a count), and [where] kind =
    ['550E8400-...'] matched nothing. The span reader, reading the JSON as it is, keeps them apart; so does the table
    reader now."""
    other = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
    rows = [(_U.upper(), 0, 1.0, _U.upper()), (_U, 0, 2.0, _U), (other, 1, 4.0, _U.upper())]
    if fmt == "jsonl":
        f = tmp_path / "uuids.jsonl"
        f.write_text("".join(json.dumps(dict(zip(("agent", "tick", "amount", "kind"), r))) + "\n" for r in rows))
        spec = _spec(features=[{"kind": "sum", "name": "amount", "field": "amount"}])
        where = "kind"
    else:
        f = tmp_path / "spans.jsonl"
        f.write_text("".join(json.dumps({"trace_id": f"t{k}", "span_id": f"s{k}", "name": "act",
                                         "resource": {"agent.id": a}, "attributes": {"tick": t, "amount": x,
                                                                                     "kind": w}}) + "\n"
                             for k, (a, t, x, w) in enumerate(rows)))
        spec = {"format": "otel", "agent": {"field": "resource/agent.id"}, "step": {"field": "attributes/tick"},
                "features": [{"kind": "sum", "name": "amount", "field": "attributes/amount"}]}
        where = "attributes/kind"
    r = read_trace(f, spec)
    assert list(r.panel.agent_ids) == sorted([_U.upper(), _U, other])
    assert r.panel.values.sum(axis=(0, 2)).tolist() == [1.0, 2.0, 4.0]
    r = read_trace(f, dict(spec, where={where: [_U.upper()]}))
    assert list(r.panel.agent_ids) == sorted([_U.upper(), other]) and r.panel.values.sum() == 5.0


def test_uuid_where_values_as_written(tmp_path):
    """A [where] field of UUID-shaped strings (the agents plain integers): '550E8400-...' was read as the lowercase
    UUID and matched no list naming it as written."""
    rows = [(1, 0, 1.0, _U.upper()), (2, 0, 2.0, _U), (1, 1, 4.0, _U.upper())]
    f = tmp_path / "uuids.jsonl"
    f.write_text("".join(json.dumps(dict(zip(("agent", "tick", "amount", "kind"), r))) + "\n" for r in rows))
    spec = _spec(where={"kind": [_U.upper()]}, features=[{"kind": "sum", "name": "amount", "field": "amount"}])
    r = read_trace(f, spec)
    assert list(r.panel.agent_ids) == [1] and r.panel.values[:, 0, 0].tolist() == [1.0, 4.0]
    assert r.report.filtered == {"kind not in where": 1}


@pytest.mark.parametrize(("a", "b"), [(_U.upper(), "6BA7B810-9DAD-11D1-80B4-00C04FD430C8"), ("epoch", "today")])
def test_json_edge_endpoints_as_written(tmp_path, a, b):
    """A JSON lines edge file's endpoints DuckDB types as UUIDs (written in lowercase) or dates ('epoch') reached no
    agent of the event table, which reads each id as written: the exposure was 0 throughout."""
    f = tmp_path / "events.jsonl"
    f.write_text("".join(json.dumps({"agent": x, "tick": t}) + "\n" for x, t in [(a, 0), (b, 0), (b, 1)]))
    e = tmp_path / "edges.jsonl"
    e.write_text(json.dumps({"src": a, "dst": b}) + "\n")
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "count", "name": "acts"},
                         {"kind": "exposure", "name": "seen", "of": "acts",
                          "edges": {"path": str(e), "source": "src", "target": "dst"}}]}
    r = read_trace(f, spec)
    ia, ib = list(r.panel.agent_ids).index(a), list(r.panel.agent_ids).index(b)
    np.testing.assert_array_equal(r.panel.values[:, ia, 1], r.panel.values[:, ib, 0])  # a sees b's acts: 1, 1
    assert r.panel.values[:, ia, 1].tolist() == [1.0, 1.0] and r.panel.meta["edges"]["seen"]["used"] == 1


# ---------------------------------------------------------------- European CSV (decimal comma), Latin-1 text
def _european(tmp_path):
    """Events as pandas (or a spreadsheet in a European locale) writes them: ';' between fields, a decimal comma."""
    df = pd.DataFrame({"agent": [1, 2, 1, 2], "tick": [0, 0, 1, 1], "amount": [1.5, 2.25, 3.0, -0.125]})
    f = tmp_path / "eu.csv"
    df.to_csv(f, sep=";", decimal=",", index=False)
    assert "1,5" in f.read_text()
    return f, df


def test_decimal_comma_named_and_read_with_decimal_separator(tmp_path):
    """A decimal comma (``1,5``) was "not a finite number" without a word on why: the error says it looks like a
    decimal comma and names ``[csv] decimal_separator = ','``, which reads the table as pandas'
    ``read_csv(sep=';', decimal=',')`` does."""
    from aumann.errors import TraceRecordError, TraceSpecError

    f, df = _european(tmp_path)
    spec = _spec(features=[{"kind": "sum", "name": "amount", "field": "amount"}])
    with pytest.raises(TraceRecordError, match=r"eu\.csv line 2: field 'amount' is not a finite number: it looks like "
                                               r"a number with a decimal comma \(1,5\); a CSV table reads such numbers "
                                               r"with \[csv\] decimal_separator = ','"):
        read_trace(f, spec)
    r = read_trace(f, dict(spec, csv={"decimal_separator": ","}))
    ref = pd.read_csv(f, sep=";", decimal=",").pivot(index="tick", columns="agent", values="amount")
    np.testing.assert_array_equal(r.panel.values[:, :, 0], ref.to_numpy())
    np.testing.assert_array_equal(ref.to_numpy(), df.pivot(index="tick", columns="agent", values="amount").to_numpy())
    # a column DuckDB reads as text (a word in it): its 1,5 is 1.5 too, the word refused
    f.write_text(f.read_text().replace("-0,125", "many"))
    r2 = read_trace(f, dict(spec, csv={"decimal_separator": ","}, on_bad="skip"))
    assert r2.report.skipped == {"field 'amount' is not a finite number": 1}
    np.testing.assert_array_equal(r2.panel.values[:, :, 0], [[1.5, 2.25], [3.0, 0.0]])
    with pytest.raises(TraceSpecError, match=r"\[csv\] decimal_separator applies to CSV tables"):
        df.to_parquet(tmp_path / "eu.parquet")
        read_trace(tmp_path / "eu.parquet", dict(spec, csv={"decimal_separator": ","}))


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "spans"])
def test_latin1_named_as_not_utf8(tmp_path, fmt):
    """A Latin-1 line (``José`` as the byte 0xE9) was "not a JSON object holding any of the spec's fields" in a JSON
    lines table, and a CSV line that "does not split into the header's columns": both now say it is not UTF-8 text,
    at which byte of the file, and how to convert it; skipped, counted under that reason. The span reader read such a
    line with the byte as U+FFFD: the agents ``José`` and ``Josè`` were one agent ``Jos\ufffd``, without a word; it
    now refuses the line as the table does (naming the byte of the line), or skips and counts it."""
    from aumann.errors import TraceFormatError, TraceRecordError

    rows = [{"agent": 1, "tick": 0, "amount": 1.5, "who": "b"}, {"agent": 2, "tick": 0, "amount": 2.0, "who": "José"},
            {"agent": 3, "tick": 0, "amount": 4.0, "who": "Josè"}]
    f = tmp_path / f"latin1.{'jsonl' if fmt == 'spans' else fmt}"
    where: dict = {}
    if fmt == "jsonl":
        f.write_bytes("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("latin-1"))
    elif fmt == "csv":
        pd.DataFrame(rows).to_csv(f, index=False, encoding="latin-1")
        where = {"who": ["b", "José", "Josè"]}  # DuckDB's CSV reader checks the encoding of the columns it reads
    else:
        f.write_bytes("".join(json.dumps({"trace_id": f"t{i}", "span_id": f"s{i}", "name": "act", "attributes": r},
                                         ensure_ascii=False) + "\n" for i, r in enumerate(rows)).encode("latin-1"))
    data = f.read_bytes()
    byte = data.index(b"\xe9")
    spec = _spec(where=where, features=[{"kind": "sum", "name": "amount", "field": "amount"}])
    if fmt == "spans":
        spec = {"format": "otel", "agent": {"field": "attributes/who"}, "step": {"field": "attributes/tick"},
                "features": [{"kind": "sum", "name": "amount", "field": "attributes/amount"}]}
        byte -= data.rindex(b"\n", 0, byte) + 1  # the byte of its line
    where_at, of, error = {"jsonl": ("row 2", "file", TraceRecordError), "csv": ("line 3", "file", TraceRecordError),
                           "spans": ("line 2", "line", TraceFormatError)}[fmt]
    with pytest.raises(error, match=rf"latin1\.jsonl? {where_at}: not UTF-8 text \(invalid UTF-8 at byte {byte} of "
                                    rf"the {of}; a Latin-1 or Windows-1252 file\? .*iconv -f latin1 -t utf-8"
                       if fmt != "csv" else
                       rf"latin1\.csv {where_at}: not UTF-8 text \(invalid UTF-8 at byte {byte} of the {of}; a "
                       r"Latin-1 or Windows-1252 file\? .*iconv -f latin1 -t utf-8"):
        read_trace(f, spec)
    r = read_trace(f, dict(spec, on_bad="skip"))
    assert len(r.report.skipped) == 1 and r.report.n_skipped == 2
    assert next(iter(r.report.skipped)).startswith("not UTF-8 text (a Latin-1 or Windows-1252 file?")
    assert r.panel.values[:, :, 0].tolist() == [[1.5]]


def test_latin1_concordia_log_named_as_not_utf8(tmp_path):
    """A Concordia log (one JSON document) holding a Latin-1 byte was "the JSON ends early after entry 4 ... (a
    truncated log?)": it now says it is not UTF-8 text, at which byte of the file."""
    from pathlib import Path

    from aumann.errors import TraceFormatError

    data = (Path(__file__).parent / "traces" / "concordia_log.json").read_bytes()
    text = data.decode("utf-8")
    at = text.index("round 1 begins")  # inside an entry's text, after the content store
    f = tmp_path / "log.json"
    f.write_bytes(text[:at].encode("utf-8") + "é".encode("latin-1") + text[at + 1:].encode("utf-8"))
    byte = len(text[:at].encode("utf-8"))
    assert f.read_bytes()[byte] == 0xE9
    with pytest.raises(TraceFormatError, match=rf"log\.json: not UTF-8 text \(invalid UTF-8 at byte {byte:,} of the "
                                               r"file; a Latin-1 or Windows-1252 file\? .*iconv"):
        read_trace(f)


# ---------------------------------------------------------------- edge files laid out like their event tables
def _exposure_by_hand(events: pd.DataFrame, edges: pd.DataFrame, value: str, since_step) -> np.ndarray:
    """Σ over each agent's targets of their ``value`` per step, from edges with ``since_step(since) <= step`` (pandas,
    independent of the reader)."""
    per = events.pivot_table(index="step", columns="agent", values=value, aggfunc="sum").fillna(0.0)
    out = pd.DataFrame(0.0, index=per.index, columns=per.columns)
    for _, e in edges.iterrows():
        from_ = since_step(e["since"])
        out.loc[out.index >= from_, e["src"]] += per.loc[per.index >= from_, e["dst"]]
    return out.to_numpy()


def test_behaviorspace_edge_file_header_line(tmp_path):
    """A CSV edge file written with a BehaviorSpace table's six lines before its header: DuckDB's sniffer took the
    first (one field) for the header, and the edge columns were "missing". ``[features.edges.csv] header_line = 7``
    reads it as pandas' ``read_csv(skiprows=6)`` does; the spec's top-level ``[csv]`` is the event table's, and the
    error says where the edge header is and where to say so."""
    from aumann.data.traces.spec import load_spec
    from aumann.errors import TraceSpecError

    ev = ['"who","[step]","posts"'] + [f'"{a}","{s}","{a * 10 + s}"' for a in (1, 2, 3) for s in range(3)]
    (tmp_path / "ev.csv").write_bytes(("\r\n".join(_PREAMBLE + ev) + "\r\n").encode())
    ed = ['"src","dst","since"', '"1","2","0"', '"2","3","1"', '"3","1","2"', '"1","3","2"']
    (tmp_path / "edges.csv").write_bytes(("\r\n".join(_PREAMBLE + ed) + "\r\n").encode())
    edges = {"path": str(tmp_path / "edges.csv"), "source": "src", "target": "dst", "since": "since"}
    spec = {"format": "table", "agent": {"field": "who"}, "step": {"field": "[step]"}, "csv": {"header_line": 7},
            "features": [{"kind": "sum", "name": "posts", "field": "posts"},
                         {"kind": "exposure", "name": "seen", "of": "posts", "edges": edges}]}
    with pytest.raises(TraceSchemaError, match=r"edge file .* has no column\(s\) \['src', 'dst', 'since'\].*; line 7 "
                                               r"of '.*edges\.csv' holds them: say so with \[features\.edges\.csv\] "
                                               r"header_line = 7 \(the spec's top-level \[csv\] is the event table's"):
        read_trace(tmp_path / "ev.csv", spec)
    toml = tmp_path / "spec.toml"
    toml.write_text(f"""format = "table"
agent = {{ field = "who" }}
step = {{ field = "[step]" }}
[csv]
header_line = 7
[[features]]
kind = "sum"
name = "posts"
field = "posts"
[[features]]
kind = "exposure"
name = "seen"
of = "posts"
[features.edges]
path = '{tmp_path / "edges.csv"}'
source = "src"
target = "dst"
since = "since"
[features.edges.csv]
header_line = 7
""")
    r = read_trace(tmp_path / "ev.csv", load_spec(toml))
    events = pd.read_csv(tmp_path / "ev.csv", skiprows=6).rename(columns={"who": "agent", "[step]": "step"})
    ref = _exposure_by_hand(events, pd.read_csv(tmp_path / "edges.csv", skiprows=6), "posts", lambda s: s)
    np.testing.assert_array_equal(r.panel.values[:, :, 1], ref)
    assert ref.tolist() == [[20, 0, 0], [21, 31, 0], [22 + 32, 32, 12]]  # the numbers by hand too
    assert r.panel.meta["edges"]["seen"]["used"] == 4
    with pytest.raises(TraceSchemaError, match=r"edge file: \[features\.edges\.csv\] header_line = 6, but line 6 of "
                                               r"'.*edges\.csv' does not hold the spec's columns .*\(line 7 holds "
                                               r"them: header_line = 7\)"):
        read_trace(tmp_path / "ev.csv", dict(spec, features=[spec["features"][0], dict(
            spec["features"][1], edges=dict(edges, csv={"header_line": 6}))]))
    pd.read_csv(tmp_path / "edges.csv", skiprows=6).to_parquet(tmp_path / "edges.parquet")
    with pytest.raises(TraceSpecError, match=r"\[features\.edges\.csv\] applies to CSV edge files; .* is parquet"):
        read_trace(tmp_path / "ev.csv", dict(spec, features=[spec["features"][0], dict(
            spec["features"][1], edges=dict(edges, path=str(tmp_path / "edges.parquet"), csv={"header_line": 7}))]))
    with pytest.raises(TraceSpecError, match=r"edges\.csv describes a CSV edge file"):
        load_spec(dict(spec, features=[spec["features"][0], dict(spec["features"][1], edges={
            "table": "follow", "csv": {"header_line": 7}})]))


def test_european_edge_file_decimal_separator(tmp_path):
    """An edge file pandas wrote as the events (``sep=';', decimal=','``) with a ``since`` of seconds: its ``0,5``
    was "not a step/timestamp" with no word on why; the error names the decimal comma and
    ``[features.edges.csv] decimal_separator = ','``, which reads it as pandas' ``read_csv(sep=';', decimal=',')``."""
    from aumann.errors import TraceRecordError

    events = pd.DataFrame({"agent": [1, 2, 3, 1, 2, 3], "t": [0.0, 10, 20, 3600, 3610, 3620],
                           "amount": [1.5, 2.25, 3.5, 4.5, 5.75, 6.5]})
    events.to_csv(tmp_path / "eu.csv", sep=";", decimal=",", index=False)
    edges_df = pd.DataFrame({"src": [1, 2, 3], "dst": [2, 3, 1], "since": [0.5, 3600.5, 7200.25]})
    edges_df.to_csv(tmp_path / "eu_edges.csv", sep=";", decimal=",", index=False)
    assert "0,5" in (tmp_path / "eu_edges.csv").read_text()
    edges = {"path": str(tmp_path / "eu_edges.csv"), "source": "src", "target": "dst", "since": "since"}
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "t", "bin": 3600},
            "csv": {"decimal_separator": ","},
            "features": [{"kind": "sum", "name": "amount", "field": "amount"},
                         {"kind": "exposure", "name": "seen", "of": "amount", "edges": edges}]}
    with pytest.raises(TraceRecordError, match=r"eu_edges\.csv line 2: since = '0,5' is not a step/timestamp: it looks "
                                               r"like a number with a decimal comma \(1,5\); a CSV edge file reads "
                                               r"such numbers with \[features\.edges\.csv\] decimal_separator = ','"):
        read_trace(tmp_path / "eu.csv", spec)
    spec["features"][1]["edges"] = dict(edges, csv={"decimal_separator": ","})
    r = read_trace(tmp_path / "eu.csv", spec)
    ev = pd.read_csv(tmp_path / "eu.csv", sep=";", decimal=",").assign(step=lambda d: d["t"] // 3600)
    ed = pd.read_csv(tmp_path / "eu_edges.csv", sep=";", decimal=",")
    ref = _exposure_by_hand(ev, ed, "amount", lambda s: s // 3600)
    np.testing.assert_array_equal(r.panel.values[:, :, 1], ref)
    assert ref.tolist() == [[2.25, 0, 0], [5.75, 6.5, 0]]  # 3 → 1 from the third hour, after the last event
    # a since column DuckDB reads as text (a word in it): its 0,5 is 0.5 too, the word named
    (tmp_path / "eu_edges.csv").write_text((tmp_path / "eu_edges.csv").read_text().replace("7200,25", "later"))
    with pytest.raises(TraceRecordError, match=r"eu_edges\.csv line 4: since = 'later' is not a step/timestamp \("):
        read_trace(tmp_path / "eu.csv", spec)


# ---------------------------------------------------------------- Repast Simphony's file sink, AgentPy's DataDict.save
def _repast_file_sink(tmp_path, delimiter: str = ","):
    """A non-aggregate data set written by Repast Simphony's file sink as its ``TabularFormatter`` writes it
    (repast.simphony.data2): the source ids quoted in the header, the values unquoted (``Double.toString``: the tick
    ``1.0``), the default sources ``tick`` and ``run`` first, under its default name ``ModelOutput.<timestamp>.txt``."""
    rng = np.random.default_rng(0)
    rows = [(float(tick), 1, agent, round(float(rng.uniform(0, 10)), 3), "true" if rng.random() > 0.3 else "false")
            for tick in range(1, 6) for agent in range(1, 5) if (tick, agent) != (1, 4)]  # agent 4 born at tick 2
    f = tmp_path / "ModelOutput.2026.Nov.29.19_30_00.txt"
    header = delimiter.join(f'"{c}"' for c in ("tick", "run", "AgentID", "Energy", "Hungry"))
    f.write_text(header + "\n" + "".join(delimiter.join(map(str, r)) + "\n" for r in rows))
    return f


@pytest.mark.parametrize("delimiter", [",", "\t"])
def test_repast_file_sink_txt(tmp_path, delimiter):
    """Repast Simphony's file sink names its output ``.txt``: it was refused ("a table is CSV/TSV, Parquet or JSON lines
    files of one kind") until renamed. Read as delimited text, it is pandas' ``read_csv`` of it: the tick ``1.0`` the
    step 1, ``true``/``false`` counted 1 and 0, an agent from its first tick on."""
    f = _repast_file_sink(tmp_path, delimiter)
    assert f.read_text().startswith(f'"tick"{delimiter}"run"') and f"\n1.0{delimiter}1{delimiter}1{delimiter}" in \
        f.read_text()
    spec = {"format": "table", "agent": {"field": "AgentID"}, "step": {"field": "tick"},
            "features": [{"kind": "last", "name": "energy", "field": "Energy"},
                         {"kind": "sum", "name": "hungry", "field": "Hungry"}]}
    r = read_trace(f, spec)
    df = pd.read_csv(f, sep=delimiter)
    assert list(r.panel.steps) == [1, 2, 3, 4, 5] and list(r.panel.agent_ids) == [1, 2, 3, 4]
    energy = df.pivot(index="tick", columns="AgentID", values="Energy")
    np.testing.assert_array_equal(r.panel.values[:, :, 0], energy.ffill().fillna(0.0).to_numpy())
    hungry = df.assign(h=df["Hungry"].astype(float)).pivot(index="tick", columns="AgentID", values="h")
    np.testing.assert_array_equal(r.panel.values[:, :, 1], hungry.fillna(0.0).to_numpy())
    assert r.panel.alive.tolist() == energy.notna().cummax().to_numpy().tolist()  # agent 4 from tick 2
    from aumann.data.traces import detect_format
    from aumann.errors import TraceFormatError

    with pytest.raises(TraceFormatError, match="cannot tell the format"):  # a .txt is a table where the spec says so
        detect_format(f)


def test_agentpy_datadict_save(tmp_path):
    """AgentPy's ``DataDict.save`` writes each agent type's variables as ``variables_<AgentType>.csv`` indexed
    ``obj_id, t`` (``Model.create_output``: pandas' ``set_index(...).to_csv``); a variable not recorded at a step is
    an empty field. Read as pandas reads it; the folder is refused (tables of several kinds); an experiment's file
    (``sample_id, iteration`` first) holds every run, and ``[where]`` picks one."""
    from aumann.errors import TraceFormatError

    out = tmp_path / "ap_output" / "WealthModel_1"
    out.mkdir(parents=True)
    rng = np.random.default_rng(1)
    log = pd.DataFrame([(obj, t, int(rng.integers(0, 5)), None if t == 0 else bool(rng.random() > 0.5))
                        for obj in (1, 2, 3) for t in range(4)], columns=["obj_id", "t", "wealth", "rich"])
    log.set_index(["obj_id", "t"]).to_csv(out / "variables_WealthAgent.csv")
    pd.DataFrame({"t": range(4), "gini": [0.1, 0.2, 0.3, 0.4]}).set_index("t").to_csv(out / "variables_WealthModel.csv")
    (out / "info.json").write_text(json.dumps({"model_type": "WealthModel", "agentpy_version": "0.1.5"}))
    spec = {"format": "table", "agent": {"field": "obj_id"}, "step": {"field": "t"},
            "features": [{"kind": "sum", "name": "wealth", "field": "wealth"},
                         {"kind": "sum", "name": "rich", "field": "rich"}]}
    r = read_trace(out / "variables_WealthAgent.csv", spec)
    df = pd.read_csv(out / "variables_WealthAgent.csv")
    np.testing.assert_array_equal(r.panel.values[:, :, 0], df.pivot(index="t", columns="obj_id", values="wealth"))
    rich = df.assign(rich=df["rich"].astype(float)).pivot(index="t", columns="obj_id", values="rich").fillna(0.0)
    np.testing.assert_array_equal(r.panel.values[:, :, 1], rich.to_numpy())
    assert r.report.missing_values == {"rich": 3}
    with pytest.raises(TraceFormatError, match=r"of one kind; got \['info\.json'"):
        read_trace(out, spec)
    runs = pd.DataFrame([(s, i, obj, t, 100 * s + 10 * i + obj + t) for s in (0, 1) for i in (0, 1) for obj in (1, 2)
                         for t in range(3)], columns=["sample_id", "iteration", "obj_id", "t", "wealth"])
    runs.set_index(["sample_id", "iteration", "obj_id", "t"]).to_csv(tmp_path / "exp.csv")
    one = dict(spec, features=spec["features"][:1], where={"sample_id": [1], "iteration": [0]})
    got = read_trace(tmp_path / "exp.csv", one).panel.values[:, :, 0]
    ref = runs[(runs.sample_id == 1) & (runs.iteration == 0)].pivot(index="t", columns="obj_id", values="wealth")
    np.testing.assert_array_equal(got, ref.to_numpy())
    assert got.tolist() == [[101, 102], [102, 103], [103, 104]]


def test_gama_species_save_header_is_refused_not_shifted(tmp_path):
    """GAMA's ``save people format: 'csv'`` (``CSVSaver``) writes ``cycle,name;location.x,...``: a header one field
    short of its rows. Every line is refused as too many columns (never read shifted by a column: ``energy`` would
    be the z coordinate); with the header's ';' written ',' the file reads as pandas reads it. A list saved from a
    reflex (``save [cycle, name, energy]``) reads as it is."""
    from aumann.errors import TraceRecordError

    rows = [(c, f"people{i}", 10.0 * i, 5.0 * c, 0.0, 1.5 * c + i) for c in range(3) for i in range(3)]
    body = "".join(",".join(map(str, r)) + "\n" for r in rows)
    f = tmp_path / "people.csv"
    f.write_text("cycle,name;location.x,location.y,location.z,energy\n" + body)
    spec = {"format": "table", "agent": {"field": "cycle"}, "step": {"field": "cycle"},
            "features": [{"kind": "sum", "name": "energy", "field": "energy"}]}
    with pytest.raises(TraceRecordError, match=r"people\.csv line 2: a CSV line that does not split into the header's "
                                               r"columns \(too many columns; 9 such line"):
        read_trace(f, spec)
    f.write_text("cycle,name,location.x,location.y,location.z,energy\n" + body)
    spec = dict(spec, agent={"field": "name"})
    r = read_trace(f, spec)
    ref = pd.read_csv(f).pivot(index="cycle", columns="name", values="energy")
    np.testing.assert_array_equal(r.panel.values[:, :, 0], ref.to_numpy())
    g = tmp_path / "vals.csv"
    g.write_text("cycle,name,energy\n" + "".join(f"{c},people{i},{1.5 * c + i}\n" for c in range(3) for i in range(3)))
    np.testing.assert_array_equal(read_trace(g, spec).panel.values, r.panel.values)


def test_a_parquet_bytes_endpoint_that_is_not_utf8_is_counted_as_such_not_as_an_unknown_endpoint(tmp_path):
    """An endpoint of a binary column whose bytes are no UTF-8 text (b'\\xff\\x01') and no agent's id was counted as an
    ``unknown_endpoint`` (a good id of an agent that never acted); OASIS says of such a BLOB that it is a value of the
    wrong type. It is now skipped and counted under that reason, with its row, under either on_bad (it was never
    refused, so it is not now); bytes an agent has as its id still reach that agent."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "ev.parquet"
    pq.write_table(pa.table({"agent": pa.array([b"a", b"b", b"\xfe", b"a"], pa.binary()), "tick": [0, 0, 1, 1]}), f)
    e = tmp_path / "edges.parquet"
    pq.write_table(pa.table({"src": pa.array([b"a", b"\xff\x01", b"b", b"\xfe"], pa.binary()),
                             "dst": pa.array([b"b", b"a", b"zz", b"a"], pa.binary())}), e)
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
            "features": [{"kind": "count", "name": "acts"},
                         {"kind": "exposure", "name": "seen", "of": "acts",
                          "edges": {"path": str(e), "source": "src", "target": "dst"}}]}
    why = ("edge field 'src' holds bytes that are not UTF-8 text, where an agent id belongs (no agent has them as its "
           "id)")
    for on_bad in ("error", "skip"):
        r = read_trace(f, spec, on_bad=on_bad)
        assert r.report.edges["seen"] == {"edges": 4, "used": 2, "unknown_endpoint": 1, "skipped": 1, "duplicate": 0}
        assert r.report.edges_skipped == {why: 1} and r.report.edges_skipped_at == {why: [f"{e} row 2"]}


def test_a_parquet_binary_agent_id_that_is_not_utf8_is_labelled_by_its_hex(tmp_path):
    """An agent column of binary values whose bytes are no UTF-8 text was labelled as Python spells bytes,
    "b'\\xfe'"; it is X'FE', as an OASIS BLOB id, and counted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "ev.parquet"
    pq.write_table(pa.table({"agent": pa.array([b"a", b"\xfe", b"\xfe"], pa.binary()), "tick": [0, 0, 1]}), f)
    r = read_trace(f, {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
                       "features": [{"kind": "count", "name": "acts"}]})
    assert [str(i) for i in r.panel.agent_ids] == ["X'FE'", "a"]
    assert r.report.blob_ids == 2


def test_a_parquet_binary_action_that_is_not_utf8_is_labelled_by_its_hex(tmp_path):
    """An action column of binary values whose bytes are no UTF-8 text named its count_each feature as Python spells
    bytes, n_b'\\xfe'; it is n_X'FE', as an agent id of such bytes is labelled, and the records are counted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "ev.parquet"
    pq.write_table(pa.table({"agent": ["a", "b", "a"], "tick": [0, 0, 1],
                             "act": pa.array([b"buy", b"\xfe", b"\xfe"], pa.binary())}), f)
    r = read_trace(f, {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
                       "action": {"field": "act"}, "features": [{"kind": "count_each", "prefix": "n_"}]})
    assert list(r.panel.features) == ["n_X'FE'", "n_buy"]
    assert r.report.blob_actions == 2 and r.report.blob_ids == 0
    from aumann.studies.charts import Charts
    from aumann.studies.trace_sections import trace_blocks

    held = dict(trace_blocks(tmp_path, {"trace": r.report.to_dict()}, Charts(interactive=False), plots=False)[0].items)
    assert held["binary actions"].startswith("2 record(s) give the action as bytes that are not UTF-8 text")
