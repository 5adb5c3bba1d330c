"""aumann: Aumann–Shapley attribution of emergent macro indicators in multi-agent simulations.

Importing :mod:`aumann` defines names only; the heavy parts (torch, mesa, openai, matplotlib) load
when their subpackages are imported.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
