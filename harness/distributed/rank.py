"""The rank program: make the device current, join the group, run the sub-checks.

A rank makes its device current first (``set_device(local_rank)``), then joins the
process group (``Device.dist_backend``: gloo, nccl, hccl, xccl), then runs its
sub-checks in order, writing ``rank<N>.json`` around each (Note [Rank results on disk]
in :mod:`harness.distributed.rankfiles`). The DUT work inside a check runs in
``ctx.device.scope()`` so injected faults apply (faults reach the ranks through the
``HARNESS_FAULTS`` environment variable).

Note [Rank exit]
~~~~~~~~~~~~~~~~
No ``destroy_process_group``: a rank tearing gloo down while a peer is still shutting
down sometimes aborts in C++ ("terminate called without an active exception", SIGABRT)
after every result was written; ``python -m harness.distributed`` leaves with
``os._exit`` once the files are flushed, so the exit code is the checks' verdict.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from harness.distributed.rankfiles import RankWriter, format_summary, jsonable
from harness.distributed.subcheck import SubCheck


@dataclasses.dataclass
class RankContext:
    """What a sub-check gets: where it runs, and the DUT (``device``) for ``scope()``."""

    rank: int
    world_size: int
    local_rank: int
    device: Any  # harness.device.Device, made current before the group was joined
    backend: str
    seed: int = 0
    writer: Any = None  # the rank's RankWriter (None outside a launched rank)

    def note(self, **fields) -> None:
        """Write ``fields`` into this rank's file under the running sub-check's name, at
        once: what a rank that the backend's watchdog then ends leaves behind (when it
        entered a collective) for the judge to read (``CheckOutcome.notes``)."""
        if self.writer is None:
            return
        current = self.writer.data.get("current") or "<none>"
        self.writer.data.setdefault("notes", {}).setdefault(current, {}).update(
            json.loads(json.dumps(fields, default=jsonable)))
        self.writer.update()

    @property
    def torch_device(self):
        return self.device.torch_device


def die_with_parent(parent_pid: int) -> None:
    """Linux: have the kernel SIGKILL this rank when the launcher dies
    (Note [No process outlives its test] in :mod:`harness.distributed.launcher`)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - best effort
        return
    if os.getppid() != parent_pid:  # the launcher died before prctl took effect
        os._exit(1)


def _env_int(name: str, default: Optional[int] = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise SystemExit(f"harness.distributed: {name} is not set; run me under torchrun "
                             "or through harness.distributed.launch()")
        return default
    return int(value)


def _error(exc: BaseException) -> dict:
    return {"ok": False, "type": type(exc).__name__, "message": str(exc),
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))}


# Note [A failed collective outlives its error]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# gloo runs a collective on a worker thread, which completes the work (the caller's
# ``wait`` returns, or raises the work's error) and only then clears its in-progress slot
# (``ProcessGroupGloo::runLoop``). ``dist.barrier()`` first waits on every work still in
# those slots (``AsyncBarrierWork`` waits on its ``priorWork``), so a barrier entered in that
# gap re-raises the previous collective's error and never takes part: seen once on an
# Intel Xeon in the test command, where rank 0 went from a collective that gloo cannot run
# (``all_reduce`` AVG of int64, recorded ``unsupported``) straight into the barrier check,
# which then failed with that collective's "result type Float can't be cast to ... Long",
# and every later check of the launch with it (rank 1 still waited in its barrier). A rank
# whose check raised waits SETTLE_AFTER_ERROR before the next check: the gap is a
# mutex away, and only the ~20 unsupported cases of a launch pay it. (Two gloo ranks
# alternating that all_reduce and a barrier, torch 2.13 on the same Xeon: the barrier
# failed at the 218th of 300 rounds without the wait, in none of 300 with it.)
SETTLE_AFTER_ERROR = 0.02


def run_rank(checks: Sequence[SubCheck], out: Union[str, Path], *, device_type: str = "auto",
             seed: int = 0, timeout: float = 120.0, gather: bool = False) -> int:
    """The rank program: join the group, run every sub-check, write results (env:// init).

    Reads ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT`` as
    torchrun sets them. With ``gather``, rank 0 also collects every rank's results into
    ``out/summary.json`` (multi-node: the other nodes' files are on other hosts).
    Returns the process exit code: 0 when every sub-check returned on this rank.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", rank)
    # Note [Fallbacks on every rank] in harness/distributed/launcher.py: torch_npu prints
    # its CPU-fallback warning only where RANK is unset or 0; the group gets the rank
    # explicitly, so RANK goes before torch (and torch_npu) load
    os.environ["HARNESS_RANK"] = os.environ.pop("RANK")
    writer = RankWriter(out, rank, world_size)
    writer.update()
    import faulthandler

    stack_file = open(out / f"rank{rank}.stack", "w")  # noqa: SIM115 - lives as long as the rank
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)

    import torch
    import torch.distributed as dist

    from harness.device import Device, select

    try:
        if device_type == "auto":
            found, _ = select("auto", index=local_rank)
            device = Device(found.type, local_rank % max(found.count, 1), found.count)
        else:
            device = select(device_type, index=local_rank)[0]
            device = Device(device.type, local_rank if device.is_accelerator else 0, device.count)
        device.set_current()  # before the group and before any model (docs/design.md: Distributed)
        backend = device.dist_backend
        dist.init_process_group(backend=backend, rank=rank, world_size=world_size,
                                timeout=_dt.timedelta(seconds=max(timeout, 30.0)))
    except Exception as exc:  # noqa: BLE001 - reported per rank, never swallowed
        writer.update(state="crashed", results={"<init>": _error(exc)})
        traceback.print_exc()
        return 2
    ctx = RankContext(rank, world_size, local_rank, device, backend, seed, writer)
    writer.update(state="ready", backend=backend, device=str(device.torch_device))
    all_ok = True
    for check in checks:
        writer.update(state="running", current=check.name)
        began = time.perf_counter()
        torch.manual_seed(seed)
        try:
            value = check.load()(ctx, **check.kwargs)
            result = {"ok": True, "value": json.loads(json.dumps(value, default=jsonable))}
        except Exception as exc:  # noqa: BLE001 - a check's exception is its result
            result = _error(exc)
            all_ok = False
            time.sleep(SETTLE_AFTER_ERROR)  # Note [A failed collective outlives its error]
        result["seconds"] = round(time.perf_counter() - began, 3)
        writer.data["results"][check.name] = result
        writer.update(current=None)
    writer.update(state="finished")
    if gather:
        gathered: list = [None] * world_size
        dist.all_gather_object(gathered, writer.data)
        if rank == 0:
            summary = {"world_size": world_size, "backend": backend, "ranks": gathered}
            (out / "summary.json").write_text(json.dumps(summary, indent=1))
            print(format_summary(summary), flush=True)
        dist.barrier()  # nobody leaves while a peer still needs its half of the gather
    return 0 if all_ok else 1  # Note [Rank exit]
