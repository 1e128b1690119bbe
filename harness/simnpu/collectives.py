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
import re
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


EXEC_TIMEOUT_DEFAULT = 1836
"""torch_npu's ``defaultExecTimeout`` (ProcessGroupHCCL.cpp), HCCL's documented default."""
CONNECT_TIMEOUT_DEFAULT = 120
"""HCCL_CONNECT_TIMEOUT's documented default (seconds)."""
WATCHDOG_EXTRA_S = 1800
"""With the process group's default timeout torch_npu sets the watchdog's to
HCCL_EXEC_TIMEOUT + 1800 s (ProcessGroupHCCL.cpp)."""
TEARDOWN = ("Some HCCL operations have failed or timed out. Due to the asynchronous nature "
            "of ASCEND kernels, subsequent NPU operations might run on corrupted/incomplete "
            "data.", "To avoid data inconsistency, we are taking the entire process down.")
"""What torch_npu's ``WorkHCCL::handleException`` logs before the watchdog ends the process
(the words the harness recognises a watchdog teardown by)."""


def _int_env(name: str) -> Optional[int]:
    """An integer variable as torch_npu reads it (``strtol``: leading digits; None unset)."""
    text = os.environ.get(name)
    if text is None:
        return None
    digits = text.strip()
    sign = -1 if digits.startswith("-") else 1
    digits = digits.lstrip("+-")
    head = len(digits) - len(digits.lstrip("0123456789"))
    return sign * int(digits[:head]) if head else 0


def exec_timeout_s() -> int:
    """HCCL_EXEC_TIMEOUT as torch_npu reads it (``GetHCCLExecTimeout``): unset or
    negative -> the default 1836 s; 0 -> never."""
    value = _int_env("HCCL_EXEC_TIMEOUT")
    return EXEC_TIMEOUT_DEFAULT if value is None or value < 0 else value


def connect_timeout_s() -> int:
    """HCCL_CONNECT_TIMEOUT (seconds; default 120)."""
    value = _int_env("HCCL_CONNECT_TIMEOUT")
    return CONNECT_TIMEOUT_DEFAULT if not value or value < 0 else value


def async_error_handling() -> int:
    """TORCH_HCCL_ASYNC_ERROR_HANDLING (or the deprecated HCCL_ASYNC_ERROR_HANDLING):
    default 1 (TearDown: a failed or timed-out work ends the process); 0: no handling."""
    value = _int_env("TORCH_HCCL_ASYNC_ERROR_HANDLING")
    if value is None:
        value = _int_env("HCCL_ASYNC_ERROR_HANDLING")
    return 1 if value is None else value


def exec_timeout(timeout: _dt.timedelta) -> _dt.timedelta:
    """How long one collective may wait for its peers.

    Plain mode: the group's timeout, shortened to ``HCCL_EXEC_TIMEOUT`` when that is set.
    Fidelity mode (Note [The simulated HCCL]): the shorter of the watchdog's timeout (the
    group's; HCCL_EXEC_TIMEOUT + 1800 s when the group kept torch's default) and
    HCCL_EXEC_TIMEOUT, which 0 turns off."""
    if simnpu.fidelity():
        watchdog = timeout
        seconds = exec_timeout_s()
        if timeout == dist.default_pg_timeout:
            watchdog = (_dt.timedelta(days=365) if seconds == 0
                        else _dt.timedelta(seconds=seconds + WATCHDOG_EXTRA_S))
        return watchdog if seconds == 0 else min(watchdog, _dt.timedelta(seconds=seconds))
    text = os.environ.get("HCCL_EXEC_TIMEOUT", "").strip()
    if not text:
        return timeout
    try:
        seconds = float(text)
    except ValueError as exc:
        raise ValueError(f"HCCL_EXEC_TIMEOUT={text!r} is not a number of seconds") from exc
    return min(timeout, _dt.timedelta(seconds=seconds)) if seconds > 0 else timeout


_WORK_FAILED = re.compile(r"timed out|timeout|connection (closed|reset)|broken pipe|"
                          r"peer|closed by", re.IGNORECASE)
"""What gloo says when a started collective failed in HCCL's sense (it waited too long, or a
peer left): the errors torch_npu's watchdog acts on (Note [The simulated HCCL])."""


def npu_warn(text: str) -> None:
    """A torch_npu warning as ``TORCH_NPU_WARN`` prints it: a line on stderr, only where
    RANK is unset or 0 and TORCH_NPU_WARNING_DISABLE is not 1 (Note [Fallback warnings
    reach stderr only] in simnpu.cpp)."""
    disabled = _int_env("TORCH_NPU_WARNING_DISABLE")
    if disabled is None:
        disabled = _int_env("TORCH_NPU_DISABLED_WARNING")
    rank = _int_env("RANK")
    if disabled == 1 or rank not in (None, 0):
        return
    os.write(2, f"[W SimNPU] Warning: {text}\n".encode())


# Note [The simulated HCCL]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# In fidelity mode the group follows torch_npu's ProcessGroupHCCL (docs/simnpu.md cites
# the commit) where the harness depends on it:
# - the communicator is created lazily, inside the group's first collective, before the
#   work and its timer exist (``collective()``: getHCCLComm(...) then initWork(...)): the
#   ranks meet there for up to HCCL_CONNECT_TIMEOUT (default 120 s), whatever the group's
#   timeout, so a rank late at a group's *first* collective is waited for, not timed out;
# - a started collective waits for its peers for the shorter of the watchdog's timeout and
#   HCCL_EXEC_TIMEOUT (0: never), as exec_timeout() computes;
# - a work that fails or times out ends the process (the watchdog rethrows it:
#   TORCH_HCCL_ASYNC_ERROR_HANDLING=1, the default): the simulator logs torch_npu's words
#   (TEARDOWN) on stderr and aborts (SIGABRT, as an exception escaping a thread does);
#   with TORCH_HCCL_ASYNC_ERROR_HANDLING=0 the caller gets the error instead;
# - torch_npu's warning when the group's timeout is not larger than HCCL_EXEC_TIMEOUT
#   ("The watchdog timeout ...ms(which is set by init_process_group) is less than or equal
#   to HCCL execution timeout ...ms! The plog may not be recorded."), on rank 0's stderr.


class HostCollectives(dist.ProcessGroup):
    """The simulated ``hccl`` process group: gloo's collectives on host copies
    (Note [Collectives over host memory])."""

    def __init__(self, store, rank: int, size: int, timeout: _dt.timedelta) -> None:
        super().__init__(rank, size)
        self.timeout = exec_timeout(timeout)
        self.fidelity = simnpu.fidelity()
        self._store = store
        self._comm = True  # set up below; Note [The simulated HCCL]: made at first use
        self._seq = 0
        if self.fidelity and timeout != dist.default_pg_timeout and async_error_handling():
            exec_ms = exec_timeout_s() * 1000
            group_ms = int(timeout.total_seconds() * 1000)
            if exec_ms == 0:
                npu_warn("The HCCL execution timeout was set to 0(never timeout), so it is "
                         f"bigger than watchdog timeout {group_ms}ms which is set by "
                         "init_process_group! The plog may not be recorded. You can disable "
                         "watchdog by 'export TORCH_HCCL_ASYNC_ERROR_HANDLING=0'.")
            elif group_ms <= exec_ms:
                npu_warn(f"The watchdog timeout {group_ms}ms(which is set by "
                         "init_process_group) is less than or equal to HCCL execution "
                         f"timeout {exec_ms}ms! The plog may not be recorded.")
        self.gloo = dist.ProcessGroupGloo(store, rank, size, self.timeout)
        # Note [A name for the group]: a Python process group has a name (DeviceMesh,
        # FSDP2 and DTensor's functional collectives find groups by name) only through
        # a registered backend; the collectives themselves stay this class's methods.
        for device in self._device_types:
            self._register_backend(device, dist.ProcessGroup.BackendType.CUSTOM, self.gloo)
        if hasattr(self, "_set_default_backend"):  # torch 2.15's init_process_group asks
            # the group's default backend (its flight recorder): the one registered above
            self._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        self._comm = not self.fidelity

    def __getattribute__(self, name):
        # every collective goes through ``self.gloo``: the communicator is made first
        if name == "gloo" and not object.__getattribute__(self, "_comm"):
            object.__getattribute__(self, "_connect")()
        return object.__getattribute__(self, name)

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND

    @property
    def _device_types(self):
        return [torch.device(simnpu.DEVICE_TYPE), torch.device("cpu")]

    def _connect(self) -> None:
        """The lazy communicator of Note [The simulated HCCL]: every rank of the group
        meets here at its first collective, for up to HCCL_CONNECT_TIMEOUT."""
        if self._comm:
            return
        limit = connect_timeout_s()
        self._store.set(f"simnpu_hccl_comm/{self.rank()}", "1")
        keys = [f"simnpu_hccl_comm/{r}" for r in range(self.size())]
        try:
            self._store.wait(keys, _dt.timedelta(seconds=limit))
        except RuntimeError as exc:  # raised in the caller: no work exists yet
            raise RuntimeError(f"HCCL communicator init of rank {self.rank()} timed out after "
                               f"HCCL_CONNECT_TIMEOUT={limit} s: not every rank of the group "
                               f"reached its first collective ({exc}) [SimNPU]") from None
        self._comm = True

    def _wait(self, work) -> None:
        """Wait for a started work; in fidelity mode a failure or timeout ends the process
        as torch_npu's watchdog does (Note [The simulated HCCL])."""
        self._seq += 1
        try:
            work.wait()
        except RuntimeError as exc:
            # a refused argument (gloo's dtype checks) is HCCL's synchronous error, raised
            # to the caller; a timeout, or a peer gone, is a failed work: the watchdog's
            if (not self.fidelity or not async_error_handling()
                    or not _WORK_FAILED.search(str(exc))):
                raise
            ms = int(self.timeout.total_seconds() * 1000)
            os.write(2, (f"[E SimNPU] [Rank {self.rank()}] Watchdog caught collective operation "
                         f"timeout: WorkHCCL(SeqNum={self._seq}, Timeout(ms)={ms}) failed: "
                         f"{' '.join(str(exc).split())[:300]}\n"
                         + "".join(f"[E SimNPU] {line}\n" for line in TEARDOWN)).encode())
            os.abort()

    def _run(self, work, dst, src):
        self._wait(work)
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
        self._wait(work)
        return Done(tensors)

    def recv(self, tensors, src: int, tag: int = 0):
        hosts = _hosts(tensors)
        return self._run(self.gloo.recv(hosts, src, tag), tensors, hosts)

    def barrier(self, opts=None):
        opts = opts if opts is not None else dist.BarrierOptions()
        self._wait(self.gloo.barrier(opts))
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
