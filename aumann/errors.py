"""The exception tree: every exception class aumann defines lives here.

* AumannError(Exception)                        -- .branch: the fork_many branch it was raised in (else None)
  * PanelError(AumannError, ValueError)          -- a recorded panel is malformed
    * ShapeError                                 -- wrong rank / mismatched shapes
    * NonFiniteError                             -- NaN or inf in live rows
    * EmptyPanelError                            -- no steps, agents or features
    * DuplicateIdError                           -- agent ids or feature names repeat
  * AttributionFileError(AumannError, ValueError) -- a saved attribution that cannot be read
  * UnknownFeatureError(AumannError, KeyError)   -- a feature name the panel does not have
    * UnknownAttributeError(.., SimulationError) -- a recorded attribute the agents do not have
  * UnknownAgentError(AumannError, KeyError)     -- an agent id the panel does not have
  * BaselineError(AumannError, ValueError)       -- a baseline that does not fit the panel
  * IndicatorError(AumannError, ValueError)      -- an indicator that misbehaves (shape, NaN, no grad)
    * UnknownIndicatorError(IndicatorError, KeyError)
    * ClosedFormUnavailable                      -- closed form asked for but not valid here
    * NoLivingAgentsError                        -- an alive-aware indicator at a step where nobody is alive
    * UndefinedIndicatorError                    -- an indicator with no value at its input (0/0)
  * ZeroDeltaVError(AumannError, ZeroDivisionError) -- normalising by Δv = 0
  * MemoryBudgetError(AumannError, MemoryError)  -- one unit of batched work does not fit the memory budget
    * IndicatorMemoryError(.., IndicatorError)   -- an indicator asked for more memory than the machine gives
                                                    (an N × N temporary at large N); also an IndicatorError
  * MethodError(AumannError, ValueError)         -- a method's parameters or limits
    * GameError                                  -- a coalition game that is malformed or misused
      * NonFiniteGameError(.., IndicatorError)   -- a game returned NaN/inf (also an IndicatorError, like
                                                    every non-finite result)
  * MetricError(AumannError, ValueError)         -- attributions that cannot be compared
  * ConfigError(AumannError, ValueError)         -- a config file or CLI option
    * UnknownScenarioError                       -- a scenario name that is not registered
    * UnsafeNameError                            -- a name that cannot be one path component (``../x``, ``/abs``)
    * OutputError(.., OSError)                   -- an output path that cannot be created or written
      * PathEscapeError                          -- a path that leaves its run directory (``..``, a symlink)
      * OutputBusyError                          -- another live aumann command is writing the same output folder
    * ScenarioLoadError                          -- a ``module:attr`` / ``file.py:attr`` scenario that cannot load
    * CaptureDependencyError                     -- ``aumann bluesky capture`` without ``websockets``
    * SynthError                                 -- invalid synthetic-panel settings
    * ProtocolError                              -- unknown sampling protocol / invalid request
    * StudyError                                 -- invalid cross-scale study settings
  * SimulationError(AumannError, RuntimeError)   -- the simulation layer (recorder, runner, forks)
    * FeatureValueError(.., ValueError)          -- a feature returned a non-numeric / non-finite value
      * ReusedAgentIdError                       -- a dead agent's unique_id given to a different (newborn) agent
      * AgentIdChangedError                      -- one agent object recorded under one unique_id, then another
      * NoAgentsRecordedError                    -- a recording in which no agent was ever present
    * StepsMismatchError(.., ValueError)         -- captured steps differ from the steps declared
    * CheckpointError                            -- a model that cannot be checkpointed or forked
      * ReplayUnavailableError                   -- a fork by replay without a factory / known history
      * ReplayDivergedError                      -- a replay that does not reproduce the model
    * ExecutorError                              -- an executor that cannot run (e.g. Ray missing)
      * RemoteTaskError                          -- a task that failed in a worker (remote message + traceback)
    * StepMapError(.., ValueError)               -- a scenario's step map that misbehaves (shape, NaN, no grad)
      * StepMapUnavailable                       -- action attribution asked of a scenario without a step map
    * ModelStepError                             -- the model's own step raised in simulate/fork (.panel: steps so far)
    * InterventionError                          -- an intervention g(model) raised in a fork or replay (.panel)
    * ScenarioCodeError                          -- a scenario's own code (build_model, step, ...) raised or exited
      * StepTimeoutError                         -- a step ran longer than ``--step-timeout``
  * LLMError(AumannError, RuntimeError)          -- decision backends
    * LLMAuthenticationError                     -- HTTP 401/403; never retried
    * ModelNotFoundError                         -- HTTP 404; never retried
    * LLMRequestError                            -- other non-retryable rejections (400, 422, ...)
    * BackendUnavailableError                    -- rate limits / server errors / timeouts persisted
      * ServerDownError                          -- every request failed for a while: the server is down
    * MalformedResponseError                     -- a reply that is not valid for the schema
    * BudgetExceededError                        -- a call / token / cost cap would be exceeded
    * CacheMissError                             -- replay mode: the request is not in the cache
    * PolicyError                                -- an offline policy returned an invalid value
    * DecisionParseError                         -- a reply that is not a valid scenario decision
    * ResponseTooLargeError                      -- a reply body over the configured size cap
    * RetryAfterTooLongError                     -- the server asked to wait longer than allowed
    * ResponseCacheError(LLMError, ConfigError)  -- a corrupted, foreign or unusable response cache file
    * UnknownBackendError(LLMError, ConfigError) -- a backend name that no one registered
    * BackendFactoryError(LLMError, ConfigError) -- a registered backend's factory raised or built no backend
  * OptionalDependencyError(AumannError, ImportError) -- an optional extra (e.g. xarray) is not installed
  * StepExpired(BaseException): the user-code boundary's internal timeout signal (never raised to users)
  * internal signals of the LLM request path (subclasses of Exception; caught inside the backend, never
    raised to users): TransportFailure, ReplyTooLarge, Retryable, ModeUnsupported, BoundFieldRefused
  * IngestError(AumannError, ValueError)         -- data ingestion (files, event lines)
    * ZstdDictionaryError                        -- a dictionary-compressed file without its dictionary
    * TraceError                                 -- event logs of other simulators (aumann.data.traces)
      * TraceFormatError                         -- a trace that cannot be read (not SQLite, truncated, bad line N)
      * TraceSchemaError                         -- a readable trace without the table/columns/fields the spec names
      * TraceRecordError                         -- one record (line / row N) with a missing or unusable field
    * TraceSpecError(IngestError, ConfigError)   -- an invalid trace spec (TOML or TraceSpec)
  * ReportError(AumannError, ValueError)         -- ``aumann report``: not a finished run directory
* AumannWarning(UserWarning)                     -- warnings aumann emits (filter them by class)
  * ForkFallbackWarning                          -- ``strategy="auto"`` could not copy a model and replays it
  * RecorderWarning                              -- a recorder skipped agent types without a requested feature
  * SharedStateWarning                           -- a fork by replay that holds the original's own mutable objects
  * EfficiencyGapWarning                         -- an attribution whose Σφ misses Δv by a large share
  * LookalikeIdWarning                           -- agent ids that differ only in Unicode form or invisible characters
  * ScenarioShadowWarning                        -- an installed scenario entry point hidden by a built-in of its name
  * UnusedArgumentWarning                        -- arguments given that the mode ``auto`` picked does not use
  * PrecisionLossWarning                         -- integers past 2**53 that float64 (the engine's numbers) changes
  * SkippedColumnWarning                         -- from_dataframe left out a column of numbers held as objects
"""

from __future__ import annotations

from collections.abc import Hashable


class AumannError(Exception):
    """Base class of every error aumann raises on purpose.

    ``branch``: the key of the :func:`~aumann.simulators.fork_many` branch it was raised in (its message then starts
    ``fork_many branch 'KEY': ``); ``None`` elsewhere."""

    branch: Hashable | None = None  # (set by fork_many on the error of a failing branch)


class _PlainKeyErrorMessage:
    # KeyError's str() wraps the message in quotes; keep our messages readable.
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PanelError(AumannError, ValueError):
    """A panel (T steps × N agents × D features) is malformed."""


class ShapeError(PanelError):
    """An array has the wrong rank or a shape that does not match."""


class NonFiniteError(PanelError):
    """NaN or inf where a finite number is required."""


class EmptyPanelError(PanelError):
    """A panel with no steps, no agents or no features."""


class DuplicateIdError(PanelError):
    """Agent ids or feature names that are not unique."""


class AttributionFileError(AumannError, ValueError):
    """A saved attribution file that is missing, damaged or not an aumann attribution."""


class UnknownFeatureError(_PlainKeyErrorMessage, AumannError, KeyError):
    """A feature name that the panel does not have."""


class UnknownAgentError(_PlainKeyErrorMessage, AumannError, KeyError):
    """An agent id that the panel does not have."""


class BaselineError(AumannError, ValueError):
    """A baseline specification that does not fit the panel."""


class IndicatorError(AumannError, ValueError):
    """An indicator returned the wrong shape, a non-finite value, or no gradient."""


class UnknownIndicatorError(_PlainKeyErrorMessage, IndicatorError, KeyError):
    """An indicator name that is not registered."""


class ClosedFormUnavailable(IndicatorError):
    """A closed form was requested where none is valid (no closed form, or a non-zero baseline)."""


class NoLivingAgentsError(IndicatorError):
    """An alive-aware indicator (one that takes the alive mask: a mean, variance or Gini over the living, or a sum
    over them) evaluated at a step where no agent is alive: aumann evaluates none over nobody (n_t = 0; a mean there
    is 0/0). The message names the step."""


class UndefinedIndicatorError(IndicatorError):
    """The indicator has no value at this input (e.g. the Gini coefficient where the mean is 0: 0/0)."""


class MemoryBudgetError(AumannError, MemoryError):
    """Not even one unit of batched work (a coalition, an integration point) fits the memory budget."""


class IndicatorMemoryError(MemoryBudgetError, IndicatorError):
    """An indicator's own allocation was refused (e.g. ``z[:, None] - z[None, :]`` at N = 10⁶ asks for 8 TB).

    A :class:`MemoryBudgetError` naming the indicator and the size it asked for, and still an
    :class:`IndicatorError` (what an indicator's failures were before it existed)."""


class ZeroDeltaVError(AumannError, ZeroDivisionError):
    """Normalising attributions by Δv = f(z) − f(z⁰) where Δv is zero."""


class MethodError(AumannError, ValueError):
    """Bad method parameters, or a method used beyond its limits (e.g. exact Shapley at large N)."""


class GameError(MethodError):
    """A coalition game that is malformed (masks of the wrong shape, non-finite values) or misused."""


class NonFiniteGameError(GameError, IndicatorError):
    """A coalition game returned NaN or inf: a game error, and an :class:`IndicatorError` like every other
    non-finite result (catch either)."""


class MetricError(AumannError, ValueError):
    """Attributions that cannot be compared: different agents, steps or shapes, or a bad parameter."""


class ConfigError(AumannError, ValueError):
    """A configuration file or command-line option that is invalid."""


class UnknownScenarioError(ConfigError):
    """A scenario name that is not registered."""


class UnsafeNameError(ConfigError):
    """A name that becomes a path component (topic, scenario, group, file stem) but is not a single,
    safe one: empty, ``.``/``..``, a separator, an absolute path, control characters, or too long."""


class OutputError(ConfigError, OSError):
    """An output directory or file that cannot be created or written (an existing file where a folder
    is needed, no permission, a full disk); the message names the path."""

    def __str__(self) -> str:  # OSError's str() would show (errno, strerror); keep ours
        return str(self.args[0]) if self.args else ""
class PathEscapeError(OutputError):
    """A path that leads outside its run directory (``..``, an absolute path, or a symbolic link)."""


class OutputBusyError(OutputError):
    """Another live aumann command is writing the output folder (it holds the folder's lock,
    :data:`aumann.io.OUTPUTS_LOCK`); the message names the folder and, where recorded, that command's PID and line."""


class ScenarioLoadError(ConfigError):
    """A user scenario spec (``package.module:attribute`` or ``path/file.py:attribute``) that cannot be
    loaded, or whose attribute is neither a Scenario nor a factory returning one."""


class CaptureDependencyError(ConfigError):
    """The optional ``websockets`` package (``aumann[capture]``) is not installed."""


class SynthError(ConfigError):
    """Invalid synthetic-panel settings."""


class ProtocolError(ConfigError):
    """Unknown sampling protocol or invalid sampling request."""


class StudyError(ConfigError):
    """Invalid cross-scale study settings."""


class SimulationError(AumannError, RuntimeError):
    """The simulation layer: recorder, runner, forks and executors."""


class UnknownAttributeError(UnknownFeatureError, SimulationError):
    """A feature given by attribute name that an agent does not have."""


class FeatureValueError(SimulationError, ValueError):
    """A feature extractor returned a non-numeric or non-finite value, or a wrongly shaped array."""


class NoAgentsRecordedError(FeatureValueError):
    """A recording in which no agent was ever present: a model without agents, or a fork of one step in which every
    agent left (a baseline action under which every agent dies). ``context`` holds what the recording's context
    functions captured (name → array with a leading step axis; empty when it has none): a fork's world state
    without its agents."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.context: dict = {}  # (set by the recording that raises it)


class ReusedAgentIdError(FeatureValueError):
    """An agent ``unique_id`` that came back after its agent left the model, on a different agent object (a
    newborn given a dead agent's id): recorded as one row it would merge two agents. ``FeatureRecorder(...,
    reused_ids="new_agent")`` records the newcomer as a new agent instead."""


class AgentIdChangedError(FeatureValueError):
    """An agent object whose ``unique_id`` changed during a recording (a model that renumbers its agents, sets
    ``unique_id`` on a later step, or, on Mesa >= 3.4.2, registers an agent again: ``register_agent`` gives it the
    next id): one row per id would record the one agent as two, one leaving the model and one born. The message names
    the agent, both ids and the captures."""


class StepsMismatchError(SimulationError, ValueError):
    """The number of captured steps differs from the number declared (or steps is not a positive int)."""


class CheckpointError(SimulationError):
    """A model that cannot be checkpointed (deep-copied) or shipped to a worker (pickled)."""


class ReplayUnavailableError(CheckpointError):
    """A fork by replay with no way to rebuild the model: pass ``factory=`` (a callable returning the
    model in its initial state) or run it through a Scenario."""


class ReplayDivergedError(CheckpointError):
    """A replayed model that is not in the original's state (a factory without the seed, a step
    function or intervention that is not deterministic)."""


class ExecutorError(SimulationError):
    """An executor that cannot run: a missing optional dependency or a failed worker."""


class RemoteTaskError(ExecutorError):
    """A task that failed in an executor's worker. Raised in its own right when the task's exception
    cannot be rebuilt in the driver; otherwise it is the ``__cause__`` of the task's own exception.
    ``remote_traceback`` holds the worker's traceback and ``where`` the host and process; raised in its own right,
    it keeps the task exception's ``branch`` (the :func:`~aumann.simulators.fork_many` branch) and notes."""

    remote_traceback: str = ""
    where: str = ""


class StepMapError(SimulationError, ValueError):
    """A scenario's step map G(λ) that misbehaves: wrong shape, NaN/inf, or no gradient in λ."""


class StepMapUnavailable(StepMapError):
    """Action attribution asked of a scenario that provides no ``step_map``."""


class ModelStepError(SimulationError):
    """The model's own step raised while :func:`~aumann.simulators.simulate` (or a fork) stepped it: the message names
    the model, the step and the original exception (chained as ``__cause__``); ``panel`` holds the steps recorded
    before it (``None`` when none was), so a long run is not lost with its last step."""

    panel = None  # the Panel of the steps recorded before the failing step (set where it is raised)


class InterventionError(SimulationError):
    """An intervention ``g(model)`` raised where a fork applied it (once, or before each forked step with
    ``repeat=True``) or where a replay re-applied it to rebuild a model: the message names the intervention, the
    fork or replay, the step and the original exception (chained as ``__cause__``); ``panel`` holds the steps a
    ``repeat=True`` fork recorded before it (``None`` otherwise, or when none was). aumann's own errors raised in
    an intervention (``for_agents``' :class:`UnknownAgentError`, a scenario's :class:`ScenarioCodeError`) are not
    wrapped."""

    panel = None  # the Panel of the steps recorded before the failure (set where it is raised)


class ScenarioCodeError(SimulationError):
    """A scenario's own code (``build_model``, ``step``, a baseline action, ...) raised or called ``sys.exit``;
    the message names the scenario, the function and the step, and the original exception is chained."""


class StepTimeoutError(ScenarioCodeError):
    """A scenario step ran longer than the per-step timeout (``--step-timeout`` / ``step_timeout``)."""


class LLMError(AumannError, RuntimeError):
    """Decision backends: authentication, unknown model, replay cache miss, budget exhausted."""


class LLMAuthenticationError(LLMError):
    """The server rejected the API key (HTTP 401/403). Never retried."""


class ModelNotFoundError(LLMError):
    """The server does not serve this model, or the base URL path is wrong (HTTP 404). Never retried."""


class LLMRequestError(LLMError):
    """A non-retryable rejection of the request (HTTP 400, 422, ...)."""


class BackendUnavailableError(LLMError):
    """Rate limits, server errors, timeouts or refused connections persisted through every retry."""


class ServerDownError(BackendUnavailableError):
    """Every request of a long enough stretch failed to reach a usable server: the run stops rather than
    turning each decision into an abstention."""


class MalformedResponseError(LLMError):
    """The reply was not a JSON object valid for the schema, after every retry (``reply``: its text)."""

    def __init__(self, message: str = "", reply: str | None = None) -> None:
        super().__init__(message)
        self.reply = reply


class BudgetExceededError(LLMError):
    """A call, token or cost cap of the cost guard would be exceeded."""


class CacheMissError(LLMError):
    """Replay mode: the request is not in the response cache (nothing is sent to the server)."""


class PolicyError(LLMError):
    """An offline policy returned a value that does not validate against the schema."""




class DecisionParseError(LLMError):
    """A model reply that is not a valid scenario decision (bad JSON, missing keys, out of range)."""


class ResponseTooLargeError(LLMError):
    """A reply body larger than the backend's ``max_response_bytes`` (rejected and counted; an abstention,
    stored in the response cache as an empty reply marked ``too large: ...`` -- the oversized text is never
    stored -- and served from there as the same error)."""


class RetryAfterTooLongError(LLMError):
    """The server's ``Retry-After`` asks for a longer wait than the backend's ``retry_after_max``."""


class ResponseCacheError(LLMError, ConfigError):
    """The response cache file is corrupted, not an aumann cache, or cannot be read or written."""


class UnknownBackendError(LLMError, ConfigError):
    """A decision backend name that is not registered (the message lists the registered ones)."""


class BackendFactoryError(LLMError, ConfigError):
    """A registered decision backend's factory raised, or returned something that is neither a decision backend (an
    object with a ``decide`` method) nor ``None`` (the offline policy decides); the message names the backend."""


class OptionalDependencyError(AumannError, ImportError):
    """An optional extra that a feature needs is not installed (the message names the pip extra)."""


class IngestError(AumannError, ValueError):
    """Data ingestion: unreadable files, unusable inputs."""


class ZstdDictionaryError(IngestError):
    """A dictionary-compressed file without (or with the wrong) zstd dictionary."""


class TraceError(IngestError):
    """An event log of another simulator (OASIS, OpenTelemetry spans, Concordia, a long table) that cannot
    become a panel; the message names the file and, where there is one, the line or row."""


class TraceFormatError(TraceError):
    """A trace that cannot be read at all: not an SQLite database, a truncated file, a malformed line N."""


class SpanShapeError(TraceFormatError):
    """A line of OpenTelemetry spans (OTLP or SDK shape) whose parts have the wrong JSON type (``resourceSpans`` an
    object, a span a number); the span reader refuses such a line by its number, or skips and counts it."""


class TraceSchemaError(TraceError):
    """A readable trace that lacks the table, columns or fields its spec names (the message lists what it has)."""


class TraceRecordError(TraceError):
    """One record of a trace (line N of a file, row N of a table) with a missing or unusable field."""


class TraceSpecError(IngestError, ConfigError):
    """An invalid trace spec: unknown keys, bad bin widths, features that name nothing."""


class ReportError(AumannError, ValueError):
    """A directory that is not a finished run directory, or one whose result files cannot be read."""



# ---------------------------------------------------------------------- internal signal of the user-code boundary
class StepExpired(BaseException):
    """Raised inside a scenario call whose time ran out (:mod:`aumann.simulators.boundary`); a
    ``BaseException``, so the step's own ``except Exception:`` cannot swallow it. Turned into
    :class:`StepTimeoutError` at the boundary; never raised to users."""


# ---------------------------------------------------------------------- internal signals of the LLM request path
class TerminatedBySignal(SystemExit):
    """SIGTERM/SIGHUP while a run is under way (``code`` = 128 + the signal): raised by the CLI's signal
    handler so the way out saves what it must (the LLM usage ledger). It is not user code calling
    ``sys.exit``: the user-code boundaries let it pass, as they do ``KeyboardInterrupt``."""


class TransportFailure(Exception):
    """No HTTP reply: ``kind`` is ``"timeout"`` or ``"connect"``; ``detail`` may name the URL (redact it)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


class ReplyTooLarge(Exception):
    """A reply body over the cap; ``size`` is the announced length (``None``: cut off while reading)."""

    def __init__(self, size: int | None) -> None:
        super().__init__(size)
        self.size = size


class Retryable(Exception):
    """A failed attempt worth repeating; ``kind`` is ``unavailable``, ``malformed`` or ``too_large``."""

    def __init__(self, kind: str, detail: str, wait: float = 0.0, size: int | None = None,
                 tokens: tuple[int, int] | None = None) -> None:
        super().__init__(detail)
        self.kind = kind
        self.wait = wait  # the server's Retry-After, in seconds (0 when absent)
        self.size = size  # an oversized body's announced length
        self.tokens = tokens  # (prompt, completion) the server billed for a reply we cannot use


class ModeUnsupported(Exception):
    """The server rejected the structured-output mode (``response_format``)."""



class BoundFieldRefused(Exception):
    """The server refused ``max_tokens`` by name and asked for ``max_completion_tokens``."""


class AumannWarning(UserWarning):
    """Base class of the warnings aumann emits."""


class ForkFallbackWarning(AumannWarning):
    """A fork with ``strategy="auto"`` could not copy the model and replays it from its factory instead."""


class SharedStateWarning(AumannWarning):
    """A fork by replay whose model holds the original's own mutable objects (a module-level default graph),
    so the replay writes into the original and the branch is not independent of it."""


class RecorderWarning(AumannWarning):
    """A recorder skipped agents (a type without a requested feature) and says which."""


class TransientAgentsWarning(AumannWarning):
    """Agents were present at no capture (born and removed within one step, or removed in the first step before
    any capture): they have no row, and are counted in the panel's ``meta["transient_agents"]``. Not a
    :class:`RecorderWarning`, so that code which turns the recorder's skipped-type warning into an error keeps
    running models whose offspring die at birth."""


class ModelFinishedWarning(AumannWarning):
    """A model said it is done (Mesa's ``model.running = False``, where ``batch_run`` stops) and ``simulate`` kept
    stepping it for the steps asked for; the message names the step (the panel's ``meta["model_finished"]``)."""


class EfficiencyGapWarning(AumannWarning):
    """An efficient method's Σ_i φ misses Δv by a large share of |Δv| (too few integration points?)."""


class LookalikeIdWarning(AumannWarning):
    """Two agent ids that differ only in Unicode normalisation (NFC vs NFD ``café``) or in invisible format
    characters (a zero-width space, a BOM): kept as two agents, but no page or table can show them apart."""



class PartialWriteWarning(AumannWarning):
    """An aumann command writing (or removing) an output in a folder whose lock it holds removed the temporary files
    that earlier writes of that output, killed before their rename, left beside it (``.NAME.XXXXXXXX.tmpSUFFIX``),
    or kept ones modified too recently to be sure no program still writes them: the message names each."""


class UnusedArgumentWarning(AumannWarning):
    """Arguments given to a method (or flags to a command) that the mode an ``auto`` setting picked does not use:
    ``AumannShapley(steps=500)`` (``aumann attribute --steps 500``) where the indicator's closed form applies, so no
    path integral runs. The message names them and how to force the mode that uses them; the result's provenance
    records them under ``unused`` (and the command's manifest.json under ``unused_flags``)."""


class PrecisionLossWarning(AumannWarning):
    """Integer input (int64/uint64 arrays or columns, Python ints, integer text in a trace) whose values float64 does
    not hold exactly: past ±2**53 a double keeps only every 2nd, 4th, ... integer, so ``2**53 + 1`` became
    ``2**53``. The values are kept (as the nearest double, as before); the message names the feature, column or
    field, how many values changed and the largest of them. An ``ArrayRecorder(dtype=float32)`` stores its features
    as float32, which holds integers exactly only up to ±2**24: the integers it changes are warned of the same way,
    the message naming float32."""


class SkippedColumnWarning(AumannWarning):
    """:meth:`Panel.from_dataframe`, given no ``features=``, left out a column whose values are numbers held under
    dtype ``object`` (numbers beside ``None``, as a Mesa agent reporter gives for agents of another type, or beside
    bools): such a column reads as text to pandas, so it was skipped as one, with nothing said but its name in
    ``meta["skipped_columns"]``. The message names the columns and how to keep one."""


class ScenarioShadowWarning(AumannWarning):
    """An installed ``aumann.scenarios`` entry point whose name (normalised: ``Midscale_Social`` is
    ``midscale-social``) is a built-in scenario's: the name runs the built-in, and the entry point is reached only
    by its ``module:attribute`` spec."""


__all__ = [
    "AgentIdChangedError",
    "AttributionFileError",
    "AumannError",
    "AumannWarning",
    "BackendFactoryError",
    "BackendUnavailableError",
    "BaselineError",
    "BoundFieldRefused",
    "BudgetExceededError",
    "CacheMissError",
    "CaptureDependencyError",
    "CheckpointError",
    "ClosedFormUnavailable",
    "ConfigError",
    "DecisionParseError",
    "DuplicateIdError",
    "EfficiencyGapWarning",
    "EmptyPanelError",
    "ExecutorError",
    "FeatureValueError",
    "ForkFallbackWarning",
    "GameError",
    "IndicatorError",
    "IndicatorMemoryError",
    "IngestError",
    "InterventionError",
    "LLMAuthenticationError",
    "LLMError",
    "LLMRequestError",
    "LookalikeIdWarning",
    "MalformedResponseError",
    "MemoryBudgetError",
    "MethodError",
    "MetricError",
    "ModeUnsupported",
    "ModelFinishedWarning",
    "ModelNotFoundError",
    "ModelStepError",
    "NoAgentsRecordedError",
    "NoLivingAgentsError",
    "NonFiniteError",
    "NonFiniteGameError",
    "OptionalDependencyError",
    "OutputBusyError",
    "OutputError",
    "PanelError",
    "PartialWriteWarning",
    "PathEscapeError",
    "PolicyError",
    "PrecisionLossWarning",
    "ProtocolError",
    "RecorderWarning",
    "RemoteTaskError",
    "ReplayDivergedError",
    "ReplayUnavailableError",
    "ReplyTooLarge",
    "ReportError",
    "ResponseCacheError",
    "ResponseTooLargeError",
    "RetryAfterTooLongError",
    "Retryable",
    "ReusedAgentIdError",
    "ScenarioCodeError",
    "ScenarioLoadError",
    "ScenarioShadowWarning",
    "ServerDownError",
    "ShapeError",
    "SharedStateWarning",
    "SimulationError",
    "SkippedColumnWarning",
    "SpanShapeError",
    "StepExpired",
    "StepMapError",
    "StepMapUnavailable",
    "StepTimeoutError",
    "StepsMismatchError",
    "StudyError",
    "SynthError",
    "TerminatedBySignal",
    "TraceError",
    "TraceFormatError",
    "TraceRecordError",
    "TraceSchemaError",
    "TraceSpecError",
    "TransientAgentsWarning",
    "TransportFailure",
    "UndefinedIndicatorError",
    "UnknownAgentError",
    "UnknownAttributeError",
    "UnknownBackendError",
    "UnknownFeatureError",
    "UnknownIndicatorError",
    "UnknownScenarioError",
    "UnsafeNameError",
    "UnusedArgumentWarning",
    "ZeroDeltaVError",
    "ZstdDictionaryError",
]
