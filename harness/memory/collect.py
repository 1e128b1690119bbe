"""Garbage collection around memory readings: what an exception or a cycle still holds
must go before ``current`` is read, and cheaply enough to do after every step."""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


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
