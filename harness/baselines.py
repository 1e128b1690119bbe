"""The baseline store: ``<dir>/<device_type>/<device_slug>/<stack_id>.json``.

A baseline is a results file kept. Selection for a compare run (docs/design.md):
the baseline named with ``--baseline-against`` if given; else the same stack's file;
else the newest *older* stack of the same device (the upgrade case: record on CANN
8.0.RC3, upgrade to 8.0.0, compare). Writes are atomic; ``record`` never overwrites a
file that belongs to another stack.
"""

from __future__ import annotations

import dataclasses
import os
import re
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


def listable(folder: Union[str, Path], what: str = "baseline folder") -> bool:
    """Whether ``folder`` is a folder that can be listed; False when it does not exist.

    Raises :class:`BaselineError` when something is there but cannot be read (a symlink
    loop, a file, no permission): "nothing stored" would then be a lie, and a compare run
    would say GO against nothing.
    """
    folder = Path(folder)
    if not os.path.lexists(folder):
        return False
    try:
        if not folder.is_dir():
            raise NotADirectoryError(20, "not a folder (or a symlink loop / dangling link)")
        os.listdir(folder)
    except OSError as exc:
        raise BaselineError(f"cannot read the {what} {folder}: {exc.strerror}; fix its "
                            "permissions or the link, or point --baseline-dir at another "
                            "store") from None
    return True


def stored_stacks(root: Union[str, Path], fingerprint: dict) -> list[str]:
    """Stack ids stored for this device and stack kind, oldest first (raises
    :class:`BaselineError` for a folder that exists but cannot be read)."""
    prefix, _ = split_stack_id(fingerprint["stack_id"])
    folder = device_dir(root, fingerprint)
    listable(root, "baseline store")
    listable(folder.parent)
    ids = []
    for path in folder.glob("*.json") if listable(folder) else ():
        try:
            if split_stack_id(path.stem)[0] == prefix:
                ids.append(path.stem)
        except ValueError:
            continue
    return sorted(ids, key=stack_sort_key)


def stored_anywhere(root: Union[str, Path]) -> list[str]:
    """Every stored baseline as ``<type>/<slug>/<stack_id>`` (for NOT COMPARED lines)."""
    root = Path(root)
    try:
        if not listable(root, "baseline store"):
            return []
    except BaselineError:
        return []
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.glob("*/*/*.json"))


def unreadable(root: Union[str, Path]) -> list[str]:
    """One line per folder of the store that exists but cannot be read (``baseline list``,
    the doctor): the store itself, a device type's folder or a device's."""
    root = Path(root)
    problems = []
    try:
        if not listable(root, "baseline store"):
            return []
    except BaselineError as exc:
        return [str(exc)]
    for folder in sorted(root.glob("*")) + sorted(root.glob("*/*")):
        if folder.name.startswith("."):
            continue
        try:
            listable(folder)
        except BaselineError as exc:
            problems.append(str(exc))
    return problems


def select(root: Union[str, Path], fingerprint: dict,
           against: Optional[str] = None) -> Selection:
    """Choose (and load) the baseline for a compare run; never raises for a bad file.

    A missing baseline is a note (``path=None``); a corrupt one sets ``error``.
    """
    current = fingerprint["stack_id"]
    try:
        stored_stacks(root, fingerprint)
    except BaselineError as exc:
        return Selection(None, str(exc), error=str(exc))
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
        check_agrees(path, loaded.fingerprint)
    except (SchemaError, BaselineError) as exc:
        return Selection(path, reason, error=str(exc))
    return Selection(path, reason, results=loaded)


def expected_path(root: Union[str, Path], fingerprint: dict) -> Path:
    return path_for(root, fingerprint, fingerprint.get("stack_id"))


def check_agrees(path: Union[str, Path], fingerprint: dict) -> None:
    """A baseline's fingerprint must agree with its path (device type, slug, stack).

    Raises :class:`BaselineError` naming both, so a renamed or misplaced file (a
    ``torch-2.13.0.json`` holding a torch-2.11.0 run, a cuda run in the cpu folder, an
    Intel run under an AMD slug) is never compared as "the same stack".
    """
    path = Path(path)
    said = {"device_type": path.parent.parent.name, "device_slug": path.parent.name,
            "stack_id": path.stem}
    held = {key: fingerprint.get(key) for key in said}
    wrong = [key for key in said if held[key] != said[key]]
    if wrong:
        detail = ", ".join(f"{key} {held[key]!r} (path says {said[key]!r})" for key in wrong)
        root = path.parent.parent.parent
        where = (f"; it belongs at {expected_path(root, fingerprint)}"
                 if all(held.values()) else "")
        raise BaselineError(f"{path}: the baseline's fingerprint disagrees with its path: "
                            f"{detail}{where}. Move it there, or re-record this stack with "
                            "--baseline record")


LOCK_TIMEOUT = 300.0
"""Seconds a record run waits for another one merging into the same baseline."""


def lock_for(path: Union[str, Path]):
    """The lock every writer of ``path`` holds while it reads, merges and replaces it
    (a hidden ``.<name>.lock`` beside it; ``filelock``, so concurrent record runs of one
    stack, in one process or many, never lose each other's records)."""
    from filelock import FileLock

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path.parent / f".{path.name}.lock"), timeout=LOCK_TIMEOUT)


def record(root: Union[str, Path], run: RunResults) -> Path:
    """Store ``run`` as its stack's baseline, merging into the same stack's file.

    Records this run produced replace the stored ones; others are kept, so suites can
    be recorded one at a time, and concurrently: the read-merge-write holds
    :func:`lock_for`. Refuses to touch a file that belongs to another stack.
    """
    from filelock import Timeout

    path = path_for(root, run.fingerprint)
    try:
        with lock_for(path):
            _merge_into(path, run)
    except Timeout:
        raise BaselineError(f"another run has held the lock on {path} for {LOCK_TIMEOUT:g} s; "
                            f"if none is running, delete {path.parent / ('.' + path.name)}"
                            ".lock") from None
    return path


def _merge_into(path: Path, run: RunResults) -> None:
    merged = RunResults(fingerprint=run.fingerprint, records={}, started=run.started,
                        finished=run.finished, seed=run.seed, selection=run.selection)
    if path.exists():
        try:
            existing = results_mod.load(path)
        except SchemaError as exc:
            cause = re.split(r"\. (?:Re-record|Restore)", str(exc))[0]
            raise BaselineError(f"refusing to record over an unreadable baseline: {cause}. "
                                f"Move it aside (mv {path} {path}.bad) and record again; "
                                "the file is unchanged") from exc
        stored = existing.fingerprint.get("stack_id")
        if stored != run.fingerprint["stack_id"]:
            raise BaselineError(f"refusing to overwrite {path}: it holds stack {stored!r}, "
                                f"this run is {run.fingerprint['stack_id']!r}; rename or move "
                                "the file, it is another stack's baseline")
        check_agrees(path, existing.fingerprint)
        merged.records.update(existing.records)
        if existing.records and existing.selection != run.selection:
            merged.selection = None  # records of several selections: none describes them all
        merged.started = min(filter(None, (existing.started, run.started)), default="")
    for record_id, rec in run.records.items():
        merged.records[record_id] = _merge_runs(merged.records.get(record_id), rec)
    # a symlinked baseline (a shared store) is written through the link: its target is
    # replaced atomically and the link stays
    results_mod.write(merged, Path(os.path.realpath(path)))


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
