"""Faults the graph family (``suites/graph``) must catch: a stack upgrade that changes what
``torch.compile`` makes of a model while every eager check stays green.

Vendor stacks patch torch's Python functions (torch_npu replaces dozens) and plug their
compiler in as a Dynamo backend; the faults model both. Each acts only inside
``device.scope()``, where the DUT's step is compiled:

* ``graph.break_at_layer_norm``: ``F.layer_norm`` wrapped in a function Dynamo cannot
  trace: two graph breaks in the transformer block (a rise of ``graph_breaks``).
* ``graph.recompile_every_call``: the wrapper reads and bumps a module counter, so every
  call fails a guard and recompiles (a rise of ``recompiles``).
* ``graph.softmax_drift``: the backend's lowering of softmax changed: fused, without the
  max subtraction, the row sum accumulated in bfloat16 (the compiled step fails the
  standard; eager is untouched).
* ``graph.compile_error_swallowed``: the backend raises on every graph and Dynamo is set to
  suppress errors, so the step silently runs eagerly (``compiled`` becomes ``fallback``).
"""

from __future__ import annotations

import contextlib

from harness.faults import Fault, patch_attr

CHECKS = "suites/graph/test_graph.py"
STEP = f"{CHECKS}::test_compiled_step_matches_eager[transformer_block-float32-cheap]"
GRAPHS = f"{CHECKS}::test_graphs_and_breaks[transformer_block]"
RECOMPILES = f"{CHECKS}::test_recompiles_over_three_shapes[transformer_block-dynamic=true]"


def _untraceable(original):
    def layer_norm(*args, **kwargs):
        import torch._dynamo

        torch._dynamo.graph_break()  # what an untraceable vendor wrapper does to Dynamo
        return original(*args, **kwargs)
    return layer_norm


BREAK_AT_LAYER_NORM = patch_attr(
    "graph.break_at_layer_norm", family="graph",
    description="torch.nn.functional.layer_norm is wrapped in a function Dynamo cannot "
                "trace: the graph breaks at every LayerNorm",
    target="torch.nn.functional.layer_norm", replace=_untraceable, checks=(GRAPHS,))


_CALLS = 0
"""The counter :func:`_recompiling` reads (a guard on its value fails at every call)."""


def _recompiling(original):
    def layer_norm(*args, **kwargs):
        global _CALLS
        _CALLS += 1
        if _CALLS > 0:  # Dynamo guards on the value it read: the next call differs
            return original(*args, **kwargs)
        return original(*args, **kwargs)
    return layer_norm


RECOMPILE_EVERY_CALL = patch_attr(
    "graph.recompile_every_call", family="graph",
    description="torch.nn.functional.layer_norm reads and bumps a module-level counter: "
                "a guard on it fails at every call, so every call recompiles",
    target="torch.nn.functional.layer_norm", replace=_recompiling, checks=(RECOMPILES,),
    pytest_args=("--run-slow",))  # the recompile checks are slow


def _softmax_without_max(x, dim=None, *args, **kwargs):
    import torch

    dim = -1 if dim is None else dim
    e = torch.exp(x.float())  # no max subtraction; the row sum in bfloat16
    return (e / e.to(torch.bfloat16).sum(dim, keepdim=True).float()).to(x.dtype)


def _lowered_softmax(backend):
    def compile_graph(gm, example_inputs):
        import torch

        targets = {torch.softmax, torch.nn.functional.softmax}
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target in targets:
                node.target = _softmax_without_max
            elif node.op == "call_method" and node.target == "softmax":
                node.op, node.target = "call_function", _softmax_without_max
        gm.recompile()
        return backend(gm, example_inputs)
    return compile_graph


SOFTMAX_DRIFT = patch_attr(
    "graph.softmax_drift", family="graph",
    description="the backend lowers softmax to a fused kernel without the max subtraction "
                "that accumulates the row sum in bfloat16",
    target="harness.graph.backends.compiler",
    replace=lambda original: lambda name: _lowered_softmax(original(name)), checks=(STEP,))


def _raising(_backend):
    def compile_graph(gm, example_inputs):
        raise RuntimeError("graph compiler: internal error (emulated by the fault "
                           "graph.compile_error_swallowed)")
    return compile_graph


_RAISING = patch_attr(
    "graph.compile_error", family="graph", description="the backend raises on every graph",
    target="harness.graph.backends.compiler",
    replace=lambda original: lambda name: _raising(original(name)), checks=(STEP,))
"""The backend half of :data:`COMPILE_ERROR_SWALLOWED` (not registered by itself)."""


@contextlib.contextmanager
def _swallowed(device):
    import torch._dynamo

    with _RAISING.activate(device), torch._dynamo.config.patch(suppress_errors=True):
        yield


COMPILE_ERROR_SWALLOWED = Fault(
    "graph.compile_error_swallowed", "graph",
    "the backend raises compiling every graph and Dynamo suppresses the error: the step "
    "runs eagerly and its numbers are eager's", (STEP,), _swallowed)


FAULTS = [BREAK_AT_LAYER_NORM, RECOMPILE_EVERY_CALL, SOFTMAX_DRIFT, COMPILE_ERROR_SWALLOWED]
