"""Whose files a raw-counts folder holds: ``aumann bluesky build-panel`` (real captures) and ``aumann bluesky synth``
(a SYNTHETIC population) write the same counts into the same kind of folder, and each writes files the other does
not (``panels/``, ``ingest_report.json``, ``identifiers.parquet``; ``calibration.json``). Either command run in a
folder the other wrote into removes the other's outputs that aumann recorded writing there (the folder's manifest's
``outputs_sha256`` or its journal), so that a folder never mixes a SYNTHETIC population with a real capture's files;
a file of such a name that aumann did not record (a user's own) is refused before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

from aumann.errors import ConfigError, OutputError, PathEscapeError
from aumann.io import (
    OUTPUTS_JOURNAL,
    RecordedOutputs,
    check_outputs,
    partial_write,
    read_json,
    recorded_outputs,
    remove_stale,
    sha256_file,
)

BUILD_COMMAND = "aumann bluesky build-panel"
SYNTH_COMMAND = "aumann bluesky synth"
#: the raw counts both commands write (:meth:`~aumann.data.bluesky.counts.RawCounts.save`)
COUNTS_OUTPUTS = ("users.parquet", "daily.parquet", "follows.parquet", "counts.json")
#: every file ``aumann bluesky synth`` writes besides its manifest
SYNTH_OUTPUTS = (*COUNTS_OUTPUTS, "calibration.json")
#: the files of one command that the other never writes (besides ``panels/<scale>/*.npz``, build-panel's)
_EITHERS_OWN = ("calibration.json", "ingest_report.json", "identifiers.parquet")
_PANEL_SCALES = ("window", "daily")


def counts_folder_records(out: str | os.PathLike[str]) -> RecordedOutputs:
    """What aumann recorded writing in the raw-counts folder ``out``: the outputs that its build-panel or synth
    manifest lists and its journal's. A manifest of an older aumann recorded no digests (no ``outputs_sha256``):
    the files that command wrote are taken as its own, as they are there now — synth's always the same five
    (:data:`SYNTH_OUTPUTS`), build-panel's the raw counts and the files its manifest's ``outputs`` names. Never a
    file of another name (a ``calibration.json`` in a build-panel folder, an ``identifiers.parquet`` it did not
    export): the records are complete, so such a file is one aumann cannot prove it wrote, and is refused, not
    removed (:func:`checked_others`)."""
    for command in (BUILD_COMMAND, SYNTH_COMMAND):
        rec = recorded_outputs(out, command=command)
        if not rec.aumann:
            continue
        if not rec.complete:
            digests = {k: set(v) for k, v in rec.digests.items()}
            for name in (SYNTH_OUTPUTS if command == SYNTH_COMMAND else _older_build_outputs(out)):
                p = Path(out) / name
                if p.is_file() and not p.is_symlink():
                    digests.setdefault(name, set()).add(sha256_file(p, within=out))
            return RecordedOutputs({k: frozenset(v) for k, v in digests.items()}, aumann=True, complete=True)
        return rec
    return recorded_outputs(out, command=BUILD_COMMAND)  # (the journal alone, or nothing)


def _older_build_outputs(out: str | os.PathLike[str]) -> list[str]:
    """The files an older aumann's build-panel manifest in ``out`` says it wrote: the raw counts (its ``outputs``
    lists them as ``"."``) and each other relative name its ``outputs`` lists (the ingest report, the panels,
    ``identifiers.parquet`` when it exported them)."""
    try:
        manifest = read_json(Path(out) / "manifest.json", error=OutputError, what="manifest", within=out,
                             object_only=True)
    except (OutputError, ConfigError, PathEscapeError, OSError):
        return []
    listed = manifest.get("outputs")
    names = [n for n in listed if isinstance(n, str)] if isinstance(listed, list) else []
    return [*COUNTS_OUTPUTS, *(n for n in names if n not in (".", "manifest.json", OUTPUTS_JOURNAL)
                               and not n.startswith("/") and ".." not in Path(n).parts)]


def others_outputs(out: str | os.PathLike[str], ours: Collection[str], rec: RecordedOutputs) -> list[str]:
    """The files in ``out`` that a command writing ``ours`` there must remove so that the folder holds its outputs
    alone: every output aumann recorded writing there (``rec``) and every file with the name of an output of either
    command (a panel, ``ingest_report.json``, ``calibration.json``, ...) that this one does not write. Check them
    with :func:`~aumann.io.check_outputs` (``removing=True``) before removing any: an unrecorded one (a user's own)
    is refused."""
    root = Path(out)
    names = set(rec.digests) | set(_EITHERS_OWN)
    for scale in _PANEL_SCALES:
        d = root / "panels" / scale
        if d.is_dir() and not d.is_symlink():
            # (not the temporary file of a panel write killed before its rename: no output, nor a file of yours)
            names.update(f"panels/{scale}/{p.name}" for p in d.glob("*.npz") if not partial_write(p.name))
    names -= {*ours, "manifest.json", OUTPUTS_JOURNAL}
    return sorted(n for n in names if (root / n).is_file() or (root / n).is_symlink())


def checked_others(out: str | os.PathLike[str], ours: Collection[str]) -> tuple[RecordedOutputs, list[str]]:
    """What a command writing ``ours`` (and ``manifest.json``) into the counts folder ``out`` finds there: the
    folder's records and the other outputs it must remove (:func:`others_outputs`), every one of both checked before
    anything is written or removed (:func:`~aumann.io.check_outputs`: a file of an output's name that aumann did not
    record, a user's own, raises ``OutputError`` and is kept)."""
    rec = counts_folder_records(out)
    stale = others_outputs(out, ours, rec)
    # (a folder another command wrote — a study's, a run's — is refused: its manifest would be replaced)
    check_outputs(out, [*ours, "manifest.json"], recorded=rec, commands=(BUILD_COMMAND, SYNTH_COMMAND))
    check_outputs(out, stale, recorded=rec, removing=True)
    return rec, stale


def remove_others(out: str | os.PathLike[str], stale: Collection[str]) -> None:
    """Remove ``stale`` (from :func:`checked_others`) and the panel folders they leave empty."""
    for name in stale:
        remove_stale(Path(out) / name, within=out)
    remove_empty_panel_dirs(out)


def remove_empty_panel_dirs(out: str | os.PathLike[str]) -> None:
    """Remove ``panels/window``, ``panels/daily`` and ``panels`` of ``out`` where they are empty directories (left
    by the panels :func:`others_outputs` named); one that holds anything stays."""
    root = Path(out)
    for d in (root / "panels" / "window", root / "panels" / "daily", root / "panels"):
        if d.is_dir() and not d.is_symlink():
            try:
                d.rmdir()
            except OSError:
                pass  # not empty (a file of yours): kept


__all__ = ["BUILD_COMMAND", "COUNTS_OUTPUTS", "SYNTH_COMMAND", "SYNTH_OUTPUTS", "checked_others",
           "counts_folder_records", "others_outputs", "remove_empty_panel_dirs", "remove_others"]
