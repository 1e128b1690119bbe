"""Gradient checkpointing of a model's blocks, by ``torch.utils.checkpoint`` mode."""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

CHECKPOINT_MODES = ("none", "non_reentrant", "reentrant")
"""No checkpointing, ``use_reentrant=False`` and ``use_reentrant=True``."""


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
