"""The same events mean the same thing in every trace format: a CSV table, a JSON lines table, flat span lines and
OTLP/JSON envelopes of the same events build the same panel (agent ids, values, alive mask), or are all refused.

CSV is the one format without types: a CSV agent column is read as numbers where every value in it spells a number
in decimal (no leading zero or plus, no space around it), else as text, every id as written (docs/traces.md, "Field
paths"). The typed formats are compared with each other as they are, and CSV with the JSON lines table of the same
events typed as its column is read."""

from __future__ import annotations

import csv
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from aumann.data.traces import read_trace
from aumann.errors import TraceError

FEATURES = [{"kind": "count", "name": "n"}, {"kind": "sum", "name": "amount", "field": "amount"}]
TABLE = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "features": FEATURES}
SPANS = {"format": "otel", "agent": {"field": "resource/agent.id"}, "step": {"field": "attributes/tick"},
         "features": [FEATURES[0], {**FEATURES[1], "field": "attributes/amount"}]}

#: an event: (agent id, step, amount), each a JSON value (an int, a float or a str)
Event = tuple[Any, Any, Any]


def _otlp_value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": v}


def write_all(folder: Path, events: list[Event]) -> dict[str, tuple[Path, dict[str, Any]]]:
    """The events as a CSV table, a JSON lines table, flat span lines and OTLP envelopes (one per event): {format:
    (path, spec)}."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, tuple[Path, dict[str, Any]]] = {}
    p = folder / "events.csv"
    with open(p, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["agent", "tick", "amount"])
        w.writerows(events)
    out["csv"] = (p, TABLE)
    p = folder / "events.jsonl"
    p.write_text("".join(json.dumps({"agent": a, "tick": t, "amount": x}) + "\n" for a, t, x in events),
                 encoding="utf-8")
    out["jsonl"] = (p, TABLE)
    p = folder / "spans.jsonl"
    p.write_text("".join(json.dumps({"trace_id": f"t{k}", "span_id": f"s{k}", "name": "act",
                                     "resource": {"agent.id": a}, "attributes": {"tick": t, "amount": x}}) + "\n"
                         for k, (a, t, x) in enumerate(events)), encoding="utf-8")
    out["spans"] = (p, SPANS)
    p = folder / "otlp.jsonl"
    p.write_text("".join(json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "agent.id", "value": _otlp_value(a)}]},
        "scopeSpans": [{"scope": {"name": "sim"}, "spans": [{
            "traceId": f"t{k}", "spanId": f"s{k}", "name": "act",
            "attributes": [{"key": "tick", "value": _otlp_value(t)}, {"key": "amount", "value": _otlp_value(x)}]}]}]}]})
        + "\n" for k, (a, t, x) in enumerate(events)), encoding="utf-8")
    out["otlp"] = (p, SPANS)
    return out


def _read(path: Path, spec: dict[str, Any], on_bad: str) -> tuple[str, Any]:
    """("panel", (ids, steps, values, alive[, skipped])) of a read, or ("refused", the error's type) where it raises a
    TraceError; the number of records skipped is given under ``on_bad = "skip"``."""
    try:
        got = read_trace(path, spec, on_bad=on_bad)
    except TraceError as exc:
        return "refused", type(exc).__name__
    p = got.panel
    alive = np.ones(p.values.shape[:2], dtype=bool) if p.alive is None else np.asarray(p.alive)
    out = (p.agent_ids.tolist(), list(p.steps), p.values.tolist(), alive.tolist())
    return "panel", (*out, got.report.n_skipped) if on_bad == "skip" else out


def read(path: Path, spec: dict[str, Any]) -> tuple[str, Any]:
    """A strict read: the panel, or the error's type."""
    return _read(path, spec, "error")


def read_skipping(path: Path, spec: dict[str, Any]) -> tuple[str, Any]:
    """``read`` with ``on_bad = "skip"``: the panel of the records left and how many were skipped."""
    return _read(path, spec, "skip")


def agree(reads: dict[str, tuple[str, Any]]) -> None:
    first = next(iter(reads))
    for name, got in reads.items():
        assert got == reads[first], f"{name} and {first} disagree:\n{got}\n{reads[first]}"


@pytest.mark.parametrize("pad", [0, 25_000])
def test_spaces_around_an_agent_id_are_part_of_it_in_every_format_and_numbers_tolerate_them(tmp_path, pad):
    # ' 1' in a CSV column of numbers was the agent 1 (merged with 1: one agent of two events), where a JSON " 1" (a
    # table's or a span's) is the text ' 1', another agent: ids are as written in every format, wherever the ' 1'
    # sits (below the 20,480 rows DuckDB's sniffer reads too). A step or an amount is a number wherever it is, spaces
    # or not (' 0', '2 ')
    events = [("7", "1", "1")] * pad + [("1", " 0", "1"), (" 1", "0", " 2"), ("1 ", "0 ", "3 "), ("2", "1", "4")]
    reads = {name: read(path, spec) for name, (path, spec) in write_all(tmp_path, events).items()}
    agree(reads)
    kind, (ids, steps, values, _) = reads["csv"]
    assert kind == "panel" and ids == [" 1", "1", "1 ", "2"] + ["7"] * (pad > 0) and steps == [0, 1]
    assert values[0][:4] == [[1, 2], [1, 1], [1, 3], [0, 0]] and values[1][3] == [1, 4]


@pytest.mark.parametrize("token", ["inf", "-infinity", "epoch", "2025-01-01"])
@pytest.mark.parametrize("where", ["agent", "step", "amount"])
def test_words_duckdb_takes_for_dates_mean_what_they_say_in_every_format(tmp_path, token, where):
    # DuckDB takes inf, infinity and epoch for dates: in a CSV agent or amount column, an infinite date raised a bare
    # OverflowError out of the reader (pyarrow's date conversion), and the agent epoch became 1970-01-01 (in a JSON
    # lines table 1900-01-01), where the span readers read the text; a step "inf" raised OverflowError in every reader
    events = {"agent": [(token, 0, 1), (token, 1, 2)], "step": [(1, token, 1), (2, token, 2)],
              "amount": [(1, 0, token), (2, 1, token)]}[where]
    reads = {name: read(path, spec) for name, (path, spec) in write_all(tmp_path / "typed", events).items()}
    csv_read = reads.pop("csv")
    agree(reads)
    path, spec = write_all(tmp_path / "as_csv", as_csv_reads(events))["jsonl"]
    agree({"csv": csv_read, "jsonl (as the CSV reads)": read(path, spec)})
    if where == "agent":
        assert reads["jsonl"][0] == "panel" and reads["jsonl"][1][0] == [token]  # the text, as written
        assert csv_read[0] == ("refused" if "inf" in token else "panel")  # a CSV column of numbers: inf is no id
    else:
        assert {k for k, _ in [csv_read, *reads.values()]} == {"refused"}  # not a step, not a number


def test_an_empty_agent_id_is_no_id_in_every_format(tmp_path):
    # an empty CSV field is no value (no usable agent id), where a JSON "" (a table's or a span's) was the agent ''
    events = [("", 0, 1), ("a", 0, 2)]
    for name, (path, spec) in write_all(tmp_path, events).items():
        assert read(path, spec) == ("refused", "TraceRecordError"), name
        got = read_trace(path, spec, on_bad="skip")
        assert got.panel.agent_ids.tolist() == ["a"], name
        assert got.report.skipped == {f"no usable agent id in field {spec['agent']['field']!r}": 1}, name


def test_a_csv_agent_column_of_true_and_false_is_text_as_a_json_true_in_quotes_is(tmp_path):
    # DuckDB's sniffer took a CSV column of true and false for BOOLEAN, and every record was refused ('agent id is
    # true/false, not an id'), where a JSON "true" is the agent 'true': a CSV field has no type, and an id is as written
    events = [("true", 0, 1), ("false", 0, 2), ("true", 1, 3)]
    reads = {name: read(path, spec) for name, (path, spec) in write_all(tmp_path, events).items()}
    agree(reads)
    assert reads["csv"][0] == "panel" and reads["csv"][1][0] == ["false", "true"]


def test_a_csv_agent_column_of_numbers_the_sniffer_takes_for_text_is_read_as_numbers(tmp_path):
    # DuckDB's sniffer reads no inf as a number, and took a column of inf, 1.0 and 0 for text: the ids were 'inf',
    # '1.0' and '0' (three agents, the text kept), where the same column with 1e400 for inf is one of numbers (1.0 the
    # id 1, inf no usable id): every value spells a number, so each is the number it spells
    p = tmp_path / "ids.csv"
    p.write_text("agent,tick,amount\ninf,0,1\n1.0,0,2\n0,1,3\n")
    got = read_trace(p, TABLE, on_bad="skip")
    assert got.panel.agent_ids.tolist() == [0, 1] and got.report.float_ids == 1
    assert got.report.skipped == {"no usable agent id in field 'agent'": 1}
    with pytest.raises(TraceError, match="line 2: no usable agent id"):
        read_trace(p, TABLE)


def test_json_integer_ids_of_both_signs_are_integers_in_a_json_lines_table_as_in_spans(tmp_path):
    # DuckDB reads a JSON field of integers of both signs (3 and -1) as HUGEINT, which Arrow hands over as Decimal: the
    # ids became the text '-1' and '3', where the span readers' ids are the integers -1 and 3
    events = [(3, 0, 1), (-1, 0, 2), (3, 1, 3)]
    reads = {name: read(path, spec) for name, (path, spec) in write_all(tmp_path, events).items()}
    agree(reads)
    assert reads["jsonl"][1][0] == [-1, 3]


def test_an_otlp_int_value_that_is_no_decimal_integer_is_read_as_written(tmp_path):
    # int() read an intValue " 1" as the agent 1 (a stringValue " 1" is the agent ' 1', as a JSON " 1" is), "1_0" as
    # 10 and "١" as 1, and cut an intValue 1.5 (a JSON number) to 1: the agents and amounts of the events changed
    def line(k: int, agent: Any, amount: Any) -> str:
        return json.dumps({"resourceSpans": [{"resource": {"attributes": [{"key": "agent.id", "value": agent}]},
                                              "scopeSpans": [{"scope": {}, "spans": [{
                                                  "traceId": "t", "spanId": str(k), "name": "act", "attributes": [
                                                      {"key": "tick", "value": {"intValue": "0"}},
                                                      {"key": "amount", "value": amount}]}]}]}]})

    p = tmp_path / "otlp.jsonl"
    p.write_text("\n".join([line(0, {"intValue": "1"}, {"intValue": "+2"}),
                            line(1, {"intValue": " 1"}, {"intValue": 1.5}),
                            line(2, {"stringValue": " 1"}, {"intValue": " 4"}),
                            line(3, {"intValue": "1_0"}, {"intValue": -1})]) + "\n")
    got = read_trace(p, SPANS)
    ids = got.panel.agent_ids.tolist()
    assert ids == [" 1", "1", "1_0"]  # ' 1' as written (one agent, whichever value it came in), not 1
    assert {i: got.panel.values[0, ids.index(i)].tolist() for i in ids} == {
        "1": [1, 2], " 1": [2, 5.5], "1_0": [1, -1]}  # amounts: +2, 1.5 + ' 4' (a number, spaces or not), -1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(line(0, {"intValue": "1"}, {"intValue": "1_0"}) + "\n")
    with pytest.raises(TraceError, match="line 1: field 'attributes/amount' is not a finite number"):
        read_trace(bad, SPANS)


# ---------------------------------------------------------------- generated events
#: a CSV value that reads as a number in a CSV agent column (docs/traces.md: decimal, no leading zero, plus or space)
_CSV_NUMBER = re.compile(r"-?((0|[1-9][0-9]*)(\.[0-9]*)?([eE][-+]?[0-9]+)?|\.[0-9]+([eE][-+]?[0-9]+)?"
                         r"|nan|inf|infinity)", re.IGNORECASE)


def as_csv_reads(events: list[Event]) -> list[Event]:
    """The events typed as a CSV table of them is read: every value is text in a CSV file; its agent column is one of
    numbers where every id in it spells one (each the number it spells; an empty field is no value, and no id),
    else one of text (every id as written). Steps and amounts are numbers or not by their text alone, as in JSON:
    they stay text, except an amount column whose every value is a word for true or false (``true``, ``f``, ``yes``,
    any case), which DuckDB reads as booleans: each counts 1 or 0, as a JSON true or false does."""
    texts = [str(a) for a, _, _ in events]
    amounts = [str(x) for _, _, x in events]
    if all(x.lower() in _BOOLEAN_WORDS for x in amounts if x) and any(amounts):
        amounts = [x.lower() in ("true", "t", "yes") if x else x for x in amounts]
    if not all(_CSV_NUMBER.fullmatch(t) for t in texts if t):
        return [(t, str(s), x) for t, (_, s, _), x in zip(texts, events, amounts)]
    return [(int(t) if re.fullmatch(r"-?[0-9]+", t) else float(t) if t else t, str(s), x)
            for t, (_, s, _), x in zip(texts, events, amounts)]


#: the words DuckDB's CSV sniffer reads as booleans (a column of nothing else is a column of booleans)
_BOOLEAN_WORDS = {"true", "false", "t", "f", "yes", "no"}


_TEXT_IDS = ["01", "1.0", " 1", "1 ", "1e3", "1", "2", "+1", "-0", "0x10", "1_000", "x", "é", "日本", "Ω 1", "nan", "",
             "NaN", "inf", "-infinity", "epoch", "true", "f", "yes", "  "]
ids = st.one_of(st.integers(-2, 3), st.sampled_from([1.0, 1.5, -0.0, 2.0, 1e3]), st.sampled_from(_TEXT_IDS),
                st.text(st.characters(codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1,
                        max_size=3))
steps = st.one_of(st.integers(0, 2), st.sampled_from(["1", " 1", "1.0", "2 ", "inf", ""]))
amounts = st.one_of(st.integers(-3, 3), st.sampled_from([2.5, -0.5, "2", " 3", "1e3", "", "x", "nan", "inf", "epoch"]),
                    st.sampled_from(["true", "False", "yes", "f", True, False]))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(ids, steps, amounts), min_size=1, max_size=6))
def test_the_same_events_build_the_same_panel_in_every_format_or_are_refused_by_all(events):
    # the typed formats (a JSON lines table, flat spans, OTLP envelopes) agree as they are; CSV, which has no types,
    # agrees with the JSON lines table of the events typed as a CSV file of them is read
    with tempfile.TemporaryDirectory() as d:
        files = write_all(Path(d) / "typed", events)
        as_csv = write_all(Path(d) / "as_csv", as_csv_reads(events))["jsonl"]
        for how in (read, read_skipping):  # refused or not alike; what is left after the same records are skipped
            reads = {name: how(path, spec) for name, (path, spec) in files.items()}
            csv_read = reads.pop("csv")
            agree(reads)
            agree({"csv": csv_read, "jsonl (as the CSV reads)": how(*as_csv)})
            event(f"{how.__name__}: typed {reads['jsonl'][0]}, csv {csv_read[0]}")  # (--hypothesis-show-statistics)


def test_a_csv_agent_column_made_text_by_a_skipped_record_keeps_the_other_ids_as_written(tmp_path):
    # 0, 0, 0 and ' 1': a column of text (' 1' is no number), so the ids are '0' and ' 1' as written; when the ' 1'
    # record is skipped (its amount is no number) the ids left are still the text '0', not the integer 0
    events = [(0, 0, 0), (0, 0, 0), (0, 0, 0), (" 1", 0, "x")]
    path, spec = write_all(tmp_path, events)["csv"]
    kind, (ids, _steps, values, _alive, skipped) = read_skipping(path, spec)
    assert (kind, ids, skipped) == ("panel", ["0"], 1)
    assert values == [[[3.0, 0.0]]]


def test_a_value_field_read_as_infinite_dates_is_no_number_not_an_overflow():
    # DuckDB 2.0.1 hands a JSON "-infinity" that it took for a DATE to Arrow as day -2147483647 (2.0.0 gave 1900-01-01):
    # pyarrow's to_pylist() raised a bare OverflowError out of the reader; a value field of dates holds no number
    import pyarrow as pa

    from aumann.data.traces.table import _arrow_values

    arr = pa.array([-2147483647, 2147483647, None, 0], type=pa.int32()).cast(pa.date32())
    got = _arrow_values(arr)
    assert got[2] is None and got[3] == "1970-01-01" and all(isinstance(v, str) for v in (got[0], got[1]))
    assert _arrow_values(arr, times=True).dtype.kind == "M"  # a step of dates stays datetime64 (binned)
