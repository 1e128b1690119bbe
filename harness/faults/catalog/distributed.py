"""Faults the distributed family must catch (``suites/distributed``).

They act inside the ranks' DUT scope (the ranks inherit ``HARNESS_FAULTS``), so DDP,
the collectives and the sampler break on the "device" while each rank's CPU reference
stays right. Each names one narrow check so ``faults check`` runs it in seconds.
"""

from __future__ import annotations

import contextlib
import time

from harness.faults import Fault, patch_attr

SUITE = "suites/distributed"
DDP_PLAIN = f"{SUITE}/test_dist_ddp.py::test_ddp_matches_single_process[ws2-ddp/float32/plain]"
DDP_BUFFERS = f"{SUITE}/test_dist_ddp.py::test_ddp_broadcast_buffers[ws2-ddp/buffers]"
DDP_FOUND_INF = (f"{SUITE}/test_dist_ddp.py::"
                 "test_ddp_amp_skips_an_overflow_on_every_rank[ws2-ddp/amp_found_inf]")
SAMPLER = (f"{SUITE}/test_dist_sampler.py::"
           "test_distributed_sampler_shards[ws2-sampler/drop_last=False]")
SKEW_WITHIN = (f"{SUITE}/test_dist_skew.py::"
               "test_rank_skew_against_the_timeout[ws2-skew/within]")
ALL_REDUCE = (f"{SUITE}/test_dist_collectives.py::"
              "test_collective_matches_numpy[ws2-all_reduce_sum/float32]")
DDP_RANK_INIT = f"{SUITE}/test_dist_ddp.py::test_ddp_matches_single_process[ws2-ddp/float32/rank_init]"
DDP_STATIC_GRAPH = (f"{SUITE}/test_dist_ddp.py::"
                    "test_ddp_matches_single_process[ws2-ddp/float32/static_graph]")
PIPELINE = f"{SUITE}/test_dist_pipeline.py::test_pipeline_step_matches_single_process"


def _collective_check(op: str) -> str:
    return f"{SUITE}/test_dist_collectives.py::test_collective_matches_numpy[ws2-{op}/float32]"


# ----------------------------------------------------------- DDP communication hooks

def _averaging_all_reduce(buffer):
    """DDP's own averaging allreduce of one bucket's ``buffer``, as a hook returns it."""
    import torch.distributed as dist

    buffer.div_(dist.get_world_size())
    work = dist.all_reduce(buffer, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _sum_hook(_state, bucket):
    """allreduce without the division by world size: DDP sums gradients."""
    import torch.distributed as dist

    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _one_param_local_hook(target, bucket):
    """DDP's averaging allreduce, except that ``target``'s gradient keeps its local value."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    local = buffer.clone()
    buffer.div_(dist.get_world_size())
    work = dist.all_reduce(buffer, async_op=True)

    def restore(fut):
        out = fut.value()[0]
        offset = 0
        for param in bucket.parameters():
            if param.data_ptr() == target.data_ptr():
                out[offset:offset + param.numel()] = local[offset:offset + param.numel()]
            offset += param.numel()
        return out

    return work.get_future().then(restore)


def _ddp_with_hook(make_state, hook, when=lambda kwargs: True):
    """Activate: every DDP built in the DUT scope (with arguments ``when`` accepts: others
    are left alone) registers ``hook`` as its comm hook, its state ``make_state(ddp)``."""

    def activate(_device):
        from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817

        original = DDP.__init__

        def init(self, *args, **kwargs):
            original(self, *args, **kwargs)
            if when(kwargs):
                self.register_comm_hook(make_state(self), hook)

        @contextlib.contextmanager
        def patched():
            DDP.__init__ = init
            try:
                yield
            finally:
                DDP.__init__ = original

        return patched()

    return activate


COMM_HOOK_SUMS = Fault(
    "distributed.comm_hook_sums", "distributed",
    "DDP's gradient communication hook sums across ranks instead of averaging",
    (DDP_PLAIN,), _ddp_with_hook(lambda ddp: None, _sum_hook))

GRAD_NOT_REDUCED = Fault(
    "distributed.grad_not_reduced", "distributed",
    "DDP leaves one parameter's gradient (the first layer's weight) un-reduced: each rank "
    "keeps its local gradient",
    (DDP_PLAIN,), _ddp_with_hook(lambda ddp: next(ddp.module.parameters()),
                                 _one_param_local_hook))

def _saturating_hook(_state, bucket):
    """DDP's averaging allreduce over a buffer whose inf/NaN were saturated first, as
    Ascend's saturation mode does (+-inf -> the dtype's largest finite value, NaN -> 0)."""
    import torch

    buffer = bucket.buffer()
    torch.nan_to_num_(buffer)
    return _averaging_all_reduce(buffer)


FOUND_INF_SATURATED = Fault(
    "distributed.found_inf_saturated", "distributed",
    "DDP's gradient all-reduce saturates inf/NaN to finite values (Ascend's saturation "
    "mode): one rank's overflow never reaches the GradScalers, so no rank skips the step",
    (DDP_FOUND_INF,), _ddp_with_hook(lambda ddp: None, _saturating_hook))

BUFFERS_NOT_BROADCAST = patch_attr(
    "distributed.buffers_not_broadcast", family="distributed",
    description="DDP ignores broadcast_buffers: rank 0's BatchNorm buffers are never sent",
    target="torch.nn.parallel.DistributedDataParallel._sync_buffers",
    replace=lambda original: (lambda self: None),
    checks=(DDP_BUFFERS,),
)

SAMPLER_EPOCH_IGNORED = patch_attr(
    "distributed.sampler_epoch_ignored", family="distributed",
    description="DistributedSampler.set_epoch has no effect: every epoch has the same order",
    target="torch.utils.data.distributed.DistributedSampler.set_epoch",
    replace=lambda original: (lambda self, epoch: None),
    checks=(SAMPLER,),
)


def _hang_on_rank_1(original):
    def all_reduce(tensor, *args, **kwargs):
        import torch.distributed as dist

        if dist.get_rank() == 1:
            while True:  # the fault: rank 1 never enters the collective
                time.sleep(1.0)
        return original(tensor, *args, **kwargs)

    return all_reduce


RANK_HANGS = patch_attr(
    "distributed.rank_hangs", family="distributed",
    description="rank 1 hangs inside all_reduce (never joins it); the check must fail by "
                "the launcher's timeout, naming the hung ranks",
    target="torch.distributed.all_reduce", replace=_hang_on_rank_1,
    checks=(ALL_REDUCE,), pytest_args=("--dist-timeout", "15"),
)



def _last_rank_straggles(original):
    def all_reduce(tensor, *args, **kwargs):
        import torch.distributed as dist

        if dist.get_rank() == dist.get_world_size() - 1:
            time.sleep(STRAGGLE_SECONDS)  # the fault: the last rank is slow to arrive
        return original(tensor, *args, **kwargs)

    return all_reduce


STRAGGLE_SECONDS = 3.0  # beyond the rank-skew check's 2 s timeout
RANK_STRAGGLES = patch_attr(
    "distributed.rank_straggles", family="distributed",
    description=f"the last rank reaches every all_reduce {STRAGGLE_SECONDS:g} s late (a slow "
                "rank): the rank-skew check's collective within its timeout must fail, "
                "naming the late rank and the timeout variable",
    target="torch.distributed.all_reduce", replace=_last_rank_straggles,
    checks=(SKEW_WITHIN,),
)


# ------------------------------------------------------- DDP: construction, static graph

DDP_INIT_NOT_BROADCAST = patch_attr(
    "distributed.ddp_init_not_broadcast", family="distributed",
    description="DDP's construction-time broadcast of rank 0's parameters and buffers does "
                "nothing: ranks seeded differently train from different weights",
    target="torch.nn.parallel.distributed._sync_module_states",
    replace=lambda original: (lambda *args, **kwargs: None),
    checks=(DDP_RANK_INIT,),
)


def _skip_last_bucket_hook(_state, bucket):
    """DDP's averaging allreduce for every bucket but the last, which keeps its local
    gradients."""
    buffer = bucket.buffer()
    if bucket.is_last():
        import torch

        future = torch.futures.Future()
        future.set_result(buffer)
        return future
    return _averaging_all_reduce(buffer)


STATIC_GRAPH_SKIPS_BUCKET = Fault(
    "distributed.static_graph_skips_bucket", "distributed",
    "DDP with static_graph=True never reduces its last gradient bucket: those gradients "
    "stay local to each rank",
    (DDP_STATIC_GRAPH,), _ddp_with_hook(lambda ddp: None, _skip_last_bucket_hook,
                                        when=lambda kwargs: kwargs.get("static_graph")))


# --------------------------------------------------------------- sharding collectives

def _swap_first_chunks(original):
    def all_to_all_single(output, input, output_split_sizes=None,  # noqa: A002
                          input_split_sizes=None, *args, **kwargs):
        import torch.distributed as dist

        work = original(output, input, output_split_sizes, input_split_sizes, *args, **kwargs)
        if output_split_sizes is None and output.numel() >= 2:
            chunks = output.view(-1).chunk(dist.get_world_size())
            first = chunks[0].clone()
            chunks[0].copy_(chunks[1])  # the fault: chunks 0 and 1 land swapped
            chunks[1].copy_(first)
        return work

    return all_to_all_single


ALL_TO_ALL_SWAPS_CHUNKS = patch_attr(
    "distributed.all_to_all_swaps_chunks", family="distributed",
    description="all_to_all_single (even splits) puts the chunks from ranks 0 and 1 in "
                "each other's place",
    target="torch.distributed.all_to_all_single", replace=_swap_first_chunks,
    checks=(_collective_check("all_to_all_single"),),
)


def _truncate_uneven(original):
    def all_to_all_single(output, input, output_split_sizes=None,  # noqa: A002
                          input_split_sizes=None, *args, **kwargs):
        import torch.distributed as dist

        work = original(output, input, output_split_sizes, input_split_sizes, *args, **kwargs)
        if output_split_sizes:  # the fault: each chunk cut to the even split's length
            even, start = output.numel() // dist.get_world_size(), 0
            for length in output_split_sizes:
                if length > even:
                    output.view(-1)[start + even:start + length].zero_()
                start += length
        return work

    return all_to_all_single


ALL_TO_ALL_UNEVEN_TRUNCATED = patch_attr(
    "distributed.all_to_all_uneven_truncated", family="distributed",
    description="all_to_all_single with uneven output_split_sizes writes only the even "
                "split's worth of each longer chunk (the rest stays zero)",
    target="torch.distributed.all_to_all_single", replace=_truncate_uneven,
    checks=(_collective_check("all_to_all_single_uneven"),),
)


def _drop_last_output(original):
    def all_to_all(output_tensor_list, input_tensor_list, *args, **kwargs):
        work = original(output_tensor_list, input_tensor_list, *args, **kwargs)
        output_tensor_list[-1].zero_()  # the fault: the last rank's chunk never arrives
        return work

    return all_to_all


ALL_TO_ALL_DROPS_LAST = patch_attr(
    "distributed.all_to_all_drops_last", family="distributed",
    description="all_to_all (the list form) leaves the last rank's output tensor unwritten "
                "(zero)",
    target="torch.distributed.all_to_all", replace=_drop_last_output,
    checks=(_collective_check("all_to_all"),),
)


def _patch_flat(name: str, fault: str, description: str, replace, checks) -> Fault:
    """A ``patch_attr`` fault on the flat collective ``name`` under whichever of torch's
    names the check calls on the running torch (``checks.FLAT_APIS``)."""

    def activate(device):
        from harness.distributed.checks import _flat_api

        api = _flat_api(name)
        return patch_attr(fault, family="distributed", description=description,
                          target=f"torch.distributed.{api}", replace=replace,
                          checks=checks).activate(device)

    return Fault(fault, "distributed", description, tuple(checks), activate)


def _gather_reversed(original):
    def all_gather(output, input, *args, **kwargs):  # noqa: A002 - torch's name
        import torch.distributed as dist

        work = original(output, input, *args, **kwargs)
        chunks = output.view(-1).chunk(dist.get_world_size())
        flipped = [c.clone() for c in reversed(chunks)]
        for chunk, value in zip(chunks, flipped):  # the fault: rank order reversed
            chunk.copy_(value)
        return work

    return all_gather


ALL_GATHER_INTO_TENSOR_REVERSED = _patch_flat(
    "all_gather_into_tensor", "distributed.all_gather_into_tensor_reversed",
    "all_gather_into_tensor places the ranks' inputs in reverse rank order",
    _gather_reversed, (_collective_check("all_gather_into_tensor"),))


def _avg_not_divided(original):
    def reduce_scatter(output, input, op=None, *args, **kwargs):  # noqa: A002
        import torch.distributed as dist

        if op == dist.ReduceOp.AVG:
            op = dist.ReduceOp.SUM  # the fault: the average is never divided
        return original(output, input, *(() if op is None else (op,)), *args, **kwargs)

    return reduce_scatter


REDUCE_SCATTER_AVG_NOT_DIVIDED = _patch_flat(
    "reduce_scatter_tensor", "distributed.reduce_scatter_tensor_avg_not_divided",
    "reduce_scatter_tensor with ReduceOp.AVG returns the sum (never divides by the world "
    "size)", _avg_not_divided, (_collective_check("reduce_scatter_tensor_avg"),))


# ----------------------------------------------------------------- pipeline send/recv

def _recv_drops_gradient(original):
    def recv(tensor, src=None, *args, **kwargs):
        import torch.distributed as dist

        result = original(tensor, src, *args, **kwargs)
        if src is not None and src > dist.get_rank():
            tensor.zero_()  # the fault: what comes back from a later stage is lost
        return result

    return recv


RECV_DROPS_GRADIENT = patch_attr(
    "distributed.recv_drops_gradient", family="distributed",
    description="recv from a higher rank (a later pipeline stage: the gradient coming "
                "back) delivers zeros",
    target="torch.distributed.recv", replace=_recv_drops_gradient,
    checks=(f"{PIPELINE}[ws2-pipeline/send_recv]",),
)


def _receives_out_of_order(original):
    def batch_isend_irecv(p2p_op_list):
        import torch.distributed as dist

        # complete the batch here (a gloo receive waited twice waits for another
        # message), then hand back nothing left to wait for
        for work in original(p2p_op_list):
            work.wait()
        received = {}
        for p2p in p2p_op_list:
            if p2p.op is dist.irecv or getattr(p2p.op, "__name__", "") == "irecv":
                received.setdefault(p2p.peer, []).append(p2p.tensor)
        for tensors in received.values():  # the fault: a peer's first two receives swap
            if len(tensors) >= 2 and tensors[0].shape == tensors[1].shape:
                first = tensors[0].clone()
                tensors[0].copy_(tensors[1])
                tensors[1].copy_(first)
        return []

    return batch_isend_irecv


BATCH_RECEIVES_OUT_OF_ORDER = patch_attr(
    "distributed.batch_receives_out_of_order", family="distributed",
    description="batch_isend_irecv matches a batch's receives from one peer out of order: "
                "the first two land in each other's tensors (micro-batches swap)",
    target="torch.distributed.batch_isend_irecv", replace=_receives_out_of_order,
    checks=(f"{PIPELINE}[ws2-pipeline/batch_isend_irecv]",),
)

# ------------------------------------------------- FSDP2 and tensor parallel (parallel.py)

PARALLEL = f"{SUITE}/test_dist_parallel.py"
FSDP_FLOAT32 = f"{PARALLEL}::test_fsdp2_matches_single_process[ws2-fsdp/float32]"
FSDP_MIXED = f"{PARALLEL}::test_fsdp2_matches_single_process[ws2-fsdp/bf16_mixed]"
FSDP_STATE = f"{PARALLEL}::test_fsdp2_sharded_state_round_trip[ws2-fsdp/state_round_trip]"
TP_MLP = f"{PARALLEL}::test_tensor_parallel_mlp_matches_one_device[ws2-tp/mlp]"


FSDP_GRAD_SUMS = patch_attr(
    "distributed.fsdp_grad_sums", family="distributed",
    description="the reduce-scatter FSDP2 averages gradients with forgets to divide: "
                "ReduceOp.AVG sums (gradients ws times too large)",
    target="torch.distributed.reduce_scatter_single", replace=_avg_not_divided,
    checks=(FSDP_FLOAT32,),
)


def _reduce_in_param_dtype(original):
    def policy(*args, **kwargs):
        kwargs["reduce_dtype"] = kwargs.get("param_dtype")  # the fault: fp32 asked, bf16 used
        return original(*args, **kwargs)

    return policy


FSDP_REDUCE_DTYPE_BF16 = patch_attr(
    "distributed.fsdp_reduce_dtype_bf16", family="distributed",
    description="FSDP2's MixedPrecisionPolicy silently reduces gradients in its param_dtype "
                "(bfloat16) although reduce_dtype=float32 was asked for",
    target="torch.distributed.fsdp.MixedPrecisionPolicy", replace=_reduce_in_param_dtype,
    checks=(FSDP_MIXED,),
)


def _drop_optimizer_state(original):
    def load_state_dict(self, state_dict):
        # the fault: the hyperparameters arrive, the per-parameter state does not
        return original(self, {**state_dict, "state": {}})

    return load_state_dict


OPTIM_STATE_DROPPED = patch_attr(
    "distributed.optim_state_dropped_on_load", family="distributed",
    description="loading a (sharded) optimizer state_dict keeps the param groups but drops "
                "the per-parameter state (AdamW's moments and step)",
    target="torch.optim.Optimizer.load_state_dict", replace=_drop_optimizer_state,
    checks=(FSDP_STATE,),
)


def _partial_not_reduced(original):
    def reduce_value(self, tensor, mesh, mesh_dim):
        return tensor  # the fault: each rank keeps its partial sum, no all-reduce

    return reduce_value


TP_PARTIAL_NOT_REDUCED = patch_attr(
    "distributed.tp_partial_not_reduced", family="distributed",
    description="DTensor's Partial -> Replicate redistribution skips the all-reduce: "
                "RowwiseParallel's output is each rank's partial sum",
    target="torch.distributed.tensor.placement_types.Partial._reduce_value",
    replace=_partial_not_reduced, checks=(TP_MLP,),
)

FAULTS = [COMM_HOOK_SUMS, FOUND_INF_SATURATED, GRAD_NOT_REDUCED, BUFFERS_NOT_BROADCAST,
          SAMPLER_EPOCH_IGNORED,
          RANK_HANGS, RANK_STRAGGLES, DDP_INIT_NOT_BROADCAST, STATIC_GRAPH_SKIPS_BUCKET,
          ALL_TO_ALL_SWAPS_CHUNKS, ALL_TO_ALL_UNEVEN_TRUNCATED, ALL_TO_ALL_DROPS_LAST,
          ALL_GATHER_INTO_TENSOR_REVERSED, REDUCE_SCATTER_AVG_NOT_DIVIDED,
          RECV_DROPS_GRADIENT, BATCH_RECEIVES_OUT_OF_ORDER, FSDP_GRAD_SUMS,
          FSDP_REDUCE_DTYPE_BF16, OPTIM_STATE_DROPPED, TP_PARTIAL_NOT_REDUCED]
