"""The packaged default configs, and how user configs layer over them.

The TOML files in this folder are package data: a regular (non-editable) ``pip install`` ships them,
and they are found through :mod:`importlib.resources`, never by climbing the source tree.

* :func:`path` — the on-disk path of a packaged file or folder (``"social-llm.toml"``, ``"topics"``);
* :func:`load_toml` — a TOML file as a dict, with a typed :class:`~aumann.errors.ConfigError` for a
  missing, unreadable, binary or malformed file;
* :func:`deep_merge` — a user config over the defaults: only the keys it sets change, tables merge
  recursively;
* :func:`parse_assignment` / :func:`apply_assignments` — ``--set key=value`` overrides
  (``study.permutations=200`` for a key in a table; values parse as TOML literals, else strings).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import os
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from aumann.errors import ConfigError

_EXTRACTED = contextlib.ExitStack()
atexit.register(_EXTRACTED.close)


def path(name: str) -> Path:
    """The filesystem path of the packaged config file or folder ``name`` (e.g. ``"topics"``).

    Raises:
        ConfigError: no such packaged file.
    """
    res = resources.files(__name__).joinpath(name)
    if not res.is_file() and not res.is_dir():
        raise ConfigError(f"no packaged config {name!r} in aumann/configs")
    if isinstance(res, Path):
        return res
    return Path(_EXTRACTED.enter_context(resources.as_file(res)))  # zip-imported package: extract once


def load_toml(source: str | os.PathLike[str], *, what: str = "config file") -> dict[str, Any]:
    """Read a TOML file into a dict.

    Raises:
        ConfigError: the file is missing, is a directory, is not UTF-8 text, or is not valid TOML
            (the message names the file).
    """
    p = Path(source)
    if not p.is_file():
        raise ConfigError(f"{what} {str(p)!r} does not exist" if not p.exists() else f"{what} {str(p)!r} is not a file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {str(p)!r} is not UTF-8 text (byte {exc.start}); is it a binary file?") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}") from exc
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{what} {str(p)!r} is not valid TOML: {exc}") from exc


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it: tables merge key by key, anything else is replaced.

    >>> deep_merge({"agents": 10, "study": {"permutations": 1000, "k_del": 5}}, {"study": {"permutations": 50}})
    {'agents': 10, 'study': {'permutations': 50, 'k_del': 5}}
    """
    out = copy.deepcopy(dict(base))
    for key, val in override.items():
        if isinstance(val, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], val)
        else:
            out[key] = copy.deepcopy(val)
    return out


def parse_assignment(text: str) -> dict[str, Any]:
    """``"study.permutations=200"`` → ``{"study": {"permutations": 200}}``.

    The value is read as a TOML literal (``200``, ``0.5``, ``true``, ``"x"``, ``[1, 2]``); anything that
    is not one is kept as a plain string (``interaction=synchronous``).

    Raises:
        ConfigError: no ``=``, or an empty key or key part.
    """
    key, sep, raw = str(text).partition("=")
    key = key.strip()
    parts = key.split(".")
    if not sep or not key or any(not p.strip() for p in parts):
        raise ConfigError(f"--set takes KEY=VALUE (dotted keys for tables, e.g. study.permutations=200); got {text!r}")
    raw = raw.strip()
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    out: dict[str, Any] = {}
    node = out
    for p in parts[:-1]:
        node = node.setdefault(p.strip(), {})
    node[parts[-1].strip()] = value
    return out


def apply_assignments(data: Mapping[str, Any], assignments: Iterable[str]) -> dict[str, Any]:
    """``data`` with every ``KEY=VALUE`` of ``assignments`` laid over it (later ones win)."""
    out = dict(data)
    for a in assignments:
        out = deep_merge(out, parse_assignment(a))
    return out


__all__ = ["apply_assignments", "deep_merge", "load_toml", "parse_assignment", "path"]
