"""The parity report: verdict, runs, sections, ranked differences with their reproduce
commands, thresholds, pictures; terminal, Markdown, HTML, and a real browser render."""

from pathlib import Path

import pytest

from harness.parity.model import SECTIONS, Difference, Parity, RunSide
from harness.report import parity as report

CHROMIUM = Path("/usr/bin/chromium")
REPRO = "python -m pytest '{node}' --device npu --seed 0 -p no:randomly"


def _side(device_type, slug, path):
    return RunSide(path=path, device_type=device_type, device_slug=slug,
                   stack_id="torch-2.13.0", started="2026-12-02T05:00:00")


def _diff(section, rid, severity="difference", ratio=3.0, node="suites/x.py::test_y"):
    return Difference(section=section, id=rid, severity=severity,
                      summary=f"{rid} differs", reference={"max_rel_err": 1e-3},
                      here={"max_rel_err": 3e-3}, ratio=ratio,
                      reproduce=REPRO.format(node=node))


THRESHOLDS = {
    "ops.error_ratio": {"pass": 1.0, "warning": 2.0,
                        "source": "msprobe accuracy checker, 3-way standard"},
    "memory.max_batch_ratio": {"value": 0.9, "source": "docs/parity.md"},
}


def _parity(verdict="PARITY", differences=(), compared=None, not_compared=None,
            plots=True):
    op_ratios = curves = memory = speed = models = []
    if plots:
        op_ratios = [{"op": op, "dtype": dt, "ratio": r, "id": f"ops/{op}/{dt}/fwd/typical"}
                     for op, dt, r in (("add", "float16", 1.0), ("add", "bfloat16", 1.4),
                                       ("mm", "float16", 2.6), ("exp", "float32", 0.8))]
        curves = [{"id": "amp/convergence/float16/mlp", "label": "float16 mlp",
                   "reference": [2.0, 1.5, 1.1, 0.9], "here": [2.0, 1.6, 1.2, 1.0]}]
        memory = [{"id": "memory/oom_threshold/mlp/float32/none", "metric": "max_batch",
                   "reference": 512, "here": 256, "ratio": 0.5}]
        speed = [{"id": "bench/mlp/float32", "precision": "float32", "reference": 100.0,
                  "here": 80.0, "ratio": 0.8},
                 {"id": "bench/mlp/float16", "precision": "float16", "reference": 200.0,
                  "here": 210.0, "ratio": 1.05}]
        models = [{"op": "aten.addmm.default", "reference": "runs", "here": "runs"}]
    return Parity(verdict=verdict, reference=_side("cpu", "xeon-avx512", "ref/cpu.json"),
                  here=_side("npu", "simnpu", "here/npu.json"),
                  differences=list(differences),
                  compared=compared if compared is not None else {s: 4 for s in SECTIONS},
                  not_compared=not_compared or {}, thresholds=THRESHOLDS,
                  op_ratios=op_ratios, curves=curves, memory=memory, speed=speed,
                  models=models)


def _blockers():
    return _parity("BLOCKERS", [
        _diff("ops", "ops/mm/float16/fwd/typical", "blocker", None,
              node="suites/ops/test_catalog.py::test_op[mm-float16]"),
        _diff("memory", "memory/oom_threshold/mlp/float32/none", ratio=0.5,
              node="suites/memory/test_oom.py::test_max_batch"),
        _diff("ops", "ops/add/bfloat16/fwd/typical", ratio=2.6),
    ], not_compared={"model": "no `harness model` inventory in either run"})


# --------------------------------------------------------------------------- terminal

def test_terminal_lines_verdict_exit_code_sides_sections_and_reproduce_commands():
    parity = _blockers()
    lines = report.terminal_lines(parity)
    assert lines[0].startswith("PARITY: BLOCKERS (exit 1)")
    assert "1 blocker(s)" in lines[0] and "2 difference(s)" in lines[0]
    text = "\n".join(lines)
    assert "reference: cpu/xeon-avx512/torch-2.13.0 (ref/cpu.json" in text
    assert "here: npu/simnpu/torch-2.13.0 (here/npu.json" in text
    for section in SECTIONS:
        assert any(line.startswith(f"{section}: ") for line in lines), section
    assert "model: 4 compared; NOT COMPARED: no `harness model` inventory" in text
    for diff in parity.differences:
        assert diff.id in text and diff.reproduce in text
    # worst first, as the comparison ranked them
    assert text.index("ops/mm/float16") < text.index("memory/oom") < text.index("ops/add")


def test_terminal_lines_clean_pair_says_parity_and_what_was_compared():
    lines = report.terminal_lines(_parity())
    assert lines[0] == ("PARITY: PARITY (exit 0): no difference beyond the thresholds in 20 "
                        "compared subject(s)")
    assert not any("worst first" in line for line in lines)


def test_terminal_lines_cut_at_limit_and_point_to_the_report():
    diffs = [_diff("ops", f"ops/op{i}/float16/fwd/typical") for i in range(14)]
    lines = report.terminal_lines(_parity("DIFFERENCES", diffs), limit=5)
    assert lines[0].startswith("PARITY: DIFFERENCES (exit 2)")
    assert sum("[difference]" in line for line in lines) == 5
    assert "... 9 more in the report" in lines[-1]
