"""Benchmark models: the scale model (issue 17)."""
