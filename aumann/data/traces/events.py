"""Normalised events: what every reader hands the panel builder, and the one place records are validated.

A reader collects, per record, the raw values of the fields its spec names (:class:`RawRecords`) and
calls :func:`to_batch`, which

* keeps records whose ``[where]`` fields hold one of the listed values (others are *filtered*);
* turns the agent, step (integer, or a timestamp binned into steps) and numeric fields into arrays;
* applies the spec's ``on_bad`` policy to a record with a missing or unusable agent/step/numeric value:
  ``"error"`` raises :class:`~aumann.errors.TraceRecordError` naming the source and the line/row,
  ``"skip"`` drops it and counts it under its reason, keeping the first locations (:class:`Tally`).

Every reader therefore applies the same rules in the same words; only how records are found differs.
"""

from __future__ import annotations

import datetime
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from aumann.data.traces.idtext import _FLOAT_TEXT, id_text
from aumann.data.traces.rounding import Rounded, rounded_array, rounded_objects
from aumann.data.traces.spec import TraceSpec, parse_duration, path_keys
from aumann.errors import TraceRecordError, TraceSpecError

#: locations kept per skip reason (the report lists them)
KEEP_LOCATIONS = 5
_MISSING = object()


@dataclass
class Tally:
    """What a read skipped or filtered, by reason, with the first locations of each."""

    skipped: dict[str, int] = field(default_factory=dict)
    skipped_at: dict[str, list[str]] = field(default_factory=dict)
    filtered: dict[str, int] = field(default_factory=dict)
    missing_values: dict[str, int] = field(default_factory=dict)
    records: int = 0
    blank_lines: int = 0
    #: records whose agent id is a whole-valued float (1.0), read as the integer id (1)
    float_ids: int = 0
    #: records whose agent id is bytes that are no UTF-8 text (a BLOB, a Parquet binary value), labelled X'FF01'
    blob_ids: int = 0
    #: records whose action is bytes that are no UTF-8 text (a BLOB, a Parquet binary value), labelled X'FF01'
    blob_actions: int = 0
    #: per numeric field: values that are integers past ±2**53 which float64 changed (kept as the nearest double)
    rounded: dict[str, int] = field(default_factory=dict)
    #: per numeric field: the largest magnitude among those integers
    rounded_largest: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, locations: Sequence[str], n: int | None = None) -> None:
        count = len(locations) if n is None else n
        if count <= 0:
            return
        self.skipped[reason] = self.skipped.get(reason, 0) + count
        kept = self.skipped_at.setdefault(reason, [])
        kept.extend(list(locations[: max(0, KEEP_LOCATIONS - len(kept))]))

    def filter(self, reason: str, n: int) -> None:
        if n > 0:
            self.filtered[reason] = self.filtered.get(reason, 0) + int(n)

    def missing(self, field_path: str, n: int) -> None:
        if n > 0:
            self.missing_values[field_path] = self.missing_values.get(field_path, 0) + int(n)

    def rounded_values(self, field_path: str, n: int, largest: int) -> None:
        if n > 0:
            self.rounded[field_path] = self.rounded.get(field_path, 0) + n
            self.rounded_largest[field_path] = max(self.rounded_largest.get(field_path, 0), largest)

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())


@dataclass
class RawRecords:
    """Raw field values of a run of records, as the reader found them (lists, or numpy arrays)."""

    source: str
    unit: str  # "line", "row", "entry"
    loc: list[int] = field(default_factory=list)
    agent: list[Any] = field(default_factory=list)
    step: list[Any] = field(default_factory=list)
    action: list[Any] = field(default_factory=list)
    values: dict[str, list[Any]] = field(default_factory=dict)
    where: dict[str, list[Any]] = field(default_factory=dict)
    #: each record's place in the log, where the reader hands records over out of log order (spans waiting for
    #: their trace's step); ``None``: the records come in log order
    order: list[float] | None = None

    def __len__(self) -> int:
        return len(self.loc)


@dataclass
class EventBatch:
    """Valid events: agent ids, integer steps (binned if the spec bins), actions, numeric fields."""

    agent: np.ndarray
    step: np.ndarray
    action: np.ndarray | None
    values: dict[str, np.ndarray]
    #: each event's place in the log (``RawRecords.order``), or ``None``: the events come in log order
    order: np.ndarray | None = None
    #: which actions were bytes that are no UTF-8 text (labelled X'FF01'), with {label: the bytes}; ``None`` (the
    #: common case) where no action of the batch is such bytes
    blob_actions: tuple[np.ndarray, dict[str, bytes]] | None = None

    def __len__(self) -> int:
        return int(self.step.shape[0])


class StepCoder:
    """Raw step values → integer steps (the spec's ``[step]``): integers as they are, timestamps binned."""

    def __init__(self, spec: TraceSpec) -> None:
        st = spec.step
        self.field = st.field
        self.binned = st.binned
        self.unit = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[st.unit]
        self.unit_name = st.unit
        self.numeric_width = isinstance(st.bin, int | float) and not isinstance(st.bin, bool)
        self.width = float(st.bin) if self.numeric_width else (parse_duration(st.bin) if st.bin else 1.0)
        self.origin = 0.0
        if isinstance(st.origin, str):
            if self.numeric_width:
                raise TraceSpecError("step.origin is a time but step.bin is a plain number: give a numeric origin")
            # as the step values' text is read (not ts.value: nanoseconds overflow beyond 1677-2262, and
            # pandas 2.x parses no text beyond them)
            origin = float(_parse_times(pd.Series([st.origin], dtype=object))[0][0])
            if math.isnan(origin):
                raise TraceSpecError(f"step.origin {st.origin!r} is not an ISO-8601 time")
            self.origin = origin
        elif st.origin is not None:
            self.origin = float(st.origin) * (1.0 if self.numeric_width else self.unit)

    def label(self, step: int) -> Any:
        """The panel's label of integer step ``step``: the step itself, or the start of its bin."""
        if not self.binned:
            return int(step)
        start = self.origin + step * self.width
        if self.numeric_width:  # 15 digits: bin 3 of width 0.1 starts at 0.3, not 3 × 0.1 = 0.30000000000000004
            s = float(f"{start:.15g}")
            return int(s) if s.is_integer() else s
        return pd.Timestamp(round(start * 1e6), unit="us", tz="UTC").isoformat().replace("+00:00", "Z")

    def code(self, raw: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(steps int64, missing mask, unusable mask, out-of-range mask, time-out-of-range mask) of the raw
        values: out of range (a subset of unusable) is an integer step, or a bin index, beyond ±2⁵³, where
        float64 stops counting; time out of range (also unusable) is a timestamp no datetime type holds
        (a year of five or more digits)."""
        arr = np.asarray(raw) if isinstance(raw, np.ndarray) and raw.dtype != object else _scalars(raw)
        n = arr.shape[0]
        time_far = np.zeros(n, dtype=bool)
        if arr.dtype.kind in "iu":
            num = arr.astype(np.float64)
            missing = np.zeros(n, dtype=bool)
            if not self.binned:  # judged on the integers: 2⁵³ + 1 would round to 2⁵³ in float64
                far = (arr > 2**53) if arr.dtype.kind == "u" else (arr > 2**53) | (arr < -(2**53))
                return self._finish(num, missing, np.zeros(n, dtype=bool), from_time=False, far=far, time_far=time_far)
            return self._finish(num, missing, np.zeros(n, dtype=bool), from_time=False, time_far=time_far)
        if arr.dtype.kind == "f":
            missing = np.isnan(arr)
            return self._finish(arr.astype(np.float64), missing, np.zeros(n, dtype=bool), from_time=False,
                                time_far=time_far)
        if arr.dtype.kind == "M":  # a timestamp column (DuckDB/Arrow): times, whatever the unit
            missing = np.isnat(arr)
            if not (self.binned and not self.numeric_width):  # a time where a number is needed: unusable
                return self._finish(np.zeros(n), missing, ~missing, from_time=False, time_far=time_far)
            # in the column's own unit (astype(object) would give bare integers for nanoseconds)
            return self._finish(_datetime64_seconds(arr), missing, np.zeros(n, dtype=bool), from_time=True,
                                time_far=time_far)
        obj = arr.astype(object)
        missing = np.fromiter((v is None or v is _MISSING or v is pd.NaT or (isinstance(v, float) and v != v)
                               or (isinstance(v, str) and _no_value(v)) for v in obj), dtype=bool, count=n)
        isbool = np.array([isinstance(v, bool | np.bool_) for v in obj], dtype=bool)
        istime = np.array([isinstance(v, datetime.date | np.datetime64) for v in obj], dtype=bool)
        num = np.full(n, np.nan)
        plain = ~(isbool | istime | missing)
        if plain.any():
            try:
                num[plain] = pd.to_numeric(pd.Series(obj[plain]), errors="coerce").to_numpy(dtype=np.float64,
                                                                                            na_value=np.nan)
            except OverflowError:  # an int beyond float64 (JSON read by Python) was pandas' bare OverflowError:
                # as the largest double, so that it is out of range (as in the table readers), not "no step"
                big = pd.Series([_beyond_float64(v, sys.float_info.max) for v in obj[plain]], dtype=object)
                num[plain] = pd.to_numeric(big, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        from_time = np.zeros(n, dtype=bool)
        if self.binned and not self.numeric_width:
            todo = np.isnan(num) & ~missing & ~isbool
            if todo.any():
                num[todo], time_far[todo] = _parse_times(pd.Series(obj[todo]).astype(str))
                from_time[todo] = True
        bad = ~np.isfinite(num) & ~missing  # (NaN, and an infinite step: 1e309 reads as inf, no integer)
        far = None
        if not self.binned:  # an integer (or integer text) judged as an integer: float64 rounds 2⁵³ + 1 to 2⁵³
            far = np.zeros(n, dtype=bool)
            for i in np.flatnonzero(plain & ~bad & (np.abs(num) >= 2**53)):
                if not math.isfinite(num[i]):  # text spelling inf: no integer (int() raised a bare OverflowError)
                    bad[i] = True
                    continue
                far[i] = abs(_integer(obj[i], num[i])) > 2**53
        return self._finish(num, missing, bad, from_time=from_time, far=far, time_far=time_far)

    def _finish(self, num: np.ndarray, missing: np.ndarray, bad: np.ndarray, *, from_time: Any, time_far: np.ndarray,
                far: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        num = num.copy()
        num[missing | bad] = 0.0
        if not self.binned:
            far = ((np.abs(num) > 2**53) if far is None else far) & ~bad
            bad = bad | (num != np.floor(num)) | far
            steps = np.where(bad | missing, 0, num).astype(np.int64)
            return steps, missing, bad, far, time_far
        seconds = num if self.numeric_width else np.where(from_time, num, num * self.unit)
        if not self.numeric_width:
            # a number read as a time in `unit` that lands after the year 9999 (or before the year 1) is out of
            # range, as ISO text with such a year is: an epoch in milliseconds (pandas' to_json writes them) read
            # in seconds was a bin in the year 58270, and 4 events of an hour were 2,334 hourly steps, without a word.
            # So is a time DuckDB or Arrow hands over typed (a CSV or JSON lines text 12024-01-01T00:00:00Z, which
            # DuckDB's detection types as a timestamp; a Parquet timestamp): the span and OASIS readers, which parse
            # the same text themselves, refused it, and the table reader binned it (its step label, 12024-...,
            # being text that every reader refuses)
            beyond = ~(missing | bad) & ((seconds >= _AFTER_9999) | (seconds < _BEFORE_1))
            if beyond.any():
                time_far = time_far | beyond
                bad = bad | beyond
        with np.errstate(invalid="ignore", over="ignore"):
            q = (seconds - self.origin) / self.width
            idx = np.floor(q)
            # a time at a bin's start, as far as float64 tells, is in that bin: the quotient's floor was off by one at
            # the edges where the width is no binary fraction (bin = 0.1: 0.3 / 0.1 is 2.9999999999999996, so t = 0.3
            # fell in the bin of 0.2; 08:00:00.100 in the 100 ms bin of 08:00:00). The tolerance is the quotient's
            # rounding error: a few units in the last place of the time, the origin and the quotient
            tol = 2 * ((np.spacing(np.abs(seconds)) + np.spacing(abs(self.origin))) / self.width
                       + np.spacing(np.abs(q)))
            idx = np.where(idx + 1 - q <= tol, idx + 1, idx)
        far = (np.abs(idx) > 2**53) & np.isfinite(idx) & ~bad
        bad = bad | ~np.isfinite(idx) | far
        return np.where(bad | missing, 0, idx).astype(np.int64), missing, bad, far, time_far


#: seconds since the epoch of 10000-01-01T00:00:00Z and 0001-01-01T00:00:00Z: a number read as a time outside them
#: is out of range
_AFTER_9999 = 253_402_300_800.0
_BEFORE_1 = -62_135_596_800.0


_PER_SECOND = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


def _datetime64_seconds(arr: np.ndarray) -> np.ndarray:
    """Seconds since the epoch (NaN at NaT) of a datetime64 array, read in its own unit: converting to
    ``datetime64[ns]`` would wrap silently for times before 1677-09-21 or after 2262-04-11."""
    unit, count = np.datetime_data(arr.dtype)
    if unit not in _PER_SECOND:  # days, weeks, months, years ...: exact in seconds
        arr, unit, count = arr.astype("datetime64[s]"), "s", 1
    secs = arr.view(np.int64).astype(np.float64) * (count / _PER_SECOND[unit])
    secs[np.isnat(arr)] = np.nan
    return secs


def _parse_times(strs: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(seconds since the epoch, NaN where not a time; out-of-range mask) of ISO-8601 texts, vectorised.

    pandas parses in one resolution per call, the finest any text needs: one text with nanoseconds makes the
    call ``datetime64[ns]``, where a time before 1677-09-21 or after 2262-04-11 is NaT (and a far time with
    nanoseconds of its own is NaT in any call). So the texts it could not parse are parsed once more on
    their own with the fraction cut to microseconds (``datetime64[us]`` holds years 0-9999 and beyond; a
    float64 of seconds holds no nanoseconds there anyway). pandas 2.x parses text in nanoseconds only, so
    what is still left is parsed by :func:`_seconds_by_cycles`, its year moved into the nanoseconds' range. What
    is left then is not a timestamp, except a year of five or more digits (ISO-8601's expanded years, past what
    pandas and Python parse), which is out of range."""
    secs = _iso_seconds(strs)
    far = np.zeros(len(strs), dtype=bool)
    todo = np.flatnonzero(np.isnan(secs))
    if todo.size:
        again = strs.iloc[todo].str.replace(r"(\.\d{6})\d+", r"\1", regex=True)
        secs[todo] = _iso_seconds(again)
        still = np.isnan(secs[todo])
        if still.any():
            secs[todo[still]] = _seconds_by_cycles(again.iloc[np.flatnonzero(still)])
        left = todo[np.isnan(secs[todo])]
        if left.size:
            far[left] = strs.iloc[left].str.match(r"\s*[+-]?\d{5,}-\d\d").to_numpy(dtype=bool)
    return secs, far


def _iso_seconds(strs: pd.Series) -> np.ndarray:
    """Seconds since the epoch of ISO-8601 texts as pandas parses them (NaN where it does not)."""
    return _datetime64_seconds(_utc(pd.to_datetime(strs, utc=True, errors="coerce", format="ISO8601")))


#: the Gregorian calendar repeats every 400 years: 146,097 days, leap days included
_CYCLE_YEARS = 400
_CYCLE_SECONDS = 146_097 * 86_400.0
#: the years the texts are moved into (1800-2199, inside pandas' nanoseconds, 1677-09-21 to 2262-04-11, with a day
#: to spare at either end for a zone's offset)
_CYCLE_START = 1800
#: text that starts with a year of four digits
_YEAR_FIRST = re.compile(r"(\s*)(\d{4})(-.*)", re.DOTALL)


def _seconds_by_cycles(strs: pd.Series) -> np.ndarray:
    """Seconds since the epoch of ISO-8601 texts with a year of 0001-9999 outside pandas 2.x's nanoseconds (a trace
    in the year 2300 was skipped record by record as 'not a timestamp', and a step.origin there refused): the year
    moved by whole 400-year cycles into 1800-2199, the text parsed by pandas (so its ISO-8601 is the one the other
    texts are read by), the cycles added back in seconds. NaN where the text still does not parse, or does not
    start with such a year (pandas 3 parses these texts itself: none are left for this)."""
    out = np.full(len(strs), np.nan)
    moved: list[str] = []
    where: list[int] = []
    cycles: list[int] = []
    for i, text in enumerate(strs.tolist()):
        m = _YEAR_FIRST.fullmatch(text) if isinstance(text, str) else None
        if m is None or int(m.group(2)) < 1:
            continue
        k = (int(m.group(2)) - _CYCLE_START) // _CYCLE_YEARS
        moved.append(f"{m.group(1)}{int(m.group(2)) - k * _CYCLE_YEARS:04d}{m.group(3)}")
        where.append(i)
        cycles.append(k)
    if where:
        out[where] = _iso_seconds(pd.Series(moved, dtype=object)) + np.array(cycles) * _CYCLE_SECONDS
    return out


def _utc(ts: pd.Series) -> np.ndarray:
    """A tz-aware (UTC) datetime Series as naive datetime64 in its own unit."""
    return ts.dt.tz_convert(None).to_numpy()


def _integer(v: Any, approx: float) -> int:
    """The integer a step value holds (an int, a DuckDB HUGEINT's Decimal, or text of one), else ``approx``."""
    if isinstance(v, float | np.floating | bool | np.bool_):
        return int(approx)
    try:
        exact = int(v.strip()) if isinstance(v, str) else int(v)
    except (TypeError, ValueError, ArithmeticError):
        return int(approx)
    return exact if exact == v or isinstance(v, str) else int(approx)


#: what a list or an object stands for where a field needs one value: text that no number or timestamp parses
#: from, so the record is unusable (refused or skipped and counted) like any other bad value
_NESTED = "<a list or an object, not one value>"


def _scalars(raw: Sequence[Any] | np.ndarray) -> np.ndarray:
    """``raw`` as a 1-D object array, one entry per record. ``np.asarray(raw, dtype=object)`` would turn
    same-length lists (an OpenTelemetry ``arrayValue``, a JSON array in a long table) into a second dimension
    and fail deep inside numpy; each list or object here becomes :data:`_NESTED`, an unusable value."""
    seq = list(raw)
    out = np.empty(len(seq), dtype=object)
    for i, v in enumerate(seq):
        out[i] = _NESTED if isinstance(v, list | tuple | dict | set | np.ndarray) else v
    return out


#: text that is no value, in a numeric or step field: empty, or NaN in any case (CSV's ``NaN`` in a column DuckDB read
#: as numbers was a missing value, in a column it read as text, or in JSON as ``"NaN"``, a bad record)
_NO_VALUE_TEXT = frozenset({"", "nan", "+nan", "-nan"})


def _no_value(v: Any) -> bool:
    """Whether a raw value is missing: absent, null, a float NaN (JSON's bare ``NaN`` too), or text that is empty or
    spells NaN (``"NaN"``, ``nan``, ``""``): the one rule of every reader (docs/traces.md, "Missing values")."""
    if v is None or v is _MISSING:
        return True
    if isinstance(v, float | np.floating):
        return bool(np.isnan(v))
    return isinstance(v, str) and len(v) <= 8 and v.strip().lower() in _NO_VALUE_TEXT


def _numeric(raw: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, Rounded | None]:
    """(float64 values, missing, unusable, the integers float64 changed) of raw numeric field values (bools count as
    0/1; missing: see :func:`_no_value`; integers past ±2**53: :mod:`~aumann.data.traces.rounding`)."""
    if isinstance(raw, np.ndarray) and raw.dtype.kind in "iufb":
        vals = raw.astype(np.float64)
        missing = np.isnan(vals) if raw.dtype.kind == "f" else np.zeros(vals.shape[0], dtype=bool)
        bad = np.isinf(vals)
        return vals, missing, bad, rounded_array(raw)
    obj = _scalars(raw)
    missing = np.fromiter((v is None or v is _MISSING or (isinstance(v, float) and v != v)
                           or (type(v) is str and len(v) <= 8 and _no_value(v)) for v in obj), dtype=bool,
                          count=len(obj))
    obj = np.where(missing, None, obj) if missing.any() else obj
    conv = [float(v) if isinstance(v, bool | np.bool_) else v for v in obj]
    try:
        num = pd.to_numeric(pd.Series(conv, dtype=object), errors="coerce")
    except OverflowError:  # an int beyond float64 (JSON read by Python: 400 digits) was pandas' bare OverflowError
        conv = [_beyond_float64(v) for v in conv]
        num = pd.to_numeric(pd.Series(conv, dtype=object), errors="coerce")
    vals = num.to_numpy(dtype=np.float64, na_value=np.nan)
    bad = (np.isnan(vals) & ~missing) | np.isinf(vals)
    return vals, missing, bad, rounded_objects(conv, num, vals)


def _beyond_float64(v: Any, top: float = math.inf) -> Any:
    """An integer no float64 holds as ±``top`` (inf: not a finite number, as text of it reads), anything else as it
    is."""
    if isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_):
        try:
            float(v)
        except OverflowError:
            return top if v > 0 else -top
    return v


class Validator:
    """:func:`to_batch` with the spec's coders bound once per read."""

    def __init__(self, spec: TraceSpec, tally: Tally) -> None:
        self.spec = spec
        self.tally = tally
        self.steps = StepCoder(spec)
        self.fields = spec.fields()
        self.where = {k: {_key(v) for v in vals} for k, vals in spec.where.items()}
        # a number in a [where] list also matches text that spells it in decimal (1.5: "1.50", "15e-1"), in every
        # format alike: a CSV column of numbers is read as written (its text), and [where] price = [1.5] matched no
        # CSV cell written 1.50 (nor a JSON text "1.50"), where it matched the JSON number 1.50
        # (an int beyond float64, which TOML reads, matches its text only: float() of it was a bare OverflowError)
        self.where_numbers = {k: {float(_beyond_float64(v)) for v in vals if isinstance(v, int | float)
                                  and not isinstance(v, bool)} - {math.inf, -math.inf}
                              for k, vals in spec.where.items()}
        self.excluded_agents = {_key(v) for v in spec.agent.exclude}

    def refuse(self, raw: RawRecords, mask: np.ndarray, reason: str) -> np.ndarray:
        """Apply on_bad to the records in ``mask``: raise naming the first, or count them; returns ~mask."""
        if not mask.any():
            return ~mask
        where = np.flatnonzero(mask)
        locs = [f"{raw.source} {raw.unit} {raw.loc[i]}" for i in where[:KEEP_LOCATIONS]]
        if self.spec.on_bad == "error":
            raise TraceRecordError(f"{locs[0]}: {reason} (on_bad = 'skip' in the spec skips and counts such "
                                   "records)")
        self.tally.skip(reason, locs, n=int(mask.sum()))
        return ~mask

    def to_batch(self, raw: RawRecords) -> EventBatch | None:
        n = len(raw)
        if n == 0:
            return None
        keep = np.ones(n, dtype=bool)
        for key, allowed in self.where.items():
            vals = raw.where[key]
            numbers = self.where_numbers[key]
            ok = np.fromiter((_key(v) in allowed or (bool(numbers) and _spelled_number(v) in numbers) for v in vals),
                             dtype=bool, count=n)
            self.tally.filter(f"{key} not in where", int((keep & ~ok).sum()))
            keep &= ok
        # one entry per record: np.asarray(dtype=object) turned same-length lists (a JSON array or an OTel
        # arrayValue in every record of the batch) into a second dimension, and pandas' factorize raised
        agent = _scalars(raw.agent) if not isinstance(raw.agent, np.ndarray) or raw.agent.ndim != 1 else raw.agent
        floats = None  # which object ids are floats (one pass finds them and the missing ones)
        kind = None
        if agent.dtype == object:
            # (empty text is no id either: an empty CSV field is no value, and a JSON "" was the agent '')
            kind = np.fromiter((1 if v is None or v is _MISSING or v is _NESTED or v == "" else
                                2 if isinstance(v, float) else 3 if isinstance(v, bytes | bytearray) else 0
                                for v in agent), dtype=np.int8, count=n)
            floats = kind == 2
            amiss = kind == 1
            if floats.any():
                amiss[floats] = ~np.isfinite(agent[floats].astype(np.float64))
        elif agent.dtype.kind == "f":  # a column of floats: NaN is no id, nor ±inf (1e400 and 1e500 both read as inf)
            amiss = ~np.isfinite(agent)
        else:
            amiss = np.zeros(n, dtype=bool)
        keep &= self.refuse(raw, keep & amiss, f"no usable agent id in field {self.spec.agent.field!r}")
        agent, whole = _whole_float_ids(agent, keep, floats)
        self.tally.float_ids += whole
        # true/false is no id, and Python's True == 1 made agent true and agent 1 (and 1.0) one agent, labelled
        # 'True', silently
        flags = (np.ones(n, dtype=bool) if agent.dtype == np.bool_ else
                 np.fromiter((isinstance(v, bool | np.bool_) for v in agent), dtype=bool, count=n)
                 if agent.dtype == object else np.zeros(n, dtype=bool))
        keep &= self.refuse(raw, keep & flags, f"agent id in field {self.spec.agent.field!r} is true/false, not an "
                            "id")
        if self.excluded_agents:
            ex = np.fromiter((_key(v) in self.excluded_agents for v in agent), dtype=bool, count=n) & keep
            self.tally.filter("agent excluded", int(ex.sum()))
            keep &= ~ex
        steps, smiss, sbad, sfar, stime = self.steps.code(raw.step)
        keep &= self.refuse(raw, keep & smiss, f"no step value in field {self.steps.field!r}")
        keep &= self.refuse(raw, keep & stime, f"step field {self.steps.field!r} is out of range: a timestamp "
                            "with a year of five or more digits (after 9999), or a number that is one in [step] unit = "
                            f"{self.spec.step.unit!r} (an epoch in ms, us or ns? set unit to the numbers' unit)")
        keep &= self.refuse(raw, keep & sfar, f"step field {self.steps.field!r} is out of range: "
                            + ("a bin index beyond ±2⁵³ (check step.origin and step.bin)" if self.steps.binned
                               else "an integer step beyond ±2⁵³ (float64 counts exactly only that far)"))
        what = ("a timestamp (ISO-8601 text or a number)" if self.steps.binned and not self.steps.numeric_width
                else "a number" if self.steps.binned else "an integer step")
        if not self.steps.binned and (keep & sbad).any():  # say what to do where the step field holds times
            times = np.zeros(n, dtype=bool)
            for i in np.flatnonzero(keep & sbad).tolist():
                times[i] = _time_like(raw.step[i])
            keep &= self.refuse(raw, times, f"step field {self.steps.field!r} holds a timestamp, not an integer "
                                "step: bin it into steps with --bin 1h (or [step] bin = '1h' in the spec)")
        keep &= self.refuse(raw, keep & sbad, f"step field {self.steps.field!r} is not {what}")
        st = self.spec.step
        if st.start is not None or st.stop is not None:
            lo = st.start if st.start is not None else -(2**62)
            hi = st.stop if st.stop is not None else 2**62
            out = keep & ((steps < lo) | (steps > hi))
            self.tally.filter("step outside [step.start, step.stop]", int(out.sum()))
            keep &= ~out
        values: dict[str, np.ndarray] = {}
        rounded: dict[str, Rounded] = {}
        for f in self.fields:
            v, vmiss, vbad, vround = _numeric(raw.values[f])
            if vround is not None:
                rounded[f] = vround
            if (keep & vbad).any():  # say what to do where the text is a number with a decimal comma (1,5)
                comma = np.zeros(n, dtype=bool)
                for i in np.flatnonzero(keep & vbad).tolist():
                    x = raw.values[f][i]
                    comma[i] = isinstance(x, str) and _DECIMAL_COMMA.fullmatch(x) is not None
                keep &= self.refuse(raw, comma, f"field {f!r} is not a finite number: it looks like a number with a "
                                    "decimal comma (1,5); a CSV table reads such numbers with [csv] decimal_separator "
                                    "= ',' in the spec, else write them with a decimal point (1.5)")
            keep &= self.refuse(raw, keep & vbad, f"field {f!r} is not a finite number")
            values[f] = v
            self.tally.missing(f, int((keep & vmiss).sum()))
        action = None
        blob_actions: tuple[np.ndarray, dict[str, bytes]] | None = None
        if self.spec.action is not None:
            # bytes that are no UTF-8 text (UTF-8 ones were read as their text) as SQLite's literal X'FF01', as an
            # agent id of them is labelled, not Python's "b'\\xff\\x01'" (a count_each feature was named by it)
            blobs = np.fromiter((isinstance(a, bytes | bytearray) for a in raw.action), dtype=bool, count=n)
            action = np.array([None if a is None or a is _MISSING else id_text(a) for a in raw.action], dtype=object)
            self.tally.missing(self.spec.action.field, int((keep & (action == None)).sum()))  # noqa: E711
            self.tally.blob_actions += int((keep & blobs).sum())
            if (keep & blobs).any():  # (rare: a pass over this batch's BLOB actions only)
                blob_actions = (blobs, {action[i]: bytes(raw.action[i]) for i in np.flatnonzero(keep & blobs).tolist()})
        order = None if raw.order is None else np.asarray(raw.order, dtype=np.float64)
        if kind is not None:  # ids of bytes that are no UTF-8 text (UTF-8 ones were read as their text): counted
            self.tally.blob_ids += int((keep & (kind == 3)).sum())
        for f, r in rounded.items():  # integers past 2**53 that float64 changed, among the records kept: counted
            self.tally.rounded_values(f, *r.count_and_largest(keep))
        if keep.all():
            return EventBatch(agent, steps, action, values, order, blob_actions)
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            return None
        return EventBatch(agent[idx], steps[idx], None if action is None else action[idx],
                          {k: v[idx] for k, v in values.items()}, None if order is None else order[idx],
                          None if blob_actions is None else (blob_actions[0][idx], blob_actions[1]))


def _whole_float_ids(agent: np.ndarray, keep: np.ndarray, floats: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """(ids, how many of the ``keep`` records held one as a whole-valued float): an agent id that is a float with no
    fraction (``1.0``: an OASIS ``user_id`` stored as REAL, a JSON ``1.0``) is the integer id (``1``), as SQLite's
    INTEGER affinity stores it and as ``[agent] exclude``, ``[where]`` and edge endpoints compare it. Python's
    ``1 == 1.0`` merged the two into whichever came first, silently: an id of ``1.0`` read first made every id of
    the panel text (``'1.0'``, ``'2'``), read second it vanished into ``1``. Floats with a fraction stay as they
    are; beyond ±2⁵³ a float is no exact integer and stays a float too."""
    if agent.dtype.kind == "f":
        whole = np.isfinite(agent) & (agent == np.floor(agent)) & (np.abs(agent) <= 2**53)
        if not whole.any():
            return agent, 0
        if whole.all():
            return agent.astype(np.int64), int((whole & keep).sum())
        out = agent.astype(object)
        out[whole] = [int(v) for v in agent[whole]]
        return out, int((whole & keep).sum())
    if agent.dtype != object:
        return agent, 0
    if floats is None:
        floats = np.fromiter((isinstance(v, float | np.floating) for v in agent), dtype=bool, count=agent.shape[0])
    if not floats.any():  # the common case: ids that are integers or text
        return agent, 0
    whole = np.zeros(agent.shape[0], dtype=bool)
    for i in np.flatnonzero(floats).tolist():
        v = float(agent[i])
        whole[i] = math.isfinite(v) and v.is_integer() and abs(v) <= 2**53
    if not whole.any():
        return agent, 0
    out = agent.copy()
    out[whole] = [int(v) for v in agent[whole]]
    return out, int((whole & keep).sum())


#: a number written with a decimal comma (``1,5``, as a European CSV file separated by ``;`` holds it)
_DECIMAL_COMMA = re.compile(r"\s*[-+]?[0-9]*,[0-9]+\s*")
_TIME_TEXT = re.compile(r"\s*[+-]?\d{4,}-\d\d-\d\d")


def _time_like(v: Any) -> bool:
    """Whether a step value is a time (a datetime, or text starting like an ISO-8601 date)."""
    if isinstance(v, datetime.date | np.datetime64):
        return True
    return isinstance(v, str) and _TIME_TEXT.match(v) is not None


def _spelled_number(v: Any) -> float | None:
    """The finite number text ``v`` spells in decimal by the syntax a CSV agent column of numbers is read with
    (:data:`~aumann.data.traces.idtext._NUMBER`: no space around it, no leading zero or plus: ``01`` is a code, not the
    number 1), else ``None`` (also for a value that is no text: a number is matched by its key)."""
    if isinstance(v, str) and _FLOAT_TEXT.fullmatch(v):
        x = float(v)
        return x if math.isfinite(x) else None
    return None


def _key(v: Any) -> str:
    """A comparable key of a field value (``where`` lists, excluded agents): ints and their text agree."""
    if isinstance(v, bool | np.bool_):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return id_text(v)  # bytes that are no UTF-8 text as the panel labels them, X'FF01'


class _Keyed(dict):
    """A decoded JSON object that remembers the keys it was given more than once."""

    twice: frozenset[str] = frozenset()


def keyed_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of :func:`json.loads` that marks an object giving a key twice (its dict remembers
    them): Python keeps the last value of such a key, DuckDB the first."""
    d = dict(pairs)
    if len(d) == len(pairs):
        return d
    out = _Keyed(d)
    seen: set[str] = set()
    out.twice = frozenset(k for k, _ in pairs if k in seen or seen.add(k))
    return out


def keys_twice(obj: Any) -> frozenset[str]:
    """The keys object ``obj`` (decoded with :func:`keyed_pairs`) gives more than once (none for an object decoded
    without the hook, or a value that is no object)."""
    return obj.twice if isinstance(obj, _Keyed) else frozenset()


def given_twice(obj: Any, keys: Sequence[str]) -> str | None:
    """The first of ``keys`` that object ``obj`` (decoded with :func:`keyed_pairs`) gives more than once, else
    ``None`` (also for an object decoded without the hook, or a value that is no object)."""
    twice = keys_twice(obj)
    if twice:
        for k in keys:
            if k in twice:
                return k
    return None


def repeated_path(doc: Any, paths: Sequence[tuple[str, ...]]) -> str | None:
    """The first field path of ``paths`` (``a/b``) along which an object of ``doc`` (decoded with
    :func:`keyed_pairs`) gives its key twice (``{"agent": 1, "agent": 2}``), else ``None``.

    Such a record is ambiguous: DuckDB (the long-table reader) reads the first value, Python's json (the span
    reader) the last, so the two readers read different agents from the same line. Both refuse it instead (or
    skip and count it); keys the spec does not read are not looked at."""
    for p in paths:
        cur = doc
        for i, key in enumerate(p):
            if not isinstance(cur, dict):
                break
            if isinstance(cur, _Keyed) and key in cur.twice:
                return "/".join(p[: i + 1])
            cur = cur.get(key)
    return None


def repeated_key(line: str | bytes, paths: Sequence[tuple[str, ...]]) -> str | None:
    """:func:`repeated_path` of one JSON line (``None`` for a line that is not JSON: it is refused as such
    elsewhere)."""
    import json

    try:
        doc = json.loads(line, object_pairs_hook=keyed_pairs)
    except (ValueError, RecursionError):
        return None
    return repeated_path(doc, paths)


def repeated_key_reason(path: str) -> str:
    """The skip reason (and refusal) of a record that gives a key the spec reads twice (:func:`repeated_path`)."""
    return f"a JSON object gives key {path!r} twice (which value is meant is ambiguous)"


def split_path(path: str) -> tuple[str, ...]:
    """A field path's keys (``"resource/agent.id"`` → ``("resource", "agent.id")``; ``\\/`` is a ``/`` inside a
    key: :func:`~aumann.data.traces.spec.path_keys`)."""
    return path_keys(path)


def get_path(record: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` in nested mappings (``_MISSING`` where a key is absent)."""
    cur = record
    for key in path:
        if isinstance(cur, dict):
            cur = cur.get(key, _MISSING)
            if cur is _MISSING:
                return _MISSING
        else:
            return _MISSING
    return cur


MISSING = _MISSING

__all__ = ["KEEP_LOCATIONS", "MISSING", "EventBatch", "RawRecords", "StepCoder", "Tally", "Validator", "get_path",
           "given_twice", "keyed_pairs", "keys_twice", "repeated_key", "repeated_key_reason", "repeated_path",
           "split_path"]
