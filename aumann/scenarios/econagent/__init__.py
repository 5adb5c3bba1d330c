"""EconAgent (Li et al. 2024) as a Mesa scenario; see README.md in this folder.

Importing this package imports nothing; ``aumann.scenarios.get("econagent")`` imports
``scenario.py``, which registers it.
"""
