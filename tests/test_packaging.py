"""The project as an installed pytest plugin: the wheel (entry point, suites inside), the
plugin loaded by its entry point alone, every path option with and without '=', and
``python -m harness run`` from another folder (Note [Installed suites] in
harness/layout.py, Note [Path options without '='] in harness/plugin.py)."""

from __future__ import annotations

import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import early
import pytest

from harness import layout
from harness import plugin as harness_plugin
from harness.results import read_document

ROOT = Path(__file__).resolve().parent.parent

CHECK = '''
def test_metric(results):
    results.check("demo/metric", True, "never", metrics={"value": 1.0})
'''


def _env(base: dict, **extra: str) -> dict:
    env = {k: v for k, v in base.items() if not k.startswith(("HARNESS_", "PYTEST_"))}
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", **extra)
    return env


def _pytest(args: list[str], *, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return early.run([sys.executable, "-m", "pytest", "-p", "no:randomly", *args], cwd=cwd,
                     env=env, timeout=300)


# ---------------------------------------------------------------------------- the wheel

def _build_wheel(env: dict) -> dict:
    """Build the wheel from a copy of the checkout's files (git's list: tracked, and new
    files git does not ignore), so the checkout gets no build/ or .egg-info."""
    if importlib.util.find_spec("setuptools") is None:
        return {"skip": "setuptools is not installed: pip cannot build the wheel offline "
                        "(pip install 'setuptools>=64')"}
    listing = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=ROOT, capture_output=True)
    if listing.returncode != 0:
        return {"skip": f"git cannot list the checkout's files: {listing.stderr!r}"}
    with tempfile.TemporaryDirectory(prefix="harness-wheel-") as tmp:
        src, out = Path(tmp) / "src", Path(tmp) / "out"
        for rel in filter(None, listing.stdout.decode().split("\0")):
            if (ROOT / rel).is_file():
                (src / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, src / rel)
        proc = early.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                          "--no-build-isolation", "--no-index", "-q", "-w", str(out),
                          str(src)], env=_env(env), timeout=300)
        wheels = sorted(out.glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            return {"error": f"pip wheel exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"}
        with zipfile.ZipFile(wheels[0]) as whl:
            names = whl.namelist()
            entry_points = next((whl.read(n).decode() for n in names
                                 if n.endswith(".dist-info/entry_points.txt")), "")
        suites = sorted(str(p.relative_to(src)) for p in (src / "suites").rglob("*.py"))
    return {"names": names, "entry_points": entry_points, "suites": suites}


WHEEL = early.Job("wheel build", _build_wheel)


# ---------------------------------------------- the plugin through its entry point alone

def _entry_point_runs(env: dict) -> dict:
    """A project of its own (pytest.ini, suites/demo, no conftest.py) with the plugin
    reachable only through a ``pytest11`` entry point, its output folders outside the
    project and existing: pytest reads a value given after a space as a test path when it
    picks the rootdir. Run with each spelling, then with the plugin left out."""
    with tempfile.TemporaryDirectory(prefix="harness-entry-point-") as tmp:
        base = Path(tmp)
        dist = base / "site" / "harness_entry_point_probe-0.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: harness-entry-point-"
                                       "probe\nVersion: 0\n")
        (dist / "entry_points.txt").write_text("[pytest11]\nharness.plugin = harness.plugin\n")
        project = base / "project"
        (project / "suites" / "demo").mkdir(parents=True)
        (project / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
        (project / "suites" / "demo" / "test_demo.py").write_text(CHECK)
        for name in ("B", "R1", "R2", "A1", "A2", "P1", "P2"):
            (base / name).mkdir()
        run_env = _env(env, PYTHONPATH=os.pathsep.join([str(base / "site"), str(ROOT)]))

        def spelled(eq: bool, n: int) -> list[str]:
            pairs = [("--baseline-dir", base / "B"), ("--results-dir", base / f"R{n}"),
                     ("--alerts", base / f"A{n}" / "alerts.json"),
                     ("--report", base / f"P{n}" / "report.html")]
            return [part for flag, value in pairs
                    for part in ([f"{flag}={value}"] if eq else [flag, str(value)])]

        runs = {
            "space": _pytest(["--device", "cpu", "--baseline", "record", *spelled(False, 1)],
                             cwd=project, env=run_env),
            "equals": _pytest(["--device", "cpu", *spelled(True, 2)], cwd=project,
                              env=run_env),
            "left out": _pytest(["-p", "no:harness.plugin", "--baseline-dir", str(base / "B")],
                                cwd=project, env=run_env),
        }
        files = sorted(str(p.relative_to(base)) for p in base.rglob("*")
                       if p.is_file() and "site" not in p.parts and not p.name.startswith(".")
                       and "__pycache__" not in p.parts)
        results = {name: read_document(next((base / f"R{n}").glob("*.json.gz")))
                   for n, name in ((1, "space"), (2, "equals"))
                   if any((base / f"R{n}").glob("*.json.gz"))}
    return {"runs": runs, "files": files, "results": results}


ENTRY_POINT = early.Job("plugin through its entry point", _entry_point_runs)


def _harness_run(env: dict) -> dict:
    """``python -m harness run`` from a folder outside the checkout, the values after a
    space, a suites/ path that exists only in the checkout."""
    with tempfile.TemporaryDirectory(prefix="harness-run-") as tmp:
        base = Path(tmp)
        for name in ("here", "B", "R"):
            (base / name).mkdir()
        proc = early.run(
            [sys.executable, "-m", "harness", "run", "suites/example", "-p", "no:randomly",
             "-p", "no:cacheprovider", "--device", "cpu", "--baseline", "record",
             "--baseline-dir", str(base / "B"), "--results-dir", str(base / "R")],
            cwd=base / "here", env=_env(env, PYTHONPATH=str(ROOT)), timeout=300)
        files = sorted(str(p.relative_to(base)) for p in base.rglob("*.json*"))
        results = [read_document(p) for p in (base / "R").glob("*.json.gz")]
    return {"proc": proc, "files": files, "results": results}


HARNESS_RUN = early.Job("python -m harness run", _harness_run)
EARLY = (WHEEL, ENTRY_POINT, HARNESS_RUN)


def test_the_wheel_registers_the_plugin_and_ships_every_suite_file():
    built = early.result(WHEEL)
    if "skip" in built:
        pytest.skip(built["skip"])
    assert "error" not in built, built.get("error")
    entry_points = configparser.ConfigParser()
    entry_points.read_string(built["entry_points"])
    assert dict(entry_points["pytest11"]) == {"harness.plugin": "harness.plugin"}
    names = set(built["names"])
    assert built["suites"], "no suites/*.py in the checkout"
    missing = [rel for rel in built["suites"] if f"harness/{rel}" not in names]
    assert not missing, f"suites files not in the wheel: {missing}"
    assert {"harness/suites.ini", "harness/layout.py", "harness/plugin.py"} <= names
    assert not [n for n in names if n.startswith(("suites/", "tests/", "baselines/"))]


@pytest.mark.parametrize("spelling", ["space", "equals"])
def test_path_options_work_with_or_without_equals_through_the_entry_point(spelling):
    out = early.result(ENTRY_POINT)
    proc = out["runs"][spelling]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rootdir: " in proc.stdout and "project" in proc.stdout.split("rootdir: ")[1]
    n = 1 if spelling == "space" else 2
    files = out["files"]
    assert any(f.startswith("B/cpu/") and f.endswith(".json") for f in files), files
    assert [f for f in files if f.startswith(f"R{n}/")], files
    assert f"A{n}/alerts.json" in files and f"A{n}/alerts.md" in files, files
    assert f"P{n}/report.html" in files, files
    assert not [f for f in files if f.startswith(("project/results", "project/baselines"))]
    run = out["results"][spelling]
    assert run["records"]["demo/metric"]["test"] == "suites/demo/test_demo.py::test_metric"
    if spelling == "space":
        assert "baseline recorded" in proc.stdout
    else:
        assert "VERDICT: GO" in proc.stdout and "(same stack)" in proc.stdout


def test_the_plugin_came_from_the_entry_point():
    proc = early.result(ENTRY_POINT)["runs"]["left out"]
    assert proc.returncode == 4
    assert "unrecognized arguments: --baseline-dir" in proc.stderr


def test_harness_run_runs_the_suites_from_any_folder():
    out = early.result(HARNESS_RUN)
    proc = out["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "VERDICT: GO" in proc.stdout and "baseline recorded" in proc.stdout
    assert [f for f in out["files"] if f.startswith("B/cpu/")], out["files"]
    (run,) = out["results"]
    tests = {rec["test"] for rec in run["records"].values()}
    assert tests and all(t.startswith("suites/example/test_example.py::") for t in tests)


# ------------------------------------------------------------------------- in process

def test_installed_ini_repeats_the_checkouts_pytest_options():
    tomllib = pytest.importorskip("tomllib")
    checkout = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]
    installed = configparser.ConfigParser()
    installed.read(ROOT / "harness" / "suites.ini")
    ini = installed["pytest"]
    assert ini["minversion"] == checkout["minversion"]
    assert ini["addopts"].split() == checkout["addopts"]
    assert (ini["xfail_strict"] == "true") == checkout["xfail_strict"]
    assert [line for line in ini["filterwarnings"].splitlines() if line] == \
        checkout["filterwarnings"]
    assert set(installed["pytest"]) == {"minversion", "addopts", "xfail_strict",
                                        "filterwarnings"}


def test_option_values_are_joined_to_their_flags():
    assert harness_plugin._joined(
        ["suites", "--baseline-dir", "/b", "--run-slow", "-k", "x", "--report", "r.html",
         "--results-dir=/r", "--seed", "3"]) == \
        ["suites", "--baseline-dir=/b", "--run-slow", "-k", "x", "--report=r.html",
         "--results-dir=/r", "--seed=3"]


def test_outputs_default_beside_the_run_only_for_the_installed_suites(monkeypatch, tmp_path):
    here = tmp_path / "here"
    assert layout.outputs_home(ROOT, here) == ROOT
    monkeypatch.setattr(layout, "PACKAGE", tmp_path)
    (tmp_path / "suites").mkdir()
    assert layout.outputs_home(tmp_path, here) == here
    assert layout.outputs_home(ROOT, here) == ROOT


def test_harness_run_selects_the_suites_and_names_their_files(tmp_path):
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "a.py").write_text("")
    run = layout.RunPlugin(tmp_path)
    here = tmp_path / "elsewhere"
    here.mkdir()
    assert run._resolved("suites/a.py::test_x[1]", here) == f"{tmp_path}/suites/a.py::test_x[1]"
    assert run._resolved("suites/none.py", here) == "suites/none.py"  # pytest says so
    (here / "suites").mkdir()
    (here / "suites" / "a.py").write_text("")
    assert run._resolved("suites/a.py", here) == "suites/a.py"  # the folder's own file
    root, ini = layout.suites_root()
    assert (root, ini) == (ROOT, ROOT / "pyproject.toml")
    args = layout.pytest_arguments(["-k", "add"], here)
    assert args == ["-c", str(ini), "--rootdir", str(root), "-W", layout.REWRITE_WARNING,
                    "--confcutdir", str(root / "suites"), "-k", "add"]


def test_installed_suites_under_another_rootdir_are_refused(pytester, monkeypatch):
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    package = pytester.path / "site" / "harness"
    (package / "suites" / "demo").mkdir(parents=True)
    (package / "suites" / "demo" / "test_demo.py").write_text(CHECK)
    monkeypatch.setattr(layout, "PACKAGE", package)
    result = pytester.runpytest(str(package / "suites"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*the installed suites*run with the package as pytest's "
                                 "rootdir*python -m harness run*"])
