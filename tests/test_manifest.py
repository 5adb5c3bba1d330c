"""The manifest's provenance: the git revision is aumann's own, never that of a repository it is installed in."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from aumann.manifest import git_revision

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(where, *args):
    return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=True).stdout.strip()


def test_a_copy_installed_inside_another_repository_has_no_git_revision(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text(".venv/\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mod.py").write_text("x = 1\n")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "-m", "project")
    head = _git(tmp_path, "rev-parse", "HEAD")
    installed = tmp_path / ".venv" / "lib" / "site-packages" / "aumann"  # a project's venv, ignored or not
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("")
    assert git_revision(tmp_path / "src") == head  # a checkout: its commit
    assert git_revision(installed) is None  # was the project's commit (+dirty when the project had changes)
    (tmp_path / ".gitignore").write_text("")
    assert git_revision(installed) is None  # untracked, not ignored: still not this commit


def test_a_recorded_command_stays_shell_quoted_through_the_manifest():
    """build_manifest redacts the command again: a quoted URL's query or fragment took the closing quote with it, so
    the recorded line no longer parsed as the words that ran."""
    import shlex

    from aumann.manifest import build_manifest, redact_command

    words = ["aumann", "run", "x", "--base-url", "http://u:sk-1234567@h/v1?api_key=sk-2", "--out", "a b"]
    command = redact_command(words)
    assert shlex.split(command) == [*words[:4], "http://***@h/v1?api_key=***", "--out", "a b"]
    assert build_manifest(command)["command"] == command
