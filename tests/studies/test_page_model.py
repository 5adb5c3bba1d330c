"""The report document model: formatting, tables, self-containment checks, Markdown twin; StageTimer."""

from __future__ import annotations

import math

import pytest

from aumann.errors import ReportError
from aumann.progress import StageTimer
from aumann.studies.page import (
    Cell,
    Document,
    Figure,
    Note,
    Section,
    Table,
    Text,
    external_references,
    fmt,
    render_html,
    render_markdown,
)
from tests.studies import htmlcheck


def test_fmt_is_readable():
    assert fmt(None) == "–" and fmt(math.nan) == "–"
    assert fmt(1234567) == "1,234,567" and fmt(3.0) == "3"
    assert fmt(0.71428) == "0.7143" and fmt(-0.5) == "−0.5"
    assert fmt(1.5e-17) == "1.500e−17" and fmt(True) == "yes"


def test_external_references_finds_every_kind():
    page = ('<link rel="stylesheet" href="https://x.org/a.css"><img src="data:image/png;base64,AA">'
            '<script src="//cdn.example/x.js"></script><a href="#who">x</a>'
            '<div style="background:url(\'http://e/x.png\')"></div><style>@import "s.css"; '
            'p{background:url(data:image/png;base64,AA)}</style><img srcset="a.png 1x, data:x 2x">')
    assert sorted(external_references(page)) == sorted(["https://x.org/a.css", "//cdn.example/x.js",
                                                        "http://e/x.png", "s.css", "a.png"])


def _doc(**kw) -> Document:
    return Document(title="T", sections=[Section("who", "Who drove it", [
        Text("agents with `code`"),
        Table(["rank", "agent", "Φ_i"], [[1, Cell("a|1", sort="a|1", cls="id"), Cell("0.5", sort=0.5, bar=1.0)],
                                         [2, "b<2>", -0.25]], id="who-run-000", md_max_rows=1),
        Note("Ablations were skipped.", "skipped"),
    ])], **kw)


def test_html_renders_one_value_per_cell_and_escapes():
    page = render_html(_doc())
    tab = htmlcheck.tables(page)["who-run-000"]
    assert tab["head"] == ["rank", "agent", "Φ_i"]
    assert [r[1]["text"] for r in tab["rows"]] == ["a|1", "b<2>"]
    assert tab["rows"][1][2]["attrs"]["data-sort"] == "-0.25"
    assert "<code>code</code>" in page and "b&lt;2&gt;" in page
    assert external_references(page) == []


def test_markdown_twin_has_the_same_content():
    md = render_markdown(_doc(synthetic=True))
    assert md.startswith("# T\n") and "> **SYNTHETIC" in md
    assert "| rank | agent | Φ_i |" in md and "| 1 | a\\|1 | 0.5 |" in md
    assert "(1 more rows in report.html)" in md and "> Ablations were skipped." in md


def test_a_page_that_would_load_from_the_network_is_refused():
    doc = _doc()
    doc.sections[0].blocks.append(Figure("x", html='<img src="https://example.org/x.png">'))
    with pytest.raises(ReportError, match="external"):
        render_html(doc)


def test_synthetic_pages_say_so_everywhere():
    page = render_html(_doc(synthetic=True))
    text = htmlcheck.text(page)
    assert "SYNTHETIC data" in text and "[SYNTHETIC]" in page.split("</title>")[0]
    assert text.split("Who drove it")[-1].lstrip().startswith("SYNTHETIC")  # the section says so too


def test_stage_timer_accumulates_named_stages():
    now = iter([0.0, 1.0, 3.0, 3.5, 4.0, 10.0])
    t = StageTimer(clock=lambda: next(now))
    t.start("simulate")      # 0
    t.start("attribute")     # 1 → simulate 1 s
    t.start("simulate")      # 3 → attribute 2 s
    t.stop()                 # 3.5 → simulate +0.5
    t.stop()                 # 4: nothing running
    t.add("report", 0.25)
    assert t.seconds == {"simulate": 1.5, "attribute": 2.0, "report": 0.25}
    assert t.total == pytest.approx(3.75)


def test_the_top_driver_card_names_no_agent_when_nothing_changed():
    """A run where every Φ_i is 0 (every agent abstained: Δv = 0) has no top driver; the card said 'agent 0'."""
    import numpy as np

    from aumann.studies.sections import driver_card

    none = driver_card("Top driver", ["a", "b", "c"], np.zeros(3), 0.0)
    assert none.value == "none" and "every Φ_i = 0" in none.detail
    some = driver_card("Top driver", ["a", "b", "c"], np.array([0.1, -0.5, 0.3]), 0.4)
    assert some.value == "agent c" and "75.0%" in some.detail


def test_the_pages_own_prose_uses_no_single_asterisk_emphasis():
    """The page renderers draw the report's own ``**bold**`` and ```code``` spans, and nothing else: a sentence of
    ours written with Markdown's single-asterisk emphasis (``under *How sure* bounds``, ``two *noisy* runs``) was
    italic in report.md but showed its asterisks in report.html. Every string literal of the page-building modules
    is checked (a ``*`` next to a word, not doubled)."""
    import ast
    import re
    from pathlib import Path

    import aumann.studies as studies

    emphasis = re.compile(r"(?<![*\w])\*(?=[A-Za-z])[^*\n]{1,40}(?<=[A-Za-z])\*(?![*\w])")
    found = []
    for path in sorted(Path(studies.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)  # (docstrings are read as Markdown by nobody)
                      if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body
                      and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found += [f"{path.name}: {m.group(0)}" for m in emphasis.finditer(node.value)]
    assert found == []
