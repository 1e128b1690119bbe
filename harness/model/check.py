"""``python -m harness model``: capture a user's model, inventory it, run every case.

:func:`check` chains the three steps on plain values (a factory spec, tensor specs, a
:class:`~harness.device.Device`) and returns a :class:`ModelReport`; :func:`main` is the
command line (``harness.cli`` hands it the arguments :mod:`harness.model.options` defines).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Optional, Sequence

from harness.model import cases as cases_mod
from harness.model.capture import StepCapture, capture_step
from harness.model.inventory import Inventory, inventory
from harness.model.spec import (
    SpecError,
    TensorSpec,
    empty_inputs,
    load_factory,
    parse_amp,
    parse_tensor_spec,
    parse_tensor_specs,
)
from harness.ops.outcome import STATUSES, OpOutcome


@dataclasses.dataclass
class ModelReport:
    """Capture, inventory and case results of one model on one DUT."""

    capture: StepCapture
    inventory: Inventory
    results: list[OpOutcome]
    cases: int
    seconds: float
    compiled: Optional[object] = None  # harness.graph.model.CompileReport with --compile

    @property
    def outcomes(self) -> list[OpOutcome]:
        """Every record of the check: the cases', then graph mode's (``--compile``)."""
        return self.results + (list(self.compiled.outcomes) if self.compiled else [])

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for r in self.results:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def judged(self):
        """The model check's verdict: :func:`harness.verdict.judge` over its records (a
        check whose every case was skipped, e.g. on empty inputs, is NOTHING CHECKED)."""
        from harness.results import Record, RunResults
        from harness.verdict import judge

        run = RunResults(fingerprint={"device_type": self.inventory.device_type},
                         records={r.id: Record(r.id, status=r.status, message=r.message)
                                  for r in self.outcomes})
        return judge(run, None, not_compared="a model check compares with no baseline")

    @property
    def ok(self) -> bool:
        return self.inventory.will_run and self.judged().level == "GO" and not any(
            r.status == "unsupported" for r in self.outcomes)

    def text(self, limit: int = 15) -> str:
        c = self.capture
        phases = ", ".join(f"{p} {n}" for p, n in c.phase_counts().items())
        lines = [f"model {c.model} ({c.factory}): inputs {', '.join(c.inputs)}, optimizer "
                 f"{c.optimizer}, amp {c.amp or 'off'}",
                 f"captured one training step in {c.seconds:.2f} s: {c.total_calls} aten calls "
                 f"({phases}), {len(c.calls)} distinct (op, signature), {len(c.by_op())} ops",
                 "argument layouts, replayed as captured: " + ", ".join(
                     f"{name} {n}" for name, n in c.layout_counts().items()),
                 self.inventory.text()]
        counts = self.counts()
        lines.append(f"cases: {self.cases} distinct (op, signature) -> {len(self.results)} "
                     "records: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
                     + f" ({self.seconds:.1f} s on {self.inventory.device_type})")
        bad = [r for r in self.results if r.status not in ("pass", "skip")]
        for r in bad[:limit]:
            first = r.message.splitlines()[0] if r.message else ""
            detail = r.message.splitlines()[1] if len(r.message.splitlines()) > 1 else ""
            if r.info.get("harness_error"):  # its first line says whose error it is
                detail = ""
            lines.append(f"  {r.status.upper():<11} {r.id}")
            if detail or first:
                lines.append(f"              {detail or first}"[:160])
        if len(bad) > limit:
            lines.append(f"  ... and {len(bad) - limit} more (--json lists all)")
        if self.compiled is not None:
            lines.append(self.compiled.text())
        lines.append("verdict: " + self.verdict())
        return "\n".join(lines)

    def verdict(self) -> str:
        """GO, or NO-GO saying how many failing records are the harness's own replay
        errors rather than the device's (Note [Replay errors are the harness's])."""
        judged = self.judged()
        if judged.nothing_checked:
            return f"NO-GO ({judged.reasons[0]})"
        if self.ok:
            return "GO: every captured call runs and matches the CPU reference" + (
                "; the compiled step matches eager" if self.compiled is not None else "")
        harness = sum(1 for r in self.results if r.info.get("harness_error"))
        if not harness:
            return "NO-GO: see the failing cases and ops above"
        device = sum(1 for r in self.outcomes if r.status in ("fail", "error", "unsupported")
                     and not r.info.get("harness_error"))
        return (f"NO-GO: {harness} record(s) are harness errors, not the device's (the "
                f"replay of a captured call; see above); {device} failing record(s) are the "
                "device's")

    def to_json(self) -> dict:
        return {"capture": self.capture.to_json(), "inventory": self.inventory.to_json(),
                "cases": self.cases, "seconds": round(self.seconds, 2),
                "counts": self.counts(), "ok": self.ok,
                "verdict": self.judged().to_json(),
                "records": [r.to_json() for r in self.outcomes],
                **({"compile": self.compiled.to_json()} if self.compiled is not None else {})}


def check(factory: str, device, *, inputs: Optional[Sequence[TensorSpec]] = None,
          target: Optional[TensorSpec] = None, amp: Optional[str] = None,
          optimizer: str = "sgd", seed: int = 0, run_cases: bool = True,
          stack_id: str = "", compile: bool = False) -> ModelReport:
    """Load, capture (on the CPU), build and run every case on ``device``, inventory it."""
    spec = load_factory(factory, inputs, target, seed=seed)
    try:  # on the CPU: a failure here is the model or its inputs, not the DUT
        capture = capture_step(spec, amp=parse_amp(amp), optimizer=optimizer, seed=seed)
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        shapes = ", ".join("x".join(map(str, t.shape)) for t in spec.inputs)
        raise SpecError(f"model {factory}: its training step fails on the CPU with inputs "
                        f"of shape {shapes}: {type(exc).__name__}: {str(exc).splitlines()[0]}. "
                        "Give the shapes the model takes (--input), or fix the factory") from None
    built = cases_mod.build_cases(capture)
    start = time.perf_counter()
    results: list[OpOutcome] = []
    why = empty_inputs(spec.inputs)
    if run_cases and why:  # every case would compare empty tensors: nothing checked
        results = [OpOutcome(case.record_id("fwd"), status="skip", message=why)
                   for case in built]
    elif run_cases:
        for case in built:
            results.extend(cases_mod.run_model_case(device, case, seed))
    seconds = time.perf_counter() - start
    fell = [op for r in results for op in r.fallback]
    inv = inventory(capture, device.type, stack_id=stack_id, fallback_ops=fell)
    compiled = compile_model(factory, inputs, target, device, amp, seed) if compile else None
    return ModelReport(capture, inv, results, len(built), seconds, compiled)


def compile_model(factory: str, inputs, target, device, amp: Optional[str] = None,
                  seed: int = 0):
    """Graph mode on a fresh copy of the model (the capture trained its own one step)."""
    import torch

    from harness.graph.model import compile_check
    from harness.model.spec import make_target

    spec = load_factory(factory, inputs, target, seed=seed)
    loss_target = spec.target
    if loss_target is None:  # drawn as the capture draws it (Note in harness/model/capture.py)
        with torch.no_grad():
            output = spec.module(*spec.inputs)
        from harness.model.capture import _first_output

        gen = torch.Generator().manual_seed(seed + 2)
        loss_target = make_target(_first_output(output), spec.target_spec, gen)
    return compile_check(spec, loss_target, device, amp=parse_amp(amp), seed=seed)


# --------------------------------------------------------------------------- CLI

def main(args: argparse.Namespace) -> int:
    """Run the subcommand; 0 when every call runs and matches, 1 otherwise, 2 on bad usage."""
    from harness import faults
    from harness.device import DeviceUnavailable, select
    from harness.stack import fingerprint

    try:
        inputs = parse_tensor_specs(args.input) if args.input else None
        target = parse_tensor_spec(args.target, source="--target") if args.target else None
        parse_amp(args.amp)
        faults.set_active(args.inject_fault)
        device, _ = select(args.device)
        report = check(args.factory, device, inputs=inputs, target=target, amp=args.amp,
                       optimizer=args.optimizer, seed=args.seed, run_cases=not args.no_cases,
                       stack_id=fingerprint(device).get("stack_id", ""), compile=args.compile)
    except (SpecError, faults.FaultError, DeviceUnavailable) as exc:
        print(f"error: {exc}")
        return 2
    if args.json:
        print(json.dumps(report.to_json(), indent=1, default=str))
    else:
        if args.inject_fault:
            print(f"injected faults (DUT side): {', '.join(args.inject_fault)}")
        print(report.text())
    return 0 if report.ok else 1
