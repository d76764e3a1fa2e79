"""Benchmarks: `make bench` boots the embedded stack and prints one table (README, Benchmarks)."""
