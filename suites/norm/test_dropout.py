"""Dropout train/eval semantics on the DUT: in train mode kept elements are scaled by
1/(1-p) and about a fraction p is zeroed; in eval mode dropout is the identity."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from harness import dtypes as dt
from harness import ids
from harness.results import equal

N = 1 << 16
CASES = [(d, p) for d in ("float32", "bfloat16", "float16") for p in (0.1, 0.5)]


@pytest.mark.parametrize("dtype,p", CASES, ids=[f"{d}-p={p}" for d, p in CASES])
def test_dropout_train_scales_kept(device, results, dtype, p):
    torch_dtype = dt.BY_NAME[dtype]
    x = torch.ones(N, dtype=torch_dtype)
    with device.scope():
        out = F.dropout(x.to(device.torch_device), p=p, training=True).float().cpu()
        module_out = nn.Dropout(p).train()(x.to(device.torch_device)).float().cpu()
        eval_out = nn.Dropout(p).eval()(x.to(device.torch_device)).cpu()
    scale = float(torch.tensor(1 / (1 - p), dtype=torch_dtype))  # 1/(1-p) in the dtype
    kept = out[out != 0]
    scale_err = float((kept - scale).abs().max() / scale) if kept.numel() else math.inf
    module_kept = module_out[module_out != 0]
    module_err = float((module_kept - scale).abs().max() / scale) if module_kept.numel() \
        else math.inf
    dropped = 1 - kept.numel() / N
    sigma = math.sqrt(p * (1 - p) / N)
    drop_z = abs(dropped - p) / sigma
    mean = float(out.mean())
    eval_identity = bool(torch.equal(eval_out, x))
    ok = scale_err == 0 and module_err == 0 and drop_z <= 5 and eval_identity
    results.check(
        ids.record("norm", "dropout", dtype, f"p={p}"), ok=ok,
        metrics={"kept_scale_err": max(scale_err, module_err), "dropped_fraction": dropped,
                 "mean": mean, "eval_identity": eval_identity},
        rules={"kept_scale_err": equal(), "eval_identity": equal(),
               "dropped_fraction": equal(abs=6 * sigma)},
        info={"drop_z": drop_z, "expected_scale": scale},
        message=f"dropout(p={p}, {dtype}) train: kept values off 1/(1-p)={scale:g} by "
                f"{max(scale_err, module_err):.3g} (relative; must be 0), dropped fraction "
                f"{dropped:.4f} ({drop_z:.1f} sigma from p), mean {mean:.4f} (expected 1); "
                f"eval identity {eval_identity}")
