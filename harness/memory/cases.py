"""The memory family's data (``suites/memory``): models per scale, batch sizes, caps and
stated ratios.

Everything a check compares against is here as data, with where its number came from.
Ratios and gains were measured with the CPU tracker (torch 2.13, x86-64 avx512; the
bytes do not depend on the thread count) and given a margin. The ``full`` scale is for
hardware (ResNet-18 proper); its caps and ratios are first guesses, not yet measured on
an accelerator, where allocator rounding and kernel workspaces change the savings:
re-state them from the first hardware run's records.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from harness import models


@dataclasses.dataclass(frozen=True)
class MemoryModel:
    """One model of the family at one scale."""

    name: str
    build: Callable[[], torch.nn.Module]
    sample: tuple[int, ...]           # one input's shape
    batch: int                        # batch of the checkpointing step
    max_ratio: dict[str, float]       # checkpoint mode -> stated max peak_ckpt / peak_plain
    classes: int = 10


# Measured ratios on CPU (small scale, tracker bytes): mlp 0.481 (non-reentrant) /
# 0.518 (reentrant); cnn 0.893 / 0.966 at batch 32 (three uneven blocks: the first
# block's recomputation dominates the backward peak); resnet 0.808 / 0.808.
# Accelerators save a 1-byte dropout mask (native_dropout) where the CPU saves a float one
# (bernoulli_ + mul), so their plain peak is smaller and the mlp's ratios larger: 0.665
# reentrant on the simulated npu (harness.simnpu, allocator bytes). The mlp's stated
# maxima hold on both paths; a checkpoint that keeps its activations is ~1.0 either way.
CASES = {
    "small": {
        "mlp": MemoryModel("mlp", lambda: models.DeepMLP(width=128, depth=8, in_features=128,
                                                         dropout=0.1),
                           (128,), 256, {"non_reentrant": 0.60, "reentrant": 0.70}),
        "cnn": MemoryModel("cnn", lambda: models.SimpleCNN(dropout=0.5), (3, 32, 32), 32,
                           {"non_reentrant": 0.93, "reentrant": 0.985}),
        "resnet": MemoryModel("resnet", lambda: models.resnet("small"), (3, 32, 32), 16,
                              {"non_reentrant": 0.86, "reentrant": 0.86}),
    },
    "full": {
        "mlp": MemoryModel("mlp", lambda: models.DeepMLP(width=1024, depth=16,
                                                         in_features=1024, dropout=0.1),
                           (1024,), 1024, {"non_reentrant": 0.60, "reentrant": 0.70}),
        "cnn": MemoryModel("cnn", lambda: models.SimpleCNN(dropout=0.5), (3, 32, 32), 256,
                           {"non_reentrant": 0.93, "reentrant": 0.985}),
        "resnet": MemoryModel("resnet", lambda: models.resnet("full"), (3, 32, 32), 128,
                              {"non_reentrant": 0.80, "reentrant": 0.80}),
    },
}
"""Training scale -> model name -> :class:`MemoryModel`."""


@dataclasses.dataclass(frozen=True)
class ThresholdCase:
    """An OOM-threshold search: a model, a cap, and the stated gain of checkpointing."""

    model: str
    cap: int                          # bytes above the level before the step
    start: int                        # doubling starts here
    ref_batch: int                    # peak at this batch is a compared metric
    min_gain: float                   # max_batch(checkpointed) / max_batch(plain) >= this
    limit: int = 1 << 14              # the search never tries more than this
    resolution: float = 0.0           # bisection stops at a bracket of resolution * low


# Measured on CPU (small scale, tracker bytes, resolution as stated): mlp max batch
# 148 plain, 312 non-reentrant (2.11x), 288 reentrant (1.95x) under 2 MiB; resnet 10
# plain, 13 non-reentrant (1.30x) under 8 MiB. The stated gains keep a margin. On an
# accelerator's path (1-byte dropout masks, see CASES) the mlp gains less: 1.75x
# non-reentrant, 1.50x reentrant on the simulated npu, so the stated gain is 1.4x.
LARGE_SEGMENT = 20 << 20
"""The segment a caching allocator reserves for a block of 1-10 MiB (torch_npu's and
CUDA's kLargeBuffer): under a cap on reserved memory smaller than this, such blocks fit
only in space already reserved, so the max batch follows segment rounding, not the step's
memory (Note [The cap is on reserved memory] in harness/memory/meter.py)."""


def cap_below_segments(device, cap: int) -> str:
    """Why a max-batch comparison under ``cap`` says nothing on ``device`` ("" when it
    does): the cap is below :data:`LARGE_SEGMENT` on a device whose allocator reserves
    segments."""
    if not getattr(device, "reserves_segments", False) or cap >= LARGE_SEGMENT:
        return ""
    return (f"the {cap / 2**20:.0f} MiB cap is below the {LARGE_SEGMENT >> 20} MiB segments "
            f"{device.type}'s caching allocator reserves: the max batch follows segment "
            "rounding, not the step's memory; run with --training-scale full")


THRESHOLDS = {
    "small": {
        "mlp": ThresholdCase("mlp", cap=2 << 20, start=8, ref_batch=64, min_gain=1.4,
                             resolution=1 / 32),
        "resnet": ThresholdCase("resnet", cap=8 << 20, start=2, ref_batch=4, min_gain=1.15),
    },
    "full": {
        "mlp": ThresholdCase("mlp", cap=512 << 20, start=64, ref_batch=256, min_gain=1.4),
        "resnet": ThresholdCase("resnet", cap=4 << 30, start=16, ref_batch=64, min_gain=1.15),
    },
}
"""Training scale -> model name -> :class:`ThresholdCase`."""


@dataclasses.dataclass(frozen=True)
class MemoryLimits:
    """Leak and recovery settings, by meter backend where the tracker is exact."""

    # live bytes may grow by at most this much per step after the warm-up: the tracker
    # counts exact bytes; allocators round blocks to 512 bytes and keep small workspaces
    leak_tolerance: dict = dataclasses.field(
        default_factory=lambda: {"tracker": 0, "allocator": 4096})
    # bytes still live after an OOM that were not before the attempt
    recovery_tolerance: dict = dataclasses.field(
        default_factory=lambda: {"tracker": 0, "allocator": 4096})
    leak_model: str = "mlp"
    leak_batch: int = 64
    warmup: int = 2
    steps: int = 5


LIMITS = {"small": MemoryLimits(), "full": MemoryLimits(leak_batch=512)}
"""Training scale -> :class:`MemoryLimits`."""
