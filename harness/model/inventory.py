"""Will it run? The captured ops against the DUT's dispatcher, fallbacks and known failures.

For each distinct op of a :class:`~harness.model.capture.StepCapture`, :func:`inventory` asks
the dispatcher whether the DUT's backend has a kernel
(``torch._C._dispatch_has_kernel_for_dispatch_key(name, key)``, the key from the device
type's row, :func:`dispatch_key`), whether it runs through a composite (a decomposition into other
ops, which then need kernels), only through a backend fallback (torch_npu's CPU
fallback), or not at all; adds what the case runs saw falling back to the host CPU
(:mod:`harness.fallback`), and what :data:`KNOWN_BAD` lists. The summary gives ops and
their share of the step's calls per verdict: ``ok``, ``fallback``, ``unsupported``,
``known-bad``.

Note [Dispatcher probes]
~~~~~~~~~~~~~~~~~~~~~~~~
``_dispatch_has_kernel_for_dispatch_key`` is true only for a kernel registered to that
key itself; a structured op's functional variant and many factory ops are registered
to ``CompositeExplicitAutograd(NonFunctional)`` and run on any backend, and
``_dispatch_has_computed_kernel_for_dispatch_key`` is also true where only a backend
fallback (a boxed kernel for every op of the key) would run. The order of
:data:`KERNEL_CLASSES` is therefore: the backend's own kernel, a composite, a fallback,
missing. A backend that is not loaded in this process (CUDA kernels in a CPU-only torch,
PrivateUse1 without torch_npu) has no kernels at all; :func:`inventory` says so instead
of calling every op unsupported.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Iterable, Optional, Sequence

import torch

from harness.kinds import KINDS
from harness.model.capture import IGNORED_NAMESPACES, StepCapture


def dispatch_key(device_type: str) -> str:
    """The dispatch key a device type's kernels register to (its row's ``dispatch_key``:
    ``PrivateUse1`` for torch_npu's NPU)."""
    if device_type not in KINDS:
        raise ValueError(f"unknown device type {device_type!r}; choose from "
                         f"{', '.join(KINDS)}")
    return KINDS[device_type].dispatch_key


COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional",
                  "CompositeImplicitAutograd")

KERNEL_CLASSES = ("kernel", "composite", "backend fallback", "missing")
"""What the dispatcher has for an op on a key (Note [Dispatcher probes])."""

VERDICTS = ("ok", "fallback", "unsupported", "known-bad")

PROBE_OP = "aten::add.Tensor"
"""An op every loaded backend implements: no kernel for it means the backend is absent."""


@dataclasses.dataclass(frozen=True)
class KnownBad:
    """A known failure of an op on a stack: device type, stack id and op are globs."""

    device: str
    stack: str
    op: str
    reason: str
    link: str = ""


KNOWN_BAD: tuple[KnownBad, ...] = ()
"""Known-bad ops per device and stack (data; ``KnownBad("npu", "cann-8.0.*",
"aten::_foreach_norm*", "returns inf for fp16 lists", "https://...")``). Empty in this
checkout: add a row when a kernel is known broken on a stack, with a link."""


def _has_kernel(name: str, key: str) -> bool:
    """Seam for tests (monkeypatch): a kernel registered to exactly this key."""
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, key))


def _has_computed(name: str, key: str) -> bool:
    """Seam for tests: anything the dispatcher would run for this key (fallbacks too)."""
    return bool(torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, key))


def kernel_class(name: str, key: str) -> str:
    """One of :data:`KERNEL_CLASSES` for an op (``aten::add.Tensor``) on a dispatch key."""
    try:
        if _has_kernel(name, key):
            return "kernel"
        if any(_has_kernel(name, composite) for composite in COMPOSITE_KEYS):
            return "composite"
        if _has_computed(name, key):
            return "backend fallback"
    except RuntimeError:  # an op the dispatcher does not know (a custom op not loaded)
        return "missing"
    return "missing"


def backend_loaded(key: str) -> bool:
    """Whether any kernel is registered to the key (Note [Dispatcher probes])."""
    try:
        return _has_kernel(PROBE_OP, key)
    except RuntimeError:
        return False


@dataclasses.dataclass
class OpInventory:
    """One op of the step on one target."""

    op: str              # aten.add.Tensor
    qualname: str        # aten::add.Tensor
    calls: int
    signatures: int
    phases: list[str]
    kernel: str          # KERNEL_CLASSES
    verdict: str         # VERDICTS
    fallback_seen: bool = False
    known_bad: str = ""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Inventory:
    """The step's ops on one target device type."""

    model: str
    device_type: str
    dispatch_key: str
    loaded: bool
    ops: list[OpInventory]

    @property
    def total_calls(self) -> int:
        return sum(o.calls for o in self.ops)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per verdict: ops, calls and share of calls."""
        total = max(self.total_calls, 1)
        out = {}
        for verdict in VERDICTS:
            ops = [o for o in self.ops if o.verdict == verdict]
            calls = sum(o.calls for o in ops)
            out[verdict] = {"ops": len(ops), "calls": calls, "share": calls / total}
        return out

    @property
    def will_run(self) -> bool:
        return self.loaded and not any(o.verdict == "unsupported" for o in self.ops)

    def text(self, limit: int = 12) -> str:
        """The "will it run" block a person reads first."""
        summary = self.summary()
        head = (f"will it run on {self.device_type} ({self.dispatch_key} kernels): "
                + ("yes" if self.will_run else "NO"))
        lines = [head]
        if not self.loaded:
            lines.append(f"  the {self.dispatch_key} backend is not loaded in this process "
                         f"(no kernel for {PROBE_OP}); install and import its extension "
                         "(torch_npu for npu) and run again")
        for verdict in VERDICTS:
            s = summary[verdict]
            lines.append(f"  {verdict:<12} {s['ops']:>4} ops  {s['calls']:>6} calls "
                         f"({100 * s['share']:5.1f}% of {self.total_calls})")
        shown = [o for o in self.ops if o.verdict != "ok"]
        for o in sorted(shown, key=lambda o: (-o.calls, o.op))[:limit]:
            why = {"unsupported": f"no {self.dispatch_key} kernel",
                   "fallback": ("runs on the host CPU" if o.fallback_seen
                                else "only a backend fallback is registered"),
                   "known-bad": o.known_bad}[o.verdict]
            lines.append(f"    {o.verdict:<11} {o.op:<44} {o.calls:>5} calls  {why}")
        if len(shown) > limit:
            lines.append(f"    ... and {len(shown) - limit} more (--json lists all)")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"model": self.model, "device_type": self.device_type,
                "dispatch_key": self.dispatch_key, "loaded": self.loaded,
                "will_run": self.will_run, "summary": self.summary(),
                "ops": [o.to_json() for o in self.ops]}


def _known_bad(qualname: str, device_type: str, stack_id: str,
               table: Iterable[KnownBad]) -> str:
    for row in table:
        if (fnmatch.fnmatchcase(device_type, row.device)
                and fnmatch.fnmatchcase(stack_id, row.stack)
                and fnmatch.fnmatchcase(qualname, row.op)):
            return row.reason + (f" ({row.link})" if row.link else "")
    return ""


def inventory(capture: StepCapture, device_type: str, *, stack_id: str = "",
              fallback_ops: Sequence[str] = (), known_bad: Optional[Iterable[KnownBad]] = None,
              ignored_namespaces: Sequence[str] = IGNORED_NAMESPACES) -> Inventory:
    """The captured ops on one target device type.

    Args:
        capture: what :func:`~harness.model.capture.capture_step` kept.
        device_type: a key of :data:`harness.kinds.KINDS`.
        stack_id: matched against :data:`KNOWN_BAD` rows (``cann-8.0.0``).
        fallback_ops: ops seen falling back to the CPU when the cases ran
            (``aten::sort.stable`` or ``aten::sort``: base names match every overload).
        known_bad: the known-failures table (default :data:`KNOWN_BAD`).
    """
    key = dispatch_key(device_type)
    table = KNOWN_BAD if known_bad is None else tuple(known_bad)
    fell = set(fallback_ops)
    fell_base = {name.split(".", 1)[0] for name in fell}
    ops = []
    for op, calls in capture.by_op().items():
        if op.split(".", 1)[0] in ignored_namespaces:
            continue
        qualname = calls[0].qualname
        kernel = kernel_class(qualname, key)
        seen = qualname in fell or qualname.split(".", 1)[0] in fell_base
        bad = _known_bad(qualname, device_type, stack_id, table)
        if kernel == "missing":
            verdict = "unsupported"
        elif bad:
            verdict = "known-bad"
        elif seen or kernel == "backend fallback":
            verdict = "fallback"
        else:
            verdict = "ok"
        phases = list(dict.fromkeys(p for c in calls for p in c.phases))
        ops.append(OpInventory(op, qualname, sum(c.count for c in calls), len(calls), phases,
                               kernel, verdict, seen, bad))
    return Inventory(capture.model, device_type, key, backend_loaded(key), ops)
