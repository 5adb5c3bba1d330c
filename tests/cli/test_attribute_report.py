"""report.html of `aumann attribute` and `aumann demo --out` directories."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from aumann.attribution import Panel
from aumann.cli import main
from tests.studies import htmlcheck


def test_attribute_run_page_shows_who_when_how_sure_cost(tmp_path, rng, capsys):
    T, N = 5, 60
    values = np.abs(rng.normal(size=(T, N, 2)))
    values[3, 7] *= 6.0  # one agent dominates step 3
    ids = np.arange(1000, 1000 + N)
    panel = Panel(values, features=["x", "y"], agent_ids=ids, groups={"tier": ["top"] * 6 + ["tail"] * 54})
    src = panel.save(tmp_path / "panel.npz")
    out = tmp_path / "out"
    assert main(["attribute", str(src), "--indicator", "var", "--out", str(out), "--static"]) == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert htmlcheck.section_ids(page) == ["who", "when", "how-sure", "cost"]
    assert all(u.startswith(("data:", "#")) for u in htmlcheck.resource_urls(page))
    # the who-table, recomputed from the saved arrays
    with np.load(out / "attribution.npz", allow_pickle=False) as z:
        phi, dv = z["phi"], z["delta_v"]
    Phi = phi.sum(axis=0)
    order = sorted(range(N), key=lambda i: (-Phi[i], i))[:20]
    tab = htmlcheck.tables(page)["who-run-000"]
    assert [row[1]["text"] for row in tab["rows"]] == [str(ids[i]) for i in order]
    # features at t* (the step with the largest Δv) come from top_agents.csv, written beside the attribution
    ts = int(np.argmax(dv))
    x_col = tab["head"].index("x")
    np.testing.assert_allclose([float(r[x_col]["attrs"]["data-sort"]) for r in tab["rows"]],
                               values[ts, order, 0], rtol=1e-12)
    with open(out / "top_agents.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["agent"]) for r in rows[:20]] == [int(ids[i]) for i in order]
    assert {"rank", "agent", "Phi", "share", "t_star", "phi_t_star", "z_x", "z_y", "group_tier"} <= set(rows[0])
    # tier shares R_G, provenance, no faithfulness check said in a line, offline cost in words
    groups = htmlcheck.tables(page)["groups-run-000-tier"]
    shares = {r[0]["text"]: float(r[3]["attrs"]["data-sort"]) for r in groups["rows"]}
    tier = np.array(["top"] * 6 + ["tail"] * 54)
    assert shares["top"] == pytest.approx(Phi[tier == "top"].sum() / dv.sum(), rel=1e-12)
    text = htmlcheck.text(page)
    assert "No deletion-faithfulness check" in text and "Offline: 0 LLM calls" in text
    assert "SYNTHETIC" not in text  # a user panel is not synthetic
    stages = [r[0]["text"] for r in htmlcheck.tables(page)["stage-times"]["rows"]]
    assert stages[:3] == ["load panel", "attribute", "write results"]


def test_a_one_agent_panel_page_reads_one_agent(tmp_path, rng, capsys):
    """A panel of a single agent: the who-section said "The 1 agents with the largest signed Φ_i"."""
    src = Panel(np.abs(rng.normal(size=(3, 1, 2))), agent_ids=["solo"]).save(tmp_path / "one.npz")
    out = tmp_path / "out"
    assert main(["attribute", str(src), "--indicator", "heat", "--out", str(out), "--static"]) == 0
    text = htmlcheck.text((out / "report.html").read_text(encoding="utf-8"))
    assert "The 1 agent with the largest signed Φ_i" in text and "1 agents" not in text
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "The 1 agent with the largest signed" in md and "1 agents" not in md


def test_demo_page_is_marked_synthetic(tmp_path, capsys):
    assert main(["demo", "--agents", "1500", "--steps", "3", "--out", str(tmp_path), "--static"]) == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    text = htmlcheck.text(page)
    assert "SYNTHETIC panel" in text and text.count("SYNTHETIC") >= 4  # banner + each data section
    assert "[SYNTHETIC]" in page.split("</title>")[0]
    assert "demo-tiers" in htmlcheck.tables(page) and "groups-run-000-tier" in htmlcheck.tables(page)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert md.splitlines()[2].startswith("> **SYNTHETIC")
    assert main(["report", str(tmp_path), "--static"]) == 0  # a demo directory regenerates too


@pytest.mark.parametrize("command", ["attribute", "demo"])
def test_a_rerun_interrupted_while_writing_leaves_no_finished_looking_mix(tmp_path, rng, monkeypatch, capsys, command):
    """`aumann attribute` (or `demo --out`) into its own earlier folder, interrupted after attribution.npz: the earlier
    manifest, summary and report stayed, and `aumann report` drew the new attribution with the earlier run's features
    at t* and command as one finished run (exit 0)."""
    import aumann.studies.pages as pages

    out = tmp_path / "out"
    first = Panel(np.abs(rng.normal(size=(4, 50, 2))), features=["x", "y"]).save(tmp_path / "first.npz")
    second = Panel(9 * np.abs(rng.normal(size=(6, 50, 2))), features=["u", "v"]).save(tmp_path / "second.npz")
    argv = {"attribute": ["attribute", str(second), "--indicator", "var", "--out", str(out), "--static"],
            "demo": ["demo", "--agents", "50", "--steps", "3", "--out", str(out), "--static"]}[command]
    assert main(["attribute", str(first), "--indicator", "heat", "--out", str(out), "--static"]) == 0

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pages, "write_top_agents", interrupted)  # after attribution.npz, before the manifest
    assert main(argv) == 130
    assert not any((out / name).exists() for name in ("manifest.json", "report.html", "report.md"))
    capsys.readouterr()
    assert main(["report", str(out)]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_the_provenance_seed_says_what_is_true_in_html_and_markdown(tmp_path, rng, capsys):
    """The demo's provenance read "seed: –" (the closed form draws nothing) beside "source: … seed 0": the row says
    there was no sampling and names the seed that generated the panel; an `aumann attribute` of a panel of yours
    (no generator seed) says only that it drew nothing."""
    out = tmp_path / "demo"
    assert main(["demo", "--agents", "40", "--steps", "3", "--seed", "7", "--out", str(out), "--static"]) == 0
    want = "— (closed form: no sampling; the panel was generated with seed 7)"
    assert f"<dt>seed</dt><dd>{want}</dd>" in (out / "report.html").read_text(encoding="utf-8")
    assert f"* seed: {want}" in (out / "report.md").read_text(encoding="utf-8")
    for row in ("K (quadrature points)", "power τ = u^p"):  # the path integral's settings: not missing values
        assert f"* {row}: — (closed form: no quadrature)\n" in (out / "report.md").read_text(encoding="utf-8")
    src = Panel(np.abs(rng.normal(size=(3, 30, 2)))).save(tmp_path / "p.npz")
    mine = tmp_path / "mine"
    assert main(["attribute", str(src), "--indicator", "heat", "--method", "path", "--out", str(mine),
                 "--static"]) == 0
    assert "* seed: — (deterministic quadrature: no sampling)\n" in (mine / "report.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("static", [True, False])
def test_the_heatmap_of_a_panel_with_deaths_marks_the_cells_of_agents_not_alive(tmp_path, rng, capsys, static):
    """An `aumann attribute` panel with births and deaths: the heatmap drew a dead agent's steps as φ = 0, the
    colour of a living agent that changed nothing. summary.json now records, for the agents a page can show, the
    steps at which each is not alive (from the panel's alive mask), and the page draws those cells as "not alive";
    no number of the result files changes."""
    import json

    T, N = 8, 30
    values = np.abs(rng.normal(size=(T, N, 2)))
    values[:, :2] *= 5.0  # agents a0 and a1 lead the who-table
    alive = np.ones((T, N), dtype=bool)
    alive[5:, 0] = False  # a0 dies before step 5
    alive[:3, 1] = False  # a1 is born at step 3
    ids = [f"a{i}" for i in range(N)]
    src = Panel(values, features=["x", "y"], agent_ids=ids, alive=alive).save(tmp_path / "panel.npz")
    out = tmp_path / "out"
    static_flag = ["--static"] if static else []
    assert main(["attribute", str(src), "--indicator", "lin", "--out", str(out), *static_flag]) == 0
    summary = json.loads((out / "summary.json").read_text())
    with np.load(out / "attribution.npz", allow_pickle=False) as z:
        phi = z["phi"]
    top = sorted(range(N), key=lambda i: (-phi.sum(axis=0)[i], i))
    assert summary["not_alive"] == [{"position": p, "steps": np.flatnonzero(~alive[:, p]).tolist()}
                                    for p in top if not alive[:, p].all()]
    assert {r["position"] for r in summary["not_alive"]} == {0, 1}
    assert (phi[~alive] == 0).all()  # the numbers: φ = 0 where not alive, as before
    with open(out / "top_agents.csv", newline="") as fh:  # the CSV keeps its columns in place; alive_t_star is appended
        assert fh.readline().strip().split(",") == ["rank", "position", "agent", "Phi", "share", "t_star", "phi_t_star",
                                                     "z_x", "z_y", "alive_t_star"]
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "Hatched grey: the agent is not alive at that step (φ = 0)." in htmlcheck.text(page)
    if not static:
        assert "not alive at step 5" in page and "not alive at step 0" in page
    mine = tmp_path / "alive"  # a panel without an alive mask: nothing recorded, nothing hatched
    assert main(["attribute", str(Panel(values).save(tmp_path / "p.npz")), "--indicator", "lin", "--out", str(mine),
                 "--static"]) == 0
    assert "not_alive" not in json.loads((mine / "summary.json").read_text())
    assert "Hatched grey" not in (mine / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("bad", [[{"position": "x", "steps": [1]}], [{"position": 0, "steps": [[1, "a"]]}], [7]])
def test_a_damaged_not_alive_entry_of_an_unchecked_folder_is_a_report_error(tmp_path, rng, capsys, bad):
    """summary.json's not_alive, edited in a folder without checksums (an older aumann's): a one-line ReportError
    naming the file, the entry and what it should hold (the generic "result files are incomplete or from another
    version (ValueError: invalid literal for int() …)" named neither)."""
    import json

    alive = np.ones((4, 10), dtype=bool)
    alive[2:, 0] = False
    src = Panel(np.abs(rng.normal(size=(4, 10, 1))) + 1.0, alive=alive).save(tmp_path / "panel.npz")
    out = tmp_path / "out"
    assert main(["attribute", str(src), "--indicator", "lin", "--out", str(out), "--static"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.pop("outputs_sha256")
    (out / "manifest.json").write_text(json.dumps(manifest))
    summary = json.loads((out / "summary.json").read_text())
    summary["not_alive"] = bad
    (out / "summary.json").write_text(json.dumps(summary))
    capsys.readouterr()
    assert main(["report", str(out), "--static"]) == 2
    err = capsys.readouterr().err
    assert "summary.json: not_alive holds" in err and "Traceback" not in err, err


def test_the_page_says_how_many_agents_no_capture_saw_only_when_some(tmp_path, rng, capsys):
    """`aumann attribute` put the panel's meta['transient_agents'] in its manifest, but its page did not say it, while
    `aumann run`'s page does: the provenance now has the same line, and none when the panel counted none."""
    meta = {"transient_agents": {"total": 5, "types": {"Fry": 5}, "steps": [{"step": 1, "model_step": 2, "count": 4},
                                                                          {"step": 2, "model_step": 3, "count": 1}]}}
    want = ("agents present at no capture: 5 (5 Fry; 5 born and removed within one step) in 2 step(s). They have no "
            "row in the panel")
    for name, m in (("some", meta), ("none", {}), ("zero", {"transient_agents": {"total": 0, "steps": []}})):
        src = Panel(np.abs(rng.normal(size=(3, 20, 2))), meta=m).save(tmp_path / f"{name}.npz")
        out = tmp_path / name
        assert main(["attribute", str(src), "--indicator", "heat", "--out", str(out), "--static"]) == 0
        md = (out / "report.md").read_text(encoding="utf-8")
        html = (out / "report.html").read_text(encoding="utf-8")
        if name == "some":
            assert f"* {want}" in md and "<dt>agents present at no capture</dt><dd>5 (5 Fry;" in html
        else:
            assert "agents present at no capture" not in md and "agents present at no capture" not in html


def test_a_panel_meta_holding_an_integer_past_int64_leaves_a_readable_manifest(tmp_path, rng, capsys):
    """A FeatureRecorder panel whose feature held 2**70 + 1 has meta['rounded_values'] with that integer as its
    largest; `aumann attribute` copied it into manifest.json (panel_meta), which every reader refuses (records hold
    int64 integers only): the command's own page failed ("ReportError: manifest ... is an integer outside int64") and
    so did `aumann report` of the directory. The manifest now holds such an integer as its digits."""
    big = 2**70 + 1
    meta = {"rounded_values": {"features": {"f0": {"count": 2, "largest": big}}}}
    src = Panel(np.abs(rng.normal(size=(3, 20, 2))), meta=meta).save(tmp_path / "big.npz")
    out = tmp_path / "out"
    assert main(["attribute", str(src), "--indicator", "heat", "--out", str(out), "--static"]) == 0
    assert "Error" not in capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["panel_meta"]["rounded_values"]["features"]["f0"]["largest"] == str(big)
    assert main(["report", str(out), "--static"]) == 0


def test_the_page_says_how_many_recorded_integers_were_rounded_only_when_some(tmp_path, rng, capsys):
    """`aumann attribute` kept the panel's meta['rounded_values'] (integers past 2**53 a recorder's float64, or
    float32, changed) in its manifest, but its page did not say it: the provenance now has a line, none when the
    panel counted none."""
    meta = {"rounded_values": {"features": {"tx_id_ns": {"count": 3, "largest": 2**53 + 1},
                                            "f1": {"count": 2, "largest": 2**24 + 1, "dtype": "float32"}},
                               "context": {"clock": {"count": 4, "largest": 2**64 - 1}}}}
    want = ("integers rounded: feature 'tx\\_id\\_ns': 3 value(s), the largest 9,007,199,254,740,993 (stored as "
            "9,007,199,254,740,992); feature 'f1' (float32): 2 value(s), the largest 16,777,217 (stored as "
            "16,777,216); context 'clock': 4 value(s), the largest 18,446,744,073,709,551,615 (stored as "
            "18,446,744,073,709,551,616): recorded integers past ±2⁵³")
    for name, m in (("some", meta), ("none", {}),
                    ("zero", {"rounded_values": {"features": {"f0": {"count": 0, "largest": 0}}}})):
        src = Panel(np.abs(rng.normal(size=(3, 20, 2))), meta=m).save(tmp_path / f"{name}.npz")
        out = tmp_path / name
        assert main(["attribute", str(src), "--indicator", "heat", "--out", str(out), "--static"]) == 0
        md = (out / "report.md").read_text(encoding="utf-8")
        html = (out / "report.html").read_text(encoding="utf-8")
        if name == "some":
            assert f"* {want}" in md
            assert "<dt>integers rounded</dt><dd>feature 'tx_id_ns': 3 value(s)" in html  # (not read as Markdown)
        else:
            assert "integers rounded" not in md and "integers rounded" not in html


def test_the_page_of_a_trace_says_how_many_integer_values_were_rounded(tmp_path, capsys):
    """A trace's integer field values float64 changed were counted in trace_report.json (rounded_values,
    rounded_largest) and printed on the console, but the page's "What the trace held" did not say it. A value past
    int64 (uint64's largest) is in the manifest as its digits."""
    (tmp_path / "ev.csv").write_text(f"agent,tick,amount\na,0,{2**64 - 1}\nb,0,3\na,1,5\nb,1,{2**53 + 1}\n")
    (tmp_path / "spec.toml").write_text('format = "table"\n[agent]\nfield = "agent"\n[step]\nfield = "tick"\n'
                                        '[[features]]\nkind = "last"\nname = "amt"\nfield = "amount"\n')
    out = tmp_path / "out"
    assert main(["attribute", "--trace", str(tmp_path / "ev.csv"), "--spec", str(tmp_path / "spec.toml"),
                 "--indicator", "lin", "--no-deletion", "--out", str(out), "--static"]) == 0
    want = ("integers rounded: field 'amount': 2 value(s), the largest 18,446,744,073,709,551,615 (stored as "
            "18,446,744,073,709,551,616): integer values past ±2⁵³")
    assert f"* {want}" in (out / "report.md").read_text(encoding="utf-8")
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<dt>integers rounded</dt><dd>field 'amount': 2 value(s)" in html


def test_trace_report_json_holds_a_largest_past_int64_as_its_digits_as_the_manifest_does(tmp_path):
    """trace_report.json held uint64's largest as a raw JSON integer (``"rounded_largest": {"amount":
    18446744073709551615}``), where manifest.json's ``trace`` (the same report) holds its digits: the records aumann
    reads back hold int64 integers only (:mod:`aumann.records`), so the file failed their rule, and the two files
    gave one value two types. Now it holds the digits too; a largest inside int64 stays a number."""
    from aumann.errors import ReportError
    from aumann.records import OutsideRecord, check

    (tmp_path / "ev.csv").write_text(f"agent,tick,amount,n\na,0,{2**64 - 1},{2**53 + 1}\nb,0,3,1\na,1,5,2\n")
    (tmp_path / "spec.toml").write_text('format = "table"\n[agent]\nfield = "agent"\n[step]\nfield = "tick"\n'
                                        '[[features]]\nkind = "last"\nname = "amt"\nfield = "amount"\n'
                                        '[[features]]\nkind = "last"\nname = "n"\nfield = "n"\n')
    out = tmp_path / "out"
    assert main(["attribute", "--trace", str(tmp_path / "ev.csv"), "--spec", str(tmp_path / "spec.toml"),
                 "--indicator", "lin", "--no-deletion", "--out", str(out), "--no-report"]) == 0
    rep = json.loads((out / "trace_report.json").read_text())
    assert rep["rounded_largest"] == {"amount": str(2**64 - 1), "n": 2**53 + 1}
    assert json.loads((out / "manifest.json").read_text())["trace"]["rounded_largest"] == rep["rounded_largest"]
    check(OutsideRecord, rep, error=ReportError, what="trace_report.json")  # (raised: outside int64, 64 bits)
