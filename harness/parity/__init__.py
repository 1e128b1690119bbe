"""GPU -> NPU parity: will training behave on this device as it did on the reference device?

Two stored runs of different device types on the same checks are compared
(:mod:`harness.parity.model` holds what the comparison returns).
"""

from __future__ import annotations

from harness.parity.model import SECTIONS, VERDICTS, Difference, Parity, RunSide

__all__ = ["SECTIONS", "VERDICTS", "Difference", "Parity", "RunSide"]
