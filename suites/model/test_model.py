"""Your model, on your stack: every aten call of a user's training step as a check.

``pytest -m npu --model PKG.MOD:FACTORY [--model-input 8x3x32x32]`` (``--model``
repeatable) captures one training step of each model on the CPU
(:mod:`harness.model.capture`) and generates:

* ``test_model_case[<model>-<op>-<digest>]``: one captured (op, signature) on the DUT
  against the CPU references through the op catalog's runner; records
  ``model/<model>/<op>/<digest>/<fwd|bwd>``.
* ``test_model_inventory[<model>]``: the dispatcher's view of every op on the DUT's key;
  records ``model/<model>/inventory/<op>`` (``pass``, ``fallback``, ``unsupported``).
* ``test_model_compile[<model>]`` (with ``--model-compile``): graph mode on the model
  (:mod:`harness.graph.model`); records ``graph/<model>/...``.

Without ``--model`` nothing is generated: the default run stays as fast as it was.
"""

from __future__ import annotations

import pytest

from harness import ids
from harness.plugin import settings_of

_BUILT: dict[tuple, object] = {}
"""(factory, input, seed) -> (capture, cases, why nothing is checked or None), or the error
text: one capture per run."""


def _built(factory: str, model_input, seed: int):
    key = (factory, model_input, seed)
    if key not in _BUILT:
        from harness.model.capture import capture_step
        from harness.model.cases import build_cases
        from harness.model.spec import (
            SpecError,
            empty_inputs,
            load_factory,
            parse_tensor_specs,
        )

        try:
            specs = parse_tensor_specs(model_input, source="--model-input") \
                if model_input else None
            spec = load_factory(factory, specs, seed=seed)
            capture = capture_step(spec, seed=seed)
            _BUILT[key] = (capture, build_cases(capture), empty_inputs(spec.inputs))
        except (SpecError, Exception) as exc:  # noqa: BLE001 - reported by the test
            _BUILT[key] = f"--model {factory}: {type(exc).__name__}: {exc}"
    return _BUILT[key]


def _factory_name(factory: str) -> str:
    return factory.rsplit(":", 1)[-1]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    settings = settings_of(metafunc.config)
    factories = settings.models if settings is not None else ()
    model_input = settings.model_input if settings is not None else None
    seed = settings.seed if settings is not None else 0
    name = metafunc.function.__name__
    params = []
    for factory in factories:
        built = _built(factory, model_input, seed)
        if isinstance(built, str):
            params.append(pytest.param(factory, built, id=f"{_factory_name(factory)}-capture"))
            continue
        capture, cases, empty = built
        if name == "test_model_case":
            params += [pytest.param(factory, (case, empty), id=case.param_id)
                       for case in cases]
        elif name in ("test_model_inventory", "test_model_compile"):
            params.append(pytest.param(factory, (capture, empty), id=capture.model))
    metafunc.parametrize(("factory", "subject"), params)


def _reproduce_args(settings, factory: str) -> str:
    line = f"--model {factory}"
    return line + (f" --model-input {settings.model_input}" if settings.model_input else "")


def _capture_failed(subject, factory: str) -> None:
    if isinstance(subject, str):
        pytest.fail(f"{subject}\n(check the factory with: python -m harness model {factory} "
                    "--no-cases)", pytrace=False)


def test_model_case(factory, subject, device, results, settings):
    """One captured call of the model, forward (and backward where it has one)."""
    from harness.model.cases import run_model_case

    _capture_failed(subject, factory)
    case, empty = subject
    if empty:  # the same rule as the model command: nothing to compare
        results.record(case.record_id("fwd"), status="skip", message=empty)
        pytest.skip(empty)
    outcomes = run_model_case(device, case, settings.seed)
    for outcome in outcomes:
        outcome.record(results, reproduce_args=_reproduce_args(settings, factory))
    if all(o.status == "skip" for o in outcomes):
        pytest.skip(outcomes[0].message or "nothing to compare")


def test_model_inventory(factory, subject, device, results, settings, harness_state):
    """Every op of the step on the DUT's dispatch key: kernel, fallback, or none."""
    from harness.model.inventory import inventory

    _capture_failed(subject, factory)
    capture, empty = subject
    if empty:  # the step on empty inputs is not the model's step
        results.record(ids.model_inventory_record(capture.model), status="skip",
                       message=empty)
        pytest.skip(empty)
    inv = inventory(capture, device.type,
                    stack_id=harness_state.run.fingerprint.get("stack_id", ""))
    status = {"ok": "pass", "fallback": "fallback", "unsupported": "unsupported",
              "known-bad": "skip"}
    for op in inv.ops:
        message = "" if op.verdict == "ok" else (
            f"{op.op} on {device.type}: {op.verdict} ({op.kernel}"
            + (f"; {op.known_bad}" if op.known_bad else "") + ")")
        results.record(ids.model_inventory_record(inv.model, op.op), status=status[op.verdict],
                       metrics={"calls": float(op.calls)}, message=message,
                       info={"kernel": op.kernel, "phases": op.phases})
    print(inv.text())


def test_model_compile(factory, subject, device, results, settings):
    """``--model-compile``: the model compiled with the device's graph backend: graphs,
    breaks, recompiles, the compiled step vs eager (records ``graph/<model>/...``)."""
    from harness.model.check import compile_model
    from harness.model.spec import parse_tensor_specs

    _capture_failed(subject, factory)
    capture, empty = subject
    if empty:
        pytest.skip(empty)
    specs = parse_tensor_specs(settings.model_input, source="--model-input") \
        if settings.model_input else None
    report = compile_model(factory, specs, None, device, seed=settings.seed)
    for outcome in report.outcomes:
        outcome.record(results, reproduce_args=_reproduce_args(settings, factory)
                       + " --model-compile")
    print(report.text())
