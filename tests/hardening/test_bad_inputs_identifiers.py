"""Identifiers and text from users' data through every output: lone surrogates (file names that are not UTF-8,
JSON ``\\udcXX`` escapes), CSV cells that look neutralised, bidirectional controls on the HTML page."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from aumann import io
from aumann.cli import main
from aumann.errors import OutputError, PanelError, UnsafeNameError
from aumann.panel import Panel
from aumann.records import Manifest


def test_json_never_holds_a_lone_surrogate_escape():
    text = io.dumps_json({"path": "x\udcff y.npz", "k\ud800": "ok", "emoji": "😀", "literal": "\\ud800"})
    json.loads(text.encode("utf-8").decode("utf-8", errors="strict"))
    assert "\\udcff" not in text and "\\ud800\"" not in text.replace("\\\\ud800", "")
    back = json.loads(text)
    assert back == {"path": "x\\xff y.npz", "k\\ud800": "ok", "emoji": "😀", "literal": "\\ud800"}
    for value in ({"p": "x\udcff"}, {"two lone halves": "\ud83d" + "\ude00", "emoji": "😀"}):
        assert io.record_checksum(value) == io.record_checksum(json.loads(io.dumps_json(value)))


def test_text_that_utf8_cannot_encode_is_a_typed_error_naming_the_file(tmp_path):
    with pytest.raises(OutputError, match=r"t\.csv: line 2 holds the character U\+DC80"):
        io.write_text(tmp_path / "t.csv", "a\nb\udc80c")
    assert not (tmp_path / "t.csv").exists()


def test_attribute_on_a_panel_file_whose_name_is_not_utf8(tmp_path):
    """A Latin-1 file name (byte 0xFF) reached manifest.json as "\\udcff", which the manifest schema refuses:
    `aumann attribute` computed everything and then failed ("manifest ... does not fit its schema")."""
    src = tmp_path / os.fsdecode(b"caf\xe9 \xff.npz")
    Panel(np.random.default_rng(0).random((2, 3, 1))).save(src)
    out = tmp_path / "out"
    assert main(["attribute", str(src), "--indicator", "lin", "--out", str(out), "--static"]) == 0
    raw = (out / "manifest.json").read_bytes().decode("utf-8")
    Manifest.model_validate(json.loads(raw))
    assert "caf\\xe9 \\xff.npz" in json.loads(raw)["command"]
    for name in ("summary.json", "report.md", "report.html"):
        (out / name).read_bytes().decode("utf-8")
    assert main(["report", str(out), "--static"]) == 0


@pytest.mark.parametrize("kw", [{"agent_ids": ["a\udc80", "b", "c"]}, {"steps": ["s\ud800", "t"]},
                                {"features": ["f\udcff"]}, {"groups": {"g": ["x", "y\udc80", "z"]}},
                                {"agent_ids": np.array(["a", "b", "c\udc80"], dtype=object)}], ids=repr)
def test_panel_labels_utf8_cannot_hold_are_refused(kw):
    with pytest.raises(PanelError, match="lone surrogate"):
        Panel(np.ones((2, 3, 1)), **kw)
    with pytest.raises(UnsafeNameError, match="lone surrogate"):
        Panel(np.ones((2, 3, 1)), groups={"g\udc80": ["x", "y", "z"]})


def test_attribute_refuses_a_panel_file_whose_ids_utf8_cannot_hold(tmp_path, capsys):
    """An id 'a\\udc80' (a JSON "\\udc80" escape read back) went through the attribution and then ended in a
    UnicodeEncodeError traceback while the CSVs were written."""
    good = Panel(np.random.default_rng(0).random((2, 3, 1)), agent_ids=["a", "b", "c"]).save(tmp_path / "good.npz")
    with np.load(good) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["agent_ids"] = np.array(["a\udc80", "b", "c"])
    np.savez(tmp_path / "bad.npz", **arrays)
    out = tmp_path / "out"
    assert main(["attribute", str(tmp_path / "bad.npz"), "--indicator", "lin", "--out", str(out), "--static"]) == 2
    err = capsys.readouterr().err
    assert "PanelError" in err and "lone surrogate" in err and "position 0" in err
    assert not (out / "top_agents.csv").exists()


APOSTROPHES = ["'=x", "=x", "''+1", "'+1", "+1x", "'-", "-", "'plain", "'", "''", "'-1.5", "'" * 5000 + "=", "=\n"]


def test_csv_cells_of_distinct_ids_stay_distinct_when_apostrophes_lead(tmp_path):
    """`'=x` and `=x` were both written `'=x`: one cell for two agents, in the file and through aumann's reader."""
    import csv

    import pandas as pd

    from aumann.studies.sections import read_csv

    p = io.write_csv(tmp_path / "t.csv", [{"agent": a} for a in APOSTROPHES])
    cells = [r["agent"] for r in csv.DictReader(p.open(newline="", encoding="utf-8"))]
    assert len(set(cells)) == len(APOSTROPHES)
    assert len(set(pd.read_csv(p, dtype=str, keep_default_na=False)["agent"])) == len(APOSTROPHES)
    assert [r["agent"] for r in read_csv(p)] == APOSTROPHES
    assert cells[:2] == ["''=x", "'=x"] and cells[7] == "'plain"  # ordinary text is written as it is


@pytest.mark.parametrize("text,escaped", [("x\u202egnp.exe", "x\\u202egnp.exe"), ("a\u2066b\u2069", "a\\u2066b\\u2069"),
                                         ("esc\x1b[2J", "esc\\x1b[2J"), ("rlm\u200fx", "rlm\\u200fx")], ids=repr)
def test_report_html_shows_bidi_overrides_and_controls_as_escapes(text, escaped):
    """report.md showed an id `x\\u202egnp.exe` as that escape; report.html drew it reversed (`xexe.png`)."""
    from aumann.studies.charts import short_label
    from aumann.studies.page import Cell, Document, KeyValues, Section, Table, Text, render_html

    doc = Document(title=text, subtitle=text, meta=[(text, text)], sections=[Section("s", text, lead=text, blocks=[
        Text(text), KeyValues([(text, text)]), Table([text], [[Cell(text, cls="id")], [text]], caption=text)])])
    page = render_html(doc)
    shown = page.replace(f'data-sort="{text}"', "")  # a sort key is never displayed
    assert not any(c in shown for c in "\u202e\u2066\u2069\u200f\x1b")
    assert shown.count(escaped) >= 8  # title (twice), subtitle, meta key and value, section, lead, text, ...
    assert short_label(text) == escaped


def test_lookalike_ids_are_found_by_normalisation_and_whitespace_only():
    from aumann.labels import lookalike_ids

    ids = np.array(["e\u0301", "\u00e9", "trail ", "trail", "Case", "case", " x ", "x", "\u00c5", "A\u030a", "plain"])
    count, groups = lookalike_ids(ids)
    assert count == 4 and sorted(map(tuple, groups)) == sorted([(" x ", "x"), ("A\u030a", "\u00c5"),
                                                                 ("trail", "trail "), ("e\u0301", "\u00e9")])
    assert lookalike_ids(np.array(["Case", "case", "a", "b"])) == (0, [])  # case is a real difference
    assert lookalike_ids(np.arange(5)) == (0, [])


def test_attribute_page_says_when_two_agents_print_alike(tmp_path):
    """Agents 'é' (NFC) and 'é' (NFD), 'bob' and 'bob ' were two rows no reader could tell apart, unexplained."""
    from aumann.errors import LookalikeIdWarning

    ids = ["e\u0301", "\u00e9", "bob", "bob ", "carol"]
    with pytest.warns(LookalikeIdWarning):
        p = Panel(np.random.default_rng(0).random((2, len(ids), 1)), agent_ids=ids).save(tmp_path / "p.npz")
    out = tmp_path / "out"
    assert main(["attribute", str(p), "--indicator", "lin", "--out", str(out), "--static"]) == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "2 group(s) of agent ids look alike but are different agents" in md
    assert "'bob' and 'bob '" in md and "'e\\\\u0301' and '\\\\xe9'" in md
    assert "look alike" in (out / "report.html").read_text(encoding="utf-8")
    out2 = tmp_path / "plain"
    assert main(["attribute", str(Panel(np.ones((1, 3, 1)), agent_ids=["a", "b", "c"]).save(tmp_path / "q.npz")),
                 "--indicator", "lin", "--out", str(out2), "--static"]) == 0
    assert "look alike" not in (out2 / "report.md").read_text(encoding="utf-8")


def test_ids_with_line_breaks_show_as_escapes_not_as_another_id(tmp_path):
    """An id 'new\\nline' was shown as 'new line' (another possible id) in both pages' who-tables, and drawn on two
    lines over its neighbour on the heatmap's axis."""
    from aumann.studies.charts import short_label

    assert short_label("new\nline\tx\ry") == "new\\nline\\tx\\ry"
    ids = ["new\nline", "new line", "tab\there"]
    p = Panel(np.arange(1.0, 7.0).reshape(2, 3, 1), agent_ids=ids).save(tmp_path / "p.npz")
    out = tmp_path / "out"
    assert main(["attribute", str(p), "--indicator", "lin", "--out", str(out), "--static"]) == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "| new\\\\nline |" in md and "| new line |" in md and "| tab\\\\there |" in md
    page = (out / "report.html").read_text(encoding="utf-8")
    assert '<td class="id" data-sort="new\nline">new\\nline</td>' in page


@pytest.mark.parametrize("labels", [["a\x00", "a", "b"], np.array(["a\x00", "a", "b"], dtype=object),
                                    ("x", "y\x00z", "w")], ids=repr)
def test_group_labels_with_nul_are_refused_not_merged(labels):
    """Group labels 'a\\x00' and 'a' became one group 'a' (numpy drops trailing NULs): its R_G silently summed both."""
    with pytest.raises(PanelError, match="must not contain NUL"):
        Panel(np.ones((1, 3, 1)), groups={"tier": labels})
    with pytest.raises(PanelError, match="must not contain NUL"):
        Panel(np.ones((1, 3, 1)), agent_ids=np.array(["a\x00", "a", "b"], dtype=object))


@pytest.mark.parametrize("name", ["a\u202eexe.txt", "x\x9b31m", "x\x85y", "a\u2066b\u2069", "rl\u200fm"], ids=repr)
def test_names_that_become_paths_refuse_c1_controls_and_bidi_overrides(name, tmp_path):
    """A topic, group or scenario name holding U+202E or a C1 control (CSI, U+009B) became a folder or file name as
    it was: listed reordered ('a' U+202E 'exe.txt' shows as 'atxt.exe') or obeyed by a terminal running `ls`."""
    with pytest.raises(UnsafeNameError, match="control"):
        io.safe_component(name, "topic")
    with pytest.raises(UnsafeNameError):
        Panel(np.ones((1, 2, 1)), groups={name: ["a", "b"]})
    assert io.safe_component("caf\u00e9 \u05e9\u05dc\u05d5\u05dd", "topic")  # right-to-left text itself is fine


def test_trace_page_lists_deleted_agents_as_the_tables_show_them(tmp_path):
    """The list of deleted agents printed each id raw: 'new\\nline' as 'new line', and a 10,000-character id whole
    (50 of them: half a megabyte of page) where the tables shorten it."""
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "traces" / "otlp_spans.jsonl"
    long_id = "L" * 10_000
    text = data.read_text().replace('"stringValue": "alice"', json.dumps({"stringValue": "new\nline"})[1:-1]) \
        .replace('"stringValue": "bob"', json.dumps({"stringValue": long_id})[1:-1])
    trace = tmp_path / "spans.jsonl"
    trace.write_text(text)
    spec = tmp_path / "spec.toml"
    spec.write_text('format = "otel"\n[agent]\nfield = "resource/agent.name"\n[step]\nfield = "attributes/sim.step"\n'
                    '[[features]]\nkind = "count"\nname = "calls"\n')
    out = tmp_path / "o"
    assert main(["attribute", "--trace", str(trace), "--spec", str(spec), "--indicator", "lin", "--out", str(out),
                 "--static"]) == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    listed = md.split("### Agents deleted, in order", 1)[1].strip().splitlines()[0]
    assert "new\\\\nline" in listed and long_id not in listed and "LLL…LLL" in listed


MD_IDS = ["&lt;b&gt;", "&#42;", "**bold**", "*it*", "_u_", "__d__", "a|b", "`t`", "<i>x</i>", "[l](javascript:x)",
          "# h", "\\", "a\\|b", "x\\", "=x", "<", "![i](x.png)", "a  b", "~~s~~"]


def test_report_markdown_table_ids_render_as_exactly_the_id():
    """Rendered by a CommonMark renderer (markdown-it-py, an independent reference), an id cell of report.md showed
    '&lt;b&gt;' as '<b>', '**bold**' as a bold 'bold', '_u_' as an italic 'u'."""
    import html
    import re

    markdown_it = pytest.importorskip("markdown_it")
    from aumann.studies.page import Cell, Document, Section, Table, render_markdown

    doc = Document(title="t", sections=[Section("s", "s", blocks=[
        Table(["agent", "v"], [[Cell(i, cls="id"), 1] for i in MD_IDS])])])
    rendered = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(render_markdown(doc))
    cells = re.findall(r"<td>(.*?)</td>", rendered, re.S)[0::2]
    assert [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in cells] == MD_IDS
    assert not re.search(r"<(em|strong|s|a|img|code|i|b)\b", "".join(cells))


def test_ids_differing_in_inner_whitespace_are_flagged_and_kept_visible():
    """'a  b' and 'a b' (or 'a\\tb') are two agents; HTML collapsed the double space, so two rows read 'a b', and the
    look-alike check only compared trimmed ends."""
    from aumann.labels import lookalike_ids
    from aumann.studies.page import Cell, Document, Section, Table, render_html

    count, groups = lookalike_ids(np.array(["a  b", "a b", "a\tb", "c d", "e"]))
    assert count == 1 and groups == [["a\tb", "a  b", "a b"]]
    table = Table(["a"], [[Cell("a  b", cls="id")]])
    page = render_html(Document(title="t", sections=[Section("s", "s", blocks=[table])]))
    assert re.search(r"td\.id\{[^}]*white-space:pre-wrap", page) and '<td class="id">a  b</td>' in page


@pytest.mark.parametrize("agent", ["**admin**", "`rm -rf`", "_u_ & *i*"], ids=repr)
def test_top_driver_card_shows_the_id_exactly(agent):
    """The top-driver card ran the id through the report's own markup: '**admin**' was drawn as a bold 'admin' and
    '`rm -rf`' as code, on both pages."""
    import html

    markdown_it = pytest.importorskip("markdown_it")
    from aumann.studies.page import Cards, Document, Section, render_html, render_markdown
    from aumann.studies.sections import driver_card

    card = driver_card("Top driver", np.array([agent, "other"]), np.array([2.0, 1.0]), 3.0)
    doc = Document(title="t", sections=[Section("cards", "cards", blocks=[Cards([card])])])
    page = render_html(doc)
    value = re.search(r'<div class="value">(.*?)</div>', page).group(1)
    assert html.unescape(value) == f"agent {agent}"
    rendered = markdown_it.MarkdownIt("commonmark").render(render_markdown(doc))
    item = re.search(r"<li>(.*?)</li>", rendered, re.S).group(1)
    assert html.unescape(re.sub(r"<[^>]+>", "", item)).startswith(f"Top driver: agent {agent} —")


@pytest.mark.parametrize("a, b", [("caf\u00e9", "cafe\u0301"), ("alice", "alice\u200b"), ("a\u200b", "a\u2060"),
                                  ("\u00c5ngstr\u00f6m", "A\u030angstro\u0308m"), ("x", "\ufeffx")], ids=ascii)
def test_agent_ids_that_look_identical_stay_two_agents_and_warn(a, b):
    """NFC vs NFD forms, or an invisible character (zero-width space, word joiner, BOM), were two agents shown as two
    identical names everywhere, without a word: they stay two agents (never merged), and building the panel warns
    naming both with escapes."""
    from aumann.errors import LookalikeIdWarning

    with pytest.warns(LookalikeIdWarning, match="differ only in Unicode") as rec:
        p = Panel(np.ones((2, 3, 1)), agent_ids=[a, "other", b])
    assert p.N == 3 and list(p.agent_ids) == [a, "other", b]
    message = str(rec[0].message)
    assert ascii(a) in message and ascii(b) in message and "kept as distinct agents" in message
    assert all(c.isascii() for c in message)


@pytest.mark.parametrize("ids", [["Case", "case"], ["trail ", "trail"], ["1", "01"], ["caf\u00e9", "cafe"],
                                 ["\u05d0\u05d1", "\u05d1\u05d0"], [f"id\u00e9{i}" for i in range(1000)],
                                 [f"agent{i}" for i in range(1000)]], ids=lambda v: ascii(v)[:30])
def test_agent_ids_that_differ_visibly_do_not_warn(ids):
    import warnings

    from aumann.errors import LookalikeIdWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", LookalikeIdWarning)
        assert Panel(np.ones((1, len(ids), 1)), agent_ids=ids).N == len(ids)


def test_lookalike_warning_is_given_once_per_panel_not_per_subset(tmp_path):
    """A panel's subsets, step selections and copies carry ids already checked: no repeated warning."""
    import warnings

    from aumann.errors import LookalikeIdWarning

    with pytest.warns(LookalikeIdWarning):
        p = Panel(np.ones((2, 3, 1)), agent_ids=["caf\u00e9", "cafe\u0301", "b"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", LookalikeIdWarning)
        assert p.take_agents([0, 1]).N == 2 and p.select_steps([0]).T == 1 and p.astype(np.float32).N == 3
    with pytest.warns(LookalikeIdWarning):  # a panel read from a file is built anew: it says so again
        Panel.load(p.save(tmp_path / "p.npz"))


def test_lookalike_ids_count_invisible_characters_for_the_page():
    from aumann.labels import lookalike_ids

    assert lookalike_ids(np.array(["alice", "alice\u200b", "\ufeffbob", "bob", "carol"])) == (
        2, [["alice", "alice\u200b"], ["bob", "\ufeffbob"]])
    assert lookalike_ids(np.array(["bob", "bob "]), whitespace=False) == (0, [])  # the panel warns on these only


def test_aumann_attribute_warns_once_when_two_agent_ids_look_identical(tmp_path, capsys):
    from aumann.errors import LookalikeIdWarning

    with pytest.warns(LookalikeIdWarning):
        p = Panel(np.random.default_rng(0).random((2, 3, 1)), agent_ids=["caf\u00e9", "cafe\u0301", "b"])
    out = tmp_path / "att"
    assert main(["attribute", str(p.save(tmp_path / "p.npz")), "--indicator", "lin", "--out", str(out),
                 "--static"]) == 0
    err = capsys.readouterr().err
    assert err.count("aumann: warning: 1 group(s) of agent ids differ only in Unicode") == 1
    assert "'cafe\\u0301' and 'caf\\xe9'" in err
    assert "look alike" in (out / "report.md").read_text(encoding="utf-8")


def test_report_html_holds_no_raw_control_or_bidi_character_of_an_id(tmp_path):
    """Each id cell of the who-table is shown with its escapes (\\x1b, \\u202e), but its sort key (data-sort) was the
    raw id: report.html held the ESC of an id '\\x1b[31mred' (and `cat report.html` turned the terminal red) and the
    override of '\\u202eevil'. The key is now the text the cell shows."""
    ids = ["\x1b[31mred\x1b[0m", "\u202eevil", "bell\x07", "plain", "\x9b2J"]
    p = Panel(np.arange(2 * 5, dtype=float).reshape(2, 5, 1), agent_ids=ids)
    out = tmp_path / "out"
    assert main(["attribute", str(p.save(tmp_path / "p.npz")), "--indicator", "lin", "--out", str(out),
                 "--static"]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    raw = sorted({f"U+{ord(c):04X}" for c in page if c in "\x1b\x07\x9b\u202e"})
    assert raw == [], raw
    assert 'data-sort="\\x1b[31mred\\x1b[0m"' in page and 'data-sort="\\u202eevil"' in page
