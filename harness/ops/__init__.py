"""The op catalog (data) and its generic runner.

* :mod:`harness.ops.spec`: the vocabulary (:class:`OpEntry`, :class:`Sample`, :class:`T`,
  :class:`I`, :class:`M`) and seeded input generation.
* :mod:`harness.ops.catalog`: :data:`CATALOG`, the curated training-relevant ops.
* :mod:`harness.ops.runner`: :func:`run_case`, one case on the DUT against its references.
* :mod:`harness.ops.outcome`: :class:`OpOutcome`, one record's worth of an op case (the
  catalog, the OpInfo sweep and the model cases all return it).
* :mod:`harness.ops.stats`: statistical judges for random ops (dropout).
* :mod:`harness.ops.policy`: the one op policy (exceptions, standards, judging, watching a
  DUT call) the catalog, the OpInfo sweep and the distributed checks share.
* :mod:`harness.ops.keywords`: keyword-argument coverage of the catalog.
* :mod:`harness.ops.opinfo`: breadth, PyTorch's OpInfo database swept on the DUT.
* :mod:`harness.ops.edge`: edge values (inf, NaN, subnormals) and the agreement rule.

The last two are imported by the suites that use them, not here.
"""

from harness.ops.catalog import BY_NAME, CATALOG
from harness.ops.outcome import OpOutcome
from harness.ops.runner import case_id, filter_regex, record_id, run_case
from harness.ops.spec import FLOATS, INTS, I, M, OpEntry, Sample, T

__all__ = ["BY_NAME", "CATALOG", "FLOATS", "INTS", "I", "M", "OpEntry", "OpOutcome", "Sample",
           "T", "case_id", "filter_regex", "record_id", "run_case"]
