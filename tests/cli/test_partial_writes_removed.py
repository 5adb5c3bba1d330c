"""Every command that writes an output folder removes, as it writes an output there, the temporary files that earlier
writes of that output killed before their rename left (`.NAME.XXXXXXXX.tmpSUFFIX`, older than the grace), and says
so on stderr in one line; before, they stayed for ever (a 28 MB panel's). A file of another name is never touched."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from aumann.attribution import Panel
from aumann.cli import main
from aumann.data.synthetic import heavy_tailed_panel
from tests.cli.test_run_cli import TINY

CAPTURE = Path(__file__).parent.parent / "data" / "bluesky" / "wheel_capture"
TRACE = Path(__file__).parent.parent / "data" / "traces" / "oasis_twitter.db"


def _synth(d: Path, out: Path) -> list[str]:
    return ["bluesky", "synth", "--users", "300", "--days", "2", "--seed", "1", "--out", str(out)]


def _study(d: Path, out: Path) -> list[str]:
    counts = d / "counts"
    if not counts.is_dir():
        assert main(_synth(d, counts)) == 0
    return ["bluesky", "study", str(counts), "--out", str(out), "--sizes", "100", "--seeds", "0", "--no-progress",
            "--static"]


def _attribute(d: Path, out: Path) -> list[str]:
    if not (d / "panel.npz").is_file():
        Panel.save(heavy_tailed_panel(12, 2, rng=0), d / "panel.npz")
    return ["attribute", str(d / "panel.npz"), "--indicator", "lin", "--out", str(out), "--static"]


def _run(d: Path, out: Path) -> list[str]:
    cfg = d / "tiny.toml"
    cfg.write_text(TINY.replace("runs = 2", "runs = 1"))
    return ["run", "social-llm", "--config", str(cfg), "--out", str(out), "--no-plots", "--static", "--no-ablations"]


#: command -> (its arguments for a folder, the output whose killed write is planted)
COMMANDS = {
    "demo": (lambda d, out: ["demo", "--agents", "12", "--steps", "2", "--out", str(out), "--static"],
             "attribution.npz"),
    "attribute": (_attribute, "top_agents.csv"),
    "attribute --trace": (lambda d, out: ["attribute", "--trace", str(TRACE), "--indicator", "lin", "--out", str(out),
                                          "--static", "--no-deletion"], "panel.npz"),
    "run": (_run, "faithfulness.csv"),
    "bluesky build-panel": (lambda d, out: ["bluesky", "build-panel", *map(str, sorted(CAPTURE.glob("*.jsonl"))),
                                            "--out", str(out), "--quiet"], "panels/window/mythos.npz"),
    "bluesky synth": (_synth, "users.parquet"),
    "bluesky study": (_study, "tables/flip-main.csv"),
    "report": (None, "report.md"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_removes_the_partial_writes_of_what_it_writes(tmp_path, capsys, command) -> None:
    make, name = COMMANDS[command]
    out = tmp_path / "out"
    argv = make(tmp_path, out) if make is not None else ["report", str(out), "--static"]
    if make is None:  # aumann report: into a demo's folder
        assert main(["demo", "--agents", "12", "--steps", "2", "--out", str(out), "--static"]) == 0
    else:
        assert main(argv) == 0
    target = out / name
    assert target.is_file()
    suffix = Path(name).suffix
    partial = target.parent / f".{target.name}.k3j2h1ab.tmp{suffix}"
    partial.write_bytes(target.read_bytes()[:500])
    decoy = target.parent / f".{target.name}.k3j2h1ab.tmp{suffix}.mine"  # not the pattern: a file of yours
    decoy.write_bytes(b"mine")
    t = time.time() - 3600
    for p in (partial, decoy):
        os.utime(p, (t, t))
    capsys.readouterr()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert not partial.exists(), err
    assert decoy.read_bytes() == b"mine"
    line = next((ln for ln in err.splitlines() if partial.name in ln), None)
    assert line is not None and line.startswith("aumann: warning: ") and "removed 1 temporary file" in line, err
