"""The memory meter: peak and live bytes on one device, the same way on every device.

One interface for every device (:class:`MemoryMeter`), two back ends:

- **allocator** (devices with allocator statistics: npu, cuda, xpu): the caching
  allocator's own counters through the :class:`~harness.device.Device`
  (``reset_peak``/``peak_allocated``/``allocated``); a cap is a real
  ``set_per_process_memory_fraction`` (``device.cap``) and an over-cap allocation raises
  the device's real ``OutOfMemoryError``.
- **tracker** (the CPU, and any device without statistics): a
  :class:`~harness.memory.tracker.StorageTracker`, a ``TorchDispatchMode`` that sees every
  aten op's outputs and counts each *new* storage once (by its ``StorageImpl``) until a
  weak-reference finaliser on the storage says it was freed (Note [What the tracker
  sees]). A cap raises the device's OOM error class (:func:`~harness.memory.oom.oom_error`,
  ``torch.OutOfMemoryError``) when an op's outputs would take the live bytes over it.

Both report bytes *relative to the meter's start*: storages alive before ``__enter__``
(parameters, a batch already on the device) are not counted, exactly as
``max_memory_allocated() - memory_allocated()`` at the start would not count them.

Note [Mode order]
~~~~~~~~~~~~~~~~~
Injected faults are dispatch modes entered at the outermost ``device.scope()``. A mode
only sees what modes *above* it on the stack pass down, so the tracker must be pushed
*before* the DUT scope is entered: then a fault's ``func(*args)`` and whatever its
transform allocates (a hidden workspace) reach the tracker. :class:`MemoryMeter` refuses
to start a tracker inside an active DUT scope, and :func:`measure` does it in the right
order. On allocator back ends the order does not matter.
"""

from __future__ import annotations

import contextlib
import gc
import time
from typing import Iterator, Optional

from harness.device import Unsupported, storage_lifetime_unsupported
from harness.memory import oom
from harness.memory.tracker import StorageTracker

# Note [The cap is on reserved memory]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# torch_npu's set_per_process_memory_fraction(f) sets allowed_memory_maximum = f * total,
# and alloc_block refuses a new segment when the reserved total plus the segment passes it
# (NPUCachingAllocator.cpp); blocks are 32 bytes larger than asked, rounded to 512, and
# carved from 2 MiB / 20 MiB segments. So a cap of "N bytes more" is N bytes of segments
# beyond what is reserved once the cache is emptied; what fits in them is a little less
# than N bytes of tensors. SimNPU's fidelity mode does the same (docs/simnpu.md).


class MemoryMeter:
    """Peak and current bytes on one device, the same way on every device.

    ``with MemoryMeter(device) as meter: ...`` then ``meter.peak`` / ``meter.current``
    (bytes above the level at ``__enter__``); ``meter.reset()`` starts a new peak;
    ``meter.cap(nbytes)`` makes allocations beyond ``nbytes`` above the start raise
    the device's out-of-memory error (:func:`~harness.memory.oom.oom_error`; lifted
    on exit or by ``meter.cap(None)``).
    Enter it *outside* ``device.scope()`` (Note [Mode order]).
    """

    def __init__(self, device, *, backend: Optional[str] = None) -> None:
        self.device = device
        if backend is None:
            backend = "allocator" if getattr(device, "has_allocator_stats", False) else "tracker"
        if backend not in ("allocator", "tracker"):
            raise ValueError(f"unknown memory backend {backend!r}; use 'allocator' or 'tracker'")
        self.backend = backend
        self.start = 0
        self._tracker: Optional[StorageTracker] = None
        self._capped = False
        self._limit: Optional[int] = None
        self._active = False
        self.slack = 0
        """Free bytes inside the segments reserved when the cap was applied: what the
        step can use beyond the cap (Note [The cap is on reserved memory])."""

    def __repr__(self) -> str:
        return f"MemoryMeter({self.device!r}, backend={self.backend!r})"

    # ---- context
    def __enter__(self) -> MemoryMeter:
        if self._active:
            raise RuntimeError("MemoryMeter is not re-entrant; make a new one")
        if self.backend == "tracker":
            if self.device.in_scope():
                raise RuntimeError(
                    "MemoryMeter: enter the meter outside device.scope(), not inside it: the "
                    "tracker must sit below injected faults' dispatch modes to see what they "
                    "allocate (Note [Mode order] in harness/memory/meter.py); use "
                    "harness.memory.measure(device) for both in the right order")
            reason = storage_lifetime_unsupported()
            if reason is not None:  # Note [Missing features of older stacks]
                raise Unsupported(reason)
            self._tracker = StorageTracker(self._limit, oom.oom_error(self.device))
            self._tracker.__enter__()
        else:
            gc.collect()
            self.device.synchronize()
            self.start = settled_allocated(self.device)
            self.device.reset_peak()
            if self._limit is not None:
                self._apply_cap(self._limit)
        self._active = True
        return self

    def __exit__(self, *exc_info) -> None:
        self._active = False
        if self._tracker is not None:
            self._tracker.__exit__(*exc_info)
        if self._capped:
            self.device.cap(None)
            self._capped = False

    # ---- readings
    @property
    def peak(self) -> int:
        """Peak bytes above the start since ``__enter__`` or the last :meth:`reset`."""
        if self.backend == "tracker":
            return self._tracker.peak if self._tracker is not None else 0
        self.device.synchronize()
        return int(self.device.peak_allocated() or 0) - self.start

    @property
    def current(self) -> int:
        """Live bytes above the start (keeps counting frees after exit)."""
        if self.backend == "tracker":
            return self._tracker.current if self._tracker is not None else 0
        self.device.synchronize()
        return int(self.device.allocated() or 0) - self.start

    def reset(self) -> None:
        """Start a new peak from the current level."""
        if self.backend == "tracker":
            if self._tracker is not None:
                self._tracker.reset()
        else:
            self.device.synchronize()
            self.device.reset_peak()

    # ---- cap
    def cap(self, nbytes: Optional[int]) -> None:
        """Cap allocations at ``nbytes`` above the start (None lifts the cap)."""
        self._limit = None if nbytes is None else int(nbytes)
        if self.backend == "tracker":
            if self._tracker is not None:
                self._tracker.limit = self._limit
        elif self._active:
            if self._limit is None:
                self.device.cap(None)
                self._capped = False
            else:
                self._apply_cap(self._limit)

    def _apply_cap(self, nbytes: int) -> None:
        # Note [The cap is on reserved memory]: torch_npu's (and CUDA's) fraction caps the
        # caching allocator's *reserved* segments, not the bytes in use; so the cap is
        # the reserved level once the cache is emptied, plus ``nbytes``
        self.device.empty_cache()  # cached blocks would count against the fraction
        reserved = self.device.reserved()
        self.slack = max(0, reserved - self.start) if reserved is not None else 0
        self.device.cap((reserved if reserved is not None else self.start) + nbytes)
        self._capped = True

    @property
    def limit(self) -> Optional[int]:
        return self._limit

    @property
    def oom_error(self) -> type[BaseException]:
        """The exception class an over-cap allocation raises."""
        return oom.oom_error(self.device)

    def summary(self) -> str:
        """The device's memory summary, or the tracker's own where there is none."""
        if self.backend == "allocator":
            return self.device.memory_summary()
        tracker = self._tracker
        if tracker is None:
            return "(tracker not started)"
        sizes = tracker.live_storages()
        top = ", ".join(str(n) for n in sizes[:8]) + (" ..." if len(sizes) > 8 else "")
        return (f"harness tracker ({self.device.type} has no allocator statistics): "
                f"{tracker.current} bytes live in {len(sizes)} storages (largest: {top}); "
                f"peak {tracker.peak}; {tracker.allocations} storages allocated; "
                f"cap {tracker.limit}")


def settled_allocated(device, *, quiet: float = 0.005, wait: float = 0.5) -> int:
    """The device's allocated bytes once they stop changing (Note [Frees after an OOM]).

    Note [Frees after an OOM]
    ~~~~~~~~~~~~~~~~~~~~~~~~~
    On an accelerator the backward pass runs in the autograd engine's device thread. When
    it raises (an OOM under a cap), the caller wakes as soon as the error is set, while the
    device thread is still tearing the graph down; the failed step's buffers are freed a
    moment later. A meter started in that moment counts them in its start level and the
    next step's peak comes out short by their size (seen on the simulated npu: a batch
    "fitting" with a peak of 0.3 MiB right after a bigger one ran out of 2 MiB). The CPU
    runs backward in the calling thread, so its tracker never sees this.
    """
    level = int(device.allocated() or 0)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(quiet)
        device.synchronize()
        now = int(device.allocated() or 0)
        if now == level:
            break
        level = now
    return level


@contextlib.contextmanager
def measure(device, *, cap: Optional[int] = None) -> Iterator[MemoryMeter]:
    """A :class:`MemoryMeter` and the DUT scope, entered in the right order."""
    meter = MemoryMeter(device)
    if cap is not None:
        meter.cap(cap)
    with meter, device.scope():
        yield meter


def fmt_bytes(nbytes: float) -> str:
    """Bytes as a person reads them: ``2.50 MiB``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes:.0f} B"
