"""Garbage collection around memory readings: what an exception or a cycle still holds
must go before ``current`` is read, and cheaply enough to do after every step."""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


def release() -> None:
    """Free what an exception or a cycle still holds (gc) before reading ``current``."""
    gc.collect()


_keep_frozen = False


def keep_frozen(on: bool) -> bool:
    """Whether :func:`young_gc` leaves what it froze frozen: the harness plugin's choice in
    a conformance session (Note [Collected objects frozen] in :mod:`harness.plugin`).
    Returns the previous setting."""
    global _keep_frozen
    previous, _keep_frozen = _keep_frozen, on
    return previous


@contextlib.contextmanager
def young_gc() -> Iterator[None]:
    """Make :func:`release` cheap inside: objects older than the block are frozen.

    A full ``gc.collect()`` walks every object torch and its imports made (a quarter of a
    second each); garbage a training step leaves is always younger than the block, so
    ``gc.freeze()`` on entry (``gc.unfreeze()`` on exit) keeps each collection to it. In a
    harness session (:func:`keep_frozen`) what was frozen on entry stays frozen: no later
    collection walks it again.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if not _keep_frozen:
            gc.unfreeze()
