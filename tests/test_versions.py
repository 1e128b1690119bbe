import pytest

from harness.results import read_document
from harness.stack import compare_versions, split_stack_id, stack_sort_key, version_key

ASCENDING = [
    "7.0.0",
    "8.0.RC1",
    "8.0.RC2.alpha003",
    "8.0.RC2.beta1",
    "8.0.RC2",
    "8.0.RC3",
    "8.0.0",
    "8.0.1",
    "8.1.RC1",
    "8.1.0",
    "10.0.0",
]


def test_cann_versions_sort_as_versions_not_strings():
    assert sorted(reversed(ASCENDING), key=lambda v: _padded(v)) == ASCENDING


def _padded(version):
    key = version_key(version)
    return key + ((0, 0, 0),) * (16 - len(key))


@pytest.mark.parametrize("older,newer", list(zip(ASCENDING, ASCENDING[1:])))
def test_each_neighbour_pair_orders(older, newer):
    assert compare_versions(older, newer) == -1
    assert compare_versions(newer, older) == 1


@pytest.mark.parametrize("older,newer", [
    ("2.1.0rc1", "2.1.0"), ("2.1.0", "2.1.0.post1"), ("2.4.0a0", "2.4.0b1"),
    ("2.4.0.dev20240101", "2.4.0rc1"), ("12.1", "12.4"), ("9.8", "12.1"),
])
def test_pep440_and_cuda_versions(older, newer):
    assert compare_versions(older, newer) == -1


def test_local_suffix_and_case_are_ignored():
    assert compare_versions("2.4.0+cpu", "2.4.0") == 0
    assert compare_versions("8.0.rc3", "8.0.RC3") == 0
    assert compare_versions("8.0", "8.0.0") == 0


def test_stack_ids_split_and_sort():
    assert split_stack_id("cann-8.0.RC3") == ("cann", "8.0.RC3")
    ids = ["cann-8.1.RC1", "cann-8.0.0", "cann-8.0.RC3"]
    assert sorted(ids, key=stack_sort_key) == ["cann-8.0.RC3", "cann-8.0.0", "cann-8.1.RC1"]
    with pytest.raises(ValueError, match="malformed stack id"):
        split_stack_id("cann")


# ------------------------------------------------ Note [Missing features of older stacks]

import importlib.util  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402

from harness import device as device_mod  # noqa: E402
from harness.device import Device, Unsupported  # noqa: E402

OLD_CPU_AUTOCAST = ("Currently, AutocastCPU only support Bfloat16 as the autocast_cpu_dtype")
"""What torch 2.1's CPU autocast raises on entering a float16 region."""


@pytest.fixture
def probes(monkeypatch):
    """Fresh feature probes (the cache is per process), restored afterwards."""
    monkeypatch.setattr(device_mod, "_FEATURES", {})
    return device_mod._FEATURES


@pytest.fixture
def old_torch(monkeypatch, probes):
    """The current torch made to answer as torch 2.1 does on the CPU: a float16 autocast
    region raises on entering (enabled or not), and there is no torch.amp.GradScaler."""
    real = torch.autocast

    class OldAutocast(real):
        def __enter__(self):
            if self.device == "cpu" and self.fast_dtype == torch.float16:
                raise RuntimeError(OLD_CPU_AUTOCAST)
            return super().__enter__()

    monkeypatch.setattr(torch, "autocast", OldAutocast)
    monkeypatch.delattr(torch.amp, "GradScaler", raising=False)
    return probes


def test_the_probe_tries_autocast_and_says_why_not(old_torch):
    cpu = Device("cpu")
    reason = cpu.autocast_unsupported(torch.float16)
    assert "has no float16 autocast on cpu" in reason and OLD_CPU_AUTOCAST in reason
    assert torch.__version__ in reason
    assert cpu.autocast_unsupported(torch.bfloat16) is None
    with pytest.raises(Unsupported, match="only support Bfloat16"):
        cpu.autocast(torch.float16)
    # a disabled region's dtype does not matter: it still works (fp32 math inside)
    with cpu.autocast(torch.bfloat16), cpu.autocast(torch.float16, enabled=False):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32
    assert not issubclass(Unsupported, RuntimeError)  # no `except RuntimeError` eats it


@pytest.mark.filterwarnings("ignore:.*GradScaler.*is deprecated:FutureWarning")
def test_the_probe_finds_a_grad_scaler_that_disables_itself(old_torch):
    cpu = Device("cpu")
    if torch.cuda.is_available():
        pytest.skip("torch.cuda.amp.GradScaler works here: nothing to fake")
    reason = cpu.grad_scaler_unsupported()
    assert reason.startswith(f"torch {torch.__version__} has no GradScaler for cpu")
    with pytest.raises(Unsupported, match="no GradScaler for cpu"):
        cpu.grad_scaler(init_scale=2.0)
    assert not cpu.grad_scaler(enabled=False).is_enabled()  # a disabled one always works
    assert {"autocast(float16)", "GradScaler"} <= set(cpu.missing_features())


def test_probes_run_once_per_process(probes, monkeypatch):
    calls = []

    def probe(self, dtype):
        calls.append(dtype)
        return None

    monkeypatch.setattr(Device, "_probe_autocast", probe)
    cpu = Device("cpu")
    for _ in range(3):
        with cpu.autocast(torch.bfloat16):
            pass
    assert calls == [torch.bfloat16]


def test_the_real_probes_agree_with_this_torch(probes):
    cpu = Device("cpu")
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            works = (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
    except RuntimeError:
        works = False
    assert (cpu.autocast_unsupported(torch.float16) is None) == works
    assert cpu.autocast_unsupported(torch.bfloat16) is None
    assert (cpu.grad_scaler_unsupported() is None) == hasattr(torch.amp, "GradScaler")


OLD_STACK_CHECK = """
import torch

def test_fp16_amp(device, results):
    results.record("demo/before/float32")
    with device.scope(), device.autocast(torch.float16):
        pass

def test_bf16_amp(device, results):
    with device.scope(), device.autocast(torch.bfloat16):
        x = torch.ones(2, 2, device=device.torch_device) @ torch.ones(2, 2)
    results.record("demo/bf16", status="pass" if x.dtype == torch.bfloat16 else "fail")

def test_scaler(device):
    device.grad_scaler(init_scale=2.0)

def test_fails_then_unsupported(device, results):
    results.record("demo/broken", status="fail", message="a real failure stays one")
    device.autocast(torch.float16)
"""


def test_a_missing_feature_is_an_unsupported_record_never_an_error(pytester, monkeypatch,
                                                                   probes):
    reasons = {"autocast": "torch 2.1.2 has no float16 autocast on cpu (faked)",
               "scaler": "torch 2.1.2 has no GradScaler for cpu (faked)"}
    monkeypatch.setattr(Device, "_probe_autocast", lambda self, dtype: (
        reasons["autocast"] if dtype == torch.float16 else None))
    monkeypatch.setattr(Device, "_probe_grad_scaler", lambda self: reasons["scaler"])
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    (pytester.path / "suites" / "demo").mkdir(parents=True)
    (pytester.path / "suites" / "demo" / "test_old.py").write_text(OLD_STACK_CHECK)
    # the inner run's order is part of the scenario ("recorded before" the failure)
    result = pytester.runpytest("-m", "npu", "-rs", "--baseline", "off", "-p", "no:randomly")
    result.assert_outcomes(passed=1, skipped=2, failed=1)
    result.stdout.fnmatch_lines([
        "harness: unsupported here: autocast(float16): *(faked)",
        "harness: unsupported here: GradScaler: *(faked)",
        f"SKIPPED [[]1[]] suites/demo/test_old.py:*: unsupported: {reasons['autocast']}",
        f"SKIPPED [[]1[]] suites/demo/test_old.py:*: unsupported: {reasons['scaler']}",
    ])
    run = read_document(sorted((pytester.path / "results").glob("*.json.gz"))[-1])
    records = run["records"]
    fp16 = records["demo/test_old/test_fp16_amp"]
    assert fp16["status"] == "unsupported" and fp16["info"]["reason"] == reasons["autocast"]
    assert records["demo/before/float32"]["status"] == "pass"  # recorded before: kept
    assert records["demo/test_old/test_scaler"]["status"] == "unsupported"
    assert records["demo/bf16"]["status"] == "pass"
    assert records["demo/broken"]["status"] == "fail"
    assert run["verdict"]["verdict"] == "no-go"  # for the real failure alone
    assert run["verdict"]["failing"] == ["demo/broken"] or "demo/broken" in str(
        run["verdict"]["failing"])


def _judge():
    path = Path(__file__).resolve().parents[1] / "harness" / "distributed" / "judge.py"
    spec = importlib.util.spec_from_file_location("_dist_judge", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class _Results:
    reproduce = "python -m pytest x"

    def __init__(self):
        self.records = {}

    def record(self, record_id, **kwargs):
        self.records[record_id] = kwargs

    def outcome(self, record_id, status, message="", **kwargs):
        self.record(record_id, status=status, message=message, **kwargs)

    def check(self, record_id, ok, message="", **kwargs):
        self.outcome(record_id, "pass" if ok else "fail", message, **kwargs)


def _outcome(types, world_size=2):
    from harness.distributed import RankError

    errors = {rank: RankError(rank, kind, f"{kind} on rank {rank}" if kind != "Unsupported"
                              else "torch 2.1.2 has no GradScaler for cpu", "tb")
              for rank, kind in enumerate(types)}
    return SimpleNamespace(ok=False, errors=errors, world_size=world_size, hung=[],
                           not_reached=[], problem=lambda: "rank problem")


@pytest.mark.parametrize("types,status", [
    (["Unsupported", "Unsupported"], "unsupported"),
    (["Unsupported", "RuntimeError"], "error"),   # ranks disagree: a real problem
    (["Unsupported"], "error"),                   # one rank never said: not all refused
])
def test_a_distributed_check_every_rank_refuses_is_unsupported(types, status):
    results = _Results()
    assert _judge().record_problem(results, "distributed/x", _outcome(types))
    assert results.records["distributed/x"]["status"] == status


def test_the_cpu_memory_tracker_is_refused_where_frees_cannot_be_seen(probes, monkeypatch):
    from harness import memory

    monkeypatch.setattr(device_mod, "_probe_storage_lifetime",
                        lambda: "torch 2.1.2 keeps no Python object per storage (faked)")
    cpu = Device("cpu")
    with pytest.raises(Unsupported, match="per storage"):
        with memory.MemoryMeter(cpu):
            pass
    assert cpu.missing_features()["memory tracker"].endswith("(faked)")


def test_the_real_storage_probe_agrees_with_this_torch(probes):
    tensor = torch.empty(4)
    preserved = tensor.untyped_storage() is tensor.untyped_storage()
    assert (device_mod.storage_lifetime_unsupported() is None) == preserved


def test_an_api_this_torch_lacks_is_unsupported_naming_it():
    assert device_mod.torch_api("nn.functional.relu") is torch.nn.functional.relu
    with pytest.raises(Unsupported, match=r"has no torch\.nn\.functional\.no_such_op$"):
        device_mod.torch_api("nn.functional.no_such_op")


@pytest.mark.parametrize("message", [  # what torch 2.1.2's CPU says (.ci/torch-line 2.1.2)
    '"softmax_lastdim_kernel_impl" not implemented for \'Half\'',
    '"binary_cross_entropy" not implemented for \'BFloat16\'',
    "Currently, AutocastCPU only support Bfloat16 as the autocast_cpu_dtype",
])
def test_missing_kernels_are_unsupported_in_the_runner_and_the_plugin(message):
    from harness.ops import policy

    assert device_mod.missing_kernel(RuntimeError(message))
    assert policy.classify_exception(RuntimeError(message))[0] == "unsupported"
    assert policy.classify_exception(
        Unsupported("torch 2.1.2 has no torch.nn.functional.rms_norm"))[0] == "unsupported"
    assert policy.classify_exception(
        RuntimeError("size mismatch, m1: [2 x 3], m2: [4 x 5]"))[0] == "error"
