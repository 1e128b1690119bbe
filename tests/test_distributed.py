"""The distributed launcher (harness.distributed) and the family's verdicts.

Launches are expensive on a small host (a process and ``import torch`` per rank), so one
module-scoped launch runs several sub-checks that each misbehave differently, and the
tests read its outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harness.device import Device
from harness.distributed import ROOT, DistCase, Planner, SubCheck, free_port, launch
from harness.distributed.judge import judge_collective, judge_ddp, judge_sampler
from harness.distributed.launcher import restores_priority

pytestmark = pytest.mark.distributed

HANG_TIMEOUT = 6.0


# ----------------------------------------------------------- checks the ranks run

def returns_rank_info(ctx, factor=1):
    import torch.distributed as dist

    return {"rank": ctx.rank, "world": dist.get_world_size(), "backend": ctx.backend,
            "scaled": ctx.rank * factor, "pid": os.getpid()}


def raises_on_rank_1(ctx):
    if ctx.rank == 1:
        raise ValueError(f"deliberate failure on rank {ctx.rank}")
    return "fine"


def hangs_on_rank_1(ctx):
    if ctx.rank == 1:
        time.sleep(3600)
    return "done"


def dies_on_rank_1(ctx):
    if ctx.rank == 1:
        os._exit(3)  # a segfault-like death: no exception, no results
    time.sleep(3600)  # rank 0 would wait for ever (as in a collective with the dead rank)
    return "unreachable"


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def troubled_launch():
    checks = [SubCheck.of(returns_rank_info, name="info", factor=10),
              SubCheck.of(raises_on_rank_1), SubCheck.of(hangs_on_rank_1)]
    start = time.monotonic()
    result = launch(checks, 2, Device("cpu"), timeout=HANG_TIMEOUT)
    return result, time.monotonic() - start


# -------------------------------------------------------------------------- tests

def test_every_rank_returns_its_value(troubled_launch):
    result, _ = troubled_launch
    outcome = result.outcome("info")
    assert outcome.ok
    assert {r: (v["rank"], v["world"], v["backend"], v["scaled"])
            for r, v in outcome.values.items()} == {0: (0, 2, "gloo", 0), 1: (1, 2, "gloo", 10)}


def test_rank_exception_comes_back_with_rank_and_traceback(troubled_launch):
    result, _ = troubled_launch
    outcome = result.outcome("raises_on_rank_1")
    assert outcome.values == {0: "fine"}
    assert list(outcome.errors) == [1]
    error = outcome.errors[1]
    assert error.type == "ValueError" and "deliberate failure on rank 1" in error.message
    assert "raises_on_rank_1" in error.traceback and "Traceback" in error.traceback
    assert "rank 1 raised ValueError" in outcome.problem()


def test_hung_rank_is_reported_by_rank_and_killed(troubled_launch):
    result, seconds = troubled_launch
    assert result.timed_out
    assert result.hung == [1] and result.finished == [0]
    outcome = result.outcome("hangs_on_rank_1")
    assert outcome.hung == [1] and outcome.values == {0: "done"}
    problem = outcome.problem()
    assert "ranks [1] hung in 'hangs_on_rank_1'" in problem
    assert "rank 1 stack when killed" in problem and "in hangs_on_rank_1" in problem
    assert seconds < HANG_TIMEOUT + 60  # killed, not waited for the hour
    with pytest.raises(AssertionError, match="hung"):
        outcome.raise_if_failed()


def test_no_rank_process_outlives_the_launch(troubled_launch):
    result, _ = troubled_launch
    pids = [r.pid for r in result.ranks]
    assert len(pids) == 2 and not [pid for pid in pids if _alive(pid)]
    assert result.ranks[1].killed and result.ranks[1].exit_code == -signal.SIGKILL


def test_dead_rank_is_reported_and_its_peers_stopped_at_once():
    start = time.monotonic()
    result = launch([SubCheck.of(dies_on_rank_1)], 2, Device("cpu"), timeout=300)
    assert time.monotonic() - start < 120  # not the 300 s timeout
    outcome = result.outcome("dies_on_rank_1")
    assert outcome.errors[1].type == "RankDied" and "exit code 3" in outcome.errors[1].message
    assert "rank 1 died (exit code 3" in result.why and result.ranks[0].killed
    assert not [r.pid for r in result.ranks if _alive(r.pid)]


def test_free_port_is_bindable_and_differs_per_call():
    ports = {free_port() for _ in range(5)}
    assert len(ports) > 1
    port = ports.pop()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_launch_port_is_released_afterwards(troubled_launch):
    result, _ = troubled_launch
    assert 1024 <= result.port <= 65535
    with socket.socket() as sock:  # nothing (no orphaned TCPStore) still listens on it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", result.port))


@pytest.mark.parametrize("started", ["script", "python -c"])
def test_ranks_die_when_the_launcher_is_killed(tmp_path, started):
    """PR_SET_PDEATHSIG: a launcher killed with SIGKILL leaves no rank behind, whether its
    ranks are fresh interpreters (a user's script) or forks of the fork server
    (``python -c``: Note [Ranks from a fork server])."""
    out = tmp_path / "ranks"
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\n\ndef sleep_forever(ctx):\n    time.sleep(3600)\n")
    program = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from harness.device import Device
        from harness.distributed import SubCheck, launch
        check = SubCheck("sleep", "sleeper:sleep_forever", {{}}, {str(sleeper)!r})
        launch([check], 2, Device("cpu"), timeout=600, out_dir={str(out)!r},
               port_attempts=1)
    """)
    script = tmp_path / "launcher.py"
    script.write_text(program)
    argv = [str(script)] if started == "script" else ["-c", program]
    launcher = subprocess.Popen([sys.executable, *argv], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        pids = []
        while time.monotonic() < deadline and len(pids) < 2:
            time.sleep(0.2)
            pids = [json.loads(p.read_text())["pid"] for p in out.glob("rank?.json")
                    if p.stat().st_size]
        assert len(pids) == 2, "the ranks never started"
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.1)
        assert not [pid for pid in pids if _alive(pid)], "ranks outlived their launcher"
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


def reports_its_process(ctx):
    import torch

    return {"threads": torch.get_num_threads(), "rank_env": os.environ.get("RANK"),
            "harness_rank": os.environ.get("HARNESS_RANK"), "cwd": os.getcwd(),
            "world": os.environ.get("WORLD_SIZE"), "parent": os.getppid()}


def test_forked_ranks_start_as_fresh_ones_would(monkeypatch):
    """Note [Ranks from a fork server]: a forked CPU rank gets the environment, thread count
    and folder a fresh interpreter gets; HARNESS_DIST_SUBPROCESS=1 starts fresh ones."""
    from harness.distributed import launcher

    assert launcher._main_reruns_safely()  # this test process runs as `python -m pytest`
    seen = {}
    for fresh in ("0", "1"):
        monkeypatch.setenv("HARNESS_DIST_SUBPROCESS", fresh)
        result = launch(SubCheck.of(reports_its_process), 2, Device("cpu"), timeout=60)
        values = [r.results["reports_its_process"]["value"] for r in result.ranks]
        parents = {v.pop("parent") for v in values}
        assert (os.getpid() in parents) == (fresh == "1")  # forks are the server's children
        seen[fresh] = values
    assert seen["0"] == seen["1"]
    assert [v["harness_rank"] for v in seen["0"]] == ["0", "1"]
    assert {v["rank_env"] for v in seen["0"]} == {None}  # Note [Fallbacks on every rank]
    assert seen["0"][0]["threads"] == max(1, (os.cpu_count() or 1) // 2)


def test_a_users_script_is_never_run_again_in_a_rank(monkeypatch):
    """multiprocessing would run a script's unguarded top level again in every forked
    child; such a program's ranks start as fresh interpreters."""
    from harness.distributed import launcher

    fake_main = type(sys)("__main__")
    fake_main.__file__ = "/home/user/train.py"
    fake_main.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    assert not launcher._main_reruns_safely()
    assert launcher._fork_context(Device("cpu"), None) is None


def test_planner_runs_all_cases_of_a_world_size_in_one_launch(monkeypatch):
    launched = []

    def fake_launch(checks, world_size, device, **kwargs):
        launched.append((world_size, [c.name for c in checks]))
        from harness.distributed import LaunchResult, RankReport

        reports = [RankReport(r, 0, 0, "finished", None,
                              {c.name: {"ok": True, "value": c.name} for c in checks})
                   for r in range(world_size)]
        return LaunchResult(world_size, "gloo", 1, reports, [c.name for c in checks],
                            False, 1.0, 0.0, "")

    monkeypatch.setattr("harness.distributed.launcher.launch", fake_launch)
    cases = [DistCase(ws, SubCheck(name, "m:f")) for ws in (2, 4) for name in ("a", "b")]
    planner = Planner(Device("cpu"), lambda: cases, timeout=10)
    assert planner.outcome(cases[0]).values == {0: "a", 1: "a"}
    assert planner.outcome(cases[1]).values == {0: "b", 1: "b"}
    assert planner.outcome(cases[3]).values == {r: "b" for r in range(4)}
    assert launched == [(2, ["a", "b"]), (4, ["a", "b"])]


# --------------------------------- Note [Launches ahead of their tests] (harness.distributed.cases)

needs_priority_back = pytest.mark.skipif(
    not restores_priority(),
    reason="this process may not give a lowered priority back (no CAP_SYS_NICE, RLIMIT_NICE "
           "0): its ranks stay at +19 when waited for")

def slow_and_niced(ctx, seconds=0.0, until=None):
    import torch.distributed as dist

    time.sleep(seconds)  # longer than the launch's hang timeout
    while until is not None and not os.path.exists(until):
        time.sleep(0.02)  # until the test has waited for the launch
    dist.barrier()
    return {"niceness": os.getpriority(os.PRIO_PROCESS, 0), "pid": os.getpid()}


def _fake_launch(launched, fail_at=None):
    from harness.distributed import LaunchResult, RankReport

    def fake_launch(checks, world_size, device, **kwargs):
        launched.append((world_size, [c.name for c in checks], kwargs.get("background")))
        if world_size == fail_at:
            raise OSError("no fork server")
        reports = [RankReport(r, 0, 0, "finished", None,
                              {c.name: {"ok": True, "value": c.name} for c in checks})
                   for r in range(world_size)]
        return LaunchResult(world_size, "gloo", 1, reports, [c.name for c in checks],
                            False, 1.0, 0.0, "")

    return fake_launch


def test_planner_launches_ahead_once_and_leaves_alone_cases_to_their_tests(monkeypatch):
    monkeypatch.setattr("harness.distributed.launcher.restores_priority", lambda: True)
    launched = []
    monkeypatch.setattr("harness.distributed.launcher.launch", _fake_launch(launched))
    cases = [DistCase(ws, SubCheck(name, "m:f")) for ws in (4, 2) for name in ("a", "b")]
    timed = DistCase(2, SubCheck("timed", "m:f"), alone=True)
    planner = Planner(Device("cpu"), lambda: [*cases, timed], timeout=10)
    assert planner.start_ahead()
    assert not planner.start_ahead()  # once
    assert planner.outcome(cases[3]).values == {0: "b", 1: "b"}
    assert planner.outcome(cases[0]).values == {r: "a" for r in range(4)}
    assert [(ws, names) for ws, names, _ in launched] == [(2, ["a", "b"]), (4, ["a", "b"])]
    assert all(background is not None for _, _, background in launched)
    assert planner.outcome(timed).values == {0: "timed", 1: "timed"}
    assert launched[-1][:2] == (2, ["timed"]) and launched[-1][2] is None  # when asked
    planner.close()


def test_planner_runs_a_job_ahead_after_the_launches_or_when_its_test_asks(monkeypatch):
    from harness.distributed import DistJob

    monkeypatch.setattr("harness.distributed.launcher.restores_priority", lambda: True)
    launched = []
    monkeypatch.setattr("harness.distributed.launcher.launch", _fake_launch(launched))
    ran = []

    def work(background):
        ran.append((background, [ws for ws, _, _ in launched]))
        return "done"

    def broken(background):
        raise ValueError("the job's own failure")

    case, job, bad = DistCase(2, SubCheck("a", "m:f")), DistJob("j", work), DistJob("b", broken)
    ahead = Planner(Device("cpu"), lambda: [case, job, bad], timeout=10)
    assert ahead.start_ahead()
    assert ahead.job(job) == "done" and ahead.job(job) == "done"
    assert len(ran) == 1 and ran[0][0] is not None and ran[0][1] == [2]  # after the launch
    with pytest.raises(ValueError, match="the job's own failure"):
        ahead.job(bad)
    asked = Planner(Device("cpu"), lambda: [job], timeout=10, shared=Path("/nonexistent"))
    monkeypatch.setattr("harness.distributed.cases.one_at_a_time",
                        lambda shared: contextlib.nullcontext())
    assert asked.job(job) == "done" and ran[-1][0] is None  # run when asked, waited for


def test_planner_launches_nothing_ahead_where_ranks_would_share_more_than_cores(monkeypatch,
                                                                               tmp_path):
    launched = []
    monkeypatch.setattr("harness.distributed.launcher.launch", _fake_launch(launched))
    cases = [DistCase(2, SubCheck("a", "m:f"))]
    assert not Planner(Device("cpu"), lambda: cases, timeout=10, shared=tmp_path).start_ahead()
    monkeypatch.setenv("HARNESS_DIST_SUBPROCESS", "1")  # fresh interpreters
    assert not Planner(Device("cpu"), lambda: cases, timeout=10).start_ahead()
    monkeypatch.delenv("HARNESS_DIST_SUBPROCESS")
    assert launched == []


def test_a_session_that_may_not_give_priority_back_launches_ahead_but_no_job(monkeypatch):
    """An unprivileged session: the launches run ahead; a job, which cannot tell a
    starved node from a hung one, runs when its test asks."""
    from harness.distributed import DistJob

    monkeypatch.setattr("harness.distributed.launcher.restores_priority", lambda: False)
    launched, ran = [], []
    monkeypatch.setattr("harness.distributed.launcher.launch", _fake_launch(launched))
    case, job = DistCase(2, SubCheck("a", "m:f")), DistJob("j", lambda bg: ran.append(bg))
    planner = Planner(Device("cpu"), lambda: [case, job], timeout=10)
    assert planner.start_ahead()
    assert planner.outcome(case).values == {0: "a", 1: "a"}
    assert [(ws, names, bg is not None) for ws, names, bg in launched] == [(2, ["a"], True)]
    planner.job(job)
    assert ran == [None]  # run when asked, waited for
    planner.close()


def test_a_starved_launch_ahead_is_launched_again_when_its_test_asks(monkeypatch):
    """A launch ahead that ended STARVED (its ranks kept +19 while a test waited) is no
    outcome: its cases are launched again, waited for, and the next launch ahead runs."""
    from harness.distributed import LaunchResult, launcher

    monkeypatch.setattr("harness.distributed.launcher.restores_priority", lambda: False)
    launched = []
    normal = _fake_launch(launched)

    def starving(checks, world_size, device, **kwargs):
        result = normal(checks, world_size, device, **kwargs)
        if world_size == 2 and kwargs.get("background") is not None:
            return LaunchResult(2, "gloo", 1, [], result.checks, True, 1.0, 15.0, "",
                                launcher.STARVED)
        return result

    monkeypatch.setattr("harness.distributed.launcher.launch", starving)
    cases = [DistCase(ws, SubCheck(name, "m:f")) for ws in (2, 4) for name in ("a", "b")]
    planner = Planner(Device("cpu"), lambda: cases, timeout=10)
    assert planner.start_ahead()
    assert planner.outcome(cases[1]).values == {0: "b", 1: "b"}
    assert planner.outcome(cases[0]).values == {0: "a", 1: "a"}
    assert planner.outcome(cases[2]).values == {r: "a" for r in range(4)}
    assert [(ws, names, bg is not None) for ws, names, bg in launched] == [
        (2, ["a", "b"], True), (4, ["a", "b"], True), (2, ["a", "b"], False)]
    planner.close()


def test_a_launch_ahead_that_failed_raises_in_the_tests_that_read_it(monkeypatch):
    monkeypatch.setattr("harness.distributed.launcher.restores_priority", lambda: True)
    launched = []
    monkeypatch.setattr("harness.distributed.launcher.launch", _fake_launch(launched, 4))
    cases = [DistCase(ws, SubCheck("a", "m:f")) for ws in (2, 4)]
    planner = Planner(Device("cpu"), lambda: cases, timeout=10)
    assert planner.start_ahead()
    assert planner.outcome(cases[0]).values == {0: "a", 1: "a"}
    with pytest.raises(RuntimeError, match=r"world size 4.*OSError: no fork server"):
        planner.outcome(cases[1])


def test_a_launch_beside_other_work_is_niced_and_its_hang_clock_waits_for_a_waiter():
    """The ranks of a background launch run at +19; a sub-check slower than the hang
    timeout is no hang while nobody waits for it, and is one once somebody does."""
    from harness.distributed.launcher import Background

    check = SubCheck.of(slow_and_niced, seconds=2.5)
    before = os.getpriority(os.PRIO_PROCESS, 0)
    quiet = launch([check], 2, Device("cpu"), timeout=1.0, background=Background())
    assert not quiet.timed_out, quiet.why
    assert {v["niceness"] for v in quiet.outcome("slow_and_niced").values.values()} == \
        {min(before + 19, 19)}
    waited = Background()
    waited.wait()
    hung = launch([check], 2, Device("cpu"), timeout=1.0, background=waited)
    assert hung.timed_out and "no rank made progress for 1 s" in hung.why


def test_a_launch_waited_for_that_keeps_its_niceness_ends_starved(monkeypatch):
    """Where the session may not give priority back, a launch waited for whose ranks make
    no progress for ``starved_after`` ends STARVED (to be launched again), not as a hang;
    and its ranks are left at +19."""
    from harness.distributed import launcher
    from harness.distributed.launcher import Background

    monkeypatch.setattr(launcher, "restores_priority", lambda: False)
    waited = Background(starved_after=0.5)
    waited.wait()
    assert not waited.restored
    starved = launch([SubCheck.of(slow_and_niced, seconds=2.5)], 2, Device("cpu"),
                     timeout=30.0, background=waited)
    assert starved.timed_out and starved.why == launcher.STARVED


@needs_priority_back
def test_a_launch_waited_for_gets_the_launchers_priority_back(tmp_path):
    """Background.wait: the ranks leave +19 when somebody waits, every thread of them."""
    from harness.distributed.launcher import Background

    background, flag = Background(), tmp_path / "waited"

    def wait_once_running():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(background._lowered) < 2:
            time.sleep(0.05)
        time.sleep(0.5)  # the ranks are past their start, their threads made
        background.wait()
        flag.touch()

    waiter = threading.Thread(target=wait_once_running)
    waiter.start()
    result = launch([SubCheck.of(slow_and_niced, until=str(flag))], 2, Device("cpu"),
                    timeout=60, background=background)
    waiter.join()
    assert {v["niceness"] for v in result.outcome("slow_and_niced").values.values()} == \
        {os.getpriority(os.PRIO_PROCESS, 0)}


def test_a_launch_beside_other_work_stops_at_once_and_leaves_no_rank(tmp_path):
    """Planner.close at a session's end: the ranks (one of them hung) are killed."""
    from harness.distributed.launcher import STOPPED, Background

    background = Background()

    def stop_once_running():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = [json.loads(p.read_text() or "{}").get("state")
                      for p in tmp_path.glob("rank?.json")]
            if states.count("running") == 2:
                break
            time.sleep(0.05)
        background.stop.set()

    stopper = threading.Thread(target=stop_once_running)
    stopper.start()
    began = time.monotonic()
    result = launch([SubCheck.of(hangs_on_rank_1)], 2, Device("cpu"), timeout=600,
                    out_dir=tmp_path, port_attempts=1, background=background)
    stopper.join()
    assert result.why == STOPPED and time.monotonic() - began < 60
    assert result.ranks[1].state == "running" and result.ranks[1].killed
    assert not [r.pid for r in result.ranks if _alive(r.pid)]


AHEAD_SUITE = """
import json
import os
import time

import pytest

from harness.distributed import DistCase, SubCheck


def niceness(ctx, seconds):
    niceness = os.getpriority(os.PRIO_PROCESS, 0)  # while the other family's test runs:
    partial = os.path.join(PIDS, f".partial{ctx.rank}")  # it waits for this, and the
    with open(partial, "w") as handle:  # session may stop the rank at any moment: the
        handle.write(str(os.getpid()))  # pid file appears whole or not at all
    os.replace(partial, os.path.join(PIDS, f"rank{ctx.rank}"))
    time.sleep(seconds)
    return {"niceness": niceness, "pid": os.getpid()}


@pytest.mark.parametrize("case", [DistCase(2, SubCheck.of(niceness, seconds=SECONDS))],
                         ids=lambda c: c.id)
def test_ranks(case, dist, results):
    outcome = dist(case)
    print("RANKS", json.dumps(outcome.values))
    results.check("demo/ranks/ws2/niceness", outcome.ok, outcome.problem())
"""

PLAIN_SUITE = """
import os
import time


def test_plain(results):
    deadline = time.monotonic() + 60
    while (len([n for n in os.listdir(PIDS) if n.startswith("rank")]) < 2
           and time.monotonic() < deadline):
        time.sleep(0.05)  # the launch ahead runs meanwhile: its ranks say so
    results.check("demo/plain/x", OK, "deliberate")
"""


def _ahead_project(pytester, seconds: float, ok: bool) -> None:
    """A distributed family (suites/demo, this family's conftest) and a single-device one
    that sorts after it (suites/zz)."""
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
    demo = pytester.path / "suites" / "demo"
    demo.mkdir(parents=True)
    (demo / "conftest.py").write_text((ROOT / "suites/distributed/conftest.py").read_text())
    pids = repr(str(pytester.mkdir("pids")))
    (demo / "test_ranks.py").write_text(
        AHEAD_SUITE.replace("SECONDS", repr(seconds)).replace("PIDS", pids))
    (pytester.path / "suites" / "zz").mkdir()
    (pytester.path / "suites" / "zz" / "test_plain.py").write_text(
        PLAIN_SUITE.replace("OK", repr(ok)).replace("PIDS", pids))


def test_a_session_launches_its_family_ahead_and_runs_its_tests_last(pytester):
    _ahead_project(pytester, seconds=0.0, ok=True)
    result = pytester.runpytest_subprocess("-v", "-s", "--baseline", "off")
    result.assert_outcomes(passed=2)
    order = [line.split("::")[0] for line in result.outlines if line.startswith("suites/")]
    assert order == ["suites/zz/test_plain.py", "suites/demo/test_ranks.py"], order
    [ranks] = [json.loads(line.split("RANKS ", 1)[1]) for line in result.outlines
               if "RANKS " in line]
    assert {v["niceness"] for v in ranks.values()} == {19}  # ahead: Background's niceness


def test_a_session_that_ends_first_stops_the_launch_ahead(pytester):
    """``-x``: the single-device test fails, the session ends before the family's test;
    the launch started ahead (a sub-check of ten minutes) is stopped and its ranks are
    gone when the session returns (in this process, whose fork server they would
    otherwise outlive the session with)."""
    _ahead_project(pytester, seconds=600.0, ok=False)
    began = time.monotonic()
    result = pytester.runpytest_inprocess("-x", "--baseline", "off")
    result.assert_outcomes(failed=1)
    assert time.monotonic() - began < 120
    pids = [int(p.read_text()) for p in (pytester.path / "pids").glob("rank*")]
    assert len(pids) == 2, "the launch ahead did not start while the first test ran"
    assert not [pid for pid in pids if _alive(pid)]


def test_subcheck_refuses_a_nested_function():
    def local(ctx):
        return None

    with pytest.raises(ValueError, match="top-level"):
        SubCheck.of(local)


# ------------------------------------------------- the verdicts can fail (no launch)

def _ddp_values(hashes_1, grad=1e-7):
    return {r: {"grad_err": [grad] * 5, "param_err": [1e-7] * 5, "final_param_err": 1e-7,
                "param_hash": list(h), "final_hash": h[-1], "steps_run": 5,
                "unused_grad_max": 0.0}
            for r, h in enumerate([["a", "b", "c", "d", "e"], hashes_1])}


def test_ddp_verdict_fails_when_ranks_disagree_or_grads_drift():
    same = judge_ddp(_ddp_values(["a", "b", "c", "d", "e"]), dtype="float32",
                     variant="plain", steps=5, world_size=2)
    assert same.status == "pass"
    split = judge_ddp(_ddp_values(["a", "b", "X", "d", "e"]), dtype="float32",
                      variant="plain", steps=5, world_size=2)
    assert split.status == "fail" and "after steps [2]" in split.message
    drift = judge_ddp(_ddp_values(["a", "b", "c", "d", "e"], grad=0.5), dtype="float32",
                      variant="plain", steps=5, world_size=2)
    assert drift.status == "fail" and "gradients differ" in drift.message


def test_sampler_verdict_fails_when_set_epoch_is_ignored():
    order = list(range(23))
    shards = {r: order[r::2] + ([order[0]] if r == 1 else []) for r in range(2)}
    values = {r: {"length": 23, "num_replicas": 2, "rank": r,
                  "epochs": {str(e): shards[r] for e in range(3)}} for r in range(2)}
    verdict = judge_sampler(values, drop_last=False)
    assert verdict.status == "fail" and "set_epoch had no effect" in verdict.message


def test_collective_verdict_fails_beyond_the_bound_and_keeps_unsupported():
    wrong = {r: {"8": {"max_abs_err": 2.0, "bound": 1e-6, "excess": 2.0, "mismatched": 8,
                       "worst_index": 3, "worst_got": 4.0, "worst_expected": 2.0}}
             for r in range(2)}
    verdict = judge_collective(wrong, "8", op="all_reduce_sum", dtype="float32")
    assert verdict.status == "fail" and "16 elements" in verdict.message
    refused = {r: {"8": {"unsupported": "RuntimeError: no bf16"}} for r in range(2)}
    assert judge_collective(refused, "8", op="all_reduce_sum",
                            dtype="bfloat16").status == "unsupported"


def test_docs_show_the_torchrun_entry_point():
    text = (Path(ROOT) / "docs" / "distributed.md").read_text()
    assert "--node-rank" in text and "-m harness.distributed" in text


def test_documented_torchrun_checks_are_built_in_rank_programs():
    """The commands README.md and docs/distributed.md show need no checkout on the path."""
    named = []
    for doc in (Path(ROOT) / "README.md", Path(ROOT) / "docs" / "distributed.md"):
        text = doc.read_text().replace("\\\n", " ")
        for args in re.findall(r"-m harness\.distributed\s+([^-`\s][^`\n]*?)\s+--out", text):
            named += [word for word in args.split()
                      if re.fullmatch(r"[\w.:]+", word) and word != "CHECK"]
    assert {"collective", "ddp_train"} <= set(named)
    for name in named:
        assert SubCheck.of(name).target == f"harness.distributed.checks:{name}"


def test_a_bare_check_name_is_a_built_in_rank_program_or_refused():
    from harness.distributed import checks

    assert SubCheck.of("collective", op="broadcast") == SubCheck(
        "collective", "harness.distributed.checks:collective", {"op": "broadcast"},
        checks.__file__)
    assert SubCheck.of("harness.distributed.checks:collective").name == "collective"
    with pytest.raises(ValueError, match="not a built-in rank program.*ddp_train"):
        SubCheck.of("no_such_check")


def test_every_public_rank_program_is_built_in():
    import inspect

    from harness.distributed import checks, parallel

    # A rank program is a public function whose first parameter is the rank's ``ctx``;
    # public helpers that take no ctx (``parallel.fsdp_api``, which a stack probe calls
    # too) are not programs.
    programs = {name for module in (checks, parallel) for name, fn in vars(module).items()
                if inspect.isfunction(fn) and fn.__module__ == module.__name__
                and not name.startswith("_")
                and next(iter(inspect.signature(fn).parameters), None) == "ctx"}
    assert programs == set(checks.BUILT_IN)
    assert "fsdp_api" not in checks.BUILT_IN


def test_a_port_taken_before_the_ranks_bind_it_is_retried(monkeypatch):
    """Another process may take the chosen port before rank 0 binds it: one retry."""
    import harness.distributed.launcher as hd

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    ports = [busy]
    real_free_port = hd.free_port
    monkeypatch.setattr(hd, "free_port", lambda host="127.0.0.1": ports.pop() if ports
                        else real_free_port(host))
    try:
        result = launch([SubCheck.of(returns_rank_info, name="info")], 2, Device("cpu"),
                        timeout=60)
    finally:
        taken.close()
    assert result.outcome("info").ok, result.summary()
    assert Path(result.out_dir).name == "launch1" and result.port != busy  # second attempt


def _skew_values(completed: bool, left_late: float, *, skew: float = 4.0,
                 backend: str = "gloo") -> dict:
    """Two ranks at an all_reduce; rank 1 scheduled ``skew`` s late, its call ending at
    ``left_late``; rank 0 entered at 0 and gave up (or finished) at 2 s."""
    base = {"skew": skew, "timeout": 2.0, "late_rank": 1, "backend": backend, "bound": 1e-3}
    error = None if completed else "RuntimeError: Timed out waiting 2000ms"
    err = 0.0 if completed else None
    return {0: {**base, "entered": 0.0, "left": 2.0, "completed": completed, "error": error,
                "max_abs_err": err},
            1: {**base, "entered": skew, "left": left_late, "completed": completed,
                "error": error, "max_abs_err": err}}


def _returned(values: dict):
    from harness.distributed.outcome import CheckOutcome

    return CheckOutcome("skew/x", len(values), values, {}, [], [])


def test_skew_verdict_names_the_late_rank_and_the_variable():
    from harness.distributed.judge import judge_skew

    within = judge_skew(_returned(_skew_values(True, 2.0, skew=0.5)), expect_complete=True)
    assert within.status == "pass" and within.metrics == {"completed_ranks": 2}
    assert within.info["late_rank"] == 1 and within.info["arrival_skew_s"] == 0.5
    # a straggler turns the within case into a timeout: fail, naming rank 1 and the knob
    late = judge_skew(_returned(_skew_values(False, 3.5, skew=0.5, backend="hccl")),
                      expect_complete=True)
    assert late.status == "fail"
    assert "rank 1 was late" in late.message
    assert "process group's timeout" in late.message and "larger than HCCL_EXEC_TIMEOUT" \
        in late.message  # Ascend: the group's timeout above HCCL_EXEC_TIMEOUT
    short_exec = {r: dict(v, exec_timeout=1.0) for r, v in
                  _skew_values(False, 3.5, skew=0.5, backend="hccl").items()}
    assert "raise HCCL_EXEC_TIMEOUT" in judge_skew(_returned(short_exec),
                                                   expect_complete=True).message
    beyond = judge_skew(_returned(_skew_values(False, 6.0)), expect_complete=False)
    assert beyond.status == "pass" and "rank 1 was late" in beyond.info["diagnosis"]
    assert "process group's timeout" in beyond.info["diagnosis"]
    ignored = judge_skew(_returned(_skew_values(True, 4.0)), expect_complete=False)
    assert ignored.status == "fail" and "ignores its timeout" in ignored.message
    slow = judge_skew(_returned(_skew_values(False, 20.0)), expect_complete=False)
    assert slow.status == "fail" and "bounded time" in slow.message


def _watchdog_outcome(entered: dict, logs: dict):
    from harness.distributed.outcome import CheckOutcome, RankError

    note = {"skew": 4.0, "timeout": 2.0, "late_rank": 1, "backend": "hccl",
            "exec_timeout": 1836.0}
    notes = {r: dict(note, **({"entered": t} if t is not None else {}))
             for r, t in entered.items()}
    errors = {r: RankError(r, "RankDied", "the rank process ended", "") for r in logs}
    hung = [r for r in entered if r not in logs]
    return CheckOutcome("skew/beyond", len(entered), {}, errors, hung, [], "", {}, notes, logs)


def test_skew_beyond_the_timeout_may_end_by_the_watchdog():
    """Note [Rank skew]: HCCL's default ending (the watchdog takes the processes down) is
    a correct one; the verdict names the rank that never entered and the knob."""
    from harness.distributed.judge import judge_skew

    words = ("[E] Some HCCL operations have failed or timed out.\n[E] To avoid data "
             "inconsistency, we are taking the entire process down.")
    ended = judge_skew(_watchdog_outcome({0: 10.0, 1: None}, {0: words}),
                       expect_complete=False)
    assert ended.status == "pass" and ended.info["ended_by_watchdog"] == [0]
    assert "rank 1 was late (never entered it" in ended.message
    assert "keeping it larger than HCCL_EXEC_TIMEOUT (1836 s)" in ended.message
    # the same ending where the collective had to complete is a failure naming the knob
    straggler = judge_skew(_watchdog_outcome({0: 10.0, 1: None}, {0: words}),
                           expect_complete=True)
    assert straggler.status == "fail" and "watchdog ended ranks [0]" in straggler.message
    # a crash without the watchdog's words is not a verdict: the caller records an error
    assert judge_skew(_watchdog_outcome({0: 10.0, 1: None}, {0: "Segmentation fault"}),
                      expect_complete=False) is None


def test_rank_init_verdict_fails_without_the_construction_broadcast():
    values = _ddp_values(["a", "b", "c", "d", "e"])
    for rank, value in values.items():
        value.update(init_hash=f"seed{rank}", constructed_err=0.0)
    assert judge_ddp(values, dtype="float32", variant="rank_init", steps=5,
                     world_size=2).status == "pass"
    values[1]["constructed_err"] = 0.3
    missed = judge_ddp(values, dtype="float32", variant="rank_init", steps=5, world_size=2)
    assert missed.status == "fail" and "did not broadcast rank 0's" in missed.message
    values[1].update(constructed_err=0.0, init_hash="seed0")
    blind = judge_ddp(values, dtype="float32", variant="rank_init", steps=5, world_size=2)
    assert blind.status == "fail" and "could not see a missing broadcast" in blind.message


def test_pipeline_verdict_names_the_stage_and_what_differs():
    from harness.distributed.judge import judge_pipeline

    def stage(rank, recv_grad=1e-7):
        last = rank == 1
        return {"stage": rank, "transport": "send_recv", "out_err": [1e-7, 1e-7],
                "recv_grad_err": [] if last else [recv_grad, recv_grad],
                "grad_err": [1e-7, 1e-7], "param_err": [1e-7, 1e-7],
                "loss_err": [1e-8, 1e-8] if last else []}

    assert judge_pipeline({0: stage(0), 1: stage(1)}).status == "pass"
    dropped = judge_pipeline({0: stage(0, recv_grad=1.0), 1: stage(1)})
    assert dropped.status == "fail" and "gradients a stage received" in dropped.message
    assert "stage 0, step 0" in dropped.message


def test_all_to_all_references_route_chunks_by_rank():
    import numpy as np

    from harness.distributed.checks import _reference, _splits

    inputs = [np.array([0, 1, 2, 3]), np.array([10, 11, 12, 13])]
    even, _ = _reference("all_to_all_single", inputs, 1, 2, 4)
    assert even.tolist() == [2, 3, 12, 13]  # chunk 1 of each rank, in rank order
    splits = _splits(2, 2)  # rank r sends splits[r][d] elements to rank d
    assert splits == [[1, 0], [2, 1]]
    uneven = [np.array([0]), np.array([10, 11, 12])]
    assert _reference("all_to_all_single_uneven", uneven, 0, 2, 2)[0].tolist() == [0, 10, 11]
    assert _reference("all_to_all_single_uneven", uneven, 1, 2, 2)[0].tolist() == [12]
    stack = [np.array([1.0, 2.0]), np.array([3.0, 5.0])]
    avg, bound = _reference("reduce_scatter_tensor_avg", stack, 1, 2, 2)
    assert avg.tolist() == [3.5] and bound.tolist() == [3.5]


@pytest.mark.parametrize("ws", [2, 4])
def test_reduction_references_are_the_stacked_sums_bit_for_bit(ws):
    """The references add the ranks' inputs in rank order without stacking them: the same
    float64 values as ``np.stack(x).sum(0)`` (the metrics on every baseline depend on it)."""
    import numpy as np

    from harness.distributed.checks import _inputs, _np, _reference

    for dtype in ("float32", "bfloat16", "int64"):
        inputs = [_np(_inputs(3, r, 1000, dtype)) for r in range(ws)]
        stack = np.stack(inputs)
        total, absum = _reference("all_reduce_sum", inputs, 0, ws, 1000)
        assert np.array_equal(total, stack.sum(0)) and np.array_equal(absum, np.abs(stack).sum(0))
        assert np.array_equal(_reference("all_reduce_max", inputs, 0, ws, 1000)[0], stack.max(0))
        chunk = 1000 // ws
        part = stack[:, chunk:2 * chunk]
        total, absum = _reference("reduce_scatter", inputs, 1, ws, 1000)
        assert np.array_equal(total, part.sum(0)) and np.array_equal(absum, np.abs(part).sum(0))
