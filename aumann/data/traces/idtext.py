"""Agent ids that a CSV file spells as numbers: the number syntax a CSV agent column must hold throughout to be read
as numbers (:data:`_NUMBER`), and the numbers such text spells (:func:`_number_ids`). Shared by the table reader and
the edge files, whose endpoints a CSV file also holds as text.
"""

from __future__ import annotations

import re
from typing import Any

#: a number written in decimal (a minus, digits with a fraction and an exponent; nan, inf), as Python's float reads
#: it, but not as DuckDB's sniffer reads a column of text: with a leading zero (01, zero-padded ids) or a plus (+1),
#: nor with a space before or after it (' 1'): an agent id is as written in every format, and a JSON " 1" is text
_NUMBER = r"-?((0|[1-9][0-9]*)(\.[0-9]*)?([eE][-+]?[0-9]+)?|\.[0-9]+([eE][-+]?[0-9]+)?|nan|inf|infinity)"


_INT_TEXT = re.compile(r"\s*[-+]?[0-9]+\s*")
_FLOAT_TEXT = re.compile(_NUMBER, re.IGNORECASE)


def bytes_as_text(values: list[Any]) -> list[Any]:
    """Values of a Parquet BYTE_ARRAY column without the UTF-8 annotation (strings as some writers store them: Spark's
    ``binaryAsString``, older Impala and Hive, Arrow ``binary``), which DuckDB reads as BLOB: each the text its bytes
    spell in UTF-8, as the same column annotated as text reads. Bytes that are not UTF-8 text stay bytes (an agent id
    of them is labelled by :func:`blob_label`, ``X'FF'``)."""
    out: list[Any] = []
    for v in values:
        if isinstance(v, bytes | bytearray):
            try:
                v = bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                pass
        out.append(v)
    return out


def blob_label(v: bytes | bytearray) -> str:
    """The label of an agent id that is bytes that are no UTF-8 text (an OASIS ``user_id`` stored as a BLOB, a Parquet
    binary column): SQLite's literal of those bytes, ``X'FF01'``, as the readers' messages show such a BLOB (and as
    ``WHERE user_id = X'FF01'`` finds it), not Python's ``"b'\\xff\\x01'"``."""
    return f"X'{bytes(v).hex().upper()}'"


def id_text(v: Any) -> str:
    """An agent id as the text a panel labels it by: :func:`blob_label` for bytes, else ``str(v)``."""
    return blob_label(v) if isinstance(v, bytes | bytearray) else str(v)


def _number_ids(values: list[Any]) -> list[Any]:
    """The agent ids of a CSV column of numbers, read as text, as the numbers they spell, as every other reader reads
    a column of numbers: an integer is an int (beyond 64 bits, the text it is), ``1.0`` or ``1e0`` a float, which
    the validator makes the integer id ``1`` (counted in ``float_ids``), ``1.5`` a float. A float beyond ±2⁵³ stays
    the text it is: two such ids one apart would be one float."""
    out: list[Any] = []
    for v in values:
        if not isinstance(v, str):
            out.append(v)
        elif _INT_TEXT.fullmatch(v):
            n = int(v)
            out.append(n if -(2**63) <= n < 2**63 else v.strip())
        elif _FLOAT_TEXT.fullmatch(v):
            f = float(v)
            out.append(f if not abs(f) > 2**53 or f != f or abs(f) == float("inf") else v.strip())
        else:
            out.append(v)
    return out
