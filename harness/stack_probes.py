"""Probes of the stack: does this torch have a known defect? (Note [Where a stack defect
is] in :mod:`harness.known_failures`.)

Each probe is a small experiment run in this process on the stack itself, never on the
device under test's scope (a fault acts only inside ``device.scope()``, so a probe sees
the stack as it is, not the fault). It returns True when the defect is present, False
when the stack behaves, and None when it cannot tell (the API is absent). Results are
cached per process; ``PROBES`` is the table known failures name.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import sys
import threading
from typing import Callable, Optional


@contextlib.contextmanager
def _quiet_fds():
    """File descriptors 1 and 2 on /dev/null while a probe's C++ logs its connections."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            os.dup2(null.fileno(), 2)
            yield
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)


def _gloo_reduce_scatter_avg_sums() -> Optional[bool]:
    """Whether gloo's ``reduce_scatter_tensor`` with ``ReduceOp.AVG`` returns the sum: two
    ranks in threads of this process on a ``HashStore``, each contributing ``rank + 1``."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not hasattr(dist, "ProcessGroupGloo"):
        return None
    store, got, errors, groups = dist.HashStore(), {}, [], []

    def rank(r: int) -> None:
        try:
            group = dist.ProcessGroupGloo(store, r, 2, datetime.timedelta(seconds=20))
            # kept alive until both ranks are joined: a rank's group destroyed at its
            # thread's end while the other rank is still in the collective aborted the
            # process in gloo (torch 2.4.1, once in five CI runs, at collection)
            groups.append(group)
            opts = dist.ReduceScatterOptions()
            opts.reduceOp = dist.ReduceOp.AVG
            out = torch.empty(1)
            group._reduce_scatter_base(out, torch.full((2,), float(r + 1)), opts).wait()
            got[r] = float(out[0])
        except Exception as exc:  # noqa: BLE001 - an absent or refusing API: cannot tell
            # as text: the exception's traceback holds this frame, and with it the group,
            # in a reference cycle that a later collection would free (see below)
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(2)]
    with _quiet_fds():  # gloo's "[Gloo] Rank 1 is connected to 1 peer ranks" lines
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    if not any(thread.is_alive() for thread in threads):
        # both ranks are done with them: freed here, by this thread, not by a garbage
        # collection later, when other threads may run (torch 2.1.2 aborted once in a
        # collection that freed them: "pybind11_object_dealloc(): Tried to deallocate
        # unregistered instance!")
        groups.clear()
    if errors or len(got) != 2:
        return None
    return all(abs(value - 3.0) < 1e-6 for value in got.values())  # the mean is 1.5


def _fsdp2_on_cpu() -> Optional[bool]:
    """Whether FSDP2 runs on the CPU here: the check's own test of its API and of the CPU
    stream it waits on (:func:`harness.distributed.parallel.fsdp_api`)."""
    from harness.device import Unsupported
    from harness.distributed.parallel import fsdp_api

    try:
        fsdp_api("cpu")
    except Unsupported:
        return False
    return True


def _fused_sgd_skips_16bit_updates() -> Optional[bool]:
    """Whether the CPU's fused SGD gets a 16-bit parameter's update wrong (pytorch#191763,
    fixed by #192545: the whole SIMD blocks of an fp16 or bf16 parameter are left as they
    were, and its momentum is read through the wrong type): two steps with momentum on
    64 elements of each dtype, whose exact values both dtypes hold (p = -0.5, then -1.25).
    None where fused SGD does not run on the CPU (torch < 2.4 refuses it)."""
    import torch

    wrong = False
    for dtype in (torch.float16, torch.bfloat16):
        param = torch.zeros(64, dtype=dtype, requires_grad=True)
        try:
            opt = torch.optim.SGD([param], lr=0.5, momentum=0.5, fused=True)
            for _ in range(2):
                param.grad = torch.ones(64, dtype=dtype)
                opt.step()
        except (RuntimeError, TypeError, ValueError, NotImplementedError):
            return None
        wrong |= not bool((param.detach() == -1.25).all())
    return wrong


def _simnpu_runs_host_kernels() -> Optional[bool]:
    """Whether the npu here is the simulator (:mod:`harness.simnpu`), whose kernels are the
    host CPU's (its boxed fallback runs them on the device's memory): a defect of a CPU
    kernel is then the simulated NPU's too, and never a real Ascend's."""
    from harness import simnpu

    return simnpu.is_loaded()


PROBES: dict[str, Callable[[], Optional[bool]]] = {
    "gloo_reduce_scatter_avg_sums": _gloo_reduce_scatter_avg_sums,
    "fsdp2_on_cpu": _fsdp2_on_cpu,
    "fused_sgd_skips_16bit_updates": _fused_sgd_skips_16bit_updates,
    "simnpu_runs_host_kernels": _simnpu_runs_host_kernels,
}
"""Probe name -> the experiment (True: the defect or feature is present)."""


@functools.cache
def result(name: str) -> Optional[bool]:
    """The probe's answer in this process (run once)."""
    return PROBES[name]()


def present(name: str) -> bool:
    """Whether the probe found what it looks for (None, cannot tell, is no)."""
    return result(name) is True
