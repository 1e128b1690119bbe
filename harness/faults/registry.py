"""The fault type, its two mechanisms and the registry of built-in faults.

:class:`Fault` is a named defect; :func:`perturb_op` (change one aten op's output) and
:func:`patch_attr` (replace a Python-level torch API) build the two common kinds. The
registry (:func:`registry`, :func:`resolve`) finds every built-in fault: the ``FAULTS``
list of each module of :mod:`harness.faults.catalog` (a module added there is picked up
automatically) and the scope audits of :mod:`harness.faults.audit`. Activating faults
for a run is :mod:`harness.faults`' job (Note [Fault injection state]).
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import pkgutil
from typing import Any, Callable, ContextManager, Iterable, Iterator, Optional, Sequence


class FaultError(LookupError):
    """An unknown or malformed fault name."""


@dataclasses.dataclass(frozen=True)
class Fault:
    """A named defect.

    Attributes:
        name: unique name, ``<family>.<what>`` by convention.
        family: the check family that must catch it (``ops``, ``training``, ...).
        description: what is broken, in one sentence.
        checks: pytest arguments (paths or node ids) that select the checks expected to
            catch it; ``faults check`` runs only those.
        activate: called with the :class:`~harness.device.Device` when the outermost DUT
            scope is entered; returns a context manager that is active for the scope.
        pytest_args: extra pytest arguments for the fault's run (a shorter timeout...).
        exclusive: its runs (and their clean run) must have the machine to themselves:
            timing faults, whose checks a parallel run would slow (``faults check`` runs
            them one at a time after the others).
        parity: the parity section (:data:`harness.parity.model.SECTIONS`) this fault
            must show in when a faulted run is compared with a clean run of another
            device type (``faults check --parity-reference TYPE``); empty: not a parity
            fault.
        effect: a timing fault's slow-down, as a fraction (0.08: the timed work takes 8%
            longer); 0: not a timing fault. A miss where every compare's minimum
            detectable effect exceeds it is beyond the host's power, not the detector's
            defect (Note [A miss beyond the host's power] in :mod:`harness.faults.check`).
    """

    name: str
    family: str
    description: str
    checks: tuple[str, ...]
    activate: Callable[[Any], ContextManager[Any]]
    pytest_args: tuple[str, ...] = ()
    exclusive: bool = False
    parity: str = ""
    effect: float = 0.0


def perturb_op(name: str, *, family: str, description: str, op: str,
               transform: Callable[[Any, tuple, dict], Any], checks: Sequence[str],
               dtypes: Optional[Iterable[str]] = None,
               pytest_args: Sequence[str] = (), parity: str = "",
               when: Optional[Callable[[tuple, dict], bool]] = None) -> Fault:
    """A fault that changes one aten op's output inside the DUT scope.

    Args:
        op: ``aten.<name>.<overload>`` or ``aten.<name>`` (every overload).
        transform: ``(out, args, kwargs) -> new_out``; runs with the fault's dispatch
            mode switched off, so it may call torch freely.
        dtypes: restrict to outputs whose first tensor has one of these dtype names.
        parity: the parity section it must show in (:class:`Fault`).
        when: ``(args, kwargs) -> bool``: the op is wrong only for calls it accepts (a
            kernel wrong for one memory format, size band or value class); called with
            the mode switched off, before the op runs.
    """
    wanted = frozenset(dtypes) if dtypes is not None else None

    def activate(_device):
        return _PerturbMode(op, transform, wanted, when)

    return Fault(name, family, description, tuple(checks), activate, tuple(pytest_args),
                 parity=parity)


def patch_attr(name: str, *, family: str, description: str, target: str,
               replace: Callable[[Any], Any], checks: Sequence[str],
               pytest_args: Sequence[str] = (), parity: str = "") -> Fault:
    """A fault that replaces a Python-level torch API inside the DUT scope.

    Args:
        target: dotted path, e.g. ``torch.nn.functional.batch_norm`` or
            ``torch.optim.Adam.step``.
        replace: ``original -> replacement``.
        parity: the parity section it must show in (:class:`Fault`).
    """

    def activate(_device):
        return _patched(target, replace)

    return Fault(name, family, description, tuple(checks), activate, tuple(pytest_args),
                 parity=parity)


# ----------------------------------------------------------------------- mechanisms

def first_tensor(value):
    """The first tensor in ``value`` (a tensor, or nested tuples/lists of them), or None."""
    import torch

    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            found = first_tensor(item)
            if found is not None:
                return found
    return None


def _make_perturb_mode_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class PerturbMode(TorchDispatchMode):
        def __init__(self, op, transform, dtypes, when=None):
            super().__init__()
            self.op = op
            self.transform = transform
            self.dtypes = dtypes
            self.when = when

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            mine = self.op in (str(func), str(func.overloadpacket))
            if mine and self.when is not None:
                mine = bool(self.when(args, kwargs))
            out = func(*args, **kwargs)
            if mine:
                tensor = first_tensor(out)
                dtype_name = str(tensor.dtype).removeprefix("torch.") if tensor is not None else None
                if self.dtypes is None or dtype_name in self.dtypes:
                    out = self.transform(out, args, kwargs)
            return out

    return PerturbMode


_PERTURB_MODE_CLASS = None


def _PerturbMode(op, transform, dtypes, when=None):  # noqa: N802 - a class constructor
    global _PERTURB_MODE_CLASS
    if _PERTURB_MODE_CLASS is None:  # defer importing torch until a fault is used
        _PERTURB_MODE_CLASS = _make_perturb_mode_class()
    return _PERTURB_MODE_CLASS(op, transform, dtypes, when)


def resolve_attr(target: str) -> tuple[Any, str]:
    """``a.b.c.attr`` -> (object ``a.b.c``, ``"attr"``), importing the longest module prefix."""
    parts = target.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:-1]:
            owner = getattr(owner, part)
        if not hasattr(owner, parts[-1]):
            raise FaultError(f"patch target {target!r}: {owner!r} has no attribute {parts[-1]!r}")
        return owner, parts[-1]
    raise FaultError(f"patch target {target!r} does not name an importable module attribute")


@contextlib.contextmanager
def _patched(target: str, replace: Callable[[Any], Any]) -> Iterator[None]:
    owner, attr = resolve_attr(target)
    missing = object()
    own = vars(owner).get(attr, missing) if isinstance(owner, type) else getattr(owner, attr)
    setattr(owner, attr, replace(getattr(owner, attr)))
    try:
        yield
    finally:
        if own is missing:  # inherited: remove the override, the base's stays
            delattr(owner, attr)
        else:
            setattr(owner, attr, own)


# ------------------------------------------------------------------------- registry

_REGISTRY: Optional[dict[str, Fault]] = None

AUDIT_MODULE = "harness.faults.audit"
"""Scope audits (one per family, Note [DUT-scope audit]): registered beside the catalog."""


def _fault_modules() -> list[str]:
    """Every module that contributes built-in faults: the audit, then the catalog's by name
    (the order ``faults list`` and ``faults check`` show them in)."""
    from harness.faults import catalog

    names = sorted(info.name for info in pkgutil.iter_modules(catalog.__path__))
    return [AUDIT_MODULE] + [f"{catalog.__name__}.{name}" for name in names]


def registry() -> dict[str, Fault]:
    """Every built-in fault, by name (imports the modules of :func:`_fault_modules` once)."""
    global _REGISTRY
    if _REGISTRY is None:
        found: dict[str, Fault] = {}
        for module_name in _fault_modules():
            module = importlib.import_module(module_name)
            for fault in getattr(module, "FAULTS", ()):
                if fault.name in found:
                    raise FaultError(f"fault {fault.name!r} is defined twice "
                                     f"(second time in {module.__name__})")
                found[fault.name] = fault
        _REGISTRY = found
    return _REGISTRY


def resolve(name: str) -> Fault:
    """A built-in fault by name, or ``package.module:NAME`` for one defined elsewhere."""
    if ":" in name:
        module_name, _, attr = name.partition(":")
        if not module_name or not attr:
            raise FaultError(f"--inject-fault {name!r}: expected package.module:NAME with both "
                             "parts, e.g. mypackage.myfaults:MY_FAULT")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise FaultError(f"--inject-fault {name}: cannot import {module_name!r} ({exc}); "
                             "is it on PYTHONPATH?") from exc
        except Exception as exc:  # noqa: BLE001 - the user's module itself is broken
            raise FaultError(f"--inject-fault {name}: importing {module_name!r} raised "
                             f"{type(exc).__name__}: {exc}; fix that module (run `python -c "
                             f"'import {module_name}'` to see the traceback)") from exc
        fault = getattr(module, attr, None)
        if not isinstance(fault, Fault):
            raise FaultError(f"--inject-fault {name}: {module_name}.{attr} is not a "
                             "harness.faults.Fault (define it with perturb_op, patch_attr "
                             "or Fault)")
        return fault
    faults = registry()
    if name not in faults:
        raise FaultError(f"unknown fault {name!r}; `python -m harness faults list` shows the "
                         f"{len(faults)} known faults, or use package.module:NAME")
    return faults[name]
