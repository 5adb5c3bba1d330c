"""Hostile output journals (``.aumann-journal.json``): a journal with another name outside the folder (a hard link),
a huge journal, and records naming paths outside the folder. No command writes, removes or trusts a file outside the
output folder through the journal, and reading a journal costs time linear in its size."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from aumann.errors import OutputError
from aumann.io import (
    OUTPUTS_JOURNAL,
    check_outputs,
    journal_output,
    journaled,
    recorded_outputs,
    sha256_bytes,
    write_text,
)


def _digest(i: int) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def test_a_journal_hard_linked_to_a_file_outside_is_not_written_through(tmp_path):
    # journal_output appended to the journal in place: a hard link there (to ~/notes.txt, say) got every output's
    # record appended to that file outside the output folder (`aumann attribute --out` wrote 10 lines into it)
    outside = tmp_path / "notes.txt"
    outside.write_bytes(b"my notes\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / OUTPUTS_JOURNAL).hardlink_to(outside)
    with journaled(out):
        write_text(out / "summary.json", "{}")
    journal_output(out, "b.csv", sha256_bytes(b"b"))
    assert outside.read_bytes() == b"my notes\n"
    assert (out / OUTPUTS_JOURNAL).stat().st_nlink == 1
    assert recorded_outputs(out).digests == {"summary.json": {sha256_bytes(b"{}")}, "b.csv": {sha256_bytes(b"b")}}


def test_a_journal_shared_with_a_hard_linked_backup_keeps_its_records_and_leaves_the_backup(tmp_path):
    # `cp -al out backup` shares the journal's inode: the backup's copy is left as it was, and the folder's journal
    # keeps what it recorded
    out, backup = tmp_path / "out", tmp_path / "backup"
    out.mkdir()
    backup.mkdir()
    a = sha256_bytes(b"a")
    journal_output(out, "a.csv", a)
    (backup / OUTPUTS_JOURNAL).hardlink_to(out / OUTPUTS_JOURNAL)
    before = (backup / OUTPUTS_JOURNAL).read_bytes()
    journal_output(out, "b.csv", sha256_bytes(b"b"))
    assert (backup / OUTPUTS_JOURNAL).read_bytes() == before
    assert recorded_outputs(out).digests == {"a.csv": {a}, "b.csv": {sha256_bytes(b"b")}}


def _read_seconds(root, lines) -> float:
    (root / OUTPUTS_JOURNAL).write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    t0 = time.perf_counter()
    recorded_outputs(root)
    return time.perf_counter() - t0


def test_reading_a_journal_of_many_digests_of_one_name_is_linear(tmp_path):
    # each name's digests were a list searched once per record: n records of one name cost O(n^2) (40,000 lines,
    # 3 MB: 9.5 s; 10^6 lines: hours, every command into the folder hung); now as fast as n records of n names
    n = 50_000
    one, many = tmp_path / "one", tmp_path / "many"
    one.mkdir()
    many.mkdir()
    spread = _read_seconds(many, ([f"f{i}.csv", _digest(i)] for i in range(n)))
    same = _read_seconds(one, (["a.csv", _digest(i)] for i in range(n)))
    assert same < 3 * spread + 0.5, (same, spread)
    assert len(recorded_outputs(one).digests["a.csv"]) == n


def test_records_naming_paths_outside_the_folder_touch_nothing_there(tmp_path):
    # the journal's names are only looked up for the outputs a command writes: a record naming ../victim.txt or an
    # absolute path makes no command read, replace or remove that file, and a file of your own stays refused
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep")
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_bytes(b"mine")
    recs = [["../victim.txt", sha256_bytes(b"keep")], [str(victim), sha256_bytes(b"keep")],
            ["summary.json/../../victim.txt", sha256_bytes(b"keep")], ["a\x00b", _digest(1)], ["..", _digest(2)]]
    (out / OUTPUTS_JOURNAL).write_bytes("".join(json.dumps(r) + "\n" for r in recs).encode() + b'[1]\n{}\n"x"\n\xff\n')
    with pytest.raises(OutputError, match=r"summary\.json"):
        check_outputs(out, ["summary.json"])
    journal_output(out, "c.csv", _digest(3))
    assert victim.read_bytes() == b"keep"


@pytest.mark.parametrize("value", [5, None, True, {"a": 1}, [7, None], 1.5])
def test_a_manifest_digest_that_is_no_digest_is_a_changed_file_not_a_type_error(tmp_path, value):
    # the trace page asks output_check whether deletion_masking.json is the file the run wrote, with the manifest's
    # outputs_sha256 as written: a value 5 there raised TypeError ('int' object is not iterable), and `aumann report`
    # said only "result files are incomplete or from another version (TypeError: ...)"
    from aumann.studies.trace_sections import _changed_since

    (tmp_path / "deletion_masking.json").write_text("{}")
    manifest = {"outputs_sha256": {"deletion_masking.json": value}}
    got = _changed_since(tmp_path, manifest, "deletion_masking.json")
    if value is None:
        assert got is None  # recorded as nothing: an older aumann's manifest, which recorded no checksum of it
    else:
        assert got == "deletion_masking.json is not the file the run wrote (changed or replaced since)"


def test_many_records_are_journaled_in_one_flushed_append_and_none_twice(tmp_path, monkeypatch):
    import os

    from aumann.io import journal_outputs

    journal_output(tmp_path, "a.csv", _digest(0))
    syncs = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append(fd), real(fd))[1])
    recs = [(f"f{i}.csv", _digest(i)) for i in range(1_000)] + [("a.csv", _digest(0)), ("f1.csv", _digest(1))]
    journal_outputs(tmp_path, recs)
    assert len(syncs) == 1
    lines = (tmp_path / OUTPUTS_JOURNAL).read_text().splitlines()
    assert len(lines) == 1_001 == len(set(lines))
    journal_outputs(tmp_path, recs)  # all held already: nothing written
    assert len(syncs) == 1 and len((tmp_path / OUTPUTS_JOURNAL).read_text().splitlines()) == 1_001
    assert recorded_outputs(tmp_path).digests == {f"f{i}.csv": {_digest(i)} for i in range(1_000)} | {
        "a.csv": {_digest(0)}}


def test_a_run_stopped_by_its_budget_journals_no_record_twice(tmp_path):
    # the stopped run's manifest replaces the earlier one: what that recorded was journaled record by record, each a
    # line appended and flushed on its own, and with it every record the journal held already (the journal appended
    # to itself again at every stop)
    from aumann.simulators.llm import BudgetExceededError
    from tests.cli_run import invoke_run
    from tests.llm_loopback import LoopbackLLM
    from tests.scenarios.test_llm_runs import _cfg

    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    assert invoke_run("social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static") == 0
    for _ in range(2):
        with LoopbackLLM() as srv:
            with pytest.raises(BudgetExceededError):
                invoke_run("social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static",
                           "--backend", "openai", "--model", "m", "--base-url", srv.base_url, "--max-calls", "5")
    lines = (out / OUTPUTS_JOURNAL).read_text().splitlines()
    assert len(lines) == len(set(lines)), len(lines) - len(set(lines))
    assert {"report.md", "report.html"} <= set(recorded_outputs(out).digests)
