"""report.html in a real browser: headless Chromium (Debian's ``chromium``) opens the page from disk.

No console errors, no uncaught exceptions, no failed loads, no request that leaves the file (only
``file:`` and ``data:`` URLs), interactive figures drawn, and a full-page screenshot that is not blank.
Skipped, with the reason, where Chromium is not installed (``.ci/run`` installs it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from aumann.studies.pages import render_report
from tests.browser import CANVASES, chromium_path, open_page, pixel_stats
from tests.tiny import tiny_config

pytestmark = pytest.mark.skipif(chromium_path() is None,
                                reason="Chromium is not installed (apt-get install chromium; .ci/run installs it)")


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    from aumann.studies.faithfulness import run_study
    from aumann.studies.report import write_outputs

    root = tmp_path_factory.mktemp("browser")
    sc, cfg = tiny_config("midscale-social", agents=12, steps=6, runs=2, study={"ablations": False})
    out = root / "interactive"
    res = run_study(sc, cfg, out_dir=out)
    write_outputs(res, out, command="aumann run midscale-social", seconds=1.0, description=sc.description,
                  config=cfg.model_dump(mode="json"), plots=False)
    render_report(out)  # figures on (interactive when the report extra is installed)
    static = shutil.copytree(out, root / "static")
    render_report(static, interactive=False)
    return {"interactive": out / "report.html", "static": static / "report.html"}


@pytest.mark.parametrize("kind", ["interactive", "static"])
def test_page_opens_from_disk_without_errors_and_is_not_blank(pages, kind, tmp_path):
    res = open_page(pages[kind], evaluate={
        "canvases": CANVASES, "ready": "document.documentElement.dataset.reportReady",
        "images": "Array.from(document.images).filter(i => i.naturalWidth > 0).length"})
    assert res.errors == [], res.errors
    assert res.requests and all(u.startswith(("file:", "data:")) for u in res.requests), res.requests
    assert res.values["ready"] == "1"  # the page's own script ran to the end
    if kind == "interactive" and "Bokeh" in pages[kind].read_text(encoding="utf-8"):
        assert res.values["canvases"] >= 4  # macro curve, Φ_t, heatmap, deletion curves
    if kind == "static":
        assert res.values["images"] >= 4
    std, ink = pixel_stats(res.png)
    (tmp_path / f"{kind}.png").write_bytes(res.png)
    assert std > 10 and ink > 0.02, (std, ink)
    assert res.height > 1500


_PHONE = 390
# What a reader at phone width cannot see: how far the page scrolls sideways, and each key-value row's value
# or figure that ends past the window or is squeezed to a sliver (a value one character wide, wrapped per letter).
_CLIPPED = """(() => {
  const w = window.innerWidth, bad = [];
  document.querySelectorAll('dl.kv dd, .figgrid > *').forEach(el => {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && (r.right > w + 1 || (el.tagName === 'DD' && r.width < 60)))
      bad.push(el.tagName + ' ' + Math.round(r.left) + '-' + Math.round(r.right) + ': ' + el.textContent.slice(0, 40));
  });
  return JSON.stringify({scroll: document.documentElement.scrollWidth, bad: bad,
                         kv: document.querySelectorAll('dl.kv dd').length,
                         figs: document.querySelectorAll('.figgrid > *').length});
})()"""


@pytest.mark.parametrize("kind", ["interactive", "static"])
def test_page_fits_a_phone_screen(pages, kind):
    """At 390 px the page does not scroll sideways (wide tables scroll inside their own box), every figure of
    a figure grid fits the window, and every key-value row (provenance, LLM usage, work done) shows its value
    beside a label that wraps, not pushed off-screen by a long label."""
    import json

    res = open_page(pages[kind], width=_PHONE, evaluate={"clipped": _CLIPPED})
    assert res.errors == [], res.errors
    got = json.loads(res.values["clipped"])
    assert got["kv"] >= 10 and got["figs"] >= 2, got  # the checks below looked at something
    assert got["bad"] == [], got["bad"]
    assert got["scroll"] <= _PHONE, got


def test_key_values_with_long_labels_and_a_figure_grid_fit_a_phone_screen(tmp_path):
    """The page's layout rules themselves, on a page of the blocks that broke at 390 px: a key-value list
    whose labels are long (the "Work done" list of an ``aumann run`` page) pushed its values past the
    window's edge, and a grid of figures kept each one 460 px wide."""
    import io
    import json

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from aumann.studies.page import Document, Figure, KeyValues, Section, render_html

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    figs = [Figure(title=f"figure {i}", png=buf.getvalue()) for i in range(2)]
    kv = KeyValues([("runs computed / resumed", "1 / 0"),
                    ("evaluations of v for the reference, sampled_shapley_cv (per run)", 182),
                    ("sampled Shapley with the control variate: median standard error (plain sampling's)",
                     "0.000455 (0.000879)")] * 4, caption="Work done")
    path = tmp_path / "report.html"
    path.write_text(render_html(Document("phone", [Section("s", "S", [figs, kv])])), encoding="utf-8")
    res = open_page(path, width=_PHONE, evaluate={"clipped": _CLIPPED})
    assert res.errors == [], res.errors
    got = json.loads(res.values["clipped"])
    assert got["kv"] == 12 and got["figs"] == 2, got
    assert got["bad"] == [], got["bad"]
    assert got["scroll"] <= _PHONE, got


_BAR_ROOM = """(() => {
  let widest = 0;
  const walk = (root) => root.querySelectorAll('*').forEach((el) => {
    if (el.tagName === 'CANVAS') widest = Math.max(widest, el.getBoundingClientRect().width);
    if (el.shadowRoot) walk(el.shadowRoot); });
  document.querySelectorAll('figure.fig').forEach(walk);
  const ctx = document.createElement('canvas').getContext('2d');
  ctx.font = '10px helvetica';  // Bokeh's tick label font at the size the chart sets
  const label = Math.max(...['FULL', 'BIAS_v', 'RAND'].map((t) => ctx.measureText(t).width));
  return JSON.stringify({canvas: widest, label: label, scroll: document.documentElement.scrollWidth});
})()"""


def test_interactive_grouped_bars_keep_room_for_their_labels_on_a_phone(tmp_path):
    """The Bluesky study's R_top figure (5 topics × FULL / BIAS_v / RAND) shrank to the phone's 344 px, where
    its bar labels ran together ("FULLBIAS_vRAND"); it now keeps room for each label and scrolls sideways in
    its own box, and the page itself still does not."""
    import json

    from aumann.studies.charts import Charts
    from aumann.studies.page import Document, Section, render_html

    charts = Charts(interactive=True)
    if not charts.interactive:
        pytest.skip("bokeh is not installed (the static figure is an image that scales)")
    topics = ["mythos", "trump-tariffs", "the-masters", "earth-day-climate", "wrestlemania"]
    fig = charts.grouped_bars("R_top", topics, {g: [1.0, 2.0, 3.0, 4.0, 5.0] for g in ("FULL", "BIAS_v", "RAND")},
                              ylabel="R_top (%)")
    path = tmp_path / "report.html"
    path.write_text(render_html(Document("bars", [Section("s", "S", [fig])], head=charts.head())), encoding="utf-8")
    res = open_page(path, width=_PHONE, evaluate={"room": _BAR_ROOM})
    assert res.errors == [], res.errors
    got = json.loads(res.values["room"])
    bars = 3 * len(topics)
    assert got["canvas"] >= bars * (got["label"] + 8), got  # each bar at least its label's width and a gap
    assert got["scroll"] <= _PHONE, got


_BOXES = """JSON.stringify(Object.fromEntries(['wide', 'narrow'].map(id => {
  const box = document.getElementById(id).parentElement, r = box.getBoundingClientRect();
  return [id, {left: r.left, right: r.right, top: r.top + window.scrollY, bottom: r.bottom + window.scrollY,
               overflows: box.scrollWidth > box.clientWidth, bar: box.offsetHeight - box.clientHeight}];
})))"""


def test_a_table_wider_than_its_box_shows_a_shadow_at_the_edge_it_scrolls_to(tmp_path):
    """A who-table wider than the window (390 px, or long ids at 1400 px) scrolled inside its box with nothing to
    say that more columns lie to the right: the box now shades its right edge while there is more to see (a CSS
    scroll shadow), not its left edge (nothing there yet), and a table that fits is not shaded."""
    import io
    import json

    import numpy as np
    from PIL import Image

    from aumann.studies.page import Document, Section, Table, render_html

    wide = Table(["rank", "agent", *[f"feature_{j}" for j in range(12)]],
                 [[i, f"agent-{'x' * 30}-{i}", *[1.25 * i * j for j in range(12)]] for i in range(8)], id="wide")
    narrow = Table(["a", "b"], [[1, 2], [3, 4]], id="narrow")
    path = tmp_path / "report.html"
    path.write_text(render_html(Document("tables", [Section("s", "S", [wide, narrow])])), encoding="utf-8")
    res = open_page(path, width=_PHONE, evaluate={"boxes": _BOXES})
    assert res.errors == [], res.errors
    boxes = json.loads(res.values["boxes"])
    assert boxes["wide"]["overflows"] and not boxes["narrow"]["overflows"], boxes
    img = np.asarray(Image.open(io.BytesIO(res.png)).convert("L"), dtype=np.float64)

    def edge(box: dict, side: str) -> float:
        """The mean grey level of a 4 px strip just inside the box's ``side`` edge, over its rows (not its
        scroll bar)."""
        top, bottom = int(box["top"]) + 2, int(box["bottom"] - box["bar"]) - 2
        x = int(box["right"]) - 6 if side == "right" else int(box["left"]) + 2
        return float(img[top:bottom, x:x + 4].mean())

    w, n = boxes["wide"], boxes["narrow"]
    assert edge(w, "right") < edge(w, "left") - 8, (edge(w, "right"), edge(w, "left"))  # shaded: more to the right
    assert edge(w, "left") > 240  # nothing to the left yet: no shadow there
    assert edge(n, "right") > 248 and edge(n, "left") > 240, (edge(n, "right"), edge(n, "left"))


_CAPTIONS = """JSON.stringify(Array.from(document.querySelectorAll('table.t caption')).map(c => {
  const box = c.closest('.tablewrap').getBoundingClientRect(), r = c.getBoundingClientRect();
  return {id: c.parentElement.id, right: Math.round(r.right), box: Math.round(box.right),
          overflows: c.closest('.tablewrap').scrollWidth > c.closest('.tablewrap').clientWidth};
}))"""


def test_the_caption_of_a_table_wider_than_its_box_wraps_inside_the_box(tmp_path):
    """At 390 px a wide table's caption ("Rank agreement with the reference, sampled_shapley_cv: …") was laid out
    as wide as the table and cut off at the box's edge, its end readable only by scrolling the table; it now wraps
    inside the visible box (and stays there while the table scrolls)."""
    import json

    from aumann.studies.page import Document, Section, Table, render_html

    wide = Table(["rank", "agent", *[f"feature_{j}" for j in range(12)]],
                 [[i, f"agent-{'x' * 30}-{i}", *[1.25 * i * j for j in range(12)]] for i in range(4)], id="wide",
                 caption="Rank agreement with the reference, sampled_shapley_cv: sampled Shapley with the control "
                 "variate, 1000 permutations, masking game, median standard error 1.029e−19")
    path = tmp_path / "report.html"
    path.write_text(render_html(Document("captions", [Section("s", "S", [wide])])), encoding="utf-8")
    res = open_page(path, width=_PHONE, evaluate={"captions": _CAPTIONS})
    assert res.errors == [], res.errors
    (cap,) = json.loads(res.values["captions"])
    assert cap["overflows"], cap  # the table is wider than its box
    assert cap["right"] <= cap["box"], cap
