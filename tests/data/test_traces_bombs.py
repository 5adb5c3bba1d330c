"""Small trace inputs that would cost far more than their size: gzipped files of nothing but line ends (a "newline
bomb"), byte-order-mark copies of gzipped files, an action column that widens the panel without bound."""

from __future__ import annotations

import gzip
import random
import time
from pathlib import Path

import pytest

from aumann.data.traces import duck, read_trace
from aumann.errors import TraceFormatError

DATA = Path(__file__).parent / "traces"
AS2 = DATA / "agentsociety2_run"
TABLE_SPEC = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
              "features": [{"kind": "sum", "name": "amount", "field": "amount"}]}
HEAD = {"csv": b"agent,tick,amount\na1,0,5\na2,0,7\na1,1,3\n",
        "jsonl": b'{"agent": "a1", "tick": 0, "amount": 5}\n{"agent": "a2", "tick": 0, "amount": 7}\n'
                 b'{"agent": "a1", "tick": 1, "amount": 3}\n'}


def _bomb(path: Path, head: bytes, blank: int, line: bytes = b"\n") -> Path:
    with gzip.open(path, "wb", compresslevel=9) as fh:
        fh.write(head)
        left = blank
        while left:
            n = min(left, 1 << 20)
            fh.write(line * n)
            left -= n
    return path


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_gzipped_newline_bomb_table_is_refused_at_once(tmp_path, kind):
    """10,000,001 line ends (a 10 KiB file) took DuckDB seconds per 10⁷ and 505 s for 4 GiB of them, to read three
    rows; the read now stops at the cap, naming the file and the cap."""
    f = _bomb(tmp_path / f"t.{kind}.gz", HEAD[kind], 10_000_001)
    assert f.stat().st_size < 64 * 1024
    t0 = time.perf_counter()
    for on_bad in ("error", "skip"):
        with pytest.raises(TraceFormatError, match=rf"t\.{kind}\.gz' holds more than 10,000,000 blank lines once "
                                                    r"decompressed \(a gzip 'newline bomb'"):
            read_trace(f, TABLE_SPEC, on_bad=on_bad)
    assert time.perf_counter() - t0 < 10


def test_a_gzipped_newline_bomb_span_shard_is_refused_at_once(tmp_path):
    """The span reader met each of the bomb's line ends in a Python loop (128 MiB of them: 40 s)."""
    d = tmp_path / "trace"
    d.mkdir()
    for f in sorted((AS2 / "trace").glob("*.jsonl")):
        (d / (f.name + ".gz")).write_bytes(gzip.compress(f.read_bytes()))
    _bomb(d / "trace_zz.jsonl.gz", b"", 10_000_001, b"\r\n")
    with pytest.raises(TraceFormatError, match=r"trace_zz\.jsonl\.gz' holds more than 10,000,000 blank lines"):
        read_trace(d)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_blank_lines_up_to_the_cap_are_read_as_before(tmp_path, monkeypatch, kind):
    """The cap counts empty and whitespace-only lines; at the cap the table reads as it did (blank lines are no rows),
    one more is refused. (DuckDB's CSV sniffer reads whitespace-only lines as rows: CSV gets empty ones.)"""
    monkeypatch.setattr(duck, "MAX_BLANK_LINES", 6)
    ok = _bomb(tmp_path / f"ok.{kind}.gz", HEAD[kind], 3, b"\n" if kind == "csv" else b" \t\r\n")
    with gzip.open(ok, "ab") as fh:
        fh.write(b"\n\n\n")
    r = read_trace(ok, TABLE_SPEC)
    assert r.panel.values[:, :, 0].tolist() == [[5.0, 7.0], [3.0, 0.0]]
    bad = _bomb(tmp_path / f"bad.{kind}.gz", HEAD[kind], 7, b"  \n")
    with pytest.raises(TraceFormatError, match=r"more than 6 blank lines"):
        read_trace(bad, TABLE_SPEC)


def test_blank_line_count_matches_a_line_by_line_count():
    """The block-wise count equals counting the lines one by one, for any split into blocks."""
    rnd = random.Random(7)
    for _ in range(300):
        text = bytes(rnd.choice(b"\n\n\r \tab") for _ in range(rnd.randint(0, 40)))
        want = sum(1 for line in text.split(b"\n")[:-1] if not line.strip())
        cuts = sorted(rnd.sample(range(len(text) + 1), min(len(text) + 1, rnd.randint(0, 5))))
        got, content, start = 0, False, 0
        for c in [*cuts, len(text)]:
            n, content = duck._blank_lines(text[start:c], content)
            got += n
            start = c
        assert got == want, (text, cuts)


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_a_gzipped_table_with_a_byte_order_mark_is_copied_gzipped_not_whole(tmp_path, kind):
    """The copy without the mark that DuckDB reads was the file's whole decompressed text: 3.5 MB (CSV) and 16.7 MB
    (JSON lines) in the temporary folder for these 7 and 49 KB files. It is gzipped again, and reads alike."""
    rows = [("a1", i // 1000, 5) for i in range(400_000)]
    if kind == "csv":
        text = '"agent",tick,amount\n' + "".join(f"{a},{t},{v}\n" for a, t, v in rows)
    else:
        text = "".join(f'{{"agent": "{a}", "tick": {t}, "amount": {v}}}\n' for a, t, v in rows)
    f = tmp_path / f"t.{kind}.gz"
    f.write_bytes(gzip.compress(b"\xef\xbb\xbf" + text.encode()))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    read, names = duck.without_bom([f], tmp)
    assert names == {str(read[0]): str(f)} and read[0].parent == tmp
    assert read[0].stat().st_size < 10 * f.stat().st_size < len(text) // 4
    assert gzip.decompress(read[0].read_bytes()) == text.encode()
    got = read_trace(f, TABLE_SPEC)
    assert got.panel.values.sum() == 5 * len(rows) and got.report.records == len(rows)


def test_a_byte_order_mark_copy_that_cannot_be_written_is_an_output_error(tmp_path):
    """A failed write of the copy was taken for a damaged file and the file with its mark left to DuckDB, which read
    the quoted first column '"agent"' and found the spec's 'agent' column missing."""
    from aumann.errors import OutputError

    f = tmp_path / "t.csv.gz"
    f.write_bytes(gzip.compress(b'\xef\xbb\xbf"agent",tick,amount\na1,0,5\n'))
    with pytest.raises(OutputError, match=r"cannot write .*0-t\.csv\.gz', the copy of a trace file without its "
                                          r"byte-order mark: .*TMPDIR"):
        duck.without_bom([f], tmp_path / "gone")


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl"])
def test_a_plain_byte_order_mark_copy_that_cannot_be_written_is_an_output_error(tmp_path, name):
    """The plain file's copy raised the OSError itself (FileNotFoundError, or ENOSPC in a full temporary folder), a
    traceback out of the CLI."""
    from aumann.errors import OutputError

    f = tmp_path / name
    f.write_bytes(b'\xef\xbb\xbf"agent",tick,amount\na1,0,5\n' if name.endswith("csv")
                  else b'\xef\xbb\xbf{"agent": "a1", "tick": 0, "amount": 5}\n')
    with pytest.raises(OutputError, match=rf"cannot write .*0-{name}', the copy of a trace file without its "
                                          r"byte-order mark: .*TMPDIR"):
        duck.without_bom([f], tmp_path / "gone")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    read, _ = duck.without_bom([f], tmp)
    assert read[0].read_bytes() == f.read_bytes()[3:]


def test_count_each_actions_that_widen_the_panel_past_max_cells_are_refused_before_allocating(tmp_path):
    """max_cells was checked before a batch's new actions widened the panel: a table whose action column is unique
    per row (an id read as the action) grew the panel to 66 × 1000 × 65,536 float64 in one step, a bare MemoryError
    for 32.2 GiB (or that memory taken, on a machine with it) where max_cells allows 2·10⁹ values."""
    from aumann.errors import TraceError

    f = tmp_path / "ev.csv"
    f.write_text("agent,tick,action\n" + "".join(f"a{i % 10},{i % 2},act{i}\n" for i in range(60)))
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"}, "action": {"field": "action"},
            "features": [{"kind": "count_each"}], "max_cells": 1000}
    with pytest.raises(TraceError, match=r"the panel would hold 1,200 values \(steps × agents × features\), more than "
                                         r"max_cells = 1,000.*count_each makes one feature per distinct action: 60"):
        read_trace(f, spec)
    got = read_trace(f, {**spec, "max_cells": 1200})
    assert got.panel.shape == (2, 10, 60) and got.panel.values.sum() == 60
