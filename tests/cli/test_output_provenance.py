"""What an aumann command may replace or remove in its output folder: only a file aumann recorded writing there (its
name and SHA-256 in the folder's manifest, or in the journal of a command interrupted before its manifest); a file of
your own with an output's name is kept and stops the command (an OutputError naming it) before anything changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aumann.cli import main
from tests.cli.test_run_cli import TINY


@pytest.fixture
def tiny(tmp_path):
    cfg = tmp_path / "tiny.toml"
    cfg.write_text(TINY.replace("runs = 2", "runs = 1"))
    return cfg


def _run(cfg, out, *flags):
    return main(["run", "social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static",
                 "--no-ablations", *flags])


def test_rerun_after_a_run_interrupted_before_its_manifest(tiny, tmp_path, monkeypatch, capsys):
    """A run interrupted between its tables and its manifest left tables whose SHA-256 the folder's (earlier) manifest
    does not record; the next run refused them as files of your own ('move or rename it') though aumann wrote them.
    Each output is now journaled (name, SHA-256) before it is renamed into place, and the journal counts as a record."""
    import aumann.manifest

    out = tmp_path / "out"
    assert _run(tiny, out) == 0
    before = json.loads((out / "manifest.json").read_text())
    real = aumann.manifest.write_manifest

    def interrupted(*a, **k):
        raise KeyboardInterrupt  # killed between the tables and the manifest

    monkeypatch.setattr(aumann.manifest, "write_manifest", interrupted)
    assert _run(tiny, out, "--seed", "11") == 130
    monkeypatch.setattr(aumann.manifest, "write_manifest", real)
    assert json.loads((out / "manifest.json").read_text())["created"] == before["created"]  # the earlier manifest
    recorded = before["outputs_sha256"]["judge_overlap.csv"]
    assert aumann.io.sha256_file(out / "judge_overlap.csv") != recorded  # the interrupted run's own table
    capsys.readouterr()
    assert _run(tiny, out, "--seed", "11", "--judge", "off") == 0, capsys.readouterr().err
    assert not (out / "judge_overlap.csv").exists()  # the interrupted run's table: removed, not refused
    assert not (out / ".aumann-journal.json").exists()  # settled once the manifest records every output
    assert json.loads((out / "manifest.json").read_text())["outputs_complete"] is True
    # a file of your own with that name is still refused and kept
    (out / "judge_overlap.csv").write_text("my,own\n")
    capsys.readouterr()
    assert _run(tiny, out, "--seed", "11", "--judge", "off") == 2
    assert "judge_overlap.csv" in capsys.readouterr().err
    assert (out / "judge_overlap.csv").read_text() == "my,own\n"


def test_demo_interrupted_after_removing_its_manifest_reruns(tmp_path, monkeypatch, capsys):
    """aumann demo / attribute remove the earlier manifest before writing their results (unfinish), so that an
    interrupted command leaves no finished-looking mix; interrupted there, the earlier run's files not yet rewritten
    had lost their record. Their SHA-256 is journaled before the manifest goes, so the re-run replaces them."""
    import aumann.studies.pages

    out = tmp_path / "o"
    cmd = ["demo", "--agents", "12", "--steps", "2", "--out", str(out), "--static"]
    assert main(cmd) == 0

    def interrupted(*a, **k):
        raise KeyboardInterrupt  # after attribution.npz, before top_agents.csv, summary.json and the manifest

    monkeypatch.setattr(aumann.studies.pages, "write_top_agents", interrupted)
    assert main([*cmd[:-3], "--seed", "5", *cmd[-3:]]) == 130
    assert not (out / "manifest.json").exists() and (out / "summary.json").is_file()
    monkeypatch.undo()
    capsys.readouterr()
    assert main(cmd) == 0, capsys.readouterr().err
    (out / "top_agents.csv").write_text("mine\n")  # yours: still refused
    assert main(cmd) == 2 and (out / "top_agents.csv").read_text() == "mine\n"


@pytest.mark.parametrize("name", ["report.html", "faithfulness.csv", "macro_curve.png"])
def test_run_keeps_a_file_of_your_own_with_a_figure_or_page_name(tiny, tmp_path, capsys, name):
    """aumann run replaced report.html / report.md and the figures by name: a page of your own in a fresh --out was
    overwritten silently. Now it stops the run before the simulation, and the file is kept."""
    import aumann.studies.faithfulness as faithfulness

    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("mine\n")
    monkeypatch = pytest.MonkeyPatch()
    started = []
    real = faithfulness.run_study
    monkeypatch.setattr(faithfulness, "run_study", lambda *a, **k: started.append(1) or real(*a, **k))
    try:
        capsys.readouterr()
        assert main(["run", "social-llm", "--config", str(tiny), "--out", str(out), "--static",
                     "--no-ablations"]) == 2
    finally:
        monkeypatch.undo()
    err = capsys.readouterr().err
    assert "OutputError" in err and name in err and started == []
    assert (out / name).read_text() == "mine\n"


def test_report_rerun_records_its_pages_and_run_replaces_only_those(tiny, tmp_path, capsys):
    """aumann report rewrote the pages without updating the manifest's SHA-256: the next aumann run found pages that
    were not the recorded ones. It records them now; a page of your own put there since is refused by both."""
    out = tmp_path / "out"
    assert _run(tiny, out) == 0
    assert main(["report", str(out), "--static", "--top", "3"]) == 0
    ours = json.loads((out / "manifest.json").read_text())["outputs_sha256"]
    import aumann.io

    assert ours["report.html"] == aumann.io.sha256_file(out / "report.html")
    assert _run(tiny, out) == 0  # the pages aumann report wrote are aumann's: replaced
    (out / "report.md").write_text("my notes\n")
    capsys.readouterr()
    assert main(["report", str(out), "--static"]) == 2
    assert "report.md" in capsys.readouterr().err and (out / "report.md").read_text() == "my notes\n"
    assert _run(tiny, out) == 2 and (out / "report.md").read_text() == "my notes\n"


@pytest.mark.parametrize("name", ["attribution.npz", "summary.json", "report.html", "manifest.json"])
def test_demo_and_attribute_keep_a_file_of_your_own_in_a_fresh_folder(tmp_path, capsys, name):
    """aumann demo / attribute replaced attribution.npz, summary.json, report.* (and manifest.json) by name in a folder
    no aumann command wrote. Now such a file stops the command and is kept."""
    out = tmp_path / "mine"
    out.mkdir()
    (out / name).write_text('{"mine": true}\n')
    capsys.readouterr()
    assert main(["demo", "--agents", "12", "--steps", "2", "--out", str(out), "--static"]) == 2
    assert name in capsys.readouterr().err
    assert (out / name).read_text() == '{"mine": true}\n'
    panel = tmp_path / "p"
    assert main(["demo", "--agents", "12", "--steps", "2", "--out", str(panel), "--static"]) == 0
    from aumann.attribution import Panel
    from aumann.data.synthetic import heavy_tailed_panel

    Panel.save(heavy_tailed_panel(12, 2, rng=0), tmp_path / "panel.npz")
    assert main(["attribute", str(tmp_path / "panel.npz"), "--indicator", "lin", "--out", str(out)]) == 2
    assert name in capsys.readouterr().err
    assert (out / name).read_text() == '{"mine": true}\n'
    (out / name).unlink()
    assert main(["attribute", str(tmp_path / "panel.npz"), "--indicator", "lin", "--out", str(out)]) == 0
    assert main(["attribute", str(tmp_path / "panel.npz"), "--indicator", "heat", "--out", str(out)]) == 0  # ours


def test_outputs_that_are_links_or_directories_are_refused(tmp_path, capsys):
    """A symbolic link or a directory with an output's name is nothing aumann wrote: refused before the work (a
    directory used to surface only when the write failed, after the attribution)."""
    from aumann.attribution import Panel
    from aumann.data.synthetic import heavy_tailed_panel

    Panel.save(heavy_tailed_panel(12, 2, rng=0), tmp_path / "panel.npz")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    for i, make in enumerate((lambda p: p.symlink_to(victim), lambda p: p.mkdir())):
        out = tmp_path / f"o{i}"
        out.mkdir()
        make(out / "summary.json")
        capsys.readouterr()
        assert main(["attribute", str(tmp_path / "panel.npz"), "--indicator", "lin", "--out", str(out)]) == 2
        assert "summary.json" in capsys.readouterr().err
    assert victim.read_text() == "keep me\n"


def test_build_panel_removes_only_panels_an_earlier_build_recorded(tmp_path, capsys):
    """bluesky build-panel unlinked every panels/*/<topic>.npz of a topic it did not build, by name: a panel of your
    own there (or one from elsewhere) was deleted. Now only a panel an earlier build recorded (SHA-256) goes."""
    from tests.data.bluesky.jetstream_builder import build

    cap, _ = build()
    files = cap.write(tmp_path / "capture")
    out, topics = tmp_path / "out", tmp_path / "topics"
    topics.mkdir()
    (topics / "only.toml").write_text('keywords = ["tariff"]\n')
    base = ["bluesky", "build-panel", *map(str, files), "--out", str(out), "--threads", "1", "--quiet"]
    assert main(base) == 0
    assert "outputs_sha256" in json.loads((out / "manifest.json").read_text())
    mine = out / "panels" / "daily" / "mine.npz"
    mine.write_bytes(b"my own panel")
    capsys.readouterr()
    assert main([*base, "--topics", str(topics)]) == 2
    assert "mine.npz" in capsys.readouterr().err and mine.read_bytes() == b"my own panel"
    assert len(list((out / "panels" / "window").glob("*.npz"))) == 5  # refused before anything went
    mine.unlink()
    assert main([*base, "--topics", str(topics)]) == 0  # the earlier build's own panels go
    for scale in ("window", "daily"):
        assert sorted(p.name for p in (out / "panels" / scale).glob("*.npz")) == ["only.npz"]
    fresh = tmp_path / "fresh"  # a folder of your own: a file with an output's name is not replaced
    fresh.mkdir()
    (fresh / "ingest_report.json").write_text("{}\n")
    assert main([*base, "--out", str(fresh)]) == 2 and (fresh / "ingest_report.json").read_text() == "{}\n"


SECRET = "hfsecretvalue12345"


def _holds_secret(folder) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_a_secret_in_a_flag_value_reaches_no_file(tmp_path, tiny, monkeypatch):
    """The manifest's command redacted a secret in a flag's value (a NAME=value word, a URL's credentials), but its
    config recorded the raw value (config.out, config.panel) and summary.json and the page the panel path: the same
    value redacted in one place and written out in the next. Every recorded value now goes through one redaction."""
    from aumann.attribution import Panel
    from aumann.data.synthetic import heavy_tailed_panel

    monkeypatch.chdir(tmp_path)
    where = f"API_KEY={SECRET}"
    assert main(["demo", "--agents", "12", "--steps", "2", "--out", f"d/{where}", "--static"]) == 0
    Path(where).mkdir()
    Panel.save(heavy_tailed_panel(12, 2, rng=0), Path(where) / "panel.npz")
    assert main(["attribute", f"{where}/panel.npz", "--indicator", "lin", "--out", f"a/{where}", "--static"]) == 0
    assert main(["run", "social-llm", "--config", str(tiny), "--out", f"r/{where}", "--static", "--no-ablations",
                 "--no-plots"]) == 0
    for folder in ("d", "a", "r"):
        assert (tmp_path / folder).is_dir()
        assert _holds_secret(tmp_path / folder) == [], folder
    manifest = json.loads((tmp_path / "a" / where / "manifest.json").read_text())
    assert manifest["config"]["out"] == "a/API_KEY=***" and manifest["config"]["panel"].startswith("API_KEY=***")
    assert manifest["command"].endswith("--out 'a/API_KEY=***' --static")  # the same redaction as the command's


def test_a_run_stopped_by_its_budget_keeps_the_record_of_what_aumann_wrote(tmp_path, capsys):
    """The manifest of a run stopped by --max-calls replaced the earlier run's without its outputs_sha256: the folder
    then read as one of an older aumann, whose unlisted files are taken as its own, and the next run replaced a page of
    your own put there. The earlier record is journaled before the stopped manifest is written."""
    from aumann.simulators.llm import BudgetExceededError
    from tests.cli_run import invoke_run
    from tests.llm_loopback import LoopbackLLM
    from tests.scenarios.test_llm_runs import _cfg

    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    assert invoke_run("social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static") == 0
    with LoopbackLLM() as srv:
        with pytest.raises(BudgetExceededError):
            invoke_run("social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static", "--backend",
                       "openai", "--model", "m", "--base-url", srv.base_url, "--max-calls", "5")
    assert json.loads((out / "manifest.json").read_text())["status"] == "stopped"
    (out / "report.md").write_text("my notes\n")
    capsys.readouterr()
    assert main(["run", "social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static"]) == 2
    assert "report.md" in capsys.readouterr().err and (out / "report.md").read_text() == "my notes\n"
    (out / "report.md").unlink()
    assert main(["run", "social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static"]) == 0
