"""Where a text trace file is not UTF-8: the byte of a line that is no UTF-8 text, named in the words every text reader
uses (a Latin-1 or Windows-1252 file, as spreadsheet programs and older tools save it, fails as JSON or CSV on its
accented letters, and was reported as "not a JSON object" or as a line that "does not split into the header's
columns", which left the user guessing)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from aumann.data.traces.duck import _opens

#: the reason a line that is not UTF-8 text is refused (or skipped and counted)
NOT_UTF8 = ("not UTF-8 text (a Latin-1 or Windows-1252 file? traces are read as UTF-8: convert it, e.g. iconv -f "
            "latin1 -t utf-8 FILE > FILE.utf8)")

_WHITESPACE = b" \t\r\n\f\v"


def invalid_at(data: bytes) -> int | None:
    """The index of the first byte of ``data`` that is no UTF-8 text, or ``None`` where all of it is."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def not_utf8(byte: int | None, of: str = "the file") -> str:
    """:data:`NOT_UTF8` naming the byte (0-based, ``of`` the file or its line) where it stops being UTF-8, where it is
    known."""
    if byte is None:
        return NOT_UTF8
    return NOT_UTF8.replace("not UTF-8 text (", f"not UTF-8 text (invalid UTF-8 at byte {byte:,} of {of}; ", 1)


#: a byte that was no UTF-8, in text decoded with ``errors="surrogateescape"``
UNDECODED = re.compile("[\udc80-\udcff]")


def undecoded_at(line: str) -> int | None:
    """The byte of ``line`` (decoded with ``errors="surrogateescape"``) where it stops being UTF-8 text, or ``None``."""
    m = UNDECODED.search(line)
    return None if m is None else len(line[:m.start()].encode("utf-8", "surrogateescape"))


def undecodable_rows(f: Path) -> dict[int, int]:
    """{row: the file's byte (0-based) where the row stops being UTF-8} of the lines of JSON lines file ``f`` that are
    no UTF-8 text, rows counted as DuckDB counts them (lines holding more than whitespace); offsets in the file's
    (decompressed) bytes. One pass over the file, made only where some line could not be read."""
    out: dict[int, int] = {}
    row, pos = 0, 0
    with _opens(f) as fh:
        for line in fh:
            if line.strip(_WHITESPACE):
                row += 1
                at = invalid_at(line)
                if at is not None:
                    out[row] = pos + at
            pos += len(line)
    return out


def file_invalid_at(f: Path) -> int | None:
    """The byte (0-based, of the decompressed text of a gzipped file) where file ``f`` stops being UTF-8 text, or
    ``None`` where all of it is (read in blocks)."""
    import codecs

    dec = codecs.getincrementaldecoder("utf-8")()
    pos = 0
    with _opens(f) as fh:
        while True:
            block = fh.read(1 << 22)
            held = len(dec.getstate()[0])  # the start of a character cut at the end of the block before
            try:
                dec.decode(block, final=not block)
            except UnicodeDecodeError as exc:  # exc.start counts from the bytes held back
                return pos - held + exc.start
            if not block:
                return None
            pos += len(block)


def line_invalid_at(f: Path, line: int) -> int | None:
    """The file's byte (0-based) where physical line ``line`` (1-based, lines ending at ``\\n``) of ``f`` stops being
    UTF-8 text, or ``None`` where it is UTF-8 (or the file has no such line)."""
    pos = 0
    with _opens(f) as fh:
        for i, text in enumerate(fh, start=1):
            if i == line:
                at = invalid_at(text)
                return None if at is None else pos + at
            pos += len(text)
    return None


#: the reason a JSON line is refused (or skipped and counted) when a text in it is a lone surrogate escape
LONE_SURROGATE = ("a JSON \\u escape of a lone surrogate (half of a UTF-16 pair, no character: no CSV, page or Parquet "
                  "file can hold it; write the character itself, or both halves of its pair)")

#: a JSON escape of a UTF-16 surrogate (\\ud800 to \\udfff): a line holding none needs no closer look
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def lone_surrogate(escape: str | None) -> str:
    """:data:`LONE_SURROGATE` naming the escape, where it is known."""
    if escape is None:
        return LONE_SURROGATE
    return LONE_SURROGATE.replace("surrogate (", f"surrogate ({escape}: ", 1)


def _lone_in(value: Any) -> str | None:
    """The first lone surrogate in the texts (keys and values) of a decoded JSON value, as its escape, or None."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
            stack.extend(v.keys())
        elif isinstance(v, list):
            stack.extend(reversed(v))
        elif isinstance(v, str):
            for c in v:
                if 0xD800 <= ord(c) <= 0xDFFF:  # (json pairs a high and a low escape into one character)
                    return f"\\u{ord(c):04x}"
    return None


def lone_surrogate_rows(f: Path) -> dict[int, str]:
    """{row: the escape} of the lines of JSON lines file ``f`` that are JSON but hold a lone surrogate escape
    (``"a\\udcff"``), which DuckDB refuses as it refuses malformed JSON; rows counted as DuckDB counts them. One pass
    over the file, made only where some line could not be read; a line is decoded only where it holds such an
    escape."""
    out: dict[int, str] = {}
    row = 0
    with _opens(f) as fh:
        for line in fh:
            if line.strip(_WHITESPACE):
                row += 1
                if _SURROGATE_ESCAPE.search(line):
                    try:
                        escape = _lone_in(json.loads(line.decode("utf-8-sig")))
                    except (ValueError, RecursionError):  # (malformed JSON after all, or no UTF-8 text)
                        continue
                    if escape is not None:
                        out[row] = escape
    return out


__all__ = ["LONE_SURROGATE", "NOT_UTF8", "UNDECODED", "file_invalid_at", "invalid_at", "line_invalid_at",
           "lone_surrogate", "lone_surrogate_rows", "not_utf8", "undecodable_rows", "undecoded_at"]
