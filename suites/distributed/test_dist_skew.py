"""Rank skew against the backend's timeout (Note [Rank skew] in harness/distributed/judge.py).

The last rank reaches an all_reduce late, in a group with a 2 s timeout whose communicator
was made first: 0.5 s late, the collective completes with the right sum and the measured
skew; 4 s late (or, sooner, once the others' calls ended: it still arrives after they
gave up), either it fails on every rank in bounded time (gloo) or the backend's
watchdog ends the ranks (HCCL's default), and the verdict names the late rank and the knob
(the group's timeout, kept above HCCL_EXEC_TIMEOUT on hccl). Each case runs in a launch of
its own when its test asks: the 4 s case's correct ending may end every rank, and both
read the wall clock, which a launch run beside other work must not (Note [Launches ahead
of their tests] in harness/distributed/cases.py).
"""

from __future__ import annotations

import pytest

from harness import ids
from harness.distributed import DistCase, SubCheck, checks
from harness.distributed.judge import judge_skew, record_problem, record_verdict

pytestmark = pytest.mark.distributed

TIMEOUT = 2.0
SKEWS = {"within": 0.5, "beyond": 4.0}


@pytest.mark.parametrize("case", [
    DistCase(2, SubCheck.of(checks.rank_skew, name=f"skew/{name}", skew=skew, timeout=TIMEOUT),
             alone=True)
    for name, skew in SKEWS.items()], ids=lambda c: c.id)
def test_rank_skew_against_the_timeout(case, dist, results):
    name = case.check.name.split("/", 1)[1]
    record_id = ids.record("distributed", "rank_skew", "none", name, f"ws{case.world_size}")
    outcome = dist(case)
    verdict = judge_skew(outcome, expect_complete=name == "within")
    if verdict is None:
        record_problem(results, record_id, outcome)  # a hang, a crash: an error
        return
    record_verdict(results, record_id, verdict)
