"""LLM decision backends."""
