"""A real headless browser for the reports' render tests: Debian's chromium, when present.

``needs_chromium`` skips a test with the reason where there is none; :func:`dump_dom`
loads a page and returns the DOM the browser built from it (so malformed inline SVG or
markup shows up as missing elements, not as a passing string search).
"""

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="no /usr/bin/chromium (Debian's chromium package): the "
    "browser render test needs it")


def dump_dom(page: Path, timeout: float = 180) -> str:
    """The DOM headless chromium builds from ``page`` (a fresh profile, no network)."""
    profile = tempfile.mkdtemp(prefix="chromium-")
    try:
        done = subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--window-size=1280,2000",
             "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
