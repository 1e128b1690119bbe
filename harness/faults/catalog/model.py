"""Faults the model cases must catch (``suites/model``): defects in an op that no curated
catalog row uses, so only a model that calls it can notice.

``aten.sinc`` stands in for a user's unusual op; ``harness.models:sinc_mlp`` is the model
that calls it (a user's own model works the same way: ``--model mypkg.nets:build``).
``aten._embedding_bag`` is the recommender's op (``harness.models:recommender``): its case
can only run when the replay keeps the captured offsets (Note [Captured integer values]
in :mod:`harness.model.capture`).
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
    checks=(CASES,), pytest_args=("--model", MODEL), parity="model",
)

SINC_UNSUPPORTED = perturb_op(
    "model.sinc_unsupported", family="model",
    description="the DUT has no aten.sinc kernel (NotImplementedError), as after an upgrade "
                "that drops one: recorded unsupported, a regression against the baseline",
    op="aten.sinc", transform=_no_kernel,
    checks=(CASES,), pytest_args=("--model", MODEL), parity="model",
)

RECOMMENDER = "harness.models:recommender"
EMBEDDING_BAG_MODE_MEAN = 1
"""``_embedding_bag``'s ``mode`` argument for ``mode="mean"`` (0 sum, 1 mean, 2 max)."""


def _mean_as_sum(out, args, kwargs):
    # what a mean-mode kernel returns when it skips the division by the bag's size
    output, offset2bag, bag_size, max_indices = out
    mode = args[4] if len(args) > 4 else kwargs.get("mode", 0)
    if mode != EMBEDDING_BAG_MODE_MEAN:
        return out
    scale = bag_size.clamp(min=1).to(output.dtype).unsqueeze(-1)
    return output * scale, offset2bag, bag_size, max_indices


EMBEDDING_BAG_MEAN_AS_SUM = perturb_op(
    "model.embedding_bag_mean_as_sum", family="model",
    description="aten._embedding_bag in mode='mean' returns each bag's sum (the division by "
                "the bag's size skipped); sum bags are right",
    op="aten._embedding_bag", transform=_mean_as_sum,
    checks=(CASES,), pytest_args=("--model", RECOMMENDER), parity="model",
)

FAULTS = [SINC_REL_ERROR, SINC_UNSUPPORTED, EMBEDDING_BAG_MEAN_AS_SUM]
