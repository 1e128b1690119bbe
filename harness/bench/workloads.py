"""The benchmark bodies, as data: one :class:`Workload` row per benchmark record.

What NPU training users compare (docs/design.md: at equal batch size and precision, so
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
import functools
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
# one core): small AMP steps use a batch of 2 there (and on a simulator, which runs the
# CPU's kernels: Device.host_timed) so the family stays fast
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


EMBEDDING = (1000, 64, (16, 64))  # rows, width, index shape: Note [An embedding in the cache]


# Note [An embedding in the cache]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Embedding backward scatters rows of the incoming gradient into a zeroed weight gradient.
# At 10000x128 with 64x64 indices a step moved about 9 MB (the 5 MB gradient zeroed and
# scattered into, 2 MB of activations, their 2 MB gradient): its time followed the host's
# memory traffic and the physical pages a process got, 1.4-2.3 ms between processes and
# 0.9-1.6 ms between rebuilds inside one (one thread, pinned, freed memory kept), a spread
# no host control removed. At 1000x64 with 16x64 indices (duplicates included, so rows
# accumulate) the step works in the core's caches: 0.23-0.26 ms over 10 processes, and
# the outliers are the ones whose host control was slow too. On an accelerator the same
# shape times the same kernel.


def _embedding_bwd(device, scale):
    rows, width, shape = EMBEDDING
    emb = torch.nn.Embedding(rows, width).to(device.torch_device)
    idx = torch.randint(0, rows, shape, device=device.torch_device)

    def step():
        emb.weight.grad = None
        emb(idx).sum().backward()

    return Prepared(step)


def _launch(device, scale):
    x = torch.zeros(1, device=device.torch_device)
    return Prepared(lambda: x.add_(1.0))


# ------------------------------------------------------------------------ DataLoader

# Note [A DataLoader that works]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A training input pipeline augments every sample in the workers: here a reflect pad by
# 4, a 32x32 crop at an offset fixed by the index, a horizontal flip of every other sample
# and a per-channel normalisation (CIFAR-style). Without it, an epoch with two workers was
# mostly inter-process wake-ups (8 batches through queues and shared memory), whose
# latency on a VM follows the host's scheduling: its process runs spread 12% (14% raw),
# more than any host control explained. With per-sample work the workers' compute is the
# bulk of the epoch, as in real training, and the epoch's time measures the loader
# feeding the device.

MEAN = torch.tensor([0.49, 0.48, 0.45]).view(3, 1, 1)
STD = torch.tensor([0.25, 0.24, 0.26]).view(3, 1, 1)


class _Images(torch.utils.data.Dataset):
    def __init__(self, n: int) -> None:
        self.data = torch.randn(n, 3, 32, 32)
        self.target = torch.randint(0, 10, (n,))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        padded = torch.nn.functional.pad(self.data[i], (4, 4, 4, 4), mode="reflect")
        dy, dx = i % 9, (i // 9) % 9
        image = padded[:, dy:dy + 32, dx:dx + 32]
        if i % 2:
            image = image.flip(-1)
        return (image - MEAN) / STD, self.target[i]


def _pin_worker(worker_id: int, device) -> None:
    from harness.bench.timing import pin_helper

    pin_helper(worker_id, device)


def _loader(workers: int, pin: bool):
    def build(device, scale):
        if pin and not device.is_accelerator:
            raise WorkloadUnsupported("pin_memory needs an accelerator (pinned host memory is "
                                      "for copies to a device; the DUT is the CPU)")
        loader = torch.utils.data.DataLoader(
            _Images(512), batch_size=64, num_workers=workers, pin_memory=pin,
            persistent_workers=workers > 0,  # each worker on its own CPU:
            worker_init_fn=functools.partial(_pin_worker, device=device))  # Note [One CPU per ...]
        where = device.torch_device

        def epoch():
            for x, y in loader:
                x.to(where, non_blocking=pin), y.to(where, non_blocking=pin)

        def close():
            iterator = getattr(loader, "_iterator", None)
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()

        return Prepared(epoch, units=512, unit="samples", close=close,
                        state={"loader": loader})
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


# ------------------------------------------------------------------- graph mode

# Note [Graph-mode benchmarks]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The graph family's transformer block (harness.graph.step), one training step with the
# device kind's backend (harness.graph.backends.backend_for: inductor on the CPU):
# ``step`` is the steady-state compiled step (compiled and warmed up in build), its
# ``time_ratio`` row the compiled step over the eager one, and ``compile`` a cold Dynamo
# cache each round (reset, compile, one step) with whatever on-disk caches the backend
# keeps (inductor's FX graph cache: warm after the first round), i.e. the compile time a
# user's second process pays, in wall time (inductor's compile workers are other
# processes). Measured under load (Dec 3 2026, 2 shared cores, CPU): step 3.4 ms (CPU
# time), compiled/eager 0.89, compile 4.8 s wall per round (355 ms of this process's CPU).

def _graph_parts(device):
    from harness.graph import backends, step

    if backends.unsupported():
        raise WorkloadUnsupported(backends.unsupported())
    model, x, target = step.build("transformer_block", 0)
    where = device.torch_device
    model, x, target = model.to(where), x.to(where), target.to(where)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9)  # Note [A timed step ...]

    def step_of(forward):
        def run():
            optimizer.zero_grad(set_to_none=True)
            step.loss_of(forward(x), target).backward()
            optimizer.step()
        return run

    return backends, model, step_of, x.shape[0]


def _graph_step(device, scale):
    backends, model, step_of, batch = _graph_parts(device)
    backends.reset()
    compiled = step_of(torch.compile(model, backend=backends.backend_for(device)))
    compiled()  # compiles here, not in a timed round
    return Prepared(compiled, units=batch, unit="samples", close=backends.reset)


def _graph_ratio(device, scale):
    prepared = _graph_step(device, scale)
    _, model, step_of, _ = _graph_parts(device)
    return dataclasses.replace(prepared, reference=step_of(model))


def _graph_compile(device, scale):
    backends, model, step_of, _ = _graph_parts(device)
    name = backends.backend_for(device)

    def compile_and_step():
        backends.reset()
        step_of(torch.compile(model, backend=name))()

    return Prepared(compile_and_step, close=backends.reset)


# ------------------------------------------------------------------------ the table

# ResNet-18 under CPU autocast takes ~90 ms a step: 2 s gives the quiet rounds (Note
# [Quiet rounds]) ~20 rounds to choose from instead of 7-10
TRAIN_BUDGET_S = {("resnet18", "float16-amp"): 2.0, ("resnet18", "bfloat16-amp"): 2.0}


def _training_rows() -> list[Workload]:
    rows = []
    for name, fn in (("simplecnn", _simplecnn), ("resnet18", _resnet)):
        for precision in AMP:
            rows.append(Workload(f"bench/train/{name}/{precision}/step", _train(fn, precision),
                                 budget_s=TRAIN_BUDGET_S.get((name, precision), 0.8)))
    return rows


WORKLOADS: list[Workload] = [
    *_training_rows(),
    Workload("bench/op/mm/float32/n256", _mm(256)),
    Workload("bench/op/bmm/float32/b8n128", _bmm(8, 128)),
    Workload("bench/op/conv2d/float32/fwd_bwd/n8c16hw32k32", _conv2d),
    Workload("bench/op/softmax/float32/fwd/256x1024", _softmax),
    Workload("bench/op/layer_norm/float32/fwd/256x1024", _layer_norm),
    Workload("bench/op/sdpa/float32/fwd/b4h4s128d64", _sdpa),
    Workload("bench/op/embedding/float32/bwd/v1000d64", _embedding_bwd),
    Workload("bench/op/launch_overhead/float32/add_1elem", _launch),
    Workload("bench/dataloader/workers0/pin0", _loader(0, False), budget_s=1.0),
    Workload("bench/dataloader/workers2/pin0", _loader(2, False), budget_s=1.0,
             clock="host"),
    Workload("bench/dataloader/workers2/pin1", _loader(2, True), budget_s=1.0,
             clock="host"),
    Workload("bench/checkpoint/deepmlp/float32/time_ratio", _checkpoint_ratio, kind="ratio"),
    # Note [Graph-mode benchmarks]
    Workload("bench/graph/transformer_block/float32/step", _graph_step),
    Workload("bench/graph/transformer_block/float32/compiled_over_eager/time_ratio",
             _graph_ratio, kind="ratio"),
    Workload("bench/graph/transformer_block/float32/compile", _graph_compile, budget_s=5.0,
             clock="host"),  # inductor compiles in worker processes: the wall time counts
]
BY_ID = {w.id: w for w in WORKLOADS}


def train_batch(device, scale: str, precision: str) -> int:
    """The batch of a training benchmark (part of its record id)."""
    if scale == "small" and AMP[precision][0] is not None and device.host_timed:
        return AMP_CPU_SMALL_BATCH
    return TRAIN_BATCH[scale]


def record_id(workload: Workload, device, scale: str) -> str:
    """Training ids carry batch and scale (compare only at equal batch: docs/design.md)."""
    if workload.id.startswith("bench/train/"):
        precision = workload.id.split("/")[3]
        return f"{workload.id}/b{train_batch(device, scale, precision)}/{scale}"
    return workload.id


# ------------------------------------------------------------------- all_reduce

# Note [all_reduce at 16 MiB]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# At 4 MiB, gloo's all_reduce of two ranks on this 2-core VM took 2.9 to 7.4 ms round to
# round (10th to 90th percentile of one run's 100 rounds) and its process runs spread
# 8-12%, pinned or not: wake-ups of two processes were much of a round. At 16 MiB the
# rounds of a run lie within 12-18 ms, the copies and the reduction are the bulk of a round,
# and with the ranks pinned (Note [One CPU per timed benchmark]) and 150 rounds the process
# runs spread 4.6% (bench-eval --runs 10, 19:47-19:52 UTC: 0/10 false alarms, 8/10
# detections; at 4 MiB, pinned, 8.4% and 6/10; unpinned 12.3%, 0/10). NCCL-tests quote bus
# bandwidth at such sizes too. Over N=20 it spread 5.4% in the noisiest hour (20:02-20:34)
# and 3.2% in a quieter one (21:26-21:56: 0/20 false alarms, 17/20 detections with two
# runs, the target with three): the two ranks share two cores with the host's tenants. Its spread limit is
# the default: past 5% a 15% slow-down is not told from the noise, and such a benchmark is
# better `unreliable` than trusted and blind. Its minimum effect (the drift margin, Note
# [Bench verdict]) is 10%, so its MDE says it cannot see 15% (Note [Minimum detectable
# effect]): with --bench-runs 6 (20:38-20:41), six A/A runs recorded three
# minutes after six baseline runs sat at 1.074x (two beyond the 7.9% bound of a 3% spread,
# p=0.005), a shift of the two ranks' placement that the host control did not see; the
# same invocation with the 15% fault measured 1.263x.

ALLREDUCE_BYTES = 16 << 20
ALLREDUCE_WORLD = 2
ALLREDUCE_ID = f"bench/dist/all_reduce/float32/{ALLREDUCE_BYTES >> 20}MiB/ws{ALLREDUCE_WORLD}"
ALLREDUCE_POLICY = Policy(min_effect=0.10)  # Note [all_reduce at 16 MiB]


def policy_for(record_id: str) -> Policy:
    """The verdict policy of a benchmark record (its workload's, or all_reduce's)."""
    if record_id == ALLREDUCE_ID:
        return ALLREDUCE_POLICY
    found = [w for w in WORKLOADS if record_id == w.id or record_id.startswith(w.id + "/")]
    return found[0].policy if found else Policy()


def allreduce_rank(ctx, nbytes: int = ALLREDUCE_BYTES, rounds: int = 150,
                   warmup: int = 3) -> dict[str, list[float]]:
    """A rank's all_reduce timings in ms and its host control per round (run by
    :func:`harness.distributed.launch`).

    Each round: a barrier, the host control (Note [Host control]; on accelerators too, as
    the collective is host-driven here), a barrier (aligns the ranks; none of this is
    timed), then one all_reduce of ``nbytes`` inside the DUT scope, synchronised, wall
    time taken outside the scope (so a fault's exit counts, Note [A timed round]). Bus
    bandwidth = bytes x 2(n-1)/n / time (NCCL's definition), computed by the caller.
    """
    import time

    import torch.distributed as dist

    from harness.bench.timing import HostControl, freed_memory_kept, judged_in, pin_helper

    pin_helper(ctx.local_rank, ctx.device)  # Note [One CPU per timed benchmark]
    x = torch.ones(nbytes // 4, device=ctx.torch_device)
    for _ in range(warmup):
        dist.all_reduce(x)
    ctx.device.synchronize()
    control = HostControl(ctx.device, "host")
    times = []
    with freed_memory_kept(ctx.device), judged_in(time.perf_counter):  # wall: 2 processes
        for _ in range(rounds):
            dist.barrier()
            control.sample()
            dist.barrier()
            start = time.perf_counter()
            with ctx.device.scope():
                dist.all_reduce(x)
                ctx.device.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
    return {"ms": times, "control_ms": control.samples}


def bus_bandwidth_gbs(nbytes: int, world_size: int, ms: float) -> float:
    """NCCL-tests' bus bandwidth of an all_reduce: bytes x 2(n-1)/n per second, in GB/s."""
    return nbytes * 2 * (world_size - 1) / world_size / (ms / 1e3) / 1e9
