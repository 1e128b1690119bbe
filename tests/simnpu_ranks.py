"""Rank programs for tests/test_simnpu.py (the ranks import them: tests/ on PYTHONPATH)."""

from __future__ import annotations

import datetime as _dt
import time


def late_first_collective(ctx, late: float = 3.0, timeout: float = 1.0):
    """The last rank reaches a new group's *first* all_reduce ``late`` seconds after the
    others, the group's timeout being ``timeout``: HCCL creates the communicator inside that
    collective and waits there for HCCL_CONNECT_TIMEOUT (Note [The simulated HCCL])."""
    import torch
    import torch.distributed as dist

    group = dist.new_group(backend=ctx.backend, timeout=_dt.timedelta(seconds=timeout))
    if ctx.rank == ctx.world_size - 1:
        time.sleep(late)
    t = torch.ones(2, device=ctx.torch_device)
    began = time.time()
    dist.all_reduce(t, group=group)
    return {"sum": float(t.cpu()[0]), "waited": time.time() - began}
