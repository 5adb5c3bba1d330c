"""Issue 22, the independent attack pass: regressions for what it found after the hardening work.

* numeric flags that bypassed the shared parser (``--workers 1e20`` overflowed the process pool's semaphore
  in a raw traceback; ``llm show --limit 1e30`` blamed the cache and told the user to delete it);
* the run directory's LLM files (response cache, usage ledger, server log) were opened through a symbolic
  link that leaves ``--out`` (the cache was written outside; the ledger's numbers from another file reached
  manifest.json);
* ``aumann llm show`` printed server replies raw, terminal control sequences included;
* ``aumann report`` drew a valid attribution of another run copied over this run's, and an edited run record,
  without the checksums resume checks;
* a URL fragment (``#token``) reached the manifest;
* report.md and matplotlib's missing-glyph warnings carried raw control characters from agent ids.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from aumann.cli import main
from aumann.errors import PathEscapeError, ReportError

RUN = ["run", "social-llm", "--agents", "6", "--steps", "3", "--runs", "1", "--permutations", "8", "--no-ablations",
       "--no-plots"]


# --------------------------------------------------------------------------- numeric flags through the shared parser
def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own exit
        return int(exc.code or 0)


@pytest.mark.parametrize("value", ["99999999999999999999", "-1", "nan", "1e400", "1000001"])
def test_workers_flag_is_bounded_like_its_config_key(value, tmp_path, capsys):
    rc = _exit_code([*RUN, "--workers", value, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "argument --workers" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_workers_flag_takes_the_bounds(tmp_path):
    from aumann.cli.executor_options import MAX_WORKERS, _workers

    assert _workers("0") == 0 and _workers(str(MAX_WORKERS)) == MAX_WORKERS and _workers("1e3") == 1000


@pytest.mark.parametrize("value", ["99999999999999999999999", "-5", "nan", "1.5"])
def test_llm_show_limit_is_checked_at_the_flag(value, tmp_path, capsys):
    (tmp_path / "llm-cache.sqlite").write_bytes(b"")
    rc = _exit_code(["llm", "show", str(tmp_path), "--limit", value])
    err = capsys.readouterr().err
    assert rc == 2 and "argument --limit" in err and "delete" not in err


# --------------------------------------------------------------------------- a small LLM run directory
@pytest.fixture(scope="module")
def hostile_llm_run(tmp_path_factory):
    """A finished one-run social-llm study whose server answers with terminal control sequences."""
    from tests.llm_loopback import LoopbackLLM

    out = tmp_path_factory.mktemp("hostile") / "run"
    reply = '\x1b[2J\x1b]0;PWNED\x07\u202eEVIL\x9b31m {"post": true}'
    with LoopbackLLM(lambda body: reply) as srv:
        rc = main([*RUN, "--backend", "openai", "--model", "m", "--base-url", srv.base_url, "--out", str(out)])
    assert rc == 0 and (out / "llm-cache.sqlite").is_file()
    return out


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f or c in "\u202e\u2066"]


def test_llm_show_never_prints_raw_control_characters(hostile_llm_run, capsys):
    assert main(["llm", "show", str(hostile_llm_run), "--limit", "3"]) == 0
    out = capsys.readouterr().out
    assert "PWNED" in out and "\\x1b[2J" in out and "\\u202e" in out and "\\x9b" in out
    assert _raw_controls(out) == []


def test_llm_show_json_lines_are_safe_and_parse_back_to_the_stored_reply(hostile_llm_run, capsys):
    assert main(["llm", "show", str(hostile_llm_run), "--limit", "2", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(_raw_controls(line) == [] for line in lines)
    rows = [json.loads(line) for line in lines]
    assert all("\x1b]0;PWNED\x07\u202eEVIL\x9b31m" in r["reply"] for r in rows)


@pytest.mark.parametrize("name", ["llm-cache.sqlite", "llm-cache.sqlite-wal", "llm-usage.json"])
def test_the_llm_files_of_a_run_directory_are_never_used_through_a_link_that_leaves(name, tmp_path, capsys):
    out, away = tmp_path / "out", tmp_path / "away"
    out.mkdir()
    away.mkdir()
    if name == "llm-usage.json":  # a ledger with other numbers: they used to reach manifest.json
        (away / name).write_text(json.dumps({"usage": {"calls": 987654}}))
    (out / name).symlink_to(away / name)
    before = sorted(p.name for p in away.iterdir())
    rc = main([*RUN, "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "PathEscapeError" in err and name in err
    assert sorted(p.name for p in away.iterdir()) == before  # nothing created or written outside
    assert not (out / "manifest.json").exists()


def test_llm_show_refuses_a_cache_linked_from_outside(hostile_llm_run, tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / "llm-cache.sqlite").symlink_to(hostile_llm_run / "llm-cache.sqlite")
    assert main(["llm", "show", str(d)]) == 2
    assert "PathEscapeError" in capsys.readouterr().err
    assert main(["llm", "show", str(d), "--cache", str(hostile_llm_run / "llm-cache.sqlite"), "--limit", "1"]) == 0


def test_run_dir_file_accepts_files_and_links_that_stay_inside(tmp_path):
    from aumann.cli.llm_options import run_dir_file

    (tmp_path / "real.sqlite").write_bytes(b"")
    (tmp_path / "llm-cache.sqlite").symlink_to(tmp_path / "real.sqlite")
    assert run_dir_file(tmp_path, "llm-cache.sqlite", "cache", sqlite=True) == tmp_path / "llm-cache.sqlite"
    (tmp_path / "llm-cache.sqlite-shm").symlink_to("/dev/null")
    with pytest.raises(PathEscapeError, match=r"llm-cache\.sqlite-shm"):
        run_dir_file(tmp_path, "llm-cache.sqlite", "cache", sqlite=True)


# --------------------------------------------------------------------------- the report verifies what it draws
def _swap(d: Path) -> None:
    shutil.copy(d / "attributions" / "run-001-aumann_shapley.npz", d / "attributions" / "run-000-aumann_shapley.npz")


def _link_inside(d: Path) -> None:
    (d / "attributions" / "run-000-aumann_shapley.npz").unlink()
    os.symlink("run-001-aumann_shapley.npz", d / "attributions" / "run-000-aumann_shapley.npz")


def _edit_record(d: Path) -> None:
    p = d / "runs" / "run-001.json"
    rec = json.loads(p.read_text())
    rec["t_star"] = 0 if rec["t_star"] else 1
    p.write_text(json.dumps(rec))


def _swap_panel(d: Path) -> None:
    from aumann.panel import Panel

    p = Panel.load(d / "panels" / "run-000.npz")
    Panel(np.asarray(p.values) + 1.0, features=p.features, agent_ids=p.agent_ids, steps=p.steps).save(
        d / "panels" / "run-000.npz")


@pytest.mark.parametrize("damage", [_swap, _link_inside, _edit_record, _swap_panel], ids=lambda f: f.__name__)
def test_the_report_refuses_what_resume_would_recompute(run_copy, damage):
    from aumann.studies import render_report

    _, _, d = run_copy
    render_report(d, interactive=False)  # the intact directory renders
    damage(d)
    with pytest.raises(ReportError, match="does not verify"):
        render_report(d, interactive=False)


def test_after_resume_the_damaged_directory_renders_again(run_copy):
    from aumann.studies import render_report, run_study

    sc, cfg, d = run_copy
    _swap(d)
    again = run_study(sc, cfg, out_dir=d)
    assert again.computed == 1
    render_report(d, interactive=False)


# --------------------------------------------------------------------------- secrets in a URL fragment
@pytest.mark.parametrize("url", ["https://h/v1#sk-abcdefSECRET", "http://u:p@h:1/v1?api_key=k#access_token=SECRET",
                                 "https://h/v1/#SECRET and more"])
def test_a_url_fragment_never_reaches_a_file(url):
    from aumann.manifest import build_manifest, redact_command, redact_url

    assert "SECRET" not in redact_url(url)
    assert "SECRET" not in json.dumps(build_manifest(redact_command(["aumann", "--base-url", url])))
    assert redact_url("https://h/v1#") == "https://h/v1#" and redact_url("see https://h/v1 x") == "see https://h/v1 x"


# --------------------------------------------------------------------------- control characters in ids
def test_report_md_shows_control_characters_of_ids_as_escapes_and_figures_do_not_warn_raw(tmp_path):
    from aumann.panel import Panel

    ids = ["a\x1b[2Jb", "bidi\u202eevil", "c\x9bd", "`x\x1by`", "plain"]
    rng = np.random.default_rng(0)
    Panel(rng.random((4, 5, 1)), agent_ids=ids, groups={"g": ["k\x1bz", "k\x1bz", "y", "y", "y"]}).save(
        tmp_path / "p.npz")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["attribute", str(tmp_path / "p.npz"), "--indicator", "heat", "--static", "--out",
                     str(tmp_path / "o")]) == 0
    assert not [w for w in seen if "Glyph" in str(w.message) and _raw_controls(str(w.message))]
    md = (tmp_path / "o" / "report.md").read_text()
    assert _raw_controls(md) == []
    assert "a\\\\x1b\\[2Jb" in md and "bidi\\\\u202eevil" in md and "\\`x\\\\x1by\\`" in md


def test_the_reports_own_code_spans_show_control_characters_as_escapes():
    from aumann.studies.page import _md_inline, md_escape

    assert _md_inline("run `a\x1b[2Jb` done") == "run `a\\x1b[2Jb` done"  # literal inside a code span
    assert md_escape("x\u202ey\x7f") == "x\\\\u202ey\\\\x7f"  # the escape's backslash is itself escaped
    assert md_escape("tab\there") == "tab\there"


# --------------------------------------------------------------------------- OpenTelemetry values that are arrays
def _span_line(agent: str, tick: dict) -> str:
    # a span id of each agent's own: two spans with the same ids and other content are refused as conflicting
    span = {"traceId": "ab" * 16, "spanId": (agent.encode().hex() + "cd" * 8)[:16], "name": "gen_ai.chat", "kind": 1,
            "startTimeUnixNano": "1740816000000000000", "endTimeUnixNano": "1740816000250000000",
            "attributes": [{"key": "agent.tick", "value": tick}]}
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [{"key": "agent.id",
                                                                       "value": {"stringValue": agent}}]},
                                          "scopeSpans": [{"scope": {"name": "s"}, "spans": [span]}]}]})


@pytest.mark.parametrize("tick", [{"arrayValue": {"values": [{"intValue": "1"}]}},
                                  {"arrayValue": {"values": [{"intValue": "1"}, {"intValue": "2"}]}},
                                  {"kvlistValue": {"values": [{"key": "a", "value": {"intValue": "1"}}]}}])
def test_an_otel_step_that_is_an_array_is_an_unusable_record_not_a_numpy_traceback(tick, tmp_path, capsys):
    f = tmp_path / "spans.jsonl"
    f.write_text(_span_line("alice", tick) + "\n" + _span_line("bob", {"intValue": "0"}) + "\n")
    rc = main(["attribute", "--trace", str(f), "--indicator", "lin", "--no-report", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "TraceRecordError" in err and "line 1" in err and "agent.tick" in err
    rc = main(["attribute", "--trace", str(f), "--indicator", "lin", "--no-report", "--skip-bad", "--out",
               str(tmp_path / "s")])
    report = json.loads((tmp_path / "s" / "trace_report.json").read_text())
    assert rc == 0 and report["n_skipped"] == 1 and report["events"] == 1 and report["agents"] == 1


def test_scalars_keeps_one_entry_per_record():
    from aumann.data.traces.events import _NESTED, _numeric, _scalars

    out = _scalars([[1], [2], 3, {"a": 1}, None, "x"])
    assert out.shape == (6,) and list(out[:4]) == [_NESTED, _NESTED, 3, _NESTED]
    vals, missing, bad, rounded = _numeric([[1.0], 2.0, None])
    assert bad.tolist() == [True, False, False] and missing.tolist() == [False, False, True] and vals[1] == 2.0
    assert rounded is None  # no integer past 2**53 here


# --------------------------------------------------------------------------- left open by the pass, closed after it
def test_two_identical_demo_runs_write_the_same_manifest_config(tmp_path):
    """The manifest recorded argparse's handler as '<function run at 0x...>': a memory address in a result."""
    for name in ("a", "b"):
        assert main(["demo", "--agents", "20", "--steps", "3", "--out", str(tmp_path / name)]) == 0
    cfg = [json.loads((tmp_path / n / "manifest.json").read_text())["config"] for n in ("a", "b")]
    assert "func" not in cfg[0] and " at 0x" not in json.dumps(cfg[0])
    assert {k: v for k, v in cfg[0].items() if k != "out"} == {k: v for k, v in cfg[1].items() if k != "out"}


@pytest.mark.parametrize("value", ["1e-320", "0.0001", "0"])
def test_an_llm_timeout_no_request_could_meet_is_refused(value, tmp_path, capsys):
    code = _exit_code([*RUN, "--out", str(tmp_path / "x"), "--backend", "openai", "--model", "m", "--base-url",
                       "http://127.0.0.1:9/v1", "--llm-timeout", value])
    err = capsys.readouterr().err
    assert code == 2 and "--llm-timeout" in err and "Traceback" not in err
