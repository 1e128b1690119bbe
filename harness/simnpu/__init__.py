"""SimNPU: a simulated NPU, so the suite's ``npu`` path runs on a CPU-only machine.

A PrivateUse1 backend (``simnpu.cpp``, built on first use with
``torch.utils.cpp_extension.load`` and cached per torch version and source) renamed
``npu``: tensors live in host memory, every op runs through a boxed CPU fallback, and a
Python device module registered as ``torch.npu`` answers what the harness asks torch_npu
(device count and name, memory statistics, a real per-process memory cap raising
``torch.OutOfMemoryError``, events, seeding, AMP). A fake ``torch_npu`` module reports its version and a simulated
CANN version through ``torch_npu.npu.utils.get_cann_version(module=...)``.

Activated only on request: ``HARNESS_SIMNPU=1`` with ``--device npu`` (the probe of
:mod:`harness.device` loads it), never when a real ``torch_npu`` is installed.

Environment (read when the simulator loads; children inherit it):

==============================  ==========================================================
``HARNESS_SIMNPU=1``            use the simulator for ``--device npu``
``HARNESS_SIMNPU_CANN``         the simulated CANN version (default :data:`DEFAULT_CANN`)
``HARNESS_SIMNPU_DEVICES``      number of simulated devices (default 1)
``HARNESS_SIMNPU_MEMORY``       memory per device: bytes or ``16GiB``/``512MiB`` (16GiB)
``HARNESS_SIMNPU_FALLBACK_OPS`` ``aten::sort,aten::topk.values``: these ops warn like
                                torch_npu's CPU fallback (once per op and process)
``HARNESS_SIMNPU_UNSUPPORTED_OPS``  these ops raise torch's "Could not run" error
``HARNESS_SIMNPU_CACHE``        build cache (default ``~/.cache/harness-simnpu``)
``HARNESS_SIMNPU_FIDELITY``     ``1`` (default): behave like torch_npu and HCCL where they
                                differ from a CPU (docs/simnpu.md, "Fidelity mode");
                                ``0``: the plain CPU-like simulator
``HARNESS_SIMNPU_ALLOC_PAD``    bytes the allocator adds before rounding (default 32, as
                                torch_npu's ``AddPadSize``); a fault changes it
==============================  ==========================================================

See docs/simnpu.md for what it can and cannot simulate.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import shutil
import sys
import threading
from pathlib import Path
from typing import Optional, Sequence

ENV = "HARNESS_SIMNPU"
DEFAULT_CANN = "8.0.0"
DEVICE_NAME = "SimNPU"
DEVICE_TYPE = "npu"
"""The device type simulated: the row of :data:`harness.kinds.KINDS` that names this module
as its ``simulator`` (PrivateUse1, renamed, as torch_npu does)."""
TORCH_NPU_VERSION_SUFFIX = ".post0+simnpu"

_lock = threading.Lock()
_ext = None


def requested(env: Optional[dict] = None) -> bool:
    """Whether the user asked for the simulator (``HARNESS_SIMNPU=1``)."""
    env = os.environ if env is None else env
    return env.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def real_torch_npu_installed() -> bool:
    """Whether a real torch_npu is installed (package metadata or an importable module)."""
    if is_loaded():
        return False
    try:
        importlib.metadata.version("torch_npu")
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return importlib.util.find_spec("torch_npu") is not None
    except (ImportError, ValueError):
        return False


def is_loaded() -> bool:
    """Whether this process runs the simulator (the fake torch_npu is in sys.modules)."""
    module = sys.modules.get("torch_npu")
    return bool(module is not None and getattr(module, "__simnpu__", False))


def cann_version(env: Optional[dict] = None) -> str:
    """The simulated CANN version (``HARNESS_SIMNPU_CANN``, default :data:`DEFAULT_CANN`)."""
    env = os.environ if env is None else env
    return env.get("HARNESS_SIMNPU_CANN", "").strip() or DEFAULT_CANN


def fidelity(env: Optional[dict] = None) -> bool:
    """Whether the simulator behaves like torch_npu and HCCL where they differ from a CPU
    (``HARNESS_SIMNPU_FIDELITY``, on unless ``0``/``false``/``off``/``no``)."""
    env = os.environ if env is None else env
    return env.get("HARNESS_SIMNPU_FIDELITY", "1").strip().lower() not in ("0", "false", "off",
                                                                           "no")


ALLOC_PAD = 32
"""torch_npu's ``AddPadSize()`` (NPUCachingAllocator.cpp): 32 bytes on every SoC but
Ascend950 with CANN >= 9.1.0."""


def alloc_pad(env: Optional[dict] = None) -> int:
    """The allocator's pad in bytes (``HARNESS_SIMNPU_ALLOC_PAD``, default :data:`ALLOC_PAD`)."""
    env = os.environ if env is None else env
    text = env.get("HARNESS_SIMNPU_ALLOC_PAD", "").strip()
    if not text:
        return ALLOC_PAD
    if not text.isdigit():
        raise ValueError(f"HARNESS_SIMNPU_ALLOC_PAD={text!r} is not a number of bytes; use e.g. 32")
    return int(text)


def _parse_bytes(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?i?B?)?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"HARNESS_SIMNPU_MEMORY={text!r} is not a size; use bytes or e.g. "
                         "16GiB, 512MiB")
    unit = (match.group(2) or "").upper().rstrip("B").rstrip("I")
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[unit]
    return int(float(match.group(1)) * scale)


def _op_list(name: str, env: Optional[dict] = None) -> list[str]:
    env = os.environ if env is None else env
    ops = []
    for item in env.get(name, "").split(","):
        item = item.strip()
        if item:
            ops.append(item if "::" in item else f"aten::{item}")
    return ops


def cache_root() -> Path:
    """``$HARNESS_SIMNPU_CACHE`` or ``~/.cache/harness-simnpu``."""
    return Path(os.environ.get("HARNESS_SIMNPU_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "harness-simnpu"))


def cache_dir() -> Path:
    """Where the build lives: ``$HARNESS_SIMNPU_CACHE`` or ``~/.cache/harness-simnpu``,
    one folder per torch version (an extension is only valid for the torch it was built
    against) and source: checkouts of different versions of ``simnpu.cpp`` on one machine
    each keep their own build, rather than rebuilding over each other (a build racing a
    rewrite of its source left a stale library that ninja then took as current)."""
    import torch

    root = cache_root()
    version = re.sub(r"[^A-Za-z0-9.+-]", "_", torch.__version__)
    source = hashlib.sha1(Path(__file__).with_name("simnpu.cpp").read_bytes()).hexdigest()
    return Path(root) / f"torch-{version}" / source[:12]


def compiler_missing() -> Optional[str]:
    """Why the extension cannot be built here (None when it can)."""
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None and shutil.which("g++") is None:
        return f"no C++ compiler ({cxx} / g++) on PATH; install g++ to build SimNPU"
    return None


def build(verbose: bool = False):
    """Build (or load the cached) extension; returns the compiled module."""
    global _ext
    with _lock:
        if _ext is not None:
            return _ext
        missing = compiler_missing()
        if missing:
            raise RuntimeError(missing)
        from filelock import FileLock
        from torch.utils import cpp_extension

        directory = cache_dir()
        directory.mkdir(parents=True, exist_ok=True)
        # torch's own build lock is a file named "lock" that its builder deletes when done;
        # a builder killed mid-build leaves it, and every later build waits on it forever.
        # An OS lock (released when its process dies) serialises our builders instead, so
        # a "lock" found while holding it was left by a dead one and is removed.
        with FileLock(str(directory / ".harness-build.flock")):
            stale = directory / "lock"
            if stale.exists():
                stale.unlink()
            source = _source_in(directory)
            _ext = cpp_extension.load(name="harness_simnpu", sources=[str(source)],
                                      build_directory=str(directory), extra_cflags=["-O1"],
                                      verbose=verbose)
        return _ext


def _source_in(directory: Path) -> Path:
    """The extension's source, copied into the build folder when it differs: ninja keys
    its build on the source's path too, so building from one fixed path lets every clone of
    the project share one build."""
    text = Path(__file__).with_name("simnpu.cpp").read_bytes()
    source = directory / "simnpu.cpp"
    if not source.is_file() or source.read_bytes() != text:
        partial = directory / f".simnpu.cpp.{os.getpid()}"
        partial.write_bytes(text)
        os.replace(partial, source)  # a concurrent build never reads half a file
    return source


def load(verbose: bool = False):
    """Make ``npu`` a (simulated) device in this process; idempotent.

    Builds the extension if needed, registers the backend under the name ``npu``,
    installs ``torch.npu`` and the fake ``torch_npu``, applies the op lists, and registers
    the collective backend (:mod:`harness.simnpu.collectives`).
    Refuses when a real torch_npu is installed.
    """
    import torch

    if is_loaded():
        return sys.modules["torch_npu"]
    if real_torch_npu_installed():
        raise RuntimeError("a real torch_npu is installed; SimNPU never replaces it (unset "
                           f"{ENV})")
    ext = build(verbose)
    devices = int(os.environ.get("HARNESS_SIMNPU_DEVICES", "1") or 1)
    memory = _parse_bytes(os.environ.get("HARNESS_SIMNPU_MEMORY", "16GiB") or "16GiB")
    ext.init(devices, memory)
    ext.set_fidelity(fidelity(), alloc_pad() if fidelity() else 0)
    fallback, unsupported = (_op_list("HARNESS_SIMNPU_FALLBACK_OPS"),
                             _op_list("HARNESS_SIMNPU_UNSUPPORTED_OPS"))
    ext.set_ops(fallback, unsupported)
    ext.route_to_cpu(_cpu_routed_ops([*fallback, *unsupported]))

    from harness.simnpu import _module

    if torch._C._get_privateuse1_backend_name() != DEVICE_TYPE:
        torch.utils.rename_privateuse1_backend(DEVICE_TYPE)
    npu = _module.make(ext)
    if not hasattr(torch, DEVICE_TYPE):
        torch._register_device_module(DEVICE_TYPE, npu)
    torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True,
                                                         for_packed_sequence=True,
                                                         for_storage=True)
    fake = _module.make_torch_npu(npu, cann_version())
    if fidelity():
        _module.install_cann_files(cann_version(), cache_root())
    from harness.kinds import KINDS
    from harness.simnpu import collectives

    collectives.register(KINDS[DEVICE_TYPE].dist_backend)
    return fake


def _cpu_routed_ops(missing: Sequence[str] = ()) -> list[str]:
    """aten ops with a CPU kernel and none of SimNPU's own: SimNPU registers its CPU
    fallback as their kernel (Note [A kernel for every CPU op]). Views are left alone (they
    must alias, which the fallback's copying path would not), and so are the ops in
    ``missing`` (``aten::sort`` or ``aten::topk.values``: the configured fallback and
    unsupported ops), which stay on the boxed fallback, as a missing kernel does."""
    import torch

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    routed = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or not has(name, "CPU") or has(name, "PrivateUse1"):
            continue
        if name in missing or name.partition(".")[0] in missing:
            continue
        base, _, overload = name[len("aten::"):].partition(".")
        try:
            schema = getattr(getattr(torch.ops.aten, base), overload or "default")._schema
        except (AttributeError, RuntimeError):
            continue
        if any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
            continue
        routed.append(name[len("aten::"):])
    return sorted(routed)


# Note [A kernel for every CPU op]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# torch_npu registers a kernel for each op it supports; only the others reach its CPU
# fallback, a boxed kernel for the whole dispatch key. SimNPU used to register its
# fallback that way for nearly everything, so to the dispatcher (and to the model
# inventory, `harness.model.inventory`, which asks it) an op like ``aten::where.self``
# looked like one torch_npu lacks: a clean cpu -> SimNPU parity pair with ``--model`` was
# BLOCKERS from the simulator alone. Now every op with a CPU kernel gets SimNPU's fallback
# as its own kernel (the same function: it still warns for, or refuses, the listed ops),
# and only the ops of HARNESS_SIMNPU_FALLBACK_OPS / _UNSUPPORTED_OPS, read when the
# simulator loads, stay without one. It also puts SimNPU on the CPU's kernel wherever an
# op has a composite too (native_layer_norm's composite computes in fp16 step by step).


def set_ops(fallback: list[str], unsupported: list[str] = ()) -> None:
    """Change the op lists of a loaded simulator (tests)."""
    build().set_ops(list(fallback), list(unsupported))
