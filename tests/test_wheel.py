"""The wheel works outside the source tree: build it, install it with ``pip --target`` (no dependencies,
so torch is not downloaded again: the running environment provides them), and run the CLI from a
temporary directory on packaged defaults — ``aumann run`` (configs are package data) and
``aumann bluesky build-panel`` (packaged topics and filters) on a small synthetic Jetstream capture."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.paths import REPO

CAPTURE = REPO / "tests" / "data" / "bluesky" / "wheel_capture"


def _pip(*args: str, cwd: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"


def test_committed_capture_is_the_builders_synthetic_one(tmp_path):
    from tests.data.bluesky.jetstream_builder import PROFILES_CSV, build

    cap, _ = build()
    for made in cap.write(tmp_path):
        assert (CAPTURE / made.name).read_bytes() == made.read_bytes()
    assert (CAPTURE / "profiles.csv").read_text() == PROFILES_CSV


@pytest.mark.slow
def test_wheel_runs_outside_the_source_tree(tmp_path):
    src = tmp_path / "src"  # build from a copy: nothing (build/, *.egg-info) lands in the work tree
    shutil.copytree(REPO / "aumann", src / "aumann", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    _pip("wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(tmp_path / "dist"), str(src), cwd=tmp_path)
    wheels = sorted((tmp_path / "dist").glob("aumann-*.whl"))
    assert len(wheels) == 1
    # every file of the package that is not code is package data: a new kind (a .csv, an .html template) that
    # pyproject's package-data globs miss would be left out of the wheel and found missing only when installed
    data = {p.relative_to(src).as_posix() for p in (src / "aumann").rglob("*") if p.is_file() and p.suffix != ".py"}
    with zipfile.ZipFile(wheels[0]) as whl:
        assert data and data <= set(whl.namelist()), f"not in the wheel: {sorted(data - set(whl.namelist()))}"
    target = tmp_path / "site"
    _pip("install", "--no-deps", "--target", str(target), str(wheels[0]), cwd=tmp_path)
    assert (target / "aumann" / "configs" / "social-llm.toml").is_file()
    assert sorted(p.name for p in (target / "aumann" / "configs" / "topics").glob("*.toml"))

    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = str(target)

    def python(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, *args], cwd=work, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
        return done

    where = python("-c", "import aumann; print(aumann.__file__)").stdout.strip()
    assert Path(where).resolve().is_relative_to(target.resolve()), where
    version = python("-c", "import importlib.metadata as m; print(m.version('aumann'))").stdout.strip()
    assert python("-m", "aumann.cli", "--version").stdout.strip() == f"aumann {version}"  # the installed metadata's

    python("-m", "aumann.cli", "run", "social-llm", "--runs", "1", "--no-ablations", "--no-plots", "--agents", "6",
           "--steps", "4", "--set", "study.permutations=10", "--set", "study.random_orderings=2",
           "--out", "social")
    manifest = json.loads((work / "social" / "manifest.json").read_text())
    assert manifest["config"]["agents"] == 6 and (work / "social" / "faithfulness.csv").is_file()

    python("-m", "aumann.cli", "bluesky", "build-panel", *map(str, sorted(CAPTURE.glob("*.jsonl"))),
           "--profiles", str(CAPTURE / "profiles.csv"), "--out", "counts", "--quiet")
    from tests.data.bluesky.jetstream_builder import build

    cap, _ = build()
    report = json.loads((work / "counts" / "ingest_report.json").read_text())
    assert report["malformed_lines"] == cap.malformed and report["duplicates"] == cap.duplicates
    assert report["users_kept"] == 5 and any((work / "counts" / "panels").iterdir())  # packaged filters applied
