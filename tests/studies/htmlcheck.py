"""An independent reader of report pages for the tests (it shares no code with aumann.studies.page).

* :func:`resource_urls` — every URL a page could load: ``src``/``href``/``srcset``/``poster``/``data``/
  ``action``/``xlink:href`` attributes of any element, CSS ``url(...)`` and ``@import`` in ``<style>``
  elements and ``style`` attributes;
* :func:`tables` — every ``<table>`` by id: header texts and, per row, the cells' texts and attributes;
* :func:`section_ids` — the ids of the ``<section>`` elements, in order; :func:`text` — the visible text.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

_URL_ATTRS = {"src", "href", "srcset", "poster", "data", "action", "formaction", "xlink:href", "background",
              "manifest", "icon"}


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []
        self.css: list[str] = []
        self.sections: list[str] = []
        self.tables: dict[str, dict[str, Any]] = {}
        self.text_parts: list[str] = []
        self._stack: list[str] = []
        self._table: dict[str, Any] | None = None
        self._cell: dict[str, Any] | None = None
        self._row: list[dict[str, Any]] | None = None
        self._in_head_cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: (v or "") for k, v in attrs}
        for k, v in a.items():
            if k in _URL_ATTRS:
                self.urls += [p.strip().split(" ")[0] for p in v.split(",")] if k == "srcset" else [v]
            if k == "style":
                self.css.append(v)
        if tag in ("script", "style"):
            self._stack.append(tag)
        if tag == "section":
            self.sections.append(a.get("id", ""))
        if tag == "table":
            self._table = {"id": a.get("id", ""), "head": [], "rows": []}
        if self._table is not None:
            if tag == "tr":
                self._row = []
            if tag in ("td", "th"):
                self._cell = {"tag": tag, "attrs": a, "text": "", "children": 0}
            elif self._cell is not None:
                self._cell["children"] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._stack:
            self._stack.pop()
        if self._table is None:
            return
        if tag in ("td", "th") and self._cell is not None:
            self._cell["text"] = self._cell["text"].strip()
            if self._cell["tag"] == "th":
                self._table["head"].append(self._cell["text"])
            elif self._row is not None:
                self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:
                self._table["rows"].append(self._row)
            self._row = None
        elif tag == "table":
            self.tables[self._table["id"] or f"#{len(self.tables)}"] = self._table
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._stack and self._stack[-1] == "style":
            self.css.append(data)
            return
        if self._stack and self._stack[-1] == "script":
            return
        self.text_parts.append(data)
        if self._cell is not None:
            self._cell["text"] += data


def read(page: str) -> _Reader:
    r = _Reader()
    r.feed(page)
    r.close()
    return r


_CSS_URL = re.compile(r"url\(\s*['\"]?([^'\")]*)", re.IGNORECASE)
_IMPORT = re.compile(r"@import\s+(?:url\()?\s*['\"]?([^'\");\s]+)", re.IGNORECASE)


def resource_urls(page: str) -> list[str]:
    r = read(page)
    urls = list(r.urls)
    for css in r.css:
        urls += _CSS_URL.findall(css) + _IMPORT.findall(css)
    return urls


def tables(page: str) -> dict[str, dict[str, Any]]:
    return read(page).tables


def section_ids(page: str) -> list[str]:
    return read(page).sections


def text(page: str) -> str:
    return " ".join("".join(read(page).text_parts).split())
