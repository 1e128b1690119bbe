"""Faults the op family must catch (issue 3, part 7); each names the narrowest checks.

All act at the aten level inside the DUT scope, as a broken NPU kernel would: the Python
API the catalog calls is untouched, the kernel behind it is wrong.
"""

from __future__ import annotations

import torch

from harness.faults import patch_attr, perturb_op

SUITE = "suites/ops/test_catalog.py"


def _softmax_without_max(out, args, kwargs):
    """exp(x) / sum(exp(x)) in the input dtype: overflows to inf/inf = NaN for logits > ~11
    in fp16, which a max-subtracting kernel never does."""
    x, dim = args[0], args[1]
    e = torch.exp(x)
    return e / e.sum(dim, keepdim=True)


def _scale_weight_grad(out, args, kwargs):
    grad_input, grad_weight, grad_bias = out
    return (grad_input, None if grad_weight is None else grad_weight * 1.001, grad_bias)


def _nan_to_zero(out, args, kwargs):
    return torch.where(torch.isnan(out), torch.zeros_like(out), out)


_NOISE = torch.Generator().manual_seed(20261130)


def _run_to_run_noise(out, args, kwargs):
    """Half an ULP of random noise, fresh on every call: inside every precision standard,
    but no two runs agree bit for bit."""
    eps = torch.finfo(out.dtype).eps
    noise = torch.randn(out.shape, generator=_NOISE).to(out.dtype)
    return out + out.abs() * (0.5 * eps) * noise


EXP_REL_ERROR = perturb_op(
    "ops.exp_rel_error", family="ops",
    description="aten.exp returns fp32 results with a relative error of 1e-4",
    op="aten.exp.default", dtypes=("float32",),
    transform=lambda out, args, kwargs: out * (1 + 1e-4),
    checks=(f"{SUITE}::test_op[exp-float32]",), parity="ops",
)

SOFTMAX_NO_MAX = perturb_op(
    "ops.softmax_fp16_no_max", family="ops",
    description="fp16 softmax computed without subtracting the row max (overflow to NaN "
                "for large logits)",
    op="aten._softmax.default", dtypes=("float16",), transform=_softmax_without_max,
    checks=(f"{SUITE}::test_op[softmax-float16]",),
)

CONV_WEIGHT_GRAD = perturb_op(
    "ops.conv2d_weight_grad_scaled", family="ops",
    description="convolution backward returns the weight gradient scaled by 1.001",
    op="aten.convolution_backward.default", transform=_scale_weight_grad,
    checks=(f"{SUITE}::test_op[conv2d-float32]",),
)

LOG_NAN_TO_ZERO = perturb_op(
    "ops.log_nan_to_zero", family="ops",
    description="aten.log returns 0 where the result should be NaN (negative inputs)",
    op="aten.log.default", transform=_nan_to_zero,
    checks=(f"{SUITE}::test_op[log-float32]",),
)

def _drop_last_row_on_nan(out, args, kwargs):
    if any(isinstance(a, torch.Tensor) and a.is_floating_point() and bool(a.isnan().any())
           for a in args):
        return out[:-1].clone()  # the kernel's answer to a NaN input has one row too few
    return out


MM_NAN_DROPS_A_ROW = perturb_op(
    "ops.mm_nan_drops_a_row", family="ops",
    description="aten.mm returns one row too few when an input holds a NaN (a wrong shape "
                "where torch leaves only the NaN values open)",
    op="aten.mm.default", transform=_drop_last_row_on_nan,
    checks=("suites/ops/test_edge_values.py::test_nan_keeps_the_shape[mm-float32]",),
)

MM_NOISE = perturb_op(
    "ops.mm_run_to_run_noise", family="ops",
    description="aten.mm adds half an ULP of fresh random noise on every call "
                "(non-deterministic, yet within the ULP standard)",
    op="aten.mm.default", transform=_run_to_run_noise,
    checks=(f"{SUITE}::test_mm_run_twice_bit_identical",),
)

ADD_DRIFT = perturb_op(
    "ops.add_rel_drift", family="ops",
    description="fp32 aten.add drifts by 2.5e-7 (relative): inside the absolute standard "
                "(2^-20 = 9.5e-7) but several times the baseline max_rel_err; only the "
                "baseline comparison can catch it",
    op="aten.add.Tensor", dtypes=("float32",),
    transform=lambda out, args, kwargs: out * (1 + 2.5e-7),
    checks=(f"{SUITE}::test_op[add-float32]",),
)

FAULTS = [EXP_REL_ERROR, SOFTMAX_NO_MAX, CONV_WEIGHT_GRAD, LOG_NAN_TO_ZERO, MM_NAN_DROPS_A_ROW,
          MM_NOISE, ADD_DRIFT]


# ---- ties at a bound (Note [Ties at a bound] in harness.ops.spec): only the tie rows see
# these, the ordinary rows' random inputs never sit exactly on a bound

def _hardtanh_grad_inclusive(out, args, kwargs):
    grad_output, x, low, high = args[:4]
    return torch.where((x == low) | (x == high), grad_output, out)


HARDTANH_TIE_GRAD = perturb_op(
    "ops.hardtanh_tie_grad_inclusive", family="ops",
    description="hardtanh's backward passes the gradient at inputs equal to min_val/max_val "
                "(torch gives 0 there); every input off the bounds is right",
    op="aten.hardtanh_backward", transform=_hardtanh_grad_inclusive,
    checks=(f"{SUITE}::test_op[hardtanh_tie-float32]", f"{SUITE}::test_op[hardtanh-float32]"),
)


class _ClampExclusive(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, low, high):
        ctx.save_for_backward(x)
        ctx.bounds = (low, high)
        return x.clamp(low, high)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        low, high = ctx.bounds
        inside = torch.ones_like(x, dtype=torch.bool)
        if low is not None:
            inside &= x > low
        if high is not None:
            inside &= x < high
        return torch.where(inside, grad, torch.zeros_like(grad)), None, None


def _clamp_exclusive(original):
    def clamp(input, min=None, max=None, *, out=None):  # noqa: A002 - torch's names
        if out is not None or isinstance(min, torch.Tensor) or isinstance(max, torch.Tensor):
            return original(input, min, max, out=out)
        return _ClampExclusive.apply(input, min, max)
    return clamp


CLAMP_TIE_GRAD = patch_attr(
    "ops.clamp_tie_grad_exclusive", family="ops",
    description="torch.clamp's gradient is 0 at inputs equal to min/max (torch passes it "
                "there); the forward is right",
    target="torch.clamp", replace=_clamp_exclusive,
    checks=(f"{SUITE}::test_op[clamp_tie-float32]", f"{SUITE}::test_op[clamp-float32]"),
)

FAULTS += [HARDTANH_TIE_GRAD, CLAMP_TIE_GRAD]


# ---- keyword semantics (harness.ops.keywords): kernels that ignore an option; only the
# keyword-coverage samples (KEYWORD_SAMPLES in the catalog) pass it a non-default value

def _bn_ignores_eps(original):
    def batch_norm(input, running_mean, running_var, weight=None, bias=None,  # noqa: A002
                   training=False, momentum=0.1, eps=1e-5):
        return original(input, running_mean, running_var, weight, bias, training, momentum,
                        1e-5)
    return batch_norm


BN_IGNORES_EPS = patch_attr(
    "ops.batch_norm_ignores_eps", family="ops",
    description="batch_norm ignores its eps argument (always 1e-5)",
    target="torch.nn.functional.batch_norm", replace=_bn_ignores_eps,
    checks=(f"{SUITE}::test_op[batch_norm-float32]",),
)


def _leaky_default_slope(out, args, kwargs):
    x = args[0]
    return torch.where(x > 0, x, x * 0.01)


LEAKY_RELU_DEFAULT_SLOPE = perturb_op(
    "ops.leaky_relu_ignores_negative_slope", family="ops",
    description="leaky_relu ignores negative_slope (always the default 0.01)",
    op="aten.leaky_relu.default", transform=_leaky_default_slope,
    checks=(f"{SUITE}::test_op[leaky_relu-float32]",),
)

FAULTS += [BN_IGNORES_EPS, LEAKY_RELU_DEFAULT_SLOPE]


# ---- NaN semantics (harness.ops.specials): only the special-value samples hold a NaN, so
# only suites/ops/test_edge_values.py::test_special_values sees these (Note [Special-value
# semantics] in harness.ops.edge); what an NPU's saturation mode does to NaN

SPECIALS = "suites/ops/test_edge_values.py::test_special_values"


def _clamp_nan_to_bound(out, args, kwargs):
    x = args[0]
    low = args[1] if len(args) > 1 else kwargs.get("min")
    high = args[2] if len(args) > 2 else kwargs.get("max")
    bound = high if high is not None else low
    return torch.where(torch.isnan(x), torch.as_tensor(bound, dtype=out.dtype), out)


CLAMP_NAN_TO_BOUND = perturb_op(
    "ops.clamp_nan_to_bound", family="ops",
    description="aten.clamp turns NaN into its upper bound (a saturating kernel; torch keeps "
                "the NaN); every number is right",
    op="aten.clamp", transform=_clamp_nan_to_bound,
    checks=(f"{SPECIALS}[clamp-float32]",),
)


def _argmax_skips_nan(out, args, kwargs):
    x = args[0]
    return torch.argmax(torch.where(torch.isnan(x), torch.full_like(x, -float("inf")), x),
                        *args[1:], **kwargs)


ARGMAX_SKIPS_NAN = perturb_op(
    "ops.argmax_skips_nan", family="ops",
    description="aten.argmax skips NaN (returns the largest number's index; torch returns "
                "the NaN's); inputs without NaN are right",
    op="aten.argmax", transform=_argmax_skips_nan,
    checks=(f"{SPECIALS}[argmax-float32]",),
)


def _cat_flushes_negative_zero(out, args, kwargs):
    if not out.is_floating_point():
        return out
    return torch.where(out == 0, torch.zeros_like(out), out)  # -0 == 0: both become +0


CAT_FLUSHES_NEGATIVE_ZERO = perturb_op(
    "ops.cat_flushes_negative_zero", family="ops",
    description="aten.cat writes -0 as +0 (a copy through a format conversion that "
                "canonicalises zeros; IEEE copy keeps the sign); every other value is right",
    op="aten.cat", transform=_cat_flushes_negative_zero,
    checks=(f"{SPECIALS}[cat-float32]",),
)

FAULTS += [CLAMP_NAN_TO_BOUND, ARGMAX_SKIPS_NAN, CAT_FLUSHES_NEGATIVE_ZERO]


# ---- a matrix unit that rounds its output toward zero (Note [Error balance] in
# harness.compare): each element stays within one ULP, so only the error balance sees it

LOW_PRECISION = ("bfloat16", "float16")


def toward_zero(wide: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``wide`` (an fp32 accumulator) rounded to ``dtype`` toward zero: the nearest value,
    stepped one ULP toward zero where rounding to nearest went away from it. For bf16 this
    is dropping the low 16 bits of the fp32 word; every element's error is under 1 ULP."""
    nearest = wide.to(dtype)
    away = nearest.float().abs() > wide.abs()
    return torch.where(away, torch.nextafter(nearest, torch.zeros_like(nearest)), nearest)


def _truncating(op):
    """A transform that recomputes ``op`` from the same inputs with an fp32 accumulator
    (inputs up-cast exactly) and rounds the result toward zero to the output's dtype."""

    def transform(out, args, kwargs):
        wide = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
                for a in args]
        return toward_zero(op(*wide, **kwargs), out.dtype)

    return transform


def _truncate_fault(name, op, kernel, what, entries):
    return perturb_op(
        f"ops.{name}_truncate_lowp", family="ops",
        description=f"{what} rounds its fp32 accumulator toward zero to bf16/fp16 (each "
                    "element within one ULP, every error toward zero; a matrix unit in "
                    "truncation mode)",
        op=op, dtypes=LOW_PRECISION, transform=_truncating(kernel),
        checks=tuple(f"{SUITE}::test_op[{entry}-{dtype}]" for entry in entries
                     for dtype in LOW_PRECISION))


MM_TRUNCATE = _truncate_fault("mm", "aten.mm.default", torch.ops.aten.mm.default, "aten.mm",
                              ("mm",))
LINEAR_TRUNCATE = _truncate_fault(
    "linear", "aten.addmm.default", torch.ops.aten.addmm.default,
    "aten.addmm (what F.linear with a bias dispatches to)", ("linear",))
CONV_TRUNCATE = _truncate_fault("conv", "aten.convolution.default",
                                torch.ops.aten.convolution.default, "aten.convolution",
                                ("conv2d",))

FAULTS += [MM_TRUNCATE, LINEAR_TRUNCATE, CONV_TRUNCATE]


# ---- how the op is called (Note [Layout samples], [Integer limits samples], [Size
# boundaries] in harness.ops.catalog): each kernel below is right on every call but one
# kind, which the ordinary samples never make

def _channels_last(args, kwargs) -> bool:
    x = args[0]
    return (isinstance(x, torch.Tensor) and x.dim() == 4 and not x.is_contiguous()
            and x.is_contiguous(memory_format=torch.channels_last))


def _ignores_strides(out, args, kwargs):
    """The convolution of the input's storage read as if it were contiguous NCHW."""
    x = args[0]
    flat = torch.as_strided(x, x.shape, torch.empty(x.shape, device="meta").stride(),
                            x.storage_offset())
    return torch.ops.aten.convolution.default(flat, *args[1:], **kwargs)


CONV_CHANNELS_LAST = perturb_op(
    "ops.conv2d_channels_last_ignores_strides", family="ops",
    description="aten.convolution reads a channels_last input's memory as contiguous NCHW "
                "(a kernel that ignores strides); every contiguous or transposed input is "
                "right",
    op="aten.convolution.default", when=_channels_last, transform=_ignores_strides,
    checks=(f"{SUITE}::test_op[conv2d-float32]",),
)

_NARROW_INTS = (torch.int8, torch.uint8, torch.int16, torch.int32)


def _narrow_int(args, kwargs) -> bool:
    return isinstance(args[0], torch.Tensor) and args[0].dtype in _NARROW_INTS


def _sum_in_input_width(out, args, kwargs):
    """The sum accumulated (and wrapped) in the input's integer width, then widened to the
    int64 torch returns: equal to torch's until the sum leaves the input's range."""
    x = args[0]
    if len(args) > 1:
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        narrow = torch.sum(x, dim=args[1], keepdim=keepdim, dtype=x.dtype)
    else:
        narrow = torch.sum(x, dtype=x.dtype)
    return narrow.to(out.dtype)


SUM_INT_NARROW = perturb_op(
    "ops.sum_int_accumulates_narrow", family="ops",
    description="aten.sum of int8/uint8/int16/int32 accumulates in the input's width and "
                "wraps (torch accumulates in int64); right while the sum stays in range",
    op="aten.sum", when=_narrow_int, transform=_sum_in_input_width,
    checks=(f"{SUITE}::test_op[sum-int32]",),
)

BLOCK = 4096


def _past_a_block(args, kwargs) -> bool:
    x = args[0]
    return isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > BLOCK


def _drops_tail_block(out, args, kwargs):
    """A full reduction that forgets the last, partial block of its input."""
    x = args[0]
    tail = x.numel() % BLOCK
    if out.numel() != 1 or not tail:
        return out
    return out - x.reshape(-1)[-tail:].sum().to(out.dtype).reshape(out.shape)


SUM_TAIL_BLOCK = perturb_op(
    "ops.sum_full_drops_tail_block", family="ops",
    description="a full aten.sum over more than 4096 elements drops the last partial "
                "4096-element block (a second reduction pass that misses the remainder); "
                "every reduction over <= 4096 elements or along a dim is right",
    op="aten.sum", when=_past_a_block, transform=_drops_tail_block,
    checks=(f"{SUITE}::test_op[sum-float32]",),
)

FAULTS += [CONV_CHANNELS_LAST, SUM_INT_NARROW, SUM_TAIL_BLOCK]
