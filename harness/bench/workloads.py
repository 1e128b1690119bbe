"""The benchmark bodies, as data: one :class:`Workload` row per benchmark record.

What NPU training users compare (NPU_NOTES.md: at equal batch size and precision, so
both are part of the record id): training-step throughput of SimpleCNN and ResNet-18 in
fp32, fp16 + GradScaler and bf16; op microbenchmarks; the DataLoader; per-op launch
overhead; gradient checkpointing's time cost; all_reduce bus bandwidth (the last two
are in :mod:`suites.bench` because they time something other than one step).

A workload's ``build(device, scale)`` returns a :class:`Prepared` step (the DUT's work,
run by the timing glue inside the DUT scope) or raises :class:`WorkloadUnsupported` with
the reason (recorded as status ``unsupported``).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

from harness import dtypes as dt
from harness.bench.stats import Policy


class WorkloadUnsupported(Exception):
    """The device cannot run this workload; the message is the reason."""


@dataclasses.dataclass
class Prepared:
    """A ready step and what one step processes (for the throughput metric)."""

    step: Callable[[], object]
    units: float = 1.0                 # items per step (images, samples)
    unit: str = ""                     # "images" -> metric images_per_s
    reference: Optional[Callable[[], object]] = None  # ratio benchmarks: the plain step
    close: Callable[[], None] = lambda: None
    state: dict = dataclasses.field(default_factory=dict)  # what the step works on (tests)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One benchmark: its record id, how to build it, and its verdict policy."""

    id: str
    build: Callable[[object, str], Prepared]
    policy: Policy = Policy()
    budget_s: float = 0.6
    kind: str = "step"                 # step | ratio
    clock: str = "device"              # device | host (Note [A timed round])


# ------------------------------------------------------------------- training steps

AMP = {  # precision name -> (autocast dtype or None, GradScaler?)
    "float32": (None, False),
    "float16-amp": (dt.AMP["float16"], True),
    "bfloat16-amp": (dt.AMP["bfloat16"], False),
}
TRAIN_BATCH = {"small": 8, "full": 64}
# CPU autocast runs fp16/bf16 convolutions without native kernels (~50 ms per image on
# one core): small AMP steps use a batch of 2 there so the family stays fast
AMP_CPU_SMALL_BATCH = 2
TRAIN_IMAGE = {"small": 32, "full": 32}


# Note [A timed step repeats the same work]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A training-step benchmark repeats one batch, so with a real learning rate it overfits
# it: the loss fell to 2e-6 within 400 steps of SimpleCNN, activations went denormal, and
# the step time drifted 21.7 -> 15.9 -> 19.9 ms (the same run with flush-to-zero: 15-16 ms
# throughout). How many steps a process had taken (calibration, rounds, warm-up) then
# decided its time: one source of the SimpleCNN steps' two modes between process runs.
# So the step's optimizer has lr=0: SGD still reads the gradients, updates its momentum
# buffers and writes every parameter (``param.add_(grad, alpha=-lr)`` runs for lr=0), but
# the values stay those of the first step, and every timed round does the same arithmetic.


def _amp_supported(device, dtype) -> None:
    """Refuse an autocast dtype this device or stack lacks: the device's one probe
    (``Device.autocast_unsupported``: the row's ``amp_dtypes``, then a tiny matmul)."""
    reason = device.autocast_unsupported(dtype)
    if reason is not None:
        raise WorkloadUnsupported(reason)


def _train(model_fn: Callable[[str], torch.nn.Module], precision: str):
    amp_dtype, scaled = AMP[precision]

    def build(device, scale: str) -> Prepared:
        if amp_dtype is not None:
            _amp_supported(device, amp_dtype)
        where = device.torch_device
        model = model_fn(scale).to(where).train()
        # Note [A timed step repeats the same work]: lr=0, the optimizer does all its work
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)
        scaler = device.grad_scaler() if scaled else None
        batch, size = train_batch(device, scale, precision), TRAIN_IMAGE[scale]
        x = torch.randn(batch, 3, size, size, device=where)
        y = torch.randint(0, 10, (batch,), device=where)

        def step():
            optimizer.zero_grad(set_to_none=True)
            if amp_dtype is None:
                loss = torch.nn.functional.cross_entropy(model(x), y)
            else:
                with device.autocast(amp_dtype):
                    out = model(x)
                loss = torch.nn.functional.cross_entropy(out.float(), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()

        return Prepared(step, units=batch, unit="images",
                        state={"model": model, "optimizer": optimizer})

    return build


def _simplecnn(scale: str) -> torch.nn.Module:
    from harness.models import SimpleCNN

    return SimpleCNN(dropout=0.0)


def _resnet(scale: str) -> torch.nn.Module:
    from harness.models import resnet

    return resnet(scale)


# ----------------------------------------------------------------------- op bodies

def _mm(n: int, dtype=torch.float32):
    def build(device, scale):
        a = torch.randn(n, n, device=device.torch_device, dtype=dtype)
        b = torch.randn(n, n, device=device.torch_device, dtype=dtype)
        return Prepared(lambda: torch.mm(a, b))
    return build


def _bmm(b: int, n: int):
    def build(device, scale):
        x = torch.randn(b, n, n, device=device.torch_device)
        y = torch.randn(b, n, n, device=device.torch_device)
        return Prepared(lambda: torch.bmm(x, y))
    return build


def _conv2d(device, scale):
    conv = torch.nn.Conv2d(16, 32, 3, padding=1).to(device.torch_device)
    x = torch.randn(8, 16, 32, 32, device=device.torch_device, requires_grad=True)

    def step():
        conv.zero_grad(set_to_none=True)
        x.grad = None
        conv(x).sum().backward()

    return Prepared(step, units=8, unit="images")


def _softmax(device, scale):
    x = torch.randn(256, 1024, device=device.torch_device)
    return Prepared(lambda: torch.softmax(x, dim=-1))


def _layer_norm(device, scale):
    x = torch.randn(256, 1024, device=device.torch_device)
    norm = torch.nn.LayerNorm(1024).to(device.torch_device)
    return Prepared(lambda: norm(x))


def _sdpa(device, scale):
    q, k, v = (torch.randn(4, 4, 128, 64, device=device.torch_device) for _ in range(3))
    return Prepared(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v))


def _embedding_bwd(device, scale):
    emb = torch.nn.Embedding(10000, 128).to(device.torch_device)
    idx = torch.randint(0, 10000, (64, 64), device=device.torch_device)

    def step():
        emb.weight.grad = None
        emb(idx).sum().backward()

    return Prepared(step)


def _launch(device, scale):
    x = torch.zeros(1, device=device.torch_device)
    return Prepared(lambda: x.add_(1.0))


# ------------------------------------------------------------------------ DataLoader

class _Images(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.data = torch.randn(n, 3, 32, 32)
        self.target = torch.randint(0, 10, (n,))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i], self.target[i]


def _loader(workers: int, pin: bool):
    def build(device, scale):
        if pin and not device.is_accelerator:
            raise WorkloadUnsupported("pin_memory needs an accelerator (pinned host memory is "
                                      "for copies to a device; the DUT is the CPU)")
        loader = torch.utils.data.DataLoader(
            _Images(512), batch_size=64, num_workers=workers, pin_memory=pin,
            persistent_workers=workers > 0)
        where = device.torch_device

        def epoch():
            for x, y in loader:
                x.to(where, non_blocking=pin), y.to(where, non_blocking=pin)

        def close():
            iterator = getattr(loader, "_iterator", None)
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()

        return Prepared(epoch, units=512, unit="samples", close=close)
    return build


# ------------------------------------------------------------------- checkpointing

def _checkpoint_ratio(device, scale):
    from harness.memory import checkpointed
    from harness.models import DeepMLP

    where = device.torch_device
    model = DeepMLP(width=256, depth=6).to(where)
    x = torch.randn(64, 256, device=where)
    y = torch.randint(0, 10, (64,), device=where)

    def plain():
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()

    def ckpt():
        with checkpointed(model, "non_reentrant"):
            plain()

    return Prepared(ckpt, reference=plain)


# ------------------------------------------------------------------------ the table

NOISY = Policy(max_spread=0.10)  # worker processes on a shared host: wider spread allowed


def _training_rows() -> list[Workload]:
    rows = []
    for name, fn in (("simplecnn", _simplecnn), ("resnet18", _resnet)):
        for precision in AMP:
            rows.append(Workload(f"bench/train/{name}/{precision}/step", _train(fn, precision)))
    return rows


WORKLOADS: list[Workload] = [
    *_training_rows(),
    Workload("bench/op/mm/float32/n256", _mm(256)),
    Workload("bench/op/bmm/float32/b8n128", _bmm(8, 128)),
    Workload("bench/op/conv2d/float32/fwd_bwd/n8c16hw32k32", _conv2d),
    Workload("bench/op/softmax/float32/fwd/256x1024", _softmax),
    Workload("bench/op/layer_norm/float32/fwd/256x1024", _layer_norm),
    Workload("bench/op/sdpa/float32/fwd/b4h4s128d64", _sdpa),
    Workload("bench/op/embedding/float32/bwd/v10000d128", _embedding_bwd),
    Workload("bench/op/launch_overhead/float32/add_1elem", _launch),
    Workload("bench/dataloader/workers0/pin0", _loader(0, False)),
    Workload("bench/dataloader/workers2/pin0", _loader(2, False), policy=NOISY,
             clock="host"),
    Workload("bench/dataloader/workers2/pin1", _loader(2, True), policy=NOISY, clock="host"),
    Workload("bench/checkpoint/deepmlp/float32/time_ratio", _checkpoint_ratio, kind="ratio"),
]
BY_ID = {w.id: w for w in WORKLOADS}


def train_batch(device, scale: str, precision: str) -> int:
    """The batch of a training benchmark (part of its record id)."""
    if scale == "small" and AMP[precision][0] is not None and not device.is_accelerator:
        return AMP_CPU_SMALL_BATCH
    return TRAIN_BATCH[scale]


def record_id(workload: Workload, device, scale: str) -> str:
    """Training ids carry batch and scale (compare only at equal batch: NPU_NOTES.md)."""
    if workload.id.startswith("bench/train/"):
        precision = workload.id.split("/")[3]
        return f"{workload.id}/b{train_batch(device, scale, precision)}/{scale}"
    return workload.id


# ------------------------------------------------------------------- all_reduce

ALLREDUCE_BYTES = 4 << 20


def allreduce_rank(ctx, nbytes: int = ALLREDUCE_BYTES, rounds: int = 40,
                   warmup: int = 3) -> list[float]:
    """A rank's all_reduce timings in ms (run by :func:`harness.distributed.launch`).

    Each round: a barrier (aligns the ranks, not timed), then one all_reduce of ``nbytes``
    inside the DUT scope, synchronised. Bus bandwidth = bytes x 2(n-1)/n / time (NCCL's
    definition), computed by the caller.
    """
    import time

    import torch.distributed as dist

    from harness.bench.timing import freed_memory_kept

    x = torch.ones(nbytes // 4, device=ctx.torch_device)
    for _ in range(warmup):
        dist.all_reduce(x)
    ctx.device.synchronize()
    times = []
    with freed_memory_kept(ctx.device):  # Note [Freed memory stays in the process]
        for _ in range(rounds):
            dist.barrier()
            with ctx.device.scope():
                start = time.perf_counter()
                dist.all_reduce(x)
                ctx.device.synchronize()
                times.append((time.perf_counter() - start) * 1e3)
    return times


def bus_bandwidth_gbs(nbytes: int, world_size: int, ms: float) -> float:
    """NCCL-tests' bus bandwidth of an all_reduce: bytes x 2(n-1)/n per second, in GB/s."""
    return nbytes * 2 * (world_size - 1) / world_size / (ms / 1e3) / 1e9
