"""Device-generic memory measurement: peak and live bytes, caps, OOM, checkpointing helpers.

One interface for every device (:class:`MemoryMeter`), two back ends:

- **allocator** (devices with allocator statistics: npu, cuda, xpu): the caching
  allocator's own counters through the :class:`~harness.device.Device`
  (``reset_peak``/``peak_allocated``/``allocated``); a cap is a real
  ``set_per_process_memory_fraction`` (``device.cap``) and an over-cap allocation raises
  the device's real ``OutOfMemoryError``.
- **tracker** (the CPU, and any device without statistics): a :class:`StorageTracker`, a
  ``TorchDispatchMode`` that sees every aten op's outputs and counts each *new* storage
  once (by its ``StorageImpl``) until a weak-reference finaliser on the storage says it
  was freed. A cap raises ``device.oom_error`` (``torch.OutOfMemoryError``) when an op's
  outputs would take the live bytes over it.

Both report bytes *relative to the meter's start*: storages alive before ``__enter__``
(parameters, a batch already on the device) are not counted, exactly as
``max_memory_allocated() - memory_allocated()`` at the start would not count them.

Note [What the tracker sees]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A dispatch mode sits below autograd, so it sees forward ops, backward ops, the
recomputation of a gradient checkpoint, optimizer updates, autocast's casts and factory
calls (``torch.empty``). It counts the storage of every op output that is not the storage
of one of the op's inputs (views, in-place and ``out=`` results alias an input and are
not new). It does not see memory a C++ kernel allocates and frees internally, nor tensors
made without dispatch (``torch.from_numpy``). On the validation cases (tests/test_memory.py)
its numbers are the analytic ones exactly; storages are counted at their ``nbytes``, with
no allocator rounding.

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

import collections
import contextlib
import dataclasses
import gc
import threading
import time
import weakref
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from harness.device import Unsupported, storage_lifetime_unsupported

# ------------------------------------------------------------------------- tracker


def _storage_of(value: Any):
    """The untyped storage of a dense tensor with real memory, else None."""
    if not isinstance(value, torch.Tensor) or value.layout != torch.strided:
        return None
    if value.device.type == "meta":
        return None
    try:
        return value.untyped_storage()
    except (RuntimeError, NotImplementedError):  # tensor subclasses without storage
        return None


class StorageTracker(TorchDispatchMode):
    """Live and peak bytes of the storages created while this mode is active.

    Use through :class:`MemoryMeter`; standalone: ``with StorageTracker() as t: ...``.
    ``limit`` (bytes or None) makes an op whose new outputs would take the live bytes
    above it raise ``oom_error`` (the op's outputs are dropped, as an allocator's
    failed allocation would be).

    Frees arrive through finalisers, which may run in any thread and at any moment (a
    garbage collection inside this mode's own bookkeeping), so they only queue the
    storage's key; the queue is drained under the lock before new outputs are counted
    (a freed address can be reused only by a storage allocated after the free).
    """

    def __init__(self, limit: Optional[int] = None,
                 oom_error: Optional[type[BaseException]] = None) -> None:
        super().__init__()
        self.limit = limit
        # torch.OutOfMemoryError is torch >= 2.5; torch.cuda's exists on every build
        self.oom_error = oom_error or getattr(torch, "OutOfMemoryError", None) \
            or torch.cuda.OutOfMemoryError
        self.peak = 0
        self.allocations = 0
        self._current = 0
        self._live: dict[int, list] = {}  # StorageImpl address -> [nbytes, finalizer]
        self._freed: collections.deque = collections.deque()
        self._lock = threading.Lock()

    def _drain(self) -> None:
        """Apply the queued frees (the caller holds the lock)."""
        while self._freed:
            entry = self._live.pop(self._freed.popleft(), None)
            if entry is not None:
                self._current -= entry[0]

    @property
    def current(self) -> int:
        """Bytes of the tracked storages alive now."""
        with self._lock:
            self._drain()
            return self._current

    def reset(self) -> None:
        """Start a new peak from the current live bytes."""
        with self._lock:
            self._drain()
            self.peak = self._current

    def live_storages(self) -> list[int]:
        """The byte sizes of the tracked live storages, largest first."""
        with self._lock:
            self._drain()
            sizes = [entry[0] for entry in list(self._live.values())]
        return sorted(sizes, reverse=True)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {s._cdata for s in map(_storage_of, tree_flatten((args, kwargs))[0])
                  if s is not None}
        outputs = [s for s in map(_storage_of, tree_flatten(out)[0]) if s is not None]
        if not outputs:
            return out
        new: dict[int, Any] = {}
        with self._lock:
            self._drain()
            for storage in outputs:
                key, nbytes = storage._cdata, storage.nbytes()
                entry = self._live.get(key)
                if entry is not None:  # already counted; a resize changes its size
                    self._current += nbytes - entry[0]
                    entry[0] = nbytes
                elif key not in inputs and key not in new:
                    new[key] = storage
            added = sum(s.nbytes() for s in new.values())
            if self.limit is not None and added and self._current + added > self.limit:
                live = self._current
                raise self.oom_error(
                    f"harness tracker: out of memory: {func} tried to allocate {added} bytes "
                    f"with {live} bytes live under a cap of {self.limit} bytes "
                    f"({self.limit - live} free)")
            for key, storage in new.items():
                nbytes = storage.nbytes()
                self._live[key] = [nbytes, weakref.finalize(storage, self._freed.append, key)]
                self._current += nbytes
                self.allocations += 1
            self.peak = max(self.peak, self._current)
        return out


# --------------------------------------------------------------------------- meter


class MemoryMeter:
    """Peak and current bytes on one device, the same way on every device.

    ``with MemoryMeter(device) as meter: ...`` then ``meter.peak`` / ``meter.current``
    (bytes above the level at ``__enter__``); ``meter.reset()`` starts a new peak;
    ``meter.cap(nbytes)`` makes allocations beyond ``nbytes`` above the start raise
    ``device.oom_error`` (lifted on exit or by ``meter.cap(None)``).
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
                    "allocate (Note [Mode order] in harness/memory.py); use "
                    "harness.memory.measure(device) for both in the right order")
            reason = storage_lifetime_unsupported()
            if reason is not None:  # Note [Missing features of older stacks]
                raise Unsupported(reason)
            self._tracker = StorageTracker(self._limit, self.device.oom_error)
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
        self.device.empty_cache()  # cached blocks would count against the fraction
        self.device.cap(self.start + nbytes)
        self._capped = True

    @property
    def limit(self) -> Optional[int]:
        return self._limit

    @property
    def oom_error(self) -> type[BaseException]:
        return self.device.oom_error

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


def release() -> None:
    """Free what an exception or a cycle still holds (gc) before reading ``current``."""
    gc.collect()


@contextlib.contextmanager
def young_gc() -> Iterator[None]:
    """Make :func:`release` cheap inside: objects older than the block are frozen.

    A full ``gc.collect()`` walks every object torch and its imports made (a quarter of a
    second each); garbage a training step leaves is always younger than the block, so
    ``gc.freeze()`` on entry (``gc.unfreeze()`` on exit) keeps each collection to it.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def fmt_bytes(nbytes: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes:.0f} B"


# --------------------------------------------------------------- saved activations


@contextlib.contextmanager
def saved_tensor_bytes(exclude: Sequence[torch.Tensor] = ()) -> Iterator[dict]:
    """Count the bytes autograd saves for backward (``saved_tensors_hooks``).

    Yields a dict whose ``"bytes"`` is the total of the unique storages packed, leaving
    out the storages of ``exclude`` (parameters, inputs: alive before, not new memory).
    """
    skip = {s._cdata for s in map(_storage_of, exclude) if s is not None}
    seen: dict[int, int] = {}
    found = {"bytes": 0, "tensors": 0, "storages": 0}

    def pack(tensor):
        found["tensors"] += 1
        storage = _storage_of(tensor)
        if storage is not None and storage._cdata not in skip and storage._cdata not in seen:
            seen[storage._cdata] = storage.nbytes()
            found["bytes"] += storage.nbytes()
            found["storages"] += 1
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield found


# ---------------------------------------------------------------- training steps

CHECKPOINT_MODES = ("none", "non_reentrant", "reentrant")


@contextlib.contextmanager
def checkpointed(model: torch.nn.Module, mode: str) -> Iterator[torch.nn.Module]:
    """Wrap each of ``model.blocks()`` in ``torch.utils.checkpoint`` (``mode`` as above).

    The checkpoint function is looked up at call time, so a patched
    ``torch.utils.checkpoint.checkpoint`` (a fault) takes effect.
    """
    if mode not in CHECKPOINT_MODES:
        raise ValueError(f"unknown checkpoint mode {mode!r}; choose from {CHECKPOINT_MODES}")
    if mode == "none":
        yield model
        return
    reentrant = mode == "reentrant"
    blocks = list(model.blocks())

    def wrap(original):
        def forward(*args):
            import torch.utils.checkpoint as ckpt

            return ckpt.checkpoint(original, *args, use_reentrant=reentrant,
                                   preserve_rng_state=True)
        return forward

    missing = object()
    saved = [vars(block).get("forward", missing) for block in blocks]
    for block in blocks:
        block.forward = wrap(block.forward)
    try:
        yield model
    finally:
        for block, before in zip(blocks, saved):
            if before is missing:
                del block.forward  # the class's forward is back
            else:
                block.forward = before


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
    peak: int
    loss: float
    grads: dict[str, torch.Tensor]


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
        peak = meter.peak
    grads = {name: p.grad.detach().cpu().clone() for name, p in model.named_parameters()
             if p.grad is not None}
    return StepMeasurement(peak, loss, grads)


# ------------------------------------------------------------------ OOM threshold


@dataclasses.dataclass
class Threshold:
    """Outcome of :func:`max_batch_under_cap`."""

    max_batch: int
    peaks: dict[int, int]            # batch -> peak bytes (those that completed)
    failed: list[int]                # batches that ran out of memory
    probes: list[int]                # every batch tried, in order
    hit_limit: bool = False          # max_batch reached the search limit


def max_batch_under_cap(attempt: Callable[[int], int], *, oom_error: type[BaseException],
                        start: int = 1, limit: int = 1 << 16,
                        resolution: float = 0.0) -> Threshold:
    """The largest batch whose step completes: doubling from ``start``, then bisection.

    ``attempt(batch)`` runs one capped step and returns its peak bytes, raising
    ``oom_error`` when it does not fit. Bisection stops when the bracket is narrower
    than ``max(1, resolution * low)``. Other exceptions propagate.
    """
    peaks: dict[int, int] = {}
    failed: list[int] = []
    probes: list[int] = []

    def fits(batch: int) -> bool:
        probes.append(batch)
        try:
            peaks[batch] = int(attempt(batch))
            return True
        except oom_error:
            failed.append(batch)
            return False
        finally:
            release()  # the failed step's frames and graph go now

    with young_gc():
        return _search(fits, start, limit, resolution, peaks, failed, probes)


def _search(fits, start, limit, resolution, peaks, failed, probes) -> Threshold:
    low, high = 0, None
    batch = start
    while batch <= limit:
        if fits(batch):
            low, batch = batch, batch * 2
        else:
            high = batch
            break
    if high is None:
        return Threshold(low, peaks, failed, probes, hit_limit=True)
    while high - low > max(1, int(resolution * low)):
        mid = (low + high) // 2
        if fits(mid):
            low = mid
        else:
            high = mid
    return Threshold(low, peaks, failed, probes)


# ------------------------------------------------------------------------- leaks


@dataclasses.dataclass
class LeakProfile:
    """Live bytes after each measured step (relative to the meter's start)."""

    levels: list[int]
    summary: str

    @property
    def growth_per_step(self) -> float:
        if len(self.levels) < 2:
            return 0.0
        return (self.levels[-1] - self.levels[0]) / (len(self.levels) - 1)

    @property
    def total_growth(self) -> int:
        return self.levels[-1] - self.levels[0] if self.levels else 0


def leak_profile(device, step: Callable[[], Any], *, warmup: int, steps: int) -> LeakProfile:
    """Run ``warmup`` then ``steps`` steps under one meter; live bytes after each step.

    ``steps + 1`` levels: after the warm-up, then after each measured step.
    """
    meter = MemoryMeter(device)
    with young_gc(), meter:
        with device.scope():
            for _ in range(warmup):
                step()
        release()
        levels = [meter.current]
        for _ in range(steps):
            with device.scope():
                step()
            release()
            levels.append(meter.current)
        summary = meter.summary()
    return LeakProfile(levels, summary)


def copy_model(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy (each checkpoint mode trains its own copy of the same weights)."""
    import copy

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


__all__ = [
    "CHECKPOINT_MODES", "LeakProfile", "MemoryMeter", "StepMeasurement", "StorageTracker",
    "Threshold", "checkpointed", "copy_model", "fmt_bytes", "leak_profile",
    "deterministic_batch", "max_batch_under_cap", "measure", "measure_step", "release",
    "saved_tensor_bytes", "seeded_model", "settled_allocated", "train_step",
]
