"""The one progress helper: Rich progress bars for long work, only when asked for.

>>> bar = progress_bar(False, 10, "nothing shown")   # disabled → None; callers write `if bar:`
>>> bar is None
True

A :class:`Bar` has one task: ``advance(n)``, ``describe(text)`` (the label shown beside it), ``stop()``;
it is also a context manager, and extra Rich ``columns`` may follow the standard ones (e.g. live LLM
usage). Transient bars (the default, for work inside a library call) vanish when done; command-level
bars (``transient=False``) stay on screen as a record. Bars write to stderr so that a command's
stdout stays clean.

:class:`StageTimer` records the wall time of named stages (``timer.start("simulate")`` closes the
stage before it); run directories report it per stage (``manifest.json`` → ``stage_seconds``).

:func:`notice_if_slow` says on stderr, in one line, what a call is waiting for once it has waited a moment
(a file another process holds locked), so that a wait of up to a minute is never silent.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any


def rich_console(*, stderr: bool = False) -> Any:
    """A Rich console whose write to a reader that went away raises :class:`BrokenPipeError` (which
    :func:`aumann.cli.main` ends with exit code 141, as for every other output): Rich's own handling
    points stdout at ``os.devnull`` and raises ``SystemExit(1)``, so ``aumann demo | head -0`` exited 1."""
    from rich.console import Console

    class _PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True  # what is still buffered is not written again
            raise BrokenPipeError(32, "Broken pipe")

    return _PipeConsole(stderr=stderr)


class Bar:
    """A started Rich progress bar with one task."""

    def __init__(self, total: int, label: str, *, transient: bool = True, console: Any = None,
                 columns: Any = ()) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._prog: Any = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                   TimeElapsedColumn(), *columns, transient=transient,
                                   console=console or rich_console(stderr=True))
        self._task = self._prog.add_task(label, total=total)
        self._prog.start()

    def advance(self, n: int = 1) -> None:
        self._prog.advance(self._task, n)

    def describe(self, text: str) -> None:
        """Replace the label shown beside the bar (e.g. the stage a run is in)."""
        self._prog.update(self._task, description=text)

    def stop(self) -> None:
        self._prog.stop()

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def progress_bar(enabled: bool, total: int, label: str, *, transient: bool = True, minimum: int = 2) -> Bar | None:
    """A :class:`Bar` when ``enabled`` and there are at least ``minimum`` units of work, else ``None``."""
    if not enabled or total < minimum:
        return None
    return Bar(total, label, transient=transient)


class StageTimer:
    """Wall time per named stage: ``start(name)`` ends the running stage and starts ``name``.

    A stage started more than once accumulates (e.g. "simulate" over several runs).

    Stages may run at the same time on threads of their own (the study's lanes,
    :func:`aumann.studies.stages.run_stages`): each thread has its own running stage, ended by that thread's next
    ``start``, by :func:`end_thread` (the lanes call it as they start and end) or by :meth:`stop`. Stages that ran
    at the same time each get their own wall time, so the times can add up to more than the whole.

    >>> t = StageTimer()
    >>> t.start("load"); t.start("attribute"); t.stop()
    >>> sorted(t.seconds)
    ['attribute', 'load']
    """

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self._clock = clock
        self._running: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}
        _TIMERS.add(self)

    def start(self, name: str) -> None:
        """End the calling thread's running stage (if any) and start ``name``."""
        me = threading.get_ident()
        with self._lock:
            now = self._clock()
            self._close(me, now)
            self._running[me] = (name, now)

    def stop(self) -> None:
        """End every running stage."""
        with self._lock:
            now = self._clock()
            for thread in list(self._running):
                self._close(thread, now)

    def end_thread(self) -> None:
        """End the calling thread's running stage."""
        with self._lock:
            self._close(threading.get_ident(), self._clock())

    def _close(self, thread: int, now: float) -> None:
        running = self._running.pop(thread, None)
        if running is not None:
            name, since = running
            self.seconds[name] = self.seconds.get(name, 0.0) + (now - since)

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` measured elsewhere to stage ``name``."""
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + float(seconds)

    def seconds_in(self, order: Any) -> dict[str, float]:
        """:attr:`seconds` with the stages named in ``order`` first, in that order (stages that ran at the same
        time started in whichever order the threads came to them), then the others as they came."""
        first = {name: self.seconds[name] for name in order if name in self.seconds}
        return {**first, **{k: v for k, v in self.seconds.items() if k not in first}}

    @property
    def total(self) -> float:
        return float(sum(self.seconds.values()))


_TIMERS: weakref.WeakSet[StageTimer] = weakref.WeakSet()


def end_thread() -> None:
    """The calling thread's stage has ended (a lane of stages finished on it): every live
    :class:`StageTimer` ends that thread's running stage."""
    for timer in list(_TIMERS):
        timer.end_thread()


@contextlib.contextmanager
def notice_if_slow(message: str, after: float = 1.0) -> Iterator[None]:
    """Print ``message`` as one line on stderr if the block is still running ``after`` seconds in; nothing when it
    ends sooner. For waits that give no sign of life otherwise (SQLite's busy timeout on a file another process
    holds locked): the line says what is waited on, for how long at most, and how to avoid it. The block must
    release the GIL while it waits (SQLite does)."""
    done = threading.Event()

    def say() -> None:
        if not done.wait(after):
            try:
                print(message, file=sys.stderr, flush=True)
            except (OSError, ValueError):  # stderr closed or gone: the wait itself goes on
                pass

    threading.Thread(target=say, name="aumann-wait-notice", daemon=True).start()
    try:
        yield
    finally:
        done.set()


__all__ = ["Bar", "StageTimer", "end_thread", "notice_if_slow", "progress_bar", "rich_console"]
