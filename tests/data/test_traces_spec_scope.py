"""Every spec key either changes the read or is refused: an unknown key, and a known key the format at hand does not
read (a top-level ``[csv]`` of an OASIS, OpenTelemetry or Concordia spec, ``table`` outside OASIS, ``inherit``
outside OpenTelemetry, ``unit`` / ``origin`` without ``bin``, ...), is a ``TraceSpecError`` naming the key, before a
record is read; the same key where it applies is read."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from aumann.data.traces import default_spec, load_spec, read_trace
from aumann.errors import ConfigError, TraceSpecError

DATA = Path(__file__).parent / "traces"
EVENTS_SPEC = Path(__file__).parents[2] / "docs" / "examples" / "traces" / "events.toml"

#: one sample trace per format, with a spec that reads it
TRACES: dict[str, tuple[Path, Any]] = {
    "oasis": (DATA / "oasis_twitter.db", "oasis"),
    "otel": (DATA / "agentsociety2_run" / "trace", "otel"),
    "concordia": (DATA / "concordia_log.json", "concordia"),
    "table": (DATA / "events.csv", None),
}


def spec_of(fmt: str) -> dict[str, Any]:
    """The spec (as a dict) that reads ``fmt``'s sample trace."""
    if fmt == "table":
        return load_spec(EVENTS_SPEC).model_dump(exclude_unset=True)
    return default_spec(fmt).model_dump(exclude_unset=True)


def with_(spec: dict[str, Any], **changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(spec)
    for k, v in changes.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k].update(v)
        else:
            out[k] = v
    return out


@pytest.mark.parametrize("fmt", sorted(TRACES))
def test_each_sample_reads_with_its_spec(fmt):
    path, _ = TRACES[fmt]
    r = read_trace(path, spec_of(fmt))
    assert r.report.format == fmt and r.report.events > 0


@pytest.mark.parametrize("fmt", sorted(TRACES))
@pytest.mark.parametrize(("where", "key"), [
    ("top", "decimal_seperator"),  # a typo at the top
    ("step", "bni"),
    ("agent", "exclued"),
    ("csv", "header"),
    ("alive", "born_at"),
])
def test_unknown_keys_are_refused_in_every_format(fmt, where, key):
    spec = spec_of(fmt)
    if where == "top":
        spec[key] = ","
    else:
        spec.setdefault(where, {})[key] = 1
    with pytest.raises(TraceSpecError, match=key):
        read_trace(TRACES[fmt][0], spec)


@pytest.mark.parametrize("fmt", sorted(TRACES))
def test_unknown_key_in_an_edge_spec_is_refused(fmt):
    spec = spec_of(fmt)
    spec["features"] = [{"kind": "count", "name": "n"},
                        {"kind": "exposure", "of": "n", "edges": {"path": "e.csv", "csv": {"skip_lines": 6}}}]
    with pytest.raises(TraceSpecError, match="skip_lines"):
        read_trace(TRACES[fmt][0], spec)


@pytest.mark.parametrize("fmt", ["oasis", "otel", "concordia"])
@pytest.mark.parametrize("csv", [{"decimal_separator": ","}, {"header_line": 7}])
def test_top_level_csv_outside_a_csv_table_is_refused(fmt, csv):
    """It was read as if absent: the user believed their decimal separator or header line applied."""
    key = next(iter(csv))
    with pytest.raises(TraceSpecError, match=rf"\[csv\] {key} = .*'{fmt}' trace.*remove \[csv\]") as exc:
        read_trace(TRACES[fmt][0], with_(spec_of(fmt), csv=csv))
    assert isinstance(exc.value, ConfigError)


@pytest.mark.parametrize("fmt", ["otel", "concordia", "table"])
def test_table_outside_oasis_is_refused(fmt):
    with pytest.raises(TraceSpecError, match=rf"table = 'trace'.*OASIS.*'{fmt}' trace"):
        read_trace(TRACES[fmt][0], with_(spec_of(fmt), table="trace"))


@pytest.mark.parametrize("fmt", ["oasis", "concordia", "table"])
def test_inherit_outside_opentelemetry_is_refused(fmt):
    spec = spec_of(fmt)
    spec["step"]["inherit"] = "trace"
    with pytest.raises(TraceSpecError, match=rf"\[step\] inherit = 'trace'.*'{fmt}' trace"):
        read_trace(TRACES[fmt][0], spec)


@pytest.mark.parametrize("fmt", ["otel", "concordia", "table"])
def test_an_oasis_edge_table_outside_oasis_is_refused_before_the_read(fmt):
    """It was a TraceSchemaError after the whole trace was read (or no error where no reader got that far)."""
    spec = spec_of(fmt)
    spec["features"] = [{"kind": "count", "name": "n"},
                        {"kind": "exposure", "of": "n", "edges": {"table": "follow"}}]
    with pytest.raises(TraceSpecError, match=rf"\[features.edges\] table = 'follow'.*'{fmt}' trace.*path = "):
        read_trace(TRACES[fmt][0], spec)


@pytest.mark.parametrize("fmt", sorted(TRACES))
@pytest.mark.parametrize(("key", "value"), [("unit", "ms"), ("origin", 5)])
def test_unit_and_origin_without_bin_are_refused(fmt, key, value):
    spec = spec_of(fmt)
    spec["step"][key] = value
    with pytest.raises(TraceSpecError, match=rf"\[step\] {key} = .*without bin.*add bin, or remove {key}"):
        read_trace(TRACES[fmt][0], spec)


def test_unit_given_with_bin_by_the_flag_applies(tmp_path):
    """``--bin`` (``bin=``) makes a spec's unit apply: it is checked after the flags, not in the TOML alone."""
    f = tmp_path / "t.csv"
    f.write_text("agent,ts\na,0\na,3600000\nb,7200000\n")
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "ts", "unit": "ms"},
            "features": [{"kind": "count", "name": "n"}]}
    r = read_trace(f, spec, bin="1h")
    assert r.panel.T == 3 and r.report.events == 3


@pytest.mark.parametrize("fmt", ["oasis", "concordia"])
def test_unit_with_a_numeric_bin_is_refused_where_no_duration_is_read(fmt):
    spec = spec_of(fmt)
    spec["step"].update(bin=2, unit="ms")
    with pytest.raises(TraceSpecError, match=r"unit = 'ms' with a numeric bin"):
        read_trace(TRACES[fmt][0], spec)


def test_unit_with_a_numeric_bin_on_a_csv_table_is_refused(tmp_path):
    """A numeric bin counts the numbers' own units; unit scales a Parquet duration column only."""
    f = tmp_path / "t.csv"
    f.write_text("agent,ts\na,0\na,3600\n")
    spec = {"format": "table", "agent": {"field": "agent"}, "step": {"field": "ts", "bin": 3600, "unit": "ms"},
            "features": [{"kind": "count", "name": "n"}]}
    with pytest.raises(TraceSpecError, match=r"unit = 'ms' with a numeric bin.*not \(it would change nothing\)"):
        read_trace(f, spec)
    spec["step"].pop("unit")
    assert read_trace(f, spec).panel.T == 2


@pytest.mark.parametrize("fmt", sorted(TRACES))
def test_keys_holding_their_default_are_accepted(fmt):
    """Stating the default changes nothing and means nothing else: no error."""
    spec = spec_of(fmt)
    spec["csv"] = {"decimal_separator": "."}
    spec["step"].update(unit="s")
    if fmt != "otel":
        spec["step"]["inherit"] = "none"
    assert read_trace(TRACES[fmt][0], spec).report.events > 0


@pytest.mark.parametrize(("feature", "match"), [
    ({"kind": "count", "name": "n", "prefix": "n_"}, r"prefix \('n_'\).*give name, not prefix"),
    ({"kind": "sum", "field": "x", "prefix": "s_"}, "prefix"),
])
def test_prefix_outside_count_each_is_refused(feature, match):
    """A count feature with a prefix was named 'events', the prefix dropped without a word."""
    with pytest.raises(TraceSpecError, match=match):
        load_spec({"agent": {"field": "a"}, "step": {"field": "s"}, "features": [feature]})


def test_actions_of_an_exposure_feature_are_refused():
    """An exposure sums its `of` feature over edges; its actions list was read by nothing."""
    spec = {"agent": {"field": "a"}, "step": {"field": "s"}, "action": {"field": "x"},
            "features": [{"kind": "count", "name": "posts", "actions": ["post"]},
                         {"kind": "exposure", "of": "posts", "actions": ["like"], "edges": {"path": "e.csv"}}]}
    with pytest.raises(TraceSpecError, match=r"actions \(\['like'\]\).*give actions to that feature"):
        load_spec(spec)
    del spec["features"][1]["actions"]
    assert load_spec(spec).features[1].actions is None


@pytest.mark.parametrize("where", ["agent", "step", "action", "where"])
def test_len_is_refused_outside_a_numeric_field(where):
    """``len:`` was read as a key named 'len:...' there, which no record holds."""
    spec: dict[str, Any] = {"agent": {"field": "a"}, "step": {"field": "s"}, "features": [{"kind": "count"}]}
    if where == "where":
        spec["where"] = {"len:text": [3]}
    else:
        spec[where] = {"field": "len:text"}
    with pytest.raises(TraceSpecError, match=r"len: .*only a numeric feature's field"):
        load_spec(spec)
    assert load_spec({"agent": {"field": "a"}, "step": {"field": "s"},
                      "features": [{"kind": "sum", "field": "len:text"}]}).fields() == ["len:text"]


@pytest.mark.parametrize("fmt", ["oasis", "otel", "table"])
def test_action_match_outside_concordia_is_refused(fmt):
    """Only the Concordia reader classifies actions by match: elsewhere the actions were counted as written (a table's
    buy and sell stayed buy and sell under match = {buying = '^b'}), without a word."""
    spec = spec_of(fmt)
    spec["action"] = dict(spec["action"], match={"buying": "^b"})
    with pytest.raises(TraceSpecError, match=rf"\[action\] match = .*Concordia.*'{fmt}' trace.*remove match"):
        read_trace(TRACES[fmt][0], spec)


def test_action_match_in_concordia_classifies():
    spec = spec_of("concordia")
    spec["action"] = {"field": "deduplicated_data/value/__act__/Value", "match": {"talk": "."}}
    spec["features"] = [{"kind": "count_each"}]
    r = read_trace(TRACES["concordia"][0], spec)
    assert set(r.panel.features) <= {"talk", "other"} and "talk" in r.panel.features


def test_a_reader_of_your_own_that_declares_no_spec_keys_is_handed_every_key_as_before():
    """``spec_keys = None`` (the default of a reader registered with ``register_format`` before readers declared
    their keys): the format-specific keys reach it unchecked, so a reader of your own that reads ``spec.table`` keeps
    working; a built-in reader (and yours once it declares) has the keys it does not read refused."""
    from aumann.data.traces.base import TraceReader
    from aumann.data.traces.read import reader_class
    from aumann.data.traces.scope import check_scope, declared_keys
    from aumann.data.traces.spec import TraceSpec

    class Mine(TraceReader):
        name = "mine"

    spec = TraceSpec.model_validate(with_(spec_of("table"), table="runs", csv={"decimal_separator": ","}))
    check_scope(spec, "mine", declared_keys(Mine))  # undeclared: nothing refused
    with pytest.raises(TraceSpecError, match="table = 'runs'"):
        check_scope(spec, "table", declared_keys(reader_class("table")))

    class Declared(Mine):
        spec_keys = frozenset({"table"})

    with pytest.raises(TraceSpecError, match=r"\[csv\] decimal_separator = ','"):
        check_scope(spec, "mine", declared_keys(Declared))
