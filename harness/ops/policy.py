"""The one op policy: what a DUT exception means, which standard judges an op, how a DUT
call is watched. The catalog runner, the OpInfo sweep, the distributed rank programs and
the model cases all ask this module, so the same question gets the same answer
everywhere (docs/design.md, "The parts").

* :func:`classify_exception`: ``("unsupported" | "error", reason)`` for an exception the
  DUT raised.
* :func:`standard_for`: the precision standard (a key of
  :data:`harness.compare.STANDARDS`) an op is judged by, per dtype and direction, from
  one table (:data:`OP_STANDARDS`) keyed by op name: catalog names (``add``), OpInfo
  names (``nn.functional.relu``, ``div:no_rounding_mode``) and aten names
  (``aten.add.Tensor``, ``aten::addmm``) all resolve through :func:`op_names`.
* :func:`judge`: one output against its references through
  :func:`harness.compare.compare_outputs` under the op's standard, the same for every
  pipeline (so the same op and input give the same metrics wherever they are judged).
  The CPU's own error in the DUT's dtype is taken into account there and only there
  (Note [CPU's own error] in :mod:`harness.compare`).
* :func:`watch`: wraps a DUT call: CPU-fallback capture (:mod:`harness.fallback`) and
  the aten ops it dispatched (Note [Aten ops of a record]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Each op-level record keeps ``info["aten_ops"] = {"fwd": [...], "bwd": [...]}``: the sorted
overload-packet names (``aten.clamp_min``) its DUT computation dispatched, forward and
backward apart. The report groups failing records by these names to point at a common
kernel. They are captured by a :class:`~torch.utils._python_dispatch.TorchDispatchMode`
that only notes ``func.overloadpacket`` and calls through.

Note [Measured without the harness]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A Python dispatch mode is not neutral: while one is active, torch takes its
subclass-safe formulas (``at::isTensorSubclassLike`` is true for every tensor), so
``cumprod_backward``, ``prod_backward`` and others compute another way, and on torch 2.1,
2.4 and 2.5 ``cumprod``'s gradient came out up to 1e3x less accurate than the CPU's own.
The harness would have filed its own recording as the stack's fault. So the DUT runs
twice (:func:`run_dut`):

1. *measured*: inside ``device.scope()`` with the fallback capture's warning, log and
   stderr listeners only (no dispatch mode of the harness); its outputs are the ones
   judged;
2. *noted*: the same call again, inside the scope, under the aten-op recorder and the
   fallback capture's known-op tracer (Note [Fallback warnings are emitted once] in
   :mod:`harness.fallback`); its outputs and exceptions are dropped; the op names and
   the fallbacks it saw are kept.

Faults (entered by the scope) act on both. ``tests/test_op_policy.py`` checks, for every
catalog op and dtype, that the outputs with the recording equal those without it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Callable, Iterator, NamedTuple, Optional, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness import dtypes, fallback, faults
from harness.classify import UNSUPPORTED_PATTERNS, classify_exception
from harness.compare import Request, Verdict, check_table, compare_many, standard_by_name

__all__ = ["OP_STANDARDS", "GRAD_STANDARDS", "UNSUPPORTED_PATTERNS", "DEFAULT_STANDARD",
           "Asked", "Watch", "WithCheck", "bare_cpu", "classify_exception", "judge",
           "judge_many", "noting", "op_names", "run_dut", "standard_for", "watch"]

T = TypeVar("T")

# --------------------------------------------------------------------------- exceptions
# One classifier for every check: harness.classify (re-exported here for the pipelines).

# ---------------------------------------------------------------------------- standards

DEFAULT_STANDARD = "relative"

# The standard each op is judged by (docs/standards.md; the numbers behind each standard
# live in harness.compare.STANDARDS, and each table is checked against it at import). An op not listed is "relative";
# integer/bool outputs are always "exact". Keys are op names as op_names() spells them:
# catalog rows (a row that is a variant of an op, like "add_alpha", has its own key),
# OpInfo names without their namespace, aten packet names without "aten.".
_EXACT = (
    # copies, layout, selection, indices: bit-equal (ties documented in the catalog)
    "abs", "neg", "sign", "floor", "ceil", "round", "trunc", "clamp", "clamp_min", "clamp_max",
    "clip", "nan_to_num", "div_floor", "maximum", "minimum", "fmax", "fmin", "eq", "ne", "lt", "le", "gt", "ge",
    "isclose", "norm_inf", "amax", "amin", "max_dim", "min_dim", "argmax", "argmin",
    "count_nonzero", "all", "any", "gather", "take_along_dim", "scatter", "index_select",
    "index_copy", "getitem_advanced", "getitem_slice", "masked_fill", "masked_select", "where",
    "embedding", "one_hot", "cat", "stack", "permute", "permute_contiguous", "transpose",
    "transpose_contiguous", "reshape", "flatten", "flip", "roll", "movedim",
    "expand_contiguous", "repeat", "tile", "repeat_interleave", "split", "chunk", "unbind",
    "narrow", "squeeze_unsqueeze", "tril", "triu", "diagonal", "clone", "to_float32",
    "pad_constant", "pad_reflect", "pad_replicate", "pad_circular", "pixel_shuffle",
    "pixel_unshuffle", "unfold_im2col", "interpolate_nearest", "interpolate_nearest_exact",
    "sort", "sort_descending_stable", "argsort", "topk", "kthvalue", "median", "nanmedian",
    "msort",
    "cummax", "max_pool1d", "max_pool2d", "max_pool3d", "adaptive_max_pool1d",
    "adaptive_max_pool2d", "hardshrink", "clip_grad_value_", "_foreach_maximum",
    "_foreach_neg", "_foreach_abs", "_foreach_sign",
    # the tie rows (Note [Ties at a bound] in harness.ops.spec): selection, exact both ways
    "clamp_tie", "clamp_min_tie", "clamp_max_tie", "hardtanh_tie", "relu6_tie", "relu_tie",
)
_ABSOLUTE = (
    # Note [Ties at a rounded bound]: a bound the dtype cannot hold is rounded by the DUT
    # and not by the up-cast reference (harness.model.cases asks rounded_bound_key())
    "clamp_min_rounded_bound", "clamp_rounded_bound", "clamp_max_rounded_bound",
    "threshold_backward",  # relu's gradient: one comparison and a select of the grad
    # one rounding of an elementary operation (msprobe's absolute threshold ops)
    "add", "sub", "mul", "div", "reciprocal", "rsqrt", "square", "frac", "outer",
    "relu", "relu6", "leaky_relu", "hardtanh", "threshold", "softshrink", "rrelu_eval",
    "rrelu", "_foreach_sub", "_foreach_mul", "_foreach_div", "_foreach_mul_scalar",
    "_foreach_add_scalar", "_foreach_reciprocal", "_foreach_mul_",
)
_ATEN_EXACT = (
    # aten-level names a captured model dispatches (harness.model.cases): views, copies,
    # fills, indexing and their backward ops; bit-equal like their catalog spellings
    "view", "_unsafe_view", "_reshape_alias", "t", "expand", "copy", "_to_copy", "detach",
    "alias", "lift_fresh", "select", "slice", "split_with_sizes", "squeeze", "unsqueeze",
    "contiguous", "as_strided", "unfold", "constant_pad_nd", "zeros_like", "ones_like",
    "full_like", "fill", "zero", "new_zeros", "new_ones", "new_full", "full", "zeros",
    "ones", "scalar_tensor", "arange", "_local_scalar_dense", "max_pool1d_with_indices",
    "max_pool2d_with_indices", "slice_backward", "select_backward",
)
_ULP = (
    # matrix multiplication (msprobe's ULP method)
    "linear", "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot",
    "__rmatmul__",
)
OP_STANDARDS: dict[str, str] = {
    **{name: "exact" for name in (*_EXACT, *_ATEN_EXACT)},
    **{name: "absolute" for name in _ABSOLUTE},
    **{name: "ulp" for name in _ULP},
    "add_alpha": "relative",   # x + alpha * y: two roundings, not one
    "_foreach_add": "relative",  # with alpha (the optimizer's form)
}
"""Forward standard per op name (see :func:`standard_for`)."""
check_table("OP_STANDARDS", OP_STANDARDS)  # Note [Standards as objects]: a typo raises here

SUMS_OF_PRODUCTS = frozenset({
    *_ULP, "tensordot", "einsum", "inner", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "convolution", "sum", "mean", "cumsum"})
"""Ops whose outputs are sums of products, judged against their condition ``sum |a_i b_i|``
(Note [Condition of products and reductions] in :mod:`harness.compare`)."""


def sums_products(op_name: str) -> bool:
    """Whether ``op_name`` (any name :func:`op_names` knows) is a sum of products."""
    return any(name in SUMS_OF_PRODUCTS for name in op_names(op_name))


GRAD_STANDARDS: dict[str, str] = {
    **{name: "exact" for name in (
        "cat", "stack", "permute", "permute_contiguous", "transpose", "transpose_contiguous",
        "reshape", "flatten", "flip", "roll", "movedim", "split", "chunk", "unbind", "narrow",
        "squeeze_unsqueeze", "tril", "triu", "diagonal", "clone", "pad_constant",
        "pixel_shuffle", "pixel_unshuffle", "clamp_tie", "clamp_min_tie", "clamp_max_tie",
        "hardtanh_tie", "relu6_tie", "relu_tie",
        # aten-level views a captured model dispatches: the gradient is viewed back (not
        # ``expand``'s: it is summed over the expanded dims, rounded once per addition, so
        # it is ``relative``; judged exact, the OpInfo sweep failed CPU's correct kernel)
        "view", "_unsafe_view", "_reshape_alias", "t", "detach", "alias", "select",
        "slice", "split_with_sizes", "squeeze", "unsqueeze", "contiguous", "as_strided",
        "constant_pad_nd")},
    # a cast's gradient is cast back to the input's dtype: rounded on the DUT (fp16), not
    # in the up-cast reference (fp32): a rounding, not a copy
    "_to_copy": "absolute", "copy": "absolute"}
"""Input-gradient standard where it is not the rule: a gradient of an ``ulp`` op is
``ulp``, every other gradient ``relative`` (a gradient is rarely a single rounding), and
the gradient of a pure copy (layout ops) or of a selection at a bound is ``exact``."""
check_table("GRAD_STANDARDS", GRAD_STANDARDS)
standard_by_name(DEFAULT_STANDARD, where="DEFAULT_STANDARD")

_NAMESPACES = ("torch.ops.aten.", "aten::", "aten.", "torch.nn.functional.", "nn.functional.",
               "torch.special.", "special.", "torch.linalg.", "linalg.", "torch.")


@functools.lru_cache(maxsize=4096)
def op_names(op_name: str) -> tuple[str, ...]:
    """The keys ``op_name`` is looked up under, most specific first (a pure function of
    the name, cached: a default run asks it 12,000 times for a few hundred names).

    ``aten.add.Tensor`` -> ``(aten.add.Tensor, add.Tensor, add)``;
    ``aten._foreach_mul_.Scalar`` -> ``(..., _foreach_mul_, _foreach_mul, mul)``;
    ``nn.functional.pad:reflect`` -> ``(..., pad:reflect, pad_reflect, pad)``.
    """
    out = [op_name]
    name = op_name
    for prefix in _NAMESPACES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            out.append(name)
            break
    if op_name.startswith(("aten.", "aten::", "torch.ops.aten.")):
        if "." in name:
            name = name.split(".", 1)[0]  # the overload
            out.append(name)
        if name.endswith("_") and not name.endswith("__"):  # in place: as the op
            name = name[:-1]
            out.append(name)
        if name.startswith("_foreach_"):  # a list of tensors: as the op on each
            name = name[len("_foreach_"):]
            out.append(name)
    if ":" in name:
        base, variant = name.split(":", 1)
        out += [f"{base}_{variant}", base]
    return tuple(dict.fromkeys(out))


ROUNDED_BOUND_OPS = ("clamp", "clamp_min", "clamp_max")
"""Ops with a scalar bound whose ``<op>_rounded_bound`` key applies when the bound is not
representable in the case's dtype (Note [Ties at a rounded bound] in harness.ops.spec)."""


def rounded_bound_key(op_name: str, scalars, dtype) -> str:
    """``op_name``, or ``<op>_rounded_bound`` when it is a :data:`ROUNDED_BOUND_OPS` op and
    a float bound in ``scalars`` changes when rounded to ``dtype``."""
    base = op_names(op_name)[-1]
    if base not in ROUNDED_BOUND_OPS or not dtype.is_floating_point:
        return op_name
    for value in scalars:
        if isinstance(value, float) and float(torch.tensor(value, dtype=dtype)) != value:
            return f"{base}_rounded_bound"
    return op_name


def standard_for(op_name: str, dtype, direction: str = "fwd") -> str:
    """The precision standard for ``op_name`` outputs (``fwd``) or input gradients (``bwd``).

    Args:
        op_name: a catalog name, an OpInfo key or an aten op name (:func:`op_names`).
        dtype: a ``torch.dtype`` or its name; integer and bool outputs are ``exact``.
        direction: ``fwd`` or ``bwd``.
    """
    if isinstance(dtype, str):
        dtype = dtypes.BY_NAME.get(dtype)
    if isinstance(dtype, torch.dtype) and not (dtype.is_floating_point or dtype.is_complex):
        return "exact"
    names = op_names(op_name)
    fwd = next((OP_STANDARDS[n] for n in names if n in OP_STANDARDS), DEFAULT_STANDARD)
    if direction == "fwd":
        return fwd
    if direction != "bwd":
        raise ValueError(f"direction {direction!r}: choose 'fwd' or 'bwd'")
    explicit = next((GRAD_STANDARDS[n] for n in names if n in GRAD_STANDARDS), None)
    return explicit or ("ulp" if fwd == "ulp" else DEFAULT_STANDARD)


# -------------------------------------------------------------------------------- judge

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class Asked(NamedTuple):
    """One output to judge: :func:`judge`'s arguments, for :func:`judge_many`."""

    dut: torch.Tensor
    reference: torch.Tensor
    lowp: Optional[torch.Tensor]
    standard: str
    scale: Optional[torch.Tensor] = None


def judge(dut: torch.Tensor, reference: torch.Tensor, lowp: Optional[torch.Tensor],
          standard: str, scale: Optional[torch.Tensor] = None):
    """``(verdict, standard_used)`` for one output: the same in every pipeline.

    ``scale`` is the op on the absolute values of its inputs for sums of products (Note
    [Condition of products and reductions] in :mod:`harness.compare`); exact standards
    ignore it.

    Non-float outputs are ``exact`` against the low-precision reference where there is one
    (the up-cast run of an integer op is the same computation). An ``exact`` float output
    is compared with the reference rounded to the DUT's dtype: exact means "the correctly
    rounded result", which an fp32 ``masked_fill(0.3)`` is although fp64 holds 0.3.
    """
    return judge_many([Asked(dut, reference, lowp, standard, scale)])[0]


@dataclasses.dataclass(frozen=True)
class WithCheck:
    """A judge with :func:`judge`'s signature: the policy's verdict and ``check``'s
    (``check(dut, reference, lowp) -> Verdict``), both must pass. Where a case's outputs
    are judged together (:func:`harness.ops.runner.run_cases`) the policy's part is judged
    with the others (:meth:`merged`)."""

    check: Callable[..., Verdict]

    def __call__(self, dut, reference, lowp, standard, scale=None) -> tuple[Verdict, str]:
        asked = Asked(dut, reference, lowp, standard, scale)
        return self.merged(judge(*asked), asked)

    def merged(self, judged: tuple[Verdict, str], asked: Asked) -> tuple[Verdict, str]:
        """The policy's ``judged`` ``(verdict, standard)`` of ``asked``, and the check's."""
        verdict, used = judged
        extra = self.check(asked.dut, asked.reference, asked.lowp)
        message = "\n".join(m for m in (verdict.message, extra.message) if m)
        return Verdict(verdict.passed and extra.passed, {**verdict.metrics, **extra.metrics},
                       {**verdict.rules, **extra.rules}, message), used


def judge_many(asked: list[Asked]) -> list[tuple[Verdict, str]]:
    """:func:`judge` of each, in order, the outputs measured together (Note [Outputs
    measured together] in :mod:`harness.compare`)."""
    requests, used = [], []
    for dut, reference, lowp, standard, scale in asked:
        if not (dut.is_floating_point() and dut.dtype in FLOAT_DTYPES
                and reference.is_floating_point()):
            standard = "exact"
            if lowp is not None and lowp.shape == dut.shape:
                reference = lowp
        if standard == "exact" and dut.is_floating_point() and reference.dtype != dut.dtype:
            reference = reference.detach().to(dut.dtype)
        low = lowp if (lowp is not None and lowp.dtype == dut.dtype
                       and lowp.shape == dut.shape) else None
        if scale is not None and (standard == "exact" or scale.shape != reference.shape):
            scale = None
        requests.append(Request(dut, reference, low, standard, scale))
        used.append(standard)
    return list(zip(compare_many(requests), used))


# -------------------------------------------------------------------------------- watch

@dataclasses.dataclass
class Watch:
    """What :func:`watch` saw around one DUT call.

    Attributes:
        fallback: ops the DUT ran on the host CPU (:class:`harness.fallback.Capture`).
        aten_ops: per phase, the aten packet names dispatched (Note [Aten ops of a record]).
        phase: the phase dispatches are noted under now (``fwd`` / ``bwd``), or None
            while the harness's own plumbing runs (input copies, cotangents): a pipeline
            sets it around the op call and around the backward call only, so every
            pipeline names the same ops for the same computation.
    """

    fallback: fallback.Capture = dataclasses.field(default_factory=fallback.Capture)
    aten_ops: dict[str, set] = dataclasses.field(
        default_factory=lambda: {"fwd": set(), "bwd": set()})
    phase: Optional[str] = "fwd"

    def info(self) -> dict:
        """``{"fwd": [...], "bwd": [...]}`` sorted, for ``info["aten_ops"]``."""
        return {phase: sorted(names) for phase, names in self.aten_ops.items()}


class _AtenOps(TorchDispatchMode):
    """Notes the aten packet of every dispatch into a :class:`Watch`, under its phase.

    One class for every noting run, not one per run: torch 2.13 (not 2.8 or older) wraps each
    dispatch mode class's ``__torch_dispatch__`` in a Dynamo-disabling function when the
    class is made, and a class made per case paid that per case. The mode only notes a
    name and calls the op, and noting runs are eager, so there is no frame in it for
    Dynamo to skip: ``_should_skip_dynamo`` (the opt-out its docstring shows) says so,
    and each of the ~40,000 dispatches of a default run skips the wrapper's work.
    """

    def __init__(self, seen: Watch) -> None:
        super().__init__()
        self.seen = seen

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        seen = self.seen
        if seen.phase is not None:
            name = _PACKETS.get(func)
            if name is None:
                name = _PACKETS[func] = str(func.overloadpacket)
            seen.aten_ops.setdefault(seen.phase, set()).add(name)
        return func(*args, **(kwargs or {}))


_PACKETS: dict = {}
"""The aten packet name of each op overload a noting run met (``str`` of a packet is
Python in torch; ~40,000 dispatches in a default run name ~300 overloads)."""


# Note [The host CPU does not fall back to itself]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A CPU fallback is a device's op run on the host CPU; where the DUT *is* the host CPU
# there is nothing to fall back from, and nothing a CPU kernel prints says it did. Only a
# fault can (``ops.opinfo_sort_cpu_fallback`` emits torch_npu's warning). So a CPU DUT
# with no fault active (:func:`bare_cpu`) runs without the fallback capture's listeners
# (a warnings filter, a logging handler and their bookkeeping, around each measured and
# each noted run: 27,788 blocks in the op catalog, about a twentieth of the harness's
# Python there), and its Watch's capture stays empty, as the capture would leave it. With a fault active, and on every other device (SimNPU
# included), the capture listens as before; ``tests/test_op_policy.py`` checks both.


def bare_cpu(device) -> bool:
    """Whether ``device`` is the host CPU with no fault active: nothing enters its
    ``scope()`` (:func:`harness.faults.activated`) and nothing it runs can fall back to
    the CPU (Note [The host CPU does not fall back to itself])."""
    return device.type == "cpu" and not faults.active()


def _capture(device, **options):
    """:func:`harness.fallback.capture` for ``device`` (``options`` its own), or on a
    :func:`bare_cpu` an empty Capture with no listener (Note [The host CPU does not fall
    back to itself])."""
    if bare_cpu(device):
        return contextlib.nullcontext(fallback.Capture(device_type=device.type))
    return fallback.capture(device.type, **options)


@contextlib.contextmanager
def watch(device, *, into: Optional[Watch] = None) -> Iterator[Watch]:
    """Run a block as the measured DUT: inside ``device.scope()``, with the CPU-fallback
    capture's listeners (none on a :func:`bare_cpu`) and no dispatch mode of the harness
    (Note [Measured without the harness]); synchronises the device before leaving. The
    aten ops are noted by :func:`noting`, in a second execution.

    Yields a :class:`Watch` (``into``, or a new one), complete when the block exits (also
    when it raises).
    """
    seen = into if into is not None else Watch()
    with device.scope(), _capture(device, trace_known=False) as found:
        seen.fallback = found
        yield seen
        device.synchronize()


class noting:
    """``with noting(device, seen):`` runs a block again as the DUT to note its aten ops
    into ``seen`` (and the known fallback ops it dispatches into ``seen.fallback``). An
    ``Exception`` inside is swallowed: the block's results are not judged (Note [Measured
    without the harness])."""

    def __init__(self, device, seen: Watch) -> None:
        self.device, self.seen = device, seen
        self.stack = contextlib.ExitStack()
        self.found = fallback.Capture()

    def __enter__(self) -> Watch:
        with self.stack as stack:
            stack.enter_context(self.device.scope())
            self.found = stack.enter_context(_capture(self.device, stderr=False))
            stack.enter_context(_AtenOps(self.seen))
            self.stack = stack.pop_all()
        return self.seen

    def __exit__(self, kind, value, traceback) -> bool:
        try:
            if kind is None:
                self.device.synchronize()
        except Exception:  # noqa: BLE001 - the measured call's outcome is the record's
            pass
        finally:
            with contextlib.suppress(Exception):
                self.stack.__exit__(kind, value, traceback)
            measured = self.seen.fallback
            for op in self.found.ops:
                measured.add(op, self.found.sources[op])
        return kind is not None and issubclass(kind, Exception)


def run_dut(device, call: Callable[[Optional[Watch]], T], seen: Optional[Watch] = None) -> T:
    """``call(seen)`` as the DUT, measured, then again to note its aten ops (Note [Measured
    without the harness]); returns (or raises) what the measured call did.

    ``call`` receives the :class:`Watch` to set ``phase`` on (None for the measured call,
    so that it touches nothing the second call notes); it must not draw random numbers
    that the caller uses afterwards, since it runs twice.
    """
    seen = seen if seen is not None else Watch(phase=None)
    try:
        with watch(device, into=seen):
            result = call(None)
    except Exception:
        with noting(device, seen):
            call(seen)
        raise
    with noting(device, seen):
        call(seen)
    return result
