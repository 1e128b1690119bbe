"""SIGTERM ends a run like Ctrl-C, and no child outlives its parent (Note [SIGTERM is an
interrupt] in harness/stopping.py). Real processes: a signal cannot be faked in process."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import early

from harness import stopping
from harness.results import read_document

ROOT = Path(__file__).resolve().parent.parent

CHECKS = """
import os, time
from pathlib import Path

def test_a_first(results):
    results.record("demo/first/float32", metrics={"err": 1e-3})

def test_b_slow(results):
    if os.environ.get("DEMO_SLOW"):
        Path("started").write_text("1")
        time.sleep(120)
    results.record("demo/slow/float32", metrics={"err": 1e-3})
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["harness.plugin"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider "
                                         "-p no:randomly\n")
    (tmp_path / "suites" / "demo").mkdir(parents=True)
    (tmp_path / "suites" / "demo" / "test_demo.py").write_text(CHECKS)
    return tmp_path


def _pytest(path: Path, env: dict, *args: str, slow: bool = False) -> subprocess.Popen:
    env = dict(env, PYTHONPATH=str(ROOT))
    env.pop("DEMO_SLOW", None)
    if slow:
        env["DEMO_SLOW"] = "1"
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", *args], cwd=path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _sigterm_during_record(env: dict) -> dict:
    """Record a baseline, start a second record run, SIGTERM it inside its slow check;
    what it left (Note [Early jobs] in tests/early.py: this waits on child processes)."""
    path = _project(Path(tempfile.mkdtemp(prefix="harness-sigterm-")))
    try:
        first = early.run([sys.executable, "-m", "pytest", "-q", "--baseline", "record",
                           "--baseline-dir", "b"], cwd=path, timeout=600,
                          env=dict(env, PYTHONPATH=str(ROOT)))
        assert first.returncode == 0, first.stdout + first.stderr
        [base] = (path / "b").glob("*/*/*.json")
        digest = hashlib.sha256(base.read_bytes()).hexdigest()
        for old in (path / "results").glob("*.json.gz"):
            old.unlink()
        run = _pytest(path, env, "--baseline", "record", "--baseline-dir", "b", slow=True)
        try:
            deadline = time.monotonic() + 600
            while not (path / "started").exists():
                if run.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the slow check never started: {run.communicate()}")
                time.sleep(0.1)
            run.send_signal(signal.SIGTERM)
            out, _ = run.communicate(timeout=300)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
        saved = [read_document(p) for p in (path / "results").glob("*.json.gz")]
        return {"rc": run.returncode, "out": out, "saved": saved, "digest_before": digest,
                "digest_after": hashlib.sha256(base.read_bytes()).hexdigest()}
    finally:
        shutil.rmtree(path, ignore_errors=True)


SIGTERM_RUN = early.Job("stopping.sigterm_during_record", _sigterm_during_record)
EARLY = (SIGTERM_RUN,)


def test_sigterm_during_record_writes_partial_results_and_leaves_the_baseline():
    got = early.result(SIGTERM_RUN)
    assert got["rc"] == 2, got["out"]  # interrupted, as after Ctrl-C
    assert stopping.MESSAGE in got["out"]
    assert "baseline NOT recorded: the session did not complete" in got["out"]
    [saved] = got["saved"]
    assert saved["complete"] is False
    assert "demo/first/float32" in saved["records"]
    assert got["digest_after"] == got["digest_before"]


def test_a_child_started_with_child_preexec_dies_with_its_parent(tmp_path):
    """The parent is SIGKILLed (no handler runs); the kernel ends the child."""
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        from harness import stopping
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                 preexec_fn=stopping.child_preexec())
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(120)
    """)], env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pid_file.read_text())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 30
    while _alive(child):
        assert time.monotonic() < deadline, f"child {child} outlived its parent"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    """Running and not a zombie (a reaped-by-init child may linger as one briefly)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_install_and_uninstall_restore_the_previous_handler():
    outer = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # this session's own, if any
    try:
        assert stopping.install()
        assert not stopping.install()  # a nested run leaves the installed one alone
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        stopping.uninstall()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, outer)
