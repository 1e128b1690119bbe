"""docs/nightly.md's workflow commands, run on the CPU on a tiny selection (suites/example).

The two runs of the doc's commands wait on child processes for about 20 s: they are early
jobs (Note [Early jobs] in tests/early.py), whose functions hold the checks, and the tests
take their results."""

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import early

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
    command = command.replace("${{ matrix.group }}", "1").split(" || ", 1)[0]
    for name, value in places.items():
        command = command.replace(f'"${name}"', value).replace(f"${name}", value)
    command = command.replace("report/", places["REPORT"] + "/")
    argv = shlex.split(command)
    argv = ["cpu" if a == "npu" and argv[i - 1] == "--device" else a for i, a in enumerate(argv)]
    argv = [places["STORE"] if a == "baselines" and argv[i - 1] == "--baseline-dir" else a
            for i, a in enumerate(argv)]
    if argv[-1] == "suites":
        argv[-1] = "suites/example"
    argv = [places["DURATIONS"] if a == ".test_durations" else a for a in argv]
    assert argv[:2] == ["python", "-m"], command
    return [sys.executable, *argv[1:]]


def _run(env: dict, argv: list[str], **extra: str) -> subprocess.CompletedProcess:
    """``argv`` in the checkout with the job's environment ``env``; the CI's own run ids
    and store left out (``extra`` sets them)."""
    env = {k: v for k, v in env.items() if k not in (
        "GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT", "CI_PIPELINE_ID", "BUILD_TAG", "HARNESS_STORE")}
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), **extra)
    return early.run(argv, cwd=ROOT, env=env, timeout=600)


def _block(heading: str, language: str = "bash") -> list[str]:
    """The lines of the first fenced ``language`` block after ``heading``."""
    text = DOC.read_text().split(heading, 1)[1]
    body = text.split(f"```{language}\n", 1)[1].split("```", 1)[0]
    return [line for line in body.splitlines() if line.strip() and not line.startswith("#")]


def test_doc_names_the_options_ci_needs():
    [github, fleet, gitlab] = _commands("python -m pytest -m \"npu and not slow\"")
    assert "--splits 3 --group ${{ matrix.group }}" in fleet
    for line in (github, gitlab):
        for option in ("--junitxml", "--alerts", "--report", "--results-dir", "--baseline-dir",
                       "--device npu"):
            assert option in line
    text = DOC.read_text()
    assert "source \"$CANN_ENV\"" in text and "upload-artifact" in text
    assert "artifacts:" in text and "when: always" in text


def _nightly_commands(env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    """Every nightly command in turn, each checked; returns the last one's run."""
    places = {"HISTORY": str(tmp_path / "history"), "REPORT": str(tmp_path / "report"),
              "STORE": str(tmp_path / "store"), "DURATIONS": str(tmp_path / "durations.json"),
              "GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "1"}
    (tmp_path / "report").mkdir()
    recorded = _run(env, [sys.executable, "-m", "pytest", "-m", "npu", "--device", "cpu",
                          "--baseline", "record", "--baseline-dir", places["STORE"],
                          "--results-dir", places["HISTORY"], "-p", "no:randomly", "-q",
                          "suites/example"])
    assert recorded.returncode == 0, recorded.stdout[-3000:]

    [nightly, fleet, _] = _commands("python -m pytest -m \"npu and not slow\"")
    run = _run(env, _on_cpu(nightly, places))
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
    made = _run(env, _on_cpu(offline, places))
    assert made.returncode == 0, made.stdout + made.stderr
    assert made.stdout.startswith("VERDICT: GO")
    assert "VERDICT: GO" in (report_dir / "summary.md").read_text()

    # the store lines: history of what the nightly stored; the fleet's shard and verdict
    store = {"HARNESS_STORE": f"sqlite:///{tmp_path / 'history' / 'harness.db'}"}
    [history] = {line for line in _commands("python -m harness history")
                 if line == "python -m harness history"}
    shown = _run(env, _on_cpu(history, places), **store)
    assert shown.returncode == 0 and shown.stdout.startswith("history: 2 runs of cpu/"), \
        shown.stdout + shown.stderr
    [durations] = _commands("python -m harness store durations")
    assert _run(env, _on_cpu(durations, places), **store).returncode == 0  # its timings
    assert (tmp_path / "durations.json").is_file()
    ci = {"GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "1",
          "HARNESS_STORE": f"sqlite:///{tmp_path / 'fleet.db'}"}
    shard = _run(env, _on_cpu(fleet, places) + ["--results-dir", str(tmp_path / "fleet")], **ci)
    assert shard.returncode == 0, shard.stdout[-3000:]
    [verdict] = _commands('python -m harness verdict "github-')
    return _run(env, _on_cpu(verdict, places), **ci)  # the fleet's verdict of one shard of 3


def _cpu_block(env: dict, tmp_path: Path) -> tuple[list[str], list[str]]:
    """Each line of the block in turn, each checked to exit 0: ``(lines, their outputs)``."""
    lines = _block("## Trying it on a CPU")
    assert any("verdict night-1" in line for line in lines)
    outputs = []
    for line in lines:
        command = line.replace("/tmp/", f"{tmp_path}/").replace(
            "python -m", f"{shlex.quote(sys.executable)} -m")
        done = _run(env, ["bash", "-c", command], HARNESS_STORE="")
        assert done.returncode == 0, (line, done.stdout[-3000:], done.stderr[-2000:])
        outputs.append(done.stdout)
    return lines, outputs


NIGHTLY = early.in_temp_dir("nightly.md's workflow commands", _nightly_commands)
CPU_BLOCK = early.in_temp_dir("nightly.md's CPU block", _cpu_block)
EARLY = (NIGHTLY, CPU_BLOCK)


def test_nightly_commands_run_on_cpu():
    judged = early.result(NIGHTLY)
    assert judged.returncode == 1 and judged.stdout.startswith("VERDICT: NO-GO"), judged.stdout
    assert "shard 2/3 is missing" in judged.stdout and "shard 3/3 is missing" in judged.stdout


def test_every_line_of_the_cpu_block_runs():
    lines, outputs = early.result(CPU_BLOCK)
    missing = outputs[next(i for i, line in enumerate(lines) if "|| echo" in line)]
    assert missing.startswith("VERDICT: NO-GO") and "shard 2/2 is missing" in missing
    assert outputs[-1].startswith("VERDICT: GO") and "2 shard(s) stored (1/2, 2/2)" in outputs[-1]
