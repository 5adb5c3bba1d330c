"""Names users choose (an indicator's, a scenario's and its description, group and step labels, a trace's file, a
topic, the command line with its --out) in the prose of report.md and report.html: shown as exactly that text,
never as the report's own bold or code, nor as a link or HTML (:func:`aumann.studies.page.literal`)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np
import pytest

from aumann.cli import main
from aumann.panel import Panel
from aumann.studies.charts import Charts
from aumann.studies.page import render_html, render_markdown

HOSTILE = "**x** <b>y</b> [z](javascript:alert(1)) `c` _u_"
#: the same without "/" (a file or folder name cannot hold one)
HOSTILE_NAME = "**x** <b>y [z](javascript:alert(1)) `c` _u_"


def _commonmark(md: str) -> str:
    """report.md as a CommonMark renderer (markdown-it-py, an independent reference) draws it."""
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable(["table"]).render(md)


def _shown(page: str) -> str:
    """The text a reader sees on report.html (tags dropped, entities read)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def _check_both(out: Path, *texts: str) -> None:
    md = (out / "report.md").read_text(encoding="utf-8")
    page = (out / "report.html").read_text(encoding="utf-8")
    rendered = _commonmark(md)
    for drawn in ("<strong>x</strong>", "<b>", 'href="javascript', "<code>c</code>", "<em>u</em>"):
        assert drawn not in rendered, ("report.md", drawn)
        assert drawn not in page.split("<script", 1)[0], ("report.html", drawn)
    for text in texts:
        assert text in _shown(rendered), ("report.md", text)
        assert text in _shown(page), ("report.html", text)


def test_attribute_page_shows_the_indicator_group_and_step_names_literally(tmp_path):
    """A user indicator named '**x** <b>y</b> [z](javascript:…) `c` _u_' was drawn as a bold x, a link z, code c and an
    italic u in the title, the who-table's caption, the provenance and (a group label) the 'Largest … share' card."""
    (tmp_path / "ind.py").write_text("from aumann.attribution.indicators import Lin\n\n\nclass Hostile(Lin):\n"
                                     f"    name = {HOSTILE!r}\n\n\nhostile = Hostile()\n")
    p = Panel(np.random.default_rng(0).random((3, 4, 1)), agent_ids=["a", "b", "c", "d"],
              steps=[HOSTILE, "s1", "s2"], groups={"tier": [HOSTILE, HOSTILE, "lo", "lo"]})
    out = tmp_path / "out"
    assert main(["attribute", str(p.save(tmp_path / "p.npz")), "--indicator", f"{tmp_path / 'ind.py'}:hostile",
                 "--out", str(out), "--static"]) == 0
    _check_both(out, f"Attribution of {HOSTILE}: who drove it", f"indicator {HOSTILE})", f"{HOSTILE}: ")


def test_who_table_headers_show_feature_and_group_names_literally(tmp_path):
    """The who-table's columns are named by the panel's features and groups: a feature named '**x** <b>y</b> …' was
    a bold x (and the rest) in that header row of both pages, where its cells already showed names literally."""
    p = Panel(np.random.default_rng(0).random((3, 4, 2)), agent_ids=["a", "b", "c", "d"],
              features=[HOSTILE, "plain"], groups={"_u_": ["g", "g", "h", "h"]})  # (a group name is a file name)
    out = tmp_path / "out"
    assert main(["attribute", str(p.save(tmp_path / "p.npz")), "--indicator", "heat", "--out", str(out),
                 "--static"]) == 0
    _check_both(out, HOSTILE, "_u_")
    header = next(line for line in (out / "report.md").read_text(encoding="utf-8").splitlines()
                  if line.startswith("| rank | agent"))
    assert "**x**" not in header and "\\*\\*x\\*\\*" in header


def test_trace_page_shows_the_trace_file_and_command_literally(tmp_path):
    """The trace's file name (provenance 'files') and the command line (with --out) in the page's meta line went
    through the report's markup: a backtick in --out ended the code span the command is shown in."""
    data = Path(__file__).resolve().parents[1] / "data" / "traces" / "otlp_spans.jsonl"
    trace = tmp_path / f"{HOSTILE_NAME}.jsonl"
    trace.write_text(data.read_text())
    spec = tmp_path / "spec.toml"
    spec.write_text('format = "otel"\n[agent]\nfield = "resource/agent.name"\n[step]\nfield = "attributes/sim.step"\n'
                    '[[features]]\nkind = "count"\nname = "calls"\n')
    out = tmp_path / f"out {HOSTILE_NAME}"
    assert main(["attribute", "--trace", str(trace), "--spec", str(spec), "--indicator", "lin", "--out", str(out),
                 "--static"]) == 0
    command = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["command"]
    assert HOSTILE_NAME in command
    _check_both(out, f"{HOSTILE_NAME}.jsonl", command)


def test_trace_page_shows_a_where_field_named_in_a_filter_reason_literally(tmp_path):
    """A record left out by the spec's [where] is counted under '<field> not in where'; the field is a column name of
    the user's file, and the trace table ('Records not used as read') drew '**x** <b>y ... `c` _u_' as a bold x and
    code c on both pages (the skip reasons beside it were literal)."""
    trace = tmp_path / "t.csv"
    trace.write_text(f"agent,tick,action,{HOSTILE_NAME}\na,0,buy,keep\nb,0,buy,drop\na,1,buy,keep\nb,1,buy,keep\n")
    spec = tmp_path / "spec.toml"
    spec.write_text('format = "table"\n[agent]\nfield = "agent"\n[step]\nfield = "tick"\n[action]\nfield = "action"\n'
                    f'[[features]]\nkind = "count_each"\n[where]\n{json.dumps(HOSTILE_NAME)} = ["keep"]\n')
    out = tmp_path / "out"
    assert main(["attribute", "--trace", str(trace), "--spec", str(spec), "--indicator", "lin", "--out", str(out),
                 "--static"]) == 0
    _check_both(out, f"{HOSTILE_NAME} not in where")


def test_run_page_shows_the_scenario_description_and_command_literally(tmp_path):
    """A scenario's name, description and baseline description (a user registry entry) and the command line went
    through the report's markup on the page of `aumann run`."""
    from aumann.studies.study_page import faithfulness_document

    cfg = tmp_path / "tiny.toml"
    cfg.write_text("agents = 6\nsteps = 4\nruns = 1\nseed = 3\n[study]\npermutations = 20\nrandom_orderings = 2\n"
                   "path_orders = 2\nquadrature_steps = 8\n")
    out = tmp_path / "run"
    assert main(["run", "social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static",
                 "--no-ablations"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.update(scenario=HOSTILE, description=f"about {HOSTILE}", baseline_description=f"none {HOSTILE}",
                    command=f"aumann run x --out '{HOSTILE}'")
    doc = faithfulness_document(out, manifest, Charts(interactive=False), plots=False)
    md, page = render_markdown(doc), render_html(doc)
    (tmp_path / "hostile").mkdir()
    (tmp_path / "hostile" / "report.md").write_text(md, encoding="utf-8")
    (tmp_path / "hostile" / "report.html").write_text(page, encoding="utf-8")
    _check_both(tmp_path / "hostile", f"{HOSTILE}: who drove it", f"about {HOSTILE}", f"none {HOSTILE}",
                f"--out '{HOSTILE}'")


def test_unbuilt_report_shows_the_folder_name_literally():
    from aumann.studies.report import unbuilt_report

    rendered = _commonmark(unbuilt_report(Path("/tmp") / HOSTILE_NAME, []))
    for drawn in ("<strong>x</strong>", "<b>", "href=", "<em>u</em>"):
        assert drawn not in rendered
    assert f"{HOSTILE_NAME}: the report could not be built" in _shown(rendered)
    assert f"aumann report /tmp/{HOSTILE_NAME}" in _shown(rendered)


@pytest.mark.parametrize("text", [HOSTILE, "a`b", "``", "` x `", " ", "\ue000", "\ue001 \ue000", "new\nline",
                                  "\x1b[2J"], ids=ascii)
def test_literal_spans_show_exactly_their_text(text):
    """A literal span in prose, and a code span holding one, render as exactly that text in both formats
    (a mark character inside the text itself is shown as its escape, a control character as its escape)."""
    from aumann.studies.page import Document, KeyValues, Section, Text, literal, visible_text

    doc = Document(title="t", sections=[Section("s", "s", [Text(f"A **bold** {literal(text)} B"),
                                                           KeyValues([("cmd", f"`{literal(text)}`")])])])
    shown = visible_text(text.replace("\ue000", "\\ue000").replace("\ue001", "\\ue001"))
    rendered = _commonmark(render_markdown(doc))
    paragraph = re.search(r"<p>(.*?)</p>", rendered, re.S).group(1)
    assert paragraph.startswith("A <strong>bold</strong> ")  # the report's own bold is kept
    assert html.unescape(paragraph.split("</strong> ", 1)[1]) == f"{shown.replace(chr(10), ' ')} B"
    code = re.search(r"<li>cmd: <code>(.*?)</code></li>", rendered, re.S).group(1)
    assert html.unescape(code) == shown.replace("\n", " ")
    page = render_html(doc)
    assert html.unescape(re.search(r"<p>A <strong>bold</strong> (.*?)</p>", page, re.S).group(1)) == f"{shown} B"
    assert html.unescape(re.search(r"<dd><code>(.*?)</code></dd>", page, re.S).group(1)) == shown
    assert "\ue000" not in page and "\ue001" not in page


def test_crossscale_page_shows_the_counts_folder_and_command_literally(tmp_path):
    """`aumann bluesky study`'s page showed its counts folder (provenance) and its command line (with --out) through
    the report's markup."""
    counts, out = tmp_path / f"counts {HOSTILE_NAME}", tmp_path / f"study {HOSTILE_NAME}"
    assert main(["bluesky", "synth", "--users", "2000", "--seed", "1", "--out", str(counts)]) == 0
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "full", "--seeds", "0",
                 "--no-progress", "--static"]) == 0
    command = json.loads((out / "manifest.json").read_text(encoding="utf-8"))["command"]
    assert HOSTILE_NAME in command
    _check_both(out, f"{counts}", command)
