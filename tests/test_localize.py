import json

import pytest
import torch
from torch import nn

from harness import data, faults, training
from harness.training import localize


def _report(cpu, model="simplecnn", **kwargs):
    return localize.report_for(model, cpu, **kwargs)


def test_clean_dut_has_no_divergent_layer(cpu):
    report = _report(cpu)
    assert report.ok and report.first is None
    assert [d.name for d in report.forward][:2] == ["conv1", "bn1"]  # forward order
    assert report.backward[0].name == "fc2"  # backward order starts at the loss
    assert "all" in report.text() and "within tolerance" in report.text()


def test_shared_module_calls_are_numbered(cpu):
    names = [d.name for d in _report(cpu).forward]
    assert "pool" in names and "pool#2" in names


def test_injected_layer_fault_is_named(cpu):
    faults.set_active(["training.conv_layer_drift"])
    report = _report(cpu)
    assert report.first is not None and report.first.name == "conv2"
    assert report.first.phase == "forward"
    assert report.forward[0].ok  # conv1 is fine: the finder does not blame earlier layers
    assert "FIRST DIVERGENCE at layer 'conv2'" in report.text()


def test_injected_layer_fault_is_named_under_autocast(cpu):
    faults.set_active(["training.conv_layer_drift"])
    report = _report(cpu, amp_dtype=torch.bfloat16)
    assert report.first.name == "conv2"
    assert report.first.ref_err is not None  # compared with the CPU's own bf16 error


def test_clean_autocast_run_passes_on_the_reference_models(cpu):
    for model in ("simplecnn", "transformer"):
        assert _report(cpu, model=model, amp_dtype=torch.bfloat16).ok, model


def test_eval_mode_finds_bn_using_batch_statistics(cpu):
    faults.set_active(["training.bn_eval_batch_stats"])
    report = _report(cpu, model="tinycnn", train=False, batch_size=4)
    assert report.first.name == "bn1"


def test_dut_model_argument_localises_a_hooked_layer(cpu):
    factory = training.model_factory("tinycnn")
    torch.manual_seed(0)
    dut = factory()
    dut.bn2.register_forward_hook(lambda m, a, out: out + 0.5)
    report = localize.localize(factory, data.one_batch(4), cpu, dut_model=dut)
    assert report.first.name == "bn2"


def test_compare_flags_nonfinite_and_shape_mismatch():
    tol = localize.TOLERANCES["float32"]
    ref = torch.ones(4)
    bad = torch.tensor([1.0, float("nan"), 1.0, 1.0])
    assert localize.compare("x", "forward", bad, ref, tol).nonfinite == 1
    assert not localize.compare("x", "forward", bad, ref, tol).ok
    assert not localize.compare("x", "forward", torch.ones(5), ref, tol).ok
    assert localize.compare("x", "forward", ref.clone(), ref, tol).ok


def test_compare_scales_the_limit_with_the_cpu_same_dtype_error():
    tol = localize.Tolerance(rel=1e-3, cosine=0.9, ratio=4.0)
    ref = torch.linspace(1, 2, 100)
    dut = ref * 1.01          # 1% off
    same = ref * 1.005        # the CPU's own 16-bit run is 0.5% off
    diff = localize.compare("x", "forward", dut, ref, tol, same_dtype=same)
    assert diff.ok and diff.limit == pytest.approx(0.02, rel=1e-3)
    assert not localize.compare("x", "forward", dut, ref, tol).ok


def test_report_json_round_trips(cpu):
    payload = json.loads(json.dumps(_report(cpu, model="tinycnn", batch_size=2).to_json()))
    assert payload["first_divergent_layer"] is None and payload["forward"]


def test_cli_names_the_faulty_layer(capsys):
    code = localize.main(["simplecnn", "--device", "cpu", "--inject-fault",
                          "training.conv_layer_drift"])
    out = capsys.readouterr().out
    assert code == 1
    assert "verdict: first divergent layer: conv2 (forward)" in out


def test_cli_accepts_options_after_a_double_dash(capsys):
    code = localize.main(["--", "--model", "tinycnn", "--device", "cpu", "--json"])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["model"] == "tinycnn"


def test_cli_unknown_fault_is_a_usage_error(capsys):
    assert localize.main(["tinycnn", "--device", "cpu", "--inject-fault", "nope"]) == 2
    assert "unknown fault" in capsys.readouterr().out


def test_capture_handles_modules_without_float_outputs(cpu):
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)
            self.ident = nn.Identity()

        def forward(self, x):
            self.ident(torch.zeros(2, dtype=torch.long))
            return self.fc(x)

    report = localize.localize(Model, (torch.randn(2, 4), torch.tensor([0, 1])), cpu)
    assert [d.name for d in report.forward] == ["fc"] and report.ok


def test_running_var_fault_leaves_train_mode_outputs_and_backward_intact(cpu):
    # the biased-variance fault changes only the running buffer: a train-mode comparison
    # (batch statistics) must stay clean and the backward must still run
    faults.set_active(["training.bn_running_var_biased"])
    assert _report(cpu, model="tinycnn", batch_size=4).ok


def test_parameter_gradients_are_compared_by_depth(cpu):
    report = _report(cpu, model="simplecnn", amp_dtype=torch.float16)
    names = [d.name for d in report.params]
    assert names[0] == "conv1.weight" and names[-1] == "fc2.bias"  # first to last layer
    assert all(d.phase == "param_grad" and d.ref_err is not None for d in report.params)
    curve = localize.depth_curve(report)
    assert "parameter gradients (first to last layer): 12" in curve
    assert "first-layer / last-layer gradient error:" in curve


def test_a_parameter_gradient_fault_is_the_first_divergence(cpu):
    factory = training.model_factory("tinycnn")
    torch.manual_seed(0)
    dut = factory()
    first = next(dut.parameters())
    first.register_hook(lambda grad: grad * 1.5)  # only the first layer's weight gradient
    report = localize.localize(factory, data.one_batch(4), cpu, dut_model=dut)
    assert report.first_forward is None and report.first_backward is None
    assert report.first is report.params[0] and report.first.phase == "param_grad"
    assert all(d.ok for d in report.params[1:])


def test_cli_takes_a_factory_and_amp_short_names(capsys):
    code = localize.main(["--model", "harness.models:sinc_mlp", "--device", "cpu",
                          "--amp", "bf16", "--input", "4x48"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "divergence finder: sinc_mlp on cpu:0 (bfloat16" in out
    assert "depth drift: sinc_mlp (bfloat16)" in out and "fc1.weight" in out


def test_cli_unknown_model_is_a_usage_error(capsys):
    assert localize.main(["--model", "nosuchmodel", "--device", "cpu"]) == 2
    assert "unknown model 'nosuchmodel'" in capsys.readouterr().out
    assert localize.main(["--model", "no_such_pkg_q:build", "--device", "cpu"]) == 2
    assert "cannot import 'no_such_pkg_q'" in capsys.readouterr().out


def test_plot_svg_is_an_embeddable_svg(cpu):
    pytest.importorskip("matplotlib")
    svg = localize.plot_svg(_report(cpu, model="tinycnn", batch_size=2))
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert "parameter gradients" in svg


def test_plot_svg_without_matplotlib_says_how_to_install(cpu, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *args, **kwargs)

    report = _report(cpu, model="tinycnn", batch_size=2)
    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(RuntimeError, match="pip install matplotlib"):
        localize.plot_svg(report)
