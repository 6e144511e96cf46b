"""Benchmarks for rulegen: `python -m benchmarks.build_speed`."""
