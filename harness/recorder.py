"""What a check records: the ``results`` fixture's :class:`Recorder`, and the ids and
seeds the plugin derives from a test's node id. Plain values only, no pytest.

Note [Check, outcome, record]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A check reports what it measured in one of three ways, from the most to the least
common:

* :meth:`Recorder.check` ``(record_id, ok, message)``: a yes/no check. ``pass`` when
  ``ok``; otherwise ``fail`` with ``message`` and the line that reproduces the check.
* :meth:`Recorder.outcome` ``(record_id, status, message)``: a status some pipeline
  decided (``pass | fail | error | unsupported | fallback | skip``); any status but
  ``pass`` carries ``message`` and the reproduce line.
* :meth:`Recorder.record`: everything by hand (a status and a message as given).

A passing check or outcome records no message: the message says what went wrong. The
reproduce line is written here once, so no check appends it by hand; ``reproduce_args``
adds the options that narrow it to the failing case (``--op-filter '...'``).
"""

from __future__ import annotations

import functools
import zlib
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from harness import ids
from harness.results import Record

SUITES_DIR = ids.SUITES_DIR
FAILING = ids.FAILING
auto_record_id = ids.auto_record  # the id of a test that records nothing (harness.ids)


def seed_for(global_seed: int, nodeid: str) -> int:
    """The seed of one test: the global seed plus crc32 of its node id (never hash())."""
    return (global_seed + zlib.crc32(nodeid.encode("utf-8"))) & 0xFFFFFFFF


def suite_area(path: Path, rootpath: Path) -> Optional[str]:
    """``<root>/suites/<area>/...`` -> area; None for a file outside ``suites/``."""
    return _suite_area(str(path), str(rootpath))


@functools.lru_cache(maxsize=4096)
def _suite_area(path: str, rootpath: str) -> Optional[str]:
    """:func:`suite_area`, once per test file (asked for each test and report: resolving
    the paths took 0.15 ms a call)."""
    try:
        rel = Path(path).resolve().relative_to(Path(rootpath).resolve())
    except ValueError:
        return None
    parts = rel.parts
    return parts[1] if len(parts) > 2 and parts[0] == SUITES_DIR else None


def reproduce_command(nodeid: Union[str, Sequence[str]], device_type: str, seed: int, *,
                      faults: Sequence[str] = (), baseline_dir: Any = None) -> str:
    """A one-line command that runs one check (or these checks) alone, on the same device
    with the same seed, the same injected faults and the same baseline store (without
    them a fault run's line would rerun green, or compare with another baseline)."""
    nodes = " ".join(f"'{n}'" for n in ([nodeid] if isinstance(nodeid, str) else nodeid))
    line = f"python -m pytest {nodes} --device {device_type} --seed {seed}"
    line += "".join(f" --inject-fault '{name}'" for name in faults)
    if baseline_dir is not None:
        line += f" --baseline-dir='{baseline_dir}'"
    return line


def reproduce_of(nodeid: Union[str, Sequence[str]], device_type: str, settings: Any) -> str:
    """:func:`reproduce_command` with the run's settings (seed, faults, baseline store)."""
    return reproduce_command(nodeid, device_type, settings.seed,
                             faults=getattr(settings, "faults", ()),
                             baseline_dir=getattr(settings, "baseline_dir", None))


class Recorder:
    """What the ``results`` fixture hands a check: record what you measured.

    Args:
        nodeid: the test's pytest node id (the ``test`` of every record).
        device: the device under test (:class:`harness.device.Device`).
        settings: the run's :class:`harness.session.Settings`.
        seed: this test's seed (:func:`seed_for`).
    """

    def __init__(self, nodeid: str, device: Any, settings: Any, seed: int) -> None:
        self.nodeid = nodeid
        self.device = device
        self.settings = settings
        self.seed = seed
        self.records: list[Record] = []
        self._ids: set[str] = set()
        self.context: dict = {}
        """``info`` every record of this test gets (its own ``info`` wins): where it ran,
        e.g. a distributed check's ``rank_devices``."""

    @property
    def reproduce(self) -> str:
        """A one-line command that runs this check alone, same device and seed."""
        return reproduce_of(self.nodeid, self.device.type, self.settings)

    def record(self, record_id: str, *, status: str = "pass",
               metrics: Optional[dict] = None, rules: Optional[dict] = None,
               message: str = "", info: Optional[dict] = None) -> Record:
        """Record one measurement. A ``fail``/``error`` status fails the test with ``message``."""
        rec = Record(id=ids.check(record_id), status=status, metrics=dict(metrics or {}),
                     rules=dict(rules or {}), test=self.nodeid, message=message,
                     info={**self.context, **(info or {})})
        if record_id in self._ids:
            raise ValueError(f"record id {record_id!r} recorded twice by {self.nodeid}")
        self._ids.add(record_id)
        self.records.append(rec)
        return rec

    def check(self, record_id: str, ok: bool, message: str = "", *,
              metrics: Optional[dict] = None, rules: Optional[dict] = None,
              info: Optional[dict] = None, reproduce_args: str = "") -> Record:
        """Record a yes/no check: ``pass`` when ``ok``, else ``fail`` with ``message`` and
        the reproduce line, which failing the test prints (Note [Check, outcome, record])."""
        return self.outcome(record_id, "pass" if ok else "fail", message, metrics=metrics,
                            rules=rules, info=info, reproduce_args=reproduce_args)

    def outcome(self, record_id: str, status: str, message: str = "", *,
                metrics: Optional[dict] = None, rules: Optional[dict] = None,
                info: Optional[dict] = None, reproduce_args: str = "") -> Record:
        """Record a status a pipeline decided; any but ``pass`` carries ``message`` and the
        reproduce line (Note [Check, outcome, record])."""
        if status == "pass":
            message = ""
        else:
            line = f"reproduce: {self.reproduce}" + (f" {reproduce_args}" if reproduce_args
                                                      else "")
            message = f"{message}\n{line}" if message else line
        return self.record(record_id, status=status, metrics=metrics, rules=rules,
                           message=message, info=info)
