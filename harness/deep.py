"""``python -m harness doctor --device npu --deep``: every assumption the suite makes about
the stack, tried on the device, in well under two minutes (one card; two for HCCL).

Note [First contact]
~~~~~~~~~~~~~~~~~~~~
The suite's checks rest on what torch_npu and HCCL do (docs/simnpu.md, "Fidelity mode",
cites the sources); a new machine that does otherwise would fail in the middle of a
nightly, or pass while blind. So the deep doctor tries each assumption once and says which
held: the API surface the harness calls; the CPU-fallback warning channel (torch_npu
prints it on file descriptor 2 only, and not at all under TORCH_NPU_WARNING_DISABLE=1 or
RANK other than 0); the allocator's rounding (a block is the size plus a 32-byte pad,
rounded up to 512) and its cap (on reserved segments, a float fraction); device-event
timing; the CANN version (the API, or the install's files below CANN 8.1.RC1); and, with
two cards, HCCL: a communicator made in the first collective, and a collective that
waits for a rank two seconds late instead of ending the job. Each probe runs in a child
process (torch_npu decides its warning channel once per process), with the fault's
environment when one is injected (:data:`STACK_FAULTS`).

:data:`STACK_FAULTS` are broken stacks the deep doctor must catch: each is an environment
that makes one assumption false (tests/test_deep_doctor.py proves each turns its line
FAIL on SimNPU).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent

API_SURFACE = ("is_available", "device_count", "current_device", "set_device", "synchronize",
               "get_device_name", "get_device_properties", "memory_allocated",
               "max_memory_allocated", "memory_reserved", "reset_peak_memory_stats",
               "set_per_process_memory_fraction", "empty_cache", "mem_get_info", "Event",
               "manual_seed_all", "get_rng_state", "set_rng_state", "memory_summary")
"""``torch.<device>`` functions the harness calls (harness/device.py, the memory family)."""

PAD, BLOCK = 32, 512
"""torch_npu's round_size: ``size + AddPadSize()`` (32), rounded up to kMinBlockSize."""
ROUNDING_PROBES = (480, 481, 1000)
"""Sizes whose blocks tell the pad apart: 480 + 32 fills one block, 481 + 32 needs two."""
SIMULATED_MISSING = "aten::sort"
"""On SimNPU (every CPU op has a kernel there) the probe's child lacks this one, as a real
stack lacks some: the warning's path is then the simulator's, torch_npu's way."""
HCCL_LAG_S = 2.0
"""How late one rank reaches the deep doctor's second all_reduce: a healthy stack waits."""


@dataclasses.dataclass(frozen=True)
class StackFault:
    """A broken stack, as an environment (Note [First contact])."""

    name: str
    description: str
    env: dict
    caught_by: str  # the topic of the line that must FAIL


STACK_FAULTS = {f.name: f for f in (
    StackFault("stack.fallback_warnings_disabled",
               "torch_npu's warnings are switched off (TORCH_NPU_WARNING_DISABLE=1): CPU "
               "fallbacks go unseen", {"TORCH_NPU_WARNING_DISABLE": "1"}, "fallback warnings"),
    StackFault("stack.allocator_pads_differently",
               "the allocator adds 64 bytes before rounding, not 32 (SimNPU's "
               "HARNESS_SIMNPU_ALLOC_PAD)", {"HARNESS_SIMNPU_ALLOC_PAD": "64"},
               "allocator rounding"),
    StackFault("stack.hccl_timeout_kills_rank",
               "HCCL gives up on a collective after 1 s (HCCL_EXEC_TIMEOUT=1), and the "
               "watchdog then ends the job", {"HCCL_EXEC_TIMEOUT": "1"}, "hccl"),
)}


_PROBE = textwrap.dedent(r"""
    import json, os, sys, time
    out = {}
    from harness import device as device_mod, fallback, stack
    device_type = sys.argv[1]
    dev = device_mod.select(device_type)[0]
    module = dev.module
    import torch
    out["missing_api"] = [n for n in json.loads(sys.argv[2]) if not hasattr(module, n)]
    out["missing_features"] = dev.missing_features()
    out["grad_scalers"] = dev.grad_scaler_apis()
    # the CPU-fallback warning channel: an op without a kernel of this device's own
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    candidates = ["aten::sort.values_stable", "aten::_cdist_forward", "aten::kthvalue.values",
                  "aten::median.dim_values", "aten::nanmedian.dim_values"]
    missing = [op for op in candidates if not has(op, "PrivateUse1")]
    out["fallback_op"] = missing[0] if missing else None
    if missing:
        x = torch.randn(64, 8, device=dev.torch_device)
        calls = {"aten::sort.values_stable": lambda: torch.sort(x, dim=0, stable=True),
                 "aten::_cdist_forward": lambda: torch.cdist(x, x),
                 "aten::kthvalue.values": lambda: torch.kthvalue(x, 2, 0),
                 "aten::median.dim_values": lambda: torch.median(x, 0),
                 "aten::nanmedian.dim_values": lambda: torch.nanmedian(x, 0)}
        with fallback.capture(device_type, stderr=True, trace_known=False) as seen:
            calls[missing[0]]()
            dev.synchronize()
        out["fallback_seen"] = {op: seen.sources[op] for op in seen.ops}
    # the allocator's rounding and its cap
    dev.empty_cache()
    blocks = {}
    for n in json.loads(sys.argv[3]):
        before = dev.allocated()
        t = torch.empty(n, dtype=torch.uint8, device=dev.torch_device)
        blocks[n] = dev.allocated() - before
        del t
    out["blocks"] = blocks
    keep = torch.empty(1000, dtype=torch.uint8, device=dev.torch_device)
    out["reserved_vs_allocated"] = [dev.reserved(), dev.allocated()]
    try:
        module.set_per_process_memory_fraction(1)
        out["int_fraction"] = "accepted"
    except TypeError as exc:
        out["int_fraction"] = "refused: " + str(exc).splitlines()[0]
    dev.cap(None)
    # device events
    a = torch.randn(256, 256, device=dev.torch_device)
    timer = dev.event_timer()
    wall = time.perf_counter()
    timer.start()
    for _ in range(10):
        a = a @ a.T / 256
    timer.stop()
    wall = (time.perf_counter() - wall) * 1e3
    out["event_ms"], out["wall_ms"] = timer.elapsed_ms(), wall
    out["timer"] = type(timer).__name__
    # the CANN version: the API, else the install's files
    get = stack._torch_npu_get_cann_version()
    out["cann_api"] = get(module="CANN") if get else None
    out["cann"] = stack.cann_versions(get)
    print("DEEP-JSON " + json.dumps(out, default=str))
""")


def _child_env(fault: Optional[StackFault]) -> dict:
    env = dict(os.environ)
    python_path = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(python_path)
    from harness import simnpu

    if simnpu.requested(env) and not env.get("HARNESS_SIMNPU_FALLBACK_OPS"):
        env["HARNESS_SIMNPU_FALLBACK_OPS"] = SIMULATED_MISSING  # a kernel to lack
    if fault is not None:
        env.update(fault.env)
    return env


def probe(device_type: str, fault: Optional[StackFault] = None, timeout: float = 90.0
          ) -> tuple[Optional[dict], str]:
    """Run :data:`_PROBE` in a child; its observations, or None and why."""
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, device_type,
                               json.dumps(API_SURFACE), json.dumps(ROUNDING_PROBES)],
                              capture_output=True, text=True, timeout=timeout, cwd=str(ROOT),
                              env=_child_env(fault))
    except subprocess.TimeoutExpired:
        return None, f"the probe did not finish in {timeout:g} s"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("DEEP-JSON ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return None, f"the probe failed (exit code {proc.returncode}): {tail}"
    return json.loads(lines[-1].split(" ", 1)[1]), ""


def lagged_all_reduce(ctx, lag: float = HCCL_LAG_S):
    """The deep doctor's HCCL probe (a rank program): the first all_reduce makes the
    communicator (timed), then the last rank reaches a second one ``lag`` seconds late;
    a healthy stack waits for it."""
    import time

    import torch
    import torch.distributed as dist

    began = time.time()
    with ctx.device.scope():
        t = torch.ones(4, device=ctx.torch_device)
        dist.all_reduce(t)
        ctx.device.synchronize()
        connect_s = time.time() - began
        if ctx.rank == ctx.world_size - 1:
            time.sleep(lag)
        ctx.note(entered=time.time())
        t = torch.ones(4, device=ctx.torch_device)
        dist.all_reduce(t)
        ctx.device.synchronize()
    return {"connect_s": connect_s, "sum": float(t.cpu()[0])}


def hccl_probe(device, fault: Optional[StackFault], timeout: float) -> tuple[str, str, str]:
    """``(status, detail, fix)`` of the two-card HCCL probe."""
    from harness.distributed import SubCheck, launch
    from harness.distributed.judge import watchdog_ended

    env = dict(fault.env) if fault is not None else {}
    result = launch([SubCheck.of(lagged_all_reduce, name="deep/hccl", lag=HCCL_LAG_S)], 2,
                    device, timeout=timeout, env=env)
    outcome = result.outcome("deep/hccl")
    if outcome.ok:
        values = outcome.values
        sums = {v["sum"] for v in values.values()}
        connect = max(v["connect_s"] for v in values.values())
        if sums != {2.0}:
            return "fail", f"all_reduce of ones on 2 ranks gave {sorted(sums)}, not 2", ""
        return ("ok", f"2 ranks: the first all_reduce made the communicator in {connect:.1f} s; "
                f"a rank {HCCL_LAG_S:g} s late was waited for", "")
    ended = watchdog_ended(outcome)
    if ended:
        exec_s = (fault.env if fault else os.environ).get("HCCL_EXEC_TIMEOUT", "")
        return ("fail", f"a rank {HCCL_LAG_S:g} s late at an all_reduce ended the job: the "
                f"watchdog took ranks {ended} down"
                + (f" (HCCL_EXEC_TIMEOUT={exec_s})" if exec_s else ""),
                "raise HCCL_EXEC_TIMEOUT (default 1836 s) and the process group's timeout "
                "above the skew your ranks can have; the suite's rank-skew check measures it")
    return "fail", f"the two-rank probe did not complete: {outcome.problem()[:600]}", ""


def deep_checks(device_type: str, count: int, *, fault: Optional[str] = None,
                dist_timeout: float = 120.0) -> list[tuple[str, str, str, str]]:
    """``(status, topic, detail, fix)`` per assumption of Note [First contact]."""
    stack_fault = STACK_FAULTS[fault] if fault else None
    env = _child_env(stack_fault)
    found, why = probe(device_type, stack_fault)
    if found is None:
        return [("fail", "deep probe", why, "run python -m harness doctor without --deep first")]
    lines = []
    missing = found["missing_api"]
    lines.append(("fail" if missing else "ok", "API surface",
                  f"torch.{device_type} lacks {missing}" if missing else
                  f"torch.{device_type} has the {len(API_SURFACE)} functions the harness calls; "
                  f"GradScalers: {', '.join(found['grad_scalers'])}"
                  + (f"; missing features: {found['missing_features']}"
                     if found["missing_features"] else ""),
                  "install the torch_npu matching this torch" if missing else ""))
    lines.append(_fallback_line(found, env))
    lines.append(_rounding_line(found))
    event, wall = found["event_ms"], found["wall_ms"]
    good = 0 < event <= wall * 1.05 + 0.5
    lines.append(("ok" if good else "fail", "event timing",
                  f"{found['timer']}: 10 matmuls {event:.2f} ms by events, {wall:.2f} ms by "
                  "the host clock" + ("" if good else ": events do not time the device's "
                                       "work within the host's"),
                  "" if good else "update the driver and torch_npu; the bench family "
                                  "needs device events"))
    cann, api = found["cann"], found["cann_api"]
    source = cann.get("source", "")
    lines.append(("ok" if cann.get("cann") else "warn", "CANN version",
                  (f"{cann.get('cann')} from {source}" if cann.get("cann") else "unknown")
                  + ("" if api else "; get_cann_version answers \"\" (CANN below 8.1.RC1 or "
                                    "an unknown module): read from the install's files"),
                  "" if cann.get("cann") else "source CANN's set_env.sh so the install's "
                                              "version files are found"))
    if count >= 2:
        from harness.device import Device

        status, detail, fix = hccl_probe(Device(device_type, 0, count), stack_fault,
                                         min(dist_timeout, 60.0))
        lines.append((status, "hccl", detail, fix))
    else:
        lines.append(("--", "hccl", f"one {device_type} card: the two-rank probe needs two", ""))
    return lines


def _fallback_line(found: dict, env: dict) -> tuple[str, str, str, str]:
    op, seen = found.get("fallback_op"), found.get("fallback_seen") or {}
    gate = []
    if env.get("TORCH_NPU_WARNING_DISABLE", env.get("TORCH_NPU_DISABLED_WARNING", "")).strip() == "1":
        gate.append("TORCH_NPU_WARNING_DISABLE=1")
    if env.get("RANK", "0").strip() not in ("", "0"):
        gate.append(f"RANK={env['RANK']}")
    if op is None:
        return ("--" if not gate else "fail", "fallback warnings",
                "no op without a kernel of the device's own to try" +
                (f"; and {', '.join(gate)} silences torch_npu's warnings" if gate else ""),
                f"unset {' and '.join(g.split('=')[0] for g in gate)}" if gate else "")
    if seen:
        sources = sorted(set(seen.values()))
        return ("ok", "fallback warnings", f"{op} ran on the CPU and was seen ({', '.join(sources)})",
                "")
    return ("fail", "fallback warnings",
            f"{op} has no kernel of the device's own, but no fallback warning reached "
            "stderr" + (f": {', '.join(gate)} silences torch_npu's warnings" if gate else ""),
            (f"unset {' and '.join(g.split('=')[0] for g in gate)}: the suite sees a CPU "
             "fallback only through that warning" if gate else
             "check TORCH_NPU_WARNING_DISABLE and how stderr is redirected"))


def _rounding_line(found: dict) -> tuple[str, str, str, str]:
    blocks = {int(k): v for k, v in found["blocks"].items()}
    expected = {n: -(-(n + PAD) // BLOCK) * BLOCK for n in blocks}
    reserved, allocated = found["reserved_vs_allocated"]
    facts = (f"blocks {blocks} (bytes asked -> counted); reserved {reserved} B for "
             f"{allocated} B in use; an int memory fraction is {found['int_fraction']}")
    if blocks == expected:
        return ("ok", "allocator rounding", f"size + {PAD} B rounded up to {BLOCK}: {facts}", "")
    unpadded = {n: -(-n // BLOCK) * BLOCK for n in blocks}
    why = ("no pad (torch_npu drops it on Ascend950 with CANN >= 9.1.0)" if blocks == unpadded
           else "another rounding")
    return ("fail", "allocator rounding",
            f"expected {expected} (size + {PAD} B, rounded to {BLOCK}), got {blocks}: {why}; "
            f"{facts}", "the memory family's leak tolerances and caps assume torch_npu's "
            "rounding: re-record the memory baselines on this stack and review them")
