"""The Python side of SimNPU: ``torch.npu`` and the fake ``torch_npu``.

:func:`make` builds the device module registered as ``torch.npu`` (what the harness and
torch's own device-generic code ask a backend module: counts, seeding, RNG state, memory
statistics and the cap, events, AMP). :func:`make_torch_npu` builds the ``torch_npu``
package the harness imports on real stacks (``torch_npu.npu.utils.get_cann_version``,
``torch_npu.npu.amp``) and puts it in ``sys.modules``.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.machinery
import sys
import time
import types

import torch

from harness import simnpu

_DeviceProperties = collections.namedtuple(
    "_NPUDeviceProperties", "name total_memory multi_processor_count major minor")

CANN_COMPONENTS = ("CANN", "RUNTIME", "COMPILER", "HCCL", "TOOLKIT", "OPP", "OPP_KERNEL")
DRIVER_VERSION = "24.1.0.simnpu"
API_SINCE = "8.1.RC1"
"""The first CANN whose ``get_cann_version`` answers (torch_npu GetCANNInfo.cpp)."""
NEW_LAYOUT_SINCE = "8.5.0"
"""The first CANN installed under ``<prefix>/cann/`` rather than
``<prefix>/ascend-toolkit/latest/`` (CANN 8.5.0 installation guide, "File Paths")."""


class Event:
    """``torch.npu.Event``: work runs synchronously on the host, so an event is the host
    clock when it is recorded (``elapsed_time`` in milliseconds, like torch_npu's)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._time = None

    def record(self, stream=None) -> None:
        self._time = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def wait(self, stream=None) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: Event) -> float:
        if not self.enable_timing or not end.enable_timing:
            raise RuntimeError("Both events must be created with enable_timing=True")
        if self._time is None or end._time is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time()")
        return (end._time - self._time) * 1e3


class Stream:
    """The one (default) stream of a simulated device."""

    stream_id = 0  # the default stream, as c10 numbers it
    device_type = int(torch._C._autograd.DeviceType.PrivateUse1)

    def __init__(self, device=None, priority: int = 0) -> None:
        self.device = torch.device(simnpu.DEVICE_TYPE, _index(device))

    @property
    def device_index(self) -> int:  # FSDP2 (torch 2.15) records streams by these three
        return self.device.index

    def synchronize(self) -> None:
        pass

    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:  # FSDP2 orders its streams with events
        pass

    def query(self) -> bool:
        return True

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event


def _index(device) -> int:
    """Device index from None / int / 'npu:1' / torch.device, like torch.cuda does."""
    ext = simnpu.build()
    if device is None:
        return int(ext.current_device())
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != simnpu.DEVICE_TYPE:
        raise ValueError(f"Expected an npu device, got {device}")
    return int(ext.current_device()) if device.index is None else device.index


def make(ext) -> types.ModuleType:
    """The ``torch.npu`` device module over the compiled extension ``ext``."""
    module = types.ModuleType("torch.npu", "SimNPU's device module (harness.simnpu)")
    seeds = {"seed": 0}

    def is_available() -> bool:
        return True

    def device_count() -> int:
        return int(ext.device_count())

    def current_device() -> int:
        return int(ext.current_device())

    def set_device(device) -> None:
        ext.set_device(_index(device))

    def synchronize(device=None) -> None:
        _index(device)

    def get_device_name(device=None) -> str:
        _index(device)
        return simnpu.DEVICE_NAME

    def get_device_properties(device=None):
        _index(device)
        return _DeviceProperties(simnpu.DEVICE_NAME, int(ext.total_memory()), 1, 0, 0)

    def get_device_capability(device=None):
        return (0, 0)

    # Random ops run on the host through the fallback and draw from the CPU generator,
    # which torch.manual_seed seeds already; the device keeps the seed for initial_seed.
    def manual_seed(seed: int) -> None:
        seeds["seed"] = int(seed)

    def seed() -> None:
        seeds["seed"] = int(torch.initial_seed())

    def initial_seed() -> int:
        return seeds["seed"]

    def get_rng_state(device=simnpu.DEVICE_TYPE) -> torch.Tensor:
        return torch.empty(0, dtype=torch.uint8)

    def set_rng_state(new_state, device=simnpu.DEVICE_TYPE) -> None:
        pass

    def get_rng_state_all():
        return [get_rng_state(i) for i in range(device_count())]

    def set_rng_state_all(states) -> None:
        pass

    # ---- memory
    def memory_stats(device=None) -> dict:
        return dict(ext.stats(_index(device)))

    def memory_allocated(device=None) -> int:
        return int(ext.stats(_index(device))["allocated_bytes.all.current"])

    def max_memory_allocated(device=None) -> int:
        return int(ext.stats(_index(device))["allocated_bytes.all.peak"])

    def reset_peak_memory_stats(device=None) -> None:
        ext.reset_peak(_index(device))

    def set_per_process_memory_fraction(fraction: float, device=None) -> None:
        # torch_npu/npu/memory.py: ``isinstance(fraction, float)`` or TypeError (an int
        # such as 1 is refused there; the plain simulator let it through)
        if not isinstance(fraction, float) and (simnpu.fidelity() or not isinstance(fraction, int)):
            raise TypeError("Invalid type for fraction argument, must be `float`")
        if fraction < 0 or fraction > 1:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        index = _index(device)
        ext.set_cap(index, -1 if fraction >= 1 else int(fraction * ext.total_memory()))

    def memory_reserved(device=None) -> int:
        return int(ext.stats(_index(device))["reserved_bytes.all.current"])

    def max_memory_reserved(device=None) -> int:
        return int(ext.stats(_index(device))["reserved_bytes.all.peak"])

    def mem_get_info(device=None) -> tuple[int, int]:
        index = _index(device)
        total = int(ext.total_memory())
        return total - int(ext.stats(index)["reserved_bytes.all.current"]), total

    def empty_cache() -> None:
        """Release the segments no block uses (Note [Fidelity allocator] in simnpu.cpp)."""
        for index in range(device_count()):
            ext.empty_cache(index)

    def memory_summary(device=None, abbreviated: bool = False) -> str:
        stats = ext.stats(_index(device))
        cap = stats["cap"]
        cap_text = "none" if cap < 0 else f"{cap} B"
        return (f"SimNPU memory summary (npu:{_index(device)})\n"
                f"  allocated: {stats['allocated_bytes.all.current']} B\n"
                f"  peak: {stats['allocated_bytes.all.peak']} B\n"
                f"  reserved: {stats['reserved_bytes.all.current']} B in "
                f"{stats['segment.all.current']} segment(s)\n  cap: {cap_text}\n"
                f"  total: {ext.total_memory()} B\n  OOMs: {stats['num_ooms']}")

    # ---- streams, AMP, state
    def current_stream(device=None) -> Stream:
        return Stream(device)

    def default_stream(device=None) -> Stream:
        return Stream(device)

    @contextlib.contextmanager
    def stream(stream_):
        yield

    class device:  # noqa: N801 - torch.cuda.device's spelling
        """``with torch.npu.device(i):`` makes device ``i`` current meanwhile."""

        def __init__(self, device_) -> None:
            self.index = _index(device_) if device_ is not None else None

        def __enter__(self):
            self.prev = current_device()
            if self.index is not None:
                set_device(self.index)

        def __exit__(self, *exc) -> None:
            set_device(self.prev)

    def get_amp_supported_dtype():
        return [torch.float16, torch.bfloat16]

    def is_bf16_supported(including_emulation: bool = True) -> bool:
        return True

    def is_initialized() -> bool:
        return True

    def init() -> None:
        pass

    def _is_in_bad_fork() -> bool:
        return False

    for name, value in dict(locals()).items():
        if callable(value) and not name.startswith("__") and name not in ("ext", "seeds"):
            setattr(module, name, value)
    module.Event = Event
    module.Stream = Stream
    module.manual_seed_all = manual_seed
    module.reset_max_memory_allocated = reset_peak_memory_stats
    module.OutOfMemoryError = torch.OutOfMemoryError
    module.amp = _make_amp()
    module.utils = _make_utils()
    module.__simnpu__ = True
    return module


def _make_amp() -> types.ModuleType:
    """``torch.npu.amp`` / ``torch_npu.npu.amp``: the pre-``torch.amp`` spelling."""
    amp = types.ModuleType("torch_npu.npu.amp")

    def autocast(enabled: bool = True, dtype: torch.dtype = torch.float16,
                 cache_enabled: bool = True):
        return torch.autocast(device_type=simnpu.DEVICE_TYPE, dtype=dtype, enabled=enabled,
                              cache_enabled=cache_enabled)

    amp.autocast = autocast
    amp.GradScaler = GradScaler if simnpu.fidelity() else _plain_grad_scaler
    return amp


def _plain_grad_scaler(**kwargs):
    """The plain simulator's ``torch_npu.npu.amp.GradScaler``: torch.amp's."""
    return torch.amp.GradScaler(simnpu.DEVICE_TYPE, **kwargs)


class GradScaler(torch.amp.GradScaler):
    """``torch_npu.npu.amp.GradScaler`` as torch_npu implements it where it differs from
    ``torch.amp.GradScaler("npu")`` (torch_npu/npu/amp/grad_scaler.py, docs/simnpu.md): no
    device argument; a ``dynamic`` flag (False: a static loss scale, never updated);
    defaults init_scale 2**16, growth 2.0, backoff 0.5, interval 2000; ``state_dict``
    carries ``dynamic``; a back-off prints "Loss scaler reducing loss scale to <scale>" to
    stdout. Overflow is found by torch's non-finite check, as torch_npu does where the
    stack supports INF_NAN mode (``is_support_inf_nan()``: A2/A3 on recent CANN)."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 dynamic: bool = True, enabled: bool = True) -> None:
        super().__init__(simnpu.DEVICE_TYPE, init_scale=init_scale,
                         growth_factor=growth_factor, backoff_factor=backoff_factor,
                         growth_interval=growth_interval, enabled=enabled)
        self._dynamic = dynamic

    def update(self, new_scale=None) -> None:
        if not self._enabled:
            return
        if new_scale is None and not self._dynamic:  # a static scale: only cleared
            self._per_optimizer_states.clear()
            return
        before = self.get_scale()
        super().update(new_scale)
        after = self.get_scale()
        if new_scale is None and after < before:
            print(f"Loss scaler reducing loss scale to {after}", flush=True)

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self._enabled:
            state["dynamic"] = self._dynamic
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        if self._enabled:
            self._dynamic = state_dict.get("dynamic", True)


def _make_utils() -> types.ModuleType:
    utils = types.ModuleType("torch_npu.npu.utils")

    def get_cann_version(module: str = "CANN") -> str:
        """The simulated CANN version (``HARNESS_SIMNPU_CANN``) for every component but
        the driver, as a CANN install of one version reports.

        Fidelity mode: as torch_npu's ``GetCANNVersion`` (GetCANNInfo.cpp), ``""`` without
        an exception for an unknown module and below CANN 8.1.RC1 (its
        ``aclsysGetCANNVersion`` does not exist there); the version is then in the
        install's files (:func:`install_cann_files`)."""
        module = module.upper()
        known = module == "DRIVER" or module in CANN_COMPONENTS
        if simnpu.fidelity():
            from harness.stack import compare_versions

            if not known or compare_versions(simnpu.cann_version(), API_SINCE) < 0:
                return ""
        elif not known:
            raise ValueError(f"unknown CANN module {module!r}; choose from "
                             f"{', '.join(CANN_COMPONENTS)}, DRIVER")
        return DRIVER_VERSION if module == "DRIVER" else simnpu.cann_version()

    utils.get_cann_version = get_cann_version
    return utils


def make_torch_npu(npu: types.ModuleType, cann: str) -> types.ModuleType:
    """The fake ``torch_npu`` package (in ``sys.modules``, with ``npu`` = ``torch.npu``)."""
    base = torch.__version__.split("+", 1)[0]
    fake = types.ModuleType("torch_npu", "SimNPU's stand-in for torch_npu (harness.simnpu)")
    fake.__version__ = base + simnpu.TORCH_NPU_VERSION_SUFFIX
    fake.__simnpu__ = True
    fake.__path__ = []
    fake.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None, is_package=True)
    fake.npu = npu
    fake.simulated_cann = cann
    for name, module in (("torch_npu", fake), ("torch_npu.npu", npu),
                         ("torch_npu.npu.utils", npu.utils), ("torch_npu.npu.amp", npu.amp)):
        if module is not fake:
            module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
    return fake


def install_cann_files(version: str, root):
    """A simulated CANN install of ``version`` under ``root`` (the simulator's cache): the
    files a real one leaves, in its release's layout, so the harness's file fallback reads
    them as on hardware: ``ascend-toolkit/latest/`` before CANN 8.5.0, ``cann/`` since
    (:data:`NEW_LAYOUT_SINCE`), each with ``set_env.sh``,
    ``<arch>-linux/ascend_toolkit_install.info`` (``version=``) and
    ``<component>/version.info`` (``Version=``). Exports ``ASCEND_HOME_PATH`` and
    ``ASCEND_TOOLKIT_HOME`` as ``set_env.sh`` does, unless they are set. Returns the home.
    """
    import os
    import platform
    from pathlib import Path

    from harness.stack import compare_versions

    prefix = Path(root) / "Ascend" / version
    new = compare_versions(version, NEW_LAYOUT_SINCE) >= 0
    home = prefix / "cann" if new else prefix / "ascend-toolkit" / "latest"
    arch = f"{platform.machine() or 'x86_64'}-linux"
    files = {
        (prefix / "cann" if new else prefix / "ascend-toolkit") / "set_env.sh":
            f"export ASCEND_TOOLKIT_HOME={home}\nexport ASCEND_HOME_PATH={home}\n"
            f"export LD_LIBRARY_PATH={home}/lib64:$LD_LIBRARY_PATH\n",
        home / arch / "ascend_toolkit_install.info":
            f"package_name=Ascend-cann-toolkit\nversion={version}\narch={arch[:-6]}\n"
            f"os=linux\npath={home / arch}\n",
        **{home / part / "version.info": f"Version={version}\n"
           for part in ("runtime", "compiler", "hccl", "opp")},
        prefix / "driver" / "version.info": f"Version={DRIVER_VERSION}\n",
    }
    for path, text in files.items():
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.{os.getpid()}")
            partial.write_text(text)
            os.replace(partial, path)
    for name in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        os.environ.setdefault(name, str(home))
    os.environ.setdefault("ASCEND_DRIVER_PATH", str(prefix / "driver"))
    return home
