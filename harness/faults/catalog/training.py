"""Faults the training family (``suites/amp``, ``suites/optim``, ``suites/norm``) must
catch: broken train/eval semantics, mixed-precision bookkeeping and one bad layer.

Each acts only inside ``device.scope()`` (the DUT), like a broken backend would.
"""

from __future__ import annotations

import contextlib

import torch

from harness.faults import Fault, patch_attr, perturb_op

AMP = "suites/amp"
OPTIM = "suites/optim"
NORM = "suites/norm"


# ------------------------------------------------------------------------ BatchNorm

def _bn_always_batch_stats(original):
    def batch_norm(input, running_mean, running_var, weight=None, bias=None,  # noqa: A002
                   training=False, momentum=0.1, eps=1e-5):
        return original(input, running_mean, running_var, weight, bias, True, momentum, eps)
    return batch_norm


BN_EVAL_BATCH_STATS = patch_attr(
    "training.bn_eval_batch_stats", family="training",
    description="BatchNorm in eval mode normalises with batch statistics (and updates the "
                "running buffers) instead of using the running statistics",
    target="torch.nn.functional.batch_norm", replace=_bn_always_batch_stats,
    checks=(f"{NORM}/test_batchnorm.py::test_eval_uses_running_stats[float32]",),
)


def _bn_biased_running_var(original):
    def batch_norm(input, running_mean, running_var, weight=None, bias=None,  # noqa: A002
                   training=False, momentum=0.1, eps=1e-5):
        if not (training and running_var is not None):
            return original(input, running_mean, running_var, weight, bias, training,
                            momentum, eps)
        old = running_var.detach().clone()
        out = original(input, running_mean, running_var, weight, bias, training, momentum, eps)
        dims = [d for d in range(input.dim()) if d != 1]
        biased = input.detach().to(running_var.dtype).var(dim=dims, unbiased=False)
        # through .data: the kernel saved running_var for backward, and a visible in-place
        # write would bump its version counter (autograd would refuse the backward)
        running_var.data.copy_((1 - momentum) * old + momentum * biased)
        return out
    return batch_norm


BN_BIASED_RUNNING_VAR = patch_attr(
    "training.bn_running_var_biased", family="training",
    description="BatchNorm's running_var is updated with the biased (1/n) batch variance "
                "instead of the unbiased (1/(n-1)) one",
    target="torch.nn.functional.batch_norm", replace=_bn_biased_running_var,
    checks=(f"{NORM}/test_batchnorm.py::test_train_updates_running_stats[momentum=0.1]",),
)


# ------------------------------------------------------------------------ GradScaler

def _never_backs_off(original):
    def update_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                     growth_interval):
        # the backend "forgets" the overflow: the scale keeps growing as if all was finite
        return original(scale, growth_tracker, torch.zeros_like(found_inf), growth_factor,
                        backoff_factor, growth_interval)
    return update_scale


GRAD_SCALER_NEVER_BACKS_OFF = patch_attr(
    "training.grad_scaler_never_backs_off", family="training",
    description="GradScaler.update never lowers the scale after inf/NaN gradients "
                "(torch._amp_update_scale_ ignores found_inf)",
    target="torch._amp_update_scale_", replace=_never_backs_off,
    checks=(f"{AMP}/test_grad_scaler.py::test_classic_scale_sequence",),
)


# ------------------------------------------------------------------------ optimizer

_ADAM_STATE = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")


def _adam_state_bf16(original):
    def step(self, closure=None):
        for group in self.param_groups:  # the kernel computes in the param dtype...
            for param in group["params"]:
                state = self.state.get(param, {})
                for key in _ADAM_STATE:
                    if key in state and state[key].dtype != param.dtype:
                        state[key] = state[key].to(param.dtype)
        out = original(self, closure)
        for state in self.state.values():  # ...but the state is stored in bf16
            for key in _ADAM_STATE:
                if key in state and state[key].is_floating_point():
                    state[key] = state[key].to(torch.bfloat16)
        return out
    return step


ADAM_STATE_BF16 = patch_attr(
    "training.adam_state_bf16", family="training",
    description="Adam (and AdamW) keep exp_avg/exp_avg_sq in bf16 between steps, with fp32 "
                "parameters: updates lose precision",
    target="torch.optim.Adam.step", replace=_adam_state_bf16,
    checks=(f"{OPTIM}/test_optimizer_state.py::test_fp32_state_under_amp[adam-foreach-bfloat16]",),
)


OPTIONS = f"{OPTIM}/test_optimizer_options.py"


def _sgd_ignores_nesterov(original):
    def sgd(*args, **kwargs):
        kwargs["nesterov"] = False  # the kernel takes plain momentum whatever it is told
        return original(*args, **kwargs)
    return sgd


SGD_IGNORES_NESTEROV = patch_attr(
    "training.sgd_ignores_nesterov", family="training",
    description="SGD ignores nesterov=True: every implementation (for-loop, foreach, "
                "fused) takes a plain momentum step (torch.optim.sgd.sgd, the functional "
                "SGD.step calls)",
    target="torch.optim.sgd.sgd", replace=_sgd_ignores_nesterov,
    checks=(f"{OPTIONS}::test_optimizer_option[sgd-nesterov-forloop]",
            f"{OPTIONS}::test_optimizer_option[sgd-nesterov-foreach]"),
)


SIMD_BLOCK = 8
"""The elements one vector register holds in the defect :data:`SGD_16BIT_BLOCKS_KEPT`
copies (8 on the machine of its report)."""


def _sgd_keeps_16bit_blocks(original):
    def step(self, closure=None):
        kept = [(p, p.detach().clone()) for group in self.param_groups for p in group["params"]
                if p.grad is not None and p.dtype in (torch.float16, torch.bfloat16)]
        out = original(self, closure)
        with torch.no_grad():
            for param, before in kept:
                blocks = param.numel() // SIMD_BLOCK * SIMD_BLOCK
                param.view(-1)[:blocks] = before.view(-1)[:blocks]
        return out
    return step


SGD_16BIT_BLOCKS_KEPT = patch_attr(
    "training.sgd_16bit_blocks_kept", family="training",
    description="SGD leaves the whole 8-element blocks of an fp16 or bf16 parameter as "
                "they were and updates only the remainder (torch 2.13's fused CPU SGD "
                "defect, pytorch#191763, in every implementation)",
    target="torch.optim.SGD.step", replace=_sgd_keeps_16bit_blocks,
    checks=(f"{OPTIM}/test_optimizer_state.py::test_low_precision_param_state"
            "[sgd-forloop-float16]",
            f"{OPTIM}/test_optimizer_state.py::test_low_precision_param_state"
            "[sgd-foreach-bfloat16]"),
)


def _cosine_one_step_late(original):
    def get_lr(self):
        self.last_epoch -= 1  # the schedule lags one step behind the optimizer
        try:
            return original(self)
        finally:
            self.last_epoch += 1
    return get_lr


COSINE_LR_OFF_BY_ONE = patch_attr(
    "training.cosine_lr_off_by_one", family="training",
    description="CosineAnnealingLR computes each step's lr from the previous step's count "
                "(off by one: the schedule lags one step)",
    target="torch.optim.lr_scheduler.CosineAnnealingLR.get_lr", replace=_cosine_one_step_late,
    checks=(f"{OPTIONS}::test_scheduler[CosineAnnealingLR-t_max]",),
)


# ------------------------------------------------------------------------ autocast

def _autocast_dtype(device_type: str):
    """The active autocast dtype for a device type, or None (torch >= 2.4 API first)."""
    try:
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)
    except (TypeError, AttributeError):  # older torch: per-backend functions
        if device_type == "cpu":
            return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None


def _in_low_precision(original):
    def op(input, *args, **kwargs):  # noqa: A002 - mirrors torch's signature
        low = _autocast_dtype(input.device.type) if isinstance(input, torch.Tensor) else None
        if low is not None:
            with torch.autocast(input.device.type, enabled=False):
                return original(input.to(low), *args, **kwargs)
        return original(input, *args, **kwargs)
    return op


_LOW_PRECISION_TARGETS = ("torch.softmax", "torch.nn.functional.softmax",
                          "torch.nn.functional.log_softmax", "torch.nn.functional.cross_entropy")


def _activate_low_precision(device):
    stack = contextlib.ExitStack()
    for target in _LOW_PRECISION_TARGETS:
        stack.enter_context(patch_attr(f"_{target}", family="training", description="",
                                       target=target, replace=_in_low_precision,
                                       checks=()).activate(device))
    return stack


AUTOCAST_SOFTMAX_FP16 = Fault(
    "training.autocast_softmax_low_precision", "training",
    "under autocast, softmax/log_softmax/cross_entropy run in the low dtype (fp16/bf16) "
    "instead of fp32",
    (f"{AMP}/test_autocast.py::test_autocast_policy[float16-softmax-in=float32]",
     f"{AMP}/test_autocast.py::test_autocast_policy[float16-cross_entropy-in=float16]"),
    _activate_low_precision,
)


# ------------------------------------------------------------------------ dropout

def _dropout_unscaled(original):
    def dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002
        out = original(input, p, training, inplace)
        return out * (1 - p) if training and 0 < p < 1 else out
    return dropout


DROPOUT_UNSCALED = patch_attr(
    "training.dropout_unscaled", family="training",
    description="dropout in train mode zeroes elements but does not scale the kept ones "
                "by 1/(1-p)",
    target="torch.nn.functional.dropout", replace=_dropout_unscaled,
    checks=(f"{NORM}/test_dropout.py::test_dropout_train_scales_kept[float32-p=0.5]",),
)


# ------------------------------------------------------------------------ one bad layer

def _is_simplecnn_conv2(out) -> bool:
    """SimpleCNN's conv2 output: (N, 64, 16, 16); no other layer of the reference models
    (SimpleCNN, small ResNet, TinyTransformer, TinyCNN) has this shape."""
    return isinstance(out, torch.Tensor) and out.dim() == 4 and tuple(out.shape[1:]) == (64, 16, 16)


def _mix_neighbours(out, args, kwargs):
    if not _is_simplecnn_conv2(out):
        return out
    # 20% of each value comes from its right-hand neighbour: not a per-channel affine
    # change, so the following BatchNorm cannot normalise it away.
    return 0.8 * out + 0.2 * torch.roll(out, 1, dims=-1)


CONV_LAYER_DRIFT = perturb_op(
    "training.conv_layer_drift", family="training",
    description="one convolution (SimpleCNN's conv2, output 64x16x16) mixes 20% of each "
                "output with its neighbour: the divergence finder must name 'conv2'",
    op="aten.convolution.default", transform=_mix_neighbours,
    checks=(f"{AMP}/test_layer_agreement.py::test_layers_agree[simplecnn-float32]",),
)

FAULTS = [BN_EVAL_BATCH_STATS, BN_BIASED_RUNNING_VAR, GRAD_SCALER_NEVER_BACKS_OFF,
          ADAM_STATE_BF16, SGD_IGNORES_NESTEROV, SGD_16BIT_BLOCKS_KEPT, COSINE_LR_OFF_BY_ONE,
          AUTOCAST_SOFTMAX_FP16, DROPOUT_UNSCALED, CONV_LAYER_DRIFT]


# ---- one non-finite class the scaler does not see (Note [Non-finite classes] in
# suites/amp/test_grad_scaler.py): an overflow check written as ``x != x || x == +inf``

def _only_neg_inf(args, kwargs) -> bool:
    grads = [g for g in args[0] if g.numel()]
    return (any(bool((g == float("-inf")).any()) for g in grads)
            and not any(bool(torch.isnan(g).any() | (g == float("inf")).any()) for g in grads))


def _clear_found_inf(out, args, kwargs):
    args[1].zero_()
    return out


SCALER_MISSES_NEG_INF = perturb_op(
    "training.grad_scaler_misses_neg_inf", family="training",
    description="_amp_foreach_non_finite_check_and_unscale_ does not count -inf as an "
                "overflow (found_inf stays 0, the step is taken); +inf and NaN are caught",
    op="aten._amp_foreach_non_finite_check_and_unscale_", when=_only_neg_inf,
    transform=_clear_found_inf,
    checks=(f"{AMP}/test_grad_scaler.py::test_non_finite_check_and_unscale[float16--inf]",
            f"{AMP}/test_grad_scaler.py::test_scaler_skips_backs_off_and_regrows[-inf]"),
)

FAULTS += [SCALER_MISSES_NEG_INF]
