"""One writer per output folder (aumann.io.lock): two commands writing one --out at once interleaved their outputs,
manifests and journals (the first to finish removed the journal the other was still appending to, so the other's
files, left without a record, were refused as files of yours by the next run; the first's manifest recorded the
other's file under its own command). The second now stops at once, typed, naming the folder and the other command;
a lock left by a killed command blocks nobody; readers never look at the lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aumann.io.lock as lock_mod
from aumann.cli import main
from aumann.errors import OutputBusyError, OutputError
from aumann.io import (
    OUTPUTS_JOURNAL,
    OUTPUTS_LOCK,
    check_outputs,
    file_digests,
    journaled,
    lock_output_dir,
    output_lock,
    recorded_outputs,
    settle_journal,
    sha256_bytes,
    unlock_output_dir,
    write_text,
)
from aumann.manifest import write_manifest

pytestmark = pytest.mark.skipif(lock_mod.fcntl is None, reason="no flock here (Windows): no lock, by design")

_ROOT = Path(__file__).resolve().parents[1]

#: a second process: takes the folder's lock (as an aumann command does) or writes inside a journaled block, says
#: "ready" and waits until its stdin closes (or it is killed)
_HOLDER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from aumann.io import journaled, lock_output_dir, write_text
    root, how = Path(sys.argv[1]), sys.argv[2]
    if how == "lock":
        lock_output_dir(root, command="aumann run social-llm --out res")
        print("ready", flush=True)
        sys.stdin.read()
    else:
        with journaled(root):
            write_text(root / "b.csv", "b\\n2\\n")
            write_text(root / "shared.csv", "from B\\n")
            print("ready", flush=True)
            sys.stdin.read()
""")


@pytest.fixture
def holder():
    """Start a second process holding ``root``'s lock; the processes are ended (killed) at the test's end."""
    procs: list[subprocess.Popen] = []

    def start(root: Path, how: str = "lock") -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
        p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(root), how], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=_ROOT)
        procs.append(p)
        line = p.stdout.readline()
        assert line.strip() == b"ready", p.stderr.read().decode()
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(30)
        for fh in (p.stdin, p.stdout, p.stderr):
            fh.close()


def _kill(p: subprocess.Popen) -> None:
    os.kill(p.pid, signal.SIGKILL)
    p.wait(30)


def test_a_second_writer_is_refused_while_the_first_writes_and_its_journal_is_kept(tmp_path, holder):
    """The reproduced race: B writes b.csv and shared.csv inside its journaled block and is then killed before its
    manifest; A, meanwhile, wrote its outputs, its manifest and settled the journal. Before the lock, A's
    settle_journal removed B's records (the next run refused b.csv as a file of yours) and A's manifest recorded
    B's shared.csv under A's command. Now A stops at once, before writing anything; B's journal stays."""
    root = tmp_path / "res"
    root.mkdir()
    b = holder(root, "journaled")
    with pytest.raises(OutputBusyError) as err:
        with journaled(root):  # A's write phase, as demo / attribute / report write theirs
            write_text(root / "a.csv", "a\n1\n")
            write_text(root / "shared.csv", "from A\n")
            write_manifest(root, "aumann demo --seed 0", {}, extra={
                "outputs_complete": True, "outputs_sha256": file_digests(root, ["a.csv", "shared.csv"])})
    settle_journal(root)  # (what A did next; while B holds the lock the journal is B's to settle)
    msg = str(err.value)
    assert str(root) in msg and f"PID {b.pid}" in msg and "wait for it to finish, or choose another --out" in msg
    assert not (root / "a.csv").exists() and not (root / "manifest.json").exists()
    assert (root / "shared.csv").read_text() == "from B\n"
    _kill(b)  # B killed before its manifest
    assert (root / OUTPUTS_LOCK).exists()  # left behind by the killed command ...
    check_outputs(root, ["b.csv", "shared.csv", "manifest.json"])  # ... and B's files are still known as aumann's
    assert recorded_outputs(root).digests == {"b.csv": {sha256_bytes(b"b\n2\n")},
                                              "shared.csv": {sha256_bytes(b"from B\n")}}


def test_a_lock_left_by_a_killed_command_blocks_nobody(tmp_path, holder):
    root = tmp_path / "res"
    p = holder(root)
    with pytest.raises(OutputBusyError, match="aumann run social-llm --out res"):
        lock_output_dir(root)
    _kill(p)
    left = json.loads((root / OUTPUTS_LOCK).read_text())
    assert left["pid"] == p.pid  # the killed command's record is still there; the kernel released its flock
    # readers never look at it: the folder's records and checks are what they were
    assert recorded_outputs(root).digests == {}
    check_outputs(root, ["a.csv", "manifest.json"])
    with journaled(root):  # the next writer takes the lock at once
        write_text(root / "a.csv", "a\n")
        assert json.loads((root / OUTPUTS_LOCK).read_text())["pid"] == os.getpid()
    settle_journal(root)
    assert sorted(os.listdir(root)) == ["a.csv"]  # the lock file goes with the lock


def test_the_lock_is_reentrant_and_released_at_the_last_unlock(tmp_path, holder):
    root = tmp_path / "res"
    lock_output_dir(root, command="aumann demo --out res")
    try:
        with output_lock(root), journaled(root):  # the command's own blocks inside its lock
            write_text(root / "a.csv", "a\n")
        assert (root / OUTPUTS_LOCK).exists()  # still the command's
        settle_journal(root)  # held here: settled
        assert not (root / OUTPUTS_JOURNAL).exists()
        env = {**os.environ, "PYTHONPATH": str(_ROOT)}
        probe = ("import sys\nfrom aumann.io import lock_output_dir\nfrom aumann.errors import OutputBusyError\n"
                 "try:\n    lock_output_dir(sys.argv[1])\nexcept OutputBusyError as e:\n    print(e)\n")
        got = subprocess.run([sys.executable, "-c", probe, str(root)], capture_output=True, text=True, env=env,
                             check=True).stdout
        assert f"PID {os.getpid()}" in got and "aumann demo --out res" in got
    finally:
        unlock_output_dir(root)
    assert not (root / OUTPUTS_LOCK).exists()
    holder(root)  # another process may take it now


def test_settle_journal_leaves_the_journal_of_a_live_writer(tmp_path, holder):
    root = tmp_path / "res"
    holder(root, "journaled")
    settle_journal(root)  # a command not holding the lock (a library caller after its block)
    assert set(recorded_outputs(root).digests) == {"b.csv", "shared.csv"}


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_something_else_in_place_of_the_lock_file_is_refused_typed(tmp_path, kind):
    root = tmp_path / "res"
    root.mkdir()
    if kind == "directory":
        (root / OUTPUTS_LOCK).mkdir()
    else:
        os.mkfifo(root / OUTPUTS_LOCK)
    with pytest.raises(OutputError, match="lock file") as err:
        with journaled(root):
            pass
    assert not isinstance(err.value, OutputBusyError)
    assert "move or remove" in str(err.value)


def test_a_link_in_place_of_the_lock_file_is_replaced_not_followed(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("keep\n")
    root = tmp_path / "res"
    root.mkdir()
    (root / OUTPUTS_LOCK).symlink_to(outside)
    with journaled(root):
        write_text(root / "a.csv", "a\n")
    assert outside.read_text() == "keep\n" and not (root / OUTPUTS_LOCK).exists()


def test_without_flock_commands_write_as_before(tmp_path, monkeypatch):
    """Windows has no fcntl: no lock file, no refusal, the journal as before."""
    monkeypatch.setattr(lock_mod, "fcntl", None)
    root = tmp_path / "res"
    with journaled(root):
        write_text(root / "a.csv", "a\n")
        assert not (root / OUTPUTS_LOCK).exists()
    assert set(recorded_outputs(root).digests) == {"a.csv"}
    settle_journal(root)
    assert sorted(os.listdir(root)) == ["a.csv"]


def test_a_file_system_refusing_flock_writes_as_before_and_leaves_no_lock_file(tmp_path, monkeypatch):
    """Some network file systems refuse flock (ENOLCK): no lock, as without fcntl, and no empty lock file left."""
    import errno
    import types

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(lock_mod, "fcntl", types.SimpleNamespace(LOCK_EX=2, LOCK_NB=4, flock=refuse))
    root = tmp_path / "res"
    with journaled(root):
        write_text(root / "a.csv", "a\n")
    settle_journal(root)
    assert sorted(os.listdir(root)) == ["a.csv"]


def test_commands_into_a_folder_another_command_writes_stop_at_once(tmp_path, holder, capsys):
    """`aumann demo --out res` and `aumann report res` while `aumann run ... --out res` writes there: a one-line
    OutputBusyError before any work, the folder untouched; once that command is gone (killed), both go ahead and its
    stale lock file is neither an output nor in the manifest."""
    root = tmp_path / "res"
    p = holder(root)
    assert main(["demo", "--agents", "10", "--steps", "2", "--out", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aumann: error: OutputBusyError: ") and f"PID {p.pid}" in err and "--out" in err
    assert sorted(os.listdir(root)) == [OUTPUTS_LOCK]  # nothing written
    _kill(p)
    assert main(["demo", "--agents", "10", "--steps", "2", "--out", str(root)]) == 0, capsys.readouterr().err
    manifest = json.loads((root / "manifest.json").read_text())
    assert OUTPUTS_LOCK not in manifest["outputs_sha256"] and OUTPUTS_LOCK not in os.listdir(root)
    p = holder(root)
    assert main(["report", str(root), "--static"]) == 2
    assert f"PID {p.pid}" in capsys.readouterr().err
    _kill(p)
    assert main(["report", str(root), "--static"]) == 0, capsys.readouterr().err
    assert main(["demo", "--agents", "10", "--steps", "2", "--out", str(root)]) == 0, capsys.readouterr().err
    assert OUTPUTS_LOCK not in os.listdir(root)


#: a command that forks workers: takes the folder's lock, forks (os.fork, or a fork process pool as
#: ``LocalExecutor(mp_context="fork")`` starts), lets a first child release what it inherited and exit, says
#: "ready <PID of a worker that sleeps>" once that worker runs, and waits until it is killed
_FORKING = textwrap.dedent("""
    import os, sys, time
    from aumann.io import lock_output_dir, release_output_locks
    root, how = sys.argv[1], sys.argv[2]
    lock_output_dir(root, command="aumann run social-llm --executor local --out res")
    first = os.fork()
    if first == 0:  # a child that lets go of what it holds and exits: the parent's lock stays held
        release_output_locks()
        os._exit(0)
    os.waitpid(first, 0)
    # "ready" once the worker runs Python code (what a fork does in the child comes before: the handlers)
    if how == "fork":
        r, w = os.pipe()
        worker = os.fork()
        if worker == 0:
            os.write(w, b"x")
            time.sleep(120)
            os._exit(0)
        os.read(r, 1)
    else:
        from aumann.simulators.executors import LocalExecutor
        ex = LocalExecutor(1, mp_context="fork")  # (kept: collected, it shuts its pool down)
        pool = ex._get_pool()
        worker = pool.submit(os.getpid).result()
        pool.submit(time.sleep, 120)
    print("ready", worker, flush=True)
    sys.stdin.read()
""")


@pytest.mark.parametrize("how", ["fork", "pool"])
def test_a_forked_worker_never_holds_its_killed_parents_lock(tmp_path, how):
    """A command's forked children (os.fork; a process pool with the fork start method) inherited the lock's open
    file, so after ``kill -9`` of the command its workers, still running, kept the folder locked and the next
    writer was refused naming the dead command. A child now closes its copy as it starts: while the command lives
    its lock holds (a child exiting, or letting go of what it has, releases nothing); once it is killed the next
    writer takes the folder while the worker still runs."""
    root = tmp_path / "res"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.Popen([sys.executable, "-c", _FORKING, str(root), how], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=_ROOT)
    worker = None
    try:
        line = p.stdout.readline().split()
        assert line[:1] == [b"ready"], p.stderr.read().decode()
        worker = int(line[1])
        with pytest.raises(OutputBusyError, match=f"PID {p.pid}"):  # the command lives: its lock holds
            lock_output_dir(root)
        _kill(p)
        os.kill(worker, 0)  # the worker still runs ...
        lock_output_dir(root, command="the next writer")  # ... and the folder is free
        assert json.loads((root / OUTPUTS_LOCK).read_text())["pid"] == os.getpid()
        unlock_output_dir(root)
    finally:
        if p.poll() is None:
            p.kill()
        p.wait(30)
        for fh in (p.stdin, p.stdout, p.stderr):
            fh.close()
        if worker is not None:
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
