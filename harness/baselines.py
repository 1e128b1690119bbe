"""The baseline store: ``<dir>/<device_type>/<device_slug>/<stack_id>.json``.

A baseline is a results file kept. Selection for a compare run (DESIGN.md):
the baseline named with ``--baseline-against`` if given; else the same stack's file;
else the newest *older* stack of the same device (the upgrade case: record on CANN
8.0.RC3, upgrade to 8.0.0, compare). Writes are atomic; ``record`` never overwrites a
file that belongs to another stack.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional, Union

from harness import results as results_mod
from harness.results import RunResults, SchemaError
from harness.stack import split_stack_id, stack_sort_key


class BaselineError(RuntimeError):
    """A baseline that cannot be used; the message names the file and the fix."""


@dataclasses.dataclass
class Selection:
    """Which baseline a compare run uses, and why (for the header)."""

    path: Optional[Path]
    reason: str
    results: Optional[RunResults] = None
    error: Optional[str] = None

    @property
    def stack_id(self) -> Optional[str]:
        return self.path.stem if self.path else None


def device_dir(root: Union[str, Path], fingerprint: dict) -> Path:
    return Path(root) / fingerprint["device_type"] / fingerprint["device_slug"]


def path_for(root: Union[str, Path], fingerprint: dict, stack_id: Optional[str] = None) -> Path:
    return device_dir(root, fingerprint) / f"{stack_id or fingerprint['stack_id']}.json"


def stored_stacks(root: Union[str, Path], fingerprint: dict) -> list[str]:
    """Stack ids stored for this device and stack kind, oldest first."""
    prefix, _ = split_stack_id(fingerprint["stack_id"])
    folder = device_dir(root, fingerprint)
    ids = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            if split_stack_id(path.stem)[0] == prefix:
                ids.append(path.stem)
        except ValueError:
            continue
    return sorted(ids, key=stack_sort_key)


def select(root: Union[str, Path], fingerprint: dict,
           against: Optional[str] = None) -> Selection:
    """Choose (and load) the baseline for a compare run; never raises for a bad file.

    A missing baseline is a note (``path=None``); a corrupt one sets ``error``.
    """
    current = fingerprint["stack_id"]
    if against:
        path = path_for(root, fingerprint, against)
        if not path.is_file():
            available = ", ".join(stored_stacks(root, fingerprint)) or "none"
            return Selection(None, f"--baseline-against {against}: no file {path} "
                             f"(stored for this device: {available})",
                             error=f"--baseline-against {against}: {path} does not exist; "
                                   f"stored stacks for this device: {available}")
        reason = f"{against} (named with --baseline-against)"
    else:
        stacks = stored_stacks(root, fingerprint)
        if current in stacks:
            path, reason = path_for(root, fingerprint), f"{current} (same stack)"
        else:
            older = [s for s in stacks if stack_sort_key(s) < stack_sort_key(current)]
            if not older:
                where = device_dir(root, fingerprint)
                return Selection(None, f"none for {current} or an older stack in {where}; "
                                 "record one with --baseline record")
            path = path_for(root, fingerprint, older[-1])
            reason = f"{older[-1]} (newest stack older than {current}: upgrade comparison)"
    try:
        loaded = results_mod.load(path)
    except SchemaError as exc:
        return Selection(path, reason, error=str(exc))
    return Selection(path, reason, results=loaded)


def record(root: Union[str, Path], run: RunResults) -> Path:
    """Store ``run`` as its stack's baseline, merging into the same stack's file.

    Records this run produced replace the stored ones; others are kept, so suites can
    be recorded one at a time. Refuses to touch a file that belongs to another stack.
    """
    path = path_for(root, run.fingerprint)
    merged = RunResults(fingerprint=run.fingerprint, records={}, started=run.started,
                        finished=run.finished, seed=run.seed)
    if path.exists():
        try:
            existing = results_mod.load(path)
        except SchemaError as exc:
            raise BaselineError(f"refusing to record over an unreadable baseline: {exc}. "
                                f"Move {path} aside first") from exc
        stored = existing.fingerprint.get("stack_id")
        if stored != run.fingerprint["stack_id"]:
            raise BaselineError(f"refusing to overwrite {path}: it holds stack {stored!r}, "
                                f"this run is {run.fingerprint['stack_id']!r}; rename or move "
                                "the file, it is another stack's baseline")
        merged.records.update(existing.records)
    for record_id, rec in run.records.items():
        merged.records[record_id] = _merge_runs(merged.records.get(record_id), rec)
    results_mod.write(merged, path)
    return path


RUNS_KEY = "runs"
KEEP_RUNS_KEY = "keep_runs"
DEFAULT_KEEP_RUNS = 10


def _merge_runs(stored, new):
    """A record that keeps per-run statistics (``info["runs"]``, a list; benchmarks)
    appends this run's entries to the stored ones, keeping the last ``info["keep_runs"]``
    (default 10); any other record is replaced."""
    merged = dataclasses.replace(new)
    runs = new.info.get(RUNS_KEY)
    if stored is None or not isinstance(runs, list):
        return merged
    old_runs = stored.info.get(RUNS_KEY)
    keep = int(new.info.get(KEEP_RUNS_KEY, DEFAULT_KEEP_RUNS))
    if isinstance(old_runs, list):
        merged.info = {**new.info, RUNS_KEY: (old_runs + runs)[-keep:]}
    return merged
