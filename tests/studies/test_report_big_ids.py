"""Integer agent ids past 2**53 sort exactly in the report's tables: their sort key was the id as a double
(``data-sort="9007199254740992.0"`` for 9007199254740993), so ids that differ only past 2**53 sorted as equals, in
whatever order the table had them. Smaller ids keep their key byte for byte."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from aumann.studies.page import Document, Section, Table, render_html
from aumann.studies.sections import id_cell
from tests.studies import htmlcheck

B = 2**53
IDS = [B + 3, B + 1, -(B + 1), B, 2**64 - 1, 3, B + 2, -B]


def _page() -> str:
    rows = [[id_cell(np.uint64(i) if i == 2**64 - 1 else i), k] for k, i in enumerate(IDS)]
    return render_html(Document(title="T", sections=[Section("who", "Who", [Table(["agent", "k"], rows, id="ids")])]))


def test_sort_keys_of_big_integer_ids_are_their_digits_and_small_ones_unchanged():
    keys = [row[0]["attrs"]["data-sort"] for row in htmlcheck.tables(_page())["ids"]["rows"]]
    assert keys[:3] == ["9007199254740995", "9007199254740993", "-9007199254740993"]
    assert keys[4] == "18446744073709551615"
    assert keys[3] == "9007199254740992.0" and keys[5] == "3.0" and keys[7] == "-9007199254740992.0"  # as before
    assert len(set(keys)) == len(keys)


# a DOM just large enough for the page's table script: click the header, read the rows' order back
_DOM = r"""
const fs = require('fs');
const spec = JSON.parse(fs.readFileSync(0, 'utf8'));
function cell(k) { return {getAttribute: (n) => n === 'data-sort' ? k : null, textContent: k}; }
const rows = spec.keys.map((k, i) => ({cells: [cell(k)], i: i}));
const body = {rows: rows, appendChild: (r) => { rows.splice(rows.indexOf(r), 1); rows.push(r); }};
const attrs = {};
const th = {handlers: [], addEventListener: (e, f) => th.handlers.push(f),
            getAttribute: (n) => attrs[n] === undefined ? null : attrs[n],
            setAttribute: (n, v) => { attrs[n] = v; }, removeAttribute: (n) => { delete attrs[n]; }};
const table = {querySelectorAll: () => [th], tBodies: [body]};
globalThis.document = {querySelectorAll: () => [table], documentElement: {setAttribute: () => {}}};
eval(spec.script);
th.handlers[0]();  // descending
th.handlers[0]();  // ascending
console.log(JSON.stringify(rows.map((r) => r.i)));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed (runs the page's script)")
def test_the_pages_script_sorts_big_integer_ids_exactly():
    page = _page()
    script = "\n".join(re.findall(r"<script>(.*?)</script>", page, flags=re.S))
    keys = [row[0]["attrs"]["data-sort"] for row in htmlcheck.tables(page)["ids"]["rows"]]
    out = subprocess.run(["node", "-e", _DOM], input=json.dumps({"script": script, "keys": keys}),
                         capture_output=True, text=True, timeout=60, check=True)
    order = [IDS[i] for i in json.loads(out.stdout)]
    assert order == sorted(IDS)
