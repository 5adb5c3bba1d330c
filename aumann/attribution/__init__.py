"""Attribution: panels in, attributions out (public surface; grows with the engine)."""

from aumann.attribution.panel import Panel

__all__ = ["Panel"]
