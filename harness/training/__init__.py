"""The training family's logic (``suites/amp``, ``suites/optim``, ``suites/norm``).

- :mod:`~harness.training.loop`: the shared training loop (:func:`train` on the DUT or
  the CPU reference, :func:`reference`), the recipes per scale (:class:`TrainSpec`,
  :data:`SCALES`), the named models (:data:`MODELS`) and the convergence metrics and
  bands (:func:`convergence`, :data:`LIMITS`);
- :mod:`~harness.training.localize`: the divergence finder (per-layer activation and
  gradient error, the depth-drift curve; ``python -m harness localize``), imported as
  ``from harness.training import localize``.
"""

from harness.training.loop import (
    LIMITS,
    MODELS,
    SCALES,
    ConvergenceLimits,
    TinyCNN,
    TrainResult,
    TrainSpec,
    convergence,
    evaluate_model,
    initial_model,
    model_factory,
    reference,
    spec_for,
    step_change_spread,
    train,
    window_mean,
)

__all__ = [
    "LIMITS", "MODELS", "SCALES", "ConvergenceLimits", "TinyCNN", "TrainResult", "TrainSpec",
    "convergence", "evaluate_model", "initial_model", "model_factory", "reference",
    "spec_for", "step_change_spread", "train", "window_mean",
]
