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

Built-in faults live in ``harness/faults/catalog/<family>.py`` as a ``FAULTS`` list (one
file per check family; a new file is picked up automatically), beside the scope audits of
``harness/faults/audit.py``. A fault defined elsewhere is loaded with
``--inject-fault package.module:NAME``.

Injection: ``--inject-fault NAME`` (or the ``HARNESS_FAULTS`` environment variable,
comma-separated, which child processes inherit and which is read when this module is
imported) activates faults for the whole run. A fault acts only inside the DUT scope
(Note [DUT scope] in :mod:`harness.device`): the reference stays correct.

The package:

* :mod:`harness.faults.registry`: :class:`Fault`, :func:`perturb_op`, :func:`patch_attr`
  and the registry of built-in faults (:func:`registry`, :func:`resolve`);
* :mod:`harness.faults.catalog`: the built-in faults, one module per check family;
* :mod:`harness.faults.audit`: the DUT-scope audit of every family;
* :mod:`harness.faults.check`: ``python -m harness faults check``;
* this module: the public names, and which faults are active in this process.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional, Sequence

from harness.faults.registry import (
    Fault,
    FaultError,
    first_tensor,
    patch_attr,
    perturb_op,
    registry,
    resolve,
    resolve_attr,
)

ENV_VAR = "HARNESS_FAULTS"

# Note [Fault injection state]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Which faults are active is this module's state (``_active_names``, ``_active``), not the
# registry's: ``Device.scope`` asks :func:`active` on every DUT scope, and tests switch a
# fault on for one test with ``monkeypatch.setattr(faults, "_active", [fault])``, which
# works only while the state lives in the module they patch.

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


def env_error(exc: Exception) -> str:
    """The usage error for a bad ``HARNESS_FAULTS`` (read from the environment, so the
    message must say where the name came from)."""
    return (f"{ENV_VAR}={os.environ.get(ENV_VAR, '')!r} in the environment: {exc}. Unset "
            f"{ENV_VAR} (faults for a run are --inject-fault NAME) or set it to known names")


def check_env() -> None:
    """Raise :class:`FaultError` (with :func:`env_error`'s text) when ``HARNESS_FAULTS``
    names a fault that does not resolve (read from the environment now)."""
    try:
        for name in os.environ.get(ENV_VAR, "").split(","):
            if name:
                resolve(name)
    except FaultError as exc:
        raise FaultError(env_error(exc)) from None


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


__all__ = ["ENV_VAR", "Fault", "FaultError", "activated", "active", "check_env", "env_error",
           "first_tensor", "patch_attr", "perturb_op", "registry", "resolve", "resolve_attr", "set_active"]
