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
SAMPLER = (f"{SUITE}/test_dist_sampler.py::"
           "test_distributed_sampler_shards[ws2-sampler/drop_last=False]")
SKEW_WITHIN = (f"{SUITE}/test_dist_skew.py::"
               "test_rank_skew_against_the_timeout[ws2-skew/within]")
ALL_REDUCE = (f"{SUITE}/test_dist_collectives.py::"
              "test_collective_matches_numpy[ws2-all_reduce_sum/float32]")


# ----------------------------------------------------------- DDP communication hooks

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


def _ddp_with_hook(make_state, hook):
    """Activate: every DDP built in the DUT scope registers ``hook`` as its comm hook."""

    def activate(_device):
        from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: N817

        original = DDP.__init__

        def init(self, *args, **kwargs):
            original(self, *args, **kwargs)
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

FAULTS = [COMM_HOOK_SUMS, GRAD_NOT_REDUCED, BUFFERS_NOT_BROADCAST, SAMPLER_EPOCH_IGNORED,
          RANK_HANGS, RANK_STRAGGLES]
