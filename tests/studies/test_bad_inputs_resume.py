"""Resume trusts nothing it reads, outputs hold plain numbers, names never leave their folder (issue 10).

* faithfulness study (``aumann run``): every finished ``runs/run-NNN.{json,npz}`` carries checksums; a
  truncated ``.npz``, a record with missing keys, an edited number, random bytes — each is recomputed,
  counted in ``StudyResult.failed_checks`` and reported in ``report.md``, ``manifest.json`` and on stderr;
* cross-scale study (``aumann bluesky study``): the same per cell; topic names from ``counts.json`` that
  would lead outside ``--out`` are refused;
* every CSV the studies write holds plain numbers (no ``np.float64(...)``; missing values are empty cells)
  and every JSON output parses with a strict parser (no NaN / Infinity).
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from aumann.cli import main
from aumann.errors import UnsafeNameError
from aumann.studies.crossscale.study import CrossScaleConfig, run_crossscale
from aumann.studies.faithfulness import run_study
from tests.tiny import tiny_config


def _strict_json(path: Path):
    def refuse(token: str):
        raise AssertionError(f"{path} holds {token}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def assert_plain_csv(path: Path, text_columns: set[str]) -> int:
    """Every cell of a CSV is empty, a plain decimal number, or a value of a known text column."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    cells = 0
    for r in rows:
        for col, v in r.items():
            cells += 1
            if v == "" or col in text_columns:
                continue
            assert "np." not in v and "(" not in v, f"{path.name}:{col} = {v!r}"
            if v in ("True", "False"):
                continue
            x = float(v)
            assert math.isfinite(x), f"{path.name}:{col} = {v!r}"
    return cells


# ---------------------------------------------------------------------------------------------- faithfulness
@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    sc, cfg = tiny_config("social-llm", agents=6, steps=4, runs=2,
                          study={"permutations": 8, "random_orderings": 2, "path_orders": 2,
                                 "quadrature_steps": 8, "ablations": False})
    res = run_study(sc, cfg, out_dir=out)
    return sc, cfg, out, res


def _copy(finished, tmp_path) -> Path:
    _, _, out, _ = finished
    dst = tmp_path / "copy"
    shutil.copytree(out, dst)
    return dst


def _truncate_npz(p: Path) -> None:
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])


def _drop_key(p: Path) -> None:
    rec = json.loads(p.read_text())
    del rec["methods"]
    p.write_text(json.dumps(rec))


def _edit_number(p: Path) -> None:
    rec = json.loads(p.read_text())
    rec["methods"]["aumann_shapley"]["deletion_auc"] = 0.999
    p.write_text(json.dumps(rec))


def _truncate_json(p: Path) -> None:
    p.write_text(p.read_text()[:40])


def _random_npz(p: Path) -> None:
    p.write_bytes(np.random.default_rng(0).bytes(400))


def _npz_other_run(p: Path) -> None:
    shutil.copy(p.with_name("run-001.npz"), p)


def _run_of_another_run(p: Path) -> None:  # the record and its arrays: a valid pair, run 1's, in run 0's place
    shutil.copy(p.with_name("run-001.json"), p)
    shutil.copy(p.with_name("run-001.npz"), p.with_suffix(".npz"))


CORRUPTIONS = {
    "truncated_npz": ("run-000.npz", _truncate_npz, "arrays"),
    "random_bytes_npz": ("run-000.npz", _random_npz, "arrays"),
    "npz_of_another_run": ("run-000.npz", _npz_other_run, "checksum"),
    "record_and_npz_of_another_run": ("run-000.json", _run_of_another_run, "run 1's, not run 0's"),
    "record_missing_keys": ("run-000.json", _drop_key, "lacks"),
    "edited_number": ("run-000.json", _edit_number, "checksum"),
    "truncated_json": ("run-000.json", _truncate_json, "unreadable"),
    "missing_npz": ("run-000.npz", lambda p: p.unlink(), "missing"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS), ids=str)
def test_resume_recomputes_what_fails_verification_and_says_so(finished, tmp_path, case):
    sc, cfg, _, first = finished
    out = _copy(finished, tmp_path)
    name, damage, reason = CORRUPTIONS[case]
    damage(out / "runs" / name)
    again = run_study(sc, cfg, out_dir=out)
    assert (again.resumed, again.computed) == (1, 1)
    assert [f["run"] for f in again.failed_checks] == [0] and reason in again.failed_checks[0]["reason"]
    # the recomputed run is the same run (same seeds), and it verifies on the next resume
    assert again.records[0]["methods"] == first.records[0]["methods"]
    third = run_study(sc, cfg, out_dir=out)
    assert (third.resumed, third.computed, third.failed_checks) == (2, 0, [])


RUN_ARGV = ["run", "social-llm", "--agents", "6", "--steps", "4", "--runs", "2", "--no-plots",
            "--set", "study.permutations=8", "--set", "study.random_orderings=2", "--set", "study.path_orders=2",
            "--set", "study.quadrature_steps=8", "--set", "study.ablations=false"]


def test_failed_checks_reach_stderr_manifest_and_report(finished, tmp_path, capsys):
    out = _copy(finished, tmp_path)
    _edit_number(out / "runs" / "run-001.json")
    assert main([*RUN_ARGV, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "failed verification" in err and "run-001.json" in err
    manifest = _strict_json(out / "manifest.json")
    assert manifest["recomputed_after_failed_check"] == 1 and manifest["failed_checks"][0]["run"] == 1
    report = (out / "report.md").read_text()
    assert "run-001.json" in report and "failed resume check" in report
    for csv_path in out.glob("*.csv"):
        assert_plain_csv(csv_path, {"scenario", "method", "ablation", "variant", "path", "indicator", "baseline",
                                    "order", "f", "pair", "ordering", "judge"})  # judge_overlap.csv names its judge
    for json_path in [*out.glob("*.json"), *(out / "runs").glob("*.json")]:
        _strict_json(json_path)


# ---------------------------------------------------------------------------------------------- cross-scale
@pytest.fixture(scope="module")
def synth_counts(tmp_path_factory) -> Path:
    counts = tmp_path_factory.mktemp("counts") / "c"
    assert main(["bluesky", "synth", "--users", "2000", "--days", "3", "--seed", "2", "--out", str(counts)]) == 0
    return counts


def _study(counts: Path, out: Path) -> dict:
    cfg = CrossScaleConfig(sizes=[100], seeds=[0], topics=["mythos"], protocols=["RAND", "BIAS_visibility"])
    return run_crossscale(counts, out, cfg, log=lambda *_: None)


def test_cross_scale_cells_are_verified_on_resume(synth_counts, tmp_path, capsys):
    out = tmp_path / "study"
    first = _study(synth_counts, out)
    assert first["cells_recomputed_after_failed_check"] == 0
    cells = sorted((out / "cells" / "mythos").glob("*.json"))
    assert len(cells) == 3
    rec = json.loads(cells[0].read_text())
    rec["size"] = 12345  # an edited number
    cells[0].write_text(json.dumps(rec))
    cells[1].write_text(cells[1].read_text()[:30])  # truncated
    rec2 = json.loads(cells[2].read_text())
    del rec2["checksum"]  # missing key
    cells[2].write_text(json.dumps(rec2))
    second = _study(synth_counts, out)
    assert second["cells_recomputed_after_failed_check"] == 3 and second["cells_skipped_on_resume"] == 0
    reasons = " ".join(f["reason"] for f in second["cells_failed_check"])
    assert "checksum" in reasons and "unreadable" in reasons and "missing keys" in reasons
    assert "failed verification" in capsys.readouterr().err
    manifest = _strict_json(out / "manifest.json")
    assert manifest["resume"]["cells_recomputed_after_failed_check"] == 3
    third = _study(synth_counts, out)
    assert third["cells_skipped_on_resume"] == 3 and third["cells_recomputed_after_failed_check"] == 0
    _strict_json(out / "summary.json")
    for csv_path in (out / "tables").glob("*.csv"):
        assert_plain_csv(csv_path, {"topic", "protocol", "indicator", "tier", "anchor", "strategy", "day",
                                    "peak_day", "N", "size", "cell", "flip", "group", "law", "note", "f",
                                    "source", "panel", "kind", "metric", "label"})


@pytest.mark.parametrize("evil", ["../../../../escaped", "/tmp/absolute-escape", "..", "a/../../b", "nul\x00x",
                                  "", " padded ", "con", "x" * 300])
def test_topic_names_from_counts_json_cannot_escape_out(synth_counts, tmp_path, evil):
    counts = tmp_path / "counts"
    shutil.copytree(synth_counts, counts)
    meta = json.loads((counts / "counts.json").read_text())
    meta["topics"].append(evil)
    (counts / "counts.json").write_text(json.dumps(meta))
    out = tmp_path / "deep" / "er" / "out"
    with pytest.raises(UnsafeNameError) as info:
        run_crossscale(counts, out, CrossScaleConfig(sizes=[100], seeds=[0]), log=lambda *_: None)
    assert repr(evil)[1:20] in str(info.value)
    assert not (tmp_path / "escaped").exists() and not Path("/tmp/absolute-escape").exists()
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--no-progress"]) == 2
    assert not any(p.name.startswith("escaped") for p in tmp_path.rglob("*"))


def test_attribute_cli_writes_plain_csv_and_strict_json(tmp_path):
    from aumann.attribution import Panel

    src = Panel(np.abs(np.random.default_rng(3).normal(size=(4, 20, 3))), steps=["a", "b", "c", "d"],
                groups={"tier": ["top"] * 2 + ["tail"] * 18}).save(tmp_path / "p.npz")
    assert main(["attribute", str(src), "--indicator", "heat", "--method", "path", "--steps", "8",
                 "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "phi_by_step.csv").read_text()
    assert text.startswith("step,delta_v,sum_phi,efficiency_gap\n") and "np." not in text
    assert assert_plain_csv(tmp_path / "o" / "phi_by_step.csv", {"step"}) == 16
    for name in ("summary.json", "manifest.json"):
        _strict_json(tmp_path / "o" / name)


def test_deepset_r2_is_null_not_minus_inf_when_targets_do_not_vary():
    from aumann.studies.crossscale.deepset import train

    class S:  # the settings train() reads
        width, train_steps, batch, lr, sizes, seed = 4, 2, 2, 1e-3, [4], 0

    values = np.zeros((20, 3), dtype=np.float32)  # no activity: every target equal
    _, report = train(values, np.arange(10), S)
    assert report["heldout_r2"] == {"random": None, "biased": None}


@pytest.mark.parametrize("damage, needle", [
    (lambda d: (d / "runs" / "run-000.npz").write_bytes(np.random.default_rng(5).bytes(100)), "run-000.npz"),
    (lambda d: (d / "runs" / "run-000.npz").write_bytes((d / "runs" / "run-000.npz").read_bytes()[:100]),
     "run-000.npz"),
    (lambda d: (d / "runs" / "run-000.json").write_text("{"), "run-000.json"),
    (lambda d: (d / "manifest.json").write_bytes(b"\xff\x00garbage"), "manifest.json"),
    (lambda d: (d / "attributions" / "run-000-aumann_shapley.npz").write_bytes(b"PK\x03\x04broken"),
     "run-000-aumann_shapley.npz"),
], ids=["random_npz", "truncated_npz", "truncated_json", "binary_manifest", "broken_attribution"])
def test_aumann_report_on_a_damaged_run_directory_is_a_typed_error(finished, tmp_path, capsys, damage, needle):
    out = _copy(finished, tmp_path)
    assert main([*RUN_ARGV, "--out", str(out)]) == 0  # resumes both runs, writes tables, manifest and report
    damage(out)
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and needle in err.splitlines()[-1]
