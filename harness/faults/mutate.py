"""``python -m harness faults mutate``: the suite's power measured with generated mutants.

A hand-written fault proves that a check can fail; it says little about the defects
nobody wrote down. A *mutant* here is a conditional defect of one aten op that the op
catalog runs: the op is wrong only when a condition holds (a layout, a dtype class, a size
band, a value class, an argument value: :data:`CONDITIONS`) and wrong in one way (drift,
one wrong element, a wrong shape, a NaN, swapped outputs: :data:`HOWS`). Each is an
ordinary :func:`harness.faults.perturb_op` fault with ``when=`` (the public fault API), so
it acts inside the DUT scope only.

Note [Mutant runs]
~~~~~~~~~~~~~~~~~~
One warm process imports torch, builds the catalog and runs the clean checks once; then it
forks one child per mutant (``os.fork``: the imports and the clean results are shared
copy-on-write; torch runs one thread per child), at most ``jobs`` at a time. A child runs
the default-run checks that exercise the mutated op, through the same functions the suites
call: the catalog cases of every row whose forward dispatches the op
(:func:`harness.ops.runner.run_case`), their special-value cases
(:func:`harness.ops.edge.run_specials`) or NaN-shape cases
(:func:`harness.ops.edge.run_nan_shape`) and, for ``aten.mm``, the run-twice determinism
check. A mutant is *killed* when a case that passes clean does not pass with it; it stops
at the first kill. A mutant no case killed is a *survivor* (a coverage gap, listed) when it
is live, and *not live* when no call of the op can meet its condition: the parent replays
the op's recorded calls transformed to meet the condition (channels_last copies, offset
views, a cast, NaN written in...) and asks whether the mutant changes the answer of a
direct call (Note [Liveness]). Not-live mutants are counted apart, never as kills.

Note [Liveness]
~~~~~~~~~~~~~~~
Liveness is decided on the op, not the suite: a direct call, outside any check, whose
answer the mutant changes. The calls are the op's own, recorded from the catalog's clean
run; a condition's ``probe`` rewrites one call's arguments so the condition holds (or says
it cannot). A mutant whose condition holds on some probed call and whose wrong-how changes
that call's output is live, whether or not the suite ever makes such a call: that is
exactly the gap the kill matrix must show.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import os
import random
import select
import signal
import time
from typing import Any, Callable, Optional, Sequence

import torch

from harness.faults.registry import Fault, perturb_op

# ------------------------------------------------------------------------ conditions


def _tensors(args, kwargs) -> list[torch.Tensor]:
    out = []
    for value in (*args, *kwargs.values()):
        for one in (value if isinstance(value, (list, tuple)) else (value,)):
            if isinstance(one, torch.Tensor):
                out.append(one)
    return out


def _first(args, kwargs) -> Optional[torch.Tensor]:
    found = _tensors(args, kwargs)
    return found[0] if found else None


def _cl(t: torch.Tensor, rank: int) -> bool:
    fmt = torch.channels_last if rank == 4 else torch.channels_last_3d
    return t.dim() == rank and not t.is_contiguous() and t.is_contiguous(memory_format=fmt)


def _map_tensors(args, kwargs, fn):
    def one(value):
        if isinstance(value, torch.Tensor):
            return fn(value)
        if isinstance(value, (list, tuple)):
            return type(value)(one(v) for v in value)
        return value
    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def _offset(t: torch.Tensor) -> torch.Tensor:
    base = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    view = base[1:].view(t.shape)
    view.copy_(t)
    return view


def _limits(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point() or t.dtype == torch.bool:
        return t
    return torch.full_like(t, torch.iinfo(t.dtype).max) - (t.abs() % 4).to(t.dtype)


def _with_nan(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point() or not t.numel():
        return t
    t = t.clone()
    t.view(-1)[0] = float("nan")
    return t


@dataclasses.dataclass(frozen=True)
class Condition:
    """When a mutant is wrong: ``holds(args, kwargs)`` on an aten call; ``probe(args,
    kwargs)`` rewrites a recorded call so that it holds (None: it cannot), Note [Liveness].
    An ``argument`` condition's functions also take the overload's argument names."""

    name: str
    kind: str
    holds: Callable[..., bool]
    probe: Callable[..., Optional[tuple]]

    def bound(self, names: Sequence[str]):
        """``(holds, probe)`` taking ``(args, kwargs)`` for an overload with ``names``."""
        if self.kind != "argument":
            return self.holds, self.probe
        return (lambda a, k: self.holds(a, k, tuple(names)),
                lambda a, k: self.probe(a, k, tuple(names)))


_REQUIRED = object()
"""The default of a schema argument that has none."""


def arg_names(op: str) -> tuple[tuple[str, Any], ...]:
    """The schema arguments of ``aten.<name>.<overload>`` as ``(name, default)`` pairs
    (``_REQUIRED`` where there is no default; empty if the op is unknown)."""
    try:
        _, name, overload = op.split(".")
        packet = getattr(torch.ops.aten, name)
        return tuple((a.name, a.default_value if a.has_default_value() else _REQUIRED)
                     for a in getattr(packet, overload)._schema.arguments)
    except (ValueError, AttributeError, RuntimeError):
        return ()


def _rank_layout(rank: int) -> Condition:
    fmt = torch.channels_last if rank == 4 else torch.channels_last_3d
    name = "channels_last" if rank == 4 else "channels_last_3d"

    def probe(args, kwargs):
        if not any(t.dim() == rank for t in _tensors(args, kwargs)):
            return None
        return _map_tensors(args, kwargs, lambda t: t.contiguous(memory_format=fmt)
                            if t.dim() == rank else t)
    return Condition(f"layout:{name}", "layout",
                     lambda a, k: any(_cl(t, rank) for t in _tensors(a, k)), probe)


def _band(low: int, high: int) -> Condition:
    def holds(args, kwargs):
        first = _first(args, kwargs)
        return first is not None and low < first.numel() <= high

    def probe(args, kwargs):
        first = _first(args, kwargs)
        if first is None or not first.numel():
            return None
        n = low + 1
        if first.numel() >= n:
            return (args, kwargs) if holds(args, kwargs) else None
        like = first.shape

        def grow(t):
            if t.shape != like:
                return t
            reps = -(-n // t.numel())
            return t.reshape(-1).repeat(reps)[:n]
        return _map_tensors(args, kwargs, grow)
    return Condition(f"size:({low},{high}]", "size", holds, probe)


def _dtype(name: str, dtypes: tuple) -> Condition:
    def probe(args, kwargs):
        target = dtypes[0]
        return _map_tensors(args, kwargs, lambda t: t.to(target) if t.is_floating_point() else t)
    return Condition(f"dtype:{name}", "dtype",
                     lambda a, k: (_first(a, k) is not None and _first(a, k).dtype in dtypes),
                     probe)


def _int_probe(args, kwargs):
    return _map_tensors(args, kwargs, lambda t: (t * 4).to(torch.int32)
                        if t.is_floating_point() else t)


def _near_limits(args, kwargs) -> bool:
    for t in _tensors(args, kwargs):
        if not t.is_floating_point() and t.dtype != torch.bool and t.numel():
            info = torch.iinfo(t.dtype)
            if int(t.max()) > info.max // 2 or int(t.min()) < info.min // 2:
                return True
    return False


def _int_limits_probe(args, kwargs):
    args, kwargs = _int_probe(args, kwargs)
    return _map_tensors(args, kwargs, _limits)


def _has_nonfinite(args, kwargs) -> bool:
    return any(t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all())
               for t in _tensors(args, kwargs))


def _scalar_args(args, kwargs) -> list:
    return [v for v in (*args[1:], *kwargs.values())
            if isinstance(v, (bool, int, float)) and not isinstance(v, torch.Tensor)]


def _named(args, kwargs, names, wanted: str):
    """``(index, value)`` of the schema argument ``wanted`` in this call (its default
    when the call leaves it out: a kernel wrong for ``dim=0`` is wrong for the default
    ``dim`` too), or None."""
    index = next((i for i, (name, _) in enumerate(names) if name == wanted), None)
    if index is None:
        return None
    if index < len(args):
        return index, args[index]
    if wanted in kwargs:
        return index, kwargs[wanted]
    default = names[index][1]
    return None if default is _REQUIRED else (index, default)


def _dim0(args, kwargs, names=()) -> bool:
    found = _named(args, kwargs, names, "dim")
    return found is not None and found[1] in (0, [0], (0,))


def _dim0_probe(args, kwargs, names=()):
    found = _named(args, kwargs, names, "dim")
    if found is None:
        return None
    index, value = found
    zero = [0] if isinstance(value, (list, tuple)) else 0
    if index < len(args):
        return (*args[:index], zero, *args[index + 1:]), kwargs
    return args, {**kwargs, "dim": zero}


def _keepdim(args, kwargs, names=()) -> bool:
    found = _named(args, kwargs, names, "keepdim")
    return found is not None and found[1] is True


def _keepdim_probe(args, kwargs, names=()):
    found = _named(args, kwargs, names, "keepdim")
    if found is None:
        return None
    index, _ = found
    if index < len(args):
        return (*args[:index], True, *args[index + 1:]), kwargs
    return args, {**kwargs, "keepdim": True}


def _empty(args, kwargs) -> bool:
    first = _first(args, kwargs)
    return first is not None and first.numel() == 0


def _empty_probe(args, kwargs):
    return (args, kwargs) if _empty(args, kwargs) else None


CONDITIONS: dict[str, Condition] = {c.name: c for c in (
    _rank_layout(4), _rank_layout(5),
    Condition("layout:transposed", "layout",
              lambda a, k: any(t.dim() >= 2 and not t.is_contiguous()
                               and not _cl(t, 4) and not _cl(t, 5) and 0 not in t.stride()
                               for t in _tensors(a, k)),
              lambda a, k: _map_tensors(a, k, lambda t: t.mT.contiguous().mT
                                        if t.dim() >= 2 else t)),
    Condition("layout:offset", "layout",
              lambda a, k: any(t.storage_offset() for t in _tensors(a, k)),
              lambda a, k: _map_tensors(a, k, _offset)),
    Condition("layout:expanded", "layout",
              lambda a, k: any(0 in t.stride() and t.numel() > 1 for t in _tensors(a, k)),
              lambda a, k: _map_tensors(a, k, lambda t: t[:1].expand_as(t)
                                        if t.dim() and t.shape[0] > 1 else t)),
    _dtype("float16", (torch.float16,)), _dtype("bfloat16", (torch.bfloat16,)),
    Condition("dtype:integer", "dtype",
              lambda a, k: (_first(a, k) is not None and not _first(a, k).is_floating_point()
                            and _first(a, k).dtype != torch.bool),
              _int_probe),
    _band(1024, 4096), _band(4096, 1 << 16), _band(1 << 16, 1 << 20),
    Condition("size:empty", "size", _empty, _empty_probe),
    Condition("value:int_limits", "value", _near_limits, _int_limits_probe),
    Condition("value:nonfinite", "value", _has_nonfinite,
              lambda a, k: _map_tensors(a, k, _with_nan)),
    Condition("arg:dim0", "argument", _dim0, _dim0_probe),
    Condition("arg:keepdim", "argument", _keepdim, _keepdim_probe),
)}
"""Every condition a mutant can have (kind: layout, dtype, size, value, argument)."""


# ----------------------------------------------------------------------------- hows

def _on_first(out, fn):
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return type(out)([fn(out[0]), *out[1:]])
    return out


def _drift(t: torch.Tensor) -> torch.Tensor:
    if t.is_floating_point():
        return t * (1 + 2.0 ** -7)
    if t.dtype == torch.bool:
        return t
    return t + 1


def _dense(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy whose ``view(-1)`` writes reach it."""
    return t.detach().clone(memory_format=torch.contiguous_format)


def _element(t: torch.Tensor) -> torch.Tensor:
    if not t.numel():
        return t
    t = _dense(t)
    flat, i = t.view(-1), t.numel() // 2
    flat[i] = ~flat[i] if t.dtype == torch.bool else flat[i] * 2 + 1
    return t


def _shape(t: torch.Tensor) -> torch.Tensor:
    return t.unsqueeze(0)


def _nan(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point() or not t.numel():
        return t
    t = _dense(t)
    t.view(-1)[0] = float("nan")
    return t


def _swap(out):
    if isinstance(out, (tuple, list)) and len(out) >= 2:
        a, b = out[0], out[1]
        if (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                and a.shape == b.shape and a.dtype == b.dtype):
            return type(out)([b, a, *out[2:]])
        return out
    if isinstance(out, torch.Tensor) and out.numel() >= 2:
        t = _dense(out)
        flat = t.view(-1)
        first, last = flat[0].clone(), flat[-1].clone()
        flat[0], flat[-1] = last, first
        return t
    return out


HOWS: dict[str, Callable[[Any], Any]] = {
    "drift": lambda out: _on_first(out, _drift),
    "element": lambda out: _on_first(out, _element),
    "shape": lambda out: _on_first(out, _shape),
    "nan": lambda out: _on_first(out, _nan),
    "swap": _swap,
}
"""How a mutant is wrong, given the op's correct output."""


def _changed(a, b) -> bool:
    """Whether two op results differ (shape, dtype, a value, where NaN is)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return True
        a, b = a.detach(), b.detach()
        if a.is_floating_point():
            return not torch.equal(torch.isnan(a), torch.isnan(b)) or not torch.equal(
                torch.nan_to_num(a, 0.0), torch.nan_to_num(b, 0.0))
        return not torch.equal(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) != len(b) or any(_changed(x, y) for x, y in zip(a, b))
    return False


@functools.cache
def writes_self(op: str) -> bool:
    """Whether ``aten.<name>.<overload>`` writes its first argument (``bernoulli_``,
    ``clamp_min_``): its answer is that argument, not what it returns."""
    try:
        _, name, overload = op.split(".")
        first = getattr(getattr(torch.ops.aten, name), overload)._schema.arguments[0]
    except (ValueError, AttributeError, RuntimeError, IndexError):
        return False
    return bool(first.alias_info is not None and first.alias_info.is_write)


def wrong(op: str, how: Callable[[Any], Any], out: Any) -> tuple[Any, bool]:
    """``(answer, changed)``: ``how`` applied to the op's correct ``out``, as the op's caller
    sees it, and whether that differs from ``out`` (Note [In-place mutants]): an in-place
    op's wrong answer is written into the tensor it wrote, and one whose wrong answer it
    could not write there (another shape or dtype) is unchanged."""
    new = how(out)
    changed = _changed(out, new)
    if not (writes_self(op) and isinstance(out, torch.Tensor) and new is not out):
        return new, changed
    if isinstance(new, torch.Tensor) and new.shape == out.shape and new.dtype == out.dtype:
        with torch.no_grad():
            out.copy_(new)
        return out, changed
    return out, False


# Note [In-place mutants]
# ~~~~~~~~~~~~~~~~~~~~~~~
# An in-place op's callers read the tensor it wrote, not what it returns: dropout calls
# ``noise.bernoulli_(1 - p)`` and then uses ``noise``. A mutant that only replaced the
# returned tensor would change nothing a check can see, yet a direct call's answer (its
# return value) would differ, so it was counted live and survived "met by the checks, not
# caught". So the wrong answer of an in-place op is written into its first argument, and a
# wrong shape or dtype, which an in-place op cannot produce, leaves it right (and so is not
# live). Ops that write through ``out=`` are not in the catalog's calls.


# --------------------------------------------------------------------------- mutants

@dataclasses.dataclass(frozen=True)
class Mutant:
    """One conditional defect: ``op`` wrong under ``condition`` in way ``how``; ``rows``
    are the catalog rows whose forward is about ``op``, ``dtypes`` the dtypes they take
    (a call in another dtype is one no user of the catalog's ops makes: Note [Liveness])."""

    op: str
    condition: str
    how: str
    rows: tuple[str, ...]
    dtypes: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"mutant.{self.op.replace('aten.', '')}.{self.condition}.{self.how}"

    def fault(self, seen: Optional[dict] = None) -> Fault:
        """The mutant as a :func:`perturb_op` fault; ``seen["changed"]`` counts the calls it
        changed (the child's evidence that the checks met it)."""
        holds, _ = CONDITIONS[self.condition].bound(arg_names(self.op))
        how = HOWS[self.how]

        def transform(out, args, kwargs):
            new, changed = wrong(self.op, how, out)
            if seen is not None and changed:
                seen["changed"] = seen.get("changed", 0) + 1
            return new

        return perturb_op(self.name, family="ops", op=self.op, when=holds,
                          transform=transform, checks=("suites/ops",),
                          description=f"{self.op} is wrong ({self.how}) when {self.condition}")


class _Recorder:
    """Records, per aten overload, up to ``keep`` calls (args cloned), and the overloads
    each row dispatched in order (``rows``)."""

    def __init__(self, keep: int = 6):
        from torch.utils._python_dispatch import TorchDispatchMode

        self.calls: dict[str, list] = {}
        self.order: list[str] = []
        recorder = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = str(func)
                if name not in recorder.order:
                    recorder.order.append(name)
                kept = recorder.calls.setdefault(name, [])
                if len(kept) < keep:
                    kept.append((func, *_map_tensors(args, kwargs,
                                                     lambda t: t.detach().clone())))
                return func(*args, **kwargs)

        self.mode = Mode


def _primary(entry_name: str, order: Sequence[str]) -> Optional[str]:
    """The aten overload a row's forward is about: the one whose name is closest to the
    row's (``sum`` -> ``aten.sum.dim_IntList``), else the last one dispatched."""
    skip = ("aten.detach", "aten.clone", "aten.copy_", "aten._to_copy", "aten.empty",
            "aten.view", "aten.t.", "aten.transpose", "aten.expand", "aten.alias")
    names = [n for n in order if not n.startswith(skip)]
    if not names:
        return None

    def score(n):
        base = n.split(".")[1].lstrip("_").removeprefix("native_")
        return difflib.SequenceMatcher(None, base, entry_name).ratio()
    return max(names, key=score)


@dataclasses.dataclass
class Plan:
    """What the parent prepared: the mutants, the rows per op, the recorded calls and
    the clean statuses (Note [Mutant runs])."""

    mutants: list[Mutant]
    calls: dict[str, list]
    clean: dict[str, dict[str, str]]


def _cases(entry):
    return [(dt, s) for dt, s in entry.cases() if not s.slow]


def _run_row(device, entry, stop: Optional[Callable[[str, str], bool]] = None) -> dict[str, str]:
    """Statuses of every default-run case of a row (catalog, special values, NaN shapes);
    ``stop(id, status)`` True ends early."""
    from harness.ops import edge, run_case
    from harness.ops.specials import SEMANTICS

    out: dict[str, str] = {}
    runs = [(lambda dt=dt, s=s: run_case(device, entry, dt, s, 0)) for dt, s in _cases(entry)]
    if entry.name in SEMANTICS:
        runs += [(lambda dt=dt, s=s: edge.run_specials(device, entry, dt, s, 0))
                 for dt in edge.special_dtypes(entry) for s in edge.special_samples(entry)]
    runs += [(lambda dt=dt, s=s: edge.run_nan_shape(device, entry, dt, s, 0))
             for dt in edge.nan_shape_dtypes(entry) for s in edge.nan_shape_samples(entry)]
    for run in runs:
        for outcome in run():
            out[outcome.id] = outcome.status
            if stop is not None and stop(outcome.id, outcome.status):
                return out
    return out


def _determinism(device) -> dict[str, str]:
    """The run-twice check of ``suites/ops/test_catalog.py`` for fp32 mm (status only)."""
    gen = torch.Generator().manual_seed(7)
    a, b = torch.randn(64, 96, generator=gen), torch.randn(96, 48, generator=gen)
    with device.scope():
        da, db = a.to(device.torch_device), b.to(device.torch_device)
        first, second = torch.mm(da, db).cpu(), torch.mm(da, db).cpu()
    return {"ops/mm/float32/run_twice/64x96x48": "pass" if torch.equal(first, second) else "fail"}


def plan(device, *, rows: Optional[Sequence[str]] = None, limit: int = 240, seed: int = 0,
         progress: Callable[[str], None] = lambda s: None) -> Plan:
    """Record each row's aten calls, run it clean, and draw ``limit`` mutants (op x
    condition x how) with ``random.Random(seed)``, every op and condition represented."""
    from harness.ops import CATALOG
    from harness.ops.spec import materialize

    entries = [e for e in CATALOG if rows is None or e.name in rows]
    recorder = _Recorder()
    by_op: dict[str, list[str]] = {}
    for entry in entries:
        recorder.order = []
        with torch.no_grad():
            for dt, sample in _cases(entry):
                values = materialize(sample, dt, torch.Generator().manual_seed(0))
                try:
                    with recorder.mode():
                        entry.fn(*values, **sample.kwargs)
                except Exception:  # noqa: BLE001 - a sample the plain call refuses
                    continue
        own = _primary(entry.name, recorder.order)
        if own is not None:
            by_op.setdefault(own, []).append(entry.name)
    ops = sorted(by_op)
    rng = random.Random(seed)
    from harness.ops import BY_NAME

    def dtypes(rows):
        return tuple(sorted({d for r in rows for d in BY_NAME[r].all_dtypes}))
    pool = [Mutant(op, cond, how, tuple(by_op[op]), dtypes(by_op[op])) for op in ops
            for cond in CONDITIONS for how in HOWS]
    rng.shuffle(pool)
    mutants = sorted(pool[:limit], key=lambda m: (m.op, m.condition, m.how))
    needed = sorted({r for m in mutants for r in m.rows})
    progress(f"{len(ops)} ops from {len(entries)} rows; {len(pool)} possible mutants, "
             f"{len(mutants)} drawn; running {len(needed)} rows clean")

    clean = {name: _run_row(device, BY_NAME[name]) for name in needed}
    clean["_determinism"] = _determinism(device)
    return Plan(mutants, recorder.calls, clean)


def _laid_out_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` in its own storage with ``t``'s sizes, strides and storage offset
    (Note [Probing an in-place op])."""
    copy = torch.empty(0, dtype=t.dtype, device=t.device)
    copy.set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())
    return copy


# Note [Probing an in-place op]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# The probe writes an in-place op's answer into a copy of the probed call's arguments, so
# the recorded calls stay as recorded. A plain clone() is dense: an expanded or offset
# argument became a contiguous one after the condition had been checked on the view, so
# ``clamp_min_`` on an expanded tensor counted live although torch refuses to write into a
# tensor whose elements share memory (no caller can meet that condition) and the probed call
# never met it. The copy keeps the view's sizes, strides and offset in a storage of its own:
# the call the condition was checked on is the call that runs.


def live(mutant: Mutant, calls: dict[str, list]) -> bool:
    """Whether some direct call of the op meets the condition and the mutant changes its
    answer (Note [Liveness])."""
    holds, probe = CONDITIONS[mutant.condition].bound(arg_names(mutant.op))
    how = HOWS[mutant.how]
    for func, args, kwargs in calls.get(mutant.op, ()):
        try:
            probed = probe(args, kwargs)
            if probed is None or not holds(*probed):
                continue
            first = _first(*probed)
            if mutant.dtypes and first is not None and str(first.dtype).removeprefix(
                    "torch.") not in mutant.dtypes:
                continue
            if writes_self(mutant.op):  # the recorded call stays as it was recorded
                probed = _map_tensors(*probed, _laid_out_copy)
            with torch.no_grad():
                out = func(*probed[0], **probed[1])
            if wrong(mutant.op, how, out)[1]:
                return True
        except Exception:  # noqa: BLE001 - the op refuses this rewrite of its call
            continue
    return False


# ------------------------------------------------------------------------- the runs

KILLING = ("fail", "error")
"""The statuses that fail a default run (a case gone ``skip`` or ``unsupported`` shows
only against a baseline, which a mutant run does not use: Note [Mutant runs])."""

def _child(device, mutant: Mutant, clean: dict, write_fd: int) -> None:
    from harness import faults
    from harness.ops import BY_NAME

    torch.set_num_threads(1)
    seen: dict = {}
    faults._active = [mutant.fault(seen)]  # Note [Fault injection state]
    killed_by = ""

    def stop(record, status):
        nonlocal killed_by
        if status in KILLING and clean.get(record, "pass") == "pass":
            killed_by = f"{record} ({status})"
            return True
        return False

    try:
        for row in mutant.rows:
            _run_row(device, BY_NAME[row], stop)
            if killed_by:
                break
        if not killed_by and mutant.op == "aten.mm.default":
            for record, status in _determinism(device).items():
                if stop(record, status):
                    break
    except Exception as exc:  # noqa: BLE001 - a crash under the mutant is a kill
        killed_by = f"raised {type(exc).__name__}: {exc}"[:200]
    os.write(write_fd, json.dumps({"killed_by": killed_by,
                                   "changed": seen.get("changed", 0)}).encode())


def run(device, the_plan: Plan, *, jobs: int = 2, timeout: float = 120.0,
        progress: Callable[[str], None] = lambda s: None) -> list[dict]:
    """Run every mutant in a forked child, ``jobs`` at a time (Note [Mutant runs])."""
    pending = list(the_plan.mutants)
    running: dict[int, tuple[Mutant, int, float, bytearray]] = {}
    results: list[dict] = []
    while pending or running:
        while pending and len(running) < jobs:
            mutant = pending.pop(0)
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child
                os.close(read_fd)
                code = 0
                try:
                    relevant = {k: v for r in mutant.rows for k, v in the_plan.clean[r].items()}
                    relevant.update(the_plan.clean["_determinism"])
                    _child(device, mutant, relevant, write_fd)
                except BaseException:  # noqa: BLE001 - never return into the parent's code
                    code = 1
                finally:
                    os._exit(code)
            os.close(write_fd)
            running[pid] = (mutant, read_fd, time.monotonic(), bytearray())
        fds = {fd: pid for pid, (_, fd, _, _) in running.items()}
        ready, _, _ = select.select(list(fds), [], [], 0.5)
        for fd in ready:
            chunk = os.read(fd, 65536)
            running[fds[fd]][3].extend(chunk)
        for pid, (mutant, fd, started, buf) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            late = time.monotonic() - started > timeout
            if not done and not late:
                continue
            if not done:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                buf.extend(chunk)
            os.close(fd)
            del running[pid]
            try:
                got = json.loads(bytes(buf).decode() or "{}")
            except ValueError:
                got = {}
            killed_by = got.get("killed_by") or ("timed out" if late else
                                                 "" if got else "child crashed")
            results.append({"mutant": mutant.name, "op": mutant.op, "condition": mutant.condition,
                            "how": mutant.how, "rows": list(mutant.rows), "killed_by": killed_by,
                            "changed_calls": got.get("changed", 0),
                            "seconds": round(time.monotonic() - started, 2)})
            progress(f"[{len(results)}/{len(the_plan.mutants)}] {mutant.name}: "
                     f"{'killed by ' + killed_by if killed_by else 'not killed'}")
    for result in results:
        mutant = next(m for m in the_plan.mutants if m.name == result["mutant"])
        result["live"] = bool(result["killed_by"]) or live(mutant, the_plan.calls)
    return sorted(results, key=lambda r: r["mutant"])


def summary(results: list[dict]) -> dict:
    """``{"mutants", "killed", "not_live", "survivors", "kill_rate", "matrix"}``; the kill
    rate is over live mutants (Note [Mutant runs])."""
    killed = [r for r in results if r["killed_by"]]
    not_live = [r for r in results if not r["killed_by"] and not r["live"]]
    survivors = [r for r in results if not r["killed_by"] and r["live"]]
    matrix: dict[str, dict[str, str]] = {}
    for cond in CONDITIONS:
        for how in HOWS:
            cell = [r for r in results if r["condition"] == cond and r["how"] == how]
            if cell:
                k = sum(1 for r in cell if r["killed_by"])
                n = sum(1 for r in cell if r["live"])
                matrix.setdefault(cond, {})[how] = f"{k}/{n}"
    live_n = len(killed) + len(survivors)
    return {"mutants": len(results), "killed": len(killed), "not_live": len(not_live),
            "live": live_n, "kill_rate": round(len(killed) / live_n, 4) if live_n else None,
            "survivors": [{"mutant": r["mutant"], "rows": r["rows"],
                           "exercised": r["changed_calls"] > 0} for r in survivors],
            "not_live_mutants": [r["mutant"] for r in not_live], "matrix": matrix}


def render(report: dict) -> str:
    """The kill matrix (condition x how: killed/live) and the survivors, as text."""
    hows = list(HOWS)
    rate = report["kill_rate"]
    lines = [f"faults mutate: {report['killed']} of {report['live']} live mutants killed "
             f"({'n/a' if rate is None else f'{100 * rate:.1f}%'}); {report['not_live']} not "
             f"live (counted apart); {report['mutants']} mutants in "
             f"{report.get('seconds', 0):.0f} s", "",
             f"{'condition':<22}" + "".join(f"{h:>9}" for h in hows)]
    for cond, cells in report["matrix"].items():
        lines.append(f"{cond:<22}" + "".join(f"{cells.get(h, '-'):>9}" for h in hows))
    lines.append("")
    if report["survivors"]:
        lines.append(f"SURVIVORS ({len(report['survivors'])}): live mutants no default-run "
                     "check killed, each a coverage gap:")
        lines += [f"  {s['mutant']}  (rows {', '.join(s['rows'])}; "
                  f"{'met by the checks, not caught' if s['exercised'] else 'never met'})"
                  for s in report["survivors"]]
    else:
        lines.append("No survivors.")
    return "\n".join(lines)


def mutate(device, *, rows=None, limit: int = 240, seed: int = 0, jobs: int = 2,
           timeout: float = 120.0, progress=lambda s: None) -> dict:
    """Plan, run and summarise (the CLI's and the test's one entry point)."""
    started = time.monotonic()
    torch.set_num_threads(1)
    the_plan = plan(device, rows=rows, limit=limit, seed=seed, progress=progress)
    results = run(device, the_plan, jobs=jobs, timeout=timeout, progress=progress)
    report = summary(results)
    report["seconds"] = round(time.monotonic() - started, 1)
    report["results"] = results
    return report
