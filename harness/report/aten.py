"""Which aten ops a computation dispatched, forward and backward (the common-cause input).

:func:`capture_aten_ops` runs a callable under a :class:`TorchDispatchMode` that collects
``func.overloadpacket`` names. An op counts as backward when autograd's engine is running a
graph task at the moment it dispatches (``torch._C._current_graph_task_id() != -1``), which
holds for ``loss.backward()`` and ``torch.autograd.grad`` alike, so the caller does not
have to split its forward from its backward. The op runner stores the result as
``info["aten_ops"]`` on each op record; :mod:`harness.report.cause` reads it.
"""

from __future__ import annotations

from typing import Any, Callable


def _backward_running() -> bool:
    import torch

    probe = getattr(torch._C, "_current_graph_task_id", None)
    return probe is not None and probe() != -1


def capture_aten_ops(fn: Callable[[], Any]) -> tuple[Any, dict[str, list[str]]]:
    """Call ``fn()`` and return ``(its result, {"fwd": [...], "bwd": [...]})``.

    Names look like ``aten.clamp_min`` (the overload packet, so ``clamp_min.Tensor`` and
    ``clamp_min.default`` count once), sorted. Bookkeeping ops that every computation
    dispatches (``aten.detach``, views of the autograd engine's own making) stay in: the
    common-cause finder discounts ops that unchanged subjects share anyway.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: dict[str, set[str]] = {"fwd": set(), "bwd": set()}

    class _Collect(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            phase = "bwd" if _backward_running() else "fwd"
            seen[phase].add(str(func.overloadpacket))
            return func(*args, **(kwargs or {}))

    with _Collect():
        result = fn()
    return result, {phase: sorted(names) for phase, names in seen.items()}
