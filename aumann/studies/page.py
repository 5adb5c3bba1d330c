"""One report, two renderings: a small document model rendered as a self-contained HTML page and as Markdown.

A :class:`Document` is a list of :class:`Section` objects made of blocks — :class:`Text`,
:class:`Note` (one line; a skipped section says so with one), :class:`Cards` (the at-a-glance
numbers), :class:`Table`, :class:`Figure`, :class:`KeyValues` and :class:`Details` (a collapsible
group). :func:`render_html` writes one HTML file that needs nothing else: CSS and script are
embedded, images are ``data:`` URIs, interactive figures bring their JavaScript inline, and the only
links are to anchors on the page (:func:`external_references` checks it; :func:`render_html` refuses
to return a page that fails the check). :func:`render_markdown` writes the plain-text twin of the
same document (figures become links to the PNG files beside it, or a line saying they are in
``report.html``).

Table cells are rendered one value per ``<td>``; the page's script only sorts tables (click a
header), it never builds them.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from aumann.checks import FLOAT64_EXACT_INTEGERS
from aumann.errors import ReportError, StudyError

# --------------------------------------------------------------------------- blocks


@dataclass
class Text:
    """A paragraph. Inline ```code``` and ``**bold**`` are rendered in both formats."""

    text: str


@dataclass
class Note:
    """A one-line callout: ``kind`` is ``"skipped"`` (a section that did not run), ``"info"`` or ``"warn"``."""

    text: str
    kind: str = "info"


@dataclass
class Card:
    label: str
    value: str
    detail: str = ""


@dataclass
class Cards:
    """The at-a-glance numbers at the top of a page."""

    cards: list[Card]


@dataclass
class Cell:
    """A table cell whose shown text differs from its sort key, or that carries a magnitude bar.

    ``bar`` in [-1, 1] draws a signed bar behind the value (positive red, negative blue).
    """

    text: str
    sort: float | str | None = None
    bar: float | None = None
    cls: str = ""


@dataclass
class Table:
    """A table; ``rows`` hold plain values (numbers are formatted, one value per cell) or :class:`Cell`."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""
    id: str = ""
    md_max_rows: int | None = None  # the Markdown twin shows at most this many rows (None: all)


@dataclass
class Figure:
    """A figure: a PNG (embedded as a ``data:`` URI) and/or an interactive HTML fragment."""

    title: str
    png: bytes | None = None
    html: str | None = None
    caption: str = ""
    md_ref: str | None = None  # a PNG file beside report.md that shows the same thing
    synthetic: bool = False
    md_only: bool = False  # a link of report.md to a PNG beside it whose content report.html draws otherwise


@dataclass
class KeyValues:
    items: Sequence[tuple[str, Any]]
    caption: str = ""


@dataclass
class Details:
    """A collapsible group of blocks (open when ``open``)."""

    summary: str
    blocks: list[Any]
    open: bool = False


@dataclass
class Section:
    id: str
    title: str
    blocks: list[Any] = field(default_factory=list)
    lead: str = ""


@dataclass
class Document:
    """A whole report. ``synthetic`` puts the SYNTHETIC banner on the page (and in the Markdown)."""

    title: str
    sections: list[Section]
    subtitle: str = ""
    synthetic: bool = False
    synthetic_note: str = "SYNTHETIC data — generated, not observed. Numbers describe the generator, not the world."
    meta: Sequence[tuple[str, Any]] = ()
    head: str = ""  # extra <head> content (inline scripts of an interactive plotting library)


# --------------------------------------------------------------------------- formatting


def fmt(v: Any, digits: int = 4) -> str:
    """A value as text: ``–`` for missing/NaN, ints with thousands separators, floats to ``digits`` figures."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        if v == 0:
            return "0"
        if float(v).is_integer() and abs(v) < 1e15:
            return f"{int(v):,}"
        return f"{v:.{digits}g}".replace("-", "−") if abs(v) >= 1e-3 and abs(v) < 1e6 else \
            f"{v:.{max(digits - 1, 1)}e}".replace("-", "−")
    if hasattr(v, "item") and callable(v.item):
        try:
            return fmt(v.item(), digits)
        except (TypeError, ValueError):
            pass
    return str(v)


def seconds_text(s: float | None) -> str:
    if s is None or (isinstance(s, float) and math.isnan(s)):
        return "–"
    if s < 1:
        return f"{1000 * s:.0f} ms"
    if s < 120:
        return f"{s:.1f} s"
    return f"{s / 60:.1f} min"


_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")


class Verbatim(str):
    """Text a page shows exactly as it is: no ```code``` or ``**bold**`` spans of the report's own, and in report.md
    also ``*`` ``_`` ``~`` escaped (:func:`md_literal`). For prose that is (or holds) user data, such as an agent
    id in a card or a list of ids: an id ``**admin**`` is not drawn as a bold ``admin``."""


#: the marks around a :func:`literal` span (private-use characters; one inside the text itself is shown escaped)
_LIT_OPEN, _LIT_CLOSE = "\ue000", "\ue001"
#: a literal span, alone or as the whole content of a code span of the report's own
_LITERAL = re.compile("`\ue000([^\ue000\ue001]*)\ue001`|\ue000([^\ue000\ue001]*)\ue001")


def literal(text: Any) -> str:
    """``text`` (a name the user chose: a scenario, an indicator, a group, a path, a command line) marked to be shown
    exactly as it is inside the report's own prose, in report.md and report.html alike: none of its characters starts
    a ```code``` or ``**bold**`` span of the report's, Markdown emphasis, a link or HTML. Inside backticks
    (``f"`{literal(cmd)}`"``) it is a code span holding exactly that text. The marks are private-use characters
    that only the page renderers read (:class:`Verbatim` is the same for a whole block of text).

    >>> doc = Document(title=f"Scenario {literal('**x** [z](javascript:y)')}", sections=[])
    >>> print(render_markdown(doc).splitlines()[0])
    # Scenario \\*\\*x\\*\\* \\[z\\](javascript:y)
    """
    shown = str(text).replace(_LIT_OPEN, "\\ue000").replace(_LIT_CLOSE, "\\ue001")
    return f"{_LIT_OPEN}{shown}{_LIT_CLOSE}"


def _spans(text: str) -> list[tuple[str, str]]:
    """``text`` cut into ("prose", …), ("literal", …) and ("code", …) parts (:func:`literal`)."""
    if _LIT_OPEN not in text:
        return [("prose", text)]
    out: list[tuple[str, str]] = []
    at = 0
    for m in _LITERAL.finditer(text):
        out.append(("prose", text[at:m.start()]))
        out.append(("code", m.group(1)) if m.group(1) is not None else ("literal", m.group(2)))
        at = m.end()
    out.append(("prose", text[at:]))
    return [(kind, part) for kind, part in out if part or kind != "prose"]


def _inline(text: str) -> str:
    if isinstance(text, Verbatim):
        return _html_text(text)
    out = []
    for kind, part in _spans(str(text)):
        if kind == "literal":
            out.append(_html_text(part))
        elif kind == "code":
            out.append(f"<code>{_html_text(part)}</code>")
        else:
            html_part = _CODE.sub(lambda m: f"<code>{m.group(1)}</code>", _html_text(part))
            out.append(_BOLD.sub(lambda m: f"<strong>{m.group(1)}</strong>", html_part))
    return "".join(out)


def _html_text(text: Any) -> str:
    """Text as HTML: escaped, and the characters that reorder or hide what a reader sees (bidirectional overrides
    and isolates, control characters) shown as their escapes (``\\u202e``), as in report.md: an agent id
    ``x\\u202egnp.exe`` would otherwise be displayed as ``xexe.png``."""
    return html.escape(_visible(str(text)), quote=False)


def _attr(text: str) -> str:
    return html.escape(str(text), quote=True)


def _sort_key(v: Any) -> str:
    if isinstance(v, Cell):
        v = v.sort if v.sort is not None else v.text
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, int) and abs(v) > FLOAT64_EXACT_INTEGERS:
        # its digits: as a double, ids 2**53 and 2**53 + 1 had one key and sorted as equals (the page's script
        # orders keys that are equal as numbers by their exact digits); smaller ints keep their key as it was
        return str(v)
    if isinstance(v, int | float):
        return "" if (isinstance(v, float) and math.isnan(v)) else repr(float(v))
    if hasattr(v, "item") and callable(v.item):
        try:
            return _sort_key(v.item())
        except (TypeError, ValueError):
            pass
    # as the cell shows it: an id's escape sequence or bidirectional override is no raw byte of the page either (a
    # data-sort of "\x1b[31m..." put the ESC itself into report.html, which `cat report.html` obeyed)
    return _visible(str(v))


def _is_na(v: Any) -> bool:
    """A cell of an agent that is not alive there (``cls="na"``): a column of numbers with such cells stays one."""
    return isinstance(v, Cell) and "na" in v.cls.split()


def _is_num(v: Any) -> bool:
    if isinstance(v, Cell):
        return isinstance(v.sort, int | float) and not isinstance(v.sort, bool)
    return (isinstance(v, int | float) and not isinstance(v, bool)) or type(v).__module__ == "numpy"


# --------------------------------------------------------------------------- HTML

_CSS = """
:root{--fg:#1d2330;--muted:#5b6474;--bg:#f6f7fb;--card:#fff;--line:#e2e5ee;--accent:#2457d6;
--pos:#d6452f;--neg:#2f6fd6;--skip:#8a6d1d;--skipbg:#fff8e1;--synth:#b3261e}
*{box-sizing:border-box}
html{scroll-behavior:smooth}
body{margin:0;font:15px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,
"Noto Sans",sans-serif;color:var(--fg);background:var(--bg)}
header.top{background:#18203a;color:#fff;padding:22px 0 16px}
header.top h1{margin:0 0 4px;font-size:24px;font-weight:650;letter-spacing:.2px}
header.top .sub{color:#c7cde0;font-size:14px}
header.top .meta{margin-top:8px;color:#9aa3bd;font-size:12.5px}
header.top .meta{display:flex;flex-wrap:wrap;gap:2px 18px}
header.top code{background:rgba(255,255,255,.08);color:#e7ebf7}
.wrap{max-width:1180px;margin:0 auto;padding:0 24px}
nav.toc{position:sticky;top:0;z-index:10;background:rgba(255,255,255,.96);border-bottom:1px solid var(--line);
backdrop-filter:blur(4px)}
nav.toc a{display:inline-block;padding:10px 14px 9px;color:var(--muted);text-decoration:none;font-weight:600;
font-size:14px;border-bottom:2px solid transparent}
nav.toc a:hover{color:var(--accent);border-bottom-color:var(--accent)}
.synth-banner{background:var(--synth);color:#fff;font-weight:700;padding:9px 0;letter-spacing:.3px}
.synth-banner code{background:rgba(255,255,255,.2);color:#fff}
.synth-tag{display:inline-block;background:var(--synth);color:#fff;font-size:11px;font-weight:700;
padding:1px 7px;border-radius:3px;margin-left:8px;vertical-align:middle;letter-spacing:.4px}
section.sec{background:var(--card);border:1px solid var(--line);border-radius:10px;margin:22px 0;
padding:6px 24px 18px;box-shadow:0 1px 2px rgba(20,30,60,.04)}
section.sec>h2{font-size:20px;margin:16px 0 4px;display:flex;flex-wrap:wrap;align-items:baseline;gap:0 10px}
section.sec>h2 .q{color:var(--muted);font-size:14px;font-weight:500}
.lead{color:var(--muted);margin:0 0 12px}
h3{font-size:16px;margin:20px 0 6px}
p{margin:8px 0}
code{font:12.5px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:#eef0f6;padding:1px 5px;
border-radius:4px}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(165px,1fr));gap:12px;margin:22px 0 0}
.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:12px 16px}
.card .label{color:var(--muted);font-size:12.5px;letter-spacing:.2px;font-weight:650}
.card .value{font-size:22px;font-weight:650;margin:2px 0;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
.card .detail{color:var(--muted);font-size:12.5px}
.note{border-left:4px solid var(--accent);background:#eef3ff;padding:7px 12px;border-radius:0 6px 6px 0;
margin:10px 0;font-size:14px}
.note.skipped{border-left-color:#d9a400;background:var(--skipbg);color:var(--skip)}
.note.warn{border-left-color:var(--synth);background:#fdecea;color:#7a1c15}
.tablewrap{overflow-x:auto;margin:10px 0 4px;container-type:inline-size;background:
linear-gradient(to right,var(--card) 40%,rgba(255,255,255,0)) left center/36px 100% no-repeat local,
linear-gradient(to left,var(--card) 40%,rgba(255,255,255,0)) right center/36px 100% no-repeat local,
linear-gradient(to right,rgba(20,30,60,.22),rgba(20,30,60,0)) left center/14px 100% no-repeat scroll,
linear-gradient(to left,rgba(20,30,60,.22),rgba(20,30,60,0)) right center/14px 100% no-repeat scroll;
background-color:var(--card)}
table.t{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums;min-width:40%}
table.t caption{caption-side:top;text-align:left;color:var(--muted);font-size:13px;padding:0 0 6px;
position:sticky;left:0;max-width:100cqw}
table.t th{background:rgba(40,60,140,.07);text-align:left;font-weight:650;padding:6px 9px;
border-bottom:1px solid var(--line);white-space:nowrap;cursor:pointer;user-select:none;position:sticky;top:0}
table.t th.num{text-align:right}
table.t th[aria-sort=ascending]::after{content:" ▲";font-size:10px}
table.t th[aria-sort=descending]::after{content:" ▼";font-size:10px}
table.t td{padding:4px 9px;border-bottom:1px solid #eef0f5;white-space:nowrap}
table.t td.num{text-align:right}
table.t td.na{text-align:right;color:var(--muted);font-style:italic}
table.t td.id{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-weight:600;white-space:pre-wrap}
table.t tbody tr:nth-child(even){background:rgba(40,60,140,.02)}
table.t tbody tr:hover{background:rgba(36,87,214,.08)}
td.bar{position:relative}
td.bar .b{position:absolute;top:3px;bottom:3px;opacity:.18;border-radius:2px}
td.bar .b.pos{left:0;background:var(--pos)}
td.bar .b.neg{right:0;background:var(--neg)}
td.bar span.v{position:relative}
dl.kv{display:grid;grid-template-columns:fit-content(45%) minmax(0,1fr);gap:3px 18px;margin:10px 0;font-size:14px}
dl.kv dt{color:var(--muted);overflow-wrap:anywhere}
dl.kv dd{margin:0;font-variant-numeric:tabular-nums;overflow-wrap:anywhere}
figure.fig{margin:14px 0;padding:0}
.hscroll{overflow-x:auto}
figure.fig img{max-width:100%;height:auto;border:1px solid var(--line);border-radius:6px;background:#fff}
figure.fig figcaption{color:var(--muted);font-size:13px;margin-top:4px}
figure.fig .ftitle{font-weight:650;font-size:14px;margin-bottom:4px}
.figgrid{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(460px,100%),1fr));gap:8px 18px}
.figgrid>*{min-width:0}
details.d{border:1px solid var(--line);border-radius:8px;margin:10px 0;padding:4px 12px}
details.d>summary{cursor:pointer;font-weight:600;padding:4px 0}
footer{color:var(--muted);font-size:12.5px;padding:10px 0 40px}
@media (max-width:600px){.wrap{padding:0 10px}section.sec{padding:4px 12px 14px}}
@media print{nav.toc{display:none}section.sec{break-inside:avoid-page;box-shadow:none}}
"""

_JS = r"""
(function(){
  function key(td){var s=td.getAttribute('data-sort');return s===null?td.textContent.trim():s;}
  function num(s){if(s===''||s===null)return NaN;var x=Number(s);return isNaN(x)?NaN:x;}
  function exact(x,y){var r=/^-?[0-9]+(?:[.]0)?$/;if(!r.test(x)||!r.test(y)||typeof BigInt!=='function')return 0;
    var p=BigInt(x.replace(/[.]0$/,'')),q=BigInt(y.replace(/[.]0$/,''));return p<q?-1:(p>q?1:0);}
  function order(x,y){var nx=num(x),ny=num(y),c;
    if(!isNaN(nx)&&!isNaN(ny)){c=nx-ny;if(c===0&&x!==y)c=exact(x,y);}
    else if(isNaN(nx)&&!isNaN(ny))c=1;else if(!isNaN(nx))c=-1;else c=x<y?-1:(x>y?1:0);
    return c;}
  document.querySelectorAll('table.t').forEach(function(t){
    var ths=t.querySelectorAll('thead th');
    ths.forEach(function(th,i){
      th.addEventListener('click',function(){
        var body=t.tBodies[0];if(!body)return;
        var dir=th.getAttribute('aria-sort')==='descending'?'ascending':'descending';
        ths.forEach(function(o){o.removeAttribute('aria-sort');});
        th.setAttribute('aria-sort',dir);
        var rows=Array.prototype.slice.call(body.rows);
        rows.sort(function(a,b){
          var c=order(key(a.cells[i]),key(b.cells[i]));
          return dir==='ascending'?c:-c;
        });
        rows.forEach(function(r){body.appendChild(r);});
      });
    });
  });
  document.documentElement.setAttribute('data-report-ready','1');
})();
"""


def _cell_html(v: Any) -> str:
    if isinstance(v, Cell):
        cls = [c for c in (v.cls, "num" if _is_num(v) else "") if c]
        text = _html_text(v.text) if "id" in v.cls.split() else _inline(v.text)  # ids verbatim
        if v.bar is not None and math.isfinite(v.bar):
            w = min(abs(v.bar), 1.0) * 100
            side = "pos" if v.bar >= 0 else "neg"
            cls.append("bar")
            text = f'<span class="b {side}" style="width:{w:.1f}%"></span><span class="v">{text}</span>'
        sort = "" if v.sort is None else f' data-sort="{_attr(_sort_key(v))}"'
        return f'<td class="{" ".join(cls)}"{sort}>{text}</td>' if cls else f"<td{sort}>{text}</td>"
    if _is_num(v):
        return f'<td class="num" data-sort="{_attr(_sort_key(v))}">{html.escape(fmt(v))}</td>'
    return f"<td>{_inline(fmt(v))}</td>"


def _table_html(t: Table) -> str:
    num_cols = [bool(t.rows) and all(_is_num(r[j]) or r[j] is None or _is_na(r[j]) for r in t.rows)
                for j in range(len(t.columns))]
    head = "".join(f'<th scope="col"{" class=num" if num_cols[j] else ""}>{_inline(c)}</th>'
                   for j, c in enumerate(t.columns))
    body = "\n".join("<tr>" + "".join(_cell_html(v) for v in row) + "</tr>" for row in t.rows)
    tid = f' id="{_attr(t.id)}"' if t.id else ""
    cap = f"<caption>{_inline(t.caption)}</caption>" if t.caption else ""
    return (f'<div class="tablewrap"><table class="t"{tid}>{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>\n{body}\n</tbody></table></div>")


def _figure_html(f: Figure) -> str:
    if f.md_only:
        return ""
    tag = '<span class="synth-tag">SYNTHETIC</span>' if f.synthetic else ""
    if f.html:
        inner = f.html
    elif f.png:
        b64 = base64.b64encode(f.png).decode("ascii")
        inner = f'<img alt="{_attr(f.title)}" src="data:image/png;base64,{b64}">'
    else:
        inner = '<div class="note skipped">(no figure)</div>'
    cap = f"<figcaption>{_inline(f.caption)}</figcaption>" if f.caption else ""
    return f'<figure class="fig"><div class="ftitle">{_inline(f.title)}{tag}</div>{inner}{cap}</figure>'


_BLOCKS = (Text, Note, Cards, Table, Figure, KeyValues, Details, str)


def check_blocks(blocks: Any, what: str) -> list[Any]:
    """The blocks a report section returned, as a list, checked before the page is rendered: ``None`` is no
    blocks; an iterable (a generator too) is read once, here — a generator was used up by report.html and left
    report.md without the section; a bare string, an object that is no block (``42``) or a table whose row has
    more or fewer cells than it has columns is a :class:`~aumann.errors.StudyError` naming ``what``. Such a block
    used to fail the whole report.html (IndexError, ``unknown report block int``) instead of its own section, and a
    string came out one heading per character."""
    if blocks is None:
        return []
    if isinstance(blocks, str | bytes | dict) or not hasattr(blocks, "__iter__"):
        raise StudyError(f"{what} must return a list of blocks (Text, Table, Note, ...); got "
                         f"{type(blocks).__name__} {repr(blocks)[:80]}")
    out = list(blocks)

    def check(b: Any, where: str) -> None:
        if isinstance(b, list):
            for x in b:
                check(x, where)
        elif not isinstance(b, _BLOCKS):
            raise StudyError(f"{where}: {type(b).__name__} {repr(b)[:80]} is not a report block (Text, "
                             "Note, Cards, Table, Figure, KeyValues, Details, a list of them, or a heading string)")
        elif isinstance(b, Table):
            width = len(b.columns)
            for i, row in enumerate(b.rows):
                if len(row) != width:
                    raise StudyError(f"{where}: table {b.id or b.caption!r} has {width} column(s) but row {i} has "
                                     f"{len(row)} cell(s)")
        elif isinstance(b, Details):
            b.blocks = list(b.blocks)
            check(b.blocks, where)
        elif isinstance(b, Cards) and not all(isinstance(c, Card) for c in b.cards):
            raise StudyError(f"{where}: Cards holds something that is not a Card")

    check(out, what)
    return out


def _block_html(b: Any) -> str:
    if isinstance(b, Text):
        return f"<p>{_inline(b.text)}</p>"
    if isinstance(b, Note):
        return f'<div class="note {_attr(b.kind)}">{_inline(b.text)}</div>'
    if isinstance(b, Cards):
        return '<div class="cards">' + "".join(
            f'<div class="card"><div class="label">{_inline(c.label)}</div><div class="value">{_inline(c.value)}'
            f'</div><div class="detail">{_inline(c.detail)}</div></div>' for c in b.cards) + "</div>"
    if isinstance(b, Table):
        return _table_html(b)
    if isinstance(b, Figure):
        return _figure_html(b)
    if isinstance(b, KeyValues):
        cap = f"<h3>{_inline(b.caption)}</h3>" if b.caption else ""
        return cap + '<dl class="kv">' + "".join(f"<dt>{_inline(k)}</dt><dd>{_inline(fmt(v))}</dd>"
                                              for k, v in b.items) + "</dl>"
    if isinstance(b, Details):
        return (f'<details class="d"{" open" if b.open else ""}><summary>{_inline(b.summary)}</summary>'
                + "\n".join(_block_html(x) for x in b.blocks) + "</details>")
    if isinstance(b, list):
        figs = all(isinstance(x, Figure) for x in b)
        inner = "\n".join(_block_html(x) for x in b)
        return f'<div class="figgrid">{inner}</div>' if figs else inner
    if isinstance(b, str):
        return f"<h3>{_inline(b)}</h3>"
    raise TypeError(f"unknown report block {type(b).__name__}")


def render_html(doc: Document) -> str:
    """The document as one self-contained HTML page (raises :class:`ReportError` if it is not)."""
    nav = "".join(f'<a href="#{_attr(s.id)}">{_inline(s.title)}</a>' for s in doc.sections)
    meta = "".join(f"<span>{_inline(k)}: {_inline(fmt(v))}</span>" for k, v in doc.meta)
    banner = (f'<div class="synth-banner"><div class="wrap">⚠ {_inline(doc.synthetic_note)}</div></div>'
              if doc.synthetic else "")
    parts = []
    for s in doc.sections:
        q = f'<span class="q">{_inline(s.lead)}</span>' if s.lead else ""
        tag = '<span class="synth-tag">SYNTHETIC</span>' if doc.synthetic and s.id not in ("cards", "cost") else ""
        blocks = "\n".join(_block_html(b) for b in s.blocks)
        if s.id == "cards":
            parts.append(f'<div id="{_attr(s.id)}">{blocks}</div>')
            continue
        parts.append(f'<section class="sec" id="{_attr(s.id)}"><h2>{_inline(s.title)}{tag}{q}</h2>\n'
                     f"{blocks}\n</section>")
    title = _html_text(doc.title + (" [SYNTHETIC]" if doc.synthetic else ""))
    page = (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<title>{title}</title>\n<style>{_CSS}</style>\n{doc.head}\n</head>\n<body>\n"
        f'<header class="top"><div class="wrap"><h1>{_inline(doc.title)}</h1>'
        f'<div class="sub">{_inline(doc.subtitle)}</div><div class="meta">{meta}</div></div></header>\n'
        f"{banner}<nav class=\"toc\"><div class=\"wrap\">{nav}</div></nav>\n"
        f'<main class="wrap">\n' + "\n".join(parts) + "\n</main>\n"
        '<footer class="wrap">Written by aumann. One self-contained file: no network access needed; '
        "click a column header to sort a table.</footer>\n"
        f"<script>{_JS}</script>\n</body></html>\n"
    )
    bad = external_references(page)
    if bad:
        raise ReportError(f"the report page would load {len(bad)} external resource(s), e.g. {bad[:3]}")
    return page


# --------------------------------------------------------------------------- self-containment check

_URL_ATTRS = {"src", "href", "srcset", "poster", "data", "action", "formaction", "background", "xlink:href",
              "manifest", "codebase", "cite", "longdesc", "icon", "ping"}
_CSS_URL = re.compile(r"url\(\s*(['\"]?)([^'\")]*)\1\s*\)", re.IGNORECASE)
_CSS_IMPORT = re.compile(r"@import\s+(?:url\()?\s*['\"]?([^'\");\s]+)", re.IGNORECASE)


def _local(url: str) -> bool:
    u = url.strip().lower()
    return u == "" or u.startswith(("data:", "#", "about:blank", "javascript:void"))


class _RefParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.refs: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._in_style = tag == "style"
        for name, value in attrs:
            if value is None:
                continue
            if name in _URL_ATTRS:
                urls = [p.strip().split(" ")[0] for p in value.split(",")] if name == "srcset" else [value]
                self.refs += [u for u in urls if not _local(u)]
            if name == "style":
                self._css(value)

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self._css(data)

    def _css(self, text: str) -> None:
        self.refs += [m.group(2) for m in _CSS_URL.finditer(text) if not _local(m.group(2))]
        self.refs += [m.group(1) for m in _CSS_IMPORT.finditer(text) if not _local(m.group(1))]


def external_references(page: str) -> list[str]:
    """Every ``src``/``href``/``srcset``/… attribute and CSS ``url()``/``@import`` that is not a ``data:``
    URI or an anchor on the page (an empty list for a self-contained page)."""
    p = _RefParser()
    p.feed(page)
    p.close()
    return p.refs


# --------------------------------------------------------------------------- Markdown


#: characters that can make Markdown (or the raw HTML it allows) do something: links and images ``[..](..)``,
#: raw HTML and autolinks ``<..>``, code spans, entity references (``&lt;`` would show as ``<``) and the escape
#: character itself (``|`` too, in table cells)
_MD_ACTIVE = re.compile(r"([\\`\[\]<>&])")
_MD_SPANS = re.compile(r"(`[^`]+`|\*\*[^*]+\*\*)")


#: characters a terminal obeys (C0 controls but tab, newline and carriage return, DEL, C1 controls, bidirectional
#: overrides and isolates): shown as their escapes (``\x1b``, ``\u202e``) so ``cat report.md`` cannot clear the
#: screen or reorder a line
_MD_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible_text(text: Any) -> str:
    """``text`` with the characters a terminal obeys or that reorder a line (control characters, bidirectional
    overrides and isolates) shown as their escapes (``\\x1b``, ``\\u202e``): how report.md, report.html and the
    figures show an id or a name that holds one."""
    return _visible(str(text))


def _visible(text: str) -> str:
    text = text.replace(_LIT_OPEN, "").replace(_LIT_CLOSE, "")  # marks of literal() where no renderer read them
    return _MD_CONTROL.sub(lambda m: (f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100
                                      else f"\\u{ord(m.group(0)):04x}"), text)


def md_escape(text: Any) -> str:
    """``text`` as literal Markdown: every character that could start a link, an image, raw HTML
    (``<img onerror=…>``), an autolink (``<javascript:…>``), a code span or a table cell is
    backslash-escaped (CommonMark shows it as the character itself), newlines become spaces, and terminal
    control characters are shown as their escapes (``\\x1b``).

    ``[x](javascript:alert(1))`` becomes ``\\[x\\](javascript:alert(1))``: text, not a link.
    """
    return _MD_ACTIVE.sub(r"\\\1", _visible(str(text))).replace("\r", " ").replace("\n", " ")


def _md_table_text(text: str) -> str:
    return text.replace("|", "\\|")


def _md_inline(text: Any) -> str:
    """Text of a block as Markdown: escaped as :func:`md_escape`, except the report's own inline
    ```code``` and ``**bold**`` spans, which are kept (their content is literal inside a code span, and
    escaped inside bold) — the same two spans the HTML rendering turns into ``<code>`` and ``<strong>``;
    :class:`Verbatim` text keeps none (:func:`md_literal`)."""
    if isinstance(text, Verbatim):
        return md_literal(text)
    if _LIT_OPEN in str(text):
        return "".join(md_literal(part) if kind == "literal" else md_code(part) if kind == "code" else
                       _md_inline(part) for kind, part in _spans(str(text)))
    out = []
    for part in _MD_SPANS.split(str(text)):
        if part.startswith("`") and part.endswith("`") and len(part) > 1:
            out.append(_visible(part).replace("\r", " ").replace("\n", " "))
        elif part.startswith("**") and part.endswith("**") and len(part) > 3:
            out.append("**" + md_escape(part[2:-2]) + "**")
        else:
            out.append(md_escape(part))
    return "".join(out)


def md_code(text: str) -> str:
    """``text`` as one Markdown code span holding exactly it: fenced with one backtick more than its longest run of
    backticks, and padded with a space where it starts or ends with one (CommonMark)."""
    shown = _visible(text).replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(r) for r in re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") or (shown.startswith(" ") and shown.endswith(" ")
                                                                   and shown.strip()) else ""
    return f"{fence}{pad}{shown}{pad}{fence}"


#: emphasis and strikethrough markers: left alone in the report's prose (``Φ_i``, ``3 * x``), escaped in ids
_MD_EMPHASIS = re.compile(r"([*_~])")


def md_literal(text: Any) -> str:
    """``text`` as Markdown that renders as exactly this text: :func:`md_escape` and also the emphasis markers
    ``*``, ``_`` and ``~``, which an id such as ``**bold**`` or ``_u_`` would otherwise lose (rendered as bold
    ``bold``, italic ``u``). For ids and labels, which the page shows verbatim."""
    return _MD_EMPHASIS.sub(r"\\\1", md_escape(text))


def _md_cell(v: Any) -> str:
    if isinstance(v, Cell):  # ids verbatim (no code or bold), as in HTML
        return _md_table_text(md_literal(v.text) if "id" in v.cls.split() else _md_inline(v.text))
    return _md_table_text(_md_inline(fmt(v)))


def _table_md(t: Table) -> str:
    rows = list(t.rows)
    more = ""
    if t.md_max_rows is not None and len(rows) > t.md_max_rows:
        more = f"\n({len(rows) - t.md_max_rows} more rows in report.html)\n"
        rows = rows[: t.md_max_rows]
    lines = ([f"{_md_inline(t.caption)}\n"] if t.caption else []) + [
        "| " + " | ".join(_md_table_text(_md_inline(c)) for c in t.columns) + " |", "|" + "---|" * len(t.columns)]
    lines += ["| " + " | ".join(_md_cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines) + "\n" + more


def _md_ref(name: str) -> str:
    """A file name beside report.md as a link target: only plain relative names (no scheme, no ``..``)."""
    from urllib.parse import quote

    if not re.fullmatch(r"[A-Za-z0-9._/-]+", name) or name.startswith(("/", ".")) or ".." in name or ":" in name:
        return ""
    return quote(name)


def _block_md(b: Any, level: int = 3) -> str:
    if isinstance(b, Text):
        return _md_inline(b.text) + "\n"
    if isinstance(b, Note):
        return f"> {_md_inline(b.text)}\n"
    if isinstance(b, Cards):
        return "\n".join(f"* **{_md_inline(c.label)}**: {_md_inline(c.value)}"
                         + (f" — {_md_inline(c.detail)}" if c.detail else "") for c in b.cards) + "\n"
    if isinstance(b, Table):
        return _table_md(b)
    if isinstance(b, Figure):
        tag = " (SYNTHETIC)" if b.synthetic else ""
        ref = _md_ref(b.md_ref) if b.md_ref else ""
        if ref:
            return f"![{md_escape(b.title)}{tag}]({ref})\n"
        return f"_Figure: {_md_inline(b.title)}{tag} — in report.html._\n"
    if isinstance(b, KeyValues):
        head = f"{'#' * level} {_md_inline(b.caption)}\n\n" if b.caption else ""
        return head + "\n".join(f"* {_md_inline(k)}: {_md_inline(fmt(v))}" for k, v in b.items) + "\n"
    if isinstance(b, Details):
        return f"{'#' * level} {_md_inline(b.summary)}\n\n" + "\n".join(_block_md(x, level + 1) for x in b.blocks)
    if isinstance(b, list):
        return "\n".join(_block_md(x, level) for x in b)
    if isinstance(b, str):
        return f"{'#' * level} {_md_inline(b)}\n"
    raise TypeError(f"unknown report block {type(b).__name__}")


def render_markdown(doc: Document) -> str:
    """The document as Markdown (the plain-text twin of :func:`render_html`)."""
    out = [f"# {_md_inline(doc.title)}\n"]
    if doc.synthetic:
        out.append(f"> **{_md_inline(doc.synthetic_note)}**\n")
    if doc.subtitle:
        out.append(_md_inline(doc.subtitle) + "\n")
    if doc.meta:
        out.append("  \n".join(f"{_md_inline(k)}: {_md_inline(fmt(v))}" for k, v in doc.meta) + "\n")
    for s in doc.sections:
        if s.id != "cards":
            tag = " [SYNTHETIC]" if doc.synthetic and s.id != "cost" else ""  # ours: no link (user "[" is escaped)
            out.append(f"## {_md_inline(s.title)}{tag}\n")
            if s.lead:
                out.append(f"_{_md_inline(s.lead)}_\n")
        out += [_block_md(b) for b in s.blocks]
    return "\n".join(out).rstrip() + "\n"


__all__ = ["Card", "Cards", "Cell", "Details", "Document", "Figure", "KeyValues", "Note", "Section", "Table", "Text",
           "Verbatim", "check_blocks",
           "external_references", "fmt", "literal", "md_code", "md_escape", "md_literal", "render_html",
           "render_markdown", "seconds_text", "visible_text"]
