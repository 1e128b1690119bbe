"""GPU -> NPU parity: will training behave on this device as it did on the reference device?

Two stored runs of different device types on the same checks are compared
(:func:`harness.parity.compare.compare`); :mod:`harness.parity.model` holds what the
comparison returns, :mod:`harness.parity.thresholds` the thresholds with their sources.
``python -m harness parity REFERENCE HERE`` is the command (docs/parity.md).
"""

from __future__ import annotations

from harness.parity.compare import ParityError, compare
from harness.parity.model import SECTIONS, VERDICTS, Difference, Parity, RunSide

__all__ = ["SECTIONS", "VERDICTS", "Difference", "Parity", "ParityError", "RunSide", "compare"]
