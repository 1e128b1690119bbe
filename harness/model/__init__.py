"""Your model, on your stack: capture a user's model and check every op it runs.

* :mod:`harness.model.spec`: ``PKG.MOD:FACTORY`` and ``--input 8x3x32x32[:float32]``.
* :mod:`harness.model.capture`: one training step (forward, loss, backward, optimizer
  step; autocast when asked) under a dispatch mode, every distinct aten call kept.
* :mod:`harness.model.inventory`: "will it run": kernels per op on the DUT's dispatch
  key, CPU fallbacks, known-bad ops, with their share of the step's calls.
* :mod:`harness.model.cases`: every captured call as a conformance case through the op
  catalog's runner and standards (``model/<name>/<op>/<digest>/<fwd|bwd>``).
* :mod:`harness.model.check`: ``python -m harness model`` (and what the suite calls).
"""
