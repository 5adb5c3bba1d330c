"""Mutable objects that a replayed model shares with its original (a module-level default, a global graph).

A replay rebuilds the model with ``factory()``. When the model's constructor takes a mutable object it does not
make itself — mesa-examples' ``aco_tsp`` has ``def __init__(self, tsp_graph=TSPGraph.from_random(20))``, a
default built once when the module is imported — every model the factory builds holds the *same* graph: the
replay's steps (and the constructor's own re-initialisation of the pheromones) write into the original's graph,
and the branch and the original no longer describe two runs. :func:`shared_state` finds such objects by
identity, two levels deep: the model's attributes, and the attributes or items of those (``model.grid.G``).
It cannot see deeper sharing, or sharing through objects that are not plain Python containers or instances.

Objects that are immutable (numbers, text, tuples, frozensets, read-only arrays, frozen dataclasses), code
(classes, functions, modules), and objects whose type defines its own ``__deepcopy__`` (aumann's LLM backends,
response caches and usage meters return themselves there, to be shared by every branch on purpose) are not
reported.
"""

from __future__ import annotations

import dataclasses
import enum
import types
from collections.abc import Iterator
from typing import Any

import numpy as np

_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, tuple, frozenset, range, type, enum.Enum,
              np.generic, np.dtype, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
              types.ModuleType)
_ITEMS_CAP = 10_000  # items of one container looked at (a model's agent dict): identity checks are cheap


def _mutable(obj: Any) -> bool:
    if isinstance(obj, _IMMUTABLE) or (callable(obj) and not hasattr(obj, "__dict__")):
        return False
    if isinstance(obj, np.ndarray):
        return bool(obj.flags.writeable)
    if dataclasses.is_dataclass(obj) and getattr(type(obj), "__dataclass_params__", None) is not None \
            and type(obj).__dataclass_params__.frozen:
        return False
    return getattr(type(obj), "__deepcopy__", None) is None  # a type that copies itself decides what it shares


def _children(obj: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict):
        for k, (key, v) in enumerate(obj.items()):
            if k >= _ITEMS_CAP:
                return
            yield f"[{key!r}]", v
    elif isinstance(obj, list | set):
        for k, v in enumerate(obj):
            if k >= _ITEMS_CAP:
                return
            yield f"[{k}]", v
    else:
        try:
            attrs = vars(obj)
        except TypeError:
            return
        for name, v in list(attrs.items()):
            yield f".{name}", v


def shared_state(original: Any, branch: Any) -> list[str]:
    """Paths (``".tsp_graph"``, ``".grid.G"``) of mutable objects that ``branch`` holds and that are the very
    objects ``original`` holds, two levels deep (see the module's docstring for what is not reported)."""
    if original is branch:
        return ["(the same model)"]
    theirs: set[int] = set()
    keep: list[Any] = []  # keep what was looked at alive, so an id() is not reused during the walk
    for _, v in _children(original):
        if _mutable(v):
            theirs.add(id(v))
            keep.append(v)
            for _, w in _children(v):
                if _mutable(w):
                    theirs.add(id(w))
                    keep.append(w)
    found: list[str] = []
    for path, v in _children(branch):
        if not _mutable(v):
            continue
        if id(v) in theirs:
            found.append(path)
            continue
        found += [path + sub for sub, w in _children(v) if _mutable(w) and id(w) in theirs]
    return found


__all__ = ["shared_state"]
