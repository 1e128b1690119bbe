"""The DUT-scope audit: one fault per family that shifts *everything* the DUT computes.

Note [DUT-scope audit]
~~~~~~~~~~~~~~~~~~~~~~
A check that computes its reference inside ``device.scope()`` applies a DUT defect to the
reference too, and the two cancel: the check cannot see the defect (DESIGN.md "DUT
scope"). The audit makes that visible. Inside the DUT scope it multiplies every floating
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
*every* listed check fails.
"""

from __future__ import annotations

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
       "suites/ops/test_edge_values.py::test_special_values[softmax-float32]")
OPTIM = "suites/optim/test_optimizer_state.py::test_fp32_state_under_amp"
OPTIONS = "suites/optim/test_optimizer_options.py"
TRAINING = (f"{OPTIM}[adam-foreach-bfloat16]", f"{OPTIM}[sgd-forloop-float16]",
            f"{OPTIM}[adamw-fused-bfloat16]",
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
            "suites/amp/test_layer_agreement.py::test_layers_agree[simplecnn-float32]")
MEMORY = ("suites/memory/test_oom.py::test_oom_recovery",)
DDP = "suites/distributed/test_dist_ddp.py"
DISTRIBUTED = (f"{DDP}::test_ddp_matches_single_process[ws2-ddp/float32/plain]",
               f"{DDP}::test_ddp_amp_grad_scaler[ws2-ddp/amp]",
               f"{DDP}::test_ddp_broadcast_buffers[ws2-ddp/buffers]")
EXAMPLE = ("suites/example",)

NOT_NUMERIC: dict[str, str] = {
    "suites/ops/test_determinism.py": "two DUT runs compared bit for bit: a shift that is "
                                      "the same on every run leaves them equal",
    "suites/ops/test_catalog.py::test_mm_run_twice_bit_identical": "as for determinism",
    "suites/ops/test_edge_values.py::test_edge_values_agree_with_reference":
        "compares where NaN/Inf appear; a finite shift moves none (its reference is outside "
        "the scope: read)",
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
    "suites/optim/test_optimizer_state.py::test_low_precision_param_state": "state dtypes",
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
    "suites/distributed/test_dist_ddp.py::test_sync_batchnorm_matches_full_batch":
        "SyncBatchNorm refuses CPU modules: recorded unsupported on the CPU",
    "suites/distributed/test_dist_multinode.py": "a torchrun launch on loopback (slow); the "
                                                 "same rank programs as test_dist_ddp",
    "suites/bench": "throughput",
}
"""Checks a scope audit does not list, by node-id prefix, each with the reason (every one
read: none computes a CPU reference inside the scope)."""

FAULTS = [scope_audit("ops", OPS), scope_audit("training", TRAINING),
          scope_audit("memory", MEMORY), scope_audit("distributed", DISTRIBUTED),
          scope_audit("example", EXAMPLE)]
