"""Benchmarks: each prints ratios against a baseline measured in the same run and writes its
section of docs/benchmarks.md. Run all with ``make bench`` (``python -m bench``)."""
