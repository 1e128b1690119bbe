"""The one op policy (harness.ops.policy): the same op gets the same answer in every pipeline."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from harness import faults
from harness.ops import BY_NAME, OpOutcome, opinfo, policy, run_case
from harness.ops.spec import case_seed, materialize

# ------------------------------------------------------------------------ exceptions

NO_KERNEL = RuntimeError("Could not run 'aten::foo' with arguments from the 'PrivateUse1' "
                         "backend. This could be because the operator doesn't exist")


@pytest.mark.parametrize("exc,status", [
    (NotImplementedError("whatever"), "unsupported"),
    (RuntimeError('"addmm_impl_cpu_" not implemented for \'Half\''), "unsupported"),
    (NO_KERNEL, "unsupported"),
    (RuntimeError("Cannot use ReduceOp.AVG with Gloo"), "unsupported"),
    (RuntimeError("result type Float can't be cast to the desired output type Long"),
     "unsupported"),
    (ValueError("SyncBatchNorm expected input tensor to be on GPU"), "unsupported"),
    (RuntimeError("shape '[2, 3]' is invalid for input of size 7"), "error"),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), "error"),
])
def test_one_classifier_answers_for_every_pipeline(exc, status):
    from harness.distributed import checks as dist_checks

    got, reason = policy.classify_exception(exc)
    assert got == status and type(exc).__name__ in reason
    assert opinfo.classify_error(exc) == status
    assert dist_checks.classify_exception is policy.classify_exception


def test_catalog_records_a_missing_kernel_as_unsupported_like_the_sweep(cpu, monkeypatch):
    def no_kernel(out, args, kwargs):
        raise NO_KERNEL

    fault = faults.perturb_op("test.exp_no_kernel", family="test", description="-",
                              op="aten.exp", transform=no_kernel, checks=("-",))
    monkeypatch.setattr(faults, "_active", [fault])
    entry = BY_NAME["exp"]
    out = run_case(cpu, entry, "float32", entry.samples[0])
    assert {o.status for o in out} == {"unsupported"}
    assert "no kernel" in out[0].info["exception"]


# ------------------------------------------------------------------------- standards

@pytest.mark.parametrize("name,dtype,direction,standard", [
    ("add", torch.float32, "fwd", "absolute"),          # catalog name
    ("aten.add.Tensor", "float16", "fwd", "absolute"),  # aten name
    ("aten::addmm", "float32", "fwd", "ulp"),
    ("nn.functional.linear", "bfloat16", "bwd", "ulp"),  # OpInfo name
    ("nn.functional.relu", "float32", "fwd", "absolute"),
    ("div:no_rounding_mode", "float32", "fwd", "absolute"),
    ("nn.functional.pad:reflect", "float32", "fwd", "exact"),
    ("exp", "float32", "bwd", "relative"),
    ("cat", "float32", "bwd", "exact"),
    ("add", torch.int64, "fwd", "exact"),              # integer outputs: always exact
    ("some_new_op", "float16", "fwd", "relative"),
])
def test_one_standards_table_keyed_by_any_op_name(name, dtype, direction, standard):
    assert policy.standard_for(name, dtype, direction) == standard


def test_catalog_rows_take_their_standard_from_the_table():
    for entry in BY_NAME.values():
        assert entry.standard == policy.standard_for(entry.name, "float32"), entry.name
        if entry.backward:
            assert entry.gradient_standard == policy.standard_for(entry.name, "float32",
                                                                  "bwd"), entry.name


def test_sweep_judges_add_by_the_same_standard_as_the_catalog():
    case = opinfo.OpInfoCase("add", "float32")
    assert policy.standard_for(case.key, case.dtype) == BY_NAME["add"].standard == "absolute"


# ------------------------------------------------------ one op through every pipeline

@dataclasses.dataclass
class _SampleInput:
    input: object
    args: tuple
    kwargs: dict
    output_process_fn_grad: object = None


class _AsOpInfo:
    """A catalog row and one of its samples, seen through the OpInfo interface: the sweep
    then runs exactly the catalog's inputs."""

    def __init__(self, entry, values, kwargs):
        self.entry, self.values, self.kwargs = entry, values, kwargs
        self.name, self.variant_test_name = entry.name, ""
        self.supports_autograd = entry.backward

    def supported_backward_dtypes(self, _device):
        return {torch.float16, torch.bfloat16, torch.float32, torch.float64}

    def supports_dtype(self, _dtype, _device):
        return True

    def sample_inputs(self, _device, _dtype, requires_grad=False):
        tensors = [v.clone().requires_grad_(requires_grad and v.is_floating_point())
                   if isinstance(v, torch.Tensor) else v for v in self.values]
        yield _SampleInput(tensors[0], tuple(tensors[1:]), dict(self.kwargs))

    def __call__(self, *args, **kwargs):
        return self.entry.fn(*args, **kwargs)


@pytest.mark.parametrize("op,dtype", [
    ("exp", "float16"), ("exp", "float32"), ("relu", "bfloat16"), ("clamp", "float32"),
    ("mm", "float16"), ("sum", "float32"), ("add", "float32")])
def test_same_op_gets_same_status_standard_and_metrics_in_each_pipeline(op, dtype, cpu,
                                                                       monkeypatch):
    entry = BY_NAME[op]
    sample = entry.samples[0]
    catalog = {o.direction: o for o in run_case(cpu, entry, dtype, sample)}

    # the same inputs and cotangents the catalog drew, in its generator's order
    gen = torch.Generator().manual_seed(case_seed(0, entry.name, dtype, sample.name))
    values = materialize(sample, dtype, gen)
    shape = entry.fn(*values, **sample.kwargs).shape
    cot = torch.randn(shape, generator=gen).to(getattr(torch, dtype)).double()
    monkeypatch.setattr(opinfo, "_cotangents", lambda like, seed: [cot for _ in like])
    fake = _AsOpInfo(entry, values, sample.kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sweep = opinfo.run_case(fake, opinfo.OpInfoCase(op, dtype), cpu)
    by_direction = {o.direction: o for o in sweep}

    assert set(by_direction) == set(catalog) == {"fwd", "bwd"}
    for direction, mine in catalog.items():
        theirs = by_direction[direction]
        assert type(theirs) is type(mine) is OpOutcome
        assert theirs.id.split("/")[3] == mine.id.split("/")[3] == direction
        assert theirs.status == mine.status == "pass", theirs.message
        standard = entry.standard if direction == "fwd" else entry.gradient_standard
        assert theirs.standard == mine.standard == standard
        assert theirs.record_info["standard"] == mine.record_info["standard"] == standard
        assert theirs.metrics == mine.metrics
        assert theirs.rules == mine.rules
        assert theirs.info["aten_ops"] == mine.info["aten_ops"]
        assert theirs.fallback == mine.fallback == []


class _ExpModel(torch.nn.Module):
    """A model whose one unusual op is ``exp``: its model case runs the catalog's exp."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.full((8,), 0.5))

    def forward(self, x):
        return torch.exp(x * self.scale)


def test_model_case_of_an_op_answers_like_its_catalog_row(cpu):
    from harness.model import capture, cases, spec

    torch.manual_seed(0)
    model = spec.ModelSpec("expnet", "tests:expnet", _ExpModel(), (torch.randn(4, 8),))
    built = cases.build_cases(capture.capture_step(model))
    case = next(c for c in built if c.call.op == "aten.exp.default")
    ours = {o.direction: o for o in cases.run_model_case(cpu, case)}
    entry = BY_NAME["exp"]
    catalog = {o.direction: o for o in run_case(cpu, entry, "float32", entry.samples[0])}

    assert set(ours) == set(catalog) == {"fwd", "bwd"}
    for direction, mine in catalog.items():
        theirs = ours[direction]
        assert type(theirs) is type(mine) is OpOutcome
        assert theirs.id == f"model/expnet/aten.exp.default/{case.call.digest}/{direction}"
        assert theirs.status == mine.status == "pass", theirs.message
        assert theirs.standard == mine.standard
        assert set(theirs.metrics) == set(mine.metrics)  # other inputs, the same judgement
        assert set(theirs.rules) == set(mine.rules)


class _ClampModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(8))

    def forward(self, x):
        y = (x * self.w).relu_()                     # in place: judged as relu
        return y.clamp(min=0.1) + y.clamp(max=0.5)   # 0.1 is no fp16 value; 0.5 is


@pytest.mark.parametrize("amp", [None, torch.float16])
def test_model_cases_take_every_standard_from_the_one_policy_table(amp):
    from harness.model import capture, cases, spec

    model = spec.ModelSpec("clampnet", "tests:clampnet", _ClampModel(), (torch.randn(4, 8),))
    built = cases.build_cases(capture.capture_step(model, amp=amp))
    standards = {}
    for case in built:
        if case.entry is None:
            continue
        key = policy.rounded_bound_key(case.call.op, cases._scalars(case.call),
                                       getattr(torch, case.dtype))
        assert case.entry.standard == policy.standard_for(key, case.dtype), case.call.op
        assert case.entry.gradient_standard == policy.standard_for(key, case.dtype, "bwd")
        standards.setdefault(case.call.op.split(".")[1], set()).add(
            (case.dtype, case.entry.standard))
    assert ("float32", "absolute") in standards["relu_"]           # like the catalog's relu
    clamp = {dtype_std for op in ("clamp", "clamp_min", "clamp_max")
             for dtype_std in standards.get(op, ())}
    if amp is None:  # fp32 holds 0.5 exactly, not 0.1: exact and rounded-bound clamps
        assert ("float32", "absolute") in clamp and ("float32", "exact") in clamp
    assert policy.rounded_bound_key("aten.clamp_min.default", [0.5], torch.float16) \
        == "aten.clamp_min.default"
    assert policy.rounded_bound_key("aten.clamp_min.default", [0.1], torch.float16) \
        == "clamp_min_rounded_bound"
    assert policy.standard_for("clamp_min_rounded_bound", "float16") == "absolute"
    assert policy.standard_for("aten.clamp_min.default", "float16") == "exact"


# -------------------------------------------------------------------------- watching

def test_records_name_the_aten_ops_of_their_dut_computation(cpu):
    entry = BY_NAME["clamp"]
    fwd, bwd = run_case(cpu, entry, "float32", entry.samples[0])
    assert "aten.clamp" in fwd.info["aten_ops"]["fwd"]
    assert bwd.info["aten_ops"] == fwd.info["aten_ops"]
    assert bwd.info["aten_ops"]["bwd"]  # the backward's own kernels, kept apart
    assert fwd.info["aten_ops"]["fwd"] == sorted(fwd.info["aten_ops"]["fwd"])


def test_catalog_records_a_cpu_fallback_like_the_sweep(cpu, monkeypatch):
    from harness.faults.catalog.opinfo import SORT_FALLBACK

    monkeypatch.setattr(faults, "_active", [SORT_FALLBACK])
    entry = BY_NAME["sort"]
    out = run_case(cpu, entry, "float32", entry.samples[0])
    assert out and {o.status for o in out} == {"fallback"}
    assert out[0].fallback == ["aten::sort.stable"]
    assert out[0].record_info["fallback_ops"] == ["aten::sort.stable"]
    assert "host CPU" in out[0].message


# ------------------------------------------------------------------ a CPU DUT's low side

def _counted_run(entry, dtype: str, calls: list):
    """A :data:`~harness.ops.runner.Run` of ``entry``'s first sample that notes where and
    in which dtype each execution ran."""
    from harness.ops.runner import Side, _execute

    sample = entry.samples[0]
    values = materialize(sample, dtype, torch.Generator().manual_seed(0))

    def run(where, float_dtype, noting, magnitudes):
        calls.append((where.type, float_dtype, noting is not None, magnitudes))
        outs, grads, _ = _execute(entry, values, sample, where, float_dtype, True, None,
                                  torch.Generator().manual_seed(1), noting)
        return Side(outs, grads)

    return run


def test_a_cpu_dut_without_faults_is_its_own_low(cpu):
    """Note [A CPU DUT is its own low]: no third execution of the same computation."""
    from harness.ops.runner import execute

    calls: list = []
    done = execute(cpu, _counted_run(BY_NAME["exp"], "float16", calls), torch.float16,
                   torch.float32)
    assert done.low is done.dut and done.ref is not done.dut
    # measured and noted on the DUT, then the up-cast reference: nothing else
    assert calls == [("cpu", torch.float16, False, False), ("cpu", torch.float16, True, False),
                     ("cpu", torch.float32, False, False)]


def test_a_fault_gives_the_cpu_dut_a_low_of_its_own(cpu):
    """With a fault active the DUT is another kernel: ``low`` is the CPU's, run apart, and
    the fault still turns the case red (the CPU's error does not excuse it)."""
    from harness.ops.runner import execute

    entry = BY_NAME["exp"]
    assert {o.status for o in run_case(cpu, entry, "float32", entry.samples[0])} == {"pass"}
    faults.set_active(["ops.exp_rel_error"])  # fp32 exp 1e-4 off
    calls: list = []
    done = execute(cpu, _counted_run(entry, "float32", calls), torch.float32, torch.float64)
    assert done.low is not done.dut
    assert calls.count(("cpu", torch.float32, False, False)) == 2  # the DUT, then low
    assert {o.status for o in run_case(cpu, entry, "float32", entry.samples[0])} == {"fail"}


def test_a_bare_cpu_runs_without_the_fallback_capture_and_a_fault_brings_it_back(
        cpu, monkeypatch):
    """Note [The host CPU does not fall back to itself]: no capture where nothing can fall
    back (the records are the same: the capture would stay empty); with a fault active
    the capture listens again, so a fault that fakes a fallback is still seen."""
    from harness import fallback
    from harness.faults.catalog.opinfo import SORT_FALLBACK

    opened = []
    real = fallback.capture

    def counting(*args, **kwargs):
        opened.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(fallback, "capture", counting)
    entry = BY_NAME["sort"]
    plain = run_case(cpu, entry, "float32", entry.samples[0])
    assert policy.bare_cpu(cpu) and not opened
    assert plain and {o.status for o in plain} == {"pass"} and plain[0].fallback == []
    monkeypatch.setattr(faults, "_active", [SORT_FALLBACK])
    assert not policy.bare_cpu(cpu)
    faked = run_case(cpu, entry, "float32", entry.samples[0])
    assert len(opened) == 2  # measured and noted, each with its capture
    assert {o.status for o in faked} == {"fallback"}


# ------------------------------------------- Note [A test's outputs judged together]

def _same_outcomes(a: list[OpOutcome], b: list[OpOutcome]) -> None:
    assert [(o.id, o.status, o.message, o.standard, o.fallback) for o in a] == \
           [(o.id, o.status, o.message, o.standard, o.fallback) for o in b]
    assert [o.metrics for o in a] == [o.metrics for o in b]  # bits: one pass or many
    assert [{k: r.json for k, r in o.rules.items()} for o in a] == \
           [{k: r.json for k, r in o.rules.items()} for o in b]


@pytest.mark.parametrize("fault", [None, "ops.exp_rel_error"])
@pytest.mark.parametrize("held", [None, 1])
def test_a_tests_cases_judged_together_are_judged_as_each_alone(cpu, monkeypatch, fault, held):
    """run_cases hands back, case by case in order, exactly what run_case gives each case
    alone (statuses, messages, metrics to the bit, rules), a failing case among passing
    ones included, whether it judges every case at once or each as soon as it is run
    (``JUDGED_TOGETHER`` 1)."""
    from harness.ops import runner

    if held is not None:
        monkeypatch.setattr(runner, "JUDGED_TOGETHER", held)
    if fault is not None:
        faults.set_active([fault])
    cases = [(dtype, sample, ("fwd", "bwd")) for name in ("exp", "mm", "argmax")
             for dtype in ("float32", "float16") for sample in BY_NAME[name].samples
             if not sample.slow and dtype in BY_NAME[name].all_dtypes]
    entries = {name: [c for c in cases if c[1] in BY_NAME[name].samples]
               for name in ("exp", "mm", "argmax")}
    for name, own in entries.items():
        together = list(runner.run_cases(cpu, BY_NAME[name], own))
        assert [case for case, _ in together] == [(dtype, sample) for dtype, sample, _ in own]
        for (dtype, sample, directions), (_, outcomes) in zip(own, together):
            _same_outcomes(outcomes, run_case(cpu, BY_NAME[name], dtype, sample, 0, directions))
    if fault is not None:
        statuses = {o.status for _, outcomes in runner.run_cases(cpu, BY_NAME["exp"],
                                                                entries["exp"])
                    for o in outcomes}
        assert statuses == {"pass", "fail"}  # fp32 exp fails, fp16 exp passes


def test_cases_judged_together_keep_their_cpu_fallback(cpu, monkeypatch):
    """A case whose DUT fell back to the host CPU is marked so once judged, as alone."""
    from harness.faults.catalog.opinfo import SORT_FALLBACK
    from harness.ops import runner

    monkeypatch.setattr(faults, "_active", [SORT_FALLBACK])
    entry = BY_NAME["sort"]
    cases = [("float32", sample, ("fwd", "bwd")) for sample in entry.samples if not sample.slow]
    together = list(runner.run_cases(cpu, entry, cases))
    assert len(together) == len(cases) > 1
    for (dtype, sample, directions), (_, outcomes) in zip(cases, together):
        assert {o.status for o in outcomes} == {"fallback"}
        _same_outcomes(outcomes, run_case(cpu, entry, dtype, sample, 0, directions))
