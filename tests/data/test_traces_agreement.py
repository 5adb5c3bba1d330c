"""The trace readers agree with each other on the same records: the span reader (Python's json, line by line) and
the long-table reader (DuckDB) on line ends, repeated keys and NaN; detection reports damage instead of guessing."""

from __future__ import annotations

from pathlib import Path

import pytest

from aumann.data.traces import read_trace
from aumann.errors import TraceFormatError

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
