"""Rank programs for sharded and tensor-parallel training: FSDP2 and DTensor.

Like :mod:`harness.distributed.checks` (whose helpers these reuse), each function is
``fn(ctx, **kwargs)``, runs the DUT's work inside ``ctx.device.scope()`` (faults act
there), computes its reference on the CPU outside it (one process, the full batch, in
float64) and returns plain JSON metrics; :mod:`harness.distributed.judge` decides.

- :func:`fsdp_train`: ``fully_shard`` training vs one process on the full batch, in
  float32 or under a ``MixedPrecisionPolicy`` (bfloat16 parameters, float32 reduction).
- :func:`fsdp_state_round_trip`: the sharded model and optimizer state saved with
  ``torch.distributed.checkpoint`` and loaded into a fresh ``fully_shard`` model;
  training on must be bit-identical to not having round-tripped.
- :func:`tp_mlp`: a column-then-row parallel MLP (``ColwiseParallel`` then
  ``RowwiseParallel`` via ``parallelize_module`` on a 1-D ``DeviceMesh``) vs the same
  MLP on one device: forward output, gradients, one optimizer step.

Note [Public parallel APIs only]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The checks use the public APIs: ``torch.distributed.fsdp.fully_shard`` and
``MixedPrecisionPolicy`` (torch >= 2.6) and ``torch.distributed.tensor`` with
``torch.distributed.tensor.parallel`` (torch >= 2.5). Older torch lines have earlier,
private versions (``torch.distributed._composable.fsdp`` in 2.4 and 2.5,
``torch.distributed._tensor``) whose behaviour and signatures moved between releases; a
check of a private prototype would judge the prototype, not the stack. Where the public
API is missing the rank raises :class:`harness.device.Unsupported` naming the API and
the torch version that has it, and the record is ``unsupported`` (Note [Missing features
of older stacks] in harness/device.py): a missing capability, never a failure.
"""

from __future__ import annotations

import copy
import importlib
import shutil
import tempfile

import torch
import torch.distributed as dist
from torch import nn

from harness import dtypes
from harness.device import Unsupported

FSDP_SINCE = "2.6"
DTENSOR_SINCE = "2.5"
DCP_SINCE = "2.2"  # torch.distributed.checkpoint's save/load and state_dict helpers


def _public_api(module: str, names: tuple[str, ...], since: str):
    """``names`` from ``module``, or :class:`Unsupported` naming what is missing and the
    torch version that has it (Note [Public parallel APIs only])."""
    try:
        found = importlib.import_module(module)
        return tuple(getattr(found, name) for name in names)
    except (ImportError, AttributeError) as exc:
        raise Unsupported(f"torch {torch.__version__} has no public {module}."
                          f"{'/'.join(names)} (public from torch {since}; "
                          f"{type(exc).__name__}: {exc})") from None


def fsdp_api(kind: str):
    """FSDP2's public API on device type ``kind``, and the device stream API it waits on:
    ``fully_shard`` records events on the device's current stream, which the CPU's stream
    gains in torch 2.7 (torch 2.6 has ``fully_shard`` but its ``torch.cpu.Stream`` has no
    ``record_event``: FSDP2 on the CPU fails there with an AttributeError, a missing
    capability). :class:`Unsupported` naming what is missing; the known-failure probe
    ``fsdp2_on_cpu`` asks this same function."""
    found = _public_api("torch.distributed.fsdp", ("fully_shard", "MixedPrecisionPolicy"),
                        FSDP_SINCE)
    module = getattr(torch, kind, None)
    stream = module.current_stream() if hasattr(module, "current_stream") else None
    if stream is not None and not hasattr(stream, "record_event"):
        raise Unsupported(f"torch {torch.__version__}: FSDP2 on {kind} needs "
                          f"torch.{kind}.Stream.record_event, which this torch lacks (the CPU "
                          "stream has it from torch 2.7)")
    return found


def _mesh(ctx):
    """A 1-D mesh over every rank on the DUT's device type (the world group)."""
    (init_device_mesh,) = _public_api("torch.distributed.device_mesh", ("init_device_mesh",),
                                     DTENSOR_SINCE)
    return init_device_mesh(ctx.torch_device.type, (ctx.world_size,))


def _full(tensor):
    """A DTensor's full value on the host (a collective: every rank calls it), or the
    tensor itself; None stays None."""
    if tensor is None:
        return None
    if hasattr(tensor, "full_tensor"):
        tensor = tensor.full_tensor()
    return tensor.detach().cpu()


def _full_grads(module: nn.Module):
    return [_full(p.grad) for p in module.parameters()]


def _full_params(module: nn.Module):
    return [_full(p) for p in module.parameters()]


def _bf16_exact_fraction(grads) -> float:
    """Fraction of the elements of ``grads`` (this rank's shards) that bfloat16 holds
    exactly (Note [Seeing the reduction dtype])."""
    exact, total = 0, 0
    for grad in grads:
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        local = local.detach().cpu().float().flatten()
        exact += int((local.bfloat16().float() == local).sum())
        total += local.numel()
    return exact / max(total, 1)


# Note [Seeing the reduction dtype]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Under MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) every rank's
# gradient is computed in bfloat16 and FSDP reduce-scatters it in float32: the mean of
# ws bfloat16 numbers, which needs more bits than bfloat16 has wherever the ranks' values
# differ (a + b carries the bits of both). A reduction silently done in bfloat16 rounds
# that mean back to bfloat16, an error (2^-9 relative) far inside the bfloat16 tolerance
# against the float64 reference, so the check measures the reduction's precision
# directly: the fraction of the reduced gradient's elements that bfloat16 holds exactly.
# Reduced in float32 over ranks with different data, most of them need the extra bits
# (measured about 0.1 to 0.3 exact); reduced in bfloat16, all of them are exact (1.0).


FSDP_VARIANTS = {"float32": None, "bf16_mixed": ("bfloat16", "float32")}
"""FSDP2 variants: None (no policy, float32 throughout) or (param_dtype, reduce_dtype)."""


def _fully_shard(ctx, model: nn.Module, variant: str = "float32"):
    """``fully_shard`` every Linear, then the root (the usual FSDP2 wrapping)."""
    fully_shard, policy_cls = fsdp_api(ctx.torch_device.type)
    mesh = _mesh(ctx)
    kwargs = {"mesh": mesh}
    if FSDP_VARIANTS[variant] is not None:
        param_dtype, reduce_dtype = FSDP_VARIANTS[variant]
        kwargs["mp_policy"] = policy_cls(param_dtype=dtypes.BY_NAME[param_dtype],
                                         reduce_dtype=dtypes.BY_NAME[reduce_dtype])
    for layer in (model.fc1, model.fc2, model.fc3):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def fsdp_train(ctx, variant: str = "float32", steps: int = 3, local_batch: int = 8,
               lr: float = 0.1, momentum: float = 0.9):
    """FSDP2 (``fully_shard``) over ``steps`` SGD-with-momentum steps vs one process on
    the full batch (float64, CPU).

    Returns, per step, the max normalised error of the full (gathered) gradients before
    the step and of the parameters after it; the dtypes the model computed in, keeps its
    sharded parameters in and hands gradients back in; whether every parameter is
    sharded (this rank holds at most ceil(n / ws) rows); and, for the mixed-precision
    variant, the fraction of gradient elements bfloat16 holds exactly (Note [Seeing the
    reduction dtype]).
    """
    ws, rank = ctx.world_size, ctx.rank
    torch.manual_seed(ctx.seed)
    model = MLP()
    reference = copy.deepcopy(model).double()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr, momentum=momentum)
    with ctx.device.scope():
        net = _fully_shard(ctx, model.to(ctx.torch_device), variant)
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=momentum)
    sharded = all(p.to_local().shape[0] <= -(-p.shape[0] // ws) for p in net.parameters())
    grad_err, param_err, exact = [], [], []
    compute_dtype = None
    for step in range(steps):
        x, y = _batch(ctx.seed, step, local_batch * ws)
        # each rank its own scale, so the ranks' gradients differ in every element
        x = x * (1 + 0.25 * torch.arange(ws, dtype=x.dtype).repeat_interleave(local_batch)[:, None])
        shard = slice(rank * local_batch, (rank + 1) * local_batch)
        with ctx.device.scope():
            opt.zero_grad(set_to_none=True)
            out = net(x[shard].to(ctx.torch_device, torch.float32))
            compute_dtype = dtypes.name(out.dtype)
            nn.functional.mse_loss(out.float(), y[shard].to(ctx.torch_device,
                                                              torch.float32)).backward()
            exact.append(_bf16_exact_fraction([p.grad for p in net.parameters()]))
            grads = _full_grads(net)
            opt.step()
            params = _full_params(net)
        ref_opt.zero_grad()
        nn.functional.mse_loss(reference(x), y).backward()
        grad_err.append(_max_err(zip(grads, _grads(reference))))
        ref_opt.step()
        param_err.append(_max_err(zip(params, reference.parameters())))
    first = next(net.parameters())
    return {"variant": variant, "grad_err": grad_err, "param_err": param_err,
            "compute_dtype": compute_dtype, "param_dtype": dtypes.name(first.dtype),
            "grad_dtype": dtypes.name(first.grad.dtype), "sharded": sharded,
            "bf16_exact_fraction": exact}


def fsdp_state_round_trip(ctx, steps_before: int = 2, steps_after: int = 2,
                          local_batch: int = 8, lr: float = 0.01):
    """Save an FSDP2 model's and AdamW's sharded state, load it into a fresh
    ``fully_shard`` model, train both on: they must stay bit-identical.

    The state goes through ``torch.distributed.checkpoint`` (``get_state_dict``,
    ``dcp.save``, ``dcp.load``, ``set_state_dict``): each rank writes its own shards, in a
    folder rank 0 creates (the ranks share a file system: one host). Returns the largest
    parameter difference between the trained and the restored model after each further
    step (0 when the round trip kept everything), how much the fresh model differed
    before loading (it must, or loading proved nothing), and the optimizer-state entries
    each side holds.
    """
    fsdp_api(ctx.torch_device.type)
    dcp_save, dcp_load = _public_api("torch.distributed.checkpoint", ("save", "load"),
                                     DCP_SINCE)
    get_state_dict, set_state_dict = _public_api(
        "torch.distributed.checkpoint.state_dict", ("get_state_dict", "set_state_dict"),
        DCP_SINCE)
    ws, rank = ctx.world_size, ctx.rank
    folder = [tempfile.mkdtemp(prefix="harness-fsdp-state-") if rank == 0 else None]
    dist.broadcast_object_list(folder, src=0)
    try:
        torch.manual_seed(ctx.seed)
        with ctx.device.scope():
            trained = _fully_shard(ctx, MLP().to(ctx.torch_device))
            trained_opt = torch.optim.AdamW(trained.parameters(), lr=lr)

        def step(net, opt, index):
            x, y = _batch(ctx.seed, index, local_batch * ws)
            shard = slice(rank * local_batch, (rank + 1) * local_batch)
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(net(x[shard].to(ctx.torch_device, torch.float32)),
                                   y[shard].to(ctx.torch_device, torch.float32)).backward()
            opt.step()

        with ctx.device.scope():
            for index in range(steps_before):
                step(trained, trained_opt, index)
            model_state, optim_state = get_state_dict(trained, trained_opt)
            dcp_save({"model": model_state, "optim": optim_state}, checkpoint_id=folder[0])
        torch.manual_seed(ctx.seed + 1)  # another initialisation: loading must replace it
        with ctx.device.scope():
            restored = _fully_shard(ctx, MLP().to(ctx.torch_device))
            restored_opt = torch.optim.AdamW(restored.parameters(), lr=lr)
            trained_params = _full_params(trained)  # unchanged until training resumes
            before = _max_err(zip(_full_params(restored), trained_params))
            model_state, optim_state = get_state_dict(restored, restored_opt)
            state = {"model": model_state, "optim": optim_state}
            dcp_load(state, checkpoint_id=folder[0])
            set_state_dict(restored, restored_opt, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
            loaded = _max_err(zip(_full_params(restored), trained_params))
            diff = []
            for index in range(steps_before, steps_before + steps_after):
                step(trained, trained_opt, index)
                step(restored, restored_opt, index)
                diff.append(max((a - b).abs().max().item() for a, b in
                                zip(_full_params(restored), _full_params(trained))))
        entries = [sum(len(s) for s in opt.state.values()) for opt in (trained_opt,
                                                                       restored_opt)]
        return {"differs_before_load": before, "param_diff_after_load": loaded,
                "param_diff": diff, "optim_state_entries": entries}
    finally:
        dist.barrier()  # nobody removes the folder while a peer still reads it
        if rank == 0:
            shutil.rmtree(folder[0], ignore_errors=True)


class TPMLP(nn.Module):
    """Two Linear layers with a nonlinearity between: the column-then-row pair."""

    def __init__(self, features: int = 16, hidden: int = 64) -> None:
        super().__init__()
        self.up = nn.Linear(features, hidden)
        self.down = nn.Linear(hidden, features)

    def forward(self, x):
        return self.down(torch.tanh(self.up(x)))


def tp_mlp(ctx, batch: int = 8, lr: float = 0.1):
    """Tensor parallel MLP (``up``: ``ColwiseParallel``, ``down``: ``RowwiseParallel``,
    ``parallelize_module`` on a 1-D mesh) vs the same MLP on one process in float64.

    Every rank feeds the same batch. Returns the normalised errors of the forward
    output, of the full gradients and of the full parameters after one SGD step, and
    the placements the layers' weights got.
    """
    colwise, rowwise, parallelize = _public_api(
        "torch.distributed.tensor.parallel",
        ("ColwiseParallel", "RowwiseParallel", "parallelize_module"), DTENSOR_SINCE)
    _public_api("torch.distributed.tensor", ("DTensor",), DTENSOR_SINCE)
    torch.manual_seed(ctx.seed)
    model = TPMLP()
    reference = copy.deepcopy(model).double()
    x, y = _batch(ctx.seed, 0, batch, features=16, outputs=16)
    with ctx.device.scope():
        net = parallelize(model.to(ctx.torch_device), _mesh(ctx),
                          {"up": colwise(), "down": rowwise()})
        opt = torch.optim.SGD(net.parameters(), lr=lr)
        out = net(x.to(ctx.torch_device, torch.float32))
        nn.functional.mse_loss(out, y.to(ctx.torch_device, torch.float32)).backward()
        out = _full(out)
        grads = _full_grads(net)
        opt.step()
        params = _full_params(net)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=lr)
    ref_out = reference(x)
    nn.functional.mse_loss(ref_out, y).backward()
    ref_grads = _grads(reference)
    ref_opt.step()
    placements = {name: [str(p) for p in getattr(param, "placements", ())]
                  for name, param in net.named_parameters()}
    return {"out_err": _max_err([(out, ref_out)]),
            "grad_err": _max_err(zip(grads, ref_grads)),
            "param_err": _max_err(zip(params, reference.parameters())),
            "placements": placements}


PARALLEL = (fsdp_train, fsdp_state_round_trip, tp_mlp)
"""The rank programs of this module (``checks.BUILT_IN`` holds them by name)."""

# Imported last: checks.BUILT_IN lists this module's programs, so whichever of the two
# modules is imported first, the other finds what it needs already defined.
from harness.distributed.checks import MLP, _batch, _grads, _max_err  # noqa: E402 - see above
