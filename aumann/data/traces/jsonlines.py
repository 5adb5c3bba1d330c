"""Byte scans of JSON lines tables, in numpy blocks, for what DuckDB's reader does not tell: the rows where an
object gives a key the spec reads twice (:func:`_repeated_keys`). Rows are counted as DuckDB counts them: lines
holding more than whitespace.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from aumann import io as aio
from aumann.data.traces.duck import _opens
from aumann.data.traces.events import repeated_key

_BLANK = re.compile(rb"^[ \t\r\f\v]*\n", re.MULTILINE)


def _nonblank(chunk: bytes, a: int, b: int) -> int:
    """Lines of ``chunk[a:b]`` (both at line starts) that hold more than whitespace: DuckDB's rows."""
    return chunk.count(b"\n", a, b) - len(_BLANK.findall(chunk, a, b))


def _key_lines(arr: np.ndarray, nl: np.ndarray, key: bytes, freq: np.ndarray) -> np.ndarray:
    """Indices (into the lines that ``nl``, the positions of the newlines, end) of the lines of ``arr`` where
    ``key`` occurs more than once (vectorised: the positions of the key's byte that is rarest in ``arr``, whose
    byte counts ``freq`` are, narrowed byte by byte)."""
    n = arr.shape[0] - len(key) + 1
    if n <= 0:
        return np.empty(0, dtype=np.int64)
    a = min(range(len(key)), key=lambda j: freq[key[j]])
    pos = np.flatnonzero(arr[a:a + n] == key[a])
    for j, byte in enumerate(key):
        if j != a:
            pos = pos[arr[pos + j] == byte]
    line = np.searchsorted(nl, pos)
    return np.unique(line[1:][line[1:] == line[:-1]])


_HEX = np.full(256, -1, dtype=np.int64)
_HEX[np.frombuffer(b"0123456789", dtype=np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", dtype=np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"ABCDEF", dtype=np.uint8)] = np.arange(10, 16)


def _escape_lines(arr: np.ndarray, nl: np.ndarray, chars: np.ndarray) -> np.ndarray:
    """Indices of the lines of ``arr`` holding a ``\\uXXXX`` escape of one of the characters ``chars`` (code points)
    of the keys the spec reads: ``"\\u0061gent"`` is the key ``"agent"``, which the key's text does not find
    (vectorised: one pass for the backslashes, which are few)."""
    bs = np.flatnonzero(arr[:-5] == 92)  # a backslash with room for u and four hex digits after it
    bs = bs[arr[bs + 1] == 117]  # \u
    if bs.size == 0:
        return np.empty(0, dtype=np.int64)
    digits = _HEX[arr[bs[:, None] + np.arange(2, 6)]]
    cp = digits @ np.array([4096, 256, 16, 1])
    hit = bs[(digits >= 0).all(axis=1) & np.isin(cp, chars)]
    return np.unique(np.searchsorted(nl, hit))


def _repeated_keys(files: list[Path], names: dict[str, str], paths: list[tuple[str, ...]]) -> dict[str, dict[int, str]]:
    """{file: {row: field path}} of the JSON lines where an object on a path the spec reads gives its key twice
    (:func:`~aumann.data.traces.events.repeated_key`): DuckDB reads the first value of such a key, Python's json
    (the span reader) the last, so the line is refused (or skipped and counted) by its row in both readers. The
    lines where a key's text occurs twice are found in blocks (numpy), and json looks at those few. Rows are counted
    as DuckDB counts them: lines holding more than whitespace."""
    import json

    keys = sorted({json.dumps(k, ensure_ascii=a).encode() for p in paths for k in p for a in (True, False)})
    chars = np.array(sorted({ord(c) for p in paths for k in p for c in k}), dtype=np.int64)
    found: dict[str, dict[int, str]] = {}
    for f in files:
        rows: dict[int, str] = {}
        base, carry = 0, b""
        with _opens(f) as fh:
            if fh.read(len(aio.BOM)) != aio.BOM:
                fh.seek(0)
            while True:
                block = fh.read(1 << 22)
                data = carry + block
                if not data:
                    break
                cut = len(data) if not block else data.rfind(b"\n") + 1
                if cut == 0:  # no whole line yet
                    carry = data
                    continue
                chunk, carry = data[:cut], data[cut:]
                arr = np.frombuffer(chunk, dtype=np.uint8)
                nl = np.flatnonzero(arr == 10)
                freq = np.bincount(arr, minlength=256)
                # a key's text twice, or a key written with escapes (its text not found: decoded to be sure)
                cand = np.unique(np.concatenate([_key_lines(arr, nl, k, freq) for k in keys]
                                                + [_escape_lines(arr, nl, chars)])) if keys else []
                last, count = 0, base
                for i in cand.tolist() if len(cand) else []:
                    start = int(nl[i - 1]) + 1 if i > 0 else 0
                    end = int(nl[i]) if i < nl.shape[0] else len(chunk)
                    count += _nonblank(chunk, last, start)
                    last = start
                    path = repeated_key(chunk[start:end], paths)
                    if path is not None:
                        rows[count + 1] = path
                base = count + _nonblank(chunk, last, cut if chunk.endswith(b"\n") else last)
                if not block:
                    break
        if rows:
            found[names.get(str(f), str(f))] = rows
    return found
