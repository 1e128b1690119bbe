"""Edge-value helpers (harness.ops.edge): specials, classes, and the agreement rule."""

import math

import pytest
import torch

from harness import faults
from harness.compare import nonfinite_classes
from harness.faults.catalog.opinfo import EXP_INF_NAN
from harness.ops import edge


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_specials_cover_the_edge_values_of_each_dtype(dtype):
    values = edge.specials(dtype)
    info = torch.finfo(dtype)
    assert math.inf in values and -math.inf in values
    assert any(math.isnan(v) for v in values)
    assert any(v == 0 and math.copysign(1, v) < 0 for v in values)  # -0.0
    assert float(info.max) in values and info.tiny in values
    assert info.tiny * info.eps in values  # the smallest subnormal
    as_dtype = torch.tensor(values, dtype=torch.float64).to(dtype).double()
    same = (as_dtype == torch.tensor(values)) | torch.isnan(as_dtype)
    assert bool(same.all())  # every value exactly representable


def test_classes_tell_finite_nan_and_signed_inf_apart():
    x = torch.tensor([1.0, math.nan, math.inf, -math.inf, 0.0])
    assert nonfinite_classes(x).tolist() == [0, 1, 2, 3, 0]


def test_overflow_of_the_dtype_is_not_a_mismatch(cpu):
    example = edge.Example((torch.tensor([12.0, 1.0], dtype=torch.float16),))
    outcome = edge.check(edge.by_name("exp"), example, cpu, torch.float16)
    assert outcome.ok  # exp(12) is inf in fp16 although the fp32 reference is finite


def test_exp_of_inf_turned_nan_is_caught(cpu, monkeypatch):
    example = edge.Example((torch.tensor([math.inf, 0.0, -math.inf]),))
    op = edge.by_name("exp")
    assert edge.check(op, example, cpu, torch.float32).ok
    monkeypatch.setattr(faults, "_active", [EXP_INF_NAN])
    outcome = edge.check(op, example, cpu, torch.float32)
    assert not outcome.ok and outcome.mismatched == 1
    assert "index (0,)" in outcome.message and "nan" in outcome.message


def test_softmax_without_max_subtraction_is_caught(cpu, monkeypatch):
    naive = faults.patch_attr(
        "test.naive_softmax", family="test", description="softmax without max subtraction",
        target="torch.softmax", checks=("-",),
        replace=lambda orig: (lambda x, dim: x.exp() / x.exp().sum(dim, keepdim=True)))
    example = edge.Example((torch.tensor([[20.0, 1.0, -math.inf]], dtype=torch.float16),))
    op = edge.by_name("softmax")
    assert edge.check(op, example, cpu, torch.float16).ok
    monkeypatch.setattr(faults, "_active", [naive])
    assert not edge.check(op, example, cpu, torch.float16).ok


def test_cross_entropy_example_takes_integer_targets(cpu):
    example = edge.Example((torch.tensor([[0.0, math.inf], [1.0, 2.0]]),),
                           torch.tensor([0, 1]))
    outcome = edge.check(edge.by_name("cross_entropy"), example, cpu, torch.float32)
    assert outcome.ok and outcome.numel == 2


def test_unknown_edge_op_names_the_known_ones():
    with pytest.raises(KeyError, match="softmax"):
        edge.by_name("nope")
