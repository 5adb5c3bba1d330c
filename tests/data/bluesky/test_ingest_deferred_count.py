"""The last file's line count runs on a thread while the ingest finishes (``ingest._PendingCount``): the numbers it
decides (lines read, blank lines) and their place in the report are those of a count done in line."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from aumann.data.bluesky import ingest as ingest_mod
from aumann.data.bluesky.ingest import IngestOptions, ingest
from aumann.errors import IngestError
from tests.data.bluesky.test_ingest_containers import _lines

# an entry's keys in ingest_report.json, in order (a plain JSONL file with valid events)
ENTRY_KEYS = ["path", "container", "bytes", "lines_read", "rows", "valid", "malformed", "blank_lines", "duplicates",
              "malformed_engagements"]


def _files(tmp_path: Path) -> list[Path]:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(b"\n".join(_lines(30)) + b"\n\n   \n" + b"{oops\n")   # 30 valid, 2 blank, 1 malformed
    b.write_bytes(b"\n \t\n" + b"\n".join(_lines(50)[20:]) + b"\n\n\n" + _lines(1)[0])  # 31 valid, 4 blank, no final \n
    return [a, b]


def _no_inline_counts(monkeypatch):
    """Count every file in line (the deferred path off), to compare with."""
    real = ingest_mod._scan_file

    def scan(*args, **kwargs):
        kwargs["defer_count"] = False
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest_mod, "_scan_file", scan)


def test_deferred_count_gives_the_numbers_and_order_of_an_inline_count(tmp_path, monkeypatch):
    files = _files(tmp_path)
    started = []
    real_pending = ingest_mod._PendingCount

    def pending(*args, **kwargs):
        started.append(args[0])
        return real_pending(*args, **kwargs)

    monkeypatch.setattr(ingest_mod, "_PendingCount", pending)
    _, deferred = ingest(files, options=IngestOptions(threads=1))
    assert started == [files[1]]  # the last file's count ran on a thread; the first file's in line
    monkeypatch.undo()
    _no_inline_counts(monkeypatch)
    _, inline = ingest(files, options=IngestOptions(threads=1))
    for rep in (deferred, inline):
        assert [f["lines_read"] for f in rep.files] == [33, 35]
        assert [f["blank_lines"] for f in rep.files] == [2, 4]
        assert (rep.lines_read, rep.blank_lines, rep.valid_events, rep.malformed_lines) == (68, 6, 61, 1)
        assert [list(f) for f in rep.files] == [ENTRY_KEYS, ENTRY_KEYS]
    d, i = deferred.to_dict(), inline.to_dict()
    for r in (d, i):
        r.pop("seconds", None)
        r.pop("throughput_mb_s", None)
    assert d == i


def test_a_failed_ingest_leaves_no_count_running(tmp_path, monkeypatch):
    files = _files(tmp_path)
    real = ingest_mod.count_lines

    def slow(*args, **kwargs):  # a count still running when the ingest fails
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest_mod, "count_lines", slow)
    with pytest.raises(IngestError, match="no valid event falls in the window"):  # raised after the last scan
        ingest(files, options=IngestOptions(threads=1, days=("2000-01-01", "2000-01-02")))
    assert not [t for t in threading.enumerate() if t.name.startswith("aumann-count-lines") and t.is_alive()]
