"""harness.model: capture of a training step, input parsing, inventory, cases, the suite."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import early
import pytest
import torch
from torch import nn

from harness import faults, models
from harness.device import Device
from harness.model import capture as capture_mod
from harness.model import cases as cases_mod
from harness.model import inventory as inventory_mod
from harness.model import options, spec

ROOT = Path(__file__).resolve().parent.parent


class _Tiny(nn.Module):
    """Linear -> BatchNorm1d -> ReLU -> Linear: forward, backward and optimizer ops."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 5)
        self.bn = nn.BatchNorm1d(5)
        self.fc2 = nn.Linear(5, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def _tiny_spec(**kw) -> spec.ModelSpec:
    torch.manual_seed(0)
    return spec.ModelSpec("tiny", "tests:tiny", _Tiny(), (torch.randn(4, 6),), **kw)


@pytest.fixture(scope="module")
def tiny_capture():
    return capture_mod.capture_step(_tiny_spec())


# ------------------------------------------------------------------------- capture

def test_capture_labels_each_call_with_its_phase(tiny_capture):
    by_phase: dict[str, set[str]] = {}
    for call in tiny_capture.calls:
        by_phase.setdefault(call.phase, set()).add(call.op)
    assert {"aten.addmm.default", "aten.native_batch_norm.default", "aten.relu.default",
            "aten._log_softmax.default", "aten.nll_loss_forward.default"} <= by_phase["forward"]
    assert {"aten.mm.default", "aten.native_batch_norm_backward.default",
            "aten.threshold_backward.default"} <= by_phase["backward"]
    assert any(op.startswith("aten._foreach_") for op in by_phase["optimizer"])
    assert not any("randint" in op for ops in by_phase.values() for op in ops), \
        "drawing the loss target is the harness's, not the model's"


def test_capture_keeps_shapes_strides_grad_flags_and_counts(tiny_capture):
    addmm = [c for c in tiny_capture.calls if c.op == "aten.addmm.default"]
    first = next(c for c in addmm if c.tensors()[1].shape == (4, 6))
    bias, x, weight_t = first.tensors()
    assert (bias.shape, bias.requires_grad) == ((5,), True)
    assert (x.shape, x.dtype, x.contiguous, x.requires_grad) == ((4, 6), "float32", True, False)
    assert weight_t.shape == (6, 5) and weight_t.stride == (1, 6) and not weight_t.contiguous
    assert first.signature.startswith("(f32[5]:g,f32[4,6],f32[6,5]:s(1,6):g)")
    assert first.count == 1 and first.phases == {"forward": 1}
    assert tiny_capture.total_calls == sum(c.count for c in tiny_capture.calls)
    bn = next(c for c in tiny_capture.calls if c.op == "aten.native_batch_norm.default")
    assert bn.mutates == (3, 4), "running_mean and running_var are written"
    assert "True,0.1,1e-05" in bn.signature


def test_capture_digests_are_stable_across_runs(tiny_capture):
    again = capture_mod.capture_step(_tiny_spec())
    assert [(c.op, c.digest) for c in again.calls] == [(c.op, c.digest)
                                                      for c in tiny_capture.calls]
    assert all(len(c.digest) == 8 for c in again.calls)


def test_capture_under_fp16_autocast_sees_casts_and_the_grad_scaler():
    cap = capture_mod.capture_step(_tiny_spec(), amp=torch.float16, optimizer="adamw")
    forward = [c for c in cap.calls if c.phase == "forward"]
    assert any(c.op == "aten.addmm.default" and c.tensors()[0].dtype == "float16"
               for c in forward)
    assert any(c.op == "aten._to_copy.default" for c in forward)
    optimizer_ops = {c.op for c in cap.calls if "optimizer" in c.phases}
    assert "aten._amp_foreach_non_finite_check_and_unscale_.default" in optimizer_ops
    assert cap.amp == "float16" and cap.optimizer == "adamw"


def test_optimizer_names_match_the_cli_choices():
    assert sorted(capture_mod.OPTIMIZERS) == sorted(options.OPTIMIZER_NAMES)


# --------------------------------------------------------------------- input specs

@pytest.mark.parametrize("text, shape, dtype", [
    ("8x3x32x32", (8, 3, 32, 32), "float32"),
    ("4x16:int64", (4, 16), "int64"),
    ("7:bfloat16", (7,), "bfloat16"),
])
def test_input_spec_parses(text, shape, dtype):
    assert spec.parse_tensor_spec(text) == spec.TensorSpec(shape, dtype)


@pytest.mark.parametrize("text, needle", [
    ("8x3xx32", "sizes joined by 'x'"),
    ("8-3-32", "sizes joined by 'x'"),
    ("8x3:float8", "unknown dtype 'float8'; choose from float32"),
    ("", "give one or more shapes"),
    ("8x3,", "give one or more shapes"),
])
def test_input_spec_errors_name_the_value_and_the_fix(text, needle):
    with pytest.raises(spec.SpecError) as info:
        spec.parse_tensor_specs(text, source="--model-input")
    assert needle in str(info.value)
    assert "--model-input" in str(info.value)


@pytest.mark.parametrize("text, needle", [
    ("resnet18", "is not PKG.MOD:FACTORY"),
    ("no_such_module_xyz:build", "cannot import 'no_such_module_xyz'"),
    ("harness.models:nothing_here", "has no callable 'nothing_here'"),
    ("harness.models:RESNET_SCALES", "has no callable"),
    ("harness.models:SimpleCNN", "the input shape must be given"),
])
def test_factory_errors_say_what_is_wrong(text, needle):
    with pytest.raises(spec.SpecError, match=needle.replace("(", r"\(")):
        spec.load_factory(text)


def test_amp_values():
    assert spec.parse_amp("bf16") is torch.bfloat16
    assert spec.parse_amp("float16") is torch.float16
    assert spec.parse_amp(None) is None
    with pytest.raises(spec.SpecError, match="choose from bf16"):
        spec.parse_amp("fp8")


# ----------------------------------------------------------------------- inventory

def test_inventory_uses_the_dispatch_key_of_the_device_type(tiny_capture, monkeypatch):
    asked: list[tuple[str, str]] = []
    missing = {"aten::native_batch_norm_backward"}
    fallback_only = {"aten::threshold_backward"}

    def has_kernel(name, key):
        asked.append((name, key))
        if key.startswith("Composite"):
            return False
        return key == "PrivateUse1" and name not in missing | fallback_only

    monkeypatch.setattr(inventory_mod, "_has_kernel", has_kernel)
    monkeypatch.setattr(inventory_mod, "_has_computed",
                        lambda name, key: name in fallback_only)
    inv = inventory_mod.inventory(tiny_capture, "npu")
    assert {key for _, key in asked} >= {"PrivateUse1", "CompositeExplicitAutograd"}
    verdicts = {o.qualname: o.verdict for o in inv.ops}
    assert verdicts["aten::native_batch_norm_backward"] == "unsupported"
    assert verdicts["aten::threshold_backward"] == "fallback"
    assert verdicts["aten::addmm"] == "ok"
    assert not inv.will_run
    summary = inv.summary()
    assert summary["unsupported"]["ops"] == 1
    assert sum(s["calls"] for s in summary.values()) == inv.total_calls
    assert abs(sum(s["share"] for s in summary.values()) - 1.0) < 1e-9
    text = inv.text()
    assert "will it run on npu (PrivateUse1 kernels): NO" in text
    assert "no PrivateUse1 kernel" in text


def test_inventory_fallback_seen_at_run_time_and_known_bad_rows(tiny_capture, monkeypatch):
    monkeypatch.setattr(inventory_mod, "_has_kernel", lambda name, key: key == "CUDA")
    known = [inventory_mod.KnownBad("cuda", "cuda-12.*", "aten::relu", "relu NaN bug", "#1")]
    inv = inventory_mod.inventory(tiny_capture, "cuda", stack_id="cuda-12.4",
                                  fallback_ops=["aten::mm.out"], known_bad=known)
    verdicts = {o.qualname: o for o in inv.ops}
    assert verdicts["aten::mm"].verdict == "fallback" and verdicts["aten::mm"].fallback_seen
    assert verdicts["aten::relu"].verdict == "known-bad"
    assert "relu NaN bug (#1)" in verdicts["aten::relu"].known_bad
    other_stack = inventory_mod.inventory(tiny_capture, "cuda", stack_id="cuda-11.8",
                                          known_bad=known)
    assert {o.qualname: o.verdict for o in other_stack.ops}["aten::relu"] == "ok"


def test_inventory_says_when_the_backend_is_not_loaded(tiny_capture):
    inv = inventory_mod.inventory(tiny_capture, "npu")  # no torch_npu in this process
    if inventory_mod.backend_loaded("PrivateUse1"):
        pytest.skip("a PrivateUse1 backend is loaded here")
    assert not inv.will_run
    assert "backend is not loaded in this process" in inv.text()


def test_inventory_on_the_cpu_has_every_kernel(tiny_capture):
    inv = inventory_mod.inventory(tiny_capture, "cpu")
    assert inv.will_run, inv.text()
    assert inv.summary()["ok"]["share"] == 1.0


# --------------------------------------------------------------------------- cases

def _results(capture):
    cpu = Device("cpu")
    return [r for case in cases_mod.build_cases(capture)
            for r in cases_mod.run_model_case(cpu, case)]


def test_every_case_of_a_clean_step_passes_with_stable_ids(tiny_capture):
    results = _results(tiny_capture)
    bad = [(r.id, r.status, r.message) for r in results if r.status not in ("pass", "skip")]
    assert not bad
    ids = [r.id for r in results]
    assert len(ids) == len(set(ids))
    assert all(i.startswith("model/tiny/aten.") for i in ids)
    assert any(i.endswith("/bwd") for i in ids), "forward ops with grads get a backward"
    addmm = next(r for r in results if "/aten.addmm.default/" in r.id and r.id.endswith("fwd"))
    assert addmm.standard == "ulp" and addmm.record_info["standard"] == "ulp"


def test_replay_keeps_the_captured_strides():
    seen = []

    class Probe:
        def __call__(self, x):
            seen.append((tuple(x.shape), x.stride()))
            return x * 2

        def __str__(self):
            return "probe"

    replay = cases_mod.Replay(Probe(), 1, [], {0: ((3, 4), (1, 3), 0)}, (), False, 0)
    out = replay(torch.arange(12.0))
    assert seen == [((3, 4), (1, 3))]
    assert out.shape == (3, 4)


@pytest.mark.parametrize("make, name", [
    (lambda: torch.zeros(2, 3, 4, 5), "contiguous"),
    (lambda: torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last), "channels_last"),
    (lambda: torch.zeros(2, 3, 4, 5, 6).to(memory_format=torch.channels_last_3d),
     "channels_last_3d"),
    (lambda: torch.zeros(1, 5).expand(4, 5), "expanded"),
    (lambda: torch.zeros(4, 5).t(), "strided"),
    (lambda: torch.zeros(12)[3:], "contiguous+offset"),
    (lambda: torch.zeros(4, 6).chunk(3, 1)[1], "strided+offset"),
    (lambda: torch.zeros(1, 3, 1, 1).to(memory_format=torch.channels_last), "contiguous"),
])
def test_layout_names_say_the_memory_format(make, name):
    t = make()
    meta = capture_mod._meta(t)
    assert meta.layout == name
    assert (":o" in meta.text()) == (t.storage_offset() > 0)


class _LaidOut(nn.Module):
    """A channels_last conv net whose head chunks a fused projection (views at offsets)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fused = nn.Linear(4, 12)

    def forward(self, x):
        y = torch.relu(self.conv(x.contiguous(memory_format=torch.channels_last)))
        a, b, c = self.fused(y.mean((2, 3))).chunk(3, dim=1)
        return a * b + c


@pytest.fixture(scope="module")
def laid_out_capture():
    torch.manual_seed(0)
    return capture_mod.capture_step(
        spec.ModelSpec("laidout", "tests:laidout", _LaidOut(), (torch.randn(2, 3, 8, 8),)))


def _fault_when(op: str, when) -> faults.Fault:
    return faults.perturb_op(f"test.{op}_layout", family="model", op=op, when=when,
                             transform=lambda out, a, k: out * 1.01, checks=("suites/model",),
                             description=f"{op} 1% off for one layout")


def test_capture_records_channels_last_and_offset_arguments(laid_out_capture):
    layouts = laid_out_capture.layout_counts()
    assert layouts.get("channels_last", 0) >= 2 and layouts.get("strided+offset", 0) >= 2
    conv = next(c for c in laid_out_capture.calls if c.op == "aten.convolution.default")
    assert conv.tensors()[0].layout == "channels_last"
    mul = next(c for c in laid_out_capture.calls if c.op == "aten.mul.Tensor")
    assert [m.offset for m in mul.tensors()] == [0, 4] and ":o4" in mul.signature
    assert laid_out_capture.to_json()["layouts"] == layouts


@pytest.mark.parametrize("op, when", [
    ("aten.convolution.default",
     lambda a, k: a[0].is_contiguous(memory_format=torch.channels_last)
     and not a[0].is_contiguous()),
    ("aten.mul.Tensor", lambda a, k: any(t.storage_offset() for t in a
                                         if isinstance(t, torch.Tensor))),
], ids=["channels_last_conv", "offset_mul"])
def test_a_kernel_wrong_only_in_the_captured_layout_fails_the_replay(
        laid_out_capture, monkeypatch, op, when):
    clean = {r.id: r.status for r in _results(laid_out_capture)}
    mine = [i for i in clean if f"/{op}/" in i and i.endswith("/fwd")]
    assert mine and all(clean[i] == "pass" for i in mine)
    monkeypatch.setattr(faults, "_active", [_fault_when(op, when)])
    broken = {r.id: r.status for r in _results(laid_out_capture)}
    assert {i for i, st in broken.items() if st == "fail"} & set(mine), \
        "the replay lost the layout the model gave the op"
    # the same fault on the model's calls made contiguous: nothing to see (the layout is
    # what carries the defect to the replay)
    flat = dataclasses.replace(laid_out_capture, calls=[
        dataclasses.replace(c, args=_contiguous(c.args), kwargs=_contiguous(c.kwargs),
                            signature=c.signature + ":flat")
        for c in laid_out_capture.calls if c.op == op])
    assert all(r.status == "pass" for r in _results(flat))


def _contiguous(value):
    if isinstance(value, capture_mod.TensorMeta):
        return dataclasses.replace(value, stride=capture_mod.contiguous_stride(value.shape),
                                   offset=0)
    if isinstance(value, dict):
        return {k: _contiguous(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_contiguous(v) for v in value)
    return value


def test_random_ops_are_skipped_with_the_reason():
    cap = capture_mod.capture_step(spec.load_factory("harness.models:simplecnn"))
    dropout = [c for c in cases_mod.build_cases(cap) if c.call.op.startswith("aten.bernoulli")]
    assert dropout and all(c.skip.startswith("random") for c in dropout)


def test_model_cases_catch_a_fault_in_an_op_only_the_model_uses():
    from harness.ops import CATALOG

    assert not any("sinc" in entry.name for entry in CATALOG)
    cap = capture_mod.capture_step(spec.load_factory("harness.models:sinc_mlp"))
    clean = {r.id: r.status for r in _results(cap)}
    sinc_fwd = next(i for i in clean if "/aten.sinc.default/" in i and i.endswith("/fwd"))
    assert clean[sinc_fwd] == "pass"
    faults.set_active(["model.sinc_rel_error"])
    try:
        broken = {r.id: r for r in _results(cap)}
    finally:
        faults.set_active([])
    assert broken[sinc_fwd].status == "fail"
    assert "not close under standard 'relative'" in broken[sinc_fwd].message
    assert [i for i, r in broken.items() if r.status == "fail"] == [sinc_fwd]


def test_fault_family_model_is_registered_with_a_model_run():
    registered = [f for f in faults.registry().values() if f.family == "model"]
    assert {f.name for f in registered} == {"model.sinc_rel_error", "model.sinc_unsupported",
                                            "model.embedding_bag_mean_as_sum",
                                            "model.scope_audit"}
    for fault in registered:
        assert "--model" in fault.pytest_args
        assert all(c.startswith("suites/model/") for c in fault.checks)


# ------------------------------------------------- faithful replay of integer arguments

@pytest.fixture(scope="module")
def recommender_capture():
    return capture_mod.capture_step(spec.load_factory("harness.models:recommender"))


def _bags(capture) -> dict[int, capture_mod.Call]:
    """The forward ``_embedding_bag`` calls by mode (0 sum, 1 mean)."""
    return {c.args[4]: c for c in capture.calls if c.op == "aten._embedding_bag.default"}


def test_capture_keeps_the_values_of_integer_and_boolean_arguments(recommender_capture):
    model, inputs = models.recommender()
    item_ids, item_offsets = inputs[0], inputs[1]
    mean = _bags(recommender_capture)[1]
    weight, indices, offsets = mean.values[:3]
    assert weight is None, "floating arguments are drawn afresh, not kept"
    assert torch.equal(indices, item_ids % model.buckets)
    assert torch.equal(offsets, item_offsets)
    masked = next(c for c in recommender_capture.calls if c.op == "aten.masked_fill.Scalar")
    assert masked.values[1].dtype == torch.bool and not bool(masked.values[1].all())
    assert mean.digest == "88929773", "the values stay out of the signature and the digest"


def test_kept_values_rebuild_a_non_contiguous_integer_argument():
    for tensor in (torch.arange(12).reshape(3, 4).t(), torch.arange(40)[5:35:3],
                   torch.arange(6).reshape(2, 3)[:, 1:].expand(4, 2, 2)):
        span = capture_mod.kept_values(tensor)
        assert span.dim() == 1
        assert torch.equal(span.as_strided(tensor.shape, tensor.stride()), tensor)
    assert capture_mod.kept_values(torch.randn(3)) is None
    assert capture_mod.kept_values(torch.zeros(capture_mod.KEEP_VALUES_MAX + 1,
                                               dtype=torch.bool)) is None


def test_replay_passes_the_captured_offsets_to_the_op(recommender_capture):
    for mode, call in _bags(recommender_capture).items():
        case = cases_mod.build_case("recommender", call)
        _, indices, offsets = case.sample.args[:3]
        assert torch.equal(offsets, call.values[2]) and offsets[0] == 0
        assert torch.equal(indices, call.values[1])
        assert case.directions == ("fwd", "bwd")
        if mode == 0:  # sum bags: per_sample_weights is a float (> 0), drawn afresh
            assert case.sample.args[6] == cases_mod.T((9,), "positive", grad=False)


def test_the_recommender_is_green_on_a_healthy_cpu(recommender_capture):
    results = _results(recommender_capture)
    bad = [(r.id, r.status, r.message[:300]) for r in results
           if r.status not in ("pass", "skip")]
    assert not bad
    ops = {r.id.split("/")[2] for r in results}
    assert {"aten._embedding_bag.default", "aten._embedding_bag_backward.default",
            "aten.gather.default", "aten.scatter_add.default", "aten.masked_fill.Scalar",
            "aten.embedding_dense_backward.default"} <= ops


def test_the_recommender_is_red_under_a_fault_in_embedding_bag(recommender_capture):
    mean, total = _bags(recommender_capture)[1], _bags(recommender_capture)[0]
    faults.set_active(["model.embedding_bag_mean_as_sum"])
    try:
        broken = {r.id: r for r in _results(recommender_capture)}
    finally:
        faults.set_active([])
    failing = sorted(i for i, r in broken.items() if r.status != "pass")
    assert failing == [f"model/recommender/aten._embedding_bag.default/{mean.digest}/fwd"]
    assert "not close" in broken[failing[0]].message
    assert broken[f"model/recommender/aten._embedding_bag.default/{total.digest}/fwd"] \
        .status == "pass", "sum bags are right under the fault"


def _without_values(call: capture_mod.Call) -> capture_mod.Call:
    """The call as a replay that forgot the captured values sees it (drawn from ranges)."""
    return dataclasses.replace(call, values=[])


def test_a_replay_error_the_cpu_reproduces_is_the_harness_not_the_device(
        recommender_capture, monkeypatch):
    from harness.model import check as check_mod

    mean = _bags(recommender_capture)[1]
    case = cases_mod.build_case("recommender", _without_values(mean))
    outcomes = cases_mod.run_model_case(Device("cpu"), case)
    assert [o.status for o in outcomes] == ["error", "error"]
    for outcome in outcomes:
        assert outcome.message.startswith("harness error, not the device's: the replay of "
                                          "aten._embedding_bag.default raises outside the "
                                          "DUT scope too (on the CPU in float32: ")
        assert "offsets[0] has to be 0" in outcome.info["harness_error"]
        assert "Fix the replay in harness/model/cases.py" in outcome.message
    report = check_mod.ModelReport(recommender_capture,
                                   inventory_mod.inventory(recommender_capture, "cpu"),
                                   outcomes, 1, 0.0)
    assert report.verdict() == ("NO-GO: 2 record(s) are harness errors, not the device's (the "
                                "replay of a captured call; see above); 0 failing record(s) "
                                "are the device's")
    assert "harness error, not the device's" in report.text()


def test_an_error_only_the_dut_raises_stays_the_devices():
    cap = capture_mod.capture_step(spec.load_factory("harness.models:sinc_mlp"))
    sinc = next(c for c in cases_mod.build_cases(cap) if c.call.op == "aten.sinc.default")
    faults.set_active(["model.sinc_unsupported"])
    try:
        outcomes = cases_mod.run_model_case(Device("cpu"), sinc)
    finally:
        faults.set_active([])
    assert {o.status for o in outcomes} == {"unsupported"}
    assert not any("harness_error" in o.info for o in outcomes)
    assert cases_mod.cpu_replay_error(sinc) == ""


@pytest.mark.parametrize("fault, code, verdict", [
    ((), 0, "verdict: GO: every captured call runs and matches the CPU reference"),
    (("--inject-fault", "model.embedding_bag_mean_as_sum"), 1,
     "verdict: NO-GO: see the failing cases and ops above"),
])
def test_the_model_command_on_the_recommender(fault, code, verdict, capsys):
    from harness import cli

    try:
        assert cli.main(["model", "harness.models:recommender", "--device", "cpu",
                         *fault]) == code
    finally:
        faults.set_active([])
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == verdict, out
    failing = [line.split()[1] for line in out.splitlines()
               if line.startswith(("  FAIL", "  ERROR"))]
    assert failing == ([] if not fault else
                       ["model/recommender/aten._embedding_bag.default/88929773/fwd"]), out


# ---------------------------------------------------------- a user's model, the suite

USER_MODEL = '''
import torch
from torch import nn

from harness.faults import perturb_op


class Net(nn.Module):
    """A user's model with an op the catalog lacks: torch.logaddexp."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(12, 8)
        self.b = nn.Linear(12, 8)
        self.out = nn.Linear(8, 4)

    def forward(self, x):
        return self.out(torch.logaddexp(self.a(x), self.b(x)))


def usernet():
    return Net()


LOGADDEXP_DRIFT = perturb_op(
    "user.logaddexp_drift", family="user", description="logaddexp off by 1e-3",
    op="aten.logaddexp", transform=lambda out, args, kwargs: out * (1 + 1e-3),
    checks=("suites/model",))
'''


def _suite(folder: Path, env: dict, *extra: str) -> subprocess.CompletedProcess:
    env = {**env, "PYTHONPATH": os.pathsep.join([str(folder), str(ROOT),
                                                 env.get("PYTHONPATH", "")])}
    env.pop(faults.ENV_VAR, None)
    return early.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "npu",
         "suites/model", "--model", "usernet:usernet", "--model-input", "6x12",
         "--baseline", "off", "--results-dir", str(folder / "results"), *extra],
        cwd=ROOT, env=env, timeout=600)


def _user_model_runs(env: dict) -> tuple[subprocess.CompletedProcess, ...]:
    """The suite on a user's model module, clean and with a fault in one of its ops."""
    with tempfile.TemporaryDirectory(prefix="usernet-") as tmp:
        folder = Path(tmp)
        (folder / "usernet.py").write_text(textwrap.dedent(USER_MODEL))
        return (_suite(folder, env),
                _suite(folder, env, "--inject-fault", "usernet:LOGADDEXP_DRIFT"))


USER_MODEL_RUNS = early.Job("the suite on a user's model", _user_model_runs)
EARLY = (USER_MODEL_RUNS,)


def test_a_user_model_on_pythonpath_is_green_and_red_under_a_fault_in_its_op():
    clean, broken = early.result(USER_MODEL_RUNS)
    assert clean.returncode == 0, clean.stdout[-3000:]
    assert "test_model_case" not in clean.stdout  # nothing failed
    assert " passed" in clean.stdout
    assert broken.returncode == 1, broken.stdout[-3000:]
    assert "FAILED suites/model/test_model.py::test_model_case[usernet-aten.logaddexp.default-" \
        in broken.stdout
    assert "model/usernet/aten.logaddexp.default/" in broken.stdout


def test_the_suite_generates_nothing_without_model():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only",
         "suites/model"], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != faults.ENV_VAR})
    assert "no tests collected (3 deselected)" in result.stdout, result.stdout
