"""aumann.io.output_check: the one answer to "did aumann write this file, and is it unchanged?", which the stale-output
rule (check_stale, check_outputs) and the trace page's deletion section (_changed_since) both use."""

from __future__ import annotations

import os
import stat
import threading

import pytest

from aumann.errors import OutputError
from aumann.io import (
    OUTPUTS_JOURNAL,
    check_outputs,
    check_stale,
    journal_output,
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
    import os

    import numpy as np

    import aumann.io as io

    monkeypatch.setattr(io, "HOT_DIGEST_FROM", 0)
    read = []  # every opening of the archive to read it, whichever module of aumann.io does it (confined reads go
    real = os.open  # through os.open; a spy on aumann.io.sha256_file missed aumann.io.outputs' own name for it)

    def spy(path, flags, *a, **k):
        if "attribution" in os.fspath(path) and flags & (os.O_WRONLY | os.O_RDWR) == 0:
            read.append(os.path.basename(path))
        return real(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", spy)
    with io.journaled(tmp_path):
        io.write_npz(tmp_path / "attribution.npz", {"phi": np.arange(1000.0)})
    assert read == []
    want = hashlib.sha256((tmp_path / "attribution.npz").read_bytes()).hexdigest()
    assert io.recorded_outputs(tmp_path).digests["attribution.npz"] == {want}
    assert read == [] and not any("attribution" in k and k.endswith(".tmp") for k in io._DIGESTS)


def _bytes_written() -> int | None:
    try:
        with open("/proc/self/io") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("wchar"))
    except (OSError, StopIteration):
        return None


def test_the_journal_grows_by_one_record_per_file(tmp_path):
    # the journal was rewritten whole for every file written: k outputs wrote O(k^2) bytes (10^4 CSVs: 5 GB and
    # 439 s where the writes alone take 6 s); each output now appends one line
    if _bytes_written() is None:
        pytest.skip("no /proc/self/io to count the bytes written")
    k = 400
    before = _bytes_written()
    with journaled(tmp_path):
        for i in range(k):
            write_text(tmp_path / "runs" / f"run-{i:04d}.csv", "a\n1\n")
    written = _bytes_written() - before
    journal = (tmp_path / OUTPUTS_JOURNAL).stat().st_size
    assert journal < 120 * k  # one short line per file
    assert written < 10 * (journal + 4 * k), (written, journal)  # rewritten whole each time: ~k/2 journals
    digests = recorded_outputs(tmp_path).digests
    assert len(digests) == k and digests["runs/run-0123.csv"] == {sha256_bytes(b"a\n1\n")}


def test_a_torn_last_record_is_skipped_and_the_next_one_starts_on_its_own_line(tmp_path):
    """A crash while a record is appended leaves a torn last line: the records before it are read, and a record added
    after it is not glued to it (which would lose that one too)."""
    from aumann.io import journal_output

    a, b, c = (sha256_bytes(x) for x in (b"a", b"b", b"c"))
    journal_output(tmp_path, "a.csv", a)
    with open(tmp_path / OUTPUTS_JOURNAL, "ab") as fh:
        fh.write(f'["b.csv","{b[:20]}'.encode())  # killed mid-line
    assert recorded_outputs(tmp_path).digests == {"a.csv": {a}}
    journal_output(tmp_path, "c.csv", c)
    assert recorded_outputs(tmp_path).digests == {"a.csv": {a}, "c.csv": {c}}
    # a complete last record without its line end is one aumann wrote whole: it counts
    (tmp_path / OUTPUTS_JOURNAL).write_bytes(f'["a.csv", "{a}"]\n["b.csv", "{b}"]'.encode())
    assert recorded_outputs(tmp_path).digests == {"a.csv": {a}, "b.csv": {b}}


def test_a_journal_in_the_earlier_format_is_read_and_converted(tmp_path):
    """A folder an earlier aumann journaled (one JSON object {"outputs_sha256": {name: [SHA-256, ...]}}) keeps its
    records: they are read, and kept when the first record is added in the line format."""
    import json

    from aumann.io import journal_output

    a1, a2, b = (sha256_bytes(x) for x in (b"a1", b"a2", b"b"))
    (tmp_path / OUTPUTS_JOURNAL).write_text(json.dumps({"outputs_sha256": {"a.csv": [a1, a2], "sub/b.npz": [b]}},
                                                       indent=1) + "\n")
    want = {"a.csv": {a1, a2}, "sub/b.npz": {b}}
    assert recorded_outputs(tmp_path).digests == want
    check_outputs(tmp_path, ["sub/b.npz"])  # absent: fine
    c = sha256_bytes(b"c")
    journal_output(tmp_path, "c.csv", c)
    assert recorded_outputs(tmp_path).digests == {**want, "c.csv": {c}}
    assert (tmp_path / OUTPUTS_JOURNAL).read_text().startswith("[")  # converted once, then appended to


def test_a_journal_in_the_earlier_format_followed_by_record_lines_keeps_both(tmp_path):
    """An earlier aumann's journal (one JSON object) with record lines after it (appended by hand, or by a writer
    that did not convert it) was read as the object alone, which is no JSON with lines after it: every record of
    both was lost (the files they vouch for refused as yours), and the next record added converted it to an empty
    journal. Both are read, and kept when it is converted."""
    import json

    from aumann.io import journal_output

    a, b, c, d = (sha256_bytes(x) for x in (b"a", b"b", b"c", b"d"))
    old = json.dumps({"outputs_sha256": {"a.csv": [a], "sub/b.npz": [b]}}, indent=1)
    (tmp_path / OUTPUTS_JOURNAL).write_text(old + "\n" + json.dumps(["c.csv", c]) + "\n"
                                            + json.dumps(["a.csv", d]) + "\n")
    want = {"a.csv": {a, d}, "sub/b.npz": {b}, "c.csv": {c}}
    assert recorded_outputs(tmp_path).digests == want
    for name, data in (("a.csv", b"a"), ("c.csv", b"c")):
        (tmp_path / name).write_bytes(data)
    check_outputs(tmp_path, ["a.csv", "c.csv"])  # both vouched for
    e = sha256_bytes(b"e")
    journal_output(tmp_path, "e.csv", e)  # converted: nothing lost
    assert recorded_outputs(tmp_path).digests == {**want, "e.csv": {e}}
    assert (tmp_path / OUTPUTS_JOURNAL).read_text().startswith("[")
    # the object on one line, no line end between it and the first record line; and a damaged object keeps the lines
    (tmp_path / OUTPUTS_JOURNAL).write_text(json.dumps({"outputs_sha256": {"a.csv": [a]}}) + json.dumps(["c.csv", c])
                                            + "\n")
    assert recorded_outputs(tmp_path).digests == {"a.csv": {a}, "c.csv": {c}}
    (tmp_path / OUTPUTS_JOURNAL).write_text('{"outputs_sha256": {"a.csv": [\n' + json.dumps(["c.csv", c]) + "\n")
    assert recorded_outputs(tmp_path).digests == {"c.csv": {c}}


def test_a_link_in_place_of_the_journal_is_replaced_not_written_through(tmp_path):
    from aumann.io import journal_output

    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    root = tmp_path / "out"
    root.mkdir()
    (root / OUTPUTS_JOURNAL).symlink_to(outside)
    journal_output(root, "a.csv", sha256_bytes(b"a"))
    assert outside.read_text() == "keep\n" and not (root / OUTPUTS_JOURNAL).is_symlink()
    assert recorded_outputs(root).digests == {"a.csv": {sha256_bytes(b"a")}}
    (root / OUTPUTS_JOURNAL).unlink()
    (root / OUTPUTS_JOURNAL).mkdir()
    with pytest.raises(OutputError, match="directory"):
        journal_output(root, "a.csv", sha256_bytes(b"a"))


def test_a_journaled_file_is_hashed_once_for_the_journal_and_the_manifest(tmp_path, monkeypatch):
    # a small output was hashed for the journal as it was written, and read again for the manifest's outputs_sha256
    import os

    import aumann.io as io

    reads = []  # every opening of the table to read it, whichever function of aumann.io does it
    real = os.open

    def spy(path, flags, *a, **k):
        if "table.csv" in os.fspath(path) and flags & (os.O_WRONLY | os.O_RDWR) == 0:
            reads.append(os.path.basename(path))
        return real(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", spy)
    with journaled(tmp_path):
        write_text(tmp_path / "table.csv", "a\n1\n")
    assert io.file_digests(tmp_path, ["table.csv"]) == {"table.csv": sha256_bytes(b"a\n1\n")}
    assert len(reads) == 1 and reads[0].endswith(".tmp.csv")  # the journal's read of the file about to be renamed


def test_a_remembered_digest_never_outlives_an_edit_of_the_file(tmp_path):
    """The digest the journal took describes the file only while it is unchanged: an edit in place, even one of the
    same size that puts the modification time back (cp -p, touch -r), and a replacement are read again."""
    import os
    import time

    import aumann.io as io

    with journaled(tmp_path):
        write_text(tmp_path / "a.csv", "a\n1\n")
        write_text(tmp_path / "b.csv", "b\n2\n")
    st = os.stat(tmp_path / "a.csv")
    time.sleep(0.05)  # an edit by hand comes later than the write
    with open(tmp_path / "a.csv", "r+b") as fh:  # same size, same inode
        fh.write(b"x\n9\n")
    os.utime(tmp_path / "a.csv", ns=(st.st_atime_ns, st.st_mtime_ns))  # the modification time put back
    assert io.file_digests(tmp_path, ["a.csv"]) == {"a.csv": sha256_bytes(b"x\n9\n")}
    os.replace(tmp_path / "a.csv", tmp_path / "b.csv")  # another file in its place
    assert io.file_digests(tmp_path, ["b.csv"]) == {"b.csv": sha256_bytes(b"x\n9\n")}


def test_the_journal_makes_its_folder_as_an_atomic_write_did(tmp_path):
    from aumann.io import journal_output

    root = tmp_path / "new" / "out"
    journal_output(root, "a.csv", sha256_bytes(b"a"))
    assert recorded_outputs(root).digests == {"a.csv": {sha256_bytes(b"a")}}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("name", [OUTPUTS_JOURNAL, "manifest.json"])
def test_a_fifo_with_the_journals_or_the_manifests_name_is_refused_not_waited_on(tmp_path, name):
    # opening a FIFO to read waits for a writer: every command into the folder hung before writing anything
    # (aumann demo --out on such a folder never returned); now it is refused, typed, and kept
    os.mkfifo(tmp_path / name)
    unblocked, done = threading.Event(), threading.Event()

    def writer() -> None:  # opens the FIFO's other end whenever a reader has waited on it for a second
        while not done.wait(1):
            try:
                os.close(os.open(tmp_path / name, os.O_WRONLY | os.O_NONBLOCK))
                unblocked.set()
            except OSError:  # no reader waiting (ENXIO): nothing hung
                pass

    threading.Thread(target=writer, daemon=True).start()
    try:
        with pytest.raises(OutputError, match=r"manifest\.json|not a regular file"):
            check_outputs(tmp_path, ["table.csv", "manifest.json"])
        assert recorded_outputs(tmp_path).digests == {}
    finally:
        done.set()
    assert not unblocked.is_set()
    assert stat.S_ISFIFO(os.lstat(tmp_path / name).st_mode)  # kept
    if name == OUTPUTS_JOURNAL:
        with pytest.raises(OutputError, match="not a regular file"):
            journal_output(tmp_path, "table.csv", "0" * 64)
