"""Benchmark faults: a kernel that got slower after an upgrade."""

import time

from harness.faults import perturb_op


def _slow(out, args, kwargs):
    time.sleep(0.2)
    return out


SLOW_MM = perturb_op(
    "bench.mm_slowdown", family="bench",
    description="aten.mm takes 200 ms longer per call (a kernel that regressed in speed)",
    op="aten.mm", transform=_slow,
    checks=("suites/bench/test_throughput.py::test_matmul[float32]",),
    pytest_args=("--run-benchmarks",),
)

FAULTS = [SLOW_MM]
