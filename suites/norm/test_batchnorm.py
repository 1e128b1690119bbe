"""BatchNorm train/eval semantics on the DUT, against formulas computed in fp64 on the CPU.

Train mode: running_mean/running_var follow ``(1 - m) * running + m * batch`` with the
*unbiased* batch variance, num_batches_tracked counts batches, momentum=None gives the
cumulative average. Eval mode: the running statistics are used, no buffer changes, two
passes agree bit for bit, and a sample's output does not depend on its batch.
track_running_stats=False always uses batch statistics. Under autocast, 16-bit inputs
meet fp32 BN parameters and buffers, which stay fp32.
"""

import pytest
import torch
from torch import nn

from harness import dtypes as dt
from harness import ids, training
from harness.results import equal, lower
from harness.training import localize

C = 6
EPS = 1e-5
STAT_LIMIT = 1e-5  # relative error of running statistics (fp32 math vs fp64 formula)


def _batches(seed: int, k: int = 3, shape=(8, C, 4, 4)):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen) * (1 + i) + i for i in range(k)]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


def _expected_running(batches, momentum):
    """fp64 running statistics after ``batches`` (momentum None: cumulative average)."""
    mean, var = torch.zeros(C, dtype=torch.float64), torch.ones(C, dtype=torch.float64)
    for count, x in enumerate(batches, start=1):
        x = x.double()
        dims = [d for d in range(x.dim()) if d != 1]
        m = 1.0 / count if momentum is None else momentum
        mean = (1 - m) * mean + m * x.mean(dims)
        var = (1 - m) * var + m * x.var(dims, unbiased=True)
    return mean, var


@pytest.mark.parametrize("momentum", [0.1, None], ids=lambda m: f"momentum={m}")
def test_train_updates_running_stats(device, results, settings, momentum):
    batches = _batches(settings.seed)
    bn = nn.BatchNorm2d(C, momentum=momentum)
    with device.scope():
        bn.to(device.torch_device).train()
        for x in batches:
            bn(x.to(device.torch_device))
    want_mean, want_var = _expected_running(batches, momentum)
    mean_err, var_err = _rel(bn.running_mean, want_mean), _rel(bn.running_var, want_var)
    tracked = int(bn.num_batches_tracked)
    ok = mean_err <= STAT_LIMIT and var_err <= STAT_LIMIT and tracked == len(batches)
    results.check(
        ids.record("norm", "batchnorm2d", "float32", "train_running_stats", f"momentum={momentum}"), ok=ok,
        metrics={"running_mean_rel_err": mean_err, "running_var_rel_err": var_err,
                 "num_batches_tracked": tracked},
        rules={"running_mean_rel_err": lower(rel=4.0, abs=1e-6),
               "running_var_rel_err": lower(rel=4.0, abs=1e-6),
               "num_batches_tracked": equal()},
        message=f"BatchNorm2d(momentum={momentum}) after {len(batches)} train batches: "
                f"running_mean rel err {mean_err:.3g}, running_var rel err {var_err:.3g} vs "
                f"the fp64 formula with the UNBIASED variance (allowed {STAT_LIMIT:g}); "
                f"num_batches_tracked {tracked}, expected {len(batches)}")


def _eval_bn(seed: int) -> nn.BatchNorm2d:
    gen = torch.Generator().manual_seed(seed + 1)
    bn = nn.BatchNorm2d(C)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(C, generator=gen))
        bn.running_var.copy_(torch.rand(C, generator=gen) + 0.5)
        bn.weight.copy_(torch.randn(C, generator=gen))
        bn.bias.copy_(torch.randn(C, generator=gen))
        bn.num_batches_tracked.fill_(5)
    return bn.eval()


def _eval_formula(bn: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    shape = (1, -1, 1, 1)
    rm, rv = bn.running_mean.double().view(shape), bn.running_var.double().view(shape)
    w, b = bn.weight.detach().double().view(shape), bn.bias.detach().double().view(shape)
    return (x.double() - rm) / torch.sqrt(rv + bn.eps) * w + b


@pytest.mark.parametrize("dtype", ["float32"])
def test_eval_uses_running_stats(device, results, settings, dtype):
    """Eval: output from the running statistics, no buffer changes, two passes equal,
    a sample alone equals the same sample inside a batch."""
    x = _batches(settings.seed, 1, (16, C, 5, 5))[0] * 3 + 2
    bn = _eval_bn(settings.seed)
    before = {k: v.clone() for k, v in bn.state_dict().items()}
    with device.scope():
        bn.to(device.torch_device)
        xd = x.to(device.torch_device)
        with torch.no_grad():
            first, second = bn(xd), bn(xd)
            alone = torch.cat([bn(xd[i:i + 1]) for i in (0, 7, 15)])
    after = {k: v.cpu() for k, v in bn.state_dict().items()}
    changed = sorted(k for k in before if not torch.equal(before[k], after[k]))
    err = _rel(first, _eval_formula(bn.cpu(), x))
    passes_diff = float((first - second).abs().max())
    batch_diff = float((alone - first[[0, 7, 15]]).abs().max())
    ok = err <= 1e-5 and not changed and passes_diff == 0 and batch_diff <= 1e-6
    results.check(
        ids.record("norm", "batchnorm2d", dtype, "eval_running_stats"), ok=ok,
        metrics={"rel_err": err, "buffers_changed": len(changed), "two_pass_diff": passes_diff,
                 "batch_dependence": batch_diff},
        rules={"rel_err": lower(rel=4.0, abs=1e-6), "buffers_changed": equal(),
               "two_pass_diff": equal(), "batch_dependence": lower(rel=2.0, abs=1e-6)},
        info={"changed_buffers": changed},
        message=f"BatchNorm2d eval: output rel err {err:.3g} vs (x - running_mean) / "
                f"sqrt(running_var + eps) * w + b (allowed 1e-5); buffers changed: {changed}; "
                f"two passes differ by {passes_diff:.3g}; a sample alone vs in its batch "
                f"differs by {batch_diff:.3g}")


def test_no_running_stats(device, results, settings):
    """track_running_stats=False: no buffers, batch statistics in train and in eval."""
    x = _batches(settings.seed, 1)[0]
    bn = nn.BatchNorm2d(C, track_running_stats=False, affine=False)
    with device.scope():
        bn.to(device.torch_device)
        outs = {}
        for mode in ("train", "eval"):
            bn.train(mode == "train")
            with torch.no_grad():
                outs[mode] = bn(x.to(device.torch_device)).cpu()
    dims = (0, 2, 3)
    xd = x.double()
    want = (xd - xd.mean(dims, keepdim=True)) / torch.sqrt(
        xd.var(dims, unbiased=False, keepdim=True) + EPS)
    errs = {mode: _rel(out, want) for mode, out in outs.items()}
    buffers = [name for name, _ in bn.named_buffers()]
    ok = max(errs.values()) <= 1e-5 and not buffers and bn.running_mean is None
    results.check(
        ids.record("norm", "batchnorm2d", "float32", "no_running_stats"), ok=ok,
        metrics={"train_rel_err": errs["train"], "eval_rel_err": errs["eval"],
                 "buffers": len(buffers)},
        rules={"train_rel_err": lower(rel=4.0, abs=1e-6), "eval_rel_err": lower(rel=4.0,
                                                                                 abs=1e-6),
               "buffers": equal()},
        message=f"BatchNorm2d(track_running_stats=False): rel err vs batch statistics "
                f"{errs} (allowed 1e-5); buffers {buffers}")


AMP = dt.AMP


@pytest.mark.parametrize("amp", list(AMP))
def test_autocast_low_precision_input(device, results, settings, amp):
    """conv -> BN under autocast: the BN sees a 16-bit input, its parameters and buffers
    stay fp32, and the output and running statistics match an fp64 BN of that input."""
    amp_dtype = AMP[amp]
    torch.manual_seed(settings.seed)
    conv, bn = nn.Conv2d(3, C, 3, padding=1), nn.BatchNorm2d(C)
    x = _batches(settings.seed, 1, (8, 3, 6, 6))[0]
    with device.scope():
        conv.to(device.torch_device)
        bn.to(device.torch_device).train()
        with device.autocast(amp_dtype):
            h = conv(x.to(device.torch_device))
            out = bn(h)
    ref_bn = nn.BatchNorm2d(C).double().train()
    ref_out = ref_bn(h.detach().cpu().double())
    low_ok = h.dtype == amp_dtype
    kept = {name: dt.name(t.dtype)
            for name, t in [*bn.named_parameters(), *bn.named_buffers()]}
    fp32_kept = all(v in ("float32", "int64") for v in kept.values())
    out_err = _rel(out.float(), ref_out)
    stat_err = max(_rel(bn.running_mean, ref_bn.running_mean),
                   _rel(bn.running_var, ref_bn.running_var))
    limit = 2.0 ** -8 * 4 if amp_dtype == torch.bfloat16 else 2.0 ** -11 * 8
    ok = low_ok and fp32_kept and out_err <= limit and stat_err <= 1e-4
    results.check(
        ids.record("norm", "batchnorm2d", amp, "autocast"), ok=ok,
        metrics={"out_dtype": dt.name(out.dtype), "out_rel_err": out_err,
                 "running_stats_rel_err": stat_err, "non_fp32_bn_tensors":
                 sum(v not in ("float32", "int64") for v in kept.values())},
        rules={"out_dtype": equal(), "out_rel_err": lower(rel=4.0, abs=limit / 10),
               "running_stats_rel_err": lower(rel=4.0, abs=1e-6),
               "non_fp32_bn_tensors": equal()},
        info={"bn_dtypes": kept, "input_dtype": str(h.dtype)},
        message=f"BN under autocast({amp}): input {h.dtype} (expected {amp_dtype}), BN "
                f"tensors {kept} (expected fp32); output rel err {out_err:.3g} (allowed "
                f"{limit:.3g}), running stats rel err {stat_err:.3g} (allowed 1e-4)")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_eval_matches_reference(device, results, settings, dtype):
    """Eval-mode BatchNorm2d in a dtype vs the CPU fp64 formula on the same input."""
    torch_dtype = dt.BY_NAME[dtype]
    x = (_batches(settings.seed, 1, (8, C, 7, 7))[0] * 2).to(torch_dtype)
    bn = _eval_bn(settings.seed).to(torch_dtype)
    with device.scope(), torch.no_grad():
        out = bn.to(device.torch_device)(x.to(device.torch_device))
    ref = _eval_formula(bn.cpu().double(), x.double())
    err = _rel(out, ref)
    limit = {"float32": 1e-5, "float16": 2.0 ** -10 * 4, "bfloat16": 2.0 ** -7 * 4}[dtype]
    results.check(
        ids.record("norm", "batchnorm2d", dtype, "eval_vs_reference"), ok=err <= limit,
        metrics={"rel_err": err}, rules={"rel_err": lower(rel=4.0, abs=limit / 10)},
        message=f"BatchNorm2d eval in {dtype}: rel err {err:.3g} vs fp64 (allowed {limit:.3g})")


def test_model_eval_is_batch_independent(device, results, settings):
    """A trained-mode-initialised SimpleCNN in eval mode: each sample's logits do not
    depend on the rest of the batch (BN running statistics, no dropout)."""
    factory = training.model_factory("simplecnn")
    torch.manual_seed(settings.seed)
    model = factory()
    x = _batches(settings.seed, 1, (6, 3, 32, 32))[0]
    with device.scope():
        model.to(device.torch_device).train()
        with torch.no_grad():
            model(x.to(device.torch_device) * 2 + 1)  # move the running stats off 0/1
        model.eval()
        with torch.no_grad():
            full = model(x.to(device.torch_device))
            alone = torch.cat([model(x[i:i + 1].to(device.torch_device)) for i in (0, 5)])
    diff = _rel(alone, full[[0, 5]])
    ok = diff <= 1e-5
    message = (f"SimpleCNN eval: logits of a sample alone vs in its batch differ by {diff:.3g} "
               "(relative; allowed 1e-5)")
    if not ok:
        message += "\n" + localize.safe_report_text("simplecnn", device, seed=settings.seed,
                                                    train=False)
    results.check(ids.record("norm", "simplecnn", "float32", "eval_batch_independence"), ok, message,
                  metrics={"batch_dependence": diff},
                  rules={"batch_dependence": lower(rel=4.0, abs=1e-6)})
