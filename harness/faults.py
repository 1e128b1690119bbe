"""Deliberate defects that emulate a broken backend on the DUT (self-validation).

A check that cannot fail is worthless, so every check family ships faults it must
catch, and ``python -m harness faults check`` proves each one turns a green run red.

Defining a fault (the public API; the same for built-in and user faults)::

    from harness.faults import perturb_op, patch_attr

    EXP_DRIFT = perturb_op(
        "my.exp_drift", family="ops",
        description="exp returns values 1e-4 too large (relative)",
        op="aten.exp.default",                      # or "aten.exp" for every overload
        transform=lambda out, args, kwargs: out * (1 + 1e-4),
        dtypes=("float32",),                        # only outputs of these dtypes
        checks=("suites/ops/test_catalog.py",),     # pytest args expected to catch it
    )

    LEAKY_RELU = patch_attr(
        "my.relu_leaks", family="example",
        description="relu lets 1% of negative values through",
        target="torch.nn.functional.relu",
        replace=lambda orig: (lambda x, inplace=False: torch.where(x > 0, x, 0.01 * x)),
        checks=("suites/example",),
    )

Built-in faults live in ``harness/fault_catalog/<family>.py`` as a ``FAULTS`` list (one
file per check family; a new file is picked up automatically). A fault defined
elsewhere is loaded with ``--inject-fault package.module:NAME``.

Injection: ``--inject-fault NAME`` (or the ``HARNESS_FAULTS`` environment variable,
comma-separated, which child processes inherit and which is read when this module is
imported) activates faults for the whole run. A fault acts only inside the DUT scope
(Note [DUT scope] in :mod:`harness.device`): the reference stays correct.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import pkgutil
from typing import Any, Callable, ContextManager, Iterable, Iterator, Optional, Sequence

ENV_VAR = "HARNESS_FAULTS"


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
    """

    name: str
    family: str
    description: str
    checks: tuple[str, ...]
    activate: Callable[[Any], ContextManager[Any]]
    pytest_args: tuple[str, ...] = ()


def perturb_op(name: str, *, family: str, description: str, op: str,
               transform: Callable[[Any, tuple, dict], Any], checks: Sequence[str],
               dtypes: Optional[Iterable[str]] = None,
               pytest_args: Sequence[str] = ()) -> Fault:
    """A fault that changes one aten op's output inside the DUT scope.

    Args:
        op: ``aten.<name>.<overload>`` or ``aten.<name>`` (every overload).
        transform: ``(out, args, kwargs) -> new_out``; runs with the fault's dispatch
            mode switched off, so it may call torch freely.
        dtypes: restrict to outputs whose first tensor has one of these dtype names.
    """
    wanted = frozenset(dtypes) if dtypes is not None else None

    def activate(_device):
        return _PerturbMode(op, transform, wanted)

    return Fault(name, family, description, tuple(checks), activate, tuple(pytest_args))


def patch_attr(name: str, *, family: str, description: str, target: str,
               replace: Callable[[Any], Any], checks: Sequence[str],
               pytest_args: Sequence[str] = ()) -> Fault:
    """A fault that replaces a Python-level torch API inside the DUT scope.

    Args:
        target: dotted path, e.g. ``torch.nn.functional.batch_norm`` or
            ``torch.optim.Adam.step``.
        replace: ``original -> replacement``.
    """

    def activate(_device):
        return _patched(target, replace)

    return Fault(name, family, description, tuple(checks), activate, tuple(pytest_args))


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
        def __init__(self, op, transform, dtypes):
            super().__init__()
            self.op = op
            self.transform = transform
            self.dtypes = dtypes

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if self.op in (str(func), str(func.overloadpacket)):
                tensor = first_tensor(out)
                dtype_name = str(tensor.dtype).removeprefix("torch.") if tensor is not None else None
                if self.dtypes is None or dtype_name in self.dtypes:
                    out = self.transform(out, args, kwargs)
            return out

    return PerturbMode


_PERTURB_MODE_CLASS = None


def _PerturbMode(op, transform, dtypes):  # noqa: N802 - behaves as a class constructor
    global _PERTURB_MODE_CLASS
    if _PERTURB_MODE_CLASS is None:  # defer importing torch until a fault is used
        _PERTURB_MODE_CLASS = _make_perturb_mode_class()
    return _PERTURB_MODE_CLASS(op, transform, dtypes)


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


def registry() -> dict[str, Fault]:
    """Every built-in fault, by name (imports ``harness.fault_catalog.*`` once)."""
    global _REGISTRY
    if _REGISTRY is None:
        from harness import fault_catalog

        found: dict[str, Fault] = {}
        for info in sorted(pkgutil.iter_modules(fault_catalog.__path__), key=lambda m: m.name):
            module = importlib.import_module(f"{fault_catalog.__name__}.{info.name}")
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


# ------------------------------------------------------------------------ injection

_active_names: list[str] = [n for n in os.environ.get(ENV_VAR, "").split(",") if n]
_active: Optional[list[Fault]] = None


def set_active(names: Sequence[str]) -> list[Fault]:
    """Activate faults for this process and (via the environment) its children."""
    global _active_names, _active
    resolved = [resolve(name) for name in names]
    _active_names = list(names)
    _active = resolved
    if names:
        os.environ[ENV_VAR] = ",".join(names)
    else:
        os.environ.pop(ENV_VAR, None)
    return resolved


def active() -> list[Fault]:
    """The faults active in this process."""
    global _active
    if _active is None:
        _active = [resolve(name) for name in _active_names]
    return _active


@contextlib.contextmanager
def activated(device) -> Iterator[None]:
    """Enter every active fault for one DUT scope (called by ``Device.scope``)."""
    faults = active()
    if not faults:
        yield
        return
    with contextlib.ExitStack() as stack:
        for fault in faults:
            stack.enter_context(fault.activate(device))
        yield
