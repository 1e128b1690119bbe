"""The environment fingerprint, the ``stack_id`` and version ordering.

A baseline belongs to a *stack*: the version that defines what the device computes.
For an NPU that is CANN (``cann-8.0.RC3``), for CUDA the CUDA runtime torch was built
with (``cuda-12.4``), for the CPU, XPU and MPS the torch version (``torch-2.4.0``).
Which stack a device type has is its row's ``stack_prefix`` (:mod:`harness.kinds`); what a
stack reads is its entry in :data:`STACKS`, so device types sharing a stack share the
entry and a new device type on torch's stack needs none.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import socket
from pathlib import Path
from typing import Callable, Optional

CANN_MODULES = ("CANN", "RUNTIME", "COMPILER", "HCCL", "TOOLKIT", "OPP", "OPP_KERNEL", "DRIVER")
"""Components ``torch_npu.npu.utils.get_cann_version(module=...)`` reports."""

# ------------------------------------------------------------------- version ordering

_PRE_RANK = {"dev": -4, "alpha": -3, "a": -3, "beta": -2, "b": -2, "rc": -1, "c": -1,
             "t": -5, "post": 1}


def version_key(version: str) -> tuple:
    """A sort key for versions as CANN, CUDA and PEP 440 write them.

    ``8.0.RC3 < 8.0.0 < 8.1.RC1``; ``8.0.RC2.alpha003 < 8.0.RC2``;
    ``2.1.0rc1 < 2.1.0 < 2.1.0.post1``; a local suffix (``+cpu``) is ignored.
    Each component becomes ``(number, rank, tag_number)``: a release number has rank
    0; a pre-release tag (``RCn``, ``alphaN``, ``betaN``, ``devN``) takes the number 0 of
    its position with a negative rank, so it sorts before the release it leads to.
    """
    text = version.strip().split("+", 1)[0].lower().lstrip("v")
    key = []
    for token in re.split(r"[.\-_]", text):
        for number, tag, tag_number in re.findall(r"(\d+)|([a-z]+)(\d*)", token):
            if number:
                key.append((int(number), 0, 0))
            else:
                key.append((0, _PRE_RANK.get(tag, -6), int(tag_number or 0)))
    while key and key[-1] == (0, 0, 0):
        key.pop()
    return tuple(key)


def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1 as ``left`` sorts before, with or after ``right``."""
    a, b = _padded(version_key(left), version_key(right))
    return (a > b) - (a < b)


def _padded(a: tuple, b: tuple) -> tuple[tuple, tuple]:
    width = max(len(a), len(b))
    pad = (0, 0, 0)
    return a + (pad,) * (width - len(a)), b + (pad,) * (width - len(b))


def split_stack_id(stack_id: str) -> tuple[str, str]:
    """``cann-8.0.RC3`` -> (``cann``, ``8.0.RC3``)."""
    prefix, sep, version = stack_id.partition("-")
    if not sep or not version:
        raise ValueError(f"malformed stack id {stack_id!r}; expected <kind>-<version> such "
                         "as cann-8.0.RC3, cuda-12.4 or torch-2.4.0")
    return prefix, version


def stack_sort_key(stack_id: str) -> tuple:
    """Sort key for stack ids of one kind: ``cann-8.0.RC3 < cann-8.0.0``."""
    prefix, version = split_stack_id(stack_id)
    key = version_key(version)
    return (prefix, key + ((0, 0, 0),) * (16 - len(key)))


# ---------------------------------------------------------------------------- CANN

CANN_HOMES = ("/usr/local/Ascend/cann", "/usr/local/Ascend/ascend-toolkit/latest",
              "~/Ascend/cann", "~/Ascend/ascend-toolkit/latest")
"""Where CANN installs by default, root and non-root: ``<prefix>/cann/`` since CANN 8.5.0
(its set_env.sh there), ``<prefix>/ascend-toolkit/latest/`` before (the CANN installation
guides' "File Paths" tables: ``<home>/<arch>-linux/ascend_toolkit_install.info``)."""


def cann_homes(env: Optional[dict] = None) -> list[str]:
    """:data:`CANN_HOMES` with ``~`` expanded from ``HOME`` in ``env``."""
    env = os.environ if env is None else env
    home = env.get("HOME") or os.path.expanduser("~")
    return [path.replace("~", home, 1) if path.startswith("~") else path for path in CANN_HOMES]


def set_env_script(env: Optional[dict] = None) -> Optional[str]:
    """The ``set_env.sh`` of the first default CANN install found (either layout), or None."""
    for home in cann_homes(env):
        base = Path(home)
        for candidate in (base / "set_env.sh", base.parent / "set_env.sh"):
            if candidate.is_file():
                return str(candidate)
    return None


def cann_version_from_files(env: Optional[dict] = None) -> dict[str, str]:
    """CANN component versions from the toolkit's files (no torch_npu needed).

    Looks under ``ASCEND_TOOLKIT_HOME`` and ``ASCEND_HOME_PATH`` (what CANN's set_env.sh
    exports), then the default installs of both layouts (:data:`CANN_HOMES`), reading
    ``version.cfg`` / ``*_install.info`` / ``version.info`` files.
    """
    env = os.environ if env is None else env
    roots = [env.get("ASCEND_TOOLKIT_HOME"), env.get("ASCEND_HOME_PATH"),
             *cann_homes(env)]
    found: dict[str, str] = {}
    for root in filter(None, roots):
        base = Path(root)
        if not base.is_dir():
            continue
        candidates = [base / "version.cfg", *sorted(base.glob("*/version.info")),
                      *sorted(base.glob("*_install.info")), *sorted(base.glob("*/*_install.info"))]
        for path in candidates:
            version = _version_in_file(path)
            if version is None:
                continue
            component = path.parent.name if path.name == "version.info" else \
                path.name.replace("_install.info", "")
            if path.name == "version.cfg" or component in ("ascend_toolkit", "toolkit"):
                component = "toolkit"
            found.setdefault(component.lower(), version)
        if found:
            found.setdefault("cann", found.get("toolkit") or found.get("runtime") or
                             next(iter(found.values())))
            found["source"] = str(base)
            break
    return found


def _version_in_file(path: Path) -> Optional[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    match = re.search(r"(?im)^\s*(?:version|\w*_version|\w*_pkg_version)\s*[=:]\s*"
                      r"\[?\s*([0-9][\w.\-]*)", text)
    return match.group(1) if match else None


def cann_versions(get_cann_version: Optional[Callable[..., str]] = None) -> dict[str, str]:
    """CANN component versions: torch_npu's API first, then the toolkit's files."""
    if get_cann_version is not None:
        versions = {}
        for module in CANN_MODULES:
            try:
                value = get_cann_version(module=module)
            except Exception:  # noqa: BLE001 - older torch_npu knows fewer modules
                continue
            if value:
                versions[module.lower()] = str(value)
        if versions.get("cann"):
            versions["source"] = "torch_npu.npu.utils.get_cann_version"
            return versions
    return cann_version_from_files()


# ---------------------------------------------------------------------- fingerprint

def _torch_npu_get_cann_version() -> Optional[Callable[..., str]]:
    import importlib

    try:
        utils = importlib.import_module("torch_npu.npu.utils")
    except Exception:  # noqa: BLE001 - the device layer reports why torch_npu is unusable
        return None
    return getattr(utils, "get_cann_version", None)


def _nvidia_driver() -> Optional[str]:
    path = Path("/proc/driver/nvidia/version")
    try:
        match = re.search(r"Kernel Module\s+([\d.]+)", path.read_text())
    except OSError:
        return None
    return match.group(1) if match else None


def _ascend_driver() -> Optional[str]:
    for root in ("/usr/local/Ascend/driver", os.environ.get("ASCEND_DRIVER_PATH") or ""):
        if root:
            version = _version_in_file(Path(root) / "version.info")
            if version:
                return version
    return None


def _cann_stack() -> dict:
    cann = cann_versions(_torch_npu_get_cann_version())
    return {"cann": cann.get("cann"), "cann_components": cann,
            "driver": cann.get("driver") or _ascend_driver()}


def _cuda_stack() -> dict:
    import torch

    try:
        cudnn = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001
        cudnn = None
    return {"driver": _nvidia_driver(), "cudnn": cudnn}


@dataclasses.dataclass(frozen=True)
class Stack:
    """What versions one stack: the fingerprint field that is its version, and a function
    adding the stack's own fields (driver, components) to a fingerprint."""

    version_field: str
    details: Callable[[], dict] = dict


STACKS: dict[str, Stack] = {
    "cann": Stack("cann", _cann_stack),
    "cuda": Stack("cuda_runtime", _cuda_stack),
    "torch": Stack("torch"),
}
"""Stack prefix (a row's ``stack_prefix``) -> what defines its version."""


def _stack(device_type: str) -> tuple[str, Stack]:
    from harness.kinds import KINDS

    prefix = KINDS[device_type].stack_prefix
    if prefix not in STACKS:
        raise ValueError(f"device type {device_type!r}: its row's stack_prefix {prefix!r} is "
                         f"not in harness.stack.STACKS ({', '.join(STACKS)})")
    return prefix, STACKS[prefix]


def fingerprint(device) -> dict:
    """Everything that defines the stack the run measured, as a JSON-ready dict."""
    import torch

    from harness.device import (
        blas_library,
        cpu_capability,
        cpu_identity,
        cpu_model_name,
        torch_npu_version,
    )

    info: dict = {
        "device_type": device.type,
        "device_name": device.name,
        "device_count": device.count,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_npu": torch_npu_version(),
        "cuda_runtime": torch.version.cuda,
        "cpu": cpu_model_name(),
        "cpu_capability": cpu_capability(),
        "cpu_threads": torch.get_num_threads(),
        **{f"cpu_{key}": value for key, value in cpu_identity().items()},
        "blas": blas_library(),
        "arch": platform.machine(),
        "os": f"{platform.system()} {platform.release()}",
        "host": socket.gethostname(),
    }
    info.update(_stack(device.type)[1].details())
    info["stack_id"] = stack_id(info)
    info["device_slug"] = device_slug(info)
    return info


def stack_id(info: dict) -> str:
    """``<prefix>-<version>``: the device type's stack prefix and the fingerprint field
    its stack names (``cann-8.0.RC3``, ``cuda-12.4``, ``torch-2.4.0``; a local version
    suffix such as ``+cpu`` is dropped)."""
    prefix, stack = _stack(info["device_type"])
    version = str(info.get(stack.version_field) or "unknown").split("+", 1)[0]
    return f"{prefix}-{version}"


def slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def device_slug(info: dict) -> str:
    """The folder under ``baselines/<type>/`` for this device model (Note [CPU slug]).

    Note [CPU slug]
    ~~~~~~~~~~~~~~~
    A CPU baseline is only comparable on a CPU that rounds the same way, so the slug names
    everything measured to move fp32 results: the architecture; the vendor and model
    family (an AMD EPYC and an Intel Xeon with the same SIMD level take other MKL code
    paths and round fp32 products differently: 20 regressions and 154 improvements with
    the same torch); the SIMD level torch dispatches to; the BLAS library; and the number
    of intra-op threads (parallel reductions sum in a thread-dependent order):
    ``x86-64-amd-f25m1-avx2-mkl-t2``.
    """
    if info["device_type"] == "cpu":
        threads = info.get("cpu_threads")
        vendor = info.get("cpu_vendor") or "unknown"
        family = "".join(f"{tag}{info[key]}" for tag, key in (("f", "cpu_family"),
                                                               ("m", "cpu_model"))
                         if info.get(key))
        parts = [info["arch"], vendor, family, info["cpu_capability"], info.get("blas"),
                 f"t{threads}" if threads else None]
        return slugify("-".join(str(p) for p in parts if p))
    return slugify(info["device_name"])
