"""Files: atomic writes, ``.npz`` + JSON metadata, JSON without NaN, checksums.

Every file aumann writes goes through this module, so a crash or a full disk never leaves a
half-written result where a finished one is expected: data goes to a temporary file in the target's
own directory (same filesystem), is flushed and fsynced, and is renamed over the target
(:func:`os.replace` is atomic on POSIX and Windows).

* :func:`atomic_path`   a temporary path for writers that insist on a file name (pandas, matplotlib,
  DuckDB), renamed into place when the block exits without an exception;
* :func:`write_bytes`, :func:`write_text`, :func:`write_json` (NaN/inf → ``null``: JSON has neither),
  :func:`write_npz` (arrays plus a JSON metadata record);
* :func:`read_npz` the reverse of :func:`write_npz`, for archives from anywhere: the zip directory and
  every ``.npy`` header are checked (:mod:`aumann.npz`) before anything is decompressed, and the metadata
  goes through the bounded JSON reader (:mod:`aumann.bounded`);
* :func:`read_json` a JSON file (size and depth bounded), :func:`open_read` a file opened for reading;
* :func:`write_csv` tables of plain numbers (Python floats written so they read back exactly; a missing
  or non-finite value is an empty cell);
* :func:`starts_with_bom` / :func:`copy_without_bom` a text file's leading UTF-8 byte-order mark, which
  DuckDB's JSON reader refuses (the trace readers and the Jetstream ingester read such a file through a
  copy without it);
* :func:`sha256_bytes`, :func:`sha256_file`, :func:`record_checksum` checksums (for resume checks);
* :func:`safe_component` / :func:`child_path` the one rule for names that become path components
  (topics, scenario names, groups, file stems): nothing a name holds can lead outside its folder;
* :func:`ensure_output_dir` an output folder checked before any work starts (not a file, writable);
* :func:`confine` the run-directory rule: given ``within=`` (the run directory), every reader and writer
  here refuses a path that leaves it — lexically (``..``) or through a symbolic link anywhere along the
  way — with :class:`~aumann.errors.PathEscapeError`; :func:`file_digests` / :func:`check_digests` the
  checksums that cover every file a resume reads.

Confinement is a resolved-path check made at the moment a file is opened (``os.path.realpath`` of the
target must lie inside the real run directory; the file itself is then opened with ``O_NOFOLLOW``; a
write goes to a temporary file in the checked folder and is renamed over the target, which replaces a
symbolic link rather than following it). It defends against links already in the directory (a copied or
shared run folder, a planted ``runs -> /elsewhere``); it does not defend against a process that swaps a
folder for a link between the check and the open while aumann runs.

A write that fails for a reason of the file system (no permission, an existing file where a folder is
needed, a full disk) raises :class:`~aumann.errors.OutputError` naming the path.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import io as _io
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aumann import bounded, npz
from aumann.checks import as_path
from aumann.errors import ConfigError, OutputError, PathEscapeError, UnsafeNameError

PathLike = str | os.PathLike[str]

#: key of the JSON metadata record inside an ``.npz`` written by :func:`write_npz`
META_KEY = "__meta__"


def _read_umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: files get the permissions a plain ``open(path, "w")`` would give (``mkstemp`` alone makes them 0600)
_FILE_MODE = 0o666 & ~_read_umask()


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def confine(path: PathLike, within: PathLike | None, *, what: str = "file", follow: bool = True) -> Path:
    """``path`` if it stays inside the directory ``within`` (no check when ``within`` is ``None``).

    Refused with :class:`~aumann.errors.PathEscapeError`: a path outside ``within`` (``..``, absolute),
    and one that leads outside through a symbolic link — in a folder on the way or, with
    ``follow=True`` (reads), the file itself. ``follow=False`` (writes) leaves the last component
    alone: an atomic write replaces a link there instead of writing through it.

    >>> import tempfile, os
    >>> run = tempfile.mkdtemp()
    >>> confine(os.path.join(run, "runs", "run-000.json"), run).name
    'run-000.json'
    """
    p = os.path.abspath(os.fspath(path))
    if within is None:
        return Path(p)
    root = os.path.abspath(os.fspath(within))
    if not _inside(p, root):
        raise PathEscapeError(f"{what} {str(path)!r} is outside the run directory {root!r}")
    real_root = os.path.realpath(root)
    real = os.path.realpath(p if follow else os.path.dirname(p))
    if not _inside(real, real_root):
        raise PathEscapeError(f"{what} {str(path)!r} leads outside the run directory {root!r} through a symbolic "
                              f"link (to {real!r}); aumann reads and writes a run directory only inside it")
    return Path(p)


def open_read(path: PathLike, *, within: PathLike | None = None, what: str = "file",
              error: type[Exception] = ConfigError) -> Any:
    """``path`` opened for reading (binary) — the one place files of a run directory are opened to read.

    With ``within`` the path is :func:`confine` d to that directory and the file itself is opened without
    following a link. Raises ``error`` naming ``what`` when the file is missing, a directory or unreadable,
    and :class:`~aumann.errors.PathEscapeError` when it leaves ``within``.
    """
    p = as_path(path, what, error=error)
    target = os.path.realpath(confine(p, within, what=what)) if within is not None else os.fspath(p)
    if os.path.isdir(target):
        raise error(f"{what} {str(p)!r} is a directory, not a file")
    flags = os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    if within is not None:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(target, flags)
    except FileNotFoundError as exc:
        raise error(f"no {what} at {str(p)!r}") from exc
    except OSError as exc:
        raise error(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}") from exc
    return os.fdopen(fd, "rb")


@contextmanager
def atomic_path(path: PathLike, *, within: PathLike | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` when the block succeeds.

    The parent directory is created. On an exception the temporary file is removed and ``path`` is
    left as it was. With ``within`` (the run directory) the path is :func:`confine` d to it first, and
    again once its folders exist.

    Example:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "table.csv"
        >>> with atomic_path(target) as tmp:
        ...     _ = tmp.write_text("a,b\\n1,2\\n")
        >>> target.read_text()
        'a,b\\n1,2\\n'
    """
    path = as_path(path, "output file", error=OutputError)
    confine(path, within, what="output file", follow=False)
    if path.is_dir():
        raise OutputError(f"cannot write {str(path)!r}: it is an existing directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        confine(path, within, what="output file", follow=False)
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".tmp{path.suffix}")
    except OSError as exc:
        raise OutputError(f"cannot write {str(path)!r}: {_os_reason(exc, path.parent)}") from exc
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        journaled_as = None
        if tmp.exists():
            os.chmod(tmp, _FILE_MODE)
            journaled_as = _journal_before_rename(path, tmp)
        os.replace(tmp, path)
        if journaled_as is not None:  # the journal's digest serves the manifest's too (file_digests): not read again
            _remember_digest(path, *journaled_as)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OutputError):
            raise
        raise OutputError(f"cannot write {str(path)!r}: {_os_reason(exc, path)}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _os_reason(exc: OSError, path: Path) -> str:
    """A short reason for an OSError while writing under ``path`` (names a file that blocks a folder)."""
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                return f"{str(parent)!r} is an existing file, not a directory"
            break
    return f"{exc.strerror or type(exc).__name__}" + (f" ({exc.filename})" if exc.filename else "")


def write_bytes(path: PathLike, data: bytes, *, within: PathLike | None = None) -> Path:
    """Write ``data`` to ``path`` atomically (flushed and fsynced before the rename).

    Raises:
        OutputError: the file cannot be written (the message names it and why).
        PathEscapeError: ``within`` is given and ``path`` leaves it.
    """
    path = Path(path)
    with atomic_path(path, within=within) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return path


def write_text(path: PathLike, text: str, *, within: PathLike | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically.

    Raises:
        OutputError: ``text`` holds a lone surrogate (U+D800–U+DFFF), which UTF-8 cannot encode: the message names
            the file and the character, instead of a bare ``UnicodeEncodeError``.
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        line = text.count("\n", 0, exc.start) + 1
        raise OutputError(f"cannot write {Path(path)}: line {line} holds the character U+{ord(bad):04X} (a lone "
                          f"surrogate, as a file name or a JSON \\u escape that is not UTF-8 yields), which UTF-8 "
                          f"cannot encode: {visible_surrogates(text[max(0, exc.start - 30):exc.start + 30])!r}") \
            from None
    return write_bytes(path, data, within=within)


def remove_stale(path: PathLike, *, within: PathLike | None = None) -> bool:
    """Remove the output ``path`` that an earlier invocation wrote and this one does not (a table or figure it
    skips, a page it could not build), so it is never taken for this invocation's; ``True`` when one was there.
    A symbolic link there is removed itself, never what it points to; a directory is left alone.

    A caller that must remove only files an earlier invocation recorded writing checks each with
    :func:`check_stale` first (all of them, so that a refusal removes none).

    Raises:
        OutputError: the file is there but cannot be removed (the message names it and why).
        PathEscapeError: ``within`` is given and ``path`` leaves it through a folder on the way.
    """
    p = confine(path, within, what="output file", follow=False)
    if not p.is_symlink() and not p.is_file():
        return False
    try:
        p.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise OutputError(f"cannot remove the earlier output {str(path)!r}: {_os_reason(exc, p)}") from exc
    return True


def check_stale(path: PathLike, *, within: PathLike | None, recorded: Mapping[str, str | Iterable[str]]) -> None:
    """Nothing when no file is at ``path`` or it is the one ``recorded`` (``{name relative to within: SHA-256}``)
    lists; else an :class:`OutputError` naming it (a file of your own, or one changed since, which would pass for
    this invocation's output). Check every file before :func:`remove_stale` removes any: a refusal removes none."""
    check = output_check(path, within=within, recorded=recorded)
    if not check.ours and check.state != "directory":  # (a directory is never removed)
        raise _refusal(path, check, "does not write it, so it would pass for this run's result")


#: the journal of an output folder: one line per file an aumann command wrote there since its last manifest, each
#: the JSON array ``["name", "SHA-256"]``, appended and flushed to the disk *before* the file is renamed into place
#: (:func:`journaled`); a command interrupted between its outputs and its manifest leaves files the journal vouches
#: for. A journal an older aumann wrote (one JSON object ``{"outputs_sha256": {name: [SHA-256, ...]}}``) is still
#: read, and converted the first time a record is added to it
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
    """Within the block, every file :func:`atomic_path` (so every writer here) puts under the folder ``root`` is
    first recorded in ``root``'s :data:`OUTPUTS_JOURNAL` (its name and SHA-256, one line appended and flushed to
    the disk) and only then renamed into place: whatever interrupts the command, each output file there is one the
    journal or the folder's manifest vouches for (:func:`recorded_outputs`), so the next run replaces it instead of
    refusing it as yours."""
    token = _JOURNAL_ROOT.set(os.path.realpath(os.fspath(root)))
    try:
        yield
    finally:
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
    entries: dict[str, list[str]] = {}
    with fh:
        if fh.peek(1)[:1] == b"{":  # an older aumann's journal: one JSON object
            return _read_old_journal(fh.read(bounded.MAX_BYTES + 1), root)
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
                got = entries.setdefault(rec[0], [])
                if rec[1] not in got:
                    got.append(rec[1])
    return entries


def _read_old_journal(raw: bytes, root: PathLike) -> dict[str, list[str]]:
    try:
        data = bounded.loads_json(raw, what=f"output journal in {str(root)!r}", error=OutputError,
                                  allow_nan=False)
    except OutputError:
        return {}
    got = data.get("outputs_sha256") if isinstance(data, dict) else None
    if not isinstance(got, dict):
        return {}
    return {str(k): [str(d) for d in v] for k, v in got.items() if isinstance(v, list)}


def journal_output(root: PathLike, name: str, digest: str) -> None:
    """Add ``name`` (relative to the output folder ``root``) with its SHA-256 ``digest`` to ``root``'s journal: one
    line appended and flushed to the disk (a command writing k files writes k lines, not k journals). A journal in
    an older aumann's format is converted first; a symbolic link there is replaced, never written through.

    Raises:
        OutputError: the journal cannot be written (a directory of that name, no permission, a full disk).
        PathEscapeError: ``root`` leads outside itself through a link on the way.
    """
    path = confine(Path(root) / OUTPUTS_JOURNAL, root, what="output journal", follow=False)
    record = _journal_record(name, digest)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_BINARY", 0)
    try:
        if path.is_symlink():
            path.unlink()  # as an atomic write would: the link is replaced, not followed
        fd = os.open(path, flags, _FILE_MODE)
        try:
            size = os.fstat(fd).st_size
            if size and _byte_at(fd, 0) == b"{":  # an older aumann's journal: rewritten as lines, once
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
        why = "it is an existing directory" if path.is_dir() else _os_reason(exc, path)
        raise OutputError(f"cannot write the output journal {str(path)!r}: {why}") from exc


def adopt_outputs(root: PathLike, names: Iterable[str]) -> None:
    """Journal the current SHA-256 of each of ``names`` that is a file in ``root`` — outputs :func:`check_outputs`
    accepted as aumann's — before a command removes the manifest that vouched for them: interrupted before its new
    manifest, the next run still knows them as aumann's."""
    for name in names:
        p = Path(root) / name
        if name != "manifest.json" and p.is_file() and not p.is_symlink():
            journal_output(root, name, sha256_file(p, within=root))


def settle_journal(root: PathLike) -> None:
    """Remove ``root``'s journal once the manifest that records the command's outputs is written."""
    remove_stale(Path(root) / OUTPUTS_JOURNAL, within=root)


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
    wanted = {want} if isinstance(want, str) else set(want)
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
                  removing: bool = False) -> None:
    """Refuse, before anything is written, to overwrite a file in the output folder ``root`` that aumann did not
    record writing: each of ``names`` (the outputs this run writes or removes) must be absent or one the folder's
    manifest or journal records with its SHA-256 (:func:`recorded_outputs`); a file an older aumann's manifest
    (one without :data:`OUTPUTS_COMPLETE`) does not list is taken as its own, as that aumann did. Else an
    :class:`OutputError` naming it: a file of your own, a link or a directory with an output's name.
    ``removing``: ``names`` are an earlier run's outputs this one removes (the message says so)."""
    rec = recorded_outputs(root) if recorded is None else recorded
    if (Path(root) / OUTPUTS_JOURNAL).is_dir():  # the journal is written beside the outputs: refused now, not mid-way
        raise _refusal(Path(root) / OUTPUTS_JOURNAL, OutputCheck("directory", ""), "writes under that name")
    for name in names:
        if name == "manifest.json":  # never in outputs_sha256: an aumann command's manifest is replaced by the next
            theirs = (Path(root) / name).exists() and _aumann_manifest(root) is None
            if (Path(root) / name).is_symlink() or theirs:
                raise _refusal(Path(root) / name, OutputCheck("unrecorded", ""), "writes under that name (it would "
                               "be replaced)")
            continue
        check = output_check(Path(root) / name, within=root, recorded=rec.digests)
        legacy = check.state == "unrecorded" and rec.aumann and not rec.complete
        if not check.ours and not legacy:
            raise _refusal(Path(root) / name, check, "does not write it, so it would pass for this run's result"
                           if removing else "writes under that name (it would be replaced)")


_GLOB_CHARS = re.compile(r"[\[*?]")


def duckdb_file_name(path: PathLike) -> str:
    """``path`` as DuckDB's file readers (``read_json``, ``read_csv``, ``read_parquet``) take it literally: they
    expand every name as a glob, so ``day[1].jsonl`` read ``day1.jsonl`` instead, silently; each ``[``, ``*`` and
    ``?`` becomes a one-character class (``[[]``, ``[*]``, ``[?]``), which matches only itself."""
    return _GLOB_CHARS.sub(lambda m: f"[{m.group()}]", str(path))


BOM = b"\xef\xbb\xbf"


def starts_with_bom(path: PathLike) -> bool:
    """Whether the file at ``path`` starts with a UTF-8 byte-order mark."""
    with open(path, "rb") as fh:
        return fh.read(len(BOM)) == BOM


def copy_without_bom(src: PathLike, dst: PathLike, *, chunk_size: int = 1 << 22) -> int:
    """Copy ``src`` to ``dst`` without its leading UTF-8 byte-order mark (if any); the bytes written.

    ``dst`` is a scratch copy for a reader (a temporary folder), not a result: it is written in place.
    """
    written = 0
    with open(src, "rb") as fh, open(dst, "wb") as out:
        head = fh.read(len(BOM))
        if head != BOM:
            out.write(head)
            written += len(head)
        while block := fh.read(chunk_size):
            out.write(block)
            written += len(block)
    return written


def plain(obj: Any) -> Any:
    """A JSON-ready copy of ``obj``: numpy scalars/arrays → Python numbers/lists, NaN/inf → ``None``,
    paths → strings, tuples/sets → lists, mapping keys → strings."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str | int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.datetime64 | np.timedelta64) or (
            isinstance(obj, np.ndarray) and obj.dtype.kind in "mM"):
        return time_text(obj)
    if isinstance(obj, np.generic):
        return plain(obj.item())
    if isinstance(obj, np.ndarray):
        return plain(obj.tolist())
    if isinstance(obj, _dt.datetime | _dt.date | _dt.time):
        return obj.isoformat()
    if isinstance(obj, Mapping):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [plain(v) for v in obj]
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if hasattr(obj, "model_dump"):
        return plain(obj.model_dump(mode="json"))
    return obj


#: a character Python text can hold but UTF-8 cannot: a lone surrogate, e.g. the ``\udcff`` that a file name with
#: a byte that is not UTF-8 (``\xff``, a Latin-1 name) becomes in ``sys.argv`` and ``os.listdir``
_SURROGATE = re.compile("[\ud800-\udfff]")
#: the JSON escape of a surrogate: a lone one, or half of the pair ``ensure_ascii`` writes for a character beyond
#: U+FFFF (an emoji; those, and a literal backslash-``ud800`` text, only cost the second pass below, which changes
#: nothing in them); two lone surrogates that happen to form a pair are written visibly too, as record_checksum
#: sees them
_SURROGATE_ESCAPE = re.compile(r"\\ud[89a-f][0-9a-f]{2}", re.IGNORECASE)


def visible_surrogates(text: str) -> str:
    r"""``text`` with every lone surrogate shown as its escape: ``\xff`` for a byte that was not UTF-8 (Python's
    ``surrogateescape``: U+DCFF), ``\ud800`` for any other. Such text cannot be encoded as UTF-8, so it is shown
    this way wherever it is only displayed or recorded (a file name in ``manifest.json`` or a report); an agent id
    holding one is refused where the panel is built (:class:`~aumann.errors.PanelError`).

    >>> visible_surrogates("x\udcff y.npz")
    'x\\xff y.npz'
    """
    def shown(m: re.Match[str]) -> str:
        o = ord(m.group(0))
        return f"\\x{o - 0xDC00:02x}" if 0xDC80 <= o <= 0xDCFF else f"\\u{o:04x}"

    return _SURROGATE.sub(shown, text)


def _without_surrogates(obj: Any) -> Any:
    if isinstance(obj, str):
        return visible_surrogates(obj)
    if isinstance(obj, dict):
        return {visible_surrogates(k): _without_surrogates(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_without_surrogates(v) for v in obj]
    return obj


def dumps_json(obj: Any, *, indent: int | None = 1) -> str:
    """JSON text of :func:`plain` (``obj``): never contains ``NaN`` or ``Infinity``, and is always well-formed
    Unicode: a lone surrogate in a string (a file name that is not UTF-8: ``x\udcff.npz``) is written as its
    visible escape (``x\\xff.npz``, :func:`visible_surrogates`), not as ``"\\udcff"``, which strict readers
    (pydantic, Rust's serde, the run-record schemas of :mod:`aumann.records`) refuse.

    Raises:
        ConfigError: ``obj`` holds something JSON cannot represent (an arbitrary object).
    """
    try:
        value = plain(obj)
        text = json.dumps(value, indent=indent, allow_nan=False)
        if _SURROGATE_ESCAPE.search(text):
            text = json.dumps(_without_surrogates(value), indent=indent, allow_nan=False)
        return text + "\n"
    except TypeError as exc:
        raise ConfigError(f"cannot write as JSON: {exc}") from exc


def write_json(path: PathLike, obj: Any, *, indent: int | None = 1, within: PathLike | None = None) -> Path:
    """Write ``obj`` as JSON atomically; NaN/inf are written as ``null`` (JSON has neither)."""
    return write_text(path, dumps_json(obj, indent=indent), within=within)


def read_json(path: PathLike, *, error: type[Exception] = ConfigError, what: str = "JSON file",
              within: PathLike | None = None, max_bytes: int = bounded.MAX_BYTES,
              max_depth: int = bounded.MAX_DEPTH, object_only: bool = False, allow_nan: bool = False) -> Any:
    """A JSON file read through :func:`open_read` and parsed by the bounded reader (:mod:`aumann.bounded`).

    Raises ``error`` naming ``what`` and the path: missing, unreadable, over ``max_bytes`` or
    ``max_depth``, not UTF-8, not JSON, ``NaN``/``Infinity`` literals (aumann never writes them; unless
    ``allow_nan``), or (``object_only``) not a JSON object.
    """
    with open_read(path, within=within, what=what, error=error) as fh:
        raw = fh.read(max_bytes + 1)
    data = bounded.loads_json(raw, what=f"{what} {str(path)!r}", error=error, max_bytes=max_bytes,
                              max_depth=max_depth, allow_nan=allow_nan)
    if object_only and not isinstance(data, dict):
        raise error(f"{what} {str(path)!r} must hold a JSON object; got {type(data).__name__}")
    return data


#: deflate level of compressed ``.npz`` files: level 1 writes a 10⁶-agent panel ~2.6× faster than numpy's
#: default (level 6) for ~15 % more bytes (MegaScale-Social's run directory at 10⁶: ~14 CPU-s saved)
NPZ_LEVEL = 1
#: a member whose sample deflates to more than this share of its bytes is stored as it is: float64 results (φ,
#: standard errors, curves) deflate to ~0.92 at ~35 MB/s, seconds of a 10⁶-agent run for 8 % of their bytes
STORE_ABOVE = 0.85
_SAMPLE = 64 * 1024  # bytes of each of the three slices (start, middle, end) a member's choice is made on
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)  # every member's timestamp (as numpy's savez): the same arrays, the same bytes


def _worth_deflating(arr: np.ndarray) -> bool:
    """Whether deflating ``arr`` pays: small or non-contiguous arrays always are; otherwise three 64 KiB
    slices are deflated and the member is stored when they keep more than :data:`STORE_ABOVE` of their size.
    A function of the bytes only, so the same arrays always give the same archive."""
    import zlib

    if arr.nbytes <= 4 * _SAMPLE or not arr.flags.c_contiguous or arr.dtype.hasobject:
        return True
    raw = memoryview(arr.reshape(-1)).cast("B")
    mid = (arr.nbytes - _SAMPLE) // 2
    sample = b"".join(bytes(raw[o:o + _SAMPLE]) for o in (0, mid, arr.nbytes - _SAMPLE))
    return len(zlib.compress(sample, NPZ_LEVEL)) <= STORE_ABOVE * len(sample)


def write_npz(path: PathLike, arrays: Mapping[str, np.ndarray], *, meta: Mapping[str, Any] | None = None,
              compressed: bool = True, within: PathLike | None = None) -> Path:
    """Write ``arrays`` (and a JSON ``meta`` record under :data:`META_KEY`) to one ``.npz`` atomically
    (with ``within``, confined to that directory like :func:`write_bytes`).

    The archive is what ``np.savez_compressed`` (``compressed=False``: ``np.savez``) writes — one
    ``<name>.npy`` member per array — streamed member by member into the temporary file (never held
    whole in memory), deflated at :data:`NPZ_LEVEL` — except members that barely deflate (float64 results:
    :data:`STORE_ABOVE`), which are stored. Members carry a fixed timestamp: the same arrays give the same bytes."""
    import zipfile

    data = dict(arrays)
    if meta is not None:
        data[META_KEY] = np.frombuffer(dumps_json(meta, indent=None).encode("utf-8"), dtype=np.uint8)
    path = Path(path)
    with atomic_path(path, within=within) as tmp:
        with open(tmp, "wb") as raw:
            fh = _HashingWriter(raw)  # the checksum as it is written; zipfile then never seeks back
            with zipfile.ZipFile(fh, "w", allowZip64=True) as zf:
                for key, val in data.items():
                    arr = np.asanyarray(val)
                    info = zipfile.ZipInfo(f"{key}.npy", date_time=_ZIP_EPOCH)
                    if compressed and _worth_deflating(arr):
                        info.compress_type = zipfile.ZIP_DEFLATED
                        # the level's attribute: compress_level from Python 3.13, _compresslevel before
                        setattr(info, "compress_level" if hasattr(info, "compress_level") else "_compresslevel",
                                NPZ_LEVEL)
                    with zf.open(info, "w", force_zip64=True) as member:
                        if info.compress_type == zipfile.ZIP_DEFLATED and arr.nbytes >= PARALLEL_DEFLATE_FROM \
                                and getattr(member, "_compressor", None) is not None:
                            member._compressor = _BlockDeflate(NPZ_LEVEL)  # big members: blocks on two threads
                        spilled_arr = spilled(arr)  # a spilled array: its pages dropped behind the write
                        np.lib.format.write_array(_DropBehind(member, arr) if spilled_arr else member, arr,
                                                  allow_pickle=True)
                    if spilled_arr:
                        drop_resident(arr)
            raw.flush()
            os.fsync(raw.fileno())
            hot = _written_big(raw.fileno(), fh.hexdigest())
            if hot is not None:  # for the output journal, which records the file as it is renamed into place
                _DIGESTS[os.path.abspath(tmp)] = hot
    if hot is not None:
        _remember_digest(path, *hot)  # the rename keeps the device, inode, size and mtime
    return path


class _HashingWriter:
    """A write-only stream over the file ``fp`` that takes the SHA-256 of everything written to it, in order.

    It tells its position but cannot seek, so :mod:`zipfile` writes each member's CRC and sizes after its data
    (a data descriptor, as for a pipe) instead of seeking back to patch its local header. The file is then
    exactly the bytes written, in the order written, and its checksum is known when the write ends — never
    read back (at 10⁷ agents the run directory's 9 GB came back from the disk to be hashed)."""

    def __init__(self, fp: Any) -> None:
        self.fp, self.pos, self._h = fp, 0, hashlib.sha256()

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.fp.write(view)
        self._h.update(view)
        self.pos += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.pos

    def seek(self, *_: Any) -> int:
        raise _io.UnsupportedOperation("written once, in order (its checksum is taken as it is written)")

    def seekable(self) -> bool:
        return False

    def flush(self) -> None:
        self.fp.flush()

    def hexdigest(self) -> str:
        return self._h.hexdigest()


#: from this size a written archive's SHA-256 (taken as it is written) is remembered, and its pages then leave the
#: page cache (:func:`_written_big`)
HOT_DIGEST_FROM = 64 * 2**20


def _written_big(fd: int, digest: str) -> tuple[tuple[int, ...], str] | None:
    """(signature, SHA-256) of a big archive just written (open as ``fd``, flushed and synced; ``digest`` taken
    as it was written, :class:`_HashingWriter`), and its pages dropped from the page cache (they are clean).
    ``None`` below :data:`HOT_DIGEST_FROM`.

    Why: a study lists its panel and attributions by checksum (:func:`file_digests`), and nobody reads them again
    until the report. At 10⁷ agents they are 8.5 GB: hashed later they were read back from the disk, and kept in
    the cache they pushed out the spilled panel (:func:`spill`) that the later stages read step by step."""
    st = os.fstat(fd)
    if st.st_size < HOT_DIGEST_FROM:
        return None
    if hasattr(os, "posix_fadvise"):
        with contextlib.suppress(OSError):  # advice only (a file system may not take it)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns), digest


#: raw bytes from which a member is deflated in blocks on two threads (:class:`_BlockDeflate`)
PARALLEL_DEFLATE_FROM = 64 * 2**20
_DEFLATE_BLOCK = 2**20  # raw bytes per block
_WINDOW = 32 * 1024  # deflate's window: each block is primed with the last 32 KiB before it
_DEFLATERS: dict[int, Any] = {}


def _deflater() -> Any:
    from concurrent.futures import ThreadPoolExecutor

    pool = _DEFLATERS.get(os.getpid())  # a forked child builds its own (threads do not survive fork)
    if pool is None:
        pool = _DEFLATERS[os.getpid()] = ThreadPoolExecutor(max_workers=2, thread_name_prefix="aumann-deflate")
    return pool


def _deflate_block(block: bytes, primer: bytes, level: int, final: bool) -> bytes:
    import zlib

    c = zlib.compressobj(level, zlib.DEFLATED, -15, zlib.DEF_MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY,
                         *((primer,) if primer else ()))
    return c.compress(block) + c.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)


class _BlockDeflate:
    """A zipfile compressor (``compress`` / ``flush``) that deflates 1 MiB blocks on two threads, as pigz does:
    each block is a raw deflate stream primed with the 32 KiB of input before it (so matches may reach back
    into it) and ended by a sync flush (byte-aligned, not final), the last one by a final block. Their
    concatenation is one valid deflate stream of the whole input, which any inflater reads. The bytes depend
    on the input only (fixed block size), never on the threads. zlib drops the GIL while it deflates."""

    def __init__(self, level: int) -> None:
        self.level = level
        self.pending = bytearray()
        self.primer = b""
        self.jobs: list[Any] = []

    def _submit(self, block: bytes, final: bool) -> None:
        self.jobs.append(_deflater().submit(_deflate_block, block, self.primer, self.level, final))
        self.primer = (self.primer + block)[-_WINDOW:]  # the 32 KiB before the next block

    def _ready(self, keep: int) -> bytes:
        out = []
        while len(self.jobs) > keep or (self.jobs and self.jobs[0].done()):
            out.append(self.jobs.pop(0).result())
        return b"".join(out)

    def compress(self, data: Any) -> bytes:
        self.pending += data
        if len(self.pending) >= _DEFLATE_BLOCK:
            whole = len(self.pending) // _DEFLATE_BLOCK * _DEFLATE_BLOCK
            view = memoryview(self.pending)
            for o in range(0, whole, _DEFLATE_BLOCK):
                self._submit(bytes(view[o:o + _DEFLATE_BLOCK]), final=False)
            view.release()
            del self.pending[:whole]
        return self._ready(keep=8)  # at most 8 blocks in flight

    def flush(self) -> bytes:
        self._submit(bytes(self.pending), final=True)
        self.pending = bytearray()
        return self._ready(keep=0)


#: largest JSON metadata record an ``.npz`` may carry
MAX_META_BYTES = 16 * 2**20


def memory_bytes() -> int:
    """This machine's physical memory in bytes (2⁴⁰ where the platform does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 2**40


def saved_npz(path: PathLike, *, what: str, error: type[Exception]) -> Path:
    """The ``.npz`` file a ``save(path)`` wrote: ``path`` itself when it exists, else ``path`` + ``.npz`` when that
    exists (``save`` appends ``.npz`` to the whole name — ``run.v2`` → ``run.v2.npz`` — so replacing the last
    suffix instead would read another file, ``run.npz``)."""
    path = as_path(path, what, error=error)
    if not path.exists() and path.suffix != ".npz":
        named = path.with_name(path.name + ".npz")
        if named.exists():
            return named
    return path


def read_npz(path: PathLike, *, error: type[Exception], what: str = "file",
             check: Any = None, within: PathLike | None = None, max_bytes: int | None = None,
             keys: Sequence[str] | None = None, rows: Mapping[str, int] | None = None,
             ) -> tuple[dict[str, np.ndarray], dict[str, Any] | None]:
    """Read an ``.npz`` written by :func:`write_npz` → (arrays, meta or ``None``).

    Nothing is allocated or decompressed before the archive's declarations are checked
    (:mod:`aumann.npz`): its zip directory and each ``.npy`` header (shape × itemsize = the size the zip
    declares, no expansion beyond deflate's, no object dtype), the metadata record (≤ 16 MiB, bounded
    JSON), then ``check(members, meta)`` — the caller's consistency rule over the declared shapes
    (``members``: name → :class:`aumann.npz.Member`), e.g. a panel's ``values`` (T, N, D) against its
    ``steps`` (T,) — and the total against ``max_bytes`` (default: the machine's physical memory).

    Anything that is not a readable ``.npz`` of plain arrays raises ``error`` with a message naming
    ``what``, the path and the problem: missing, a directory, empty, a lone ``.npy`` array, not a zip
    archive (random bytes), truncated or corrupted members, pickled objects, shapes that contradict the
    archive or each other, broken metadata.

    ``keys`` reads only those members; ``rows`` (member → index) keeps one row along a member's first axis,
    streamed (:func:`aumann.npz.load`): e.g. one step of a panel without holding the panel.
    """
    path = as_path(path, what, error=error)
    if path.is_dir():
        raise error(f"{what} {str(path)!r} is a directory, not an .npz file")
    if within is None and not path.is_file():
        raise error(f"no {what} at {str(path)!r}")
    shown = str(path)
    with open_read(path, within=within, what=what, error=error) as fh:
        head = fh.read(8)
        if not head:
            raise error(f"{what} {shown!r} is empty (0 bytes); was it truncated?")
        if head.startswith(b"\x93NUMPY"):
            raise error(f"{what} {shown!r} is a single .npy array, not an .npz archive")
        if not head.startswith(b"PK"):
            raise error(f"{what} {shown!r} is not an .npz archive (no zip signature at its start; got "
                        f"{head[:4]!r}): damaged, or another kind of file")
        fh.seek(0)
        meta_box: list[Any] = [None]

        def checked(members: Any) -> None:
            m = members.get(META_KEY)
            if m is not None:
                if m.dtype != np.uint8 or len(m.shape) != 1:
                    raise error(f"{what} {shown!r} has unreadable metadata (stored as {m.dtype} {m.shape})")
                raw = members.early.get(META_KEY)
                meta = bounded.loads_json(bytes(raw), what=f"the metadata of {what} {shown!r}", error=error,
                                          max_bytes=MAX_META_BYTES)
                if not isinstance(meta, dict):
                    raise error(f"{what} {shown!r} has metadata of type {type(meta).__name__}; expected an object")
                meta_box[0] = meta
            if check is not None:
                check({k: v for k, v in members.items() if k != META_KEY}, meta_box[0])

        meta_member = {META_KEY}

        def early_ok(members: Any) -> None:  # the metadata member is small before it is read
            for k in meta_member & set(members):
                if members[k].nbytes > MAX_META_BYTES:
                    raise error(f"{what} {shown!r} has a {members[k].nbytes:,}-byte metadata record (at most "
                                f"{MAX_META_BYTES:,})")

        data = npz.load(fh, error=error, what=what, path=shown, max_bytes=max_bytes or memory_bytes(),
                        check=checked, first=(META_KEY,), precheck=early_ok, keys=keys, rows=rows)
    data.pop(META_KEY, None)
    return data, meta_box[0]


def write_csv(path: PathLike, table: Any, columns: Sequence[str] | None = None, *,
              within: PathLike | None = None) -> Path:
    """Write a table as CSV atomically, cells as plain text numbers.

    ``table`` is a pandas DataFrame or a sequence of row mappings (``columns`` picks and orders the
    columns; default: the DataFrame's, or the keys of the rows in first-seen order). Numbers are written
    as Python writes them (``repr``: shortest text that reads back exactly, never ``np.float64(...)``);
    ``None``, NaN, ±inf, ``pd.NA`` and ``NaT`` are empty cells; booleans ``True``/``False``; datetimes ISO
    8601 text; anything else its ``str``. Text cells a spreadsheet would execute as a formula (starting
    with ``=``, ``+``, ``-``, ``@``, tab or CR, e.g. an agent id ``=HYPERLINK(...)``) get a leading
    apostrophe (:func:`neutralise_cell`); numbers are never changed (a negative number is not a formula).
    """

    if hasattr(table, "to_dict") and hasattr(table, "columns"):
        cols = [str(c) for c in (columns or list(table.columns))]
        rows: list[Mapping[str, Any]] = [{str(k): v for k, v in r.items()} for r in table.to_dict("records")]
    else:
        rows = list(table)
        cols = list(columns) if columns is not None else list(dict.fromkeys(k for r in rows for k in r))
    text = csv_text(cols, ([r.get(c) for c in cols] for r in rows))
    return write_text(path, text, within=within)


def time_text(v: Any) -> Any:
    """ISO 8601 text of a numpy datetime64 (``2026-05-25T00:00:00``) or timedelta64 (``3600 seconds``),
    elementwise for arrays (as a list); ``None`` for NaT. Never the nanosecond integer numpy's ``.item()``
    gives."""
    if isinstance(v, np.ndarray):
        return [time_text(x) for x in v.tolist()] if v.dtype.kind not in "mM" else [time_text(x) for x in v]
    if isinstance(v, np.datetime64):
        return None if np.isnat(v) else str(np.datetime_as_string(v))
    if isinstance(v, np.timedelta64):
        if np.isnat(v):
            return None
        unit = np.datetime_data(v.dtype)[0]
        names = {"D": "days", "h": "hours", "m": "minutes", "s": "seconds", "ms": "milliseconds",
                 "us": "microseconds", "ns": "nanoseconds", "W": "weeks", "Y": "years", "M": "months"}
        return f"{int(v.astype(np.int64))} {names.get(unit, unit)}"
    return v


#: characters that make a spreadsheet read a text cell as a formula (OWASP's CSV-injection list)
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _formula(text: str) -> bool:
    return bool(text) and text.startswith(FORMULA_TRIGGERS) and not _PLAIN_NUMBER.fullmatch(text)


def neutralise_cell(text: str) -> str:
    r"""``text`` safe for a spreadsheet: a text cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return gets a leading apostrophe (``'=HYPERLINK(...)``), which spreadsheets show as text and
    never execute; a plain number written as text (``-1.5``, ``+3e2``) stays as it is.
    :func:`read_csv_cell` removes the apostrophe again.

    Text that already starts with apostrophes before such a character (an id ``'=x``) gets one more
    (``''=x``), so it never reads back as the different id ``=x`` (which is written ``'=x``): two ids are never
    written as one cell. Any other text is written as it is.

    >>> neutralise_cell('=HYPERLINK("http://x")'), neutralise_cell("-1.5"), neutralise_cell("agent-7")
    ('\'=HYPERLINK("http://x")', '-1.5', 'agent-7')
    >>> neutralise_cell("'=x"), neutralise_cell("'quoted")
    ("''=x", "'quoted")
    """
    if _formula(text) or (text[:1] == "'" and _formula(text.lstrip("'"))):
        return "'" + text
    return text


def read_csv_cell(text: str) -> str:
    """The inverse of :func:`neutralise_cell` for a cell read back from one of aumann's CSVs."""
    if text[:1] == "'" and _formula(text.lstrip("'")):
        return text[1:]
    return text


def csv_text(columns: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """CSV text: a header of ``columns`` and one line per row of values (:func:`csv_cell` each).

    A row with a carriage return in a cell is written fully quoted (Python's ``csv`` quotes only the
    delimiter, the quote and the line terminator ``\\n``, so a bare CR would split the row for readers
    that take CR as a line end).
    """
    import csv

    buf = _io.StringIO()
    plain_w = csv.writer(buf, lineterminator="\n")
    quoted_w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
    for cells in ([neutralise_cell(str(c)) for c in columns], *([csv_cell(v) for v in r] for r in rows)):
        (quoted_w if any("\r" in c for c in cells) else plain_w).writerow(cells)
    return buf.getvalue()


def csv_cell(v: Any) -> str:
    """The text of one CSV cell (see :func:`write_csv`); text that a spreadsheet would execute is
    neutralised (:func:`neutralise_cell`); datetimes are ISO 8601 text."""
    if v is None:
        return ""
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, np.datetime64 | np.timedelta64):  # (np.timedelta64 is an np.integer)
        return time_text(v) or ""
    if isinstance(v, int | np.integer):
        return str(int(v))
    if isinstance(v, float | np.floating):
        f = float(v)
        return repr(f) if math.isfinite(f) else ""
    if isinstance(v, str):
        return neutralise_cell(v)
    if type(v).__name__ in ("NAType", "NaTType"):
        return ""
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return csv_cell(v[()])
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if isinstance(v, np.str_ | bytes):
        return neutralise_cell(str(v))
    return neutralise_cell(json.dumps(plain(v), allow_nan=False))


def record_checksum(obj: Any) -> str:
    """SHA-256 of the canonical JSON of :func:`plain` (``obj``) (sorted keys, no whitespace).

    A JSON record read back from disk gives the same checksum as the record that was written (floats
    print and parse exactly), so a stored checksum detects edited, truncated or incomplete records.
    """
    value = plain(obj)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    if _SURROGATE.search(text):  # as dumps_json writes it, so a record read back gives the same checksum
        text = json.dumps(_without_surrogates(value), sort_keys=True, separators=(",", ":"), allow_nan=False,
                          ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------- names that become paths
_FORBIDDEN_CHARS = '/\\:*?"<>|'
_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
MAX_NAME_BYTES = 200


#: bidirectional overrides, embeddings, isolates and marks: a name holding one is listed reordered
_REORDERING = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def safe_component(name: Any, what: str = "name") -> str:
    """``name`` if it can be used as one file or folder name on every OS, else :class:`UnsafeNameError`.

    The one rule for every name that becomes a path component (topics, scenario names, agent groups,
    context names, file stems), wherever it comes from (TOML, ``counts.json``, the Python API): a
    non-empty string of at most 200 UTF-8 bytes, not ``.`` or ``..``, without path separators (``/``,
    ``\\``), ``:*?"<>|``, control characters (C0, DEL, C1), bidirectional controls (U+202E, ...), leading or
    trailing whitespace, a trailing ``.``, or a Windows device name (``con``, ``nul``, ``com1``, …). So nothing a
    name holds can lead outside the folder it is joined to, or be listed as another name.

    >>> safe_component("trump-tariffs", "topic")
    'trump-tariffs'
    """
    if not isinstance(name, str):
        raise UnsafeNameError(f"{what} must be a string; got {type(name).__name__} {name!r}")
    shown = repr(name) if len(name) <= 80 else repr(name[:77] + "...")
    why = None
    if not name:
        why = "it is empty"
    elif name in (".", ".."):
        why = "it names a folder itself, not an entry in it"
    elif any(c in _FORBIDDEN_CHARS for c in name):
        why = f"it contains {next(c for c in name if c in _FORBIDDEN_CHARS)!r} (a path separator or a character " \
              "some file systems refuse)"
    elif any(ord(c) < 32 or 127 <= ord(c) <= 159 for c in name):
        why = "it contains a control character"
    elif (bidi := _REORDERING.search(name)) is not None:
        why = (f"it contains the bidirectional control U+{ord(bidi.group(0)):04X}, which lists the name reordered "
               "(with U+202E, 'a' + U+202E + 'exe.txt' is shown as 'atxt.exe')")
    elif _SURROGATE.search(name):
        why = "it contains a lone surrogate (text that is not UTF-8), which no file system name can hold"
    elif name != name.strip():
        why = "it starts or ends with whitespace"
    elif name.endswith("."):
        why = "it ends with '.'"
    elif name.split(".")[0].lower() in _RESERVED:
        why = "it is a reserved device name on Windows"
    elif len(name.encode("utf-8")) > MAX_NAME_BYTES:
        why = f"it is longer than {MAX_NAME_BYTES} bytes"
    if why is not None:
        raise UnsafeNameError(f"{what} {shown} cannot be used as a file or folder name: {why}")
    return name


def child_path(base: PathLike, *names: Any, what: str = "name") -> Path:
    """``base / names[0] / names[1] ...`` with every name checked by :func:`safe_component`."""
    out = Path(base)
    for n in names:
        out = out / safe_component(n, what)
    return out


def ensure_output_dir(path: PathLike, what: str = "output directory") -> Path:
    """Create ``path`` (with parents) and check that files can be written in it — before any work starts.

    Raises:
        OutputError: ``path`` (or a parent) is an existing file, or the folder cannot be created or written.
    """
    p = as_path(path, what, error=OutputError)
    if p.exists() and not p.is_dir():
        raise OutputError(f"{what} {str(p)!r} is an existing file, not a directory")
    if p.is_symlink() and not p.exists():
        raise OutputError(f"{what} {str(p)!r} is a symbolic link to {os.readlink(p)!r}, which does not exist: "
                          "create that directory, or give another path")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create {what} {str(p)!r}: {_os_reason(exc, p)}") from exc
    try:
        fd, probe = tempfile.mkstemp(dir=p, prefix=".aumann-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{what} {str(p)!r} is not writable: {exc.strerror or exc}") from exc
    return p


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: PathLike, *, chunk: int = 1 << 20, within: PathLike | None = None) -> str:
    """Hex SHA-256 of the file at ``path`` (read in chunks; :func:`confine` d to ``within`` when given)."""
    h = hashlib.sha256()
    with open_read(path, within=within, what="file", error=OutputError) as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_digests(within: PathLike, names: Sequence[str]) -> dict[str, str]:
    """``{name: SHA-256}`` of the files ``names`` (paths relative to the run directory ``within``).

    Stored in a finished record, so that :func:`check_digests` can later prove that every file a resume
    reads is the one that was written (not truncated, edited or swapped for another valid file).

    A file this process already hashed here, wrote with :func:`write_npz` from :data:`HOT_DIGEST_FROM`
    bytes, or wrote inside :func:`journaled` (which hashed it for the journal), is not read again while it is the
    same file: same device, inode, size, modification and status-change time (an atomic rewrite is a new inode; an
    edit in place, even one that puts the modification time back as ``cp -p`` or ``touch -r`` do, sets a new
    status-change time, which no program can set back). A run's record is written twice (after its required stages
    and after the optional ones) and lists its panel and attributions both times: 6 GB at 10⁷ agents, read back
    from disk.
    :func:`check_digests` reads unless asked to ``reuse`` these."""
    out = {}
    for n in names:
        path = Path(within) / n
        sig = _signature(path)
        key = os.path.abspath(path)
        hit = _DIGESTS.get(key)
        if sig is not None and hit is not None and hit[0] == sig:
            confine(path, within)
            out[str(n)] = hit[1]
            continue
        out[str(n)] = digest = sha256_file(path, within=within)
        if sig is not None and _signature(path) == sig:  # unchanged while it was read
            _DIGESTS[key] = (sig, digest)
    return out


#: {absolute path: ((device, inode, size, mtime, ctime), SHA-256)} of files hashed or written here (file_digests)
_DIGESTS: dict[str, tuple[tuple[int, ...], str]] = {}


def _signature(path: PathLike) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _remember_digest(path: PathLike, sig: tuple[int, ...], digest: str) -> None:
    """Remember ``digest`` for the file now at ``path`` (just renamed there), which had the signature ``sig`` when
    it was hashed: only when it is still that file, same device, inode, size and modification time. Its
    status-change time is taken now (our own chmod and rename changed it); a later edit changes it again."""
    now = _signature(path)
    if now is not None and now[:4] == sig[:4]:
        _DIGESTS[os.path.abspath(path)] = (now, digest)


def check_digests(within: PathLike, digests: Any, *, reuse: bool = False) -> list[tuple[str, str]]:
    """``[(name, why)]`` for each file of ``digests`` (as :func:`file_digests` wrote them) that is missing,
    unreadable, leads outside ``within`` or no longer matches; ``[]`` when every file verifies.

    Every file is read, unless ``reuse``: then a file this process hashed or wrote (:func:`file_digests`) and
    that is still the same file (device, inode, size, modification and status-change time) is checked against
    that digest. The page of a run is built by the process that has just written it (9 GB to read back at 10⁷
    agents); a copy, a swap or an edit of a file changes its signature, so it is read. Resume (a new process)
    always reads."""
    if not isinstance(digests, Mapping) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in digests.items()):
        return [("(checksums)", "the stored checksums are malformed")]
    bad: list[tuple[str, str]] = []
    for name, want in digests.items():
        p = Path(within) / name
        try:
            got = file_digests(within, [name])[name] if reuse else sha256_file(p, within=within)
        except PathEscapeError as exc:
            bad.append((name, str(exc)))
            continue
        except OutputError as exc:
            bad.append((name, "missing or unreadable" if not p.exists() else str(exc)))
            continue
        if got != want:
            bad.append((name, "does not match its checksum (truncated, edited or replaced)"))
    return bad


# ---------------------------------------------------------------------------------------------- spilled arrays
#: what :func:`spill` writes at a time (a 10⁷-agent panel is 7 GB; one write of it would need a second copy)
SPILL_CHUNK = 64 * 2**20

_SPILLED: dict[int, Any] = {}  # id → weak reference of each live spilled array (arrays are not hashable)


def spill(arr: np.ndarray, directory: PathLike | None = None) -> np.ndarray:
    """A read-only copy of ``arr`` (same dtype, shape and bytes) backed by an unnamed temporary file in
    ``directory`` (default: the temporary directory, ``$TMPDIR``), mapped into memory.

    Its pages are resident only while they are read; :func:`drop_spilled` hands them back to the page cache
    (they are re-read from it, or from the file, on the next access). A large study spills what it keeps
    for later stages but rarely reads -- a 10⁶-agent run's panel (720 MB) and its φ over every step
    (240 MB) -- so that the resident set holds only what the current stage works on. The file has no name
    and goes away with the last reference to the array."""
    import weakref

    src = np.ascontiguousarray(arr)
    with tempfile.TemporaryFile(dir=None if directory is None else str(directory)) as fh:
        raw = memoryview(src.reshape(-1)).cast("B") if src.size else memoryview(b"")
        for start in range(0, raw.nbytes, SPILL_CHUNK):
            fh.write(raw[start:start + SPILL_CHUNK])
        fh.flush()
        if src.nbytes == 0:
            return src.copy()
        out = np.memmap(fh, dtype=src.dtype, shape=src.shape, mode="r")  # the mapping outlives the descriptor
    key = id(out)
    _SPILLED[key] = weakref.ref(out, lambda _ref, key=key: _SPILLED.pop(key, None))
    return out


def _mapping_of(arr: Any) -> Any:
    """The ``mmap`` behind a spilled array or a view of one (``None`` for anything else)."""
    while arr is not None:
        mm = getattr(arr, "_mmap", None)
        if mm is not None:
            return mm
        arr = getattr(arr, "base", None)
    return None


def spilled(arr: Any) -> bool:
    """Whether ``arr`` is a spilled array (:func:`spill`) or a view of one."""
    return _mapping_of(arr) is not None


def drop_resident(arr: Any, upto: int | None = None) -> None:
    """Hand the resident pages of a spilled array (:func:`spill`) back to the page cache: all of them, or
    those of its first ``upto`` bytes. Nothing happens for an array that is not spilled."""
    import mmap

    mm = _mapping_of(arr)
    if mm is None or mm.closed or not hasattr(mm, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    size = len(mm) if upto is None else min(len(mm), (int(upto) // mmap.PAGESIZE) * mmap.PAGESIZE)
    if size > 0:
        mm.madvise(mmap.MADV_DONTNEED, 0, size)


def drop_spilled() -> None:
    """:func:`drop_resident` for every live spilled array (between the stages of a large study)."""
    for ref in list(_SPILLED.values()):
        arr = ref()
        if arr is not None:
            drop_resident(arr)


class _DropBehind:
    """A writable stream that forwards to ``fp`` and drops the pages of the spilled array ``arr`` already
    written (``np.lib.format.write_array`` streams 16 MiB chunks in order), so that writing a spilled array
    never makes all of it resident at once. The bytes written are those of the plain write."""

    def __init__(self, fp: Any, arr: np.ndarray) -> None:
        self.fp, self.arr, self.done, self.dropped = fp, arr, 0, 0

    def write(self, data: Any) -> int | None:
        n = self.fp.write(data)
        self.done += memoryview(data).nbytes
        if self.done - self.dropped >= SPILL_CHUNK:
            drop_resident(self.arr, self.done)
            self.dropped = self.done
        return n


__all__ = [
    "BOM",
    "FORMULA_TRIGGERS",
    "MAX_NAME_BYTES",
    "META_KEY",
    "OUTPUTS_COMPLETE",
    "OUTPUTS_JOURNAL",
    "OutputCheck",
    "RecordedOutputs",
    "adopt_outputs",
    "atomic_path",
    "check_digests",
    "check_outputs",
    "check_stale",
    "child_path",
    "confine",
    "copy_without_bom",
    "csv_cell",
    "csv_text",
    "drop_resident",
    "drop_spilled",
    "dumps_json",
    "ensure_output_dir",
    "file_digests",
    "journal_output",
    "journaled",
    "memory_bytes",
    "neutralise_cell",
    "open_read",
    "output_check",
    "plain",
    "read_csv_cell",
    "read_json",
    "read_npz",
    "record_checksum",
    "recorded_outputs",
    "remove_stale",
    "safe_component",
    "settle_journal",
    "sha256_bytes",
    "sha256_file",
    "spill",
    "spilled",
    "starts_with_bom",
    "time_text",
    "write_bytes",
    "write_csv",
    "write_json",
    "write_npz",
    "write_text",
]
