"""The store of runs: every run's results in a database, queryable (docs/nightly.md).

One small interface over SQLite (the default: ``results/harness.db``, nothing to start)
and PostgreSQL (a fleet's server: ``--store postgresql://...`` or ``HARNESS_STORE``), the
same schema and code path (:mod:`harness.store.db`, SQLAlchemy Core and psycopg 3). The
JSON results file stays each run's artefact; the store keeps every run's, losslessly, so
history, the fleet matrix and the verdict of a sharded run are queries (Note [What the
store keeps] in :mod:`harness.store.schema`). Views call :func:`harness.verdict.judge` on
what they read here; nothing here judges.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Optional, Union

from harness.store.url import ENV, NewerStoreError, StoreError, check_url, mask, url_for

if TYPE_CHECKING:  # pragma: no cover
    from harness.store.db import Store

__all__ = ["ENV", "NewerStoreError", "StoreError", "check_url", "import_paths", "mask",
           "open_store", "url_for"]


def open_store(url: str) -> Store:
    """The store at ``url``, created or migrated as needed (Note [Store schema versions]
    in :mod:`harness.store.db`); :class:`StoreError` naming the URL and the fix."""
    from harness.store.db import Store

    check_url(url)
    return Store(url)


def import_paths(store: Store, paths: Iterable[Union[str, Path]], *,
                 run_id: Optional[str] = None, role: str = "run",
                 progress=None) -> tuple[int, int, list[str]]:
    """Import results files (and folders of them) through :func:`harness.results.load`:
    ``(stored, already there, problems)``. A file's run id is ``run_id`` or its name."""
    from harness.results import SchemaError, is_results_file, load, run_name

    files: list[Path] = []
    for path in map(Path, paths):
        files += sorted(p for p in path.rglob("*.json*") if is_results_file(p)) \
            if path.is_dir() else [path]
    stored = present = 0
    problems: list[str] = []
    for path in files:
        try:
            run = load(path)
        except SchemaError as exc:
            problems.append(str(exc))
            continue
        _, new = store.put(run, run_id=run_id or run_name(path), source=str(path), role=role)
        stored, present = stored + new, present + (not new)
        if progress is not None:
            progress(f"{'stored' if new else 'already stored'}: {path}")
    return stored, present, problems
