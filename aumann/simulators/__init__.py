"""Simulation layer (Mesa observer hook, LLM decision backends, smoothing, forks)."""
