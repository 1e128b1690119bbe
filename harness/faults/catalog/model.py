"""Faults the model cases must catch (``suites/model``): defects in an op that no curated
catalog row uses, so only a model that calls it can notice.

``aten.sinc`` stands in for a user's unusual op; ``harness.models:sinc_mlp`` is the model
that calls it (a user's own model works the same way: ``--model mypkg.nets:build``).
"""

from __future__ import annotations

from harness.faults import perturb_op

MODEL = "harness.models:sinc_mlp"
CASES = "suites/model/test_model.py::test_model_case"


def _no_kernel(out, args, kwargs):
    # What the dispatcher raises for a backend without the kernel.
    raise NotImplementedError("Could not run 'aten::sinc' with arguments from the "
                              "'PrivateUse1' backend (fault model.sinc_unsupported)")


SINC_REL_ERROR = perturb_op(
    "model.sinc_rel_error", family="model",
    description="aten.sinc returns fp32 results with a relative error of 1e-3 (an op only "
                "the user's model runs; no catalog row calls it)",
    op="aten.sinc", dtypes=("float32",),
    transform=lambda out, args, kwargs: out * (1 + 1e-3),
    checks=(CASES,), pytest_args=("--model", MODEL),
)

SINC_UNSUPPORTED = perturb_op(
    "model.sinc_unsupported", family="model",
    description="the DUT has no aten.sinc kernel (NotImplementedError), as after an upgrade "
                "that drops one: recorded unsupported, a regression against the baseline",
    op="aten.sinc", transform=_no_kernel,
    checks=(CASES,), pytest_args=("--model", MODEL),
)

FAULTS = [SINC_REL_ERROR, SINC_UNSUPPORTED]
