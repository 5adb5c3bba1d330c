"""A tiny Mesa model with births, deaths and re-entry (agents that leave and come back with their id)."""

from .model import Forager, Foragers

__all__ = ["Forager", "Foragers"]
