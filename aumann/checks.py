"""Argument checks shared by every layer: one rule per kind of value, one typed error naming the input.

Every public function and CLI flag that takes a number, a flag, a choice or an array-like validates it
here, so the same bad value gets the same message wherever it enters:

* :func:`as_int`    an integer (``int``, numpy integer, or a float with an exact integer value such as
  ``1e3``); never a bool, a string, a fractional or a non-finite float;
* :func:`as_float`  a real number (``int``/``float``/numpy real; never a bool or a string), finite
  unless asked otherwise, optionally bounded;
* :func:`as_bool`   ``True``/``False`` (numpy bools included); never ``"no"``, ``0`` or ``None``;
* :func:`as_optional_bool`  the same or ``None`` (tri-state flags such as ``closed_form``);
* :func:`as_choice` one of a fixed set of strings;
* :func:`as_memory_size` a memory size such as ``4GB`` (DuckDB's memory limit);
* :func:`as_seed`   a seed: ``None``, a non-negative integer, a ``SeedSequence`` or a ``Generator``;
* :func:`as_real_array`  an array-like of real numbers (numpy, torch — bfloat16 refused — or nested
  lists; ragged, complex, string and object input refused, and masked arrays with masked values);
* :func:`as_torch`  numpy to torch like ``torch.as_tensor``, without torch's warning on a read-only array
  (shared without a copy; copied first where the caller writes into the tensor);
* :func:`refuse_mixed_labels`  ids or labels of one type: numbers and text mixed (``[1, "a"]``) are refused
  (numpy would make text of every one, so id 1 became ``"1"``);
* :func:`as_path`   a file or folder path: a non-empty ``str`` or ``os.PathLike`` (never ``None``, a
  number, bytes or ``""``, which would mean the current directory);
* :func:`user_code` a context manager that turns an exception raised by user code (an indicator, a
  game, a score function) into a typed error naming that code, with the original chained;
* :func:`load_spec` the object a ``package.module:attribute`` or ``path/to/file.py:attribute`` spec names
  (a user scenario, a user indicator), the file imported as ``python file.py`` would (its siblings import);
* :func:`refuse_spec_name` a name for a registry (indicators) that :func:`load_spec` would not
  read as a spec or a path, so a registered name cannot shadow loading the spec of the same text.

Each function takes the name of the value (``"steps"``, ``"--seed"``) and the error class to raise
(default :class:`~aumann.errors.MethodError`); the message always names the value and shows what was
given.
"""

from __future__ import annotations

import math
import numbers
import os
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from aumann.errors import (
    AumannError,
    ConfigError,
    IndicatorError,
    IndicatorMemoryError,
    MethodError,
    PrecisionLossWarning,
    TerminatedBySignal,
)

ErrorType = type[Exception]


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int beyond Python's 4300-digit str limit
        return f"<an integer of {int(value).bit_length():,} bits>"
    return text if len(text) <= 80 else text[:77] + "..."


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool | np.bool_)


def as_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None,
           error: ErrorType = MethodError) -> int:
    """``value`` as a Python int, or ``error`` naming ``name``.

    >>> as_int(1e3, "samples"), as_int(np.int64(4), "steps", minimum=1)
    (1000, 4)
    """
    bound = _bounds_text(minimum, maximum)
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise error(f"{name} must be an integer{bound}; got {_shown(value)} ({type(value).__name__})")
    if isinstance(value, numbers.Integral):
        out = int(value)
    else:
        f = float(value)
        if not math.isfinite(f) or f != math.floor(f):
            raise error(f"{name} must be an integer{bound}; got {_shown(value)}")
        out = int(f)
    if (minimum is not None and out < minimum) or (maximum is not None and out > maximum):
        raise error(f"{name} must be an integer{bound}; got {_shown(value)}")
    return out


def _bounds_text(minimum: float | None, maximum: float | None, *, exclusive: bool = False) -> str:
    if minimum is not None and maximum is not None:
        return f" in [{minimum:g}, {maximum:g}]"
    if minimum is not None:
        return f" {'>' if exclusive else '≥'} {minimum:g}"
    if maximum is not None:
        return f" ≤ {maximum:g}"
    return ""


def as_float(value: Any, name: str, *, minimum: float | None = None, maximum: float | None = None,
             exclusive_minimum: bool = False, finite: bool = True, error: ErrorType = MethodError) -> float:
    """``value`` as a Python float (finite unless ``finite=False``), or ``error`` naming ``name``.

    ``exclusive_minimum=True`` requires ``value > minimum`` (e.g. a positive power).

    >>> as_float(4, "power", minimum=0, exclusive_minimum=True)
    4.0
    """
    if minimum == 0 and exclusive_minimum and maximum is None:
        bound, kind = "", "a positive finite number" if finite else "a positive number"
    else:
        bound = _bounds_text(minimum, maximum, exclusive=exclusive_minimum)
        kind = "a finite number" if finite else "a number"
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise error(f"{name} must be {kind}{bound}; got {_shown(value)} ({type(value).__name__})")
    try:
        out = float(value)
    except OverflowError:  # an integer beyond any float (10**400)
        raise error(f"{name} must be {kind}{bound}; got an integer of {int(value).bit_length():,} bits") from None
    if math.isnan(out) or (finite and math.isinf(out)):
        raise error(f"{name} must be {kind}{bound}; got {out!r}")
    if minimum is not None and (out <= minimum if exclusive_minimum else out < minimum):
        raise error(f"{name} must be {kind}{bound}; got {_shown(value)}")
    if maximum is not None and out > maximum:
        raise error(f"{name} must be {kind}{bound}; got {_shown(value)}")
    return out


def as_bool(value: Any, name: str, *, error: ErrorType = MethodError) -> bool:
    """``value`` as a bool (``True``/``False`` or a numpy bool only), or ``error`` naming ``name``."""
    if not _is_bool(value):
        raise error(f"{name} must be True or False; got {_shown(value)} ({type(value).__name__})")
    return bool(value)


def as_optional_bool(value: Any, name: str, *, error: ErrorType = MethodError) -> bool | None:
    """``None``, ``True`` or ``False``, or ``error`` naming ``name``."""
    if value is None:
        return None
    if not _is_bool(value):
        raise error(f"{name} must be None, True or False; got {_shown(value)} ({type(value).__name__})")
    return bool(value)


def as_choice(value: Any, name: str, choices: Iterable[str], *, error: ErrorType = MethodError) -> str:
    """``value`` if it is one of ``choices`` (strings), else ``error`` listing them."""
    options = list(choices)
    if not isinstance(value, str) or value not in options:
        raise error(f"{name} must be one of {options}; got {_shown(value)}")
    return value


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KIB|MIB|GIB|TIB)?\s*$", re.IGNORECASE)


def as_memory_size(value: Any, name: str, *, error: ErrorType = ConfigError) -> str:
    """A memory size such as ``"4GB"``, ``"512MiB"`` or ``"800MB"`` (a positive number and a unit; DuckDB's form)."""
    m = _SIZE.match(value) if isinstance(value, str) else None
    size = _bytes(float(m.group(1)), m.group(2)) if m is not None and m.group(2) is not None else math.nan
    if not 16 * 2**20 <= size <= 2**50:
        raise error(f"{name} must be a size from 16MiB to 1024TiB with its unit (B, KB, MB, GB, TB or KiB, MiB, GiB, "
                    f"TiB: DuckDB's), such as 4GB, 512MB or 1.5GiB; got {_shown(value)}")
    return value.strip()


def _bytes(n: float, unit: str) -> float:
    u = unit.upper()
    base = 1024 if "I" in u else 1000
    return n * base ** {"B": 0, "K": 1, "M": 2, "G": 3, "T": 4}[u[0]]


def as_seed(value: Any, name: str = "rng", *, error: ErrorType = ConfigError) -> Any:
    """A valid seed argument: ``None``, a non-negative integer, a ``SeedSequence`` or a ``Generator``.

    (Sequences of non-negative integers, which numpy also takes as entropy, are accepted too.)
    """
    if value is None or isinstance(value, np.random.Generator | np.random.SeedSequence):
        return value
    if isinstance(value, list | tuple) and value and all(
            not _is_bool(v) and isinstance(v, numbers.Integral) and int(v) >= 0 for v in value):
        return [int(v) for v in value]
    if _is_bool(value) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise error(f"{name} must be None, a non-negative integer seed, a numpy SeedSequence or a Generator; "
                    f"got {_shown(value)} ({type(value).__name__})")
    return int(value)


def as_real_array(x: Any, what: str, *, error: ErrorType, dtype: Any = None) -> np.ndarray:
    """``x`` (numpy, torch or nested sequences) as a numpy array of real numbers.

    Integer and bool input stays as it is unless ``dtype`` is given (then it is cast); float16/float32/
    float64 are kept. Refused with ``error`` naming ``what``: ragged nesting, strings, objects, complex
    numbers, bfloat16 (and other dtypes numpy cannot hold), anything that is not array-like.
    """
    if hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "dtype"):  # torch.Tensor, without importing torch
        kind = str(x.dtype)
        if "complex" in kind:
            raise error(f"{what} must hold real numbers; got a complex torch tensor ({kind})")
        try:
            x = x.detach().cpu().numpy()
        except (TypeError, RuntimeError) as exc:
            raise error(f"{what}: a torch tensor of dtype {kind} has no numpy equivalent; convert it first, "
                        "e.g. tensor.double()") from exc
    if isinstance(x, str | bytes | dict) or x is None:
        raise error(f"{what} must be an array of numbers; got {type(x).__name__} {_shown(x)}")
    if isinstance(x, np.ma.MaskedArray) and np.ma.is_masked(x):  # np.asarray drops the mask, keeps what is under it
        raise error(f"{what}: a masked array with {int(np.ma.count_masked(x))} masked value(s); the mask would be "
                    "dropped and the values under it used as data. Fill them (x.filled(value)) — for a panel, mark "
                    "such rows dead with alive=")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise error(f"{what} must be a rectangular array of numbers (ragged or mixed nesting?): {exc}") from exc
    if arr.dtype == object:
        raise error(_object_array(arr, what))
    if np.issubdtype(arr.dtype, np.complexfloating):
        raise error(f"{what} must hold real numbers; got complex dtype {arr.dtype}")
    if arr.dtype.kind == "m":  # numpy counts timedelta64 as an integer: NaT read as -2**63, a finite number
        raise error(f"{what} must hold numbers; got durations ({arr.dtype}): as numbers they are counts of the "
                    "unit (NaT becomes -9.2e18, a finite value). Convert them first, e.g. x / np.timedelta64(1, 's') "
                    "for seconds (NaT becomes NaN)")
    if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer) or arr.dtype == bool):
        raise error(f"{what} must hold numbers; got dtype {arr.dtype}")
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    return arr


def _object_array(arr: np.ndarray, what: str) -> str:
    """Why numpy made an object array of ``what``, naming the first item it could not hold as a number and where: an
    integer beyond int64 and uint64 (``2**70 + 1`` beside other numbers; float64 would hold it only rounded), None,
    text or another object; else the old guess."""
    for k, v in enumerate(arr.reshape(-1).tolist()):
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
            at = tuple(int(i) for i in np.unravel_index(k, arr.shape))
            return (f"{what} must be an array of numbers; {v} at index {at} is an integer beyond the range of int64 "
                    "and uint64 (-2**63 to 2**64 - 1), so numpy keeps it as a Python object, and float64 holds "
                    f"integers exactly only up to 2**53 ({v} as a float is {float(v):.17g}). Pass floats (float(v)) "
                    "if that rounding is fine, or scale the values")
        if v is None or not isinstance(v, numbers.Real):
            at = tuple(int(i) for i in np.unravel_index(k, arr.shape))
            return (f"{what} must be an array of numbers; got {_shown(v)} ({type(v).__name__}) at index {at} "
                    f"(an object array of shape {arr.shape})")
    return (f"{what} must be a rectangular array of numbers; got an object array of shape {arr.shape} "
            "(ragged nesting, None or non-numbers?)")


#: float64 holds every integer of magnitude up to 2**53 exactly; past it, only every 2nd, 4th, ... one
FLOAT64_EXACT_INTEGERS = 2**53
#: float32 (``ArrayRecorder(dtype=float32)``) holds every integer only up to 2**24 (16,777,217 becomes 16,777,216)
FLOAT32_EXACT_INTEGERS = 2**24
#: float32's largest finite value (about 3.4e38): past it a value becomes inf
FLOAT32_MAX = float(np.finfo(np.float32).max)


def exact_integers(dtype: Any) -> int:
    """The magnitude up to which the float type ``dtype`` (float32 or float64) holds every integer exactly."""
    return FLOAT32_EXACT_INTEGERS if np.dtype(dtype) == np.float32 else FLOAT64_EXACT_INTEGERS


def float64_rounded(arr: np.ndarray, dtype: Any = np.float64) -> np.ndarray | None:
    """Where float64 (or ``dtype``, float32) changes the integers of ``arr``: a bool mask of its shape, or ``None``
    when it changes none.

    Only integer types wider than the float's mantissa can lose digits: int64/uint64 for float64, also int32/uint32
    for float32 (smaller integer types, bools and floats return ``None`` at once). The common case costs one read of
    the array (its min and max, no temporary): only an array holding a value past ±2**53 (±2**24) is converted and
    compared, value by value (2**60 is a double; 2**53 + 1 is not).
    """
    limit = FLOAT64_EXACT_INTEGERS if dtype is np.float64 else exact_integers(dtype)
    if arr.dtype.kind not in "iu" or arr.size == 0 or 2 ** (8 * arr.dtype.itemsize) <= limit:
        return None
    if max(int(arr.max()), -int(arr.min())) <= limit:
        return None
    f = arr.astype(dtype)
    # iinfo.max as a double is 2**63 (2**64): outside the type's range, so a value that rounds to it changed
    inside = f < float(np.iinfo(arr.dtype).max)
    changed = ~inside
    changed[inside] = f[inside].astype(arr.dtype) != arr[inside]
    return changed if changed.any() else None


def float64_changed(raw: Any, col: np.ndarray, keep: np.ndarray | None = None, dtype: Any = np.float64
                    ) -> tuple[int, int]:
    """``(how many, the largest |v|)`` of the integers in ``raw`` that ``col``, its float64 values, changed (past
    ±2**53); ``(0, 0)`` when none. ``keep``: a bool mask of the values that count (the rest are not stored).
    ``dtype=np.float32``: ``col`` holds the float32 values stored, and integers past ±2**24 are judged.

    Cheap where nothing changed: an int64/uint64 array (or tensor, Series) costs its min and max
    (:func:`float64_rounded`), any other array a dtype test; a list of Python/numpy numbers one min/max read of
    ``col``. Only when a value is past 2**53 are the items' types read (floats past it are doubles as given and do
    not count); a list of integers only is then judged as one array, a mixed list value by value.
    """
    if isinstance(raw, list | tuple):
        items: Any = raw
    else:
        arr = raw if isinstance(raw, np.ndarray) else np.asarray(raw)
        if arr.dtype.kind in "iu":
            flat = arr.ravel()
            mask = float64_rounded(flat, dtype)
            if mask is not None and keep is not None:
                mask &= np.asarray(keep, dtype=bool).ravel()
            if mask is None or not mask.any():
                return 0, 0
            return int(mask.sum()), largest_magnitude(flat[mask])
        if arr.dtype != object:
            return 0, 0
        items = arr.ravel()
    flat = np.asarray(col).ravel()
    if flat.size == 0 or flat.dtype.kind != "f":
        return 0, 0
    limit = FLOAT64_EXACT_INTEGERS if dtype is np.float64 else exact_integers(dtype)
    with np.errstate(invalid="ignore"):
        top = max(float(flat.max()), -float(flat.min()))
        if not top >= limit:  # (NaN: refused by the caller's finite check)
            return 0, 0
        far = np.abs(flat) >= limit
    kinds = set(map(type, items))  # (C speed) floats past 2**53 are doubles as given: nothing to look at
    ints = {k for k in kinds if issubclass(k, int | np.integer) and not issubclass(k, bool | np.bool_)}
    # a Decimal, a Fraction, a 0-d array or tensor may hold an exact integer too (each is taken as a number)
    others = {k for k in kinds - ints if not issubclass(k, float | np.floating | bool | np.bool_)}
    if not ints and not others:
        return 0, 0
    if kinds == ints:  # integers only: one conversion, judged as an array (int64/uint64), not one by one
        try:
            arr = np.asarray(items)
        except (OverflowError, ValueError, TypeError):
            arr = None
        if arr is not None and arr.dtype.kind in "iu":
            return float64_changed(arr, col, keep, dtype)
    if keep is not None:
        far &= np.asarray(keep, dtype=bool).ravel()
    n, big = 0, 0
    for i in np.flatnonzero(far).tolist():
        v = _exact_integer(items[i])
        if v is None or not math.isfinite(flat[i]):
            continue
        if v != int(flat[i]):
            n, big = n + 1, max(big, abs(v))
    return n, big


def _exact_integer(v: Any) -> int | None:
    """The integer ``v`` holds exactly: an int or numpy integer, a Decimal or Fraction of integral value, a 0-d array
    or tensor of one; ``None`` for a float, a bool, a fraction or anything else."""
    if isinstance(v, bool | np.bool_):
        return None
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, Decimal):
        return int(v) if v.is_finite() and v == v.to_integral_value() else None
    if isinstance(v, Fraction):
        return int(v) if v.denominator == 1 else None
    if getattr(v, "ndim", None) == 0 and callable(getattr(v, "item", None)):
        try:
            item = v.item()
        except Exception:  # (an object that only looks like an array)
            return None
        return None if item is v else _exact_integer(item)
    return None


def largest_magnitude(values: np.ndarray) -> int:
    """The largest ``|v|`` of a non-empty integer array, as a Python int (``abs`` of int64's minimum overflows)."""
    return max(abs(int(values.max())), abs(int(values.min())))


def _as_double(v: int, single: bool = False) -> str:
    try:
        with np.errstate(over="ignore"):
            return f"{int(np.float32(float(v)) if single else float(v)):,}"
    except OverflowError:
        return "inf"


def warn_rounded(lost: Sequence[tuple[str, int, int] | tuple[str, int, int, str]], *, stacklevel: int = 2) -> None:
    """One :class:`~aumann.errors.PrecisionLossWarning` for every ``(name, count, largest)`` of a feature, column or
    field whose integers float64 changed (nothing when ``lost`` is empty): the values are kept, as the nearest
    double, as before; the warning says so, where, how many and the largest. An entry ``(name, count, largest,
    "float32")`` is of values stored as float32 (``ArrayRecorder(dtype=float32)``: integers past ±2**24); the one
    warning then names float32 for those entries."""
    if not lost:
        return
    single = [len(e) > 3 and e[3] == "float32" for e in lost]
    parts = "; ".join(f"{e[0]}: {e[1]:,} value(s), the largest {e[2]:,} "
                      f"(now {_as_double(e[2], one)})" for e, one in zip(lost, single, strict=True))
    if not any(single):
        warnings.warn(f"integers past ±2**53 changed on their way to float64, the engine's numbers (a double holds "
                      f"integers exactly only up to 2**53): {parts}. They are kept as the nearest double; if their "
                      "last digits matter, subtract an offset or change their unit (ns to s) first",
                      PrecisionLossWarning, stacklevel=stacklevel + 1)
        return
    warnings.warn(f"integers changed on their way to float32 (past ±2**24: a float32 holds integers exactly only up "
                  f"to 2**24, 16,777,216){' or float64 (past ±2**53)' if not all(single) else ''}: {parts}. They are "
                  "kept as the nearest value of their type; if their last digits matter, record them as float64 "
                  "(ArrayRecorder's default dtype, exact up to 2**53), subtract an offset or change their unit first",
                  PrecisionLossWarning, stacklevel=stacklevel + 1)


def as_torch(x: Any, *, dtype: Any = None, device: Any = None, writable: bool = False) -> Any:
    """``torch.as_tensor(x, dtype=dtype, device=device)``, without torch's warning on read-only numpy arrays.

    torch has no read-only tensors: ``torch.from_numpy``/``torch.as_tensor`` of an array that is not writable
    (``np.load(mmap_mode="r")``, ``np.broadcast_to``, a frozen panel) share its memory anyway and say so in a
    ``UserWarning`` ("The given NumPy array is not writable"), which a caller running with warnings as errors
    gets as an exception. A read-only array is shared here through DLPack (numpy >= 2.1 exports it without a
    copy and torch takes it without the warning; with older numpy, ``torch.as_tensor`` with that one warning
    silenced), so results are the same numbers as from a writable array and nothing is copied. A caller that
    writes into the tensor passes ``writable=True``: a read-only array is then copied first (its owner's data
    must not change). Writable arrays, tensors, numbers and lists go to ``torch.as_tensor`` as they are.
    """
    import torch

    if isinstance(x, np.ndarray) and not x.flags.writeable:
        if writable:
            x = np.array(x)
        else:
            t = None
            # torch aborts the process on a DLPack tensor with negative strides (a reversed view, x[::-1]); those,
            # other byte orders and unaligned arrays take the fallback, where torch.as_tensor refuses them as before
            if min(x.strides, default=0) >= 0 and x.dtype.isnative and x.flags.aligned:
                try:
                    t = torch.from_dlpack(x)
                except (BufferError, TypeError, ValueError, RuntimeError):  # numpy < 2.1 exports no read-only array
                    t = None
            if t is not None:
                return t if dtype is None and device is None else t.to(dtype=dtype, device=device)
            import warnings

            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                return torch.as_tensor(x, dtype=dtype, device=device)
    return torch.as_tensor(x, dtype=dtype, device=device)


def refuse_mixed_labels(given: Any, arr: np.ndarray, what: str, *, error: ErrorType,
                        numbers_only: bool = False) -> None:
    """Refuse ids or labels that mix numbers and text. ``arr`` is ``np.asarray(given)``: numpy (and the Panel,
    for an object array) makes text of every label when some are text, so ``[1, "a", 2]`` became
    ``["1", "a", "2"]``, id 1 was looked up as ``"1"`` later and 1 and ``"1"`` were one id. A numpy array of
    text (dtype ``U``/``S``) is text throughout and passes; so do labels of one type. ``numbers_only``: only
    numbers count as the other type (group labels, where None among text is the label ``"None"``); otherwise
    anything that is not text does."""
    if arr.ndim != 1 or arr.dtype.kind not in "USO" or (isinstance(given, np.ndarray) and given.dtype.kind in "US"):
        return
    items = arr.tolist() if isinstance(given, np.ndarray) else list(given)
    number = next((v for v in items if not isinstance(v, str | bytes)
                   and (not numbers_only or isinstance(v, numbers.Number | np.generic))), None)
    text = next((v for v in items if isinstance(v, str | bytes)), None)
    if number is not None and text is not None:
        noun = "ids" if what.endswith("ids") else "labels"
        raise error(f"{what} mixes numbers and text ({number!r} and {text!r}): give {noun} of one type "
                    "(all ints, or all strs)")


def as_path(value: Any, what: str, *, error: ErrorType = ConfigError) -> Path:
    """``value`` as a :class:`~pathlib.Path`, or ``error`` naming ``what``.

    >>> as_path("out/run", "--out").as_posix()
    'out/run'
    """
    if not isinstance(value, str | os.PathLike):
        raise error(f"{what} must be a path (str or os.PathLike); got {type(value).__name__} {_shown(value)}")
    text = os.fspath(value)
    if not isinstance(text, str):
        raise error(f"{what} must be a text path, not bytes; got {_shown(value)}")
    if not text.strip():
        raise error(f"{what} must be a path; got an empty or blank string {text!r}")
    if "\x00" in text:
        raise error(f"{what} contains a NUL character; got {_shown(text)}")
    return Path(text)


_TORCH_CPU_ALLOC = re.compile(r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory): you tried to "
                              r"allocate (\d+) bytes")
_ALLOC_SIZE = re.compile(r"(?:Unable|Tried) to allocate ([\d.]+) ([KMGTPE]?i?B)")
_ALLOC_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60}


def allocation_failure(exc: BaseException) -> float | None:
    """Bytes an allocation asked for when ``exc`` is the allocator refusing it (``MemoryError``, numpy's
    "Unable to allocate 7.28 TiB", torch's CPU "DefaultCPUAllocator: can't allocate memory: you tried to allocate
    N bytes", ``torch.OutOfMemoryError``): ``nan`` where the size is not given, ``None`` for any other exception
    (a RuntimeError that is not an allocation failure stays what it is)."""
    try:
        text = str(exc)
    except Exception:  # an exception whose __str__ raises
        text = ""
    cpu = _TORCH_CPU_ALLOC.search(text) if isinstance(exc, RuntimeError) else None
    if cpu:
        return float(cpu.group(1))
    oom = isinstance(exc, MemoryError) or (type(exc).__name__ == "OutOfMemoryError"
                                           and type(exc).__module__.startswith("torch"))
    if not oom:
        return None
    total = getattr(exc, "_total_size", None)  # numpy's _ArrayMemoryError
    if isinstance(total, int):
        return float(total)
    m = _ALLOC_SIZE.search(text)
    return float(m.group(1)) * _ALLOC_UNITS.get(m.group(2), math.nan) if m else math.nan


def _bytes_text(n: float) -> str:
    if not math.isfinite(n):
        return "more memory than the machine could give"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit} ({int(n):,} bytes) in one allocation"
    return f"{int(n):,} bytes in one allocation"


def exception_message(exc: BaseException, limit: int = 300) -> str:
    """``exc``'s message on one line, at most ``limit`` characters (a user's exception whose ``__str__`` raises
    is still reported)."""
    try:
        text = " ".join(str(exc).split())
    except Exception:  # a user exception whose __str__ raises
        return "(its message cannot be shown)"
    return text if len(text) <= limit else text[:limit - 3] + "..."


@contextmanager
def user_code(what: str, *, error: ErrorType = IndicatorError, shape: tuple[int, ...] | None = None
              ) -> Iterator[None]:
    """Run user code (an indicator, a game, a callback): its exceptions become ``error`` naming ``what``.

    aumann's own errors pass through unchanged; ``KeyboardInterrupt`` is never caught; ``sys.exit()`` inside
    user code is the same typed error (user code must return or raise, not end the process). The original
    exception is chained (``raise ... from``) so ``aumann --debug`` shows where it came from. (A scenario's
    own code goes through :mod:`aumann.simulators.boundary`, which names the scenario and the step.)
    An indicator's allocation the machine refused (``error`` an :class:`IndicatorError`) is an
    :class:`~aumann.errors.IndicatorMemoryError` naming the size it asked for and, with ``shape``, its input's.
    """
    try:
        yield
    except (AumannError, TerminatedBySignal):
        raise
    except SystemExit as exc:
        raise error(f"{what} called sys.exit({exc.code!r}); user code must return or raise") from exc
    except Exception as exc:
        asked = allocation_failure(exc) if issubclass(error, IndicatorError) else None
        if asked is not None:
            on = f" on an input z of shape {tuple(shape)}" if shape is not None else ""
            n = shape[-2] if shape is not None and len(shape) >= 2 else None
            lead = math.prod(shape[:-2]) if shape is not None else 1
            # the size of an N × N float array per input in the batch (nan: size unknown, the common cause)
            pairwise = n is not None and not (asked < n * n or asked > 16 * n * n * max(1, lead))
            why = (f"An indicator that builds an array over pairs of agents (z[..., :, None] - z[..., None, :]) needs "
                   f"N² values per evaluation (at N = {n:,}: {8 * n * n:,} bytes of float64)" if pairwise else
                   "One evaluation of this indicator does not fit in memory")
            raise IndicatorMemoryError(
                f"{what} asked for {_bytes_text(asked)}{on}, and the machine refused it. {why}: compute it in O(N) "
                "(a pooled or closed form; a mean absolute difference from the sorted values), or attribute fewer "
                "agents; a method's smaller memory_budget= batch helps only when one evaluation fits") from exc
        try:
            shown = str(exc)[:300]
        except Exception:  # an exception whose __str__ raises
            shown = "(its message cannot be shown)"
        raise error(f"{what} raised {type(exc).__name__}: {shown}") from exc


#: the prefix of the ``sys.modules`` names user files are imported under (scenarios, indicators): workers of
#: an executor import the same files under the same names (:func:`aumann.simulators.remote.user_code`)
USER_MODULE_PREFIX = "aumann_user_"


def user_module_name(path: str | os.PathLike[str]) -> str:
    """The ``sys.modules`` name :func:`load_spec` imports the user file ``path`` under (stable per path)."""
    import hashlib

    p = Path(path).resolve()
    return f"{USER_MODULE_PREFIX}{p.stem}_{hashlib.sha256(str(p).encode()).hexdigest()[:10]}"


def _import_file(path: Path, spec: str, error: ErrorType, what: str) -> Any:
    import importlib.util
    import sys

    if not path.is_file():
        raise error(f"{what} spec {spec!r}: no such file {str(path)!r}")
    path = path.resolve()
    name = user_module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    folder = str(path.parent)
    if not sys.path or sys.path[0] != folder:  # as ``python file.py`` would: its folder first, so that sibling
        if folder in sys.path:  # modules and packages import (before anything of the same name installed)
            sys.path.remove(folder)
        sys.path.insert(0, folder)
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise error(f"{what} spec {spec!r}: {str(path)!r} is not a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module
    try:
        loader_spec.loader.exec_module(module)
    except SystemExit as exc:  # a file that exits at import is a typed error, not the end of aumann
        del sys.modules[name]
        raise error(f"{what} spec {spec!r}: importing {str(path)!r} called sys.exit({exc.code!r})") from exc
    except Exception as exc:
        del sys.modules[name]
        raise error(f"{what} spec {spec!r}: importing {str(path)!r} raised {type(exc).__name__}: {exc}") from exc
    return module


def _import_module(modname: str, spec: str, error: ErrorType, what: str) -> Any:
    import importlib
    import sys

    try:
        return importlib.import_module(modname)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        cwd = os.getcwd()
        if modname.split(".")[0] == missing.split(".")[0] and cwd not in sys.path and "" not in sys.path:
            sys.path.insert(0, cwd)  # console scripts do not put the working directory on sys.path
            return _import_module(modname, spec, error, what)
        raise error(f"{what} spec {spec!r}: cannot import module {modname!r} ({exc})") from exc
    except SystemExit as exc:
        raise error(f"{what} spec {spec!r}: importing {modname!r} called sys.exit({exc.code!r})") from exc
    except Exception as exc:
        raise error(f"{what} spec {spec!r}: importing {modname!r} raised {type(exc).__name__}: {exc}") from exc


#: the characters that make text a spec or a path to :func:`load_spec`: ``:`` parts ``module:attribute``, ``/`` and
#: ``\\`` are path separators (a file spec, ``../x``)
SPEC_CHARS = (":", "/", "\\")


def refuse_spec_name(name: str, *, error: ErrorType, what: str, where: str) -> str:
    """``name`` for a registry whose lookup falls back to :func:`load_spec`, if it holds none of
    :data:`SPEC_CHARS`; else ``error`` naming the characters. A registered ``'a.py:f'`` or ``'pkg.module:fn'`` was
    found by the lookup before the spec of the same text was loaded, so the user's file or module never ran; and
    ``'../x'`` reads as a path.

    ``where`` says who reads the name (``"indicators.get() and --indicator"``).

    Raises:
        error: the name holds ``:``, ``/`` or ``\\``.
    """
    bad = [c for c in SPEC_CHARS if c in name]
    if bad:
        chars = " and ".join(repr(c) for c in bad)
        raise error(
            f"{what} name {name!r} cannot be registered: it contains {chars}; {where} read text with ':' as a "
            "package.module:attribute or path/to/file.py:attribute spec ('/' and '\\' separating a path), so a "
            "registered name like it would hide the module or file of the same text. Register it under a name of "
            f"letters, digits, '-', '_' and '.' (e.g. 'my_{what}'); a file's {what} is used by its spec, unregistered")
    return name


def load_spec(spec: str, *, error: ErrorType = ConfigError, what: str = "object") -> tuple[Any, Any]:
    """``(module, attribute)`` named by ``package.module:attribute`` or ``path/to/file.py:attribute``.

    A file is imported as ``python file.py`` would run it: its folder goes first on ``sys.path``, so its
    sibling modules and packages import; a module name is imported from the working directory too (which
    console scripts do not put on ``sys.path``). The attribute may be dotted.

    Raises:
        error: a malformed spec, a file or module that cannot be imported, or a missing attribute.
    """
    spec = str(spec).strip()
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise error(f"{what} spec {spec!r} must look like package.module:attribute or path/to/file.py:attribute")
    is_file = where.endswith(".py") or "/" in where or os.sep in where
    module = _import_file(Path(where), spec, error, what) if is_file else _import_module(where, spec, error, what)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise error(f"{what} spec {spec!r}: {where} has no attribute {attr!r}") from None
    return module, obj


__all__ = [
    "as_bool",
    "as_choice",
    "as_float",
    "as_int",
    "as_memory_size",
    "as_optional_bool",
    "as_path",
    "as_real_array",
    "as_seed",
    "exception_message",
    "load_spec",
    "refuse_spec_name",
    "user_code",
]
