"""Deterministic, learnable image data made from a seed (no downloads), and a seeded
augmentation pipeline whose output is identical on every device.

The data set stands in for CIFAR-10 (32x32x3, 10 classes): each class has a smooth,
left-right symmetric template (low-frequency noise upsampled, so random crops and flips
keep it recognisable) and each sample is ``template * contrast + noise``. A small model
learns it in tens of steps, yet it is not trivial: the noise keeps held-out accuracy
below 100% for a model that has seen only a few batches.

Note [Same data on every device]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Every random number here comes from a CPU ``torch.Generator`` seeded explicitly, never
from the global generator or a device generator (whose streams differ between CPU, CUDA
and NPU). Samples, batch order and augmentation parameters are drawn on the CPU; the
augmentation itself is indexing (crop, flip, zero padding), which is exact on any device.
So the DUT and the CPU reference see bit-identical batches in the same order.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Optional

import torch
import torch.nn.functional as F

NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)
TEMPLATE_SEED = 20261129
"""The class templates' seed: shared by every split, so train and held-out data agree."""


def _generator(seed: int) -> torch.Generator:
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF)
    return gen


def class_templates(num_classes: int = NUM_CLASSES, seed: int = TEMPLATE_SEED) -> torch.Tensor:
    """``(num_classes, 3, 32, 32)`` smooth, left-right symmetric templates with unit RMS."""
    gen = _generator(seed)
    coarse = torch.randn(num_classes, 3, 4, 4, generator=gen)
    smooth = F.interpolate(coarse, size=IMAGE_SHAPE[1:], mode="bilinear", align_corners=False)
    smooth = 0.5 * (smooth + smooth.flip(-1))  # invariant under the augmentation's flip
    smooth = smooth - smooth.mean(dim=(1, 2, 3), keepdim=True)
    return smooth / smooth.pow(2).mean(dim=(1, 2, 3), keepdim=True).sqrt()


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Images ``(N, 3, 32, 32)`` float32 on the CPU and labels ``(N,)`` int64."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def make_dataset(n: int, seed: int, *, noise: float = 1.0, num_classes: int = NUM_CLASSES,
                 template_seed: int = TEMPLATE_SEED) -> Dataset:
    """``n`` samples drawn from ``seed``: balanced labels, template times a random contrast
    (0.5..1.5) plus Gaussian noise of standard deviation ``noise``.

    The same ``(n, seed)`` gives bit-identical data on every machine and device.
    """
    if n <= 0:
        raise ValueError(f"make_dataset: n={n}; expected a positive number of samples")
    gen = _generator(seed)
    templates = class_templates(num_classes, template_seed)
    labels = torch.arange(n) % num_classes
    labels = labels[torch.randperm(n, generator=gen)]
    contrast = 0.5 + torch.rand(n, 1, 1, 1, generator=gen)
    images = templates[labels] * contrast + noise * torch.randn(n, *IMAGE_SHAPE, generator=gen)
    return Dataset(images.float().contiguous(), labels.long())


def make_splits(n_train: int, n_test: int, seed: int, **kwargs) -> tuple[Dataset, Dataset]:
    """A training and a held-out split (disjoint seeds, shared class templates)."""
    return make_dataset(n_train, seed, **kwargs), make_dataset(n_test, seed + 7919, **kwargs)


# --------------------------------------------------------------------- augmentation

@dataclasses.dataclass(frozen=True)
class AugmentParams:
    """One batch's augmentation, drawn on the CPU: crop offsets and flip flags."""

    top: torch.Tensor   # (N,) int64 in [0, 2 * padding]
    left: torch.Tensor  # (N,) int64 in [0, 2 * padding]
    flip: torch.Tensor  # (N,) bool


def draw_augment_params(n: int, generator: torch.Generator, *, padding: int = 4,
                        flip_p: float = 0.5) -> AugmentParams:
    """Draw crop offsets and flips for ``n`` images from a CPU generator."""
    if generator.device.type != "cpu":
        raise ValueError("draw_augment_params needs a CPU torch.Generator (Note [Same data on "
                         f"every device]); got one on {generator.device}")
    top = torch.randint(0, 2 * padding + 1, (n,), generator=generator)
    left = torch.randint(0, 2 * padding + 1, (n,), generator=generator)
    flip = torch.rand(n, generator=generator) < flip_p
    return AugmentParams(top, left, flip)


def apply_augment(images: torch.Tensor, params: AugmentParams, *, padding: int = 4) -> torch.Tensor:
    """Zero-pad by ``padding``, crop back to the input size at the given offsets, flip.

    Pure indexing, so the result is exact on any device and in any dtype.
    """
    n, _, height, width = images.shape
    device = images.device
    padded = F.pad(images, (padding, padding, padding, padding))
    rows = params.top.to(device)[:, None] + torch.arange(height, device=device)[None, :]
    cols = params.left.to(device)[:, None] + torch.arange(width, device=device)[None, :]
    flip = params.flip.to(device)
    cols = torch.where(flip[:, None], cols.flip(-1), cols)
    batch = torch.arange(n, device=device)[:, None, None, None]
    channel = torch.arange(images.shape[1], device=device)[None, :, None, None]
    return padded[batch, channel, rows[:, None, :, None], cols[:, None, None, :]]


def augment(images: torch.Tensor, generator: torch.Generator, *, padding: int = 4,
            flip_p: float = 0.5) -> torch.Tensor:
    """Random crop with zero padding and horizontal flip, randomness from ``generator``.

    ``images`` may live on any device; the parameters are drawn on the CPU, so the same
    generator state gives the same output everywhere (Note [Same data on every device]).
    """
    params = draw_augment_params(images.shape[0], generator, padding=padding, flip_p=flip_p)
    return apply_augment(images, params, padding=padding)


def batches(dataset: Dataset, batch_size: int, steps: int, seed: int, *,
            augmentation: bool = True, device: Optional[torch.device] = None,
            ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` batches in a seeded order (a fresh permutation per epoch), augmented.

    Everything is drawn on the CPU, then moved to ``device`` (default: stay on the CPU).
    """
    if batch_size <= 0 or batch_size > len(dataset):
        raise ValueError(f"batch_size={batch_size}; expected 1..{len(dataset)}")
    gen = _generator(seed)
    order = torch.randperm(len(dataset), generator=gen)
    position = 0
    for _ in range(steps):
        if position + batch_size > len(dataset):
            order, position = torch.randperm(len(dataset), generator=gen), 0
        index = order[position:position + batch_size]
        position += batch_size
        images, labels = dataset.images[index], dataset.labels[index]
        if augmentation:
            images = augment(images, gen)
        if device is not None:
            images, labels = images.to(device), labels.to(device)
        yield images, labels


def one_batch(batch_size: int = 8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A single un-augmented CPU batch (what the divergence finder feeds both sides)."""
    data = make_dataset(batch_size, seed)
    return data.images, data.labels
