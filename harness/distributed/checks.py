"""The rank side of the distributed family: the sub-checks every rank runs.

Each function is ``fn(ctx, **kwargs)`` (:class:`harness.distributed.RankContext`), runs
the DUT's work (DDP, collectives, the sampler) inside ``ctx.device.scope()`` so faults
apply, computes its reference on the CPU outside it (NumPy, or a single process on the
full batch in float64), and returns plain JSON metrics. The pytest side
(``suites/distributed/test_dist_*.py``) turns them into records with
:mod:`harness.distributed.judge`; nothing here decides pass or fail except where only
the rank can tell (an op the backend refuses is returned as ``unsupported``).

They are the built-in rank programs (``BUILT_IN``), so they also run under torchrun by
name, from an installed package: ``torchrun ... -m harness.distributed ddp_train
collective --out DIR`` (``harness.distributed.checks:ddp_train`` works too;
``docs/distributed.md``).
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import hashlib
import os
import time
from typing import Optional

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from harness import dtypes
from harness.classify import classify_exception  # not via harness.ops: see below

# Unit roundoff per dtype (2^-p): collective sums are bounded by
# ws * eps * sum(|x|), the textbook bound for recursive summation; integers are exact.
EPS = {**dtypes.EPS, "int64": 0.0}

# What a backend says when it lacks an op or dtype is a capability (recorded
# `unsupported`), not a wrong answer: decided by the one op policy's classifier
# (harness.classify.classify_exception, which harness.ops.policy re-exports), as for the
# op catalog and the OpInfo sweep. Imported from harness.classify directly: importing
# harness.ops builds the op catalog, 0.4 s of every rank's start-up for nothing.

WORLD_SIZES = (2, 4)  # on accelerators, those within the device count
COLLECTIVE_SIZES = (1, 1000, 1 << 20)  # one element .. past a 1 MiB-ish bucket


# ------------------------------------------------------------------------ helpers

def _param_hash(module: nn.Module) -> str:
    digest = hashlib.sha1()
    for param in module.parameters():
        digest.update(param.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy()
                      .tobytes())
    return digest.hexdigest()


def _max_err(pairs) -> float:
    """max over tensors of max|dut - ref|, divided by the largest |ref| of them all.

    One scale for the whole model: a tensor whose reference is ~0 (a bias feeding a
    BatchNorm gets no gradient) must not turn rounding noise into a huge relative error.
    """
    diff, scale = 0.0, 0.0
    for dut, ref in pairs:
        if ref is None and dut is None:
            continue
        if ref is None or dut is None:
            return float("inf")
        ref = ref.detach().double()
        diff = max(diff, (dut.detach().cpu().double() - ref).abs().max().item())
        scale = max(scale, ref.abs().max().item())
    if diff != diff:  # NaN
        return float("inf")
    return float(diff / max(scale, 1e-12))


def _batch(seed: int, step: int, rows: int, features: int = 16, outputs: int = 4):
    """The step's full batch, the same on every rank (each takes its shard)."""
    gen = torch.Generator().manual_seed(seed * 1000 + step)
    return (torch.randn(rows, features, generator=gen, dtype=torch.float64),
            torch.randn(rows, outputs, generator=gen, dtype=torch.float64))


class MLP(nn.Module):
    """A small MLP; ``unused`` adds a parameter the forward never touches."""

    def __init__(self, unused: bool = False, batchnorm: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 64)
        self.norm = nn.BatchNorm1d(64) if batchnorm else nn.Identity()
        self.fc2 = nn.Linear(64, 64)  # 16 KiB of fp32: larger than a 4 KiB bucket
        self.fc3 = nn.Linear(64, 4)
        self.unused = nn.Linear(16, 4) if unused else None

    def forward(self, x):
        x = torch.tanh(self.norm(self.fc1(x)))
        return self.fc3(torch.tanh(self.fc2(x)))


def _ddp(ctx, model: nn.Module, **options):
    from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817 - torch's name

    device_ids = [ctx.device.index] if ctx.device.is_accelerator else None
    return DDP(model, device_ids=device_ids, **options)


def _grads(module: nn.Module):
    return [None if p.grad is None else p.grad.detach().clone() for p in module.parameters()]


# Variants of the DDP check: the DDP options and what the training loop does.
DDP_VARIANTS = {
    "plain": {},
    "unused_params": {"find_unused_parameters": True},
    "bucket_view": {"gradient_as_bucket_view": True},
    "small_buckets": {"bucket_cap_mb": 0.004},  # 4 KB < fc2.weight's 16 KiB
    "no_sync": {},
    "join": {},
    "rank_init": {},  # each rank seeds its model differently (Note [Rank-different init])
    "static_graph": {"static_graph": True, "bucket_cap_mb": 0.004},  # several buckets
}

# Note [Rank-different init]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# Real jobs seed each rank's model however they like; DDP makes them one model by
# broadcasting rank 0's parameters and buffers when it is constructed. Seeding every rank
# the same would let a backend whose construction-time broadcast does nothing pass, so
# the ``rank_init`` variant seeds rank r with ``seed + r`` before building the model: its
# reference is rank 0's model (rebuilt from ``seed`` on every rank), the parameters must
# equal it bit for bit right after construction (a broadcast copies bytes), and training
# must then match as for ``plain``. The ranks' pre-construction hashes are returned so
# the verdict can tell the seeds really differed.


# ------------------------------------------------------------------ DDP training

def ddp_train(ctx, variant: str = "plain", dtype: str = "float32", steps: int = 5,
              local_batch: int = 8, lr: float = 0.1):
    """DDP over ``steps`` SGD steps vs one process on the full batch (float64, CPU).

    Returns, for every step this rank ran: the max normalised gradient error (before the
    step) and parameter error (after it) against the reference, and a hash of this
    rank's parameters (ranks must agree bit for bit); then the same after training.
    ``no_sync`` accumulates 2 micro-batches per step; ``join`` gives rank r
    ``steps - 2 + r`` steps (uneven inputs) under ``Join``; ``rank_init`` seeds each rank
    differently and adds ``init_hash`` (before DDP) and ``constructed_err`` (after it,
    against rank 0's model; Note [Rank-different init]).
    """
    from torch.distributed.algorithms.join import Join

    ws, rank = ctx.world_size, ctx.rank
    torch_dtype = dtypes.BY_NAME[dtype]
    rank_init = variant == "rank_init"
    torch.manual_seed(ctx.seed + (rank if rank_init else 0))
    model = MLP(unused=variant == "unused_params")
    if rank_init:  # the reference is rank 0's model (Note [Rank-different init])
        init_hash = _param_hash(model)
        torch.manual_seed(ctx.seed)
        reference = MLP().double()
    else:
        reference = copy.deepcopy(model).double()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    micro = 2 if variant == "no_sync" else 1
    all_steps = [steps - 2 + r if variant == "join" else steps for r in range(ws)]
    with ctx.device.scope():
        net = _ddp(ctx, model.to(ctx.torch_device, torch_dtype), **DDP_VARIANTS[variant])
        opt = torch.optim.SGD(net.parameters(), lr=lr)
    extra = {}
    if rank_init:
        extra = {"init_hash": init_hash,
                 "constructed_err": _max_err(zip(net.module.parameters(),
                                                 reference.parameters()))}
    grad_err, param_err, hashes = [], [], []
    unused_grad = 0.0
    rows = local_batch * micro
    with Join([net]) if variant == "join" else contextlib.nullcontext():
        for step in range(all_steps[rank]):
            x, y = _batch(ctx.seed, step, rows * ws)
            with ctx.device.scope():
                opt.zero_grad(set_to_none=True)
                for k in range(micro):
                    lo = rank * rows + k * local_batch
                    xs = x[lo:lo + local_batch].to(ctx.torch_device, torch_dtype)
                    ys = y[lo:lo + local_batch].to(ctx.torch_device, torch_dtype)
                    with net.no_sync() if k < micro - 1 else contextlib.nullcontext():
                        (nn.functional.mse_loss(net(xs), ys) / micro).backward()
                grads = _grads(net.module)
                opt.step()
            # reference: the full batch; under Join only the ranks still training,
            # averaged over the initial world size (divide_by_initial_world_size)
            ref_opt.zero_grad()
            active = [r for r in range(ws) if all_steps[r] > step]
            ref_loss = sum(nn.functional.mse_loss(reference(x[r * rows:(r + 1) * rows]),
                                                  y[r * rows:(r + 1) * rows])
                           for r in active) / ws
            ref_loss.backward()
            grad_err.append(_max_err(zip(grads, _grads(reference))))
            ref_opt.step()
            param_err.append(_max_err(zip(net.module.parameters(), reference.parameters())))
            hashes.append(_param_hash(net.module))
            if model.unused is not None:
                g = model.unused.weight.grad
                unused_grad = max(unused_grad, 0.0 if g is None else float(g.abs().max()))
    # ranks that joined early catch up with the reference's remaining steps: after Join
    # they hold the last joiner's parameters
    for step in range(all_steps[rank], max(all_steps)):
        x, y = _batch(ctx.seed, step, rows * ws)
        ref_opt.zero_grad()
        active = [r for r in range(ws) if all_steps[r] > step]
        (sum(nn.functional.mse_loss(reference(x[r * rows:(r + 1) * rows]),
                                    y[r * rows:(r + 1) * rows]) for r in active) / ws).backward()
        ref_opt.step()
    return {"grad_err": grad_err, "param_err": param_err, "param_hash": hashes,
            "final_param_err": _max_err(zip(net.module.parameters(), reference.parameters())),
            "final_hash": _param_hash(net.module), "steps_run": all_steps[rank],
            "unused_grad_max": unused_grad, **extra}


def ddp_amp(ctx, steps: int = 5, local_batch: int = 8, lr: float = 0.05,
            inf_step: Optional[int] = None, inf_rank: int = 0):
    """DDP under autocast with a GradScaler vs fp64 full-batch training.

    Autocast runs in bfloat16 on the CPU (its autocast dtype) and float16 elsewhere.
    Gradients are compared after ``scaler.unscale_``. With ``inf_step``, rank ``inf_rank``
    alone scales its loss by +inf at that step (Note [found_inf across ranks]): every rank
    must skip that step, back off the scale alike and keep identical parameters; the
    reference skips it too, and that step's gradient error is not measured (``None``).
    """
    ws, rank = ctx.world_size, ctx.rank
    amp_dtype = dtypes.name(ctx.device.amp_dtype)  # the device kind's preferred one
    torch.manual_seed(ctx.seed)
    model = MLP()
    reference = copy.deepcopy(model).double()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    with ctx.device.scope():
        net = _ddp(ctx, model.to(ctx.torch_device))
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        scaler = ctx.device.grad_scaler(init_scale=2.0**10)
    grad_err, param_err, hashes, scales, skipped, skipped_at = [], [], [], [], 0, []
    for step in range(steps):
        x, y = _batch(ctx.seed, step, local_batch * ws)
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        ref_grads = _grads(reference)
        shard = slice(rank * local_batch, (rank + 1) * local_batch)
        with ctx.device.scope():
            opt.zero_grad(set_to_none=True)
            with ctx.device.autocast(dtypes.AMP[amp_dtype]):
                out = net(x[shard].to(ctx.torch_device, torch.float32))
            loss = nn.functional.mse_loss(out.float(), y[shard].to(ctx.torch_device,
                                                                   torch.float32))
            poisoned = step == inf_step
            if poisoned and rank == inf_rank:
                loss = loss * float("inf")
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            grads = _grads(net.module)
            scale_before = float(scaler.get_scale())
            scaler.step(opt)
            scaler.update()
            stepped = float(scaler.get_scale()) >= scale_before
        if stepped:
            ref_opt.step()
        else:
            skipped += 1
            skipped_at.append(step)
        grad_err.append(None if poisoned else _max_err(zip(grads, ref_grads)))
        param_err.append(_max_err(zip(net.module.parameters(), reference.parameters())))
        hashes.append(_param_hash(net.module))
        scales.append(float(scaler.get_scale()))
    return {"amp_dtype": amp_dtype, "grad_err": grad_err, "param_err": param_err,
            "param_hash": hashes, "scale": scales, "skipped_steps": skipped,
            "skipped_at": skipped_at}


# Note [found_inf across ranks]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Under DDP a GradScaler's skip decision is per rank: each rank's ``unscale_`` looks for
# inf/NaN in its own (already all-reduced) gradients. It agrees across ranks only because
# the all-reduce carries a non-finite value from the one rank that overflowed to every
# rank (inf + x = inf, inf / ws = inf). A collective that saturates instead (Ascend's
# saturation mode turns an overflow into the dtype's largest finite value, where
# INF_NAN mode keeps inf and NaN) leaves every rank finite: no rank skips, and the step is
# taken with a gradient near the dtype's maximum. So one rank alone overflows at one step,
# and the check wants the step skipped and the scale halved on every rank, in step.
# The two modes are torch_npu's (Ascend/op-plugin, docs/zh/custom_APIs/torch_npu-npu:
# ``torch_npu.npu.utils.is_support_inf_nan()`` is True in INF_NAN mode and False in
# saturation mode; ``npu_check_overflow(grad)`` looks for inf/NaN in ``grad`` in INF_NAN
# mode and, in saturation mode, ignores it and reads the hardware's overflow flag), so in
# saturation mode no gradient holds the inf a GradScaler's ``unscale_`` looks for.


def ddp_buffers(ctx, steps: int = 4, local_batch: int = 8, lr: float = 0.1):
    """BatchNorm buffers under ``broadcast_buffers=True``.

    DDP broadcasts rank 0's buffers at the start of every forward. Returns, per step, the
    buffers this rank's module holds when its forward starts (after the broadcast) and
    when the step ends (updated from its own shard), and the gradient error against one
    process that averages the per-shard gradients (BatchNorm normalises per shard).
    """
    ws, rank = ctx.world_size, ctx.rank
    torch.manual_seed(ctx.seed)
    model = MLP(batchnorm=True)
    reference = copy.deepcopy(model).double()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    start, end = [], []

    def snapshot():
        return [b.detach().cpu().double().flatten().tolist() for b in model.norm.buffers()
                if b.is_floating_point()]

    model.register_forward_pre_hook(lambda _m, _a: start.append(snapshot()))
    with ctx.device.scope():
        net = _ddp(ctx, model.to(ctx.torch_device), broadcast_buffers=True)
        opt = torch.optim.SGD(net.parameters(), lr=lr)
    grad_err = []
    for step in range(steps):
        # each rank's shard has its own mean and scale, so its running stats drift apart
        x, y = _batch(ctx.seed, step, local_batch * ws)
        x = x * (1 + torch.arange(ws, dtype=x.dtype).repeat_interleave(local_batch)[:, None])
        ref_opt.zero_grad()
        ref_loss = sum(nn.functional.mse_loss(reference(x[r * local_batch:(r + 1) * local_batch]),
                                              y[r * local_batch:(r + 1) * local_batch])
                       for r in range(ws)) / ws
        ref_loss.backward()
        ref_grads = _grads(reference)
        ref_opt.step()
        shard = slice(rank * local_batch, (rank + 1) * local_batch)
        with ctx.device.scope():
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(net(x[shard].to(ctx.torch_device, torch.float32)),
                                   y[shard].to(ctx.torch_device, torch.float32)).backward()
            grads = _grads(net.module)
            opt.step()
        end.append(snapshot())
        grad_err.append(_max_err(zip(grads, ref_grads)))
    return {"start_buffers": start, "end_buffers": end, "grad_err": grad_err,
            "param_hash": [_param_hash(net.module)]}


def sync_batchnorm(ctx, local_batch: int = 8):
    """SyncBatchNorm statistics and gradients vs BatchNorm over the full batch.

    Returns ``{"unsupported": reason}`` when the backend refuses SyncBatchNorm (torch's
    SyncBatchNorm raises for CPU tensors); the refusal is measured, not assumed.
    """
    ws, rank = ctx.world_size, ctx.rank
    torch.manual_seed(ctx.seed)
    model = MLP(batchnorm=True)
    reference = copy.deepcopy(model).double()
    x, y = _batch(ctx.seed, 0, local_batch * ws)
    x = x * (1 + torch.arange(ws, dtype=x.dtype).repeat_interleave(local_batch)[:, None])
    nn.functional.mse_loss(reference(x), y).backward()
    shard = slice(rank * local_batch, (rank + 1) * local_batch)
    with ctx.device.scope():
        try:
            synced = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(ctx.torch_device)
            net = _ddp(ctx, synced)
            out = net(x[shard].to(ctx.torch_device, torch.float32))
        except (ValueError, RuntimeError) as exc:
            if classify_exception(exc)[0] == "unsupported":
                return {"unsupported": f"{type(exc).__name__}: {exc}"}
            raise
        nn.functional.mse_loss(out, y[shard].to(ctx.torch_device, torch.float32)).backward()
    stats = [(net.module.norm.running_mean, reference.norm.running_mean),
             (net.module.norm.running_var, reference.norm.running_var)]
    return {"stats_err": _max_err(stats),
            "grad_err": _max_err(zip(_grads(net.module), _grads(reference)))}


# -------------------------------------------------------------------- collectives

def _inputs(seed: int, rank: int, size: int, dtype: str) -> torch.Tensor:
    """Rank ``rank``'s input, reproducible anywhere (the reference rebuilds every rank's)."""
    gen = torch.Generator().manual_seed(seed * 7919 + rank * 104729 + size)
    if dtype == "int64":
        return torch.randint(-1000, 1000, (size,), generator=gen, dtype=torch.int64)
    return torch.randn(size, generator=gen, dtype=torch.float32).to(dtypes.BY_NAME[dtype])


# Note [Inputs kept across collectives]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every rank rebuilds every rank's input for its reference (one host or many, nothing is
# sent), so at world size 4 each collective sub-check drew 4 x 1M random numbers per rank
# and converted them to float64, and the next sub-check of the same dtype drew the same
# numbers again: about a quarter of the ws4 launch's CPU time (its collectives, 14.6 ->
# 11.6 CPU-seconds on a 2-core AMD EPYC Zen 3), time the ranks take from the checks run
# beside them (Note [Launches ahead of their tests] in harness/distributed/cases.py).
# So a rank keeps the inputs and their arrays of the dtype it is in (the family's cases
# run dtype by dtype: suites/distributed/test_dist_collectives.py), at most one dtype's
# (4 ranks x 1M elements: 48 MB in float32), and hands the collective a copy: the
# reference reads what was drawn, whatever the DUT does to its tensor.

_KEPT: dict[tuple, tuple[torch.Tensor, np.ndarray]] = {}


def _kept_input(seed: int, rank: int, size: int, dtype: str) -> tuple[torch.Tensor, np.ndarray]:
    """Rank ``rank``'s input (:func:`_inputs`) and its float64/int64 array, kept while
    the sub-checks stay in one dtype (Note [Inputs kept across collectives])."""
    key = (seed, rank, size, dtype)
    found = _KEPT.get(key)
    if found is None:
        if any(kept[3] != dtype for kept in _KEPT):
            _KEPT.clear()
        tensor = _inputs(seed, rank, size, dtype)
        found = _KEPT[key] = (tensor, _np(tensor))
    return found


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().to(torch.float64 if t.is_floating_point() else torch.int64).numpy()


COLLECTIVE_OPS = ("all_reduce_sum", "all_reduce_avg", "all_reduce_max", "all_gather",
                  "reduce_scatter", "broadcast")

# Note [Sharding collectives]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The collectives of sharded training (FSDP, mixture-of-experts, sequence parallel): one
# flat tensor in, one out, with offsets the backend computes. all_to_all_single sends
# chunk d of rank r's input to rank d, evenly or by ``input_split_sizes`` /
# ``output_split_sizes`` (``_splits``: uneven, one split zero); ``all_to_all`` is the
# list form; all_gather_into_tensor and reduce_scatter_tensor (sum, avg) are the flat
# forms of all_gather and reduce_scatter. What can go wrong is where the bytes land (a
# chunk swapped, a split cut short, an average not divided), which shows at any size
# past one element per rank, so they run at SHARDING_SIZES: the 1M-element size of
# COLLECTIVE_SIZES is the family's cost driver, and the transport it exercises is
# all_gather's and reduce_scatter's, already checked there.
SHARDING_OPS = ("all_to_all_single", "all_to_all_single_uneven", "all_to_all",
                "all_gather_into_tensor", "reduce_scatter_tensor_sum",
                "reduce_scatter_tensor_avg")
SHARDING_SIZES = (1, 1000)

# Torch 2.13 deprecates all_gather_into_tensor / reduce_scatter_tensor (a FutureWarning
# per call) for all_gather_single / reduce_scatter_single; the first name the running
# torch has is used, and recorded (``api``).
FLAT_APIS = {"all_gather_into_tensor": ("all_gather_single", "all_gather_into_tensor"),
             "reduce_scatter_tensor": ("reduce_scatter_single", "reduce_scatter_tensor")}


def _flat_api(name: str) -> str:
    """The name torch.distributed gives the flat collective ``name`` on this torch."""
    return next(api for api in FLAT_APIS[name] if hasattr(dist, api))


def _splits(ws: int, size: int) -> list[list[int]]:
    """``splits[r][d]``: how many elements rank r sends rank d in the uneven
    all_to_all_single; uneven across ranks and peers, and some zero."""
    unit = max(1, size // ws)
    return [[unit * ((r + 2 * d + 1) % (ws + 1)) for d in range(ws)] for r in range(ws)]


def _input_size(op: str, rank: int, ws: int, size: int) -> int:
    """Rank ``rank``'s input length for ``op`` at ``size`` (rounded up to ws chunks where
    the op splits its input evenly)."""
    if op == "all_to_all_single_uneven":
        return sum(_splits(ws, size)[rank])
    if op in ("reduce_scatter", "all_to_all_single", "all_to_all") or \
            op.startswith("reduce_scatter_tensor"):
        return -(-size // ws) * ws
    return size


def _run_collective(ctx, op: str, x: torch.Tensor, size: int):
    """The DUT collective on this rank's input; returns the tensor(s) to compare."""
    ws = ctx.world_size
    dev = ctx.torch_device
    if op.startswith("all_reduce"):
        red = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG,
               "max": dist.ReduceOp.MAX}[op.rsplit("_", 1)[1]]
        t = x.to(dev, copy=True)  # in place: never on the reference's input
        dist.all_reduce(t, op=red)
        return t
    if op == "all_gather":
        outs = [torch.empty_like(x, device=dev) for _ in range(ws)]
        dist.all_gather(outs, x.to(dev))
        return torch.cat(outs)
    if op == "reduce_scatter":
        out = torch.empty(x.numel() // ws, dtype=x.dtype, device=dev)
        dist.reduce_scatter(out, list(x.to(dev).chunk(ws)))
        return out
    if op == "broadcast":
        t = x.to(dev, copy=True)
        dist.broadcast(t, src=ws - 1)  # the last rank: a backend that ignores src shows
        return t
    if op == "all_to_all_single":
        out = torch.empty_like(x, device=dev)
        dist.all_to_all_single(out, x.to(dev))
        return out
    if op == "all_to_all_single_uneven":
        splits = _splits(ws, size)
        sends = splits[ctx.rank]
        receives = [splits[r][ctx.rank] for r in range(ws)]
        out = torch.empty(sum(receives), dtype=x.dtype, device=dev)
        dist.all_to_all_single(out, x.to(dev), output_split_sizes=receives,
                               input_split_sizes=sends)
        return out
    if op == "all_to_all":
        ins = list(x.to(dev).chunk(ws))
        outs = [torch.empty_like(t) for t in ins]
        dist.all_to_all(outs, ins)
        return torch.cat(outs)
    if op == "all_gather_into_tensor":
        out = torch.empty(x.numel() * ws, dtype=x.dtype, device=dev)
        getattr(dist, _flat_api(op))(out, x.to(dev))
        return out
    if op.startswith("reduce_scatter_tensor"):
        red = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG}[op.rsplit("_", 1)[1]]
        out = torch.empty(x.numel() // ws, dtype=x.dtype, device=dev)
        getattr(dist, _flat_api("reduce_scatter_tensor"))(out, x.to(dev), op=red)
        return out
    raise ValueError(f"unknown collective {op!r}")


def _summed(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(sum, sum of |x|)`` over the ranks' arrays, added in rank order (the order, and so
    the float64 rounding, of ``np.stack(parts).sum(0)``) without the stacked copy."""
    total, absum = parts[0].copy(), np.abs(parts[0])
    for part in parts[1:]:
        total += part
        absum += np.abs(part)
    return total, absum


def _sum_or_average(op: str, parts: list[np.ndarray], ws: int):
    """(expected, bound) of a sum over the ranks' ``parts``, divided by ``ws`` for an
    ``_avg`` op (integer division for integers, which have no bound)."""
    total, absum = _summed(parts)
    if not op.endswith("_avg"):
        return total, absum
    if total.dtype == np.int64:
        return total // ws, None
    return total / ws, absum / ws


def _reference(op: str, inputs: list[np.ndarray], rank: int, ws: int, size: int):
    """(expected, error bound per element) from every rank's input, in float64/int64; each
    op reads only the parts of the inputs its answer holds (a 1M-element collective at
    world size 4 is otherwise most of the family's time)."""
    if op in ("all_reduce_sum", "all_reduce_avg"):
        return _sum_or_average(op, inputs, ws)
    if op == "all_reduce_max":
        return np.maximum.reduce(inputs), None
    if op in ("all_gather", "all_gather_into_tensor"):
        return np.concatenate(inputs), None
    if op == "broadcast":
        return inputs[ws - 1], None
    if op in ("all_to_all_single", "all_to_all"):  # chunk `rank` of every rank's input
        chunk = inputs[0].shape[0] // ws
        return np.concatenate([x[rank * chunk:(rank + 1) * chunk] for x in inputs]), None
    if op == "all_to_all_single_uneven":
        splits = _splits(ws, size)
        parts = []
        for r, x in enumerate(inputs):
            start = sum(splits[r][:rank])
            parts.append(x[start:start + splits[r][rank]])
        return np.concatenate(parts), None
    if op == "reduce_scatter" or op.startswith("reduce_scatter_tensor"):
        chunk = inputs[0].shape[0] // ws
        return _sum_or_average(op, [x[rank * chunk:(rank + 1) * chunk] for x in inputs], ws)
    raise ValueError(op)


def collective(ctx, op: str = "all_reduce_sum", dtype: str = "float32",
               sizes=COLLECTIVE_SIZES):
    """One collective in one dtype at several sizes, against NumPy.

    Per size: ``max_abs_err``, ``bound`` (the largest error the summation bound allows;
    0 where the answer is exact: max, gather, broadcast, all-to-all, integers) and
    ``excess`` (the worst error / allowed ratio, > 1 fails), or ``unsupported`` with the
    backend's words; the flat collectives add ``api``, the torch function that ran
    (Note [Sharding collectives]).
    """
    ws, rank = ctx.world_size, ctx.rank
    results = {}
    for size in sizes:
        # ``size`` is the input (rounded up to ws chunks where the op splits it evenly)
        inputs = [_kept_input(ctx.seed, r, _input_size(op, r, ws, size), dtype)
                  for r in range(ws)]
        try:
            with ctx.device.scope():  # a copy: the DUT never holds what the reference reads
                dut = _run_collective(ctx, op, inputs[rank][0].clone(), size)
                ctx.device.synchronize()
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
            if classify_exception(exc)[0] == "unsupported":
                results[str(size)] = {"unsupported": f"{type(exc).__name__}: "
                                                     f"{str(exc).splitlines()[0][:300]}"}
                continue
            raise
        expected, absum = _reference(op, [array for _, array in inputs], rank, ws, size)
        got = _np(dut)
        if got.shape != expected.shape:
            results[str(size)] = {"max_abs_err": float("inf"), "bound": 0.0,
                                  "excess": float("inf"),
                                  "shape": [list(got.shape), list(expected.shape)]}
            continue
        err = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        eps = EPS[dtype]
        # recursive summation: |err| <= (ws - 1) * eps * sum|x| ; plus rounding the result
        allowed = (np.zeros_like(err) if absum is None or eps == 0.0
                   else ws * eps * absum + eps * np.abs(expected))
        over = err - allowed
        worst = int(np.argmax(over))
        results[str(size)] = {
            "max_abs_err": float(err.max()), "bound": float(allowed.max()),
            "excess": float(over.max()), "mismatched": int((over > 0).sum()),
            "worst_index": worst, "worst_got": float(got.flat[worst]),
            "worst_expected": float(expected.flat[worst])}
    if op.startswith(tuple(FLAT_APIS)):
        api = _flat_api(next(name for name in FLAT_APIS if op.startswith(name)))
        for result in results.values():
            result["api"] = api  # which of torch's names ran (FLAT_APIS)
    return results


def barrier(ctx, stagger: float = 0.15):
    """Rank r enters the barrier ``r * stagger`` seconds late; nobody may leave before
    the last one entered (one host: the ranks share a clock)."""
    time.sleep(ctx.rank * stagger)
    entered = time.time()
    with ctx.device.scope():
        dist.barrier()
    return {"entered": entered, "left": time.time()}


# ---------------------------------------------------------------- pipeline (p2p)

# Note [Pipeline step]
# ~~~~~~~~~~~~~~~~~~~~
# Pipeline parallelism moves activations forward and gradients back with point-to-point
# sends. The check splits a small model into one stage per rank, a chain 0 -> 1 -> ... ->
# ws-1 (at world size 2 a two-layer model, at 4 a four-stage chain, so the middle stages
# both receive and send in each direction), and runs GPipe steps of two micro-batches:
# every stage runs both forwards, sends both activations on, then the last stage's loss
# starts the backward and each stage sends the gradients of its inputs back. The
# transport is ``send``/``recv`` one tensor at a time, or ``batch_isend_irecv`` with
# both micro-batches' tensors in one batch (a backend that matches a batch's receives
# out of order swaps the micro-batches). The reference is the whole model on one process
# on the full batch in float64; a stage's outputs, the gradients it receives, its
# parameters' gradients and its parameters after an SGD step must match it.

PIPELINE_TRANSPORTS = ("send_recv", "batch_isend_irecv")


def _pipeline_model(stages: int, features: int = 16, width: int = 32,
                    outputs: int = 4) -> nn.Sequential:
    """One block per stage: Linear + tanh, the last a Linear alone."""
    blocks = []
    for s in range(stages):
        linear = nn.Linear(features if s == 0 else width, outputs if s == stages - 1 else width)
        blocks.append(linear if s == stages - 1 else nn.Sequential(linear, nn.Tanh()))
    return nn.Sequential(*blocks)


def _p2p(transport: str, tensors: list, peer: int, send: bool) -> None:
    """Send ``tensors`` to ``peer`` or receive into them, in order, by ``transport``."""
    if transport == "send_recv":
        for t in tensors:
            (dist.send if send else dist.recv)(t, peer)
        return
    op = dist.isend if send else dist.irecv
    for work in dist.batch_isend_irecv([dist.P2POp(op, t, peer) for t in tensors]):
        work.wait()


def pipeline(ctx, transport: str = "send_recv", steps: int = 2, micro: int = 2,
             micro_batch: int = 4, lr: float = 0.1):
    """A pipeline-parallel training step per rank-stage vs one process (Note [Pipeline
    step]).

    Returns per step this stage's normalised errors against the float64 full-batch
    reference: ``out_err`` (its outputs), ``recv_grad_err`` (the output gradients it
    received; not the last stage), ``grad_err`` (its parameters' gradients),
    ``param_err`` (after the SGD step) and, on the last stage, ``loss_err``.
    """
    ws, rank = ctx.world_size, ctx.rank
    first, last = rank == 0, rank == ws - 1
    torch.manual_seed(ctx.seed)
    model = _pipeline_model(ws)
    reference = copy.deepcopy(model).double()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    with ctx.device.scope():
        stage = copy.deepcopy(model[rank]).to(ctx.torch_device, torch.float32)
        opt = torch.optim.SGD(stage.parameters(), lr=lr)
    in_features = next(stage.parameters()).shape[1]
    dev, f32 = ctx.torch_device, torch.float32
    errors = {key: [] for key in ("out_err", "recv_grad_err", "grad_err", "param_err",
                                  "loss_err")}
    for step in range(steps):
        x, y = _batch(ctx.seed, step, micro * micro_batch)
        ref_opt.zero_grad()
        acts, h = [], x
        for block in reference:
            h = block(h)
            h.retain_grad()
            acts.append(h)
        ref_loss = nn.functional.mse_loss(h, y)
        ref_loss.backward()
        parts = [slice(k * micro_batch, (k + 1) * micro_batch) for k in range(micro)]
        with ctx.device.scope():
            opt.zero_grad(set_to_none=True)
            if first:
                inputs = [x[part].to(dev, f32) for part in parts]
            else:
                inputs = [torch.empty(micro_batch, in_features, device=dev, dtype=f32)
                          for _ in parts]
                _p2p(transport, inputs, rank - 1, send=False)
                for t in inputs:
                    t.requires_grad_()
            outs = [stage(t) for t in inputs]
            if last:
                loss = sum(nn.functional.mse_loss(out, y[part].to(dev, f32))
                           for out, part in zip(outs, parts)) / micro
                loss.backward()
                received = None
            else:
                _p2p(transport, [out.detach() for out in outs], rank + 1, send=True)
                received = [torch.empty_like(out) for out in outs]
                _p2p(transport, received, rank + 1, send=False)
                torch.autograd.backward(outs, received)
            if not first:
                _p2p(transport, [t.grad for t in inputs], rank - 1, send=True)
            grads = _grads(stage)
            opt.step()
            ctx.device.synchronize()
        errors["out_err"].append(_max_err([(torch.cat(outs), acts[rank])]))
        if received is not None:
            errors["recv_grad_err"].append(_max_err([(torch.cat(received), acts[rank].grad)]))
        else:
            errors["loss_err"].append(_max_err([(loss, ref_loss)]))
        errors["grad_err"].append(_max_err(zip(grads, _grads(reference[rank]))))
        ref_opt.step()
        errors["param_err"].append(_max_err(zip(stage.parameters(),
                                                reference[rank].parameters())))
    return {"stage": rank, "transport": transport, **errors}


# ------------------------------------------------------------------------ rank skew

class _EndedPeers:
    """How many ranks' skewed collective has ended (returned or raised), counted in the
    rendezvous store every rank reaches (MASTER_ADDR:MASTER_PORT, as under torchrun;
    ``TCPStore.add``, which every torch line has).

    The late rank of :func:`rank_skew` waits ``skew`` seconds, or less once every other
    rank's call has ended: beyond the timeout that is when they gave up, so it arrives
    after them as a rank ``skew`` seconds late would, without waiting out the rest of the
    ``skew`` (2 s of the default run). Within the timeout the others wait in the
    collective for the late rank and say nothing, so it waits the whole ``skew``."""

    def __init__(self, key: str, world_size: int) -> None:
        self.key, self.world_size = key, world_size
        self.store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                   is_master=False, timeout=_dt.timedelta(seconds=60))

    def say(self) -> None:
        self.store.add(self.key, 1)

    def wait(self, skew: float) -> None:
        deadline = time.monotonic() + skew
        while time.monotonic() < deadline:
            if self.store.add(self.key, 0) >= self.world_size - 1:  # add 0: read the count
                return
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def rank_skew(ctx, skew: float, timeout: float = 2.0, size: int = 1000):
    """The last rank reaches an all_reduce ``skew`` seconds after the others, in a group
    whose timeout is ``timeout`` seconds (Note [Rank skew] in harness/distributed/judge.py).

    The group's communicator is made first, by one all_reduce every rank enters together:
    HCCL creates it lazily inside a group's first collective and waits there for
    HCCL_CONNECT_TIMEOUT, not the group's timeout. Each rank notes when it entered the
    skewed collective (``ctx.note``), so a rank the backend's watchdog then ends leaves that
    behind. Returns when this rank entered and left (the host clock: one host), whether it
    completed, its error (the backend's words) and the sum's error against NumPy. The
    ranks meet again on the world group afterwards (its timeout is the run's), so a failed
    collective that returns leaves no rank behind for the next sub-check.
    """
    from harness.distributed import hccl

    ws, rank, late = ctx.world_size, ctx.rank, ctx.world_size - 1
    exec_s = hccl.timeout_value("HCCL_EXEC_TIMEOUT")[0] if ctx.backend == "hccl" else None
    ctx.note(skew=skew, timeout=timeout, late_rank=late, backend=ctx.backend,
             exec_timeout=exec_s)
    group = dist.new_group(backend=ctx.backend, timeout=_dt.timedelta(seconds=timeout))
    with ctx.device.scope():  # the communicator, made with every rank present
        warm = torch.ones(1, device=ctx.torch_device)
        dist.all_reduce(warm, group=group)
        ctx.device.synchronize()
    dist.barrier()  # everyone starts together; the skew is the only delay
    inputs = [_inputs(ctx.seed, r, size, "float32") for r in range(ws)]
    ended = _EndedPeers(f"harness/rank_skew/{ctx.seed}/{skew}/{timeout}", ws)
    if rank == late:
        ended.wait(skew)
    entered = time.time()
    ctx.note(entered=entered)
    error, max_err = None, None
    try:
        with ctx.device.scope():
            t = inputs[rank].to(ctx.torch_device, copy=True)
            dist.all_reduce(t, group=group)
            ctx.device.synchronize()
        expected = np.stack([_np(x) for x in inputs]).sum(0)
        max_err = float(np.abs(_np(t) - expected).max())
    except (RuntimeError, ValueError, OSError) as exc:  # the backend's timeout, its words
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    left = time.time()
    if rank != late:
        ended.say()
    dist.barrier()  # the world group: nobody starts the next sub-check alone
    return {"skew": skew, "timeout": timeout, "late_rank": late, "entered": entered,
            "left": left, "completed": error is None, "error": error, "max_abs_err": max_err,
            "bound": float(ws * EPS["float32"] * np.abs(np.stack([_np(x) for x in inputs]))
                           .sum(0).max()), "backend": ctx.backend, "exec_timeout": exec_s}


# ---------------------------------------------------------------- DistributedSampler

def sampler(ctx, length: int = 0, drop_last: bool = False, epochs=(0, 1, 2), seed: int = 0):
    """This rank's indices from ``DistributedSampler`` (rank and replicas from the
    process group) for each epoch, with ``set_epoch`` called before each."""
    from torch.utils.data.distributed import DistributedSampler

    length = length or 10 * ctx.world_size + 3  # uneven: padding or dropping happens
    with ctx.device.scope():
        sampler_ = DistributedSampler(range(length), shuffle=True, seed=seed,
                                      drop_last=drop_last)
        orders = {}
        for epoch in epochs:
            sampler_.set_epoch(epoch)
            orders[str(epoch)] = [int(i) for i in sampler_]
    return {"length": length, "num_replicas": sampler_.num_replicas, "rank": sampler_.rank,
            "epochs": orders}


from harness.distributed import parallel  # noqa: E402 - its programs reuse the helpers above

BUILT_IN = {fn.__name__: fn for fn in (ddp_train, ddp_amp, ddp_buffers, sync_batchnorm,
                                       collective, barrier, rank_skew, sampler, pipeline,
                                       *parallel.PARALLEL)}
"""The rank programs by the bare name torchrun users give them (Note [Naming a sub-check]
in harness/distributed/subcheck.py)."""
