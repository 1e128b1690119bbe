"""The memory family's training step: one seeded model, one deterministic batch, one step
(per-block checkpointing, optional autocast), and its peak bytes and gradients."""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Optional, Sequence

import torch

from harness.memory.checkpoint import checkpointed
from harness.memory.meter import measure


def train_step(device, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               inputs: torch.Tensor, target: torch.Tensor, *, checkpoint: str = "none",
               amp_dtype: Optional[torch.dtype] = None) -> float:
    """One training step on the DUT (caller enters the scope): copy the batch to the
    device, forward (per-block checkpoint), cross-entropy, backward, optimizer step.

    The input requires grad so reentrant checkpointing (which only differentiates
    through blocks whose inputs require grad) trains the first block too; every mode
    does the same so their gradients compare bitwise.
    """
    where = device.torch_device
    x = inputs.to(where, copy=True).requires_grad_(True)
    y = target.to(where, copy=True)
    optimizer.zero_grad(set_to_none=True)
    with checkpointed(model, checkpoint):
        if amp_dtype is not None:
            with device.autocast(amp_dtype):
                out = model(x)
            loss = torch.nn.functional.cross_entropy(out.float(), y)
        else:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
    optimizer.step()
    return float(loss.detach())


@dataclasses.dataclass
class StepMeasurement:
    """One measured step: its peak bytes, its loss and its gradients (on the CPU)."""

    peak: int
    loss: float
    grads: dict[str, torch.Tensor]
    slack: int = 0
    """Bytes the cap let the step use beyond ``cap`` (free space in segments reserved
    before it: Note [The cap is on reserved memory] in :mod:`harness.memory.meter`)."""


def measure_step(device, model: torch.nn.Module, inputs: torch.Tensor, target: torch.Tensor,
                 *, checkpoint: str, seed: int, cap: Optional[int] = None,
                 lr: float = 0.0) -> StepMeasurement:
    """Peak bytes of one training step and the gradients it produced (copied to CPU).

    ``lr=0`` keeps the weights unchanged so several modes can run on copies of one
    model; the RNG is seeded before the step so dropout masks match across modes.
    """
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    for param in model.parameters():  # an earlier step's gradients are not this step's
        param.grad = None
    device.seed(seed)
    with measure(device, cap=cap) as meter:
        loss = train_step(device, model, optimizer, inputs, target, checkpoint=checkpoint)
        peak, slack = meter.peak, meter.slack
    grads = {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()
             if p.grad is not None}
    return StepMeasurement(peak, loss, grads, slack)


def copy_model(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy (each checkpoint mode trains its own copy of the same weights)."""
    return copy.deepcopy(model)


def seeded_model(build: Callable[[], torch.nn.Module], seed: int = 1234) -> torch.nn.Module:
    """``build()`` with torch's generator seeded: the same weights in every run."""
    torch.manual_seed(seed)
    return build()


def deterministic_batch(sample: Sequence[int], classes: int, batch: int,
                        seed: int = 1234) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and class targets on the CPU, a function of (seed, batch) only."""
    gen = torch.Generator().manual_seed(seed + batch)
    inputs = torch.randn(batch, *sample, generator=gen)
    target = torch.randint(0, classes, (batch,), generator=gen)
    return inputs, target
