"""Device-generic memory measurement: the memory family's logic (``suites/memory``).

One module per concept:

- :mod:`~harness.memory.meter`: :class:`MemoryMeter`, peak and live bytes and caps, the
  same way on every device (allocator statistics, or the tracker on the CPU), and
  :func:`measure` (the meter and the DUT scope in the right order, Note [Mode order]);
- :mod:`~harness.memory.tracker`: :class:`StorageTracker`, the CPU's back end, and
  :func:`saved_tensor_bytes` (what autograd keeps for backward);
- :mod:`~harness.memory.oom`: :func:`is_out_of_memory` (the one answer to "is this an
  OOM?", Note [What an out-of-memory error is]) and :func:`max_batch_under_cap`;
- :mod:`~harness.memory.checkpoint`: :func:`checkpointed`, per-block gradient
  checkpointing;
- :mod:`~harness.memory.steps`: the family's training step and its measurement;
- :mod:`~harness.memory.leaks`: :func:`leak_profile`, live bytes step after step;
- :mod:`~harness.memory.collect`: garbage collection around readings;
- :mod:`~harness.memory.cases`: the family's data (models per scale, caps, stated ratios).
"""

from harness.memory.cases import LARGE_SEGMENT, cap_below_segments
from harness.memory.checkpoint import CHECKPOINT_MODES, checkpointed
from harness.memory.collect import release, young_gc
from harness.memory.leaks import LeakProfile, leak_profile
from harness.memory.meter import MemoryMeter, fmt_bytes, measure, settled_allocated
from harness.memory.oom import (
    TORCH_OOM,
    Threshold,
    is_out_of_memory,
    max_batch_under_cap,
    oom_error,
)
from harness.memory.steps import (
    StepMeasurement,
    copy_model,
    deterministic_batch,
    measure_step,
    seeded_model,
    train_step,
)
from harness.memory.tracker import StorageTracker, saved_tensor_bytes

__all__ = [
    "CHECKPOINT_MODES", "LARGE_SEGMENT", "cap_below_segments", "LeakProfile", "MemoryMeter", "StepMeasurement", "StorageTracker",
    "TORCH_OOM", "Threshold", "checkpointed", "copy_model", "deterministic_batch",
    "fmt_bytes", "is_out_of_memory", "leak_profile", "max_batch_under_cap", "measure",
    "measure_step", "oom_error", "release", "saved_tensor_bytes", "seeded_model",
    "settled_allocated", "train_step", "young_gc",
]
