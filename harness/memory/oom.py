"""Out-of-memory errors, and the largest batch whose step fits under a memory cap.

Note [What an out-of-memory error is]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
One question, one answer: every check of the memory family that must tell an OOM from
another failure (the threshold search, the recovery check) asks :func:`is_out_of_memory`.
The device decides: ``Device.is_out_of_memory(exc)`` knows its stack's OOM errors from
its kind's row (older torch_npu raises a plain ``RuntimeError("NPU out of memory...")``,
not an ``OutOfMemoryError``). A cap on the CPU's tracker raises :func:`oom_error`'s
class, which the device recognises too.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from harness.device import TORCH_OOM
from harness.memory.collect import release, young_gc

__all__ = ["TORCH_OOM", "Threshold", "is_out_of_memory", "max_batch_under_cap", "oom_error"]


def oom_error(device) -> type[BaseException]:
    """The exception class an over-cap allocation raises on ``device``
    (``Device.oom_error``)."""
    return device.oom_error


def is_out_of_memory(device, exc: BaseException) -> bool:
    """Whether ``exc`` is ``device`` running out of memory (Note [What an
    out-of-memory error is])."""
    return bool(device.is_out_of_memory(exc))


# ------------------------------------------------------------------ OOM threshold


@dataclasses.dataclass
class Threshold:
    """Outcome of :func:`max_batch_under_cap`."""

    max_batch: int
    peaks: dict[int, int]            # batch -> peak bytes (those that completed)
    failed: list[int]                # batches that ran out of memory
    probes: list[int]                # every batch tried, in order
    hit_limit: bool = False          # max_batch reached the search limit


def max_batch_under_cap(attempt: Callable[[int], int], *, device, start: int = 1,
                        limit: int = 1 << 16, resolution: float = 0.0) -> Threshold:
    """The largest batch whose step completes: doubling from ``start``, then bisection.

    ``attempt(batch)`` runs one capped step and returns its peak bytes, raising ``device``'s
    out-of-memory error (:func:`is_out_of_memory`) when it does not fit. Bisection stops
    when the bracket is narrower than ``max(1, resolution * low)``. Other exceptions
    propagate.
    """
    peaks: dict[int, int] = {}
    failed: list[int] = []
    probes: list[int] = []

    def fits(batch: int) -> bool:
        probes.append(batch)
        try:
            peaks[batch] = int(attempt(batch))
            return True
        except Exception as exc:
            if not is_out_of_memory(device, exc):
                raise
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
