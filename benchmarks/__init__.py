"""Benchmarks of the chain hooks on generated clusters (`python -m benchmarks.<name>`)."""
