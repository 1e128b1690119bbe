"""A throw-away PostgreSQL cluster for the store's tests: Debian's binaries (``pg_config
--bindir``), ``initdb`` + ``pg_ctl`` in a temporary folder, on 127.0.0.1 and a free port,
password authentication over TCP (so a test can see the password masked), stopped and
deleted at the end. PostgreSQL refuses to run as root: as root it runs as the ``postgres``
user. Where none can be started, :func:`unavailable` says why (the tests skip with the
reason; with CI=true they fail, since .ci/postgres installs it there)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Optional

PASSWORD = "s3cret-pw"


def _bindir() -> Optional[Path]:
    for candidate in (shutil.which("pg_config"),):
        if candidate:
            out = subprocess.run([candidate, "--bindir"], capture_output=True, text=True)
            path = Path(out.stdout.strip())
            if (path / "initdb").exists():
                return path
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    """One running cluster; :meth:`url` of a fresh database per caller."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        if self.bindir is None:
            raise RuntimeError("no PostgreSQL binaries (pg_config --bindir or "
                               "/usr/lib/postgresql/*/bin): apt-get install postgresql")
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.root = Path(tempfile.mkdtemp(prefix="harness-pg-"))
        if self.as_user:
            shutil.chown(self.root, "postgres")
        self.data = self.root / "data"
        self.port = _free_port()
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self.as_user:
            shutil.chown(pwfile, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--pwfile", str(pwfile),
                  "--auth-local=trust", "--auth-host=scram-sha-256", "--no-sync", "-E", "UTF8")
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=60")
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"),
                  "-w", "-t", "60", "start")
        self.count = 0

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run([*self.as_user, str(self.bindir / tool), *args],
                              capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode:
            raise RuntimeError(f"{tool} failed ({done.returncode}): "
                               f"{(done.stderr or done.stdout).strip()[-400:]}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    def fresh(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        self.count += 1
        name = f"store_{self.count}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def start() -> tuple[Optional[Cluster], str]:
    """A running cluster, or None and why not."""
    try:
        return Cluster(), ""
    except (RuntimeError, OSError, subprocess.SubprocessError, KeyError, LookupError) as exc:
        return None, f"no PostgreSQL could be started: {exc}"


def unavailable(reason: str) -> None:
    """Skip with ``reason``; fail under CI=true (CI installs PostgreSQL: .ci/postgres)."""
    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the store's PostgreSQL tests must run here; "
                    ".ci/postgres installs it)")
    pytest.skip(reason)
