"""NaN/Inf coverage of the op catalog (harness.ops.specials) and its judge (harness.ops.edge)."""

import math

import pytest
import torch

from harness import cli, faults
from harness.faults.catalog.ops import ARGMAX_SKIPS_NAN, CLAMP_NAN_TO_BOUND
from harness.ops import BY_NAME, edge, run_case, specials
from harness.ops.spec import OpEntry, Sample, T, domain_values, materialize, special_domain


def test_every_catalog_row_is_covered_or_explained():
    rows = specials.coverage()
    missing = [r.row for r in rows if r.missing]
    assert not missing, (f"catalog rows without special-value samples and without a reason: "
                         f"{missing}; add them to SEMANTICS or REASONS in "
                         f"harness/ops/specials.py")
    assert set(specials.SEMANTICS) <= set(BY_NAME), "SEMANTICS names rows the catalog lacks"
    assert set(specials.REASONS) <= set(BY_NAME), "REASONS names rows the catalog lacks"
    assert not set(specials.SEMANTICS) & set(specials.REASONS), "a row both covered and excused"
    covered = [r for r in rows if r.covered]
    assert len(covered) >= 150 and all(r.samples for r in covered)
    for name in ("clamp", "argmax", "sort", "topk", "cummax", "maximum", "median", "softmax",
                 "log_softmax", "norm", "cross_entropy", "mean", "sum"):
        assert name in specials.SEMANTICS, name


def test_a_new_row_that_is_neither_covered_nor_explained_is_reported():
    row = OpEntry("new_exp", torch.exp, (Sample("t", (T((4, 4)),)),))
    (found,) = specials.coverage([row])
    assert found.missing and not found.covered
    assert "MISSING" in specials.table([found]) and "1 missing" in specials.table([found])


def test_integer_only_and_random_rows_explain_themselves():
    assert "integer-only" in specials.automatic_reason(BY_NAME["one_hot"])
    assert "random" in specials.automatic_reason(BY_NAME["dropout"])
    assert specials.automatic_reason(BY_NAME["exp"]) is None


def _floats(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value.reshape(-1)] if value.is_floating_point() else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _floats(v)]
    return []


@pytest.mark.parametrize("name", sorted(specials.SEMANTICS))
def test_special_samples_hold_the_row_s_specials(name):
    entry = BY_NAME[name]
    wanted = set(specials.SEMANTICS[name].specials)
    seen = set()
    for sample in edge.special_samples(entry):
        values = materialize(sample, "float32", torch.Generator().manual_seed(0))
        x = torch.cat(_floats(values))
        seen |= {"nan"} if bool(x.isnan().any()) else set()
        seen |= {"inf"} if bool(x.isposinf().any()) else set()
        seen |= {"-inf"} if bool(x.isneginf().any()) else set()
        seen |= {"zero"} if bool(((x == 0) & x.signbit()).any()) else set()
    assert wanted <= seen, f"{name}: samples lack {wanted - seen}"


def test_specials_domain_takes_turns_by_row_and_depends_only_on_the_generator():
    name = special_domain("normal", ("nan", "inf"))
    a = domain_values(name, (8, 16), torch.Generator().manual_seed(3))
    b = domain_values(name, (8, 16), torch.Generator().manual_seed(3))
    assert torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0))
    per_row = [(int(r.isnan().sum()), int(r.isposinf().sum())) for r in a]
    assert per_row[:4] == [(0, 0), (1, 0), (0, 1), (1, 1)]  # clean, NaN, inf, both
    vector = domain_values(special_domain("distinct", ("nan", "-inf", "zero")), (32,),
                           torch.Generator().manual_seed(0))
    assert int(vector.isnan().sum()) == 1 and int(vector.isneginf().sum()) == 1
    assert int(((vector == 0) & vector.signbit()).sum()) == 1
    with pytest.raises(ValueError, match="specials"):
        special_domain("normal", ("infinity",))


def test_exact_rule_fails_a_nan_turned_into_a_number_and_a_wrong_zero_sign():
    ref = torch.tensor([math.nan, math.inf, -0.0, 1.0], dtype=torch.float64)
    good = torch.tensor([math.nan, math.inf, -0.0, 1.0])
    assert edge.exact_specials(good, ref, None, zeros=True).passed
    bound = torch.tensor([0.75, math.inf, -0.0, 1.0])
    verdict = edge.exact_specials(bound, ref, None, zeros=True)
    assert not verdict.passed and verdict.metrics["special_mismatch"] == 1
    assert "index (0,)" in verdict.message and "0.75" in verdict.message
    plus_zero = torch.tensor([math.nan, math.inf, 0.0, 1.0])
    assert not edge.exact_specials(plus_zero, ref, None, zeros=True).passed
    assert edge.exact_specials(plus_zero, ref, None, zeros=False).passed  # gradients
    capped = torch.tensor([math.nan, 3.4e38, -0.0, 1.0])
    assert not edge.exact_specials(capped, ref, None, zeros=True).passed
    # where the CPU in the DUT's dtype holds the same value, it is the dtype's doing
    assert edge.exact_specials(capped, ref, capped.clone(), zeros=True).passed
    assert edge.exact_specials(torch.tensor([1, 2]), torch.tensor([1, 2]), None,
                               zeros=True).passed  # integers: the op policy's exact


def _sample(entry):
    (sample,) = edge.special_samples(entry)
    return sample


@pytest.mark.parametrize(("fault", "row"), [(CLAMP_NAN_TO_BOUND, "clamp"),
                                            (ARGMAX_SKIPS_NAN, "argmax")])
def test_nan_faults_pass_the_catalog_and_fail_the_special_values(fault, row, cpu, monkeypatch):
    entry = BY_NAME[row]
    typical = next(s for s in entry.samples if s.name == "typical")
    special = _sample(entry)
    assert all(o.status == "pass" for o in edge.run_specials(cpu, entry, "float32", special))
    monkeypatch.setattr(faults, "_active", [fault])
    assert all(o.status == "pass" for o in run_case(cpu, entry, "float32", typical))
    outcomes = edge.run_specials(cpu, entry, "float32", special)
    assert outcomes[0].status == "fail", outcomes[0].message


def test_sort_puts_nan_last_and_descending_first(cpu):
    for row, first_or_last in (("sort", -1), ("sort_descending_stable", 0)):
        entry = BY_NAME[row]
        x = torch.tensor([[1.0, math.nan, -math.inf, math.inf]])
        values, _ = entry.fn(x, **next(s for s in entry.samples
                                       if s.name == "typical").kwargs)
        assert math.isnan(values[0, first_or_last])
    assert all(o.status == "pass" for o in edge.run_specials(
        cpu, BY_NAME["sort"], "float16", _sample(BY_NAME["sort"])))


def test_command_prints_the_table_with_totals(capsys):
    assert cli.main(["ops", "nan"]) == 0
    out = capsys.readouterr().out
    assert "clamp" in out and "torch.maximum" in out
    assert any(line.startswith("total:") and "0 missing" in line for line in out.splitlines())


def test_every_row_left_open_gets_one_nan_shape_sample_with_a_nan():
    """Note [NaN shape samples]: every row with a reason but a variant's runs one NaN
    sample, in one float dtype, forward; a covered row runs none (its specials judge more)."""
    assert "mm" in specials.SHAPE_ONLY and "clamp_tie" not in specials.SHAPE_ONLY
    for name in specials.SHAPE_ONLY:
        entry = BY_NAME[name]
        samples = edge.nan_shape_samples(entry)
        assert len(samples) == 1 and samples[0].name.startswith("nan_shape_"), name
        assert "nan" in str(samples[0].args) and edge.nan_shape_dtypes(entry) == ("float32",)
    assert not edge.nan_shape_samples(BY_NAME["clamp"])
