"""The one bounded reader for JSON and TOML that comes from outside the process.

Python's ``json`` and ``tomllib`` recurse once per nesting level and read whatever size they are
given: a 5,000-deep ``[[[…]]]`` in a config file, a manifest, a ledger or a server reply ends in a
``RecursionError`` deep inside the parser, and a gigabyte "config" is read whole. Every reader of
outside text goes through this module instead, which checks **size** and **nesting depth** before
parsing (one linear scan over the bytes, strings excluded) and turns any parse failure into the
caller's typed error naming the input:

* :func:`loads_json` / :func:`read_json`  JSON text or file → Python objects;
* :func:`loads_toml` / :func:`read_toml`  TOML text or file → ``dict``;
* :func:`nesting_depth`  the structural depth of JSON/TOML text (brackets and braces outside strings).

Limits (keyword arguments; the defaults suit configs, records and replies):
``max_depth`` = :data:`MAX_DEPTH` levels and ``max_bytes`` = :data:`MAX_BYTES`.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import ConfigError

#: deepest nesting accepted by default (arrays/objects/tables inside each other)
MAX_DEPTH = 64
#: largest text accepted by default (bytes of UTF-8)
MAX_BYTES = 64 * 2**20
#: the most blank lines (empty, or spaces, tabs and carriage returns only) a compressed input may decode to: gzipped
#: trace files (:mod:`aumann.data.traces.duck`) and compressed Jetstream captures
#: (:mod:`aumann.data.bluesky.jetstream`). Deflate and zstd expand a run of line ends 1000-fold and more (zstd holds
#: 1 GiB of them in 33 KB): such a "newline bomb" held a reader for minutes to read nothing. Each reader counts where
#: the decoded text passes anyway and refuses the input as soon as this is passed
MAX_BLANK_LINES = 10_000_000

# Every alternative matches from any quote it starts at (an unterminated string runs to the end of the
# text, or of its line) and its loops are possessive, so the scan is linear whatever the input.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.|\\\Z)*+(?:"|\Z)', re.DOTALL)
_TOML_STRING = re.compile(
    rb'"""(?:(?!""")(?:[^\\]|\\.|\\\Z))*+(?:"""|\Z)'
    rb"|'''(?:(?!''').)*+(?:'''|\Z)"
    rb'|"(?:[^"\\\n]|\\.|\\\Z)*+(?:"|(?=\n)|\Z)'
    rb"|'[^'\n]*+(?:'|(?=\n)|\Z)"
    rb"|#[^\n]*+",
    re.DOTALL)
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def _as_bytes(text: str | bytes | bytearray | memoryview) -> bytes:
    if isinstance(text, str):
        return text.encode("utf-8", "surrogatepass")
    return bytes(text)


def nesting_depth(text: str | bytes, *, toml: bool = False) -> int:
    """Deepest nesting of ``[``/``{`` in ``text`` outside strings (and, for TOML, comments).

    A linear scan in C (a regular expression drops the strings, numpy counts the brackets); for a
    well-formed document it is the depth of its deepest value. Unbalanced text gives the running
    maximum, which is what a recursive parser would reach before failing.
    """
    raw = _as_bytes(text)
    stripped = (_TOML_STRING if toml else _JSON_STRING).sub(b"", raw)
    if not stripped:
        return 0
    steps = _OPEN[np.frombuffer(stripped, dtype=np.uint8)]
    if not steps.any():
        return 0
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def _check_limits(raw: bytes, what: str, error: type[Exception], max_depth: int, max_bytes: int,
                  toml: bool) -> None:
    if len(raw) > max_bytes:
        raise error(f"{what} is {len(raw):,} bytes, over the {max_bytes:,}-byte limit for this input; "
                    "is it the right file?")
    if raw.count(b"[") + raw.count(b"{") <= max_depth:  # fast path: too few brackets to nest that deep
        return
    depth = nesting_depth(raw, toml=toml)
    if depth > max_depth:
        raise error(f"{what} nests {depth:,} levels deep, over the limit of {max_depth} for this input "
                    "(damaged or hostile)")


def loads_json(text: str | bytes, *, what: str = "JSON input", error: type[Exception] = ConfigError,
               max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES, allow_nan: bool = True,
               object_pairs_hook: Any = None) -> Any:
    """Parse JSON ``text`` under size and depth limits (``object_pairs_hook``: :func:`json.loads`'s, which sees
    every object's keys as written, a key given twice included).

    Raises:
        error: ``text`` is larger than ``max_bytes``, nests deeper than ``max_depth``, is not UTF-8,
            is not valid JSON, or (``allow_nan=False``) holds ``NaN``/``Infinity``; the message names
            ``what``.
    """
    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    overflowed: list[str] = []

    def finite(text: str) -> float:  # 1e999 is Infinity by another name: float() overflows it silently
        value = float(text)
        if not math.isfinite(value) and not overflowed:
            overflowed.append(text[:40])  # refused below, naming where it is
        return value

    if isinstance(text, str) and 4 * len(text) <= max_bytes and text.count("[") + text.count("{") <= max_depth:
        decoded = text  # fast path (one line of a log): too short and too few brackets to exceed either limit
    else:
        raw = _as_bytes(text)
        _check_limits(raw, what, error, max_depth, max_bytes, toml=False)
        try:
            decoded = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise error(f"{what} is not UTF-8 text (byte {exc.start})") from exc
    try:
        if allow_nan:
            return json.loads(decoded, object_pairs_hook=object_pairs_hook)
        out = json.loads(decoded, parse_constant=refuse, parse_float=finite, object_pairs_hook=object_pairs_hook)
    except RecursionError as exc:  # the scan above makes this unreachable; kept as a last guard
        raise error(f"{what} nests too deeply to parse") from exc
    except ValueError as exc:
        raise error(f"{what} is not valid JSON: {str(exc)[:200]}") from exc
    if overflowed:
        where = _first_non_finite(out)
        raise error(f"{what} holds {overflowed[0]}{f' at {where}' if where else ''}, beyond the largest float "
                    "(Infinity is not a JSON number)")
    return out


def _first_non_finite(value: Any, path: str = "") -> str | None:
    """The path (``a.b[2]``) of the first float in ``value`` that is not finite (``None``: none)."""
    stack = [(value, path)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return at or "the top level"
        if isinstance(v, dict):
            stack.extend((x, f"{at}.{k}" if at else str(k)) for k, x in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((x, f"{at}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


def loads_toml(text: str | bytes, *, what: str = "TOML input", error: type[Exception] = ConfigError,
               max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """Parse TOML ``text`` under size and depth limits (a leading UTF-8 BOM is dropped).

    Raises:
        error: too large, too deep, not UTF-8, or not valid TOML; the message names ``what``.
    """
    raw = _as_bytes(text)
    _check_limits(raw, what, error, max_depth, max_bytes, toml=True)
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not UTF-8 text (byte {exc.start}); is it a binary file?") from exc
    if decoded.startswith("\ufeff"):
        decoded = decoded[1:]
    try:
        return tomllib.loads(decoded)
    except RecursionError as exc:
        raise error(f"{what} nests too deeply to parse") from exc
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{what} is not valid TOML: {exc}") from exc


def _read(path: str | os.PathLike[str], what: str, error: type[Exception], max_bytes: int) -> bytes:
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise error(f"{what} must be a path (a non-empty str or os.PathLike); got {path!r}")
    p = Path(path)
    if p.is_dir():
        raise error(f"{what} {str(p)!r} is a directory, not a file")
    if p.exists() and not p.is_file():  # a FIFO without a writer: open() waited for one for ever
        raise error(f"{what} {str(p)!r} is not a regular file (a pipe, socket or device); give a file")
    try:
        with open(p, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except FileNotFoundError as exc:
        raise error(f"{what} {str(p)!r} does not exist") from exc
    except OSError as exc:
        raise error(f"cannot read {what} {str(p)!r}: {exc.strerror or exc}") from exc
    if len(raw) > max_bytes:
        raise error(f"{what} {str(p)!r} is over the {max_bytes:,}-byte limit for this input; is it the right file?")
    return raw


def read_json(path: str | os.PathLike[str], *, what: str = "JSON file", error: type[Exception] = ConfigError,
              max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES, allow_nan: bool = True) -> Any:
    """Read and parse the JSON file at ``path`` (never more than ``max_bytes`` are read)."""
    raw = _read(path, what, error, max_bytes)
    return loads_json(raw, what=f"{what} {str(path)!r}", error=error, max_depth=max_depth, max_bytes=max_bytes,
                      allow_nan=allow_nan)


def read_toml(path: str | os.PathLike[str], *, what: str = "TOML file", error: type[Exception] = ConfigError,
              max_depth: int = MAX_DEPTH, max_bytes: int = MAX_BYTES) -> dict[str, Any]:
    """Read and parse the TOML file at ``path`` (never more than ``max_bytes`` are read)."""
    raw = _read(path, what, error, max_bytes)
    return loads_toml(raw, what=f"{what} {str(path)!r}", error=error, max_depth=max_depth, max_bytes=max_bytes)


__all__ = ["MAX_BLANK_LINES", "MAX_BYTES", "MAX_DEPTH", "loads_json", "loads_toml", "nesting_depth", "read_json",
           "read_toml"]
