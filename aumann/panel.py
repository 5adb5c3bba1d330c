"""Panel: a recorded run, T steps × N agents × D named features.

A panel is what every simulator, ingester and attribution method passes around. It holds

* ``values``: a numpy array of shape (T, N, D) (an (N, D) input becomes T = 1);
* ``features``: D unique names; ``agent_ids``: N unique ids; ``steps``: T labels;
* ``groups``: optional named agent labelings, e.g. ``{"tier": ["top", "tail", ...]}`` (length N; every agent has
  a label: ``None``/NaN is refused naming the agent);
* ``alive``: optional bool mask (T, N) for agents that enter or leave; dead rows are not
  validated and hold the baseline during attribution (so they receive zero attribution);
* ``context``: optional per-step world state that indicators may read but that is never
  attributed, as a mapping name → array with leading dimension T.

The input dtype is preserved for floating arrays (float32 stays float32); anything else becomes
float64. Panels are immutable by convention: methods return new panels.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import numpy as np

from aumann.checks import (
    FLOAT64_EXACT_INTEGERS,
    _exact_integer,
    as_int,
    as_path,
    as_real_array,
    as_torch,
    float64_rounded,
    largest_magnitude,
    refuse_mixed_labels,
    warn_rounded,
)
from aumann.errors import (
    AumannError,
    DuplicateIdError,
    EmptyPanelError,
    MemoryBudgetError,
    NonFiniteError,
    OptionalDependencyError,
    OutputError,
    PanelError,
    ShapeError,
    UnknownAgentError,
    UnknownFeatureError,
)
from aumann.io import dumps_json, memory_bytes, read_npz, safe_component, saved_npz, write_npz
from aumann.labels import (  # noqa: F401  (the public ones re-exported: aumann.panel's names before the split)
    _all_integers,
    _hashable,
    _label_array,
    _plain_item,
    _sorted_labels,
    _zone_of,
    id_kinds,
    id_labels,
    kind_hint,
    label_column,
    label_text,
    lookalike_ids,
    plain_labels,
    refuse_missing_group_labels,
    refuse_mixed_time_zones,
    refuse_nul,
    refuse_unordered,
    refuse_unsorted_steps,
    text_of_bytes,
    unique_labels,
    utf8_labels,
    warn_lookalike_ids,
)

_FORMAT = "aumann.panel/1"
#: set while a panel derives another from its own ids (take_agents, select_steps, ...): they were checked when it
#: was built, so the look-alike warning is not repeated for every subset
_DERIVING: ContextVar[bool] = ContextVar("aumann_panel_deriving", default=False)
_STEP_COLUMNS = ("step", "steps", "t", "time", "tick", "period")
_AGENT_COLUMNS = ("agentid", "agent_id", "agent", "unique_id", "id")


def xarray_module():
    """``xarray``, imported on first use (an optional extra: ``pip install 'aumann[xarray]'``).

    Raises:
        OptionalDependencyError: xarray is not installed.
    """
    try:
        import xarray
    except ImportError as exc:
        raise OptionalDependencyError(
            "this needs xarray, an optional extra: pip install 'aumann[xarray]' (or pip install xarray)") from exc
    return xarray


def _find_column(columns: Sequence[Any], given: str | None, candidates: tuple[str, ...], what: str,
                 levels: Sequence[Any] = ()) -> Any:
    """The step or agent column: ``given``, else the one column named like one (``candidates``, any case). Several
    such columns (NetLogo's ``tick`` beside a feature ``time``) are refused unless exactly one is an index level
    (Mesa's ``Step`` index beside a reporter ``time``): the first by name was taken, so ``time`` became the steps,
    one per row, and ``tick`` a feature, silently."""
    if given is not None:
        if given not in columns:
            raise UnknownFeatureError(f"{what} column {given!r} not in the frame; columns: {list(columns)}")
        return given
    found = [c for c in columns if str(c).lower() in candidates]
    if len(found) > 1:
        indexed = [c for c in found if c in levels]
        if len(indexed) == 1:
            return indexed[0]
        raise PanelError(f"the frame has {len(found)} columns that could be the {what} column: {found}; name the "
                         f"{what} column (Panel.from_dataframe(df, {what}={found[0]!r}), or {what}={found[1]!r}) — "
                         "the other stays a feature")
    if found:
        return found[0]
    raise PanelError(f"cannot find the {what} column: expected one of {list(candidates)} (case-insensitive) as a "
                     f"column or index level, or pass {what}=NAME; the frame has {list(columns)}")


def _flatten_frame(df: Any) -> tuple[Any, list[Any]]:
    """(the frame with its index levels as columns, the names of those levels), refusing what would make the
    columns ambiguous: repeated column names, an index level named like a column, unnamed levels."""
    cols = list(df.columns)
    dup = sorted({str(c) for c, k in Counter(cols).items() if k > 1})  # (cols.count per column: O(D²))
    if dup:
        raise DuplicateIdError(f"the frame has repeated column names {dup}; a column must name one thing")
    named = df.index.nlevels > 1 or df.index.name is not None
    if not named:
        return df, []
    levels = list(df.index.names)
    if any(n is None for n in levels):
        raise PanelError(f"the frame's index has unnamed levels {levels}; name them (df.index.names = [...]) or "
                         "reset the index")
    clash = [n for n in levels if n in cols]
    if clash or len(set(levels)) != len(levels):
        raise DuplicateIdError(f"index level(s) {clash or levels} are also column names (or repeat); rename one "
                               "(a panel reads each label once)")
    return df.reset_index(), levels


def _batch_run_columns(cols: list[Any], levels: list[Any], scol: Any, acol: Any) -> list[Any]:
    """The run-level columns of a frame made from Mesa's ``batch_run`` rows, ``pd.DataFrame(batch_run(...))``:
    each row is ``RunId, iteration, Step, <parameters>, <model reporters>, AgentID, <agent reporters>``, so RunId
    and iteration label the run and the columns between Step and AgentID hold one value per run and step, repeated
    on every agent's row (not per-agent features). ``[]`` for any other frame."""
    if levels or cols[:3] != ["RunId", "iteration", scol] or acol not in cols:
        return []
    return ["RunId", "iteration", *cols[3:cols.index(acol)]]


def _labels(col: Any, what: str, name: Any) -> np.ndarray:
    """A step or agent column as labels: no missing values (NaN, None, NaT)."""
    missing = col.isna()
    if bool(missing.any()):
        raise PanelError(f"the {what} column {name!r} has {int(missing.sum())} missing label(s) (NaN/None); every "
                         f"row needs a {what}")
    return col.to_numpy()


def _integer_column(col: Any) -> np.ndarray | None:
    """A pandas column's integers as numpy (nulls of a nullable ``Int64`` column left out), or ``None`` for a column
    of another kind (floats, bools)."""
    kind = col.dtype
    if isinstance(kind, np.dtype):
        return col.to_numpy() if kind.kind in "iu" else None
    numpy_kind = getattr(kind, "numpy_dtype", None)  # pandas' nullable Int64/UInt64 (and Arrow-backed) columns
    if not isinstance(numpy_kind, np.dtype) or numpy_kind.kind not in "iu":
        return None
    return col.dropna().to_numpy(dtype=numpy_kind)


def _kept_rounded(flat: Any, rounded: list[tuple[Any, int, int]], kept: np.ndarray) -> list[tuple[Any, int, int]]:
    """``(column, count, largest)`` of the integers float64 changed in the rows the panel keeps: a dead row
    (its alive value false, or not alive in ``alive=``) is stored as 0.0, so its integers are no value of the panel
    and do not count (a column whose changed integers are all in dead rows is left out). ``rounded`` holds the
    columns counted over every row; only those, and only where a row is dead, are counted again."""
    out: list[tuple[Any, int, int]] = []
    every = bool(kept.all()) if rounded else True
    for c, n, big in rounded:
        if not every:
            ints = _integer_column(flat[c][kept])
            changed = None if ints is None else float64_rounded(ints)
            if changed is None:
                continue
            n, big = int(changed.sum()), largest_magnitude(ints[changed])
        out.append((c, n, big))
    return out


def _rounded_record(features: Mapping[str, tuple[int, int]], context: Mapping[str, tuple[int, int]]) -> dict[str, Any]:
    """``meta["rounded_values"]`` as the recorders write it (:func:`aumann.simulators.recording.rounded_record`):
    ``{"features": {name: {"count", "largest"}}, "context": {...}}``, each part only when it has entries."""
    return {part: {k: {"count": n, "largest": big} for k, (n, big) in tally.items()}
            for part, tally in (("features", features), ("context", context)) if tally}


def _numbers_as_objects(col: Any) -> bool:
    """Whether a column of dtype ``object`` holds numbers only (and missing values): ints, floats, bools, numpy
    numbers, ``Decimal`` / ``Fraction``, beside ``None``, NaN, ``pd.NA`` or ``pd.NaT`` -- a feature pandas could
    not type (Mesa's agent reporter gives ``None`` for an agent of another type, and ``[True, None]`` stays
    ``object``), not labels. Stops at the first value that is not a number (a column of text costs one look)."""
    import numbers
    from decimal import Decimal

    import pandas as pd

    seen = False
    for v in col:
        if v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and v != v):  # missing, pandas' too
            continue
        if isinstance(v, bool | np.bool_ | Decimal) or (isinstance(v, numbers.Real) and not isinstance(v, str)):
            seen = True
            continue
        return False
    return seen


def _warn_numbers_skipped(names: list[str]) -> None:

    from aumann.errors import SkippedColumnWarning

    warnings.warn(SkippedColumnWarning(
        f"Panel.from_dataframe left out {len(names)} column(s) of numbers held as objects (dtype object: numbers "
        f"beside None or NaN, or beside bools): {names[:8]}{' …' if len(names) > 8 else ''}; they are listed in "
        "meta['skipped_columns'] with the text columns. To keep one as a feature, convert it (df[col] = "
        "pd.to_numeric(df[col])) and name the features (features=[...]); a missing value in a live row is refused, "
        "so mark the rows of agents that lack it dead (alive=...)"), stacklevel=4)


def _alive_column(col: Any, name: Any) -> np.ndarray:
    """An alive column as bools, by the rule of :class:`Panel` (bool, or integers 0/1; never strings, floats,
    NaN or missing values: ``"False"`` would be true and 0.5 has no answer)."""
    import pandas as pd

    if bool(col.isna().any()):
        raise PanelError(f"alive column {name!r} has {int(col.isna().sum())} missing value(s); alive must be "
                         "True/False for every row")
    kind = col.dtype
    if pd.api.types.is_bool_dtype(kind):
        return col.to_numpy(dtype=bool)
    if pd.api.types.is_integer_dtype(kind):
        vals = col.to_numpy(dtype=np.int64)
        bad = (vals != 0) & (vals != 1)
        if bad.any():
            raise PanelError(f"alive column {name!r} of integers must hold only 0 and 1; got {vals[bad][0]!r}")
        return vals.astype(bool)
    raise PanelError(f"alive column {name!r} must be bool (or integers 0/1); got dtype {kind} — a float or string "
                     "column is ambiguous (NaN, 0.5 and 'False' are not booleans)")


_NUMBER_TEXT = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)\s*")


def _step_axis(col: Any, svals: np.ndarray, name: Any) -> tuple[np.ndarray, np.ndarray]:
    """(the steps of a long table's step column in time order, each row's step position). Labels sort ascending;
    a pandas Categorical in the order of its categories (``["jan", "feb", "mar"]``, which sorted as text put
    February first, silently). Numbers given as text are refused where text order is not their order ('10' sorts
    before '9'): the "previous" step of '9' was '11'."""
    import pandas as pd

    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()
        used = np.unique(codes)
        return _label_array(list(col.cat.categories[used])), np.searchsorted(used, codes)
    # each distinct label checked once (a long table repeats it per agent); a column whose first label is no time
    # holds step names and costs no pass here
    if svals.dtype.kind in "UO" and svals.size and _zone_of(svals[0])[0]:
        distinct = list(dict.fromkeys(svals.tolist()))
        refuse_mixed_time_zones(distinct, f"the step column {name!r}", "row",
                                lambda j: int(np.flatnonzero(svals == distinct[j])[0]))
    steps = _sorted_labels(svals, "step")
    if steps.dtype.kind == "U" and steps.size > 1 and all(_NUMBER_TEXT.fullmatch(v) for v in steps.tolist()):
        numbers = np.array([float(v) for v in steps.tolist()])
        bad = np.flatnonzero(numbers[1:] <= numbers[:-1])
        if bad.size:
            a, b = steps[bad[0]].item(), steps[bad[0] + 1].item()
            raise PanelError(f"the step column {name!r} holds numbers as text: sorted as text, {a!r} comes before "
                             f"{b!r}, out of time order. Convert it to numbers first (df[{name!r}] = "
                             f"pd.to_numeric(df[{name!r}])), or give the order as an ordered pandas Categorical")
    return steps, np.searchsorted(steps, svals)


_FEATURE_DIMS = ("feature", "features")


def _axis_kind(name: Any) -> str | None:
    """Which panel axis a dimension or column name names (``"step"``, ``"agent"``, ``"feature"``), else None."""
    low = str(name).lower()
    for kind, names in (("step", _STEP_COLUMNS), ("agent", _AGENT_COLUMNS), ("feature", _FEATURE_DIMS)):
        if low in names:
            return kind
    return None


def _labelled_input(values: Any, features: Any, agent_ids: Any, steps: Any) -> tuple[Any, Any, Any, Any]:
    """``Panel(values, ...)`` reads ``values`` by position, (T, N, D) or (N, D). A labelled object whose labels say
    otherwise is refused (:class:`~aumann.errors.PanelError` pointing to the reader that reads it by name), and the
    labels of one that fits are kept as the panel's where none were given:

    * an ``xarray.DataArray`` with dims named in another order (``("agent", "step", "feature")`` became T = agents,
      N = steps; ``("step", "agent")`` became N = steps, D = agents), silently; in the panel's order, its coordinates
      are the labels (they were dropped);
    * a pandas long table (step and agent columns, or a (step, agent) index: Mesa's
      ``get_agent_vars_dataframe()``), whose rows of every step became agents of one step and whose step and agent
      columns became features; a wide (N, D) frame keeps its column names as features and its index as agent ids.
    """
    module = type(values).__module__.split(".")[0]
    if module == "xarray" and hasattr(values, "dims") and hasattr(values, "indexes"):
        dims = tuple(values.dims)
        order = ("step", "agent", "feature")[-len(dims):] if 2 <= len(dims) <= 3 else ()
        kinds = [_axis_kind(d) for d in dims]
        if any(k is not None and (not order or k != order[i]) for i, k in enumerate(kinds)):
            raise PanelError(f"Panel() reads values by position as {order or ('step', 'agent', 'feature')}, but this "
                             f"DataArray's dims are {dims}: its axes would be read as other axes. Use "
                             "Panel.from_xarray(da), which reads the dims by name and keeps the coordinates")
        given = {"feature": features, "agent": agent_ids, "step": steps}
        labels = {k: list(values.indexes[d]) for d, k in zip(dims, order, strict=True)
                  if k is not None and d in values.indexes and given[k] is None}
        return (values.values, labels.get("feature", features), labels.get("agent", agent_ids),
                labels.get("step", steps))
    if module == "pandas" and hasattr(values, "columns") and hasattr(values, "index"):
        named = {_axis_kind(c) for c in [*values.columns, *values.index.names] if c is not None}
        rows = {_axis_kind(c) for c in values.index.names if c is not None}
        cols = {_axis_kind(c) for c in values.columns.names if c is not None}
        if values.index.nlevels > 1 or {"step", "agent"} <= named:
            raise PanelError(f"Panel() reads a frame as one step, a row per agent and a column per feature (N, D); "
                             f"this one looks like a long table (columns {list(values.columns)[:8]}, index "
                             f"{list(values.index.names)}): its rows of every step would become agents, its step and "
                             "agent columns features. Use Panel.from_dataframe(df), which reads one row per (step, "
                             "agent)")
        if "step" in rows or cols & {"step", "agent"}:
            raise PanelError(f"Panel() reads a frame as one step, a row per agent and a column per feature (N, D); "
                             f"this one's rows are {list(values.index.names)} and its columns "
                             f"{list(values.columns.names)}, a pivot of steps and agents (its steps would become "
                             "agents, or its agents features). Use Panel.from_dataframe on the long table it was "
                             "pivoted from (one row per step and agent; pivot.stack().rename('x').reset_index() gives "
                             "it back)")
        import pandas as pd

        if features is None and not isinstance(values.columns, pd.RangeIndex):
            features = [str(c) for c in values.columns]
        if agent_ids is None and not values.index.equals(pd.RangeIndex(len(values.index))):
            agent_ids = list(values.index)
        return values, features, agent_ids, steps
    return values, features, agent_ids, steps


def by_agent_id(labels: Any, agent_ids: np.ndarray, what: str) -> Any:
    """Per-agent labels given as a pandas Series indexed by agent id (``df.set_index("agent")["tier"]``), in the
    panel's agent order: they were read by position, so a table sorted otherwise than the panel's agents (which
    :meth:`Panel.from_dataframe` sorts) gave each agent another agent's group, silently. A Series with a default
    (0, 1, ...) RangeIndex, and anything else, is positional as before. Raises
    :class:`~aumann.errors.PanelError` naming agents without an entry (or a repeated index entry)."""
    if type(labels).__module__.split(".")[0] != "pandas":
        return labels
    import pandas as pd

    if not isinstance(labels, pd.Series) or isinstance(labels.index, pd.RangeIndex):
        return labels
    index = labels.index.to_flat_index() if isinstance(labels.index, pd.MultiIndex) else labels.index
    if index.dtype == object and any(isinstance(v, tuple) for v in index):
        # tuple ids are labelled by their text, as the panel labels them and agent_index reads them (an index of the
        # ids themselves matched no agent)
        index = pd.Index([label_text(v) if isinstance(v, tuple) else v for v in index], dtype=object)
    if agent_ids.dtype != bool and (index.dtype == bool or index.dtype == object):
        flags = [k for k, v in enumerate(index) if isinstance(v, bool | np.bool_)]
        if flags:  # pandas matched True and False with the agent ids 1 and 0 (True == 1): another agent's label
            shown = ", ".join(f"{_plain_item(index[k])!r} (position {k})" for k in flags[:5])
            are = "entry of its index is a boolean" if len(flags) == 1 else "entries of its index are booleans"
            raise PanelError(f"{what} is a Series indexed by agent id, but {len(flags)} {are}, not agent ids: {shown} "
                             f"(this panel's ids are {agent_ids.dtype}; True would be read as the id 1 and False as "
                             "0). Index it by the agents' ids, or pass the labels in the panel's agent order as a list "
                             "or array (series.to_numpy())")
    if index.has_duplicates:
        dup = index[index.duplicated()].unique()[:5].tolist()
        raise PanelError(f"{what} is a Series indexed by agent id, but ids repeat in its index: {dup}")
    pos = index.get_indexer(pd.Index(agent_ids.tolist()))
    missing = np.flatnonzero(pos < 0)
    if missing.size:
        shown = [agent_ids[i].item() for i in missing[:5]]
        raise PanelError(f"{what} is a Series indexed by agent id (it is read by id, not by position), but "
                         f"{missing.size} of the panel's {len(agent_ids)} agents have no entry, e.g. {shown}; its "
                         f"index starts {index[:3].tolist()}. Give every agent a label, or pass the labels "
                         "in the panel's agent order as a list or array (series.to_numpy())")
    return labels.to_numpy()[pos]


def by_step_label(values: Any, steps: np.ndarray, what: str) -> Any:
    """Per-step context given as a pandas Series or frame indexed by the panel's step labels, in the panel's step
    order: it was read by position, so a model-level table in another row order (``model_df.sort_values(...)``, a
    Series built from a dict) gave each step another step's state, silently. Positional as before when the index
    is a default RangeIndex or holds none of the step labels (times given as timestamps where the panel keeps
    their text); some but not all of them is a :class:`~aumann.errors.PanelError` naming a missing step."""
    if type(values).__module__.split(".")[0] != "pandas" or not hasattr(values, "index"):
        return values
    import pandas as pd

    if not isinstance(values, pd.Series | pd.DataFrame) or isinstance(values.index, pd.RangeIndex):
        return values
    pos = values.index.get_indexer(pd.Index(steps.tolist())) if values.index.is_unique else None
    if pos is None or not (pos >= 0).any():
        return values
    missing = np.flatnonzero(pos < 0)
    if missing.size:
        raise PanelError(f"{what} is indexed by step labels (it is read by label, not by position), but it has no "
                         f"row for {missing.size} of the panel's {len(steps)} steps, e.g. step "
                         f"{steps[missing[0]].item()!r}; give every step a row, or pass the values in the panel's step "
                         "order as an array (.to_numpy())")
    return values.iloc[pos]


def _to_numpy(x: Any, what: str = "panel values") -> np.ndarray:
    return _as_float(x, what)[0]


def _as_float(x: Any, what: str) -> tuple[np.ndarray, list[tuple[int, int]] | None]:
    """``x`` as float32/float64 values, and for int64/uint64 input whose values float64 changed (past ±2**53): per
    last-axis entry (per feature), the count of changed values and the largest magnitude among them."""
    arr = as_real_array(x, what, error=PanelError)
    rounded = float64_rounded(arr)
    if rounded is None:
        return _floating(arr), (_rounded_in_list(x, arr) if isinstance(x, list | tuple) else None)
    width = arr.shape[-1] if arr.ndim else 1
    cols, flags = arr.reshape(-1, width), rounded.reshape(-1, width)
    lost = [(int(flags[:, d].sum()), largest_magnitude(cols[flags[:, d], d]) if flags[:, d].any() else 0)
            for d in range(cols.shape[1])]
    return _floating(arr), lost


def _rounded_in_list(x: list | tuple, arr: np.ndarray) -> list[tuple[int, int]] | None:
    """Per last-axis entry, (how many, the largest) of the Python integers past ±2**53 in nested lists ``x`` that
    ``arr`` changed: numpy makes one float64 array of ints beside floats (``[[2**53 + 1, 0.5]]``), and the int was
    rounded without a word. One read of ``arr`` (its largest magnitude); the items are looked at only past 2**53."""
    if arr.dtype.kind != "f" or arr.size == 0:
        return None
    with np.errstate(invalid="ignore"):
        far = np.abs(arr) >= FLOAT64_EXACT_INTEGERS  # >=: 2**53 + 1 rounds to 2**53 itself
    if not far.any():
        return None
    try:
        items = np.array(x, dtype=object)
    except (ValueError, TypeError):
        return None
    if items.shape != arr.shape:
        return None
    width = arr.shape[-1] if arr.ndim else 1
    vals, objs, where = arr.reshape(-1, width), items.reshape(-1, width), far.reshape(-1, width)
    lost: list[tuple[int, int]] = []
    for d in range(width):
        n, big = 0, 0
        for i in np.flatnonzero(where[:, d]).tolist():
            v = _exact_integer(objs[i, d])
            if v is not None and math.isfinite(vals[i, d]) and v != int(vals[i, d]):
                n, big = n + 1, max(big, abs(v))
        lost.append((n, big))
    return lost if any(n for n, _ in lost) else None


def _floating(arr: np.ndarray) -> np.ndarray:
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    elif arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    return arr


def _alive_mask(alive: Any, shape: tuple[int, int], *, first_step: int = 0) -> np.ndarray:
    """The alive mask as bool (T, N): bool input, or integers that are all 0 or 1; nothing else. A refusal
    names the first offending (step, agent), steps counted from ``first_step`` (a recorder checks one row
    per capture: ``shape = (1, N)``, ``first_step`` = the capture)."""
    try:
        text = np.asarray(alive).dtype if not isinstance(alive, str | bytes) else None
    except (ValueError, TypeError):  # ragged: as_real_array names it
        text = None
    if text is not None and text.kind in "US":  # "False" is not False: the mask's rule, not just "numbers"
        raise PanelError(f"alive mask must be bool (or integers 0/1); got dtype {text} — a float or string mask is "
                         "ambiguous (NaN, 0.5 and 'False' are not booleans)")
    mask = as_real_array(alive, "alive mask", error=PanelError)
    if mask.ndim == 1 and shape[0] == 1:
        mask = mask[None]
    if mask.shape != shape:
        raise ShapeError(f"alive mask must have shape (T, N) = {shape}; got {mask.shape}")
    if mask.dtype == bool:
        return mask
    bad = (mask != 0) & (mask != 1)  # NaN is neither
    where = ""
    if bad.any():
        t, i = (int(v[0]) for v in np.nonzero(bad))
        where = f"{mask[t, i].item()!r} at (step {t + first_step}, agent {i})"
    if not np.issubdtype(mask.dtype, np.integer):
        raise PanelError(f"alive mask must be bool (or integers 0/1); got dtype {mask.dtype}"
                         + (f" ({where})" if where else "") + " — a float or string mask is ambiguous (NaN, 0.5 "
                         "and 'False' are not booleans)")
    if where:
        raise PanelError(f"alive mask of integers must hold only 0 and 1; got {where}")
    return mask.astype(bool)


def _positions(positions: Any, what: str) -> np.ndarray:
    """Integer positions (a bool mask is not positions; floats such as 2.5 are refused, not truncated)."""
    arr = as_real_array(positions, what, error=ShapeError)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if arr.dtype == bool or not np.all(np.isfinite(arr)) or not np.all(arr == np.floor(arr)):
            raise ShapeError(f"{what} must be integers; got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _declared_shapes(path: Path) -> Any:
    """The consistency rule of a panel file over its declared shapes (checked before anything is read):
    ``values`` (T, N, D) of numbers, ``agent_ids`` (N,), ``steps`` (T,), ``alive`` (T, N), ``group::*``
    (N,), ``context::*`` (T, ...), as many feature names as D."""

    def check(members: Mapping[str, Any], meta: Mapping[str, Any] | None) -> None:
        v = members.get("values")
        if v is None:
            return  # the missing array is named after the read
        if len(v.shape) != 3 or v.dtype.kind not in "biuf":
            raise PanelError(f"panel file {str(path)!r} is damaged: values are {v.dtype} {v.shape}, not (T, N, D) "
                             "numbers")
        T, N, D = v.shape
        want = {"agent_ids": (N,), "steps": (T,), "alive": (T, N)}
        for k, m in members.items():
            shape = want.get(k) or ((N,) if k.startswith("group::") else None)
            bad = (shape is not None and m.shape != shape) or (
                k.startswith("context::") and (not m.shape or m.shape[0] != T))
            if bad:
                raise PanelError(f"panel file {str(path)!r} is damaged: {k} has shape {m.shape} but values are "
                                 f"(T, N, D) = {v.shape}")
        feats = (meta or {}).get("features")
        if isinstance(feats, list) and len(feats) != D:
            raise PanelError(f"panel file {str(path)!r} is damaged: {len(feats)} feature names for D = {D}")

    return check


def _xarray_info(raw: Any) -> dict[str, Any]:
    """The ``attrs["aumann"]`` record of an xarray panel, checked (bounded JSON; lists of names, a meta
    object, context shapes of non-negative integers); absent → an empty record."""
    from aumann import bounded

    if raw is None or raw == "":
        info: Any = {}
    elif isinstance(raw, str | bytes):
        info = bounded.loads_json(raw, what="the xarray attribute 'aumann'", error=PanelError,
                                  max_bytes=16 * 2**20)
    else:
        raise PanelError(f"the xarray attribute 'aumann' must be JSON text; got {type(raw).__name__}")
    if not isinstance(info, dict):
        raise PanelError(f"the xarray attribute 'aumann' must hold a JSON object; got {type(info).__name__}")
    meta = info.get("meta") or {}
    shapes = info.get("context_shapes") or {}
    if not isinstance(meta, dict):
        raise PanelError("the xarray attribute 'aumann' has a 'meta' that is not an object")
    if not isinstance(shapes, dict) or not all(
            isinstance(v, list) and all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n <= 2**40 for n in v)
            for v in shapes.values()):
        raise PanelError("the xarray attribute 'aumann' has malformed 'context_shapes'")
    return {"meta": meta, "context_shapes": {str(k): v for k, v in shapes.items()}}


def _coord(c: Any, dims: tuple[str, ...], name: Any) -> np.ndarray:
    """A coordinate of an xarray panel on exactly ``dims`` (in that order)."""
    if set(c.dims) != set(dims):
        raise ShapeError(f"xarray coordinate {str(name)!r} must be on dims {dims}; it is on {tuple(c.dims)}")
    return c.transpose(*dims).values


def _check_meta(meta: Mapping[str, Any]) -> None:
    """``meta`` is saved as JSON: refuse what JSON cannot hold (objects, NaN/inf) instead of changing it."""
    def walk(v: Any, where: str) -> None:
        if isinstance(v, float | np.floating) and not np.isfinite(v):
            raise PanelError(f"meta{where} is {float(v)!r}; JSON has no NaN/inf, so the panel could not be saved "
                             "losslessly")
        if isinstance(v, Mapping):
            for k, x in v.items():
                walk(x, f"{where}[{k!r}]")
        elif isinstance(v, list | tuple):
            for i, x in enumerate(v):
                walk(x, f"{where}[{i}]")

    walk(meta, "")
    try:
        dumps_json(meta)
    except (TypeError, ValueError) as exc:
        raise PanelError(f"meta must be JSON-serialisable (it is saved with the panel): {exc}") from exc


def _mapping(x: Any, what: str) -> Mapping[str, Any]:
    if x is None:
        return {}
    if not isinstance(x, Mapping):
        raise PanelError(f"{what} must be a mapping name → values; got {type(x).__name__}")
    return x


def _panel_file(path: str | os.PathLike[str]) -> Path:
    """The panel file at ``path`` (``.npz`` added when the name was given without it, as :meth:`Panel.save` does)."""
    return saved_npz(path, what="panel file", error=PanelError)

class Panel:
    """T steps × N agents × D named features, with agent ids, step labels, groups and an alive mask.

    Args:
        values: array-like (numpy, torch or nested lists) of shape (T, N, D) or (N, D), read by position. A
            labelled object is read by its labels where they agree: an ``xarray.DataArray`` whose dims name the
            axes in another order, or a pandas long table (step and agent columns, a (step, agent) index), is a
            :class:`~aumann.errors.PanelError` pointing to :meth:`from_xarray` / :meth:`from_dataframe`; the
            coordinates of a DataArray in (step, agent, feature) order, and the columns and index of a wide (N, D)
            frame, are its labels unless ``features``/``agent_ids``/``steps`` are given. Values are held as
            float64 (float32 stays float32); int64/uint64 values past ±2**53, which float64 cannot all hold, are
            kept as the nearest double with a :class:`~aumann.errors.PrecisionLossWarning` naming the feature.
        features: D feature names (default ``f0 … f{D-1}``).
        agent_ids: N unique agent ids (default ``0 … N-1``), each a number or text, or each a tuple (grid
            coordinates ``(0, 1)``, as a Mesa model's unique_ids may be), kept as its text ``"(0, 1)"`` as the
            recorders keep a tuple id; lists, rows of a 2-D array and tuples mixed with scalars are a
            :class:`~aumann.errors.ShapeError`.
        steps: T step labels (default ``0 … T-1``), in time order: number and time labels must be strictly
            increasing (a :class:`~aumann.errors.PanelError` names the first pair that is not); text labels
            (``"2026-04-07"``, ``"warm-up"``) are not compared: their row order is the time order.
        groups: mapping name → N labels per agent (e.g. tiers), in the panel's agent order; a pandas Series
            indexed by agent id (not a default RangeIndex) is read by id.
        alive: bool mask (T, N) (or integers that are all 0 or 1; strings, floats and NaN are refused);
            rows with ``False`` are excluded from validation and held at the baseline during attribution.
        context: mapping name → array with leading dimension T (per-step world state); a pandas Series or frame
            indexed by the step labels is read by label.
        meta: free-form JSON-serialisable metadata (e.g. ``{"synthetic": True}``).

    Raises:
        ShapeError, EmptyPanelError, NonFiniteError, DuplicateIdError: on malformed input.

    Example:
        >>> import numpy as np
        >>> p = Panel(np.ones((2, 3)), features=["a", "b", "c"])
        >>> p.shape
        (1, 2, 3)
    """

    __slots__ = ("_agent_index", "agent_ids", "alive", "context", "features", "groups", "meta", "steps",
                 "values")

    def __init__(
        self,
        values: Any,
        features: Sequence[str] | None = None,
        agent_ids: Sequence[Hashable] | None = None,
        steps: Sequence[Hashable] | None = None,
        groups: Mapping[str, Sequence[Hashable]] | None = None,
        alive: Any = None,
        context: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        values, features, agent_ids, steps = _labelled_input(values, features, agent_ids, steps)
        arr, lost = _as_float(values, "panel values")
        if arr.ndim == 2:
            arr = arr[None]
        if arr.ndim != 3:
            raise ShapeError(
                f"panel values must have shape (T, N, D) or (N, D) (steps × agents × features); "
                f"got {arr.ndim} dimensions with shape {arr.shape}"
            )
        T, N, D = arr.shape
        if T == 0 or N == 0 or D == 0:
            raise EmptyPanelError(f"empty panel: shape (T, N, D) = {arr.shape}; need at least one of each")
        self.values: np.ndarray = arr

        if features is not None and (isinstance(features, str | bytes) or not isinstance(features, Iterable)):
            raise PanelError(f"features must be a sequence of D = {D} names; got {type(features).__name__} "
                             f"{features!r}")
        if features is not None:
            refuse_unordered(features, "features")
        feats = [f"f{d}" for d in range(D)] if features is None else [str(f) for f in features]
        if len(feats) != D:
            raise ShapeError(f"{len(feats)} feature names given for D = {D} features: {feats}")
        if len(set(feats)) != D:
            raise DuplicateIdError(f"feature names must be unique; got {feats}")
        utf8_labels(feats, "feature names")
        self.features: tuple[str, ...] = tuple(feats)
        rounded = [] if lost is None else [(f"feature {f!r}", n, big) for f, (n, big) in zip(feats, lost) if n]
        lost_features = {} if lost is None else {f: (n, big) for f, (n, big) in zip(feats, lost) if n}
        lost_context: dict[str, tuple[int, int]] = {}

        # default labels are 0..n-1 and unique by construction (skips an O(N log N) check)
        self.agent_ids: np.ndarray = (np.arange(N) if agent_ids is None
                                      else unique_labels(agent_ids, "agent_ids", N, tuples=True))
        if agent_ids is not None and not _DERIVING.get():
            warn_lookalike_ids(self.agent_ids, stacklevel=2)
        self.steps: np.ndarray = np.arange(T) if steps is None else unique_labels(steps, "steps", T)
        if steps is not None:
            refuse_mixed_time_zones(steps if self.steps.dtype.kind in "UO" else ())
            refuse_unsorted_steps(self.steps, steps)

        self.groups: dict[str, np.ndarray] = {}
        for name, labels in _mapping(groups, "groups").items():
            safe_component(str(name), "group name")
            labels = by_agent_id(labels, self.agent_ids, f"group {str(name)!r}")
            try:
                g = np.asarray(labels)
            except (ValueError, TypeError) as exc:
                raise ShapeError(f"group {name!r} must give one label per agent ({N}): {exc}") from exc
            if g.ndim != 1 or g.shape[0] != N:
                raise ShapeError(f"group {name!r} must give one label per agent ({N}); got shape {g.shape}")
            labels, g = text_of_bytes(labels, g, f"group {str(name)!r} labels")
            refuse_missing_group_labels(labels, g, f"group {str(name)!r} labels", self.agent_ids)
            # a NaN label is not equal to itself: its agents would drop out of every group share
            plain_labels(g, f"group {str(name)!r} labels")
            # numpy makes text of every label when some are text: groups 1 and '1' became one group '1'
            refuse_mixed_labels(labels, g, f"group {str(name)!r} labels", error=PanelError, numbers_only=True)
            refuse_nul(labels if isinstance(labels, np.ndarray) else list(labels), g, f"group {str(name)!r} labels")
            self.groups[str(name)] = g.astype(str) if g.dtype == object else g
            utf8_labels(self.groups[str(name)], f"group {str(name)!r} labels")

        self.alive: np.ndarray | None = None if alive is None else _alive_mask(alive, (T, N))

        self.context: dict[str, np.ndarray] = {}
        for name, c in _mapping(context, "context").items():
            safe_component(str(name), "context name")
            carr, clost = _as_float(by_step_label(c, self.steps, f"context {str(name)!r}"), f"context {name!r}")
            if clost is not None:
                rounded.append((f"context {str(name)!r}", sum(n for n, _ in clost), max(b for _, b in clost)))
                lost_context[str(name)] = rounded[-1][1:]
            if carr.ndim == 0 or carr.shape[0] != T:
                raise ShapeError(
                    f"context {name!r} must have leading dimension T = {T}; got shape {carr.shape}"
                )
            if not np.all(np.isfinite(carr)):
                raise NonFiniteError(f"context {name!r} contains NaN or inf")
            self.context[str(name)] = carr
        self.meta: dict[str, Any] = dict(_mapping(meta, "meta"))
        _check_meta(self.meta)
        if (lost_features or lost_context) and "rounded_values" not in self.meta:  # (a recorder's count is kept)
            self.meta["rounded_values"] = _rounded_record(lost_features, lost_context)

        live = arr if self.alive is None else arr[self.alive]
        if not np.all(np.isfinite(live)):
            bad = ~np.isfinite(arr)
            if self.alive is not None:
                bad &= self.alive[..., None]
            t, i, d = (int(v[0]) for v in np.nonzero(bad))
            raise NonFiniteError(
                f"panel has {int(bad.sum())} NaN/inf value(s) in live rows; first at step {self.steps[t].item()!r}, "
                f"agent {self.agent_ids[i].item()!r}, feature {self.features[d]!r}"
            )
        self._agent_index: np.ndarray | None = None
        warn_rounded(rounded, stacklevel=2)  # once, for a panel that is built

    # ------------------------------------------------------------------ shape
    @property
    def shape(self) -> tuple[int, int, int]:
        return self.values.shape  # type: ignore[return-value]

    @property
    def T(self) -> int:
        return self.values.shape[0]

    @property
    def N(self) -> int:
        return self.values.shape[1]

    @property
    def D(self) -> int:
        return self.values.shape[2]

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    def __repr__(self) -> str:
        extra = []
        if self.groups:
            extra.append(f"groups={list(self.groups)}")
        if self.alive is not None:
            extra.append(f"alive={int(self.alive.sum())}/{self.alive.size}")
        if self.context:
            extra.append(f"context={list(self.context)}")
        tail = (", " + ", ".join(extra)) if extra else ""
        return (f"Panel(T={self.T}, N={self.N}, D={self.D}, features={list(self.features)}, "
                f"dtype={self.dtype}{tail})")

    # ------------------------------------------------------------------ lookup
    def feature_index(self, name: str | Iterable[str]) -> int | list[int]:
        """Position(s) of feature name(s); :class:`UnknownFeatureError` names the valid ones."""
        if not isinstance(name, str):
            if not isinstance(name, Iterable):
                raise UnknownFeatureError(f"feature names are strings; got {type(name).__name__} {name!r}; this "
                                          f"panel has {list(self.features)}")
            return [self.feature_index(n) for n in name]  # type: ignore[misc]
        try:
            return self.features.index(name)
        except ValueError:
            raise UnknownFeatureError(
                f"unknown feature {name!r}; this panel has {list(self.features)}"
            ) from None

    def feature(self, name: str) -> np.ndarray:
        """The (T, N) slice of one feature."""
        return self.values[:, :, self.feature_index(name)]

    def agent_index(self, ids: Iterable[Hashable]) -> np.ndarray:
        """Row positions of the given agent ids (in the order given); vectorised (sorted lookup)."""
        if self._agent_index is None:
            self._agent_index = np.argsort(self.agent_ids, kind="stable")
        if isinstance(ids, str | bytes):  # list("ab") is ["a", "b"]: subset("ab") took agents a and b, silently
            raise UnknownAgentError(f"agent ids are given as a list (or array) of ids; got the single text {ids!r}: "
                                    f"pass [{ids!r}] for that one agent")
        if not isinstance(ids, Iterable) or (isinstance(ids, np.ndarray) and ids.ndim == 0):
            # subset(1) was Python's bare "TypeError: 'int' object is not iterable"
            one = _plain_item(ids.item() if isinstance(ids, np.ndarray) else ids)
            raise UnknownAgentError(f"agent ids are given as a list (or array) of ids; got the single id {one!r}: "
                                    f"pass [{one!r}] for that one agent")
        given = ids if isinstance(ids, np.ndarray) else list(ids)
        if not isinstance(given, np.ndarray) and any(isinstance(v, tuple) for v in given):
            # a tuple id is labelled by its text (as the panel and the recorders label it): numpy read
            # [(0, 1)] as the two ids 0 and 1 ("2 unknown agent id(s), e.g. [0, 1]")
            given = [label_text(v) if isinstance(v, tuple) else v for v in given]
        if isinstance(given, np.ndarray) and given.dtype == object:
            given = given.tolist()  # an object array is a list of items of any types: judged per item as a list is
        kinds = None if isinstance(given, np.ndarray) else id_kinds(given)
        if kinds is not None and len(kinds) > 1:
            # ids of different types: numpy coerced [1, "2"] to the text ["1", "2"] (the number 1 matched the text id
            # "1", which [1] alone does not), [True, 2] to [1, 2] and [2**60 + 1, 0.5] to floats (2**60 + 1 matched
            # the id 2**60): each type is looked up as a list of that type alone is
            rows = np.zeros(len(given), dtype=np.int64)
            ok = np.zeros(len(given), dtype=bool)
            for where in kinds.values():
                rows[where], ok[where] = self._match(np.asarray([given[k] for k in where]))
        else:
            wanted = np.asarray(given)
            if wanted.size == 0:
                return np.zeros(0, dtype=np.int64)
            rows, ok = self._match(wanted)
        if not np.all(ok):
            items = given.tolist() if isinstance(given, np.ndarray) else given
            missing = [_plain_item(items[k]) for k in np.flatnonzero(~ok)[:5].tolist()]
            raise UnknownAgentError(f"{int((~ok).sum())} unknown agent id(s), e.g. {missing}"
                                    f"{kind_hint(missing, self.agent_ids)}")
        return rows

    def _match(self, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row of each id, whether it is one of the panel's ids) for ids of one type."""
        sorter = self._agent_index
        assert sorter is not None
        if wanted.dtype == bool and self.agent_ids.dtype != bool:
            # a mask over agents: numpy matched True and False with the ids 1 and 0 (subset([True, False]) was
            # agents 1 and 0, silently)
            raise UnknownAgentError(f"agent ids {wanted[:5].tolist()} are booleans, not agent ids (this panel's ids "
                                    f"are {self.agent_ids.dtype}); to select agents by a boolean mask over them, use "
                                    "take_agents(np.flatnonzero(mask))")
        try:
            pos = np.searchsorted(self.agent_ids, wanted, sorter=sorter)
        except TypeError:
            raise UnknownAgentError(
                f"agent ids of type {wanted.dtype} cannot match this panel's ids ({self.agent_ids.dtype})"
            ) from None
        pos = np.clip(pos, 0, self.N - 1)
        rows = sorter[pos]
        ok = np.broadcast_to(np.asarray(self.agent_ids[rows] == wanted, dtype=bool), wanted.shape)
        return rows.astype(np.int64), ok

    # ------------------------------------------------------------------ derived panels
    def _derive(self, **changes: Any) -> Panel:
        kw: dict[str, Any] = {
            "values": self.values, "features": self.features, "agent_ids": self.agent_ids,
            "steps": self.steps, "groups": self.groups, "alive": self.alive, "context": self.context,
            "meta": self.meta,
        }
        kw.update(changes)
        token = _DERIVING.set(True)
        try:
            return Panel(**kw)
        finally:
            _DERIVING.reset(token)

    def take_agents(self, positions: Sequence[int] | np.ndarray) -> Panel:
        """The panel restricted to the agents at the given row positions (order kept)."""
        pos = _positions(positions, "agent positions")
        if pos.ndim != 1:
            raise ShapeError(f"agent positions must be 1-D; got shape {pos.shape}")
        if pos.size == 0:
            raise EmptyPanelError("subset with no agents")
        if pos.min() < 0 or pos.max() >= self.N:
            raise UnknownAgentError(f"agent positions out of range [0, {self.N})")
        return self._derive(
            values=self.values[:, pos],
            agent_ids=self.agent_ids[pos],
            groups={k: v[pos] for k, v in self.groups.items()},
            alive=None if self.alive is None else self.alive[:, pos],
        )

    def subset(self, agent_ids: Iterable[Hashable]) -> Panel:
        """The restricted panel z_S: only the agents with these ids, groups carried over.

        The restricted panel is a panel of its own scale n = |S|: an indicator evaluated on it
        averages over n agents, which is what the cross-scale study needs.
        """
        return self.take_agents(self.agent_index(agent_ids))

    def select_features(self, names: Sequence[str]) -> Panel:
        """The panel with only these features, in this order."""
        idx = self.feature_index(list(names))
        return self._derive(values=self.values[:, :, idx], features=[self.features[i] for i in idx])

    def select_steps(self, positions: Sequence[int] | slice) -> Panel:
        """The panel restricted to some steps (by position)."""
        pos = np.arange(self.T)[positions] if isinstance(positions, slice) else _positions(positions, "step positions")
        if pos.ndim != 1:
            raise ShapeError(f"step positions must be 1-D; got shape {pos.shape}")
        if pos.size == 0:
            raise EmptyPanelError("selection with no steps")
        if pos.min() < -self.T or pos.max() >= self.T:
            raise ShapeError(f"step positions out of range [0, {self.T}); got {pos.min()}..{pos.max()}")
        if self.steps.dtype.kind in "iufmM" and np.any(np.diff(pos % self.T) <= 0):
            raise PanelError(f"step positions must be increasing (a panel's number or time steps are in time "
                             f"order); got {pos.tolist()[:10]}")
        return self._derive(
            values=self.values[pos], steps=self.steps[pos],
            alive=None if self.alive is None else self.alive[pos],
            context={k: v[pos] for k, v in self.context.items()},
        )

    def astype(self, dtype: Any) -> Panel:
        """A copy with values of another floating dtype (float32 or float64)."""
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise PanelError(f"astype needs a numpy floating dtype (float32, float64); got {dtype!r}") from exc
        if dt not in (np.float32, np.float64):
            raise PanelError(f"astype needs float32 or float64 (panels hold floating values); got {dt}")
        return self._derive(values=self.values.astype(dt))

    def with_groups(self, **groups: Sequence[Hashable]) -> Panel:
        """A copy with extra (or replaced) agent groups."""
        return self._derive(groups={**self.groups, **groups})

    def to_torch(self, device: Any = None, *, share_read_only: bool = False):
        """``values`` as a torch tensor: on the CPU it shares the panel's memory when the values are writable
        (writing into the tensor writes into the panel).

        A read-only panel (``np.load(mmap_mode="r")``, frozen values) is copied on the CPU: torch has no read-only
        tensors, so a tensor sharing that memory takes writes anyway, and a write segfaulted the process (a
        read-only mapping) or changed values the panel holds as read-only. ``share_read_only=True`` shares it
        without a copy (and without torch's "not writable" warning, :func:`aumann.checks.as_torch`) for a caller
        that only reads the tensor, e.g. a panel larger than memory; writing into that tensor is then undefined.
        On another device the transfer is a copy either way.
        """
        import torch

        on_host = device is None or torch.device(device).type == "cpu"
        return as_torch(self.values, device=device, writable=on_host and not share_read_only)

    # ------------------------------------------------------------------ interop
    @classmethod
    def from_dataframe(cls, df: Any, features: Sequence[str] | None = None, alive: Any = None, *,
                       step: str | None = None, agent: str | None = None) -> Panel:
        """A panel from a long table: one row per (step, agent), one column per feature.

        Reads Mesa's ``DataCollector.get_agent_vars_dataframe()`` as it comes (a (Step, AgentID)
        index), one run of Mesa's ``batch_run`` as ``pd.DataFrame(batch_run(...))`` gives it (its RunId,
        iteration, parameter and model-reporter columns are not features: they are listed in
        ``meta["skipped_columns"]``; several runs are refused) and plain frames with step and agent columns.
        Step and agent columns are found by name (``Step``/``step``/``t``/``time``/``tick``;
        ``AgentID``/``agent_id``/``agent``/``unique_id``/``id``; any case; as columns or index levels) unless
        ``step=``/``agent=`` name them; two such columns (``tick`` and a feature ``time``) are refused unless one
        of them is an index level (which is then the step or agent). Steps and agents are sorted ascending (a
        Categorical step column in the order of its categories; numbers given as text whose text order is not their
        order, '10' before '9', are refused). An agent with no row at a step is dead there (``alive`` False, values
        0.0), as in a recorded panel.

        Args:
            df: a pandas DataFrame.
            features: the feature columns, in order (default: every numeric or bool column other than
                the step, agent and alive columns; the others are listed in ``meta["skipped_columns"]``).
            alive: ``None`` (present rows are alive), a column name of bools (a present row is alive
                where it is true), or a (T, N) bool array.
            step, agent: the names of the step and agent columns (or index levels).

        Raises:
            PanelError: not a DataFrame, no step/agent column, a non-numeric feature, unsortable labels.
            UnknownFeatureError: a named column that is not in the frame.
            DuplicateIdError: two rows for one (step, agent).
            NonFiniteError: NaN/inf in a living row (drop such rows, choose ``features=``, or mark them
                dead with ``alive=``).
        """
        if not (hasattr(df, "columns") and hasattr(df, "reset_index") and hasattr(df, "index")):
            raise PanelError(f"from_dataframe takes a pandas DataFrame; got {type(df).__name__}")
        try:
            return cls._from_frame(df, features, alive, step=step, agent=agent)
        except AumannError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, OverflowError) as exc:  # pandas on a malformed frame
            raise PanelError(f"the frame cannot be read as a long table (one row per step and agent): "
                             f"{type(exc).__name__}: {str(exc)[:200]}") from exc

    @classmethod
    def _from_frame(cls, df: Any, features: Sequence[str] | None, alive: Any, *, step: str | None,
                    agent: str | None) -> Panel:
        import pandas as pd

        flat, levels = _flatten_frame(df)
        cols = list(flat.columns)
        scol = _find_column(cols, step, _STEP_COLUMNS, "step", levels)
        acol = _find_column(cols, agent, _AGENT_COLUMNS, "agent", levels)
        alive_col = alive if isinstance(alive, str) else None
        if alive_col is not None and alive_col not in cols:
            raise UnknownFeatureError(f"alive column {alive_col!r} not in the frame; columns: {cols}")
        # index levels other than step and agent (Mesa's batch_run RunId, iteration) are labels, not features
        extra_levels = [c for c in levels if c not in (scol, acol)]
        for c in extra_levels:
            n = flat[c].nunique(dropna=False)
            if n > 1:
                raise PanelError(f"the frame holds {n} values of index level {c!r} (several runs?); a panel is one "
                                 f"run: select one first, e.g. df.xs(value, level={c!r})")
        skipped: list[str] = [str(c) for c in extra_levels]
        run_level = _batch_run_columns(cols, levels, scol, acol)
        for c in run_level[:2]:  # RunId, iteration: which run a row belongs to
            n = flat[c].nunique(dropna=False)
            if n > 1:
                raise PanelError(f"the frame holds {n} values of column {c!r} (Mesa's batch_run: several runs); a "
                                 f"panel is one run: select one first, e.g. df[df[{c!r}] == value]")
        if features is None:
            feats, numbers_skipped = [], []
            skipped.extend(str(c) for c in run_level)
            for c in cols:
                if c in (scol, acol, alive_col) or c in extra_levels or c in run_level:
                    continue
                kind = flat[c].dtype
                if (pd.api.types.is_bool_dtype(kind) or pd.api.types.is_numeric_dtype(kind)) \
                        and not pd.api.types.is_complex_dtype(kind):
                    feats.append(c)
                else:
                    skipped.append(str(c))
                    if pd.api.types.is_object_dtype(kind) and _numbers_as_objects(flat[c]):
                        numbers_skipped.append(str(c))
            if not feats:
                raise EmptyPanelError(f"no numeric feature columns in the frame (non-numeric: {skipped})")
            if numbers_skipped:
                _warn_numbers_skipped(numbers_skipped)
        else:
            if isinstance(features, str | bytes) or not isinstance(features, Iterable):
                raise PanelError(f"features must be a sequence of column names; got {type(features).__name__} "
                                 f"{features!r}")
            feats = list(features)
            for c in feats:
                if not _hashable(c) or c not in cols:
                    raise UnknownFeatureError(f"feature column {c!r} not in the frame; columns: {cols}")
                if c in (scol, acol):
                    raise PanelError(f"column {c!r} is the {'step' if c == scol else 'agent'} column; it cannot also "
                                     "be a feature")
                kind = flat[c].dtype
                if pd.api.types.is_complex_dtype(kind):
                    raise PanelError(f"feature column {c!r} is complex (dtype {kind}); features must be real numbers")
                if not (pd.api.types.is_bool_dtype(kind) or pd.api.types.is_numeric_dtype(kind)):
                    raise PanelError(f"feature column {c!r} is not numeric (dtype {kind}); pick numeric columns")
            if len(set(map(str, feats))) != len(feats):
                raise DuplicateIdError(f"feature columns repeat: {feats}")
        svals, avals = _labels(flat[scol], "step", scol), _labels(flat[acol], "agent", acol)
        (steps, t_idx), ids = _step_axis(flat[scol], svals, scol), _sorted_labels(avals, "agent")
        i_idx = np.searchsorted(ids, avals)
        key = t_idx.astype(np.int64) * len(ids) + i_idx
        uniq, counts = np.unique(key, return_counts=True)
        if np.any(counts > 1):
            k = int(uniq[counts > 1][0])
            raise DuplicateIdError(f"two or more rows for step {steps[k // len(ids)].item()!r}, agent "
                                   f"{ids[k % len(ids)].item()!r}; a panel has one row per (step, agent)")
        T, N = len(steps), len(ids)
        need, have = T * N * (8 * len(feats) + 2), memory_bytes()  # the values (float64) and two (T, N) masks
        if need > have:  # numpy's bare MemoryError, or the memory taken: one row per step and agent is a dense grid
            raise MemoryBudgetError(
                f"the frame's {len(flat):,} rows name {T:,} steps and {N:,} agents: a panel of them, × "
                f"{len(feats)} feature(s), is {need / 2**30:,.1f} GiB, more than this machine's {have / 2**30:,.1f} "
                "GiB of memory (is the step column a timestamp to bin first, or the agent column unique per row?)")
        values = np.zeros((T, N, len(feats)))
        present = np.zeros((T, N), dtype=bool)
        present[t_idx, i_idx] = True
        changed_in: list[tuple[Any, int, int]] = []  # per column: the integers float64 changed, over every row
        for d, c in enumerate(feats):
            try:
                values[t_idx, i_idx, d] = flat[c].to_numpy(dtype=np.float64, na_value=np.nan)
            except (TypeError, ValueError, OverflowError) as exc:
                raise PanelError(f"feature column {c!r} cannot be read as numbers: {exc}") from exc
            ints = _integer_column(flat[c])
            changed = None if ints is None else float64_rounded(ints)
            if changed is not None:
                changed_in.append((c, int(changed.sum()), largest_magnitude(ints[changed])))
        if alive_col is not None:
            mask = present.copy()
            mask[t_idx, i_idx] = _alive_column(flat[alive_col], alive_col)
        elif alive is not None:
            mask = _alive_mask(alive, (T, N)) & present
        else:
            mask = present
        rounded = _kept_rounded(flat, changed_in, mask[t_idx, i_idx])
        values[~mask] = 0.0
        meta: dict[str, Any] = {"source": "dataframe"}
        if skipped:
            meta["skipped_columns"] = skipped
        if rounded:  # the values reach the panel as float64 already: counted here, as a recorder counts them
            meta["rounded_values"] = _rounded_record({str(c): (n, big) for c, n, big in rounded}, {})
        try:
            # integer labels past int64 become their text now, after the rows were placed by their numeric order
            ids, steps = (label_column(x.tolist()) if x.dtype == object and _all_integers(x.tolist()) else x
                          for x in (ids, steps))
            panel = cls(values, features=[str(c) for c in feats], agent_ids=ids, steps=steps,
                        alive=None if mask.all() else mask, meta=meta)
        except NonFiniteError as exc:
            raise NonFiniteError(f"{exc}; drop such rows, choose features=, or mark them dead with alive=") from None
        # (stacklevel: the caller of from_dataframe)
        warn_rounded([(f"column {str(c)!r}", n, big) for c, n, big in rounded], stacklevel=3)
        return panel

    def to_xarray(self):
        """The panel as an ``xarray.DataArray`` named ``values`` with dims (step, agent, feature).

        Coordinates carry the labels, the ``alive`` mask (step, agent), groups (``group_<name>`` on
        agent) and context (``context_<name>`` on step); ``attrs["aumann"]`` (JSON) holds the metadata,
        so :meth:`from_xarray` gives the panel back exactly. Needs the ``xarray`` extra.
        """
        xr = xarray_module()
        da = xr.DataArray(self.values, dims=("step", "agent", "feature"), name="values",
                          coords={"step": self.steps, "agent": self.agent_ids, "feature": list(self.features)})
        extra: dict[str, Any] = {}
        if self.alive is not None:
            extra["alive"] = (("step", "agent"), self.alive)
        for g, labels in self.groups.items():
            extra[f"group_{g}"] = ("agent", labels)
        wide: dict[str, list[int]] = {}
        for k, v in self.context.items():
            if v.ndim == 1:
                extra[f"context_{k}"] = ("step", v)
            else:  # a DataArray's coordinates live on its own dims: (T, K, ...) context travels flat in attrs
                wide[k] = list(v.shape)
        da = da.assign_coords(extra) if extra else da
        for k in wide:
            da.attrs[f"aumann_context_{k}"] = np.ascontiguousarray(self.context[k]).reshape(-1)
        da.attrs["aumann"] = json.dumps({"format": _FORMAT, "groups": list(self.groups),
                                         "context": list(self.context), "context_shapes": wide, "meta": self.meta})
        return da

    @classmethod
    def from_xarray(cls, obj: Any, features: Sequence[str] | None = None) -> Panel:
        """A panel from an ``xarray.DataArray`` with dims (step, agent[, feature]) or a ``Dataset``.

        A DataArray's dims may come in any order; without a ``feature`` dim it is one feature (named
        after the array). A Dataset uses its ``values`` variable when it has one (what
        :meth:`to_xarray` writes), else each (step, agent) variable of numbers or bools is a feature (``features=``
        picks and orders them); the others (text, times, variables on other dims) are listed in
        ``meta["skipped_variables"]``. Coordinates ``alive``, ``group_*`` and ``context_*`` and
        ``attrs["aumann"]`` are read back. Number and time steps are sorted ascending, with their rows, alive
        mask and context (as :meth:`from_dataframe` sorts them); text steps keep their order.

        Raises:
            ShapeError: missing step/agent dims, or extra dims.
            UnknownFeatureError: a requested feature that is not there.
        """
        xr = xarray_module()
        skipped: list[str] = []
        lost: list[tuple[str, int, int]] = []  # integer variables past 2**53 that concat made float64
        lost_counts: dict[str, tuple[int, int]] = {}  # the same by variable, for meta["rounded_values"]
        if isinstance(obj, xr.Dataset):
            if "values" in obj.data_vars:
                da = obj["values"]
            else:
                names = list(features) if features is not None else [
                    k for k, v in obj.data_vars.items() if set(v.dims) == {"step", "agent"} and v.dtype.kind in "biuf"]
                # the variables that are no feature (text, times, another dim) are named in meta, never dropped
                # silently (as from_dataframe names its skipped columns)
                skipped = [str(k) for k in obj.data_vars if k not in names] if features is None else []
                missing = [k for k in names if k not in obj.data_vars]
                if missing:
                    raise UnknownFeatureError(f"features {missing} not in the dataset; it has {list(obj.data_vars)}")
                if not names:
                    raise ShapeError(f"no (step, agent) variables of numbers in the dataset; it has "
                                     f"{dict(obj.data_vars)}")
                text = [f"{k!r} ({obj[k].dtype})" for k in names if obj[k].dtype.kind not in "biuf"]
                if text:
                    raise PanelError(f"feature variable(s) {', '.join(text)} of the dataset do not hold numbers; "
                                     "features must be numbers or bools")
                da = xr.concat([obj[k] for k in names], dim="feature").assign_coords(feature=[str(k) for k in names])
                if da.dtype.kind not in "iu":  # int64 beside float variables: concat made them float64 (the panel
                    # judges integers it is given; these it never sees), 2**53 + 1 became 2**53 without a word
                    for k in names:
                        raw = np.asarray(obj[k].values)
                        changed = float64_rounded(raw)
                        if changed is not None:
                            lost.append((f"feature {str(k)!r}", int(changed.sum()), largest_magnitude(raw[changed])))
                            lost_counts[str(k)] = lost[-1][1:]
                features = None
        elif isinstance(obj, xr.DataArray):
            da = obj
        else:
            raise PanelError(f"from_xarray takes an xarray DataArray or Dataset; got {type(obj).__name__}")
        dims = set(da.dims)
        if not {"step", "agent"} <= dims or not dims <= {"step", "agent", "feature"}:
            raise ShapeError(f"xarray dims must be (step, agent[, feature]); got {tuple(da.dims)}")
        if "feature" not in dims:
            da = da.expand_dims(feature=[str(da.name) if da.name is not None else "value"])
        da = da.transpose("step", "agent", "feature")
        if features is not None:
            have = [str(f) for f in da["feature"].values.tolist()]
            missing = [f for f in features if f not in have]
            if missing:
                raise UnknownFeatureError(f"features {missing} not in the array; it has {have}")
            da = da.sel(feature=list(features))
        info = _xarray_info(da.attrs.get("aumann"))
        labels = np.asarray(da["step"].values)
        if labels.dtype.kind in "iufmM" and labels.size > 1 and np.any(labels[1:] <= labels[:-1]):
            # number and time steps sorted with their rows, alive mask and context coordinates, as from_dataframe
            # sorts them (a label is a step's time); NaN/NaT labels land last and repeats side by side, for the
            # Panel to name. The (T, K) context in attrs is in the order to_xarray wrote: sorted already.
            da = da.isel(step=np.argsort(labels, kind="stable"))
        coords = da.coords
        groups = {str(k)[6:]: _coord(v, ("agent",), k) for k, v in coords.items() if str(k).startswith("group_")}
        context = {str(k)[8:]: _coord(v, ("step",), k) for k, v in coords.items() if str(k).startswith("context_")}
        T = da.sizes["step"]
        for name, shape in info["context_shapes"].items():
            flat_ctx = da.attrs.get(f"aumann_context_{name}")
            arr = None if flat_ctx is None else np.asarray(flat_ctx)
            if arr is None or arr.ndim != 1 or not shape or shape[0] != T or arr.size != math.prod(shape):
                raise PanelError(f"xarray attrs declare context {name!r} of shape {shape} but hold "
                                 f"{'nothing' if arr is None else f'{arr.size} values'} for it")
            context[name] = arr.reshape(shape)
        alive = _coord(coords["alive"], ("step", "agent"), "alive") if "alive" in coords else None
        meta = {**info["meta"], "skipped_variables": skipped} if skipped else info["meta"]
        panel = cls(da.values, features=[str(f) for f in da["feature"].values.tolist()],
                    agent_ids=da["agent"].values, steps=da["step"].values, groups=groups, alive=alive,
                    context=context, meta=meta)
        if lost_counts and "rounded_values" not in meta:  # kept as the Panel keeps its own (a saved count stays)
            own = panel.meta.get("rounded_values") or {}  # (the Panel's count of context integers, if any)
            panel.meta["rounded_values"] = {**own, **_rounded_record(lost_counts, {})}
        warn_rounded(lost, stacklevel=2)  # (the caller of from_xarray)
        return panel

    # ------------------------------------------------------------------ equality / io
    def equals(self, other: Panel) -> bool:
        """True when both panels hold the same values, labels, groups, mask, context and dtype."""
        if not isinstance(other, Panel):
            return False
        same = (
            self.values.dtype == other.values.dtype
            and np.array_equal(self.values, other.values)
            and self.features == other.features
            and np.array_equal(self.agent_ids, other.agent_ids)
            and np.array_equal(self.steps, other.steps)
            and self.groups.keys() == other.groups.keys()
            and all(np.array_equal(self.groups[k], other.groups[k]) for k in self.groups)
            and self.context.keys() == other.context.keys()
            and all(np.array_equal(self.context[k], other.context[k]) for k in self.context)
            and self.meta == other.meta
        )
        if not same:
            return False
        if (self.alive is None) != (other.alive is None):
            return False
        return self.alive is None or np.array_equal(self.alive, other.alive)

    def save(self, path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None) -> Path:
        """Save losslessly to one ``.npz`` file (arrays + JSON metadata); returns the path (``within``: the run
        directory it must stay in, :func:`aumann.io.confine`)."""
        path = as_path(path, "panel file", error=OutputError)
        if path.is_dir():
            raise OutputError(f"cannot save a panel to {str(path)!r}: it is an existing directory (give a file "
                              "name such as panel.npz)")
        if path.suffix != ".npz":
            path = path.with_suffix(path.suffix + ".npz") if path.suffix else path.with_suffix(".npz")
        arrays: dict[str, np.ndarray] = {
            "values": self.values, "agent_ids": self.agent_ids, "steps": self.steps,
        }
        if self.alive is not None:
            arrays["alive"] = self.alive
        for k, v in self.groups.items():
            arrays[f"group::{k}"] = v
        for k, v in self.context.items():
            arrays[f"context::{k}"] = v
        meta = {"format": _FORMAT, "features": list(self.features), "meta": self.meta}
        write_npz(path, arrays, meta=meta, within=within)
        return path

    @classmethod
    def load_step(cls, path: str | os.PathLike[str], t: int, *, within: str | os.PathLike[str] | None = None
                  ) -> dict[str, np.ndarray]:
        """The features of step ``t`` (position on the step axis) of a panel file written by :meth:`save`,
        {feature name: (N,) values}, read without loading the panel (the values are streamed to that step):
        what a report needs from a 10⁶-agent run's panel. Checked like :meth:`load`."""
        path = _panel_file(path)
        t = as_int(t, "step position t", minimum=0, error=PanelError)  # int(1.5) read step 1 without a word
        data, meta = read_npz(path, error=PanelError, what="panel file", check=_declared_shapes(path), within=within,
                              keys=("values",), rows={"values": t})
        if meta is None or meta.get("format") != _FORMAT:
            found = None if meta is None else meta.get("format")
            raise PanelError(f"{str(path)!r} is not an aumann panel file (format {found!r})")
        feats, values = meta.get("features"), data.get("values")
        if values is None or not isinstance(feats, list) or values.ndim != 2 or len(feats) != values.shape[1]:
            raise PanelError(f"panel file {str(path)!r} is incomplete: no values, or feature names that do not match "
                             "them")
        return {str(f): values[:, j] for j, f in enumerate(feats)}

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, within: str | os.PathLike[str] | None = None) -> Panel:
        """Load a panel written by :meth:`save` (``within``: the run directory the file must stay in).

        The archive's declared shapes are checked against each other before anything is read (a header
        promising more than the file holds, or arrays that do not fit together, is a damaged file).
        """
        path = _panel_file(path)
        data, meta = read_npz(path, error=PanelError, what="panel file", check=_declared_shapes(path), within=within)
        if meta is None:
            raise PanelError(f"{str(path)!r} is not an aumann panel file (no metadata): an .npz of your own arrays "
                             "becomes one with Panel(values, features=[...]).save(path), a long table with "
                             "Panel.from_dataframe(df).save(path)")
        if meta.get("format") != _FORMAT:
            if str(meta.get("format")).startswith("aumann.attribution/"):
                raise PanelError(f"{str(path)!r} is an attribution file, not a panel file: read it with "
                                 "Attribution.load (aumann.attribution.Attribution)")
            raise PanelError(f"{str(path)!r}: unsupported panel format {meta.get('format')!r}")
        missing = [k for k in ("values", "agent_ids", "steps") if k not in data]
        if missing or not isinstance(meta.get("features"), list):
            what = f"arrays {missing}" if missing else "its feature names"
            raise PanelError(f"panel file {str(path)!r} is incomplete: it lacks {what}")
        if not isinstance(meta.get("meta") or {}, dict):
            raise PanelError(f"panel file {str(path)!r} has malformed metadata ('meta' is not an object)")
        groups = {k.split("::", 1)[1]: v for k, v in data.items() if k.startswith("group::")}
        context = {k.split("::", 1)[1]: v for k, v in data.items() if k.startswith("context::")}
        try:
            return cls(
                data["values"], features=meta["features"], agent_ids=data["agent_ids"], steps=data["steps"],
                groups=groups, alive=data.get("alive"), context=context, meta=meta.get("meta") or {},
            )
        except PanelError as exc:
            raise type(exc)(f"panel file {str(path)!r}: {exc}") from exc
        except AumannError as exc:
            raise PanelError(f"panel file {str(path)!r}: {exc}") from exc


__all__ = ["Panel"]
