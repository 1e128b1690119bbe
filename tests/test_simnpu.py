"""The simulated NPU (harness.simnpu): the suite's npu path with real tensors on it.

Registering a PrivateUse1 backend is process-global (``torch.npu``, the ``npu`` device
string, the fake ``torch_npu`` in ``sys.modules``), so everything that loads the simulator
runs in a child process: one script (:data:`_PROBE`) exercises the npu path and prints its
observations as JSON, and the tests below assert on them; the doctor, a suite run and the
simulated CANN upgrade are child processes too. The main pytest process only tests the
activation rules, which load nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Optional

import early
import pytest

from harness import device as device_mod
from harness import simnpu

ROOT = Path(__file__).resolve().parents[1]

needs_compiler = pytest.mark.skipif(simnpu.compiler_missing() is not None,
                                    reason=f"SimNPU cannot be built: {simnpu.compiler_missing()}")


def _env(base: Optional[dict] = None, **extra: str) -> dict:
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if not k.startswith("HARNESS_SIMNPU")}
    if base.get("HARNESS_SIMNPU_CACHE"):
        env["HARNESS_SIMNPU_CACHE"] = base["HARNESS_SIMNPU_CACHE"]
    env.update({"HARNESS_SIMNPU": "1", "PYTHONPATH": str(ROOT),
                "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, **extra)
    return env


def _run(args: list[str], timeout: float = 600, base: Optional[dict] = None,
         **env: str) -> subprocess.CompletedProcess:
    return early.run([sys.executable, *args], cwd=ROOT, env=_env(base, **env),
                     timeout=timeout)


# ----------------------------------------------------------- activation (no loading)

def test_simulator_is_only_used_when_asked_for(monkeypatch):
    monkeypatch.delenv("HARNESS_SIMNPU", raising=False)
    assert not simnpu.requested()
    assert device_mod._probe_simnpu() is None
    assert simnpu.requested({"HARNESS_SIMNPU": "1"})
    assert not simnpu.requested({"HARNESS_SIMNPU": "0"})


def test_a_real_torch_npu_is_never_replaced(monkeypatch):
    monkeypatch.setenv("HARNESS_SIMNPU", "1")
    monkeypatch.setattr(simnpu.importlib.metadata, "version", lambda name: "2.4.0.post2")
    assert simnpu.real_torch_npu_installed()
    assert device_mod._probe_simnpu() is None  # the real probe runs instead


def test_missing_compiler_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setenv("HARNESS_SIMNPU", "1")
    monkeypatch.setattr(simnpu, "real_torch_npu_installed", lambda: False)
    monkeypatch.setattr(simnpu, "compiler_missing", lambda: "no C++ compiler (c++ / g++)")
    result = device_mod._probe_simnpu()
    assert result is not None and not result.available
    assert "cannot be built: no C++ compiler" in result.reason


def test_simulated_cann_version_and_memory_size_come_from_the_environment():
    assert simnpu.cann_version({}) == simnpu.DEFAULT_CANN
    assert simnpu.cann_version({"HARNESS_SIMNPU_CANN": "8.0.RC3"}) == "8.0.RC3"
    assert simnpu._parse_bytes("512MiB") == 512 << 20
    assert simnpu._parse_bytes("16GiB") == 16 << 30
    assert simnpu._parse_bytes("1000") == 1000
    with pytest.raises(ValueError, match="HARNESS_SIMNPU_MEMORY"):
        simnpu._parse_bytes("lots")


# --------------------------------------------------------- real tensors (child process)

_PROBE = textwrap.dedent(r"""
    import json, warnings
    import torch
    from harness import device as device_mod, fallback, stack
    from harness.memory import MemoryMeter

    out = {}
    probe = device_mod.probe("npu")
    out["probe"] = [probe.available, probe.reason, probe.count]
    dev = device_mod.select("npu")[0]
    out["module_is_torch_npu"] = dev.module is torch.npu
    out["name"] = dev.name
    out["host_timed"] = [dev.host_timed, dev.simulated]  # Note [A simulator is timed as its host]
    x = torch.randn(8, 16, device="npu:0")
    out["device_str"] = str(x.device)
    out["is_npu"] = bool(x.is_npu)
    before = x.cpu()
    x[:, ::2].add_(1.0)  # an in-place op on a strided view must write through to x
    after = x.cpu()
    out["view_aliases"] = bool(torch.equal(after[:, ::2], before[:, ::2] + 1.0)
                               and torch.equal(after[:, 1::2], before[:, 1::2]))
    w = torch.randn(16, 4, device=dev.torch_device, requires_grad=True)
    (x @ w).square().sum().backward()
    out["grad_device"] = str(w.grad.device)
    with dev.autocast(torch.float16):
        mm = x @ w
        out["autocast"] = [str(mm.dtype), str(torch.exp(mm).dtype)]
    # GradScaler: an inf gradient is skipped and the scale backs off
    p = torch.nn.Parameter(torch.ones(4, device="npu"))
    opt = torch.optim.SGD([p], lr=0.1)
    scaler = dev.grad_scaler(init_scale=2.0 ** 8)
    scaler.scale((p * float("inf")).sum()).backward()
    scaler.step(opt)
    scaler.update()
    out["scaler"] = [scaler.get_scale(), p.detach().cpu().tolist()]
    # memory statistics and the cap
    dev.reset_peak()
    base = dev.allocated()
    y = torch.empty(1 << 20, device="npu")
    out["allocated_grew"] = dev.allocated() - base
    del y
    out["peak_grew"] = dev.peak_allocated() - base
    out["total"] = dev.total_memory()
    dev.empty_cache()  # the cap is on reserved memory (Note [Fidelity allocator])
    dev.cap(dev.reserved() + (1 << 20))
    try:
        torch.empty(1 << 22, device="npu")
        out["oom"] = None
    except dev.oom_error as exc:
        out["oom"] = [type(exc).__name__, str(exc).splitlines()[0]]
    dev.cap(None)
    out["after_cap_lifted"] = torch.empty(1 << 22, device="npu").numel()
    out["meter_backend"] = MemoryMeter(dev).backend
    # Note [A fallback without copies] (simnpu.cpp): kernels run on the device's memory
    from torch.profiler import profile
    big = torch.randn(1 << 20, device="npu")
    host = big.cpu()
    out_empty, out_long = torch.empty(0, device="npu"), torch.empty(1 << 21, device="npu")
    q, k, v = (torch.randn(2, 2, 8, 4, device="npu") for _ in range(3))
    base = dev.allocated()
    with profile() as prof:
        result = torch.exp(big)
        grew = dev.allocated() - base
        big.mul_(2.0)
        torch.exp(host.to("npu"), out=out_empty)  # out= resized from empty: copied back
        torch.exp(big, out=out_long)              # out= shrunk in place
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    ran = {event.key for event in prof.key_averages()}
    has = torch._C._dispatch_has_kernel_for_dispatch_key  # Note [A kernel for every CPU op]
    out["own_kernel"] = {op: has(op, "PrivateUse1")
                         for op in ("aten::where.self", "aten::sort", "aten::cumsum")}
    out["no_copy"] = {
        "copies": sorted(ran & {"aten::_to_cpu", "aten::_copy_from_and_resize"}),
        "result_counted": grew, "result_equal": bool(torch.equal(result.cpu(), host.exp())),
        "in_place": bool(torch.equal(big.cpu(), host * 2.0)),
        "out_resized": [list(out_empty.shape), bool(torch.equal(out_empty.cpu(), host.exp()))],
        "out_shrunk": [list(out_long.shape), bool(torch.equal(out_long.cpu(), (host * 2).exp()))],
        "sdpa_cpu_kernel": "aten::_scaled_dot_product_flash_attention_for_cpu" in ran,
    }
    del result
    huge = torch.randn(6 << 20, device="npu")  # 24 MiB: fits no 20 MiB segment's space
    dev.empty_cache()
    dev.cap(dev.reserved() + (1 << 20))
    try:
        torch.exp(huge)
        out["adopted_oom"] = None
    except dev.oom_error as exc:
        out["adopted_oom"] = str(exc).splitlines()[0]
    dev.cap(None)
    # fallback warnings (HARNESS_SIMNPU_FALLBACK_OPS=aten::sort)
    with fallback.capture(stderr=True) as first:
        torch.sort(x, dim=1)
    with fallback.capture(stderr=True) as second:  # warned once: found by the tracer
        torch.sort(x, dim=0)
    with fallback.capture(stderr=True) as clean:
        torch.exp(x)
    out["fallback"] = [first.ops, second.ops, clean.ops]
    out["fallback_sources"] = sorted(set(first.sources.values()))
    try:
        torch.cumsum(x, 0)
        out["unsupported"] = None
    except NotImplementedError as exc:
        out["unsupported"] = str(exc).splitlines()[0]
    timer = dev.event_timer()
    timer.start(); torch.exp(x); timer.stop()
    out["timer_ms"] = timer.elapsed_ms()
    # fidelity mode (docs/simnpu.md): torch_npu's allocator, fraction, CANN API, scaler
    try:
        torch.npu.set_per_process_memory_fraction(1)
        out["int_fraction"] = None
    except TypeError as exc:
        out["int_fraction"] = str(exc)
    import torch_npu
    out["cann_api"] = [torch_npu.npu.utils.get_cann_version(),
                       torch_npu.npu.utils.get_cann_version("NOT_A_MODULE")]
    npu_scaler = torch_npu.npu.amp.GradScaler(init_scale=2.0 ** 8, dynamic=True)
    p2 = torch.nn.Parameter(torch.ones(4, device="npu"))
    opt2 = torch.optim.SGD([p2], lr=0.1)
    npu_scaler.scale((p2 * float("inf")).sum()).backward()
    npu_scaler.step(opt2)
    npu_scaler.update()
    static = torch_npu.npu.amp.GradScaler(init_scale=2.0 ** 8, dynamic=False)
    static.scale((p2 * float("inf")).sum()).backward()
    static.step(opt2)
    static.update()
    out["npu_scaler"] = [type(npu_scaler).__module__, npu_scaler.get_scale(),
                         static.get_scale(), npu_scaler.state_dict().get("dynamic"),
                         dev.grad_scaler_apis()]
    fp = stack.fingerprint(dev)
    out["fingerprint"] = {k: fp.get(k) for k in ("device_type", "device_name", "torch_npu",
                                                  "cann", "driver", "stack_id", "device_slug")}
    out["cann_source"] = fp["cann_components"].get("source")
    import torch.distributed as dist
    out["npu_backend"] = dist.Backend.default_device_backend_map.get("npu")
    print("SIMNPU-JSON " + json.dumps(out), flush=True)
    # Everything is observed and printed. The torch profiler used above can abort the
    # interpreter's exit ("terminate called without an active exception", SIGABRT: once
    # in a clean-clone CI under load, 0 in 25 runs alone); that is torch's, at shutdown,
    # not what this probe observes, and the harness never uses the profiler.
    import os, sys
    sys.stderr.flush()
    os._exit(0)
""")


def _probe(env: dict):
    return _run(["-c", _PROBE], base=env, HARNESS_SIMNPU_CANN="8.0.RC3",
                HARNESS_SIMNPU_FALLBACK_OPS="aten::sort",
                HARNESS_SIMNPU_UNSUPPORTED_OPS="aten::cumsum")


def _upgrade(env: dict) -> dict:
    """Record on simulated CANN 8.0.RC3, then run on 8.0.0 as it is and with sort falling
    back to the CPU."""
    with tempfile.TemporaryDirectory(prefix="simnpu-upgrade-") as tmp:
        store = Path(tmp) / "baselines"
        common = ["-m", "pytest", "-m", "npu", "--device", "npu", "-p", "no:cacheprovider",
                  "-p", "no:randomly", f"--baseline-dir={store}",
                  f"--results-dir={Path(tmp) / 'results'}", "suites/ops/test_catalog.py",
                  "--op-filter", r"^sort-float32-fwd-typical$"]
        old = _run([*common, "--baseline", "record"], base=env, HARNESS_SIMNPU_CANN="8.0.RC3")
        recorded = (store / "npu" / "simnpu" / "cann-8.0.RC3.json").is_file()
        same = _run(common, base=env, HARNESS_SIMNPU_CANN="8.0.0")
        worse = _run(common, base=env, HARNESS_SIMNPU_CANN="8.0.0",
                     HARNESS_SIMNPU_FALLBACK_OPS="aten::sort")
    return {"old": old, "recorded": recorded, "same": same, "worse": worse}


DIST_NODES = (
    "suites/distributed/test_dist_collectives.py::"
    "test_collective_matches_numpy[ws2-all_reduce_sum/float32]",
    # DDP with unused parameters stages its used-map in pinned host memory
    "suites/distributed/test_dist_ddp.py::"
    "test_ddp_matches_single_process[ws2-ddp/float32/unused_params]",
    # torch 2.13's flat collectives ask the group itself (HostCollectives answers them)
    "suites/distributed/test_dist_collectives.py::"
    "test_collective_matches_numpy[ws2-all_gather_into_tensor/float32]",
    "suites/distributed/test_dist_collectives.py::"
    "test_collective_matches_numpy[ws2-reduce_scatter_tensor_sum/float32]",
    # a DeviceMesh needs the group's name (Note [A name for the group] in
    # harness/simnpu/collectives.py); FSDP2 needs the Stream's wait_event
    "suites/distributed/test_dist_parallel.py::"
    "test_fsdp2_matches_single_process[ws2-fsdp/float32]",
    "suites/distributed/test_dist_parallel.py::"
    "test_tensor_parallel_mlp_matches_one_device[ws2-tp/mlp]",
)


def _distributed(env: dict):
    """Distributed checks (DIST_NODES) on the simulator's hccl, two simulated devices."""
    with tempfile.TemporaryDirectory(prefix="simnpu-dist-") as tmp:
        return _run(["-m", "pytest", "-m", "npu", "--device", "npu", "-p", "no:cacheprovider",
                     "-p", "no:randomly", "--baseline", "off", "-rA",
                     f"--results-dir={Path(tmp) / 'results'}", *DIST_NODES],
                    base=env, HARNESS_SIMNPU_DEVICES="2")


_CHANNEL = textwrap.dedent(r"""
    import json, torch
    from harness import device as device_mod, stack
    dev = device_mod.select("npu")[0]
    small = torch.empty(100, dtype=torch.uint8, device="npu")  # the process's first block
    alloc = {"small_block": dev.allocated(), "reserved": dev.reserved()}
    del small
    alloc["cached_after_free"] = dev.reserved()
    torch.npu.empty_cache()
    alloc["after_empty_cache"] = dev.reserved()
    torch.sort(torch.randn(8, device="npu"))
    import torch_npu
    fp = stack.fingerprint(dev)
    print("CHANNEL-JSON " + json.dumps([torch_npu.npu.utils.get_cann_version(), fp["cann"],
                                        fp["cann_components"].get("source"), alloc]))
""")


def _channel(env: dict) -> dict:
    """Where torch_npu's fallback warning goes (Note [Fallback warnings reach stderr only]):
    RANK 0 / unset prints it on stderr, RANK=1 and TORCH_NPU_WARNING_DISABLE=1 do not; the
    RANK=1 run is also on CANN 9.0.0 (the API answers; the install is under cann/). And the
    lazy communicator (Note [The simulated HCCL]): a rank 3 s late at a 1 s group's first
    all_reduce is waited for."""
    runs = {name: _run(["-c", _CHANNEL], base=env, HARNESS_SIMNPU_FALLBACK_OPS="aten::sort",
                       **extra)
            for name, extra in {"rank0": {}, "rank1": {"RANK": "1", "HARNESS_SIMNPU_CANN": "9.0.0"},
                                "disabled": {"TORCH_NPU_WARNING_DISABLE": "1"}}.items()}
    lazy = _run(["-c", f"TESTS = {str(ROOT / 'tests')!r}\n" + textwrap.dedent("""
        import json
        from harness.device import select
        from harness.distributed import SubCheck, launch
        result = launch([SubCheck.of("simnpu_ranks:late_first_collective", name="late")], 2,
                        select("npu")[0], timeout=60, env={"PYTHONPATH": TESTS})
        out = result.outcome("late")
        print("LAZY-JSON " + json.dumps([out.ok, out.values, out.problem()[:2000]]))
    """)], base=env, HARNESS_SIMNPU_DEVICES="2")
    return {"runs": runs, "lazy": lazy}


def _if_buildable(fn):
    return (lambda env: None) if simnpu.compiler_missing() else fn


PROBE = early.Job("SimNPU probe", _if_buildable(_probe))
UPGRADE = early.Job("SimNPU CANN upgrade", _if_buildable(_upgrade))
DISTRIBUTED = early.Job("SimNPU distributed", _if_buildable(_distributed))
CHANNEL = early.Job("SimNPU warning channel and lazy HCCL", _if_buildable(_channel))
EARLY = (PROBE, UPGRADE, DISTRIBUTED, CHANNEL)


@pytest.fixture(scope="module")
def observed():
    if simnpu.compiler_missing():
        pytest.skip(f"SimNPU cannot be built: {simnpu.compiler_missing()}")
    proc = early.result(PROBE)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("SIMNPU-JSON ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].split(" ", 1)[1])


@needs_compiler
def test_probe_reports_the_simulated_npu(observed):
    available, reason, count = observed["probe"]
    assert available and count == 1
    assert "SimNPU" in reason and "simulated, CANN 8.0.RC3" in reason
    assert observed["module_is_torch_npu"] and observed["name"] == "SimNPU"
    assert observed["host_timed"] == [True, True]  # benchmarks time it as the CPU


@needs_compiler
def test_npu_device_strings_views_and_autograd(observed):
    assert observed["device_str"] == "npu:0" and observed["is_npu"]
    assert observed["view_aliases"]
    assert observed["grad_device"] == "npu:0"


@needs_compiler
def test_autocast_on_npu_casts_matmul_down_and_exp_up(observed):
    assert observed["autocast"] == ["torch.float16", "torch.float32"]


@needs_compiler
def test_grad_scaler_on_npu_skips_the_inf_step_and_backs_off(observed):
    scale, params = observed["scaler"]
    assert scale == 128.0 and params == [1.0] * 4


BLOCK_4MIB = ((4 << 20) + 32 + 511) // 512 * 512  # torch_npu: size + 32, rounded to 512


@needs_compiler
def test_memory_statistics_and_the_cap_raise_the_oom_the_harness_expects(observed):
    assert observed["allocated_grew"] == BLOCK_4MIB and observed["peak_grew"] == BLOCK_4MIB
    assert observed["total"] == 16 << 30
    name, message = observed["oom"]
    assert name == "OutOfMemoryError" and message.startswith("NPU out of memory")
    assert observed["after_cap_lifted"] == 1 << 22
    assert observed["meter_backend"] == "allocator"


@needs_compiler
def test_the_fallback_runs_kernels_on_device_memory_without_copies(observed):
    seen = observed["no_copy"]
    # only out= into an empty tensor copies (the kernel moved it to fresh host memory)
    assert seen["copies"] == ["aten::_copy_from_and_resize"]
    assert seen["result_counted"] == BLOCK_4MIB and seen["result_equal"]  # adopted, counted
    assert seen["in_place"]
    assert seen["out_resized"] == [[1 << 20], True]
    assert seen["out_shrunk"] == [[1 << 20], True]
    assert seen["sdpa_cpu_kernel"]  # Note [Attention takes the CPU's kernel]
    assert observed["adopted_oom"].startswith("NPU out of memory")


@needs_compiler
def test_fidelity_allocator_pads_rounds_and_reserves_segments(observed):
    """Note [Fidelity allocator] (simnpu.cpp): 100 bytes take a 512-byte block (100 + 32,
    rounded) in a fresh 2 MiB small segment, which stays reserved (cached) after the free
    until empty_cache; the memory fraction takes a float only."""
    alloc = _tagged(early.result(CHANNEL)["runs"]["rank0"], "CHANNEL-JSON")[3]
    assert alloc == {"small_block": 512, "reserved": 2 << 20,
                     "cached_after_free": 2 << 20, "after_empty_cache": 0}
    assert "must be `float`" in observed["int_fraction"]


@needs_compiler
def test_fidelity_cann_api_answers_empty_below_8_1_rc1(observed):
    """get_cann_version returns "" (no exception) below CANN 8.1.RC1 and for an unknown
    module; the version then comes from the simulated install's files."""
    assert observed["cann_api"] == ["", ""]
    assert observed["fingerprint"]["cann"] == "8.0.RC3"
    assert observed["cann_source"].endswith("8.0.RC3/ascend-toolkit/latest")


@needs_compiler
def test_fidelity_torch_npu_grad_scaler_is_its_own(observed):
    """torch_npu.npu.amp.GradScaler: its own class with ``dynamic``; a static one never
    backs off; the harness lists both scalers."""
    module, dynamic_scale, static_scale, dynamic_flag, apis = observed["npu_scaler"]
    assert module == "harness.simnpu._module" and dynamic_scale == 128.0
    assert static_scale == 256.0 and dynamic_flag is True
    assert apis == ["torch.amp", "torch_npu.npu.amp"]


@needs_compiler
def test_every_cpu_op_has_a_kernel_but_the_listed_ones(observed):
    # sort is on the fallback list, cumsum on the unsupported one: no kernel of their own,
    # as torch_npu lacks one; where has one, as it has on the CPU
    assert observed["own_kernel"] == {"aten::where.self": True, "aten::sort": False,
                                      "aten::cumsum": False}


@needs_compiler
def test_listed_ops_warn_like_torch_npu_and_are_captured(observed):
    first, second, clean = observed["fallback"]
    assert first and all(op.startswith("aten::sort") for op in first)
    assert second, "the second sort (no warning: once per op) is found by the tracer"
    # Note [Fallback warnings reach stderr only]: never a Python warning
    assert observed["fallback_sources"] == ["stderr"]
    assert clean == []
    assert observed["unsupported"].startswith("Could not run 'aten::cumsum")


@needs_compiler
def test_fingerprint_has_the_torch_npu_and_cann_fields(observed):
    fp = observed["fingerprint"]
    assert fp["device_type"] == "npu" and fp["device_name"] == "SimNPU"
    assert fp["torch_npu"].endswith(simnpu.TORCH_NPU_VERSION_SUFFIX)
    assert fp["cann"] == "8.0.RC3" and fp["stack_id"] == "cann-8.0.RC3"
    assert fp["device_slug"] == "simnpu" and fp["driver"]
    assert observed["timer_ms"] >= 0.0
    assert observed["npu_backend"] == "hccl"  # harness.simnpu.collectives, the npu row's name


@needs_compiler
def test_doctor_lists_the_simulated_npu_and_its_stack():
    proc = _run(["-m", "harness", "doctor", "--device", "npu"], HARNESS_SIMNPU_CANN="8.0.RC3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[  ok] device npu: 1 SimNPU device(s) (simulated, CANN 8.0.RC3" in proc.stdout
    assert "[  ok]   npu:0: SimNPU, 16.0 GiB" in proc.stdout
    assert "[  ok] CANN: 8.0.RC3 (" in proc.stdout and "runtime 8.0.RC3" in proc.stdout
    assert "stack: cann-8.0.RC3 on npu/simnpu" in proc.stdout


@needs_compiler
def test_simulated_cann_upgrade_compares_with_the_older_stack():
    """Record on simulated CANN 8.0.RC3, run on 8.0.0: the newest older stack is chosen;
    an op that starts falling back on the new stack is a regression."""
    runs = early.result(UPGRADE)
    old, same, worse = runs["old"], runs["same"], runs["worse"]
    assert old.returncode == 0, old.stdout[-3000:]
    assert runs["recorded"]
    assert same.returncode == 0, same.stdout[-3000:]
    assert "cann-8.0.RC3" in next(line for line in same.stdout.splitlines()
                                  if line.startswith("harness: baseline"))
    assert worse.returncode != 0, worse.stdout[-3000:]
    assert "fallback" in worse.stdout


@needs_compiler
def test_distributed_checks_run_on_the_simulated_hccl():
    """harness.simnpu.collectives: the checks run (not skip) on npu:0 and npu:1 with the
    npu row's backend, and pass."""
    proc = early.result(DISTRIBUTED)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert f"{len(DIST_NODES)} passed" in out and "skipped" not in out, out[-3000:]


def _tagged(proc, tag: str):
    lines = [line for line in proc.stdout.splitlines() if line.startswith(tag + " ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].split(" ", 1)[1])


@needs_compiler
def test_fallback_warning_reaches_stderr_only_on_rank_0_and_unless_disabled():
    runs = early.result(CHANNEL)["runs"]
    caution = "CAUTION: The operator 'aten::sort"
    assert caution in runs["rank0"].stderr and caution not in runs["rank0"].stdout
    assert caution not in runs["rank1"].stderr + runs["rank1"].stdout  # RANK=1: silent
    assert caution not in runs["disabled"].stderr  # TORCH_NPU_WARNING_DISABLE=1: silent


@needs_compiler
def test_cann_9_answers_the_api_and_installs_under_cann():
    api, cann, source, _ = _tagged(early.result(CHANNEL)["runs"]["rank1"], "CHANNEL-JSON")
    assert api == "9.0.0" and cann == "9.0.0"
    assert source == "torch_npu.npu.utils.get_cann_version"
    assert (simnpu.cache_root() / "Ascend" / "9.0.0" / "cann" / "set_env.sh").is_file()


@needs_compiler
def test_hccl_communicator_is_made_in_the_first_collective():
    ok, values, problem = _tagged(early.result(CHANNEL)["lazy"], "LAZY-JSON")
    assert ok, problem
    assert {v["sum"] for v in values.values()} == {2.0}
    assert max(v["waited"] for v in values.values()) > 1.0  # longer than the group's 1 s
