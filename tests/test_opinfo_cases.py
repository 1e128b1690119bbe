"""The OpInfo sweep's logic (harness.ops.opinfo): ids, selection, statuses, budget."""

import shutil
from pathlib import Path

import pytest
import torch

from harness import faults, regress
from harness.faults.catalog.opinfo import CUMSUM_UNSUPPORTED, SORT_FALLBACK
from harness.ops import opinfo
from harness.results import Record, read_document

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def op_db():
    db, why = opinfo.load_op_db()
    if db is None:
        pytest.skip(why)
    return db




def _case(key, dtype="float32"):
    return opinfo.OpInfoCase(key, dtype)


def test_case_ids_name_op_variant_and_dtype():
    case = _case("nn.functional.pad:reflect", "float16")
    assert case.id == "opinfo/nn.functional.pad:reflect/float16"
    assert case.param_id == "nn.functional.pad:reflect-float16"


def test_digest_depends_on_structure_not_values_or_tested_dtype(op_db):
    op = opinfo.find_op(op_db, "add")
    first = opinfo.samples(op, _case("add"), limit=3)
    again = opinfo.samples(op, _case("add"), limit=3)
    half = opinfo.samples(op, _case("add", "float16"), limit=3)
    digests = [opinfo.sample_digest(s, torch.float32) for s in first]
    assert digests == [opinfo.sample_digest(s, torch.float32) for s in again]
    assert digests == [opinfo.sample_digest(s, torch.float16) for s in half]
    assert all(len(d) == 8 and int(d, 16) >= 0 for d in digests)
    noisy = first[0].transform(lambda t: t + 1 if isinstance(t, torch.Tensor) else t)
    assert opinfo.sample_digest(noisy, torch.float32) == digests[0]


def test_signature_shows_shapes_strides_and_plain_arguments():
    class Sample:
        input = torch.ones(3, 4).t()
        args = (torch.zeros(2, dtype=torch.int64), 0.5, None)
        kwargs = {"dim": 1, "dtype": torch.float32}

    sig = opinfo.sample_signature(Sample, torch.float32)
    assert sig == "T(4, 3):s(1, 4)|(T(2,):int64,0.5,None)|{dim=1,dtype=D}"


def test_repeated_structures_get_numbered_digests():
    out = opinfo.unique_digests(["a", "b", "a", "a"])
    assert out[0] == out[2].split("~")[0] and out[2].endswith("~2") and out[3].endswith("~3")
    assert "~" not in out[1]


def test_cases_cover_at_least_500_op_db_names(op_db):
    cases = opinfo.cases(op_db)
    assert opinfo.distinct_ops(cases) >= 500
    assert {c.dtype for c in cases} == set(opinfo.DTYPES)
    assert not [c for c in cases if c.key == "bitwise_and"]  # no float dtype: not a case


def test_slice_and_rest_are_disjoint_and_complete(op_db):
    cases = opinfo.cases(op_db)
    head, rest = opinfo.slice_and_rest(cases)
    assert len(head) >= 40 and not set(head) & set(rest)
    assert set(head) | set(rest) == set(cases)
    assert {c.key for c in head} == set(opinfo.SLICE_OPS)  # every slice op still exists


def test_op_filter_selects_by_case_id():
    cases = [_case("exp"), _case("exp", "float16"), _case("expm1"), _case("log")]
    assert opinfo.select(cases, r"^opinfo/exp/") == cases[:2]
    assert opinfo.select(cases, "float16") == [cases[1]]
    assert opinfo.select(cases, None) == cases


def test_skip_table_names_real_ops_with_reasons(op_db):
    keys = {opinfo.op_key(op) for op in op_db}
    assert set(opinfo.SKIP_OPS) <= keys
    assert all(reason.strip() for reason in opinfo.SKIP_OPS.values())


def test_random_op_is_recorded_as_skip_with_its_reason(op_db, cpu):
    out = opinfo.run_case(opinfo.find_op(op_db, "bernoulli"), _case("bernoulli"), cpu)
    assert [(o.id, o.status) for o in out] == [("opinfo/bernoulli/float32/fwd", "skip")]
    assert "random" in out[0].message


def test_supported_op_passes_forward_and_backward(op_db, cpu):
    out = opinfo.run_case(opinfo.find_op(op_db, "cumsum"), _case("cumsum"), cpu)
    assert {o.id.split("/")[3] for o in out} == {o.direction for o in out} == {"fwd", "bwd"}
    assert all(o.status == "pass" for o in out)
    assert all(o.metrics and o.rules for o in out)


def test_wrong_numbers_fail(op_db, cpu, monkeypatch):
    drift = faults.perturb_op("test.exp_drift", family="test", description="exp 1% high",
                              op="aten.exp.default", checks=("-",),
                              transform=lambda out, args, kwargs: out * 1.01)
    monkeypatch.setattr(faults, "_active", [drift])
    out = opinfo.run_case(opinfo.find_op(op_db, "exp"), _case("exp"), cpu)
    failed = [o for o in out if "/fwd/" in o.id and o.status == "fail"]
    assert failed  # (an empty sample has nothing to get wrong)
    assert "not close" in failed[0].message and "opinfo/exp/float32/fwd/" in failed[0].message


def test_missing_kernel_is_unsupported_and_a_regression(op_db, cpu, monkeypatch):
    monkeypatch.setattr(faults, "_active", [CUMSUM_UNSUPPORTED])
    out = opinfo.run_case(opinfo.find_op(op_db, "cumsum"), _case("cumsum"), cpu)
    assert out and all(o.status == "unsupported" for o in out)
    assert "Could not run 'aten::cumsum'" in out[0].info["exception"]
    found = regress.compare_record(Record(out[0].id, status="unsupported"),
                                   Record(out[0].id, status="pass"), "torch-2.4.0")
    assert [(f.kind, f.old, f.new) for f in found] == [("regression", "pass", "unsupported")]


def test_cpu_fallback_warning_gives_fallback_status(op_db, cpu, monkeypatch):
    monkeypatch.setattr(faults, "_active", [SORT_FALLBACK])
    out = opinfo.run_case(opinfo.find_op(op_db, "sort"), _case("sort"), cpu)
    assert out and all(o.status == "fallback" for o in out)
    assert "aten::sort.stable" in out[0].fallback
    assert out[0].record_info["fallback_ops"] == out[0].fallback


@pytest.mark.parametrize("exc,status", [
    (NotImplementedError("whatever"), "unsupported"),
    (RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\''), "unsupported"),
    (RuntimeError("Could not run 'aten::foo' with arguments from the 'PrivateUse1' backend"),
     "unsupported"),
    (RuntimeError("shape '[2, 3]' is invalid for input of size 7"), "error"),
])
def test_errors_are_classified(exc, status):
    assert opinfo.classify_error(exc) == status


def test_budget_starts_with_the_first_case_and_runs_out():
    now = [100.0]
    budget = opinfo.Budget(10.0, clock=lambda: now[0])
    assert not budget.exhausted()
    budget.start()
    now[0] = 109.0
    assert not budget.exhausted()
    now[0] = 111.0
    assert budget.exhausted() and budget.elapsed == pytest.approx(11.0)


def test_cases_past_the_budget_are_skipped(op_db, cpu):
    now = [0.0]
    budget = opinfo.Budget(1.0, clock=lambda: now[0])
    budget.start()
    now[0] = 5.0
    out = opinfo.run_case(opinfo.find_op(op_db, "exp"), _case("exp"), cpu, budget=budget)
    assert [o.status for o in out] == ["skip"] and "--op-budget" in out[0].message


def test_load_op_db_turns_an_import_failure_into_a_reason(monkeypatch):
    import sys

    monkeypatch.setattr(opinfo, "_OP_DB", None)
    monkeypatch.setattr(opinfo, "_OP_DB_REASON", "")
    monkeypatch.setitem(sys.modules, "torch.testing._internal.common_methods_invocations", None)
    db, why = opinfo.load_op_db()
    assert db is None and "OpInfo database" in why and torch.__version__ in why


def test_sweep_skips_with_the_reason_when_op_db_is_unavailable(pytester, monkeypatch):
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    (pytester.path / "suites" / "ops").mkdir(parents=True)
    shutil.copy(ROOT / "suites" / "ops" / "test_opinfo.py",
                pytester.path / "suites" / "ops" / "test_opinfo_copy.py")
    monkeypatch.setattr(opinfo, "_OP_DB", None)
    monkeypatch.setattr(opinfo, "_OP_DB_REASON", "expecttest is not installed (fake)")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs", "--baseline", "off",
                                "--device", "cpu")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*expecttest is not installed (fake)*"])


def test_slice_runs_and_records_through_the_plugin(pytester):
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    (pytester.path / "suites" / "ops").mkdir(parents=True)
    shutil.copy(ROOT / "suites" / "ops" / "test_opinfo.py",
                pytester.path / "suites" / "ops" / "test_opinfo_copy.py")
    result = pytester.runpytest("-p", "no:cacheprovider", "--baseline", "off", "--device",
                                "cpu", "--op-filter", "^opinfo/(exp|cumsum)/")
    result.assert_outcomes(passed=2, skipped=1)  # the slow sweep: one skipped item
    data = read_document(sorted((pytester.path / "results").glob("*.json.gz"))[-1])
    ids = [rid for rid in data["records"] if rid.startswith("opinfo/")]
    assert ids and all(rid.split("/")[1] in ("exp", "cumsum") for rid in ids)
