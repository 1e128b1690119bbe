"""A sub-check: one function every rank runs, named so a rank can import it.

Note [Naming a sub-check]
~~~~~~~~~~~~~~~~~~~~~~~~~
Ranks are other processes (started by :func:`harness.distributed.launch`, or by torchrun
on other hosts), so a sub-check travels as a name, never as a function object:

- ``module:function`` for any importable top-level function (a user's own checks);
- a bare name (``collective``, ``ddp_train``) for the family's built-in rank programs in
  :mod:`harness.distributed.checks` (``checks.BUILT_IN``), so the torchrun command works
  from an installed package, with no checkout on the path;
- a function, which becomes ``module:function`` plus its file: a module pytest imported
  by path (a test file) is not importable by name in the rank, so the rank loads the file.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
from typing import Callable, Optional, Union

CHECKS_MODULE = "harness.distributed.checks"
"""Where bare sub-check names are looked up (``collective`` is ``CHECKS_MODULE:collective``)."""


@dataclasses.dataclass(frozen=True)
class SubCheck:
    """One function every rank runs: ``target`` is ``module:function``."""

    name: str
    target: str
    kwargs: dict = dataclasses.field(default_factory=dict)
    file: Optional[str] = None  # the module's file, for modules imported by path (pytest)

    @classmethod
    def of(cls, fn: Union[Callable, str], name: Optional[str] = None, **kwargs) -> SubCheck:
        """A sub-check from a top-level function, a ``module:function`` string or the
        name of a built-in rank program (Note [Naming a sub-check])."""
        if isinstance(fn, str):
            module, _, attr = fn.partition(":")
            if not attr:
                return cls.of(built_in(fn), name, **kwargs)
            if not module:
                raise ValueError(f"check {fn!r} must be 'module:function' or a built-in name")
            return cls(name or attr, fn, dict(kwargs))
        if "<" in fn.__qualname__ or "." in fn.__qualname__:
            raise ValueError(f"{fn.__qualname__} is not a top-level function; ranks import "
                             "checks by name, so define it at module level")
        module = sys.modules.get(fn.__module__)
        file = getattr(module, "__file__", None)
        return cls(name or fn.__name__, f"{fn.__module__}:{fn.__qualname__}", dict(kwargs),
                   os.path.abspath(file) if file else None)

    def to_json(self) -> dict:
        return {"name": self.name, "target": self.target, "kwargs": self.kwargs,
                "file": self.file}

    @classmethod
    def from_json(cls, data: dict) -> SubCheck:
        return cls(data["name"], data["target"], data.get("kwargs") or {}, data.get("file"))

    def load(self) -> Callable:
        """The function itself (in the rank): imported by name, else from ``file``."""
        module_name, _, attr = self.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            if not self.file:
                raise
            spec = importlib.util.spec_from_file_location(module_name, self.file)
            if spec is None or spec.loader is None:
                raise
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        fn = module
        for part in attr.split("."):
            fn = getattr(fn, part)
        return fn


def built_in(name: str) -> Callable:
    """The built-in rank program called ``name``; a ``ValueError`` listing them otherwise.

    Imports :mod:`harness.distributed.checks` (and so torch) on first use.
    """
    checks = importlib.import_module(CHECKS_MODULE)
    try:
        return checks.BUILT_IN[name]
    except KeyError:
        raise ValueError(f"check {name!r} is not a built-in rank program; give "
                         f"'module:function' or one of {', '.join(checks.BUILT_IN)}") from None
