"""docs/nightly.md's workflow commands, run on the CPU on a tiny selection (suites/example)."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "nightly.md"


def _commands(prefix: str) -> list[str]:
    """The doc's shell lines that start with ``prefix`` (YAML list items and run: blocks)."""
    found = []
    for line in DOC.read_text().splitlines():
        text = line.strip().removeprefix("- ").strip()
        if text.startswith(prefix):
            found.append(text)
    return found


def _on_cpu(command: str, places: dict[str, str]) -> list[str]:
    """The CPU equivalent: ``--device cpu``, ``suites/example``, paths under tmp."""
    for name, value in places.items():
        command = command.replace(f'"${name}"', value).replace(f"${name}", value)
    command = command.replace("report/", places["REPORT"] + "/")
    argv = shlex.split(command)
    argv = ["cpu" if a == "npu" and argv[i - 1] == "--device" else a for i, a in enumerate(argv)]
    argv = [places["STORE"] if a == "baselines" and argv[i - 1] == "--baseline-dir" else a
            for i, a in enumerate(argv)]
    if argv[-1] == "suites":
        argv[-1] = "suites/example"
    assert argv[:2] == ["python", "-m"], command
    return [sys.executable, *argv[1:]]


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_doc_names_the_options_ci_needs():
    [github, gitlab] = _commands("python -m pytest -m \"npu and not slow\"")
    for line in (github, gitlab):
        for option in ("--junitxml", "--alerts", "--report", "--results-dir", "--baseline-dir",
                       "--device npu"):
            assert option in line
    text = DOC.read_text()
    assert "source \"$CANN_ENV\"" in text and "upload-artifact" in text
    assert "artifacts:" in text and "when: always" in text


@pytest.mark.timeout(900)
def test_nightly_commands_run_on_cpu(tmp_path):
    places = {"HISTORY": str(tmp_path / "history"), "REPORT": str(tmp_path / "report"),
              "STORE": str(tmp_path / "store")}
    (tmp_path / "report").mkdir()
    recorded = _run([sys.executable, "-m", "pytest", "-m", "npu", "--device", "cpu",
                     "--baseline", "record", "--baseline-dir", places["STORE"],
                     "--results-dir", places["HISTORY"], "-p", "no:randomly", "-q",
                     "suites/example"])
    assert recorded.returncode == 0, recorded.stdout[-3000:]

    [nightly, _] = _commands("python -m pytest -m \"npu and not slow\"")
    run = _run(_on_cpu(nightly, places))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    report_dir = tmp_path / "report"
    for name in ("junit.xml", "alerts.json", "alerts.md", "report.html", "report.md"):
        assert (report_dir / name).is_file(), (name, run.stdout[-3000:])
    assert json.loads((report_dir / "alerts.json").read_text())["verdict"] == "go"
    assert "VERDICT: GO" in (report_dir / "report.md").read_text()

    offline = _commands("python -m harness report")[0]
    latest = max((tmp_path / "history").glob("*.json.gz"), key=lambda p: p.stat().st_mtime)
    offline = re.sub(r'"\$latest"|"\$\(ls -t \$HISTORY/\*\.json\.gz \| head -n 1\)"', str(latest),
                     offline)
    made = _run(_on_cpu(offline, places))
    assert made.returncode == 0, made.stdout + made.stderr
    assert made.stdout.startswith("VERDICT: GO")
    assert "VERDICT: GO" in (report_dir / "summary.md").read_text()
