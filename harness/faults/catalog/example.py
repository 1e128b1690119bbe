"""Example faults: the two mechanisms (a perturbed aten op, a patched torch API),
caught by the example family in ``suites/example``. Copy these to write your own."""

import torch

from harness.faults import patch_attr, perturb_op

ADD_DRIFT = perturb_op(
    "example.add_drift", family="example",
    description="aten.add returns fp32 results 1e-3 too large (relative): a broken kernel",
    op="aten.add.Tensor", dtypes=("float32",),
    transform=lambda out, args, kwargs: out * (1 + 1e-3),
    checks=("suites/example/test_example.py::test_add_matches_reference",),
)


def _leaky_relu(original):
    def relu(input, inplace=False):  # noqa: A002 - mirrors torch's signature
        return torch.where(input > 0, input, 0.01 * input)
    return relu


RELU_LEAKS = patch_attr(
    "example.relu_leaks", family="example",
    description="torch.nn.functional.relu lets 1% of negative inputs through",
    target="torch.nn.functional.relu", replace=_leaky_relu,
    checks=("suites/example/test_example.py::test_relu_matches_reference",),
)

FAULTS = [ADD_DRIFT, RELU_LEAKS]
