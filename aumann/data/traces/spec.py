"""The trace spec: how an event log becomes a panel (a pydantic model, loadable from TOML).

A spec names, for every event (a row of OASIS's ``trace`` table, one OpenTelemetry span, one entry of a
Concordia structured log, one row of a long table):

* ``[agent] field`` — the field holding the agent id (one panel agent per distinct value);
* ``[step] field`` — the field holding the step: an integer step, or with ``bin = "1h"`` (or a number
  in the field's units) a timestamp binned into steps of that width (epoch-aligned unless ``origin``);
* ``[action] field`` — the field holding the action type (optional; needed by per-action features),
  with ``include`` / ``exclude`` lists and, for free-text actions, ``match`` (label → regex);
* ``[[features]]`` — what to build per agent and step (``count``, ``count_each``, ``sum``, ``mean``,
  ``last``, ``exposure``; see :class:`FeatureSpec`);
* ``[alive]`` — when an agent counts as present (see :class:`AliveSpec`; the exact rule is in
  ``docs/traces.md``);
* ``[where]`` — keep only records whose field equals one of the listed values (others are
  *filtered*, counted in the report, never an error);
* ``[csv]`` — a CSV table's layout where DuckDB's sniffer cannot tell it (see :class:`CsvSpec`): the line of its
  header (``header_line``), its decimal separator (``decimal_separator``); the event table's only: a CSV edge file
  has its own, ``[features.edges.csv]``.

Fields are paths of keys separated by ``/`` into the record (``resource/agent.id``,
``attributes/agent.tick``, ``info/post_id``, ``deduplicated_data/value/__act__/Value``); a key may
hold dots but not ``/``. ``len:PATH`` is the length of the string at PATH (Concordia's deduplicated
strings are measured without being kept). ``duration_ns`` of a span is ``end − start``.

``on_bad = "error"`` (the default) refuses a record with a missing or unusable agent/step/numeric
field with a :class:`~aumann.errors.TraceRecordError` naming its line or row; ``on_bad = "skip"``
skips it and counts it, per reason, with the first locations, in the report.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from aumann import configs
from aumann.errors import TraceSpecError

FORMATS = ("oasis", "otel", "concordia", "table")
_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0,
          "w": 604800.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-z]+)\s*$")


def parse_duration(value: str | float | int, what: str = "bin") -> float:
    """Seconds in a duration such as ``"1h"``, ``"30m"``, ``"15s"``, ``"1d"``, ``"250ms"``.

    Raises:
        TraceSpecError: not a positive duration with a known unit.
    """
    if isinstance(value, bool) or not isinstance(value, str):
        raise TraceSpecError(f"{what} must be a duration string such as '1h'; got {value!r}")
    m = _DURATION.match(value)
    if m is None or m.group(2) not in _UNITS:
        raise TraceSpecError(f"{what} {value!r} is not a duration: a number and one of the units "
                             f"{sorted(_UNITS)} (e.g. '1h', '30m', '1d')")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not (seconds > 0 and math.isfinite(seconds)):
        raise TraceSpecError(f"{what} {value!r} must be a positive duration")
    return seconds


def path_keys(path: str) -> tuple[str, ...]:
    """A field path's keys: separated by ``/``, where ``\\/`` is a ``/`` inside a key (a CSV column named ``count
    sheep / count wolves``, as NetLogo's BehaviorSpace names a reporter's column, is ``count sheep \\/ count
    wolves``; in a TOML basic string, ``"count sheep \\\\/ count wolves"``). Any other backslash is itself."""
    if "\\/" not in path:
        return tuple(path.split("/"))
    return tuple(k.replace("\0", "/") for k in path.replace("\\/", "\0").split("/"))


def _check_path(v: str | None, what: str, measured: bool = False) -> str | None:
    """``v`` as a field path (``measured``: a numeric feature's field, which may be ``len:PATH``)."""
    if v is None:
        return v
    if not isinstance(v, str) or not v.strip():
        raise ValueError(f"{what} must be a non-empty field path")
    if v.startswith("len:") and not measured:  # read as a key named 'len:...': no record held it
        raise ValueError(f"{what} {v!r}: len: (a text's length) is a number, which only a numeric feature's field "
                         "(sum, mean, last) reads: give the field's path without len:")
    body = v[4:] if v.startswith("len:") else v
    if not body or any(not part for part in path_keys(body)):
        raise ValueError(f"{what} {v!r} has an empty key (paths are keys separated by '/')")
    return v


class _Model(configs.ConfigModel):
    config_error = TraceSpecError


class AgentSpec(_Model):
    """``[agent]``: the field holding the agent id; ``exclude`` lists ids that are not agents (e.g. a game master)."""

    field: str
    exclude: list[str | int] = Field(default_factory=list)

    @field_validator("field")
    @classmethod
    def _path(cls, v: Any) -> Any:
        return _check_path(v, "agent.field")


class StepSpec(_Model):
    """``[step]``: an integer step field, or a timestamp binned into steps of width ``bin``.

    ``bin``: ``None`` (the field holds integer steps), a duration (``"1h"``; timestamps may be ISO-8601
    text or numbers in ``unit``), or a number (bins of that width in the field's own numeric units).
    ``origin``: where bins start (an ISO time, or a number in the field's units; default: the epoch / 0).
    ``start`` / ``stop``: the first / last step of the panel (default: the smallest / largest seen; a
    step outside is filtered). ``inherit = "trace"`` (OpenTelemetry): a span without the step field
    takes the step of another span of its trace that has it (AgentSociety 2 stamps ``agent.tick`` on the
    step span only; its tool and LLM spans share its ``trace_id``).
    """

    field: str
    bin: str | float | None = None
    unit: Literal["s", "ms", "us", "ns"] = "s"
    origin: str | float | None = None
    start: int | None = None
    stop: int | None = None
    inherit: Literal["none", "trace"] = "none"

    @field_validator("field")
    @classmethod
    def _path(cls, v: Any) -> Any:
        return _check_path(v, "step.field")

    @field_validator("bin")
    @classmethod
    def _bin(cls, v: Any) -> Any:
        if isinstance(v, str):
            parse_duration(v, "step.bin")
        elif isinstance(v, int | float) and not (v > 0 and math.isfinite(v)):
            raise ValueError("a numeric bin must be a positive number")
        return v

    @model_validator(mode="after")
    def _range(self) -> StepSpec:
        if self.start is not None and self.stop is not None and self.stop < self.start:
            raise ValueError(f"step.stop ({self.stop}) is before step.start ({self.start})")
        return self

    @property
    def binned(self) -> bool:
        return self.bin is not None


class ActionSpec(_Model):
    """``[action]``: the field holding the action type.

    ``include``: only these actions feed the features (default: all); ``exclude``: these never do.
    ``match``: label → regular expression, for free-text actions (Concordia): an action takes the first
    label whose regex it matches (searched), else ``other``. Excluded and not-included events still mark
    the agent as present (see :class:`AliveSpec`); they are counted as ``filtered`` in the report.
    """

    field: str
    include: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)
    match: dict[str, str] = Field(default_factory=dict)

    @field_validator("field")
    @classmethod
    def _path(cls, v: Any) -> Any:
        return _check_path(v, "action.field")

    @field_validator("match")
    @classmethod
    def _regex(cls, v: dict[str, str]) -> dict[str, str]:
        for label, pat in v.items():
            try:
                re.compile(pat)
            except re.error as exc:
                raise ValueError(f"action.match[{label!r}] is not a regular expression: {exc}") from exc
        return v


class CsvSpec(_Model):
    """``[csv]``: how a CSV table is laid out where DuckDB's sniffer cannot tell.

    ``header_line``: the line of each CSV file (1-based) that holds the header; the lines before it are not read at
    all (a NetLogo BehaviorSpace "table" output has six lines before its header: ``header_line = 7``), and a bad row
    below it is still refused (or, with ``on_bad = "skip"``, skipped and counted). Default: the sniffer finds the
    header, and lines before it are bad records.

    ``decimal_separator``: ``","`` reads numbers written with a decimal comma (``1,5``, as a European CSV file
    separated by ``;`` holds them) as numbers (DuckDB's ``decimal_separator``); default ``"."``.
    """

    header_line: int | None = Field(default=None, ge=1)
    decimal_separator: Literal[".", ","] = "."


class EdgesSpec(_Model):
    """Where an exposure feature finds its edges: a ``table`` of an OASIS database (``follow``) or a
    ``path`` to a CSV/Parquet/JSONL file (read through DuckDB). An edge ``source → target`` means the
    source agent sees the target's activity (a follower sees its followee's posts). ``since``: the field
    holding the step (or timestamp, binned like the events) from which the edge exists (default: always).

    ``csv``: a CSV edge file's own layout (:class:`CsvSpec`: ``header_line``, ``decimal_separator``;
    ``[features.edges.csv]`` in TOML). The spec's top-level ``[csv]`` is the event table's and does not reach the
    edge file: an edge list is often written by another tool than the events (a NetworkX script beside a
    BehaviorSpace table), and a header line shared by default would read a plain edge file from the wrong line.
    """

    table: str | None = None
    path: str | None = None
    source: str = "follower_id"
    target: str = "followee_id"
    since: str | None = None
    csv: CsvSpec | None = None

    @model_validator(mode="after")
    def _one(self) -> EdgesSpec:
        if (self.table is None) == (self.path is None):
            raise ValueError("edges need exactly one of table (a table of the OASIS database) or path (a file)")
        if self.csv is not None and self.table is not None:
            raise ValueError("edges.csv describes a CSV edge file (path); a table of the OASIS database has no CSV "
                             "layout")
        return self


Kind = Literal["count", "count_each", "sum", "mean", "last", "exposure"]


class FeatureSpec(_Model):
    """One ``[[features]]`` entry.

    * ``count``: the number of events (of ``actions`` if given) of the agent in the step;
    * ``count_each``: one count feature per action type seen (named ``prefix + action``, sorted);
    * ``sum`` / ``mean``: of the numeric ``field`` over the agent's events (of ``actions``) in the step;
    * ``last``: the value of ``field`` in the agent's last event of the step (log order);
    * ``exposure``: Σ over the agent's edge targets (followees) of their feature ``of`` in that step.

    ``fill``: a step without events holds 0 (``zero``, the default; ``carry`` for ``last``: the last
    value carries forward). ``cumulative``: the running total up to the step (count, count_each, sum).
    """

    kind: Kind
    name: str | None = None
    actions: list[str] | None = None
    field: str | None = None
    prefix: str = ""
    fill: Literal["zero", "carry"] | None = None
    cumulative: bool = False
    of: str | None = None
    edges: EdgesSpec | None = None

    @field_validator("field")
    @classmethod
    def _path(cls, v: Any) -> Any:
        return _check_path(v, "features.field", measured=True)

    @model_validator(mode="after")
    def _consistent(self) -> FeatureSpec:
        k = self.kind
        if k in ("sum", "mean", "last") and self.field is None:
            raise ValueError(f"a {k!r} feature needs field (the numeric field to {k})")
        if k in ("count", "count_each", "exposure") and self.field is not None:
            raise ValueError(f"a {k!r} feature takes no field")
        if k == "exposure" and (self.of is None or self.edges is None):
            raise ValueError("an 'exposure' feature needs of (the feature its followees' value comes from) and "
                             "[features.edges]")
        if k != "exposure" and (self.of is not None or self.edges is not None):
            raise ValueError(f"of / edges belong to exposure features, not {k!r}")
        if k == "count_each" and self.name is not None:
            raise ValueError("count_each makes one feature per action (named prefix + action): give prefix, not name")
        if self.cumulative and k not in ("count", "count_each", "sum"):
            raise ValueError(f"cumulative applies to count, count_each and sum, not {k!r}")
        if self.fill == "carry" and k != "last":
            raise ValueError("fill = 'carry' applies to last features only")
        # keys the feature would accept and not read (a feature built as if they were absent, without a word)
        if self.prefix and k != "count_each":
            raise ValueError(f"prefix ({self.prefix!r}) names count_each's per-action features; a {k!r} feature is "
                             "named by name: give name, not prefix")
        if self.actions is not None and k == "exposure":
            raise ValueError(f"actions ({self.actions}) selects the events a feature is built from; an 'exposure' "
                             "feature sums the feature named by of over the agent's edges and reads no event: give "
                             "actions to that feature")
        return self

    def label(self) -> str:
        """The feature's name (``count_each`` expands later)."""
        if self.name:
            return self.name
        if self.kind == "count":
            return "events" if not self.actions else "+".join(self.actions)
        if self.kind == "exposure":
            return f"exposure_{self.of}"
        return f"{self.kind}_{(self.field or '').replace('/', '.').removeprefix('len:')}"


class AliveSpec(_Model):
    """``[alive]``: when an agent is present (``alive``) at a step.

    ``born = "first_event"`` (default): from the step of its first event (any event with a valid agent
    and step, filtered actions included); ``"start"``: from the panel's first step.
    ``leave_actions``: an event with one of these actions means the agent left *after* that step; it
    is back from the step of its next event. ``inactive_after = k``: the agent is present at t only if
    it has an event in one of the steps t−k+1 … t (it "left" after k silent steps); default: never.
    """

    born: Literal["first_event", "start"] = "first_event"
    leave_actions: list[str] = Field(default_factory=list)
    inactive_after: int | None = Field(default=None, ge=1)


class TraceSpec(_Model):
    """How an event log becomes a panel (see the module docstring; defaults per format in ``configs/traces``)."""

    format: Literal["oasis", "otel", "concordia", "table"] | None = None
    table: str | None = None
    where: dict[str, list[str | int | float | bool]] = Field(default_factory=dict)
    agent: AgentSpec
    step: StepSpec
    action: ActionSpec | None = None
    features: list[FeatureSpec] = Field(default_factory=lambda: [FeatureSpec(kind="count_each")])
    alive: AliveSpec = Field(default_factory=AliveSpec)
    csv: CsvSpec = Field(default_factory=CsvSpec)
    on_bad: Literal["error", "skip"] = "error"
    dtype: Literal["float64", "float32"] = "float64"
    batch_size: int = Field(default=65536, ge=1, le=2**22)
    max_agents: int = Field(default=10_000_000, ge=1)
    max_steps: int = Field(default=100_000, ge=1)
    max_cells: int = Field(default=2_000_000_000, ge=1)
    real_people: bool = False

    @field_validator("where")
    @classmethod
    def _where(cls, v: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for k in v:
            _check_path(k, "where key")
        return v

    @model_validator(mode="after")
    def _features(self) -> TraceSpec:
        if not self.features:
            raise ValueError("features is empty: name at least one feature to build")
        needs_action = [f.kind for f in self.features if f.kind == "count_each" or f.actions]
        if (needs_action or self.alive.leave_actions) and self.action is None:
            raise ValueError("count_each features, features with actions, and alive.leave_actions need [action] field")
        names = [f.label() for f in self.features if f.kind != "count_each"]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"two features are named {dup}: give each a distinct name")
        for f in self.features:
            if f.kind == "exposure":
                if f.of not in names and not any(g.kind == "count_each" for g in self.features):
                    raise ValueError(f"exposure feature {f.label()!r}: of = {f.of!r} names no feature ({names})")
                if f.of == f.label():
                    raise ValueError(f"exposure feature {f.label()!r} cannot be of itself")
        return self

    def fields(self) -> list[str]:
        """Every numeric field a feature reads (each extracted once per record)."""
        out: list[str] = []
        for f in self.features:
            if f.field is not None and f.field not in out:
                out.append(f.field)
        return out


def load_spec(source: str | os.PathLike[str] | dict[str, Any] | TraceSpec) -> TraceSpec:
    """A :class:`TraceSpec` from a TOML file, a dict, or a spec (returned as is).

    Raises:
        TraceSpecError: unreadable TOML, unknown keys, inconsistent features (one line naming each key).
    """
    if isinstance(source, TraceSpec):
        return source
    if isinstance(source, dict):
        return TraceSpec.model_validate(source)
    try:
        data = configs.load_toml(source, what="trace spec")
    except TraceSpecError:
        raise
    except Exception as exc:  # ConfigError from the bounded reader: keep its message, our type
        raise TraceSpecError(str(exc)) from exc
    return TraceSpec.model_validate(data)


def default_spec(fmt: str) -> TraceSpec:
    """The packaged default spec of a known format (``configs/traces/<format>.toml``).

    Raises:
        TraceSpecError: a format without a default (long tables need a spec: their columns are yours).
    """
    if fmt not in ("oasis", "otel", "concordia"):
        raise TraceSpecError(f"format {fmt!r} has no default spec: give --spec (a TOML file naming the agent, "
                             "step and action columns; see docs/traces.md)")
    return load_spec(configs.path(f"traces/{fmt}.toml"))


__all__ = ["FORMATS", "ActionSpec", "AgentSpec", "AliveSpec", "CsvSpec", "EdgesSpec", "FeatureSpec", "StepSpec",
           "TraceSpec", "default_spec", "load_spec", "parse_duration"]
