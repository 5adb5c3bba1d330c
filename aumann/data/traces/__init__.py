"""Traces in, panels out: event logs of simulators that are not Mesa models, by a declared spec.

>>> from aumann.data.traces import read_trace          # doctest: +SKIP
>>> r = read_trace("oasis.db")       # OASIS: detected, default spec  # doctest: +SKIP
>>> r.panel, r.report.n_skipped                        # doctest: +SKIP

* :func:`read_trace` — a trace (OASIS SQLite, OpenTelemetry JSONL spans, a Concordia structured log,
  a CSV/Parquet/JSONL long table) → :class:`TraceRead` (``panel``, ``report``);
* :class:`TraceSpec` (:func:`load_spec` from TOML, :func:`default_spec` per format) — which field is
  the agent, the step (or a time-bin width), the action; which features to build; the alive rule;
* :func:`detect_format`, :func:`format_names`, :func:`register_format` / :class:`TraceReader` — the
  readers, one small class per format.

Importing this package imports nothing heavy (readers load on first use). Formats, field paths and the
alive rule are documented in ``docs/traces.md``.
"""

from __future__ import annotations

from aumann.data.traces.base import TraceReader, register_format
from aumann.data.traces.formats import detect_format, format_names
from aumann.data.traces.read import TraceRead, TraceReport, read_trace, resolve_spec
from aumann.data.traces.spec import (
    ActionSpec,
    AgentSpec,
    AliveSpec,
    EdgesSpec,
    FeatureSpec,
    StepSpec,
    TraceSpec,
    default_spec,
    load_spec,
)

__all__ = ["ActionSpec", "AgentSpec", "AliveSpec", "EdgesSpec", "FeatureSpec", "StepSpec", "TraceRead", "TraceReader",
           "TraceReport", "TraceSpec", "default_spec", "detect_format", "format_names", "load_spec", "read_trace",
           "register_format", "resolve_spec"]
