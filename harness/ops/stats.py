"""Statistical judges for ops whose output is random (dropout).

A random op cannot be compared element by element with a CPU reference: the DUT's RNG is
not the CPU's. What is checked instead (msprobe treats dropout the same way):

* the keep rate is ``1 - p`` within 5 standard deviations of a binomial
  (``|z| <= 5``; a false alarm is a 1-in-3.5-million event);
* kept elements are scaled by ``1 / (1 - p)`` (relative standard, against the input
  up-cast times the exact scale, with the CPU's own rounding as the reference error);
* dropped elements are exactly 0, and for feature dropout a whole channel is kept or
  dropped together;
* the input gradient is the output gradient through the same mask and scale.
"""

from __future__ import annotations

import math

import torch

from harness.compare import Verdict, compare_outputs
from harness.ops.spec import DTYPES, UPCAST
from harness.results import lower

Z_LIMIT = 5.0


def dropout_judge(feature_dims: int = 0):
    """A judge for ``F.dropout`` (``feature_dims=0``) or ``F.dropout{1,2,3}d``.

    ``feature_dims`` is how many trailing dims a mask unit covers (2 for dropout2d on
    N, C, H, W: one draw per (n, c)).
    """

    def judge(device, entry, dtype, sample, values, gen, outcomes):
        from harness.ops import policy

        p = float(sample.kwargs.get("p", 0.5))
        x = values[0]
        torch_dtype = DTYPES[dtype]
        backward = "bwd" in outcomes
        grad_out = torch.randn(x.shape, generator=gen).to(torch_dtype)
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=gen))
        seen = policy.Watch(phase=None)

        def dut(noting):
            device.seed(seed)
            xd = x.to(device.torch_device, copy=True).requires_grad_(backward)
            gd = grad_out.to(device.torch_device)
            if noting is not None:
                noting.phase = "fwd"
            y = entry.fn(xd, **sample.kwargs)
            if noting is not None:
                noting.phase = "bwd"
            gx = torch.autograd.grad(y, xd, gd)[0] if backward else None
            if noting is not None:
                noting.phase = None
            return y, gx

        try:
            y, gx = policy.run_dut(device, dut, seen)
        except Exception as exc:  # noqa: BLE001 - a failing DUT op is a record
            for outcome in outcomes.values():
                outcome.status = policy.classify_exception(exc)[0]
                outcome.message = f"DUT raised {type(exc).__name__}: {exc}"
                outcome.info = {"aten_ops": seen.info()}
            return list(outcomes.values())
        for outcome in outcomes.values():
            outcome.info["aten_ops"] = seen.info()
            outcome.fallback = list(seen.fallback.ops)
        y = y.detach().cpu()
        kept = y != 0  # inputs come from the 'nonzero' domain
        units = kept
        consistent = True
        if feature_dims and y.numel():
            flat = kept.reshape(*kept.shape[:kept.dim() - feature_dims], -1)
            units = flat.all(-1)
            consistent = bool((flat.all(-1) | ~flat.any(-1)).all())
        n = units.numel()
        keep = float(units.double().mean()) if n else 1.0 - p
        sigma = math.sqrt(p * (1 - p) / n) if n else 1.0
        z = (keep - (1 - p)) / sigma if sigma > 0 else 0.0
        up = DTYPES[UPCAST[dtype]]
        scale_up = 1.0 / (1.0 - p)
        scale_low = torch.tensor(1.0, dtype=torch_dtype) / (1.0 - p)  # CPU dropout's rounding
        mask = kept
        ref = x.to(up) * mask * scale_up
        low = x * mask.to(torch_dtype) * scale_low
        verdict = compare_outputs(y, ref, low, standard="relative")
        problems = []
        if abs(z) > Z_LIMIT:
            problems.append(f"keep rate {keep:.5g} over {n} mask units; expected {1 - p:.5g} "
                            f"(z = {z:.3g}, limit |z| <= {Z_LIMIT:g})")
        if not consistent:
            problems.append("a feature channel is partly kept and partly dropped")
        if not verdict.passed:
            problems.append("kept elements are not scaled by 1/(1-p):\n" + verdict.message)
        metrics = {"keep_rate": keep, "keep_rate_z": z, "mask_units": float(n),
                   **{k: v for k, v in verdict.metrics.items()
                      if k in ("max_rel_err", "mean_rel_err", "max_rel_err_ratio",
                               "nan_inf_mismatch")}}
        rules = {k: r for k, r in verdict.rules.items() if k in metrics}
        rules["mask_units"] = lower(1.0, 0.0)
        if "fwd" in outcomes:
            outcomes["fwd"].apply_verdicts(
                {"out": Verdict(not problems, metrics, rules, "\n".join(problems))})
        if backward:
            ref_g = grad_out.to(up) * mask * scale_up
            low_g = grad_out * mask.to(torch_dtype) * scale_low
            outcomes["bwd"].apply_verdicts(
                {"grad0": compare_outputs(gx, ref_g, low_g, standard="relative")})
        return list(outcomes.values())

    return judge
