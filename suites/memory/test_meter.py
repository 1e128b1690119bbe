"""The memory meter itself, on the DUT: analytic peaks and autograd's saved bytes.

On CPU the tracker must match exactly; on allocator devices the block rounding
(512 bytes on CUDA/NPU caching allocators) is allowed per allocation. Sizes here are
multiples of 512 bytes, so a correct allocator is exact too.
"""

from __future__ import annotations

import pytest
import torch

from harness import ids, memory, models
from harness.results import lower

ROUNDING = {"tracker": 0, "allocator": 512}  # bytes allowed per storage


@pytest.mark.memory
def test_meter_matches_analytic_peak(device, results):
    where = device.torch_device
    mib = 1 << 20
    with memory.measure(device) as meter:
        a = torch.empty(mib // 4, device=where)           # 1 MiB
        b = torch.empty(mib // 2, device=where)           # 2 MiB -> 3 MiB live
        del a                                             # 2 MiB live
        c = torch.empty(mib // 8, device=where)           # 0.5 MiB -> 2.5 MiB live
        peak, current = meter.peak, meter.current
        del b, c
        after = meter.current
    expected = (3 * mib, 5 * mib // 2, 0)
    slack = ROUNDING[meter.backend] * 3
    errors = [abs(got - want) for got, want in zip((peak, current, after), expected)]
    results.check(
        ids.record("memory", "meter", "float32", "analytic"), max(errors) <= slack,
        f"{meter.backend} meter: (peak, live, live after free) = {(peak, current, after)}, "
        f"expected {expected} (allowed {slack} bytes off)",
        metrics={"abs_error_bytes": max(errors)},
        rules={"abs_error_bytes": lower(rel=1.0, abs=slack)},
        info={"backend": meter.backend, "measured": [peak, current, after],
              "expected": list(expected)})


@pytest.mark.memory
def test_meter_agrees_with_saved_tensors_hooks(device, results):
    torch.manual_seed(0)
    model = models.DeepMLP(width=128, depth=4, in_features=128, dropout=0.25)
    model = model.to(device.torch_device).train()
    x = torch.randn(64, 128, device=device.torch_device)
    target = torch.randint(0, 10, (64,), device=device.torch_device)

    def forward():
        return torch.nn.functional.cross_entropy(model(x), target)

    with torch.no_grad(), memory.measure(device) as plain:
        kept = forward()
        plain_live = plain.current
    with memory.measure(device) as graph:
        with memory.saved_tensor_bytes(exclude=[x, target, *model.parameters()]) as saved:
            loss = forward()
        graph_live = graph.current
    del kept, loss
    diff = abs((graph_live - plain_live) - saved["bytes"])
    slack = ROUNDING[graph.backend] * saved["storages"]
    results.check(
        ids.record("memory", "meter", "mlp", "float32", "saved_tensors"), saved["bytes"] > 0 and diff <= slack,
        f"{graph.backend} meter: the graph keeps {graph_live - plain_live} bytes, "
        f"saved_tensors_hooks counts {saved['bytes']} in {saved['storages']} storages "
        f"(allowed {slack} bytes off)",
        metrics={"abs_error_bytes": diff, "saved_bytes": saved["bytes"]},
        rules={"abs_error_bytes": lower(rel=1.0, abs=slack),
               "saved_bytes": lower(rel=1.05, abs=4096)},
        info={"backend": graph.backend, "live_with_graph": graph_live,
              "live_without": plain_live, "saved_storages": saved["storages"]})
