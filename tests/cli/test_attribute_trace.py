"""``aumann attribute --trace``: end to end on every sample, the Python API giving the same Attribution, the
report's trace sections (masking game only, and why), spec validation, and the docs' commands."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest

from aumann.attribution import Attribution, AumannShapley, attribute, indicators
from aumann.cli import main
from aumann.data.traces import TraceSpec, default_spec, load_spec, read_trace
from aumann.errors import TraceSpecError

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "traces.md"

CASES = {
    "oasis": ([str(DATA / "oasis_twitter.db")], {}),
    "oasis_reddit": ([str(DATA / "oasis_reddit.db"), "--bin", "1h"], {"bin": "1h"}),
    "agentsociety2": ([str(DATA / "agentsociety2_run" / "trace")], {}),
    "concordia": ([str(DATA / "concordia_log.json")], {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_equals_python_api(tmp_path, name):
    args, kw = CASES[name]
    out = tmp_path / name
    cli = ["attribute", "--trace", args[0], *args[1:], "--indicator", "lin", "--out", str(out), "--static"]
    assert main(cli) == 0
    for f in ("attribution.npz", "panel.npz", "trace_report.json", "deletion_masking.json", "deletion_masking.csv",
              "top_agents.csv", "summary.json", "manifest.json", "report.html", "report.md"):
        assert (out / f).is_file(), f
    panel = read_trace(args[0], **kw).panel
    api = attribute(indicators.get("lin"), panel, method=AumannShapley(steps=30))
    got = Attribution.load(out / "attribution.npz")
    np.testing.assert_array_equal(got.phi, api.phi)
    np.testing.assert_array_equal(got.delta_v, api.delta_v)
    assert got.agent_ids.tolist() == api.agent_ids.tolist()
    md = (out / "report.md").read_text()
    assert "## Who drove it" in md and "## When did it turn" in md
    assert "Deletion: the masking game only." in md and "A log cannot be re-simulated" in md
    assert "What the trace held" in md
    study = json.loads((out / "deletion_masking.json").read_text())
    assert study["game"] == "masking" and len(study["aumann_shapley"]["relative_drop"]) == study["k_del"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trace"]["format"] == json.loads((out / "trace_report.json").read_text())["format"]


def test_cli_table_with_spec_and_features(tmp_path):
    spec = tmp_path / "spec.toml"
    spec.write_text('format = "table"\n[agent]\nfield = "agent"\n[step]\nfield = "tick"\n[action]\nfield = "action"\n'
                    '[[features]]\nkind = "count_each"\n[[features]]\nkind = "sum"\nname = "amount"\n'
                    'field = "amount"\n')
    out = tmp_path / "o"
    assert main(["attribute", "--trace", str(DATA / "events.csv"), "--spec", str(spec), "--features", "amount",
                 "--indicator", "gini", "--out", str(out), "--no-report"]) == 0
    panel = read_trace(DATA / "events.csv", spec).panel.select_features(["amount"])
    api = attribute(indicators.get("gini"), panel, method=AumannShapley(steps=30))
    np.testing.assert_allclose(Attribution.load(out / "attribution.npz").phi, api.phi, rtol=0, atol=0)
    # the table has no default spec: refused with a message naming --spec
    assert main(["attribute", "--trace", str(DATA / "events.csv"), "--indicator", "lin", "--out",
                 str(tmp_path / "o2")]) == 2


def test_cli_refusals(tmp_path, capsys):
    assert main(["attribute", "--indicator", "lin", "--out", str(tmp_path / "a")]) == 2
    assert main(["attribute", str(DATA / "oasis_twitter.db"), "--trace", str(DATA / "oasis_twitter.db"),
                 "--indicator", "lin", "--out", str(tmp_path / "b")]) == 2
    assert main(["attribute", "--trace", str(DATA / "oasis_reddit.db"), "--indicator", "lin",
                 "--out", str(tmp_path / "c")]) == 2
    assert "--bin 1h" in capsys.readouterr().err
    assert main(["attribute", "--trace", str(DATA / "oasis_twitter.db"), "--features", "nope", "--indicator", "lin",
                 "--out", str(tmp_path / "d")]) == 2


@pytest.mark.parametrize(("features", "says"), [("", "names no feature"), (",,", "names no feature"),
                                               (" , ", "names no feature"),
                                               ("post,like_post, post", "names ['post'] more than once")])
def test_cli_features_naming_nothing_is_refused_before_the_trace_is_read(tmp_path, capsys, features, says):
    # before: the whole trace was read, then "--features ',,': nothing not among the trace's features [...]", or
    # for a feature named twice "DuplicateIdError: feature names must be unique"
    assert main(["attribute", "--trace", str(DATA / "oasis_twitter.db"), "--features", features, "--indicator", "lin",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "record(s) read" not in err


def test_cli_real_people_opaque_ids_and_tiers(tmp_path):
    out = tmp_path / "real"
    assert main(["attribute", "--trace", str(DATA / "concordia_log.json"), "--real-people", "--indicator", "lin",
                 "--out", str(out), "--static"]) == 0
    att = Attribution.load(out / "attribution.npz")
    assert att.agent_ids.tolist() == [0, 1, 2, 3] and set(att.groups["tier"]) <= {"top", "mid", "tail"}
    for f in out.iterdir():
        if f.suffix in (".csv", ".json", ".md", ".html"):
            assert "Alice" not in f.read_text(errors="ignore"), f.name
    assert not (out / "identifiers.csv").exists()
    out2 = tmp_path / "real2"
    assert main(["attribute", "--trace", str(DATA / "concordia_log.json"), "--real-people", "--export-identifiers",
                 "--indicator", "lin", "--out", str(out2), "--no-report"]) == 0
    assert "Alice" in (out2 / "identifiers.csv").read_text()


def test_cli_skip_bad_counts(tmp_path):
    d = tmp_path / "trace"
    shutil.copytree(DATA / "agentsociety2_run" / "trace", d)
    f = sorted(d.glob("*.jsonl"))[0]
    f.write_text(f.read_text() + "{not json\n")
    assert main(["attribute", "--trace", str(d), "--indicator", "lin", "--out", str(tmp_path / "x")]) == 2
    assert main(["attribute", "--trace", str(d), "--skip-bad", "--indicator", "lin", "--out", str(tmp_path / "y"),
                 "--no-report"]) == 0
    rep = json.loads((tmp_path / "y" / "trace_report.json").read_text())
    assert rep["skipped"]["line is not a JSON object"] == 1


# ---------------------------------------------------------------- spec validation
@pytest.mark.parametrize(("data", "match"), [
    ({"agent": {"field": "a"}, "step": {"field": "s"}, "colour": 1}, "colour"),
    ({"agent": {"field": "a"}, "step": {"field": "s", "bin": "1 fortnight"}}, "duration"),
    ({"agent": {"field": "a"}, "step": {"field": "s", "bin": -3}}, "positive"),
    ({"agent": {"field": "a"}, "step": {"field": "s"}}, "action"),  # default count_each needs [action]
    ({"agent": {"field": "a"}, "step": {"field": "s"}, "features": [{"kind": "sum"}]}, "needs field"),
    ({"agent": {"field": "a"}, "step": {"field": "s"}, "features": [{"kind": "exposure", "of": "x"}]}, "edges"),
    ({"agent": {"field": "a"}, "step": {"field": "s"}, "features": [{"kind": "count", "name": "n"},
                                                                     {"kind": "count", "name": "n"}]}, "distinct"),
    ({"agent": {"field": "a//b"}, "step": {"field": "s"}, "features": [{"kind": "count"}]}, "empty key"),
    ({"agent": {"field": "a"}, "step": {"field": "s", "start": 5, "stop": 2}, "features": [{"kind": "count"}]},
     "before"),
    ({"agent": {"field": "a"}, "step": {"field": "s"}, "features": [{"kind": "count"}],
      "alive": {"inactive_after": 0}}, "inactive_after"),
    ({"agent": {"field": "a"}, "step": {"field": "s"}, "action": {"field": "x", "match": {"a": "("}},
      "features": [{"kind": "count"}]}, "regular expression"),
])
def test_spec_validation(data, match):
    with pytest.raises(TraceSpecError, match=match):
        load_spec(data)


def test_default_specs_and_toml(tmp_path):
    for fmt in ("oasis", "otel", "concordia"):
        assert isinstance(default_spec(fmt), TraceSpec) and default_spec(fmt).format == fmt
    with pytest.raises(TraceSpecError, match="--spec"):
        default_spec("table")
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent\nfield = 1")
    with pytest.raises(TraceSpecError, match=r"bad\.toml"):
        load_spec(bad)
    with pytest.raises(TraceSpecError, match="is for format 'otel'"):
        read_trace(DATA / "oasis_twitter.db", {"format": "otel", "agent": {"field": "user_id"},
                                               "step": {"field": "created_at"}, "features": [{"kind": "count"}]},
                   format="oasis")


# ---------------------------------------------------------------- the docs' commands run as written
def test_docs_commands_run(tmp_path, monkeypatch):
    """Every ``aumann attribute --trace`` line in docs/traces.md runs (from the repository root) and succeeds."""
    text = DOCS.read_text()
    cmds = re.findall(r"^\$ (aumann attribute --trace .+)$", text, flags=re.M)
    assert len(cmds) >= 4
    monkeypatch.chdir(DOCS.parents[1])
    for i, cmd in enumerate(cmds):
        argv = shlex.split(cmd)[1:]
        j = argv.index("--out")
        argv[j + 1] = str(tmp_path / f"run{i}")
        if i:  # the commands as written; reports are rendered by the tests above (and the first command here)
            argv.append("--no-report")
        assert main(argv) == 0, cmd


def test_cli_out_among_the_trace_files_is_refused_before_the_read(tmp_path, capsys):
    """--out equal to the trace's folder wrote phi_by_step.csv, summary.json ... among its shards: the input was
    changed, and the same command then failed on 'files of one kind' (or read the results as spans); an output
    named like a trace file replaced it."""
    d = tmp_path / "trace"
    shutil.copytree(DATA / "agentsociety2_run" / "trace", d)
    before = sorted(p.name for p in d.iterdir())
    link = tmp_path / "link"
    link.symlink_to(d)
    for out in (d, link, tmp_path / "trace" / "."):
        assert main(["attribute", "--trace", str(d), "--indicator", "lin", "--out", str(out), "--no-report"]) == 2
        err = capsys.readouterr().err
        assert "is the folder the trace" in err and "record(s) read" not in err
    glob = str(d / "*.jsonl")
    assert main(["attribute", "--trace", glob, "--trace-format", "otel", "--indicator", "lin", "--out", str(d),
                 "--no-report"]) == 2
    assert "is the folder the trace" in capsys.readouterr().err
    assert sorted(p.name for p in d.iterdir()) == before
    t = tmp_path / "summary.json"  # a Concordia log named like an output, --out its own folder
    shutil.copy(DATA / "concordia_log.json", t)
    assert main(["attribute", "--trace", str(t), "--indicator", "lin", "--out", str(tmp_path), "--no-report"]) == 2
    assert "would replace the trace" in capsys.readouterr().err
    assert t.read_bytes() == (DATA / "concordia_log.json").read_bytes()
    assert main(["attribute", "--trace", str(d), "--indicator", "lin", "--out", str(d / "results"),
                 "--no-report"]) == 0  # a subfolder is apart from the shards
    assert main(["attribute", "--trace", str(d), "--indicator", "lin", "--out", str(d / "results2"),
                 "--no-report"]) == 0  # and the trace reads the same the next time


@pytest.mark.parametrize(("flags", "says"), [(["--indicator", "nope"], "unknown indicator 'nope'"),
                                             (["--indicator", "lin", "--baseline", "bogus"], "--baseline 'bogus'"),
                                             (["--indicator", "lin", "--out-is-file"], "is an existing file")])
def test_cli_flags_and_out_are_checked_before_the_trace_is_read(tmp_path, capsys, monkeypatch, flags, says):
    """An unknown --indicator or --baseline, or an --out that is a file, was refused only after the whole trace was
    read (minutes on a large log: 250-550 s per 10⁷ events in docs/traces.md)."""
    import aumann.data.traces as traces

    def never(*a, **k):
        raise AssertionError("the trace was read")

    monkeypatch.setattr(traces, "read_trace", never)
    out = tmp_path / "o"
    if "--out-is-file" in flags:
        flags = [x for x in flags if x != "--out-is-file"]
        out.write_text("")
    assert main(["attribute", "--trace", str(DATA / "oasis_twitter.db"), *flags, "--out", str(out)]) == 2
    assert says in capsys.readouterr().err


def test_cli_report_names_agent_ids_written_two_ways(tmp_path):
    f = tmp_path / "ev.jsonl"
    f.write_text('{"agent": 1, "tick": 0, "amount": 1}\n{"agent": "1", "tick": 0, "amount": 2}\n'
                 '{"agent": 2, "tick": 1, "amount": 3}\n')
    spec = tmp_path / "spec.toml"
    spec.write_text('format = "table"\n[agent]\nfield = "agent"\n[step]\nfield = "tick"\n[[features]]\nkind = "sum"\n'
                    'name = "amount"\nfield = "amount"\n')
    out = tmp_path / "o"
    assert main(["attribute", "--trace", str(f), "--spec", str(spec), "--indicator", "lin", "--out", str(out),
                 "--static"]) == 0
    assert json.loads((out / "trace_report.json").read_text())["merged_ids"] == 1
    assert "ids merged: 1 written both as a number and as text" in (out / "report.md").read_text()


@pytest.mark.parametrize("how", ["spec", "flag"])
def test_cli_real_people_spec_ids_are_withheld_from_the_outputs(tmp_path, how):
    """With real people the spec's own id lists ([agent] exclude, a [where] list on the agent field) were written
    as they are into trace_report.json and manifest.json, real handles beside the opaque indices."""
    f = tmp_path / "ev.jsonl"
    f.write_text("".join(json.dumps({"agent": a, "tick": t, "amount": v}) + "\n" for a, t, v in
                         [("alice.real", 0, 1), ("bob.real", 0, 2), ("@carol.example", 1, 3), ("bob.real", 1, 4),
                          ("dave.real", 1, 5)]))
    spec = tmp_path / "spec.toml"
    spec.write_text('format = "table"\n' + ('real_people = true\n' if how == "spec" else "")
                    + '[where]\nagent = ["alice.real", "bob.real", "@carol.example"]\n'
                    '[agent]\nfield = "agent"\nexclude = ["@carol.example"]\n[step]\nfield = "tick"\n'
                    '[[features]]\nkind = "sum"\nname = "amount"\nfield = "amount"\n')
    out = tmp_path / "o"
    flags = ["--real-people"] if how == "flag" else []
    assert main(["attribute", "--trace", str(f), "--spec", str(spec), *flags, "--indicator", "lin", "--out", str(out),
                 "--static"]) == 0
    for p in out.iterdir():
        text = p.read_bytes()
        for real in (b"alice", b"bob", b"carol", b"dave"):
            assert real not in text, (p.name, real)
    rep = json.loads((out / "trace_report.json").read_text())
    assert rep["spec"]["agent"]["exclude"] == ["<withheld: real people>"] and len(rep["spec"]["where"]["agent"]) == 3
    assert rep["filtered"] == {"agent not in where": 1, "agent excluded": 1}
    out2 = tmp_path / "o2"  # asked for: the ids leave with --export-identifiers, the spec as written too
    assert main(["attribute", "--trace", str(f), "--spec", str(spec), *flags, "--export-identifiers", "--indicator",
                 "lin", "--out", str(out2), "--no-report"]) == 0
    assert json.loads((out2 / "trace_report.json").read_text())["spec"]["agent"]["exclude"] == ["@carol.example"]


def test_cli_rerun_into_the_same_out_leaves_no_earlier_results(tmp_path):
    """Re-run into the same --out with --no-deletion, the report presented the earlier run's deletion study (its t*,
    its agents, its f) as this run's, and the earlier run's identifiers.csv (real names) stayed beside it."""
    out = tmp_path / "o"
    assert main(["attribute", "--trace", str(DATA / "concordia_log.json"), "--real-people", "--export-identifiers",
                 "--indicator", "lin", "--out", str(out), "--static"]) == 0
    assert (out / "identifiers.csv").is_file() and (out / "deletion_masking.json").is_file()
    assert main(["attribute", "--trace", str(DATA / "oasis_twitter.db"), "--no-deletion", "--indicator", "gini",
                 "--out", str(out), "--static"]) == 0
    assert not (out / "identifiers.csv").exists() and not (out / "deletion_masking.json").exists()
    assert not (out / "deletion_masking.csv").exists()
    md = (out / "report.md").read_text()
    assert "No deletion study" in md and "Masking deletion at t*" not in md
    # the panel path on that run's own panel.npz: the input stays, the trace's read report goes
    assert main(["attribute", str(out / "panel.npz"), "--indicator", "lin", "--out", str(out), "--no-report"]) == 0
    assert (out / "panel.npz").is_file() and not (out / "trace_report.json").exists()
    assert not (out / "report.md").exists()  # --no-report: the earlier report described another attribution
    mine = tmp_path / "mine"  # a folder no aumann attribute wrote keeps its files
    mine.mkdir()
    (mine / "report.md").write_text("my notes\n")
    (mine / "identifiers.csv").write_text("index,id\n")
    assert main(["attribute", "--trace", str(DATA / "oasis_twitter.db"), "--indicator", "lin", "--out", str(mine),
                 "--no-report", "--no-deletion"]) == 0
    assert (mine / "report.md").read_text() == "my notes\n" and (mine / "identifiers.csv").is_file()


def test_cli_rerun_keeps_a_file_of_your_own_with_an_outputs_name(tmp_path, capsys):
    """Stale removal went by name alone: a file of your own called identifiers.csv (or deletion_masking.json) put into
    an --out an earlier aumann attribute wrote was deleted by the next run. Now only the file that run recorded writing
    (name and SHA-256 in its manifest) is removed; yours is kept, and the run refuses to pass it off as its result."""
    out = tmp_path / "o"
    first = ["attribute", "--trace", str(DATA / "concordia_log.json"), "--real-people", "--export-identifiers",
             "--indicator", "lin", "--out", str(out), "--no-report"]
    assert main(first) == 0
    assert set(json.loads((out / "manifest.json").read_text())["outputs_sha256"]) >= {
        "deletion_masking.csv", "deletion_masking.json", "identifiers.csv", "trace_report.json"}
    (out / "identifiers.csv").write_text("index,id\n0,my own mapping\n")  # yours now, under the same name
    again = ["attribute", "--trace", str(DATA / "oasis_twitter.db"), "--no-deletion", "--indicator", "gini",
             "--out", str(out), "--static"]
    capsys.readouterr()
    assert main(again) == 2
    err = capsys.readouterr().err
    assert "OutputError" in err and "identifiers.csv" in err and "move or rename it" in err
    assert (out / "identifiers.csv").read_text() == "index,id\n0,my own mapping\n"
    assert (out / "deletion_masking.json").is_file()  # refused before anything went: the earlier run is whole
    assert not (out / "report.md").exists()  # no page presents the earlier deletion study as this run's
    (out / "identifiers.csv").rename(tmp_path / "mine.csv")  # moved away: the run goes on and removes its own files
    assert main(again) == 0
    assert not (out / "deletion_masking.json").exists() and "No deletion study" in (out / "report.md").read_text()


def test_cli_a_numeric_field_no_event_holds_is_flagged_not_silently_zero(tmp_path, capsys):
    """A misspelled field path (gen_ai.usage.output_token for ..._tokens) built a feature of zeros throughout; the
    only trace of it was a missing-value count among the others. Now the read's summary, trace_report.json and the
    report page say the field holds no value in any event."""
    spec = tmp_path / "spec.toml"
    spec.write_text('format = "otel"\n[agent]\nfield = "resource/agent.name"\n[step]\nfield = "attributes/sim.step"\n'
                    '[[features]]\nkind = "count"\nname = "calls"\n[[features]]\nkind = "sum"\nname = "tokens"\n'
                    'field = "attributes/gen_ai.usage.output_token"\n')
    out = tmp_path / "o"
    assert main(["attribute", "--trace", str(DATA / "otlp_spans.jsonl"), "--spec", str(spec), "--indicator", "lin",
                 "--out", str(out), "--static", "--no-deletion"]) == 0
    said = ("field 'attributes/gen_ai.usage.output_token' holds no value in any of the 15 event(s): feature(s) "
            "['tokens']")
    assert "".join(said.split()) in "".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert json.loads((out / "trace_report.json").read_text())["valueless_fields"] == [
        "attributes/gen_ai.usage.output_token"]
    assert "Field `attributes/gen_ai.usage.output_token` holds no value in any event used" in \
        (out / "report.md").read_text()
    spec.write_text(spec.read_text().replace("output_token\"", "output_tokens\""))
    assert main(["attribute", "--trace", str(DATA / "otlp_spans.jsonl"), "--spec", str(spec), "--indicator", "lin",
                 "--out", str(out), "--static", "--no-deletion"]) == 0
    assert json.loads((out / "trace_report.json").read_text())["valueless_fields"] == []
    assert "holds no value" not in (out / "report.md").read_text()
def test_cli_refuses_a_file_of_your_own_before_reading_and_attributing(tmp_path, capsys, monkeypatch):
    """The stale outputs of --out were checked only after the trace was read and the attribution computed (minutes on
    a large log), and then the command stopped: all that work, then "move or rename it". Now the check comes first;
    neither the read nor the attribution starts."""
    import aumann.attribution
    import aumann.data.traces

    out = tmp_path / "o"
    first = ["attribute", "--trace", str(DATA / "concordia_log.json"), "--indicator", "lin", "--out", str(out),
             "--no-report"]
    assert main(first) == 0
    (out / "deletion_masking.json").write_text('{"mine": true}\n')  # yours now, under an output's name
    work = []
    real_read, real_attribute = aumann.data.traces.read_trace, aumann.attribution.attribute
    monkeypatch.setattr(aumann.data.traces, "read_trace", lambda *a, **k: work.append("read") or real_read(*a, **k))
    monkeypatch.setattr(aumann.attribution, "attribute",
                        lambda *a, **k: work.append("attribute") or real_attribute(*a, **k))
    capsys.readouterr()
    assert main([*first, "--no-deletion"]) == 2
    err = capsys.readouterr().err
    assert "OutputError" in err and "deletion_masking.json" in err
    assert work == [] and (out / "deletion_masking.json").read_text() == '{"mine": true}\n'
    (out / "deletion_masking.json").unlink()  # gone: the same command reads, attributes and finishes
    assert main([*first, "--no-deletion"]) == 0 and work == ["read", "attribute"]


def test_the_report_shows_only_the_deletion_study_this_run_recorded(tmp_path):
    """In a folder of your own (no aumann manifest: nothing there is removed), `aumann attribute --trace --no-deletion`
    left your deletion_masking.json in place, and the report presented it as this run's masking deletion study.
    Now the page shows a deletion study only when this run's manifest records one, and only the file it wrote."""
    out = tmp_path / "mine"
    out.mkdir()
    own = {"why": "MY OWN STUDY", "step": 99, "aumann_shapley": {"deletion_auc": 0.123456}, "random": {}}
    (out / "deletion_masking.json").write_text(json.dumps(own))
    base = ["attribute", "--trace", str(DATA / "concordia_log.json"), "--indicator", "lin", "--out", str(out),
            "--static"]
    assert main([*base, "--no-deletion"]) == 0
    page = (out / "report.md").read_text()
    assert "MY OWN STUDY" not in page and "0.1235" not in page and "No deletion study (`--no-deletion`)" in page
    assert json.loads((out / "deletion_masking.json").read_text()) == own  # yours, kept as it was
    (out / "deletion_masking.json").unlink()
    assert main(base) == 0  # this run's own study is shown ...
    assert "Masking deletion at t*" in (out / "report.md").read_text()
    (out / "deletion_masking.json").write_text(json.dumps(own))  # ... but not a file put in its place since
    assert main(["report", str(out), "--static"]) == 0
    page = (out / "report.md").read_text()
    assert "MY OWN STUDY" not in page and "not the file the run wrote" in page
