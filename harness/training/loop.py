"""Shared training-loop logic of the training family (``suites/amp``, ``optim``, ``norm``).

:func:`train` runs the same recipe on the DUT (inside ``device.scope()``, with autocast
and, for fp16, a GradScaler) and on the CPU reference (fp32, no autocast): same initial
weights (built on the CPU from one seed, then moved), same batches in the same order
(:mod:`harness.data`). :func:`convergence` turns two runs into the metrics the AMP
convergence checks record.

Scales (``--training-scale``): ``small`` is CPU-sized (a tiny CNN, tens of steps; CPU
fp16 kernels are slow reference kernels), ``full`` is for hardware (ResNet-18 proper,
hundreds of steps).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from harness import data, models


class TinyCNN(nn.Module):
    """SimpleCNN's shape at CPU size: two strided conv-BN-ReLU stages, pool, dropout, fc."""

    def __init__(self, widths: Sequence[int] = (8, 16), num_classes: int = data.NUM_CLASSES,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.conv2 = nn.Conv2d(widths[0], widths[1], 3, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(widths[1])
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(widths[1] * 16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(self.dropout(self.pool(x).flatten(1)))


MODELS: dict[str, Callable[[str], nn.Module]] = {
    "tinycnn": lambda scale: TinyCNN(),
    "simplecnn": lambda scale: models.SimpleCNN(),
    "resnet": lambda scale: models.resnet(scale),
    "transformer": lambda scale: models.TinyTransformer(),
}
"""Model name -> factory taking the training scale (``small``/``full``)."""


def model_factory(name: str, scale: str = "small") -> Callable[[], nn.Module]:
    """A zero-argument factory for a named model at a scale."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS)}")
    return functools.partial(MODELS[name], scale)


@dataclasses.dataclass(frozen=True)
class TrainSpec:
    """One training recipe (hashable: reference runs are cached by it)."""

    model: str = "tinycnn"
    scale: str = "small"
    steps: int = 60
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.9
    n_train: int = 1024
    n_test: int = 512
    window: int = 20
    seed: int = 0
    noise: float = 10.0  # data noise: keeps held-out accuracy below 100% (about 90%)


SCALES: dict[str, TrainSpec] = {
    # small: a few seconds on 2 CPU cores, fp16 included (CPU fp16 kernels are slow)
    "small": TrainSpec(model="tinycnn", scale="small", steps=120, batch_size=32, lr=0.05,
                       n_train=1024, n_test=512, window=20),
    # full: ResNet-18 proper on hardware
    "full": TrainSpec(model="resnet", scale="full", steps=400, batch_size=64, lr=0.02,
                      n_train=8192, n_test=2048, window=40),
}


def spec_for(scale: str, **changes) -> TrainSpec:
    if scale not in SCALES:
        raise ValueError(f"unknown training scale {scale!r}; choose from {sorted(SCALES)}")
    return dataclasses.replace(SCALES[scale], **changes)


@dataclasses.dataclass
class TrainResult:
    """One training run: per-step losses, skipped steps, scales, held-out quality."""

    losses: list[float]
    skipped: list[int]
    scales: list[float]
    accuracy: float
    test_loss: float

    def curve(self, digits: int = 5) -> list[float]:
        return [round(v, digits) if math.isfinite(v) else repr(v) for v in self.losses]


@functools.lru_cache(maxsize=4)
def _splits(n_train: int, n_test: int, seed: int,
            noise: float) -> tuple[data.Dataset, data.Dataset]:
    return data.make_splits(n_train, n_test, seed, noise=noise)


def initial_model(spec: TrainSpec) -> nn.Module:
    """The recipe's initial weights, built on the CPU from the recipe's seed."""
    torch.manual_seed(spec.seed)
    return model_factory(spec.model, spec.scale)()


def train(spec: TrainSpec, device, *, amp_dtype: Optional[torch.dtype] = None, dut: bool = True,
          scaler_kwargs: Optional[dict] = None, steps: Optional[int] = None,
          evaluate: bool = True) -> TrainResult:
    """Train ``spec`` on the DUT (``dut=True``: inside ``device.scope()``, autocast in
    ``amp_dtype``, a GradScaler for fp16) or on the CPU reference (fp32, no scope).

    A step is *skipped* when the GradScaler does not apply it (inf/NaN gradients: the
    parameters stay unchanged) or, without a scaler, when the loss or a gradient is not
    finite (the step is then not applied).
    """
    place = device.torch_device if dut else torch.device("cpu")
    scope = device.scope() if dut else contextlib.nullcontext()
    use_amp = dut and amp_dtype is not None
    train_set, test_set = _splits(spec.n_train, spec.n_test, spec.seed, spec.noise)
    model = initial_model(spec)
    torch.manual_seed(spec.seed + 1)  # dropout masks: same stream on both CPU sides
    losses, skipped, scales = [], [], []
    with scope:
        model.to(place).train()
        opt = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=spec.momentum)
        probe_param = list(model.parameters())[-1]  # unchanged after a step <=> skipped
        scaler = None
        if use_amp and amp_dtype == torch.float16:
            scaler = device.grad_scaler(**({"init_scale": 2.0 ** 10} | (scaler_kwargs or {})))
        for step, (x, y) in enumerate(data.batches(train_set, spec.batch_size,
                                                   steps or spec.steps, spec.seed,
                                                   device=place)):
            opt.zero_grad(set_to_none=True)
            with _autocast(device, amp_dtype, use_amp):
                loss = F.cross_entropy(model(x).float(), y)
            losses.append(float(loss.detach()))
            if scaler is not None:
                scaler.scale(loss).backward()
                probe = probe_param.detach().clone()
                scaler.step(opt)
                scaler.update()
                scales.append(float(scaler.get_scale()))
                if torch.equal(probe, probe_param.detach()):  # the scaler skipped the step
                    skipped.append(step)
                continue
            loss.backward()
            grads_finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters()
                               if p.grad is not None)
            if not (math.isfinite(losses[-1]) and grads_finite):
                skipped.append(step)
                continue
            opt.step()
        accuracy, test_loss = (evaluate_model(model, test_set, device, amp_dtype, use_amp)
                               if evaluate else (float("nan"), float("nan")))
    return TrainResult(losses, skipped, scales, accuracy, test_loss)


def _autocast(device, amp_dtype, enabled: bool):
    if not enabled:
        return contextlib.nullcontext()
    return device.autocast(amp_dtype)


@torch.no_grad()
def evaluate_model(model: nn.Module, dataset: data.Dataset, device, amp_dtype=None,
                   use_amp: bool = False, chunk: int = 256) -> tuple[float, float]:
    """Held-out accuracy (percent) and mean loss, in eval mode."""
    place = next(model.parameters()).device
    model.eval()
    correct, total_loss = 0, 0.0
    for start in range(0, len(dataset), chunk):
        x = dataset.images[start:start + chunk].to(place)
        y = dataset.labels[start:start + chunk].to(place)
        with _autocast(device, amp_dtype, use_amp):
            logits = model(x).float()
        total_loss += float(F.cross_entropy(logits, y, reduction="sum"))
        correct += int((logits.argmax(-1) == y).sum())
    model.train()
    return 100.0 * correct / len(dataset), total_loss / len(dataset)


@functools.lru_cache(maxsize=8)
def reference(spec: TrainSpec) -> TrainResult:
    """The CPU fp32 reference run of a recipe (cached: several checks share it)."""
    from harness.device import Device

    return train(spec, Device("cpu"), dut=False)


# --------------------------------------------------------------------------- metrics

def window_mean(values: Sequence[float], window: int, last: bool) -> float:
    part = values[-window:] if last else values[:window]
    finite = [v for v in part if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else float("nan")


def step_change_spread(values: Sequence[float], window: int) -> float:
    """Standard deviation of step-to-step loss changes over the last ``window`` steps."""
    part = [v for v in values[-(window + 1):] if math.isfinite(v)]
    diffs = [b - a for a, b in zip(part, part[1:])]
    if len(diffs) < 2:
        return float("nan")
    mean = sum(diffs) / len(diffs)
    return math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))


@dataclasses.dataclass(frozen=True)
class ConvergenceLimits:
    """The stated bands of the convergence checks (a check fails outside them)."""

    loss_ratio: float = 0.75        # final-window mean / first-window mean must be below
    final_loss_rel: float = 0.25    # |DUT - ref| / ref of the final-window mean loss
    final_loss_abs: float = 0.05    #   ... or this much absolute, whichever is larger
    accuracy_points: float = 6.0    # |ref - DUT| held-out accuracy, percentage points
    skipped_fraction: float = 0.1   # share of steps the GradScaler may skip
    oscillation_ratio: float = 2.5  # DUT / ref spread of step-to-step changes, last window


LIMITS = {"small": ConvergenceLimits(),
          "full": ConvergenceLimits(final_loss_rel=0.15, accuracy_points=2.0,
                                    skipped_fraction=0.02, oscillation_ratio=2.0)}


def convergence(dut: TrainResult, ref: TrainResult, window: int) -> dict[str, float]:
    """The metrics of the AMP convergence checks (DUT run vs reference run)."""
    first, last = window_mean(dut.losses, window, False), window_mean(dut.losses, window, True)
    ref_last = window_mean(ref.losses, window, True)
    dut_spread = step_change_spread(dut.losses, window)
    ref_spread = step_change_spread(ref.losses, window)
    return {
        "first_window_loss": first, "final_window_loss": last,
        "loss_ratio": last / first if first > 0 else float("nan"),
        "ref_final_window_loss": ref_last,
        "final_loss_abs_diff": abs(last - ref_last),
        "final_loss_rel_diff": abs(last - ref_last) / max(abs(ref_last), 1e-12),
        "accuracy": dut.accuracy, "ref_accuracy": ref.accuracy,
        "accuracy_gap_points": abs(ref.accuracy - dut.accuracy),
        "skipped_steps": len(dut.skipped), "steps": len(dut.losses),
        "oscillation": dut_spread, "ref_oscillation": ref_spread,
        "oscillation_ratio": dut_spread / max(ref_spread, 1e-12),
    }
