"""ResNet-18 on synthetic ImageNet-shaped data, written the way GPU training scripts are.

This is the example input of ``python -m harness scan`` (docs/migration.md): mixed
precision with ``torch.cuda.amp``, ``.cuda()``, NCCL DistributedDataParallel,
``cudnn.benchmark``, ``CUDA_VISIBLE_DEVICES``, a CUDA event timer. It runs on a CUDA
machine (``torchrun --nproc_per_node=8 resnet18_cuda_train.py``); on an NPU it does not.

Every line that ties it to CUDA ends with ``# scan: <rule id>...``; tests/test_scan.py
requires the scan to find exactly those (line, rule) pairs. The model is defined here, so
nothing beyond torch is needed.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.backends import cudnn
from torch.cuda.amp import GradScaler, autocast
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)), inplace=True)
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity, inplace=True)


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, inplanes = [], 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes)]
            inplanes = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SyntheticImageNet(Dataset):
    """Random 3x224x224 images with fixed labels: stands in for ImageFolder."""

    def __init__(self, size=12800, num_classes=1000):
        self.size, self.num_classes = size, num_classes

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(3, 224, 224, generator=g), i % self.num_classes


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--gpus", default="0,1,2,3,4,5,6,7")
    p.add_argument("--dist-backend", default="nccl")  # scan: nccl
    return p.parse_args()


def setup(args):
    if not torch.cuda.is_available():  # scan: cuda-is-available
        raise SystemExit("this script needs a GPU")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", args.gpus)  # scan: cuda-visible-devices
    os.environ["NCCL_DEBUG"] = "WARN"  # scan: nccl-env
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local_rank)  # scan: cuda-device
    dist.init_process_group(backend=args.dist_backend, init_method="env://")
    cudnn.benchmark = True  # scan: cudnn-benchmark
    torch.backends.cuda.matmul.allow_tf32 = True  # scan: cuda-matmul-allow-tf32
    torch.backends.cudnn.allow_tf32 = True  # scan: cudnn-allow-tf32
    torch.cuda.manual_seed_all(0)  # scan: cuda-seed
    return local_rank


def main():
    args = parse_args()
    local_rank = setup(args)
    world = dist.get_world_size()
    name = torch.cuda.get_device_name(local_rank)  # scan: cuda-device
    print(f"rank {dist.get_rank()}/{world} on {name}")
    device = torch.device(f"cuda:{local_rank}")  # scan: cuda-device-string

    model = ResNet18().cuda()  # scan: dot-cuda
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model, device_ids=[local_rank], output_device=local_rank)
    criterion = nn.CrossEntropyLoss().cuda()  # scan: dot-cuda
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9,
                                weight_decay=1e-4, nesterov=True)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    scaler = GradScaler()  # scan: cuda-amp-grad-scaler

    dataset = SyntheticImageNet()
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=args.batch_size // world, sampler=sampler,
                        num_workers=args.workers, pin_memory=True,  # scan: pin-memory
                        drop_last=True)

    start = torch.cuda.Event(enable_timing=True)  # scan: cuda-event
    end = torch.cuda.Event(enable_timing=True)  # scan: cuda-event
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        torch.cuda.reset_peak_memory_stats()  # scan: cuda-memory-control
        start.record()
        t0 = time.time()
        for step, (images, target) in enumerate(loader):
            images = images.cuda(non_blocking=True)  # scan: dot-cuda
            target = target.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            with autocast(dtype=torch.float16):  # scan: cuda-amp-autocast
                loss = criterion(model(images), target)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if step % 20 == 0 and local_rank == 0:
                torch.cuda.synchronize()  # scan: cuda-synchronize
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} "
                      f"scale {scaler.get_scale():.0f}")
        end.record()
        torch.cuda.synchronize()  # scan: cuda-synchronize
        scheduler.step()
        if local_rank == 0:
            images_s = len(loader) * args.batch_size / (time.time() - t0)
            peak = torch.cuda.max_memory_allocated() / 2**30  # scan: cuda-memory-stats
            print(f"epoch {epoch}: {start.elapsed_time(end) / 1e3:.1f} s, {images_s:.0f} "
                  f"images/s, peak {peak:.2f} GiB")
    if local_rank == 0:
        torch.save(model.module.state_dict(), "resnet18.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
