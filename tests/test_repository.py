"""The project is self-contained: no file refers to notes kept outside the repository.

Design, schema and maintainer notes live in docs/ (design.md, schema.md, standards.md,
DEVELOPING.md); a reference to a file beside the checkout is a dead link for everyone who
clones it.
"""

import re
import subprocess
import sys
from pathlib import Path

import early

ROOT = Path(__file__).resolve().parents[1]
CLIMB = re.compile(r"(?:\.\./)+[\w.-]+")
"""A relative path that goes up (``../name``): a reference outside when it leaves ROOT."""


NOTE_NAME = re.compile(r"[A-Z][A-Z0-9_]+\.md")
"""How a maintainer's note file is named (an upper-case Markdown name)."""


def _outside_names() -> set[str]:
    """Note files kept in the folders beside the checkout (found, not named here), less
    the names the repository has itself (its README.md, docs/DEVELOPING.md)."""
    own = {p.name for p in ROOT.rglob("*.md")}
    names = set()
    for folder in ROOT.parent.iterdir():
        try:
            if folder.is_dir() and folder.resolve() != ROOT.resolve():
                names |= {p.name for p in folder.glob("*.md") if NOTE_NAME.fullmatch(p.name)}
        except OSError:
            continue
    return names - own


def _outside_hits(path: Path, line: str, names: set[str]) -> list[str]:
    hits = [m.group(0) for m in CLIMB.finditer(line)
            if not (path.parent / m.group(0)).resolve().is_relative_to(ROOT.resolve())]
    return hits + [name for name in names if name in line]


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
    names = _outside_names()
    found = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary
        for number, line in enumerate(text.splitlines(), 1):
            hits = _outside_hits(path, line, names)
            if hits:
                found.append(f"{path.relative_to(ROOT)}:{number}: {hits[0]}: {line.strip()}")
    assert not found, ("these lines refer to files outside the repository; point them at "
                       "docs/ instead:\n" + "\n".join(found))


def test_a_reference_outside_is_found(tmp_path):
    """The rule can fail: a climb out of the repository, and a note file's name."""
    here = ROOT / "docs" / "design.md"
    assert _outside_hits(here, "see " + "../" * 2 + "elsewhere/notes", set())
    assert not _outside_hits(here, "see ../README.md", set())
    assert _outside_hits(here, "as GUIDE.md says", {"GUIDE.md"})


def test_test_modules_have_unique_names():
    """tests/ and suites/ have no __init__.py, so pytest imports each test module by its
    base name (rootdir-relative "prepend" import): two files of one name break collection
    of a plain ``pytest`` run ("import file mismatch")."""
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted([*(ROOT / "tests").rglob("test_*.py"), *(ROOT / "suites").rglob("test_*.py")]):
        if path.name in seen:
            clashes.append(f"{seen[path.name].relative_to(ROOT)} and {path.relative_to(ROOT)}")
        seen.setdefault(path.name, path)
    assert not clashes, "test modules sharing a name (rename one): " + "; ".join(clashes)


def _readme_two_commands() -> list[str]:
    """The commands of README.md's "The two commands" bash block, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The two commands", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_ci_runs_the_readmes_two_commands_as_the_readme_spells_them():
    """.ci/run's first command and test command are README.md's, word for word, and it
    runs the first one before the test command installs [test] (issue: the first command
    failed in a bare venv while CI, which ran the test command first, stayed green)."""
    first, test = _readme_two_commands()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert f'FIRST_COMMAND="{first}"' in ci
    assert f'TEST_COMMAND="{test}"' in ci
    assert ci.index("$FIRST_COMMAND\n") < ci.index("$TEST_COMMAND\n")
    assert '"$PY" -m venv' in ci.split("$FIRST_COMMAND\n", 1)[0]


def _collect_as_a_conformance_run(env: dict):
    """``pytest -m npu --co`` with the [test] extra's plugins left out (an early job:
    Note [Early jobs] in tests/early.py; the collection takes ~6 s)."""
    return early.run(
        [sys.executable, "-m", "pytest", "-m", "npu", "--co", "-q", "-p", "no:cacheprovider",
         "-p", "no:timeout", "-p", "no:xdist", "-p", "no:randomly"],
        cwd=ROOT, env=env, timeout=300)


CONFORMANCE_COLLECTION = early.Job("a conformance run's collection",
                                   _collect_as_a_conformance_run)
EARLY = (CONFORMANCE_COLLECTION,)


def test_a_conformance_run_needs_nothing_of_tests_or_the_test_extra():
    """``pytest -m npu`` with the [test] extra's plugins left out (as in a venv made by
    ./run-suite) collects suites/ alone and no module of tests/ (one of which uses
    pytest-timeout's marker: collected without the plugin, --strict-markers refuses it)."""
    proc = early.result(CONFORMANCE_COLLECTION)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    nodes = [line for line in proc.stdout.splitlines() if "::" in line]
    assert nodes and all(node.startswith("suites/") for node in nodes), nodes[:5]
