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
"""

from __future__ import annotations

import time
from typing import Any


class Bar:
    """A started Rich progress bar with one task."""

    def __init__(self, total: int, label: str, *, transient: bool = True, console: Any = None,
                 columns: Any = ()) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._prog: Any = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                   TimeElapsedColumn(), *columns, transient=transient,
                                   console=console or Console(stderr=True))
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

    >>> t = StageTimer()
    >>> t.start("load"); t.start("attribute"); t.stop()
    >>> sorted(t.seconds)
    ['attribute', 'load']
    """

    def __init__(self, clock: Any = time.perf_counter) -> None:
        self._clock = clock
        self._current: str | None = None
        self._since = 0.0
        self.seconds: dict[str, float] = {}

    def start(self, name: str) -> None:
        """End the running stage (if any) and start ``name``."""
        now = self._clock()
        self._close(now)
        self._current, self._since = name, now

    def stop(self) -> None:
        """End the running stage."""
        self._close(self._clock())
        self._current = None

    def _close(self, now: float) -> None:
        if self._current is not None:
            self.seconds[self._current] = self.seconds.get(self._current, 0.0) + (now - self._since)

    def add(self, name: str, seconds: float) -> None:
        """Add ``seconds`` measured elsewhere to stage ``name``."""
        self.seconds[name] = self.seconds.get(name, 0.0) + float(seconds)

    @property
    def total(self) -> float:
        return float(sum(self.seconds.values()))


__all__ = ["Bar", "StageTimer", "progress_bar"]
