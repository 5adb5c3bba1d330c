"""``aumann attribute --trace ... --real-people``: the flag is the spec's ``real_people`` for the read itself, so that
no message of the read names a real id and the outputs record the run as one of real people."""

from __future__ import annotations

import json

import numpy as np
import pytest

from aumann.cli import main
from aumann.data.traces import read_trace
from aumann.errors import TraceError
from aumann.panel import Panel

SPEC = """format = "table"
[agent]
field = "agent"
[step]
field = "tick"
[[features]]
kind = "sum"
name = "amount"
field = "amount"
"""


def test_real_people_flag_keeps_ids_out_of_the_reads_messages(tmp_path, capsys):
    """An overflowing sum is named by its agent: with real_people = true in the spec as 'agent #0 (real_people: ids
    are not shown)', but with --real-people as "agent 'alice@example.com'" (the read did not know)."""
    trace = tmp_path / "t.csv"
    trace.write_text("agent,tick,amount\nalice@example.com,0,1e308\nalice@example.com,0,1e308\nbob@example.com,0,1\n")
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    with pytest.raises(TraceError, match=r"agent #0 \(real_people: ids are not shown\)") as exc:
        main(["--debug", "attribute", "--trace", str(trace), "--spec", str(spec), "--real-people", "--indicator", "lin",
              "--out", str(tmp_path / "out")])
    assert "alice" not in str(exc.value)
    with pytest.raises(TraceError, match=r"agent #0") as exc:
        read_trace(trace, str(spec), real_people=True)
    assert "alice" not in str(exc.value)


def test_real_people_flag_recorded_as_the_spec_records_it(tmp_path):
    """trace_report.json's spec and panel.npz's meta said real_people = false for a run with --real-people (true with
    real_people = true in the spec); the results are the same either way."""
    trace = tmp_path / "t.csv"
    trace.write_text("agent,tick,amount\nalice,0,1\nbob,0,2\nalice,1,3\ncarol,1,4\n")
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC)
    real = tmp_path / "real.toml"
    real.write_text("real_people = true\n" + SPEC)
    outs = {}
    for name, flags in (("flag", ["--spec", str(spec), "--real-people"]), ("spec", ["--spec", str(real)])):
        out = tmp_path / name
        assert main(["attribute", "--trace", str(trace), *flags, "--indicator", "gini", "--no-report", "--out",
                     str(out)]) == 0
        rep = json.loads((out / "trace_report.json").read_text())
        assert rep["spec"]["real_people"] is True
        panel = Panel.load(out / "panel.npz")
        assert panel.meta["real_people"] is True and panel.meta["identifiers"] == "opaque"
        assert panel.agent_ids.tolist() == [0, 1, 2]
        outs[name] = out
    for f in ("phi_by_step.csv", "top_agents.csv", "deletion_masking.json"):
        assert (outs["flag"] / f).read_bytes() == (outs["spec"] / f).read_bytes(), f
    r = read_trace(trace, str(spec), real_people=True)
    assert [m["id"] for m in r.identifiers] == ["alice", "bob", "carol"]
    np.testing.assert_array_equal(r.panel.agent_ids, [0, 1, 2])


def test_real_people_nul_ids_message_withholds_the_label(tmp_path):
    """Ids that differ only by a trailing NUL are refused; under real_people the message named the label ('a')."""
    trace = tmp_path / "t.csv"
    trace.write_text('agent,tick,amount\nsecret,0,1\n"secret\0",0,2\n')
    with pytest.raises(TraceError, match="cannot end with a NUL") as exc:
        read_trace(trace, {"format": "table", "agent": {"field": "agent"}, "step": {"field": "tick"},
                           "features": [{"kind": "count"}]}, real_people=True)
    assert "secret" not in str(exc.value)
