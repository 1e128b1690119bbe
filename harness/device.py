"""The device under test (DUT): the only module that knows vendor APIs.

A :class:`Device` wraps one device type (``npu``, ``cuda``, ``xpu``, ``mps``, ``cpu``)
and index. Everything type-specific is a row of :data:`harness.kinds.KINDS` (probe,
collective backend, stack, dispatch key, autocast dtypes, fallback and out-of-memory
texts; ``device.kind``), re-exported here, or a generic torch API looked up on the
device's module (``torch.cuda``, ``torch.npu``, ...), with the row's ``legacy_amp``
module (``torch_npu.npu.amp``) for older stacks. The probes the rows name live here.

``torch_npu`` is never imported at module import time; :func:`probe` imports it inside a
function and turns every failure into a *reason* a person can act on.

Note [DUT scope]
~~~~~~~~~~~~~~~~
Every computation that stands for the device under test runs inside ``device.scope()``;
reference computations never do. On hardware the scope costs nothing. On the CPU, where
the DUT and the reference are the same silicon, the scope is what tells them apart, and
it is where injected faults (:mod:`harness.faults`) act, exactly as a broken NPU kernel
would corrupt the NPU's numbers and never the CPU's.

Note [Missing features of older stacks]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The suite supports torch >= 2.1, and older stacks lack features newer ones have: torch
2.1's CPU autocast knows only bfloat16 (``Currently, AutocastCPU only support Bfloat16``),
and it has no ``torch.amp.GradScaler`` (its ``torch.cuda.amp.GradScaler`` disables itself
off CUDA, so its ``scale`` returns the loss unscaled). A missing feature is not a defect
of the device under test: the check that needs it is recorded ``unsupported`` with the
reason, never ``error`` or ``fail``.

One place per feature decides: :meth:`Device.autocast_unsupported` and
:meth:`Device.grad_scaler_unsupported` try the feature once per process (a tiny ``mm``
under ``autocast`` must come out in the autocast dtype; a fresh GradScaler must be
enabled) and cache the answer: the probe is the truth, not a table of versions, so a
torch_npu that adds fp16 autocast later is used as soon as it is there.
:meth:`Device.autocast` and :meth:`Device.grad_scaler` raise :class:`Unsupported` with
that reason, and the plugin turns an ``Unsupported`` raised by a check into an
``unsupported`` record (the check is reported skipped with the reason), so no check needs
its own version test. The session header names what is missing.

On torch 2.1 the CPU memory tracker is one such feature, and the reason the interpreter
used to crash at exit (rc 139) after the memory checks: torch 2.1 makes a new
``UntypedStorage`` wrapper per ``untyped_storage()`` call and frees it without clearing
its weak references, so the ``weakref.finalize`` the tracker puts on it (how it sees
frees) never runs and dangles; ``weakref``'s exit hook then walks the dangling ones and
segfaults (faulthandler: ``weakref.py ... in _exitfunc``; reproduced outside the suite
with a dispatch mode and a finaliser on a storage). The probe therefore puts no weak
reference on a storage unless one object per storage is kept, and the tracker is refused
where it fails: no wrong numbers, no crash.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import platform
import re
import sys
import threading
import time
import warnings
import weakref
from typing import Callable, Iterator, Optional

import torch

from harness import dtypes, faults
from harness.kinds import DEVICE_TYPES, KINDS, Kind

# torch.OutOfMemoryError is torch >= 2.5; torch.cuda's exists on every build
TORCH_OOM: type[BaseException] = getattr(torch, "OutOfMemoryError", None) \
    or torch.cuda.OutOfMemoryError
"""torch's out-of-memory exception class (what a harness memory cap raises)."""


class DeviceUnavailable(RuntimeError):
    """A requested device cannot be used; the message says why and how to fix it."""


class Unsupported(Exception):
    """This stack lacks a feature a check needs (Note [Missing features of older stacks]).

    The message is the reason. A check that raises it is recorded ``unsupported``, not
    ``error``: deliberately not a RuntimeError, so no ``except RuntimeError`` swallows it.
    """


_FEATURES: dict[tuple, Optional[str]] = {}
"""Cached feature probes: (feature, device type, detail) -> None (works) or the reason."""


def _feature(key: tuple, probe_fn: Callable[[], Optional[str]]) -> Optional[str]:
    if key not in _FEATURES:
        _FEATURES[key] = probe_fn()
    return _FEATURES[key]


def missing_kernel(exc: BaseException) -> bool:
    """Whether ``exc`` says the stack lacks a kernel or feature: the one classifier's
    ``unsupported`` (:mod:`harness.classify`), for every check's exception."""
    from harness.classify import is_unsupported

    return is_unsupported(exc)


def torch_api(path: str):
    """The torch API at ``path`` (``"nn.functional.rms_norm"``), or :class:`Unsupported`
    naming it when this torch has none (Note [Missing features of older stacks])."""
    obj = torch
    for part in path.split("."):
        if not hasattr(obj, part):
            raise Unsupported(f"torch {torch.__version__} has no torch.{path}")
        obj = getattr(obj, part)
    return obj


def storage_lifetime_unsupported() -> Optional[str]:
    """None when a storage keeps one Python object for its life, so a weak-reference
    finaliser on it sees the storage freed (what :class:`harness.memory.StorageTracker`,
    the CPU's memory meter, counts frees by); else the reason (probed once)."""
    return _feature(("storage_lifetime",), _probe_storage_lifetime)


def _probe_storage_lifetime() -> Optional[str]:
    tensor = torch.empty(16)
    storage = tensor.untyped_storage()
    if storage is not tensor.untyped_storage():
        # no weak reference to such a storage: torch 2.1 frees these wrappers without
        # clearing their weak references, and the dangling ones crash the exit (below)
        return (f"torch {torch.__version__} keeps no Python object per storage "
                "(untyped_storage() returns a new one each call), so the harness's CPU "
                "memory tracker cannot see frees; memory checks need a device with "
                "allocator statistics or a newer torch")
    freed: list = []
    weakref.finalize(storage, freed.append, True)
    del storage, tensor
    gc.collect()
    if not freed:
        return (f"torch {torch.__version__} never finalises a freed storage's Python "
                "object, so the harness's CPU memory tracker cannot see frees")
    return None


def _warning_text(caught: list) -> str:
    return "; ".join(" ".join(str(w.message).split()) for w in caught)


@dataclasses.dataclass(frozen=True)
class Probe:
    """Outcome of probing one device type.

    ``installed``: the device's own software (a vendor package such as torch_npu, or a
    requested simulator) is present, so the device being unusable is worth a warning
    (the doctor's), not just a fact.
    """

    type: str
    available: bool
    reason: str
    count: int = 0
    installed: bool = False


# --------------------------------------------------------------------------- probes
# Each probe returns a Probe and never raises; tests fake them with monkeypatch.

def _probe_cpu() -> Probe:
    return Probe("cpu", True, "the CPU is always present", 1)


def _probe_cuda() -> Probe:
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return Probe("cuda", False, f"torch {torch.__version__} was built without CUDA "
                     "(torch.version.cuda is None); install a CUDA build of torch")
    try:
        count = torch.cuda.device_count()
    except Exception as exc:  # noqa: BLE001 - any driver failure is a reason, not a crash
        return Probe("cuda", False, f"torch.cuda.device_count() failed: {exc}")
    if not torch.cuda.is_available() or count == 0:
        return Probe("cuda", False, "no CUDA device is visible (torch.cuda.is_available() is "
                     "False); check `nvidia-smi` and CUDA_VISIBLE_DEVICES")
    return Probe("cuda", True, f"{count} CUDA device(s) visible", count)


def _probe_xpu() -> Probe:
    xpu = getattr(torch, "xpu", None)
    if xpu is None:
        return Probe("xpu", False, f"torch {torch.__version__} has no torch.xpu module")
    try:
        if not xpu.is_available():
            return Probe("xpu", False, "no XPU is visible (torch.xpu.is_available() is False)")
        count = xpu.device_count()
    except Exception as exc:  # noqa: BLE001 - a failing probe is a reason
        return Probe("xpu", False, f"torch.xpu probe failed: {exc}")
    return Probe("xpu", True, f"{count} XPU device(s) visible", count)


def _probe_mps() -> Probe:
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_built():
        return Probe("mps", False, "torch was built without MPS (macOS only)")
    if not mps.is_available():
        return Probe("mps", False, "MPS is built but not available (needs macOS 12.3+ "
                     "on Apple silicon)")
    return Probe("mps", True, "Apple MPS device available", 1)


def torch_npu_version() -> Optional[str]:
    """The installed torch_npu's version from package metadata, without importing it.

    Under the simulator (:mod:`harness.simnpu`) it is the fake module's version: there is
    no package to read metadata from.
    """
    module = sys.modules.get("torch_npu")
    if module is not None and getattr(module, "__simnpu__", False):
        return str(module.__version__)
    try:
        return importlib.metadata.version("torch_npu")
    except importlib.metadata.PackageNotFoundError:
        return None


def _import_torch_npu():
    """Import torch_npu (a seam: tests replace it to fake failures)."""
    return importlib.import_module("torch_npu")


def _base_version(version: str) -> str:
    """``2.4.0.post2`` / ``2.4.0+cpu`` -> ``2.4.0``."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not match:
        return version
    return ".".join(part or "0" for part in match.groups())


def explain_npu_import_error(exc: BaseException) -> str:
    """Turn a failed ``import torch_npu`` into a reason with its fix."""
    text = str(exc)
    if "cannot open shared object file" in text or re.search(r"lib(hccl|ascend|acl|ge_)", text):
        return (f"torch_npu is installed but CANN's libraries are not on the library path "
                f"({text}); source the CANN environment first: "
                "`source /usr/local/Ascend/cann/set_env.sh` (CANN >= 8.5) or "
                "`source /usr/local/Ascend/ascend-toolkit/set_env.sh` (older)")
    if "version" in text.lower() and "torch" in text.lower():
        return (f"torch_npu refuses this torch ({text}); install the torch_npu build made for "
                f"torch {torch.__version__}")
    return f"import torch_npu failed: {type(exc).__name__}: {text}"


def _probe_simnpu() -> Optional[Probe]:
    """The simulated NPU (``HARNESS_SIMNPU=1``, :mod:`harness.simnpu`); None when not asked
    for or when a real torch_npu is installed (real hardware is never replaced)."""
    from harness import simnpu

    if not simnpu.requested() or simnpu.real_torch_npu_installed():
        return None
    missing = simnpu.compiler_missing()
    if missing:
        return Probe("npu", False, f"HARNESS_SIMNPU=1 but the simulator cannot be built: "
                     f"{missing}", installed=True)
    try:
        simnpu.load()
        count = torch.npu.device_count()
    except Exception as exc:  # noqa: BLE001 - a failed build or load is a reason
        return Probe("npu", False, f"HARNESS_SIMNPU=1 but the simulator failed to load: "
                     f"{type(exc).__name__}: {str(exc)[-500:]}", installed=True)
    return Probe("npu", True, f"{count} {simnpu.DEVICE_NAME} device(s) (simulated, CANN "
                 f"{simnpu.cann_version()}; HARNESS_SIMNPU=1, not real hardware)", count)


def _probe_npu() -> Probe:
    simulated = _probe_simnpu()
    if simulated is not None:
        return simulated
    npu_version = torch_npu_version()
    if npu_version is None and importlib.util.find_spec("torch_npu") is None:
        return Probe("npu", False, "torch_npu is not installed (pip install torch_npu matching "
                     f"torch {_base_version(torch.__version__)} and your CANN version; "
                     "HARNESS_SIMNPU=1 simulates one: docs/simnpu.md)")
    if npu_version is not None and _base_version(npu_version) != _base_version(torch.__version__):
        return Probe("npu", False, f"version mismatch: torch {torch.__version__} but torch_npu "
                     f"{npu_version}; torch_npu must be built for the same torch "
                     f"(pip install 'torch_npu=={_base_version(torch.__version__)}.*')",
                     installed=True)
    try:
        _import_torch_npu()
    except Exception as exc:  # noqa: BLE001 - every import failure becomes a reason
        return Probe("npu", False, explain_npu_import_error(exc), installed=True)
    npu = getattr(torch, "npu", None)
    try:
        available = bool(npu is not None and npu.is_available())
        count = npu.device_count() if available else 0
    except Exception as exc:  # noqa: BLE001
        return Probe("npu", False, f"torch.npu probe failed: {exc}", installed=True)
    if not available or count == 0:
        return Probe("npu", False, "torch_npu imported but no NPU is visible "
                     "(torch.npu.is_available() is False); check `npu-smi info`, the driver, "
                     "and ASCEND_RT_VISIBLE_DEVICES", installed=True)
    return Probe("npu", True, f"{count} NPU(s) visible (torch_npu {npu_version})", count,
                 installed=True)


# ----------------------------------------------------------------------- kinds table
# The rows are harness.kinds.KINDS (imported above); a row names its probe, one of the
# functions above, so that table needs no torch.

def probe_function(kind: Kind) -> Callable[[], Probe]:
    """The probe a row names: a function of this module by name, or the function itself."""
    if callable(kind.probe):
        return kind.probe
    found = globals().get(kind.probe)
    if not callable(found):
        raise ValueError(f"device type {kind.type!r}: its row names the probe "
                         f"{kind.probe!r}, which harness.device does not define")
    return found


def probe(device_type: str) -> Probe:
    """Probe one device type (never raises)."""
    if device_type not in KINDS:
        raise ValueError(f"unknown device type {device_type!r}; choose from "
                         f"{', '.join(DEVICE_TYPES)}")
    return probe_function(KINDS[device_type])()


def select(requested: str = "auto", index: int = 0) -> tuple[Device, list[Probe]]:
    """Pick the device under test.

    ``auto`` takes the first available in :data:`KINDS` order (npu > cuda > xpu > mps >
    cpu). Returns the device and the probes made (so callers can say why an accelerator
    was not used).
    Raises :class:`DeviceUnavailable` when an explicitly requested type is unusable.
    """
    if requested == "auto":
        probes = []
        for device_type in DEVICE_TYPES:
            result = probe(device_type)
            probes.append(result)
            if result.available:
                return Device(device_type, index % max(result.count, 1), result.count), probes
        raise AssertionError("unreachable: the CPU is always available")
    result = probe(requested)
    if not result.available:
        raise DeviceUnavailable(f"--device {requested} is not usable: {result.reason}. "
                                "Run `python -m harness doctor` for details, or use "
                                "--device auto / --device cpu")
    return Device(requested, index % max(result.count, 1), result.count), [result]


# --------------------------------------------------------------------------- device

class _CpuTimer:
    """Wall-clock timer with the same shape as a device event timer."""

    def __init__(self) -> None:
        self._start = self._end = 0.0

    def start(self) -> None:
        self._start = time.perf_counter()

    def stop(self) -> None:
        self._end = time.perf_counter()

    def elapsed_ms(self) -> float:
        return (self._end - self._start) * 1e3


class _EventTimer:
    """Device-event timer (``Event(enable_timing=True)``), read after a synchronize."""

    def __init__(self, module) -> None:
        self._begin = module.Event(enable_timing=True)
        self._end = module.Event(enable_timing=True)

    def start(self) -> None:
        self._begin.record()

    def stop(self) -> None:
        self._end.record()
        self._end.synchronize()

    def elapsed_ms(self) -> float:
        return float(self._begin.elapsed_time(self._end))


_scope_state = threading.local()


def _takes_device(function: Callable) -> bool:
    """Whether a ``torch.<type>`` memory API takes a device argument (``torch.mps``'s
    have none: one device); a signature Python cannot read is assumed to."""
    try:
        return "device" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return True


class Device:
    """One device under test: a type, an index, and the vendor calls behind them."""

    def __init__(self, device_type: str, index: int = 0, count: int = 1) -> None:
        if device_type not in KINDS:
            raise ValueError(f"unknown device type {device_type!r}")
        self.type = device_type
        self.index = index
        self.count = count
        self.kind = KINDS[device_type]

    def __repr__(self) -> str:
        return f"Device({self.type!r}, index={self.index})"

    # ---- identity
    @property
    def torch_device(self) -> torch.device:
        return torch.device("cpu") if self.type == "cpu" else torch.device(self.type, self.index)

    @property
    def module(self):
        """``torch.cuda`` / ``torch.npu`` / ...; None for the CPU."""
        if self.type == "cpu":
            return None
        get = getattr(torch, "get_device_module", None)
        return get(self.type) if get is not None else getattr(torch, self.type)

    @property
    def name(self) -> str:
        if self.type == "cpu":
            return cpu_model_name()
        if self.type == "mps":
            return f"Apple {platform.machine()} (MPS)"
        return str(self.module.get_device_name(self.index))

    @property
    def dist_backend(self) -> str:
        return self.kind.dist_backend

    @property
    def simulated(self) -> bool:
        """Whether this is a simulator (the row's ``simulator``: :mod:`harness.simnpu`),
        not real hardware."""
        if self.kind.simulator is None:
            return False
        return bool(importlib.import_module(self.kind.simulator).is_loaded())

    @property
    def is_accelerator(self) -> bool:
        return self.type != "cpu"

    @property
    def host_timed(self) -> bool:
        """Whether its kernels run on this host's CPU, in this process: the CPU, or a
        simulator (SimNPU runs the CPU's kernels through its fallback). Benchmarks time
        such a device as the CPU (Note [A simulator is timed as its host] in
        :mod:`harness.bench.timing`)."""
        return not self.is_accelerator or self.simulated

    # ---- execution
    def synchronize(self) -> None:
        if self.module is not None and hasattr(self.module, "synchronize"):
            self.module.synchronize()

    def seed(self, n: int) -> None:
        """Seed torch's CPU generator and this device's generators.

        Not ``torch.manual_seed``, which seeds every device type torch knows (CUDA, XPU,
        MTIA, MPS and the registered backend) and, for each not initialised, queues the
        call with a formatted Python stack: 0.4 ms a call under pytest's deep stacks on an
        Intel Xeon, paid before every test. The generators seeded here are the ones a
        check draws from: the CPU's (inputs are made there) and the device's own, whose
        ``manual_seed_all`` (``manual_seed`` where it has none, as MPS) is what
        ``torch.manual_seed`` calls for it."""
        torch.default_generator.manual_seed(n)
        module = self.module
        if module is not None:
            seed = getattr(module, "manual_seed_all", None) or getattr(module, "manual_seed", None)
            if seed is not None:
                seed(n)

    def set_current(self) -> None:
        """Make this device current (``set_device(local_rank)`` before building models)."""
        if self.module is not None and hasattr(self.module, "set_device"):
            self.module.set_device(self.index)

    @staticmethod
    def in_scope() -> bool:
        """Whether this thread is inside a DUT scope (Note [DUT scope])."""
        return getattr(_scope_state, "depth", 0) > 0

    @contextlib.contextmanager
    def scope(self) -> Iterator[Device]:
        """The DUT scope (Note [DUT scope]): re-entrant; activates injected faults."""
        depth = getattr(_scope_state, "depth", 0)
        _scope_state.depth = depth + 1
        try:
            if depth:
                yield self
            else:
                with faults.activated(self):
                    yield self
        finally:
            _scope_state.depth = depth

    # ---- memory (None where the device keeps no allocator statistics: the CPU)
    @property
    def has_allocator_stats(self) -> bool:
        return self.module is not None and hasattr(self.module, "max_memory_allocated")

    def reset_peak(self) -> None:
        if self.has_allocator_stats:
            self.module.reset_peak_memory_stats(self.index)

    def peak_allocated(self) -> Optional[int]:
        if self.has_allocator_stats:
            return int(self.module.max_memory_allocated(self.index))
        return None

    def allocated(self) -> Optional[int]:
        if self.has_allocator_stats:
            return int(self.module.memory_allocated(self.index))
        if self.module is not None and hasattr(self.module, "current_allocated_memory"):
            return int(self.module.current_allocated_memory())  # torch.mps: no index
        return None

    def reserved(self) -> Optional[int]:
        """Bytes the caching allocator holds in segments (``memory_reserved``), or None
        where the device does not say: what the memory fraction caps on torch_npu and
        CUDA (Note [The cap is on reserved memory] in :mod:`harness.memory.meter`)."""
        if self.has_allocator_stats and hasattr(self.module, "memory_reserved"):
            return int(self.module.memory_reserved(self.index))
        return None

    @property
    def reserves_segments(self) -> bool:
        """Whether the allocator reserves memory in segments beyond the blocks in use
        (torch_npu's and CUDA's caching allocators; SimNPU in fidelity mode), so that a
        memory fraction caps segments, not bytes."""
        if not self.has_allocator_stats or not hasattr(self.module, "memory_reserved"):
            return False
        if self.simulated:
            return bool(importlib.import_module(self.kind.simulator).fidelity())
        return True

    def total_memory(self) -> Optional[int]:
        if self.module is not None and hasattr(self.module, "get_device_properties"):
            return int(self.module.get_device_properties(self.index).total_memory)
        return None

    def cap(self, nbytes: Optional[int]) -> None:
        """Cap this process's allocations at ``nbytes`` (None lifts the cap)."""
        if self.module is None or not hasattr(self.module, "set_per_process_memory_fraction"):
            raise NotImplementedError(f"{self.type} has no allocator cap; harness.memory "
                                      "applies caps to its tracker instead")
        total = self.total_memory()
        fraction = 1.0 if nbytes is None or not total else min(1.0, nbytes / total)
        set_fraction = self.module.set_per_process_memory_fraction
        if _takes_device(set_fraction):
            set_fraction(fraction, self.index)
        else:  # torch.mps: one device, no index
            set_fraction(fraction)

    def empty_cache(self) -> None:
        if self.module is not None and hasattr(self.module, "empty_cache"):
            self.module.empty_cache()

    def memory_summary(self) -> str:
        if self.module is not None and hasattr(self.module, "memory_summary"):
            try:
                return str(self.module.memory_summary(self.index))
            except Exception as exc:  # noqa: BLE001 - a summary is best effort
                return f"(memory_summary failed: {exc})"
        return f"({self.type} keeps no allocator statistics)"

    @property
    def oom_error(self) -> type[BaseException]:
        """The exception this device raises on out-of-memory on current stacks (and what
        the harness's own caps raise); :meth:`is_out_of_memory` also knows older ones."""
        return TORCH_OOM

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """Whether ``exc`` is this device running out of memory: :attr:`oom_error`, or a
        ``RuntimeError`` whose text is the row's ``oom_message`` (older stacks: torch_npu's
        ``RuntimeError("NPU out of memory. Tried to allocate ...")``; Note [Fallback and
        OOM texts are per device] in :mod:`harness.kinds`)."""
        if isinstance(exc, self.oom_error):
            return True
        return isinstance(exc, RuntimeError) and bool(
            re.search(self.kind.oom_message, str(exc)))

    # ---- mixed precision
    @property
    def amp_dtype(self) -> torch.dtype:
        """The preferred autocast dtype here (the row's first ``amp_dtypes``: torch's
        default autocast dtype for the type; bfloat16 on the CPU, float16 on an NPU)."""
        return dtypes.BY_NAME[self.kind.amp_dtype]

    @property
    def amp_dtypes(self) -> tuple[torch.dtype, ...]:
        """The autocast dtypes this device type's autocast knows, preferred first (whether
        this stack has each is :meth:`autocast_unsupported`'s probe)."""
        return tuple(dtypes.BY_NAME[name] for name in self.kind.amp_dtypes)

    def autocast(self, dtype: torch.dtype = torch.float16, enabled: bool = True):
        """``torch.autocast`` for this device; ``torch_npu.npu.amp`` on older stacks.

        Raises :class:`Unsupported` when this stack has no autocast in ``dtype`` on this
        device (Note [Missing features of older stacks]); ``enabled=False`` always works.
        """
        reason = self.autocast_unsupported(dtype)
        if reason is None:
            return self._autocast(dtype, enabled)
        if enabled:
            raise Unsupported(reason)
        # a disabled region's dtype does not matter, but torch 2.1's CPU autocast refuses
        # a float16 one on entering even when disabled: give it the device's default dtype
        return self._autocast(None, False)

    def _autocast(self, dtype: Optional[torch.dtype], enabled: bool):
        chosen = {} if dtype is None else {"dtype": dtype}
        try:
            return torch.autocast(device_type=self.kind.autocast_type, enabled=enabled,
                                  **chosen)
        except (RuntimeError, ValueError):
            if self.kind.legacy_amp is None:
                raise
            return importlib.import_module(self.kind.legacy_amp).autocast(
                enabled=enabled, **chosen)

    def autocast_unsupported(self, dtype: torch.dtype) -> Optional[str]:
        """None when autocast in ``dtype`` works here, else the reason: a dtype the row's
        ``amp_dtypes`` do not list is refused without trying; the others are probed once."""
        if dtype not in self.amp_dtypes:
            return (f"{self.type} autocast knows {', '.join(self.kind.amp_dtypes)}, not "
                    f"{dtypes.name(dtype)} (harness.kinds.KINDS[{self.type!r}].amp_dtypes)")
        return _feature(("autocast", self.type, dtype), lambda: self._probe_autocast(dtype))

    def _probe_autocast(self, dtype: torch.dtype) -> Optional[str]:
        what = (f"torch {torch.__version__} has no {str(dtype)[6:]} autocast on "
                f"{self.type}")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                x = torch.ones(2, 2, device=self.torch_device)
                with self._autocast(dtype, True):
                    out = torch.mm(x, x)
            except Exception as exc:  # noqa: BLE001 - any refusal is the reason
                return f"{what} ({type(exc).__name__}: {' '.join(str(exc).split())})"
        if out.dtype != dtype:
            said = _warning_text(caught)
            return (f"{what} (mm under autocast({str(dtype)[6:]}) returned {out.dtype}"
                    + (f"; torch warned: {said}" if said else "") + ")")
        return None

    def grad_scaler_unsupported(self) -> Optional[str]:
        """None when this device has a working GradScaler, else the reason (probed once)."""
        return _feature(("grad_scaler", self.type), self._probe_grad_scaler)

    def _probe_grad_scaler(self) -> Optional[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                scaler = self._grad_scaler()
            except Exception as exc:  # noqa: BLE001 - any refusal is the reason
                return (f"torch {torch.__version__} has no GradScaler for {self.type} "
                        f"({type(exc).__name__}: {' '.join(str(exc).split())})")
        if not scaler.is_enabled():
            said = _warning_text(caught)
            return (f"torch {torch.__version__} has no GradScaler for {self.type} "
                    "(torch.amp.GradScaler is missing and the fallback disables itself"
                    + (f": {said}" if said else "") + ")")
        return None

    def grad_scaler(self, api: Optional[str] = None, **kwargs):
        """A GradScaler for this device (``torch.amp`` first, vendor module fallback);
        ``api`` names one of :meth:`grad_scaler_apis` instead (``"torch_npu.npu.amp"``).

        Raises :class:`Unsupported` when this stack has none for this device (Note
        [Missing features of older stacks]); ``enabled=False`` always works.
        """
        if api not in (None, "torch.amp"):
            if api != self.vendor_grad_scaler():
                raise Unsupported(f"{self.type} has no {api}.GradScaler here (it has "
                                  f"{', '.join(self.grad_scaler_apis())})")
            return importlib.import_module(api).GradScaler(**kwargs)
        if kwargs.get("enabled", True):
            reason = self.grad_scaler_unsupported()
            if reason is not None:
                raise Unsupported(reason)
        return self._grad_scaler(**kwargs)

    def vendor_grad_scaler(self) -> Optional[str]:
        """The vendor's own GradScaler module where one exists beside ``torch.amp``'s
        (``torch_npu.npu.amp``: Ascend's verified list names it, and it is implemented
        differently: a ``dynamic`` flag, its own overflow path), else None."""
        module = self.kind.legacy_amp
        if not module or module.startswith("torch."):
            return None
        try:
            return module if hasattr(importlib.import_module(module), "GradScaler") else None
        except Exception:  # noqa: BLE001 - not installed or broken: there is none
            return None

    def grad_scaler_apis(self) -> list[str]:
        """The GradScalers this device has: ``torch.amp``, and the vendor's where it has
        one (:meth:`vendor_grad_scaler`): the suite tests each."""
        vendor = self.vendor_grad_scaler()
        return ["torch.amp"] + ([vendor] if vendor else [])

    def missing_features(self) -> dict[str, str]:
        """The features this stack lacks on this device: name -> reason (for the header)."""
        found = {f"autocast({dtypes.name(dtype)})": self.autocast_unsupported(dtype)
                 for dtype in self.amp_dtypes}
        found["GradScaler"] = self.grad_scaler_unsupported()
        if not self.has_allocator_stats:
            found["memory tracker"] = storage_lifetime_unsupported()
        return {name: reason for name, reason in found.items() if reason is not None}

    def _grad_scaler(self, **kwargs):
        amp_scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if amp_scaler is not None:
            try:
                return amp_scaler(self.kind.autocast_type, **kwargs)
            except (TypeError, RuntimeError, ValueError):
                if self.kind.legacy_amp is None:
                    raise
        # no torch.amp.GradScaler (torch < 2.3), or it refuses this type: the row's legacy
        # module; torch.cuda.amp's elsewhere, which disables itself off CUDA (the probe
        # then says so: Note [Missing features of older stacks])
        return importlib.import_module(self.kind.legacy_amp or "torch.cuda.amp").GradScaler(
            **kwargs)

    # ---- timing
    def event_timer(self):
        """A start/stop timer: device events where the device has them, else wall clock."""
        module = self.module
        if module is not None and hasattr(module, "Event"):
            return _EventTimer(module)
        return _CpuTimer()


def cpu_model_name() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, platform elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


_CPU_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd", "HygonGenuine": "hygon",
                "CentaurHauls": "centaur", "0x41": "arm", "0x48": "hisilicon", "0x51": "qualcomm",
                "0x61": "apple", "0xc0": "ampere"}
"""``/proc/cpuinfo`` vendor ids (x86 ``vendor_id``, Arm ``CPU implementer``) -> slug names."""


def cpu_identity() -> dict[str, str]:
    """The CPU's vendor and model family, as they change fp32 rounding (Note [CPU slug]).

    On x86 ``{"vendor": "amd", "family": "25", "model": "1"}`` from ``/proc/cpuinfo``
    (``cpu family`` / ``model``); on Arm the implementer and part number. Empty values
    where the platform does not say.
    """
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, sep, value = line.partition(":")
                if not sep:
                    if fields:
                        break  # the first processor is enough
                    continue
                fields.setdefault(key.strip().lower(), value.strip())
    except OSError:
        pass
    raw_vendor = fields.get("vendor_id") or fields.get("cpu implementer") or platform.processor()
    return {"vendor": _CPU_VENDORS.get(raw_vendor, (raw_vendor or "unknown").lower()),
            "family": fields.get("cpu family") or fields.get("cpu architecture") or "",
            "model": fields.get("model") or fields.get("cpu part") or ""}


def blas_library() -> str:
    """The BLAS torch was built with (``mkl``, ``openblas``, ``accelerate``...)."""
    try:
        config = torch.__config__.show()
    except Exception:  # noqa: BLE001 - an exotic build without the config string
        return "unknown"
    match = re.search(r"BLAS_INFO=(\w+)", config)
    return match.group(1).lower() if match else "unknown"


def cpu_capability() -> str:
    """The SIMD level torch's CPU kernels dispatch to (``avx512``, ``avx2``, ``default``)."""
    get = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return str(get()).lower() if get is not None else "default"


def xdist_worker_index() -> Optional[int]:
    """The pytest-xdist worker number (``gw3`` -> 3), None outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    match = re.fullmatch(r"gw(\d+)", worker)
    return int(match.group(1)) if match else None


# Note [One device per xdist worker]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# ``pytest -n N`` (pytest-xdist) on a host with several devices runs worker ``gwK`` on
# device ``K`` (``select(..., index=K)``; the worker makes it current), so N workers test N
# devices at once and every record names the index it ran on (``info["device_index"]``,
# :mod:`harness.checkrun`). On an accelerator N must not exceed the devices visible:
# two workers on one device would share its memory (peaks, OOM thresholds and leaks
# measure both) and its time, so :func:`worker_problem` makes that a usage error before
# any worker starts, naming the fix. The CPU is one device: every worker shares it (and
# its cores), which is the documented rule there. A worker xdist starts to replace a
# crashed one gets the next number (``gwN`` with N >= the worker count) and takes device
# ``N mod count``: it may share a device with a live worker for the rest of the run.
# Distributed checks are the exception to one device per worker: their ranks use devices
# 0..ws-1, one launch at a time across workers (Note [Distributed launches under xdist]
# in :mod:`harness.distributed.cases`).


def worker_problem(device: Device, workers: Optional[int]) -> Optional[str]:
    """Why ``workers`` xdist workers cannot each get their own ``device`` (None: they
    can, or there is no xdist). Note [One device per xdist worker]."""
    if not workers or not device.is_accelerator or workers <= device.count:
        return None
    return (f"-n {workers} starts {workers} pytest-xdist workers, one {device.type} device "
            f"each (worker gwK tests {device.type}:K), but {device.count} {device.type} "
            f"device(s) are visible: workers would share a device and measure each other's "
            f"memory and time. Pass -n {device.count} (or fewer), or make more devices "
            "visible")
