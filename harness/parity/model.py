"""The parity comparison's data model: what :func:`harness.parity.compare` returns and the
parity report (:mod:`harness.report.parity`) and the terminal read.

Plain dataclasses, JSON-able through :meth:`Parity.to_json`; nothing here reads a file or
judges anything.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

SECTIONS = ("ops", "training", "memory", "speed", "model")
"""The report's sections, in the order it shows them."""

VERDICTS = ("PARITY", "DIFFERENCES", "BLOCKERS")
SEVERITIES = ("blocker", "difference")


@dataclasses.dataclass(frozen=True)
class Difference:
    """One way this device behaves differently from the reference device."""

    section: str                 # one of SECTIONS
    id: str                      # the record id (or model op) it concerns
    severity: str                # "blocker" (the migration must work around it) or "difference"
    summary: str                 # one line a person reads: what differs, by how much
    reference: dict[str, Any]    # the numbers on the reference device
    here: dict[str, Any]         # the numbers on this device
    ratio: Optional[float]       # this device / reference for the ranking metric (None: a status)
    reproduce: str               # a command that reruns the check on this device

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"section {self.section!r} is not one of {SECTIONS}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity {self.severity!r} is not one of {SEVERITIES}")


@dataclasses.dataclass(frozen=True)
class RunSide:
    """One of the two runs: which device and stack it measured, and where it was read."""

    path: str
    device_type: str
    device_slug: str
    stack_id: str
    started: str = ""
    fingerprint: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.device_type}/{self.device_slug}/{self.stack_id}"


@dataclasses.dataclass
class Parity:
    """The parity of this device (``here``) with a reference device, from two stored runs.

    ``differences`` are ranked, worst first (blockers first, then by ratio). The plot
    fields carry every compared value, not only the differences, so the pictures show
    where the two devices agree as well.
    """

    verdict: str                                   # one of VERDICTS
    reference: RunSide
    here: RunSide
    differences: list[Difference]
    compared: dict[str, int]                       # per section: subjects compared
    not_compared: dict[str, str]                   # per section: why nothing (or less) was compared
    thresholds: dict[str, Any]                     # the thresholds used, with their sources
    op_ratios: list[dict[str, Any]]                # {"op", "dtype", "ratio", "id"}: the heat map
    curves: list[dict[str, Any]]                   # {"id", "label", "reference": [..], "here": [..],
    #   and where recorded "final_loss", "accuracy", "skipped_steps", "oscillation_ratio":
    #   {"reference", "here"}, "accuracy_points": here - reference}
    memory: list[dict[str, Any]]                   # {"id", "metric", "reference", "here", "ratio"}
    speed: list[dict[str, Any]]                    # {"id", "precision", "reference", "here", "ratio"}
    models: list[dict[str, Any]]                   # {"op", "reference": status, "here": status}
    notes: list[str] = dataclasses.field(default_factory=list)
    """How the two runs differ in what they measured (seeds, selections, injected faults,
    an incomplete session): compared all the same, and said."""

    @property
    def exit_code(self) -> int:
        """0 for PARITY, 1 for BLOCKERS, 2 for DIFFERENCES (a script can tell them apart)."""
        return {"PARITY": 0, "BLOCKERS": 1, "DIFFERENCES": 2}[self.verdict]

    def by_section(self, section: str) -> list[Difference]:
        return [d for d in self.differences if d.section == section]

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["exit_code"] = self.exit_code
        return data
