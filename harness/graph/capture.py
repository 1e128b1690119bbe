"""What Dynamo makes of a model: graphs, breaks, recompiles, and a guard failure's fallback.

Note [Graph breaks and the user's line]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
``torch._dynamo.explain(fn)(*args)`` (torch >= 2.1) traces ``fn`` without compiling it and
returns the graphs it captured and a reason per break, each with the stack Dynamo was
tracing. The frame a person can act on is the innermost one in *their* code, not in
torch's (``torch/nn/modules/...``), torch_npu's, or the harness's own graph machinery and
faults (which stand for a vendor's patched torch function): :func:`user_frame` skips
those. A break in an op's wrapper is thus reported at the model's line that called it.

A graph count and a break count are metrics whose rise against the baseline is a
regression (rule ``lower(rel=1, abs=0, severity="regression")``): one more graph is a
capability lost on that stack, named with its reason and line in the record's ``info``.

Note [Recompiles over three shapes]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A model is called with three batch sizes (:data:`BATCHES`), once with ``dynamic`` unset
(Dynamo compiles the first shape static, recompiles once with the batch dimension
dynamic, then reuses it: 1 recompile today) and once with ``dynamic=True`` (0). A stack
that recompiles per shape, or per call, shows as a rise. The backend is
:func:`harness.graph.backends.eager_counting`: whether a frame recompiles is Dynamo's
decision (its guards), not the code generator's, and the count costs no compile.

A guard that fails once the recompile limit is reached must fall back to eager, not raise:
:func:`guard_fallback` sets the limit to 1 (``recompile_limit``, ``cache_size_limit``
before torch 2.6), compiles for one shape with ``dynamic=False`` and calls another; the
result must be the eager one, exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import os
from typing import Any, Callable, ContextManager, Optional, Sequence

import torch

from harness.device import Unsupported
from harness.graph import backends

BATCHES = (2, 3, 4)
"""Batch sizes of the recompile check (none is 1: Dynamo specialises size-1 dims)."""


def _package_dir(name: str) -> Optional[str]:
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.realpath(list(spec.submodule_search_locations)[0]) + os.sep


def _not_users() -> tuple[str, ...]:
    here = os.path.realpath(os.path.dirname(__file__)) + os.sep
    faults = os.path.realpath(os.path.join(here, os.pardir, "faults")) + os.sep
    return tuple(d for d in (_package_dir("torch"), _package_dir("torch_npu"),
                             _package_dir("torchair"), here, faults) if d)


def user_frame(stack: Sequence[Any]) -> Optional[Any]:
    """The innermost frame of ``stack`` in the user's code (Note [Graph breaks and the
    user's line]), or None."""
    skip = _not_users()
    for frame in reversed(list(stack)):
        if not os.path.realpath(frame.filename).startswith(skip):
            return frame
    return None


@dataclasses.dataclass(frozen=True)
class Break:
    """One graph break: Dynamo's reason and where in the user's code."""

    reason: str
    file: str
    line: int
    source: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "?"

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    def text(self) -> str:
        src = f"  ({self.source})" if self.source else ""
        return f"{self.where}: {self.reason}{src}"


@dataclasses.dataclass
class Graphs:
    """What ``explain`` saw for one call."""

    graphs: int
    breaks: list[Break]
    ops: int

    def metrics(self) -> dict[str, float]:
        return {"graphs": float(self.graphs), "graph_breaks": float(len(self.breaks)),
                "ops": float(self.ops)}

    def text(self) -> str:
        head = (f"{self.graphs} graph(s), {len(self.breaks)} break(s), {self.ops} ops "
                "captured")
        return "\n".join([head, *(f"  break at {b.text()}" for b in self.breaks)])


def _break(reason: Any) -> Break:
    text = " ".join(str(getattr(reason, "reason", reason)).split())
    frame = user_frame(getattr(reason, "user_stack", ()) or ())
    if frame is None:
        return Break(text, "", 0, "")
    source = (linecache.getline(frame.filename, frame.lineno) or "").strip()
    return Break(text, frame.filename, int(frame.lineno), source)


def explain(fn: Callable, *args) -> Graphs:
    """Dynamo's graphs and breaks for ``fn(*args)`` (Note [Graph breaks and the user's line]);
    :class:`~harness.device.Unsupported` where this torch has no ``explain``."""
    why = backends.unsupported()
    if why:
        raise Unsupported(why)
    import torch._dynamo

    if not hasattr(torch._dynamo, "explain"):
        raise Unsupported(f"torch {torch.__version__} has no torch._dynamo.explain")
    backends.reset()
    try:
        out = torch._dynamo.explain(fn)(*args)
    finally:
        backends.reset()
    if not hasattr(out, "graph_count"):  # the pre-2.1 tuple form
        raise Unsupported(f"torch {torch.__version__}'s torch._dynamo.explain returns no "
                          "ExplainOutput (graph_count, break_reasons)")
    breaks = [_break(r) for r in out.break_reasons]
    return Graphs(int(out.graph_count), breaks, int(getattr(out, "op_count", 0) or 0))


def _limit_name() -> Optional[str]:
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            return name
    return None


@dataclasses.dataclass
class Recompiles:
    """Compiles of one frame over :data:`BATCHES` with ``dynamic`` as given."""

    dynamic: Optional[bool]
    compiles: int
    shapes: list[tuple[int, ...]]
    first: int = 1

    @property
    def recompiles(self) -> int:
        """Graphs compiled after the first call (which compiles one per graph break + 1)."""
        return max(self.compiles - self.first, 0)


def _with_batch(x: torch.Tensor, batch: int, gen: torch.Generator) -> torch.Tensor:
    shape = (batch, *x.shape[1:])
    return torch.randn(shape, generator=gen, dtype=x.dtype).to(x.device)


def recompiles(model: torch.nn.Module, example: torch.Tensor, dynamic: Optional[bool],
               *, seed: int = 0,
               run: Optional[Callable[[], ContextManager]] = None) -> Recompiles:
    """Compile ``model`` with ``dynamic`` and call it on :data:`BATCHES`-sized copies of
    ``example`` (Note [Recompiles over three shapes]). ``run`` wraps each call (the DUT
    scope)."""
    why = backends.unsupported()
    if why:
        raise Unsupported(why)
    gen = torch.Generator().manual_seed(seed)
    backend = backends.eager_counting()
    backends.reset()
    try:
        compiled = torch.compile(model, backend=backend, dynamic=dynamic)
        shapes, first = [], 0
        for batch in BATCHES:
            x = _with_batch(example, batch, gen)
            shapes.append(tuple(x.shape))
            with (run() if run else contextlib.nullcontext()):
                compiled(x)
            first = first or len(backend.graphs)
    finally:
        backends.reset()
    return Recompiles(dynamic, len(backend.graphs), shapes, first)


@dataclasses.dataclass
class GuardFallback:
    """A guard failure past the recompile limit: did the call run, eagerly and right?"""

    limit: str
    compiles: int
    matches_eager: bool
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.matches_eager and self.compiles == 1


def guard_fallback(model: torch.nn.Module, example: torch.Tensor, *, seed: int = 0,
                   run: Optional[Callable[[], ContextManager]] = None) -> GuardFallback:
    """Compile for one shape with the recompile limit at 1, call another: Dynamo must run
    the second call eagerly (Note [Recompiles over three shapes])."""
    why = backends.unsupported()
    if why:
        raise Unsupported(why)
    import torch._dynamo

    limit = _limit_name()
    if limit is None:
        raise Unsupported(f"torch {torch.__version__}'s torch._dynamo.config has neither "
                          "recompile_limit nor cache_size_limit")
    gen = torch.Generator().manual_seed(seed)
    first, second = (_with_batch(example, b, gen) for b in BATCHES[:2])
    model.eval()  # BatchNorm's running statistics would differ between the two calls
    with torch.no_grad():
        expected = model(second)
    backend = backends.eager_counting()
    backends.reset()
    try:
        with torch._dynamo.config.patch(**{limit: 1}):
            compiled = torch.compile(model, backend=backend, dynamic=False)
            with torch.no_grad(), (run() if run else contextlib.nullcontext()):
                compiled(first)
                try:
                    got = compiled(second)
                except Exception as exc:  # noqa: BLE001 - the finding: it raised, not fell back
                    return GuardFallback(limit, len(backend.graphs), False,
                                         f"{type(exc).__name__}: {exc}".splitlines()[0])
    finally:
        backends.reset()
    return GuardFallback(limit, len(backend.graphs), bool(torch.equal(got.cpu(), expected.cpu())))
