"""Graph mode on the DUT: the compiled training step against eager, graphs and breaks,
recompiles over three shapes, a guard failure's fallback (logic in ``harness/graph``).

The default run checks the transformer block's compiled step with ``aot_eager`` and its
graphs (seconds); ``--run-slow`` adds every model of ``harness.graph.step.MODELS``, under
the device's autocast too, with the device kind's own backend (inductor on the CPU: 6-20 s
per model cold, Note [Graph-mode backend]), and the recompile and guard-fallback checks
(Dynamo traces three shapes each).
"""

import pytest

from harness.graph import backends, capture, records, step

DEFAULT_MODEL = "transformer_block"
MODELS = tuple(step.MODELS)
DTYPES = ("float32", "autocast")


def _slow_unless(default: bool, *values, id: str):  # noqa: A002 - mirrors pytest.param
    marks = () if default else (pytest.mark.slow,)
    return pytest.param(*values, marks=marks, id=id)


STEP_CASES = [_slow_unless(True, DEFAULT_MODEL, "float32", "cheap",
                           id=f"{DEFAULT_MODEL}-float32-cheap")]
STEP_CASES += [_slow_unless(False, m, d, "device", id=f"{m}-{d}-device")
               for m in MODELS for d in DTYPES]
MODEL_CASES = [_slow_unless(m == DEFAULT_MODEL, m, id=m) for m in MODELS]
RECOMPILE_CASES = [_slow_unless(False, m, dyn, id=f"{m}-dynamic={dyn}")
                   for m in MODELS for dyn in ("unset", "true")]
SLOW_MODEL_CASES = [_slow_unless(False, m, id=m) for m in MODELS]


def _dtype_id(dtype: str, device) -> str:
    return f"autocast-{device.kind.amp_dtype}" if dtype == "autocast" else dtype


@pytest.mark.parametrize("model,dtype,which", STEP_CASES)
def test_compiled_step_matches_eager(model, dtype, which, device, results, settings):
    """Forward, loss, gradients and parameters after a step: compiled vs eager under the op
    standards (Note [Compiled vs eager under the op standards])."""
    backend = backends.CHEAP if which == "cheap" else \
        backends.backend_for(device, settings.graph_backend)
    if which == "device" and backend == backends.CHEAP and model == DEFAULT_MODEL \
            and dtype == "float32":
        pytest.skip(f"{device.type}'s graph backend is {backend}: the cheap case checks it")
    amp = device.amp_dtype if dtype == "autocast" else None
    result = step.compiled_vs_eager(model, device, backend=backend, amp=amp,
                                    seed=settings.seed)
    for outcome in records.step_outcomes(model, _dtype_id(dtype, device), result, which):
        outcome.record(results)


def _on_device(model: str, device, seed: int):
    module, x, _ = step.build(model, seed)
    return module.to(device.torch_device), x.to(device.torch_device)


@pytest.mark.parametrize("model", MODEL_CASES)
def test_graphs_and_breaks(model, device, results, settings):
    """The forward's graphs and breaks, each break with its reason and the user's line."""
    module, x = _on_device(model, device, settings.seed)
    with device.scope():
        graphs = capture.explain(module, x)
    records.graphs_outcome(model, graphs).record(results)
    print(graphs.text())


@pytest.mark.parametrize("model,dynamic", RECOMPILE_CASES)
def test_recompiles_over_three_shapes(model, dynamic, device, results, settings):
    """Compiles over three batch sizes (Note [Recompiles over three shapes])."""
    module, x = _on_device(model, device, settings.seed)
    got = capture.recompiles(module, x, True if dynamic == "true" else None,
                             seed=settings.seed, run=device.scope)
    records.recompiles_outcome(model, got).record(results)


@pytest.mark.parametrize("model", SLOW_MODEL_CASES)
def test_guard_failure_falls_back_to_eager(model, device, results, settings):
    """Past the recompile limit, a failed guard runs the frame eagerly, with eager's result."""
    module, x = _on_device(model, device, settings.seed)
    got = capture.guard_fallback(module, x, seed=settings.seed, run=device.scope)
    records.guard_outcome(model, got).record(results)
