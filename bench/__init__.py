"""Benchmarks that run on a GPU; each module is importable without one."""
