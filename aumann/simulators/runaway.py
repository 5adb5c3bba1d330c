"""Tell a RecursionError of a function that calls itself without end from one of a deep object graph.

``copy.deepcopy`` of a model whose agents keep their neighbours recurses once per object: the innermost frames of
its ``RecursionError`` are ``copy``'s own (``deepcopy``, ``_reconstruct``, ``_deepcopy_dict``), and a deeper stack
fixes it. A function of the model's that calls itself without end fails the same way, on any stack: the innermost
frames are that function alone -- mesa-replay's ``CacheableModel.__getattr__`` forwards every missing name to
``self.model``, which the half-built copy that ``deepcopy`` makes (without ``__init__``) does not have yet, so it
asks itself for ``model`` again and again. :func:`runaway_function` names that function, so the error can say what
to fix rather than blame the size of the model.
"""

from __future__ import annotations

import collections
import copy
import os

_WINDOW = 64  # innermost frames looked at: a loop fills them with one function (or a short cycle of a few)
_MAX_CYCLE = 3  # distinct functions a runaway cycle may pass through (f -> g -> f)
_COPY_FILE = os.path.normcase(copy.__file__)


def runaway_function(exc: BaseException) -> str | None:
    """``"qualname (file:line)"`` of the function that recursed without end into ``exc``, or ``None``.

    A runaway: the innermost :data:`_WINDOW` frames of ``exc``'s traceback pass through at most :data:`_MAX_CYCLE`
    functions and none of them is ``copy``'s (a deep object graph recurses through ``copy.deepcopy`` itself). The
    function named is the one most of those frames are in. ``None`` for a traceback shorter than the window.
    """
    last: collections.deque = collections.deque(maxlen=_WINDOW)
    tb = exc.__traceback__
    while tb is not None:  # outermost first; a 200,000-frame traceback is walked in milliseconds
        last.append(tb.tb_frame.f_code)
        tb = tb.tb_next
    if len(last) < _WINDOW:
        return None
    counts = collections.Counter(last)
    if len(counts) > _MAX_CYCLE or any(os.path.normcase(c.co_filename) == _COPY_FILE for c in counts):
        return None
    code = counts.most_common(1)[0][0]
    return f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"


def runaway_advice(where: str) -> str:
    """What to do about :func:`runaway_function`'s find ``where`` when ``copy.deepcopy`` ran into it."""
    if ".__getattr__ (" in where:
        return ("copy.deepcopy builds the copy without running __init__ and then looks names such as __setstate__ "
                "up on it; a __getattr__ that forwards them to an attribute the half-built copy does not have yet "
                "(self.model in a wrapper) asks itself for that attribute forever. Make __getattr__ raise "
                "AttributeError for a name it cannot serve (e.g. when 'model' is not in self.__dict__), give the "
                "class a __deepcopy__, or fork by replay (factory=...)")
    return "give the model a __deepcopy__ that avoids it, or fork by replay (factory=...)"


__all__ = ["runaway_advice", "runaway_function"]
