"""aumann.io.output_check: the one answer to "did aumann write this file, and is it unchanged?", which the stale-output
rule (check_stale, check_outputs) and the trace page's deletion section (_changed_since) both use."""

from __future__ import annotations

import pytest

from aumann.errors import OutputError
from aumann.io import (
    OUTPUTS_JOURNAL,
    check_outputs,
    check_stale,
    journaled,
    output_check,
    recorded_outputs,
    sha256_bytes,
    write_text,
)
from aumann.studies.trace_sections import _changed_since


def test_each_state_and_both_callers_agree(tmp_path):
    d = tmp_path
    write_text(d / "ours.json", "{}")
    (d / "changed.json").write_text("{}")
    (d / "mine.json").write_text("{}")
    (d / "folder.json").mkdir()
    (d / "link.json").symlink_to(d / "ours.json")
    rec = {n: sha256_bytes(b"{}") for n in ("ours.json", "link.json", "folder.json", "absent.json")}
    rec["changed.json"] = sha256_bytes(b"[]")
    states = {n: output_check(d / n, within=d, recorded=rec).state
              for n in ("ours.json", "changed.json", "mine.json", "folder.json", "link.json", "absent.json")}
    assert states == {"ours.json": "ours", "changed.json": "changed", "mine.json": "unrecorded",
                      "folder.json": "directory", "link.json": "link", "absent.json": "absent"}
    manifest = {"outputs_sha256": rec}
    assert _changed_since(d, manifest, "ours.json") is None and _changed_since(d, manifest, "mine.json") is None
    assert "not the file the run wrote" in _changed_since(d, manifest, "changed.json")
    assert _changed_since(d, manifest, "link.json") == "link.json is missing"
    for name in ("ours.json", "absent.json", "folder.json"):  # nothing to remove, or aumann's own
        check_stale(d / name, within=d, recorded=rec)
    for name in ("changed.json", "mine.json", "link.json"):
        with pytest.raises(OutputError, match="move or rename it"):
            check_stale(d / name, within=d, recorded=rec)


def test_a_journaled_write_is_recorded_before_it_is_in_place(tmp_path):
    """Within journaled(root) the journal holds a file's SHA-256 before the file is renamed into place; a file of
    your own with that name written since is still refused."""
    seen = []
    import aumann.io as io

    real = io.os.replace

    def spy(src, dst):
        if str(dst).endswith("table.csv"):
            seen.append(recorded_outputs(tmp_path).digests.get("table.csv"))
        return real(src, dst)

    io.os.replace = spy
    try:
        with journaled(tmp_path):
            write_text(tmp_path / "table.csv", "a\n1\n")
    finally:
        io.os.replace = real
    assert seen == [frozenset({sha256_bytes(b"a\n1\n")})]
    assert (tmp_path / OUTPUTS_JOURNAL).is_file()
    check_outputs(tmp_path, ["table.csv"])
    (tmp_path / "table.csv").write_text("mine\n")
    with pytest.raises(OutputError, match=r"table\.csv"):
        check_outputs(tmp_path, ["table.csv"])


def test_a_big_archive_is_journaled_with_the_digest_taken_as_it_was_written(tmp_path, monkeypatch):
    # write_npz hashes a big archive as it writes it (and drops its pages from the cache); the journal hashed the
    # file again, read back from the disk (GBs at 10^7 agents); it now takes that digest
    import hashlib

    import numpy as np

    import aumann.io as io

    monkeypatch.setattr(io, "HOT_DIGEST_FROM", 0)
    read = []
    real = io.sha256_file
    monkeypatch.setattr(io, "sha256_file", lambda p, **kw: read.append(str(p)) or real(p, **kw))
    with io.journaled(tmp_path):
        io.write_npz(tmp_path / "attribution.npz", {"phi": np.arange(1000.0)})
    want = hashlib.sha256((tmp_path / "attribution.npz").read_bytes()).hexdigest()
    assert io.recorded_outputs(tmp_path).digests["attribution.npz"] == {want}
    assert read == [] and not any("attribution" in k and k.endswith(".tmp") for k in io._DIGESTS)
