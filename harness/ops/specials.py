"""NaN / Inf / signed-zero semantics of the op catalog, as data (issue 23, deliverable 1).

A kernel can be accurate on every finite input and still turn a NaN into the clamp bound,
skip a NaN in ``argmax``, sort NaN to the wrong end, or return ``exp(-inf)`` as NaN; an NPU's
saturation mode (as opposed to its INF_NAN mode) changes exactly this. The catalog's
ordinary samples hold no special values, so they cannot see it.

:data:`SEMANTICS` says, per catalog row, which special values its inputs get (``nan``,
``inf``, ``-inf``, ``zero`` for -0.0 and +0.0 where the sign of a zero is part of the
answer) and where that behaviour is documented. :mod:`harness.ops.edge` derives the special
samples from the row's own samples (:func:`harness.ops.edge.special_samples`) and judges
them by the op policy plus an exact rule for the specials (Note [Special-value semantics]
in :mod:`harness.ops.edge`); ``suites/ops/test_edge_values.py::test_special_values`` runs
them. Every other row has a reason in :data:`REASONS` (or an automatic one: integer-only,
random); ``python -m harness ops nan`` prints the table and ``tests/test_ops_specials.py``
fails on a row that is neither covered nor explained.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

from harness.ops.spec import FLOATS, OpEntry, Sample, T, special_domain

NAN_INF = ("nan", "inf", "-inf")
ALL = ("nan", "inf", "-inf", "zero")


@dataclasses.dataclass(frozen=True)
class Semantics:
    """What a row's special-value samples hold and why.

    Attributes:
        specials: keys of :data:`harness.ops.spec.SPECIAL_VALUES` written into the inputs;
            ``zero`` also makes the sign of a zero output part of the forward judgement.
        doc: where torch (or the standard it follows) says what the op does with them.
        samples: names of the row's samples to derive from (default: its first default-run
            sample with elements).
        args: positional arguments that get specials (default: every float tensor).
        extra: samples of its own, already holding specials (addmm's ``beta=0``).
        forward_only: why the gradients are not judged on these samples ("" : they are).
    """

    specials: tuple[str, ...]
    doc: str
    samples: tuple[str, ...] = ()
    args: Optional[tuple[int, ...]] = None
    extra: tuple[Sample, ...] = ()
    forward_only: str = ""


def _rows(names: Iterable[str], specials: tuple[str, ...], doc: str, **kw) -> dict:
    return {name: Semantics(specials, doc, **kw) for name in names}


# ------------------------------------------------------------------ the documentation
IEEE = ("IEEE 754 arithmetic (torch's float kernels): a NaN operand gives NaN, inf - inf "
        "and 0 * inf give NaN, x / +-0 is +-inf by the sign rule, -0 keeps its sign")
C99 = ("C99 Annex F special cases of the math function torch computes (the C library / "
       "Sleef): log(+-0) = -inf, log(x<0) = NaN, sqrt(-0) = -0, exp(-inf) = +0, "
       "atan(+-inf) = +-pi/2, sin(inf) = NaN, odd functions keep the sign of zero")
ACTIVATION = ("an activation of IEEE operations: NaN propagates, +-inf goes to the "
              "formula's limit (relu(-inf) = 0, sigmoid(+inf) = 1, softplus(+inf) = inf)")
MAXIMUM = ("torch.maximum / torch.minimum docs: 'If one of the elements being compared is "
           "a NaN, then that element is returned'")
CLAMP = ("torch.clamp docs: min(max(input, min), max) with torch.maximum's NaN rule: a NaN "
         "stays NaN, never the bound (clip_grad_value_ clamps the gradients the same way)")
REDUCE_MAX = ("max/min reductions follow torch.maximum's NaN rule (its docs): a NaN is the "
              "result, and argmax/argmin/max(dim) return the NaN's index (torch.max docs: "
              "the index of the first maximal value)")
SORT = ("torch sorts NaN above +inf (NumPy's order, which torch.sort/topk/kthvalue follow): "
        "NaN last ascending, first descending, topk's largest are NaN first")
MEDIAN = ("torch.nanmedian docs: 'When input has one or more NaN values, torch.median will "
          "always return NaN'")
NANMEDIAN = ("torch.nanmedian docs: 'Returns the median of the values in input, ignoring NaN "
             "values ... If all the elements in input are NaN it will also return NaN'")
NANSUM = ("torch.nansum docs: 'Returns the sum of all elements, treating Not a Numbers (NaNs) "
          "as zero'; +inf + -inf is still NaN")
NANMEAN = ("torch.nanmean docs: 'Computes the mean of all non-NaN elements' (equivalent to "
           "torch.mean(a[~a.isnan()])); a row of NaN only is NaN")
FMAX = ("torch.fmax / torch.fmin docs: 'if exactly one of the two elements being compared is "
        "a NaN then the non-NaN element is taken ... Only if both elements are NaN is NaN "
        "propagated'")
SUM = ("torch.nansum / torch.nanmean docs: sum and mean propagate NaN (the nan-ops are the "
       "ones that ignore it); +inf + -inf is NaN, as for every reduction built on a sum")
SCAN = ("cumulative ops carry a NaN / inf to every later element of the scan; cummax "
        "returns the NaN's index (max's NaN rule)")
SOFTMAX = ("softmax subtracts the row max: a row with +inf is NaN, -inf entries get "
           "probability 0 (log_softmax -inf), a row with NaN is NaN")
NORM = ("torch.linalg.vector_norm docs: ord=inf is max(abs(x)); a vector with +-inf has norm "
        "inf, with NaN NaN (layer/rms/batch/group norm: an inf makes the group's mean and "
        "variance inf - inf = NaN)")
LOSS = ("each loss's documented formula in IEEE arithmetic: a NaN input gives a NaN loss "
        "element, an infinite one the formula's value (l1(inf) = inf, cross_entropy with an "
        "inf logit NaN, nll of a -inf log-probability inf)")
BCE = ("nn.BCELoss docs: 'BCELoss clamps its log function outputs to be greater than or "
       "equal to -100', so probabilities of exactly 0 and 1 give a finite loss")
BCE_LOGITS = ("nn.BCEWithLogitsLoss docs: sigmoid and BCE in one with the log-sum-exp trick "
              "for numerical stability: +-inf logits give inf or 0, never NaN")
ADDMM = ("torch.addmm / addmv / baddbmm / addbmm docs: 'If beta is 0, then input will be "
         "ignored, and nan and inf in it will not be propagated'")
SDPA = ("F.scaled_dot_product_attention docs: a float attn_mask is added to the scores; "
        "-inf masks a key out (weight 0)")
POOL = ("F.max_pool*d docs: implicit negative infinity padding; a window holding NaN is NaN "
        "(max's NaN rule)")
NAN_TO_NUM = ("torch.nan_to_num docs: NaN -> nan, +inf -> posinf, -inf -> neginf (the "
              "sample passes all three: the defaults are the dtype's own max and lowest, "
              "which an up-cast reference cannot give)")
ISCLOSE = ("torch.isclose docs: NaNs are close only with equal_nan=True; an inf is close "
           "only to the same inf")
COMPARE = "IEEE 754 comparisons: NaN is unordered (==, <, <=, >, >= False; != True); -0 == +0"
FMOD = ("torch.fmod docs: 'When the divisor is zero, returns NaN for floating point dtypes'; "
        "C99: fmod(+-inf, y) = NaN, fmod(x, +-inf) = x")
XLOGY = ("torch.xlogy docs: NaN where other is NaN, 0 where input is 0, else "
         "input * log(other)")
DIGAMMA = "torch.digamma docs: 'returns -Inf for 0'; C99 for the other specials"
ACOSH = ("torch.acosh docs: 'values outside [1, inf) will be mapped to NaN, except for + INF "
         "for which the output is mapped to + INF'")
ATANH = "torch.atanh docs: NaN outside [-1, 1], +-inf at +-1; C99 for +-0"
CLIP_NORM = ("clip_grad_norm_ docs: error_if_nonfinite=False (the default) lets a nan / inf "
             "total norm through: the gradients are scaled by max_norm / that norm")
FOREACH = "the _foreach op is the elementwise op it batches: IEEE / C99 as for that op"
POW = ("C99 pow special cases (torch.pow): pow(x, +-0) = 1 even for NaN x, pow(1, y) = 1, "
       "pow(+-0, y<0) = inf, pow(-inf, y) by the parity of y")
HYPOT = "C99 hypot: hypot(+-inf, y) = +inf even when y is NaN"
ATAN2 = "C99 atan2: atan2(+-0, -0) = +-pi, atan2(+-inf, +inf) = +-pi/4, NaN propagates"
COPY = ("moves, copies, selects or pads values without arithmetic (IEEE 754 copy is exact): "
        "a NaN, an inf and a signed zero arrive where the value goes, bit for bit")
ACCUMULATE = "the values are added into the destination: IEEE addition as for add"
COUNT = ("torch.count_nonzero / all / any: a NaN and an inf are nonzero, so they count and are "
         "truthy; -0 is zero (IEEE 754: -0 == 0)")
ROUND_DECIMALS = ("torch.round(decimals=) is round of x * 10^d divided back: NaN, +-inf and "
                  "+-0 come back as they are (C99 round and IEEE multiply)")

PRODUCT_GRAD = ("the gradient at a NaN is the kernel's choice, documented by nothing: torch's "
                "formula is result / input (NaN) without zeros and the product of the others "
                "(finite) with them, and torch 2.1-2.5 take the second path whenever any "
                "Python dispatch mode is active")

_UNARY_ZERO = ("log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "square", "sin",
               "tan", "asin", "atan", "sinh", "asinh", "tanh", "erf", "erfinv", "expm1",
               "abs", "neg", "sign", "floor", "ceil", "round", "trunc", "frac", "logit",
               "lgamma")
_UNARY = ("exp", "exp2", "cos", "acos", "cosh", "erfc")
_ACTIVATIONS = ("relu", "relu6", "leaky_relu", "hardtanh", "threshold", "gelu", "gelu_tanh",
                "silu", "sigmoid", "hardswish", "hardsigmoid", "elu", "selu", "celu",
                "softplus", "softplus_beta", "mish", "softsign", "tanhshrink", "logsigmoid",
                "hardshrink", "softshrink", "rrelu_eval", "prelu", "glu")
_FOREACH = ("_foreach_add", "_foreach_sub", "_foreach_sub_alpha", "_foreach_mul",
            "_foreach_div", "_foreach_mul_scalar", "_foreach_add_scalar", "_foreach_addcmul",
            "_foreach_addcdiv", "_foreach_lerp", "_foreach_sqrt", "_foreach_norm",
            "_foreach_maximum", "_foreach_neg", "_foreach_abs", "_foreach_reciprocal",
            "_foreach_exp", "_foreach_sign", "_foreach_mul_", "_foreach_add_",
            "_foreach_addcmul_", "_foreach_addcdiv_", "_foreach_lerp_", "_foreach_sqrt_")

_MOVES = ("gather", "take_along_dim", "scatter", "index_select", "index_copy", "index_put",
          "getitem_advanced", "getitem_slice", "masked_fill", "masked_select", "where",
          "embedding", "cat", "permute_contiguous", "transpose_contiguous", "reshape",
          "flatten", "flip", "roll", "movedim", "expand_contiguous", "repeat", "tile",
          "split", "chunk", "unbind", "narrow", "squeeze_unsqueeze",
          "tril", "triu", "diagonal", "clone", "to_float32", "pixel_shuffle",
          "pixel_unshuffle", "pad_constant", "pad_reflect", "pad_replicate", "pad_circular",
          "interpolate_nearest", "interpolate_nearest_exact")


def _beta0(shapes: tuple) -> Sample:
    """``beta=0`` with specials in the added input only: they must not reach the result."""
    bias, *rest = shapes
    return Sample("specials_beta0", (T(bias, special_domain("normal", NAN_INF)),
                                     *(T(s) for s in rest)), {"beta": 0.0})


SEMANTICS: dict[str, Semantics] = {
    # elementwise math
    **_rows(_UNARY_ZERO, ALL, C99),
    **_rows(_UNARY, NAN_INF, C99),
    "acosh": Semantics(ALL, ACOSH),
    "atanh": Semantics(ALL, ATANH),
    "digamma": Semantics(ALL, DIGAMMA),
    "pow": Semantics(ALL, POW, samples=("cube", "tensor_exp")),
    "nan_to_num": Semantics(NAN_INF, NAN_TO_NUM, samples=("replacements",)),
    # activations and bounds
    **_rows(_ACTIVATIONS, NAN_INF, ACTIVATION),
    **_rows(("clamp", "clamp_min_tie", "clamp_max_tie", "clip_grad_value_"), NAN_INF, CLAMP),
    # binary, ternary
    **_rows(("add", "add_alpha", "sub", "sub_alpha", "addcmul", "addcdiv", "lerp"), NAN_INF,
            IEEE),
    **_rows(("mul", "div"), ALL, IEEE),
    "maximum": Semantics(NAN_INF, MAXIMUM),
    "minimum": Semantics(NAN_INF, MAXIMUM),
    "fmax": Semantics(NAN_INF, FMAX),
    "fmin": Semantics(NAN_INF, FMAX),
    "fmod": Semantics(ALL, FMOD),
    "remainder": Semantics(ALL, FMOD + "; torch.remainder is fmod with the divisor's sign"),
    "atan2": Semantics(ALL, ATAN2),
    "hypot": Semantics(NAN_INF, HYPOT),
    "xlogy": Semantics(ALL, XLOGY),
    **_rows(("eq", "ne", "lt", "le", "gt", "ge"), ALL, COMPARE),
    "isclose": Semantics(NAN_INF, ISCLOSE, samples=("typical", "tolerances")),
    # reductions, scans, selection
    **_rows(("sum", "mean", "var", "std", "var_unbiased0", "logsumexp"), NAN_INF, SUM),
    "prod": Semantics(NAN_INF, IEEE, forward_only=PRODUCT_GRAD),
    **_rows(("norm", "norm_l1", "norm_inf"), NAN_INF, NORM),
    **_rows(("amax", "amin", "max_dim", "min_dim", "argmax", "argmin"), NAN_INF, REDUCE_MAX),
    **_rows(("cumsum", "cummax", "logcumsumexp"), NAN_INF, SCAN),
    "cumprod": Semantics(NAN_INF, SCAN, forward_only=PRODUCT_GRAD),
    **_rows(("sort", "sort_descending_stable", "argsort", "msort", "topk", "kthvalue"), NAN_INF,
            SORT),
    "median": Semantics(NAN_INF, MEDIAN),
    "nanmedian": Semantics(NAN_INF, NANMEDIAN),
    "nansum": Semantics(NAN_INF, NANSUM),
    "nanmean": Semantics(NAN_INF, NANMEAN),
    # softmax, norms, losses
    **_rows(("softmax", "log_softmax", "softmin"), NAN_INF, SOFTMAX),
    **_rows(("layer_norm", "rms_norm", "batch_norm", "group_norm", "normalize"), NAN_INF, NORM,
            args=(0,)),
    "cross_entropy": Semantics(NAN_INF, LOSS, samples=("none",), args=(0,)),
    "nll_loss": Semantics(NAN_INF, LOSS, args=(0,)),
    **_rows(("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div"), NAN_INF, LOSS,
            samples=("none",)),
    "binary_cross_entropy": Semantics(("zero",), BCE, samples=("none",), args=(0,)),
    "binary_cross_entropy_with_logits": Semantics(NAN_INF, BCE_LOGITS, samples=("none",),
                                                  args=(0,)),
    # matrix products with beta, attention, pooling, clipping
    "addmm": Semantics(NAN_INF, ADDMM, extra=(_beta0(((16, 32), (16, 64), (64, 32))),)),
    "addmv": Semantics(NAN_INF, ADDMM, extra=(_beta0(((16,), (16, 64), (64,))),)),
    "baddbmm": Semantics(NAN_INF, ADDMM, extra=(_beta0(((4, 16, 8), (4, 16, 32),
                                                        (4, 32, 8))),)),
    "addbmm": Semantics(NAN_INF, ADDMM, extra=(_beta0(((16, 8), (4, 16, 32), (4, 32, 8))),)),
    "scaled_dot_product_attention": Semantics(("-inf",), SDPA, samples=("mask_scale",),
                                              args=(3,)),
    **_rows(("max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool1d",
             "adaptive_max_pool2d"), NAN_INF, POOL),
    "clip_grad_norm_": Semantics(NAN_INF, CLIP_NORM, samples=("clipping",)),
    # the specials of a _foreach row stay on its "typical" lists, whatever sample is first
    # "same_shape" too: a kernel that mixes up a list's same-shaped tensors when one holds a
    # NaN (faults mutate: _foreach_exp and _foreach_sign swapping them survived)
    **_rows(_FOREACH, NAN_INF, FOREACH, samples=("typical", "same_shape")),
    # moves, copies, pads, counts
    **_rows(_MOVES, ALL, COPY),
    # their samples have too few rows for the cycle to reach a -0 (tests/test_ops_specials.py)
    **_rows(("stack", "repeat_interleave"), NAN_INF, COPY),
    **_rows(("scatter_add", "index_add", "diff"), NAN_INF, IEEE + " (" + ACCUMULATE + ")"),
    **_rows(("count_nonzero", "all", "any"), ALL, COUNT),
    "round_decimals": Semantics(ALL, ROUND_DECIMALS),
}
"""Per catalog row: the special values its samples get and where the behaviour is documented."""

# --------------------------------------------------------------------- the reasons
NOT_DOCUMENTED = ("no NaN/Inf semantics documented for it beyond its parts: a sum of "
                  "products whose BLAS / convolution kernel may skip terms (0 * NaN), so "
                  "torch promises nothing about where a NaN lands")
SCATTER_REDUCE = ("torch.scatter_reduce docs say nothing of NaN: which value an amax/amin "
                  "reduction keeps from a NaN and a number, and whether include_self=False "
                  "sees one, is each backend's choice")
INTERP = ("linear / cubic / area interpolation: weighted sums of neighbours with no "
          "documented NaN/Inf behaviour (a NaN spreads by the kernel's footprint, which "
          "varies by backend)")
AVG = ("averaging pool / local norm: a windowed sum with no documented NaN/Inf rule beyond "
       "IEEE addition, which the sum and mean rows check")
COMPOSITE_LOSS = ("loss without a documented NaN/Inf rule whose formula clamps or mixes "
                  "terms (margins, eps-clamped variances); the IEEE parts are covered by the "
                  "elementwise and reduction rows")
VARIANT = "a variant row of a covered op with the same kernel (see the covered row)"
DISTANCE = ("distance / similarity of vectors: no documented NaN/Inf rule (eps-clamped "
            "norms); its parts (norm, sum, div) are covered rows")

REASONS: dict[str, str] = {
    **{n: NOT_DOCUMENTED for n in (
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
        "conv_transpose3d", "linear", "matmul", "mm", "bmm", "mv", "dot", "einsum", "outer",
        "tensordot", "cross", "fold_col2im", "unfold_im2col", "embedding_bag")},
    "scatter_reduce": SCATTER_REDUCE,
    **{n: INTERP for n in (
        "interpolate_linear", "interpolate_bilinear", "interpolate_bicubic",
        "interpolate_trilinear", "interpolate_area")},
    **{n: AVG for n in (
        "avg_pool1d", "avg_pool2d", "avg_pool3d", "lp_pool2d", "adaptive_avg_pool1d",
        "adaptive_avg_pool2d", "adaptive_avg_pool3d", "local_response_norm",
        "instance_norm")},
    **{n: COMPOSITE_LOSS for n in (
        "soft_margin_loss", "poisson_nll_loss", "gaussian_nll_loss", "margin_ranking_loss",
        "hinge_embedding_loss", "cosine_embedding_loss", "triplet_margin_loss",
        "multi_margin_loss", "multilabel_soft_margin_loss")},
    **{n: VARIANT + f" ({row})" for n, row in (
        ("clamp_tie", "clamp"), ("clamp_min_rounded_bound", "clamp_min_tie"),
        ("clamp_rounded_bound", "clamp"), ("hardtanh_tie", "hardtanh"),
        ("relu6_tie", "relu6"), ("relu_tie", "relu"), ("div_floor", "div"))},
    **{n: DISTANCE for n in ("cosine_similarity", "pairwise_distance", "cdist")},
}
"""Per catalog row not in :data:`SEMANTICS`: why it has no special-value samples."""

SHAPE_ONLY: tuple[str, ...] = tuple(name for name, why in REASONS.items() if why != VARIANT
                                    and not why.startswith(VARIANT))
"""Rows with a reason above (their variants aside, which share a row's kernel) that still
run one NaN sample, forward, judged on the output's shape and dtype only: torch documents
nothing of where their NaN lands, but whatever lands where, the answer's shape and dtype
are those of a finite input's (Note [NaN shape samples] in harness/ops/edge.py)."""


def automatic_reason(entry: OpEntry) -> Optional[str]:
    """A reason that follows from the row itself (integer-only, random output), or None."""
    if not any(dtype in FLOATS for dtype in entry.dtypes):
        return (f"integer-only ({', '.join(entry.dtypes)}): NaN and Inf do not exist in "
                f"its dtypes")
    if entry.judge is not None:
        return ("random output judged statistically (harness.ops.stats): no element-wise "
                "reference to put a NaN position against")
    return None


# -------------------------------------------------------------------------- coverage

@dataclasses.dataclass(frozen=True)
class Coverage:
    """One catalog row: covered (with its specials and samples) or its reason."""

    row: str
    covered: bool
    detail: str   # the specials and doc, or the reason; "" when neither (a defect)
    samples: tuple[str, ...] = ()

    @property
    def missing(self) -> bool:
        return not self.covered and not self.detail


def coverage(catalog: Optional[Iterable[OpEntry]] = None) -> list[Coverage]:
    """Per catalog row, whether it has special-value samples or why not."""
    from harness.ops import edge
    from harness.ops.catalog import CATALOG

    out = []
    for entry in (CATALOG if catalog is None else catalog):
        if entry.name in SEMANTICS:
            row = SEMANTICS[entry.name]
            samples = tuple(s.name for s in edge.special_samples(entry))
            only = f" (forward only: {row.forward_only})" if row.forward_only else ""
            out.append(Coverage(entry.name, True,
                                f"{','.join(row.specials)}: {row.doc}{only}", samples))
        else:
            why = automatic_reason(entry) or REASONS.get(entry.name, "")
            out.append(Coverage(entry.name, False, why))
    return out


def table(rows: list[Coverage], *, width: int = 100) -> str:
    """The table a person reads (``python -m harness ops nan``), with totals."""
    name_width = max([len(r.row) for r in rows] + [10])
    lines = [f"{'row':<{name_width}}  {'status':<8} samples  specials: documentation / reason"]
    for r in rows:
        status = "covered" if r.covered else ("MISSING" if r.missing else "reason")
        text = r.detail or ("neither covered nor explained: add it to SEMANTICS or REASONS "
                            "in harness/ops/specials.py")
        if len(text) > width:
            text = text[:width - 3] + "..."
        lines.append(f"{r.row:<{name_width}}  {status:<8} {len(r.samples):>7}  {text}")
    covered = [r for r in rows if r.covered]
    reasons: dict[str, int] = {}
    for r in rows:
        if not r.covered and not r.missing:
            key = r.detail.split(":")[0].split(" (")[0]
            reasons[key] = reasons.get(key, 0) + 1
    missing = [r.row for r in rows if r.missing]
    lines.append(
        f"total: {len(rows)} catalog rows: {len(covered)} covered "
        f"({sum(len(r.samples) for r in covered)} special-value samples), "
        f"{len(rows) - len(covered) - len(missing)} with a reason, {len(missing)} missing"
        + (f" ({', '.join(missing)})" if missing else ""))
    for key, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {count:>3} {key[:90]}")
    return "\n".join(lines)


__all__ = ["REASONS", "SEMANTICS", "SHAPE_ONLY", "Coverage", "Semantics", "automatic_reason", "coverage",
           "table"]
