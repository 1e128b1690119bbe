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

import re

from harness import ids
from harness.ops.catalog import BY_NAME, CATALOG
from harness.ops.outcome import OpOutcome
from harness.ops.runner import DIRECTIONS, case_id, filter_regex, record_id, run_case
from harness.ops.spec import FLOATS, INTS, I, M, OpEntry, Sample, T

DETERMINISM_DTYPES = ("float32", "float16", "bfloat16")
DETERMINISM_CASES = tuple(ids.op_case("mm", dt, "run_twice", "64x96x48")
                          for dt in DETERMINISM_DTYPES)
"""The case ids of ``suites/ops/test_catalog.py``'s run-twice determinism checks."""


def filter_matches(op_filter: str) -> bool:
    """Whether ``--op-filter`` selects at least one op case: a catalog case (any sample,
    slow ones included), a determinism case, or an OpInfo case (``opinfo/<op>/<dtype>``).
    A filter that selects none is a usage error (the plugin says so before the run)."""
    regex = re.compile(op_filter)
    if any(regex.search(case_id(entry.name, dtype, d, s.name)) for entry in CATALOG
           for dtype, s in entry.cases() for d in DIRECTIONS):
        return True
    if any(regex.search(c) for c in DETERMINISM_CASES):
        return True
    from harness.ops import opinfo

    op_db, _ = opinfo.load_op_db()
    return op_db is not None and bool(opinfo.select(opinfo.cases(op_db), op_filter))


__all__ = ["BY_NAME", "CATALOG", "DETERMINISM_CASES", "DETERMINISM_DTYPES", "FLOATS", "INTS",
           "I", "M", "OpEntry", "OpOutcome", "Sample", "T", "case_id", "filter_matches",
           "filter_regex", "record_id", "run_case"]
