"""``faults mutate``: generated conditional mutants of the op catalog's ops (Note [Mutant
runs] in harness/faults/mutate.py). A fixed sample must stay >= 95% killed."""

import dataclasses
import json
import sys

import pytest
import torch

from harness import device as dev
from harness.faults import mutate

# a fixed sample: rows of each kind the issue names (reduction, matmul, convolution,
# normalisation, activation), every condition kind and wrong-how drawn
ROWS = ("sum", "mm", "conv2d", "softmax", "relu", "cumsum")
LIMIT, SEED = 24, 3
KILL_RATE = 0.95


@pytest.fixture(scope="module")
def report():
    device, _ = dev.select("cpu")
    threads = torch.get_num_threads()
    try:
        return mutate.mutate(device, rows=ROWS, limit=LIMIT, seed=SEED, jobs=2)
    finally:
        torch.set_num_threads(threads)


def test_a_fixed_sample_of_mutants_is_killed(report):
    assert report["mutants"] == LIMIT
    assert report["live"] >= LIMIT // 2, report["not_live_mutants"]
    assert report["kill_rate"] >= KILL_RATE, mutate.render(report)


def test_not_live_mutants_are_counted_apart(report):
    assert report["killed"] + report["not_live"] + len(report["survivors"]) == LIMIT
    for result in report["results"]:
        if result["mutant"] in report["not_live_mutants"]:
            assert not result["killed_by"]


def test_a_mutant_no_call_can_meet_is_not_live():
    calls = {"aten.relu.default": [(torch.ops.aten.relu.default, (torch.randn(4, 5),), {})]}
    lives = mutate.Mutant("aten.relu.default", "layout:offset", "drift", ("relu",), ("float32",))
    never = mutate.Mutant("aten.relu.default", "layout:channels_last", "drift", ("relu",),
                          ("float32",))
    float_only = mutate.Mutant("aten.relu.default", "dtype:integer", "drift", ("relu",),
                               ("float32",))
    assert mutate.live(lives, calls)
    assert not mutate.live(never, calls)  # no 4-d argument
    assert not mutate.live(float_only, calls)  # its rows take no integer dtype


def test_a_conditional_mutant_is_wrong_only_under_its_condition():
    from harness import faults

    fault = mutate.Mutant("aten.sum.default", "size:(4096,65536]", "drift", ("sum",)).fault()
    device, _ = dev.select("cpu")
    small, big = torch.ones(100), torch.ones(5000)
    saved = faults._active
    faults._active = [fault]
    try:
        with device.scope():
            got_small, got_big = float(torch.sum(small)), float(torch.sum(big))
    finally:
        faults._active = saved
    assert got_small == 100.0 and got_big != 5000.0


def test_cli_json_has_the_counts(monkeypatch, capsys):
    from harness import cli

    fake = {"mutants": 2, "killed": 1, "not_live": 1, "live": 1, "kill_rate": 1.0,
            "survivors": [], "not_live_mutants": ["m"], "matrix": {}, "seconds": 0.0,
            "results": []}
    monkeypatch.setattr(mutate, "mutate", lambda *a, **k: fake)
    monkeypatch.setattr(sys, "argv", ["harness", "faults", "mutate", "--json", "--limit", "2"])
    assert cli.main(["faults", "mutate", "--json", "--limit", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"mutants", "killed", "not_live", "survivors"} <= set(out)


@pytest.mark.parametrize("op, row, condition, sample", [
    *[(op, row, band, "/band") for op, row in (("aten.add.Tensor", "add"),
                                               ("aten._foreach_add.List", "_foreach_add"),
                                               ("aten._foreach_neg.default", "_foreach_neg"))
      for band in ("size:(1024,4096]", "size:(65536,1048576]")],
    *[(op, row, "layout:transposed", "_transposed")
      for op, row in (("aten.addmm.default", "addmm"), ("aten.baddbmm.default", "baddbmm"),
                      ("aten._cdist_forward.default", "cdist"))],
    # the first tensor past an index: embedding's weight
    ("aten.embedding.default", "embedding", "layout:expanded", "_expanded"),
    ("aten.embedding.default", "embedding", "layout:offset", "_offset"),
    # seeds 3-5's survivors (docs/mutants.md)
    ("aten.avg_pool3d.default", "avg_pool3d", "layout:expanded", "_expanded"),
    ("aten.max_pool2d_with_indices.default", "max_pool2d", "layout:expanded", "_expanded"),
    ("aten.mean.dim", "mean", "layout:channels_last", "spatial_channels_last"),
    ("aten.mean.default", "hinge_embedding_loss", "layout:transposed", "/transposed_both"),
    ("aten.index_select.default", "index_select", "size:(1024,4096]", "/past1024"),
    ("aten.masked_select.default", "masked_select", "size:(4096,65536]", "/band8193"),
    ("aten.kthvalue.default", "kthvalue", "size:(65536,1048576]", "/past65536"),
    ("aten.bernoulli_.float", "dropout", "size:(1024,4096]", "/band2049"),
    ("aten.clamp_.default", "clip_grad_value_", "size:(65536,1048576]", "/bands"),
    ("aten.zeros_like.default", "cosine_embedding_loss", "size:(1024,4096]", "/band2049"),
    ("aten.clamp_min_.default", "margin_ranking_loss", "size:(65536,1048576]", "/band65537"),
    # distinct values compared along dim 1 stay distinct when dim 0 is repeated
    ("aten.sort.default", "sort", "layout:expanded", "_expanded"),
    ("aten.argmax.default", "argmax", "layout:expanded", "_expanded")])
def test_a_kernel_wrong_only_when_called_one_way_fails_that_sample(op, row, condition, sample):
    """Note [Size bands of every row], Note [Layout samples]: a kernel wrong only for
    inputs in one size band, or only for a transposed, expanded or offset operand, fails
    the row's default-run sample made for that, and nothing else."""
    from harness import faults
    from harness.ops import BY_NAME

    device, _ = dev.select("cpu")
    entry = BY_NAME[row]
    clean = mutate._run_row(device, entry)
    saved = faults._active
    faults._active = [mutate.Mutant(op, condition, "element", (row,)).fault()]
    try:
        faulted = mutate._run_row(device, entry)
    finally:
        faults._active = saved
    assert clean and all(status == "pass" for status in clean.values()), clean
    red = sorted(record for record, status in faulted.items() if status != "pass")
    assert red and all(sample in record for record in red), red


def test_an_in_place_ops_wrong_answer_is_written_where_its_callers_read_it():
    """Note [In-place mutants]: dropout reads the mask bernoulli_ wrote, not what it
    returned; a NaN written there fails dropout, and a wrong shape, which an in-place op
    cannot give, leaves the answer right and is not live."""
    from harness import faults
    from harness.ops import BY_NAME

    device, _ = dev.select("cpu")
    the_plan = mutate.plan(device, rows=["dropout"], limit=1)
    calls = the_plan.calls["aten.bernoulli_.float"]
    before = [args[0].clone() for _, args, _ in calls]
    nan = mutate.Mutant("aten.bernoulli_.float", "dtype:bfloat16", "nan", ("dropout",),
                        ("bfloat16",))
    shape = dataclasses.replace(nan, how="shape")
    assert mutate.live(nan, the_plan.calls) and not mutate.live(shape, the_plan.calls)
    assert all(torch.equal(b.contiguous().view(torch.uint8),  # bit for bit: empty_like's
                           args[0].contiguous().view(torch.uint8))  # memory may hold NaN
               for b, (_, args, _) in zip(before, calls)), \
        "liveness must not write into the recorded calls"
    saved = faults._active
    faults._active = [nan.fault()]
    try:
        red = [r for r, status in mutate._run_row(device, BY_NAME["dropout"]).items()
               if status != "pass"]
    finally:
        faults._active = saved
    assert red and all("/bfloat16/" in r for r in red), red


def test_a_foreach_kernel_that_swaps_same_shaped_tensors_holding_a_nan_fails_its_specials():
    """A _foreach kernel that swaps its first two outputs when an input holds a NaN is wrong
    only on lists whose first two tensors share a shape (a swap of two shapes is no answer
    it can give): the specials of the row's ``same_shape`` sample catch it, and only they."""
    from harness import faults
    from harness.ops import BY_NAME

    device, _ = dev.select("cpu")
    entry = BY_NAME["_foreach_exp"]
    saved = faults._active
    faults._active = [mutate.Mutant("aten._foreach_exp.default", "value:nonfinite", "swap",
                                    ("_foreach_exp",)).fault()]
    try:
        faulted = mutate._run_row(device, entry)
    finally:
        faults._active = saved
    red = sorted(record for record, status in faulted.items() if status != "pass")
    assert red and all("specials_same_shape" in record for record in red), red


@pytest.mark.parametrize("op, row", [("aten.mm.default", "mm"),
                                     ("aten._cdist_forward.default", "cdist"),
                                     ("aten.scatter_reduce.two", "scatter_reduce"),
                                     ("aten.multi_margin_loss.default", "multi_margin_loss")])
def test_a_kernel_that_changes_shape_on_a_nan_fails_the_nan_shape_sample(op, row):
    """Note [NaN shape samples]: a row whose NaN values torch leaves open has no special
    values, yet a kernel that answers a NaN input with another shape fails its NaN-shape
    sample, and nothing else; a kernel wrong only in values there passes (unjudged)."""
    from harness import faults
    from harness.ops import BY_NAME

    device, _ = dev.select("cpu")
    entry = BY_NAME[row]
    statuses = {}
    for how in ("shape", "element"):
        saved = faults._active
        faults._active = [mutate.Mutant(op, "value:nonfinite", how, (row,)).fault()]
        try:
            statuses[how] = mutate._run_row(device, entry)
        finally:
            faults._active = saved
    red = sorted(record for record, status in statuses["shape"].items() if status != "pass")
    assert red and all("/fwd/nan_shape_" in record for record in red), red
    assert any("/nan_shape_" in record for record in statuses["element"])
    assert all(status == "pass" for status in statuses["element"].values())


def test_an_in_place_op_is_probed_on_the_layout_its_condition_was_checked_on():
    """Note [Probing an in-place op]: the probe's private copy of an in-place op's arguments
    keeps their layout. torch refuses to write into an expanded tensor, so an in-place op
    wrong only for an expanded self is not live; one wrong only for an offset view is."""
    self = torch.randn(4, 5)
    calls = {"aten.clamp_min_.default": [(torch.ops.aten.clamp_min_.default, (self, 0.0), {})]}
    before = self.clone()
    expanded = mutate.Mutant("aten.clamp_min_.default", "layout:expanded", "element",
                             ("margin_ranking_loss",), ("float32",))
    offset = dataclasses.replace(expanded, condition="layout:offset")
    assert not mutate.live(expanded, calls)
    assert mutate.live(offset, calls)
    assert torch.equal(self, before), "liveness must not write into the recorded calls"
    view = torch.randn(9)[1:].view(2, 4).mT
    copy = mutate._laid_out_copy(view)
    assert (copy.stride(), copy.storage_offset(), copy.shape) == (
        view.stride(), view.storage_offset(), view.shape)
    assert torch.equal(copy, view) and copy.untyped_storage().data_ptr() != \
        view.untyped_storage().data_ptr()
