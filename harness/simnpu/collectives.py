"""SimNPU's collective backend: ``hccl`` for simulated npu tensors, computed by gloo.

A real torch_npu registers ``hccl`` with ``torch.distributed``; the simulator has no
HCCL, so :func:`register` registers a process group under the npu row's
``dist_backend`` name (``hccl``, :data:`harness.kinds.KINDS`) for the ``npu`` device
whose every collective is gloo's, over host memory. With it the distributed family's
npu path runs for real on a CPU-only machine: the backend chosen from the device row,
one ``npu:N`` device per rank, ``init_process_group("hccl")``, DDP with ``device_ids``.

Note [Collectives over host memory]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
SimNPU tensors live in host memory, but gloo accepts CPU (and CUDA) tensors only, and
there is no way to hand it a PrivateUse1 tensor as a CPU one without a copy. So
:class:`HostCollectives` copies each npu tensor to the CPU, runs gloo's collective on
the copies, waits, and copies the results back into the npu tensors; CPU tensors go to
gloo as they are. Every call is complete when it returns, so its :class:`Done` work is
already finished and its future holds the caller's own (npu) tensors: DDP's reducer
builds its gradient views on that value. What gloo refuses (``ReduceOp.AVG``, some
dtypes) it refuses here too, with gloo's words: the simulator computes nothing itself.

Timeouts are gloo's: the group's ``timeout`` (``init_process_group(timeout=)``,
``new_group(timeout=)``) bounds each collective. A real HCCL also stops at
``HCCL_EXEC_TIMEOUT``; the simulator takes the shorter of the two when the variable is
set (seconds), so a check of that limit runs on it.

Note [A name for the group]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
DeviceMesh, FSDP2 and DTensor's functional collectives find a process group by its name,
and torch gives a process group a name only through a backend registered on it (a Python
``ProcessGroup`` without one raises "ProcessGroup name not set"). A Python class cannot
be a C++ backend, so :class:`HostCollectives` registers its gloo group as the backend of
both its device types: what torch calls by name on the group still reaches this class's
methods (each one copies through the host), and every collective torch has a Python
name for is one of them, the ``*_single`` ones (torch >= 2.13: FSDP2's all-gather and
reduce-scatter) included. A call that reached the gloo backend with npu tensors anyway
fails loudly ("ProcessGroupGloo::allgather: unsupported device type npu"), never wrong.

Registered only by :func:`harness.simnpu.load` (``HARNESS_SIMNPU=1`` and no real
torch_npu), never where a real ``hccl`` exists.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import os
from typing import Optional

import torch
import torch.distributed as dist

from harness import simnpu

BACKEND = "hccl"
"""The name registered; :func:`register` checks it is the npu row's ``dist_backend``."""


class Done(dist.Work):
    """A finished collective: ``wait`` returns at once, the future holds ``result``."""

    def __init__(self, result) -> None:
        super().__init__()
        self._future = torch.futures.Future()
        self._future.set_result(result)

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self):
        return self._future


def _host(tensor: torch.Tensor) -> torch.Tensor:
    return tensor if tensor.device.type == "cpu" else tensor.detach().cpu()


def _hosts(tensors):
    return [_host(t) for t in tensors]


def _back(dst, src) -> None:
    """Copy gloo's results back into the caller's npu tensors (CPU ones were used as is)."""
    if isinstance(dst, torch.Tensor):
        if dst is not src:
            with torch.no_grad():
                dst.copy_(src)
        return
    for d, s in zip(dst, src):
        _back(d, s)


def exec_timeout(timeout: _dt.timedelta) -> _dt.timedelta:
    """The group's timeout, shortened to ``HCCL_EXEC_TIMEOUT`` seconds when that is set."""
    text = os.environ.get("HCCL_EXEC_TIMEOUT", "").strip()
    if not text:
        return timeout
    try:
        seconds = float(text)
    except ValueError as exc:
        raise ValueError(f"HCCL_EXEC_TIMEOUT={text!r} is not a number of seconds") from exc
    return min(timeout, _dt.timedelta(seconds=seconds)) if seconds > 0 else timeout


class HostCollectives(dist.ProcessGroup):
    """The simulated ``hccl`` process group: gloo's collectives on host copies
    (Note [Collectives over host memory])."""

    def __init__(self, store, rank: int, size: int, timeout: _dt.timedelta) -> None:
        super().__init__(rank, size)
        self.timeout = exec_timeout(timeout)
        self.gloo = dist.ProcessGroupGloo(store, rank, size, self.timeout)
        # Note [A name for the group]: a Python process group has a name (DeviceMesh,
        # FSDP2 and DTensor's functional collectives find groups by name) only through
        # a registered backend; the collectives themselves stay this class's methods.
        for device in self._device_types:
            self._register_backend(device, dist.ProcessGroup.BackendType.CUSTOM, self.gloo)
        if hasattr(self, "_set_default_backend"):  # torch 2.15's init_process_group asks
            # the group's default backend (its flight recorder): the one registered above
            self._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND

    @property
    def _device_types(self):
        return [torch.device(simnpu.DEVICE_TYPE), torch.device("cpu")]

    def _run(self, work, dst, src):
        work.wait()
        _back(dst, src)
        return Done(dst)

    def allreduce(self, tensors, opts=None):
        hosts = _hosts(tensors)
        opts = opts if opts is not None else dist.AllreduceOptions()
        return self._run(self.gloo.allreduce(hosts, opts), tensors, hosts)

    def allreduce_coalesced(self, tensors, opts=None):
        hosts = _hosts(tensors)
        opts = opts if opts is not None else dist.AllreduceCoalescedOptions()
        return self._run(self.gloo.allreduce_coalesced(hosts, opts), tensors, hosts)

    def broadcast(self, tensors, opts=None):
        hosts = _hosts(tensors)
        opts = opts if opts is not None else dist.BroadcastOptions()
        return self._run(self.gloo.broadcast(hosts, opts), tensors, hosts)

    def reduce(self, tensors, opts=None):
        hosts = _hosts(tensors)
        opts = opts if opts is not None else dist.ReduceOptions()
        return self._run(self.gloo.reduce(hosts, opts), tensors, hosts)

    def allgather(self, output_lists, inputs, opts=None):
        outs, ins = [_hosts(o) for o in output_lists], _hosts(inputs)
        opts = opts if opts is not None else dist.AllgatherOptions()
        return self._run(self.gloo.allgather(outs, ins, opts), output_lists, outs)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        out = _host(output)
        opts = opts if opts is not None else dist.AllgatherOptions()
        return self._run(self.gloo._allgather_base(out, _host(input), opts), output, out)

    def all_gather_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        """torch >= 2.13's all_gather_single (all_gather_into_tensor calls it): asks the
        group itself, not a backend per device type, so the group answers."""
        return self._allgather_base(output, input, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        # gloo has no such call: one _allgather_base per pair, in the same order on every
        # rank (what gloo's own coalescing does)
        for output, input_ in zip(outputs, inputs):
            self._allgather_base(output, input_, opts)
        return Done(outputs)

    # the coalesced ``*_single`` calls (FSDP2, DTensor and the functional collectives use
    # them); without them the call would reach the registered gloo backend with npu
    # tensors (Note [A name for the group])
    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        outs, ins = [_hosts(o) for o in output_lists], _hosts(inputs)
        opts = opts if opts is not None else dist.AllgatherOptions()
        return self._run(self.gloo.allgather_coalesced(outs, ins, opts), output_lists, outs)

    def gather(self, output_lists, inputs, opts=None):
        outs, ins = [_hosts(o) for o in output_lists], _hosts(inputs)
        opts = opts if opts is not None else dist.GatherOptions()
        return self._run(self.gloo.gather(outs, ins, opts), output_lists, outs)

    def scatter(self, outputs, input_lists, opts=None):
        outs = _hosts(outputs)
        opts = opts if opts is not None else dist.ScatterOptions()
        return self._run(self.gloo.scatter(outs, [_hosts(i) for i in input_lists], opts),
                         outputs, outs)

    def reduce_scatter(self, outputs, input_lists, opts=None):
        outs = _hosts(outputs)
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        return self._run(self.gloo.reduce_scatter(outs, [_hosts(i) for i in input_lists], opts),
                         outputs, outs)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's name
        out = _host(output)
        opts = opts if opts is not None else dist.ReduceScatterOptions()
        return self._run(self.gloo._reduce_scatter_base(out, _host(input), opts), output, out)

    def reduce_scatter_single(self, output, input, opts=None):  # noqa: A002 - torch's name
        """torch >= 2.13's reduce_scatter_single (as for :meth:`all_gather_single`)."""
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for output, input_ in zip(outputs, inputs):
            self._reduce_scatter_base(output, input_, opts)
        return Done(outputs)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                      opts=None):
        out = _host(output)
        opts = opts if opts is not None else dist.AllToAllOptions()
        return self._run(self.gloo.alltoall_base(out, _host(input), output_split_sizes,
                                                 input_split_sizes, opts), output, out)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                          opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, outputs, inputs, opts=None):
        outs = _hosts(outputs)
        opts = opts if opts is not None else dist.AllToAllOptions()
        return self._run(self.gloo.alltoall(outs, _hosts(inputs), opts), outputs, outs)

    def send(self, tensors, dst: int, tag: int = 0):
        work = self.gloo.send(_hosts(tensors), dst, tag)
        work.wait()
        return Done(tensors)

    def recv(self, tensors, src: int, tag: int = 0):
        hosts = _hosts(tensors)
        return self._run(self.gloo.recv(hosts, src, tag), tensors, hosts)

    def barrier(self, opts=None):
        opts = opts if opts is not None else dist.BarrierOptions()
        self.gloo.barrier(opts).wait()
        return Done([])


def create(store, rank: int, size: int, timeout: _dt.timedelta) -> HostCollectives:
    """The creator ``torch.distributed`` calls for ``init_process_group("hccl")``."""
    return HostCollectives(store, rank, size, timeout)


def registered() -> bool:
    """Whether ``hccl`` is known to ``torch.distributed`` in this process (by anyone)."""
    return BACKEND.upper() in getattr(dist.Backend, "_plugins", {})


def register(dist_backend: Optional[str] = None) -> None:
    """Register :func:`create` as ``hccl`` for the ``npu`` device; idempotent.

    ``devices`` is passed where ``Backend.register_backend`` takes it (torch >= 2.1 has
    it; an older one maps backends to devices by name only).
    """
    name = dist_backend or BACKEND
    if name != BACKEND:
        raise ValueError(f"the npu row's dist_backend is {name!r}; SimNPU provides {BACKEND!r}")
    if not dist.is_available() or registered():
        return
    kwargs = {}
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        kwargs["devices"] = [simnpu.DEVICE_TYPE, "cpu"]
    dist.Backend.register_backend(BACKEND, create, **kwargs)
