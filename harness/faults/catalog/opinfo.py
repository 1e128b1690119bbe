"""Faults the OpInfo sweep, the CPU-fallback capture, the edge-value properties and the
determinism checks must catch (family ``ops``; the catalog's own faults live beside
this file). Each names the one or two node ids that catch it, so its run takes seconds.
"""

import math
import warnings

import torch

from harness.faults import perturb_op

SLICE = "suites/ops/test_opinfo.py::test_opinfo_slice"
EDGE = "suites/ops/test_edge_values.py::test_edge_values_agree_with_reference"
DETERMINISM = "suites/ops/test_determinism.py::test_two_runs_are_bit_identical"


def _no_kernel(out, args, kwargs):
    # What torch raises when a backend has no kernel (torch_npu after a CANN upgrade
    # that drops one): the sweep must record `unsupported`, a regression vs `pass`.
    raise NotImplementedError("Could not run 'aten::cumsum' with arguments from the "
                              "'PrivateUse1' backend (fault ops.opinfo_cumsum_unsupported)")


CUMSUM_UNSUPPORTED = perturb_op(
    "ops.opinfo_cumsum_unsupported", family="ops",
    description="the DUT stops supporting cumsum (NotImplementedError: no kernel), as after "
                "an upgrade that drops an op",
    op="aten.cumsum", transform=_no_kernel,
    checks=(f"{SLICE}[cumsum-float32]",), parity="ops",
)


def _falls_back(out, args, kwargs):
    # torch_npu's exact text (torch_npu/csrc/aten/common/...: npu_cpu_fallback).
    warnings.warn("CAUTION: The operator 'aten::sort.stable' is not currently supported on "
                  "the NPU backend and will fall back to run on the CPU. This may have "
                  "performance implications.", UserWarning, stacklevel=2)
    return out


SORT_FALLBACK = perturb_op(
    "ops.opinfo_sort_cpu_fallback", family="ops",
    description="sort silently runs on the host CPU: torch_npu's 'will fall back to run on "
                "the CPU' warning, correct numbers",
    op="aten.sort", transform=_falls_back,
    checks=(f"{SLICE}[sort-float32]",), parity="ops",
)


def _exp_inf_is_nan(out, args, kwargs):
    return torch.where(torch.isposinf(args[0]), torch.full_like(out, math.nan), out)


EXP_INF_NAN = perturb_op(
    "ops.edge_exp_inf_nan", family="ops",
    description="exp(+inf) returns NaN instead of +inf (an edge-value bug; every finite "
                "input is right)",
    op="aten.exp.default", transform=_exp_inf_is_nan,
    checks=(f"{EDGE}[exp-float32]",),
)


def _jitter(out, args, kwargs):
    # A few-ULP run-to-run difference: what a reduction with a nondeterministic order does.
    return out + out * torch.randn_like(out) * 1e-6


SOFTMAX_NOISE = perturb_op(
    "ops.determinism_softmax_noise", family="ops",
    description="softmax adds tiny run-to-run noise (about 1e-6 relative) in fp32: two runs "
                "on the same input differ",
    op="aten._softmax", dtypes=("float32",), transform=_jitter,
    checks=(f"{DETERMINISM}[softmax-float32]",),
)

FAULTS = [CUMSUM_UNSUPPORTED, SORT_FALLBACK, EXP_INF_NAN, SOFTMAX_NOISE]
