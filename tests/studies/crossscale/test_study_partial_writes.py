"""A study killed while it wrote a file leaves the atomic write's temporary file beside it
(`cells/<topic>/.RAND__100.json.XXXXXXXX.tmp.json`, `tables/.flip-main.csv.XXXXXXXX.tmp.csv`): the page globbed
`*__*.json` and `*.csv` and read it as one more cell or table. A whole one counted its cell twice (a number on the
page changed: 16 -> 20), a torn one stopped `aumann report` with a ReportError about a file no command finished, and a
table's showed as an extra table. The page passes over them now."""

from __future__ import annotations

from pathlib import Path

import pytest

from aumann.cli import main


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("partial")
    counts, out = root / "counts", root / "study"
    assert main(["bluesky", "synth", "--users", "300", "--days", "2", "--seed", "1", "--out", str(counts)]) == 0
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--no-progress", "--static"]) == 0
    return out


@pytest.mark.parametrize("leftover", ["whole cell", "torn cell", "table"])
def test_a_temporary_file_a_killed_write_left_is_not_on_the_page(study, leftover) -> None:
    topic = next(p for p in sorted((study / "cells").iterdir()) if (p / "RAND__100.json").is_file())
    if leftover == "table":
        src, tmp = study / "tables" / "flip-main.csv", study / "tables" / ".flip-main.csv.abcdefgh.tmp.csv"
    else:
        src, tmp = topic / "RAND__100.json", topic / ".RAND__100.json.abcdefgh.tmp.json"
    assert main(["report", str(study), "--static"]) == 0
    before = (study / "report.md").read_bytes()
    data = src.read_bytes()
    tmp.write_bytes(data[:300] if leftover == "torn cell" else data)
    try:
        assert main(["report", str(study), "--static"]) == 0
        assert (study / "report.md").read_bytes() == before
    finally:
        tmp.unlink()
