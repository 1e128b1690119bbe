"""Divergence finder: the first layer where the DUT and the CPU reference part ways.

The field's slow but sure method for an accuracy problem (NPU_NOTES.md): same seed, one
batch, reference and device side by side, compare every layer's activations and
gradients, find the first layer where they diverge. :func:`localize` automates it:

1. Build the model once on the CPU from ``seed`` (the reference, fp32) and deep-copy it
   to the DUT, so both start from identical weights.
2. Hook every sub-module: a forward hook keeps its output (forward order: a module's
   hook fires when its forward returns, so children come before their container), and a
   tensor hook on that output keeps its gradient (backward order).
3. Run one forward and backward on each side (the DUT inside ``device.scope()``, under
   autocast in ``amp_dtype`` if given), compare each pair, and report the first
   activation and the first gradient that leave tolerance.

A module called more than once (a shared pooling layer) is reported as ``name#2``,
``name#3``... Dropout layers are put in eval mode on both sides so the two compute the
same function (random masks differ between devices by design).

CLI: ``python -m harness localize simplecnn --dtype float16 [--inject-fault NAME]``
(exit 0: no divergence, 1: a layer diverged, 2: usage error). The model may also be
given as ``--model NAME``; with the current ``cli.py`` (argparse REMAINDER) an option
can only come first after a ``--``: ``python -m harness localize -- --model resnet``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from harness.argtypes import non_negative_int, positive_float, positive_int
from harness.faults import first_tensor

DTYPES = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """When a layer diverges.

    A layer's *error* is its relative L2 error against the CPU fp32 reference. Under
    autocast the CPU also runs the model in the same dtype (the *reference error*: what
    16-bit arithmetic costs on a correct backend, DESIGN.md "relative to reference").
    The layer diverges when its error exceeds ``max(rel, ratio * reference error)``, when
    ``1 - cosine`` exceeds ``max(1 - cosine, ratio * (1 - reference cosine))``, or when it
    has non-finite values the reference lacks.
    """

    rel: float
    cosine: float
    ratio: float = 4.0


# Floors per compute dtype. fp32: another fp32 kernel (a different summation order) stays
# near 1e-6. Under autocast the floor only matters where the CPU's own 16-bit run is
# (nearly) exact; elsewhere ``ratio`` times the CPU's 16-bit error sets the limit.
TOLERANCES = {
    "float32": Tolerance(rel=1e-4, cosine=0.99999),
    "float16": Tolerance(rel=1e-2, cosine=0.9999),
    "bfloat16": Tolerance(rel=4e-2, cosine=0.999),
}


@dataclasses.dataclass
class LayerDiff:
    """One layer's DUT-vs-reference comparison."""

    name: str
    phase: str  # "forward" (the module's output) or "backward" (the output's gradient)
    shape: tuple
    dtype: str
    rel_err: float
    max_abs_err: float
    cosine: float
    nonfinite: int
    ok: bool
    ref_err: Optional[float] = None  # the CPU's own error in the DUT dtype (autocast only)
    limit: float = 0.0               # the rel_err limit applied

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["shape"] = list(self.shape)
        for key in ("rel_err", "max_abs_err", "cosine", "ref_err", "limit"):
            if out[key] is not None and not math.isfinite(out[key]):
                out[key] = repr(out[key])
        return out

    def line(self) -> str:
        mark = "  " if self.ok else "!!"
        return (f"{mark} {self.name:<28} {self.dtype:<9} {str(tuple(self.shape)):<20} "
                f"rel_err {self.rel_err:9.3g} (limit {self.limit:.3g}"
                + (f", CPU same-dtype {self.ref_err:.3g}" if self.ref_err is not None else "")
                + f")  max_abs {self.max_abs_err:9.3g}  cos {self.cosine:.6f}"
                + (f"  nonfinite {self.nonfinite}" if self.nonfinite else ""))


@dataclasses.dataclass
class Report:
    """What :func:`localize` found; :meth:`text` renders it for a failure message."""

    model: str
    device: str
    dtype: str
    seed: int
    train: bool
    tolerance: Tolerance
    forward: list[LayerDiff]
    backward: list[LayerDiff]
    loss_dut: float
    loss_ref: float
    unmatched: list[str] = dataclasses.field(default_factory=list)

    @property
    def first_forward(self) -> Optional[LayerDiff]:
        return next((d for d in self.forward if not d.ok), None)

    @property
    def first_backward(self) -> Optional[LayerDiff]:
        return next((d for d in self.backward if not d.ok), None)

    @property
    def first(self) -> Optional[LayerDiff]:
        """The first divergence: in the forward pass if any, else in the backward pass."""
        return self.first_forward or self.first_backward

    @property
    def ok(self) -> bool:
        return self.first is None and not self.unmatched

    @property
    def worst_rel_err(self) -> float:
        errs = [d.rel_err for d in (*self.forward, *self.backward)]
        return max(errs) if errs else 0.0

    def to_json(self) -> dict:
        first = self.first
        return {"model": self.model, "device": self.device, "dtype": self.dtype,
                "seed": self.seed, "train": self.train,
                "tolerance": dataclasses.asdict(self.tolerance),
                "first_divergent_layer": first.name if first else None,
                "first_divergent_phase": first.phase if first else None,
                "loss_dut": self.loss_dut, "loss_ref": self.loss_ref,
                "unmatched": self.unmatched,
                "forward": [d.to_json() for d in self.forward],
                "backward": [d.to_json() for d in self.backward]}

    def text(self, context: int = 3) -> str:
        """A readable report: verdict, then the layers around each first divergence."""
        tol = self.tolerance
        lines = [f"divergence finder: {self.model} on {self.device} ({self.dtype}, "
                 f"{'train' if self.train else 'eval'} mode, seed {self.seed}) vs CPU fp32; "
                 + (f"tolerance rel_err <= {tol.rel:g}" if self.dtype == "float32" else
                    f"tolerance rel_err <= max({tol.rel:g}, {tol.ratio:g} x CPU same-dtype "
                    "error)") + f", cosine >= {tol.cosine:g}",
                 f"loss: DUT {self.loss_dut:.6g}, reference {self.loss_ref:.6g}"]
        if self.unmatched:
            lines.append(f"layers seen on one side only: {', '.join(self.unmatched)}")
        for phase, diffs, first in (("forward (activations)", self.forward, self.first_forward),
                                    ("backward (output gradients)", self.backward,
                                     self.first_backward)):
            if first is None:
                lines.append(f"{phase}: all {len(diffs)} layers within tolerance "
                             f"(worst rel_err {max([d.rel_err for d in diffs] or [0]):.3g})")
                continue
            index = diffs.index(first)
            bad = sum(not d.ok for d in diffs)
            lines.append(f"{phase}: FIRST DIVERGENCE at layer {first.name!r} (#{index + 1} of "
                         f"{len(diffs)} in {phase.split()[0]} order; {bad} layers out of "
                         "tolerance)")
            for diff in diffs[max(0, index - context):index + context + 1]:
                lines.append("  " + diff.line())
        return "\n".join(lines)


# ---------------------------------------------------------------------------- capture

class _Capture:
    """Forward outputs and their gradients, keyed ``name`` / ``name#k`` in firing order."""

    def __init__(self, model: nn.Module) -> None:
        self.forward: dict[str, torch.Tensor] = {}
        self.backward: dict[str, torch.Tensor] = {}
        self._calls: dict[str, int] = {}
        self._handles = []
        for name, module in model.named_modules():
            if name:
                self._handles.append(module.register_forward_hook(self._hook(name)))

    def _hook(self, name: str):
        def hook(module, args, output):
            tensor = first_tensor(output)
            if tensor is None or not tensor.is_floating_point():
                return
            count = self._calls.get(name, 0) + 1
            self._calls[name] = count
            key = name if count == 1 else f"{name}#{count}"
            self.forward[key] = tensor.detach().to("cpu", copy=True)
            if tensor.requires_grad:
                def grad_hook(grad, key=key):
                    self.backward[key] = grad.detach().to("cpu", copy=True)
                tensor.register_hook(grad_hook)
        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def _metrics(dut: torch.Tensor, ref: torch.Tensor) -> tuple[float, float, float, int]:
    """(relative L2 error, max abs error, cosine, non-finite count) of ``dut`` vs ``ref``."""
    d, r = dut.double().flatten(), ref.double().flatten()
    nonfinite = int((~torch.isfinite(d) & torch.isfinite(r)).sum())
    finite = torch.isfinite(d) & torch.isfinite(r)
    d, r = d[finite], r[finite]
    diff = d - r
    ref_norm = float(r.norm())
    rel = float(diff.norm()) / ref_norm if ref_norm > 0 else float(diff.norm())
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    denom = float(d.norm()) * ref_norm
    cosine = float((d @ r) / denom) if denom > 0 else (1.0 if float(d.norm()) == 0 else 0.0)
    return rel, max_abs, cosine, nonfinite


def compare(name: str, phase: str, dut: torch.Tensor, ref: torch.Tensor,
            tolerance: Tolerance, same_dtype: Optional[torch.Tensor] = None) -> LayerDiff:
    """One layer against the fp32 reference (and the CPU's own run in the DUT dtype)."""
    dtype = str(dut.dtype).replace("torch.", "")
    if dut.shape != ref.shape:
        return LayerDiff(name, phase, tuple(dut.shape), dtype, math.inf, math.inf, 0.0, 0,
                         False, None, tolerance.rel)
    rel, max_abs, cosine, nonfinite = _metrics(dut, ref)
    ref_err, limit, cos_limit = None, tolerance.rel, tolerance.cosine
    if same_dtype is not None and same_dtype.shape == ref.shape:
        ref_err, _, ref_cos, _ = _metrics(same_dtype, ref)
        limit = max(tolerance.rel, tolerance.ratio * ref_err)
        cos_limit = min(tolerance.cosine, 1 - tolerance.ratio * (1 - ref_cos))
    ok = nonfinite == 0 and rel <= limit and cosine >= cos_limit
    return LayerDiff(name, phase, tuple(dut.shape), dtype, rel, max_abs, cosine, nonfinite, ok,
                     ref_err, limit)


def _run(model: nn.Module, x: torch.Tensor, y: torch.Tensor, autocast, loss_scale: float,
         loss_fn) -> tuple[_Capture, float]:
    capture = _Capture(model)
    try:
        with autocast:
            out = model(x)
        loss = loss_fn(out.float(), y)
        (loss * loss_scale).backward()
    finally:
        capture.remove()
    return capture, float(loss.detach())


def _set_mode(model: nn.Module, train: bool) -> None:
    model.train(train)
    for module in model.modules():
        if isinstance(module, nn.modules.dropout._DropoutNd):
            module.eval()  # masks differ between devices by design


def localize(model_factory: Callable[[], nn.Module], batch: tuple[torch.Tensor, torch.Tensor],
             device, *, amp_dtype: Optional[torch.dtype] = None, seed: int = 0,
             train: bool = True, tolerance: Optional[Tolerance] = None,
             model_name: str = "model", loss_fn=F.cross_entropy,
             dut_model: Optional[nn.Module] = None) -> Report:
    """Run the DUT and the CPU fp32 reference side by side on one batch; compare layers.

    Args:
        model_factory: builds the model on the CPU (called once, after ``manual_seed``).
        batch: ``(inputs, targets)`` on the CPU.
        device: the :class:`~harness.device.Device` under test.
        amp_dtype: run the DUT under autocast in this dtype (None: fp32).
        train: compare in train mode (BatchNorm uses batch statistics) or eval mode.
        tolerance: per-layer limits; default from :data:`TOLERANCES` for the dtype.
        dut_model: use this (already placed) DUT model instead of a copy of the
            reference, e.g. one a check has trained or modified.
    """
    dtype_name = str(amp_dtype).replace("torch.", "") if amp_dtype is not None else "float32"
    tol = tolerance or TOLERANCES[dtype_name]
    torch.manual_seed(seed)
    ref_model = model_factory().float()
    x, y = batch
    # fp16 gradients of an unscaled loss can underflow; scale both sides alike (the
    # relative metrics do not change), as a GradScaler would.
    loss_scale = 1024.0 if amp_dtype == torch.float16 else 1.0
    with device.scope():
        dut = dut_model if dut_model is not None else copy.deepcopy(ref_model).to(
            device.torch_device)
        _set_mode(dut, train)
        autocast = (device.autocast(amp_dtype) if amp_dtype is not None
                    else device.autocast(torch.float16, enabled=False))
        dut_capture, loss_dut = _run(dut, x.to(device.torch_device), y.to(device.torch_device),
                                     autocast, loss_scale, loss_fn)
    same = None
    if amp_dtype is not None:  # the CPU's own run in the DUT dtype: the reference error
        cpu_low = copy.deepcopy(ref_model)
        _set_mode(cpu_low, train)
        same, _ = _run(cpu_low, x.float(), y, torch.autocast("cpu", dtype=amp_dtype),
                       loss_scale, loss_fn)
    _set_mode(ref_model, train)
    ref_capture, loss_ref = _run(ref_model, x.float(), y,
                                 torch.autocast("cpu", enabled=False), loss_scale, loss_fn)

    def pairs(phase, dut_side, ref_side, same_side):
        return [compare(k, phase, v, ref_side[k], tol,
                        same_side.get(k) if same_side is not None else None)
                for k, v in dut_side.items() if k in ref_side]

    forward = pairs("forward", dut_capture.forward, ref_capture.forward,
                    same.forward if same else None)
    backward = pairs("backward", dut_capture.backward, ref_capture.backward,
                     same.backward if same else None)
    unmatched = sorted(set(dut_capture.forward) ^ set(ref_capture.forward))
    return Report(model_name, f"{device.type}:{device.index}", dtype_name, seed, train, tol,
                  forward, backward, loss_dut, loss_ref, unmatched)


def report_for(model_name: str, device, *, amp_dtype=None, seed: int = 0, scale: str = "small",
               batch_size: int = 8, train: bool = True, dut_model=None) -> Report:
    """:func:`localize` on a named model (:data:`harness.training.MODELS`) and one batch
    from :mod:`harness.data`: what a failing model-level check appends to its message."""
    from harness import data, training

    return localize(training.model_factory(model_name, scale), data.one_batch(batch_size, seed),
                    device, amp_dtype=amp_dtype, seed=seed, train=train,
                    model_name=model_name, dut_model=dut_model)


def safe_report_text(*args, **kwargs) -> str:
    """:func:`report_for`'s text, or why it could not be made (for failure messages)."""
    try:
        return report_for(*args, **kwargs).text()
    except Exception as exc:  # noqa: BLE001 - a failing finder must not hide the failure
        return f"(divergence finder failed: {type(exc).__name__}: {exc})"


# --------------------------------------------------------------------------------- CLI

def build_parser() -> argparse.ArgumentParser:
    from harness import training
    from harness.device import DEVICE_TYPES

    parser = argparse.ArgumentParser(
        prog="python -m harness localize",
        description="Find the first layer where the DUT and the CPU fp32 reference diverge "
                    "(one batch, same seed and weights, hooks on every module).")
    parser.add_argument("model_positional", nargs="?", choices=sorted(training.MODELS),
                        metavar="MODEL", help="Model (same as --model)")
    parser.add_argument("--model", default=None, choices=sorted(training.MODELS),
                        metavar="NAME", help="Model: %(choices)s. Default: 'simplecnn'")
    parser.add_argument("--device", default="auto", choices=("auto", *DEVICE_TYPES),
                        metavar="TYPE", help="Device under test. Default: %(default)r")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES), metavar="DTYPE",
                        help="DUT compute dtype (float16/bfloat16 use autocast). "
                             "Default: %(default)r")
    parser.add_argument("--seed", default=0, type=int, metavar="N",
                        help="Seed of the weights and the batch. Default: %(default)r")
    parser.add_argument("--batch-size", default=8, type=positive_int, metavar="N",
                        help="Batch size. Default: %(default)r")
    parser.add_argument("--scale", default="small", choices=("small", "full"), metavar="SCALE",
                        help="Model scale (resnet: full is ResNet-18). Default: %(default)r")
    parser.add_argument("--eval", action="store_true",
                        help="Compare in eval mode (BatchNorm running statistics)")
    parser.add_argument("--inject-fault", action="append", default=[], metavar="NAME",
                        help="Activate a fault on the DUT side (repeatable). Default: none")
    parser.add_argument("--rel", type=positive_float, default=None, metavar="X",
                        help="Override the relative-error tolerance. Default: per dtype")
    parser.add_argument("--context", type=non_negative_int, default=3, metavar="N",
                        help="Layers shown around a divergence. Default: %(default)r")
    parser.add_argument("--json", action="store_true", help="Machine-readable output")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m harness localize ...``; 0 when no layer diverges, 1 when one does."""
    from harness import faults
    from harness.device import DeviceUnavailable, select

    parser = build_parser()
    argv = list(argv) if argv is not None else None
    if argv and argv[0] == "--":  # `python -m harness localize -- --model ...`
        argv = argv[1:]
    args = parser.parse_args(argv)
    args.model = args.model or args.model_positional or "simplecnn"
    try:
        faults.set_active(args.inject_fault)
        device, _ = select(args.device)
    except (faults.FaultError, DeviceUnavailable) as exc:
        print(f"error: {exc}")
        return 2
    tolerance = None
    if args.rel is not None:
        base = TOLERANCES[args.dtype]
        tolerance = Tolerance(rel=args.rel, cosine=base.cosine, ratio=base.ratio)
    from harness import data, training

    report = localize(training.model_factory(args.model, args.scale),
                      data.one_batch(args.batch_size, args.seed), device,
                      amp_dtype=DTYPES[args.dtype], seed=args.seed, train=not args.eval,
                      tolerance=tolerance, model_name=args.model)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        if args.inject_fault:
            print(f"injected faults (DUT side): {', '.join(args.inject_fault)}")
        print(report.text(context=args.context))
        first = report.first
        print(f"verdict: first divergent layer: {first.name} ({first.phase})" if first
              else "verdict: no layer diverges")
    return 0 if report.ok else 1
