"""Files of a run directory opened, written and removed in one place: confined reads (:func:`confine`,
:func:`open_read`, :func:`read_json`), atomic writes (:func:`atomic_path`, :func:`write_bytes`), removal of an earlier
output (:func:`remove_stale`) and the SHA-256 of what is on disk (:func:`sha256_file`, and the digests remembered for
files this process hashed or wrote while they are unchanged).

The ground under :mod:`aumann.io` (which re-exports every public name here) and :mod:`aumann.io.outputs` (which
journals each output as :func:`atomic_path` is about to rename it into place, through :data:`BEFORE_RENAME`).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from aumann import bounded
from aumann.checks import as_path
from aumann.errors import ConfigError, OutputError, PartialWriteWarning, PathEscapeError

PathLike = str | os.PathLike[str]


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
    if within is not None:  # (and without blocking: opening a FIFO waited for a writer, for ever)
        flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(target, flags)
    except FileNotFoundError as exc:
        raise error(f"no {what} at {str(p)!r}") from exc
    except OSError as exc:
        raise error(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}") from exc
    if within is not None:
        # a run directory's file is a regular file: a FIFO, a socket or a device there is no file aumann wrote (a
        # FIFO with the journal's or the manifest's name hung every command into the folder)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise error(f"{what} {str(p)!r} is not a regular file (a FIFO, a socket or a device)")
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


#: what :func:`atomic_path` calls with (the target, the temporary file) just before the rename: set for its block by
#: :func:`aumann.io.outputs.journaled`, which journals the file and returns the (signature, SHA-256) it took of it
BEFORE_RENAME: ContextVar[Callable[[Path, Path], tuple[tuple[int, ...], str] | None] | None] = ContextVar(
    "aumann_before_rename", default=None)


def partial_write(name: str) -> bool:
    """Whether the file name ``name`` is one :func:`atomic_path` gives its temporary file (``.NAME.XXXXXXXX.tmpSUFFIX``
    beside ``NAME``): what a write killed before its rename (SIGKILL, the OOM killer, a power cut) leaves behind. It
    was never any command's output, nor a file of yours: a folder's listing of outputs passes over it, and the next
    write of ``NAME`` under the folder's lock removes it (:func:`remove_partial_writes`).

    >>> partial_write(".mythos.npz.k3j2h1ab.tmp.npz"), partial_write("mythos.npz"), partial_write(".notes.txt")
    (True, False, False)
    """
    m = _PARTIAL.fullmatch(name)
    return m is not None and (m.group(3) or "") == Path(m.group(1)).suffix


#: the name of :func:`atomic_path`'s temporary file (``tempfile.mkstemp``: 8 characters of [a-z0-9_] between)
_PARTIAL = re.compile(r"\.(.+)\.([a-z0-9_]{8})\.tmp(\.[^.]*)?")

#: a temporary file of a killed write modified less than this many seconds ago is kept (:func:`remove_partial_writes`):
#: the folder's lock keeps every aumann command of this version out while it is held, but not a process it does not
#: bind (an older aumann, a script calling ``Panel.save`` there), whose write may be going on
PARTIAL_WRITE_GRACE_S = 600.0
#: the temporary files :func:`atomic_path` has made in this process and not yet renamed or removed (never swept)
_IN_FLIGHT: set[str] = set()
#: the fresh temporary files of killed writes already said to be kept (a manifest written three times says it once)
_SAID_KEPT: set[str] = set()


def _no_folders() -> tuple[str, ...]:
    return ()


#: the real paths of the output folders whose lock this process holds (:mod:`aumann.io.lock` sets it): writing or
#: removing a file inside one removes the temporary files of the writes of that name killed before their rename
OWNED_FOLDERS: Callable[[], tuple[str, ...]] = _no_folders


def _partial_pattern(name: str) -> re.Pattern[str]:
    """The names :func:`atomic_path` gives the temporary files of ``name``, exactly (``tempfile.mkstemp``'s 8
    characters of [a-z0-9_] between the prefix ``.NAME.`` and the suffix ``.tmpSUFFIX``)."""
    return re.compile(r"\." + re.escape(name) + r"\.[a-z0-9_]{8}\.tmp" + re.escape(Path(name).suffix))


def remove_partial_writes(path: PathLike, *, grace: float | None = None,
                          ) -> tuple[list[tuple[str, int]], list[tuple[str, float]]]:
    """Remove the temporary files that writes of ``path`` killed before their rename left beside it
    (``.NAME.XXXXXXXX.tmpSUFFIX``, :func:`atomic_path`'s exact pattern for that name, regular files only): those
    this process is not writing now and nobody modified in the last ``grace`` seconds (default
    :data:`PARTIAL_WRITE_GRACE_S`). Call it only where no other
    aumann command can be writing (under the folder's lock). Returns ``([(name, bytes) removed],
    [(name, seconds since modified) kept as maybe in progress])``; one that cannot be removed is kept as it is."""
    p = Path(path)
    grace = PARTIAL_WRITE_GRACE_S if grace is None else grace
    pattern = _partial_pattern(p.name)
    removed: list[tuple[str, int]] = []
    kept: list[tuple[str, float]] = []
    try:
        entries = [e for e in os.scandir(p.parent) if pattern.fullmatch(e.name)]
    except OSError:
        return removed, kept
    now = time.time()
    for entry in sorted(entries, key=lambda e: e.name):
        full = os.path.abspath(entry.path)
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode) or full in _IN_FLIGHT:
            continue
        age = now - st.st_mtime
        if age < grace:
            kept.append((entry.name, max(age, 0.0)))
            continue
        try:
            os.unlink(full)
        except FileNotFoundError:
            continue
        except OSError:
            continue  # (no permission: kept, as any file aumann cannot remove)
        removed.append((entry.name, st.st_size))
    return removed, kept


def _sweep_partial_writes(path: Path) -> None:
    """After ``path`` was written or removed: inside an output folder whose lock this process holds (the command has
    checked its outputs, and no other aumann command writes there), remove what killed writes of that name left
    (:func:`remove_partial_writes`) and say so in a :class:`~aumann.errors.PartialWriteWarning`, naming each."""
    owned = OWNED_FOLDERS()
    if not owned:
        return
    parent = os.path.realpath(path.parent)
    if not any(_inside(parent, root) for root in owned):
        return
    removed, kept = remove_partial_writes(path)
    kept = [(name, age) for name, age in kept if os.path.join(parent, name) not in _SAID_KEPT]  # (said once)
    _SAID_KEPT.update(os.path.join(parent, name) for name, _ in kept)
    if not removed and not kept:
        return
    words = []
    if removed:
        n, size = len(removed), sum(b for _, b in removed)
        words.append(f"removed {n} temporary file{'s' * (n > 1)} left by {'writes' if n > 1 else 'a write'} of it "
                     f"killed before the rename ({', '.join(name for name, _ in removed)}; {_size_text(size)})")
    if kept:
        n = len(kept)
        words.append(f"kept {n} modified in the last {PARTIAL_WRITE_GRACE_S / 60:g} minutes, which another program may "
                     f"still be writing ({', '.join(f'{name}, {age:.0f} s ago' for name, age in kept)}): a later "
                     "run removes it once it is older")
    warnings.warn(PartialWriteWarning(f"{str(path)!r}: " + "; ".join(words)), stacklevel=2)


def _size_text(n: int) -> str:
    if n < 1000:
        return f"{n} bytes"
    size = float(n)
    for unit in ("kB", "MB", "GB"):
        size /= 1000
        if size < 1000 or unit == "GB":
            break
    return f"{size:.1f} {unit}"


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
    _IN_FLIGHT.add(os.path.abspath(tmp))
    try:
        yield tmp
        journaled_as = None
        if tmp.exists():
            os.chmod(tmp, _FILE_MODE)
            hook = BEFORE_RENAME.get()
            journaled_as = hook(path, tmp) if hook is not None else None
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
    finally:
        _IN_FLIGHT.discard(os.path.abspath(tmp))
    _sweep_partial_writes(path)


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
    _sweep_partial_writes(p)
    return True


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



__all__ = ["BEFORE_RENAME", "PathLike", "atomic_path", "confine", "open_read", "partial_write", "read_json",
           "remove_stale", "sha256_bytes", "sha256_file", "write_bytes"]
