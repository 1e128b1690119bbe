"""GradScaler semantics on the DUT: the classic scale sequence, unscale_ before
clip_grad_norm_, the state_dict round trip, and the overflow/skip rate by init_scale.

The first three run on every GradScaler the device has (``Device.grad_scaler_apis``):
``torch.amp.GradScaler(<type>)``, and on Ascend also ``torch_npu.npu.amp.GradScaler``,
the one Ascend's verified list names, implemented apart from torch's (its records add
the API's name as a last part; torch.amp's keep their ids)."""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness import ids, training
from harness.results import equal, lower
from harness.training import localize


def _linear_problem(device, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 8, generator=gen)
    y = torch.randn(16, 4, generator=gen)
    torch.manual_seed(seed)
    model = nn.Linear(8, 4)
    return model, x, y


def _params(model) -> list[torch.Tensor]:
    return [p.detach().to("cpu", copy=True) for p in model.parameters()]


def _max_change(before, after) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(before, after))


INF_STEP = 1
GROWTH, BACKOFF, INIT = 2.0, 0.5, 128.0
APIS = ["torch.amp", "vendor"]


@pytest.fixture(params=APIS)
def scaler_api(request, device) -> str:
    """Each GradScaler API of the device: torch.amp's, then the vendor's where it exists."""
    if request.param == "torch.amp":
        return "torch.amp"
    vendor = device.vendor_grad_scaler()
    if vendor is None:
        pytest.skip(f"{device.type} has no vendor GradScaler beside torch.amp's")
    return vendor


def _api_part(api: str) -> tuple:
    """The record id's extra part: none for torch.amp (its ids stay), the module name else."""
    return () if api == "torch.amp" else (api,)


def _scale_sequence(device, *, steps, growth_interval, amp, corrupt, api="torch.amp"):
    """SGD steps under a GradScaler (init 128, growth 2, backoff 0.5); ``corrupt(model)``
    writes a non-finite gradient at step INF_STEP. Returns the scale after each step and
    each step's largest parameter change."""
    model, x, y = _linear_problem(device)
    scales, changes = [], []
    with device.scope():
        model.to(device.torch_device)
        x, y = x.to(device.torch_device), y.to(device.torch_device)
        scaler = device.grad_scaler(api, init_scale=INIT, growth_factor=GROWTH,
                                    backoff_factor=BACKOFF, growth_interval=growth_interval)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(steps):
            opt.zero_grad()
            if amp:
                with device.autocast(torch.float16):
                    loss = F.mse_loss(model(x).float(), y)
            else:
                loss = F.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            if step == INF_STEP:
                corrupt(model)
            before = _params(model)
            scaler.step(opt)
            scaler.update()
            scales.append(float(scaler.get_scale()))
            changes.append(_max_change(before, _params(model)))
    return scales, changes


def test_classic_scale_sequence(device, results, scaler_api):
    """init_scale 128, growth 2 every step, one inf at step 1 of 4: the scale ends at
    128 * 2^3 * 0.5, the inf step is skipped and leaves the parameters unchanged."""
    def corrupt(model):
        model.weight.grad[0, 0] = float("inf")

    scales, changes = _scale_sequence(device, steps=4, growth_interval=1, amp=True,
                                      corrupt=corrupt, api=scaler_api)
    expected = [INIT * GROWTH, INIT * GROWTH * BACKOFF, INIT * GROWTH ** 2 * BACKOFF,
                INIT * GROWTH ** 3 * BACKOFF]
    skipped = [i for i, change in enumerate(changes) if change == 0.0]
    ok = scales == expected and skipped == [INF_STEP]
    results.check(
        ids.record("amp", "grad_scaler", "float16", "classic_sequence", *_api_part(scaler_api)), ok=ok,
        metrics={"final_scale": scales[-1], "skipped_steps": len(skipped),
                 "inf_step_param_change": changes[INF_STEP]},
        rules={"final_scale": equal(), "skipped_steps": equal(),
               "inf_step_param_change": equal()},
        info={"scales": scales, "expected_scales": expected, "param_changes": changes},
        message=f"GradScaler sequence: scales {scales}, expected {expected} "
                f"(init 128, growth 2, backoff 0.5, interval 1, inf at step {INF_STEP}); "
                f"steps that left the parameters unchanged: {skipped}, expected "
                f"[{INF_STEP}]")


def test_unscale_then_clip(device, results, scaler_api):
    """scaler.unscale_ then clip_grad_norm_: the norm is the true (unscaled) one, the
    clipped gradients respect max_norm, and step() does not unscale a second time."""
    model, x, y = _linear_problem(device, seed=1)
    ref = copy.deepcopy(model)
    # reference: fp32 on the CPU, no scaler
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    F.mse_loss(ref(x), y).backward()
    ref_norm = float(torch.nn.utils.clip_grad_norm_(ref.parameters(), float("inf")))
    max_norm = 0.5 * ref_norm
    torch.nn.utils.clip_grad_norm_(ref.parameters(), max_norm)
    ref_opt.step()
    with device.scope():
        model.to(device.torch_device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = device.grad_scaler(scaler_api, init_scale=2.0 ** 12)
        with device.autocast(torch.float16):
            loss = F.mse_loss(model(x.to(device.torch_device)).float(), y.to(device.torch_device))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
        clipped = float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(p.grad.float()) for p in model.parameters()])))
        scaler.step(opt)
        scaler.update()
    norm_err = abs(norm - ref_norm) / ref_norm
    param_err = max(float((a - b).abs().max()) for a, b in zip(_params(model), _params(ref)))
    step_size = max(float((a - b).abs().max()) for a, b in
                    zip(_params(ref), _params(_linear_problem(device, seed=1)[0])))
    rel_param_err = param_err / step_size
    ok = norm_err <= 1e-2 and clipped <= max_norm * (1 + 1e-3) and rel_param_err <= 2e-2
    results.check(
        ids.record("amp", "grad_scaler", "float16", "unscale_then_clip", *_api_part(scaler_api)), ok=ok,
        metrics={"norm_rel_err": norm_err, "clipped_norm_over_max": clipped / max_norm,
                 "step_rel_err": rel_param_err},
        rules={"norm_rel_err": lower(rel=4.0, abs=1e-3),
               "clipped_norm_over_max": lower(rel=1.0, abs=1e-3),
               "step_rel_err": lower(rel=4.0, abs=2e-3)},
        info={"norm": norm, "ref_norm": ref_norm, "max_norm": max_norm},
        message=f"unscale_ + clip_grad_norm_: norm {norm:.6g} vs reference {ref_norm:.6g} "
                f"(rel err {norm_err:.3g}, allowed 1e-2); clipped norm {clipped:.6g} vs "
                f"max_norm {max_norm:.6g}; step rel err {rel_param_err:.3g} (allowed 2e-2; "
                f"a second unscale in step() shows here)")


def _scaler_steps(device, scaler, model, opt, x, y, steps, inf_at=()):
    scales = []
    for step in range(steps):
        opt.zero_grad()
        with device.autocast(torch.float16):
            loss = F.mse_loss(model(x).float(), y)
        scaler.scale(loss).backward()
        if step in inf_at:
            model.weight.grad[0, 0] = float("nan")
        scaler.step(opt)
        scaler.update()
        scales.append(float(scaler.get_scale()))
    return scales


def test_state_dict_round_trip(device, results, scaler_api):
    """A scaler restored from state_dict() carries on exactly like the original."""
    model, x, y = _linear_problem(device, seed=2)
    with device.scope():
        model.to(device.torch_device)
        x, y = x.to(device.torch_device), y.to(device.torch_device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = device.grad_scaler(scaler_api, init_scale=2.0 ** 10, growth_factor=2.0,
                                    backoff_factor=0.25, growth_interval=2)
        _scaler_steps(device, scaler, model, opt, x, y, 3, inf_at=(1,))
        state = scaler.state_dict()
        restored = device.grad_scaler(scaler_api)
        restored.load_state_dict(state)
        again = restored.state_dict()
        mismatched = sorted(k for k in set(state) | set(again)
                            if k not in state or k not in again or
                            float(state[k]) != float(again[k]))
        twin, twin_opt = copy.deepcopy(model), None
        twin_opt = torch.optim.SGD(twin.parameters(), lr=0.01)
        twin_opt.load_state_dict(opt.state_dict())
        a = _scaler_steps(device, scaler, model, opt, x, y, 4, inf_at=(2,))
        b = _scaler_steps(device, restored, twin, twin_opt, x, y, 4, inf_at=(2,))
    diverging = sum(u != v for u, v in zip(a, b))
    ok = not mismatched and diverging == 0
    results.check(
        ids.record("amp", "grad_scaler", "float16", "state_dict_round_trip", *_api_part(scaler_api)), ok=ok,
        metrics={"mismatched_keys": len(mismatched), "diverging_scales": diverging},
        rules={"mismatched_keys": equal(), "diverging_scales": equal()},
        info={"state": {k: float(v) for k, v in state.items()}, "original": a, "restored": b},
        message=f"GradScaler state_dict round trip: keys differing after load {mismatched}; "
                f"scales after 4 more steps: original {a}, restored {b}")


INIT_SCALES = [2 ** 7, 2 ** 10, 2 ** 16, 2 ** 24]


@pytest.mark.parametrize("init_scale", INIT_SCALES, ids=lambda s: f"2^{int(math.log2(s))}")
def test_overflow_skip_rate(device, results, settings, init_scale):
    """Skipped (overflowing) steps of the reference model's first steps at an init_scale:
    a scale too large must back off to one that trains, not skip forever."""
    spec = training.spec_for(settings.training_scale, seed=settings.seed)
    steps = 20 if settings.training_scale == "small" else 100
    run = training.train(spec, device, amp_dtype=torch.float16, steps=steps, evaluate=False,
                         scaler_kwargs={"init_scale": float(init_scale)})
    skipped = len(run.skipped)
    final = run.scales[-1] if run.scales else float("nan")
    ok = skipped <= steps // 2 and math.isfinite(run.losses[-1])
    report = "" if ok else "\n" + localize.safe_report_text(
        spec.model, device, amp_dtype=torch.float16, seed=spec.seed, scale=spec.scale)
    results.check(
        ids.record("amp", "grad_scaler", "float16", "skip_rate", f"{spec.model}-{spec.scale}",
                   f"init=2^{int(math.log2(init_scale))}"), ok=ok,
        metrics={"skipped_steps": skipped, "skip_rate": skipped / steps,
                 "log2_final_scale": math.log2(final) if final > 0 else float("nan")},
        rules={"skipped_steps": lower(rel=1.5, abs=2), "log2_final_scale": equal(abs=2)},
        info={"steps": steps, "skipped": run.skipped, "scales": run.scales},
        message=f"init_scale 2^{int(math.log2(init_scale))}: {skipped} of {steps} steps "
                f"skipped (more than half), final scale {final}, last loss "
                f"{run.losses[-1]:.4g}; a scaler that never backs off keeps skipping"
                f"{report}")


# ---- Note [Non-finite classes]: a scaler that misses one kind of non-finite value (an
# overflow check written as ``x != x || x == +inf``) is right on every NaN and +inf; each
# class is checked apart, in one gradient of many, in every gradient dtype.
NONFINITE = {"+inf": float("inf"), "-inf": float("-inf"), "nan": float("nan")}
GRAD_DTYPES = ("float16", "bfloat16", "float32")


def _grads(dtype, value):
    """Four gradients of different shapes; the third holds ``value`` at one element."""
    gen = torch.Generator().manual_seed(11)
    grads = [torch.randn(shape, generator=gen).to(dtype) for shape in ((8, 4), (4,), (3, 5), (7,))]
    if value is not None:
        grads[2][1, 3] = value
    return grads


@pytest.mark.parametrize("kind", [*NONFINITE, "finite"])
@pytest.mark.parametrize("dtype", GRAD_DTYPES)
def test_non_finite_check_and_unscale(dtype, kind, device, results):
    """``_amp_foreach_non_finite_check_and_unscale_`` sets found_inf for each non-finite
    class in one gradient of many, and unscales every finite element exactly (1/128)."""
    torch_dtype = getattr(torch, dtype)
    grads = _grads(torch_dtype, NONFINITE.get(kind))
    with device.scope():
        on_dut = [g.to(device.torch_device, copy=True) for g in grads]
        found = torch.zeros(1, device=device.torch_device)
        inv_scale = torch.full((1,), 1 / INIT, device=device.torch_device)
        torch._amp_foreach_non_finite_check_and_unscale_(on_dut, found, inv_scale)
        got_found = float(found.cpu())
        unscaled = [g.cpu() for g in on_dut]
    want = 0.0 if kind == "finite" else 1.0
    # torch unscales in fp32 and rounds to the gradient's dtype
    wrong = sum(int((~torch.isclose(u.double(), (g.float() * (1 / INIT)).to(torch_dtype).double(),
                                    rtol=0, atol=0, equal_nan=True)).sum())
                for u, g in zip(unscaled, grads))
    results.check(
        ids.record("amp", "non_finite_check", dtype, kind), ok=got_found == want and wrong == 0,
        metrics={"found_inf": got_found, "wrong_unscaled": float(wrong)},
        rules={"found_inf": equal(), "wrong_unscaled": equal()},
        message=f"_amp_foreach_non_finite_check_and_unscale_ ({dtype} grads, {kind} in the "
                f"third of four): found_inf {got_found}, expected {want}; {wrong} element(s) "
                f"not exactly grad / {INIT:g}")


@pytest.mark.parametrize("kind", list(NONFINITE))
def test_scaler_skips_backs_off_and_regrows(kind, device, results):
    """GradScaler (init 128, growth 2 every 2 clean steps, backoff 0.5) with a ``kind``
    gradient at step 1 of 5: that step is skipped (parameters unchanged), the scale backs
    off to 64, and grows back to 128 only after two clean steps (growth interval)."""
    def corrupt(model):  # one element of one gradient of two
        model.bias.grad[1] = NONFINITE[kind]

    scales, changes = _scale_sequence(device, steps=5, growth_interval=2, amp=False,
                                      corrupt=corrupt)
    expected = [INIT, INIT * BACKOFF, INIT * BACKOFF, INIT, INIT]
    skipped = [i for i, change in enumerate(changes) if change == 0.0]
    results.check(
        ids.record("amp", "grad_scaler", "float32", f"non_finite_{kind}"),
        ok=scales == expected and skipped == [INF_STEP],
        metrics={"final_scale": scales[-1], "skipped_steps": len(skipped)},
        rules={"final_scale": equal(), "skipped_steps": equal()},
        info={"scales": scales, "expected_scales": expected,  # a step taken on -inf: inf
              "param_changes": [c if math.isfinite(c) else str(c) for c in changes]},
        message=f"GradScaler with {kind} at step {INF_STEP}: scales {scales}, expected "
                f"{expected} (growth every 2 clean steps); unchanged steps {skipped}, "
                f"expected [{INF_STEP}]")
