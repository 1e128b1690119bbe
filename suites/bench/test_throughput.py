"""Benchmarks: timed with pytest-benchmark, judged over process runs against the baseline.

Opt-in (``--run-benchmarks`` or ``-m benchmark``): timings belong on a quiet machine,
not in every CI run. Compare only at equal batch size and precision (NPU_NOTES.md):
the workload, shapes, dtype and batch are part of each record id. The verdict: Note
[Bench verdict] in :mod:`harness.bench.stats`; several runs: ``--bench-runs K``.
"""

import statistics

import pytest

from harness.bench import workloads
from harness.bench.timing import RunStat
from harness.distributed import SubCheck, launch

pytestmark = pytest.mark.benchmark


@pytest.mark.parametrize("workload", workloads.WORKLOADS,
                         ids=[w.id.removeprefix("bench/") for w in workloads.WORKLOADS])
def test_benchmark(workload, benchmark, bench, results, device, settings):
    bench.run(workload, benchmark, results,
              workloads.record_id(workload, device, settings.training_scale))


@pytest.mark.distributed
def test_allreduce_bus_bandwidth(bench, results, device, settings):
    """all_reduce of 4 MiB at 2 ranks on the device's backend (timed in the ranks, not by
    pytest-benchmark: they are other processes)."""
    world = 2
    if device.is_accelerator and device.count < world:
        results.record("bench/dist/all_reduce/float32/4MiB/ws2", status="unsupported",
                       message=f"{device.count} {device.type} device(s); needs {world}")
        return
    nbytes = workloads.ALLREDUCE_BYTES
    launched = launch(SubCheck.of("harness.bench.workloads:allreduce_rank", name="allreduce",
                                  nbytes=nbytes),
                      world, device, timeout=settings.dist_timeout, threads_per_rank=1)
    outcome = launched.outcome("allreduce")
    outcome.raise_if_failed()
    times = [max(values) for values in zip(*outcome.values.values())]  # slowest rank
    median = statistics.median(times)
    own = RunStat(median, statistics.median(abs(t - median) for t in times) * 1.4826,
                  len(times))
    bench.record(results, f"bench/dist/all_reduce/float32/4MiB/ws{world}", own,
                 policy=workloads.NOISY, metrics={
                     "ms": median,
                     "bus_gbs": workloads.bus_bandwidth_gbs(nbytes, world, median)},
                 info={"backend": device.dist_backend})
