"""``python -m harness.distributed``: one rank, under torchrun or started by ``launch()``.

Under torchrun (many hosts) the sub-checks are named on the command line, as built-in
names (``collective``) or ``module:function`` (Note [Naming a sub-check] in
:mod:`harness.distributed.subcheck`), and rank 0 gathers every rank's results into
``DIR/summary.json``; :func:`harness.distributed.launch` (one host) passes a JSON plan
with ``--spec`` instead and reads the rank files itself. See ``docs/distributed.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Iterator, Optional, Sequence

from harness import kinds
from harness.distributed.launcher import SPEC_ENV
from harness.distributed.rank import die_with_parent, run_rank
from harness.distributed.subcheck import SubCheck


@contextlib.contextmanager
def _cwd_on_path() -> Iterator[None]:
    """Checks named ``module:function`` may live in the folder torchrun was started in."""
    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        yield
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(here)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m harness.distributed",
        description="Run distributed sub-checks as one rank (under torchrun, or started by "
                    "harness.distributed.launch). Reads RANK, WORLD_SIZE, LOCAL_RANK, "
                    "MASTER_ADDR and MASTER_PORT from the environment.")
    parser.add_argument("checks", nargs="*", metavar="CHECK",
                        help="A built-in rank program (collective, ddp_train, ...) or "
                             "module:function, run on every rank in order")
    parser.add_argument("--kwargs", default="{}", metavar="JSON",
                        help="Keyword arguments for every CHECK. Default: %(default)r")
    parser.add_argument("--spec", default=None, metavar="FILE",
                        help="JSON plan written by launch() (replaces CHECK). "
                             "Default: %(default)r")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="Folder for rank<N>.json (and rank 0's summary.json)")
    parser.add_argument("--device", **kinds.device_option("Device type of the ranks"))
    parser.add_argument("--seed", type=int, default=0, metavar="N",
                        help="Seed set before every sub-check. Default: %(default)r")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                        help="Process-group timeout for collectives. Default: %(default)r")
    args = parser.parse_args(argv)
    # launch() names itself; under torchrun the parent is its agent (which starts workers
    # in their own sessions, so only this keeps them from outliving a killed agent)
    die_with_parent(int(os.environ.get(SPEC_ENV) or os.getppid()))
    if args.spec:
        spec = json.loads(Path(args.spec).read_text())
        checks = [SubCheck.from_json(c) for c in spec["checks"]]
        device_type, seed, timeout = spec["device"], spec["seed"], spec["timeout"]
        gather = False
    else:
        if not args.checks:
            parser.error("give at least one CHECK (a built-in name or module:function) or "
                         "--spec FILE")
        kwargs = json.loads(args.kwargs)
        try:
            checks = [SubCheck.of(c, **kwargs) for c in args.checks]
        except ValueError as exc:  # not module:function, nor a built-in name
            parser.error(str(exc))
        device_type, seed, timeout, gather = args.device, args.seed, args.timeout, True
    with _cwd_on_path():
        return run_rank(checks, args.out, device_type=device_type, seed=seed,
                        timeout=timeout, gather=gather)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # Note [Rank exit] in harness.distributed.rank
