"""Benchmark scripts: run them by hand, they print tables (never part of the test suite)."""
