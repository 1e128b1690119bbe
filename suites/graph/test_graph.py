"""Graph mode on the DUT: the compiled training step against eager, graphs and breaks,
recompiles over three shapes, a guard failure's fallback (logic in ``harness/graph``).

The default run checks the transformer block with ``aot_eager`` (seconds); ``--run-slow``
adds every model of ``harness.graph.step.MODELS``, under the device's autocast too, with
the device kind's own backend (inductor on the CPU: 6-20 s per model cold, Note
[Graph-mode backend]).
"""

import pytest

from harness import ids
from harness.graph import backends, capture, step
from harness.results import lower

DEFAULT_MODEL = "transformer_block"
MODELS = tuple(step.MODELS)
DTYPES = ("float32", "autocast")
COUNT = lower(rel=1.0, abs=0.0, severity="regression")
"""A rise of a graph, break or recompile count is a capability lost
(Note [Graph breaks and the user's line])."""


def _slow_unless(default: bool, *values, id: str):  # noqa: A002 - mirrors pytest.param
    marks = () if default else (pytest.mark.slow,)
    return pytest.param(*values, marks=marks, id=id)


STEP_CASES = [_slow_unless(True, DEFAULT_MODEL, "float32", "cheap",
                           id=f"{DEFAULT_MODEL}-float32-cheap")]
STEP_CASES += [_slow_unless(False, m, d, "device", id=f"{m}-{d}-device")
               for m in MODELS for d in DTYPES]
MODEL_CASES = [_slow_unless(m == DEFAULT_MODEL, m, id=m) for m in MODELS]
RECOMPILE_CASES = [_slow_unless(m == DEFAULT_MODEL, m, dyn, id=f"{m}-dynamic={dyn}")
                   for m in MODELS for dyn in ("unset", "true")]


def _dtype_id(dtype: str, device) -> str:
    return f"autocast-{device.kind.amp_dtype}" if dtype == "autocast" else dtype


@pytest.mark.parametrize("model,dtype,which", STEP_CASES)
def test_compiled_step_matches_eager(model, dtype, which, device, results, settings):
    """Forward, loss, gradients and parameters after a step: compiled vs eager under the op
    standards (Note [Compiled vs eager under the op standards])."""
    backend = backends.CHEAP if which == "cheap" else backends.backend_for(device)
    if which == "device" and backend == backends.CHEAP and model == DEFAULT_MODEL \
            and dtype == "float32":
        pytest.skip(f"{device.type}'s graph backend is {backend}: the cheap case checks it")
    amp = device.amp_dtype if dtype == "autocast" else None
    label = _dtype_id(dtype, device)
    result = step.compiled_vs_eager(model, device, backend=backend, amp=amp,
                                    seed=settings.seed)
    counting = result.counting
    compiled_id = ids.graph_record(model, label, backend, "compiled")
    info = {"backend": backend, "graphs": [g.ops for g in counting.graphs]}
    if result.fell_back:
        results.outcome(compiled_id, "fallback",
                        f"{backend} raised compiling {len(counting.errors)} of "
                        f"{len(counting.graphs)} graph(s) and the step ran eagerly: "
                        f"{counting.errors[0]}", info=info)
    else:
        results.check(compiled_id, counting.compiled > 0,
                      f"{backend} was handed no graph: the compiled step ran eagerly",
                      metrics={"graphs_compiled": float(counting.compiled)},
                      rules={"graphs_compiled": COUNT}, info=info)
    for group in result.groups:
        results.check(ids.graph_record(model, label, backend, group.group), group.passed,
                      group.message, metrics=group.metrics, rules=group.rules,
                      info={"worst": group.worst, "failing": group.failing,
                            "backend": backend})


@pytest.mark.parametrize("model", MODEL_CASES)
def test_graphs_and_breaks(model, device, results, settings):
    """The forward's graphs and breaks, each break with its reason and the user's line."""
    module, x, _ = step.build(model, settings.seed)
    module, x = module.to(device.torch_device), x.to(device.torch_device)
    with device.scope():
        graphs = capture.explain(module, x)
    breaks = [b.to_json() for b in graphs.breaks]
    results.record(ids.graph_record(model, "float32", "dynamo", "graphs"),
                   metrics={"graphs": float(graphs.graphs),
                            "graph_breaks": float(len(graphs.breaks))},
                   rules={"graphs": COUNT, "graph_breaks": COUNT},
                   info={"breaks": breaks, "ops": graphs.ops})
    print(graphs.text())


@pytest.mark.parametrize("model,dynamic", RECOMPILE_CASES)
def test_recompiles_over_three_shapes(model, dynamic, device, results, settings):
    """Compiles over three batch sizes (Note [Recompiles over three shapes])."""
    module, x, _ = step.build(model, settings.seed)
    module, x = module.to(device.torch_device), x.to(device.torch_device)
    got = capture.recompiles(module, x, True if dynamic == "true" else None,
                             seed=settings.seed, run=device.scope)
    results.record(ids.graph_record(model, "float32", "dynamo", "recompiles",
                                    f"dynamic={dynamic}"),
                   metrics={"recompiles": float(got.recompiles)},
                   rules={"recompiles": COUNT},
                   info={"compiles": got.compiles, "shapes": [list(s) for s in got.shapes]})


@pytest.mark.parametrize("model", MODEL_CASES)
def test_guard_failure_falls_back_to_eager(model, device, results, settings):
    """Past the recompile limit, a failed guard runs the frame eagerly, with eager's result."""
    module, x, _ = step.build(model, settings.seed)
    module, x = module.to(device.torch_device), x.to(device.torch_device)
    got = capture.guard_fallback(module, x, seed=settings.seed, run=device.scope)
    results.check(ids.graph_record(model, "float32", "dynamo", "guard_fallback"), got.ok,
                  f"with {got.limit}=1, a call of another shape "
                  + (f"raised instead of running eagerly: {got.error}" if got.error else
                     f"compiled {got.compiles} time(s) (expected 1) and matched eager: "
                     f"{got.matches_eager}"),
                  info={"matches_eager": got.matches_eager, "compiles": got.compiles, "limit": got.limit})
