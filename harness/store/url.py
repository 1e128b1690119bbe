"""The store's URL and errors: what options and guards need, without SQLAlchemy."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

ENV = "HARNESS_STORE"
DEFAULT_FILE = "harness.db"


class StoreError(RuntimeError):
    """The store cannot be opened, read or written; the message names the URL (password
    masked) and the fix."""


class NewerStoreError(StoreError):
    """A store written by a newer harness (a schema revision this one does not know)."""


def mask(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages and logs)."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", str(url))


def url_for(option: Optional[str], results_dir: Path, env: Optional[dict] = None) -> str:
    """The store URL: ``--store``, else ``HARNESS_STORE``, else SQLite in the results folder."""
    import os

    env = os.environ if env is None else env
    url = option or env.get(ENV) or ""
    return url or f"sqlite:///{Path(results_dir) / DEFAULT_FILE}"


def driver_url(url: str) -> str:
    """The URL SQLAlchemy is given: ``postgresql://`` and ``postgres://`` use psycopg 3."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix):]
    return url


def check_url(url: str) -> None:
    """Refuse a URL of an unsupported kind before anything connects."""
    if not re.match(r"^(sqlite|postgres|postgresql)(\+\w+)?://", url):
        raise StoreError(f"store URL {mask(url)!r} is neither sqlite:///PATH nor "
                         "postgresql://USER:PASSWORD@HOST:PORT/DB; give one of these with "
                         f"--store or {ENV}")
