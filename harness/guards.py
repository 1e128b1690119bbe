"""Refuse a bad run before its first test: output paths, the baseline it names, its models.

The plugin calls :func:`check_session` right after :func:`harness.session.start` (the
device and the baseline are known then); a :class:`GuardError` becomes a pytest usage
error (exit 4), so a typo costs seconds, not a whole run followed by a NO-GO.

Note [Outputs never overwrite inputs]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A run writes its results folder, ``--alerts PATH`` (a JSON file and its ``.md`` twin)
and ``--report PATH`` (HTML and its ``.md`` twin). If any of those resolves (symlinks
followed) to a baseline file, the run would write over what it reads: ``--alerts
B/cpu/x/torch-2.13.0.md`` writes its JSON to ``torch-2.13.0.json``. Every file output is
therefore compared, by real path, with every baseline in the store (the one this run
compares with or records into among them) and refused when it is one. An alerts or
report file whose folder is missing is refused too, instead of creating folders a typo
named (the fix says ``mkdir -p``); the results folder, the harness's own, is created
with its parents as before, unless a file stands in the way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional

from harness import baselines

EXAMPLE_NAMES = {"--alerts": "alerts.md", "--report": "report.html"}


class GuardError(ValueError):
    """A run that must not start; the message names the option, the cause and the fix."""


def output_files(settings) -> list[tuple[str, Path]]:
    """(option, path) of every file the run may write besides its results file."""
    from harness.report import markdown_path
    from harness.session import alerts_paths

    out: list[tuple[str, Path]] = []
    taken = None
    if settings.alerts is not None:
        json_path, md_path = alerts_paths(Path(settings.alerts))
        out += [("--alerts", json_path), ("--alerts", md_path)]
        taken = md_path
    if settings.report is not None:
        out += [("--report", Path(settings.report)),
                ("--report", markdown_path(settings.report, taken))]
    return out


def read_paths(settings, fingerprint: dict, selection) -> set[str]:
    """Real paths of every file the run reads or records into: the stored baselines."""
    paths: set[Path] = {baselines.path_for(settings.baseline_dir, fingerprint)}
    if selection is not None and selection.path is not None:
        paths.add(Path(selection.path))
    root = Path(settings.baseline_dir)
    try:
        paths.update(root.glob("*/*/*.json"))
    except OSError:
        pass  # an unreadable store is reported by the baseline selection itself
    return {os.path.realpath(p) for p in paths}


def _writable_folder(option: str, path: Path, what: str) -> None:
    folder = path if what == "folder" else path.parent
    if folder.is_dir():
        if not os.access(folder, os.W_OK | os.X_OK):
            raise GuardError(f"{option} {path}: the folder {folder} is not writable; give a "
                             f"path in a folder you can write")
        return
    if folder.exists() or folder.is_symlink():
        raise GuardError(f"{option} {path}: {folder} is not a folder; give a path in an "
                         "existing folder")
    if what == "folder":  # the results folder is the harness's own: created, parents too
        existing = next(p for p in Path(os.path.abspath(folder)).parents
                        if p.exists() or p.is_symlink())
        if existing.is_dir() and os.access(existing, os.W_OK | os.X_OK):
            return
        raise GuardError(f"{option} {path}: cannot create it: {existing} is not a writable "
                         "folder; give a folder you can write")
    raise GuardError(f"{option} {path}: the folder {folder} does not exist (nothing is "
                     f"created for a path that may be a typo); create it first (mkdir -p "
                     f"{folder}) or fix the path")


def check_output_file(option: str, path: Path) -> None:
    """A file output: not a folder, in an existing writable folder."""
    if path.is_dir():
        raise GuardError(f"{option} {path}: is a folder; give a file path such as "
                         f"{path / EXAMPLE_NAMES.get(option, 'report.html')}")
    _writable_folder(option, path, "file")


def check_outputs(settings, fingerprint: dict, selection) -> None:
    """Refuse outputs that would overwrite a baseline, land in a missing or read-only
    folder, or are folders themselves (Note [Outputs never overwrite inputs])."""
    reads = read_paths(settings, fingerprint, selection)
    _writable_folder("--results-dir", Path(settings.results_dir), "folder")
    for option, path in output_files(settings):
        if os.path.realpath(path) in reads:
            raise GuardError(
                f"{option} {path}: the run would write over the baseline "
                f"{os.path.realpath(path)}, which it reads or records; write the "
                f"{option.lstrip('-')} outside the baseline store (e.g. {option} "
                f"{Path(settings.results_dir) / EXAMPLE_NAMES[option]})")
        check_output_file(option, path)


def check_against(settings, selection) -> None:
    """``--baseline-against STACK`` must name a stored, usable baseline, now."""
    if settings.baseline_against and selection is not None and selection.error:
        raise GuardError(f"{selection.error}. Drop --baseline-against, or name a stored "
                         "stack (python -m harness baseline list)")


def check_models(models: Iterable[str]) -> None:
    """Every ``--model`` must import and name a callable (the typo is a usage error, not
    failing checks)."""
    from harness.model.spec import SpecError, resolve_factory

    for text in models:
        try:
            resolve_factory(text)
        except SpecError as exc:
            raise GuardError(f"--model: {exc}") from None


def check_store(settings) -> None:
    """``--baseline-dir`` must be a folder (or, to record, one that can be created)."""
    root = Path(settings.baseline_dir)
    if (root.exists() or root.is_symlink()) and not root.is_dir():
        raise GuardError(f"--baseline-dir {root}: is not a folder (a file, or a broken "
                         "link); point it at the baseline store's folder")
    if settings.baseline_mode == "record" and not root.exists():
        _writable_folder("--baseline-dir", root, "folder")


def check_session(state) -> None:
    """Every check above for a started session (:class:`harness.session.RunState`)."""
    settings = state.settings
    check_store(settings)
    check_against(settings, state.selection)
    check_outputs(settings, state.run.fingerprint, state.selection)
    check_models(settings.models)
    check_run_store(settings.store)


def check_run_store(url: str) -> None:
    """The store must be usable before the run: a server that answers, a schema this
    harness reads (Note [Store schema versions] in harness/store/db.py); a SQLite file not
    made yet needs only a folder it can be made in (nothing is imported for that)."""
    from harness.store.url import driver_url

    target = driver_url(url)
    if target.startswith("sqlite:///"):
        path = Path(target[len("sqlite:///"):])
        if not path.exists():
            _writable_folder("--store", path.parent, "folder")  # created with the results
            return
    from harness.store import StoreError, open_store

    try:
        open_store(url).close()
    except StoreError as exc:
        raise GuardError(str(exc)) from None


def check_model_selected(models: Iterable[str], paths: Iterable[Path],
                         rootdir: Path) -> Optional[str]:
    """The usage error for ``--model`` when no collected test is under ``suites/model``
    (the option would be ignored), else None."""
    if not list(models):
        return None
    model_suite = (Path(rootdir) / "suites" / "model").resolve()
    for path in paths:
        if model_suite == Path(path).resolve() or model_suite in Path(path).resolve().parents:
            return None
    return ("--model is used only by the checks in suites/model, and none is selected; "
            "add suites/model to the run (or drop --model / --model-input)")
