"""MegaScale-Social: an archetype-batched LLM-driven society of up to 10⁷ agents held in numpy arrays."""
