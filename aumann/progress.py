"""Rich progress bars for long computations (only when asked for; transient)."""

from __future__ import annotations

from typing import Any


class Bar:
    """A started Rich progress bar with one task; ``advance(n)`` and ``stop()``."""

    def __init__(self, total: int, label: str) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._prog: Any = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                   TimeElapsedColumn(), transient=True)
        self._task = self._prog.add_task(label, total=total)
        self._prog.start()

    def advance(self, n: int = 1) -> None:
        self._prog.advance(self._task, n)

    def stop(self) -> None:
        self._prog.stop()


def progress_bar(enabled: bool, total: int, label: str) -> Bar | None:
    """A :class:`Bar` when ``enabled`` and there is more than one unit of work, else ``None``."""
    if not enabled or total < 2:
        return None
    return Bar(total, label)


__all__ = ["Bar", "progress_bar"]
