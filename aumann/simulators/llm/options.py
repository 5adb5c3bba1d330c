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

    def __repr__(self) -> str:
        """Without the key and without URL credentials (a factory that logs or raises with its options shows none)."""
        from aumann.manifest import redact_url

        return (f"BackendOptions(model={self.model!r}, base_urls={tuple(redact_url(u) for u in self.base_urls)!r}, "
                f"api_key={None if self.api_key is None else '***'!r}, sampling={self.sampling!r}, caps={self.caps!r}, "
                f"cache={self.cache!r}, dry_run={self.dry_run!r}, extra={sorted(self.extra)!r})")


__all__ = ["BackendOptions"]
