"""Benchmarks: pytest-benchmark timing, process runs, a statistical verdict, history.

- :mod:`harness.bench.timing`: pytest-benchmark glue, the device synchronised inside
  each round, host and device time (Note [A timed round]).
- :mod:`harness.bench.workloads`: the benchmark bodies as data rows.
- :mod:`harness.bench.stats`: the verdict over process runs (Note [Bench verdict]).
- :mod:`harness.bench.runner`: workload -> record, compared with the baseline in the test.
- :mod:`harness.bench.runs`: ``--bench-runs K`` (Note [K process runs]).
- :mod:`harness.bench.history`: change points over stored results.
- :mod:`harness.bench.evaluate`: ``python -m harness bench-eval``, the detector measured.

Importing this package imports neither torch nor scipy (the CLI's ``history`` must not).
"""

from __future__ import annotations

__all__ = ["Timing", "measure", "timing_rule"]


def __getattr__(name):  # the old harness.bench names, without importing torch eagerly
    if name in __all__:
        from harness.bench import timing

        return getattr(timing, name)
    raise AttributeError(f"module 'harness.bench' has no attribute {name!r}")
