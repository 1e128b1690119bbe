"""Layer-by-layer agreement of the reference models, DUT vs CPU fp32 (the divergence
finder of :mod:`harness.training.localize` run as a check), and a self-test of the finder: a
deliberately perturbed layer on the DUT must be the one it names."""

import pytest
import torch

from harness import data, ids, training
from harness import dtypes as dt
from harness.results import equal, lower
from harness.training import localize

MODELS = ["simplecnn", "resnet", "transformer"]
DTYPES = {"float32": None, "bfloat16": dt.AMP["bfloat16"], "float16": dt.AMP["float16"]}
CASES = [(m, d) for m in MODELS for d in DTYPES]


@pytest.mark.parametrize("model,dtype", CASES, ids=[f"{m}-{d}" for m, d in CASES])
def test_layers_agree(device, results, settings, model, dtype):
    report = localize.report_for(model, device, amp_dtype=DTYPES[dtype], seed=settings.seed,
                                 scale=settings.training_scale, batch_size=8)
    first = report.first
    results.check(
        ids.record("amp", "layer_agreement", dtype, f"{model}-{settings.training_scale}"), ok=report.ok,
        metrics={"first_divergent_layer": first.name if first else "none",
                 "worst_rel_err": report.worst_rel_err,
                 "layers": len(report.forward)},
        rules={"first_divergent_layer": equal(), "layers": equal(),
               "worst_rel_err": lower(rel=4.0, abs=report.tolerance.rel / 10)},
        info={"first_forward": report.first_forward.name if report.first_forward else None,
              "first_backward": report.first_backward.name if report.first_backward else None},
        message=f"{model} ({dtype}) leaves tolerance on {device.type}\n{report.text()}")


def test_finder_names_a_perturbed_layer(device, results, settings):
    """Perturb SimpleCNN's conv2 output on the DUT (a forward hook); the finder must
    report conv2 as the first divergent layer, not an earlier or a later one."""
    factory = training.model_factory("simplecnn")
    torch.manual_seed(settings.seed)
    dut_model = factory().to(device.torch_device)

    def perturb(module, args, output):
        return 0.8 * output + 0.2 * torch.roll(output, 1, dims=-1)

    dut_model.conv2.register_forward_hook(perturb)
    report = localize.localize(factory, data.one_batch(8, settings.seed), device,
                               seed=settings.seed, model_name="simplecnn", dut_model=dut_model)
    named = report.first.name if report.first else "none"
    results.check(
        ids.record("amp", "layer_agreement", "float32", "simplecnn", "finder_selftest"), ok=named == "conv2",
        metrics={"named_layer": named}, rules={"named_layer": equal()},
        message=f"the divergence finder named {named!r}, expected 'conv2' (perturbed on "
                f"purpose)\n{report.text()}")
