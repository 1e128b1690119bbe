"""Autocast policy on the DUT: which ops run in fp32 and which in the low dtype, and a
nested ``autocast(enabled=False)`` region with ``.float()`` computing in fp32.

Note [Autocast policy by device type]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Ops fall in three classes (the ``autocast_*`` lists of ``torch/csrc/autograd/autocast_mode``
and torch_npu's, which registers CUDA's lists for ``npu``):

- ``lower``: matmul-like ops (mm, bmm, linear, conv, addmm, baddbmm) run in the low dtype;
- ``fp32``: losses and a few reductions (cross_entropy, nll_loss, mse_loss, l1/smooth_l1,
  kl_div, binary_cross_entropy_with_logits, prod) run in fp32 on every device;
- ``fp32_widen``: softmax, log_softmax, layer_norm, group_norm, exp, log, pow, sum,
  cumsum, norm are *widened to fp32* on CUDA/NPU/XPU, but on the CPU (verified on torch
  2.13) they are not on its fp32 list: they follow their input (fp32 in, fp32 out; a
  16-bit input from a preceding matmul stays 16-bit).

The table below is that difference as data, keyed by the device row's
``autocast_widens`` (:mod:`harness.kinds`): a new device type says which lists it copies
in its row, not here.
"""

import pytest
import torch
import torch.nn.functional as F

from harness import dtypes as dt
from harness import ids
from harness.results import equal, lower

LOW = "low"      # the autocast dtype
FP32 = "float32"
INPUT = "input"  # the input's dtype (the op is not on the device's autocast lists)

POLICY = {  # by the row's autocast_widens
    True: {"lower": LOW, "fp32": FP32, "fp32_widen": FP32},  # cuda, npu, xpu, mps
    False: {"lower": LOW, "fp32": FP32, "fp32_widen": INPUT},  # cpu
}

# op name -> (policy class, fn(x, aux) -> tensor); x is (8, 16), aux a dict of extras
OPS = {
    "matmul": ("lower", lambda x, a: x @ a["w"]),
    "mm": ("lower", lambda x, a: torch.mm(x, a["w"])),
    "bmm": ("lower", lambda x, a: torch.bmm(x[None], a["w"][None])),
    "addmm": ("lower", lambda x, a: torch.addmm(a["b"], x, a["w"])),
    "baddbmm": ("lower", lambda x, a: torch.baddbmm(a["b"][None], x[None], a["w"][None])),
    "linear": ("lower", lambda x, a: F.linear(x, a["w"])),
    "conv2d": ("lower", lambda x, a: F.conv2d(x.reshape(2, 4, 4, 4), a["k"])),
    "cross_entropy": ("fp32", lambda x, a: F.cross_entropy(x, a["t"])),
    "nll_loss": ("fp32", lambda x, a: F.nll_loss(x, a["t"])),
    "mse_loss": ("fp32", lambda x, a: F.mse_loss(x, a["y"])),
    "l1_loss": ("fp32", lambda x, a: F.l1_loss(x, a["y"])),
    "smooth_l1_loss": ("fp32", lambda x, a: F.smooth_l1_loss(x, a["y"])),
    "bce_with_logits": ("fp32", lambda x, a: F.binary_cross_entropy_with_logits(x, a["p"])),
    "prod": ("fp32", lambda x, a: (1 + 0.01 * x).prod(-1)),
    "softmax": ("fp32_widen", lambda x, a: torch.softmax(x, -1)),
    "F.softmax": ("fp32_widen", lambda x, a: F.softmax(x, -1)),
    "log_softmax": ("fp32_widen", lambda x, a: F.log_softmax(x, -1)),
    "layer_norm": ("fp32_widen", lambda x, a: F.layer_norm(x, (16,))),
    "group_norm": ("fp32_widen", lambda x, a: F.group_norm(x.reshape(2, 4, 16), 2)),
    "exp": ("fp32_widen", lambda x, a: torch.exp(x)),
    "sum": ("fp32_widen", lambda x, a: x.sum(-1)),
    "cumsum": ("fp32_widen", lambda x, a: x.cumsum(-1)),
}
AMP_DTYPES = dt.AMP


def expected_dtype(widens: bool, policy: str, amp: torch.dtype, inp: torch.dtype) -> str:
    rule = POLICY[widens][policy]
    dtype = {LOW: amp, FP32: torch.float32, INPUT: inp}[rule]
    return dt.name(dtype)


def _aux(gen: torch.Generator, place, dtype) -> dict:
    def r(*shape):
        return torch.randn(*shape, generator=gen).to(place, dtype)
    return {"w": r(16, 16), "b": r(8, 16), "k": r(4, 4, 3, 3), "y": r(8, 16),
            "p": torch.rand(8, 16, generator=gen).to(place, dtype),
            "t": torch.randint(0, 16, (8,), generator=gen).to(place)}


CASES = [(amp, op, inp) for amp in AMP_DTYPES for op in OPS for inp in ("float32", amp)]


@pytest.mark.parametrize("amp,op,inp", CASES, ids=[f"{a}-{o}-in={i}" for a, o, i in CASES])
def test_autocast_policy(device, results, amp, op, inp):
    policy, fn = OPS[op]
    amp_dtype, in_dtype = AMP_DTYPES[amp], dt.BY_NAME[inp]
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(8, 16, generator=gen)
    aux = _aux(gen, device.torch_device, in_dtype)
    with device.scope(), device.autocast(amp_dtype):
        out = fn(x.to(device.torch_device, in_dtype), aux)
    # reference: the same math in fp64 on the CPU, from the same (rounded) inputs
    ref = fn(x.to(in_dtype).double(), {k: v.cpu().double() if v.is_floating_point() else v.cpu()
                                      for k, v in aux.items()})
    got = dt.name(out.dtype)
    want = expected_dtype(device.kind.autocast_widens, policy, amp_dtype, in_dtype)
    # error relative to the output's scale (elementwise relative error is meaningless
    # for matmul outputs near zero)
    err = float((out.cpu().double() - ref).abs().max() / ref.abs().max().clamp_min(1e-12))
    finite = bool(torch.isfinite(out).all())
    ok = got == want and finite and err < 0.05
    results.check(
        ids.record("amp", "autocast_policy", amp, op, f"in={inp}"), ok=ok,
        metrics={"out_dtype": got, "scaled_max_err": err},
        rules={"out_dtype": equal(), "scaled_max_err": lower(rel=4.0, abs=1e-3)},
        info={"policy": policy, "expected": want},
        message=f"autocast({amp}) {op} on a {inp} input returned {got}, the {device.type} "
                f"policy says {want} (class {policy!r}, Note [Autocast policy by device "
                f"type]); max err / max |ref| vs fp64 {err:.3g}, finite {finite}")


@pytest.mark.parametrize("amp", list(AMP_DTYPES))
def test_nested_autocast_disabled_computes_fp32(device, results, amp):
    """Inside autocast, an ``autocast(enabled=False)`` region with ``.float()`` inputs
    computes in fp32 (the field's way to keep a loss or a norm in full precision)."""
    amp_dtype = AMP_DTYPES[amp]
    gen = torch.Generator().manual_seed(11)
    x, w1, w2 = (torch.randn(32, 64, generator=gen), torch.randn(64, 64, generator=gen) / 8,
                 torch.randn(64, 64, generator=gen) / 8)
    place = device.torch_device
    with device.scope(), device.autocast(amp_dtype):
        hidden = F.linear(x.to(place), w1.to(place))
        with device.autocast(amp_dtype, enabled=False):
            inner = F.linear(hidden.float(), w2.to(place))
            probs = torch.softmax(inner, -1)
        after = F.linear(inner, w2.to(place))
    ref_inner = F.linear(hidden.cpu().double(), w2.double())
    # judged against the dot products' condition sum |a_i b_i| (Note [Condition of products
    # and reductions] in harness/compare.py): a correct fp32 kernel is within K * 2^-24 of it
    condition = F.linear(hidden.cpu().double().abs(), w2.double().abs())
    err = float(((inner.cpu().double() - ref_inner).abs() / condition.clamp_min(1e-30)).max())
    allowed = 2 * w2.shape[1] * 2.0**-24
    dtypes = {"hidden": hidden.dtype, "inner": inner.dtype, "probs": probs.dtype,
              "after": after.dtype}
    names = {k: dt.name(v) for k, v in dtypes.items()}
    ok = (dtypes["hidden"] == amp_dtype and dtypes["inner"] == torch.float32
          and dtypes["probs"] == torch.float32 and dtypes["after"] == amp_dtype and err < allowed)
    results.check(
        ids.record("amp", "autocast_nested_disabled", amp), ok=ok,
        metrics={"inner_dtype": names["inner"], "inner_rel_err": err,
                 "outer_dtype": names["after"]},
        rules={"inner_dtype": equal(), "outer_dtype": equal(),
               "inner_rel_err": lower(rel=4.0, abs=1e-7)},
        info=names,
        message=f"nested autocast(enabled=False) inside autocast({amp}): dtypes {names} "
                f"(expected hidden/after {amp}, inner/probs float32); inner error vs fp64 "
                f"relative to sum|a_i b_i| {err:.3g} (allowed {allowed:.3g})")
