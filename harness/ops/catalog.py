"""The curated op catalog: training-relevant ops as data rows (docs/design.md).

Each row is an :class:`~harness.ops.spec.OpEntry`: a name, a callable, samples, dtypes,
backward, precision standard. Sample templates (:func:`unary`, :func:`binary`,
:func:`reduction`, ...) give every op the same shape families: ``typical``, ``odd257``
(odd sizes), ``noncontig``, ``bcast`` (broadcasting), ``empty`` and a ``large``
(>= 1M elements) case marked slow. Adding an op is adding a row.

Standards follow the table in docs/standards.md: ``exact`` for copies/layout/indices,
``absolute`` for add/sub/mul/div/reciprocal/rsqrt/relu-like, ``ulp`` for matrix
multiplication, ``relative`` for everything else.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.nn.functional as F  # noqa: N812 - the usual alias

from harness.device import torch_api
from harness.ops.spec import FLOATS, INTS, I, M, OpEntry, Sample, T, late_bound
from harness.ops.stats import dropout_judge

FI = FLOATS + INTS  # ops that also take integer tensors
F32 = ("float32",)  # ops the CPU reference implements in fp32 only (see each note)
LARGE = (1024, 1024)  # 1,048,576 elements
BAND_SIZES = ((1 << 11) + 1, (1 << 13) + 1, (1 << 16) + 1)  # Note [Size bands of every row]


# ------------------------------------------------------------------------- templates

def unary(domain: str = "normal", *, empty: bool = True, extra: tuple = (),
          kwargs: dict | None = None) -> tuple[Sample, ...]:
    kw = dict(kwargs or {})
    samples = [Sample("typical", (T((16, 64), domain),), kw),
               Sample("odd257", (T((3, 257), domain),), kw),
               Sample("noncontig", (T((33, 17), domain, noncontig=True),), kw),
               Sample("scalar", (T((), domain),), kw)]
    if empty:
        samples.append(Sample("empty", (T((0, 64), domain),), kw))
    samples += list(extra)
    samples.append(Sample("large", (T(LARGE, domain),), kw, slow=True))
    return tuple(samples)


def binary(da: str = "normal", db: str = "normal", *, kwargs: dict | None = None,
           grad_b: bool = True) -> tuple[Sample, ...]:
    kw = dict(kwargs or {})
    return (Sample("typical", (T((16, 64), da), T((16, 64), db, grad=grad_b)), kw),
            Sample("odd257", (T((3, 257), da), T((3, 257), db, grad=grad_b)), kw),
            Sample("noncontig", (T((33, 17), da, noncontig=True),
                                 T((33, 17), db, grad=grad_b)), kw),
            Sample("bcast", (T((4, 1, 64), da), T((1, 5, 64), db, grad=grad_b)), kw),
            Sample("empty", (T((0, 64), da), T((0, 64), db, grad=grad_b)), kw),
            Sample("large", (T(LARGE, da), T(LARGE, db, grad=grad_b)), kw, slow=True))


def ternary(da="normal", db="normal", dc="normal", *, kwargs=None) -> tuple[Sample, ...]:
    kw = dict(kwargs or {})
    return (Sample("typical", (T((16, 64), da), T((16, 64), db), T((16, 64), dc)), kw),
            Sample("odd257", (T((3, 257), da), T((3, 257), db), T((3, 257), dc)), kw),
            Sample("noncontig", (T((33, 17), da, noncontig=True), T((33, 17), db),
                                 T((33, 17), dc)), kw),
            Sample("bcast", (T((4, 1, 64), da), T((1, 5, 64), db), T((64,), dc)), kw),
            Sample("empty", (T((0, 64), da), T((0, 64), db), T((0, 64), dc)), kw),
            Sample("large", (T(LARGE, da), T(LARGE, db), T(LARGE, dc)), kw, slow=True))


def reduction(domain: str = "normal", *, all_kwargs: dict | None = None, dim_kw: str = "dim",
              keepdim: bool = True, **kw) -> tuple[Sample, ...]:
    all_kwargs = {dim_kw: (0, 1)} if all_kwargs is None else all_kwargs
    samples = [Sample("typical", (T((16, 64), domain),), {dim_kw: 1, **kw}),
               Sample("all", (T((16, 64), domain),), {**all_kwargs, **kw}),
               Sample("odd257", (T((3, 257), domain),), {dim_kw: -1, **kw}),
               Sample("noncontig", (T((33, 17), domain, noncontig=True),), {dim_kw: 0, **kw}),
               Sample("empty", (T((0, 64), domain),), {dim_kw: 1, **kw}),
               Sample("large", (T(LARGE, domain),), {dim_kw: 1, **kw}, slow=True)]
    if keepdim:
        samples.insert(2, Sample("keepdim", (T((8, 33), domain),), {dim_kw: 0, "keepdim": True,
                                                                       **kw}))
    return tuple(samples)


def scan(domain: str = "normal") -> tuple[Sample, ...]:
    return (Sample("typical", (T((16, 64), domain),), {"dim": 1}),
            Sample("dim0", (T((16, 64), domain),), {"dim": 0}),
            Sample("odd257", (T((3, 257), domain),), {"dim": -1}),
            Sample("noncontig", (T((33, 17), domain, noncontig=True),), {"dim": 1}),
            Sample("empty", (T((0, 64), domain),), {"dim": 1}),
            Sample("large", (T(LARGE, domain),), {"dim": 1}, slow=True))


def softmaxish() -> tuple[Sample, ...]:
    return (Sample("typical", (T((16, 64)),), {"dim": -1}),
            Sample("odd257", (T((3, 257)),), {"dim": -1}),
            Sample("dim1_3d", (T((4, 10, 12)),), {"dim": 1}),
            Sample("noncontig", (T((33, 17), noncontig=True),), {"dim": 0}),
            Sample("large_logits", (T((8, 128), "large"),), {"dim": -1}),
            Sample("empty", (T((0, 64)),), {"dim": -1}),
            Sample("large", (T(LARGE),), {"dim": -1}, slow=True))


def loss(input_domain="normal", target_domain="normal", *, target_grad=False, extra=(),
         empty=True) -> tuple[Sample, ...]:
    samples = [Sample("typical", (T((16, 64), input_domain),
                                  T((16, 64), target_domain, grad=target_grad))),
               Sample("sum", (T((16, 64), input_domain),
                              T((16, 64), target_domain, grad=target_grad)), {"reduction": "sum"}),
               Sample("none", (T((16, 64), input_domain),
                               T((16, 64), target_domain, grad=target_grad)),
                      {"reduction": "none"}),
               Sample("odd257", (T((3, 257), input_domain),
                                 T((3, 257), target_domain, grad=target_grad))),
               Sample("noncontig", (T((33, 17), input_domain, noncontig=True),
                                    T((33, 17), target_domain, grad=target_grad)))]
    if empty:
        samples.append(Sample("empty", (T((0, 64), input_domain),
                                        T((0, 64), target_domain, grad=target_grad)),
                              {"reduction": "sum"}))
    # both operands transposed, in fp32: the loss's elementwise part keeps their layout, so
    # its inner reduction runs on a transposed intermediate (the ``noncontig`` sample
    # transposes the input only, and the result is laid out like the target), and with
    # reduction="none" the loss's own output is transposed (faults mutate: mean.default
    # inside hinge_embedding_loss, smooth_l1_loss's output)
    both = (T((33, 17), input_domain, noncontig=True),
            T((33, 17), target_domain, grad=target_grad, noncontig=True))
    samples += [Sample("transposed_both", both, dtypes=("float32",)),
                Sample("transposed_both_none", both, {"reduction": "none"},
                       dtypes=("float32",))]
    samples += list(extra)
    samples.append(Sample("large", (T(LARGE, input_domain),
                                    T(LARGE, target_domain, grad=target_grad)), slow=True))
    return tuple(samples)


def foreach(n_lists: int = 1, domains=("normal",), scalar=None, list_kw=None) -> tuple:
    """Lists of tensors of different shapes (as optimizers hold them)."""
    def lists(shapes, noncontig=False):
        return tuple([T(s, domains[i % len(domains)], grad=False,
                        noncontig=noncontig and len(s) >= 2) for s in shapes]
                     for i in range(n_lists))
    extra = () if scalar is None else (scalar,)
    kw = dict(list_kw or {})
    # first, layers of one shape: a kernel that mixes up a list's same-shaped tensors (the
    # derived samples, Note [Layout samples], start from the first)
    return (Sample("same_shape", (*lists([(16, 8), (16, 8), (5,)]), *extra), kw),
            Sample("typical", (*lists([(16, 64), (64,), (8, 3, 3)]), *extra), kw),
            Sample("odd257", (*lists([(3, 257), (257,)]), *extra), kw),
            Sample("noncontig", (*lists([(33, 17), (9, 5)], noncontig=True), *extra), kw),
            Sample("same_shape_noncontig", (*lists([(33, 17), (33, 17)], noncontig=True),
                                            *extra), kw),
            Sample("empty", (*lists([(0, 64), (7,)]), *extra), kw),
            Sample("large", (*lists([LARGE, (10,)]), *extra), kw, slow=True))


def conv(nd: int, transpose: bool = False) -> tuple[Sample, ...]:
    """Conv samples: stride, padding, dilation, groups, odd channels, empty batch."""
    sp = {1: (20,), 2: (10, 10), 3: (6, 6, 6)}[nd]
    k = (3,) * nd

    def w(cin, cout, groups=1):  # conv: (out, in/g, k); transpose: (in, out/g, k)
        return T((cin, cout // groups, *k)) if transpose else T((cout, cin // groups, *k))

    large_x = {1: T((16, 16, 4096)), 2: T((4, 16, 128, 128)), 3: T((1, 32, 32, 32, 32))}[nd]
    return (Sample("typical", (T((2, 4, *sp)), w(4, 6), T((6,)))),
            Sample("stride2_pad1", (T((2, 4, *sp)), w(4, 6), T((6,))),
                   {"stride": 2, "padding": 1}),
            Sample("dilation2", (T((2, 4, *sp)), w(4, 6), None),
                   {"dilation": 2, "padding": 2}),
            Sample("groups2", (T((2, 4, *sp)), w(4, 6, 2), T((6,))), {"groups": 2}),
            Sample("depthwise", (T((2, 6, *sp)), w(6, 6, 6), None), {"groups": 6}),
            Sample("odd_channels", (T((1, 3, *(s + 1 for s in sp))), w(3, 5), T((5,)))),
            Sample("noncontig", (T((2, 4, *sp), noncontig=True), w(4, 6), T((6,)))),
            Sample("empty", (T((0, 4, *sp)), w(4, 6), T((6,)))),
            Sample("large", (large_x, w(large_x.shape[1], 8), T((8,))), slow=True))


def pool(nd: int, **kw) -> tuple[Sample, ...]:
    sp = {1: (24,), 2: (12, 12), 3: (6, 6, 6)}[nd]
    large = {1: (16, 64, 1024), 2: (4, 16, 128, 128), 3: (2, 8, 64, 64, 16)}[nd]
    return (Sample("typical", (T((2, 3, *sp), "distinct"),), {"kernel_size": 2, **kw}),
            Sample("k3s2p1", (T((2, 3, *sp), "distinct"),),
                   {"kernel_size": 3, "stride": 2, "padding": 1, **kw}),
            Sample("odd", (T((1, 3, *(s + (3 if nd < 3 else 1) for s in sp)), "distinct"),),
                   {"kernel_size": 3, "stride": 2, **kw}),
            Sample("noncontig", (T((2, 3, *sp), "distinct", noncontig=True),),
                   {"kernel_size": 2, **kw}),
            Sample("empty", (T((0, 3, *sp)),), {"kernel_size": 2, **kw}),
            Sample("large", (T(large),), {"kernel_size": 2, **kw}, slow=True))


def adaptive(nd: int, out) -> tuple[Sample, ...]:
    sp = {1: (23,), 2: (11, 13), 3: (7, 6, 9)}[nd]
    large = {1: (16, 64, 1024), 2: (4, 16, 128, 128), 3: (2, 8, 64, 64, 16)}[nd]
    return (Sample("typical", (T((2, 3, *sp), "distinct"),), {"output_size": out}),
            Sample("one", (T((2, 3, *sp), "distinct"),), {"output_size": 1}),
            Sample("noncontig", (T((2, 3, *sp), "distinct", noncontig=True),),
                   {"output_size": out}),
            Sample("empty", (T((0, 3, *sp)),), {"output_size": out}),
            Sample("large", (T(large),), {"output_size": out}, slow=True))


def interp(nd: int, mode: str, align: bool) -> tuple[Sample, ...]:
    sp = {1: (9,), 2: (7, 9), 3: (4, 5, 6)}[nd]
    large = {1: (16, 64, 1024), 2: (4, 16, 128, 128), 3: (2, 8, 64, 64, 16)}[nd]
    extra = {"align_corners": False} if align else {}
    samples = [Sample("up2", (T((2, 3, *sp)),), {"scale_factor": 2, "mode": mode, **extra}),
               Sample("down_size", (T((2, 3, *(s * 2 + 1 for s in sp))),),
                      {"size": sp, "mode": mode, **extra}),
               Sample("odd_size", (T((1, 2, *sp)),),
                      {"size": tuple(s * 2 + 3 for s in sp), "mode": mode, **extra}),
               Sample("noncontig", (T((2, 3, *sp), noncontig=True),),
                      {"scale_factor": 2, "mode": mode, **extra}),
               Sample("empty", (T((0, 3, *sp)),), {"scale_factor": 2, "mode": mode, **extra}),
               Sample("large", (T(large),), {"scale_factor": 2, "mode": mode, **extra},
                      slow=True)]
    if align:
        samples.insert(1, Sample("align_corners", (T((2, 3, *sp)),),
                                 {"scale_factor": 2, "mode": mode, "align_corners": True}))
    return tuple(samples)


def layout(extra: tuple = (), *, empty: bool = True, kwargs=None,
           domain: str = "normal") -> tuple[Sample, ...]:
    kw = dict(kwargs or {})
    samples = [Sample("typical", (T((4, 8, 16), domain),), kw),
               Sample("odd257", (T((3, 5, 257), domain),), kw),
               Sample("noncontig", (T((4, 9, 7), domain, noncontig=True),), kw)]
    if empty:
        samples.append(Sample("empty", (T((0, 8, 16), domain),), kw))
    samples += list(extra)
    samples.append(Sample("large", (T((16, 256, 256), domain),), kw, slow=True))
    return tuple(samples)


def matmul_samples(shapes: dict, *, kwargs=None) -> tuple[Sample, ...]:
    kw = dict(kwargs or {})
    out = []
    for name, args in shapes.items():
        out.append(Sample(name, tuple(T(s) if isinstance(s, tuple) else s for s in args), kw,
                          slow=(name == "large")))
    return tuple(out)


def rounded_bound_ties(kwargs: dict) -> tuple[Sample, ...]:
    """A quarter of the inputs at 0.3 as the dtype rounds it (Note [Ties at a rounded bound])."""
    return (Sample("at_rounded_bound", (T((16, 64), "rounded_bound"),), dict(kwargs)),
            Sample("large", (T((1024, 1024), "rounded_bound"),), dict(kwargs), slow=True))


def ties(kwargs: dict | None = None) -> tuple[Sample, ...]:
    """Inputs exactly at an op's bounds (Note [Ties at a bound] in harness.ops.spec)."""
    kw = dict(kwargs or {})
    return (Sample("at_bounds", (T((16, 64), "ties"),), kw),
            Sample("at_bounds_odd257", (T((3, 257), "ties"),), kw),
            Sample("at_bounds_noncontig", (T((33, 17), "ties", noncontig=True),), kw),
            Sample("large", (T(LARGE, "ties"),), kw, slow=True))


def pad_samples(mode: str) -> tuple[Sample, ...]:
    return (Sample("typical", (T((2, 3, 8, 8)),), {"pad": (1, 2, 2, 1), "mode": mode}),
            Sample("1d", (T((2, 3, 17)),), {"pad": (3, 2), "mode": mode}),
            Sample("odd257", (T((1, 2, 257)),), {"pad": (2, 5), "mode": mode}),
            Sample("noncontig", (T((2, 3, 9, 7), noncontig=True),),
                   {"pad": (1, 1, 2, 2), "mode": mode}),
            Sample("large", (T((4, 16, 128, 128)),), {"pad": (1, 1, 1, 1), "mode": mode},
                   slow=True))


# ------------------------------------------------------------------------ functions
# Small adapters so every row calls fn(*args, **kwargs); kept here, named, not lambdas
# scattered through rows, so tracebacks say what ran.

def _batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5):
    return F.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=eps)


def _layer_norm(x, w, b, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def _rms_norm(x, w, eps=1e-6):
    return torch_api("nn.functional.rms_norm")(x, (x.shape[-1],), w, eps)  # torch >= 2.4


def _clip_grad_norm(grads, max_norm=1.0, norm_type=2.0, **kw):
    params = [torch.nn.Parameter(torch.empty_like(g)) for g in grads]
    for param, grad in zip(params, grads):
        param.grad = grad.clone()
    total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type, **kw)
    return (total, *[p.grad for p in params])


def _clip_grad_value(grads, clip_value=0.5, **kw):
    params = [torch.nn.Parameter(torch.empty_like(g)) for g in grads]
    for param, grad in zip(params, grads):
        param.grad = grad.clone()
    torch.nn.utils.clip_grad_value_(params, clip_value, **kw)
    return tuple(p.grad for p in params)


def _inplace(name):
    fn = getattr(torch, name)

    def run(first, *rest, **kw):
        fn(first, *rest, **kw)
        return tuple(first)
    run.__name__ = name
    return run


def _tuple(fn):
    def run(*args, **kw):
        return tuple(fn(*args, **kw))
    run.__name__ = getattr(fn, "__name__", "op")
    return run


def _getitem_adv(x, idx):
    return x[idx]


def _getitem_slice(x):
    return x[:, 1::3]


def _permute(x):
    return x.permute(2, 0, 1).contiguous()


def _transpose(x):
    return x.transpose(0, 1).contiguous()


def _expand(x):
    return x.unsqueeze(1).expand(-1, 3, *x.shape[1:]).contiguous()


def _embedding_bag(idx, weight, mode="mean"):
    return F.embedding_bag(idx, weight, mode=mode)


def _sdpa(q, k, v, attn_mask=None, is_causal=False, **kw):
    return F.scaled_dot_product_attention(q, k, v, attn_mask, is_causal=is_causal, **kw)


def _prelu(x, w):
    return F.prelu(x, w)


def _unflatten_fold(x, output_size=(8, 8), kernel_size=3, **kw):
    return F.fold(x, output_size, kernel_size, **kw)


# --------------------------------------------------------------------------- catalog

E = OpEntry

CATALOG: tuple[OpEntry, ...] = (
    # ---- convolution
    E("conv1d", F.conv1d, conv(1)),
    E("conv2d", F.conv2d, conv(2)),
    E("conv3d", F.conv3d, conv(3)),
    E("conv_transpose1d", F.conv_transpose1d, conv(1, True)),
    E("conv_transpose2d", F.conv_transpose2d, conv(2, True)),
    E("conv_transpose3d", F.conv_transpose3d, conv(3, True)),
    # ---- matrix multiplication (ULP standard)
    E("linear", F.linear, matmul_samples({
        "typical": ((16, 64), (32, 64), (32,)), "odd257": ((3, 257), (5, 257), (5,)),
        "nobias": ((8, 4, 33), (17, 33), None), "empty": ((0, 64), (32, 64), (32,)),
        "large": ((1024, 1024), (64, 1024), (64,))})),
    E("matmul", torch.matmul, matmul_samples({
        "typical": ((16, 64), (64, 32)), "odd257": ((5, 257), (257, 3)),
        "bcast": ((4, 8, 16), (16, 12)), "batched_bcast": ((2, 1, 8, 16), (3, 16, 4)),
        "vec": ((33,), (33, 7)), "empty": ((0, 64), (64, 8)),
        "large": ((1024, 1024), (1024, 16))})),
    E("mm", torch.mm, matmul_samples({
        "typical": ((16, 64), (64, 32)), "odd257": ((5, 257), (257, 3)),
        "square": ((33, 33), (33, 33)), "empty": ((0, 64), (64, 8)),
        "large": ((1024, 1024), (1024, 16))}) + (
        Sample("noncontig", (T((16, 64), noncontig=True), T((64, 32))), {}),)),
    E("bmm", torch.bmm, matmul_samples({
        "typical": ((4, 16, 32), (4, 32, 8)), "odd257": ((2, 5, 257), (2, 257, 3)),
        "empty": ((0, 4, 8), (0, 8, 4)), "large": ((64, 128, 128), (64, 128, 16))}) + (
        Sample("noncontig", (T((4, 16, 32), noncontig=True), T((4, 32, 8))), {}),)),
    E("addmm", torch.addmm, matmul_samples({
        "typical": ((16, 32), (16, 64), (64, 32)), "bcast_bias": ((32,), (16, 64), (64, 32)),
        "odd257": ((5, 3), (5, 257), (257, 3)), "empty": ((0, 8), (0, 64), (64, 8)),
        "large": ((1024, 16), (1024, 1024), (1024, 16))}) + (
        Sample("alpha_beta", (T((16, 32)), T((16, 64)), T((64, 32))), {"beta": 0.5, "alpha": 2.0}),)),
    E("baddbmm", torch.baddbmm, matmul_samples({
        "typical": ((4, 16, 8), (4, 16, 32), (4, 32, 8)),
        "odd257": ((2, 5, 3), (2, 5, 257), (2, 257, 3)),
        "bcast": ((16, 8), (4, 16, 32), (4, 32, 8)),
        "large": ((64, 128, 16), (64, 128, 128), (64, 128, 16))}) + (
        Sample("alpha_beta", (T((4, 16, 8)), T((4, 16, 32)), T((4, 32, 8))),
               {"beta": 0.5, "alpha": 0.25}),)),
    E("addbmm", torch.addbmm, matmul_samples({
        "typical": ((16, 8), (4, 16, 32), (4, 32, 8)), "odd257": ((5, 3), (2, 5, 257), (2, 257, 3)),
        "large": ((128, 16), (64, 128, 128), (64, 128, 16))})),
    E("addmv", torch.addmv, matmul_samples({
        "typical": ((16,), (16, 64), (64,)), "odd257": ((5,), (5, 257), (257,)),
        "large": ((1024,), (1024, 1024), (1024,))})),
    E("mv", torch.mv, matmul_samples({
        "typical": ((16, 64), (64,)), "odd257": ((5, 257), (257,)),
        "empty": ((0, 64), (64,)), "large": ((1024, 1024), (1024,))})),
    E("dot", torch.dot, matmul_samples({
        "typical": ((64,), (64,)), "odd257": ((257,), (257,)), "large": ((1 << 20,), (1 << 20,))})),
    E("einsum", torch.einsum, (
        Sample("bmm", ("bij,bjk->bik", T((4, 8, 16)), T((4, 16, 8)))),
        Sample("attention", ("bhqd,bhkd->bhqk", T((2, 3, 8, 16)), T((2, 3, 9, 16)))),
        Sample("rowdot", ("ij,ij->i", T((16, 64)), T((16, 64)))),
        Sample("outer", ("i,j->ij", T((17,)), T((9,)))),
        Sample("trace_like", ("ii->i", T((33, 33)),)),
        Sample("large", ("ij,jk->ik", T((1024, 1024)), T((1024, 8))), slow=True))),
    E("outer", torch.outer, (
        Sample("typical", (T((16,)), T((64,)))), Sample("odd257", (T((257,)), T((3,)))),
        Sample("empty", (T((0,)), T((5,)))), Sample("large", (T((1024,)), T((1024,))), slow=True))),
    E("tensordot", torch.tensordot, (
        Sample("typical", (T((4, 8, 16)), T((8, 16, 5))), {"dims": 2}),
        Sample("odd257", (T((3, 257)), T((257, 4))), {"dims": 1}),
        Sample("large", (T((1024, 1024)), T((1024, 4))), {"dims": 1}, slow=True))),
    E("scaled_dot_product_attention", _sdpa, (
        Sample("typical", (T((2, 4, 16, 32)), T((2, 4, 16, 32)), T((2, 4, 16, 32)))),
        Sample("causal", (T((2, 4, 16, 32)), T((2, 4, 16, 32)), T((2, 4, 16, 32))),
               {"is_causal": True}),
        Sample("odd", (T((1, 3, 17, 24)), T((1, 3, 33, 24)), T((1, 3, 33, 8)))),
        Sample("large", (T((4, 8, 256, 128)), T((4, 8, 256, 128)), T((4, 8, 256, 128))),
               slow=True))),
    # ---- pooling
    E("max_pool1d", F.max_pool1d, pool(1)),
    E("max_pool2d", F.max_pool2d, pool(2)),
    E("max_pool3d", F.max_pool3d, pool(3)),
    E("avg_pool1d", F.avg_pool1d, pool(1)),
    E("avg_pool2d", F.avg_pool2d, pool(2)),
    E("avg_pool3d", F.avg_pool3d, pool(3), dtypes=F32,
      note="CPU has no fp16/bf16 avg_pool3d kernel"),
    E("lp_pool2d", F.lp_pool2d, tuple(Sample(s.name, tuple(
        T(a.shape, "positive", noncontig=a.noncontig) for a in s.args),
        {"norm_type": 2.0, **s.kwargs}, s.slow) for s in pool(2) if "padding" not in s.kwargs)),
    E("adaptive_avg_pool1d", F.adaptive_avg_pool1d, adaptive(1, 5)),
    E("adaptive_avg_pool2d", F.adaptive_avg_pool2d, adaptive(2, (4, 5))),
    E("adaptive_avg_pool3d", F.adaptive_avg_pool3d, adaptive(3, (2, 3, 4))),
    E("adaptive_max_pool1d", F.adaptive_max_pool1d, adaptive(1, 5)),
    E("adaptive_max_pool2d", F.adaptive_max_pool2d, adaptive(2, (4, 5))),
    # ---- normalisation
    E("batch_norm", _batch_norm, (
        Sample("train_2d", (T((8, 16, 5, 5)), None, None, T((16,)), T((16,))), {"training": True}),
        Sample("train_1d", (T((32, 16)), None, None, T((16,)), T((16,))), {"training": True}),
        Sample("train_odd_channels", (T((4, 7, 9, 9)), T((7,), grad=False),
                                      T((7,), "positive", grad=False), T((7,)), T((7,))),
               {"training": True}),
        Sample("eval_running_stats", (T((8, 16, 5, 5)), T((16,), grad=False),
                                      T((16,), "positive", grad=False), T((16,)), T((16,))),
               {"training": False}),
        Sample("noncontig", (T((8, 16, 5, 7), noncontig=True), None, None, T((16,)), T((16,))),
               {"training": True}),
        Sample("noaffine_3d", (T((4, 6, 4, 5, 3)), None, None, None, None), {"training": True}),
        Sample("large", (T((16, 64, 32, 32)), None, None, T((64,)), T((64,))),
               {"training": True}, slow=True))),
    E("layer_norm", _layer_norm, (
        Sample("typical", (T((16, 64)), T((64,)), T((64,)))),
        Sample("odd257", (T((3, 257)), T((257,)), T((257,)))),
        Sample("3d", (T((4, 9, 32)), T((32,)), T((32,)))),
        Sample("noncontig", (T((33, 17), noncontig=True), T((17,)), T((17,)))),
        Sample("noaffine", (T((16, 64)), None, None)),
        Sample("empty", (T((0, 64)), T((64,)), T((64,)))),
        Sample("large", (T(LARGE), T((1024,)), T((1024,))), slow=True))),
    E("rms_norm", _rms_norm, (
        Sample("typical", (T((16, 64)), T((64,)))),
        Sample("odd257", (T((3, 257)), T((257,)))),
        Sample("noncontig", (T((33, 17), noncontig=True), T((17,)))),
        Sample("noweight", (T((4, 9, 32)), None)),
        Sample("empty", (T((0, 64)), T((64,)))),
        Sample("large", (T(LARGE), T((1024,))), slow=True))),
    E("group_norm", F.group_norm, (
        Sample("typical", (T((4, 12, 6, 6)), 3, T((12,)), T((12,)))),
        Sample("odd", (T((2, 15, 7, 5)), 5, T((15,)), T((15,)))),
        Sample("instance_like", (T((2, 6, 8)), 6, T((6,)), T((6,)))),
        Sample("noncontig", (T((4, 8, 5, 7), noncontig=True), 2, T((8,)), T((8,)))),
        Sample("large", (T((16, 64, 32, 32)), 8, T((64,)), T((64,))), slow=True))),
    E("instance_norm", F.instance_norm, (
        Sample("typical", (T((4, 6, 8, 8)),), {}),
        Sample("odd", (T((2, 5, 7, 9)),), {}),
        Sample("1d", (T((4, 6, 33)),), {}),
        Sample("noncontig", (T((2, 6, 5, 7), noncontig=True),), {}),
        Sample("large", (T((16, 64, 32, 32)),), {}, slow=True))),
    E("local_response_norm", F.local_response_norm, (
        Sample("typical", (T((2, 8, 6, 6)), 3)), Sample("odd", (T((1, 7, 5, 9)), 5)),
        Sample("noncontig", (T((2, 8, 6, 7), noncontig=True), 3)),
        Sample("large", (T((16, 64, 32, 32)), 5), slow=True)), dtypes=F32,
      note="built on avg_pool3d, which the CPU lacks in fp16/bf16"),
    E("normalize", F.normalize, unary(empty=True, kwargs={"dim": -1})),
    # ---- softmax family
    E("softmax", torch.softmax, softmaxish()),
    E("log_softmax", torch.log_softmax, softmaxish()),
    E("softmin", F.softmin, softmaxish()),
    E("logsumexp", torch.logsumexp, reduction(keepdim=True)),
    # ---- activations
    E("relu", F.relu, unary()),
    E("relu6", F.relu6, unary("wide")),
    E("leaky_relu", F.leaky_relu, unary(kwargs={"negative_slope": 0.01})),
    E("hardtanh", F.hardtanh, unary("wide")),
    E("threshold", F.threshold, unary(kwargs={"threshold": 0.1, "value": -1.0})),
    E("gelu", F.gelu, unary("wide")),
    E("gelu_tanh", F.gelu, unary("wide", kwargs={"approximate": "tanh"})),
    E("silu", F.silu, unary("wide")),
    E("sigmoid", torch.sigmoid, unary("wide")),
    E("tanh", torch.tanh, unary("wide")),
    E("hardswish", F.hardswish, unary("wide")),
    E("hardsigmoid", F.hardsigmoid, unary("wide")),
    E("elu", F.elu, unary("wide")),
    E("selu", F.selu, unary("wide")),
    E("celu", F.celu, unary("wide", kwargs={"alpha": 0.5})),
    E("softplus", F.softplus, unary("wide")),
    E("softplus_beta", F.softplus, unary("wide", kwargs={"beta": 2.0, "threshold": 10.0})),
    E("mish", F.mish, unary("wide")),
    E("softsign", F.softsign, unary("wide")),
    E("tanhshrink", F.tanhshrink, unary()),
    E("logsigmoid", F.logsigmoid, unary("wide")),
    E("hardshrink", F.hardshrink, unary()),
    E("softshrink", F.softshrink, unary()),
    E("rrelu_eval", F.rrelu, unary(kwargs={"training": False})),
    E("prelu", _prelu, (
        Sample("typical", (T((8, 16, 5)), T((16,)))),
        Sample("shared", (T((16, 64)), T((1,)))),
        Sample("odd257", (T((3, 257)), T((257,)))),
        Sample("noncontig", (T((8, 7, 6), noncontig=True), T((7,)))),
        Sample("large", (T((16, 64, 1024)), T((64,))), slow=True))),
    E("glu", F.glu, (
        Sample("typical", (T((16, 64)),), {"dim": -1}),
        Sample("dim0", (T((16, 63)),), {"dim": 0}),
        Sample("odd", (T((3, 514)),), {"dim": -1}),
        Sample("noncontig", (T((34, 17), noncontig=True),), {"dim": 0}),
        Sample("large", (T(LARGE),), {"dim": -1}, slow=True))),
    # ---- losses
    E("cross_entropy", F.cross_entropy, (
        Sample("typical", (T((16, 10)), I((16,), 10))),
        Sample("label_smoothing", (T((16, 10)), I((16,), 10)), {"label_smoothing": 0.1}),
        Sample("ignore_index", (T((64, 10)), I((64,), 10)), {"ignore_index": 3}),
        Sample("smoothing_and_ignore", (T((64, 10)), I((64,), 10)),
               {"ignore_index": 3, "label_smoothing": 0.2}),
        Sample("class_weights", (T((16, 10)), I((16,), 10), T((10,), "positive", grad=False))),
        Sample("prob_targets", (T((16, 10)), T((16, 10), "prob", grad=False))),
        Sample("odd257_classes", (T((5, 257)), I((5,), 257))),
        Sample("segmentation", (T((2, 5, 6, 6)), I((2, 6, 6), 5))),
        Sample("none", (T((16, 10)), I((16,), 10)), {"reduction": "none"}),
        Sample("empty_sum", (T((0, 10)), I((0,), 10)), {"reduction": "sum"}),
        Sample("large_logits", (T((16, 10), "large"), I((16,), 10))),
        Sample("large", (T((1024, 1024)), I((1024,), 1024)), slow=True))),
    E("nll_loss", F.nll_loss, (
        Sample("typical", (T((16, 10)), I((16,), 10))),
        Sample("ignore_index", (T((64, 10)), I((64,), 10)), {"ignore_index": 2}),
        Sample("weights", (T((16, 10)), I((16,), 10), T((10,), "positive", grad=False))),
        Sample("sum", (T((16, 10)), I((16,), 10)), {"reduction": "sum"}),
        Sample("odd257", (T((5, 257)), I((5,), 257))),
        Sample("2d", (T((2, 5, 6, 6)), I((2, 6, 6), 5))),
        Sample("large", (T((1024, 1024)), I((1024,), 1024)), slow=True))),
    E("mse_loss", F.mse_loss, loss()),
    E("l1_loss", F.l1_loss, loss()),
    E("smooth_l1_loss", F.smooth_l1_loss, loss(extra=(
        Sample("beta", (T((16, 64)), T((16, 64), grad=False)), {"beta": 0.5}),))),
    E("huber_loss", F.huber_loss, loss(extra=(
        Sample("delta", (T((16, 64)), T((16, 64), grad=False)), {"delta": 0.3}),))),
    E("binary_cross_entropy", F.binary_cross_entropy, loss("prob", "prob")),
    E("binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits,
      loss("wide", "prob", extra=(
          Sample("weight", (T((16, 64)), T((16, 64), "prob", grad=False),
                            T((64,), "positive", grad=False))),))),
    E("kl_div", F.kl_div, tuple(  # 'batchmean' unless a sample says otherwise ('mean' warns);
        # the large sample keeps 'none': a 1M-element fp16 sum overflows before the division
        Sample(s.name, s.args, {"reduction": "none" if s.slow else "batchmean", **s.kwargs},
               s.slow)
        for s in loss("normal", "prob", extra=(
            Sample("log_target", (T((16, 64)), T((16, 64), grad=False)),
                   {"log_target": True}),)))),
    E("soft_margin_loss", F.soft_margin_loss, loss("normal", "nonzero")),
    E("poisson_nll_loss", F.poisson_nll_loss, loss("normal", "positive")),
    E("gaussian_nll_loss", F.gaussian_nll_loss, (
        Sample("typical", (T((16, 64)), T((16, 64), grad=False), T((16, 64), "positive"))),
        Sample("odd257", (T((3, 257)), T((3, 257), grad=False), T((3, 257), "positive"))),
        Sample("sum", (T((16, 64)), T((16, 64), grad=False), T((16, 64), "positive")),
               {"reduction": "sum"}),
        Sample("large", (T(LARGE), T(LARGE, grad=False), T(LARGE, "positive")), slow=True))),
    E("margin_ranking_loss", F.margin_ranking_loss, (
        Sample("typical", (T((64,)), T((64,)), T((64,), "nonzero", grad=False)), {"margin": 0.1}),
        Sample("odd257", (T((257,)), T((257,)), T((257,), "nonzero", grad=False))),
        # one size in each band (Note [Size bands of every row]: its samples are 1-d, so the
        # row gets none derived), in fp32
        *(Sample(f"band{n}", (T((n,)), T((n,)), T((n,), "nonzero", grad=False)),
                 dtypes=("float32",)) for n in BAND_SIZES),
        Sample("large", (T((1 << 20,)), T((1 << 20,)), T((1 << 20,), "nonzero", grad=False)),
               slow=True))),
    E("hinge_embedding_loss", F.hinge_embedding_loss, loss("normal", "nonzero")),
    E("cosine_embedding_loss", F.cosine_embedding_loss, (
        Sample("typical", (T((16, 64)), T((16, 64)), T((16,), "nonzero", grad=False))),
        Sample("odd257", (T((3, 257)), T((3, 257)), T((3,), "nonzero", grad=False))),
        # N in each size band (Note [Size bands of every row]): its per-pair intermediates
        # (zeros_like, where) are N long, in fp32
        *(Sample(f"band{n}", (T((n, 2)), T((n, 2)), T((n,), "nonzero", grad=False)),
                 dtypes=("float32",)) for n in BAND_SIZES),
        Sample("large", (T(LARGE), T(LARGE), T((1024,), "nonzero", grad=False)), slow=True))),
    E("triplet_margin_loss", F.triplet_margin_loss, (
        Sample("typical", (T((16, 64)), T((16, 64)), T((16, 64)))),
        Sample("odd257", (T((3, 257)), T((3, 257)), T((3, 257)))),
        Sample("swap", (T((16, 32)), T((16, 32)), T((16, 32))), {"swap": True}),
        Sample("large", (T(LARGE), T(LARGE), T(LARGE)), slow=True))),
    E("multi_margin_loss", F.multi_margin_loss, (
        Sample("typical", (T((16, 10)), I((16,), 10))),
        Sample("odd257", (T((5, 257)), I((5,), 257))),
        Sample("large", (T((1024, 1024)), I((1024,), 1024)), slow=True)), dtypes=F32,
      note="CPU has no fp16/bf16 multi_margin_loss kernel"),
    E("multilabel_soft_margin_loss", F.multilabel_soft_margin_loss, loss("normal", "prob", empty=False)),
    # ---- elementwise math
    E("exp", torch.exp, unary("wide")),
    E("exp2", torch.exp2, unary("wide")),
    E("expm1", torch.expm1, unary()),
    E("log", torch.log, unary("positive", extra=(
        Sample("negatives", (T((16, 64)),)),
        Sample("small_positive", (T((16, 64), "prob"),))))),
    E("log2", torch.log2, unary("positive")),
    E("log10", torch.log10, unary("positive")),
    E("log1p", torch.log1p, unary("prob")),
    E("sqrt", torch.sqrt, unary("positive")),
    E("rsqrt", torch.rsqrt, unary("positive")),
    E("reciprocal", torch.reciprocal, unary("nonzero")),
    E("square", torch.square, unary()),
    E("pow", torch.pow, (
        Sample("cube", (T((16, 64)), 3)), Sample("sqrt", (T((16, 64), "positive"), 0.5)),
        Sample("odd257", (T((3, 257), "positive"), 1.7)),
        Sample("noncontig", (T((33, 17), noncontig=True), 2)),
        Sample("tensor_exp", (T((16, 64), "positive"), T((16, 64)))),
        Sample("bcast", (T((4, 1, 64), "positive"), T((1, 5, 64)))),
        Sample("empty", (T((0, 64)), 2)),
        Sample("large", (T(LARGE, "positive"), 2.5), slow=True))),
    E("sin", torch.sin, unary("wide")),
    E("cos", torch.cos, unary("wide")),
    E("tan", torch.tan, unary("unit")),
    E("asin", torch.asin, unary("unit")),
    E("acos", torch.acos, unary("unit")),
    E("atan", torch.atan, unary("wide")),
    E("sinh", torch.sinh, unary("wide")),
    E("cosh", torch.cosh, unary("wide")),
    E("asinh", torch.asinh, unary("wide")),
    E("acosh", torch.acosh, unary("above1")),
    E("atanh", torch.atanh, unary("unit")),
    E("erf", torch.erf, unary()),
    E("erfc", torch.erfc, unary()),
    E("erfinv", torch.erfinv, unary("unit")),
    E("logit", torch.logit, unary("prob")),
    E("lgamma", torch.lgamma, unary("positive")),
    E("digamma", torch.digamma, unary("positive")),
    E("abs", torch.abs, unary(), dtypes=FI),
    E("neg", torch.neg, unary(), dtypes=FI),
    E("sign", torch.sign, unary(), dtypes=FI, backward=False),
    E("floor", torch.floor, unary("wide"), backward=False),
    E("ceil", torch.ceil, unary("wide"), backward=False),
    E("round", torch.round, unary("wide"), backward=False),
    E("round_decimals", torch.round, (
        Sample("decimals2", (T((16, 64), "wide"),), {"decimals": 2}),
        Sample("decimals_neg1", (T((3, 257), "large"),), {"decimals": -1}),
        Sample("large", (T(LARGE, "wide"),), {"decimals": 2}, slow=True)), backward=False,
      note="x * 10^d rounded then divided: not a single rounding, so relative, not exact"),
    E("trunc", torch.trunc, unary("wide"), backward=False),
    E("frac", torch.frac, unary("wide")),
    E("clamp", torch.clamp, unary(kwargs={"min": -0.5, "max": 0.75}), dtypes=FLOATS, note="bounds representable in every dtype, so the result is exact"),
    # inputs equal to the bound, forward and backward (Note [Ties at a bound])
    E("clamp_tie", torch.clamp, ties({"min": -0.5, "max": 0.75})),
    E("clamp_min_tie", torch.clamp_min, ties({"min": -0.5})),
    E("clamp_min_rounded_bound", torch.clamp_min, rounded_bound_ties({"min": 0.3}),
      note="Note [Ties at a rounded bound]: the gradient at the DUT's "
      "own tie shows against the reference and moves when the convention changes"),
    E("clamp_rounded_bound", torch.clamp, rounded_bound_ties({"min": 0.3, "max": 0.75}),
      note="Note [Ties at a rounded bound]"),
    E("clamp_max_tie", torch.clamp_max, ties({"max": 0.75})),
    E("hardtanh_tie", F.hardtanh, ties({"min_val": -0.5, "max_val": 0.75})),
    E("relu6_tie", F.relu6, ties()),
    E("relu_tie", F.relu, ties()),
    E("nan_to_num", torch.nan_to_num, unary()),
    E("add", torch.add, binary(), dtypes=FI),
    E("add_alpha", torch.add, binary(kwargs={"alpha": 0.5})),
    E("sub", torch.sub, binary(), dtypes=FI),
    E("sub_alpha", torch.sub, binary(kwargs={"alpha": 0.5})),
    E("mul", torch.mul, binary(), dtypes=FI),
    E("div", torch.div, binary("normal", "nonzero")),
    E("div_floor", torch.div, binary("wide", "nonzero", kwargs={"rounding_mode": "floor"}),
      dtypes=FI, backward=False),
    E("maximum", torch.maximum, binary(), dtypes=FI),
    E("minimum", torch.minimum, binary(), dtypes=FI),
    E("fmax", torch.fmax, binary()),
    E("fmin", torch.fmin, binary()),
    E("fmod", torch.fmod, binary("wide", "nonzero", grad_b=False), dtypes=FI),
    E("remainder", torch.remainder, binary("wide", "nonzero", grad_b=False), dtypes=FI),
    E("atan2", torch.atan2, binary()),
    E("hypot", torch.hypot, binary()),
    E("xlogy", torch.xlogy, binary("normal", "positive")),
    E("addcmul", torch.addcmul, ternary(kwargs={"value": 0.5})),
    E("addcdiv", torch.addcdiv, ternary("normal", "normal", "nonzero", kwargs={"value": 0.5})),
    E("lerp", torch.lerp, ternary("normal", "normal", "prob")),
    # ---- comparisons (bool outputs: exact)
    E("eq", torch.eq, binary(), dtypes=FI, backward=False),
    E("ne", torch.ne, binary(), dtypes=FI, backward=False),
    E("lt", torch.lt, binary(), dtypes=FI, backward=False),
    E("le", torch.le, binary(), dtypes=FI, backward=False),
    E("gt", torch.gt, binary(), dtypes=FI, backward=False),
    E("ge", torch.ge, binary(), dtypes=FI, backward=False),
    E("isclose", torch.isclose, binary(), backward=False),
    # ---- reductions
    E("sum", torch.sum, reduction(), dtypes=FI),
    # a global average pool (mean over H, W of NCHW): its first 4-d sample, so the layout
    # samples run it channels_last too (faults mutate: mean.dim wrong only there survived)
    E("mean", torch.mean, (*reduction(), Sample("spatial", (T((2, 8, 4, 5)),), {"dim": (2, 3)}))),
    # the NaN-ignoring twins of sum / mean / median: without a NaN they equal their twin,
    # so only the special-value samples (harness.ops.specials) tell them apart
    E("nansum", torch.nansum, reduction()),
    E("nanmean", torch.nanmean, reduction()),
    E("var", torch.var, reduction()),
    E("std", torch.std, reduction()),
    E("var_unbiased0", torch.var, reduction(correction=0)),
    E("norm", torch.linalg.vector_norm, reduction()),
    E("norm_l1", torch.linalg.vector_norm, reduction(ord=1)),
    E("norm_inf", torch.linalg.vector_norm, reduction("distinct", ord=float("inf"))),
    E("amax", torch.amax, reduction("distinct"), dtypes=FI),
    E("amin", torch.amin, reduction("distinct"), dtypes=FI),
    E("max_dim", torch.max, reduction("distinct", all_kwargs={"dim": 0}), dtypes=FI),
    E("min_dim", torch.min, reduction("distinct", all_kwargs={"dim": 0}), dtypes=FI),
    E("argmax", torch.argmax, reduction("distinct", all_kwargs={}), dtypes=FI, backward=False),
    E("argmin", torch.argmin, reduction("distinct", all_kwargs={}), dtypes=FI, backward=False),
    E("prod", torch.prod, (
        Sample("typical", (T((16, 32), "near1"),), {"dim": 1}),
        Sample("odd257", (T((3, 257), "near1"),), {"dim": 0}),
        Sample("noncontig", (T((33, 17), "near1", noncontig=True),), {"dim": 0}),
        Sample("all", (T((4, 8), "near1"),), {}),
        Sample("empty", (T((0, 16)),), {"dim": 1}),
        Sample("large", (T(LARGE, "near1"),), {"dim": 0}, slow=True))),
    E("cumsum", torch.cumsum, scan(), dtypes=FI),
    E("cumprod", torch.cumprod, scan("near1")),
    E("cummax", torch.cummax, scan("distinct")),
    E("logcumsumexp", torch.logcumsumexp, scan()),
    E("count_nonzero", torch.count_nonzero, reduction(keepdim=False), dtypes=FI, backward=False),
    E("all", torch.all, reduction(keepdim=False, all_kwargs={}), dtypes=FI, backward=False),
    E("any", torch.any, reduction(keepdim=False, all_kwargs={}), dtypes=FI, backward=False),
    # ---- indexing
    E("gather", torch.gather, (
        Sample("typical", (T((16, 64)), 1, I((16, 10), 64))),
        Sample("dim0", (T((16, 64)), 0, I((5, 64), 16))),
        Sample("odd257", (T((3, 257)), 1, I((3, 300), 257))),
        Sample("noncontig", (T((33, 17), noncontig=True), 1, I((33, 4), 17))),
        Sample("empty", (T((16, 64)), 1, I((16, 0), 64))),
        Sample("large", (T(LARGE), 1, I((1024, 1024), 1024)), slow=True)),
      dtypes=FI),
    E("take_along_dim", torch.take_along_dim, (
        Sample("typical", (T((16, 64)), I((16, 10), 64)), {"dim": 1}),
        Sample("odd257", (T((3, 257)), I((3, 5), 257)), {"dim": 1}),
        Sample("large", (T(LARGE), I((1024, 1024), 1024)), {"dim": 1}, slow=True)),
      dtypes=FI),
    E("scatter", torch.scatter, (
        Sample("typical", (T((16, 64)), 1, I((16, 10), 64, unique=True), T((16, 10)))),
        Sample("odd257", (T((3, 257)), 1, I((3, 40), 257, unique=True), T((3, 40)))),
        Sample("noncontig", (T((33, 17), noncontig=True), 1, I((33, 5), 17, unique=True),
                             T((33, 5)))),
        Sample("empty", (T((16, 64)), 1, I((16, 0), 64), T((16, 0)))),
        Sample("large", (T(LARGE), 1, I((1024, 512), 1024, unique=True), T((1024, 512))),
               slow=True)), dtypes=FI),
    E("scatter_add", torch.scatter_add, (
        Sample("typical", (T((16, 64)), 1, I((16, 100), 64), T((16, 100)))),
        Sample("odd257", (T((3, 257)), 1, I((3, 300), 257), T((3, 300)))),
        Sample("dim0", (T((8, 32)), 0, I((20, 32), 8), T((20, 32)))),
        Sample("empty", (T((16, 64)), 1, I((16, 0), 64), T((16, 0)))),
        Sample("large", (T(LARGE), 1, I((1024, 1024), 1024), T((1024, 1024))), slow=True)),
      dtypes=FI),
    E("scatter_reduce", torch.scatter_reduce, (
        Sample("amax", (T((16, 64), "distinct"), 1, I((16, 50), 64), T((16, 50), "distinct"),
                        "amax")),
        Sample("mean", (T((16, 64)), 1, I((16, 50), 64), T((16, 50)), "mean")),
        Sample("sum_noself", (T((16, 64)), 1, I((16, 50), 64), T((16, 50)), "sum"),
               {"include_self": False}),
        Sample("large", (T(LARGE), 1, I((1024, 512), 1024), T((1024, 512)), "sum"), slow=True))),
    E("index_select", torch.index_select, (
        Sample("typical", (T((16, 64)), 0, I((10,), 16))),
        Sample("dim1", (T((16, 64)), 1, I((100,), 64))),
        Sample("odd257", (T((257, 3)), 0, I((300,), 257))),
        Sample("noncontig", (T((33, 17), noncontig=True), 1, I((9,), 17))),
        Sample("empty", (T((16, 64)), 0, I((0,), 16))),
        # a gather kernel's strategy changes with the source's size (faults mutate); the
        # lower bands (Note [Size bands of every row]) in fp32
        Sample("past1024", (T(((1 << 11) + 1,)), 0, I((100,), (1 << 11) + 1)),
               dtypes=("float32",)),
        Sample("past4096", (T(((1 << 13) + 1,)), 0, I((100,), (1 << 13) + 1)),
               dtypes=("float32",)),
        Sample("past65536", (T(((1 << 16) + 1,)), 0, I((100,), (1 << 16) + 1))),
        Sample("large", (T(LARGE), 0, I((1024,), 1024)), slow=True)),
      dtypes=FI),
    E("index_add", torch.index_add, (
        Sample("typical", (T((16, 64)), 0, I((20,), 16), T((20, 64)))),
        Sample("alpha", (T((16, 64)), 1, I((30,), 64), T((16, 30))), {"alpha": 0.5}),
        Sample("odd257", (T((257, 3)), 0, I((300,), 257), T((300, 3)))),
        Sample("empty", (T((16, 64)), 0, I((0,), 16), T((0, 64)))),
        Sample("large", (T(LARGE), 0, I((2048,), 1024), T((2048, 1024))), slow=True)),
      dtypes=FI),
    E("index_copy", torch.index_copy, (
        Sample("typical", (T((16, 64)), 0, I((10,), 16, unique=True), T((10, 64)))),
        Sample("odd257", (T((257, 3)), 0, I((100,), 257, unique=True), T((100, 3)))),
        Sample("large", (T(LARGE), 0, I((512,), 1024, unique=True), T((512, 1024))), slow=True)),
      dtypes=FI),
    E("index_put", torch.index_put, (
        Sample("typical", (T((16, 64)), (I((10,), 16, unique=True),), T((10, 64)))),
        Sample("accumulate", (T((16, 64)), (I((30,), 16),), T((30, 64))), {"accumulate": True}),
        Sample("large", (T(LARGE), (I((512,), 1024, unique=True),), T((512, 1024))), slow=True)),
      dtypes=FLOATS),
    E("getitem_advanced", _getitem_adv, (
        Sample("typical", (T((16, 64)), I((10,), 16))),
        Sample("odd257", (T((257, 3)), I((300,), 257))),
        Sample("2d_index", (T((16, 64)), I((4, 5), 16))),
        Sample("large", (T(LARGE), I((1024,), 1024)), slow=True)), dtypes=FI),
    E("getitem_slice", _getitem_slice, (
        Sample("typical", (T((16, 64)),)), Sample("odd257", (T((3, 257)),)),
        Sample("noncontig", (T((33, 17), noncontig=True),)), Sample("empty", (T((0, 64)),)),
        Sample("large", (T(LARGE),), slow=True)), dtypes=FI),
    E("masked_fill", torch.masked_fill, (
        Sample("typical", (T((16, 64)), M((16, 64)), -1024.0)),
        Sample("bcast_mask", (T((4, 16, 64)), M((16, 64)), 0.0)),
        Sample("odd257", (T((3, 257)), M((3, 257)), 2.5)),
        Sample("noncontig", (T((33, 17), noncontig=True), M((33, 17)), -3.0)),
        Sample("empty", (T((0, 64)), M((0, 64)), 1.0)),
        Sample("large", (T(LARGE), M(LARGE), 0.0), slow=True)), dtypes=FI),
    E("masked_select", torch.masked_select, (
        Sample("typical", (T((16, 64)), M((16, 64)))),
        Sample("bcast_mask", (T((4, 16, 64)), M((16, 64)))),
        Sample("odd257", (T((3, 257)), M((3, 257)))),
        # one size in each band (Note [Size bands of every row]: a mask is no T, so the
        # row gets none derived), in fp32
        *(Sample(f"band{n}", (T((n,)), M((n,))), dtypes=("float32",)) for n in BAND_SIZES),
        Sample("large", (T(LARGE), M(LARGE)), slow=True)), dtypes=FI),
    E("where", torch.where, (
        Sample("typical", (M((16, 64)), T((16, 64)), T((16, 64)))),
        Sample("bcast", (M((4, 1, 64)), T((1, 5, 64)), T((64,)))),
        Sample("odd257", (M((3, 257)), T((3, 257)), T((3, 257)))),
        Sample("noncontig", (M((33, 17)), T((33, 17), noncontig=True), T((33, 17)))),
        Sample("empty", (M((0, 64)), T((0, 64)), T((0, 64)))),
        Sample("large", (M(LARGE), T(LARGE), T(LARGE)), slow=True)), dtypes=FI),
    E("embedding", F.embedding, (
        Sample("typical", (I((8, 12), 100), T((100, 32)))),
        Sample("padding_idx", (I((8, 12), 20), T((20, 32))), {"padding_idx": 0}),
        Sample("odd257", (I((5, 7), 257), T((257, 33)))),
        Sample("empty", (I((0, 12), 100), T((100, 32)))),
        Sample("large", (I((64, 512), 30000), T((30000, 64))), slow=True))),
    E("embedding_bag", _embedding_bag, (
        Sample("mean", (I((4, 5), 100), T((100, 32))), {"mode": "mean"}),
        Sample("sum", (I((4, 5), 100), T((100, 32))), {"mode": "sum"}),
        Sample("max", (I((4, 5), 100, unique=True), T((100, 32), "distinct")), {"mode": "max"}),
        Sample("odd257", (I((3, 9), 257), T((257, 17))), {"mode": "mean"}),
        # a frozen table (inference, a frozen embedding) takes the forward-only kernel,
        # here with 2049 indices and 6400 weights: past the 2^11 and 2^12 bounds where
        # kernels change strategy
        Sample("frozen", (I((683, 3), 200), T((200, 32), grad=False)), {"mode": "mean"}),
        # and a frozen table that is a view into a larger buffer (a shard of a fused one)
        Sample("frozen_offset", (I((8, 3), 200), T((200, 32), grad=False, layout="offset")),
               {"mode": "sum"}),
        Sample("large", (I((256, 64), 30000), T((30000, 64))), {"mode": "sum"}, slow=True))),
    E("one_hot", F.one_hot, (
        Sample("typical", (I((16,), 10), 10)), Sample("odd257", (I((3, 7), 257), 257)),
        Sample("empty", (I((0,), 10), 10)), Sample("large", (I((4096,), 300), 300), slow=True)),
      dtypes=("int64",), backward=False),
    # ---- shape / layout
    E("cat", torch.cat, (
        Sample("typical", ([T((4, 16)), T((6, 16)), T((1, 16))],), {"dim": 0}),
        Sample("dim1", ([T((4, 16)), T((4, 3))],), {"dim": 1}),
        Sample("odd257", ([T((3, 257)), T((3, 257))],), {"dim": -1}),
        Sample("noncontig", ([T((9, 7), noncontig=True), T((9, 7))],), {"dim": 0}),
        Sample("with_empty", ([T((0, 16)), T((3, 16))],), {"dim": 0}),
        Sample("large", ([T((512, 1024)), T((512, 1024))],), {"dim": 0}, slow=True)),
      dtypes=FI),
    E("stack", torch.stack, (
        Sample("typical", ([T((4, 16)), T((4, 16)), T((4, 16))],), {"dim": 0}),
        Sample("dim_last", ([T((4, 16)), T((4, 16))],), {"dim": -1}),
        Sample("odd257", ([T((3, 257)), T((3, 257))],), {"dim": 1}),
        Sample("noncontig", ([T((9, 7), noncontig=True), T((9, 7))],), {"dim": 0}),
        Sample("empty", ([T((0, 16)), T((0, 16))],), {"dim": 0}),
        Sample("large", ([T((512, 1024)), T((512, 1024))],), {"dim": 0}, slow=True)),
      dtypes=FI),
    E("permute_contiguous", _permute, layout(), dtypes=FI),
    E("transpose_contiguous", _transpose, layout(), dtypes=FI),
    E("reshape", torch.reshape, layout(kwargs={"shape": (-1,)}), dtypes=FI),
    E("flatten", torch.flatten, layout(kwargs={"start_dim": 1}), dtypes=FI),
    E("flip", torch.flip, layout(kwargs={"dims": (0, 2)}), dtypes=FI),
    E("roll", torch.roll, layout(kwargs={"shifts": (3, -1), "dims": (2, 0)}), dtypes=FI),
    E("movedim", torch.movedim, layout(kwargs={"source": 0, "destination": -1}), dtypes=FI),
    E("expand_contiguous", _expand, layout(), dtypes=FI),
    E("repeat", torch.Tensor.repeat, (
        Sample("typical", (T((4, 8, 16)), 2, 1, 3)), Sample("odd257", (T((3, 257)), 3, 2)),
        Sample("empty", (T((0, 16)), 2, 2)), Sample("large", (T((256, 1024)), 4, 1), slow=True)),
      dtypes=FI),
    E("tile", torch.tile, (
        Sample("typical", (T((4, 8, 16)), (2, 1, 3))), Sample("odd257", (T((3, 257)), (3,))),
        Sample("large", (T((256, 1024)), (4, 1)), slow=True)), dtypes=FI),
    E("repeat_interleave", torch.repeat_interleave, (
        Sample("typical", (T((4, 16)), 3), {"dim": 1}), Sample("odd257", (T((3, 257)), 2), {"dim": 0}),
        Sample("large", (T((256, 1024)), 4), {"dim": 0}, slow=True)), dtypes=FI),
    E("split", _tuple(torch.split), layout(
        (Sample("dim0", (T((9, 4, 5)),), {"split_size_or_sections": 3, "dim": 0}),),
        kwargs={"split_size_or_sections": 3, "dim": 1}), dtypes=FI),
    E("chunk", _tuple(torch.chunk), layout(kwargs={"chunks": 3, "dim": -1}), dtypes=FI),
    E("unbind", _tuple(torch.unbind), layout(kwargs={"dim": 1}, empty=False), dtypes=FI),
    E("narrow", torch.narrow, layout(kwargs={"dim": 1, "start": 1, "length": 3}), dtypes=FI),
    E("squeeze_unsqueeze", torch.unsqueeze, layout(kwargs={"dim": 1}), dtypes=FI),
    E("tril", torch.tril, layout(kwargs={"diagonal": -1}), dtypes=FI),
    E("triu", torch.triu, layout(kwargs={"diagonal": 1}), dtypes=FI),
    E("diagonal", torch.diagonal, layout(kwargs={"dim1": 1, "dim2": 2}), dtypes=FI),
    E("clone", torch.clone, layout(), dtypes=FI),
    E("to_float32", torch.Tensor.float, layout()),
    E("pad_constant", F.pad, pad_samples("constant"), dtypes=FI),
    E("pad_reflect", F.pad, pad_samples("reflect")),
    E("pad_replicate", F.pad, pad_samples("replicate")),
    E("pad_circular", F.pad, pad_samples("circular")),
    E("pixel_shuffle", F.pixel_shuffle, (
        Sample("typical", (T((2, 8, 5, 5)), 2)), Sample("odd", (T((1, 9, 7, 3)), 3)),
        Sample("noncontig", (T((2, 8, 5, 6), noncontig=True), 2)),
        Sample("large", (T((4, 64, 64, 64)), 2), slow=True))),
    E("pixel_unshuffle", F.pixel_unshuffle, (
        Sample("typical", (T((2, 2, 10, 10)), 2)), Sample("odd", (T((1, 3, 9, 6)), 3)),
        Sample("large", (T((4, 16, 128, 128)), 2), slow=True))),
    E("unfold_im2col", F.unfold, (
        Sample("typical", (T((2, 3, 8, 8)),), {"kernel_size": 3}),
        Sample("stride_pad", (T((2, 3, 9, 9)),), {"kernel_size": 3, "stride": 2, "padding": 1}),
        Sample("odd", (T((1, 5, 11, 7)),), {"kernel_size": (2, 3), "dilation": 2}),
        Sample("large", (T((4, 16, 64, 64)),), {"kernel_size": 3}, slow=True))),
    E("fold_col2im", _unflatten_fold, (
        Sample("typical", (T((2, 27, 36)),), {"output_size": (8, 8), "kernel_size": 3}),
        Sample("odd", (T((1, 18, 35)),), {"output_size": (6, 9), "kernel_size": (2, 3)}),
        Sample("large", (T((4, 144, 3844)),), {"output_size": (64, 64), "kernel_size": 3},
               slow=True))),
    # ---- interpolation
    E("interpolate_nearest", F.interpolate, interp(2, "nearest", False)),
    E("interpolate_nearest_exact", F.interpolate, interp(2, "nearest-exact", False)),
    E("interpolate_linear", F.interpolate, interp(1, "linear", True)),
    E("interpolate_bilinear", F.interpolate, interp(2, "bilinear", True)),
    E("interpolate_bicubic", F.interpolate, interp(2, "bicubic", True)),
    E("interpolate_trilinear", F.interpolate, interp(3, "trilinear", True)),
    E("interpolate_area", F.interpolate, tuple(
        s for s in interp(2, "area", False) if s.name != "odd_size")),
    # ---- sorting
    E("sort", torch.sort, scan("distinct"), dtypes=FI),
    E("sort_descending_stable", torch.sort, tuple(
        Sample(s.name, s.args, {**s.kwargs, "descending": True, "stable": True}, s.slow)
        for s in scan()), dtypes=FI),
    E("argsort", torch.argsort, tuple(
        Sample(s.name, s.args, {**s.kwargs, "stable": True}, s.slow) for s in scan()),
      dtypes=FI, backward=False),
    E("topk", torch.topk, (
        Sample("typical", (T((16, 64), "distinct"), 5), {"dim": 1}),
        Sample("smallest", (T((16, 64), "distinct"), 7), {"dim": 1, "largest": False}),
        Sample("odd257", (T((3, 257), "distinct"), 17), {"dim": -1}),
        Sample("noncontig", (T((33, 17), "distinct", noncontig=True), 3), {"dim": 0}),
        Sample("empty", (T((0, 64), "distinct"), 3), {"dim": 1}),
        Sample("large", (T(LARGE), 8), {"dim": 1}, slow=True)), dtypes=FI),
    E("kthvalue", torch.kthvalue, (
        Sample("typical", (T((16, 64), "distinct"), 5), {"dim": 1}),
        Sample("odd257", (T((3, 257), "distinct"), 100), {"dim": -1}),
        Sample("noncontig", (T((33, 17), "distinct", noncontig=True), 3), {"dim": 0}),
        # a selection kernel's strategy changes with the size (faults mutate: wrong only past
        # 2^16 survived), in fp32
        Sample("past65536", (T(((1 << 16) + 1,), "distinct"), 100), {"dim": 0},
               dtypes=("float32",)),
        Sample("large", (T(LARGE), 8), {"dim": 1}, slow=True)), dtypes=FI),
    E("median", torch.median, (
        Sample("typical", (T((16, 64), "distinct"),), {"dim": 1}),
        Sample("odd257", (T((3, 257), "distinct"),), {"dim": -1}),
        Sample("noncontig", (T((33, 17), "distinct", noncontig=True),), {"dim": 0}),
        Sample("large", (T(LARGE),), {"dim": 1}, slow=True)), dtypes=FI),
    E("nanmedian", torch.nanmedian, (
        Sample("typical", (T((16, 64), "distinct"),), {"dim": 1}),
        Sample("odd257", (T((3, 257), "distinct"),), {"dim": -1}),
        Sample("noncontig", (T((33, 17), "distinct", noncontig=True),), {"dim": 0}),
        Sample("large", (T(LARGE),), {"dim": 1}, slow=True))),
    E("msort", torch.msort, layout(domain="distinct"), dtypes=FI),
    # ---- random: statistical judges
    E("dropout", F.dropout, (
        Sample("p0.1", (T((16, 64), "nonzero"),), {"p": 0.1, "training": True}),
        Sample("p0.5", (T((16, 64), "nonzero"),), {"p": 0.5, "training": True}),
        Sample("odd257", (T((3, 257), "nonzero"),), {"p": 0.3, "training": True}),
        Sample("noncontig", (T((33, 17), "nonzero", noncontig=True),), {"p": 0.2, "training": True}),
        Sample("empty", (T((0, 64), "nonzero"),), {"p": 0.5, "training": True}),
        # past 1024 elements (a judged row gets no band samples derived), in fp32
        Sample("band2049", (T(((1 << 11) + 1,), "nonzero"),), {"p": 0.5, "training": True},
               dtypes=("float32",)),
        Sample("large", (T(LARGE, "nonzero"),), {"p": 0.1, "training": True}, slow=True)),
      judge=dropout_judge()),
    E("dropout2d", F.dropout2d, (
        Sample("p0.2", (T((8, 32, 4, 4), "nonzero"),), {"p": 0.2, "training": True}),
        Sample("p0.5", (T((8, 32, 5, 3), "nonzero"),), {"p": 0.5, "training": True}),
        Sample("large", (T((64, 256, 8, 8), "nonzero"),), {"p": 0.1, "training": True},
               slow=True)), judge=dropout_judge(2)),
    E("dropout1d", F.dropout1d, (
        Sample("p0.3", (T((16, 32, 8), "nonzero"),), {"p": 0.3, "training": True}),
        Sample("large", (T((64, 256, 64), "nonzero"),), {"p": 0.1, "training": True},
               slow=True)), judge=dropout_judge(1)),
    E("dropout3d", F.dropout3d, (
        Sample("p0.5", (T((4, 32, 2, 3, 3), "nonzero"),), {"p": 0.5, "training": True}),
        Sample("large", (T((16, 256, 4, 4, 16), "nonzero"),), {"p": 0.1, "training": True},
               slow=True)), judge=dropout_judge(3)),
    # ---- gradient clipping (optimizer step helpers)
    E("clip_grad_norm_", _clip_grad_norm, (
        Sample("clipping", ([T((16, 64), grad=False), T((64,), grad=False),
                             T((8, 3, 3), grad=False)],), {"max_norm": 1.0}),
        Sample("no_clip", ([T((16, 64), "small", grad=False), T((5,), "small", grad=False)],),
               {"max_norm": 100.0}),
        Sample("inf_norm", ([T((16, 64), "distinct", grad=False),
                             T((64,), "distinct", grad=False)],),
               {"max_norm": 0.5, "norm_type": float("inf")}),
        Sample("odd257", ([T((3, 257), grad=False), T((257,), grad=False)],), {"max_norm": 2.0}),
        Sample("large", ([T(LARGE, grad=False), T((10,), grad=False)],), {"max_norm": 1.0},
               slow=True)), backward=False),
    E("clip_grad_value_", _clip_grad_value, (
        Sample("typical", ([T((16, 64), grad=False), T((64,), grad=False)],)),
        Sample("odd257", ([T((3, 257), grad=False)],), {"clip_value": 0.125}),
        # one gradient in each size band, on the path that clamps each tensor alone
        # (clamp_; the default path is _foreach_clamp_min_/max_), in fp32
        Sample("bands", ([T((n,), grad=False) for n in BAND_SIZES],), {"foreach": False},
               dtypes=("float32",)),
        Sample("large", ([T(LARGE, grad=False)],), slow=True)), backward=False),
    # ---- misc training ops
    E("cosine_similarity", F.cosine_similarity, binary()),
    E("pairwise_distance", F.pairwise_distance, binary()),
    E("cdist", torch.cdist, (
        Sample("typical", (T((16, 8)), T((12, 8)))), Sample("odd257", (T((3, 257)), T((5, 257)))),
        Sample("batched", (T((2, 9, 4)), T((2, 7, 4)))),
        Sample("large", (T((1024, 64)), T((1024, 64))), slow=True)), dtypes=F32,
      note="CPU has no fp16/bf16 cdist kernel"),
    E("diff", torch.diff, scan(), dtypes=FI),
    E("cross", torch.linalg.cross, (
        Sample("typical", (T((16, 3)), T((16, 3)))), Sample("bcast", (T((4, 1, 3)), T((1, 5, 3)))),
        Sample("large", (T((1 << 19, 3)), T((1 << 19, 3))), slow=True))),
)

# ---- the _foreach_* ops optimizers use (no autograd; lists of differently shaped tensors)
_FOREACH: tuple[OpEntry, ...] = (
    E("_foreach_add", torch._foreach_add, foreach(2, list_kw={"alpha": 0.5}), backward=False),
    E("_foreach_sub", torch._foreach_sub, foreach(2), backward=False),
    E("_foreach_sub_alpha", torch._foreach_sub, foreach(2, list_kw={"alpha": 0.5}),
      backward=False, note="x - alpha * y: two roundings, so relative"),
    E("_foreach_mul", torch._foreach_mul, foreach(2), backward=False),
    E("_foreach_div", torch._foreach_div, foreach(2, ("normal", "nonzero")), backward=False),
    E("_foreach_mul_scalar", torch._foreach_mul, foreach(1, scalar=0.9), backward=False),
    E("_foreach_add_scalar", torch._foreach_add, foreach(1, scalar=1e-3), backward=False),
    E("_foreach_addcmul", torch._foreach_addcmul, foreach(3, list_kw={"value": 0.1}),
      backward=False),
    E("_foreach_addcdiv", torch._foreach_addcdiv,
      foreach(3, ("normal", "normal", "positive"), list_kw={"value": -1e-3}), backward=False),
    E("_foreach_lerp", torch._foreach_lerp, foreach(2, scalar=0.1), backward=False),
    E("_foreach_sqrt", torch._foreach_sqrt, foreach(1, ("positive",)), backward=False),
    E("_foreach_norm", torch._foreach_norm, foreach(1), backward=False),
    E("_foreach_maximum", torch._foreach_maximum, foreach(2), backward=False),
    E("_foreach_neg", torch._foreach_neg, foreach(1), backward=False),
    E("_foreach_abs", torch._foreach_abs, foreach(1), backward=False),
    E("_foreach_reciprocal", torch._foreach_reciprocal, foreach(1, ("nonzero",)),
      backward=False),
    E("_foreach_exp", torch._foreach_exp, foreach(1), backward=False),
    E("_foreach_sign", torch._foreach_sign, foreach(1), backward=False),
    E("_foreach_mul_", _inplace("_foreach_mul_"), foreach(1, scalar=0.9), backward=False),
    E("_foreach_add_", _inplace("_foreach_add_"), foreach(2, list_kw={"alpha": -0.01}),
      backward=False),
    E("_foreach_addcmul_", _inplace("_foreach_addcmul_"), foreach(3, list_kw={"value": 0.001}),
      backward=False),
    E("_foreach_addcdiv_", _inplace("_foreach_addcdiv_"),
      foreach(3, ("normal", "normal", "positive"), list_kw={"value": -1e-3}), backward=False),
    E("_foreach_lerp_", _inplace("_foreach_lerp_"), foreach(2, scalar=0.1), backward=False),
    E("_foreach_sqrt_", _inplace("_foreach_sqrt_"), foreach(1, ("positive",)), backward=False),
)

# ---- keyword coverage (harness.ops.keywords): samples that give each documented option
# of an op a non-default value, so a kernel that ignores the option fails. Small shapes:
# the default run pays little for them.
_L2 = [T((16, 64), grad=False), T((64,), grad=False)]
_F64 = torch.float64  # dtype= options: accumulate and return in fp64
KEYWORD_SAMPLES: dict[str, tuple[Sample, ...]] = {
    "_foreach_norm": (Sample("ord1", (_L2,), {"ord": 1}),
                      Sample("dtype_f64", (_L2,), {"dtype": _F64})),
    "addbmm": (Sample("alpha_beta", (T((16, 8)), T((4, 16, 32)), T((4, 32, 8))),
                      {"beta": 0.5, "alpha": 0.25}),),
    "addmv": (Sample("alpha_beta", (T((16,)), T((16, 64)), T((64,))), {"beta": 0.5, "alpha": 2.0}),),
    "all": (Sample("keepdim", (T((8, 33)),), {"dim": 0, "keepdim": True}),),
    "any": (Sample("keepdim", (T((8, 33)),), {"dim": 0, "keepdim": True}),),
    "argsort": (Sample("descending", (T((16, 64), "distinct"),),
                       {"dim": 1, "descending": True, "stable": True}),),
    "cdist": (Sample("p1", (T((16, 8)), T((12, 8))), {"p": 1.0}),),
    "cumsum": (Sample("dtype_f64", (T((16, 64)),), {"dim": 1, "dtype": _F64}),),
    "cumprod": (Sample("dtype_f64", (T((16, 64), "near1"),), {"dim": 1, "dtype": _F64}),),
    "diagonal": (Sample("offset", (T((4, 8, 16)),), {"dim1": 1, "dim2": 2, "offset": 2}),),
    "diff": (Sample("n2_prepend_append", (T((16, 64)), 2, 1, T((16, 3)), T((16, 2)))),),
    "flatten": (Sample("end_dim", (T((4, 8, 16)),), {"start_dim": 0, "end_dim": 1}),),
    "isclose": (Sample("tolerances", (T((16, 64)), T((16, 64))),
                       {"rtol": 0.5, "atol": 0.1, "equal_nan": True}),),
    "kthvalue": (Sample("keepdim", (T((16, 64), "distinct"), 5), {"dim": 1, "keepdim": True}),),
    "logit": (Sample("eps", (T((16, 64), "prob"),), {"eps": 0.1}),),
    "mean": (Sample("dtype_f64", (T((16, 64)),), {"dim": 1, "dtype": _F64}),),
    "median": (Sample("keepdim", (T((16, 64), "distinct"),), {"dim": 1, "keepdim": True}),),
    "nanmedian": (Sample("keepdim", (T((16, 64), "distinct"),), {"dim": 1, "keepdim": True}),),
    "nansum": (Sample("dtype_f64", (T((16, 64)),), {"dim": 1, "dtype": _F64}),),
    "nanmean": (Sample("dtype_f64", (T((16, 64)),), {"dim": 1, "dtype": _F64}),),
    "nan_to_num": (Sample("replacements", (T((16, 64), "nonfinite"),),
                          {"nan": 1.5, "posinf": 100.0, "neginf": -100.0}),),
    "adaptive_max_pool1d": (Sample("indices", (T((2, 3, 23), "distinct"),),
                                   {"output_size": 5, "return_indices": True}),),
    "adaptive_max_pool2d": (Sample("indices", (T((2, 3, 11, 13), "distinct"),),
                                   {"output_size": (4, 5), "return_indices": True}),),
    "avg_pool1d": (Sample("ceil_nopad", (T((2, 3, 24)),), {
        "kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
        "count_include_pad": False}),),
    "avg_pool2d": (Sample("ceil_nopad_divisor", (T((2, 3, 12, 12)),), {
        "kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
        "count_include_pad": False, "divisor_override": 4}),),
    "avg_pool3d": (Sample("ceil_nopad_divisor", (T((2, 3, 6, 6, 6)),), {
        "kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
        "count_include_pad": False, "divisor_override": 5}),),
    "batch_norm": (Sample("eps_momentum", (T((8, 16, 5, 5)), T((16,), grad=False),
                                           T((16,), "positive", grad=False), T((16,)),
                                           T((16,))),
                          {"training": True, "eps": 0.5, "momentum": 0.3}),),
    "binary_cross_entropy": (Sample("weight", (T((16, 64), "prob"), T((16, 64), "prob", grad=False),
                                               T((16, 64), "positive", grad=False))),),
    "binary_cross_entropy_with_logits": (Sample("pos_weight", (
        T((16, 64), "wide"), T((16, 64), "prob", grad=False), None, None, None, "mean",
        T((64,), "positive", grad=False))),),
    "conv_transpose1d": (Sample("output_padding", (T((2, 4, 20)), T((4, 6, 3)), T((6,))),
                                {"stride": 2, "padding": 1, "output_padding": 1}),),
    "conv_transpose2d": (Sample("output_padding", (T((2, 4, 10, 10)), T((4, 6, 3, 3)), T((6,))),
                                {"stride": 2, "padding": 1, "output_padding": 1}),),
    "conv_transpose3d": (Sample("output_padding", (T((1, 4, 5, 5, 5)), T((4, 6, 3, 3, 3)),
                                                   T((6,))),
                                {"stride": 2, "padding": 1, "output_padding": 1}),),
    "cosine_embedding_loss": (Sample("margin_sum", (T((16, 64)), T((16, 64)),
                                                    T((16,), "nonzero", grad=False)),
                                     {"margin": 0.2, "reduction": "sum"}),),
    "cosine_similarity": (Sample("dim0", (T((16, 64)), T((16, 64))), {"dim": 0}),),
    "dropout3d": (Sample("p0.25", (T((4, 32, 2, 3, 3), "nonzero"),), {"p": 0.25, "training": True}),),
    "elu": (Sample("alpha", (T((16, 64), "wide"),), {"alpha": 0.5}),),
    "fold_col2im": (Sample("stride_pad_dilation", (T((2, 27, 9)),), {
        "output_size": (8, 8), "kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}),),
    "gaussian_nll_loss": (Sample("eps", (T((16, 64)), T((16, 64), grad=False),
                                         T((16, 64), "positive")), {"eps": 0.5}),),
    "group_norm": (Sample("eps", (T((4, 12, 6, 6)), 3, T((12,)), T((12,))), {"eps": 0.5}),),
    "hardshrink": (Sample("lambd", (T((16, 64)),), {"lambd": 0.25}),),
    "softshrink": (Sample("lambd", (T((16, 64)),), {"lambd": 0.25}),),
    "hinge_embedding_loss": (Sample("margin", (T((16, 64)), T((16, 64), "nonzero", grad=False)),
                                    {"margin": 0.5}),),
    "huber_loss": (Sample("weight", (T((16, 64)), T((16, 64), grad=False), "mean", 1.0,
                                     T((16, 64), "positive", grad=False))),),
    "l1_loss": (Sample("weight", (T((16, 64)), T((16, 64), grad=False), None, None, "mean",
                                  T((16, 64), "positive", grad=False))),),
    "mse_loss": (Sample("weight", (T((16, 64)), T((16, 64), grad=False), None, None, "mean",
                                   T((16, 64), "positive", grad=False))),),
    "multilabel_soft_margin_loss": (Sample("weight", (T((16, 64)), T((16, 64), "prob", grad=False),
                                                      T((64,), "positive", grad=False))),),
    "instance_norm": (
        Sample("running_affine", (T((4, 6, 8, 8)), T((6,), grad=False),
                                  T((6,), "positive", grad=False), T((6,)), T((6,)), True, 0.2,
                                  0.5)),
        Sample("running_stats", (T((4, 6, 8, 8)), T((6,), grad=False),
                                 T((6,), "positive", grad=False), None, None, False))),
    "layer_norm": (Sample("eps", (T((16, 64)), T((64,)), T((64,))), {"eps": 0.5}),),
    "leaky_relu": (Sample("slope0.2", (T((16, 64)),), {"negative_slope": 0.2}),),
    "local_response_norm": (Sample("alpha_beta_k", (T((2, 8, 6, 6)), 3),
                                   {"alpha": 1e-2, "beta": 0.5, "k": 2.0}),),
    "lp_pool2d": (Sample("ceil", (T((2, 3, 13, 13), "positive"),),
                         {"norm_type": 2.0, "kernel_size": 3, "stride": 2, "ceil_mode": True}),),
    "margin_ranking_loss": (Sample("sum", (T((64,)), T((64,)), T((64,), "nonzero", grad=False)),
                                   {"margin": 0.1, "reduction": "sum"}),),
    "max_pool1d": (Sample("ceil_dilation_indices", (T((2, 3, 24), "distinct"),), {
        "kernel_size": 3, "stride": 2, "dilation": 2, "ceil_mode": True,
        "return_indices": True}),),
    "max_pool2d": (Sample("ceil_dilation_indices", (T((2, 3, 12, 12), "distinct"),), {
        "kernel_size": 3, "stride": 2, "dilation": 2, "ceil_mode": True,
        "return_indices": True}),),
    "max_pool3d": (Sample("ceil_dilation_indices", (T((2, 3, 7, 7, 7), "distinct"),), {
        "kernel_size": 2, "stride": 2, "dilation": 2, "ceil_mode": True,
        "return_indices": True}),),
    "multi_margin_loss": (Sample("p2_margin_weight", (T((16, 10)), I((16,), 10), 2, 0.5,
                                                      T((10,), "positive", grad=False)),
                                 {"reduction": "sum"}),),
    "normalize": (Sample("p1", (T((16, 64)),), {"p": 1.0, "dim": -1}),),
    "pairwise_distance": (Sample("p1_keepdim", (T((16, 64)), T((16, 64))),
                                 {"p": 1.0, "keepdim": True}),),
    "poisson_nll_loss": (Sample("rate_eps", (T((16, 64), "positive"),
                                             T((16, 64), "positive", grad=False)),
                                {"log_input": False, "eps": 0.5}),),
    "scaled_dot_product_attention": (Sample("mask_scale", (
        T((2, 4, 16, 32)), T((2, 4, 16, 32)), T((2, 4, 16, 32)), T((16, 16), grad=False)),
        {"scale": 0.3}),),
    "triplet_margin_loss": (Sample("p1_margin_eps_sum", (T((16, 32)), T((16, 32)), T((16, 32))),
                                   {"margin": 0.5, "p": 1, "eps": 1e-3, "reduction": "sum"}),),
    "clip_grad_norm_": (Sample("no_foreach", (_L2,), {"max_norm": 1.0, "foreach": False}),),
    "clip_grad_value_": (Sample("no_foreach", (_L2,), {"foreach": False}),),
    "prod": (Sample("keepdim_f64", (T((16, 32), "near1"),), {"dim": 1, "keepdim": True,
                                                            "dtype": _F64}),),
    "repeat_interleave": (Sample("output_size", (T((4, 16)), 3), {"dim": 1, "output_size": 48}),),
    "softmax": (Sample("dtype_f64", (T((16, 64)),), {"dim": -1, "dtype": _F64}),),
    "log_softmax": (Sample("dtype_f64", (T((16, 64)),), {"dim": -1, "dtype": _F64}),),
    "softmin": (Sample("dtype_f64", (T((16, 64)),), {"dim": -1, "dtype": _F64}),),
    "std": (Sample("correction0", (T((16, 64)),), {"dim": 1, "correction": 0}),),
    "sum": (Sample("dtype_f64", (T((16, 64)),), {"dim": 1, "dtype": _F64}),),
}
_BY_ROW = {entry.name: entry for entry in CATALOG + _FOREACH}
for _name in KEYWORD_SAMPLES:
    if _name not in _BY_ROW:
        raise ValueError(f"KEYWORD_SAMPLES names {_name!r}, which is not a catalog row")


# ---- how an op is called: layouts, integer limits, sizes at a kernel's boundaries. Each
# is derived from a row's own samples, so a new row gets them without writing them.

def _specs(args):
    for spec in args:
        yield from (spec if isinstance(spec, (list, tuple)) else (spec,))


def _first_plain(entry: OpEntry):
    """The row's first default-run sample with a tensor argument and no empty tensor."""
    for sample in entry.samples:
        tensors = [a for a in _specs(sample.args) if isinstance(a, T)]
        if (not sample.slow and sample.dtypes is None and tensors
                and all(all(t.shape) for t in tensors)):
            return sample
    return None


def _relaid(sample: Sample, name: str, pick, layout: str, dtypes=None, **change) -> Sample:
    """``sample`` with the tensors ``pick`` chooses laid out as ``layout`` (and ``change``d)."""
    def one(spec):
        if isinstance(spec, list):
            return [one(s) for s in spec]
        if isinstance(spec, T) and pick(spec):
            return dataclasses.replace(spec, layout=layout, noncontig=False, **change)
        return spec
    return Sample(f"{sample.name}_{name}", tuple(one(a) for a in sample.args),
                  dict(sample.kwargs), dtypes=dtypes)


# Note [Layout samples]
# ~~~~~~~~~~~~~~~~~~~~~
# Every row whose default-run samples take a 4-d (5-d) tensor gets its first such sample
# again with every 4-d (5-d) argument channels_last (channels_last_3d), in each of its
# dtypes, forward and backward (Note [Argument layouts] in harness.ops.spec). Every row
# with a tensor argument gets its first plain sample with its first tensor (a list's
# first: _foreach_*, cat; past an index or a mask: embedding's weight) an offset view and,
# unless its values must be distinct where a stride-0 view along dim 0 repeats them (a
# pooling row, WINDOWED, compares them only within a window of one plane, and a row whose
# sample compares along another ``dim`` only within a slice along it: those keep theirs), an
# expanded view, in its first dtype only: a kernel that mishandles strides or the
# storage offset is wrong whatever the dtype, and the default run's budget is seconds.
# Rows that write into their argument (names ending in ``_``) keep their own layouts.
# A row none of whose samples has a transposed tensor (matmuls, losses, indexing) gets its
# first plain sample with every 2-d or larger argument transposed (``noncontig``), in its
# first dtype: a BLAS-style kernel takes another path for a transposed operand, and
# ``faults mutate`` found addmm, baddbmm and cdist wrong only there surviving. A row whose
# tensors may take any shape (Note [Size bands of every row]) and that has no 4-d sample
# gets its first plain sample as 4-d channels_last too, in its first dtype: elementwise
# kernels take another path for a tensor in that format (pow survived there).
LAYOUT_REFUSES: dict[str, str] = {
    "nll_loss": "the CPU's nll_loss2d backward raises 'grad_input must be contiguous' for a "
                "channels_last input (torch 2.13): no reference",
}
"""Rows without channels_last samples, and why (Note [Layout samples])."""

WINDOWED = frozenset((
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
    "adaptive_max_pool1d", "adaptive_max_pool2d"))
"""Rows whose values must be distinct only within a window of one (batch, channel) plane
(pooling: ties would make a max's index the kernel's choice), so an expanded view, which
repeats values along dim 0 only, keeps them distinct where the op compares them and they
get their expanded sample (faults mutate: avg_pool3d and max_pool2d wrong only for an
expanded input survived; Note [Layout samples])."""


def _expanded_keeps_distinct(entry: OpEntry, sample: Sample, first: T) -> bool:
    """Whether an expanded view of ``first`` (its dim 0 repeated) leaves the values the op
    compares distinct where they must be (Note [Layout samples]): any values where they need
    not be; a pooling row's (WINDOWED); a row whose sample compares along another dim
    (``dim=1``: sort, argmax, kthvalue... see each slice along that dim whole and once)."""
    if first.domain == "ties":
        return False
    if first.domain != "distinct" or entry.name in WINDOWED:
        return True
    dim = sample.kwargs.get("dim")
    return isinstance(dim, int) and not isinstance(dim, bool) and dim % len(first.shape) != 0


def _transposed(spec):
    if isinstance(spec, list):
        return [_transposed(s) for s in spec]
    if isinstance(spec, T) and len(spec.shape) >= 2:
        return dataclasses.replace(spec, noncontig=True)
    return spec


def layout_samples(entry: OpEntry) -> tuple[Sample, ...]:
    out = []
    for rank, layout in ((4, "channels_last"), (5, "channels_last_3d")):
        for sample in entry.samples if entry.name not in LAYOUT_REFUSES else ():
            specs = [a for a in _specs(sample.args) if isinstance(a, T)]
            if (not sample.slow and sample.dtypes is None and all(all(t.shape) for t in specs)
                    and any(len(t.shape) == rank for t in specs)):
                out.append(_relaid(sample, layout, lambda t, r=rank: len(t.shape) == r,
                                   layout))
                break
    shape_free = _shape_free(entry)
    if shape_free is not None and not out and entry.name not in LAYOUT_REFUSES:
        out.append(_reshaped(shape_free, f"{shape_free.name}_4d_channels_last", (2, 3, 4, 5),
                             (entry.dtypes[0],), "channels_last"))
    sample = _first_plain(entry)
    if sample is None or entry.name.endswith("_") or entry.judge is not None:
        return tuple(out)
    specs = [t for other in entry.samples if not other.slow
             for t in _specs(other.args) if isinstance(t, T)]
    if (not any(t.noncontig for t in specs)
            and any(isinstance(t, T) and len(t.shape) >= 2 for t in _specs(sample.args))):
        out.append(Sample(f"{sample.name}_transposed",
                          tuple(_transposed(a) for a in sample.args), dict(sample.kwargs),
                          dtypes=(entry.dtypes[0],)))
    # the first tensor (of a list argument, _foreach_* and cat, its first), past an
    # index, a mask or an equation (embedding's weight, where's input, einsum's operand)
    first = next((t for t in _specs(sample.args) if isinstance(t, T)), None)
    if first is not None and first.shape:
        dtypes = (entry.dtypes[0],)
        out.append(_relaid(sample, "offset", lambda t: t is first, "offset", dtypes))
        if _expanded_keeps_distinct(entry, sample, first) and first.shape[0] > 1:
            # no gradient through the broadcast: it is a sum over dim 0, not the row's own
            # (exact for a copy) standard
            out.append(_relaid(sample, "expanded", lambda t: t is first, "expanded", dtypes,
                               grad=False))
    return tuple(out)


# Note [Integer limits samples]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every row that takes integer tensors runs its first plain sample with its value tensors
# at both ends of each integer dtype's range (Note [Integer limits] in harness.ops.spec), in
# every integer dtype and bool the op accepts; a divisor (``nonzero``/``positive``) keeps its
# domain, and an index is an index. INT_REFUSES lists the dtypes torch documents an op as
# refusing (bool arithmetic, ``sub`` and ``neg`` of bool...).
INT_LIMIT_DTYPES = ("int8", "uint8", "int16", "int32", "int64", "bool")
_KEEPS_DOMAIN = ("nonzero", "positive")
INT_REFUSES: dict[str, tuple[str, ...]] = {
    "sub": ("bool",), "neg": ("bool",), "abs": ("bool",), "sign": ("bool",),
    "fmod": ("bool",), "remainder": ("bool",), "div_floor": ("bool",), "diff": ("bool",),
    "sort": ("bool",), "msort": ("bool",), "argmax": ("bool",), "argmin": ("bool",),
    "topk": ("bool",), "kthvalue": ("bool",), "median": ("bool",),
    "masked_fill": ("int8", "uint8"),  # its fill value does not fit
}


def int_limit_samples(entry: OpEntry) -> tuple[Sample, ...]:
    if not any(d in INT_LIMIT_DTYPES for d in entry.dtypes):
        return ()
    sample = _first_plain(entry)
    if sample is None:
        return ()
    dtypes = tuple(d for d in INT_LIMIT_DTYPES if d not in INT_REFUSES.get(entry.name, ()))
    return (_relaid_domain(sample, "int_limits", dtypes),)


def _relaid_domain(sample: Sample, name: str, dtypes) -> Sample:
    def one(spec):
        if isinstance(spec, list):
            return [one(s) for s in spec]
        if isinstance(spec, T) and spec.domain not in _KEEPS_DOMAIN and spec.dtype is None:
            return dataclasses.replace(spec, domain="limits")
        return spec
    return Sample(name, tuple(one(a) for a in sample.args), dict(sample.kwargs),
                  dtypes=dtypes)


# Note [Size boundaries]
# ~~~~~~~~~~~~~~~~~~~~~~
# Reduction, scan, sort, matmul and normalisation kernels change strategy with the size:
# a vector width (16, 32), a block or tile (powers of two from 2^10 to 2^20), a second pass
# past the first level of a tree. Each such row gets 1-d samples on either side of every
# boundary (2^k - 1 and 2^k + 1 elements for k = 10..20, and 15/17, 31/33), in fp32 (a
# scan, sort or normalisation past 2^16 + 1: --run-slow, SIZE_DEFAULT_MAX), so a
# kernel wrong only past a block shows on the op; a 2^20-element fp32 tensor is 4 MB, and
# the whole sweep of a row costs tens of milliseconds. The reduction is over the whole
# tensor (or the one dim), the way a loss or a norm calls it. 2^31 + 1 elements (past
# int32 indexing) run behind --run-slow: ``sum`` of uint8 into uint8 (``dtype=``, wrapping
# as torch documents; an element dropped or counted twice past 2^31 still shows, each
# is 1 to 8), 2 GiB a copy. Not into the default int64: torch's CPU reduction casts the
# whole input to its accumulation dtype first, 17 GiB for each of the DUT's two runs and
# the reference's, which ended a `--run-slow` run on a 24 GiB machine in the kernel's
# out-of-memory kill (``tests/test_ops_catalog.py`` holds every sample past 2^30 elements
# to a result in its input's dtype).
SIZE_BOUNDARIES = (15, 17, 31, 33) + tuple(n for k in range(10, 21) for n in
                                           ((1 << k) - 1, (1 << k) + 1))


SIZE_FULL_OUTPUT = 1 << 14
SIZE_DEFAULT_MAX = (1 << 16) + 1
"""Past SIZE_FULL_OUTPUT, a row whose output is as large as its input (scan, sort,
normalisation) runs its boundary samples forward only: the default run those just past
each boundary (2^k + 1) up to SIZE_DEFAULT_MAX, --run-slow the rest (judging a
million-element output costs half a second of the default run: 4 s for the four rows); a
full reduction's scalar output costs nothing, it runs every size by default."""


def _sizes(make, *, full_output: bool = False) -> tuple[Sample, ...]:
    out = []
    for n in SIZE_BOUNDARIES:
        big = full_output and n > SIZE_FULL_OUTPUT
        args, kwargs = make(n, not big and full_output)
        below = (n + 1) & n == 0  # 2^k - 1
        out.append(Sample(f"n{n}", args, kwargs, slow=big and (below or n > SIZE_DEFAULT_MAX),
                          dtypes=("float32",)))
    return tuple(out)


SIZE_SAMPLES: dict[str, tuple[Sample, ...]] = {  # forward only where the output is a scalar
    **{name: _sizes(lambda n, g: ((T((n,), grad=g),), {})) for name in
       ("sum", "mean", "nansum", "norm")},
    **{name: _sizes(lambda n, g: ((T((n,), "distinct", grad=g),), {})) for name in
       ("amax", "amin", "argmax", "argmin")},
    "var": _sizes(lambda n, g: ((T((n,), grad=g),), {"dim": 0})),
    "dot": _sizes(lambda n, g: ((T((n,), grad=g), T((n,), grad=g)), {})),
    "cumsum": _sizes(lambda n, g: ((T((n,), grad=g),), {"dim": 0}), full_output=True),
    "sort": _sizes(lambda n, g: ((T((n,), "distinct", grad=g),), {"dim": 0}), full_output=True),
    "softmax": _sizes(lambda n, g: ((T((n,), grad=g),), {"dim": 0}), full_output=True),
    "layer_norm": _sizes(lambda n, g: ((T((n,), grad=g), T((n,), grad=g), T((n,), grad=g)), {}),
                         full_output=True),
}
"""Row -> its boundary samples (Note [Size boundaries])."""

SLOW_SIZE_SAMPLES: dict[str, tuple[Sample, ...]] = {
    "sum": (Sample(f"n{(1 << 31) + 1}", (T(((1 << 31) + 1,), "positive", grad=False),),
                   {"dtype": torch.uint8}, slow=True, dtypes=("uint8",)),),
}


# Note [Size bands of every row]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# ``faults mutate`` found elementwise kernels wrong only past 1024 or 4096 elements
# surviving: every ordinary sample holds at most 1024 elements, the next is the slow
# 1M one. So every row whose first plain sample's tensors all share one shape (unary,
# binary, ternary, losses) runs it again flattened to 1-d of 2^11 + 1 and 2^13 + 1
# elements, in its first dtype: one size in each band between the default samples and
# the slow ones, at a few milliseconds a row. Reduction rows get the full sweep
# (SIZE_SAMPLES); a row with a structured input (conv, pooling, indexing) keeps its own.
# A row taking lists of tensors (_foreach_*, cat, stack) gets one sample per band whose
# lists each hold two 1-d tensors of that size. The third band, 2^16 + 1, closed the
# (65536, 1048576] column of the kill matrix (0 of 14 killed before, docs/mutants.md).


BAND_REFUSES: dict[str, str] = {
    "cross": "takes vectors of 3", "cosine_similarity": "reduces dim 1",
    "getitem_slice": "slices dim 1", "glu": "halves its dim: an odd size is refused",
    "unbind": "one output per element of its dim", "split": "one output per 3 of its dim"}
"""Rows whose 2-d sample has no 1-d twin, and why (Note [Size bands of every row])."""


def _shape_free(entry: OpEntry) -> Optional[Sample]:
    """The row's first plain sample when its tensors may take any shape (all one 2-d
    shape, no shape-like option: unary, binary, ternary ops and losses), else None."""
    sample = _first_plain(entry)
    if (sample is None or entry.name in SIZE_SAMPLES or entry.judge is not None
            or entry.name in BAND_REFUSES
            or any(not isinstance(a, T) for a in sample.args)
            or any(k in sample.kwargs for k in ("dim", "shape", "dims", "size", "chunks"))):
        return None
    shape = sample.args[0].shape
    return sample if len(shape) == 2 and all(t.shape == shape for t in sample.args) else None


def _reshaped(sample: Sample, name: str, shape: tuple, dtypes, layout: str = "") -> Sample:
    return Sample(name, tuple(dataclasses.replace(t, shape=shape, noncontig=False, layout=layout)
                              for t in sample.args), dict(sample.kwargs), dtypes=dtypes)


def band_samples(entry: OpEntry) -> tuple[Sample, ...]:
    sample = _first_plain(entry)
    if (sample is not None and entry.judge is None and entry.name not in BAND_REFUSES
            and all(isinstance(a, list) for a in sample.args if not isinstance(a, (int, float)))):
        return _list_bands(entry, sample)
    sample = _shape_free(entry)
    if sample is not None:
        return tuple(_reshaped(sample, f"band{n}", (n,), (entry.dtypes[0],))
                     for n in BAND_SIZES)
    sample = _along_a_dim(entry)
    if sample is None:
        return ()
    return tuple(dataclasses.replace(_reshaped(sample, f"band{n}", (n,), (entry.dtypes[0],)),
                                     kwargs={**sample.kwargs, "dim": 0}) for n in BAND_SIZES)


def _along_a_dim(entry: OpEntry) -> Optional[Sample]:
    """The row's first plain sample when it is one tensor reduced, scanned or normalised
    along ``dim=`` (max_dim, cumprod, log_softmax, std...), else None."""
    sample = _first_plain(entry)
    if (sample is None or entry.name in SIZE_SAMPLES or entry.judge is not None
            or entry.name in BAND_REFUSES or len(sample.args) != 1
            or not isinstance(sample.args[0], T)
            or not isinstance(sample.kwargs.get("dim"), int)
            or any(k in sample.kwargs for k in ("shape", "dims", "size", "chunks"))):
        return None
    return sample


def _list_bands(entry: OpEntry, sample: Sample) -> tuple[Sample, ...]:
    """The band samples of a row taking lists of tensors (Note [Size bands of every row])."""
    def lists(n):
        return tuple([dataclasses.replace(a[0], shape=(n,), noncontig=False)] * 2
                     if isinstance(a, list) else a for a in sample.args)
    return tuple(Sample(f"band{n}", lists(n), dict(sample.kwargs), dtypes=(entry.dtypes[0],))
                 for n in BAND_SIZES)


def _called(entry: OpEntry) -> tuple[Sample, ...]:
    return (*SIZE_SAMPLES.get(entry.name, ()), *SLOW_SIZE_SAMPLES.get(entry.name, ()),
            *int_limit_samples(entry), *layout_samples(entry), *band_samples(entry))


for _name in (*SIZE_SAMPLES, *SLOW_SIZE_SAMPLES, *INT_REFUSES, *LAYOUT_REFUSES,
              *BAND_REFUSES):
    if _name not in _BY_ROW:
        raise ValueError(f"the size / integer tables name {_name!r}, which is not a catalog row")

CATALOG = tuple(dataclasses.replace(entry, fn=late_bound(entry.fn), samples=(
    *entry.samples, *KEYWORD_SAMPLES.get(entry.name, ()), *_called(entry)))
    for entry in CATALOG + _FOREACH)

BY_NAME: dict[str, OpEntry] = {}
for _entry in CATALOG:
    if _entry.name in BY_NAME:
        raise ValueError(f"op catalog: {_entry.name!r} is listed twice")
    BY_NAME[_entry.name] = _entry
