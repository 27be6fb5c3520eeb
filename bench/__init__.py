"""Benchmarks: throughput and latency, side by side with baselines.

``python -m bench`` runs every registered suite; ``python -m bench journal``
runs one. ``--quick`` shortens every run, ``--json PATH`` also writes the
results for machines. Suites are modules that register themselves with
`bench._registry.suite`; the table printer is shared (`bench._table`).
Benchmarks report, they never assert: targets live in review, not in CI.
"""
