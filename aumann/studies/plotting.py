"""matplotlib for every static figure aumann draws: the Agg backend, and text always drawn as plain text.

matplotlib reads a pair of ``$`` in any string as TeX math (mathtext), so a scenario named ``a$^{b`` or an
agent id ``$\\x$`` in a title, a label or a tick made ``savefig`` raise after all the compute was done (and
``text.usetex = True`` in a user's matplotlibrc would hand those strings to LaTeX). Every figure function
runs inside :func:`plain_text` (``text.parse_math`` and ``text.usetex`` off, scoped: the caller's own
matplotlib settings are left as they were), so names, ids, topics and titles are drawn exactly as written; a
control character in them (no glyph) is left out of the drawing without matplotlib's warning, which would
print the raw character to the terminal.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: the settings every figure is drawn with: strings are text, never math or LaTeX
PLAIN_TEXT = {"text.parse_math": False, "text.usetex": False}
#: matplotlib's "Glyph N (c) missing from font(s)" warning for a C0 control, DEL or a C1 control (silenced
#: inside :func:`plain_text`: it would echo the raw control character to the terminal)
CONTROL_GLYPH_WARNING = r"Glyph (?:[0-9]|[12][0-9]|3[01]|12[7-9]|1[3-5][0-9]) \("


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (imported on first use)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def plain_text() -> Iterator[None]:
    """A block in which every text matplotlib creates or draws is plain text (see the module docstring)."""
    import warnings

    import matplotlib

    with matplotlib.rc_context(PLAIN_TEXT), warnings.catch_warnings():
        # a control character in an id or a name has no glyph, and matplotlib's warning about it prints the raw
        # character (ESC, CR, ...) to the terminal; the figure simply shows nothing there
        warnings.filterwarnings("ignore", message=CONTROL_GLYPH_WARNING)
        yield


def plain_text_figures(fn: F) -> F:
    """Decorate a function that builds and saves figures so it runs inside :func:`plain_text`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with plain_text():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


__all__ = ["CONTROL_GLYPH_WARNING", "PLAIN_TEXT", "plain_text", "plain_text_figures", "pyplot"]
