"""Throughput benchmarks, compared noise-aware with the stored baseline.

Opt-in (``--run-benchmarks`` or ``-m benchmark``): timings belong on a quiet machine,
not in every CI run. Compare only at equal batch size and precision (NPU_NOTES.md):
the workload, shapes and dtype are part of each record id.
"""

import pytest
import torch

from harness.bench import measure, timing_rule
from harness.models import SimpleCNN

pytestmark = pytest.mark.benchmark

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul(device, results, dtype):
    a = torch.randn(512, 512, device=device.torch_device, dtype=DTYPES[dtype])
    b = torch.randn(512, 512, device=device.torch_device, dtype=DTYPES[dtype])
    with device.scope():
        timing = measure(lambda: a @ b, device)
    results.record(f"bench/matmul/{dtype}/512x512x512", metrics=timing.metrics(),
                   rules=timing_rule(), info={"samples_ms": list(timing.samples_ms)})


def test_conv2d_fwd_bwd(device, results):
    conv = torch.nn.Conv2d(32, 64, 3, padding=1).to(device.torch_device)
    x = torch.randn(16, 32, 32, 32, device=device.torch_device, requires_grad=True)

    def step():
        conv(x).sum().backward()

    with device.scope():
        timing = measure(step, device)
    results.record("bench/conv2d/float32/fwd_bwd/n16c32hw32k64", metrics=timing.metrics(),
                   rules=timing_rule(), info={"samples_ms": list(timing.samples_ms)})


def test_simplecnn_train_step(device, results):
    model = SimpleCNN().to(device.torch_device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 3, 32, 32, device=device.torch_device)
    y = torch.randint(0, 10, (32,), device=device.torch_device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    with device.scope():
        timing = measure(step, device, repeat=10)
    results.record("bench/simplecnn/float32/train_step/b32", metrics={
        **timing.metrics(), "images_per_s": 32e3 / timing.median},
        rules=timing_rule(), info={"samples_ms": list(timing.samples_ms)})
