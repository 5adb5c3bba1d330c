"""One schema per record that aumann reads back from outside the process (a run directory, a counts folder).

A record on disk may be truncated, edited by hand, written by another version or planted: its numbers are
numbers from outside. Each kind has one pydantic schema here with typed, finite, ranged fields, and every
reader goes through :func:`check` (after the bounded JSON reader, :func:`aumann.io.read_json`):

* :class:`RunRecord`   ``runs/run-NNN.json`` of the faithfulness study (``t_star ≥ 0``: a record saying
  −1 is damaged, never rendered as a step);
* :class:`RunTiming`   ``timings/run-NNN.json`` (seconds are finite and non-negative);
* :class:`Manifest`    ``manifest.json`` of every command;
* :class:`CountsMeta`  ``counts.json`` of a raw-counts folder;
* :class:`OutsideRecord` any other JSON object a run directory holds (summaries, cross-scale cells):
  only the rule every schema shares.

The shared rule, over the whole record (extra keys included): every float is finite (``1e400`` parses
as ``inf`` in Python's ``json``; ``NaN`` literals are refused by the reader), every integer fits an
int64, strings are at most :data:`MAX_TEXT` characters, nesting is bounded by the reader. Fields the
schema names are typed strictly (a bool is not a count, ``"3"`` is not a number).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

#: longest string accepted anywhere in a record (characters)
MAX_TEXT = 1_000_000
INT64_MAX = 2**63 - 1

Finite = Annotated[float, Field(allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def _walk(v: Any, where: str) -> None:
    if isinstance(v, bool) or v is None:
        return
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{where or 'the record'} is {v!r}, not a finite number")
    elif isinstance(v, int):
        if not -INT64_MAX - 1 <= v <= INT64_MAX:
            raise ValueError(f"{where or 'the record'} is an integer outside int64 ({v.bit_length()} bits)")
    elif isinstance(v, str):
        if len(v) > MAX_TEXT:
            raise ValueError(f"{where or 'the record'} is a string of {len(v):,} characters (at most {MAX_TEXT:,})")
    elif isinstance(v, Mapping):
        for k, x in v.items():
            _walk(x, f"{where}.{k}" if where else str(k))
    elif isinstance(v, list | tuple):
        for i, x in enumerate(v):
            _walk(x, f"{where}[{i}]")


class OutsideRecord(BaseModel):
    """The rule every record read back shares (see the module docstring); extra keys are kept."""

    model_config = ConfigDict(extra="allow", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _finite_everywhere(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise ValueError(f"a record must be a JSON object; got {type(data).__name__}")
        _walk(data, "")
        return data


class RunRecord(OutsideRecord):
    """``runs/run-NNN.json``: one finished run of the faithfulness study."""

    run: Annotated[int, Field(ge=0, le=100_000)]
    digest: Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]
    scenario: str | None = None
    t_star: Annotated[int, Field(ge=0, le=1_000_000)]
    f_t_star: Finite | None
    f_original_t_star: Finite | None = None
    efficiency_gap: Finite | None = None
    delta_v: Finite | None = None
    methods: dict[str, dict[str, Any]]
    ceiling: dict[str, Any]
    smoothing_gap: Any = None
    stages: dict[str, dict[str, Any]] | None = None
    players: Count | None = None
    k_del: Count | None = None
    top_k: Count | None = None
    arrays_sha256: Hex64
    checksum: Hex64
    files_sha256: dict[str, Hex64] | None = None
    seed_spawn_key: list[Count] | None = None
    pooled_fallback: str | None = None  # why the deletion forks were evaluated in full (DeletionOracle.pooled_fallback)


class RunTiming(OutsideRecord):
    """``timings/run-NNN.json``: the wall-clock seconds of one run, kept apart from its record."""

    run: Annotated[int, Field(ge=0, le=100_000)]
    digest: str
    seconds: dict[str, Seconds | None]


class Manifest(OutsideRecord):
    """``manifest.json``: what produced a run directory (the fields the report and resume read)."""

    command: Annotated[str, Field(max_length=100_000)]
    created: str | None = None
    report_kind: Literal["faithfulness", "attribute", "crossscale"] | None = None
    status: Annotated[str, Field(max_length=100)] | None = None  # "stopped": an LLM cap ended the run early
    config_digest: Annotated[str, Field(max_length=64)] | None = None  # what the runs computed (aumann run)
    config: dict[str, Any] | None = None
    scenario: str | None = None
    seconds: Seconds | None = None
    stage_seconds: dict[str, Seconds] | None = None
    runs: Count | None = None
    resumed_runs: Count | None = None
    computed_runs: Count | None = None
    recomputed_after_failed_check: Count | None = None
    failed_checks: list[dict[str, Any]] | None = None
    synthetic: bool | None = None
    plots: bool | None = None
    analysis_tables: list[str] | None = None
    pooled_fallbacks: list[dict[str, Any]] | None = None  # {run, reason}: deletion forks evaluated in full, and why
    control_fallbacks: list[dict[str, Any]] | None = None  # {run, reason}: the CV row without its control, and why
    dead_rows: list[dict[str, Any]] | None = None  # runs with births or deaths: the living set z⁰_t* was evaluated over


class CountsMeta(OutsideRecord):
    """``counts.json`` of a raw-counts folder: its days and topics."""

    days: Annotated[list[str], Field(max_length=100_000)]
    topics: Annotated[list[str], Field(max_length=100_000)]
    meta: dict[str, Any] | None = None
    format: str | None = None


def check(kind: type[OutsideRecord], data: Any, *, error: type[Exception], what: str) -> dict[str, Any]:
    """``data`` (a parsed JSON object) if it fits the schema ``kind``, else ``error`` naming ``what`` and
    every offending field on one line. Returns ``data`` itself (a dict), unchanged."""
    try:
        kind.model_validate(data)
    except ValidationError as exc:
        parts = []
        for e in exc.errors()[:5]:
            loc = ".".join(str(p) for p in e.get("loc", ()))
            msg = str(e.get("msg", "")).removeprefix("Value error, ")
            parts.append(f"{loc}: {msg}" if loc else msg)
        more = f" (+{exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
        raise error(f"{what} does not fit its schema ({kind.__name__}): {'; '.join(parts)}{more}") from None
    return data


__all__ = ["MAX_TEXT", "CountsMeta", "Manifest", "OutsideRecord", "RunRecord", "RunTiming", "check"]
