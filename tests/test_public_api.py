"""Each package's public surface is pinned: a name added or removed is a deliberate change here."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

PUBLIC = {
    "aumann.attribution": [
        "AgentwiseIndicator",
        "Attribution",
        "AttributionMethod",
        "AumannShapley",
        "BASELINES",
        "CoalitionGame",
        "CoalitionMethod",
        "ExactBanzhaf",
        "ExactShapley",
        "FunctionGame",
        "GameError",
        "Indicator",
        "LeaveOneOut",
        "MaskedIndicatorGame",
        "Panel",
        "PooledForm",
        "Problem",
        "QuadraticIndicator",
        "SampledBanzhaf",
        "SampledShapley",
        "Surrogate",
        "aggregators",
        "attribute",
        "evaluate",
        "indicators",
        "metrics",
        "quadrature",
        "resolve_baseline",
        "smoothing",
    ],
    "aumann.simulators": [
        "ArrayRecorder",
        "CheckpointError",
        "ExecutorError",
        "FeatureRecorder",
        "FeatureValueError",
        "ForAgents",
        "ForkResult",
        "LocalExecutor",
        "RayExecutor",
        "Recording",
        "RunSpec",
        "StepsMismatchError",
        "UnknownAttributeError",
        "checkpoint",
        "for_agents",
        "fork",
        "fork_many",
        "indicator_values",
        "seeded_specs",
        "simulate",
    ],
    "aumann.simulators.llm": [
        "BackendUnavailableError",
        "BudgetExceededError",
        "CacheMissError",
        "CachedResponse",
        "CallEstimate",
        "DecisionBackend",
        "LLMAuthenticationError",
        "LLMRequestError",
        "MalformedResponseError",
        "Messages",
        "ModelNotFoundError",
        "OfflineBackend",
        "OpenAIBackend",
        "PolicyError",
        "ResponseCache",
        "Usage",
        "parse_json_object",
        "request_seed",
    ],
    "aumann.scenarios": ["UnknownScenarioError", "get", "names", "register"],
    "aumann.evaluation": [
        "DeletionOracle",
        "baseline_ablation",
        "deletion_summary",
        "f_sensitivity",
        "path_ablation",
        "random_summary",
        "resimulation_game",
        "run_ablations",
        "scenario_resimulation_game",
        "vertex_path_attribution",
    ],
    "aumann.studies": ["StudyResult", "StudySizes", "analyse_run", "run_study", "write_outputs"],
    "aumann.studies.crossscale": ["CrossScaleConfig", "DeepSetSettings", "run_crossscale"],
    "aumann.data": [],
    "aumann.io": [
        "MAX_NAME_BYTES",
        "META_KEY",
        "atomic_path",
        "child_path",
        "csv_cell",
        "dumps_json",
        "ensure_output_dir",
        "plain",
        "read_npz",
        "record_checksum",
        "safe_component",
        "sha256_bytes",
        "sha256_file",
        "write_bytes",
        "write_csv",
        "write_json",
        "write_npz",
        "write_text",
    ],
    "aumann.configs": [
        "ConfigModel",
        "apply_assignments",
        "deep_merge",
        "load_toml",
        "parse_assignment",
        "path",
        "validation_message",
    ],
    "aumann.checks": [
        "as_bool",
        "as_choice",
        "as_float",
        "as_int",
        "as_memory_size",
        "as_optional_bool",
        "as_real_array",
        "as_seed",
        "user_code",
    ],
    "aumann.panel": ["Panel"],
    "aumann.errors": [
        "AttributionFileError",
        "AumannError",
        "BackendUnavailableError",
        "BaselineError",
        "BudgetExceededError",
        "CacheMissError",
        "CaptureDependencyError",
        "CheckpointError",
        "ClosedFormUnavailable",
        "ConfigError",
        "DecisionParseError",
        "DuplicateIdError",
        "EmptyPanelError",
        "ExecutorError",
        "FeatureValueError",
        "GameError",
        "IndicatorError",
        "IngestError",
        "LLMAuthenticationError",
        "LLMError",
        "LLMRequestError",
        "MalformedResponseError",
        "MethodError",
        "MetricError",
        "ModelNotFoundError",
        "NonFiniteError",
        "NonFiniteGameError",
        "OutputError",
        "PanelError",
        "PolicyError",
        "ProtocolError",
        "RetryableLLMError",
        "ShapeError",
        "SimulationError",
        "StepsMismatchError",
        "StudyError",
        "SynthError",
        "UnknownAgentError",
        "UnknownAttributeError",
        "UnknownFeatureError",
        "UnknownIndicatorError",
        "UnknownScenarioError",
        "UnsafeNameError",
        "ZeroDeltaVError",
        "ZstdDictionaryError",
    ],
    "aumann.attribution.metrics": [
        "DeletionCurve",
        "MetricError",
        "RANK_BY",
        "cosine",
        "deletion_auc",
        "deletion_curve",
        "drop_at_k",
        "efficiency_error",
        "kendall_tau",
        "mae",
        "masking_oracle",
        "mean_relative_drop",
        "rank_agents",
        "relative_drop",
        "relative_drop_at_k",
        "spearman",
        "topk_jaccard",
        "topk_overlap",
    ],
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_all_is_pinned_and_every_name_resolves(module):
    mod = importlib.import_module(module)
    assert sorted(mod.__all__) == PUBLIC[module]
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{module}.{name}"


def _loaded_after(statement: str) -> list[str]:
    code = (
        f"import sys; {statement}; "
        "print(sorted(m for m in ('torch', 'matplotlib', 'mesa', 'openai', 'ray', 'duckdb') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().replace("'", '"'))


def test_importing_the_ground_floor_loads_nothing_heavy():
    assert _loaded_after("import aumann.panel, aumann.io, aumann.errors, aumann.configs, aumann.manifest") == []


def test_importing_aumann_attribution_for_panels_does_not_load_torch():
    assert _loaded_after("from aumann.attribution import Panel") == []
