import json
from pathlib import Path

import numpy as np
import pytest

from aumann.attribution import Attribution, Panel
from aumann.cli import main
from aumann.errors import ReportError
from aumann.studies.pages import render_report


def test_attribute_command_writes_results_and_manifest(tmp_path, rng, capsys):
    panel = Panel(np.abs(rng.normal(size=(3, 50, 3))), features=["a", "b", "c"],
                  groups={"tier": ["top"] * 5 + ["tail"] * 45})
    src = panel.save(tmp_path / "panel.npz")
    out = tmp_path / "out"
    assert main(["attribute", str(src), "--indicator", "heat", "--method", "path", "--steps", "12",
                 "--out", str(out)]) == 0
    res = Attribution.load(out / "attribution.npz")
    assert res.phi.shape == (3, 50) and res.provenance["steps"] == 12
    summary = json.loads((out / "summary.json").read_text())
    assert summary["max_efficiency_gap"] < 1e-10 and set(summary["tier_shares"]) == {"top", "tail"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["command"].startswith("aumann attribute ") and "torch" in manifest["packages"]
    assert (out / "phi_by_step.csv").read_text().startswith("step,delta_v")


def test_every_command_records_its_whole_redacted_command_line(tmp_path, rng):
    """`aumann attribute`, `aumann demo` and `aumann bluesky synth` recorded only their bare name ("aumann demo") in
    manifest.json, where `aumann run` recorded its whole command line: the manifest did not say how to reproduce
    the result. Now each records `aumann` and its words, shell-quoted, a secret in any word redacted (the same
    function as `aumann run`)."""
    import shlex

    src = Panel(np.abs(rng.normal(size=(3, 20, 2)))).save(tmp_path / "my panel.npz")
    secret = "hf_abcdefghijklmnop123456"
    commands = {
        "attribute": ["attribute", str(src), "--indicator", "heat", "--steps", "8", "--no-report",
                      "--out", str(tmp_path / f"HF_TOKEN={secret}")],
        "demo": ["demo", "--agents", "20", "--steps", "2", "--out", str(tmp_path / f"demo-HF_TOKEN={secret}")],
        "synth": ["bluesky", "synth", "--users", "100", "--days", "1", "--out",
                  str(tmp_path / f"synth-HF_TOKEN={secret}")],
    }
    for name, argv in commands.items():
        assert main(["--debug", *argv]) == 0, name
        out = Path(argv[-1])
        recorded = json.loads((out / "manifest.json").read_text())["command"]
        assert secret not in recorded, name
        redacted = [w.replace(f"HF_TOKEN={secret}", "HF_TOKEN=***") for w in argv]
        assert shlex.split(recorded) == ["aumann", *redacted], name


def test_the_same_attribute_command_writes_the_same_result_bytes(tmp_path, rng):
    """The result files hold what the panel and flags determine: attribution.npz kept the method's wall-clock
    seconds in its provenance, and summary.json (its ``seconds``, its provenance's), so two identical commands
    wrote different files. The seconds are in manifest.json alone (``attribute_seconds``, ``stage_seconds``)."""
    src = Panel(np.abs(rng.normal(size=(3, 40, 2)))).save(tmp_path / "panel.npz")
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        assert main(["attribute", str(src), "--indicator", "heat", "--method", "path", "--steps", "8", "--out",
                     str(out), "--no-report"]) == 0
    for name in ("attribution.npz", "phi_by_step.csv", "top_agents.csv", "summary.json"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    assert "seconds" not in Attribution.load(outs[0] / "attribution.npz").provenance
    assert json.loads((outs[0] / "manifest.json").read_text())["attribute_seconds"] > 0


def _same_but_wall_clock(a: Path, b: Path) -> None:
    """Every file of ``a`` and ``b`` has the same bytes, but manifest.json and report.html (wall time, when,
    where) and, in report.md, the header's command and created lines, the Cost card and the Cost section."""
    from tests.cli.test_run_same_bytes import _files, _wall_clock_lines

    fa, fb = _files(a), _files(b)
    assert sorted(fa) == sorted(fb) and "report.md" in fa
    differ = [n for n in fa if fa[n] != fb[n] and n not in ("manifest.json", "report.html", "report.md")]
    assert differ == []
    assert _wall_clock_lines(fa["report.md"].decode()) == _wall_clock_lines(fb["report.md"].decode())


def test_the_same_trace_command_writes_the_same_bytes_but_its_wall_clock(tmp_path):
    """summary.json held the attribution's seconds and report.md's "How sure" the trace's read rate (records/s)."""
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        assert main(["attribute", "--trace", "tests/data/traces/oasis_twitter.db", "--indicator", "lin", "--out",
                     str(out), "--static"]) == 0
    _same_but_wall_clock(*outs)
    assert "records/s" in (outs[0] / "report.md").read_text().split("## Cost")[1]  # the rate is under Cost


def test_the_same_demo_command_writes_the_same_bytes_but_its_wall_clock(tmp_path):
    """attribution.npz and summary.json of ``aumann demo --out`` held seconds, and so did report.md's tier table."""
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        assert main(["demo", "--agents", "40", "--steps", "4", "--seed", "2", "--out", str(out), "--static"]) == 0
    _same_but_wall_clock(*outs)


def test_trace_flags_given_empty_and_a_dangling_out_link_are_refused_clearly(tmp_path, capsys):
    src = Panel(np.ones((3, 4))).save(tmp_path / "p.npz")
    # `--features ""` was taken silently without --trace (an empty string is falsy), `--features zz` refused
    assert main(["attribute", str(src), "--indicator", "heat", "--features", "", "--out", str(tmp_path / "o")]) == 2
    assert "apply to --trace" in capsys.readouterr().err
    link = tmp_path / "lnk"
    link.symlink_to(tmp_path / "nowhere")  # it said "cannot create --out 'lnk': File exists"
    assert main(["attribute", str(src), "--indicator", "heat", "--out", str(link), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "symbolic link" in err and "nowhere" in err and "File exists" not in err


def test_attribute_command_errors_are_clear(tmp_path, capsys):
    assert main(["attribute", str(tmp_path / "missing.npz"), "--indicator", "heat", "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    src = Panel(np.ones((3, 2))).save(tmp_path / "p.npz")
    assert main(["attribute", str(src), "--indicator", "nope", "--out", str(tmp_path / "o")]) == 2
    assert "registered indicators are" in capsys.readouterr().err


def test_demo_runs_small(tmp_path, capsys):
    assert main(["demo", "--agents", "2000", "--steps", "3", "--out", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "summary.json").read_text())
    assert out["synthetic"] is True and len(out["rows"]) == 5


def test_manifest_redacts_secrets(tmp_path):
    from aumann.manifest import write_manifest

    path = write_manifest(tmp_path, "x", config={"api_key": "sk-secret", "nested": {"token": "t0k"}, "k": 1})
    text = path.read_text()
    assert "sk-secret" not in text and "t0k" not in text and '"k": 1' in text


def test_manifest_keeps_token_counts(tmp_path):
    from aumann.manifest import write_manifest

    path = write_manifest(tmp_path, "x", config={}, extra={"llm_usage": {"prompt_tokens": 12, "completion_tokens": 3},
                                                          "api_token": "secret-value"})
    data = json.loads(path.read_text())
    assert data["llm_usage"] == {"prompt_tokens": 12, "completion_tokens": 3}  # numbers are never secrets
    assert data["api_token"] == "<redacted>"


def test_version_flag(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert "aumann" in capsys.readouterr().out


@pytest.mark.parametrize("flags", [["--tol", "1e-6"], ["--steps", "500"], ["--rule", "midpoint"], ["--power", "4"]])
def test_path_integral_flags_with_method_closed_are_refused(tmp_path, rng, capsys, flags):
    """`--method closed --tol 1e-6` (or --steps, --rule, --power) wrote the closed form with exit 0: the flag had
    nothing to act on and was dropped without a word, while manifest.json recorded it as the run's setting. Now a
    ConfigError names the flag before any work (no --out written); without them the closed form runs, and the
    defaults the manifest records are those of before (steps 30, gauss-legendre, power 1, no tol)."""
    src = Panel(np.abs(rng.normal(size=(3, 10, 2)))).save(tmp_path / "panel.npz")
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["attribute", str(src), "--indicator", "heat", "--method", "closed", *flags, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ConfigError" in err and flags[0] in err and "--method closed" in err
    assert not out.exists()
    assert main(["attribute", str(src), "--indicator", "heat", "--method", "closed", "--no-report",
                 "--out", str(out)]) == 0
    assert Attribution.load(out / "attribution.npz").provenance["closed_form"] is True
    config = json.loads((out / "manifest.json").read_text())["config"]
    assert (config["steps"], config["rule"], config["power"], config["tol"]) == (30, "gauss-legendre", 1.0, None)


def test_path_integral_flags_unused_by_method_auto_are_warned_of_and_recorded(tmp_path, rng, capsys):
    """`--method auto --steps 500 --power 4 --tol 1e-3` on heat at the zero baseline wrote the closed form with no
    word: the flags had nothing to act on, and manifest.json recorded them as the run's setting. Now a warning names
    them and how to integrate, and manifest.json lists them under unused_flags (attribution.npz's provenance under
    "unused"); the result is the closed form's, as before. Without them, or where the path integral runs, no
    warning and no such entry."""
    src = Panel(np.abs(rng.normal(size=(3, 10, 2)))).save(tmp_path / "panel.npz")
    capsys.readouterr()
    base = ["attribute", str(src), "--indicator", "heat", "--no-report"]
    assert main([*base, "--steps", "500", "--power", "4", "--tol", "1e-3", "--out", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "--steps 500, --power 4, --tol 0.001 given but unused" in err and "--method path" in err
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["unused_flags"] == ["--steps", "--power", "--tol"]
    res = Attribution.load(tmp_path / "a" / "attribution.npz")
    assert res.provenance["closed_form"] is True and set(res.provenance["unused"]) == {"steps", "power", "tol"}
    for name, flags in (("b", []), ("c", ["--method", "path", "--steps", "8"]),
                        ("d", ["--steps", "8", "--baseline", "mean"])):
        assert main([*base, *flags, "--out", str(tmp_path / name)]) == 0
        assert "unused" not in capsys.readouterr().err, name
        assert "unused_flags" not in json.loads((tmp_path / name / "manifest.json").read_text()), name
        assert "unused" not in Attribution.load(tmp_path / name / "attribution.npz").provenance, name
    np.testing.assert_array_equal(res.phi, Attribution.load(tmp_path / "b" / "attribution.npz").phi)
    assert (tmp_path / "a" / "phi_by_step.csv").read_bytes() == (tmp_path / "b" / "phi_by_step.csv").read_bytes()


def test_static_with_no_report_is_refused(tmp_path, rng, capsys):
    """--static sets the figures of report.html, which --no-report skips: `--static --no-report` wrote the results,
    exit 0, the flag never read (aumann demo refuses --static without --out the same way)."""
    src = Panel(np.abs(rng.normal(size=(3, 10, 2)))).save(tmp_path / "panel.npz")
    out = tmp_path / "out"
    capsys.readouterr()
    assert main(["attribute", str(src), "--indicator", "heat", "--static", "--no-report", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "ConfigError" in err and "--static" in err and "--no-report" in err
    assert not out.exists()


def test_deletion_k_without_a_deletion_study_is_refused(tmp_path, rng, capsys):
    """--deletion-k sizes the masking deletion study, which only --trace runs and --no-deletion skips: given with a
    saved panel (or with --no-deletion) it was dropped without a word, exit 0, and no deletion study written. Now a
    ConfigError names it before any work; with --trace it still sizes the study."""
    src = Panel(np.abs(rng.normal(size=(3, 10, 2)))).save(tmp_path / "panel.npz")
    trace = Path(__file__).parents[1] / "data" / "traces" / "events.csv"
    spec = Path(__file__).parents[2] / "docs" / "examples" / "traces" / "events.toml"
    capsys.readouterr()
    for i, args in enumerate([[str(src)], ["--trace", str(trace), "--spec", str(spec), "--no-deletion"]]):
        out = tmp_path / f"out{i}"
        assert main(["attribute", *args, "--indicator", "gini", "--deletion-k", "3", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "ConfigError" in err and "--deletion-k" in err and not out.exists()
    out = tmp_path / "traced"
    assert main(["attribute", "--trace", str(trace), "--spec", str(spec), "--indicator", "gini", "--deletion-k", "3",
                 "--no-report", "--out", str(out)]) == 0
    assert json.loads((out / "deletion_masking.json").read_text())["k_del"] == 3


def test_demo_static_without_out_is_refused(tmp_path, capsys):
    """`aumann demo --static` without --out printed the tables and wrote no page, exit 0: the flag (the figures of
    report.html) was dropped without a word. Now a ConfigError says --static needs --out; with --out it still
    writes the page."""
    capsys.readouterr()
    assert main(["demo", "--agents", "12", "--steps", "2", "--static"]) == 2
    err = capsys.readouterr().err
    assert "ConfigError" in err and "--static" in err and "--out" in err
    assert main(["demo", "--agents", "12", "--steps", "2", "--static", "--out", str(tmp_path / "d")]) == 0
    assert (tmp_path / "d" / "report.html").is_file()


def test_a_table_or_a_bare_npz_given_as_the_panel_says_what_to_do(tmp_path, rng, capsys):
    """A user's long table given as the panel (`aumann attribute panel.csv`) was 'not an .npz archive (no zip
    signature ...): damaged, or another kind of file', and an .npz of bare arrays 'not an aumann panel file (no
    metadata)': neither said how to get a panel. Now the table is refused pointing at --trace and
    Panel.from_dataframe, the bare .npz at Panel(...).save; a panel saved under a table's name still loads."""
    table = tmp_path / "panel.csv"
    table.write_text("agent,step,x\n1,0,1.0\n2,0,2.0\n")
    bare = tmp_path / "arrays.npz"
    np.savez(bare, values=rng.random((3, 4, 2)))
    capsys.readouterr()
    assert main(["attribute", str(table), "--indicator", "heat", "--out", str(tmp_path / "o1")]) == 2
    err = capsys.readouterr().err
    assert "ConfigError" in err and "CSV table" in err and "--trace" in err and "from_dataframe" in err
    assert main(["attribute", str(bare), "--indicator", "heat", "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert "PanelError" in err and ".save(path)" in err
    named = Panel(np.abs(rng.normal(size=(3, 5, 2)))).save(tmp_path / "p.npz").rename(tmp_path / "mine.csv")
    assert main(["attribute", str(named), "--indicator", "heat", "--no-report", "--out", str(tmp_path / "o3")]) == 0


@pytest.mark.parametrize("command", ["demo", "attribute"])
def test_report_refuses_a_result_file_of_an_attribution_folder_that_is_not_the_one_the_run_wrote(tmp_path, rng,
                                                                                                 command):
    """aumann report re-rendered an ``aumann demo --out`` / ``aumann attribute`` folder as its files were: a feature
    value edited by hand in top_agents.csv (z_a 6.08 -> 999.5) was shown in the page's who-table, exit 0. The
    manifest records every result file's SHA-256, as it does for an ``aumann run`` folder's tables; one that is not
    the file the run wrote is now refused by name, with the command that rewrites it."""
    out = tmp_path / "out"
    if command == "demo":
        assert main(["demo", "--agents", "40", "--steps", "3", "--out", str(out), "--static"]) == 0
    else:
        src = Panel(np.abs(rng.normal(size=(3, 30, 3))), features=["a", "b", "c"],
                    groups={"tier": ["top"] * 5 + ["tail"] * 25}).save(tmp_path / "panel.npz")
        assert main(["attribute", str(src), "--indicator", "heat", "--out", str(out), "--static"]) == 0
    assert main(["report", str(out), "--static"]) == 0  # as written: the page is drawn
    lines = (out / "top_agents.csv").read_text().splitlines()
    first = lines[1].split(",")
    first[-2] = "999.5"
    (out / "top_agents.csv").write_text("\n".join([lines[0], ",".join(first), *lines[2:]]) + "\n")
    with pytest.raises(ReportError, match=rf"table '.*top_agents\.csv' is not the one the run wrote: .*`aumann "
                                          rf"{command}` command"):
        render_report(out, interactive=False, plots=False)
    (out / "top_agents.csv").write_text("\n".join(lines) + "\n")  # restored: drawn again
    summary = json.loads((out / "summary.json").read_text())
    (out / "summary.json").write_text(json.dumps({**summary, "synthetic": not summary["synthetic"]}))
    with pytest.raises(ReportError, match=r"result file '.*summary\.json' is not the one the run wrote"):
        render_report(out, interactive=False, plots=False)
