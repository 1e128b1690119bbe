"""Tests of the op catalog (data shape and coverage) and of its generic runner."""

import re

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from harness import faults
from harness.compare import STANDARDS
from harness.device import Device
from harness.ops import BY_NAME, CATALOG, OpEntry, Sample, T, filter_regex, run_case
from harness.ops.spec import DTYPES, numel
from harness.ops.stats import dropout_judge
from harness.results import read_document

# Rows whose large sample reaches 1M elements in its output rather than its inputs.
OUTPUT_LARGE = {"outer", "one_hot", "repeat", "tile", "repeat_interleave", "unfold_im2col",
                "cdist"}

REQUIRED = """conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d linear
matmul mm bmm addmm baddbmm einsum max_pool2d avg_pool2d adaptive_avg_pool2d
adaptive_max_pool2d batch_norm layer_norm group_norm instance_norm softmax log_softmax relu
gelu gelu_tanh silu sigmoid tanh hardswish leaky_relu elu softplus mish cross_entropy
nll_loss mse_loss l1_loss smooth_l1_loss binary_cross_entropy
binary_cross_entropy_with_logits kl_div exp log log1p expm1 sqrt rsqrt pow div reciprocal
sin cos erf sum mean var std norm amax argmax logsumexp cumsum prod gather scatter
scatter_add index_select index_add masked_fill where embedding embedding_bag cat stack
permute_contiguous flip roll pad_constant interpolate_nearest interpolate_bilinear sort
topk argsort dropout clip_grad_norm_ _foreach_add _foreach_mul _foreach_addcmul
_foreach_addcdiv _foreach_lerp _foreach_sqrt""".split()

CPU = Device("cpu")


def test_catalog_has_at_least_150_distinct_ops_with_unique_names():
    names = [entry.name for entry in CATALOG]
    assert len(names) == len(set(names))
    assert len(names) >= 150


def test_catalog_covers_every_op_the_issue_names():
    missing = [name for name in REQUIRED if name not in BY_NAME]
    assert not missing


@pytest.mark.parametrize("entry", CATALOG, ids=lambda e: e.name)
def test_entry_is_well_formed(entry):
    assert entry.standard in STANDARDS and entry.gradient_standard in STANDARDS
    assert entry.dtypes and all(d in DTYPES for d in entry.dtypes)
    names = [s.name for s in entry.samples]
    assert len(names) == len(set(names)), names
    assert all(re.fullmatch(r"[A-Za-z0-9_.]+", n) for n in names), names
    assert re.fullmatch(r"[A-Za-z0-9_]+", entry.name)
    # besides the size-boundary sweep's (Note [Size boundaries]: n<elements>)
    large = [s for s in entry.samples if s.slow and not re.fullmatch(r"n\d+", s.name)]
    assert len(large) == 1, "every op has one large (slow) sample"
    assert all(d in DTYPES for s in entry.samples for d in s.dtypes or ())
    if entry.name not in OUTPUT_LARGE:
        biggest = max(numel(Sample("x", (a,))) for a in large[0].args)
        assert biggest >= 1 << 20
    assert any(not s.slow for s in entry.samples)


def test_case_ids_and_filter_select_exactly_one_case():
    regex = filter_regex("dropout-float16-fwd-p0.1")
    assert re.search(regex, "dropout-float16-fwd-p0.1")
    assert not re.search(regex, "dropout-float16-fwd-p0x1")
    assert not re.search(regex, "dropout-float16-fwd-p0.1x")


# ---------------------------------------------------------------------------- runner

def _sample(entry, name):
    return next(s for s in entry.samples if s.name == name)


def test_runner_passes_exp_forward_and_backward_in_every_dtype():
    entry = BY_NAME["exp"]
    for dtype in entry.dtypes:
        outcomes = run_case(CPU, entry, dtype, _sample(entry, "odd257"))
        assert [o.direction for o in outcomes] == ["fwd", "bwd"]
        assert all(o.status == "pass" for o in outcomes), [o.message for o in outcomes]
        assert outcomes[0].id == f"ops/exp/{dtype}/fwd/odd257"
        assert "max_rel_err" in outcomes[0].metrics


def test_runner_is_reproducible_from_the_case_id_and_seed():
    entry = BY_NAME["softmax"]
    sample = _sample(entry, "typical")
    first = run_case(CPU, entry, "bfloat16", sample, seed=3)[0].metrics
    torch.manual_seed(1234)  # the global RNG must not matter
    again = run_case(CPU, entry, "bfloat16", sample, seed=3)[0].metrics
    other = run_case(CPU, entry, "bfloat16", sample, seed=4)[0].metrics
    assert first == again
    assert first != other


def test_runner_integer_dtype_has_no_backward_and_is_exact():
    entry = BY_NAME["add"]
    outcomes = run_case(CPU, entry, "int32", _sample(entry, "bcast"))
    assert [o.direction for o in outcomes] == ["fwd"]
    assert outcomes[0].status == "pass"
    assert "mismatched" in outcomes[0].metrics


def test_runner_fails_a_faulty_kernel_inside_the_scope_only(monkeypatch):
    fault = faults.perturb_op("test.exp_off", family="test", description="exp off by 1e-3",
                              op="aten.exp.default", checks=(),
                              transform=lambda out, args, kwargs: out * 1.001)
    monkeypatch.setattr(faults, "_active", [fault])
    entry = BY_NAME["exp"]
    fwd, bwd = run_case(CPU, entry, "float32", _sample(entry, "typical"))
    assert fwd.status == "fail"
    assert "max_rel_err" in fwd.message and "limit 10x" in fwd.message
    assert bwd.status == "fail"  # exp's backward reuses the faulty forward output


def test_runner_reaches_patched_python_apis(monkeypatch):
    fault = faults.patch_attr("test.relu_leaks", family="test", description="leaky relu",
                              target="torch.nn.functional.relu", checks=(),
                              replace=lambda orig: (lambda x, inplace=False:
                                                    torch.where(x > 0, x, 0.01 * x)))
    monkeypatch.setattr(faults, "_active", [fault])
    entry = BY_NAME["relu"]
    assert run_case(CPU, entry, "float32", _sample(entry, "typical"))[0].status == "fail"


def test_runner_reports_errors_and_unsupported_dtypes():
    def broken(x):
        raise RuntimeError("kernel exploded")

    def missing(x):
        raise RuntimeError('"foo_cpu" not implemented for \'Half\'')

    sample = Sample("typical", (T((4, 4)),))
    err = run_case(CPU, OpEntry("broken", broken, (sample,)), "float32", sample)
    assert {o.status for o in err} == {"error"}
    assert "kernel exploded" in err[0].message
    uns = run_case(CPU, OpEntry("missing", missing, (sample,)), "float16", sample)
    assert {o.status for o in uns} == {"unsupported"}


def test_runner_catches_nan_turned_into_zero(monkeypatch):
    fault = faults.perturb_op("test.log_nan0", family="test", description="log NaN->0",
                              op="aten.log.default", checks=(),
                              transform=lambda out, a, k: torch.nan_to_num(out, nan=0.0))
    monkeypatch.setattr(faults, "_active", [fault])
    entry = BY_NAME["log"]
    fwd = run_case(CPU, entry, "float32", _sample(entry, "negatives"))[0]
    assert fwd.status == "fail" and "NaN/Inf" in fwd.message


# ------------------------------------------------------------------- dropout judge

def _dropout_entry(fn):
    return OpEntry("dropout_test", fn, (), judge=dropout_judge())


DROPOUT_SAMPLE = Sample("p0.3", (T((64, 64), "nonzero"),), {"p": 0.3, "training": True})


def test_dropout_judge_passes_torch_dropout():
    out = run_case(CPU, _dropout_entry(F.dropout), "float16", DROPOUT_SAMPLE)
    assert [o.status for o in out] == ["pass", "pass"], [o.message for o in out]
    assert abs(out[0].metrics["keep_rate"] - 0.7) < 0.05


def test_dropout_judge_fails_a_wrong_keep_rate():
    def drops_too_much(x, p, training):
        return F.dropout(x, min(1.0, p * 1.5), training) * ((1 - p * 1.5) / (1 - p))

    out = run_case(CPU, _dropout_entry(drops_too_much), "float32", DROPOUT_SAMPLE)
    assert out[0].status == "fail" and "keep rate" in out[0].message


def test_dropout_judge_fails_a_wrong_scale():
    def unscaled(x, p, training):
        return F.dropout(x, p, training) * (1 - p)

    out = run_case(CPU, _dropout_entry(unscaled), "float32", DROPOUT_SAMPLE)
    assert out[0].status == "fail" and "1/(1-p)" in out[0].message


# ------------------------------------------------------------------- the suite, end to end

def test_op_filter_runs_and_records_exactly_one_case(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "suites/ops/test_catalog.py", "--op-filter", filter_regex("exp-float16-bwd-odd257"),
         "--baseline", "off", "--results-dir", str(tmp_path)],
        cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    (results_file,) = tmp_path.glob("*.json.gz")
    records = read_document(results_file)["records"]
    ops = {k: v for k, v in records.items() if k.startswith("ops/exp/")}
    assert list(ops) == ["ops/exp/float16/bwd/odd257"]
    record = ops["ops/exp/float16/bwd/odd257"]
    assert record["status"] == "pass"
    assert record["rules"]["max_rel_err"]["rel"] == 2.0
    assert {"max_rel_err", "ref_max_rel_err", "cosine", "nan_inf_mismatch"} <= set(record["metrics"])


def test_runner_reports_only_the_requested_direction():
    entry = BY_NAME["exp"]
    only_bwd = run_case(CPU, entry, "float16", _sample(entry, "typical"), directions=("bwd",))
    assert [o.direction for o in only_bwd] == ["bwd"] and only_bwd[0].status == "pass"
    drop = BY_NAME["dropout"]
    only_bwd = run_case(CPU, drop, "float32", drop.samples[0], directions=("bwd",))
    assert [o.direction for o in only_bwd] == ["bwd"] and only_bwd[0].status == "pass"


def test_distinct_rows_get_an_expanded_sample_only_where_a_repeat_keeps_them_distinct():
    """Note [Layout samples]: a stride-0 view repeats dim 0; a pooling window (WINDOWED) or a
    slice along dim 1 stays distinct, a sort along dim 0 (msort) or over all (argmax's
    ``all``) would not."""
    def expanded(name):
        return [s.name for s in BY_NAME[name].samples if s.name.endswith("_expanded")]

    for name in ("sort", "argmax", "kthvalue", "max_pool2d", "avg_pool3d"):
        assert expanded(name) == ["typical_expanded"], name
        sample = next(s for s in BY_NAME[name].samples if s.name == "typical_expanded")
        assert sample.args[0].domain == "distinct"
    assert BY_NAME["argmax"].samples[0].kwargs == {"dim": 1}
    assert not expanded("msort") and not expanded("clamp_tie")


def test_a_sample_past_two_to_the_30_makes_no_whole_input_cast():
    """Note [Size boundaries]: a sample past 2^30 elements is run by the DUT twice and by
    the CPU reference once, so an accumulation dtype wider than the input's (torch's CPU
    reduction casts the whole input to it first: 17 GiB for 2^31 uint8 into int64) must
    not be asked for; the same sample on 7 elements shows which dtype the op computes in."""
    import dataclasses

    from harness.ops.spec import materialize

    huge = [(entry, sample) for entry in CATALOG for sample in entry.samples
            if any(isinstance(a, T) and numel(Sample("x", (a,))) > 1 << 30
                   for a in sample.args)]
    assert huge, "the size sweep's 2^31 + 1 sample is in the catalog"
    for entry, sample in huge:
        small = dataclasses.replace(sample, args=tuple(
            dataclasses.replace(a, shape=(7,)) if isinstance(a, T) else a for a in sample.args))
        for dtype in sample.dtypes or entry.dtypes:
            values = materialize(small, dtype, torch.Generator().manual_seed(0))
            out = entry.fn(*values, **small.kwargs)
            assert out.dtype == DTYPES[dtype], (
                f"{entry.name} {sample.name} in {dtype} computes in {out.dtype}: each run "
                f"would first cast all of its input to {out.dtype}")
