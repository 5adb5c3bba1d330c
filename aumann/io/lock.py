"""One writer per output folder: an advisory lock (:func:`fcntl.flock`, exclusive and non-blocking) on the file
:data:`OUTPUTS_LOCK` inside the folder, taken by every aumann command that writes the folder (for the whole
command: :func:`lock_output_dir`), by every library function that writes one (``run_study``, ``run_crossscale``,
the Bluesky capture, ``write_build_outputs``, ``write_synth``, ``RawCounts.save``, ``render_report``: for their
whole write, :func:`output_lock`) and by every :func:`~aumann.io.journaled` block (for the block). Two commands
writing one folder at once interleaved their outputs, manifests and journals (the first to finish removed the
journal the other was still appending to); the second now stops at once with an
:class:`~aumann.errors.OutputBusyError` naming the folder and the other command (its PID and command line, which
the lock file records).

The kernel releases a ``flock`` when its holder exits, however it ends (killed too): a lock file a killed command
left behind blocks nobody (the next writer takes the lock and replaces what the file says). Commands that only read
a folder take no lock and never look at the file. The lock is re-entrant within a process; the file is opened
close-on-exec, so a program the command starts (a Ray daemon) never holds it after the command ends, and a forked
child (a ``fork`` process pool's worker, :func:`os.fork`) closes its copy of the descriptor as it starts
(:func:`os.register_at_fork`), so it never holds the lock either: a command killed with ``kill -9`` frees its
folder at once, not when the last of its workers exits (closing the child's copy leaves the parent's lock held:
a ``flock`` belongs to the open file, which the parent's descriptor still holds open). The holder removes the file
when it lets the lock go.

Where there is no ``flock`` (Windows), or the folder's file system refuses it (some network file systems), there is
no lock: commands write as they did before it (two at once into one folder may still interleave).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from aumann.errors import OutputBusyError, OutputError
from aumann.io import files as _files
from aumann.io.files import _FILE_MODE, PathLike, _os_reason

try:
    import fcntl
except ImportError:  # Windows: no flock, no lock (see the module's docstring)
    fcntl = None  # type: ignore[assignment]

#: the lock file of an output folder: an aumann command writing the folder holds an exclusive ``flock`` on it and
#: records there its PID, host, command line and start time (one JSON object); never an output, never in a manifest
OUTPUTS_LOCK = ".aumann-lock"
#: the longest lock record read back for a message
_RECORD_MAX = 8 * 1024


@dataclass
class _Held:
    fd: int
    pid: int  # the process that took it (only the taker removes the file; a forked child forgets it at once)
    ident: tuple[int, int]  # (device, inode) of the lock file it holds
    count: int = 1


#: {real path of the folder: its lock, held by this process}
_HELD: dict[str, _Held] = {}
#: held while a lock file is open but not yet in :data:`_HELD`, and across :func:`os.fork` (another thread forking
#: then would hand the child a descriptor :func:`_forget_in_child` does not know of)
_GUARD = threading.Lock()


def _forget_in_child() -> None:
    """In a forked child: close the inherited descriptor of every lock the parent holds and forget them (the child
    never holds its parent's lock; the parent's stays held, its own descriptor keeping the open file)."""
    global _GUARD
    _GUARD = threading.Lock()  # (the parent's, acquired across the fork, is not the child's to release)
    for held in _HELD.values():
        try:
            os.close(held.fd)
        except OSError:
            pass
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=lambda: _GUARD.acquire(), after_in_parent=lambda: _GUARD.release(),
                        after_in_child=_forget_in_child)


def _owned_folders() -> tuple[str, ...]:
    """The real paths of the folders whose lock this process holds (a real ``flock``: none where there is none), for
    :mod:`aumann.io.files`, which removes in them the temporary files of killed writes of each output it writes."""
    with _GUARD:
        return tuple(_HELD)


_files.OWNED_FOLDERS = _owned_folders


def _key(root: PathLike) -> str:
    return os.path.realpath(os.fspath(root))


def holds_output_lock(root: PathLike) -> bool:
    """Whether this process holds ``root``'s lock (or has none to take: no ``flock`` here)."""
    return fcntl is None or _key(root) in _HELD


def lock_output_dir(root: PathLike, *, command: str | None = None) -> None:
    """Take the lock of the output folder ``root`` (made if missing) for this process, until
    :func:`unlock_output_dir` (once per call), :func:`release_output_locks` or the process' end: an aumann command
    calls it before its work, once ``--out`` is checked. Re-entrant within the process. ``command`` (the command
    line, redacted) is recorded in the lock file for the message another command gets.

    Raises:
        OutputBusyError: another live process holds the lock (the message names the folder, and the other
            command's PID and line where its lock file records them).
        OutputError: the lock file cannot be made (no permission; a directory, FIFO or device of its name).
    """
    if fcntl is None:
        return
    with _GUARD:
        _lock(root, command)


def _lock(root: PathLike, command: str | None) -> None:
    key = _key(root)
    held = _HELD.get(key)
    if held is not None:
        held.count += 1
        return
    folder = Path(key)
    path = folder / OUTPUTS_LOCK
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_NONBLOCK", 0)
    for _ in range(16):  # (another holder may remove the file between our open and our lock: then again)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                path.unlink()  # a link is replaced, never locked through (as the journal's)
            fd = os.open(path, flags, _FILE_MODE)
        except OSError as exc:
            why = "it is an existing directory" if path.is_dir() else _os_reason(exc, path)
            raise OutputError(f"cannot lock the output folder {str(root)!r} (its lock file {str(path)!r}): {why}; "
                              "move or remove what is there, then run again") from exc
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise OutputError(f"cannot lock the output folder {str(root)!r}: its lock file {str(path)!r} is not a "
                              "regular file (a FIFO, a socket or a device); move or remove it, then run again")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_record(fd)
            os.close(fd)
            raise OutputBusyError(_busy_message(root, path, holder)) from None
        except OSError:  # a file system without flock (some network ones): no lock, as where there is no fcntl
            if os.fstat(fd).st_size == 0:  # the file this call made (no holder ever wrote it): not left behind
                _unlink_if(path, (st.st_dev, st.st_ino))
            os.close(fd)
            return
        try:
            now = os.stat(path, follow_symlinks=False)
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)  # its holder removed it as it let the lock go: the file the path names now is the lock
            continue
        _write_record(fd, command)
        _HELD[key] = _Held(fd, os.getpid(), (st.st_dev, st.st_ino))
        return
    raise OutputError(f"cannot lock the output folder {str(root)!r}: its lock file {str(path)!r} keeps being "
                      "replaced (other commands are starting there); wait, then run again")


def unlock_output_dir(root: PathLike) -> None:
    """Let go of one :func:`lock_output_dir` of ``root`` by this process; at the last one, the lock file is removed
    (while still locked, so no other command takes a file that is going) and the lock released."""
    key = _key(root)
    with _GUARD:
        held = _HELD.get(key)
        if held is None:
            return
        held.count -= 1
        if held.count <= 0:
            del _HELD[key]
            _release(key, held)


def _release(key: str, held: _Held) -> None:
    if held.pid == os.getpid():  # a forked child never removes its parent's lock file
        _unlink_if(Path(key) / OUTPUTS_LOCK, held.ident)
    try:
        os.close(held.fd)
    except OSError:
        pass


def _unlink_if(path: Path, ident: tuple[int, int]) -> None:
    """Remove the lock file at ``path`` when it is still the file ``ident`` (device, inode)."""
    try:
        now = os.stat(path, follow_symlinks=False)
        if (now.st_dev, now.st_ino) == ident:
            path.unlink()
    except OSError:
        pass  # gone, or a folder removed meanwhile: the lock goes with the descriptor


def release_output_locks() -> None:
    """Let go of every output-folder lock this process holds (the command line's end: :func:`aumann.cli.main`)."""
    with _GUARD:
        for key in list(_HELD):
            _release(key, _HELD.pop(key))


@contextmanager
def output_lock(root: PathLike, *, command: str | None = None) -> Iterator[None]:
    """:func:`lock_output_dir` for the block (re-entrant: a command that holds it already keeps it after)."""
    lock_output_dir(root, command=command)
    try:
        yield
    finally:
        unlock_output_dir(root)


def _write_record(fd: int, command: str | None) -> None:
    record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command,
              "started": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")}
    data = (json.dumps(record, ensure_ascii=True) + "\n").encode("ascii")
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
    except OSError:
        pass  # the record only serves the message another command gets; the lock holds without it


def _read_record(fd: int) -> dict[str, object]:
    try:
        raw = os.pread(fd, _RECORD_MAX, 0)
        rec = json.loads(raw.decode("ascii"))
    except (OSError, ValueError, RecursionError):
        return {}
    return rec if isinstance(rec, dict) else {}


def _busy_message(root: PathLike, path: Path, holder: dict[str, object]) -> str:
    who = "another aumann command"
    pid = holder.get("pid")
    if isinstance(pid, int) and not isinstance(pid, bool):
        who += f" (PID {pid}"
        host = holder.get("host")
        if isinstance(host, str) and host and host != socket.gethostname():
            who += f" on {host!r}"
        command = holder.get("command")
        if isinstance(command, str) and command:
            who += f": {' '.join(command.split())[:300]!r}"
        started = holder.get("started")
        if isinstance(started, str) and started:
            who += f", started {started[:40]}"
        who += ")"
    return (f"the output folder {str(root)!r} is being written now by {who}, which holds its lock {str(path)!r}; two "
            "commands writing one folder at once would mix their outputs: wait for it to finish, or choose another "
            "--out")


__all__ = ["OUTPUTS_LOCK", "holds_output_lock", "lock_output_dir", "output_lock", "release_output_locks",
           "unlock_output_dir"]
