"""Graph mode: does the model still compile into few graphs, and does the compiled step
match eager, on this stack?

* :mod:`harness.graph.backends`: the ``torch.compile`` backend of a device kind (its row's
  ``compile_backends`` in :mod:`harness.kinds`), and :class:`~harness.graph.backends.Counting`,
  the wrapper that counts what the backend really compiled (a backend that raises and is
  swallowed leaves the step eager).
* :mod:`harness.graph.capture`: graphs, graph breaks (reason, the user's file:line),
  recompiles over three input shapes, whether a guard failure falls back to eager.
* :mod:`harness.graph.step`: one training step compiled on the DUT against the same step
  eager, judged per tensor by the op family's standards.

``suites/graph`` is the family's checks; ``python -m harness model ... --compile`` applies
the same to a user's model (docs/graph.md).
"""
