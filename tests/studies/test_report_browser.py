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
