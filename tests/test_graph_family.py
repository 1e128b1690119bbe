"""The graph family's machinery (harness/graph): backends per kind, breaks with the user's
line, recompile counts, the swallowed-compile fallback, records, parity of a compiled run
with an eager one. The faults are proven by tests/test_fault_matrix.py (every registered
fault); these tests keep to Dynamo's capture and the eager backends (no inductor compile).
"""

import dataclasses
import inspect
import traceback

import pytest
import torch
from torch import nn

from harness import kinds, models
from harness.device import Device
from harness.graph import backends, capture, records, step
from harness.graph.model import compile_check
from harness.model.spec import load_factory
from harness.parity import ParityError, compare
from harness.results import Record, RunResults


def test_every_kind_names_its_graph_backends():
    rows = {t: k.compile_backends for t, k in kinds.KINDS.items()}
    assert rows["cpu"] == rows["cuda"] == rows["xpu"] == ("inductor",)
    assert rows["npu"] == ("npu",)
    assert rows["mps"] == (backends.FALLBACK,)


@dataclasses.dataclass
class _Fake:
    kind: kinds.Kind
    simulated: bool = False


def test_a_kind_whose_backends_are_not_registered_falls_back_to_aot_eager():
    kind = dataclasses.replace(kinds.KINDS["cpu"], compile_backends=("no_such_backend",))
    assert backends.backend_for(_Fake(kind)) == "aot_eager"
    assert backends.backend_for(Device("cpu")) == "inductor"


def test_an_unknown_graph_backend_is_refused_naming_the_registered_ones():
    with pytest.raises(ValueError, match="--graph-backend 'inductr'.*inductor"):
        backends.backend_for(Device("cpu"), "inductr")


def test_user_frame_skips_torch_and_the_harness_graph_machinery():
    torch_file = inspect.getsourcefile(nn.Linear)
    fault_file = inspect.getsourcefile(__import__("harness.faults.catalog.graph",
                                                  fromlist=["x"]))
    stack = [traceback.FrameSummary(__file__, 10, "user"),
             traceback.FrameSummary(fault_file, 20, "wrapper"),
             traceback.FrameSummary(torch_file, 30, "forward")]
    assert capture.user_frame(stack).lineno == 10
    assert capture.user_frame(stack[1:]) is None


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return torch.softmax(self.fc(x), -1)


def _branch_line() -> int:
    source, start = inspect.getsourcelines(models.BranchyMLP.forward)
    return start + next(i for i, line in enumerate(source) if "if x.sum() > 0" in line)


def test_a_data_dependent_branch_is_one_break_at_the_users_line():
    model, x = models.branchy_mlp()
    graphs = capture.explain(model, x)
    assert (graphs.graphs, len(graphs.breaks)) == (2, 1)
    brk = graphs.breaks[0]
    assert brk.file == inspect.getsourcefile(models.BranchyMLP)
    assert brk.line == _branch_line() and "x.sum() > 0" in brk.source
    assert brk.reason  # Dynamo's words (they vary by torch version)
    outcome = records.graphs_outcome("branchy_mlp", graphs)
    assert outcome.metrics == {"graphs": 2.0, "graph_breaks": 1.0}
    assert outcome.info["breaks"][0]["line"] == brk.line


def test_recompiles_once_with_dynamic_unset_and_never_with_dynamic_true():
    model, x = _Tiny(), torch.randn(2, 8)
    unset = capture.recompiles(model, x, None)
    dynamic = capture.recompiles(model, x, True)
    assert [s[0] for s in unset.shapes] == list(capture.BATCHES)
    assert (unset.recompiles, dynamic.recompiles) == (1, 0)
    assert records.recompiles_outcome("m", dynamic).id == \
        "graph/m/float32/dynamo/recompiles/dynamic=true"


def test_a_guard_failure_past_the_limit_runs_eagerly():
    got = capture.guard_fallback(_Tiny(), torch.randn(2, 8))
    assert got.ok, got
    assert records.guard_outcome("m", got).status == "pass"


def _tiny_step(backend="eager"):
    torch.manual_seed(0)
    return step.compare_step(_Tiny(), (torch.randn(4, 8),), torch.randint(0, 3, (4,)),
                             Device("cpu"), backend=backend)


def test_the_compiled_step_matches_eager_in_every_group():
    outcomes = records.step_outcomes("tiny", "float32", _tiny_step())
    assert [o.id.rsplit("/", 1)[1] for o in outcomes] == ["compiled", *step.GROUPS]
    assert all(o.status == "pass" for o in outcomes), [o.message for o in outcomes]
    assert outcomes[0].metrics["graphs_compiled"] == 1.0


def test_a_backend_that_raises_and_is_swallowed_is_a_fallback(monkeypatch):
    def raising(name):
        def compile_graph(gm, example_inputs):
            raise RuntimeError("internal compiler error")
        return compile_graph

    monkeypatch.setattr(backends, "compiler", raising)
    with torch._dynamo.config.patch(suppress_errors=True):
        result = _tiny_step()
    compiled = records.step_outcomes("tiny", "float32", result)[0]
    assert compiled.status == "fallback"
    assert "internal compiler error" in compiled.message and "ran eagerly" in compiled.message


def test_a_drifting_lowering_fails_the_step():
    from harness.faults.catalog.graph import _lowered_softmax

    original = backends.compiler
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(backends, "compiler", lambda name: _lowered_softmax(original(name)))
        outcomes = records.step_outcomes("tiny", "float32", _tiny_step())
    failed = {o.id.rsplit("/", 1)[1] for o in outcomes if o.status == "fail"}
    assert "forward" in failed, [o.message for o in outcomes]


def test_model_compile_reports_the_break_recompiles_and_parity():
    spec = load_factory("harness.models:branchy_mlp")
    report = compile_check(spec, torch.randint(0, 4, (8,)), Device("cpu"), backend="eager")
    by_id = {o.id: o for o in report.outcomes}
    assert by_id["graph/branchy_mlp/float32/dynamo/graphs"].metrics["graph_breaks"] == 1.0
    assert "graph/branchy_mlp/float32/dynamo/recompiles/dynamic=unset" in by_id
    assert by_id["graph/branchy_mlp/float32/device/forward"].status == "pass"
    assert f"models.py:{_branch_line()}" in report.text()


# -------------------------------------------------------------------------- parity

def _run(backend=None) -> RunResults:
    rec = Record("graph/m/float32/device/forward", status="pass",
                 metrics={"max_rel_err": 1e-7}, info={"backend": backend or "inductor"})
    selection = {"graph_backend": backend} if backend else {}
    return RunResults(fingerprint={"device_type": "cpu", "stack_id": "torch-2.13.0"},
                      records={rec.id: rec}, selection=selection)


def test_parity_compares_an_eager_run_with_a_compiled_run_of_one_device():
    parity = compare(_run("eager"), _run())
    assert parity.verdict == "PARITY"
    assert any("graph backends" in note for note in parity.notes)


def test_parity_refuses_two_runs_of_one_device_and_one_graph_backend():
    with pytest.raises(ParityError, match="--graph-backend eager"):
        compare(_run(), _run())
