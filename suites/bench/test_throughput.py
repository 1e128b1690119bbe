"""Benchmarks: timed with pytest-benchmark, judged over process runs against the baseline.

Opt-in (``--run-benchmarks`` or ``-m benchmark``): timings belong on a quiet machine,
not in every CI run. Compare only at equal batch size and precision (docs/design.md):
the workload, shapes, dtype and batch are part of each record id. The verdict: Note
[Bench verdict] in :mod:`harness.bench.stats`; several runs: ``--bench-runs K``.
"""

import statistics

import pytest

from harness.bench import workloads
from harness.bench.timing import RunStat, quiet_rounds
from harness.distributed import SubCheck, launch

pytestmark = pytest.mark.benchmark


@pytest.mark.parametrize("workload", workloads.WORKLOADS,
                         ids=[w.id.removeprefix("bench/") for w in workloads.WORKLOADS])
def test_benchmark(workload, benchmark, bench, results, device, settings):
    bench.run(workload, benchmark, results,
              workloads.record_id(workload, device, settings.training_scale))


@pytest.mark.distributed
def test_allreduce_bus_bandwidth(bench, results, device, settings):
    """all_reduce of 16 MiB at 2 ranks on the device's backend (timed in the ranks, not by
    pytest-benchmark: they are other processes)."""
    world, record_id = workloads.ALLREDUCE_WORLD, workloads.ALLREDUCE_ID
    if device.is_accelerator and device.count < world:
        results.record(record_id, status="unsupported",
                       message=f"{device.count} {device.type} device(s); needs {world}")
        return
    nbytes = workloads.ALLREDUCE_BYTES
    launched = launch(SubCheck.of("harness.bench.workloads:allreduce_rank", name="allreduce",
                                  nbytes=nbytes),
                      world, device, timeout=settings.dist_timeout, threads_per_rank=1)
    outcome = launched.outcome("allreduce")
    outcome.raise_if_failed()
    ranks = list(outcome.values.values())
    times = [max(values) for values in zip(*(rank["ms"] for rank in ranks))]  # slowest rank
    controls = [max(values) for values in zip(*(rank["control_ms"] for rank in ranks))]
    quiet = quiet_rounds(controls)  # Note [Quiet rounds]
    kept = [times[i] for i in quiet]
    median = statistics.median(kept)
    own = RunStat(median, statistics.median(abs(t - median) for t in kept) * 1.4826,
                  len(times), control_ms=statistics.median(controls[i] for i in quiet),
                  kept=len(quiet))
    bench.record(results, record_id, own, policy=workloads.ALLREDUCE_POLICY, metrics={
                     "ms": median,
                     "bus_gbs": workloads.bus_bandwidth_gbs(nbytes, world, median)},
                 info={"backend": device.dist_backend})
