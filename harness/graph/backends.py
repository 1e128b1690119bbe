"""The ``torch.compile`` backend of a device kind, and a wrapper that counts its work.

Note [Graph-mode backend]
~~~~~~~~~~~~~~~~~~~~~~~~~
A device kind's row names the backends graph mode uses on it (``compile_backends`` in
:mod:`harness.kinds`): ``inductor`` on cpu, cuda and xpu; ``npu`` on Ascend, the backend
torch_npu registers with Dynamo (torchair's compiler, which hands whole graphs to CANN).
The first name this stack's Dynamo registry knows wins; where none is known (mps; an npu
stack without torchair) it is :data:`FALLBACK`, ``aot_eager``: Dynamo's capture and
AOTAutograd's joint graph, run by the eager kernels. That still tests capture, graph
breaks, recompiles and the functionalised forward and backward, which is where most
graph-mode defects are, but not a code generator: the record says which backend ran.

SimNPU (``HARNESS_SIMNPU=1``) has no torchair; :func:`backend_for` registers a simulated
``npu`` backend there (``aot_eager`` underneath, on the simulated tensors), so the npu
path (the row, the name, the records under ``npu``) runs end to end. It proves the
harness, not a compiler.

:data:`CHEAP` is the backend of the default run's checks (``aot_eager``, a second or two per
model); the kind's own backend (inductor: 6-20 s per model on two cores, cold) runs
behind ``--run-slow``.

Note [Counting what the backend compiled]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Dynamo hands each captured graph to the backend. A backend that raises is an error, unless
Dynamo is told to suppress errors (``torch._dynamo.config.suppress_errors``, which some
vendor stacks set): then the frame silently runs eagerly, every number is eager's and
every parity check stays green. :class:`Counting` is the backend Dynamo sees: it looks up
the real one by name at each call (:func:`compiler`, which is what a fault replaces),
compiles through it, and keeps what happened: the graphs compiled (their ops), and each
failure with its exception. A step whose graphs were captured but not all compiled ran
(partly) eagerly: the ``compiled`` record says ``fallback``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

FALLBACK = "aot_eager"
"""The backend where a kind's row names none this stack registers."""

CHEAP = "aot_eager"
"""The default run's backend (Note [Graph-mode backend])."""

def _lookup(name: str) -> Callable:
    """Dynamo's registered backend ``name``: ``torch._dynamo.lookup_backend`` where it is
    exported, else its registry's (torch 2.1 has only the latter)."""
    import torch._dynamo

    lookup = getattr(torch._dynamo, "lookup_backend", None)
    if lookup is None:
        from torch._dynamo.backends.registry import lookup_backend as lookup
    return lookup(name)


def registered(name: str) -> bool:
    """Whether Dynamo's backend registry knows ``name`` on this stack."""
    try:
        _lookup(name)
    except Exception:  # noqa: BLE001 - an unknown name raises InvalidBackend, older ones other
        return False
    return True


def simulated_npu(gm, example_inputs):
    """SimNPU's ``npu`` backend: ``aot_eager`` on the simulated tensors (it proves the
    harness's npu path, not a compiler)."""
    return compiler(FALLBACK)(gm, example_inputs)


def backend_for(device, requested: Optional[str] = None) -> str:
    """The backend name graph mode uses on ``device`` (Note [Graph-mode backend]), or
    ``requested`` (``--graph-backend``) when Dynamo registers it (ValueError naming the
    registered ones when not)."""
    import torch._dynamo

    wanted = device.kind.compile_backends
    if device.simulated and "npu" in wanted and not registered("npu"):
        torch._dynamo.register_backend(simulated_npu, name="npu")
    if requested:
        if not registered(requested):
            raise ValueError(f"--graph-backend {requested!r}: Dynamo registers no such "
                             "backend on this stack; choose from "
                             f"{', '.join(torch._dynamo.list_backends(exclude_tags=()))}")
        return requested
    for name in wanted:
        if registered(name):
            return name
    return FALLBACK


def compiler(name: str) -> Callable:
    """The registered backend callable ``name`` (looked up at each compile: a fault that
    models a changed backend replaces this function)."""
    return _lookup(name)


@dataclasses.dataclass
class Compiled:
    """One graph the backend was handed."""

    ops: int
    error: str = ""


@dataclasses.dataclass
class Counting:
    """The backend Dynamo calls: compiles through :func:`compiler` ``(name)`` and keeps what
    happened (Note [Counting what the backend compiled])."""

    name: str
    graphs: list[Compiled] = dataclasses.field(default_factory=list)

    def __call__(self, gm, example_inputs) -> Any:
        ops = sum(1 for node in gm.graph.nodes
                  if node.op in ("call_function", "call_method", "call_module"))
        try:
            out = compiler(self.name)(gm, example_inputs)
        except Exception as exc:
            self.graphs.append(Compiled(ops, f"{type(exc).__name__}: {exc}".splitlines()[0]))
            raise
        self.graphs.append(Compiled(ops))
        return out

    @property
    def compiled(self) -> int:
        return sum(1 for graph in self.graphs if not graph.error)

    @property
    def errors(self) -> list[str]:
        return [graph.error for graph in self.graphs if graph.error]


def eager_counting() -> Callable:
    """A backend that runs the captured graph as it is and counts the graphs: what the
    recompile checks use, since what recompiles is Dynamo's decision, not the backend's."""
    graphs: list[int] = []

    def backend(gm, example_inputs):
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    backend.graphs = graphs  # type: ignore[attr-defined] - the count, read by the caller
    return backend


def reset() -> None:
    """Forget every compiled frame (each check starts from a cold Dynamo cache; inductor's
    on-disk caches stay)."""
    import torch._dynamo

    torch._dynamo.reset()


def unsupported() -> Optional[str]:
    """Why this stack has no graph mode, or None (Note [Missing features of older stacks]
    in :mod:`harness.device`)."""
    import torch

    if not hasattr(torch, "compile"):
        return f"torch {torch.__version__} has no torch.compile"
    try:
        import torch._dynamo  # noqa: F401 - the import is the probe
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason, not a crash
        return f"torch._dynamo does not import: {type(exc).__name__}: {exc}"
    return None
