"""Class 6 of issue 22, output that others will open: CSV cells a spreadsheet would execute, Markdown/HTML in
report.md, terminal control characters, datetime steps, t* = −1."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re

import numpy as np
import pytest

from aumann import io
from aumann.cli import main, one_line
from aumann.cli.terminal import terminal_text
from aumann.panel import Panel
from aumann.studies.page import Cell, Document, KeyValues, Note, Section, Table, Text, md_escape, render_markdown
from aumann.studies.sections import read_csv

FORMULAS = ['=HYPERLINK("http://evil","x")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A9)", "\tTab", "\rCR",
            "=1+1", "-", "+", "@", "-inf", "-nan", "-1_0", "=", "=\n"]


@pytest.mark.parametrize("text", FORMULAS, ids=repr)
def test_csv_text_cells_a_spreadsheet_would_execute_get_an_apostrophe(tmp_path, text):
    p = io.write_csv(tmp_path / "t.csv", [{"agent": text, "phi": -1.5}])
    row = next(csv.DictReader(p.open(newline="", encoding="utf-8")))
    assert row["agent"] == "'" + text and row["phi"] == "-1.5"
    assert read_csv(p)[0]["agent"] == text  # aumann's own reader takes the apostrophe off again


@pytest.mark.parametrize("value", [-1.5, -3, np.float64(-2.5e-300), np.int64(-(2**62)), "-1.5", "+3e2", "-.5",
                                   "agent-7", "a=b", "'quoted", "x@y", "plain"], ids=repr)
def test_csv_numbers_and_ordinary_text_are_never_changed(value):
    text = io.csv_cell(value)
    assert not text.startswith("'") or value == "'quoted"
    assert text == (repr(float(value)) if isinstance(value, float | np.floating) else str(value))


def test_csv_header_cells_are_neutralised_too(tmp_path):
    p = io.write_csv(tmp_path / "t.csv", [{"=evil": 1}])
    assert p.read_text().splitlines()[0] == "'=evil"


def test_study_tables_neutralise_text_cells():
    from aumann.studies.report import to_csv

    assert to_csv([{"scenario": "=cmd", "x": -1.0}]).splitlines()[1] == "'=cmd,-1.0"


@pytest.mark.parametrize("v,want", [
    (np.datetime64("2026-05-25T12:00:00", "ns"), "2026-05-25T12:00:00.000000000"),
    (np.datetime64("2026-05-25", "D"), "2026-05-25"),
    (np.datetime64("NaT"), ""),
    (np.timedelta64(3600, "s"), "3600 seconds"),
    (dt.datetime(2026, 5, 25, 1, 2, 3), "2026-05-25T01:02:03"),
])
def test_datetime_steps_are_written_as_iso_text_not_nanosecond_integers(v, want):
    assert io.csv_cell(v) == want
    assert json.loads(io.dumps_json({"step": v}))["step"] == (want or None)


def test_datetime_step_arrays_are_iso_text_in_json():
    arr = np.array(["2026-01-01", "2026-01-02"], dtype="datetime64[ns]")
    assert io.plain(arr) == ["2026-01-01T00:00:00.000000000", "2026-01-02T00:00:00.000000000"]


def test_aumann_attribute_writes_hostile_ids_and_datetime_steps_safely(tmp_path, capsys):
    steps = np.array(["2026-01-01", "2026-01-02", "2026-01-03"], dtype="datetime64[ns]")
    ids = ['=HYPERLINK("http://evil","x")', "+cmd", "-2", "@SUM(A1)", "<img src=x onerror=alert(1)>",
           "[a](javascript:alert(1))"]
    p = Panel(np.random.default_rng(0).random((3, len(ids), 2)), agent_ids=ids, steps=steps).save(tmp_path / "p.npz")
    out = tmp_path / "att"
    assert main(["attribute", str(p), "--indicator", "lin", "--out", str(out), "--static"]) == 0
    by_step = list(csv.DictReader((out / "phi_by_step.csv").open()))
    assert by_step[0]["step"].startswith("2026-01-01T00:00:00")
    agents = {r["agent"] for r in csv.DictReader((out / "top_agents.csv").open(newline=""))}
    assert "'" + ids[0] in agents and "'+cmd" in agents and "'@SUM(A1)" in agents and "-2" in agents
    md = (out / "report.md").read_text()
    assert not re.search(r"(?<!\\)<img", md) and "\\<img src=x onerror=alert(1)\\>" in md
    assert "[a](javascript" not in md and "\\[a\\](javascript:alert(1))" in md


HOSTILE_MD = ["<img src=x onerror=alert(1)>", "[click](javascript:alert(1))", "<javascript:alert(1)>",
              "![i](http://track/x.png)", "<script>alert(1)</script>", "[x]: javascript:alert(1)",
              "`code` <b>", "a\nb <i>", "\\<img>"]


@pytest.mark.parametrize("text", HOSTILE_MD, ids=repr)
def test_report_markdown_escapes_html_and_links_in_every_block(text):
    doc = Document(title=text, subtitle=text, meta=[(text, text)], sections=[Section("s", text, lead=text, blocks=[
        Text(text), Note(text), KeyValues([(text, text)], caption=text), text,
        Table([text], [[Cell(text, cls="id")], [text]], caption=text)])])
    md = render_markdown(doc)
    stripped = md.replace("\\<", "").replace("\\[", "").replace("\\]", "")
    assert "<img" not in stripped and "<script" not in stripped and "](" not in stripped.replace("`", "")
    assert "<javascript" not in stripped


def test_md_escape_leaves_plain_text_alone():
    assert md_escape("f(z_t) = 3 * x") == "f(z_t) = 3 * x"


def test_report_markdown_figure_links_only_to_plain_file_names():
    from aumann.studies.page import Figure

    doc = Document(title="t", sections=[Section("s", "s", blocks=[
        Figure("f", md_ref="javascript:alert(1)"), Figure("g", md_ref="macro_curve.png")])])
    md = render_markdown(doc)
    assert "javascript" not in md and "](macro_curve.png)" in md


@pytest.mark.parametrize("text", ["key\x1b[2J", "\x1b]0;title\x07", "a\x08\x08b", "\x9b31m", "x\u202egnp.exe",
                                  "\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "\r overwrite"], ids=repr)
def test_terminal_text_shows_control_characters_as_escapes(text):
    for out in (terminal_text(text), one_line(text)):
        assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F or c == "\u202e" for c in out)
    assert "\\x" in terminal_text(text) or "\\u" in terminal_text(text)


def test_terminal_text_escapes_rich_markup_on_request():
    assert terminal_text("[link=http://x]y[/link]", rich=True) == "\\[link=http://x]y\\[/link]"


def test_demo_out_folder_with_control_sequences_is_echoed_as_escapes(tmp_path, capsys):
    """`aumann demo --out $'demo\\x1b[31mred'` printed "SYNTHETIC demo written to demo<ESC>[31mred": the folder's
    name turned the terminal red (any escape sequence in a folder name was obeyed)."""
    out = tmp_path / "demo\x1b[31mred[bold]"
    assert main(["demo", "--agents", "12", "--steps", "2", "--out", str(out), "--static"]) == 0
    printed = capsys.readouterr()
    assert "\x1b" not in printed.out + printed.err
    assert "demo\\x1b[31mred[bold] (report: report.html)" in printed.out.replace("\n", "")


def test_trace_read_report_shows_a_hostile_trace_name_as_escapes(tmp_path, capsys):
    """The read report of `aumann attribute --trace` named the first skipped line by its file, raw: a trace called
    $'spans\\x1b[31mred.jsonl' printed "(first: spans<ESC>[31mred.jsonl line 10)" and the terminal obeyed it."""
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "traces" / "otlp_spans.jsonl"
    trace = tmp_path / "spans\x1b[31mred\u202e.jsonl"
    trace.write_text(data.read_text() + "not json\n")
    spec = tmp_path / "spec.toml"
    spec.write_text('format = "otel"\n[agent]\nfield = "resource/agent.name"\n[step]\nfield = "attributes/sim.step"\n'
                    '[[features]]\nkind = "count"\nname = "calls"\n')
    out = tmp_path / "out\x1b]0;title\x07"
    assert main(["attribute", "--trace", str(trace), "--spec", str(spec), "--indicator", "lin", "--out", str(out),
                 "--static", "--skip-bad"]) == 0
    printed = capsys.readouterr()
    both = printed.out + printed.err
    assert not any(c in both for c in "\x1b\x07\u202e")
    assert "spans\\x1b[31mred\\u202e.jsonl line" in printed.err.replace("\n", "")


def test_config_keys_with_control_sequences_are_not_echoed_raw(capsys):
    rc = main(["run", "midscale-social", "--set", "\x1b[2Jkey\x1b]0;pwn\x07=1", "--runs", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "\x1b" not in err and "\x07" not in err and "\\x1b[2Jkey" in err
