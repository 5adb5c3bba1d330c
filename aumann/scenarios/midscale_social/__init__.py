"""MidScale-Social: a vectorised N=1000 influence-weighted propagation scenario seeded by a small fixture."""
