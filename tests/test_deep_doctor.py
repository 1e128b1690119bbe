"""``python -m harness doctor --device npu --deep`` on SimNPU (harness/deep.py): every
assumption holds on the simulator in fidelity mode, and each stack fault
(:data:`harness.deep.STACK_FAULTS`) turns its line FAIL.

One child process runs the whole doctor with two simulated devices (the HCCL probe needs
two); another calls :func:`harness.deep.deep_checks` once per fault (one device where the
fault is not HCCL's). Both are early jobs (Note [Early jobs] in tests/early.py).
"""

from __future__ import annotations

import json
import sys
import textwrap

import early
import pytest
from test_simnpu import ROOT, _env

from harness import simnpu
from harness.deep import STACK_FAULTS

needs_compiler = pytest.mark.skipif(simnpu.compiler_missing() is not None,
                                    reason=f"SimNPU cannot be built: {simnpu.compiler_missing()}")

_FAULTS = textwrap.dedent(r"""
    import json, sys
    from harness import deep
    out = {}
    from harness.device import Device
    for name, fault in deep.STACK_FAULTS.items():
        if fault.caught_by == "hccl":  # only its probe: two ranks
            status, detail, fix = deep.hccl_probe(Device("npu", 0, 2), fault, 60.0)
            out[name] = [(status, "hccl", detail, fix)]
        else:
            out[name] = deep.deep_checks("npu", 1, fault=name, dist_timeout=60.0)
    print("FAULTS-JSON " + json.dumps(out))
""")


def _doctor(env: dict):
    return early.run([sys.executable, "-m", "harness", "doctor", "--device", "npu", "--deep"],
                     cwd=ROOT, env=_env(env, HARNESS_SIMNPU_DEVICES="2"), timeout=300)


def _faults(env: dict):
    return early.run([sys.executable, "-c", _FAULTS], cwd=ROOT,
                     env=_env(env, HARNESS_SIMNPU_DEVICES="2"), timeout=600)


def _if_buildable(fn):
    return (lambda env: None) if simnpu.compiler_missing() else fn


DOCTOR = early.Job("deep doctor on SimNPU", _if_buildable(_doctor))
FAULTS = early.Job("deep doctor stack faults", _if_buildable(_faults))
EARLY = (DOCTOR, FAULTS)


@needs_compiler
def test_deep_doctor_holds_every_assumption_on_simnpu():
    proc = early.result(DOCTOR)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    deep = [line for line in out.splitlines() if line.startswith("[") and "deep: " in line]
    topics = [line.split("deep: ", 1)[1].split(":", 1)[0] for line in deep]
    assert topics == ["API surface", "fallback warnings", "allocator rounding",
                      "event timing", "CANN version", "hccl"], deep
    assert all(line.startswith("[  ok]") for line in deep), "\n".join(deep)
    assert "blocks {480: 512, 481: 1024, 1000: 1536}" in out  # size + 32, rounded to 512
    assert "an int memory fraction is refused" in out
    assert "aten::sort.values_stable ran on the CPU and was seen (stderr)" in out
    assert 'get_cann_version answers ""' in out  # 8.0.0 < 8.1.RC1: from the files
    assert "a rank 2 s late was waited for" in out
    assert "GradScalers: torch.amp, torch_npu.npu.amp" in out


@needs_compiler
@pytest.mark.parametrize("name", sorted(STACK_FAULTS))
def test_each_stack_fault_fails_its_deep_line(name):
    proc = early.result(FAULTS)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("FAULTS-JSON ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = json.loads(lines[-1].split(" ", 1)[1])[name]
    fault = STACK_FAULTS[name]
    failing = [topic for status, topic, _, _ in found if status == "fail"]
    assert failing == [fault.caught_by], found
