"""The op catalog (data) and its generic runner.

* :mod:`harness.ops.spec`: the vocabulary (:class:`OpEntry`, :class:`Sample`, :class:`T`,
  :class:`I`, :class:`M`) and seeded input generation.
* :mod:`harness.ops.catalog`: :data:`CATALOG`, the curated training-relevant ops.
* :mod:`harness.ops.runner`: :func:`run_case`, one case on the DUT against its references.
* :mod:`harness.ops.stats`: statistical judges for random ops (dropout).
"""

from harness.ops.catalog import BY_NAME, CATALOG
from harness.ops.runner import Outcome, case_id, filter_regex, record_id, run_case
from harness.ops.spec import FLOATS, INTS, I, M, OpEntry, Sample, T

__all__ = ["BY_NAME", "CATALOG", "FLOATS", "INTS", "I", "M", "OpEntry", "Outcome", "Sample",
           "T", "case_id", "filter_regex", "record_id", "run_case"]
