"""The rules for a panel's labels: agent ids, step labels and group labels (what :class:`~aumann.panel.Panel`,
the recorders and the trace readers accept, how each is kept and what is refused, naming the offending label).

Agent ids are numbers or text; a tuple id (grid coordinates) is kept as its text ``"(0, 1)"``; integers past int64
are kept as their digits. Ids must be unique, and ids that differ only by Unicode form or an invisible character
are warned of. Steps are sorted labels in time order, one time zone. Labels hold no NUL and no lone surrogate.
"""

from __future__ import annotations

import datetime
import re
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, KeysView, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from aumann.checks import (
    refuse_mixed_labels,
)
from aumann.errors import (
    DuplicateIdError,
    LookalikeIdWarning,
    PanelError,
    ShapeError,
)


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def label_column(labels: list[Any]) -> np.ndarray:
    """Labels as one (N,) array, one label per row. ``np.asarray`` reads tuple labels ((x, y) grid coordinates used
    as agent ids) as a second axis, (N, 2), or refuses them when their lengths differ; an object column keeps one
    tuple per row (a panel then labels them by their text, as any id that is not a number or text).

    Integer labels read from a model or a table (Mesa unique_ids, a frame's id column) are int64, else uint64,
    else, when neither holds them all (a ``uuid4().int``, 2**70, or -1 beside 2**63), the text of each, every digit
    kept (:func:`id_labels` gives the labels a panel keeps): ``np.asarray`` made floats of ``[2**63, -1]``, where
    2**63 and 2**63 + 1 are one id. :class:`Panel` itself refuses such integers given directly (a PanelError)."""
    if labels and _all_integers(labels):
        arr = _integer_array(labels)
        return arr if arr is not None else np.asarray([str(int(v)) for v in labels])
    refuse_nul_twins(labels)
    return _label_array(labels)


def refuse_nul_twins(labels: list[Any]) -> None:
    """numpy drops the trailing NULs of text, so ``'a\\x00'`` and ``'a'`` became one label ``'a'``, refused as
    "repeated: ['a']", a message that hides the NUL. A :class:`~aumann.errors.DuplicateIdError` naming both, escaped.
    (One text ending with NUL and no twin is kept as numpy keeps it, as before.)"""
    if not any(isinstance(v, str | np.str_) and v.endswith("\x00") for v in labels):
        return
    first: dict[str, int] = {}
    for k, v in enumerate(labels):
        if isinstance(v, str | np.str_):
            key = v.rstrip("\x00")
            j = first.setdefault(key, k)
            if j != k and labels[j] != v:
                raise DuplicateIdError(f"ids must be unique once numpy drops the trailing NUL characters of text: "
                                       f"{str(labels[j])!r} and {str(v)!r} would be one id {key!r}; "
                                       "rename one (an id cannot end with a NUL character)")


def _integer_array(items: Sequence[Any]) -> np.ndarray | None:
    """Integers as int64, else uint64 (none negative), else ``None``: judged on the values, not on numpy refusing the
    cast, since numpy < 2 casts -5 to uint64 as 2**64 - 5 (a DeprecationWarning, no OverflowError), so the id -5
    beside 2**63 became 18446744073709551611, silently."""
    values = [int(v) for v in items]
    lo, hi = min(values, default=0), max(values, default=0)
    if -(2**63) <= lo and hi < 2**63:
        return np.asarray(values, dtype=np.int64)
    if lo >= 0 and hi < 2**64:
        return np.asarray(values, dtype=np.uint64)
    return None


def _plain_item(v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(_plain_item(x) for x in v)
    return v.item() if isinstance(v, np.generic) else v


def label_text(v: Any) -> str:
    """The text a panel keeps for an id that is not a number or text: ``str(v)``, with the numpy numbers inside a
    tuple as the Python numbers they hold: a grid coordinate ``tuple(row)`` of an integer array is labelled
    ``"(0, 1)"`` as ``(0, 1)`` is, not ``"(np.int64(0), np.int64(1))"`` (numpy 2's repr; numpy 1 printed
    ``"(0, 1)"``), so the label neither depends on the numpy version nor misses the id written by hand."""
    return str(_plain_item(v)) if isinstance(v, tuple) else str(v)


def _label_array(labels: list[Any]) -> np.ndarray:
    if not any(isinstance(u, tuple | list) for u in labels):
        return np.asarray(labels)
    out = np.empty(len(labels), dtype=object)
    for k, u in enumerate(labels):
        out[k] = u
    return out


def id_labels(ids: Sequence[Hashable]) -> list[Any]:
    """The agent labels a panel keeps for these unique_ids: the ids themselves when they are numbers or text,
    else their text (a tuple id ``(0, 1)`` is labelled ``"(0, 1)"``), so a model's agents can be matched with a
    panel's agent axis whatever their ids."""
    ids = list(ids)
    return unique_labels(label_column(ids), "agent_ids", len(ids)).tolist() if ids else []


def _sorted_labels(values: np.ndarray, what: str) -> np.ndarray:
    uniq = list(dict.fromkeys(values.tolist()))
    try:
        return _label_array(sorted(uniq))  # (integers past int64 stay Python ints here: sorted as numbers)
    except TypeError:
        raise PanelError(f"{what} labels cannot be sorted (mixed types? e.g. {uniq[:3]!r})") from None


def plain_labels(arr: np.ndarray, what: str) -> None:
    """Labels are integers, text, finite numbers or times: a complex label cannot be written to JSON, and NaN,
    ±inf and NaT are no label at all (each prints as an empty CSV cell; NaN is not even equal to itself, so it
    passes a uniqueness test). Raises :class:`~aumann.errors.PanelError` naming the first few."""
    kind = arr.dtype.kind
    if kind == "c":
        raise PanelError(f"{what} must be integers, text, finite numbers or times; got complex labels "
                         f"({arr[:3].tolist()})")
    if kind in "fmM":
        bad = ~np.isfinite(arr) if kind == "f" else np.isnat(arr)
        if bad.any():
            raise PanelError(f"{what} must be integers, text, finite numbers or times; {int(bad.sum())} label(s) are "
                             f"{'NaN or ±inf' if kind == 'f' else 'NaT'} (at position(s) "
                             f"{np.flatnonzero(bad)[:5].tolist()})")
    if kind == "V":
        raise PanelError(f"{what} must be integers, text, finite numbers or times; got {arr.dtype} records")


def _is_missing(v: Any) -> bool:
    """None, NaN, pandas' NA or a NaT: no label (a missing cell of a user's table)."""
    if v is None:
        return True
    if isinstance(v, float | np.floating):
        return bool(v != v)
    if isinstance(v, np.datetime64 | np.timedelta64):
        return bool(np.isnat(v))
    return type(v).__name__ in ("NAType", "NaTType")


def refuse_missing_group_labels(given: Any, arr: np.ndarray, what: str, agent_ids: np.ndarray) -> None:
    """Every agent has a group label: a None (or NaN, pandas' NA, NaT) label is refused naming the agents, as a
    None agent id or step is. ``[1, 2, None]`` became the groups ``'1'``, ``'2'`` and ``'None'``: a missing label
    was a group named 'None', and it turned the other labels into text. ``arr`` is ``np.asarray(given)`` (which
    makes the text ``'nan'`` of a NaN among text: the labels given are looked at). Raises
    :class:`~aumann.errors.PanelError`."""
    if arr.ndim != 1:
        return
    text_of_nan = arr.dtype.kind in "US" and not isinstance(given, np.ndarray) \
        and bool(np.any(arr == ("nan" if arr.dtype.kind == "U" else b"nan")))  # a list of text: only a NaN looks so
    if arr.dtype.kind == "O" or text_of_nan:
        items = arr.tolist() if isinstance(given, np.ndarray) else list(given)
        missing = np.flatnonzero(np.fromiter((_is_missing(v) for v in items), dtype=bool, count=len(items)))
    elif arr.dtype.kind in "fmM":
        missing = np.flatnonzero(np.isnan(arr) if arr.dtype.kind == "f" else np.isnat(arr))
    else:
        return
    if missing.size:
        shown = ", ".join(f"{agent_ids[i].item()!r} (position {i})" for i in missing[:5].tolist())
        raise PanelError(f"{what} must be integers, text, finite numbers or times; {missing.size} agent(s) have no "
                         f"label (None, NaN, NA or NaT): agent {shown}{', ...' if missing.size > 5 else ''}. Give "
                         "every agent a label (e.g. 'unknown')")


_SURROGATE = re.compile("[\ud800-\udfff]")


def utf8_labels(arr: np.ndarray | Sequence[str], what: str) -> None:
    """Text labels must be text UTF-8 can hold: a lone surrogate (U+D800–U+DFFF; what a JSON ``"\\udc80"`` escape in
    a trace, or a file name that is not UTF-8, gives Python) cannot be written to any CSV, page or Parquet file, so
    ``aumann attribute`` failed with a ``UnicodeEncodeError`` after the attribution. Raises
    :class:`~aumann.errors.PanelError` naming the first such label and its position. A list of text (feature names)
    is searched as it is: as a fixed-width array, 20,000 names and one of 50,000 characters took 4 GiB."""
    if not isinstance(arr, np.ndarray):
        where = np.array([i for i, t in enumerate(arr) if _SURROGATE.search(t)], dtype=np.int64)
        if where.size:
            _lone_surrogate(str(arr[int(where[0])]), where, what)
        return
    if arr.dtype.kind != "U" or arr.size == 0 or arr.dtype.itemsize == 0:
        return
    codes = np.ascontiguousarray(arr).view(np.uint32)
    bad = (codes >= 0xD800) & (codes <= 0xDFFF)
    if not bad.any():
        return
    where = np.flatnonzero(bad.reshape(arr.size, -1).any(axis=1))
    _lone_surrogate(str(arr.reshape(-1)[where[0]]), where, what)


def _lone_surrogate(label: str, where: np.ndarray, what: str) -> None:
    char = next(c for c in label if 0xD800 <= ord(c) <= 0xDFFF)
    shown = repr(label if len(label) <= 80 else label[:77] + "...")
    raise PanelError(f"{what} must be text UTF-8 can hold; {where.size} label(s) contain a lone surrogate "
                     f"(U+{ord(char):04X}, e.g. from a JSON \\u escape or a file name that is not UTF-8), first "
                     f"{shown} at position {int(where[0])}: no CSV, page or Parquet file can hold it")


#: invisible format characters (Unicode category Cf): soft hyphen, Arabic and Syriac marks, zero-width space and
#: joiners, bidirectional marks and overrides, word joiner, invisible operators, BOM, interlinear marks, tags
_INVISIBLE = re.compile("[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
                        "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
                        "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
                        "\U000e0020-\U000e007f]")


def lookalike_ids(ids: np.ndarray, limit: int = 5, *, whitespace: bool = True) -> tuple[int, list[list[str]]]:
    """Text ids that are different agents but print alike: equal after Unicode normalisation (NFC: ``"é"`` as
    U+00E9 and as ``e`` + U+0301) with invisible format characters removed (``"alice"`` and ``"alice\\u200b"``, a
    zero-width space; a BOM, a word joiner) and, with ``whitespace``, with their whitespace trimmed and each run of
    it made one space (``"bob"`` and ``"bob "``, ``"a  b"`` and ``"a b"``, ``"a\\tb"`` and ``"a b"``: a page shows
    them alike). A panel compares ids exactly, so these stay separate agents; a report says so instead of showing
    two rows no reader can tell apart, and building a panel warns (:func:`warn_lookalike_ids`, without the
    whitespace rule). Returns the number of such groups and up to ``limit`` of them (each sorted); ``(0, [])`` for
    integer ids. Linear in the ids; only those holding a character beyond ASCII (or, with ``whitespace``,
    whitespace other than single spaces between words) are normalised, and ASCII-only ids cost one vector check
    without ``whitespace``."""
    arr = np.asarray(ids)
    if arr.dtype.kind != "U" or arr.size < 2 or arr.dtype.itemsize == 0:
        return 0, []
    codes = np.ascontiguousarray(arr).view(np.uint32).reshape(arr.size, -1)
    if whitespace:
        length = (codes != 0).sum(axis=1)  # (ids hold no NUL)
        blank = codes == 32
        other = ((codes >= 9) & (codes <= 13)) | ((codes >= 28) & (codes <= 31))  # the rest of str.split's ASCII set
        space = blank | other
        rows = np.arange(arr.size)
        odd = ((codes > 127).any(axis=1) | other.any(axis=1) | space[:, 0] | space[rows, np.maximum(length - 1, 0)]
               | (space[:, 1:] & space[:, :-1]).any(axis=1))
    elif int(codes.max()) < 0x80:  # ASCII only (the common case): nothing to normalise
        return 0, []
    else:
        odd = (codes > 127).any(axis=1)
    if not odd.any():
        return 0, []
    items = arr[odd].tolist()
    joined = "\n".join(items)  # one C-speed pass for the common case: every id already NFC and visible
    as_given = unicodedata.is_normalized("NFC", joined) and not _INVISIBLE.search(joined)
    if as_given and not whitespace:
        return 0, []
    groups: dict[str, list[str]] = {}
    for v in items:
        key = v if as_given else _INVISIBLE.sub("", unicodedata.normalize("NFC", v))
        groups.setdefault(" ".join(key.split()) if whitespace else key, []).append(v)
    plain = set(arr[~odd].tolist())
    alike = []
    for key, vs in groups.items():
        members = vs + ([key] if key in plain else [])
        if len(members) > 1:
            alike.append(sorted(members))
    alike.sort()
    return len(alike), alike[:limit]


def warn_lookalike_ids(ids: np.ndarray, what: str = "agent ids", *, stacklevel: int = 2) -> None:
    """Warn (:class:`~aumann.errors.LookalikeIdWarning`) when two ids differ only in Unicode form or invisible
    characters (:func:`lookalike_ids` without its whitespace rule), naming them with escapes (``'caf\\xe9'`` and
    ``'cafe\\u0301'``): they stay distinct agents (never merged), and the warning says so."""
    count, groups = lookalike_ids(ids, limit=3, whitespace=False)
    if not count:
        return
    shown = "; ".join(" and ".join(ascii(v) if len(v) <= 60 else ascii(v[:57]) + "..." for v in g) for g in groups)
    warnings.warn(f"{count:,} group(s) of {what} differ only in Unicode normalisation (NFC/NFD) or in invisible "
                  f"characters and look identical in every page and table{' (first 3)' if count > 3 else ''}: "
                  f"{shown}; kept as distinct agents (normalise them, e.g. unicodedata.normalize('NFC', id) without "
                  "zero-width characters, if they are one)", LookalikeIdWarning, stacklevel=stacklevel + 1)


def _all_integers(items: Sequence[Any]) -> bool:
    return all(isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_) for v in items)


def refuse_unordered(labels: Any, what: str) -> None:
    """Labels are given in row order: a set has none (its order is the hash order, which for text changes from
    one process to the next), so its labels would land on arbitrary rows. ``dict.keys()`` keeps its order."""
    if isinstance(labels, AbstractSet) and not isinstance(labels, KeysView):
        raise PanelError(f"{what} must be an ordered sequence (list, tuple, array), one label per position; got a "
                         f"{type(labels).__name__}, whose order is arbitrary: the labels would be assigned to "
                         "positions in hash order (sorted(...) gives a fixed order)")


def _integer_labels(items: list[Any], what: str) -> np.ndarray:
    """Integer labels as int64, else uint64 (all non-negative, below 2**64): never as floats, where 2**63 and
    2**63 + 1 are one number. Integers neither holds (2**70, or -1 beside 2**63) are a
    :class:`~aumann.errors.PanelError` naming the first such label: made text, the id ``1`` beside them became the
    text ``'1'``, which no lookup of the integer 1 (``agent_index([1])``) finds, silently. Text ids are the way to
    keep such labels (``[str(i) for i in ids]``), as the trace readers do."""
    arr = _integer_array(items)
    if arr is not None:
        return arr
    values = [int(v) for v in items]
    at = next((i for i, v in enumerate(values) if not -(2**63) <= v < 2**64), None)
    if at is None:  # each fits one of the two, but not all the same one: a negative id beside one past int64
        at = next(i for i, v in enumerate(values) if v >= 2**63)
        neg = next(i for i, v in enumerate(values) if v < 0)
        why = f"beyond int64 (up to 2**63 - 1), and uint64 holds no negative id such as {values[neg]} (position {neg})"
    else:
        why = "beyond both int64 [-2**63, 2**63) and uint64 [0, 2**64)"
    raise PanelError(f"{what} are integers, but {values[at]} (position {at}) is {why}: a panel holds integer labels "
                     "as int64, or as uint64 when none is negative. Pass them as text to keep them as labels "
                     "([str(i) for i in ids]; the id 1 is then the text '1')")


def refuse_nul(given: Any, arr: np.ndarray, what: str) -> None:
    """Text labels given as a list may not hold NUL: numpy drops a label's trailing NULs, so ``'a\\x00'`` and ``'a'``
    would be one id, or one group (an array of text the caller made has already lost them; an object array has
    not)."""
    if (not isinstance(given, np.ndarray) or given.dtype == object) and arr.dtype.kind in "UO":
        items = given.tolist() if isinstance(given, np.ndarray) else given
        nul = next((i for i, v in enumerate(items) if isinstance(v, str) and "\x00" in v), None)
        if nul is not None:
            noun = "id" if what.endswith("ids") else "label"
            raise PanelError(f"{what} must not contain NUL characters (numpy drops trailing ones, so 'a\\x00' "
                             f"and 'a' would be one {noun}); got {items[nul]!r} at position {nul}")


def _time_items(given: Any) -> list[Any] | None:
    """The given step labels when every one is a time (``datetime``/``date``/``pandas.Timestamp``, a
    ``timedelta``, a ``pandas.Period``) — labels a panel keeps as their text, compared here as times — else None."""
    if isinstance(given, np.ndarray) and given.dtype != object:
        return None
    items = given.tolist() if isinstance(given, np.ndarray) else list(given)
    kinds = (datetime.date, datetime.timedelta, np.datetime64, np.timedelta64)
    if items and all(isinstance(v, kinds) or type(v).__name__ == "Period" for v in items):
        return items
    return None


_ISO_TIME = re.compile(r"\s*\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?\s*"
                       r"(?P<zone>Z|z|[+-]\d{2}(?::?\d{2})?)?\s*")


def _zone_of(v: Any) -> tuple[bool, str | None]:
    """(whether ``v`` is a time, its UTC offset as text or None without one): a datetime (aware or naive), a date or
    datetime64 (naive), ISO-8601 text (``Z``/``+05:00`` or nothing); not a time: (False, None)."""
    if isinstance(v, datetime.datetime):
        off = v.utcoffset()
        return True, None if off is None else str(off)
    if isinstance(v, datetime.date | np.datetime64):
        return True, None
    if isinstance(v, str | np.str_):
        m = _ISO_TIME.fullmatch(v)
        if m is None:
            return False, None
        z = m.group("zone")
        if z is None:
            return True, None
        if z in "Zz":
            return True, "+00:00"
        digits = z[1:].replace(":", "")
        return True, f"{z[0]}{digits[:2]}:{digits[2:4] or '00'}"
    return False, None


def refuse_mixed_time_zones(labels: Any, what: str = "the steps", where: str = "position",
                            position: Callable[[int], int] | None = None) -> None:
    """Step labels that are all times (datetimes, ISO-8601 text) but mix times with and without a time zone, or
    text with different UTC offsets, are refused (:class:`~aumann.errors.PanelError` naming the first two values
    that differ): they do not compare as times, so they were kept as text labels -- in row order, or sorted as
    text by :meth:`Panel.from_dataframe` (``'2026-01-01T01:00:00Z'`` before ``'2026-01-01T05:00:00+05:00'``, an
    hour later in time) -- and "previous" and "pre-event" read the wrong rows, silently. Time objects with
    different offsets compare as times and are kept; labels that are not all times are text and are kept.
    ``position(j)`` gives the position (``where``) to name for label j (default j)."""
    items = labels.tolist() if isinstance(labels, np.ndarray) else list(labels)
    if len(items) < 2:
        return
    first_aware = first_naive = None
    offsets: dict[str, int] = {}
    for j, v in enumerate(items):
        is_time, zone = _zone_of(v)
        if not is_time:
            return  # text labels (names of steps), not times
        if zone is None:
            first_naive = j if first_naive is None else first_naive
        else:
            first_aware = j if first_aware is None else first_aware
            if isinstance(v, str | np.str_):
                offsets.setdefault(zone, j)
    at = position or (lambda j: j)
    if first_aware is not None and first_naive is not None:
        a, b = sorted((first_aware, first_naive))
        has = {first_aware: "has a time zone", first_naive: "has none"}
        raise PanelError(
            f"times with and without a time zone are mixed in {what}: {_label_text(items[a])} ({where} {at(a)}) "
            f"{has[a]}, {_label_text(items[b])} ({where} {at(b)}) {has[b]}. They do not compare as times (a panel "
            "would keep them as text labels, out of time order); give every step the same zone first, e.g. "
            "pd.to_datetime(steps, utc=True) if the times without one are UTC, or tz_localize them to the zone they "
            "were recorded in")
    if len(offsets) > 1:
        (za, a), (zb, b) = sorted(offsets.items(), key=lambda kv: kv[1])[:2]
        raise PanelError(
            f"times as text with different UTC offsets are mixed in {what}: {items[a]!r} ({where} {at(a)}, {za}) and "
            f"{items[b]!r} ({where} {at(b)}, {zb}). As text they order by their digits, not in time; convert them to "
            "one zone first, e.g. pd.to_datetime(steps, utc=True)")


def _label_text(v: Any) -> str:
    return repr(v) if isinstance(v, str | np.str_) else repr(str(v))


def refuse_unsorted_steps(steps: np.ndarray, given: Any = None) -> None:
    """Number and time step labels must be strictly increasing along the step axis: ``"pre-event"`` reads the
    first row and ``"previous"`` the row before, by position, so ``steps=[2, 1, 0]`` took the row labelled 2 as
    the pre-event state, silently. Raises :class:`~aumann.errors.PanelError` naming the first pair out of order
    (reorder the rows with their labels, e.g. ``order = np.argsort(steps)``; :meth:`Panel.from_dataframe` and
    :meth:`Panel.from_xarray` sort them). Text labels have no order of their own: their row order is the order."""
    if steps.size < 2:
        return
    if steps.dtype.kind in "iufmM":
        bad = np.flatnonzero(steps[1:] <= steps[:-1])  # (a comparison, not np.diff: uint64 labels do not wrap)
        if not bad.size:
            return
        k = int(bad[0])
        a, b = ((str(steps[j]) if steps.dtype.kind in "mM" else repr(steps[j].item())) for j in (k, k + 1))
    else:  # times given as objects (a DatetimeIndex, datetimes) are labelled by their text: compared as times
        items = None if given is None else _time_items(given)
        if items is None:
            return
        try:
            at = next((j for j in range(len(items) - 1) if not items[j] < items[j + 1]), None)
        except TypeError:  # times that do not compare (with and without a time zone): labels, not an order
            return
        if at is None:
            return
        k, a, b = at, str(items[at]), str(items[at + 1])
    raise PanelError(f"steps must be strictly increasing (the step axis is time order: 'pre-event' and 'previous' "
                     f"baselines read earlier rows by position); {a} at position {k} is followed by {b} at position "
                     f"{k + 1}. Reorder the rows with their labels (order = np.argsort(steps); values[order], "
                     "alive[order], context[order]), or use Panel.from_dataframe / Panel.from_xarray, which sort them")


def text_of_bytes(given: Any, arr: np.ndarray, what: str) -> tuple[Any, np.ndarray]:
    """Labels given as bytes (h5py and netCDF hand text over as bytes) as the UTF-8 text they hold: a list of bytes
    was kept as bytes (written ``b'alice'`` in every CSV and page) and an object array of them became the text
    ``"b'alice'"``, so the same ids gave two different panels. Returns ``(given, np.asarray(given))`` with every
    bytes label decoded; bytes that are not UTF-8 are a :class:`~aumann.errors.PanelError` naming the position."""
    if arr.dtype.kind == "S" or (arr.dtype == object and any(isinstance(v, bytes) for v in arr.reshape(-1).tolist())):
        if arr.ndim != 1:
            return given, arr
        items = given.tolist() if isinstance(given, np.ndarray) else list(given)  # (numpy made b'2' of a 2 among bytes)
        out = []
        for i, v in enumerate(items):
            if isinstance(v, bytes):
                try:
                    v = v.decode("utf-8")
                except UnicodeDecodeError:
                    raise PanelError(f"{what} are bytes, read as UTF-8 text, but {v[:40]!r} at position {i} is not "
                                     "UTF-8: decode them yourself (e.g. [b.decode('latin-1') for b in ids])") from None
            out.append(v)
        return out, np.asarray(out) if all(isinstance(v, str) for v in out) else _label_array(out)
    return given, arr


def _refuse_nested_labels(given: Any, arr: np.ndarray | None, what: str, n: int, *, tuples: bool = False) -> None:
    """Refuse labels given as pairs (tuples, lists, rows of a 2-D array) with a :class:`ShapeError` that says labels
    are scalars and how to pass a pair: numpy read ``[(0, 1), (1, 2), (2, 3)]`` as an array of shape (3, 2), which
    was refused as "must be a sequence of length 3; got shape (3, 2)", and pairs of different lengths as a bare
    "setting an array element with a sequence". ``tuples`` (agent ids, where a list of tuples is taken): a list or a
    row of an array is not hashable, and tuples among scalars are ids of two kinds; the message says which."""
    items = given.tolist() if isinstance(given, np.ndarray) else list(given)
    if len(items) != n:  # not one pair per agent (a flat list wrapped in another): the length is what is wrong
        return
    pos = next((i for i, v in enumerate(items) if isinstance(v, tuple | list | np.ndarray)), None)
    if pos is None:
        return
    first = items[pos]
    kind = "a row of a 2-D array" if arr is not None and isinstance(given, np.ndarray) else type(first).__name__
    shape = "" if arr is None else f" (read as an array of shape {arr.shape})"
    one = {"agent_ids": "agent", "steps": "step"}.get(what, "label")
    text = "-".join(str(v) for v in first)
    if tuples and isinstance(first, tuple):  # a tuple among scalars (a list of tuples only is taken)
        other = next(i for i, v in enumerate(items) if not isinstance(v, tuple))
        raise ShapeError(
            f"{what} mix tuples and other ids: tuple {_shown_label(first)} at position {pos} and "
            f"{_shown_label(items[other])} at position {other}; give ids of one kind, all tuples (each labelled by "
            "its text, as a recorder labels a tuple unique_id) or all numbers or text")
    if tuples:
        raise ShapeError(
            f"{what} must be {n} ids, each a number, text or a tuple; got {kind} {_shown_label(first)} at position "
            f"{pos}{shape}, which is not hashable. Pass each pair as a tuple ({what}=[tuple(p) for p in pairs], "
            f"labelled {str(tuple(first))!r} as a recorder labels a tuple unique_id) or as one text id ({text!r})")
    raise ShapeError(
        f"{what} must be scalars, one number or text per {one} ({n} of them); got {kind} {_shown_label(first)} at "
        f"position {pos}{shape}. Pass a pair (or any tuple) as one text {'id' if one == 'agent' else 'label'}, e.g. "
        f"{text!r} for {_shown_label(first)}: "
        f"{what}=[\"-\".join(map(str, p)) for p in pairs]")


def _shown_label(v: Any) -> str:
    text = repr(tuple(v) if isinstance(v, np.ndarray) else v)
    return text if len(text) <= 60 else text[:57] + "..."


def _tuple_ids(given: Any, what: str, n: int) -> Any:
    """Ids given as a list of tuples ((x, y) grid coordinates) as the recorders hold them: one object column, one
    tuple per row (:func:`label_column`), so that :class:`Panel` labels each by its text (``"(0, 1)"``), as it does
    the ids a recorder hands it. numpy read ``[(0, 1), (0, 2)]`` as a second axis, which was refused, though
    ``ArrayRecorder(agent_ids=...)`` and ``FeatureRecorder`` take the same ids. Two tuples Python holds equal
    (``(0, 1)`` and ``(0.0, 1.0)``, one row to a recorder) are a :class:`~aumann.errors.DuplicateIdError`; a tuple
    that holds a list cannot key a row (a :class:`~aumann.errors.ShapeError` naming it). Anything else is returned
    as given."""
    if isinstance(given, np.ndarray) or len(given) != n or not given:
        return given
    if not all(isinstance(v, tuple) for v in given):
        return given
    for k, v in enumerate(given):
        try:
            hash(v)
        except TypeError:
            raise ShapeError(f"{what}[{k}] = {_shown_label(v)} is not hashable, so it cannot be an id (a tuple id "
                             "holds numbers or text, not lists)") from None
    counts = Counter(given)
    if len(counts) != n:
        dup = [v for v, c in counts.items() if c > 1][:5]
        raise DuplicateIdError(f"{what} must be unique; repeated: {dup}")
    return label_column(given)


def unique_labels(labels: Sequence[Hashable], what: str, n: int, *, tuples: bool = False) -> np.ndarray:
    """``labels`` as an (n,) array of unique labels, checked. ``tuples``: a list of tuples is n ids (as a recorder
    takes them, each labelled by its text), not an (n, k) array (agent ids; steps stay scalars)."""
    if isinstance(labels, str | bytes) or not isinstance(labels, Iterable):
        raise ShapeError(f"{what} must be a sequence of length {n}; got {type(labels).__name__}")
    refuse_unordered(labels, what)
    given = labels if isinstance(labels, np.ndarray) else list(labels)
    if tuples:
        given = _tuple_ids(given, what, n)
    try:
        arr = np.asarray(given)
    except (ValueError, TypeError) as exc:
        _refuse_nested_labels(given, None, what, n, tuples=tuples)
        raise ShapeError(f"{what} must be a flat sequence of {n} labels: {exc}") from exc
    given, arr = text_of_bytes(given, arr, what)
    if arr.dtype.kind == "f" and not isinstance(given, np.ndarray) and _all_integers(given):
        arr = _integer_labels(given, what)  # numpy makes floats of ints past int64 mixed with others ([2**63, 1])
    if arr.ndim > 1:
        _refuse_nested_labels(given, arr, what, n, tuples=tuples)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ShapeError(f"{what} must be a sequence of length {n}; got shape {arr.shape}")
    refuse_mixed_labels(given, arr, what, error=PanelError)
    refuse_nul(given, arr, what)
    plain_labels(arr, what)
    if arr.dtype.kind == "O":  # None is no id either (it became the text 'None', and every other id text with it)
        none = np.flatnonzero(np.fromiter((v is None for v in arr.tolist()), dtype=bool, count=arr.size))
        if none.size:
            raise PanelError(f"{what} must be integers, text, finite numbers or times; {none.size} of them None "
                             f"(at position(s) {none[:5].tolist()})")
    if arr.dtype == object:
        items = arr.tolist()
        if _all_integers(items):  # integer ids in an object array stay integers (1 and "1" are different ids)
            arr = _integer_labels(items, what)
        else:  # each id by its text (astype(str) reads a tuple id as a sequence: a bare ValueError)
            arr = np.array([label_text(v) for v in items], dtype=str) if items else arr.astype(str)
    uniq, counts = np.unique(arr, return_counts=True)
    if uniq.shape[0] != n:
        dup = uniq[counts > 1][:5].tolist()
        raise DuplicateIdError(f"{what} must be unique; repeated: {dup}")
    utf8_labels(arr, what)
    return arr


def _kind_of(t: type) -> str:
    if issubclass(t, bool | np.bool_):
        return "bool"
    if issubclass(t, int | np.integer):
        return "integer"
    if issubclass(t, float | np.floating):
        return "float"
    if issubclass(t, str | np.str_):
        return "text"
    return "other"


def id_kinds(items: Sequence[Any]) -> dict[str, list[int]] | None:
    """The positions of the given ids by their kind (bool, integer, float, text, other) when they are of more than
    one kind, else None (the common case: one pass over the types at C speed). ``np.asarray`` makes one type of a
    mixed list ([1, "2"] the text ["1", "2"], [True, 2] the integers [1, 2], [2**60 + 1, 0.5] floats, where
    2**60 + 1 is 2**60), so ids of each kind are looked up as a list of that kind alone is."""
    types = set(map(type, items))
    if len(types) < 2 or len({_kind_of(t) for t in types}) < 2:
        return None
    out: dict[str, list[int]] = {}
    for k, v in enumerate(items):
        out.setdefault(_kind_of(type(v)), []).append(k)
    return out


def kind_hint(missing: Sequence[Any], agent_ids: np.ndarray) -> str:
    """A note for unknown ids of another kind than the panel's: the number 1 is not the text id ``"1"``."""
    kinds = {_kind_of(type(v)) for v in missing}
    if agent_ids.dtype.kind == "U" and kinds & {"integer", "float"}:
        return " (this panel's agent ids are text: a number is not its text, pass e.g. '1' for 1)"
    if agent_ids.dtype.kind in "iuf" and "text" in kinds:
        return f" (this panel's agent ids are numbers ({agent_ids.dtype}): text is not a number, pass e.g. 1 for '1')"
    return ""
