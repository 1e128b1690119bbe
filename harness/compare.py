"""Numeric metrics and precision standards -> a verdict per output tensor.

:func:`compare_outputs` takes the DUT's output (in the DUT's dtype, on any device), the
*reference* (the same computation on the CPU in a higher precision: fp16/bf16 -> fp32,
fp32 -> fp64) and, optionally, the *low-precision reference* (CPU in the DUT's dtype). It
measures the errors, applies one of the :data:`STANDARDS` and the :data:`FLOOR`, and
returns a :class:`Verdict`: pass/fail, the metrics, the baseline
:class:`~harness.results.Rule` per metric, and an ``assert_close``-style message.

Note [Standards as objects]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Each kind of standard is one small class holding its limits, what it applies to, where
its numbers come from, and its verdict: :class:`Exact` (bit-equality, also every integer
and bool output), :class:`Absolute` (a per-element threshold), :class:`Ulp` (matrix
products), :class:`Relative` (a ratio to the CPU's own error) and the :class:`Floor`
every float output must also meet (NaN/Inf agreement, cosine, error balance), the way
``torch.testing._comparison`` has one ``Pair`` per kind of input. A float output is
measured once (:class:`Measured`: the DUT's and the CPU's error statistics, per element
errors and magnitudes); the standard turns that into a per-element allowance and its
failures, the floor adds its own. The tables that name standards by string
(:data:`STANDARDS` here, ``OP_STANDARDS`` / ``GRAD_STANDARDS`` in
:mod:`harness.ops.policy`, a catalog row's ``standard=``) are checked when they are
built (:func:`check_table`, :func:`standard_by_name`): a misspelt name raises at import, naming
the table, the op and the allowed names, instead of silently meaning ``relative``.

Note [Precision standards]
~~~~~~~~~~~~~~~~~~~~~~~~~~
The numbers come from public anchors and are re-implemented here (no code copied):

* Ascend msprobe's API accuracy checker ("new precision standard"): the absolute
  threshold method (relative error <= 2^-10 / 2^-8 / 2^-20 for fp16 / bf16 / fp32 on
  normal values, small values judged by an absolute tolerance), the benchmark method
  (DUT error divided by the reference's own error: max relative error <= 10x, mean
  relative error <= 2x, RMSE <= 2x, small-value error <= 2x), the ULP method for
  matrix multiplication, and its small-value definitions (``small_value`` /
  ``small_value_atol``: 1e-3 / 1e-5 for fp16 and bf16, 1e-6 / 1e-9 for fp32).
* ``torch.testing.assert_close``'s per-dtype defaults (rtol, atol), used where no
  low-precision reference exists, and as the "everything is tiny" escape of the cosine
  floor.
* PyTorch Dynamo's accuracy rule (``torch._dynamo.utils.same``: the tested RMSE may be
  a fixed multiple of the low-precision reference's RMSE) is the shape of the ratio
  rules; the multiplier 2 is msprobe's.

Note [Reference error floor]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Ratio standards divide the DUT's error by the reference error. On the CPU the DUT and the
low-precision reference are the same kernels, so the ratio is 1; but where the reference
error is exactly 0 (a correctly rounded op, an exact input) any DUT rounding would be an
infinite ratio. Every denominator therefore has a floor: one machine epsilon of the DUT's
dtype for relative errors, epsilon times the reference's RMS for RMSE, and
``small_value_atol`` for small-value errors.

Note [CPU's own error]
~~~~~~~~~~~~~~~~~~~~~~
Where the CPU's kernel in the DUT's dtype itself misses an absolute bar (bf16 ``rsqrt`` is
not correctly rounded on the CPU; an fp16 gradient ``1 - tanh(x)^2`` cancels to 0 so its
cosine with the fp32 reference is 0), a DUT that does no worse than the CPU passes: the
absolute standard allows each element the larger of its threshold and the low-precision
reference's error there, and the cosine floor accepts a cosine not below the low-precision
reference's, and a NaN/Inf where the low-precision reference has the same one is not a
mismatch (an fp16 ``exp`` that overflows forward makes its gradient inf too, although the
true gradient is representable). The ULP standard likewise passes a DUT whose mean ULP
error (or share above the ULP bar) is not above twice the CPU's own in that dtype (the
2x of the benchmark method), and the ratio standards compare with the CPU by
construction. Without a low-precision reference the bars are absolute.

Note [Condition of products and reductions]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A correctly working dot product in floating point has the classic error bound
``|fl(a.b) - a.b| <= gamma_n * sum_i |a_i b_i|`` (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., sections 3.1 and 4.2; the same holds for sums with
``sum_i |x_i|``): the error is relative to the *condition* ``sum |a_i b_i|``, not to the
result ``|sum a_i b_i|``, which cancellation can make arbitrarily small. Judging an
element whose terms cancel by its own magnitude measures the input, not the kernel: two
correct kernels that sum in another order (MKL's AVX-512 and AVX2 paths, another memory
layout, an NPU's cube unit) give errors of many ULPs *of the result* there, and each one
looks wrong against the other. So for ops whose output is a sum of products (the matmul
family, convolutions and their transposes, linear reductions: ``OpEntry.condition``),
the runner also evaluates the op on the absolute values of its inputs in the up-cast
dtype (and the backward with the absolute output gradient), and passes it here as
``scale``: every relative quantity (relative errors, ULPs, the small-value split, the
error balance and the ratio floors) is then measured against ``max(|reference|, scale)``
element by element. For an op without cancellation ``scale == |reference|`` and nothing
changes. The limits themselves (64 ULP mean, 10x / 2x ratios) stay msprobe's.

Note [Error balance]
~~~~~~~~~~~~~~~~~~~~
Each element of a biased kernel can be within half an ULP while all errors have the same
sign (round-toward-zero instead of round-to-nearest, a truncated accumulator): no
per-element bar sees it, yet it shifts every sum downstream. Two indicators look for it in
fp16/bf16 outputs, both judged only against a low-precision reference (without one there
is nothing to compare with and they are recorded only):

* ``err_balance`` (msprobe's benchmark method: the mean *signed* relative error, judged
  as a ratio to the reference's) is ``|mean((dut - ref) / scale)|`` over normal values;
  it fails above 2x (msprobe's ratio) the larger of the CPU's own and the noise floor
  ``eps / sqrt(n)`` (the mean of n independent roundings of at most half an ULP is within
  a few ``eps / sqrt(12 n)`` of zero). It sees a bias of one *sign* (every error
  negative) in an elementwise op, but not a bias toward *zero*: rounding toward zero
  makes positive results smaller and negative ones larger, and the signed mean cancels.
  Nor does it see anything in a matrix product: measured against the condition
  ``sum |a_i b_i|`` (Note [Condition of products and reductions]) a half-ULP bias of the
  result is far below the floor ``eps / sqrt(n)``.
* The **sign test** counts directions, not sizes, so neither cancellation nor the
  condition hides a bias. For each normal element it notes whether the DUT's error points
  toward zero (``|dut| < |ref|``) and whether it points down (``dut < ref``), and the
  same for the CPU's kernel in the DUT's dtype on the same element. Pairing the two on
  the same element (McNemar's test: only the elements where the DUT and the CPU round
  differently count) removes everything the inputs decide: a correct kernel that only
  sums in another order rounds differently from the CPU on a few elements, as often one
  way as the other; a truncating kernel is more toward zero than the CPU on about half
  of all elements and less on none. An exact binomial test
  (``scipy.stats.binomtest``, p = 1/2) over the discordant elements gives the p-value
  ``sign_test_p`` (the smaller of the two senses). The output fails when, in one sense,
  (a) ``p < 1e-6`` (chance alone: about one false alarm in a million outputs),
  (b) the excess ``(more - less) / n`` is at least 5% of the normal elements (so a huge
  tensor does not fail over a bias too small to matter), and (c) the DUT's own share
  (``toward_zero_share``, ``below_share``: of its non-zero errors, the share pointing
  that way) is farther from 1/2 than the CPU's (``ref_toward_zero_share``...): a DUT
  that is *less* biased than a biased CPU kernel passes. Rounding to nearest has every
  share near 1/2; truncation has ``toward_zero_share`` 1. Small tensors cannot show a
  bias (p < 1e-6 needs at least 21 discordant elements, all one way): the catalog's
  ``typical`` samples have hundreds.

Both compare with the CPU's kernel in the same dtype, which on the CPU itself is the DUT:
there they pass by construction, and what they catch is proved by faults
(``ops.*_truncate_lowp`` in :mod:`harness.faults.catalog.ops`). The measurements behind the
limits are in docs/standards.md.

Note [Non-finite values]
~~~~~~~~~~~~~~~~~~~~~~~~
The DUT may produce NaN/Inf exactly where the reference *rounded to the DUT's dtype*
does (or where the CPU in the DUT's dtype does, Note [CPU's own error]) (an fp16 ``exp(12)`` is inf although the fp32 reference is finite), with the same
sign for infinities; anywhere else a non-finite value, or a finite value where the
reference has NaN/Inf, is a mismatch and fails every standard. Errors are measured over
the positions where both are finite.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Mapping, Optional

import torch

from harness import dtypes, standard_limits
from harness.results import Rule, higher, lower

__all__ = ["STANDARDS", "FLOOR", "DTYPE_LIMITS", "Standard", "Exact", "Absolute", "Ulp",
           "Relative", "Floor", "Measured", "DtypeLimits", "Verdict", "check_table",
           "compare_outputs", "compare_many", "Request", "standard_by_name", "ulp",
           "INTEGER_RESULTS", "integer_result_dtype"]


@dataclasses.dataclass(frozen=True)
class DtypeLimits:
    """Per-dtype numbers (Note [Precision standards])."""

    abs_rtol: float          # absolute standard: relative error on normal values
    small_value: float       # |reference| below this is a "small value" (msprobe)
    small_value_atol: float  # absolute tolerance for small values (msprobe)
    rtol: float              # torch.testing.assert_close default
    atol: float              # torch.testing.assert_close default
    mantissa_bits: int       # for ULPs
    min_exponent: int        # exponent of the smallest normal (ULP floor)


DTYPE_LIMITS: dict[torch.dtype, DtypeLimits] = {
    torch.float16: DtypeLimits(2**-10, 1e-3, 1e-5, 1e-3, 1e-5, 10, -14),
    torch.bfloat16: DtypeLimits(2**-8, 1e-3, 1e-5, 1.6e-2, 1e-5, 7, -126),
    torch.float32: DtypeLimits(2**-20, 1e-6, 1e-9, 1.3e-6, 1e-5, 23, -126),
    torch.float64: DtypeLimits(2**-40, 1e-15, 1e-18, 1e-7, 1e-7, 52, -1022),
}

LOW_PRECISION = (torch.float16, torch.bfloat16)
"""Dtypes whose outputs are one rounding of a wider accumulator: the error balance
(Note [Error balance]) is judged for these."""


@dataclasses.dataclass
class Verdict:
    """The outcome of comparing one output tensor.

    Attributes:
        passed: whether the standard (and the floor) holds.
        metrics: plain floats: ``max_abs_err``, ``max_rel_err``, ``mean_rel_err``,
            ``rmse``, ``cosine``, ``err_balance``, ``ulp_mean``, ``ulp_max``,
            ``ulp_gt1_share``, ``small_abs_err``, ``nan_inf_mismatch``, ``mismatched``,
            ``numel``; with a low-precision reference also ``ref_*`` versions and the
            ``*_ratio`` the relative standard judges; for fp16/bf16 the sign test's
            ``toward_zero_share``, ``below_share`` (and with a low-precision reference
            their ``ref_*`` and ``sign_test_p``; Note [Error balance]).
        rules: baseline rules per metric, so a drift that still passes is caught.
        message: empty when passed; else what mismatched, the worst element, the
            standard and its limit.
    """

    passed: bool
    metrics: dict[str, float]
    rules: dict[str, Rule]
    message: str = ""


# ------------------------------------------------------------------------- helpers

def ulp(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The unit in the last place of ``dtype`` at each (float64) reference value."""
    limits = DTYPE_LIMITS[dtype]
    _, exponent = torch.frexp(reference)  # |x| = m * 2**e, 0.5 <= m < 1
    exponent = torch.where(torch.eq(reference, 0), limits.min_exponent, torch.sub(exponent, 1))
    exponent = exponent.clamp_min(limits.min_exponent)
    return torch.ldexp(torch.ones_like(reference), torch.sub(exponent, limits.mantissa_bits))


# Note [A low equal to the DUT is the DUT]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A low-precision reference bitwise equal to the DUT's output (the CPU's own run handed in
# as a separate tensor: the OpInfo sweep's, a fault that leaves this op alone, a device
# whose kernel rounds as the CPU's does) is judged as the DUT's tensor itself (Note [A CPU
# DUT is its own low] in harness/ops/runner.py): its errors are the DUT's, measured in one
# row. Measured as a second row of the same statistics, it once gave the same op other
# metrics in the catalog than in the sweep: the float64 dot product behind the cosine was
# BLAS's gemv, whose summation order over two rows differs from one row's on some CPUs
# (AMD Zen 5 with AVX-512: the CPU's own cosine of an exp in float16 came out
# 0.9999999973506346 in one row, 0.999999997350635 in two). The sums are per-row
# segment reductions now (Note [Statistics in one pass of torch]), and one row is still
# half the work. Equal bits, NaN payloads included, are the test: equal values with
# another NaN or signed zero are not the same output.

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold the same bits: dtype, shape and every element."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    as_int = _SAME_SIZE_INT[a.element_size()]
    return torch.equal(a.view(as_int), b.view(as_int))


def nonfinite_classes(values: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +inf, 3 -inf (Note [Non-finite values])."""
    nan = torch.isnan(values).to(torch.int8)
    inf = torch.isinf(values).to(torch.int8)
    return nan + inf * torch.where(values > 0, 2, 3).to(torch.int8)


# Note [Statistics in one pass of torch]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A default run compares ~16,000 outputs, most of them small, so the cost of a comparison
# is its count of torch calls and of reads back to Python, not its arithmetic. So the
# statistics of every float output of one dtype that a caller hands in together
# (:func:`compare_many`: the catalog hands in every sample of one op and dtype, Note
# [Outputs measured together]) are computed in one pass: the outputs' positions are
# concatenated, each statistic is a reduction per output (``torch.segment_reduce`` over
# the outputs' lengths), the sums in one call and the maxima in another, read back with
# one ``tolist()``; an output longer than LONG_OUTPUT is measured alone, each statistic
# by torch's own reduction (its threads, and no copy of the positions into one table: a
# segment is summed by one thread, which made the slow catalog cases 2.2 times slower).
# Masked statistics are reductions of ``torch.where`` tensors (boolean indexing copies
# and synchronises), and an output without NaN/Inf skips classifying them.
# The DUT's error and the CPU's own error in the same dtype are two rows of the same pass,
# or one where the CPU's run is the DUT's own (Note [A CPU DUT is its own low] in
# :mod:`harness.ops.runner`). A segment's sum is accumulated from its first position to
# its last whatever else is in the pass, and how an output is reduced depends on its
# length alone, so an output's statistics do not depend on what it was measured with
# (tests/test_compare.py checks it bit for bit).
#
# In these hot paths tensor arithmetic is written as torch's functions (``torch.sub(x,
# r)``, ``torch.gt``), not operators: a profiler (cProfile, which
# scripts/default_run_speed.py uses to find the harness's share of a run) charges the
# kernel behind an operator (``x - r``) to the Python function that wrote it, so only
# with the functions does the profile tell the harness's own Python from torch's work.

_EMPTY_ERRORS = {"max_abs_err": 0.0, "max_rel_err": 0.0, "mean_rel_err": 0.0, "rmse": 0.0,
                 "err_balance": 0.0, "small_abs_err": 0.0, "cosine": 1.0}
_EMPTY_ULPS = {"ulp_mean": 0.0, "ulp_max": 0.0, "ulp_gt1_share": 0.0, "ulp_gt32_share": 0.0}


@dataclasses.dataclass
class Errors:
    """What :func:`_errors` measured of one output (one segment of the pass).

    Attributes:
        rows: the error statistics of each row (the DUT's; then the CPU's own, if measured).
        normal_count: the positions where the magnitude is not small.
        mag_norm, mag_max: the magnitude's Euclidean norm and its largest value.
        signs: the sign test's counts (Note [Error balance]), each a pair over
            :data:`SENSES`: per row its errors pointing that way (``positive``) and its
            non-zero errors (``nonzero``); with two rows the elements where the first
            row's direction is above the second's (``more``), below it (``less``), and
            the elements compared (``kept``: normal, the second row finite). None
            unless asked for.
    """

    rows: list[dict[str, float]]
    normal_count: int
    mag_norm: float
    mag_max: float
    signs: Optional[dict] = None


@functools.lru_cache(maxsize=4096)
def _lengths(lengths: tuple[int, ...], rows: int) -> torch.Tensor:
    """``lengths`` for each of ``rows`` rows (``torch.segment_reduce``'s argument): a few
    hundred shapes recur all run long, and a small tensor costs more to make than to use."""
    return torch.tensor([lengths] * rows)


LONG_OUTPUT = 1 << 16
"""An output longer than this is measured alone, by torch's own reductions (Note
[Statistics in one pass of torch])."""


def _reduced(blocks: list[torch.Tensor], how: str, lengths: list[int]) -> torch.Tensor:
    """Each block's rows (any leading shape; the positions last) summed (``how`` "sum")
    or maximised ("max", every value >= 0) per output: ``(rows, len(lengths))``."""
    total = blocks[0].shape[-1]
    if len(lengths) == 1 and total > LONG_OUTPUT:  # one long output: no copy, torch's threads
        return torch.cat([(torch.sum(b, -1) if how == "sum" else torch.amax(b, -1)).reshape(-1, 1)
                          for b in blocks]).double()
    flat = torch.cat([b.reshape(-1, total) for b in blocks])
    # the lengths add up to `total` by construction: unsafe skips that check
    return torch.segment_reduce(flat, how, lengths=_lengths(tuple(lengths), flat.shape[0]),
                                axis=1, unsafe=True, initial=0.0)


def _errors(x: torch.Tensor, r: torch.Tensor, mag: torch.Tensor, lengths: list[int],
            limits: DtypeLimits, dtype: torch.dtype, want_ulp: bool, signs: bool = False
            ) -> tuple[list[Errors], torch.Tensor, torch.Tensor]:
    """Error statistics of each row of ``x`` (float64, ``(rows, N)``) against finite ``r``
    (``(N,)``), per output: the positions are ``len(lengths)`` outputs one after the
    other (Note [Statistics in one pass of torch]). Returns one :class:`Errors` per output,
    the rows' ``|x - r|`` and where the magnitude is small (``< limits.small_value``).

    ``mag`` is the magnitude relative quantities are measured against: ``|r|``, or the
    condition's (Note [Condition of products and reductions]). ``signs`` adds the sign
    test's counts (:attr:`Errors.signs`). The first row is finite; an output whose second
    row is not has no statistics of that row, only its sign counts where it is finite.
    """
    rows, total = x.shape
    diff = torch.sub(x, r)
    err = torch.abs(diff)
    small = torch.lt(mag, limits.small_value)
    if total == 0:
        return [_no_errors(rows, want_ulp, signs) for _ in lengths], err, small
    signed = torch.where(small, 0.0, torch.div(diff, mag))
    rel = torch.abs(signed)
    sums = [rel, torch.mul(diff, diff), signed, torch.mul(x, x), torch.mul(x, r)]
    maxima = [err, rel, torch.where(small, err, 0.0)]
    if want_ulp:
        ulps = torch.div(err, ulp(mag, dtype))
        sums += [ulps, torch.gt(ulps, 1), torch.gt(ulps, 32)]
        maxima.append(ulps)
    # the table's rows: per row of x len(sums) * rows sums, then r's squares, the
    # magnitude's and the small count, then the sign test's counts; then the maxima
    shared = len(sums) * rows
    sums += [torch.mul(r, r), torch.mul(mag, mag), small]
    if signs:  # Note [Error balance]: directions of the normal elements, SENSES x rows
        normal = torch.logical_not(small)
        kept = torch.logical_and(torch.isfinite(x[1]), normal) if rows == 2 else None
        where = normal.unsqueeze(0) if kept is None else torch.stack([normal, kept])
        dirs = torch.sign(torch.stack([torch.sub(torch.abs(r), torch.abs(x)), torch.sub(r, x)]))
        sums += [torch.logical_and(torch.gt(dirs, 0), where),
                 torch.logical_and(torch.ne(dirs, 0), where)]
        if kept is not None:
            sums += [torch.logical_and(torch.gt(dirs[:, 0], dirs[:, 1]), kept),
                     torch.logical_and(torch.lt(dirs[:, 0], dirs[:, 1]), kept), kept]
    maxima.append(mag)
    top = sum(t.numel() // total for t in sums)  # the first row of maxima
    table = torch.cat([_reduced(sums, "sum", lengths),
                       _reduced(maxima, "max", lengths)]).tolist()  # every value is >= 0
    first_sign = shared + 3  # the sign test's counts: 2 * SENSES * rows, then 5
    found = []
    for j, n in enumerate(lengths):
        if n == 0:
            found.append(_no_errors(rows, want_ulp, signs))
            continue
        nr = math.sqrt(table[shared][j])
        normal_count = n - int(table[shared + 2][j])
        normal = max(normal_count, 1)
        per_row = []
        for row in range(rows):
            rel_sum, squares, signed_sum, xx, dot = (table[s * rows + row][j] for s in range(5))
            max_abs, max_rel, small_abs = (table[top + s * rows + row][j] for s in range(3))
            nx = math.sqrt(xx)
            out = {"max_abs_err": max_abs,
                   "max_rel_err": max_rel if normal_count else 0.0,
                   "mean_rel_err": rel_sum / normal if normal_count else 0.0,
                   "rmse": math.sqrt(squares / n),
                   "err_balance": abs(signed_sum / normal) if normal_count else 0.0,
                   "small_abs_err": small_abs if normal_count < n else 0.0}
            if nx == 0.0 and nr == 0.0:
                out["cosine"] = 1.0
            elif nx == 0.0 or nr == 0.0:
                out["cosine"] = 0.0
            else:
                out["cosine"] = min(1.0, dot / (nx * nr))
            if want_ulp:
                ulp_sum, gt1, gt32 = (table[s * rows + row][j] for s in range(5, 8))
                out.update(ulp_mean=ulp_sum / n, ulp_max=table[top + 3 * rows + row][j],
                           ulp_gt1_share=gt1 / n, ulp_gt32_share=gt32 / n)
            per_row.append(out)
        found.append(Errors(per_row, normal_count, math.sqrt(table[shared + 1][j]),
                            table[-1][j], _signs(table, first_sign, rows, j) if signs else None))
    return found, err, small


def _no_errors(rows: int, want_ulp: bool, signs: bool) -> Errors:
    """:class:`Errors` of an output without elements."""
    empty = {**_EMPTY_ERRORS, **(_EMPTY_ULPS if want_ulp else {})}
    counts = None
    if signs:
        counts = {"positive": [[0, 0] for _ in range(rows)],
                  "nonzero": [[0, 0] for _ in range(rows)]}
        if rows == 2:
            counts.update(more=[0, 0], less=[0, 0], kept=0)
    return Errors([dict(empty) for _ in range(rows)], 0, 0.0, 0.0, counts)


def _signs(table: list[list[float]], first: int, rows: int, j: int) -> dict:
    """:attr:`Errors.signs` of segment ``j``, read from the pass's ``table`` (counts are
    sums of booleans, exact in float64)."""
    def pair(row: int) -> list[int]:
        return [int(table[row][j]), int(table[row + rows][j])]  # the senses are rows apart

    found = {"positive": [pair(first + row) for row in range(rows)],
             "nonzero": [pair(first + 2 * rows + row) for row in range(rows)]}
    if rows == 2:
        more = first + 4 * rows
        found.update(more=[int(table[more][j]), int(table[more + 1][j])],
                     less=[int(table[more + 2][j]), int(table[more + 3][j])],
                     kept=int(table[more + 4][j]))
    return found


def _fmt(value: float) -> str:
    return f"{value:.6g}"


def _index(flat: int, shape: torch.Size) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return tuple(reversed(index))


def _dtype_name(dtype: torch.dtype) -> str:
    return dtypes.name(dtype)


# ---------------------------------------------------------------------- measurement

@dataclasses.dataclass
class Measured:
    """One float output measured against its references, once, for every judge.

    Tensors are float64 and 1-D over the positions where the DUT and the reference are
    both finite (Note [Non-finite values]).

    Attributes:
        dtype, limits, eps: the DUT's dtype, its :class:`DtypeLimits`, its epsilon.
        dut, ref: the DUT's and the reference's values.
        low: the CPU's kernel in the DUT's dtype there (NaN where it is not finite), or
            None without a low-precision reference.
        mag: what relative quantities are measured against: ``|ref|``, or
            ``max(|ref|, scale)`` for sums of products (Note [Condition of products and
            reductions]).
        err: ``|dut - ref|``.
        small: ``mag < small_value`` (msprobe's small values).
        normal_count: the positions where ``small`` is false.
        m: the DUT's error statistics (:func:`_errors`).
        ref_m: the CPU's own error statistics in the DUT's dtype, or None.
        low_err: the CPU's own error per element (0 where it is not finite), or None.
        rms_ref: the RMS of ``mag``.
        mag_max: the largest value of ``mag`` (0 where there is none).
        signs: the sign test's counts for fp16/bf16 (Note [Error balance]), pairs over
            :data:`SENSES`: the DUT's errors pointing that way (``positive``) and its
            non-zero ones (``nonzero``); with a low-precision reference the CPU's
            (``cpu_positive``, ``cpu_nonzero``), the elements where the DUT's direction
            is above the CPU's (``more``) or below (``less``) and the count compared
            (``kept``). None for other dtypes.
        conditioned: whether ``mag`` includes a condition ``scale``.
        nan_inf: the count of NaN/Inf positions that disagree.
        metrics: what the verdict reports; judges add their own.
    """

    dtype: torch.dtype
    limits: DtypeLimits
    eps: float
    dut: torch.Tensor
    ref: torch.Tensor
    low: Optional[torch.Tensor]
    mag: torch.Tensor
    err: torch.Tensor
    small: torch.Tensor
    normal_count: int
    m: dict[str, float]
    ref_m: Optional[dict[str, float]]
    low_err: Optional[torch.Tensor]
    rms_ref: float
    mag_max: float
    conditioned: bool
    nan_inf: int
    metrics: dict[str, float]
    signs: Optional[dict] = None


@dataclasses.dataclass
class Judgement:
    """What a standard makes of a :class:`Measured` output.

    Attributes:
        allowance: the largest error each element may have (a mismatch beyond it).
        described: the standard's rule in words, for the message.
        failures: the standard's own failed criteria, each a sentence.
        mismatches_fail: whether one element beyond its allowance fails the output
            (per-element standards); else the mismatch count is reported only.
    """

    allowance: torch.Tensor
    described: str
    failures: list[str]
    mismatches_fail: bool


_EPS = {dtype: torch.finfo(dtype).eps for dtype in DTYPE_LIMITS}
_NONE_MORE = lower(1.0, 0.0)
"""A count that may not grow from zero (mismatches, NaN/Inf disagreements)."""
_COSINE = higher(1.0, 1e-3)


@functools.cache
def _within_eps(eps: float) -> Rule:
    """``lower(2.0, eps)``, one per dtype (rules are frozen and shared, as JSON reads them)."""
    return lower(2.0, eps)


# ------------------------------------------------------------------------ standards

@dataclasses.dataclass(frozen=True)
class Standard:
    """One kind of precision standard: what it applies to, its limits, their source and
    its verdict (Note [Standards as objects]). Subclasses implement :meth:`judge`."""

    name: str
    applies_to: str
    limits: dict
    source: str

    wants_ulp = False
    """Whether the ULP statistics are measured for it."""

    def judge(self, out: Measured) -> Judgement:
        """The per-element allowance and the failures of one float output."""
        raise NotImplementedError(f"{type(self).__name__} judges no float output")

    def rules(self, metrics: dict[str, float], out: Measured) -> dict[str, Rule]:
        """Baseline rules: an error metric may not double (above a floor of one epsilon)."""
        eps = out.eps
        scale = max(out.mag_max, 1e-30)
        within_eps = _within_eps(eps)
        rules = {"max_abs_err": lower(2.0, eps * scale),
                 "max_rel_err": within_eps,
                 "mean_rel_err": within_eps,
                 "rmse": lower(2.0, eps * max(out.rms_ref, 1e-30)),
                 "cosine": _COSINE,
                 "nan_inf_mismatch": _NONE_MORE}
        return {k: v for k, v in rules.items() if k in metrics}


@dataclasses.dataclass(frozen=True)
class Exact(Standard):
    """Bit-equality; every integer and bool output is judged by it whatever was asked."""

    def verdict(self, dut: torch.Tensor, ref: torch.Tensor, asked: str) -> Verdict:
        """``dut`` against ``ref`` element by element (NaN equals NaN)."""
        numel = dut.numel()
        if dut.dtype == ref.dtype and torch.equal(dut, ref):  # the usual: every value equal,
            # none NaN (torch.equal holds NaN unequal), so nothing to count or classify
            return Verdict(True, {"mismatched": 0.0, "nan_inf_mismatch": 0.0,
                                  "numel": float(numel)},
                           {"mismatched": _NONE_MORE, "nan_inf_mismatch": _NONE_MORE}, "")
        if dut.is_floating_point() or ref.is_floating_point():
            d, r = dut.double(), ref.double()
            if numel and bool(torch.isfinite(torch.add(d.sum(), r.sum()))):
                same = torch.eq(d, r)  # a float64 sum is finite only if every value is
                nan_inf = 0
            else:
                same = torch.logical_or(torch.eq(d, r), torch.logical_and(torch.isnan(d),
                                                                           torch.isnan(r)))
                nan_inf = int(torch.ne(nonfinite_classes(d), nonfinite_classes(r)).sum()) \
                    if numel else 0
        else:
            d, r = dut.to(torch.int64), ref.to(torch.int64)
            same = d == r
            nan_inf = 0
        if dut.dtype != ref.dtype and not (dut.is_floating_point() or ref.is_floating_point()):
            return Verdict(False, {"numel": float(numel), "dtype_mismatch": 1.0},
                           {"dtype_mismatch": _NONE_MORE}, integer_result_message(dut, ref))
        bad = ~same.reshape(-1)
        mismatched = int(bad.sum()) if numel else 0
        metrics = {"mismatched": float(mismatched), "nan_inf_mismatch": float(nan_inf),
                   "numel": float(numel)}
        rules = {"mismatched": _NONE_MORE, "nan_inf_mismatch": _NONE_MORE}
        if not mismatched:
            return Verdict(True, metrics, rules, "")
        first = int(bad.nonzero()[0, 0])
        where = _index(first, dut.shape)
        msg = (f"Values are not equal under standard 'exact' ({_dtype_name(dut.dtype)})!\n"
               f"Mismatched elements: {mismatched} / {numel} "
               f"({100.0 * mismatched / numel:.3g}%)\n"
               f"First mismatch at index {where}: dut {d.reshape(-1)[first].item()!r} vs "
               f"reference {r.reshape(-1)[first].item()!r}\n"
               f"Standard 'exact' allows no mismatched element (bit-equal; ties documented)")
        if asked != self.name:
            msg += f" (integer/bool outputs are always exact; {asked!r} was asked)"
        return Verdict(False, metrics, rules, msg)


# Note [Integer promotion and accumulation]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An integer or bool result is exact, and of the dtype torch documents: ``sum``, ``prod``,
# ``cumsum``, ``cumprod`` (and ``nansum``) of an integer or bool tensor accumulate and
# return int64 unless ``dtype=`` says otherwise ("If dtype is not specified ... integral
# inputs are promoted to int64", torch.sum's documentation); elementwise integer
# arithmetic returns the promoted input dtype and wraps (two's complement) on overflow;
# comparisons return bool; argmax/argmin return int64. A kernel that accumulates in the
# input's width overflows where torch does not, and one that returns another width fails
# the dtype check even where its values agree. INTEGER_RESULTS is that rule as data;
# tests/test_standards.py checks the CPU follows it on every integer dtype.
INTEGER_RESULTS: dict[str, str] = {
    "sum": "int64", "nansum": "int64", "prod": "int64", "cumsum": "int64", "cumprod": "int64",
    "argmax": "int64", "argmin": "int64", "count_nonzero": "int64",
    "eq": "bool", "ne": "bool", "lt": "bool", "le": "bool", "gt": "bool", "ge": "bool",
    "add": "promoted", "sub": "promoted", "mul": "promoted", "maximum": "promoted",
    "minimum": "promoted", "amax": "input", "amin": "input", "abs": "input", "neg": "input",
}
"""Op -> the dtype of its result for integer/bool inputs without ``dtype=``: ``int64``,
``bool``, ``input`` (the input's), ``promoted`` (``torch.result_type`` of the inputs)."""


def integer_result_dtype(op: str, *inputs: torch.Tensor) -> Optional[torch.dtype]:
    """The documented result dtype of ``op`` on integer/bool ``inputs`` (None: no rule)."""
    rule = INTEGER_RESULTS.get(op)
    if rule is None or not inputs:
        return None
    if rule in ("int64", "bool"):
        return getattr(torch, rule)
    if rule == "input":
        return inputs[0].dtype
    out = inputs[0].dtype
    for other in inputs[1:]:
        out = torch.promote_types(out, other.dtype)
    return out


def integer_result_message(dut: torch.Tensor, ref: torch.Tensor) -> str:
    return (f"Result dtype differs under standard 'exact': dut {_dtype_name(dut.dtype)} vs "
            f"reference {_dtype_name(ref.dtype)}; torch's promotion and accumulation rules "
            f"fix an integer result's dtype (Note [Integer promotion and accumulation] in "
            f"harness.compare; sum/cumsum/prod of integers accumulate in int64)")


@dataclasses.dataclass(frozen=True)
class Absolute(Standard):
    """msprobe's absolute threshold: each element within a relative error of its
    dtype's ``abs_rtol`` (an absolute ``small_value_atol`` for small values), or no worse
    than the CPU in the same dtype there (Note [CPU's own error])."""

    def judge(self, out: Measured) -> Judgement:
        limits = out.limits
        allowance = torch.where(out.small, limits.small_value_atol,
                                torch.mul(out.mag, limits.abs_rtol))
        described = (f"relative error <= {_fmt(limits.abs_rtol)} where |reference| >= "
                     f"{_fmt(limits.small_value)}, else absolute error <= "
                     f"{_fmt(limits.small_value_atol)}")
        if out.low_err is not None:  # Note [CPU's own error]
            allowance = torch.maximum(allowance, out.low_err)
            described += "; or no worse than the CPU in the same dtype"
        return Judgement(allowance, described, [], mismatches_fail=True)


@dataclasses.dataclass(frozen=True)
class Ulp(Standard):
    """msprobe's ULP method for matrix products: fp16/bf16 by the share of elements above
    one ULP, fp32 by the mean ULP error (or the share above 32 ULP); each also passes no
    worse than the CPU's own (Note [CPU's own error]), and a conditioned output's RMSE is
    judged against the CPU's too (Note [Condition of products and reductions])."""

    wants_ulp = True

    def judge(self, out: Measured) -> Judgement:
        std, m, ref_m, dtype = self.limits, out.m, out.ref_m, out.dtype
        failures: list[str] = []
        low = dtype in LOW_PRECISION
        allowance = torch.mul(ulp(out.mag, dtype), 1.0 if low else 32.0)
        if out.low_err is not None:  # Note [CPU's own error]
            allowance = torch.maximum(allowance, out.low_err)
        if low:
            share = m["ulp_gt1_share"]
            ref_share = ref_m["ulp_gt1_share"] if ref_m else None
            ok = share <= std["lowp_gt1_share"] or (ref_share is not None and share <= ref_share)
            described = (f"share of elements > 1 ULP <= {std['lowp_gt1_share']:g} or not above "
                         "the CPU reference's share")
            if not ok:
                failures.append(f"ulp_gt1_share {_fmt(share)} > {std['lowp_gt1_share']:g}"
                                + (f" and > the CPU reference's {_fmt(ref_share)}"
                                   if ref_share is not None else ""))
        else:
            ok = m["ulp_mean"] < std["fp32_ulp_mean"] or m["ulp_gt32_share"] < std["fp32_gt32_share"]
            cpu_ratio = std["cpu_ratio"]
            if ref_m is not None:  # Note [CPU's own error]
                ok = ok or m["ulp_mean"] <= cpu_ratio * max(ref_m["ulp_mean"], 1.0)
            described = (f"mean ULP error < {std['fp32_ulp_mean']:g} or share of elements > 32 "
                         f"ULP < {std['fp32_gt32_share']:g}"
                         + (f", or mean ULP error not above {cpu_ratio:g}x the CPU's own in "
                            "the same dtype" if ref_m is not None else "")
                         + (" (ULPs of the condition sum |a_i b_i|)" if out.conditioned else ""))
            if not ok:
                failures.append(f"ulp_mean {_fmt(m['ulp_mean'])} >= {std['fp32_ulp_mean']:g} and "
                                f"ulp_gt32_share {_fmt(m['ulp_gt32_share'])} >= "
                                f"{std['fp32_gt32_share']:g}"
                                + (f" (the CPU's own: ulp_mean {_fmt(ref_m['ulp_mean'])}, "
                                   f"ulp_gt32_share {_fmt(ref_m['ulp_gt32_share'])})"
                                   if ref_m is not None else ""))
        if out.conditioned:  # Note [Condition of products and reductions]
            ratio_limit = std["rmse_ratio"]
            floor = out.eps * max(out.rms_ref, 1e-30)
            ratio = m["rmse"] / max(ref_m["rmse"] if ref_m else 0.0, floor)
            out.metrics["rmse_ratio"] = ratio
            described += (f"; and RMSE <= {ratio_limit:g}x max(the CPU's own, eps x RMS of the "
                          "condition)")
            if ratio > ratio_limit:
                failures.append(f"rmse {_fmt(m['rmse'])} is {ratio:.3g}x max(the CPU's own "
                                f"{_fmt(ref_m['rmse']) if ref_m else 'n/a'}, floor "
                                f"{_fmt(floor)}) (limit {ratio_limit:g}x)")
        return Judgement(allowance, described, failures, mismatches_fail=False)

    def rules(self, metrics: dict[str, float], out: Measured) -> dict[str, Rule]:
        rules = super().rules(metrics, out)
        if "ulp_mean" in metrics:
            rules["ulp_mean"] = lower(2.0, 1.0)
        return rules


@dataclasses.dataclass(frozen=True)
class Relative(Standard):
    """msprobe's benchmark method: each error statistic of the DUT at most a multiple of
    the CPU's own in the same dtype (with the floors of Note [Reference error floor]);
    without a low-precision reference, ``torch.testing.assert_close``'s defaults."""

    def judge(self, out: Measured) -> Judgement:
        limits, m, ref_m, eps = out.limits, out.m, out.ref_m, out.eps
        if ref_m is None:  # assert_close's defaults
            allowance = torch.add(torch.mul(out.mag, limits.rtol), limits.atol)
            described = (f"no low-precision reference: |dut - ref| <= atol + rtol * |ref| "
                         f"(assert_close defaults rtol {limits.rtol:g}, atol {limits.atol:g})")
            return Judgement(allowance, described, [], mismatches_fail=True)
        std = self.limits
        failures: list[str] = []
        floors = {"max_rel_err": eps, "mean_rel_err": eps,
                  "rmse": eps * max(out.rms_ref, 1e-30), "small_abs_err": limits.small_value_atol}
        for key, limit in std.items():
            ratio = m[key] / max(ref_m[key], floors[key])
            out.metrics[f"{key}_ratio"] = ratio
            if ratio > limit:
                failures.append(f"{key} {_fmt(m[key])} is {ratio:.3g}x the reference error "
                                f"{_fmt(ref_m[key])} (floor {_fmt(floors[key])}; limit {limit:g}x)")
        max_rel_allowed = std["max_rel_err"] * max(ref_m["max_rel_err"], eps)
        small_allowed = std["small_abs_err"] * max(ref_m["small_abs_err"], limits.small_value_atol)
        allowance = torch.where(out.small, small_allowed, torch.mul(out.mag, max_rel_allowed))
        return Judgement(allowance, self.described, failures, mismatches_fail=False)

    @functools.cached_property
    def described(self) -> str:
        """The rule in words (the same for every output: written once)."""
        return ("DUT error / CPU reference error (same dtype): "
                + ", ".join(f"{k} <= {v:g}x" for k, v in self.limits.items()))


@dataclasses.dataclass(frozen=True)
class Floor:
    """What every float output must meet under every standard: NaN/Inf agreement (Note
    [Non-finite values]), a cosine similarity (msprobe's cosine indicator, simplified) and
    an unbiased error (Note [Error balance])."""

    limits: dict
    source: str

    def judge(self, out: Measured) -> list[str]:
        """The floor's failures for one float output; adds its metrics to ``out.metrics``."""
        limits, m, ref_m = out.limits, out.m, out.ref_m
        failures: list[str] = []
        if out.nan_inf:
            failures.append(f"{out.nan_inf} NaN/Inf position(s) differ from the reference's")
        if out.dtype in LOW_PRECISION:
            failures += self._balance(out)
            failures += self._sign_test(out)
        cosine = m["cosine"]
        cpu_cosine = ref_m["cosine"] if ref_m is not None else None
        if (cosine < self.limits["cosine"] and m["max_abs_err"] > limits.atol
                and (cpu_cosine is None or cosine < cpu_cosine - 1e-3)):  # Note [CPU's own error]
            failures.append(f"cosine {_fmt(cosine)} < floor {self.limits['cosine']:g}"
                            + (f" and below the CPU's own {_fmt(cpu_cosine)}"
                               if cpu_cosine is not None else ""))
        return failures

    def _balance(self, out: Measured) -> list[str]:
        """``err_balance`` against the CPU's own (Note [Error balance])."""
        m, ref_m = out.m, out.ref_m
        if ref_m is None:
            return []
        ratio_limit = self.limits["balance_ratio"]
        normal_count = out.normal_count
        noise = out.eps / math.sqrt(max(normal_count, 1))
        limit = ratio_limit * max(ref_m["err_balance"], noise)
        out.metrics["err_balance_ratio"] = m["err_balance"] / max(ref_m["err_balance"], noise)
        if normal_count and m["err_balance"] > limit:
            return [f"err_balance {_fmt(m['err_balance'])} (mean signed relative error) "
                    f"> {ratio_limit:g}x max(the CPU's own {_fmt(ref_m['err_balance'])}, noise "
                    f"floor eps/sqrt(n) {_fmt(noise)}): the errors are biased to one side"]
        return []

    def _sign_test(self, out: Measured) -> list[str]:
        """The paired sign test of the error directions (Note [Error balance]), on the
        counts the measurement made (:attr:`Measured.signs`)."""
        counts = out.signs
        for i, sense in enumerate(SENSES):
            out.metrics[f"{sense}_share"] = _share(counts["positive"][i], counts["nonzero"][i])
        if out.low is None:
            return []
        n = counts["kept"]
        alpha, min_excess = self.limits["sign_test_p"], self.limits["sign_min_excess"]
        failures, p_min = [], 1.0
        for i, sense in enumerate(SENSES):
            out.metrics[f"ref_{sense}_share"] = _share(counts["cpu_positive"][i],
                                                       counts["cpu_nonzero"][i])
            more, less = counts["more"][i], counts["less"][i]
            p = _binomial_p(more, less)
            p_min = min(p_min, p)
            excess = (more - less) / max(n, 1)
            share, ref_share = out.metrics[f"{sense}_share"], out.metrics[f"ref_{sense}_share"]
            if p < alpha and abs(excess) >= min_excess and abs(share - 0.5) > abs(ref_share - 0.5):
                words = sense.replace("_", " ")
                failures.append(
                    f"sign test: {100 * share:.3g}% of the non-zero errors point {words} (the "
                    f"CPU's own: {100 * ref_share:.3g}%); {more} element(s) more {words} than the "
                    f"CPU's kernel, {less} less (excess {_fmt(excess)} of {n} >= "
                    f"{min_excess:g}; binomial p {p:.3g} < {alpha:g}): a biased rounding")
        out.metrics["sign_test_p"] = p_min
        return failures


SENSES = ("toward_zero", "below")
"""The sign test's senses: ``sign(|ref| - |x|)`` (toward zero) and ``sign(ref - x)``."""


def _share(positive: int, nonzero: int) -> float:
    """Of the non-zero directions, the share that is +1 (0.5 when there are none)."""
    return positive / nonzero if nonzero else 0.5


def _binomial_p(more: int, less: int) -> float:
    """Two-sided exact binomial p-value of ``more`` against ``less`` at p = 1/2: at 1/2
    the distribution is symmetric, so it is twice the tail of the smaller count (what
    ``scipy.stats.binomtest`` sums pmf by pmf, in one ``cdf``)."""
    if more == less:
        return 1.0
    from scipy.stats import binom  # scipy is heavy; only a discordant output needs it

    return min(1.0, 2.0 * float(binom.cdf(min(more, less), more + less, 0.5)))


# The standards table (Note [Precision standards]); limits are data, read by the judges.
STANDARDS: dict[str, Standard] = {
    "exact": Exact(
        "exact", "integer/bool/index outputs, layout and copy ops, argmax/topk indices",
        {"mismatched": 0},
        "bit-equality (msprobe: binary consistency method)"),
    "absolute": Absolute(
        "absolute", "add, sub, mul, div, reciprocal, rsqrt, relu-like",
        # relative error on normal values per dtype, see DTYPE_LIMITS.abs_rtol
        {"mismatched": 0},
        "msprobe API accuracy checker: absolute threshold method"),
    "ulp": Ulp(
        "ulp", "matmul, mm, bmm, addmm, linear, baddbmm",
        {"lowp_gt1_share": 0.001,      # fp16/bf16: share of elements > 1 ULP
         "fp32_ulp_mean": 64.0,        # fp32: mean ULP error below this ...
         "fp32_gt32_share": 0.05,      # ... or share of elements > 32 ULP below this
         "cpu_ratio": 2.0,             # ... or mean ULP error <= 2x the CPU's own
         "rmse_ratio": 2.0},           # conditioned outputs: RMSE <= 2x the CPU's own
        "msprobe API accuracy checker: ULP error method (the 2x ratios: its benchmark "
        "method)"),
    "relative": Relative(
        "relative", "everything else (conv, norms, softmax, losses, reductions, math)",
        dict(standard_limits.RELATIVE),  # torch-free data: the report reads it too
        "msprobe API accuracy checker: benchmark method; Dynamo's RMSE-multiplier rule"),
}

FLOOR = Floor(
    {"cosine": 0.99,            # cosine similarity with the reference at least this
     "balance_ratio": 2.0,      # err_balance <= 2x max(the CPU's own, eps / sqrt(n))
     "sign_test_p": 1e-6,       # sign test: fail below this p-value ...
     "sign_min_excess": 0.05},  # ... with at least this share of elements in excess
    "msprobe API accuracy checker: cosine and error-balance indicators (simplified); the "
    "sign test: Note [Error balance]")
"""Applies to every float output under every standard (Note [Error balance])."""


def standard_by_name(name: str, *, where: str = "") -> Standard:
    """The :class:`Standard` called ``name``; a ValueError naming ``where`` it was asked
    for and the allowed names when there is none."""
    found = STANDARDS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"{where + ': ' if where else ''}unknown precision standard {name!r}; "
                         f"choose from {', '.join(STANDARDS)} (harness.compare.STANDARDS)")
    return found


def check_table(table: str, entries: Mapping[str, str]) -> None:
    """Check a table of op name -> standard name (``OP_STANDARDS``...) when it is built.

    Raises:
        ValueError: naming the table, the op and the allowed names, for a value that is no
            standard or a key that is not a plain op name (empty, padded, with a space).
    """
    for op, name in entries.items():
        if not isinstance(op, str) or not op or op != op.strip() or " " in op:
            raise ValueError(f"{table}: key {op!r} is not an op name (a catalog, OpInfo or "
                             "aten name such as 'mm' or 'nn.functional.relu')")
        standard_by_name(name, where=f"{table}[{op!r}]")


def _check_standards() -> None:
    for key, value in STANDARDS.items():
        if not isinstance(value, Standard) or value.name != key:
            raise ValueError(f"STANDARDS[{key!r}] must be a Standard named {key!r}, "
                             f"not {value!r}")


_check_standards()


# -------------------------------------------------------------------------- verdict

@dataclasses.dataclass(frozen=True)
class Request:
    """One output to judge: :func:`compare_outputs`' arguments, for :func:`compare_many`."""

    dut: torch.Tensor
    reference: torch.Tensor
    reference_lowp: Optional[torch.Tensor]
    standard: str
    scale: Optional[torch.Tensor] = None


def compare_outputs(dut: torch.Tensor, reference: torch.Tensor,
                    reference_lowp: Optional[torch.Tensor] = None, *,
                    standard: str, scale: Optional[torch.Tensor] = None) -> Verdict:
    """Judge one DUT output against its references under ``standard``.

    Args:
        dut: the DUT's output in the DUT's dtype (any device; copied to the CPU here).
        reference: the CPU computation on up-cast inputs (fp16/bf16 -> fp32,
            fp32 -> fp64).
        reference_lowp: the CPU computation in the DUT's dtype, or None. Its error against
            ``reference`` is the reference error the ``relative`` standard (and the
            fp16/bf16 ULP standard, and the error balance) compares against; without it
            the relative standard falls back to ``torch.testing.assert_close``'s defaults.
        standard: a key of :data:`STANDARDS`. Integer and bool outputs are always exact.
        scale: for sums of products, the op on the absolute values of its inputs in the
            up-cast dtype (Note [Condition of products and reductions]); relative errors
            are measured against ``max(|reference|, scale)``. None: against ``|reference|``.
    """
    return compare_many([Request(dut, reference, reference_lowp, standard, scale)])[0]


# Note [Outputs measured together]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# ``compare_many`` judges a list of outputs as ``compare_outputs`` judges each: the same
# standards, the same floor, the same verdict. What it shares is the measurement: the
# float outputs of one dtype (and one need of ULPs) are measured in one pass of torch
# (Note [Statistics in one pass of torch]), about a fifth of the torch calls per output
# when a caller hands in ten. ``compare_outputs`` is ``compare_many`` of one, so there is
# one way to judge an output, and an output's metrics are the same bits whichever outputs
# it was measured with.


@dataclasses.dataclass
class _Float:
    """A float output ready to measure (:func:`_prepare`)."""

    judge: Standard
    standard: str
    dut: torch.Tensor
    ref: torch.Tensor
    lowp: Optional[torch.Tensor]  # *is* dut where the DUT's run is the CPU's own
    mag: Optional[torch.Tensor]   # |scale| in float64, or None


def compare_many(requests: list[Request]) -> list[Verdict]:
    """:func:`compare_outputs` of each request, in order; the float outputs of one dtype
    are measured together (Note [Outputs measured together])."""
    verdicts: list[Optional[Verdict]] = [None] * len(requests)
    groups: dict[tuple, list[tuple[int, _Float]]] = {}
    for index, request in enumerate(requests):
        prepared = _prepare(request)
        if isinstance(prepared, Verdict):
            verdicts[index] = prepared
        else:
            key = (prepared.dut.dtype, prepared.judge.wants_ulp,
                   index if prepared.dut.numel() > LONG_OUTPUT else None)  # long: alone
            groups.setdefault(key, []).append((index, prepared))
    for (dtype, want_ulp, _), members in groups.items():
        items = [item for _, item in members]
        for (index, item), measured in zip(members, _measure(items, dtype, want_ulp)):
            verdicts[index] = _verdict(item, *measured)
    return verdicts


def _prepare(request: Request):
    """The request's :class:`Verdict` where no measurement is needed (a shape mismatch,
    an exact standard, a non-float output), else its :class:`_Float`."""
    judge = standard_by_name(request.standard)
    own_low = request.reference_lowp is request.dut  # Note [A CPU DUT is its own low]
    dut = request.dut.detach().cpu()
    ref = request.reference.detach().cpu()
    lowp = dut if own_low else (request.reference_lowp.detach().cpu()
                                if request.reference_lowp is not None else None)
    if lowp is not None and lowp is not dut and _same_bits(lowp, dut):
        lowp = dut  # Note [A low equal to the DUT is the DUT]
    if dut.is_complex() or ref.is_complex():
        raise TypeError("complex outputs are not supported by harness.compare; compare "
                        "torch.view_as_real() of them instead")
    if dut.shape != ref.shape:
        return Verdict(False, {"numel": float(dut.numel()), "shape_mismatch": 1.0},
                       {"shape_mismatch": _NONE_MORE},
                       f"shape mismatch: dut {tuple(dut.shape)} vs reference "
                       f"{tuple(ref.shape)} (standard {request.standard!r})")
    if not dut.is_floating_point() or isinstance(judge, Exact) or dut.dtype not in DTYPE_LIMITS:
        return STANDARDS["exact"].verdict(dut, ref, request.standard)
    mag = None
    if request.scale is not None:
        scale = request.scale.detach().cpu()
        if scale.shape != ref.shape:
            raise ValueError(f"scale has shape {tuple(scale.shape)}, the reference "
                             f"{tuple(ref.shape)}; pass the op evaluated on |inputs|")
        mag = scale.double().abs()
    return _Float(judge, request.standard, dut, ref, lowp, mag)


def _verdict(item: _Float, out: Measured, d, r, finite, nonfinite_bad) -> Verdict:
    """The verdict of one measured float output under its standard and the floor."""
    judgement = item.judge.judge(out)
    bad_count = int(torch.gt(out.err, judgement.allowance).sum())
    mismatched = bad_count + out.nan_inf
    out.metrics["mismatched"] = float(mismatched)
    failures = list(judgement.failures)
    if judgement.mismatches_fail and bad_count:
        failures.append(f"{bad_count} element(s) outside {judgement.described}")
    failures += FLOOR.judge(out)
    rules = item.judge.rules(out.metrics, out)
    if not failures:
        return Verdict(True, out.metrics, rules, "")
    return Verdict(False, out.metrics, rules,
                   _message(item.dut, d, r, finite, nonfinite_bad, out.err,
                            judgement.allowance, out.mag, item.standard, judgement.described,
                            failures, mismatched, item.dut.numel()))


@dataclasses.dataclass
class _Positions:
    """One output's flat values and which of them are compared (:func:`_measure`)."""

    d: torch.Tensor                # the DUT's values, float64, every position
    r: torch.Tensor                # the reference's
    finite: Optional[torch.Tensor]         # compared positions; None: every one
    nonfinite_bad: Optional[torch.Tensor]  # NaN/Inf disagreements; None: none possible
    nan_inf: int
    fd: torch.Tensor               # the compared positions of d, r, the low and the scale
    fr: torch.Tensor
    low: Optional[torch.Tensor]    # is fd where the CPU's own run is the DUT's
    low_finite: bool
    fscale: Optional[torch.Tensor]


def _positions(item: _Float, d, r, r_cast, lw, has_low: bool, all_finite: bool) -> _Positions:
    """Which positions of one output are compared (Note [Non-finite values]); ``lw`` is
    ``d`` where the DUT's run is the CPU's own (Note [A CPU DUT is its own low])."""
    if not all_finite:  # the usual output has no NaN/Inf anywhere: nothing to classify
        all_finite = bool(torch.isfinite(torch.cat((d, r, r_cast) if lw is None or lw is d
                                                   else (d, r, r_cast, lw)).sum()))
    if all_finite or (lw is not None and lw is not d
                      and bool(torch.isfinite(torch.cat((d, r, r_cast)).sum()))):
        finite = nonfinite_bad = None
        nan_inf = 0
        fd, fr = d, r
        fscale = item.mag.reshape(-1) if item.mag is not None else None
    else:
        dclass, rclass = nonfinite_classes(d), nonfinite_classes(r_cast)
        nonfinite_bad = dclass != rclass
        if has_low:  # Note [CPU's own error]
            nonfinite_bad &= dclass != (dclass if lw is d else nonfinite_classes(lw))
        nan_inf = int(nonfinite_bad.sum())
        finite = (dclass == 0) & (rclass == 0) & torch.isfinite(r)
        fd, fr = d[finite], r[finite]
        fscale = item.mag.reshape(-1)[finite] if item.mag is not None else None
    low, low_finite = None, False
    if has_low:
        low = fd if lw is d else (lw if nan_inf == 0 and fd is d else lw[finite])
        low_finite = low is fd or all_finite or bool(torch.isfinite(low).all())
    return _Positions(d, r, finite, nonfinite_bad, nan_inf, fd, fr, low, low_finite, fscale)


def _sign_counts(errors: Errors, two: bool, has_low: bool) -> Optional[dict]:
    """:attr:`Measured.signs` of one output from its pass (None where none were counted):
    the DUT's counts, and the CPU's and the paired ones where there is a low-precision
    reference; the CPU's are the DUT's where its run is the DUT's own."""
    if errors.signs is None:
        return None
    counts = errors.signs
    found = {"positive": counts["positive"][0], "nonzero": counts["nonzero"][0]}
    if two:
        found.update(cpu_positive=counts["positive"][1], cpu_nonzero=counts["nonzero"][1],
                     more=counts["more"], less=counts["less"], kept=counts["kept"])
    elif has_low:  # Note [A CPU DUT is its own low]: none more, none less, all kept
        found.update(cpu_positive=found["positive"], cpu_nonzero=found["nonzero"],
                     more=[0, 0], less=[0, 0], kept=errors.normal_count)
    return found


def _flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The tensors' values one after the other, in float64."""
    if len(tensors) == 1:
        return tensors[0].reshape(-1).double()
    return torch.cat([t.reshape(-1) for t in tensors]).double()


def _measure(items: list[_Float], dtype: torch.dtype, want_ulp: bool) -> list[tuple]:
    """``(Measured, d, r, finite, nonfinite_bad)`` for each float output of ``dtype``,
    measured in one pass (Note [Outputs measured together]): the statistics every judge
    reads, plus the flat tensors the message points into (``finite`` and
    ``nonfinite_bad`` None where every value is finite). An item's ``lowp`` *is* its
    ``dut`` where the DUT's run is the CPU's own (Note [A CPU DUT is its own low] in
    harness/ops/runner.py): its errors are then the DUT's, measured once, and
    ``Measured.low`` is ``Measured.dut``."""
    limits = DTYPE_LIMITS[dtype]
    sizes = [item.dut.numel() for item in items]
    has_low = [item.lowp is not None and item.lowp.shape == item.dut.shape for item in items]
    distinct = [low and item.lowp is not item.dut for low, item in zip(has_low, items)]
    d_all = _flat([item.dut for item in items])
    r_all = _flat([item.ref for item in items])
    r_cast = r_all.to(dtype).double()  # Note [Non-finite values]
    l_all = (_flat([item.lowp if dist else item.dut for dist, item in zip(distinct, items)])
             if any(distinct) else None)
    # the usual batch (a float64 sum is finite only if every value is, the CPU's too)
    all_finite = bool(torch.isfinite(torch.cat((d_all, r_all, r_cast) if l_all is None
                                               else (d_all, r_all, r_cast, l_all)).sum()))
    places, start = [], 0
    for item, size, low, dist in zip(items, sizes, has_low, distinct):
        end = start + size
        d = d_all[start:end]
        lw = (l_all[start:end] if dist else d) if low else None
        places.append(_positions(item, d, r_all[start:end], r_cast[start:end], lw, low,
                                 all_finite))
        start = end
    # the pass: the DUT's row, and the CPU's own where some output has one of its own (its
    # statistics are read only where it is finite; its sign counts where it is finite)
    second = [p.low is not None and p.low is not p.fd for p in places]
    compacted = not all_finite and any(p.fd is not p.d for p in places)
    fd = torch.cat([p.fd for p in places]) if compacted else d_all
    fr = torch.cat([p.fr for p in places]) if compacted else r_all
    rows = [fd]
    if any(second):
        rows.append(torch.cat([p.low if two else p.fd for p, two in zip(places, second)])
                    if compacted or not all(second) else l_all)
    mag = torch.abs(fr)
    if any(item.mag is not None for item in items):  # Note [Condition of products ...]
        scale = torch.cat([p.fscale if p.fscale is not None else torch.zeros_like(p.fr)
                           for p in places])
        mag = torch.maximum(mag, scale.nan_to_num(nan=0.0, posinf=0.0))
    lengths = [p.fd.numel() for p in places]
    found, errs, small = _errors(torch.stack(rows) if len(rows) > 1 else fd.unsqueeze(0),
                                 fr, mag, lengths, limits, dtype, want_ulp,
                                 signs=dtype in LOW_PRECISION)
    measured, start = [], 0
    for item, p, errors, two, size in zip(items, places, found, second, lengths):
        end = start + size
        m = errors.rows[0]
        err = errs[0, start:end]
        fmag = mag[start:end]
        ref_m = low_err = None
        low = p.low
        if two and p.low_finite:  # the usual case: the DUT's and the CPU's own error in one pass
            ref_m, low_err = errors.rows[1], errs[1, start:end]
        elif low is p.fd and low is not None:  # the DUT's own run: its errors are the CPU's
            ref_m, low_err = dict(m), err
        elif low is not None:  # the CPU's own run has NaN/Inf where the DUT has none
            lfinite = torch.isfinite(low)
            (ref_errors,), _, _ = _errors(low[lfinite].unsqueeze(0), p.fr[lfinite],
                                          fmag[lfinite], [int(lfinite.sum())], limits,
                                          dtype, want_ulp)
            ref_m = ref_errors.rows[0]
            low_err = (low - p.fr).abs().nan_to_num(nan=0.0, posinf=0.0)
            low = torch.where(lfinite, low, math.nan)
        metrics: dict[str, float] = dict(m)
        metrics["nan_inf_mismatch"] = float(p.nan_inf)
        metrics["numel"] = float(item.dut.numel())
        if ref_m is not None:
            metrics["ref_cosine"] = ref_m["cosine"]
            for key in ("max_rel_err", "mean_rel_err", "rmse", "small_abs_err", "err_balance",
                        *(("ulp_gt1_share", "ulp_gt32_share", "ulp_mean") if want_ulp else ())):
                metrics[f"ref_{key}"] = ref_m[key]
        out = Measured(dtype=dtype, limits=limits, eps=_EPS[dtype], dut=p.fd, ref=p.fr,
                       low=low, mag=fmag, err=err, small=small[start:end],
                       normal_count=errors.normal_count, m=m, ref_m=ref_m, low_err=low_err,
                       rms_ref=errors.mag_norm / math.sqrt(size) if size else 0.0,
                       mag_max=errors.mag_max, conditioned=item.mag is not None,
                       nan_inf=p.nan_inf, metrics=metrics,
                       signs=_sign_counts(errors, two, low is not None))
        measured.append((out, p.d, p.r, p.finite, p.nonfinite_bad))
        start = end
    return measured


def _message(dut, d, r, finite, nonfinite_bad, err, allowance, absr, standard,
             described, failures, mismatched, numel) -> str:
    dtype = _dtype_name(dut.dtype)
    lines = [f"Tensor-likes are not close under standard {standard!r} ({dtype})!",
             f"Mismatched elements: {mismatched} / {numel} "
             f"({100.0 * mismatched / max(numel, 1):.3g}%)"]
    if nonfinite_bad is not None and bool(nonfinite_bad.any()):
        flat = int(nonfinite_bad.nonzero()[0, 0])
        lines.append(f"First NaN/Inf disagreement at index {_index(flat, dut.shape)}: "
                     f"dut {d[flat].item()!r} vs reference {r[flat].item()!r}")
    if err.numel():
        score = err / allowance.clamp_min(1e-300)
        worst = int(score.argmax())
        flat = worst if finite is None else int(finite.nonzero()[worst, 0])
        rel = err[worst] / absr[worst] if absr[worst] > 0 else math.inf
        lines.append(f"Greatest error at index {_index(flat, dut.shape)}: dut "
                     f"{d[flat].item()!r} vs reference {r[flat].item()!r} (abs err "
                     f"{_fmt(err[worst])}, rel err {_fmt(rel)}, allowed abs err "
                     f"{_fmt(allowance[worst])})")
    lines.append(f"Standard {standard!r}: {described}")
    lines += [f"Failed: {text}" for text in failures]
    return "\n".join(lines)
