"""Same config, same seed, same bytes: ``aumann run`` twice into two folders writes identical data files.

Only the files and places that record when and how long a run took may differ (docs/scenarios.md, "What is
deterministic"): ``manifest.json`` (its ``created``, ``command`` with the ``--out`` folder, ``seconds`` and
``stage_seconds``), ``timings/`` (the wall-clock seconds per run and method) and the two report pages, whose
header (command, created), "Cost" card and "Cost" section show them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli_run import invoke_run

TINY = """
agents = 8
steps = 4
runs = 1
seed = 5
[study]
permutations = 6
random_orderings = 2
path_orders = 2
quadrature_steps = 8
"""

#: what may differ between two runs with the same config and seed (wall-clock time, when, where)
ALLOWED = ("manifest.json", "report.md", "report.html")
ALLOWED_DIRS = ("timings",)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _wall_clock_lines(text: str) -> list[str]:
    """report.md without the places that show wall time, when or where: the header's command and created lines,
    the "Cost" card and the "Cost" section (the last one)."""
    out, in_cost = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            in_cost = line.strip() == "## Cost"
        if in_cost or line.startswith(("command: ", "created: ", "* **Cost**: ")):
            continue
        out.append(line)
    return out


def _wall_clock_html(text: str) -> str:
    """report.html without the header (command, created), the "Cost" card and the "Cost" section, and with Bokeh's
    model ids (p1006, ...), which count the models made before in this process (the same in every fresh one),
    made one."""
    text = re.sub(r'<header class="top">.*?</header>', "", text, flags=re.S)
    text = re.sub(r'<section class="sec" id="cost">.*?</section>', "", text, flags=re.S)
    text = re.sub(r'<div class="card"><div class="label">Cost</div>.*?</div></div>', "", text, flags=re.S)
    return re.sub(r'"p\d+"', '"p"', text)


@pytest.mark.slow  # two whole runs with figures: ~10-15 s
def test_two_runs_with_the_same_config_and_seed_write_the_same_bytes(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY)
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):  # midscale-social has a step map: action_attribution.csv is written
        assert invoke_run("midscale-social", "--config", str(cfg), "--out", str(out), "--no-ablations") == 0
    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb)
    assert "action_attribution.csv" in fa and "timings/run-000.json" in fa and "macro_curve.png" in fa
    differ = sorted(n for n in fa if fa[n] != fb[n])
    unexpected = [n for n in differ if n not in ALLOWED and n.split("/")[0] not in ALLOWED_DIRS]
    assert unexpected == [], f"same config and seed, different bytes: {unexpected}"
    assert "timings/run-000.json" in differ  # the wall-clock seconds are there, and nowhere else in the data
    md_a, md_b = (_wall_clock_lines(f["report.md"].decode()) for f in (fa, fb))
    assert md_a == md_b and any("action_aumann_shapley" in line for line in md_a)
    assert any(line.startswith("* action attribution: seconds (per run): ") for line in  # still shown, from timings/
               fa["report.md"].decode().split("## Cost")[1].splitlines())
    html_a, html_b = (_wall_clock_html(f["report.html"].decode()) for f in (fa, fb))
    assert html_a == html_b and 'id="how-sure"' in html_a
