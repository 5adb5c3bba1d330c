"""An output folder another live aumann command writes is refused before the refused command's heavy imports: a
second ``aumann demo --out D`` / ``aumann run ... --out D`` took seconds (about 12 s on a loaded machine) to say
OutputBusyError, because torch, pandas and the scenarios were imported before the lock was tried. Each command here
runs in a fresh process while this test's process holds the folder's lock (the lock file is close-on-exec: the
child never inherits it), and says which heavy modules it had imported when it stopped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import aumann.io.lock as lock_mod
from aumann.io import OUTPUTS_LOCK, lock_output_dir, unlock_output_dir

pytestmark = pytest.mark.skipif(lock_mod.fcntl is None, reason="no flock here (Windows): no lock, by design")

_ROOT = Path(__file__).resolve().parents[2]
#: what the refusal must not wait for (each import takes from a quarter of a second to seconds)
_HEAVY = ("torch", "pandas", "duckdb", "pyarrow", "mesa", "aumann.scenarios", "aumann.studies", "aumann.attribution")
_PROBE = ("import json, sys\nfrom aumann.cli import main\nrc = main(json.loads(sys.argv[1]))\n"
          f"print(json.dumps([rc, [m for m in {_HEAVY!r} if m in sys.modules]]))\n")


@pytest.mark.parametrize("command", [
    ["run", "midscale-social", "--runs", "1", "--out", "{out}"],
    ["demo", "--agents", "10", "--steps", "2", "--out", "{out}"],
    ["attribute", "{panel}", "--indicator", "heat", "--out", "{out}"],
    ["report", "{out}"],
    ["bluesky", "build-panel", "{panel}", "--out", "{out}"],
    ["bluesky", "synth", "--users", "100", "--out", "{out}"],
    ["bluesky", "study", "{out}", "--out", "{out}"],
], ids=lambda c: " ".join(c[:2]) if c[0] == "bluesky" else c[0])
def test_a_busy_output_folder_is_refused_before_the_heavy_imports(tmp_path, command):
    out = tmp_path / "res"
    panel = tmp_path / "panel.npz"
    panel.write_bytes(b"")  # never read: the command stops before
    argv = [w.format(out=out, panel=panel) for w in command]
    lock_output_dir(out, command="aumann run social-llm --out res")
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])}
        got = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True,
                             env=env, cwd=tmp_path, timeout=300)
    finally:
        unlock_output_dir(out)
    assert got.returncode == 0, got.stderr
    rc, heavy = json.loads(got.stdout.strip().splitlines()[-1])
    assert rc == 2
    assert got.stderr.startswith("aumann: error: OutputBusyError: ") and f"PID {os.getpid()}" in got.stderr
    assert "aumann run social-llm --out res" in got.stderr
    assert heavy == [], f"imported before the refusal: {heavy}"
    assert sorted(os.listdir(out)) == [] and not (out / OUTPUTS_LOCK).exists()  # nothing written; our lock gone


def test_a_folder_left_locked_by_a_killed_command_is_taken_over_early_and_kept(tmp_path, capsys):
    """The early lock is the command's own: a lock file a killed command left is taken over at once, and the
    command then runs and finishes as before (its lock released at the end, no lock file left)."""
    from aumann.cli import main

    out = tmp_path / "res"
    out.mkdir()
    (out / OUTPUTS_LOCK).write_text('{"pid": 1, "command": "aumann demo --out res"}\n')  # no live holder
    assert main(["demo", "--agents", "10", "--steps", "2", "--out", str(out)]) == 0, capsys.readouterr().err
    assert (out / "manifest.json").is_file() and not (out / OUTPUTS_LOCK).exists()
    assert main(["bluesky", "synth", "--users", "100", "--days", "2", "--out", str(out / "synth")]) == 0
    (out / "synth" / OUTPUTS_LOCK).write_text("")
    assert main(["bluesky", "synth", "--users", "100", "--days", "2", "--out", str(out / "synth")]) == 0, \
        capsys.readouterr().err
    assert not (out / "synth" / OUTPUTS_LOCK).exists() and not lock_mod._HELD
