"""Every bad input a user can give, as one table: exit code, message, and nothing read written.

Each row is a command (a conformance run of a one-check project through pytester, in
process, or a ``python -m harness`` command through :func:`harness.cli.main`), the exit
code it must end with, the words its message must contain, and the words it must not
(a traceback). Around every row the project's files are hashed: no file the command
reads (the baseline store, the results it is given, a symlink's target) may change, and
a refused command (exit 2 or 4) may create nothing at all (Note [Outputs never
overwrite inputs] in harness/guards.py). Rows that need a real process (a pipe, the
environment of a fresh interpreter) run one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

import pytest

from harness import cli, faults

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
from harness.results import lower

def test_metric(device, results):
    results.record("demo/metric/float32", metrics={"err": 1e-3},
                   rules={"err": lower(rel=2.0, abs=1e-6)})
"""


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad input: ``run`` is ``pytest`` (the plugin), ``cli`` (``python -m harness``)
    or ``process`` (``python -m harness`` in a child, for pipes); ``{base}`` in ``argv`` is
    the recorded baseline, ``{base_md}`` its ``.md`` twin, ``{run}`` a results file."""

    id: str
    run: str
    argv: tuple[str, ...]
    rc: int
    words: tuple[str, ...]
    setup: Optional[str] = None
    env: tuple[tuple[str, str], ...] = ()
    absent: tuple[str, ...] = ("Traceback", "INTERNALERROR")


CASES = [
    # 1. a run overwriting its own baseline
    Case("alerts-md-twin-is-the-baseline", "pytest", ("--alerts", "{base_md}"), 4,
         ("--alerts", "would write over the baseline", "outside the baseline store")),
    Case("report-is-the-baseline", "pytest", ("--report", "{base}"), 4,
         ("--report", "would write over the baseline")),
    Case("record-with-alerts-on-the-baseline", "pytest",
         ("--baseline", "record", "--alerts", "{base_md}"), 4,
         ("would write over the baseline",)),
    Case("report-through-a-symlink-to-the-baseline", "pytest", ("--report", "link.html"), 4,
         ("would write over the baseline",), setup="link_to_baseline"),
    Case("report-md-twin-is-the-baseline", "pytest", ("--report", "{base_html}"), 4,
         ("would write over the baseline",), setup="md_twin_links_to_baseline"),
    # 2. HARNESS_FAULTS
    Case("harness-faults-env-unknown", "pytest", (), 4,
         ("HARNESS_FAULTS", "unknown fault 'nope'", "Unset HARNESS_FAULTS"),
         env=(("HARNESS_FAULTS", "nope"),)),
    Case("harness-faults-env-unknown-faults-check", "cli",
         ("faults", "check", "--fault", "example.relu_leaks"), 2,
         ("HARNESS_FAULTS", "unknown fault 'nope'"), env=(("HARNESS_FAULTS", "nope"),)),
    # 3. out-of-range numbers
    Case("dist-timeout-inf", "pytest", ("--dist-timeout", "inf"), 4,
         ("--dist-timeout", "out of range", "(0, 86400]")),
    Case("dist-timeout-1e300", "pytest", ("--dist-timeout", "1e300"), 4,
         ("--dist-timeout", "(0, 86400]")),
    Case("dist-timeout-nan", "pytest", ("--dist-timeout", "nan"), 4, ("(0, 86400]",)),
    Case("op-budget-inf", "pytest", ("--op-budget", "inf"), 4,
         ("--op-budget", "not a finite number")),
    Case("bench-runs-negative", "pytest", ("--bench-runs", "-1"), 4,
         ("--bench-runs", "must be >= 1")),
    # 4. CLI tracebacks
    Case("report-html-is-a-folder", "cli", ("report", "{run}", "--html", "b"), 1,
         ("--html", "is a folder")),
    Case("report-html-folder-missing", "cli", ("report", "{run}", "--html", "no/dir/r.html"),
         1, ("does not exist", "mkdir -p")),
    Case("report-html-is-its-input", "cli", ("report", "{run}", "--html", "{run}"), 1,
         ("a file this command reads",)),
    Case("parity-same-device-type", "cli", ("parity", "{run}", "{base}"), 4,
         ("both runs measured device type", "python -m harness report")),
    Case("parity-file-missing", "cli", ("parity", "{run}", "nope.json"), 4,
         ("'nope.json' is neither a results file nor a baseline", "<type>/<slug>/<stack>")),
    Case("parity-html-is-its-input", "cli", ("parity", "{run}", "{base}", "--html", "{run}"),
         4, ("a file this command reads",)),
    Case("parity-no-arguments", "cli", ("parity",), 4, ("REFERENCE, HERE",)),
    Case("baseline-diff-html-is-a-folder", "cli",
         ("baseline", "diff", "{base}", "{base}", "--html", "b"), 1, ("is a folder",)),
    Case("model-input-shape-wrong", "cli",
         ("model", "harness.models:simplecnn", "--input", "2x3", "--no-cases"), 2,
         ("fails on the CPU", "2x3", "--input")),
    Case("report-stack-id-garbage", "cli", ("report", "garbage.json"), 1,
         ("malformed stack id 'garbage'",), setup="garbage_stack"),
    Case("history-one-file-stack-id-garbage", "cli", ("history", "results"), 0,
         ("1 unreadable file(s) skipped", "malformed stack id"), setup="garbage_in_results"),
    Case("baseline-nested-100000-deep", "cli", ("baseline", "show", "{base}"), 1,
         ("nested too deeply",), setup="deep_baseline"),
    Case("report-results-nested-100000-deep", "cli", ("report", "deep.json"), 1,
         ("nested too deeply",), setup="deep_results"),
    Case("scan-path-missing", "cli", ("scan", "no-such-train.py"), 2,
         ("no such file or folder", "'no-such-train.py'", "give .py files")),
    Case("baseline-show-into-head", "process",
         ("baseline", "show", "{base}", "--json"), 141, (), setup="big_baseline"),
    # 5. SIGTERM: tests/test_stopping.py
    # 6. an unreadable baseline folder
    Case("baseline-device-folder-symlink-loop", "pytest", (), 1,
         ("cannot read the baseline folder", "VERDICT: NO-GO"), setup="device_folder_loop"),
    Case("baseline-require-device-folder-symlink-loop", "pytest", ("--baseline", "require"),
         1, ("cannot read the baseline folder",), setup="device_folder_loop"),
    Case("baseline-list-device-folder-symlink-loop", "cli", ("baseline", "list", "--dir", "b"),
         1, ("cannot read the baseline folder",), setup="device_folder_loop"),
    # 7. options that would be ignored
    Case("model-without-suites-model", "pytest", ("--model", "harness.models:simplecnn"), 4,
         ("--model", "suites/model", "none is selected")),
    Case("model-input-without-model", "pytest", ("--model-input", "8x3"), 4,
         ("--model-input", "no --model")),
    Case("model-compile-without-model", "pytest", ("--model-compile",), 4,
         ("--model-compile", "no --model")),
    Case("model-typo", "pytest", ("--model", "harness.models:simplecnm"), 4,
         ("--model", "no callable 'simplecnm'")),
    Case("baseline-against-with-baseline-off", "pytest",
         ("--baseline", "off", "--baseline-against", "torch-2.4.0"), 4,
         ("--baseline off", "drop one")),
    # 10. bad output paths and --baseline-against, before the run
    Case("baseline-against-not-stored", "pytest", ("--baseline-against", "torch-0.1"), 4,
         ("--baseline-against torch-0.1", "does not exist", "baseline list")),
    Case("report-folder-missing", "pytest", ("--report", "nonexistent/dir/r.html"), 4,
         ("does not exist", "mkdir -p")),
    Case("alerts-is-a-folder", "pytest", ("--alerts", "b"), 4, ("--alerts", "is a folder")),
    Case("results-dir-is-a-file", "pytest", ("--results-dir", "{base}"), 4,
         ("--results-dir", "is not a folder")),
    Case("results-dir-under-a-file", "pytest", ("--results-dir", "{base}/sub"), 4,
         ("--results-dir", "cannot create it", "is not a writable folder")),
    Case("baseline-dir-is-a-file", "pytest", ("--baseline-dir", "{base}"), 4,
         ("--baseline-dir", "is not a folder")),
    Case("record-into-a-store-under-a-file", "pytest",
         ("--baseline", "record", "--baseline-dir", "{base}/store"), 4,
         ("--baseline-dir", "cannot create it")),
    # 11. smaller
    Case("report-stack-names-its-own-flag", "cli",
         ("report", "{run}", "--stack", "torch-0.1", "--baseline-dir", "b"), 1,
         ("--stack torch-0.1", "does not exist"), absent=("--baseline-against", "Traceback")),
    Case("record-over-a-corrupt-baseline", "pytest", ("--baseline", "record"), 1,
         ("refusing to record over an unreadable baseline", "Move it aside"),
         setup="corrupt_baseline", absent=("Re-record", "Traceback")),
    Case("history-json-empty-folder", "cli", ("history", "empty", "--json"), 1,
         ('"changes": []',), setup="empty_folder"),
    Case("doctor-bad-baseline-exits-1", "cli", ("doctor", "--baseline-dir", "b"), 1,
         ("[FAIL] baseline", "check(s) FAIL"), setup="corrupt_baseline"),
    Case("baseline-over-the-size-cap", "cli", ("baseline", "show", "{base}"), 1,
         ("over the", "HARNESS_MAX_RESULTS_MB"), env=(("HARNESS_MAX_RESULTS_MB", "0.0001"),)),
]


# ----------------------------------------------------------------------- set-ups

def _link_to_baseline(path: Path, base: Path) -> None:
    (path / "link.html").symlink_to(base)


def _md_twin_links(path: Path, base: Path) -> None:
    """``--report r.html`` writes ``r.md`` too, here a link to the baseline."""
    (path / "r.md").symlink_to(base)


def _big_baseline(path: Path, base: Path) -> None:
    """More than a pipe holds (64 KiB), so ``| head`` leaves while the command writes."""
    data = json.loads(base.read_text())
    record = next(iter(data["records"].values()))
    data["records"] = {f"demo/metric/n{i}": record for i in range(5000)}
    base.write_text(json.dumps(data))


def _garbage_stack(path: Path, base: Path) -> None:
    data = json.loads(base.read_text())
    data["fingerprint"]["stack_id"] = "garbage"
    (path / "garbage.json").write_text(json.dumps(data))


def _garbage_in_results(path: Path, base: Path) -> None:
    _garbage_stack(path, base)
    os.replace(path / "garbage.json", path / "results" / "garbage.json")


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _deep_baseline(path: Path, base: Path) -> None:
    base.write_text(_nested(100_000))


def _deep_results(path: Path, base: Path) -> None:
    (path / "deep.json").write_text('{"records": ' + _nested(100_000) + "}")


def _device_folder_loop(path: Path, base: Path) -> None:
    folder = base.parent
    for child in folder.iterdir():
        child.unlink()
    folder.rmdir()
    os.symlink(folder.name, folder)  # a link to itself: ELOOP


def _corrupt_baseline(path: Path, base: Path) -> None:
    base.write_text('{"schema_version": 1, "records": [')


def _empty_folder(path: Path, base: Path) -> None:
    (path / "empty").mkdir()


SETUPS: dict[str, Callable[[Path, Path], None]] = {
    "link_to_baseline": _link_to_baseline, "md_twin_links_to_baseline": _md_twin_links,
    "big_baseline": _big_baseline,
    "garbage_stack": _garbage_stack, "garbage_in_results": _garbage_in_results,
    "deep_baseline": _deep_baseline, "deep_results": _deep_results,
    "device_folder_loop": _device_folder_loop, "corrupt_baseline": _corrupt_baseline,
    "empty_folder": _empty_folder,
}


# ----------------------------------------------------------------------- helpers

def snapshot(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's sha256, a link's target, a folder's name."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            full = Path(folder) / name
            rel = str(full.relative_to(root))
            if "__pycache__" in rel or rel.startswith(".pytest_cache"):
                continue
            if full.is_symlink():
                out[rel] = "-> " + os.readlink(full)
            elif full.is_file():
                out[rel] = hashlib.sha256(full.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


@pytest.fixture
def project(pytester):
    """A one-check project with a recorded baseline in ``b/`` and its results file."""
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
    (pytester.path / "suites" / "demo").mkdir(parents=True)
    (pytester.path / "suites" / "demo" / "test_demo.py").write_text(CHECK)
    result = pytester.runpytest("--baseline", "record", "--baseline-dir", "b")
    assert result.ret == 0, result.stdout.str()
    [pytester.base] = (pytester.path / "b").glob("*/*/*.json")
    [pytester.run_file] = (pytester.path / "results").glob("*.json.gz")
    return pytester


def _fill(arg: str, project) -> str:
    base = project.base.relative_to(project.path)
    return arg.format(base=base, base_md=base.with_suffix(".md"), base_html="r.html",
                      run=project.run_file.relative_to(project.path))


def _run(case: Case, project, monkeypatch, capsys) -> tuple[int, str]:
    argv = [_fill(a, project) for a in case.argv]
    for key, value in case.env:
        monkeypatch.setenv(key, value)
    if case.run == "pytest":
        if any(key == faults.ENV_VAR for key, _ in case.env):  # read at import: reread
            monkeypatch.setattr(faults, "_active_names", [dict(case.env)[faults.ENV_VAR]])
            monkeypatch.setattr(faults, "_active", None)
        result = project.runpytest("--baseline-dir", "b", *argv)
        return int(result.ret), result.stdout.str() + result.stderr.str()
    if case.run == "process":  # `... | head -1`: the reader leaves after one line
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen(f"{sys.executable} -m harness {' '.join(argv)} | head -c 1; "
                                "exit ${PIPESTATUS[0]}", shell=True, executable="/bin/bash",
                                cwd=project.path, env=env, stderr=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=120)
        return proc.returncode, out + err
    try:
        code = cli.main(argv)
    except SystemExit as exc:  # what the interpreter does with it
        code = exc.code if isinstance(exc.code, int) else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    captured = capsys.readouterr()
    return int(code or 0), captured.out + captured.err


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(case, project, monkeypatch, capsys):
    if case.setup:
        SETUPS[case.setup](project.path, project.base)
    before = snapshot(project.path)
    code, text = _run(case, project, monkeypatch, capsys)
    after = snapshot(project.path)
    assert code == case.rc, text
    for word in case.words:
        assert word in text, f"{word!r} missing from:\n{text}"
    for word in case.absent:
        assert word not in text, f"{word!r} in:\n{text}"
    # the store (results/harness.db*) is an output every run adds to, like results/
    changed = sorted(k for k in before if after.get(k) != before[k]
                     and not k.startswith("results/harness.db"))
    assert not changed, f"inputs changed or removed: {changed}"
    created = sorted(set(after) - set(before))
    if code in (2, 4):  # refused before the run: nothing at all is written
        assert not created, created
    else:  # a run writes its results and nothing else
        assert all(path.startswith("results") for path in created), created


def test_every_case_id_is_unique_and_every_setup_exists():
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids))
    assert {case.setup for case in CASES if case.setup} <= set(SETUPS)


def test_recording_into_a_symlinked_baseline_writes_through_the_link(project, tmp_path):
    """A shared store linked into place: the target is replaced, the link stays."""
    target = tmp_path / "shared.json"
    os.replace(project.base, target)
    project.base.symlink_to(target)
    inode = target.stat().st_ino
    result = project.runpytest("--baseline", "record", "--baseline-dir", "b")
    assert result.ret == 0, result.stdout.str()
    assert project.base.is_symlink() and os.readlink(project.base) == str(target)
    assert target.stat().st_ino != inode  # replaced (atomically) through the link
    assert json.loads(target.read_text())["records"]


def test_a_full_disk_while_recording_names_the_file_and_the_fix(project, monkeypatch):
    """Case 11: the error says which baseline was not written, that it is unchanged, and
    what to do."""
    from harness import baselines

    def full(root, run):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(baselines, "record", full)
    before = project.base.read_bytes()
    result = project.runpytest("--baseline", "record", "--baseline-dir", "b")
    assert result.ret == 1
    result.stdout.fnmatch_lines([f"ERROR baseline not recorded to {project.base}: No space "
                                 "left on device; the stored baseline is unchanged. Free "
                                 "space or make the store writable*"])
    assert project.base.read_bytes() == before


def test_localize_names_an_exact_last_layer_instead_of_an_infinite_ratio():
    """Case 11: ``0 / 0 = infx`` is gone."""
    from harness.training import localize

    def diff(name, err):
        return localize.LayerDiff(name, "backward", (2,), "float32", err, err, 1.0, 0, True)

    report = localize.DivergenceReport("m", "cpu", "float32", 0, True,
                                       localize.TOLERANCES["float32"], [], [], 0.0, 0.0,
                                       params=[diff("a", 0.0), diff("b", 0.0)])
    text = localize.depth_curve(report)
    assert "= both exact (a vs b)" in text and "inf" not in text
    report.params = [diff("a", 1e-3), diff("b", 0.0)]
    assert "= the last layer is exact" in localize.depth_curve(report)
