"""``pytest -n N``: one device per xdist worker, and the distributed family's launches
shared by the workers, one at a time (Note [One device per xdist worker] in
harness/device.py, Note [Distributed launches under xdist] in harness/distributed/cases.py).

The SimNPU run (two simulated devices, ``-n 2``) is an early job (tests/early.py); the
overlap run is a small suite of its own on the CPU whose ranks nap, so two launches at
once would show.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import early
import pytest

from harness import simnpu
from harness.device import Device, worker_problem
from harness.distributed import (
    DistCase,
    LaunchResult,
    Planner,
    RankReport,
    SubCheck,
    stored_launches,
)
from harness.plugin import _xdist_workers
from harness.results import read_document

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.distributed


# ------------------------------------------------------------------ worker -> device

def test_more_workers_than_devices_is_refused_naming_the_fix():
    npu = Device("npu", 0, 2)
    problem = worker_problem(npu, 3)
    assert "-n 3 starts 3 pytest-xdist workers" in problem
    assert "2 npu device(s) are visible" in problem and "Pass -n 2 (or fewer)" in problem
    assert worker_problem(npu, 2) is None and worker_problem(npu, None) is None
    assert worker_problem(Device("cpu"), 8) is None  # the documented rule: workers share it


def test_worker_count_from_the_controllers_specs_and_the_workers_input():
    def config(dist="load", tx=(), workerinput=None):
        made = SimpleNamespace(option=SimpleNamespace(dist=dist, tx=list(tx)))
        if workerinput is not None:
            made.workerinput = workerinput
        return made

    assert _xdist_workers(config(tx=["popen"] * 2)) == 2
    assert _xdist_workers(config(tx=["3*popen", "popen"])) == 4
    assert _xdist_workers(config(dist="no", tx=["popen"])) is None
    assert _xdist_workers(config(workerinput={"workercount": 2, "workerid": "gw1"})) == 2


# ------------------------------------------------------------- the shared launches

def _fake_launch(launched: list):
    def launch(checks, world_size, device, **kwargs):
        launched.append((world_size, [c.name for c in checks]))
        reports = [RankReport(r, 0, 0, "finished", None,
                              {c.name: {"ok": True, "value": c.name} for c in checks},
                              device=f"npu:{r}")
                   for r in range(world_size)]
        return LaunchResult(world_size, "hccl", 1, reports, [c.name for c in checks],
                            False, 1.0, 0.5, "", began=float(len(launched)))
    return launch


def test_workers_share_one_launch_per_world_size(monkeypatch, tmp_path):
    launched: list = []
    monkeypatch.setattr("harness.distributed.launcher.launch", _fake_launch(launched))
    cases = [DistCase(2, SubCheck(name, "m:f")) for name in ("a", "b")]
    npu = Device("npu", 0, 2)
    first = Planner(npu, lambda: cases, timeout=10, shared=tmp_path)
    second = Planner(Device("npu", 1, 2), lambda: cases, timeout=10, shared=tmp_path)
    assert first.outcome(cases[0]).devices == {0: "npu:0", 1: "npu:1"}
    assert second.outcome(cases[1]).values == {0: "b", 1: "b"}  # read, not launched
    assert launched == [(2, ["a", "b"])]
    late = DistCase(2, SubCheck("c", "m:f"))  # not among the wanted cases
    assert second.outcome(late).values == {0: "c", 1: "c"}
    assert first.outcome(late).ok
    assert launched == [(2, ["a", "b"]), (2, ["c"])]  # only the late one, once
    assert [d["checks"] for d in stored_launches(tmp_path)] == [["a", "b"], ["c"]]


def test_two_cases_with_one_name_and_different_checks_are_refused(monkeypatch):
    monkeypatch.setattr("harness.distributed.launcher.launch", _fake_launch([]))
    cases = [DistCase(2, SubCheck("a", "m:f", {"n": 1})), DistCase(2, SubCheck("a", "m:f"))]
    with pytest.raises(ValueError, match="named 'a' but differ"):
        Planner(Device("cpu"), lambda: cases, timeout=10).outcome(cases[0])


def test_a_launch_survives_its_json_round_trip():
    launch_ = _fake_launch([])([SubCheck("a", "m:f")], 2, None)
    again = LaunchResult.from_json(json.loads(json.dumps(launch_.to_json())))
    assert again == launch_


# ------------------------------------------------------ the family: one launch per size

OWN_LAUNCH: dict[str, str] = {}
"""Distributed tests that start processes of their own, not through the planner, and why
(none: the torchrun check is a DistJob the planner runs)."""

_COLLECT = """
import json, sys
import pytest
from harness.distributed import DistCase, DistJob

class Grab:
    def pytest_collection_modifyitems(self, items):
        out = []
        for item in items:
            spec = getattr(item, "callspec", None)
            params = spec.params.values() if spec else ()
            cases = [v for v in params if isinstance(v, DistCase)]
            out.append({"node": item.nodeid, "fixtures": list(item.fixturenames),
                        "cases": [[c.world_size, c.check.name, c.check.to_json()] for c in cases],
                        "jobs": [v.name for v in params if isinstance(v, DistJob)]})
        print("COLLECTED " + json.dumps(out))

pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", "suites/distributed"],
            plugins=[Grab()])
"""


def test_every_distributed_check_shares_its_world_sizes_launch():
    """Note [One launch per world size]: every test of the family gets its outcome from the
    planner (the ``dist`` fixture), except the ones in OWN_LAUNCH (with the reason); so a
    default run launches once per world size, plus its jobs (the torchrun check). Two cases of one world size
    never share a name with different sub-checks (the planner refuses that at run time)."""
    proc = subprocess.run([sys.executable, "-c", _COLLECT], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = next((x for x in proc.stdout.splitlines() if x.startswith("COLLECTED ")), None)
    assert line is not None, proc.stdout[-2000:] + proc.stderr[-2000:]
    tests = json.loads(line[len("COLLECTED "):])
    own = sorted(t["node"] for t in tests if not t["cases"] and not t["jobs"])
    assert own == sorted(OWN_LAUNCH), f"tests that launch on their own: {own}"
    assert all("dist" in t["fixtures"] for t in tests if t["cases"] or t["jobs"])
    assert [job for t in tests for job in t["jobs"]] == ["torchrun_2x1"]
    by_key: dict = {}
    for t in tests:
        for ws, name, check in t["cases"]:
            assert by_key.setdefault((ws, name), check) == check, (ws, name)
    assert {ws for ws, _ in by_key} == {2, 4}  # so: two planner launches per default run


# ------------------------------------------------- two workers, two launches, no overlap

NAP_SUITE = """
import time

import pytest

from harness.distributed import DistCase, SubCheck


def nap(ctx, seconds):
    time.sleep(seconds)
    return ctx.rank


@pytest.mark.parametrize("case", [DistCase({ws}, SubCheck.of(nap, name="nap", seconds=0.3))],
                         ids=lambda c: c.id)
def test_nap(case, dist, results):
    outcome = dist(case)
    results.check(f"demo/nap/ws{ws}/{{case.check.name}}", outcome.ok, outcome.problem())
"""


def test_two_workers_launch_one_world_size_each_one_at_a_time(pytester):
    """``--dist loadscope`` sends each module to its own worker: one needs world size 1,
    the other 2, at the same moment. Each world size is launched once, by the worker that
    needed it, and the two launches do not overlap."""
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n")
    demo = pytester.path / "suites" / "demo"
    demo.mkdir(parents=True)
    (demo / "conftest.py").write_text((ROOT / "suites/distributed/conftest.py").read_text())
    for ws in (1, 2):
        (demo / f"test_ws{ws}.py").write_text(NAP_SUITE.format(ws=ws))
    basetemp = pytester.path / "tmp"
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadscope", "--baseline",
                                           "off", f"--basetemp={basetemp}")
    result.assert_outcomes(passed=2)
    launches = stored_launches(basetemp / "harness-dist-launches")
    assert sorted(d["world_size"] for d in launches) == [1, 2]
    assert {d["worker"] for d in launches} == {"gw0", "gw1"}
    (first, second) = launches
    # a launch stores its seconds rounded to 0.01 s (LaunchResult.to_json): its end is
    # known to within half of that, and a launch that overlapped would overlap by seconds
    assert first["began"] + first["seconds"] - 0.005 <= second["began"], launches
    [path] = (pytester.path / "results").glob("*.json.gz")
    records = read_document(path)["records"]
    assert {rid: r["info"]["rank_devices"] for rid, r in records.items()} == {
        f"demo/nap/ws{ws}/nap": ["cpu"] * ws for ws in (1, 2)}


# -------------------------------------------------------------- SimNPU, two devices

def _simnpu_xdist(env: dict) -> dict:
    """``-n 2`` on two simulated npus: single-device checks and the ws2 sampler checks;
    then ``-n 3``, one worker too many."""
    run_env = {k: v for k, v in env.items() if not k.startswith("HARNESS_SIMNPU")}
    if env.get("HARNESS_SIMNPU_CACHE"):
        run_env["HARNESS_SIMNPU_CACHE"] = env["HARNESS_SIMNPU_CACHE"]
    run_env.update(HARNESS_SIMNPU="1", HARNESS_SIMNPU_DEVICES="2", PYTHONPATH=str(ROOT),
                   TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    common = ["-m", "pytest", "-m", "npu", "--device", "npu", "-p", "no:cacheprovider",
              "-p", "no:randomly", "--baseline", "off"]
    with tempfile.TemporaryDirectory(prefix="simnpu-xdist-") as tmp:
        run = early.run(
            [sys.executable, *common, "-n", "2", f"--basetemp={tmp}/bt",
             f"--results-dir={tmp}/results", "suites/example",
             "suites/distributed/test_dist_sampler.py"], cwd=ROOT, env=run_env, timeout=600)
        files = sorted(Path(tmp, "results").glob("*.json.gz"))
        records = read_document(files[-1])["records"] if files else {}
        launches = (stored_launches(Path(tmp, "bt", "harness-dist-launches"))
                    if Path(tmp, "bt", "harness-dist-launches").is_dir() else [])
        too_many = early.run([sys.executable, *common, "-n", "3",
                              f"--results-dir={tmp}/results3", "suites/example"],
                             cwd=ROOT, env=run_env, timeout=600)
    return {"run": run, "records": records, "launches": launches, "too_many": too_many}


SIMNPU_XDIST = early.Job("SimNPU -n 2", (lambda env: None) if simnpu.compiler_missing()
                         else _simnpu_xdist)
EARLY = (SIMNPU_XDIST,)

needs_compiler = pytest.mark.skipif(simnpu.compiler_missing() is not None,
                                    reason=f"SimNPU cannot be built: {simnpu.compiler_missing()}")


@needs_compiler
def test_simnpu_two_workers_two_devices():
    """Every record names its device index, both indices occur, the ranks of the one ws2
    launch ran on npu:0 and npu:1, and the header says which worker has which device."""
    found = early.result(SIMNPU_XDIST)
    run = found["run"]
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "harness: xdist: 2 workers, worker gwK on npu:K (gw0..gw1 -> npu:0..1)" in run.stdout
    records = found["records"]
    assert records and all("device_index" in r["info"] for r in records.values())
    assert {r["info"]["device_index"] for r in records.values()} == {0, 1}
    sampler = {rid: r for rid, r in records.items() if rid.startswith("distributed/sampler/")}
    assert sorted(sampler) == ["distributed/sampler/none/drop_last=False/ws2",
                               "distributed/sampler/none/drop_last=True/ws2"]
    assert all(r["status"] == "pass" and r["info"]["rank_devices"] == ["npu:0", "npu:1"]
               for r in sampler.values())
    [launch_] = found["launches"]  # ws4 skips: two devices
    assert launch_["world_size"] == 2
    assert [r["device"] for r in launch_["ranks"]] == ["npu:0", "npu:1"]


@needs_compiler
def test_simnpu_three_workers_on_two_devices_is_a_usage_error():
    too_many = early.result(SIMNPU_XDIST)["too_many"]
    assert too_many.returncode == 4, too_many.stdout[-2000:] + too_many.stderr[-2000:]
    assert "Pass -n 2 (or fewer)" in too_many.stdout + too_many.stderr
