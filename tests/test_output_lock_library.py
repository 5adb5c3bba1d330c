"""Library entry points that write an output folder hold its lock for their whole write, as the commands do:
``run_crossscale``, the Bluesky capture (``record`` / ``capture`` / ``DailyWriter``), ``write_synth`` /
``RawCounts.save``, ``write_build_outputs``, ``render_report`` and ``run_study`` wrote without it when called from
Python, so two of them (or one and an aumann command) into one folder interleaved their files, manifests and
journals. Now the second stops at once with an OutputBusyError naming the folder and the other process, and nothing
of its own is written; called under a command's lock they keep it (re-entrant)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import aumann.io.lock as lock_mod
from aumann.errors import OutputBusyError
from aumann.io import OUTPUTS_LOCK, lock_output_dir, release_output_locks

pytestmark = pytest.mark.skipif(lock_mod.fcntl is None, reason="no flock here (Windows): no lock, by design")

_ROOT = Path(__file__).resolve().parents[1]
_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}

#: another process: takes the folder's lock (as an aumann command does), says "ready", waits for its stdin to close
_HOLDER = textwrap.dedent("""
    import sys
    from aumann.io import lock_output_dir
    lock_output_dir(sys.argv[1], command="aumann bluesky study counts --out res")
    print("ready", flush=True)
    sys.stdin.read()
""")
#: another process trying the folder's lock now: prints the refusal, or "taken"
_PROBE = textwrap.dedent("""
    import sys
    from aumann.errors import OutputBusyError
    from aumann.io import lock_output_dir
    try:
        lock_output_dir(sys.argv[1])
        print("taken")
    except OutputBusyError as e:
        print(e)
""")


@pytest.fixture
def holder():
    procs: list[subprocess.Popen] = []

    def start(root: Path) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", _HOLDER, str(root)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_ENV, cwd=_ROOT)
        procs.append(p)
        assert p.stdout.readline().strip() == b"ready", p.stderr.read().decode()
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(30)
        for fh in (p.stdin, p.stdout, p.stderr):
            fh.close()


def _probe(root: Path) -> str:
    """What another process gets trying ``root``'s lock now."""
    return subprocess.run([sys.executable, "-c", _PROBE, str(root)], capture_output=True, text=True, env=_ENV,
                          cwd=_ROOT, check=True, timeout=120).stdout.strip()


def _messages(n: int, probes: list[str], root: Path):
    """Jetstream messages of one day; half-way through, another process tries the folder's lock."""
    for i in range(n):
        if i == n // 2:
            probes.append(_probe(root))
        yield f'{{"did": "did:plc:a", "time_us": {1_775_520_000_000_000 + i}, "kind": "commit"}}'


# ------------------------------------------------------------------------------------------------ capture
def test_a_capture_holds_its_folders_lock_while_it_writes(tmp_path):
    from aumann.data.bluesky.capture import record

    root = tmp_path / "cap"
    probes: list[str] = []
    stats = record(_messages(10, probes, root), root)
    assert stats.messages == 10
    assert len(probes) == 1 and f"PID {os.getpid()}" in probes[0] and "aumann.data.bluesky.capture" in probes[0]
    assert str(root) in probes[0]
    assert not lock_mod._HELD and not (root / OUTPUTS_LOCK).exists()  # let go at its end
    assert _probe(root) == "taken"


def test_a_capture_into_a_folder_another_writer_holds_is_refused_and_writes_nothing(tmp_path, holder):
    from aumann.data.bluesky.capture import capture

    root = tmp_path / "cap"
    p = holder(root)
    with pytest.raises(OutputBusyError, match=f"PID {p.pid}: 'aumann bluesky study counts --out res'"):
        capture(root, connect=lambda url: iter(['{"time_us": 1775520000000000}']), max_messages=1)
    assert sorted(os.listdir(root)) == [OUTPUTS_LOCK]  # no day file


def test_a_capture_under_a_commands_lock_keeps_it(tmp_path):
    """Re-entrant: `aumann bluesky capture` holds the folder's lock, the capture takes and lets go of it once more;
    the command still holds it after (its manifest is written under it)."""
    from aumann.data.bluesky.capture import DailyWriter, record

    root = tmp_path / "cap"
    lock_output_dir(root, command="aumann bluesky capture --out cap")
    try:
        record(['{"time_us": 1775520000000000}'], root)
        w = DailyWriter(root)
        w.close()
        w.close()  # a second close lets go of nothing more
        assert "PID" in _probe(root) and lock_mod._HELD[os.path.realpath(root)].count == 1
    finally:
        release_output_locks()
    assert _probe(root) == "taken"


# ------------------------------------------------------------------------------------------------ synth, study
@pytest.fixture(scope="module")
def counts_dir(tmp_path_factory) -> Path:
    from aumann.data.bluesky.synth import SynthConfig, generate, write_synth

    root = tmp_path_factory.mktemp("bsky") / "counts"
    write_synth(generate(SynthConfig(users=2000, days=3, seed=3)), root)
    assert not (root / OUTPUTS_LOCK).exists()
    return root


def test_write_synth_into_a_folder_another_writer_holds_is_refused_and_writes_nothing(tmp_path, holder):
    from aumann.data.bluesky.synth import SynthConfig, generate, write_synth

    root = tmp_path / "synth"
    p = holder(root)
    with pytest.raises(OutputBusyError, match=f"PID {p.pid}"):
        write_synth(generate(SynthConfig(users=200, days=2, seed=0)), root)
    assert sorted(os.listdir(root)) == [OUTPUTS_LOCK]


def test_run_crossscale_holds_its_folders_lock_for_the_whole_study(counts_dir, tmp_path):
    """Probed from another process while the study runs (its log line about a size beyond the population comes
    after the lock is taken, before the first cell): refused, naming this process and the study's command."""
    from aumann.studies.crossscale.study import CrossScaleConfig, run_crossscale

    out = tmp_path / "study"
    probes: list[str] = []
    cfg = CrossScaleConfig(sizes=[100, 100_000], seeds=[0], topics=["mythos"], protocols=["RAND"])
    summary = run_crossscale(counts_dir, out, cfg, log=lambda *_: probes.append(_probe(out)), report=False,
                             command="aumann bluesky study counts --out study")
    assert summary["sizes_skipped"] == [100_000] and (out / "manifest.json").is_file()
    assert len(probes) == 1 and f"PID {os.getpid()}: 'aumann bluesky study counts --out study'" in probes[0]
    assert not lock_mod._HELD and OUTPUTS_LOCK not in os.listdir(out)


def test_run_crossscale_into_a_folder_another_writer_holds_is_refused_before_any_cell(counts_dir, tmp_path, holder):
    from aumann.studies.crossscale.study import CrossScaleConfig, run_crossscale

    out = tmp_path / "study"
    p = holder(out)
    with pytest.raises(OutputBusyError, match=f"PID {p.pid}") as err:
        run_crossscale(counts_dir, out, CrossScaleConfig(sizes=[100], seeds=[0], topics=["mythos"]),
                       log=lambda *_: None)
    assert str(out) in str(err.value)
    assert sorted(os.listdir(out)) == [OUTPUTS_LOCK]  # no cell, table, summary or manifest


def test_render_report_holds_its_folders_lock_from_the_read_of_the_run(counts_dir, tmp_path, monkeypatch):
    """The pages were read from the directory and checked before the lock was taken (only their writing held it), so
    a command starting there meanwhile changed the run under them; another process is now refused from the read on,
    and the lock is let go at the end."""
    import aumann.studies.pages as pages
    from aumann.studies.crossscale.study import CrossScaleConfig, run_crossscale

    out = tmp_path / "study"
    run_crossscale(counts_dir, out, CrossScaleConfig(sizes=[100], seeds=[0], topics=["mythos"], protocols=["RAND"]),
                   log=lambda *_: None, report=False)
    probes: list[str] = []
    build = pages.build_document

    def probed(*args, **kwargs):
        probes.append(_probe(out))
        return build(*args, **kwargs)

    monkeypatch.setattr(pages, "build_document", probed)
    paths = pages.render_report(out, interactive=False, plots=False)
    assert paths["html"].is_file()
    assert len(probes) == 1 and f"PID {os.getpid()}: 'aumann.studies.pages.render_report" in probes[0]
    assert not lock_mod._HELD and OUTPUTS_LOCK not in os.listdir(out)


# ------------------------------------------------------------------------------------------------ run_study
def test_run_study_holds_its_folders_lock_while_it_runs(tmp_path, holder):
    """Refused at once while another process writes the run directory (no run simulated, no record written); probed
    from another process while its run is computed: refused, naming this process; let go at its end."""
    from aumann.studies.faithfulness import run_study
    from tests.tiny import TINY_STUDY, tiny_config

    sc, cfg = tiny_config("midscale-social", study={**TINY_STUDY, "ablations": False})
    out = tmp_path / "run"
    p = holder(out)
    with pytest.raises(OutputBusyError, match=f"PID {p.pid}"):
        run_study(sc, cfg, out_dir=out)
    assert not any(f.is_file() and f.name != OUTPUTS_LOCK for f in out.rglob("*"))
    p.kill()
    p.wait(30)
    probes: list[str] = []
    res = run_study(sc, cfg, out_dir=out, progress=lambda r, msg: probes.append(_probe(out)) if not probes else None)
    assert res.computed == 1 and len(probes) == 1 and f"PID {os.getpid()}: 'aumann.studies.run_study" in probes[0]
    assert not lock_mod._HELD and not (out / OUTPUTS_LOCK).exists()
