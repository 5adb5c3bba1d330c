"""Bad inputs found by probing every entry point beyond issue 10's list (an adversarial user's second pass).

Each case asserts the exact error type and that the message names the offending input:

* paths: every file/folder argument of the Python API is a non-empty ``str``/``os.PathLike`` (``None``, a
  number, bytes or ``""`` — the current directory — are refused by one rule, :func:`aumann.checks.as_path`);
* sizes no run can reach are refused before work: Gauss–Legendre points beyond the rule's cap (nodes cost
  O(K²) memory), and numpy's "maximum dimension exceeded" in the CLI is the one-line memory message;
* metrics of constant inputs are ``nan`` without a warning;
* ``aumann report`` on a cross-scale directory whose ``summary.json`` is not an object, whose topics are not
  a list, or whose topics lead outside the directory;
* ``aumann bluesky study`` refuses to write its outputs into the raw counts directory it reads.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from aumann.attribution import Attribution, AumannShapley, Panel, attribute, metrics, quadrature
from aumann.checks import as_path
from aumann.cli import main
from aumann.errors import AttributionFileError, ConfigError, MethodError, OutputError, PanelError, ReportError
from aumann.io import atomic_path, ensure_output_dir, read_npz

PANEL = Panel(np.abs(np.random.default_rng(0).normal(size=(3, 6, 2))))

PATH_BAD = {
    "panel_save_int": (lambda: PANEL.save(123), OutputError, "123"),
    "panel_save_empty": (lambda: PANEL.save(""), OutputError, "empty"),
    "panel_load_none": (lambda: Panel.load(None), PanelError, "NoneType"),
    "panel_load_int": (lambda: Panel.load(7), PanelError, "int"),
    "panel_load_bytes": (lambda: Panel.load(b"p.npz"), PanelError, "bytes"),
    "attribution_load_none": (lambda: Attribution.load(None), AttributionFileError, "NoneType"),
    "attribution_load_blank": (lambda: Attribution.load("  "), AttributionFileError, "blank"),
    "attribution_save_float": (lambda: attribute("heat", PANEL).save(1.5), OutputError, "float"),
    "read_npz_list": (lambda: read_npz(["a.npz"], error=PanelError, what="panel file"), PanelError, "list"),
    "ensure_output_dir_none": (lambda: ensure_output_dir(None, "--out"), OutputError, "--out"),
    "ensure_output_dir_empty": (lambda: ensure_output_dir("", "--out"), OutputError, "--out"),
}


@pytest.mark.parametrize("case", sorted(PATH_BAD), ids=str)
def test_every_path_argument_is_a_non_empty_path(case):
    call, error, needle = PATH_BAD[case]
    with pytest.raises(error) as info:
        call()
    assert needle in str(info.value)


def test_atomic_path_refuses_a_non_path_before_creating_anything(tmp_path):
    with pytest.raises(OutputError, match="output file"), atomic_path(object()):
        pass
    assert as_path(tmp_path / "x", "f") == tmp_path / "x" and as_path("a/b", "f") == Path("a/b")
    with pytest.raises(ConfigError, match="NUL"):
        as_path("a\x00b", "--out")


@pytest.mark.parametrize("kw, needle", [
    (dict(steps=10**12), "steps"),
    (dict(steps=5000), "gauss-legendre"),
    (dict(max_steps=10**6, tol=1e-3), "max_steps"),
    (dict(steps=2 * 10**6, rule="midpoint"), "midpoint"),
])
def test_integration_points_beyond_the_rule_are_refused_before_any_work(kw, needle):
    with pytest.raises(MethodError) as info:
        AumannShapley(**kw)
    assert needle in str(info.value)


def test_quadrature_caps_follow_the_rule():
    with pytest.raises(MethodError, match="gauss-legendre"):
        quadrature(10**12)
    nodes, weights = quadrature(5000, "midpoint")  # a midpoint rule costs O(K): allowed
    assert len(nodes) == 5000 and abs(weights.sum() - 1) < 1e-12
    assert AumannShapley(steps=5000, rule="midpoint").steps == 5000


def test_numpy_dimension_errors_become_the_one_line_memory_message(capsys):
    assert main(["demo", "--agents", "1e8", "--steps", "1e6"]) == 2  # (1e20 agents is refused by the flag now)
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1].startswith("aumann: error: MemoryError: not enough memory")


def test_other_value_errors_are_not_hidden_as_memory_errors():
    from aumann.cli import _too_large

    assert _too_large(ValueError("Maximum allowed dimension exceeded"))
    assert _too_large(ValueError("array is too big; `arr.size * arr.dtype.itemsize` is larger than the maximum"))
    assert not _too_large(ValueError("could not convert string to float: 'x'"))


def test_rank_correlations_of_a_constant_input_are_nan_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(metrics.spearman(np.ones(4), np.arange(4.0)))
        assert np.isnan(metrics.kendall_tau(np.ones(4), np.arange(4.0)))
        assert metrics.spearman(np.arange(4.0), np.arange(4.0)) == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------- cross-scale
@pytest.fixture(scope="module")
def study_dir(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("xs")
    counts, out = d / "counts", d / "study"
    assert main(["bluesky", "synth", "--users", "400", "--days", "2", "--seed", "1", "--out", str(counts)]) == 0
    assert main(["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0",
                 "--protocols", "RAND", "--topics", "mythos", "--no-progress", "--static"]) == 0
    return counts, out


def _summary(d: Path, **changes) -> None:
    s = json.loads((d / "summary.json").read_text())
    s.update(changes)
    (d / "summary.json").write_text(json.dumps(s))


@pytest.mark.parametrize("damage, needle", [
    (lambda d: (d / "summary.json").write_text("[]"), "JSON object"),
    (lambda d: (d / "summary.json").write_text('"text"'), "JSON object"),
    (lambda d: _summary(d, topics="mythos"), "'topics' must be a list"),
    (lambda d: _summary(d, topics=["../../../../etc"]), "../../../../etc"),
    (lambda d: _summary(d, topics=["/etc"]), "/etc"),
    (lambda d: _summary(d, topics=[5]), "5"),
    (lambda d: (d / "cells" / "mythos" / "FULL.json").write_text("[1, 2]"), "FULL.json"),
    (lambda d: (d / "manifest.json").write_text("[]"), "manifest.json"),
], ids=["summary_list", "summary_string", "topics_string", "topic_escape", "topic_absolute", "topic_number",
        "cell_list", "manifest_list"])
def test_report_of_a_damaged_cross_scale_directory_is_a_typed_error(study_dir, tmp_path, capsys, damage, needle):
    d = tmp_path / "copy"
    shutil.copytree(study_dir[1], d)
    # a study of an older aumann (no checksums): the page's own reading must refuse the damage (a study with
    # checksums refuses every changed file by name first: tests/studies/crossscale/test_study_cli.py)
    manifest = json.loads((d / "manifest.json").read_text())
    del manifest["outputs_sha256"]
    (d / "manifest.json").write_text(json.dumps(manifest))
    damage(d)
    with pytest.raises(ReportError) as info:
        from aumann.studies.pages import render_report

        render_report(d, interactive=False, plots=False)
    assert needle in str(info.value)
    assert main(["report", str(d), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and needle in err.splitlines()[-1]


def test_the_study_never_writes_into_the_counts_directory_it_reads(study_dir, capsys):
    counts, _ = study_dir
    before = {p.name: p.read_bytes() for p in counts.iterdir() if p.is_file()}
    assert main(["bluesky", "study", str(counts / "."), "--out", str(counts), "--sizes", "100", "--seeds", "0",
                 "--protocols", "RAND", "--topics", "mythos", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "OutputError" in err and str(counts) in err and "raw counts directory" in err
    assert {p.name: p.read_bytes() for p in counts.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("phi, needle", [(np.array([["a"] * 6] * 3), "<U1"), (np.ones((3, 6), complex), "complex"),
                                         (np.ones((3, 6), dtype=object), "object")],
                         ids=["strings", "complex", "objects"])
def test_an_attribution_file_with_non_real_phi_is_refused_by_name(tmp_path, phi, needle):
    import io
    import zipfile

    src = attribute("heat", PANEL).save(tmp_path / "a.npz")
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    buf = io.BytesIO()
    np.save(buf, phi, allow_pickle=True)
    members["phi.npy"] = buf.getvalue()
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(bad, "w") as z:
        for n, b in members.items():
            z.writestr(n, b)
    with pytest.raises(AttributionFileError) as info:
        Attribution.load(bad)
    assert "bad.npz" in str(info.value) and (needle in str(info.value) or "pickled" in str(info.value))
