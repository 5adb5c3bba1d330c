"""Argument types for numeric and size flags: a bad value is an argparse error naming the flag.

argparse reports a value a type function rejects as ``aumann CMD: error: argument --seed: ...`` with
exit code 2, before any work starts. The checks are those of :mod:`aumann.checks` (the library applies
the same rules to the Python API).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from aumann.checks import as_float, as_int, as_memory_size
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


def integer(minimum: int | None = None, maximum: int | None = INT64_MAX) -> Callable[[str], int]:
    """An argparse type: an integer (``1e3`` allowed) within the bounds (never above an int64)."""

    def parse(text: str) -> int:
        try:
            return as_int(_parse_number(text), "the value", minimum=minimum, maximum=maximum, error=ConfigError)
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


__all__ = ["INT64_MAX", "integer", "memory_size", "number", "path", "positive_int", "recorded", "seed"]
