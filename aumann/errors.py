"""The exception tree. Every error aumann raises for bad input is one of these.

* AumannError(Exception)
  * PanelError(AumannError, ValueError)        -- a recorded panel is malformed
    * ShapeError                               -- wrong rank / mismatched shapes
    * NonFiniteError                           -- NaN or inf in live rows
    * EmptyPanelError                          -- no steps, agents or features
    * DuplicateIdError                         -- agent ids or feature names repeat
  * UnknownFeatureError(AumannError, KeyError) -- a feature name the panel does not have
  * UnknownAgentError(AumannError, KeyError)   -- an agent id the panel does not have
  * BaselineError(AumannError, ValueError)     -- a baseline that does not fit the panel
  * IndicatorError(AumannError, ValueError)    -- an indicator that misbehaves (shape, NaN, no grad)
    * UnknownIndicatorError(IndicatorError, KeyError)
    * ClosedFormUnavailable                    -- closed form asked for but not valid here
  * ZeroDeltaVError(AumannError, ZeroDivisionError) -- normalising by Δv = 0
  * MethodError(AumannError, ValueError)       -- a method's parameters or limits
  * ConfigError(AumannError, ValueError)       -- a config file or CLI option
  * SimulationError(AumannError, RuntimeError) -- the simulation layer (recorder, runner, forks)
  * LLMError(AumannError, RuntimeError)        -- decision backends (auth, model, cache miss, budget)
    * ResponseTooLargeError                    -- a reply body over the configured size cap
    * RetryAfterTooLongError                   -- the server asked to wait longer than allowed
    * ResponseCacheError(LLMError, ConfigError) -- a corrupted, foreign or unusable response cache file
  * IngestError(AumannError, ValueError)       -- data ingestion (files, event lines)
"""

from __future__ import annotations


class AumannError(Exception):
    """Base class of every error aumann raises on purpose."""


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


class ZeroDeltaVError(AumannError, ZeroDivisionError):
    """Normalising attributions by Δv = f(z) − f(z⁰) where Δv is zero."""


class MethodError(AumannError, ValueError):
    """Bad method parameters, or a method used beyond its limits (e.g. exact Shapley at large N)."""


class ConfigError(AumannError, ValueError):
    """A configuration file or command-line option that is invalid."""


class SimulationError(AumannError, RuntimeError):
    """The simulation layer: recorder, runner, forks and executors."""


class LLMError(AumannError, RuntimeError):
    """Decision backends: authentication, unknown model, replay cache miss, budget exhausted."""


class ResponseTooLargeError(LLMError):
    """A reply body larger than the backend's ``max_response_bytes`` (rejected, counted, never stored)."""


class RetryAfterTooLongError(LLMError):
    """The server's ``Retry-After`` asks for a longer wait than the backend's ``retry_after_max``."""


class ResponseCacheError(LLMError, ConfigError):
    """The response cache file is corrupted, not an aumann cache, or cannot be read or written."""


class IngestError(AumannError, ValueError):
    """Data ingestion: unreadable files, unusable inputs."""


__all__ = [
    "AumannError",
    "BaselineError",
    "ClosedFormUnavailable",
    "ConfigError",
    "DuplicateIdError",
    "EmptyPanelError",
    "IndicatorError",
    "IngestError",
    "LLMError",
    "MethodError",
    "NonFiniteError",
    "PanelError",
    "ResponseCacheError",
    "ResponseTooLargeError",
    "RetryAfterTooLongError",
    "ShapeError",
    "SimulationError",
    "UnknownAgentError",
    "UnknownFeatureError",
    "UnknownIndicatorError",
    "ZeroDeltaVError",
]
