"""The example check family: the smallest complete check, proving the fault mechanism.

Each check runs the op on the DUT inside ``device.scope()`` and on the CPU reference
outside it, records what it measured, and fails when the DUT leaves tolerance. The
faults in ``harness/faults/catalog/example.py`` must turn these red.
"""

import pytest
import torch

from harness import dtypes as dt
from harness import ids
from harness.results import lower

DTYPES = [torch.float32, torch.bfloat16]
TOLERANCE = {torch.float32: 2**-20, torch.bfloat16: 2**-8}  # docs/standards.md, absolute


def _max_rel_err(dut: torch.Tensor, ref: torch.Tensor) -> float:
    diff = (dut.double().cpu() - ref.double()).abs()
    return float((diff / ref.double().abs().clamp_min(1e-6)).max())


@pytest.mark.parametrize("dtype", DTYPES, ids=dt.ids)
def test_add_matches_reference(device, results, dtype):
    a, b = torch.randn(64, 33), torch.randn(64, 33)
    with device.scope():
        dut = torch.add(a.to(device.torch_device, dtype), b.to(device.torch_device, dtype))
    ref = a.to(dtype).double() + b.to(dtype).double()
    err = _max_rel_err(dut, ref)
    limit = TOLERANCE[dtype]
    results.check(ids.record("example", "add", dt.name(dtype)), err <= limit,
                  f"add max_rel_err {err:.3g} > {limit:.3g}",
                  metrics={"max_rel_err": err}, rules={"max_rel_err": lower(rel=2.0, abs=1e-7)})


@pytest.mark.parametrize("dtype", DTYPES, ids=dt.ids)
def test_relu_matches_reference(device, results, dtype):
    x = torch.randn(1000)
    with device.scope():
        dut = torch.nn.functional.relu(x.to(device.torch_device, dtype))
    ref = torch.nn.functional.relu(x.to(dtype).double())
    mismatched = int((dut.double().cpu() != ref).sum())
    results.check(ids.record("example", "relu", dt.name(dtype)), mismatched == 0,
                  f"relu: {mismatched} of {x.numel()} elements differ from the reference "
                  "(exact standard)",
                  metrics={"mismatched": mismatched}, rules={"mismatched": lower(rel=1.0, abs=0)})
