"""The op catalog's vocabulary: entries, samples, argument specs, and input generation.

An :class:`OpEntry` is one op (a callable plus data: samples, dtypes, backward, precision
standard). A :class:`Sample` lists the op's arguments: :class:`T` (a float tensor in the
case's dtype), :class:`I` (an integer index tensor), :class:`M` (a bool mask), or plain
Python values passed through. :func:`materialize` turns a sample into concrete CPU
tensors with a seeded generator, so a case's inputs depend only on its id and the seed.

Note [Distinct values]
~~~~~~~~~~~~~~~~~~~~~~
Ops whose result depends on an order (sort, topk, argmax, max pooling and its gradient)
are only exact when there are no ties: with ties, which index wins is an implementation
choice. The ``distinct`` domain draws values without replacement from a grid that bf16,
fp16 and fp32 all represent exactly (every bf16 value with magnitude in [2^-6, 8)), so the
DUT's dtype cannot create ties. Tensors larger than the grid (the ``slow`` cases) fall
back to normal values; ties there follow the documented first-index rule.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any, Callable, Optional, Sequence

import torch

from harness import dtypes
from harness.compare import standard_by_name
from harness.ops.policy import GRAD_STANDARDS, OP_STANDARDS, op_names, standard_for

FLOATS = dtypes.FLOATS
INTS = ("int32", "int64")

DTYPES: dict[str, torch.dtype] = {
    name: dtypes.BY_NAME[name] for name in
    ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8", "int16",
     "bool")}

UPCAST: dict[str, str] = dtypes.UPCAST
"""The reference's dtype per DUT dtype (docs/standards.md: fp16/bf16 -> fp32, fp32 -> fp64);
integer dtypes are computed as they are."""


@dataclasses.dataclass(frozen=True)
class T:
    """A floating tensor argument in the case's dtype.

    Attributes:
        shape: its shape.
        domain: how values are drawn (see :data:`DOMAINS`).
        grad: whether the backward computes its gradient.
        noncontig: build it transposed (last two dims swapped) so it is not contiguous.
        dtype: a fixed dtype name instead of the case's (e.g. ``"float32"``).
        layout: how the tensor is laid out in memory (a key of :data:`LAYOUTS`; empty:
            contiguous), Note [Argument layouts].
    """

    shape: tuple[int, ...]
    domain: str = "normal"
    grad: bool = True
    noncontig: bool = False
    dtype: Optional[str] = None
    layout: str = ""

    def __post_init__(self) -> None:
        if self.layout and self.layout not in LAYOUTS:
            raise ValueError(f"T(layout={self.layout!r}): the layouts are {sorted(LAYOUTS)}")
        rank = LAYOUTS.get(self.layout)
        if rank and len(self.shape) != rank:
            raise ValueError(f"T(layout={self.layout!r}) needs a {rank}-d shape, got {self.shape}")


# Note [Argument layouts]
# ~~~~~~~~~~~~~~~~~~~~~~~
# Accelerator kernels take other code paths for other memory formats (channels_last on an
# NPU goes through a format conversion; a kernel that ignores strides or the storage
# offset is right on every contiguous input). ``T(layout=...)`` gives an argument the same
# values in another layout: ``channels_last`` / ``channels_last_3d`` (4-d / 5-d, dense
# NHWC / NDHWC), ``expanded`` (dim 0 a stride-0 broadcast of one row: the values repeat
# along dim 0) and ``offset`` (a contiguous view starting one element into its storage).
# The layout is applied where the tensor lands on its device (:func:`lay_out`), on the DUT
# and on the CPU references alike; a gradient leaf is the storage's base, so the backward
# runs through the view as a user's would.
LAYOUTS: dict[str, int] = {"channels_last": 4, "channels_last_3d": 5, "expanded": 0,
                           "offset": 0}
"""Layout name -> the rank it needs (0: any)."""


def base_shape(spec: T) -> tuple[int, ...]:
    """The shape drawn for ``spec`` before :func:`lay_out` makes its view."""
    if spec.layout == "expanded" and spec.shape:
        return (1, *spec.shape[1:])
    if spec.layout == "offset":
        n = 1
        for size in spec.shape:
            n *= size
        return (n + 1,)
    return tuple(spec.shape)


def lay_out(tensor: torch.Tensor, spec: T, leaf: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(argument, grad_leaf)``: ``tensor`` (drawn in :func:`base_shape`) in ``spec``'s
    layout; ``leaf`` marks the base as requiring grad first (Note [Argument layouts])."""
    if spec.layout in ("channels_last", "channels_last_3d"):
        fmt = torch.channels_last if spec.layout == "channels_last" else torch.channels_last_3d
        tensor = tensor.contiguous(memory_format=fmt)
    if leaf:
        tensor.requires_grad_(True)
    if spec.layout == "expanded" and spec.shape:
        return tensor.expand(*spec.shape), tensor
    if spec.layout == "offset":
        return tensor[1:].view(spec.shape), tensor
    return tensor, tensor


@dataclasses.dataclass(frozen=True)
class I:  # noqa: E742 - short on purpose: catalog rows read as data
    """An int64 index tensor with values in ``[low, high)``; ``unique`` draws a permutation
    prefix per row (no index repeats along the last dim, for scatter/index_copy whose
    result would otherwise depend on write order)."""

    shape: tuple[int, ...]
    high: int
    low: int = 0
    unique: bool = False


@dataclasses.dataclass(frozen=True)
class M:
    """A bool mask with ``P(True) = p``."""

    shape: tuple[int, ...]
    p: float = 0.5


@dataclasses.dataclass(frozen=True)
class Sample:
    """One set of arguments for an op. ``slow`` marks the large (>= 1M elements) case;
    ``dtypes`` (dtype names) runs it in those dtypes instead of the entry's (the
    integer-limit samples, Note [Integer limits]; the size sweep, Note [Size boundaries])."""

    name: str
    args: tuple
    kwargs: dict = dataclasses.field(default_factory=dict)
    slow: bool = False
    dtypes: Optional[tuple[str, ...]] = None


@dataclasses.dataclass(frozen=True)
class OpEntry:
    """One catalog row.

    Attributes:
        name: the op's stable name (record ids and case ids start with it).
        fn: ``fn(*args, **kwargs)`` -> tensor or tuple of tensors.
        samples: the argument sets.
        dtypes: dtype names it is tested in (floats, plus ints where the op takes them).
        backward: whether input gradients are checked too.
        standard: the forward outputs' precision standard (:data:`harness.compare.STANDARDS`);
            integer/bool outputs are always exact. Leave it unset: it comes from the one
            standards table, :func:`harness.ops.policy.standard_for` (an explicit value is
            for entries outside the catalog, e.g. in tests).
        grad_standard: the input gradients' standard (unset: from the same table, which
            says ``ulp`` for ulp ops, else ``relative``: a gradient is rarely a single
            rounding).
        judge: a custom check for ops whose output is random (dropout): called instead of
            the reference comparison, see :mod:`harness.ops.stats`.
        note: why a sample or standard is what it is (ties, domains...).
        condition: whether the output is a sum of products (matmul family, convolutions,
            linear reductions), judged against its condition ``sum |a_i b_i|`` (Note
            [Condition of products and reductions] in :mod:`harness.compare`). Default:
            True for ``ulp`` ops.
    """

    name: str
    fn: Callable[..., Any]
    samples: tuple[Sample, ...]
    dtypes: tuple[str, ...] = FLOATS
    backward: bool = True
    standard: Optional[str] = None
    grad_standard: Optional[str] = None
    judge: Optional[Callable[..., Any]] = None
    note: str = ""
    condition: Optional[bool] = None

    @property
    def sum_of_products(self) -> bool:
        if self.condition is not None:
            return self.condition
        from harness.ops import policy

        return policy.sums_products(self.name)

    def __post_init__(self) -> None:
        for field in ("standard", "grad_standard"):  # Note [Standards as objects]
            if getattr(self, field) is not None:
                standard_by_name(getattr(self, field), where=f"OpEntry {self.name!r} {field}=")
        if self.standard is None:  # the one table (harness.ops.policy)
            object.__setattr__(self, "standard", standard_for(self.name, "float32"))

    @property
    def all_dtypes(self) -> tuple[str, ...]:
        """The entry's dtypes, then those only some of its samples run in."""
        out = list(self.dtypes)
        for sample in self.samples:
            out += [d for d in sample.dtypes or () if d not in out]
        return tuple(out)

    def runs_in(self, sample: Sample, dtype: str) -> bool:
        """Whether ``sample`` runs in ``dtype`` (:attr:`Sample.dtypes`, else the entry's)."""
        return dtype in (sample.dtypes if sample.dtypes is not None else self.dtypes)

    def cases(self, dtypes: Optional[Sequence[str]] = None):
        """``(dtype, sample)`` for every sample in each dtype it runs in."""
        return [(dt, s) for dt in (dtypes or self.all_dtypes) for s in self.samples
                if self.runs_in(s, dt)]

    @property
    def gradient_standard(self) -> str:
        if self.grad_standard is not None:
            return self.grad_standard
        names = op_names(self.name)
        if any(n in OP_STANDARDS or n in GRAD_STANDARDS for n in names):
            return standard_for(self.name, "float32", "bwd")
        return "ulp" if self.standard == "ulp" else "relative"


# ------------------------------------------------------------------------ generation

def _distinct_grid() -> torch.Tensor:
    bits = torch.arange(0, 1 << 15, dtype=torch.int32).to(torch.int16)
    values = bits.view(torch.bfloat16).float()
    values = values[(values >= 2**-6) & (values < 8)]
    return torch.cat([values, -values])


_GRID: Optional[torch.Tensor] = None


def _distinct(shape: Sequence[int], gen: torch.Generator) -> torch.Tensor:
    global _GRID
    if _GRID is None:
        _GRID = _distinct_grid()
    n = 1
    for size in shape:
        n *= size
    if n > _GRID.numel():  # Note [Distinct values]: large cases fall back
        return torch.randn(tuple(shape), generator=gen)
    pick = torch.randperm(_GRID.numel(), generator=gen)[:n]
    return _GRID[pick].reshape(tuple(shape))


# The draws write their arithmetic as torch's functions (``torch.mul(x, s)``, not ``x * s``:
# the same kernels), so a profile charges it to torch, not to the harness (Note
# [Statistics in one pass of torch] in harness.compare).

def _uniform(low: float, high: float):
    def draw(shape, gen):
        return torch.add(torch.mul(torch.rand(tuple(shape), generator=gen), high - low), low)
    return draw


def _scaled_normal(scale: float, shift: float = 0.0):
    def draw(shape, gen):
        return torch.add(torch.mul(torch.randn(tuple(shape), generator=gen), scale), shift)
    return draw


# Note [Ties at a bound]: values an op with a bound (clamp, hardtanh, relu6, relu) maps
# onto its bound, and the bounds themselves, each exactly representable in bf16/fp16/fp32.
# About a third of the elements sit exactly on -0.5, 0, 0.75 or 6 (the bounds the catalog's
# tie rows use), so the forward *and the gradient at the tie* (torch: clamp passes the
# gradient at min <= x <= max, hardtanh/relu6/relu do not at their bounds) are checked on
# the op itself.
TIE_VALUES = (-6.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, 6.0, 7.0)
TIE_BOUNDS = (-0.5, 0.0, 0.75, 6.0)


def _ties(shape: Sequence[int], gen: torch.Generator) -> torch.Tensor:
    values = torch.tensor(TIE_VALUES)
    bounds = torch.tensor(TIE_BOUNDS)
    pick = values[torch.randint(0, len(TIE_VALUES), tuple(shape), generator=gen)]
    on_bound = bounds[torch.randint(0, len(TIE_BOUNDS), tuple(shape), generator=gen)]
    return torch.where(torch.lt(torch.rand(tuple(shape), generator=gen), 1 / 3), on_bound, pick)


# Note [Ties at a rounded bound]: a bound that is *not* representable (0.3) still ties on
# the DUT, where an input is 0.3 as its dtype rounds it and the op compares it with the
# bound rounded the same way, while the up-cast reference sees the rounded input above 0.3
# and no tie. So the gradient the DUT's kernel gives at its tie shows against the
# reference, and a change of that convention between stacks (torch 2.14.1's clamp_min
# backward passes no gradient at the bound where 2.13.0 passed it) shows on the op itself
# as a baseline change, while the CPU in the same dtype ties alike (Note [CPU's own
# error]). Exactly representable bounds (Note [Ties at a bound]) tie in the reference too.
ROUNDED_BOUND = 0.3


def _rounded_bound_ties(shape: Sequence[int], gen: torch.Generator) -> torch.Tensor:
    values = torch.randn(tuple(shape), generator=gen)
    return torch.where(torch.lt(torch.rand(tuple(shape), generator=gen), 0.25),
                       torch.full(tuple(shape), ROUNDED_BOUND), values)


DOMAINS: dict[str, Callable[[Sequence[int], torch.Generator], torch.Tensor]] = {
    "normal": _scaled_normal(1.0),
    "positive": _uniform(0.25, 4.0),        # log, sqrt, rsqrt, reciprocal, pow base
    "unit": _uniform(-0.95, 0.95),          # asin, acos, atanh, erfinv
    "prob": _uniform(0.02, 0.98),           # probabilities (bce, logit)
    "above1": _uniform(1.05, 4.0),          # acosh
    "nonzero": lambda shape, gen: (_uniform(0.25, 3.0)(shape, gen)
                                   * (torch.randint(0, 2, tuple(shape), generator=gen) * 2 - 1)),
    "large": _scaled_normal(30.0),          # large logits: softmax must subtract the max
    "small": _scaled_normal(1e-3),
    "distinct": _distinct,
    "wide": _scaled_normal(3.0),            # exp/sinh inputs that reach far but stay finite
    "near1": _uniform(0.8, 1.25),           # products (prod, cumprod) that stay in range
    "ties": _ties,                          # Note [Ties at a bound]
    "rounded_bound": _rounded_bound_ties,   # Note [Ties at a rounded bound]
    "nonfinite": lambda shape, gen: _nonfinite(shape, gen),  # nan_to_num's replacements
    "limits": _scaled_normal(3.0),          # integers: both ends of the range (Note [Integer limits])
}


def _nonfinite(shape: Sequence[int], gen: torch.Generator) -> torch.Tensor:
    """Normal values with about a tenth each NaN, +inf and -inf."""
    x = torch.randn(tuple(shape), generator=gen)
    pick = torch.randint(0, 10, tuple(shape), generator=gen)
    x[pick == 0] = float("nan")
    x[pick == 1] = float("inf")
    x[pick == 2] = float("-inf")
    return x

# Note [Special values in a domain]: ``"<base>+specials=nan,inf,-inf,zero"`` is the domain
# <base> with IEEE special values written over some elements (harness.ops.edge uses it to
# derive the special-value samples of a catalog row, Note [Special-value semantics] there).
# Rows of the last dim take turns: a clean row, one row per special (one element each), a
# row holding every special; a 0-d or 1-d tensor is that last kind of row. ``zero`` writes
# -0.0 and +0.0. Positions come from the case's generator, so they depend only on the id.
SPECIAL_VALUES: dict[str, tuple[float, ...]] = {
    "nan": (float("nan"),), "inf": (float("inf"),), "-inf": (float("-inf"),),
    "zero": (-0.0, 0.0)}


def special_domain(base: str, specials: Sequence[str]) -> str:
    """The domain name of ``base`` with ``specials`` (keys of :data:`SPECIAL_VALUES`)."""
    unknown = [s for s in specials if s not in SPECIAL_VALUES]
    if base not in DOMAINS or unknown or not specials:
        raise ValueError(f"special_domain({base!r}, {list(specials)!r}): the base must be one "
                         f"of {sorted(DOMAINS)} and the specials a non-empty subset of "
                         f"{list(SPECIAL_VALUES)}")
    return f"{base}+specials={','.join(specials)}"


def _split_domain(name: str) -> tuple[str, tuple[str, ...]]:
    base, _, specials = name.partition("+specials=")
    return base, tuple(s for s in specials.split(",") if s)


def _with_specials(x: torch.Tensor, specials: Sequence[str], gen: torch.Generator) -> torch.Tensor:
    """``x`` with special values written over some elements (Note above)."""
    kinds = [v for s in specials for v in SPECIAL_VALUES[s]]
    if not x.numel() or not kinds:
        return x
    x = x.clone()
    rows = x.reshape(-1, x.shape[-1]) if x.dim() >= 2 else x.reshape(1, -1)
    cycle = len(kinds) + 2
    for r in range(rows.shape[0]):
        turn = r % cycle if rows.shape[0] > 1 else cycle - 1
        if turn == 0:
            continue
        wanted = kinds[turn - 1:turn] if turn <= len(kinds) else kinds
        where = torch.randperm(rows.shape[1], generator=gen)[:len(wanted)]
        for position, value in zip(where.tolist(), wanted):
            rows[r, position] = value
    return rows.reshape(x.shape)


def domain_values(name: str, shape: Sequence[int], gen: torch.Generator) -> torch.Tensor:
    """Values of domain ``name`` (a key of :data:`DOMAINS`, or one with specials)."""
    base, specials = _split_domain(name)
    return _with_specials(DOMAINS[base](shape, gen), specials, gen)


INT_DOMAINS: dict[str, tuple[int, int]] = {
    "normal": (-8, 9), "positive": (1, 9), "nonzero": (1, 9), "distinct": (-8, 9),
    "unit": (-1, 2), "prob": (0, 2), "above1": (2, 9), "large": (-100, 101), "small": (-2, 3),
    "wide": (-20, 21), "near1": (1, 2), "ties": (-1, 2), "nonfinite": (-8, 9),
}
"""Integer ranges per domain; ``limits`` is drawn apart (Note [Integer limits])."""


_NAMESPACES: tuple = (torch.nn.functional, torch, torch.linalg, torch.special, torch.Tensor)


def late_bound(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Call a public torch function through its namespace at call time.

    Catalog rows hold function objects, captured when the catalog is imported; a fault (or a
    user's monkeypatch) that replaces ``torch.nn.functional.conv2d`` must still reach the
    op, so a function found under its own name in a torch namespace is looked up there on
    every call. Other callables are returned unchanged.
    """
    name = getattr(fn, "__name__", None)
    for namespace in _NAMESPACES if name else ():
        if getattr(namespace, name, None) is fn:
            def call(*args, _ns=namespace, _name=name, **kwargs):
                return getattr(_ns, _name)(*args, **kwargs)
            call.__name__ = name
            call.__qualname__ = f"late_bound({getattr(namespace, '__name__', '?')}.{name})"
            return call
    return fn


def case_seed(seed: int, *parts: str) -> int:
    """A case's seed: the global seed plus crc32 of its parts (never ``hash()``)."""
    return (seed + zlib.crc32("-".join(parts).encode("utf-8"))) & 0x7FFFFFFF


# Note [Integer limits]
# ~~~~~~~~~~~~~~~~~~~~~
# Integer kernels go wrong near their dtype's range: a reduction that accumulates in the
# input's width overflows where torch promotes (``sum``, ``cumsum``, ``prod`` of any integer
# or bool input accumulate and return int64: harness.compare.INTEGER_RESULTS), a saturating
# kernel clamps where torch wraps. The ``limits`` domain draws, for an integer dtype,
# distinct values from both ends of its range (max, max-1, ..., min, min+1, ...; cycling
# when the tensor holds more values than the range), so such a kernel shows on the op
# itself; the result is judged exact against the CPU, whose integer arithmetic wraps the
# way torch documents. A float dtype draws ``wide`` values.
def _int_limits(shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    info = torch.iinfo(dtype)
    n = 1
    for size in shape:
        n *= size
    span = info.max - info.min + 1
    pick = torch.randperm(n, generator=gen)
    if n > span:
        pick = pick % span
    high = info.max - torch.div(pick, 2, rounding_mode="floor")
    low = info.min + torch.div(pick, 2, rounding_mode="floor")
    return torch.where(pick % 2 == 0, high, low).to(dtype).reshape(tuple(shape))


def _tensor_for(spec: T, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    shape = base_shape(spec)
    if spec.noncontig:
        if len(shape) < 2:
            raise ValueError(f"noncontig needs >= 2 dims, got {shape}")
        shape = (*shape[:-2], shape[-1], shape[-2])
    if dtype.is_floating_point:
        base = domain_values(spec.domain, shape, gen).to(dtype)
    elif dtype == torch.bool:
        base = torch.rand(tuple(shape), generator=gen) < 0.5
    elif spec.domain == "limits":
        base = _int_limits(shape, dtype, gen)
    else:
        low, high = INT_DOMAINS[_split_domain(spec.domain)[0]]
        if spec.domain == "distinct":
            n = 1
            for size in shape:
                n *= size
            base = (torch.randperm(n, generator=gen) - n // 2).reshape(tuple(shape))
            base = base.to(dtype)
        else:
            base = torch.randint(low, high, tuple(shape), generator=gen, dtype=dtype)
    if spec.noncontig:
        base = base.transpose(-1, -2)
    return base


def materialize(sample: Sample, dtype_name: str, gen: torch.Generator) -> list:
    """The sample's arguments as CPU values: :class:`T` in the DUT dtype, :class:`I` int64,
    :class:`M` bool; lists/tuples are materialized element-wise; other values pass."""
    dtype = DTYPES[dtype_name]

    def value(spec):
        if isinstance(spec, T):
            return _tensor_for(spec, DTYPES[spec.dtype] if spec.dtype else dtype, gen)
        if isinstance(spec, I):
            return _index(spec, gen)
        if isinstance(spec, M):
            return torch.rand(spec.shape, generator=gen) < spec.p
        if isinstance(spec, (list, tuple)):
            return type(spec)(value(s) for s in spec)
        return spec

    return [value(spec) for spec in sample.args]


def _index(spec: I, gen: torch.Generator) -> torch.Tensor:
    if not spec.unique:
        return torch.randint(spec.low, spec.high, spec.shape, generator=gen)
    rows = 1  # no repeat along the last dim
    for size in spec.shape[:-1]:
        rows *= size
    last = spec.shape[-1]
    perms = [torch.randperm(spec.high - spec.low, generator=gen)[:last] for _ in range(rows)]
    return (torch.stack(perms) + spec.low).reshape(spec.shape)


def numel(sample: Sample) -> int:
    """Elements over the sample's tensor arguments (the >= 1M check for slow cases)."""
    total = 0
    for spec in sample.args:
        specs = spec if isinstance(spec, (list, tuple)) else (spec,)
        for one in specs:
            if isinstance(one, (T, I, M)):
                n = 1
                for size in one.shape:
                    n *= size
                total += n
    return total
