"""Run a check across ranks with the device's collective backend, on one host or many.

Two ways in, one rank program (:mod:`harness.distributed.rank`):

- :func:`launch` (one host, :mod:`harness.distributed.launcher`): starts ``world_size``
  processes, each running ``python -m harness.distributed --spec FILE --out DIR`` with
  the environment torchrun would give it, watches them and kills the ones that hang.
- ``torchrun ... -m harness.distributed CHECK --out DIR`` (many hosts,
  :mod:`harness.distributed.__main__`): torch's own launcher starts the ranks; each
  writes its results under ``DIR`` and rank 0 gathers every rank's results into
  ``DIR/summary.json`` (see ``docs/distributed.md``).

A rank runs a list of *sub-checks* in order (:mod:`harness.distributed.subcheck`):
importable top-level functions ``fn(ctx, **kwargs)`` returning JSON-able values. Several
sub-checks share one launch because starting a rank (a process plus ``import torch``)
costs seconds (:mod:`harness.distributed.cases`). The family's own rank programs are
:mod:`harness.distributed.checks`, and :mod:`harness.distributed.judge` turns what they
return into records.

This package imports no torch; ``checks`` (and a rank) do.
"""

from __future__ import annotations

from harness.distributed.cases import DistCase, DistJob, Planner, one_at_a_time, stored_launches
from harness.distributed.launcher import (
    ADDRESS_IN_USE,
    LAUNCH_DIR_PREFIX,
    ROOT,
    SPEC_ENV,
    free_port,
    launch,
    remove_stale_launch_dirs,
)
from harness.distributed.outcome import (
    CheckOutcome,
    DistributedError,
    LaunchResult,
    RankError,
    RankReport,
)
from harness.distributed.rank import RankContext, run_rank
from harness.distributed.rankfiles import collect, format_summary
from harness.distributed.subcheck import SubCheck

__all__ = [
    "ADDRESS_IN_USE", "LAUNCH_DIR_PREFIX", "ROOT", "SPEC_ENV", "CheckOutcome", "DistCase", "DistJob",
    "DistributedError", "LaunchResult", "Planner", "RankContext", "RankError", "RankReport",
    "SubCheck", "collect", "format_summary", "free_port", "launch", "one_at_a_time",
    "remove_stale_launch_dirs", "run_rank", "stored_launches",
]
