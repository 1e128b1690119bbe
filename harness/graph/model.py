"""Your model, compiled: graphs, breaks, recompiles and the compiled-vs-eager step of a
user's model (``python -m harness model PKG.MOD:FACTORY --compile``, ``pytest --model ...
--model-compile``), as the graph family's records under ``graph/<model>/...``.

Recompiles: a model with one floating input is called with three batch sizes
(Note [Recompiles over three shapes] in :mod:`harness.graph.capture`); any other is called
three times with its own inputs (a recompile there is a guard that fails on every call).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Optional

import torch

from harness import ids
from harness.device import Unsupported
from harness.graph import backends, capture, records, step
from harness.ops.outcome import OpOutcome


@dataclasses.dataclass
class CompileReport:
    """What graph mode made of one model on one DUT."""

    model: str
    backend: str
    outcomes: list[OpOutcome]
    graphs: Optional[capture.Graphs] = None
    recompiles: Optional[capture.Recompiles] = None

    def text(self) -> str:
        lines = [f"graph mode ({self.backend}):"]
        if self.graphs is not None:
            lines.append("  " + self.graphs.text().replace("\n", "\n  "))
        if self.recompiles is not None:
            lines.append(f"  recompiles over {len(self.recompiles.shapes)} calls "
                         f"(dynamic unset): {self.recompiles.recompiles}")
        for o in self.outcomes:
            if o.status != "pass":
                lines.append(f"  {o.status.upper():<11} {o.id}")
                lines.append(f"              {o.message.splitlines()[0]}"[:200])
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"backend": self.backend,
                "graphs": None if self.graphs is None else {
                    "graphs": self.graphs.graphs,
                    "breaks": [b.to_json() for b in self.graphs.breaks]},
                "recompiles": None if self.recompiles is None else self.recompiles.recompiles,
                "records": [o.to_json() for o in self.outcomes]}


def _one_batched_input(inputs: tuple) -> bool:
    floats = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return len(inputs) == 1 and len(floats) == 1 and floats[0].dim() >= 1


def _repeated(module, inputs: tuple, device) -> capture.Recompiles:
    backend = backends.eager_counting()
    backends.reset()
    first = 0
    try:
        compiled = torch.compile(module, backend=backend)
        for _ in capture.BATCHES:
            with device.scope():
                compiled(*inputs)
            first = first or len(backend.graphs)
    finally:
        backends.reset()
    return capture.Recompiles(None, len(backend.graphs),
                              [tuple(inputs[0].shape)] * len(capture.BATCHES), first)


def _unsupported(record_id: str, exc: Unsupported) -> OpOutcome:
    return OpOutcome(record_id, status="unsupported", message=str(exc))


def compile_check(spec, target: torch.Tensor, device, *, amp: Optional[torch.dtype] = None,
                  seed: int = 0, backend: Optional[str] = None) -> CompileReport:
    """Graph mode on the loaded model ``spec`` (:class:`harness.model.spec.ModelSpec`) with
    the loss ``target`` on ``device``; ``backend``: the device kind's by default."""
    name = spec.name
    backend = backend or backends.backend_for(device)
    dev = device.torch_device
    outcomes: list[OpOutcome] = []
    report = CompileReport(name, backend, outcomes)
    on_device = tuple(t.to(dev) for t in spec.inputs)
    module = copy.deepcopy(spec.module).to(dev)
    try:
        with device.scope():
            report.graphs = capture.explain(module, *on_device)
        outcomes.append(records.graphs_outcome(name, report.graphs))
    except Unsupported as exc:
        outcomes.append(_unsupported(ids.graph_record(name, "float32", records.DYNAMO,
                                                      "graphs"), exc))
    try:
        if _one_batched_input(on_device):
            report.recompiles = capture.recompiles(module, on_device[0], None, seed=seed,
                                                   run=device.scope)
        else:
            report.recompiles = _repeated(module, on_device, device)
        outcomes.append(records.recompiles_outcome(name, report.recompiles))
    except Unsupported as exc:
        outcomes.append(_unsupported(ids.graph_record(name, "float32", records.DYNAMO,
                                                      "recompiles", "dynamic=unset"), exc))
    label = f"autocast-{str(amp).replace('torch.', '')}" if amp is not None else "float32"
    try:
        result = step.compare_step(spec.module, spec.inputs, target, device, backend=backend,
                                   amp=amp)
        outcomes.extend(records.step_outcomes(name, label, result))
    except Unsupported as exc:
        outcomes.append(_unsupported(ids.graph_record(name, label, records.DEVICE,
                                                      "compiled"), exc))
    return report
