"""tests/early.py: the background lane of the harness tests' slow child-process work."""

import sys
import time

import early
import pytest


def test_a_job_nothing_started_runs_when_its_result_is_asked_for():
    seen = []
    job = early.Job("test-early-direct", lambda env: seen.append(env.get("HOME")) or 42)
    assert early.Lane().result(job) == 42 and len(seen) == 1


def test_a_started_job_runs_once_on_the_lane_with_the_environment_of_its_start(monkeypatch):
    calls = []

    def work(env):
        calls.append(env["EARLY_PROBE"])
        return env["EARLY_PROBE"]

    job, lane = early.Job("test-early-started", work), early.Lane()  # not the session's
    monkeypatch.setenv("EARLY_PROBE", "at start")
    lane.start([job])
    lane.start([job])  # already queued: not again
    monkeypatch.setenv("EARLY_PROBE", "changed by a test")
    assert lane.result(job) == "at start" and calls == ["at start"]
    lane.stop()


def test_a_failing_job_raises_in_the_test_that_takes_its_result():
    def broken(env):
        raise RuntimeError("the child run could not start")

    job, lane = early.Job("test-early-broken", broken), early.Lane()
    lane.start([job])
    with pytest.raises(RuntimeError, match="could not start"):
        lane.result(job)
    lane.stop()


def test_run_kills_a_child_past_its_timeout():
    start = time.monotonic()
    proc = early.run([sys.executable, "-c", "import time; time.sleep(60)"], env={},
                     timeout=1)
    assert proc.returncode != 0 and "killed after 1 s" in proc.stderr
    assert time.monotonic() - start < 30
