"""A trace's integer field values past ±2**53 become float64 features with a count in the report and one warning
naming the field, never silently: a CSV/JSONL/Parquet/SQLite value 2**53 + 1 was read as 2**53 without a word."""

from __future__ import annotations

import json
import sqlite3
import warnings

import numpy as np
import pytest

from aumann.data.traces import load_spec, read_trace
from aumann.errors import PrecisionLossWarning, TraceRecordError

BIG = 2**53 + 1
SPEC = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
        "features": [{"kind": "last", "name": "amt", "field": "amount"}, {"kind": "sum", "name": "q", "field": "qty"}]}


def _write(tmp_path, kind: str, rows: list[dict]):
    if kind == "csv":
        f = tmp_path / "ev.csv"
        f.write_text("agent,tick,amount,qty\n" + "".join(f"{r['agent']},{r['tick']},{r['amount']},{r['qty']}\n"
                                                          for r in rows))
    elif kind == "jsonl":
        f = tmp_path / "ev.jsonl"
        f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        f = tmp_path / "ev.parquet"
        pq.write_table(pa.table({k: pa.array([r[k] for r in rows], type=pa.string() if k == "agent" else pa.int64())
                                 for k in rows[0]}), f)
    return f


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_integer_values_past_2_53_are_counted_and_warned_of_naming_the_field(tmp_path, kind):
    rows = [{"agent": "a", "tick": 0, "amount": BIG, "qty": 1}, {"agent": "b", "tick": 0, "amount": -(BIG + 2),
                                                                   "qty": 2},
            {"agent": "a", "tick": 1, "amount": 2**53, "qty": 3}]
    f = _write(tmp_path, kind, rows)
    with pytest.warns(PrecisionLossWarning) as rec:
        r = read_trace(f, load_spec(SPEC))
    assert len(rec) == 1
    assert "field 'amount': 2 value(s), the largest 9,007,199,254,740,995" in str(rec[0].message)
    assert "'qty'" not in str(rec[0].message)
    assert r.report.rounded_values == {"amount": 2}
    assert r.report.rounded_largest == {"amount": BIG + 2}
    assert any("2 value(s) of field 'amount' are integers past ±2**53" in line for line in r.report.lines())
    assert r.panel.values[0, 0, 0] == float(BIG)  # kept as the nearest double, as before


def test_json_integers_among_other_values_are_judged_one_by_one(tmp_path):
    """A field that mixes numbers and text comes as Python values, which pandas reads as float64 at once: the integers
    are found among the values past 2**53; a float written as one (1e17) is what it says and is not counted, nor is
    a record skipped for its text."""
    rows = [{"agent": "a", "tick": 0, "amount": BIG, "qty": 1},
            {"agent": "b", "tick": 0, "amount": 1e17, "qty": 1},
            {"agent": "c", "tick": 0, "amount": 2**70 + 1, "qty": 1},
            {"agent": "d", "tick": 0, "amount": "x", "qty": 1}]
    f = _write(tmp_path, "jsonl", rows)
    with pytest.warns(PrecisionLossWarning, match=r"field 'amount': 2 value\(s\), the largest "
                                                  r"1,180,591,620,717,411,303,425"):
        r = read_trace(f, load_spec({**SPEC, "on_bad": "skip"}))
    assert r.report.rounded_values == {"amount": 2}
    assert r.report.n_skipped == 1


def test_sqlite_integer_column_past_2_53_is_counted(tmp_path):
    f = tmp_path / "t.db"
    con = sqlite3.connect(f)
    con.execute("CREATE TABLE ev (user_id INTEGER, created_at INTEGER, balance INTEGER)")
    con.executemany("INSERT INTO ev VALUES (?, ?, ?)", [(1, 0, BIG), (2, 0, 5), (1, 1, 2**53)])
    con.commit()
    con.close()
    spec = {"format": "oasis", "table": "ev", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
            "features": [{"kind": "last", "name": "bal", "field": "balance"}]}
    with pytest.warns(PrecisionLossWarning, match=r"field 'balance': 1 value\(s\), the largest 9,007,199,254,740,993"):
        r = read_trace(f, load_spec(spec))
    assert r.report.rounded_values == {"balance": 1}


def test_values_float64_holds_do_not_warn(tmp_path):
    rows = [{"agent": "a", "tick": 0, "amount": 2**53, "qty": 2**60}, {"agent": "b", "tick": 0, "amount": -(2**53),
                                                                       "qty": 1}]
    for kind in ("csv", "jsonl", "parquet"):
        f = _write(tmp_path, kind, rows)
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrecisionLossWarning)
            r = read_trace(f, load_spec(SPEC))
        assert r.report.rounded_values == {}
        np.testing.assert_array_equal(r.panel.values[0, :, 1], [2.0**60, 1.0])


def test_an_integer_beyond_float64_in_a_json_field_is_no_finite_number_not_an_overflow_error(tmp_path):
    """An integer of 400 digits where a numeric field is read from JSON by Python (an OASIS ``info`` value, an
    OpenTelemetry intValue) ended the read in pandas' bare ``OverflowError: int too large to convert to float``,
    under on_bad = 'skip' too; the table readers already said "not a finite number". It is such a value now:
    refused naming the record, or skipped and counted."""
    huge = 10**400
    f = tmp_path / "t.db"
    con = sqlite3.connect(f)
    con.execute("CREATE TABLE ev (user_id INTEGER, created_at INTEGER, info TEXT)")
    con.executemany("INSERT INTO ev VALUES (?, ?, ?)", [(1, 0, json.dumps({"n": huge})), (2, 0, '{"n": 5}'),
                                                        (1, 1, json.dumps({"n": -huge}))])
    con.commit()
    con.close()
    spec = {"format": "oasis", "table": "ev", "agent": {"field": "user_id"}, "step": {"field": "created_at"},
            "features": [{"kind": "sum", "name": "n", "field": "info/n"}]}
    with pytest.raises(TraceRecordError, match=r"row 1: field 'info/n' is not a finite number"):
        read_trace(f, load_spec(spec))
    r = read_trace(f, load_spec({**spec, "on_bad": "skip"}))
    assert r.report.skipped == {"field 'info/n' is not a finite number": 2}
    assert r.panel.values[..., 0].sum() == 5


def test_an_integer_step_beyond_float64_in_json_is_out_of_range_not_an_overflow_error(tmp_path):
    """The step of an OASIS ``info`` value (or an OpenTelemetry intValue) of 400 digits was pandas' bare
    ``OverflowError``; it is out of range, as such a step in a JSON lines table is, with or without a bin."""
    f = tmp_path / "t.db"
    con = sqlite3.connect(f)
    con.execute("CREATE TABLE ev (user_id INTEGER, created_at INTEGER, info TEXT)")
    con.executemany("INSERT INTO ev VALUES (?, ?, ?)", [(1, 0, json.dumps({"t": 10**400})), (2, 0, '{"t": 0}'),
                                                        (3, 0, json.dumps({"t": -(10**400)}))])
    con.commit()
    con.close()
    spec = {"format": "oasis", "table": "ev", "agent": {"field": "user_id"}, "step": {"field": "info/t"},
            "features": [{"kind": "count", "name": "n"}]}
    with pytest.raises(TraceRecordError, match=r"row 1: step field 'info/t' is out of range: an integer step beyond"):
        read_trace(f, load_spec(spec))
    r = read_trace(f, load_spec({**spec, "on_bad": "skip"}))
    assert sum(r.report.skipped.values()) == 2 and r.panel.agent_ids.tolist() == [2]
    binned = read_trace(f, load_spec({**spec, "on_bad": "skip", "step": {"field": "info/t", "bin": "1h"}}))
    assert [k.split(":")[0] for k in binned.report.skipped] == ["step field 'info/t' is out of range"]


def test_a_where_list_holding_an_integer_beyond_float64_filters_instead_of_overflowing(tmp_path):
    """``[where] qty = [<400 digits>, 2]`` (TOML and the Python API take such an int) ended the read before its first
    record in a bare ``OverflowError``: the list's numbers were made floats to match text that spells them. Such an
    int matches a value written as it (its text), no float; the other numbers of the list match as before."""
    rows = [{"agent": "a", "tick": 0, "amount": 1, "qty": 1}, {"agent": "b", "tick": 0, "amount": 1, "qty": 2}]
    f = _write(tmp_path, "jsonl", rows)
    r = read_trace(f, load_spec({**SPEC, "where": {"qty": [10**400, 2]}}))
    assert r.panel.agent_ids.tolist() == ["b"] and r.report.filtered == {"qty not in where": 1}
