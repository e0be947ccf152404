"""Benchmarks: every figure beside its floor measured in the same run (see bench/README.md)."""
