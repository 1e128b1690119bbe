"""Capture every distinct aten call of one training step of a user's model (on the CPU).

:func:`capture_step` runs forward, loss, backward and an optimizer step (under autocast
when asked, with a GradScaler for fp16) inside a ``TorchDispatchMode`` and keeps each
distinct call: the op and overload, every argument's structure (tensor shapes, dtypes,
strides, contiguity, whether it requires grad; the non-tensor values), how often it
was called, and in which phase (``forward``, ``backward``, ``optimizer``).

Note [Capture signatures]
~~~~~~~~~~~~~~~~~~~~~~~~~
A call's *signature* is a canonical text of its arguments' structure, never of tensor
values: ``f32[2,64,32,32]`` for a contiguous tensor, ``:s(…)`` appended for other strides,
``:g`` when it requires grad; non-tensor values as themselves (floats to 6 significant
digits, dtypes by name, devices as ``<device>`` since the DUT substitutes its own).
Two calls are the same case when op and signature agree; the record id's digest is 8 hex
digits of SHA-1 over the signature, so it is stable across runs and machines. The dispatch
mode sits below autograd and autocast, so what it sees is what the backend's kernels are
asked to do: autocast's casts and the 16-bit kernels after them.

Note [Captured layouts]
~~~~~~~~~~~~~~~~~~~~~~~
Accelerator kernels take other paths for other memory formats (channels_last goes through
a format conversion on an NPU), for a stride-0 broadcast and for a view that starts inside
its storage (a chunk of a fused qkv projection). So each tensor argument keeps its sizes,
strides *and storage offset*; the signature shows the strides (``:s(...)``) and a nonzero
offset (``:o5``), and the replay rebuilds the same view over a drawn storage (Note
[Replaying a captured call] in :mod:`harness.model.cases`): the DUT's kernel is asked
exactly what the model asked of it. :func:`layout_name` names the format for people
(``channels_last``, ``expanded``, ``strided``, ``+offset``); the model check prints how
many captured arguments came in each (:meth:`StepCapture.layout_counts`).

Note [Captured value ranges]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Replaying a call with random inputs must stay inside the op's domain: a variance must be
positive, a log's argument too. The capture keeps, per tensor argument, the smallest and
largest finite value over all calls of the signature (integers: the index range; bools:
the share of True); :mod:`harness.model.cases` draws floating inputs from that range.

Note [Captured integer values]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Integer and boolean arguments carry contracts a range cannot hold: an ``EmbeddingBag``'s
offsets start at 0 and never decrease, its ``offset2bag`` and ``bag_size`` must agree with
them, a mask selects exactly the positions the model masked, a max-pool's indices point
into their window. So the capture keeps the *values* of every integer and boolean tensor
argument of the first call of each signature (:attr:`Call.values`), all from that one call
so they agree with each other, and the replay feeds them back unchanged; only floating
arguments are drawn afresh. A tensor is kept as its storage span (the elements from its
storage offset over the extent its sizes and strides reach), so a non-contiguous one is
rebuilt with the captured strides over the captured memory. Tensors above
:data:`KEEP_VALUES_MAX` elements are not kept (the replay falls back to the range, and a
contract it breaks shows as a harness error: Note [Replay errors are the harness's] in
:mod:`harness.model.cases`). The values stay out of the signature: two calls with the same
structure are one case whatever their indices.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import math
import time
from typing import Any, Iterator, Optional

import torch
import torch.nn.functional as F  # noqa: N812 - the usual alias
from torch import nn

from harness import dtypes
from harness.model.spec import ModelSpec, make_target

PHASES = ("forward", "backward", "optimizer")
OPTIMIZERS = {
    # foreach=True: what torch picks on accelerators (cuda, xpu, the PrivateUse1 backend),
    # and the _foreach_ kernels are the ones a young backend lacks first.
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9, foreach=True),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01,
                                              foreach=True),
}
"""``--optimizer`` values: how the captured step builds its optimizer."""
KEEP_VALUES_MAX = 1 << 24
"""The most elements of an integer/boolean argument whose values a capture keeps (Note
[Captured integer values]): 128 MiB of int64."""
IGNORED_NAMESPACES = ("profiler",)
"""Namespaces of dispatched calls that are bookkeeping, not kernels (the optimizer's
``record_function``): not kept."""


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    """One tensor argument's structure (Note [Capture signatures])."""

    shape: tuple[int, ...]
    dtype: str
    stride: tuple[int, ...]
    requires_grad: bool = False
    offset: int = 0

    @property
    def contiguous(self) -> bool:
        return self.stride == contiguous_stride(self.shape)

    @property
    def layout(self) -> str:
        """The memory format its sizes, strides and offset say (Note [Captured layouts])."""
        return layout_name(self.shape, self.stride, self.offset)

    def text(self) -> str:
        out = f"{_SHORT.get(self.dtype, self.dtype)}[{','.join(map(str, self.shape))}]"
        if not self.contiguous and _numel(self.shape) > 1:
            out += f":s({','.join(map(str, self.stride))})"
        if self.offset:
            out += f":o{self.offset}"
        return out + (":g" if self.requires_grad else "")


class DevicePlaceholder:
    """A ``device=`` argument: replayed as the DUT's device (Note [Capture signatures])."""

    def __repr__(self) -> str:
        return "<device>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DevicePlaceholder)

    def __hash__(self) -> int:
        return 0


DEVICE = DevicePlaceholder()

_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
          "int64": "i64", "int32": "i32", "int8": "i8", "uint8": "u8", "bool": "b8"}


def contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for size in reversed(shape):
        stride.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(stride))


_FORMATS = ((4, torch.channels_last, "channels_last"),
            (5, torch.channels_last_3d, "channels_last_3d"))


def layout_name(shape: tuple[int, ...], stride: tuple[int, ...], offset: int = 0) -> str:
    """``contiguous``, ``channels_last``, ``channels_last_3d``, ``expanded`` (a stride-0
    dimension of size > 1) or ``strided`` (any other strides: a transpose, a slice), with
    ``+offset`` when the tensor starts past its storage's first element (Note [Captured
    layouts])."""
    def like(expected) -> bool:  # torch's rule: a size-1 dimension's stride is free
        return all(st == e for size, st, e in zip(shape, stride, expected) if size > 1)

    if like(contiguous_stride(shape)):
        name = "contiguous"
    elif any(st == 0 and size > 1 for size, st in zip(shape, stride)):
        name = "expanded"
    else:
        name = next((fmt_name for rank, fmt, fmt_name in _FORMATS if len(shape) == rank
                     and like(torch.empty(shape, device="meta", memory_format=fmt).stride())),
                    "strided")
    return f"{name}+offset" if offset else name


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape) if shape else 1


def dtype_name(dtype: torch.dtype) -> str:
    return dtypes.name(dtype)


@dataclasses.dataclass
class Range:
    """Value range of one tensor argument over the calls of a signature
    (Note [Captured value ranges]); ``low``/``high`` None when no finite value was seen."""

    low: Optional[float] = None
    high: Optional[float] = None

    def update(self, t: torch.Tensor) -> None:
        if t.numel() == 0 or t.is_complex() or t.device.type == "meta":
            return
        with torch.no_grad():
            v = t.detach()
            if v.dtype == torch.bool:
                v = v.float()
            lo, hi = (float(x) for x in torch.aminmax(v.reshape(-1)))
            if not (math.isfinite(lo) and math.isfinite(hi)):  # rare: mask the non-finite
                v = v[torch.isfinite(v)]
                if v.numel() == 0:
                    return
                lo, hi = (float(x) for x in torch.aminmax(v))
        self.low = lo if self.low is None else min(self.low, lo)
        self.high = hi if self.high is None else max(self.high, hi)


@dataclasses.dataclass
class Call:
    """One distinct (op, signature) of the step.

    Attributes:
        op: ``aten.convolution.default`` (``str`` of the OpOverload).
        qualname: ``aten::convolution`` with the overload (``aten::add.Tensor``): what the
            dispatcher is asked about.
        args, kwargs: the arguments with tensors as :class:`TensorMeta` (lists nested).
        signature, digest: Note [Capture signatures].
        count: calls with this signature in the step.
        phases: calls per phase, in first-seen order.
        ranges: per tensor argument (flattened order), its :class:`Range`.
        values: per tensor argument (flattened order), the storage span of an integer or
            boolean one as the first call passed it, else None (Note [Captured integer
            values]).
        mutates: flattened indices of the tensor arguments the op writes (in-place ops).
    """

    op: str
    qualname: str
    args: tuple
    kwargs: dict
    signature: str
    digest: str
    count: int = 0
    phases: dict[str, int] = dataclasses.field(default_factory=dict)
    ranges: list[Range] = dataclasses.field(default_factory=list)
    values: list[Optional[torch.Tensor]] = dataclasses.field(default_factory=list)
    mutates: tuple[int, ...] = ()

    @property
    def phase(self) -> str:
        """The phase it was first seen in."""
        return next(iter(self.phases))

    def tensors(self) -> list[TensorMeta]:
        return [m for m in _flat((self.args, self.kwargs)) if isinstance(m, TensorMeta)]

    def to_json(self) -> dict:
        return {"op": self.op, "digest": self.digest, "signature": self.signature,
                "count": self.count, "phases": dict(self.phases),
                "inputs": [{"shape": list(m.shape), "dtype": m.dtype, "stride": list(m.stride),
                            "offset": m.offset, "layout": m.layout,
                            "contiguous": m.contiguous, "requires_grad": m.requires_grad}
                           for m in self.tensors()]}


@dataclasses.dataclass
class StepCapture:
    """Everything one captured step saw."""

    model: str
    factory: str
    inputs: list[str]
    amp: Optional[str]
    optimizer: str
    calls: list[Call]
    loss: float
    seconds: float

    @property
    def total_calls(self) -> int:
        return sum(c.count for c in self.calls)

    def layout_counts(self) -> dict[str, int]:
        """Tensor arguments of the distinct calls per layout (Note [Captured layouts]),
        most common first."""
        counts = collections.Counter(m.layout for call in self.calls for m in call.tensors())
        return dict(counts.most_common())

    def by_op(self) -> dict[str, list[Call]]:
        out: dict[str, list[Call]] = {}
        for call in self.calls:
            out.setdefault(call.op, []).append(call)
        return out

    def phase_counts(self) -> dict[str, int]:
        out = {p: 0 for p in PHASES}
        for call in self.calls:
            for phase, n in call.phases.items():
                out[phase] = out.get(phase, 0) + n
        return out

    def to_json(self) -> dict:
        return {"model": self.model, "factory": self.factory, "inputs": self.inputs,
                "amp": self.amp, "optimizer": self.optimizer, "loss": self.loss,
                "seconds": round(self.seconds, 3), "total_calls": self.total_calls,
                "distinct_calls": len(self.calls), "distinct_ops": len(self.by_op()),
                "phase_calls": self.phase_counts(), "layouts": self.layout_counts(),
                "calls": [c.to_json() for c in self.calls]}


# ------------------------------------------------------------------------ structure

def _flat(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flat(v)]
    if isinstance(value, dict):
        return [x for k in value for x in _flat(value[k])]
    return [value]


def storage_span(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Elements a tensor of these sizes and strides reaches from its storage offset."""
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * st for size, st in zip(shape, stride))


def kept_values(tensor: torch.Tensor) -> Optional[torch.Tensor]:
    """A copy of an integer or boolean tensor's storage span (1-D), or None for floating,
    complex, sparse, meta and oversized ones (Note [Captured integer values])."""
    if (tensor.is_floating_point() or tensor.is_complex() or tensor.layout != torch.strided
            or tensor.device.type == "meta"):
        return None
    span = storage_span(tuple(tensor.shape), tuple(tensor.stride()))
    if span > KEEP_VALUES_MAX:
        return None
    with torch.no_grad():
        flat = tensor.detach().as_strided((span,), (1,), tensor.storage_offset())
        return flat.to("cpu", copy=True)


def _meta(value: Any) -> Any:
    """Arguments with tensors replaced by :class:`TensorMeta`, devices by the placeholder."""
    if isinstance(value, torch.Tensor):
        return TensorMeta(tuple(value.shape), dtype_name(value.dtype), tuple(value.stride()),
                          bool(value.requires_grad),
                          value.storage_offset() if value.layout == torch.strided else 0)
    if isinstance(value, list):
        return [_meta(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_meta(v) for v in value)
    if isinstance(value, torch.device):
        return DEVICE
    return value


def _text(value: Any) -> str:
    """Canonical text of a structured argument (Note [Capture signatures])."""
    if isinstance(value, TensorMeta):
        return value.text()
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return repr(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.6g}"
    if isinstance(value, DevicePlaceholder):
        return "<device>"
    if isinstance(value, (list, tuple)):
        inner = ",".join(_text(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}={_text(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (torch.memory_format, torch.layout)):
        return dtypes.name(value)
    return type(value).__name__  # never a repr with an address in it


def signature_of(args: Any, kwargs: dict) -> str:
    return f"{_text(tuple(args))}|{_text(dict(kwargs))}"


def digest_of(signature: str) -> str:
    return hashlib.sha1(signature.encode("utf-8")).hexdigest()[:8]


# ------------------------------------------------------------------------ the mode

def _make_mode_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class CaptureMode(TorchDispatchMode):
        """Keeps each distinct (op, signature); ``phase`` is set by the step driver (None
        while the harness itself computes, e.g. the loss target)."""

        def __init__(self) -> None:
            super().__init__()
            self.phase = "forward"
            self.calls: dict[tuple[str, str], Call] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if self.phase is not None and func.namespace not in IGNORED_NAMESPACES:
                self.record(func, args, kwargs)
            return func(*args, **kwargs)

        def record(self, func, args, kwargs) -> None:
            margs, mkwargs = _meta(tuple(args)), _meta(dict(kwargs))
            signature = signature_of(margs, mkwargs)
            key = (str(func), signature)
            call = self.calls.get(key)
            tensors = [t for t in _flat((tuple(args), dict(kwargs)))
                       if isinstance(t, torch.Tensor)]
            if call is None:
                schema = func._schema
                qualname = schema.name + (f".{schema.overload_name}"
                                          if schema.overload_name else "")
                call = Call(str(func), qualname, margs, mkwargs, signature,
                            digest_of(signature), ranges=[Range() for _ in tensors],
                            values=[kept_values(t) for t in tensors],
                            mutates=_mutated_positions(func, args, kwargs))
                self.calls[key] = call
            call.count += 1
            call.phases[self.phase] = call.phases.get(self.phase, 0) + 1
            for rng, tensor in zip(call.ranges, tensors):
                rng.update(tensor)

    return CaptureMode


UNANNOTATED_WRITES: dict[str, tuple[str, ...]] = {
    # the schema says `Tensor? running_mean`, yet training mode updates both in place
    "aten::native_batch_norm": ("running_mean", "running_var"),
    "aten::batch_norm_update_stats": ("running_mean", "running_var"),
}
"""Arguments an op writes although its schema does not mark them ``Tensor(a!)``."""


def _mutated_positions(func, args, kwargs) -> tuple[int, ...]:
    """Flattened tensor positions (over args then kwargs) of the arguments the op writes."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return ()
    written = {a.name for a in schema.arguments
               if a.alias_info is not None and a.alias_info.is_write}
    written |= set(UNANNOTATED_WRITES.get(schema.name, ()))
    if not written:
        return ()
    out, index = [], 0
    names = [a.name for a in schema.arguments if not a.kwarg_only]
    bound = list(zip(names, args)) + list(kwargs.items())
    for name, value in bound:
        tensors = [t for t in _flat(value) if isinstance(t, torch.Tensor)]
        if name in written:
            out.extend(range(index, index + len(tensors)))
        index += len(tensors)
    return tuple(out)


_MODE_CLASS = None


def capture_mode():
    """A fresh capturing dispatch mode (its class is made on first use)."""
    global _MODE_CLASS
    if _MODE_CLASS is None:
        _MODE_CLASS = _make_mode_class()
    return _MODE_CLASS()


# ------------------------------------------------------------------------ the step

def _loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    if target.dtype in (torch.int64, torch.int32) and output.dim() >= 2:
        return F.cross_entropy(output.float(), target.long())
    return F.mse_loss(output.float(), target.to(torch.float32))


@contextlib.contextmanager
def _phase(mode, name: Optional[str]) -> Iterator[None]:
    """Label the calls of the block (None: record nothing)."""
    mode.phase = name
    yield


def _first_output(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    if isinstance(value, dict) and value:
        return _first_output(next(iter(value.values())))
    raise TypeError(f"the model returned {type(value).__name__}; the captured step needs a "
                    "tensor (or a tuple/dict whose first item is one) to compute the loss")


def capture_step(spec: ModelSpec, *, amp: Optional[torch.dtype] = None,
                 optimizer: str = "sgd", seed: int = 0) -> StepCapture:
    """One training step of ``spec.module`` on the CPU, every distinct aten call kept.

    Args:
        spec: the loaded model (:func:`harness.model.spec.load_factory`).
        amp: run the forward under CPU autocast in this dtype (fp16 adds a GradScaler).
        optimizer: a key of :data:`OPTIMIZERS`.
        seed: seeds the loss target.
    Returns:
        A :class:`StepCapture`; the calls are in first-seen order.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"--optimizer {optimizer!r}: choose from {', '.join(OPTIMIZERS)}")
    model: nn.Module = spec.module
    model.train()
    opt = OPTIMIZERS[optimizer]([p for p in model.parameters() if p.requires_grad])
    scaler = torch.amp.GradScaler("cpu") if amp == torch.float16 else None
    autocast = (torch.autocast("cpu", dtype=amp) if amp is not None
                else contextlib.nullcontext())
    gen = torch.Generator().manual_seed(seed + 2)
    mode = capture_mode()
    start = time.perf_counter()
    with mode:
        with _phase(mode, "forward"):
            with autocast:
                output = _first_output(model(*spec.inputs))
            with _phase(mode, None):  # drawing the target is the harness's, not the model's
                target = spec.target if spec.target is not None else make_target(
                    output, spec.target_spec, gen)
            mode.phase = "forward"
            loss = _loss(output, target)
        with _phase(mode, "backward"):  # loss scaling belongs to the backward pass
            (scaler.scale(loss) if scaler is not None else loss).backward()
        with _phase(mode, "optimizer"):
            if scaler is not None:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    inputs = ["x".join(map(str, t.shape)) + f":{dtype_name(t.dtype)}" for t in spec.inputs]
    return StepCapture(spec.name, spec.factory, inputs,
                   dtype_name(amp) if amp is not None else None, optimizer,
                   list(mode.calls.values()), float(loss.detach()), seconds)
