"""Which files in an output folder are aumann's: the output journal (:data:`OUTPUTS_JOURNAL`, one line per file
written, appended before the file is renamed into place: :func:`journaled`), what a folder's manifest and journal
record (:func:`recorded_outputs`), the one answer to "did aumann write this file, unchanged?" (:func:`output_check`)
and the rule that refuses to replace or remove a file of yours with an output's name (:func:`check_outputs`,
:func:`check_stale`). Every name here is re-exported by :mod:`aumann.io`.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aumann import bounded
from aumann.errors import ConfigError, OutputBusyError, OutputError, PathEscapeError
from aumann.io.files import (
    _DIGESTS,
    _FILE_MODE,
    BEFORE_RENAME,
    PathLike,
    _inside,
    _os_reason,
    _signature,
    confine,
    open_read,
    read_json,
    remove_stale,
    sha256_file,
    write_bytes,
)
from aumann.io.lock import holds_output_lock, output_lock

#: the journal of an output folder: one line per file an aumann command wrote there since its last manifest, each
#: the JSON array ``["name", "SHA-256"]``, appended and flushed to the disk *before* the file is renamed into place
#: (:func:`journaled`); a command interrupted between its outputs and its manifest leaves files the journal vouches
#: for. A journal an older aumann wrote (one JSON object ``{"outputs_sha256": {name: [SHA-256, ...]}}``, and any
#: record lines after it) is still read, and converted the first time a record is added to it
OUTPUTS_JOURNAL = ".aumann-journal.json"
#: the manifest key that says its ``outputs_sha256`` lists every output the command wrote (pages and figures too);
#: without it (an older aumann's manifest) a file of an output's name that it does not list is taken as its own
OUTPUTS_COMPLETE = "outputs_complete"
#: the longest journal line read (a record is a relative path and a digest; a longer line is not one aumann wrote)
_JOURNAL_LINE_MAX = 64 * 1024
_HEX64 = re.compile(r"[0-9a-f]{64}")

_JOURNAL_ROOT: ContextVar[str | None] = ContextVar("aumann_outputs_journal", default=None)


@contextmanager
def journaled(root: PathLike) -> Iterator[None]:
    """Within the block, every file :func:`~aumann.io.atomic_path` (so every writer of :mod:`aumann.io`) puts under
    the folder ``root`` is first recorded in ``root``'s :data:`OUTPUTS_JOURNAL` (its name and SHA-256, one line
    appended and flushed to the disk) and only then renamed into place: whatever interrupts the command, each
    output file there is one the journal or the folder's manifest vouches for (:func:`recorded_outputs`), so the
    next run replaces it instead of refusing it as yours.

    The block holds the folder's lock (:func:`~aumann.io.output_lock`; a command that took it for its whole run
    keeps it): another live command writing there stops it at once with an :class:`~aumann.errors.OutputBusyError`,
    instead of the two interleaving their outputs and journals."""
    with output_lock(root):
        token = _JOURNAL_ROOT.set(os.path.realpath(os.fspath(root)))
        hook = BEFORE_RENAME.set(_journal_before_rename)
        try:
            yield
        finally:
            BEFORE_RENAME.reset(hook)
            _JOURNAL_ROOT.reset(token)


def _journal_before_rename(path: Path, tmp: Path) -> tuple[tuple[int, ...], str] | None:
    """Journal the file ``tmp`` that is about to become ``path`` (inside a :func:`journaled` block); the signature
    and SHA-256 it was journaled with (``None``: not journaled, or ``tmp`` changed while it was hashed)."""
    root = _JOURNAL_ROOT.get()
    if root is None or path.name in (OUTPUTS_JOURNAL, "manifest.json"):
        return None
    real = os.path.join(os.path.realpath(path.parent), path.name)
    if not _inside(real, root) or real == root:
        return None
    hit = _DIGESTS.pop(os.path.abspath(tmp), None)  # a big archive's digest, taken as it was written
    sig = _signature(tmp)
    if hit is not None and sig is not None and hit[0][:4] == sig[:4]:  # (its chmod since changed only the ctime)
        digest = hit[1]
    else:
        digest = sha256_file(tmp)
    journal_output(root, Path(os.path.relpath(real, root)).as_posix(), digest)
    return (sig, digest) if sig is not None and _signature(tmp) == sig else None


def _journal_record(name: str, digest: str) -> bytes:
    return (json.dumps([name, digest], ensure_ascii=True) + "\n").encode("ascii")


def _byte_at(fd: int, offset: int) -> bytes:
    os.lseek(fd, offset, os.SEEK_SET)  # (the next write still goes to the end: the file is open to append)
    return os.read(fd, 1)


def _read_journal(root: PathLike) -> dict[str, list[str]]:
    """``{name: [SHA-256, ...]}`` of ``root``'s journal, read tolerantly: none, a damaged one or a link leading out
    is ``{}``; a line that is not a record (the last one, torn by a crash while it was appended) is skipped."""
    try:
        fh = open_read(Path(root) / OUTPUTS_JOURNAL, within=root, what="output journal", error=OutputError)
    except (OutputError, PathEscapeError, OSError):
        return {}
    entries: dict[str, dict[str, None]] = {}  # (each name's digests in order, each once: a dict, not a list)
    with fh:
        if fh.peek(1)[:1] == b"{":  # an older aumann's journal: one JSON object, and the lines added after it
            old, end = _read_old_journal(fh.read(bounded.MAX_BYTES + 1), root)
            entries = {name: dict.fromkeys(digests) for name, digests in old.items()}
            fh.seek(end)  # (a damaged object: every line is read, and those that are no record skipped)
        while line := fh.readline(_JOURNAL_LINE_MAX):
            if not line.endswith(b"\n") and len(line) == _JOURNAL_LINE_MAX:  # too long: not a record
                while (rest := fh.readline(_JOURNAL_LINE_MAX)) and not rest.endswith(b"\n"):
                    pass
                continue
            try:
                rec = bounded.loads_json(line.decode("ascii"), what="journal record", error=OutputError, max_depth=4)
            except (OutputError, UnicodeDecodeError):
                continue  # a torn or damaged line
            if isinstance(rec, list) and len(rec) == 2 and isinstance(rec[0], str) and rec[0] \
                    and isinstance(rec[1], str) and _HEX64.fullmatch(rec[1]):
                entries.setdefault(rec[0], {})[rec[1]] = None
    return {name: list(digests) for name, digests in entries.items()}


def _read_old_journal(raw: bytes, root: PathLike) -> tuple[dict[str, list[str]], int]:
    """The records of the JSON object an older aumann's journal starts with, and the offset of the bytes after it:
    a journal that record lines were appended to after it (an older aumann's folder, written again by this one)
    keeps both (read as the object alone, the whole was no JSON, and every record of either was lost). A damaged
    object: ``({}, 0)``."""
    text = raw.decode("utf-8", "surrogateescape")
    try:
        _, end = json.JSONDecoder().raw_decode(text)
        data = bounded.loads_json(text[:end], what=f"output journal in {str(root)!r}", error=OutputError,
                                  allow_nan=False)
    except (ValueError, RecursionError):  # (OutputError is a ValueError)
        return {}, 0
    got = data.get("outputs_sha256") if isinstance(data, dict) else None
    if not isinstance(got, dict):
        return {}, 0
    entries = {str(k): [str(d) for d in v] for k, v in got.items() if isinstance(v, list)}
    return entries, len(text[:end].encode("utf-8", "surrogateescape"))


def journal_output(root: PathLike, name: str, digest: str) -> None:
    """Add ``name`` (relative to the output folder ``root``) with its SHA-256 ``digest`` to ``root``'s journal: one
    line appended and flushed to the disk (a command writing k files writes k lines, not k journals). A journal in
    an older aumann's format is converted first; a symbolic or hard link there is replaced, never written
    through.

    Raises:
        OutputError: the journal cannot be written (a directory of that name, no permission, a full disk).
        PathEscapeError: ``root`` leads outside itself through a link on the way.
    """
    _append_records(root, _journal_record(name, digest))


def journal_outputs(root: PathLike, records: Iterable[tuple[str, str]]) -> None:
    """Add each ``(name, SHA-256)`` of ``records`` that ``root``'s journal does not hold yet, all in one append
    flushed to the disk once (:func:`journal_output` for many: a manifest's ``outputs_sha256`` journaled before the
    manifest is replaced). Raises as :func:`journal_output`."""
    have = {name: set(digests) for name, digests in _read_journal(root).items()}
    new: dict[tuple[str, str], None] = {}
    for name, digest in records:
        if digest not in have.get(name, ()):
            new[(name, digest)] = None
    if new:
        _append_records(root, b"".join(_journal_record(name, digest) for name, digest in new))


def _append_records(root: PathLike, record: bytes) -> None:
    """Append the journal lines ``record`` to ``root``'s journal (:func:`journal_output`)."""
    path = confine(Path(root) / OUTPUTS_JOURNAL, root, what="output journal", follow=False)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_BINARY", 0)
    try:
        if path.is_symlink():
            path.unlink()  # as an atomic write would: the link is replaced, not followed
        try:
            fd = os.open(path, flags, _FILE_MODE)
        except FileNotFoundError:  # no output folder yet: made, as an atomic write makes it
            path.parent.mkdir(parents=True, exist_ok=True)
            confine(path, root, what="output journal", follow=False)
            fd = os.open(path, flags, _FILE_MODE)
        try:
            st = os.fstat(fd)
            size = st.st_size
            # an older aumann's journal is rewritten as lines, once; a journal with another name too (a hard link: to
            # a file outside the folder, or one a `cp -al` backup shares) is rewritten as a file of its own, as an
            # atomic write replaces it, instead of appended to through the link (which wrote into that other file)
            if (size and _byte_at(fd, 0) == b"{") or st.st_nlink > 1:
                os.close(fd)
                fd = -1
                lines = b"".join(_journal_record(n, d) for n, ds in _read_journal(root).items() for d in ds)
                token = _JOURNAL_ROOT.set(None)
                try:
                    write_bytes(path, lines, within=root)
                finally:
                    _JOURNAL_ROOT.reset(token)
                fd = os.open(path, flags, _FILE_MODE)
                size = os.fstat(fd).st_size
            if size and _byte_at(fd, size - 1) != b"\n":  # a torn last record: this one starts on a line of its own
                record = b"\n" + record
            view = memoryview(record)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            if fd >= 0:
                os.close(fd)
    except OutputError:
        raise
    except OSError as exc:
        why = "it is an existing directory" if path.is_dir() else _not_a_file(path) or _os_reason(exc, path)
        raise OutputError(f"cannot write the output journal {str(path)!r}: {why}") from exc


def _not_a_file(path: Path) -> str | None:
    """Why ``path`` is no journal aumann can append to: a FIFO, a socket or a device there (``None``: none is)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISLNK(mode) or stat.S_ISDIR(mode):
        return None
    return "it is not a regular file (a FIFO, a socket or a device)"


def adopt_outputs(root: PathLike, names: Iterable[str]) -> None:
    """Journal the current SHA-256 of each of ``names`` that is a file in ``root`` — outputs :func:`check_outputs`
    accepted as aumann's — before a command removes the manifest that vouched for them: interrupted before its new
    manifest, the next run still knows them as aumann's."""
    for name in names:
        p = Path(root) / name
        if name != "manifest.json" and p.is_file() and not p.is_symlink():
            journal_output(root, name, sha256_file(p, within=root))


def settle_journal(root: PathLike) -> None:
    """Remove ``root``'s journal once the manifest that records the command's outputs is written — under the
    folder's lock: while another live command holds it (it is writing there, and appending to the journal), the
    journal is its to settle and stays (the records of ours in it vouch for files the manifest records too)."""
    if holds_output_lock(root):
        remove_stale(Path(root) / OUTPUTS_JOURNAL, within=root)
        return
    try:
        with output_lock(root):
            remove_stale(Path(root) / OUTPUTS_JOURNAL, within=root)
    except OutputBusyError:
        return


@dataclass(frozen=True)
class RecordedOutputs:
    """What aumann recorded writing in an output folder: ``digests`` ``{name: {SHA-256, ...}}`` (the manifest's
    ``outputs_sha256`` and the journal's), whether an aumann command's manifest is there (``aumann``; its command
    starts with the prefix asked for) and whether it lists every output (``complete``, :data:`OUTPUTS_COMPLETE`)."""

    digests: Mapping[str, frozenset[str]]
    aumann: bool = False
    complete: bool = False


def recorded_outputs(root: PathLike, *, command: str = "aumann ") -> RecordedOutputs:
    """The :class:`RecordedOutputs` of the folder ``root``: its ``manifest.json`` counts when its command starts
    with ``command`` (``"aumann run"``: only that command's); the journal always (only aumann writes it)."""
    digests: dict[str, set[str]] = {}
    aumann = complete = False
    earlier = _aumann_manifest(root, command)
    if earlier is not None:
        aumann = True
        complete = earlier.get(OUTPUTS_COMPLETE) is True
        ours = earlier.get("outputs_sha256")
        for k, v in (ours.items() if isinstance(ours, dict) else ()):
            digests.setdefault(str(k), set()).add(str(v))
    for k, v in _read_journal(root).items():
        digests.setdefault(k, set()).update(v)
    return RecordedOutputs({k: frozenset(v) for k, v in digests.items()}, aumann, complete)


def _aumann_manifest(root: PathLike, command: str = "aumann ") -> dict[str, Any] | None:
    """``root``'s ``manifest.json`` when an aumann command whose line starts with ``command`` wrote it, else
    ``None`` (none, damaged, a link leading out, or a file of your own of that name)."""
    try:
        earlier = read_json(Path(root) / "manifest.json", error=OutputError, what="manifest", within=root)
    except (OutputError, ConfigError, PathEscapeError, OSError):
        return None
    return earlier if isinstance(earlier, dict) and str(earlier.get("command", "")).startswith(command) else None


@dataclass(frozen=True)
class OutputCheck:
    """Whether the file at an output's path is one aumann recorded writing and unchanged since (``state``):
    ``absent``, ``ours``, ``unrecorded`` (a file no record names), ``changed`` (another SHA-256 than recorded),
    ``link`` (a symbolic link: aumann writes none), ``directory``, ``unreadable``; ``reason`` says it in words."""

    state: str
    reason: str

    @property
    def ours(self) -> bool:
        """The file is aumann's own, unchanged (or there is none)."""
        return self.state in ("absent", "ours")


def output_check(path: PathLike, *, within: PathLike | None,
                 recorded: Mapping[str, str | Iterable[str]]) -> OutputCheck:
    """The one answer to "did aumann write the file at ``path``, and is it unchanged?": ``recorded`` maps names
    relative to ``within`` to the SHA-256 (or several) aumann recorded writing there (a manifest's
    ``outputs_sha256``, :func:`recorded_outputs`)."""
    p = confine(path, within, what="output file", follow=False)
    name = Path(path).relative_to(within).as_posix() if within is not None else Path(path).name
    if p.is_symlink():
        return OutputCheck("link", f"{name} is a symbolic link (aumann writes none)")
    if p.is_dir():
        return OutputCheck("directory", f"{name} is a directory")
    if not p.is_file():
        return OutputCheck("absent", f"{name} is missing")
    want = recorded.get(name)
    if want is None:
        return OutputCheck("unrecorded", f"{name} is not a file aumann recorded writing")
    # (a manifest's outputs_sha256 is read as written: a value that is no digest nor a list of them records none)
    wanted = {want} if isinstance(want, str) else {w for w in want if isinstance(w, str)} \
        if isinstance(want, list | tuple | set | frozenset) else set()
    try:
        got = sha256_file(p, within=within)
    except OutputError as exc:
        return OutputCheck("unreadable", f"{name} cannot be read ({exc})")
    if got in wanted:
        return OutputCheck("ours", f"{name} is the file aumann wrote")
    return OutputCheck("changed", f"{name} is not the file the run wrote (changed or replaced since)")


def _refusal(path: PathLike, check: OutputCheck, doing: str) -> OutputError:
    if check.state == "directory":
        return OutputError(f"{str(path)!r} is a directory with the name of an output this run {doing}: move or "
                           "rename it, then run again")
    return OutputError(f"{str(path)!r} is in the output folder but is not the file an earlier aumann run "
                       f"recorded writing there (a file of your own, or one changed since): it is kept, and this "
                       f"run {doing}; move or rename it, then run again")


def check_outputs(root: PathLike, names: Iterable[str], *, recorded: RecordedOutputs | None = None,
                  removing: bool = False, commands: Iterable[str] | None = None) -> None:
    """Refuse, before anything is written, to overwrite a file in the output folder ``root`` that aumann did not
    record writing: each of ``names`` (the outputs this run writes or removes) must be absent or one the folder's
    manifest or journal records with its SHA-256 (:func:`recorded_outputs`); a file an older aumann's manifest
    (one without :data:`OUTPUTS_COMPLETE`) does not list is taken as its own, as that aumann did. Else an
    :class:`OutputError` naming it: a file of your own, a link or a directory with an output's name.
    ``removing``: ``names`` are an earlier run's outputs this one removes (the message says so).
    ``commands``: the aumann commands (``"aumann bluesky study"``) whose ``manifest.json`` this run may replace,
    when ``names`` holds it: a folder whose manifest another aumann command wrote holds that command's outputs (a
    study's summary, a synth's counts), which this run would overwrite or leave behind unrecorded under its own
    manifest; it is refused with an :class:`OutputError` naming the folder and that command."""
    rec = recorded_outputs(root) if recorded is None else recorded
    if (Path(root) / OUTPUTS_JOURNAL).is_dir():  # the journal is written beside the outputs: refused now, not mid-way
        raise _refusal(Path(root) / OUTPUTS_JOURNAL, OutputCheck("directory", ""), "writes under that name")
    if (odd := _not_a_file(Path(root) / OUTPUTS_JOURNAL)) is not None:  # a FIFO: its journal, appended to, hung
        raise OutputError(f"{str(Path(root) / OUTPUTS_JOURNAL)!r} is where this run writes its output journal, but "
                          f"{odd}: move or remove it, then run again")
    for name in names:
        if name == "manifest.json":  # never in outputs_sha256: an aumann command's manifest is replaced by the next
            earlier = _aumann_manifest(root) if (Path(root) / name).exists() else None
            theirs = (Path(root) / name).exists() and earlier is None
            if (Path(root) / name).is_symlink() or theirs:
                raise _refusal(Path(root) / name, OutputCheck("unrecorded", ""), "writes under that name (it would "
                               "be replaced)")
            if earlier is not None and commands is not None:
                _check_same_command(root, str(earlier.get("command", "")), tuple(commands))
            continue
        check = output_check(Path(root) / name, within=root, recorded=rec.digests)
        legacy = check.state == "unrecorded" and rec.aumann and not rec.complete
        if not check.ours and not legacy:
            raise _refusal(Path(root) / name, check, "does not write it, so it would pass for this run's result"
                           if removing else "writes under that name (it would be replaced)")


def _check_same_command(root: PathLike, earlier: str, commands: tuple[str, ...]) -> None:
    """Refuse the output folder ``root`` whose manifest records the command line ``earlier`` unless it is one of
    ``commands`` (:func:`check_outputs`)."""
    if any(earlier == c or earlier.startswith(c + " ") for c in commands):
        return
    words = earlier.split()
    other = " ".join(words[:3] if words[1:2] == ["bluesky"] else words[:2])
    raise OutputError(f"{str(root)!r} holds the outputs of another command, `{other}` (its manifest.json): "
                      "this command writes another kind of folder, and would replace that command's manifest "
                      "(and any of its files of the same name), leaving the rest of its files beside this "
                      "command's, no longer recorded; give another output folder (a new or empty one)")


def check_stale(path: PathLike, *, within: PathLike | None, recorded: Mapping[str, str | Iterable[str]]) -> None:
    """Nothing when no file is at ``path`` or it is the one ``recorded`` (``{name relative to within: SHA-256}``)
    lists; else an :class:`OutputError` naming it (a file of your own, or one changed since, which would pass for
    this invocation's output). Check every file before :func:`remove_stale` removes any: a refusal removes none."""
    check = output_check(path, within=within, recorded=recorded)
    if not check.ours and check.state != "directory":  # (a directory is never removed)
        raise _refusal(path, check, "does not write it, so it would pass for this run's result")


__all__ = ["OUTPUTS_COMPLETE", "OUTPUTS_JOURNAL", "OutputCheck", "RecordedOutputs", "adopt_outputs", "check_outputs",
           "check_stale", "journal_output", "journal_outputs", "journaled", "output_check", "recorded_outputs",
           "settle_journal"]
