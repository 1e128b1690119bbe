"""Detect ops the DUT silently runs on the host CPU (torch_npu's CPU fallback).

When torch_npu has no NPU kernel for an aten op it runs the CPU kernel instead (copying
the tensors back and forth) and warns once per op and process::

    CAUTION: The operator 'aten::linalg_lstsq.out' is not currently supported on the NPU
    backend and will fall back to run on the CPU. This may have performance implications.

The numbers are right, so no accuracy check notices; only the warning does. A check wraps
its DUT computation in :func:`capture` and records status ``fallback`` when the capture
saw one (``harness.regress`` treats ``pass -> fallback`` as a regression, so a kernel that
an upgrade drops is reported even though the op still "works").

Note [Fallback warnings are emitted once]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
torch_npu remembers which ops it has warned about (``has_op_name_warned``) and stays
silent the second time, so a plain warning capture would only flag the *first* case that
hits an op, and which case that is depends on test order. :func:`capture` therefore keeps
a process-wide set of ops seen falling back (:data:`KNOWN`) and, once that set is
non-empty, also traces the aten ops the captured code dispatches (a
``TorchDispatchMode``); a case that dispatches a known fallback op is flagged too. The
warning reaches Python as a ``UserWarning`` when raised from a Python call, but C++
threads (the autograd engine's) print it to stderr through c10's handler
(``[W ...] Warning: CAUTION: ...``), and some builds log it; ``capture`` listens to Python
warnings and ``logging`` always, and to file descriptor 2 when asked
(``stderr=True``, the default where the device's row says its warning can be printed
there: ``fallback_on_stderr``, the NPU's; see :func:`default_stderr_capture`).

What counts as a fallback warning is the device's row too (``fallback_warning``, Note
[Fallback and OOM texts are per device] in :mod:`harness.kinds`): ``capture(device_type)``
and ``parse(text, device_type)`` read it; without a device type they use torch's and
torch_npu's wording, :data:`harness.kinds.CPU_FALLBACK_WARNING`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import re
import sys
import tempfile
import threading
import warnings
from typing import Iterator, Optional

from harness.kinds import CPU_FALLBACK_WARNING, KINDS

# torch_npu: "CAUTION: The operator 'aten::x.out' is not currently supported on the NPU
# backend and will fall back to run on the CPU. This may have performance implications."
# torch's own XPU/PrivateUse1 fallbacks: "... on the XPU backend and will fall back to run
# on the CPU." Matched loosely (case, spacing, line breaks), the op name when present.
_OPERATOR = r"operator\s+'(?P<op>[^']+)'\s+is\s+not\s+currently\s+supported.*?"
UNKNOWN_OP = "<unknown op>"


@functools.cache
def patterns(warning: str = CPU_FALLBACK_WARNING) -> tuple[re.Pattern, re.Pattern]:
    """A fallback warning's text (a row's ``fallback_warning``) -> the pattern finding it
    and the one naming its op (``operator 'aten::x' is not currently supported ...``)."""
    return (re.compile(warning, re.IGNORECASE),
            re.compile(_OPERATOR + f"(?:{warning})", re.IGNORECASE | re.DOTALL))


FALLBACK_PATTERN, OPERATOR_PATTERN = patterns()
"""The patterns of torch's and torch_npu's wording (no device type given)."""


def warning_for(device_type: Optional[str]) -> str:
    """The fallback warning text of a device type's row; torch's for None or a type
    without a row (``meta``)."""
    kind = KINDS.get(device_type) if device_type is not None else None
    return kind.fallback_warning if kind is not None else CPU_FALLBACK_WARNING


KNOWN: set[str] = set()
"""Ops seen falling back in this process (Note [Fallback warnings are emitted once])."""
_KNOWN_LOCK = threading.Lock()


def parse(text: str, device_type: Optional[str] = None) -> list[str]:
    """The op names a block of warning/log text reports as falling back to the CPU.

    ``"... operator 'aten::sort.values' is not currently supported ... fall back to run
    on the CPU"`` -> ``["aten::sort.values"]``; a fallback message without an op name
    gives ``["<unknown op>"]``; unrelated text gives ``[]``. ``device_type`` picks the
    row whose ``fallback_warning`` is looked for (:func:`warning_for`).
    """
    found, operator = patterns(warning_for(device_type))
    if not found.search(text):
        return []
    names = [m.group("op") for m in operator.finditer(text)]
    return list(dict.fromkeys(names)) or [UNKNOWN_OP]


def _base_name(op: str) -> str:
    """``aten::sort.values`` -> ``aten::sort`` (the tracer sees other overloads)."""
    return op.split(".", 1)[0]


@dataclasses.dataclass
class Capture:
    """What one :func:`capture` saw: op names reported falling back, and from where;
    ``device_type`` is whose fallback warning it looked for (None: torch's wording)."""

    ops: list[str] = dataclasses.field(default_factory=list)
    sources: dict[str, str] = dataclasses.field(default_factory=dict)
    device_type: Optional[str] = None

    def add(self, op: str, source: str) -> None:
        if op not in self.ops:
            self.ops.append(op)
            self.sources[op] = source

    def __bool__(self) -> bool:
        return bool(self.ops)

    def describe(self) -> str:
        """One line for a record's message: which ops fell back and how that was seen."""
        if not self.ops:
            return "no CPU fallback"
        return "CPU fallback: " + ", ".join(f"{op} ({self.sources[op]})" for op in self.ops)


class _LogHandler(logging.Handler):
    def __init__(self, found: Capture) -> None:
        super().__init__(logging.WARNING)
        self.found = found

    def createLock(self) -> None:  # noqa: N802 - logging's name
        """No lock: ``emit`` only adds to its block's Capture (a lock and its fork hook
        per block were a tenth of a capture's cost; logging skips a None lock)."""
        self.lock = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed log record is not our failure
            return
        for op in parse(text, self.found.device_type):
            self.found.add(op, "log")


def _make_tracer(found: Capture, known: frozenset):
    """A dispatch mode flagging ops whose name (any overload) is in ``known``."""
    by_base: dict[str, list[str]] = {}
    for name in sorted(known):
        by_base.setdefault(_base_name(name), []).append(name)
    return _tracer_class()(found, by_base)


@functools.cache
def _tracer_class():
    """The tracer's class, made once (torch imported on first use): one class for every
    block, as ``harness.ops.policy._AtenOps`` says why."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Tracer(TorchDispatchMode):
        def __init__(self, found: Capture, by_base: dict[str, list[str]]) -> None:
            super().__init__()
            self.found, self.by_base = found, by_base

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            schema = getattr(func, "_schema", None)
            for name in self.by_base.get(getattr(schema, "name", None), ()):
                self.found.add(name, "known fallback op dispatched")
            return func(*args, **(kwargs or {}))

    return _Tracer


@contextlib.contextmanager
def _stderr_to(found: Capture) -> Iterator[None]:
    """Copy what C++ writes to fd 2 meanwhile, scan it, and pass it through."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no real fd 2 (embedded, pytest -s off)
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            data = sink.read().decode("utf-8", "replace")
            if data:
                with contextlib.suppress(OSError, ValueError):
                    os.write(2, data.encode("utf-8"))  # pass it through
                for op in parse(data, found.device_type):
                    found.add(op, "stderr")


def default_stderr_capture(device_type: Optional[str]) -> bool:
    """Whether to watch fd 2 by default: only where the device's row says its fallback
    warning can be printed there (``fallback_on_stderr``: the NPU's)."""
    kind = KINDS.get(device_type) if device_type is not None else None
    return kind is not None and kind.fallback_on_stderr


@contextlib.contextmanager
def capture(device_type: Optional[str] = None, *, stderr: Optional[bool] = None,
            trace_known: bool = True, logger: Optional[logging.Logger] = None
            ) -> Iterator[Capture]:
    """Collect the ops reported falling back to the CPU while the block runs.

    Args:
        device_type: the DUT's type: its row's ``fallback_warning`` is what is looked
            for, and its ``fallback_on_stderr`` the default of ``stderr`` (None: torch's
            wording, no fd 2).
        stderr: also scan what is written to file descriptor 2 (C++ warnings printed by
            c10's handler); costs a temp file per block. Default: the row's.
        trace_known: flag dispatches of ops already known to fall back (Note [Fallback
            warnings are emitted once]).
        logger: the logger to listen on (default: the root logger, so every library's).

    Yields a :class:`Capture`, filled when the block exits. Fallback warnings are
    swallowed (recorded, not printed); every other warning is re-emitted unchanged.
    """
    found = Capture(device_type=device_type)
    if stderr is None:
        stderr = default_stderr_capture(device_type)
    target = logger if logger is not None else logging.getLogger()
    handler = _LogHandler(found)
    target.addHandler(handler)
    with _KNOWN_LOCK:
        known = frozenset(KNOWN)
    stack = contextlib.ExitStack()
    caught: list[warnings.WarningMessage] = []
    try:
        with stack:
            caught = stack.enter_context(warnings.catch_warnings(record=True))
            warnings.simplefilter("always")
            if stderr:
                stack.enter_context(_stderr_to(found))
            if trace_known and known:
                stack.enter_context(_make_tracer(found, known))
            yield found
    finally:
        target.removeHandler(handler)
        for message in caught:
            ops = parse(str(message.message), device_type)
            for op in ops:
                found.add(op, "warning")
            if not ops:  # not ours: hand it on to whoever listens outside
                warnings.warn_explicit(message.message, message.category, message.filename,
                                       message.lineno, source=message.source)
        with _KNOWN_LOCK:
            KNOWN.update(op for op in found.ops if op != UNKNOWN_OP)


def forget() -> None:
    """Clear :data:`KNOWN` (tests; a fresh process starts empty anyway)."""
    with _KNOWN_LOCK:
        KNOWN.clear()
