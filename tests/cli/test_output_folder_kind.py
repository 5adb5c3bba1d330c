"""One output folder holds one kind of command's outputs. Each command accepted any aumann manifest in its --out as
one it may replace: `aumann bluesky study --out <a synth or build-panel counts folder>` replaced the counts' manifest
(their seed and config gone; the next synth or build-panel there refused the counts as a user's own files), and
`aumann attribute --out <a study folder>` overwrote the study's summary.json, report.html and manifest.json (a
study's results replaced by an attribution's, the tables and cells left beside it). A folder whose manifest another
aumann command wrote is now refused, naming it, before anything is written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from aumann.attribution import Panel
from aumann.cli import main
from aumann.data.synthetic import heavy_tailed_panel
from aumann.errors import OutputError

REFUSED = "holds the outputs of another command, `{}` (its manifest.json)"


def _digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file()}


def _folder_of(out: Path, command: str, files: dict[str, str]) -> None:
    """A finished folder of ``command`` as aumann writes it: its files and a manifest recording their SHA-256."""
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    manifest = {"command": command, "outputs_complete": True,
                "outputs_sha256": {n: hashlib.sha256(t.encode()).hexdigest() for n, t in files.items()}}
    (out / "manifest.json").write_text(json.dumps(manifest))


def _refused(capsys, out: Path, other: str) -> None:
    err = capsys.readouterr().err
    assert f"aumann: error: OutputError: {str(out)!r} " + REFUSED.format(other) in err, err


def test_study_into_a_synth_counts_folder_is_refused_and_keeps_its_manifest(tmp_path, capsys) -> None:
    counts, other = tmp_path / "counts", tmp_path / "other"
    for d, seed in ((counts, "1"), (other, "2")):
        assert main(["bluesky", "synth", "--users", "300", "--days", "2", "--seed", seed, "--out", str(d)]) == 0
    before = _digests(other)
    capsys.readouterr()
    assert main(["bluesky", "study", str(counts), "--out", str(other), "--sizes", "100", "--seeds", "0",
                 "--no-progress"]) == 2
    _refused(capsys, other, "aumann bluesky synth")
    assert _digests(other) == before
    # (and the counts folder is still synth's own: synth writes it again without refusing its files)
    assert main(["bluesky", "synth", "--users", "300", "--days", "2", "--seed", "3", "--out", str(other)]) == 0


def test_attribute_into_a_study_folder_is_refused_and_keeps_the_studys_results(tmp_path, capsys) -> None:
    Panel.save(heavy_tailed_panel(12, 2, rng=0), tmp_path / "panel.npz")
    study = tmp_path / "study"
    _folder_of(study, "aumann bluesky study counts --out study", {"summary.json": '{"flip": 1}',
                                                                    "report.html": "<p>study</p>"})
    before = _digests(study)
    capsys.readouterr()
    assert main(["attribute", str(tmp_path / "panel.npz"), "--indicator", "lin", "--out", str(study)]) == 2
    _refused(capsys, study, "aumann bluesky study")
    assert _digests(study) == before


@pytest.mark.parametrize("command", [["bluesky", "synth", "--users", "300", "--days", "2"], ["demo"]])
def test_a_command_into_a_run_folder_is_refused(tmp_path, capsys, command) -> None:
    run = tmp_path / "run"
    _folder_of(run, "aumann run tiny --out run", {"faithfulness.csv": "row\n", "report.html": "<p>run</p>"})
    before = _digests(run)
    capsys.readouterr()
    assert main([*command, "--out", str(run)]) == 2
    _refused(capsys, run, "aumann run")
    assert _digests(run) == before


def test_a_run_into_a_counts_folder_is_refused_before_it_starts(tmp_path) -> None:
    from aumann.studies.report import check_report_files

    counts = tmp_path / "counts"
    _folder_of(counts, "aumann bluesky build-panel x.jsonl --out counts", {"users.parquet": "u"})
    with pytest.raises(OutputError, match=REFUSED.format("aumann bluesky build-panel").replace("(", r"\(")
                       .replace(")", r"\)")):
        check_report_files(counts)


def test_attribute_and_demo_still_share_a_folder_and_a_command_its_own(tmp_path) -> None:
    Panel.save(heavy_tailed_panel(12, 2, rng=0), tmp_path / "panel.npz")
    out = tmp_path / "out"
    assert main(["demo", "--agents", "200", "--out", str(out)]) == 0
    assert main(["attribute", str(tmp_path / "panel.npz"), "--indicator", "lin", "--out", str(out)]) == 0
    assert main(["attribute", str(tmp_path / "panel.npz"), "--indicator", "var", "--out", str(out)]) == 0
    assert json.loads((out / "manifest.json").read_text())["command"].startswith("aumann attribute")


@pytest.mark.parametrize("own", ["yours", "build-panel"])
def test_capture_keeps_a_manifest_it_did_not_write(tmp_path, capsys, monkeypatch, own) -> None:
    """`aumann bluesky capture` wrote manifest.json when it ended, unchecked: a manifest.json of the user's own, or
    a build-panel folder's (its counts then unrecorded), was overwritten after the whole capture."""
    from types import SimpleNamespace

    import aumann.data.bluesky.capture as capture_module

    monkeypatch.setattr(capture_module, "capture", lambda out, **kw: SimpleNamespace(
        messages=0, unparsed=0, reconnects=0, files=[]))  # (no network here: the stream is not the point)
    out = tmp_path / "cap"
    if own == "yours":
        out.mkdir()
        (out / "manifest.json").write_text('{"mine": true}')
    else:
        _folder_of(out, "aumann bluesky build-panel x.jsonl --out cap", {"users.parquet": "u"})
    before = _digests(out)
    capsys.readouterr()
    assert main(["bluesky", "capture", "--out", str(out), "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert "OutputError" in err and (f"{str(out / 'manifest.json')!r} is in the output folder" in err if own == "yours"
                                     else REFUSED.format("aumann bluesky build-panel") in err), err
    assert _digests(out) == before
    # (an earlier capture's folder is the one a capture writes again: its manifest is replaced)
    fresh = tmp_path / "fresh"
    assert main(["bluesky", "capture", "--out", str(fresh), "--duration", "1"]) == 0
    assert main(["bluesky", "capture", "--out", str(fresh), "--duration", "1"]) == 0
