"""The ranks' results on disk: ``rank<N>.json`` per rank, ``summary.json`` from rank 0.

Note [Rank results on disk]
~~~~~~~~~~~~~~~~~~~~~~~~~~~
Each rank rewrites ``DIR/rank<N>.json`` atomically before and after every sub-check:
its state, the sub-check it is in, and each finished sub-check's value or exception
(type, message, traceback). The launcher reads these files, never a pipe, so a rank
that hangs or is killed still leaves everything it finished, and the file says where it
stopped. On a hang (no rank made progress for ``timeout`` seconds) the launcher asks the
unfinished ranks for their Python stacks (``faulthandler`` on SIGUSR1, into
``rank<N>.stack``), kills them, and reports which ranks hung in which sub-check.
Under torchrun (many hosts) rank 0 also gathers every rank's file over the process group
into ``DIR/summary.json`` (the other ranks' files are on other hosts).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any, Optional, Union


class RankWriter:
    """Rewrites ``rank<N>.json`` atomically (Note [Rank results on disk])."""

    def __init__(self, out: Path, rank: int, world_size: int) -> None:
        self.path = out / f"rank{rank}.json"
        self.data: dict[str, Any] = {"rank": rank, "world_size": world_size, "pid": os.getpid(),
                                     "host": socket.gethostname(), "state": "starting",
                                     "current": None, "results": {}}

    def update(self, **fields) -> None:
        self.data.update(fields)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, default=jsonable))
        os.replace(tmp, self.path)


def jsonable(value: Any) -> Any:
    """Turn numpy / torch scalars into plain JSON (a check may return them)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return repr(value)


def read_json(path: Path) -> Optional[dict]:
    """A rank's file, or None while it is missing or half written."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a rank's log ("" when there is none)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def format_summary(summary: dict) -> str:
    """One line per sub-check: which ranks (on which hosts) returned, which raised.

    Returning is not passing: the values are metrics, judged where records are made
    (:mod:`harness.distributed.judge`; ``summary.json`` holds every rank's values).
    """
    ranks = summary["ranks"]
    names = list(dict.fromkeys(n for r in ranks for n in r.get("results", {})))
    hosts = sorted({r.get("host", "?") for r in ranks})
    lines = [f"harness.distributed: world size {summary['world_size']} "
             f"({summary['backend']}) on {', '.join(hosts)}"]
    for name in names:
        ok = [r["rank"] for r in ranks if r["results"].get(name, {}).get("ok")]
        bad = [r["rank"] for r in ranks if not r["results"].get(name, {}).get("ok")]
        errors = {r["rank"]: r["results"].get(name, {}).get("type", "missing") for r in ranks
                  if r["rank"] in bad}
        seconds = max((r["results"].get(name, {}).get("seconds", 0) for r in ranks), default=0)
        lines.append(f"  {name}: returned on ranks {ok}"
                     + (f"; FAILED on ranks {bad} ({errors})" if bad else "")
                     + f" [{seconds:.2f} s]")
    return "\n".join(lines)


def collect(out: Union[str, Path]) -> dict:
    """Read a results folder (one host): ``summary.json`` if rank 0 wrote it, else the
    ``rank<N>.json`` files found there."""
    out = Path(out)
    summary = read_json(out / "summary.json")
    if summary is not None:
        return summary
    ranks = sorted((d for d in (read_json(p) for p in out.glob("rank*.json")) if d),
                   key=lambda d: d["rank"])
    return {"world_size": ranks[0]["world_size"] if ranks else 0,
            "backend": ranks[0].get("backend", "?") if ranks else "?", "ranks": ranks}
