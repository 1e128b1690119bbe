"""The DUT-scope audit: one fault per family that shifts *everything* the DUT computes.

Note [DUT-scope audit]
~~~~~~~~~~~~~~~~~~~~~~
A check that computes its reference inside ``device.scope()`` applies a DUT defect to the
reference too, and the two cancel: the check cannot see the defect (docs/design.md, "The
DUT scope"). The audit makes that visible. Inside the DUT scope it multiplies every floating
result of every computing aten op by ``1 + 2**-4`` (in-place and ``out=`` results where
they are written; views, copies and dtype conversions are left alone, so a reference
computed in the scope from a converted copy is shifted exactly like the DUT and the two
cancel), a defect no numeric check may miss: 6% per op, beyond every tolerance the
suite has (the loosest, autocast's, is 5%). Every check listed for a
family's audit must fail under it; one that still passes either computes its reference
in the scope (a bug: fix the check) or measures something the shift does not change
(memory, time, bitwise run-to-run agreement), and is then not listed, with the reason in
:data:`NOT_NUMERIC`.

``python -m harness faults check --family <family>`` runs the audit with the family's
other faults (caught when any listed check fails); ``tests/test_scope_audit.py`` asks more:
*every* listed check fails (but the cases a ``NOT_NUMERIC`` prefix exempts), and every
check under ``suites/`` is listed or exempted (Note [Audit coverage]).
"""

from __future__ import annotations

from typing import Iterable, Optional

from harness.faults import Fault

SHIFT = 2.0 ** -4


def _make_mode():
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    factor = 1.0 + SHIFT

    def shift(value):
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and value.numel():
                return value * factor
            return value
        if isinstance(value, (list, tuple)):
            return type(value)(shift(v) for v in value)
        return value

    def shift_in_place(value):
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and value.numel():
                with torch.no_grad():
                    value.mul_(factor)
        elif isinstance(value, (list, tuple)):
            for v in value:
                shift_in_place(v)

    class ScopeShift(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            schema = func._schema
            if getattr(func, "is_view", False) or func.overloadpacket in not_shifted:
                return out
            if func.overloadpacket in hidden_writes and len(args) > 5 and args[5]:
                shift_in_place(args[3])  # training batch norm updates its running stats
                shift_in_place(args[4])  # without saying so in its schema
            if not schema.is_mutable:
                return shift(out)
            for index, arg in enumerate(schema.arguments):
                if arg.alias_info is not None and arg.alias_info.is_write:
                    shift_in_place(args[index] if index < len(args) else kwargs.get(arg.name))
            if out is None or not schema.returns:
                return out
            if len(schema.returns) == 1:  # a fresh result beside the writes is shifted too
                return out if schema.returns[0].alias_info is not None else shift(out)
            return type(out)(value if ret.alias_info is not None else shift(value)
                             for ret, value in zip(schema.returns, out))

    aten = torch.ops.aten
    not_shifted = {  # data movement and bookkeeping, not computation
        aten.detach, aten.alias, aten.lift_fresh, aten.lift_fresh_copy, aten.set_,
        aten.empty, aten.empty_like, aten.empty_strided, aten._local_scalar_dense,
        aten._to_copy, aten.copy_, aten.clone, aten._copy_from, aten._copy_from_and_resize}
    hidden_writes = {aten.native_batch_norm}
    return ScopeShift()


def scope_audit(family: str, checks: tuple[str, ...], pytest_args: tuple[str, ...] = ()
                ) -> Fault:
    """The audit fault of one family (Note [DUT-scope audit])."""

    def activate(_device):
        return _make_mode()

    return Fault(f"{family}.scope_audit", family,
                 f"every floating result computed in the DUT scope is {SHIFT:g} (relative) "
                 f"too large: {family} checks that compute their reference in the scope "
                 "cannot see it", checks, activate, pytest_args)


CATALOG = "suites/ops/test_catalog.py::test_op"
OPS = (f"{CATALOG}[exp-float32]", f"{CATALOG}[conv2d-bfloat16]", f"{CATALOG}[sort-float32]",
       f"{CATALOG}[clamp_tie-float16]", f"{CATALOG}[dropout-float32]",
       "suites/ops/test_opinfo.py::test_opinfo_slice[exp-float32]",
       "suites/ops/test_opinfo.py::test_opinfo_slice[mm-float32]",
       "suites/ops/test_edge_values.py::test_special_values[softmax-float32]",
       "suites/ops/test_catalog.py::test_op_large[_foreach_neg]",
       "suites/ops/test_opinfo.py::test_opinfo_sweep[acos-float16]")
OPS_ARGS = ("--run-slow",)  # the large samples and the sweep are marked slow
OPTIM = "suites/optim/test_optimizer_state.py::test_fp32_state_under_amp"
OPTIM_LOW = "suites/optim/test_optimizer_state.py::test_low_precision_param_state"
OPTIONS = "suites/optim/test_optimizer_options.py"
TRAINING = (f"{OPTIM}[adam-foreach-bfloat16]", f"{OPTIM}[sgd-forloop-float16]",
            f"{OPTIM}[adamw-fused-bfloat16]",
            f"{OPTIM_LOW}[adam-fused-bfloat16]", f"{OPTIM_LOW}[sgd-forloop-float16]",
            f"{OPTIONS}::test_optimizer_option[adam-amsgrad-forloop]",
            f"{OPTIONS}::test_optimizer_option[sgd-nesterov-foreach]",
            f"{OPTIONS}::test_scheduler[OneCycleLR-momentum]",
            f"{OPTIONS}::test_clipping[clip_grad_norm_-inf]",
            "suites/norm/test_batchnorm.py::test_train_updates_running_stats",
            "suites/norm/test_batchnorm.py::test_eval_matches_reference",
            "suites/norm/test_batchnorm.py::test_eval_uses_running_stats",
            "suites/norm/test_batchnorm.py::test_no_running_stats",
            "suites/norm/test_batchnorm.py::test_autocast_low_precision_input",
            "suites/norm/test_dropout.py",
            "suites/amp/test_autocast.py::test_nested_autocast_disabled_computes_fp32",
            "suites/amp/test_grad_scaler.py::test_classic_scale_sequence",
            "suites/amp/test_grad_scaler.py::test_unscale_then_clip",
            "suites/amp/test_grad_scaler.py::test_non_finite_check_and_unscale[float32-finite]",
            "suites/amp/test_grad_scaler.py::test_scaler_skips_backs_off_and_regrows[nan]",
            "suites/amp/test_layer_agreement.py::test_layers_agree[simplecnn-float32]",
            "suites/amp/test_layer_agreement.py::test_finder_names_a_perturbed_layer")
MEMORY = ("suites/memory/test_oom.py::test_oom_recovery",)
DDP = "suites/distributed/test_dist_ddp.py"
PARALLEL = "suites/distributed/test_dist_parallel.py"
DISTRIBUTED = (f"{DDP}::test_ddp_matches_single_process[ws2-ddp/float32/plain]",
               f"{DDP}::test_ddp_amp_grad_scaler[ws2-ddp/amp]",
               f"{DDP}::test_ddp_amp_skips_an_overflow_on_every_rank[ws2-ddp/amp_found_inf]",
               f"{DDP}::test_ddp_broadcast_buffers[ws2-ddp/buffers]",
               "suites/distributed/test_dist_pipeline.py::"
               "test_pipeline_step_matches_single_process[ws2-pipeline/send_recv]",
               f"{PARALLEL}::test_fsdp2_matches_single_process[ws2-fsdp/float32]",
               f"{PARALLEL}::test_fsdp2_matches_single_process[ws2-fsdp/bf16_mixed]",
               f"{PARALLEL}::test_tensor_parallel_mlp_matches_one_device[ws2-tp/mlp]")
EXAMPLE = ("suites/example",)
GRAPH_CHECKS = "suites/graph/test_graph.py"
GRAPH = (f"{GRAPH_CHECKS}::test_compiled_step_matches_eager[transformer_block-float32-cheap]",
         f"{GRAPH_CHECKS}::test_guard_failure_falls_back_to_eager[transformer_block]")
MODEL_CASE = "suites/model/test_model.py::test_model_case"
MODEL = (MODEL_CASE,)
MODEL_ARGS = ("--model", "harness.models:sinc_mlp")  # the model suite checks nothing without

NOT_NUMERIC: dict[str, str] = {
    "suites/ops/test_determinism.py": "two DUT runs compared bit for bit: a shift that is "
                                      "the same on every run leaves them equal",
    "suites/ops/test_catalog.py::test_mm_run_twice_bit_identical": "as for determinism",
    "suites/ops/test_edge_values.py::test_edge_values_agree_with_reference":
        "compares where NaN/Inf appear; a finite shift moves none (its reference is outside "
        "the scope: read)",
    "suites/ops/test_edge_values.py::test_nan_keeps_the_shape":
        "judges the shape and dtype of the answer to a NaN input, never its values: a "
        "shift changes neither (Note [NaN shape samples] in harness/ops/edge.py)",
    "suites/ops/test_opinfo.py::test_opinfo_slice[argmax": "integer output",
    "suites/ops/test_opinfo.py::test_opinfo_slice[nn.functional.relu": "its two OpInfo "
        "samples have no positive element: the outputs are 0, which a shift keeps",
    "suites/norm/test_batchnorm.py::test_model_eval_is_batch_independent":
        "a sample alone vs in its batch, both on the DUT",
    "suites/amp/test_convergence.py": "minutes of training on a CPU; its reference is "
                                      "training.reference(), a dut=False run outside the "
                                      "scope (read in harness/training/loop.py)",
    "suites/amp/test_autocast.py::test_autocast_policy": "88 op x dtype cases; the same code "
                                                         "path as the nested-autocast check",
    "suites/optim/test_optimizer_state.py::test_fp32_state_under_amp[rmsprop-fused":
        "no fused RMSprop: recorded unsupported",
    "suites/amp/test_grad_scaler.py::test_overflow_skip_rate": "counts skipped steps; no "
                                                               "reference to compare with",
    "suites/amp/test_grad_scaler.py::test_state_dict_round_trip": "a scaler vs its restored "
                                                                  "twin, both on the DUT",
    **{f"{OPTIM_LOW}[{o}-{v}-float16]": "state dtypes only: an fp16 update that divides by "
       "a root mean square is not judged (Note [Low-precision parameter updates])"
       for o in ("adam", "adamw", "rmsprop", "adagrad") for v in ("forloop", "foreach", "fused")},
    f"{OPTIM_LOW}[rmsprop-fused": "no fused RMSprop: recorded unsupported",
    "suites/optim/test_optimizer_state.py::test_state_dict_round_trip": "a DUT optimizer vs "
                                                                        "its restored twin",
    "suites/memory/test_checkpointing.py": "checkpointed vs plain gradients, both on the DUT "
                                           "(the recompute is shifted like the original); "
                                           "peaks in bytes",
    "suites/memory/test_leaks.py": "bytes held per step",
    "suites/memory/test_meter.py": "bytes measured vs bytes expected",
    "suites/memory/test_oom.py::test_max_batch_under_cap": "batch sizes and bytes",
    "suites/memory/test_oom.py::test_checkpointing_raises_max_batch": "batch sizes",
    "suites/distributed/test_dist_sampler.py": "indices each rank draws, no arithmetic",
    "suites/distributed/test_dist_collectives.py::test_collective_matches_numpy":
        "the shift does not reach the collective (gloo writes the result below the "
        "dispatch mode, asynchronously); its reference is NumPy outside the scope (read in "
        "distributed.checks.collective); the collective faults in faults/catalog/distributed.py "
        "prove the check",
    "suites/distributed/test_dist_collectives.py::test_barrier_waits_for_every_rank": "time",
    "suites/distributed/test_dist_skew.py": "whether a late rank's all_reduce completes or "
        "times out (the sum's reference is NumPy outside the scope; the shift does not reach "
        "the collective, as for test_collective_matches_numpy); distributed.rank_straggles "
        "proves it",
    "suites/distributed/test_dist_ddp.py::test_sync_batchnorm_matches_full_batch":
        "SyncBatchNorm refuses CPU modules: recorded unsupported on the CPU",
    "suites/distributed/test_dist_parallel.py::test_fsdp2_sharded_state_round_trip":
        "a trained FSDP2 model vs its restored twin, both on the DUT: no reference to "
        "move apart from (the audit does fail it, through the load's unshifted copies); "
        "distributed.optim_state_dropped_on_load proves it",
    "suites/distributed/test_dist_multinode.py": "a torchrun launch on loopback (slow); the "
                                                 "same rank programs as test_dist_ddp",
    "suites/bench": "throughput",
    f"{GRAPH_CHECKS}::test_graphs_and_breaks": "graph and break counts from Dynamo's "
        "capture, nothing computed (a dispatch mode makes Dynamo skip the frame: 0 graphs)",
    f"{GRAPH_CHECKS}::test_recompiles_over_three_shapes": "compile counts, nothing "
        "computed (graph.recompile_every_call proves it)",
    "suites/model/test_model.py::test_model_inventory": "the dispatcher's kernel for each op "
        "on the DUT's dispatch key: a table lookup, nothing computed (passes under the "
        "audit)",
    **{f"{MODEL_CASE}[sinc_mlp-aten.{op}.": "a view or a copy: data movement, which the "
       "audit leaves alone" for op in ("t", "view", "detach", "clone")},
    f"{MODEL_CASE}[sinc_mlp-aten.eq.": "bool output",
    f"{MODEL_CASE}[sinc_mlp-aten.scalar_tensor.": "the model's call makes a 0.0, which a "
                                                  "shift keeps",
}
"""Checks a scope audit does not list, by node-id prefix, each with the reason (every one
read: none computes a CPU reference inside the scope). A prefix that ends inside a
parameter id (``...[argmax``) exempts those cases of a listed check; the others must fail.
"""

SUITE_FAMILIES: dict[str, str] = {
    "ops": "ops", "amp": "training", "norm": "training", "optim": "training",
    "memory": "memory", "distributed": "distributed", "example": "example",
    "model": "model", "bench": "bench", "graph": "graph"}
"""``suites/<folder>`` -> the family whose audit must list its checks (``bench`` has no
audit: all of it is in :data:`NOT_NUMERIC`)."""


# Note [Audit coverage]
# ~~~~~~~~~~~~~~~~~~~~~
# The audit lists are node ids written by hand, so a new check is easily forgotten, and a
# forgotten check is one whose reference nobody verified to be outside the scope.
# tests/test_scope_audit.py therefore collects every check under suites/ (pytest
# --collect-only, slow and model checks included) and asks :func:`coverage_problems`: each
# test function must be named by its family's audit list (the function itself, one of
# its cases, or its file or folder) or exempted in NOT_NUMERIC with a reason (the function
# or a file or folder above it). Every audit entry and exemption must still name a
# collected check, so a renamed test cannot leave a stale entry behind.

def _holds(prefix: str, nodeid: str) -> bool:
    """Whether ``prefix`` (a folder, file, test, case, or a case-id prefix ending inside
    the brackets) names ``nodeid`` or something that holds it."""
    if nodeid == prefix:
        return True
    if not nodeid.startswith(prefix):
        return False
    return "[" in prefix or nodeid[len(prefix)] in "/:["


def exemption(nodeid: str) -> Optional[str]:
    """The reason ``nodeid`` (a collected check) is not in an audit, or None."""
    for prefix, reason in NOT_NUMERIC.items():
        if _holds(prefix, nodeid):
            return reason
    return None


def coverage_problems(nodeids: Iterable[str]) -> list[str]:
    """One line per collected check (test function) under ``suites/`` that is neither
    listed by its family's audit nor exempted, and per stale entry (Note [Audit
    coverage])."""
    nodeids = sorted(set(nodeids))
    functions = sorted({n.split("[", 1)[0] for n in nodeids})
    audits = {fault.family: fault.checks for fault in FAULTS}
    problems = []
    for function in functions:
        folder = function.split("/")[1] if function.startswith("suites/") else ""
        family = SUITE_FAMILIES.get(folder)
        if family is None:
            problems.append(f"{function}: suites/{folder} is not in audit.SUITE_FAMILIES; add "
                            "it with the family whose audit lists its checks")
            continue
        listed = any(entry == function or entry.startswith(function + "[")
                     or _holds(entry, function) for entry in audits.get(family, ()))
        exempt = any(_holds(prefix, function) and "[" not in prefix for prefix in NOT_NUMERIC)
        if listed and exempt:
            problems.append(f"{function}: both in the {family} audit and exempted in "
                            "NOT_NUMERIC; keep one")
        elif not listed and not exempt:
            problems.append(f"{function}: in neither the {family} audit (harness/faults/"
                            "audit.py) nor NOT_NUMERIC: list one of its cases in the audit "
                            "if a 6% shift of the DUT's results must fail it, else exempt it "
                            "with the reason (Note [DUT-scope audit])")
    for fault in FAULTS:
        for entry in fault.checks:
            if not any(_holds(entry, n) for n in nodeids):
                problems.append(f"{fault.name} lists {entry!r}, which names no collected "
                                "check: renamed or removed?")
    for prefix in NOT_NUMERIC:
        if not any(_holds(prefix, n) for n in nodeids):
            problems.append(f"NOT_NUMERIC exempts {prefix!r}, which names no collected "
                            "check: renamed or removed?")
    return problems

FAULTS = [scope_audit("ops", OPS, OPS_ARGS), scope_audit("training", TRAINING),
          scope_audit("memory", MEMORY), scope_audit("distributed", DISTRIBUTED),
          scope_audit("example", EXAMPLE), scope_audit("model", MODEL, MODEL_ARGS),
          scope_audit("graph", GRAPH, ("--run-slow",))]  # guard_fallback is slow
