"""What a backend factory is handed: :class:`BackendOptions` (the model, where it is, the settings, the cache)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class BackendOptions:
    """What the CLI (or a caller) hands a backend factory: where the model is, the settings, the cache.

    ``sampling`` is a :class:`~aumann.simulators.llm.settings.Sampling`; ``caps`` a
    :class:`~aumann.simulators.llm.settings.Caps`; ``cache`` a
    :class:`~aumann.simulators.llm.cache.ResponseCache` or ``None``; ``dry_run`` the stand-in backend
    that answers in place of the model (``None``: send). ``extra`` holds anything else by name
    (``prices``, ``structured_output``, ``timeout``, ``rpm``, ``tpm``, ``concurrency``...).
    """

    model: str | None = None
    base_urls: tuple[str, ...] = ()
    api_key: str | None = None
    sampling: Any = None
    caps: Any = None
    cache: Any = None
    dry_run: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        return self.extra.get(name, default)


__all__ = ["BackendOptions"]
