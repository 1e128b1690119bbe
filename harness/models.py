"""Reference models, written here (no torchvision): small on CPU, full size on hardware.

- :class:`SimpleCNN`: the field's CIFAR model (conv 3->32, BN, relu, pool; conv 32->64,
  BN, relu, pool; fc 4096->512, dropout 0.5; fc 512->10).
- :func:`resnet`: CIFAR-style ResNet of BasicBlocks; ``resnet("full")`` is ResNet-18
  proper (widths 64..512, blocks 2-2-2-2), ``resnet("small")`` a CPU-sized one.
- :class:`TransformerBlock`: pre-LayerNorm attention + MLP block, with a classifier head.
- :class:`DeepMLP`: a stack of identical blocks (for checkpointing measurements).
- :class:`Recommender`: a click model on hashed integer ids (EmbeddingBag mean and sum
  bags, offsets, per-sample weights, a padding mask, scatter_add, gather): the integer
  arguments a model case must replay faithfully.

SimpleCNN, CifarResNet, TinyTransformer and DeepMLP expose ``blocks()``: the sub-modules
a per-block gradient checkpoint wraps.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn


class SimpleCNN(nn.Module):
    """The field's SimpleCNN for 32x32x3 inputs and 10 classes."""

    def __init__(self, num_classes: int = 10, dropout: float = 0.5) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(64 * 8 * 8, 512)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(512, num_classes)
        self.stage1 = nn.Sequential(self.conv1, self.bn1, nn.ReLU(), self.pool)
        self.stage2 = nn.Sequential(self.conv2, self.bn2, nn.ReLU(), self.pool)
        self.head = nn.Sequential(nn.Flatten(), self.fc1, nn.ReLU(), self.dropout, self.fc2)

    def blocks(self) -> Sequence[nn.Module]:
        return [self.stage1, self.stage2, self.head]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks():
            x = block(x)
        return x


class BasicBlock(nn.Module):
    """ResNet's BasicBlock: two 3x3 convs with BN, identity or 1x1 projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """CIFAR-style ResNet (3x3 stem, no max-pool) of BasicBlocks."""

    def __init__(self, widths: Sequence[int] = (64, 128, 256, 512),
                 depths: Sequence[int] = (2, 2, 2, 2), num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers, cin = [], widths[0]
        for stage, (width, depth) in enumerate(zip(widths, depths)):
            for index in range(depth):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(BasicBlock(cin, width, stride))
                cin = width
        self.layers = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(cin, num_classes))

    def blocks(self) -> Sequence[nn.Module]:
        return [self.stem, *self.layers, self.head]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks():
            x = block(x)
        return x


RESNET_SCALES = {
    "small": dict(widths=(16, 32, 64, 128), depths=(1, 1, 1, 1)),
    "full": dict(widths=(64, 128, 256, 512), depths=(2, 2, 2, 2)),  # ResNet-18
}


def resnet(scale: str = "small", num_classes: int = 10) -> CifarResNet:
    """A CIFAR ResNet at a named scale (``small`` for CPU, ``full`` = ResNet-18)."""
    if scale not in RESNET_SCALES:
        raise ValueError(f"unknown ResNet scale {scale!r}; choose from {sorted(RESNET_SCALES)}")
    return CifarResNet(num_classes=num_classes, **RESNET_SCALES[scale])


class TransformerBlock(nn.Module):
    """Pre-LN transformer block (LayerNorm, multi-head attention, MLP)."""

    def __init__(self, dim: int = 64, heads: int = 4, mlp_ratio: int = 4,
                 dropout: float = 0.0) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim {dim} is not divisible by heads {heads}")
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim))
        self.dropout = nn.Dropout(dropout)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, dim = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.heads, dim // self.heads) \
            .permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(dim // self.heads)
        out = torch.softmax(scores, dim=-1) @ v
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.ln1(x)))
        return x + self.dropout(self.mlp(self.ln2(x)))


class TinyTransformer(nn.Module):
    """Patch embedding of 32x32x3 images, ``depth`` TransformerBlocks, a classifier."""

    def __init__(self, dim: int = 64, depth: int = 2, heads: int = 4, patch: int = 8,
                 num_classes: int = 10) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.zeros(1, (32 // patch) ** 2, dim))
        self.layers = nn.Sequential(*[TransformerBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, num_classes)

    def blocks(self) -> Sequence[nn.Module]:
        return list(self.layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos
        x = self.layers(x)
        return self.fc(self.norm(x).mean(dim=1))


class DeepMLP(nn.Module):
    """``depth`` blocks of Linear-ReLU(-Dropout) of equal width: checkpointing's textbook case."""

    def __init__(self, width: int = 256, depth: int = 8, in_features: int = 256,
                 num_classes: int = 10, dropout: float = 0.0) -> None:
        super().__init__()
        self.inp = nn.Linear(in_features, width)
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Dropout(dropout))
            for _ in range(depth))
        self.out = nn.Linear(width, num_classes)

    def blocks(self) -> Sequence[nn.Module]:
        return list(self.layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.layers:
            x = block(x)
        return self.out(x)


# ------------------------------------------------------- factories (PKG.MOD:FACTORY)
# ``python -m harness model harness.models:resnet18`` and ``pytest --model ...`` call these
# with no arguments; each returns (module, example_inputs), which ``--input`` may replace.

def simplecnn() -> tuple[nn.Module, torch.Tensor]:
    """SimpleCNN with a 2x3x32x32 example batch."""
    return SimpleCNN(), torch.randn(2, 3, 32, 32)


def resnet18() -> tuple[nn.Module, torch.Tensor]:
    """ResNet-18 proper (CIFAR stem: widths 64..512, blocks 2-2-2-2), 2x3x32x32 batch."""
    return resnet("full"), torch.randn(2, 3, 32, 32)


def transformer_block() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """One pre-LN TransformerBlock (dim 64, 4 heads) on 2x16x64 tokens, regressed onto a
    same-shape target (mean squared error)."""
    return TransformerBlock(dim=64, heads=4), torch.randn(2, 16, 64), torch.randn(2, 16, 64)


class SincMLP(nn.Module):
    """An MLP with a sinc activation: ``aten.sinc`` is in no curated catalog row, so only
    the model cases check it (the stand-in for a user's unusual op; fault ``model.sinc_*``)."""

    def __init__(self, width: int = 32, num_classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(48, width)
        self.fc2 = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.sinc(self.fc1(x)))


def sinc_mlp() -> tuple[nn.Module, torch.Tensor]:
    """SincMLP with a 4x48 example batch."""
    return SincMLP(), torch.randn(4, 48)


class Recommender(nn.Module):
    """A click model on hashed integer ids: the integer arguments a replay must keep.

    Item ids are hashed into ``buckets`` and pooled per user by an ``EmbeddingBag`` in
    ``mean`` mode (bags given by offsets); tags by one in ``sum`` mode with per-sample
    weights (one bag empty); a padded history (id 0 pads) goes through an ``Embedding``,
    a padding mask and a bucket histogram (``scatter_add``); the user vector scores
    ``candidates`` items and each row keeps the scores of its own picks (``gather``).
    """

    def __init__(self, buckets: int = 97, dim: int = 16, candidates: int = 40) -> None:
        super().__init__()
        self.buckets = buckets
        self.items = nn.EmbeddingBag(buckets, dim, mode="mean")
        self.tags = nn.EmbeddingBag(buckets, dim, mode="sum")
        self.history = nn.Embedding(buckets, dim)
        self.tower = nn.Sequential(nn.Linear(3 * dim + buckets, 32), nn.ReLU(),
                                   nn.Linear(32, dim))
        self.candidates = nn.Parameter(torch.randn(candidates, dim) / math.sqrt(dim))

    def forward(self, item_ids: torch.Tensor, item_offsets: torch.Tensor,
                tag_ids: torch.Tensor, tag_offsets: torch.Tensor, tag_weights: torch.Tensor,
                history: torch.Tensor, picks: torch.Tensor) -> torch.Tensor:
        items = self.items(item_ids % self.buckets, item_offsets)
        tags = self.tags(tag_ids % self.buckets, tag_offsets, per_sample_weights=tag_weights)
        mask = history != 0
        hashed = history % self.buckets
        seen = self.history(hashed).masked_fill(~mask.unsqueeze(-1), 0.0)
        seen = seen.sum(1) / mask.sum(1, keepdim=True).clamp(min=1)
        counts = torch.zeros(history.shape[0], self.buckets).scatter_add(
            1, hashed, mask.to(seen.dtype))
        user = self.tower(torch.cat([items, tags, seen, counts], 1))
        return (user @ self.candidates.T).gather(1, picks)


def recommender() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Recommender on a batch of 4 users: raw ids up to 10^6 (hashed by the model), item
    bags of 3, 2, 4 and 2 ids, tag bags of 2, 0, 4 and 3 weighted ids, a history of 6
    ids padded with 0, and 5 candidate picks per user."""
    gen = torch.Generator().manual_seed(0)
    item_ids = torch.randint(1, 10**6, (11,), generator=gen)
    tag_ids = torch.randint(1, 10**6, (9,), generator=gen)
    history = torch.randint(1, 10**6, (4, 6), generator=gen)
    history[torch.tensor([0, 1, 1, 3]), torch.tensor([5, 4, 5, 5])] = 0  # padding
    return Recommender(), (item_ids, torch.tensor([0, 3, 5, 9]), tag_ids,
                           torch.tensor([0, 2, 2, 6]), torch.rand(9, generator=gen) + 0.5,
                           history, torch.randint(0, 40, (4, 5), generator=gen))


class BranchyMLP(nn.Module):
    """An MLP with a data-dependent branch (``if x.sum() > 0:``): Dynamo cannot trace the
    condition and breaks the graph there (the stand-in for a user's model in the graph
    checks; ``python -m harness model harness.models:branchy_mlp --compile``)."""

    def __init__(self, width: int = 32, num_classes: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, width)
        self.fc2 = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.fc1(x))
        if x.sum() > 0:
            x = x * 2
        return self.fc2(x)


def branchy_mlp() -> tuple[nn.Module, torch.Tensor]:
    """BranchyMLP with an 8x16 example batch."""
    return BranchyMLP(), torch.randn(8, 16)
