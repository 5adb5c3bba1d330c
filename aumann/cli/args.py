"""Argument types for numeric and size flags: a bad value is an argparse error naming the flag.

argparse reports a value a type function rejects as ``aumann CMD: error: argument --seed: ...`` with
exit code 2, before any work starts. The checks are those of :mod:`aumann.checks` (the library applies
the same rules to the Python API).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path

from aumann.checks import _bounds_text, as_float, as_int, as_memory_size
from aumann.errors import ConfigError


def _parse_number(text: str) -> float | int:
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


#: the largest integer any flag takes unless it says less: an int64 (numpy, DuckDB and JSON readers hold it)
INT64_MAX = 2**63 - 1
#: a float holds every integer up to 2⁵³ exactly; past it float notation is read as the decimal it writes
_FLOAT_EXACT = 2**53
#: past this magnitude an integral decimal is refused before it is made an int (``1e999999999`` would allocate
#: a billion digits); every integer flag is bounded by an int64
_DECIMAL_LIMIT = 2**64


def _decimal(text: str) -> Decimal | None:
    """``text`` as the exact decimal it writes (``9.007199254740993e15`` keeps its last digit), or ``None``."""
    try:
        return Decimal(text)
    except InvalidOperation:
        return None


def exact_integer(text: str) -> int | None:
    """The integer ``text`` writes, every digit kept, in digits or in float notation (``1e3``,
    ``9.007199254740993e15``), or ``None`` where it writes no integer (``1.5``, ``nan``, ``x``) or one past
    2⁶⁴ in float notation (``1e400``). ``float()`` rounded past 2⁵³: ``9.007199254740993e15`` became
    9007199254740992."""
    text = text.strip()
    try:
        return int(text)
    except ValueError:
        pass
    d = _decimal(text)
    if d is None or not d.is_finite() or abs(d) > _DECIMAL_LIMIT or d != d.to_integral_value():
        return None
    return int(d)


def integer(minimum: int | None = None, maximum: int | None = INT64_MAX) -> Callable[[str], int]:
    """An argparse type: an integer within the bounds (never above an int64). Float notation is allowed and
    read exactly (``1e3`` is 1000; ``9.007199254740993e15`` is 9007199254740993, not the float's
    9007199254740992); a value that is not exactly an integer (``1.5``, ``9007199254740992.5``) is refused."""

    def parse(text: str) -> int:
        value = exact_integer(text)
        if value is None:
            t = text.strip()
            if _decimal(t) is None:
                raise argparse.ArgumentTypeError(f"not a number: {text!r}")
            shown = t if len(t) <= 40 else t[:37] + "..."
            raise argparse.ArgumentTypeError(f"must be an integer{_bounds_text(minimum, maximum)}; got {shown} "
                                             "(decimal digits, or float notation that writes one exactly: 1e3)")
        try:
            return as_int(value, "the value", minimum=minimum, maximum=maximum, error=ConfigError)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(f"{exc}".replace("the value ", "", 1)) from None

    parse.__name__ = "integer"
    return parse


def number(minimum: float | None = None, *, exclusive_minimum: bool = False,
           maximum: float | None = None) -> Callable[[str], float]:
    """An argparse type: a finite real number within the bounds (never ``nan``/``inf``)."""

    def parse(text: str) -> float:
        try:
            return as_float(_parse_number(text), "the value", minimum=minimum, maximum=maximum,
                            exclusive_minimum=exclusive_minimum, error=ConfigError)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(f"{exc}".replace("the value ", "", 1)) from None

    parse.__name__ = "number"
    return parse


#: seeds: non-negative integers (numpy's SeedSequence takes no negative entropy) that fit an int64
seed = integer(minimum=0)
#: counts of things that must exist at least once (runs, agents, steps, threads, permutations, ...); each
#: command caps its own counts further (the configs cap scenario sizes and study counts)
positive_int = integer(minimum=1)

def memory_size(text: str) -> str:
    """An argparse type for DuckDB memory limits: ``4GB``, ``512MiB``, ``800MB`` (a number and a unit)."""
    try:
        return as_memory_size(text, "the value")
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{exc}".replace("the value ", "", 1)) from None


def path(text: str) -> Path:
    """An argparse type for every file and folder flag: a non-empty path (``--out ""`` — an unset shell
    variable — would otherwise mean the current directory and write results there)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must be a file or folder path; got an empty or blank string {text!r}")
    return Path(text)


def recorded(args: argparse.Namespace) -> dict:
    """The parsed flags as a manifest records them: the values only (argparse's handler function, whose
    repr carries a memory address, would make two identical runs write different bytes)."""
    return {k: v for k, v in vars(args).items() if not callable(v)}


__all__ = ["INT64_MAX", "exact_integer", "integer", "memory_size", "number", "path", "positive_int", "recorded", "seed"]
