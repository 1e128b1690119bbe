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
import hashlib
import time

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
}


# ------------------------------------------------------------------ DDP training

def ddp_train(ctx, variant: str = "plain", dtype: str = "float32", steps: int = 5,
              local_batch: int = 8, lr: float = 0.1):
    """DDP over ``steps`` SGD steps vs one process on the full batch (float64, CPU).

    Returns, for every step this rank ran: the max normalised gradient error (before the
    step) and parameter error (after it) against the reference, and a hash of this
    rank's parameters (ranks must agree bit for bit); then the same after training.
    ``no_sync`` accumulates 2 micro-batches per step; ``join`` gives rank r
    ``steps - 2 + r`` steps (uneven inputs) under ``Join``.
    """
    from torch.distributed.algorithms.join import Join

    ws, rank = ctx.world_size, ctx.rank
    torch_dtype = dtypes.BY_NAME[dtype]
    torch.manual_seed(ctx.seed)
    model = MLP(unused=variant == "unused_params")
    reference = copy.deepcopy(model).double()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    micro = 2 if variant == "no_sync" else 1
    all_steps = [steps - 2 + r if variant == "join" else steps for r in range(ws)]
    with ctx.device.scope():
        net = _ddp(ctx, model.to(ctx.torch_device, torch_dtype), **DDP_VARIANTS[variant])
        opt = torch.optim.SGD(net.parameters(), lr=lr)
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
            "unused_grad_max": unused_grad}


def ddp_amp(ctx, steps: int = 5, local_batch: int = 8, lr: float = 0.05):
    """DDP under autocast with a GradScaler vs fp64 full-batch training.

    Autocast runs in bfloat16 on the CPU (its autocast dtype) and float16 elsewhere.
    Gradients are compared after ``scaler.unscale_``.
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
    grad_err, param_err, hashes, scales, skipped = [], [], [], [], 0
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
        grad_err.append(_max_err(zip(grads, ref_grads)))
        param_err.append(_max_err(zip(net.module.parameters(), reference.parameters())))
        hashes.append(_param_hash(net.module))
        scales.append(float(scaler.get_scale()))
    return {"amp_dtype": amp_dtype, "grad_err": grad_err, "param_err": param_err,
            "param_hash": hashes, "scale": scales, "skipped_steps": skipped}


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


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().to(torch.float64 if t.is_floating_point() else torch.int64).numpy()


COLLECTIVE_OPS = ("all_reduce_sum", "all_reduce_avg", "all_reduce_max", "all_gather",
                  "reduce_scatter", "broadcast")


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
    raise ValueError(f"unknown collective {op!r}")


def _reference(op: str, inputs: list[np.ndarray], rank: int, ws: int, size: int):
    """(expected, error bound per element) from every rank's input, in float64/int64."""
    stack = np.stack(inputs)
    absum = np.abs(stack).sum(0)
    if op == "all_reduce_sum":
        return stack.sum(0), absum
    if op == "all_reduce_avg":
        if stack.dtype == np.int64:
            return stack.sum(0) // ws, None
        return stack.sum(0) / ws, absum / ws
    if op == "all_reduce_max":
        return stack.max(0), None
    if op == "all_gather":
        return np.concatenate(inputs), None
    if op == "reduce_scatter":
        chunk = stack.shape[1] // ws
        part = stack[:, rank * chunk:(rank + 1) * chunk]
        return part.sum(0), np.abs(part).sum(0)
    if op == "broadcast":
        return inputs[ws - 1], None
    raise ValueError(op)


def collective(ctx, op: str = "all_reduce_sum", dtype: str = "float32",
               sizes=COLLECTIVE_SIZES):
    """One collective in one dtype at several sizes, against NumPy.

    Per size: ``max_abs_err``, ``bound`` (the largest error the summation bound allows;
    0 where the answer is exact: max, gather, broadcast, integers) and ``excess`` (the
    worst error / allowed ratio, > 1 fails), or ``unsupported`` with the backend's words.
    """
    ws, rank = ctx.world_size, ctx.rank
    results = {}
    for size in sizes:
        # reduce_scatter: ``size`` is the input (rounded up to ws chunks), as for the rest
        per_rank = -(-size // ws) * ws if op == "reduce_scatter" else size
        inputs = [_inputs(ctx.seed, r, per_rank, dtype) for r in range(ws)]
        try:
            with ctx.device.scope():
                dut = _run_collective(ctx, op, inputs[rank], size)
                ctx.device.synchronize()
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:
            if classify_exception(exc)[0] == "unsupported":
                results[str(size)] = {"unsupported": f"{type(exc).__name__}: "
                                                     f"{str(exc).splitlines()[0][:300]}"}
                continue
            raise
        expected, absum = _reference(op, [_np(t) for t in inputs], rank, ws, size)
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
    return results


def barrier(ctx, stagger: float = 0.15):
    """Rank r enters the barrier ``r * stagger`` seconds late; nobody may leave before
    the last one entered (one host: the ranks share a clock)."""
    time.sleep(ctx.rank * stagger)
    entered = time.time()
    with ctx.device.scope():
        dist.barrier()
    return {"entered": entered, "left": time.time()}


# ------------------------------------------------------------------------ rank skew

def rank_skew(ctx, skew: float, timeout: float = 2.0, size: int = 1000):
    """The last rank reaches an all_reduce ``skew`` seconds after the others, in a group
    whose timeout is ``timeout`` seconds (Note [Rank skew] in harness/distributed/judge.py).

    Returns when this rank entered the collective and left it (the host clock: one host),
    whether it completed, its error (the backend's words) and the sum's error against
    NumPy. The ranks meet again on the world group afterwards (its timeout is the run's),
    so a failed collective leaves no rank behind for the next sub-check.
    """
    import datetime as _dt

    ws, rank, late = ctx.world_size, ctx.rank, ctx.world_size - 1
    group = dist.new_group(backend=ctx.backend, timeout=_dt.timedelta(seconds=timeout))
    dist.barrier()  # everyone starts together; the skew is the only delay
    inputs = [_inputs(ctx.seed, r, size, "float32") for r in range(ws)]
    if rank == late:
        time.sleep(skew)
    entered = time.time()
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
    dist.barrier()  # the world group: nobody starts the next sub-check alone
    return {"skew": skew, "timeout": timeout, "late_rank": late, "entered": entered,
            "left": left, "completed": error is None, "error": error, "max_abs_err": max_err,
            "bound": float(ws * EPS["float32"] * np.abs(np.stack([_np(x) for x in inputs]))
                           .sum(0).max()), "backend": ctx.backend}


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


BUILT_IN = {fn.__name__: fn for fn in (ddp_train, ddp_amp, ddp_buffers, sync_batchnorm,
                                       collective, barrier, rank_skew, sampler)}
"""The rank programs by the bare name torchrun users give them (Note [Naming a sub-check]
in harness/distributed/subcheck.py)."""
