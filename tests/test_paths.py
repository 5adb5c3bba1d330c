"""The tests that need the real Jetstream sample looked for it at ../shared relative to the checkout only: run from
a git worktree (/work/wt/NAME, whose main checkout is /work/main beside /work/shared) they skipped as "not on this
machine" though it was. The lookup now also reads $AUMANN_SHARED_DIR and the main checkout's ../shared; where the
sample is nowhere, the path it gives is missing (the tests skip, as on CI)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.paths import JETSTREAM_SAMPLE_NAME, SHARED_ENV, shared_file

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=cwd, check=True,
                   capture_output=True, timeout=60)


@pytest.fixture
def layout(tmp_path, monkeypatch) -> tuple[Path, Path, Path]:
    """``work/main`` (a checkout), ``work/wt/w1`` (a worktree of it), and ``work/shared`` holding the sample."""
    monkeypatch.delenv(SHARED_ENV, raising=False)
    main, wt = tmp_path / "work" / "main", tmp_path / "work" / "wt" / "w1"
    main.mkdir(parents=True)
    _git(main, "init", "-q")
    (main / "README").write_text("x")
    _git(main, "add", "README")
    _git(main, "commit", "-q", "-m", "x")
    _git(main, "worktree", "add", "-q", "-b", "w1", str(wt))
    sample = tmp_path / "work" / "shared" / JETSTREAM_SAMPLE_NAME
    sample.parent.mkdir(parents=True)
    sample.write_text("{}\n")
    return main, wt, sample


def test_the_sample_is_found_from_a_worktree_and_from_the_main_checkout(layout) -> None:
    main, wt, sample = layout
    assert shared_file(JETSTREAM_SAMPLE_NAME, repo=wt.resolve()) == sample.resolve()
    assert shared_file(JETSTREAM_SAMPLE_NAME, repo=main.resolve()) == sample.resolve()


def test_the_environment_variable_comes_first(layout, tmp_path, monkeypatch) -> None:
    _, wt, _ = layout
    elsewhere = tmp_path / "cache" / JETSTREAM_SAMPLE_NAME
    elsewhere.parent.mkdir(parents=True)
    elsewhere.write_text("{}\n")
    monkeypatch.setenv(SHARED_ENV, str(tmp_path / "cache"))
    assert shared_file(JETSTREAM_SAMPLE_NAME, repo=wt.resolve()) == elsewhere


def test_where_the_sample_is_nowhere_the_path_is_missing_and_the_tests_skip(layout, tmp_path, monkeypatch) -> None:
    _, wt, sample = layout
    sample.unlink()
    monkeypatch.setenv(SHARED_ENV, str(tmp_path / "nothing-here"))
    got = shared_file(JETSTREAM_SAMPLE_NAME, repo=wt.resolve())
    assert not got.exists() and got == tmp_path / "nothing-here" / JETSTREAM_SAMPLE_NAME
    lone = tmp_path / "lone" / "repo"  # no git repository at all (an unpacked sdist on CI)
    lone.mkdir(parents=True)
    monkeypatch.delenv(SHARED_ENV)
    assert not shared_file(JETSTREAM_SAMPLE_NAME, repo=lone).exists()
