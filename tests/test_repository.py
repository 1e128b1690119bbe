"""The project is self-contained: no file refers to notes kept outside the repository.

Design, schema and maintainer notes live in docs/ (design.md, schema.md, standards.md,
DEVELOPING.md); a reference to a file beside the checkout is a dead link for everyone who
clones it.
"""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = ("../" "shared", "/work/" "shared", "DESIGN" ".md", "STYLE" ".md", "NPU_" "NOTES")
"""What a reference to outside notes looks like (split so this file does not match)."""


def _project_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout
        names = listed.splitlines()
    except (OSError, subprocess.CalledProcessError):  # no git: the checkout's own folders
        names = [str(p.relative_to(ROOT)) for folder in ("harness", "suites", "tests", "docs")
                 for p in (ROOT / folder).rglob("*") if p.is_file()]
        names += [p.name for p in ROOT.iterdir() if p.is_file()]
    return [ROOT / name for name in names
            if not name.startswith("baselines/") and (ROOT / name).is_file()]


def test_no_file_refers_to_notes_outside_the_repository():
    files = _project_files()
    assert any(f.name == "design.md" for f in files) and len(files) > 50
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary
        for number, line in enumerate(text.splitlines(), 1):
            hits = [pattern for pattern in OUTSIDE if pattern in line]
            if hits:
                found.append(f"{path.relative_to(ROOT)}:{number}: {hits[0]}: {line.strip()}")
    assert not found, ("these lines refer to files outside the repository; point them at "
                       "docs/ instead:\n" + "\n".join(found))
