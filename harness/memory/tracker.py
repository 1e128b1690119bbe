"""The CPU's memory back end: a dispatch mode that counts the bytes of new storages.

:class:`StorageTracker` is what :class:`~harness.memory.meter.MemoryMeter` uses on a
device without allocator statistics (the CPU); :func:`saved_tensor_bytes` counts what
autograd keeps for backward, the independent number the tracker is validated against.

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
"""

from __future__ import annotations

import collections
import contextlib
import threading
import weakref
from typing import Any, Iterator, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from harness.memory.oom import TORCH_OOM


def storage_of(value: Any):
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

    Use through :class:`~harness.memory.meter.MemoryMeter`; standalone:
    ``with StorageTracker() as t: ...``. ``limit`` (bytes or None) makes an op whose new
    outputs would take the live bytes above it raise ``oom_error`` (the op's outputs are
    dropped, as an allocator's failed allocation would be).

    Frees arrive through finalisers, which may run in any thread and at any moment (a
    garbage collection inside this mode's own bookkeeping), so they only queue the
    storage's key; the queue is drained under the lock before new outputs are counted
    (a freed address can be reused only by a storage allocated after the free).
    """

    def __init__(self, limit: Optional[int] = None,
                 oom_error: Optional[type[BaseException]] = None) -> None:
        super().__init__()
        self.limit = limit
        self.oom_error = oom_error or TORCH_OOM
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
        inputs = {s._cdata for s in map(storage_of, tree_flatten((args, kwargs))[0])
                  if s is not None}
        outputs = [s for s in map(storage_of, tree_flatten(out)[0]) if s is not None]
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


@contextlib.contextmanager
def saved_tensor_bytes(exclude: Sequence[torch.Tensor] = ()) -> Iterator[dict]:
    """Count the bytes autograd saves for backward (``saved_tensors_hooks``).

    Yields a dict whose ``"bytes"`` is the total of the unique storages packed, leaving
    out the storages of ``exclude`` (parameters, inputs: alive before, not new memory).
    """
    skip = {s._cdata for s in map(storage_of, exclude) if s is not None}
    seen: dict[int, int] = {}
    found = {"bytes": 0, "tensors": 0, "storages": 0}

    def pack(tensor):
        found["tensors"] += 1
        storage = storage_of(tensor)
        if storage is not None and storage._cdata not in skip and storage._cdata not in seen:
            seen[storage._cdata] = storage.nbytes()
            found["bytes"] += storage.nbytes()
            found["storages"] += 1
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        yield found
