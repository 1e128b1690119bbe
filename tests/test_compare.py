"""Unit tests of harness.compare: metrics on hand-made tensors, each standard's pass and
fail, the NaN/Inf position rules, empty tensors, and what failure messages say."""

import math

import pytest
import torch

from harness import compare
from harness.compare import DTYPE_LIMITS, STANDARDS, _errors, compare_outputs, ulp


def _up(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float64 if x.dtype == torch.float32 else torch.float32)


# ---------------------------------------------------------------------------- metrics

def test_metrics_on_a_hand_made_tensor():
    ref = torch.tensor([1.0, 2.0, 4.0, -8.0], dtype=torch.float64)
    dut = torch.tensor([1.0, 2.0, 4.5, -8.0], dtype=torch.float32)
    v = compare_outputs(dut, ref, None, standard="relative")
    m = v.metrics
    assert m["max_abs_err"] == pytest.approx(0.5)
    assert m["max_rel_err"] == pytest.approx(0.125)
    assert m["mean_rel_err"] == pytest.approx(0.125 / 4)
    assert m["rmse"] == pytest.approx(math.sqrt(0.25 / 4))
    assert m["err_balance"] == pytest.approx(0.125 / 4)  # signed mean: all error is +
    expected_cos = float(torch.dot(dut.double(), ref) / (dut.double().norm() * ref.norm()))
    assert m["cosine"] == pytest.approx(expected_cos)
    assert m["numel"] == 4
    assert m["nan_inf_mismatch"] == 0
    assert m["mismatched"] == 1


def test_ulp_of_float16_matches_spacing():
    values = torch.tensor([1.0, 1.5, 2.0, 1000.0, 0.0, 1e-6], dtype=torch.float64)
    got = ulp(values, torch.float16)
    assert got[0].item() == 2**-10
    assert got[1].item() == 2**-10
    assert got[2].item() == 2**-9
    assert got[3].item() == 0.5          # 512 <= 1000 < 1024
    assert got[4].item() == 2**-24       # smallest subnormal spacing
    assert got[5].item() == 2**-24


def test_ulp_statistics_count_elements_beyond_one_ulp():
    ref = torch.ones(1000, dtype=torch.float32)
    dut = torch.ones(1000, dtype=torch.float16)
    dut[:3] += 2 * 2**-10  # 2 ULPs off on three elements
    v = compare_outputs(dut, ref, None, standard="ulp")
    assert v.metrics["ulp_max"] == pytest.approx(2.0)
    assert v.metrics["ulp_gt1_share"] == pytest.approx(0.003)
    assert v.metrics["ulp_mean"] == pytest.approx(0.006)


def test_small_values_are_judged_by_absolute_error():
    ref = torch.tensor([1e-4, 1.0])  # 1e-4 < fp16 small_value 1e-3
    dut = torch.tensor([1.05e-4, 1.0], dtype=torch.float16)
    v = compare_outputs(dut, ref, None, standard="absolute")
    assert v.metrics["max_rel_err"] == 0.0            # only normal values count
    assert v.metrics["small_abs_err"] == pytest.approx(abs(float(dut[0]) - 1e-4), rel=1e-3)
    assert v.passed                                   # within small_value_atol 1e-5


# -------------------------------------------------------------------------- standards

def test_exact_passes_when_bit_equal_and_fails_otherwise():
    x = torch.randn(8, 9).half()
    assert compare_outputs(x.clone(), x.float(), None, standard="exact").passed
    y = x.clone()
    y[3, 4] = y[3, 4] + 1
    v = compare_outputs(y, x.float(), None, standard="exact")
    assert not v.passed
    assert v.metrics["mismatched"] == 1
    assert "(3, 4)" in v.message


def test_integer_outputs_are_always_exact():
    ref = torch.tensor([0, 3, 5])
    v = compare_outputs(torch.tensor([0, 3, 4]), ref, None, standard="relative")
    assert not v.passed
    assert "always exact" in v.message
    assert compare_outputs(ref.clone(), ref, None, standard="ulp").passed


def test_absolute_threshold_per_dtype():
    ref = torch.ones(64, dtype=torch.float64)
    just_in = torch.full((64,), 1 + 2**-21, dtype=torch.float32)   # rel 4.8e-7 <= 2^-20
    just_out = torch.full((64,), 1 + 2**-19, dtype=torch.float32)  # rel 1.9e-6 > 2^-20
    assert compare_outputs(just_in, ref, None, standard="absolute").passed
    v = compare_outputs(just_out, ref, None, standard="absolute")
    assert not v.passed
    assert "relative error <= 9.53674e-07" in v.message


def test_absolute_allows_no_worse_than_the_cpu_in_the_same_dtype():
    ref = torch.full((16,), 1.0)
    cpu = torch.full((16,), 1.0 + 2**-7, dtype=torch.bfloat16)   # the CPU's own bf16 error
    assert compare_outputs(cpu.clone(), ref, cpu, standard="absolute").passed
    worse = torch.full((16,), 1.0 + 2**-6, dtype=torch.bfloat16)
    assert not compare_outputs(worse, ref, cpu, standard="absolute").passed


def test_ulp_fp16_passes_when_not_above_the_cpus_share():
    ref = torch.ones(100, dtype=torch.float32)
    dut = torch.ones(100, dtype=torch.float16)
    dut[:5] += 4 * 2**-10                      # 5% of elements 4 ULPs off
    assert not compare_outputs(dut, ref, None, standard="ulp").passed
    assert compare_outputs(dut, ref, dut.clone(), standard="ulp").passed
    assert not compare_outputs(dut, ref, torch.ones(100, dtype=torch.float16),
                               standard="ulp").passed


def test_ulp_fp32_mean_or_share_rule():
    ref = torch.ones(100, dtype=torch.float64)
    dut = torch.ones(100, dtype=torch.float32)
    dut[:3] += 1000 * 2**-23            # 3% > 32 ULP: share < 0.05 passes
    assert compare_outputs(dut, ref, None, standard="ulp").passed
    dut[:10] += 1000 * 2**-23           # 10% > 32 ULP and mean 150 ULP: fails
    v = compare_outputs(dut, ref, None, standard="ulp")
    assert not v.passed
    assert "ulp_mean" in v.message


def test_relative_on_cpu_passes_when_dut_equals_the_low_precision_reference():
    x = torch.randn(32, 257)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        dut = torch.exp(x.to(dtype))
        ref = torch.exp(_up(x.to(dtype)))
        v = compare_outputs(dut, ref, dut.clone(), standard="relative")
        assert v.passed, v.message
        assert v.metrics["max_rel_err_ratio"] <= 1.0  # same error, or below the eps floor


def test_relative_ratio_has_a_floor_when_the_reference_error_is_zero():
    x = torch.tensor([1.0, 2.0, 4.0])  # exactly representable: reference error 0
    dut = x.clone()
    dut[0] = 1.0 + 2**-23              # one fp32 ULP: ratio to the eps floor is ~1
    v = compare_outputs(dut, x.double(), x.clone(), standard="relative")
    assert v.passed
    assert v.metrics["ref_max_rel_err"] == 0.0
    assert v.metrics["max_rel_err_ratio"] <= 1.0


def test_relative_fails_a_1e_4_relative_error_in_fp32():
    x = torch.randn(64, 64)
    ref = torch.exp(x.double())
    low = torch.exp(x)
    v = compare_outputs(low * (1 + 1e-4), ref, low, standard="relative")
    assert not v.passed
    assert "max_rel_err" in v.message and "limit 10x" in v.message
    assert v.metrics["max_rel_err_ratio"] > 10


def test_relative_without_low_precision_reference_uses_assert_close_defaults():
    ref = torch.ones(10)
    limits = DTYPE_LIMITS[torch.float16]
    ok = torch.full((10,), 1 + limits.rtol / 2).half()
    bad = torch.full((10,), 1.01).half()
    assert compare_outputs(ok, ref, None, standard="relative").passed
    v = compare_outputs(bad, ref, None, standard="relative")
    assert not v.passed
    assert "assert_close defaults" in v.message


def test_fp32_dut_against_fp64_reference_passes_every_standard():
    x = torch.randn(16, 64)
    cases = {"relative": torch.sin, "absolute": lambda t: t * 3, "ulp": lambda t: t @ t.T,
             "exact": lambda t: t.flip(0)}
    for standard, fn in cases.items():
        v = compare_outputs(fn(x), fn(x.double()), fn(x), standard=standard)
        assert v.passed, (standard, v.message)


def test_cosine_floor_fails_an_output_pointing_elsewhere():
    ref = torch.randn(1000)
    dut = torch.randn(1000)
    v = compare_outputs(dut, ref, None, standard="absolute")
    assert not v.passed
    assert "cosine" in v.message and "floor 0.99" in v.message


def test_cosine_floor_accepts_what_the_cpu_itself_computes():
    ref = torch.tensor([2e-3], dtype=torch.float32)   # e.g. 1 - tanh(x)^2 in fp32
    cpu = torch.tensor([0.0], dtype=torch.bfloat16)   # the same cancels to 0 in bf16
    assert compare_outputs(cpu.clone(), ref, cpu, standard="relative").passed
    assert not compare_outputs(cpu.clone(), ref, None, standard="relative").passed


def test_unknown_standard_is_a_usage_error():
    with pytest.raises(ValueError, match="unknown precision standard"):
        compare_outputs(torch.ones(1), torch.ones(1), None, standard="fuzzy")


def test_standards_table_is_data_with_sources():
    assert set(STANDARDS) == {"exact", "absolute", "ulp", "relative"}
    assert all(s.source for s in STANDARDS.values())
    assert STANDARDS["relative"].limits["max_rel_err"] == 10.0


# -------------------------------------------------------------------- NaN/Inf rules

def test_nan_where_the_reference_has_none_fails():
    ref = torch.ones(6)
    dut = torch.ones(6, dtype=torch.float16)
    dut[2] = float("nan")
    v = compare_outputs(dut, ref, None, standard="relative")
    assert not v.passed
    assert v.metrics["nan_inf_mismatch"] == 1
    assert "NaN/Inf" in v.message and "(2,)" in v.message


def test_nan_in_the_same_positions_passes_and_elsewhere_fails():
    ref = torch.tensor([1.0, float("nan"), 3.0])
    same = torch.tensor([1.0, float("nan"), 3.0])
    assert compare_outputs(same, ref.double(), same, standard="relative").passed
    zero = torch.tensor([1.0, 0.0, 3.0])   # a kernel that turns NaN into 0
    v = compare_outputs(zero, ref.double(), same, standard="relative")
    assert not v.passed
    assert v.metrics["nan_inf_mismatch"] == 1


def test_infinity_signs_must_agree():
    ref = torch.tensor([float("inf"), 1.0])
    assert compare_outputs(torch.tensor([float("inf"), 1.0]), ref.double(), None,
                           standard="absolute").passed
    assert not compare_outputs(torch.tensor([-float("inf"), 1.0]), ref.double(), None,
                               standard="absolute").passed


def test_inf_is_allowed_where_the_cpu_in_the_same_dtype_has_it_too():
    ref = torch.tensor([60000.0, 1.0])    # a representable gradient ...
    cpu = torch.tensor([float("inf"), 1.0], dtype=torch.float16)  # ... the fp16 CPU overflows
    assert compare_outputs(cpu.clone(), ref, cpu, standard="relative").passed
    assert not compare_outputs(cpu.clone(), ref, None, standard="relative").passed
    finite_cpu = torch.tensor([60000.0, 1.0], dtype=torch.float16)
    assert not compare_outputs(cpu.clone(), ref, finite_cpu, standard="relative").passed


def test_overflow_of_the_dut_dtype_is_allowed_where_the_rounded_reference_overflows():
    ref = torch.tensor([1e5, 1.0])          # finite in fp32, inf in fp16
    dut = ref.half()
    assert not math.isfinite(float(dut[0]))
    assert compare_outputs(dut, ref, dut.clone(), standard="relative").passed


# ------------------------------------------------------------------- empty / messages

@pytest.mark.parametrize("standard", sorted(STANDARDS))
def test_empty_tensors_pass_every_standard(standard):
    v = compare_outputs(torch.empty(0, 5, dtype=torch.float16), torch.empty(0, 5),
                        torch.empty(0, 5, dtype=torch.float16), standard=standard)
    assert v.passed
    assert v.metrics["numel"] == 0


def test_shape_mismatch_fails_with_both_shapes():
    v = compare_outputs(torch.ones(2, 3), torch.ones(3, 2), None, standard="relative")
    assert not v.passed
    assert "(2, 3)" in v.message and "(3, 2)" in v.message


def test_message_names_count_worst_element_values_and_limit():
    ref = torch.linspace(1, 2, 100, dtype=torch.float64).reshape(10, 10)
    dut = ref.float().clone()
    dut[7, 3] *= 1.01
    v = compare_outputs(dut, ref, None, standard="absolute")
    assert not v.passed
    assert v.message.startswith("Tensor-likes are not close under standard 'absolute' (float32)")
    assert "Mismatched elements: 1 / 100 (1%)" in v.message
    assert "Greatest error at index (7, 3)" in v.message
    assert f"dut {float(dut[7, 3])!r}" in v.message
    assert "relative error <= 9.53674e-07" in v.message
    assert v.passed is False and v.message


def test_passing_verdict_has_empty_message_and_baseline_rules():
    x = torch.randn(10)
    v = compare_outputs(x.clone(), x.double(), x.clone(), standard="relative")
    assert v.passed and v.message == ""
    rule = v.rules["max_rel_err"]
    assert rule.better == "lower" and rule.rel == 2.0 and 0 < rule.abs <= 2**-23
    assert set(v.rules) <= set(v.metrics)


# ------------------------------------------- Note [Condition of products and reductions]

def _cancelling_mv(n: int = 7, k: int = 256, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(n, k, generator=gen)
    b = torch.randn(k, generator=gen)
    a[0, 1:] = a[0, 1:]  # row 0: force cancellation by appending its own negative sum
    a[0, 0] = -(a[0, 1:].double() @ b[1:].double() / b[0].double()).float()
    return a, b


def _reversed_order_mv(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A correct fp32 kernel that sums in the other order (as another SIMD path would)."""
    out = torch.zeros(a.shape[0], dtype=torch.float32)
    for j in reversed(range(a.shape[1])):
        out = out + a[:, j] * b[j]
    return out


def test_dot_product_with_cancellation_is_judged_against_its_condition():
    a, b = _cancelling_mv()
    ref = a.double() @ b.double()
    cpu = torch.mv(a, b)
    scale = a.double().abs() @ b.double().abs()
    other = _reversed_order_mv(a, b)
    assert abs(float(ref[0])) < 1e-3 * float(scale[0])  # the sample really cancels
    # another correct summation order passes against the condition ...
    assert compare_outputs(other, ref, cpu, standard="ulp", scale=scale).passed
    # ... where measuring ULPs of the cancelled result alone called it wrong
    assert not compare_outputs(other, ref, None, standard="ulp").passed
    # and a real defect is still caught
    bad = other * (1 + 1e-4)
    verdict = compare_outputs(bad, ref, cpu, standard="ulp", scale=scale)
    assert not verdict.passed and "rmse" in verdict.message


def test_ulp_standard_accepts_a_dut_no_worse_than_the_cpus_own_error():
    ref = torch.linspace(1, 2, 1000, dtype=torch.float64)
    cpu = (ref * (1 + 2e-5)).float()   # the CPU in fp32 is itself ~170 ULP off here
    dut = (ref * (1 + 2.5e-5)).float()
    assert compare_outputs(dut, ref, cpu, standard="ulp").passed
    assert not compare_outputs(dut, ref, None, standard="ulp").passed
    assert not compare_outputs((ref * (1 + 1e-4)).float(), ref, cpu, standard="ulp").passed


def test_scale_of_the_wrong_shape_is_an_error_naming_the_fix():
    with pytest.raises(ValueError, match="op evaluated on"):
        compare_outputs(torch.ones(3), torch.ones(3), None, standard="ulp", scale=torch.ones(4))


# ------------------------------------------------------------- Note [Error balance]

def _toward_zero(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Round float64 ``x`` to ``dtype`` toward zero: every error under one ULP, all of one sign."""
    y = x.to(dtype)
    too_big = y.double().abs() > x.abs()
    return torch.where(too_big, torch.nextafter(y, torch.zeros_like(y)), y)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_error_balance_catches_a_biased_kernel_each_element_within_one_ulp(dtype):
    gen = torch.Generator().manual_seed(3)
    ref = torch.rand(4096, generator=gen, dtype=torch.float64) + 0.5
    cpu = ref.to(dtype)
    biased = _toward_zero(ref, dtype)
    assert float(((biased.double() - ref).abs() / ref).max()) < torch.finfo(dtype).eps
    verdict = compare_outputs(biased, ref, cpu, standard="relative")
    assert not verdict.passed
    assert "err_balance" in verdict.message and "biased" in verdict.message
    assert compare_outputs(cpu.clone(), ref, cpu, standard="relative").passed


def test_error_balance_stays_quiet_for_an_unbiased_kernel_with_other_roundings():
    gen = torch.Generator().manual_seed(4)
    ref = torch.rand(64, generator=gen, dtype=torch.float64) + 0.5
    cpu = ref.to(torch.float16)
    # an unbiased kernel that rounds some elements the other way (still < 1 ULP each)
    flip = torch.rand(64, generator=gen) < 0.2
    other = torch.where(flip, torch.nextafter(cpu, torch.where(cpu.double() > ref, -cpu, 2 * cpu)), cpu)
    assert int((other != cpu).sum()) > 0  # some elements do round the other way
    verdict = compare_outputs(other, ref, cpu, standard="relative")
    assert verdict.passed, verdict.message
    assert compare_outputs(other, ref, cpu, standard="absolute").passed


# ------------------------------------------- Note [Statistics in one pass of torch]

@pytest.mark.parametrize("want_ulp", [False, True])
def test_errors_of_two_rows_in_one_pass_equal_each_row_alone(want_ulp):
    """The DUT's and the CPU's own error statistics are two rows of one pass; each row's
    statistics are those of the row measured alone (sums in another order: 1e-14)."""
    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(300, generator=gen, dtype=torch.float64)
    ref[:7] = 1e-5  # small values: the absolute branch
    dut = ref.half().double()
    low = (ref * (1 + 2e-3 * torch.randn(300, generator=gen, dtype=torch.float64))).half().double()
    limits = DTYPE_LIMITS[torch.float16]
    mag = ref.abs()
    (both,), *_ = _errors(torch.stack([dut, low]), ref, mag, [300], limits, torch.float16,
                          want_ulp)
    alone = [_errors(row.unsqueeze(0), ref, mag, [300], limits, torch.float16,
                     want_ulp)[0][0].rows[0] for row in (dut, low)]
    assert both.rows[0] != both.rows[1]  # two different kernels' errors, not one row twice
    for pair, single in zip(both.rows, alone):
        assert pair.keys() == single.keys()
        for key, value in single.items():
            assert pair[key] == pytest.approx(value, rel=1e-14, abs=1e-300), key


@pytest.mark.parametrize("want_ulp", [False, True])
@pytest.mark.parametrize("scaled", [False, True])
def test_errors_return_where_the_magnitude_is_small_and_its_norm(want_ulp, scaled):
    """What the one pass hands back besides the statistics (read by every judge, so not
    computed again): the small-value mask and the magnitude's norm, of ``|r|`` or of the
    condition's magnitude."""
    gen = torch.Generator().manual_seed(4)
    ref = torch.randn(200, generator=gen, dtype=torch.float64)
    ref[:5] = 1e-6
    expected = torch.maximum(ref.abs(), torch.full_like(ref, 0.5)) if scaled else ref.abs()
    limits = DTYPE_LIMITS[torch.float16]
    (found,), err, small = _errors(ref.half().double().unsqueeze(0), ref, expected, [200],
                                   limits, torch.float16, want_ulp)
    assert torch.equal(small, expected < limits.small_value)
    assert int(small.sum()) == (0 if scaled else 5)
    assert found.normal_count == 200 - int(small.sum())
    assert found.mag_norm == pytest.approx(float(expected.norm()), rel=1e-14)
    assert found.mag_max == float(expected.max())
    assert torch.equal(err[0], (ref.half().double() - ref).abs())


def test_a_verdict_reads_the_cpus_own_error_from_the_same_pass():
    """With an all-finite low-precision reference, ref_* metrics are the CPU's own error
    (the second row), not the DUT's."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(200, generator=gen)
    dut = (x.double() * 1.01).half()  # a 1% error: far worse than the CPU's rounding
    verdict = compare_outputs(dut, x.double(), x.half(), standard="relative")
    assert verdict.metrics["max_rel_err"] > 0.009
    assert verdict.metrics["ref_max_rel_err"] < 2 ** -10
    assert not verdict.passed


@pytest.mark.parametrize("standard", ["relative", "absolute", "ulp"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("specials", [False, True])
def test_the_duts_own_run_as_its_low_is_measured_once_with_the_same_verdict(standard, dtype,
                                                                           specials,
                                                                           monkeypatch):
    """Note [A CPU DUT is its own low]: passed the DUT's tensor itself as the low-precision
    reference, the verdict, message and rules are those of an equal copy measured as a
    second row (the shortcut for equal bits switched off), the metrics equal to the
    summation order (one row instead of two), the CPU's own error is the DUT's, and the
    sign test finds no element more or less biased than the CPU's."""
    gen = torch.Generator().manual_seed(7)
    ref = torch.randn(300, generator=gen, dtype=torch.float64) * 3
    if specials:
        ref[:3] = torch.tensor([math.inf, -math.inf, math.nan])
        ref[3:6] = 1e-7  # small values
    dut = (ref * 1.002).to(dtype)  # a biased 0.2% error: the sign test has something to see
    own = compare_outputs(dut, ref, dut, standard=standard)
    monkeypatch.setattr(compare, "_same_bits", lambda a, b: False)
    copy = compare_outputs(dut, ref, dut.clone(), standard=standard)
    assert (own.passed, own.message, own.rules) == (copy.passed, copy.message, copy.rules)
    assert own.metrics.keys() == copy.metrics.keys()
    for key, value in copy.metrics.items():
        assert own.metrics[key] == pytest.approx(value, rel=1e-13, abs=1e-300), key
    for key in ("max_rel_err", "mean_rel_err", "rmse"):
        assert own.metrics[f"ref_{key}"] == own.metrics[key]
    if dtype == torch.float16:
        assert own.metrics["sign_test_p"] == 1.0
        assert own.metrics["ref_below_share"] == own.metrics["below_share"] != 0.5


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_low_with_the_duts_bits_is_the_duts_and_one_bit_more_is_not(dtype):
    """Note [A low equal to the DUT is the DUT]: a separate tensor with the DUT's bits
    (the OpInfo sweep's CPU run) gives exactly the metrics of the DUT's own tensor, so
    the same op has the same metrics in every pipeline on every CPU; a low one bit or one
    NaN payload away is another run, measured on its own row."""
    gen = torch.Generator().manual_seed(11)
    ref = torch.randn(4099, generator=gen, dtype=torch.float64)
    ref[7] = math.nan
    dut = (ref * 1.001).to(dtype)
    own = compare_outputs(dut, ref, dut, standard="relative")
    copy = compare_outputs(dut, ref, dut.clone(), standard="relative")
    assert (copy.passed, copy.message, copy.rules, copy.metrics) == (
        own.passed, own.message, own.rules, own.metrics)
    bits = {2: torch.int16, 4: torch.int32}[dut.element_size()]
    one_ulp = dut.clone()
    one_ulp.view(bits)[100] += 1
    other = compare_outputs(dut, ref, one_ulp, standard="relative")
    assert other.metrics["ref_max_rel_err"] != own.metrics["ref_max_rel_err"] or (
        other.metrics["ref_rmse"] != own.metrics["ref_rmse"])
    payload = dut.clone()
    payload.view(bits)[7] ^= 1  # another NaN: equal as values, not as bits
    assert math.isnan(payload[7])
    assert not compare._same_bits(payload, dut)
    assert compare._same_bits(dut.clone(), dut)
    assert not compare._same_bits(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not compare._same_bits(dut, dut.double())


# ------------------------------------------------- Note [Outputs measured together]

def _mixed_requests() -> list:
    """Outputs of every kind a test hands in at once: dtypes, standards, a low or none or
    the DUT's own, a condition scale, NaN/Inf (in the DUT, the reference and the low), an
    empty output, a non-float one, a shape mismatch, failing ones."""
    gen = torch.Generator().manual_seed(21)
    requests = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        up = torch.float64 if dtype == torch.float32 else torch.float32
        for n, standard in ((257, "relative"), (64, "absolute"), (96, "ulp"), (5, "relative")):
            ref = torch.randn(n, generator=gen, dtype=torch.float64)
            ref[:2] = 1e-7  # small values
            dut = ref.to(dtype)
            low = (ref * (1 + 1e-3 * torch.randn(n, generator=gen, dtype=torch.float64))).to(dtype)
            requests += [compare.Request(dut, ref.to(up), low, standard),
                         compare.Request(dut, ref.to(up), dut, standard),
                         compare.Request(dut, ref.to(up), None, standard),
                         compare.Request((ref * 1.01).to(dtype), ref.to(up), low, standard),
                         compare.Request(dut, ref.to(up), low, standard,
                                         scale=ref.abs().to(up) + 1.0)]
        specials = torch.randn(40, generator=gen, dtype=torch.float64)
        specials[:3] = torch.tensor([math.inf, -math.inf, math.nan])
        nan_low = specials.to(dtype).clone()
        nan_low[10] = math.nan  # the CPU's own run has a NaN where the DUT has a number
        requests += [compare.Request(specials.to(dtype), specials.to(up), specials.to(dtype),
                                     "relative"),
                     compare.Request(specials.to(dtype), specials.to(up), nan_low, "relative"),
                     compare.Request(torch.zeros(0, dtype=dtype), torch.zeros(0, dtype=up), None,
                                     "relative")]
    long = torch.randn(compare.LONG_OUTPUT + 3, generator=gen, dtype=torch.float64)
    requests += [compare.Request(long.half(), long.float(), long.half(), "relative"),  # alone
                 compare.Request(long.half(), long.float(), (long * 1.001).half(), "ulp"),
                 compare.Request(torch.arange(5), torch.arange(5), None, "exact"),
                 compare.Request(torch.ones(3), torch.ones(4, dtype=torch.float64), None,
                                 "relative")]
    return requests


def test_outputs_measured_together_are_judged_as_each_alone():
    """Note [Outputs measured together]: ``compare_many`` gives every output the verdict
    ``compare_outputs`` gives it alone, its message, rules and metrics to the last bit,
    whatever it was measured with, failures included."""
    requests = _mixed_requests()
    together = compare.compare_many(requests)
    alone = [compare_outputs(r.dut, r.reference, r.reference_lowp, standard=r.standard,
                             scale=r.scale) for r in requests]
    reversed_order = compare.compare_many(requests[::-1])[::-1]
    assert not all(v.passed for v in alone) and any(v.passed for v in alone)
    for index, (one, two, three) in enumerate(zip(alone, together, reversed_order)):
        for verdict in (two, three):
            assert (verdict.passed, verdict.message) == (one.passed, one.message), index
            assert {k: r.json for k, r in verdict.rules.items()} == \
                   {k: r.json for k, r in one.rules.items()}, index
            assert verdict.metrics.keys() == one.metrics.keys(), index
            for key, value in one.metrics.items():  # NaN never; bits, not approximately
                assert math.copysign(1, verdict.metrics[key]) == math.copysign(1, value)
                assert verdict.metrics[key] == value, (index, key)


def test_a_low_with_a_nan_of_its_own_is_counted_only_where_it_is_finite():
    """The sign test's CPU counts and paired counts skip the positions where the CPU's own
    run is not finite (Note [Error balance]); the DUT's counts keep them."""
    ref = torch.linspace(1.0, 2.0, 100, dtype=torch.float32)
    dut = (ref.double() * (1 - 2e-3)).half()  # every error toward zero
    low = ref.half().clone()
    low[:10] = math.nan
    verdict = compare_outputs(dut, ref, low, standard="relative")
    (out, *_), = compare._measure([compare._prepare(compare.Request(dut, ref, low, "relative"))],
                                  torch.float16, False)
    assert out.signs["kept"] == 90
    assert out.signs["nonzero"] == out.signs["positive"] == [100, 100]  # positive: below too
    assert max(out.signs["cpu_nonzero"]) <= 90
    assert out.signs["more"][0] + out.signs["less"][0] <= 90
    assert verdict.metrics["toward_zero_share"] == 1.0
    assert verdict.metrics["ref_toward_zero_share"] < 1.0
