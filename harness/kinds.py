"""Device kinds as data: one row per device type holds everything vendor specific.

A :class:`Kind` row says how to find the device (its probe), what its software calls it
(dispatch key, autocast device type, collective backend), which versions define its stack,
which autocast dtypes it knows and prefers, what its CPU-fallback warnings and its
out-of-memory errors look like. :data:`KINDS` holds the rows in ``--device auto``'s
preference order. Everything else reads a row (:class:`harness.device.Device` through
``device.kind``) or goes through the generic ``torch.<type>`` module, so adding a device
type is adding a row here plus the probe function it names (docs/DEVELOPING.md).

This module imports nothing (no torch): ``python -m harness doctor`` builds its
``--device`` choices from it where ``import torch`` itself fails. So a row names things
rather than holding them: dtypes by name (:mod:`harness.dtypes`), patterns as regular
expression text, the probe as the name of a function in :mod:`harness.device`.

Note [Fallback and OOM texts are per device]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A backend without a kernel for an op may run the CPU's kernel and warn (torch_npu, torch's
XPU/MPS/PrivateUse1 fallbacks: ``... is not currently supported on the NPU backend and will
fall back to run on the CPU``); a row's ``fallback_warning`` is that sentence as a regular
expression (:mod:`harness.fallback` adds the op name around it). Every row here speaks the
one wording torch and torch_npu use, the CUDA and CPU rows included: neither falls back,
but on them the harness's injected faults (which speak torch_npu's words, Note [DUT scope]
in :mod:`harness.device`) must still be seen. A vendor that words it otherwise gets its
own pattern in its row.

An out-of-memory is ``torch.OutOfMemoryError`` on current stacks (torch >= 2.5 for every
device; ``torch.cuda.OutOfMemoryError``, the same class, before). Older stacks raise a
plain ``RuntimeError`` that only its text identifies: torch_npu before its
``OutOfMemoryError`` raised ``RuntimeError("NPU out of memory. Tried to allocate 2.00 GiB
(NPU 0; ...)")``, MPS raises ``MPS backend out of memory``, and the CPU's allocator
``DefaultCPUAllocator: not enough memory``. A row's ``oom_message`` is that text;
:meth:`harness.device.Device.is_out_of_memory` applies it to RuntimeErrors only.
"""

from __future__ import annotations

import collections.abc
import dataclasses
from typing import Callable, Iterator, Optional, Union

CPU_FALLBACK_WARNING = r"fall\s*back\s+to\s+run\s+on\s+the\s+CPU"
"""The sentence torch and torch_npu warn with when an op runs on the host CPU (matched
case-insensitively, across line breaks)."""


@dataclasses.dataclass(frozen=True)
class Kind:
    """What differs between device types, as data (one row per type).

    Attributes:
        type: torch's device type (``torch.device("npu")``) and the ``--device`` value.
        probe: the function that finds the device and says why not (a
            :class:`harness.device.Probe`): the name of a function in
            :mod:`harness.device`, or the function itself.
        dist_backend: the collective backend ``torch.distributed`` uses on it.
        stack_prefix: the stack that versions it: a key of :data:`harness.stack.STACKS`
            (``cann``, ``cuda``, ``torch``), the first word of its ``stack_id``.
        display: the name a person reads (``--device`` help, the doctor).
        dispatch_key: the dispatch key its kernels register to (what "will it run" asks
            ``torch._C._dispatch_has_kernel_for_dispatch_key`` about).
        autocast_type: the ``device_type`` of ``torch.autocast`` and
            ``torch.amp.GradScaler`` on it.
        amp_dtypes: the autocast dtypes its autocast knows, by name, the preferred one
            (torch's default autocast dtype for the type) first.
        autocast_widens: whether autocast runs softmax, layer_norm, exp, sum and the like
            in fp32 (torch's CUDA lists, which NPU, XPU and MPS copy), or lets them follow
            their input (the CPU's lists); Note [Autocast policy by device type] in
            ``suites/amp/test_autocast.py``.
        legacy_amp: the module holding ``autocast`` and ``GradScaler`` for stacks whose
            ``torch.autocast`` / ``torch.amp.GradScaler`` refuse this type (None: none).
        fallback_warning: a warning saying an op ran on the host CPU, as a regular
            expression (Note [Fallback and OOM texts are per device]).
        fallback_on_stderr: whether that warning can be printed by C++ straight to file
            descriptor 2 (torch_npu's autograd threads), so captures watch it by default.
        oom_message: the text of a ``RuntimeError`` that means out of memory on stacks
            without ``torch.OutOfMemoryError``, as a regular expression (searched).
        simulator: the module that can stand in for this type without hardware
            (``harness.simnpu``), or None.
        compile_backends: the ``torch.compile`` backends graph mode uses on it, by name,
            the first one this stack registers wins (``aot_eager`` where none is:
            Note [Graph-mode backend] in :mod:`harness.graph.backends`).
    """

    type: str
    probe: Union[str, Callable]
    dist_backend: str
    stack_prefix: str
    display: str
    dispatch_key: str
    autocast_type: str
    amp_dtypes: tuple[str, ...]
    autocast_widens: bool
    legacy_amp: Optional[str]
    fallback_warning: str
    fallback_on_stderr: bool
    oom_message: str
    simulator: Optional[str] = None
    compile_backends: tuple[str, ...] = ("aot_eager",)

    @property
    def amp_dtype(self) -> str:
        """The preferred autocast dtype's name."""
        return self.amp_dtypes[0]


KINDS: dict[str, Kind] = {
    "npu": Kind(
        "npu", "_probe_npu", "hccl", "cann", display="Ascend NPU via torch_npu",
        dispatch_key="PrivateUse1",  # torch_npu registers its kernels to PrivateUse1
        autocast_type="npu", amp_dtypes=("float16", "bfloat16"), autocast_widens=True,
        legacy_amp="torch_npu.npu.amp", fallback_warning=CPU_FALLBACK_WARNING,
        fallback_on_stderr=True, oom_message=r"NPU out of memory",
        simulator="harness.simnpu", compile_backends=("npu",)),  # torchair's, via torch_npu
    "cuda": Kind(
        "cuda", "_probe_cuda", "nccl", "cuda", display="NVIDIA GPU, or AMD via ROCm",
        dispatch_key="CUDA", autocast_type="cuda", amp_dtypes=("float16", "bfloat16"),
        autocast_widens=True, legacy_amp="torch.cuda.amp",
        fallback_warning=CPU_FALLBACK_WARNING, fallback_on_stderr=False,
        oom_message=r"CUDA (error: )?out of memory", compile_backends=("inductor",)),
    "xpu": Kind(
        "xpu", "_probe_xpu", "xccl", "torch", display="Intel GPU", dispatch_key="XPU",
        autocast_type="xpu", amp_dtypes=("float16", "bfloat16"), autocast_widens=True,
        legacy_amp=None, fallback_warning=CPU_FALLBACK_WARNING, fallback_on_stderr=False,
        oom_message=r"XPU out of memory", compile_backends=("inductor",)),
    "mps": Kind(
        "mps", "_probe_mps", "gloo", "torch", display="Apple GPU", dispatch_key="MPS",
        autocast_type="mps", amp_dtypes=("float16", "bfloat16"), autocast_widens=True,
        legacy_amp=None, fallback_warning=CPU_FALLBACK_WARNING, fallback_on_stderr=False,
        oom_message=r"MPS backend out of memory"),
    "cpu": Kind(
        "cpu", "_probe_cpu", "gloo", "torch", display="the host CPU", dispatch_key="CPU",
        autocast_type="cpu", amp_dtypes=("bfloat16", "float16"), autocast_widens=False,
        legacy_amp=None, fallback_warning=CPU_FALLBACK_WARNING, fallback_on_stderr=False,
        oom_message=r"DefaultCPUAllocator: (can't allocate memory|not enough memory)",
        compile_backends=("inductor",)),
}
"""Device type -> its row, in ``--device auto`` preference order (the first available
wins)."""


class _Types(collections.abc.Sequence):
    """The keys of :data:`KINDS` in order, read at each use: never out of step with it."""

    def __getitem__(self, index):
        return tuple(KINDS)[index]

    def __len__(self) -> int:
        return len(KINDS)

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(KINDS))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, collections.abc.Sequence) and not isinstance(other, str):
            return tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))


DEVICE_TYPES: collections.abc.Sequence = _Types()
"""Device types in ``--device auto`` preference order (the keys of :data:`KINDS`)."""


def choices() -> tuple[str, ...]:
    """The values ``--device`` accepts: ``auto`` and every row's type."""
    return ("auto", *KINDS)


def device_help(what: str = "Device under test") -> str:
    """The ``--device`` help text, built from the rows (argparse expands ``%(default)r``)."""
    listed = ", ".join(f"{kind.type} ({kind.display})" for kind in KINDS.values())
    return (f"{what}: {listed}, or auto: the first available in that order. "
            "Default: %(default)r")


def device_option(what: str = "Device under test") -> dict:
    """``--device``'s argparse keyword arguments (the plugin's and the CLI's)."""
    return dict(default="auto", choices=choices(), metavar="TYPE", help=device_help(what))
