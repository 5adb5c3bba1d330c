"""Where tests find files outside the package: the checkout's root and the shared folder beside it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: names a shared folder to look in first (a CI cache, a copy elsewhere): it holds ``data/bluesky/...``
SHARED_ENV = "AUMANN_SHARED_DIR"
#: the real Jetstream sample, relative to the shared folder
JETSTREAM_SAMPLE_NAME = Path("data") / "bluesky" / "jetstream_v1_golden_20260525.jsonl"
#: why a test that needs the shared folder skips
SHARED_MISSING = (f"the real Jetstream sample is not on this machine (looked in ${SHARED_ENV}, ../shared beside this "
                  "checkout and beside the main checkout of a git worktree; development machines only)")


def _main_checkout(repo: Path) -> Path | None:
    """The main checkout's root when ``repo`` is a git worktree of it (``git rev-parse --git-common-dir``: its
    ``.git``), else ``repo`` itself or ``None`` (no git, not a repository)."""
    try:
        common = subprocess.run(["git", "rev-parse", "--git-common-dir"], cwd=repo, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if not common:
        return None
    path = (repo / common).resolve()
    return path.parent if path.name == ".git" else None  # (a bare repository has no checkout beside it)


def shared_candidates(repo: Path = REPO) -> list[Path]:
    """The folders where the shared data may be, in order: ``$AUMANN_SHARED_DIR``, ``../shared`` beside the checkout
    and, in a git worktree (``/work/wt/NAME``), ``../shared`` beside the main checkout."""
    found: list[Path] = []
    if os.environ.get(SHARED_ENV):
        found.append(Path(os.environ[SHARED_ENV]).expanduser())
    found.append(repo.parent / "shared")
    main = _main_checkout(repo)
    if main is not None:
        found.append(main.parent / "shared")
    return list(dict.fromkeys(found))


def shared_file(relative: str | os.PathLike[str], repo: Path = REPO) -> Path:
    """The first ``shared/<relative>`` of :func:`shared_candidates` that is a file; else the first candidate's path
    (missing: a test that needs it skips, with :data:`SHARED_MISSING`)."""
    paths = [d / relative for d in shared_candidates(repo)]
    return next((p for p in paths if p.is_file()), paths[0])


#: the real Jetstream sample (present on development machines only; tests skip without it)
JETSTREAM_SAMPLE = shared_file(JETSTREAM_SAMPLE_NAME)
