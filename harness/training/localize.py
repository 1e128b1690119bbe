"""Divergence finder: the first layer where the DUT and the CPU reference part ways.

The field's slow but sure method for an accuracy problem (docs/design.md): same seed, one
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

CLI: ``python -m harness localize simplecnn --dtype float16 [--inject-fault NAME]``,
or a user's model: ``python -m harness localize --model mypkg.nets:build --input 8x3x32x32
--amp fp16`` (any ``PKG.MOD:FACTORY`` of ``python -m harness model``); the text output ends
with the depth-drift curve (Note [Depth drift]) and ``--svg PATH`` writes it as a plot
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

from harness import dtypes
from harness.argtypes import non_negative_int, positive_float, positive_int
from harness.faults import first_tensor

DTYPES = {"float32": None, **dtypes.AMP}
AMP_NAMES = {name: dtypes.canonical(name) for name in ("fp16", "float16", "bf16", "bfloat16")}


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """When a layer diverges.

    A layer's *error* is its relative L2 error against the CPU fp32 reference. Under
    autocast the CPU also runs the model in the same dtype (the *reference error*: what
    16-bit arithmetic costs on a correct backend, docs/standards.md).
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
class DivergenceReport:
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
    params: list[LayerDiff] = dataclasses.field(default_factory=list)  # gradients, by depth

    @property
    def first_forward(self) -> Optional[LayerDiff]:
        return next((d for d in self.forward if not d.ok), None)

    @property
    def first_backward(self) -> Optional[LayerDiff]:
        return next((d for d in self.backward if not d.ok), None)

    @property
    def first_param(self) -> Optional[LayerDiff]:
        return next((d for d in self.params if not d.ok), None)

    @property
    def first(self) -> Optional[LayerDiff]:
        """The first divergence: in the forward pass if any, else in the backward pass,
        else in a parameter's gradient (first to last layer)."""
        return self.first_forward or self.first_backward or self.first_param

    @property
    def ok(self) -> bool:
        return self.first is None and not self.unmatched

    @property
    def worst_rel_err(self) -> float:
        errs = [d.rel_err for d in (*self.forward, *self.backward, *self.params)]
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
                "backward": [d.to_json() for d in self.backward],
                "params": [d.to_json() for d in self.params]}

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
                                     self.first_backward),
                                    ("parameter gradients (by depth)", self.params,
                                     self.first_param)):
            if first is None:
                lines.append(f"{phase}: all {len(diffs)} layers within tolerance "
                             f"(worst rel_err {max([d.rel_err for d in diffs] or [0]):.3g})")
                continue
            index = diffs.index(first)
            bad = sum(not d.ok for d in diffs)
            order = {"forward": "forward", "backward": "backward",
                     "parameter": "depth"}[phase.split()[0]]
            lines.append(f"{phase}: FIRST DIVERGENCE at layer {first.name!r} (#{index + 1} of "
                         f"{len(diffs)} in {order} order; {bad} layers out of "
                         "tolerance)")
            for diff in diffs[max(0, index - context):index + context + 1]:
                lines.append("  " + diff.line())
        return "\n".join(lines)


# ------------------------------------------------------------------------ depth drift
# Note [Depth drift]
# "Loss within 1% but first-layer gradients 50-100% off" (a field report, 910B vs GPU):
# errors that grow with depth, or gradients that are far off at the first layers while the
# last layer is fine, are invisible in a loss curve and obvious as a curve over depth.
# :func:`depth_curve` prints the relative error of every forward activation (in forward
# order) and of every parameter's gradient (in registration order: first to last layer)
# as a log-scale bar, with the limit each was judged by; :func:`plot_svg` draws the same.

CURVE_DECADES = (-8, 0)
"""The bar's log10 range: 1e-8 (empty bar) to 1 (full bar)."""


def _bar(value: float, width: int) -> str:
    low, high = CURVE_DECADES
    if not value > 0:
        return ""
    if not math.isfinite(value):
        return "#" * width + ">"
    filled = (math.log10(value) - low) / (high - low) * width
    return "#" * max(1, min(width, round(filled)))


def depth_curve(report: DivergenceReport, width: int = 32) -> str:
    """The depth-drift curve as text (Note [Depth drift])."""
    low, high = CURVE_DECADES
    lines = [f"depth drift: {report.model} ({report.dtype}) vs CPU fp32; bar = log10 rel_err "
             f"from 1e{low} to 1e{high}, !! = out of tolerance"]
    for title, diffs in (("forward activations (forward order)", report.forward),
                         ("parameter gradients (first to last layer)", report.params)):
        lines.append(f"{title}: {len(diffs)}")
        for index, diff in enumerate(diffs, 1):
            mark = "  " if diff.ok else "!!"
            lines.append(f"{mark}{index:>4} {diff.name:<28} {str(tuple(diff.shape)):<18} "
                         f"rel_err {diff.rel_err:9.3g} (limit {diff.limit:8.3g})  "
                         f"|{_bar(diff.rel_err, width):<{width}}|")
    if report.params:
        first, last = report.params[0], report.params[-1]
        if last.rel_err > 0:
            ratio = f"{first.rel_err / last.rel_err:.3g}x"
        else:  # no ratio of a zero error: say which side is exact
            ratio = "both exact" if first.rel_err == 0 else "the last layer is exact"
        lines.append(f"first-layer / last-layer gradient error: {first.rel_err:.3g} / "
                     f"{last.rel_err:.3g} = {ratio} ({first.name} vs {last.name})")
    return "\n".join(lines)


def plot_svg(report: DivergenceReport) -> str:
    """The depth-drift curve as an SVG string (inline in a report; no network, no file).

    Needs matplotlib (imported here, not at module import); raises ``RuntimeError`` with
    the install command when it is missing.
    """
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError(f"the depth-drift plot needs matplotlib ({exc}); "
                           "pip install matplotlib, or use the text curve") from None
    import io

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    for ax, title, diffs in ((axes[0], "forward activations", report.forward),
                             (axes[1], "parameter gradients (depth)", report.params)):
        xs = list(range(1, len(diffs) + 1))
        floor = 10.0 ** CURVE_DECADES[0]
        ax.semilogy(xs, [max(d.rel_err, floor) for d in diffs], marker="o", ms=3,
                    label="DUT rel_err")
        ax.semilogy(xs, [max(d.limit, floor) for d in diffs], ls="--", lw=1, label="limit")
        if any(d.ref_err is not None for d in diffs):
            ax.semilogy(xs, [max(d.ref_err or 0.0, floor) for d in diffs], ls=":", lw=1,
                        label="CPU same dtype")
        bad = [(x, d) for x, d in zip(xs, diffs) if not d.ok]
        if bad:
            ax.scatter([x for x, _ in bad], [max(d.rel_err, floor) for _, d in bad],
                       color="red", zorder=3, label="out of tolerance")
        ax.set_title(title)
        ax.set_xlabel("layer (forward order)" if ax is axes[0] else "parameter (first to last)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("relative L2 error")
    fig.suptitle(f"depth drift: {report.model} on {report.device} ({report.dtype})")
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog: embeddable as is


# ---------------------------------------------------------------------------- capture

class _Capture:
    """Forward outputs and their gradients, keyed ``name`` / ``name#k`` in firing order."""

    def __init__(self, model: nn.Module) -> None:
        self.forward: dict[str, torch.Tensor] = {}
        self.backward: dict[str, torch.Tensor] = {}
        self.params: dict[str, torch.Tensor] = {}
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

    def keep_param_grads(self, model: nn.Module) -> None:
        """After the backward: every parameter's gradient, in registration (depth) order."""
        self.params = {name: p.grad.detach().to("cpu", copy=True)
                       for name, p in model.named_parameters() if p.grad is not None}


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
    dtype = dtypes.name(dut.dtype)
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
        capture.keep_param_grads(model)
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
             dut_model: Optional[nn.Module] = None) -> DivergenceReport:
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
    dtype_name = dtypes.name(amp_dtype) if amp_dtype is not None else "float32"
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
    params = [compare(k, "param_grad", v, ref_capture.params[k], tol,
                      same.params.get(k) if same is not None else None)
              for k, v in dut_capture.params.items() if k in ref_capture.params]
    unmatched = sorted(set(dut_capture.forward) ^ set(ref_capture.forward))
    return DivergenceReport(model_name, f"{device.type}:{device.index}", dtype_name, seed, train, tol,
                  forward, backward, loss_dut, loss_ref, unmatched, params)


def report_for(model_name: str, device, *, amp_dtype=None, seed: int = 0, scale: str = "small",
               batch_size: int = 8, train: bool = True, dut_model=None) -> DivergenceReport:
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
    names = ", ".join(sorted(training.MODELS))
    parser.add_argument("model_positional", nargs="?", metavar="MODEL",
                        help="Model (same as --model)")
    parser.add_argument("--model", default=None, metavar="NAME|PKG.MOD:FACTORY",
                        help=f"Model: {names}, or a factory returning an nn.Module or "
                             "(module, example_inputs[, target]). Default: 'simplecnn'")
    parser.add_argument("--input", default=None, metavar="SHAPE[:DTYPE]",
                        help="Input shape for a factory model (e.g. 8x3x32x32). Default: "
                             "the factory's example input")
    parser.add_argument("--device", default="auto", choices=("auto", *DEVICE_TYPES),
                        metavar="TYPE", help="Device under test. Default: %(default)r")
    parser.add_argument("--dtype", default="float32", choices=sorted(DTYPES), metavar="DTYPE",
                        help="DUT compute dtype (float16/bfloat16 use autocast). "
                             "Default: %(default)r")
    parser.add_argument("--amp", default=None, choices=sorted(AMP_NAMES), metavar="DTYPE",
                        help="Same as --dtype, short names too: fp16, bf16, float16, "
                             "bfloat16. Default: none")
    parser.add_argument("--svg", default=None, metavar="PATH",
                        help="Also write the depth-drift plot as SVG (needs matplotlib). "
                             "Default: none")
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


def _model_and_batch(args):
    """(factory, (inputs, targets), loss_fn) for a named model or a ``PKG.MOD:FACTORY``."""
    from harness import data, training

    if ":" not in args.model:
        return (training.model_factory(args.model, args.scale),
                data.one_batch(args.batch_size, args.seed), F.cross_entropy)
    from harness.model.spec import SpecError, load_factory, make_target, parse_tensor_specs

    inputs = parse_tensor_specs(args.input) if args.input else None
    spec = load_factory(args.model, inputs, seed=args.seed)
    if len(spec.inputs) != 1:
        raise SpecError(f"model {args.model}: localize feeds one input tensor, the factory "
                        f"gives {len(spec.inputs)}")
    x = spec.inputs[0]
    target = spec.target
    if target is None:
        with torch.no_grad():
            out = copy.deepcopy(spec.module)(x)
        target = make_target(first_tensor(out), None,
                             torch.Generator().manual_seed(args.seed + 2))
    loss_fn = F.mse_loss if target.is_floating_point() else F.cross_entropy
    return (lambda: load_factory(args.model, inputs, seed=args.seed).module,
            (x, target), loss_fn)


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
    if args.amp:
        args.dtype = AMP_NAMES[args.amp]
    from harness import training
    from harness.model.spec import SpecError

    try:
        if ":" not in args.model and args.model not in training.MODELS:
            raise SpecError(f"unknown model {args.model!r}; choose from "
                            f"{', '.join(sorted(training.MODELS))}, or give PKG.MOD:FACTORY")
        faults.set_active(args.inject_fault)
        device, _ = select(args.device)
        factory, batch, loss_fn = _model_and_batch(args)
    except (faults.FaultError, DeviceUnavailable, SpecError) as exc:
        print(f"error: {exc}")
        return 2
    tolerance = None
    if args.rel is not None:
        base = TOLERANCES[args.dtype]
        tolerance = Tolerance(rel=args.rel, cosine=base.cosine, ratio=base.ratio)
    name = args.model.rsplit(":", 1)[-1]
    report = localize(factory, batch, device, amp_dtype=DTYPES[args.dtype], seed=args.seed,
                      train=not args.eval, tolerance=tolerance, model_name=name,
                      loss_fn=loss_fn)
    if args.svg:
        try:
            with open(args.svg, "w", encoding="utf-8") as handle:
                handle.write(plot_svg(report))
        except (RuntimeError, OSError) as exc:
            print(f"error: no plot: {exc}")
            return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        if args.inject_fault:
            print(f"injected faults (DUT side): {', '.join(args.inject_fault)}")
        print(report.text(context=args.context))
        print(depth_curve(report))
        if args.svg:
            print(f"plot: {args.svg}")
        first = report.first
        print(f"verdict: first divergent layer: {first.name} ({first.phase})" if first
              else "verdict: no layer diverges")
    return 0 if report.ok else 1
