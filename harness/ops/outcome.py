"""One op case run on the DUT against the CPU references: :class:`OpOutcome`.

Three pipelines run ops and judge them by the one op policy (:mod:`harness.ops.policy`):
the curated catalog (:func:`harness.ops.runner.run_case`), the OpInfo sweep
(:func:`harness.ops.opinfo.run_case`) and the model cases
(:func:`harness.model.cases.run_model_case`). Each returns one :class:`OpOutcome` per
record, so the same op is the same kind of answer whichever pipeline ran it
(``tests/test_op_policy.py`` compares them field by field).

Note [Op outcome record]
~~~~~~~~~~~~~~~~~~~~~~~~
An outcome becomes one record (:meth:`OpOutcome.record`): its id, status, metrics, rules
and message as they are, and as ``info`` the pipeline's own details (``aten_ops``,
``exception``, ``signature``...) plus the two fields every op record shares: ``standard``
(the precision standard it was judged by) and, when the DUT ran an op on the host CPU,
``fallback_ops``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from harness.compare import Verdict
from harness.ids import STATUSES  # the one status vocabulary (harness/ids.py)
from harness.results import Rule


@dataclasses.dataclass
class OpOutcome:
    """One direction of one op case: what one record says about it.

    Attributes:
        id: the record id (``ops/...``, ``opinfo/...``, ``model/...``).
        direction: ``fwd`` (the outputs) or ``bwd`` (the input gradients).
        status: ``pass | fail | error | unsupported | fallback | skip``.
        standard: the precision standard it was judged by (``""`` when not judged).
        metrics: per metric a float; with several compared tensors ``<label>.<metric>``.
        rules: baseline rules by metric name.
        message: empty when it passed; else what went wrong.
        info: the pipeline's details for the record (Note [Op outcome record]).
        fallback: the ops the DUT ran on the host CPU (CPU fallback), in order seen.
    """

    id: str
    direction: str = "fwd"
    status: str = "pass"
    standard: str = ""
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    rules: dict[str, Rule] = dataclasses.field(default_factory=dict)
    message: str = ""
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    fallback: list[str] = dataclasses.field(default_factory=list)

    def apply_verdicts(self, verdicts: Mapping[str, Verdict]) -> None:
        """Take the metrics and rules of per-tensor verdicts, keyed by label (``out``,
        ``out0``, ``grad0``...): a metric is ``<label>.<name>`` when there are several
        verdicts, plain ``<name>`` for one. A failing verdict fails a passing outcome; the
        failing verdicts' messages (``[label] ...``) become the message unless one is set
        already (a structural error, which says more)."""
        for label, verdict in verdicts.items():
            if len(verdicts) == 1:  # the usual: one output, its names as they are
                self.metrics.update(verdict.metrics)
                self.rules.update(verdict.rules)
                continue
            prefix = f"{label}."
            self.metrics.update({prefix + key: value for key, value in verdict.metrics.items()})
            self.rules.update({prefix + key: rule for key, rule in verdict.rules.items()})
        failing = [f"[{label}] {v.message}" for label, v in verdicts.items() if not v.passed]
        if failing and self.status == "pass":
            self.status = "fail"
        if not self.message:
            self.message = "\n".join(failing)

    @property
    def record_info(self) -> dict[str, Any]:
        """``info`` as the record stores it (Note [Op outcome record])."""
        out = dict(self.info)
        if self.standard:
            out["standard"] = self.standard
        if self.fallback:
            out["fallback_ops"] = list(self.fallback)
        return out

    def record(self, results, message: Optional[str] = None, *, reproduce_args: str = ""):
        """Record this outcome with a :class:`~harness.recorder.Recorder`, which adds the
        reproduce line (plus ``reproduce_args``) to anything but a pass; ``message``
        replaces :attr:`message` (e.g. with the device added)."""
        return results.outcome(self.id, self.status,
                               self.message if message is None else message,
                               metrics=self.metrics, rules=self.rules, info=self.record_info,
                               reproduce_args=reproduce_args)

    def to_json(self) -> dict[str, Any]:
        """The outcome as the record's fields (``python -m harness model --json``)."""
        return {"id": self.id, "status": self.status, "metrics": self.metrics,
                "rules": {key: dataclasses.asdict(rule) for key, rule in self.rules.items()},
                "message": self.message, "info": self.record_info}


__all__ = ["STATUSES", "OpOutcome"]
