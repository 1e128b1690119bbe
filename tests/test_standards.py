"""The standards as objects (Note [Standards as objects] in harness.compare): one class per
kind, tables checked when they are built; and the sign test of the error balance (Note
[Error balance]): a GEMM rounding toward zero fails, correct kernels pass."""

import importlib.util

import pytest
import torch

from harness import compare
from harness.compare import (
    FLOOR,
    STANDARDS,
    Absolute,
    Exact,
    Relative,
    Ulp,
    check_table,
    compare_outputs,
)
from harness.faults.catalog.ops import toward_zero
from harness.ops import policy
from harness.ops.spec import OpEntry

LOW = [torch.bfloat16, torch.float16]


# ------------------------------------------------------------------ standards as objects

def test_each_kind_of_standard_is_its_own_class():
    kinds = {name: type(s) for name, s in STANDARDS.items()}
    assert kinds == {"exact": Exact, "absolute": Absolute, "ulp": Ulp, "relative": Relative}
    assert FLOOR.limits["cosine"] == 0.99 and FLOOR.limits["sign_test_p"] == 1e-6


def test_a_misspelt_standard_in_a_table_names_the_table_the_op_and_the_choices():
    with pytest.raises(ValueError) as info:
        check_table("OP_STANDARDS", {"mm": "ulp", "exp": "relatve"})
    text = str(info.value)
    assert "OP_STANDARDS['exp']" in text and "'relatve'" in text
    # every choice, in any order: a test that removes and restores a STANDARDS entry
    # (monkeypatch.delitem below) moves it to the dict's end
    choices = text.split("choose from ", 1)[1].split(" (", 1)[0].split(", ")
    assert sorted(choices) == ["absolute", "exact", "relative", "ulp"]


def test_a_key_that_is_not_an_op_name_is_refused():
    with pytest.raises(ValueError, match=r"GRAD_STANDARDS: key ' mm' is not an op name"):
        check_table("GRAD_STANDARDS", {" mm": "ulp"})


def test_the_op_policy_checks_its_tables_at_import(monkeypatch):
    """Re-executing harness/ops/policy.py with 'ulp' gone from STANDARDS fails at import,
    naming the first ulp row: the tables are checked where they are built."""
    monkeypatch.delitem(compare.STANDARDS, "ulp")
    spec = importlib.util.spec_from_file_location("policy_copy", policy.__file__)
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(ValueError, match=r"OP_STANDARDS\['linear'\]: unknown precision "
                                         r"standard 'ulp'; choose from exact, absolute, relative"):
        spec.loader.exec_module(module)


def test_every_table_row_names_a_standard():
    for table in (policy.OP_STANDARDS, policy.GRAD_STANDARDS):
        assert set(table.values()) <= set(STANDARDS)


def _names_an_op(key: str) -> bool:
    """A catalog row, an aten op, a torch / functional / Tensor callable, or a rounded-bound
    key (Note [Ties at a rounded bound])."""
    from harness.ops import BY_NAME

    if key in BY_NAME or key in {f"{op}_rounded_bound" for op in policy.ROUNDED_BOUND_OPS}:
        return True
    try:
        getattr(torch.ops.aten, key)
        return True
    except (AttributeError, RuntimeError):
        return any(hasattr(owner, key) for owner in (torch, torch.nn.functional, torch.Tensor))


@pytest.mark.parametrize("table", ["OP_STANDARDS", "GRAD_STANDARDS", "SUMS_OF_PRODUCTS"])
def test_every_table_key_names_an_op(table):
    """A misspelt key would silently never match (the op falls back to ``relative``)."""
    unknown = sorted(k for k in getattr(policy, table) if not _names_an_op(k))
    assert not unknown, f"{table} keys that name no op: {unknown}"
    assert not _names_an_op("reul")


def test_a_catalog_row_with_an_unknown_standard_is_refused():
    with pytest.raises(ValueError, match=r"OpEntry 'x' grad_standard=: unknown precision "
                                         r"standard 'ulps'"):
        OpEntry("x", torch.mm, (), grad_standard="ulps")


# ---------------------------------------------------------------- Note [Error balance]

def _gemm(dtype, seed=0, m=16, k=64, n=32):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(k, n, generator=gen).to(dtype)
    ref = a.float() @ b.float()
    scale = a.float().abs() @ b.float().abs()
    return a, b, ref, scale


@pytest.mark.parametrize("dtype", LOW)
def test_a_gemm_rounding_toward_zero_fails_though_each_element_is_within_one_ulp(dtype):
    a, b, ref, scale = _gemm(dtype)
    cpu = torch.mm(a, b)
    truncated = toward_zero(a.float() @ b.float(), dtype)
    errors = truncated.double() - ref.double()
    assert bool((errors * ref.sign() <= 0).all())  # every error toward zero ...
    assert float((errors.abs() / compare.ulp(ref.double().abs(), dtype)).max()) < 1  # < 1 ULP
    verdict = compare_outputs(truncated, ref, cpu, standard="ulp", scale=scale)
    assert not verdict.passed
    assert "sign test: 100% of the non-zero errors point toward zero" in verdict.message
    assert verdict.metrics["toward_zero_share"] == 1.0
    assert 0.4 < verdict.metrics["ref_toward_zero_share"] < 0.6
    assert verdict.metrics["sign_test_p"] < 1e-60
    # what the error balance alone said (the measurement): nothing to see
    assert verdict.metrics["err_balance_ratio"] < FLOOR.limits["balance_ratio"]
    assert verdict.metrics["ulp_gt1_share"] == 0.0


@pytest.mark.parametrize("dtype", LOW)
def test_correct_gemms_that_round_differently_from_the_cpu_pass(dtype):
    """Kernels that round to nearest from another accumulator (another summation order,
    blocking, thread count or matrix unit) differ from the CPU's kernel on some elements,
    as often one way as the other: here accumulators off by up to an eighth of an output
    ULP, unbiased, and an exact (fp64) one."""
    a, b, ref, scale = _gemm(dtype, seed=1, m=32, k=256, n=64)
    cpu = torch.mm(a, b)
    gen = torch.Generator().manual_seed(5)
    jitter = (torch.rand(ref.shape, generator=gen) - 0.5) / 4 * compare.ulp(
        ref.double().abs(), dtype).float()
    other_accumulator = (ref + jitter).to(dtype)
    assert int((other_accumulator != cpu).sum()) > 100  # really rounded otherwise, often
    for dut in (other_accumulator, (a.double() @ b.double()).to(dtype)):
        verdict = compare_outputs(dut, ref, cpu, standard="ulp", scale=scale)
        assert verdict.passed, verdict.message
        assert verdict.metrics["sign_test_p"] > 1e-6


@pytest.mark.parametrize("dtype", LOW)
def test_rounding_down_fails_through_the_other_sense(dtype):
    a, b, ref, scale = _gemm(dtype, seed=2)
    nearest = ref.to(dtype)
    down = torch.where(nearest.float() > ref, torch.nextafter(nearest, torch.full_like(
        nearest, -float("inf"))), nearest)
    verdict = compare_outputs(down, ref, torch.mm(a, b), standard="ulp", scale=scale)
    assert not verdict.passed and "100% of the non-zero errors point below" in verdict.message


def test_a_dut_less_biased_than_a_biased_cpu_kernel_passes():
    _, _, ref, scale = _gemm(torch.bfloat16, seed=3)
    biased_cpu = toward_zero(ref, torch.bfloat16)
    verdict = compare_outputs(ref.to(torch.bfloat16), ref, biased_cpu, standard="ulp",
                              scale=scale)
    assert verdict.metrics["sign_test_p"] < 1e-6  # the two differ, significantly ...
    assert verdict.passed, verdict.message       # ... but the DUT is the unbiased one


def test_without_a_low_precision_reference_the_shares_are_recorded_only():
    a, b, ref, scale = _gemm(torch.bfloat16)
    verdict = compare_outputs(toward_zero(ref, torch.bfloat16), ref, None, standard="ulp",
                              scale=scale)
    assert verdict.metrics["toward_zero_share"] == 1.0 and "sign_test_p" not in verdict.metrics
    assert verdict.passed


def test_too_few_elements_cannot_show_a_bias():
    a, b, ref, scale = _gemm(torch.bfloat16, m=3, n=5)
    verdict = compare_outputs(toward_zero(ref, torch.bfloat16), ref, torch.mm(a, b),
                              standard="ulp", scale=scale)
    assert verdict.metrics["toward_zero_share"] == 1.0
    assert verdict.metrics["sign_test_p"] > FLOOR.limits["sign_test_p"] and verdict.passed


# ---- Note [Integer promotion and accumulation]

_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)
_INT_CALLS = {
    "sum": lambda x: torch.sum(x), "nansum": lambda x: torch.nansum(x),
    "prod": lambda x: torch.prod(x),
    "cumsum": lambda x: torch.cumsum(x, 0), "cumprod": lambda x: torch.cumprod(x, 0),
    "argmax": lambda x: torch.argmax(x), "argmin": lambda x: torch.argmin(x),
    "count_nonzero": lambda x: torch.count_nonzero(x),
    **{op: (lambda x, op=op: getattr(torch, op)(x, x)) for op in
       ("eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "maximum", "minimum")},
    "amax": lambda x: torch.amax(x), "amin": lambda x: torch.amin(x),
    "abs": lambda x: torch.abs(x), "neg": lambda x: torch.neg(x)}


@pytest.mark.parametrize("op", sorted(compare.INTEGER_RESULTS))
def test_integer_result_rules_match_the_cpu(op):
    """The documented integer result dtypes are what a healthy CPU returns (a dtype the
    op refuses is skipped: the rule is about the result, not the support)."""
    call = _INT_CALLS[op]
    checked = 0
    for dtype in _INT_DTYPES:
        x = torch.tensor([3, 1, 2], dtype=dtype)
        try:
            out = call(x)
        except (RuntimeError, NotImplementedError, TypeError):
            continue
        assert out.dtype == compare.integer_result_dtype(op, x, x), (op, dtype, out.dtype)
        checked += 1
    assert checked >= 4, f"{op}: only {checked} integer dtypes ran"


def test_an_integer_result_of_another_width_fails_exact():
    ref = torch.tensor([1, 2, 3], dtype=torch.int64)
    verdict = compare.compare_outputs(ref.to(torch.int32), ref, standard="exact")
    assert not verdict.passed and "dtype" in verdict.message
    assert compare.compare_outputs(ref.clone(), ref, standard="exact").passed


def test_an_exact_gradient_only_moves_cotangent_values():
    """A gradient judged ``exact`` must be a copy: each element one of the cotangent's, or
    zero. A gradient that sums (``expand``'s, over the expanded dims) is rounded once per
    addition on the DUT and once in the reference, so a correct kernel is not bit-equal
    (the OpInfo sweep failed the CPU's fp16, bf16 and fp32 ``expand`` backward): not
    exact. Checked on every catalog row with an exact gradient, and on ``expand``."""
    from harness.ops import CATALOG
    from harness.ops.runner import _execute, _grad_labels
    from harness.ops.spec import materialize

    rows = [e for e in CATALOG if e.backward and e.gradient_standard == "exact"]
    assert rows
    for entry in rows:
        sample = next(s for s in entry.samples if not s.slow and _grad_labels(s))
        gen = torch.Generator().manual_seed(0)
        values = materialize(sample, "float32", gen)
        _, grads, cotangents = _execute(entry, values, sample, torch.device("cpu"),
                                        torch.float32, True, None, gen)
        allowed = torch.cat([torch.zeros(1), *[c.reshape(-1) for c in cotangents]])
        for grad in grads:
            if grad is not None:
                assert bool(torch.isin(grad.reshape(-1), allowed).all()), entry.name
    assert policy.standard_for("expand", "float16", "bwd") != "exact"
    x = torch.ones(1, 3, requires_grad=True)
    (grad,) = torch.autograd.grad(x.expand(4, 3), x, torch.arange(12.0).reshape(4, 3))
    assert not bool(torch.isin(grad, torch.arange(12.0)).all())  # sums, not copies
