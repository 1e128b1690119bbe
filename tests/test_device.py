"""The device layer with faked probes: only the probe seams are replaced, never numbers."""

import time
import warnings

import pytest
import torch

from harness import cli, fallback, kinds, options, stack
from harness import device as device_mod
from harness.device import Device, DeviceUnavailable, Probe, Unsupported
from harness.model import inventory


@pytest.fixture
def fake_npu_package(monkeypatch):
    """Pretend torch_npu is installed, at a version matching this torch."""
    base = device_mod._base_version(torch.__version__)
    monkeypatch.setattr(device_mod, "torch_npu_version", lambda: f"{base}.post2")


def test_npu_not_installed_reason(monkeypatch):
    monkeypatch.setattr(device_mod, "torch_npu_version", lambda: None)
    monkeypatch.setattr(device_mod.importlib.util, "find_spec", lambda name: None)
    result = device_mod.probe("npu")
    assert not result.available and "torch_npu is not installed" in result.reason


def test_npu_cann_not_sourced_reason(monkeypatch, fake_npu_package):
    def missing_libs():
        raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")

    monkeypatch.setattr(device_mod, "_import_torch_npu", missing_libs)
    result = device_mod.probe("npu")
    assert not result.available
    assert "CANN's libraries are not on the library path" in result.reason
    assert "set_env.sh" in result.reason


def test_npu_version_mismatch_reason(monkeypatch):
    monkeypatch.setattr(device_mod, "torch_npu_version", lambda: "1.11.0.post8")
    result = device_mod.probe("npu")
    assert not result.available and "version mismatch" in result.reason
    assert "1.11.0.post8" in result.reason and torch.__version__ in result.reason


def test_npu_imported_but_no_device(monkeypatch, fake_npu_package):
    class FakeNpu:
        @staticmethod
        def is_available():
            return False

    monkeypatch.setattr(device_mod, "_import_torch_npu", lambda: None)
    monkeypatch.setattr(torch, "npu", FakeNpu, raising=False)
    result = device_mod.probe("npu")
    assert not result.available and "npu-smi" in result.reason


def test_npu_available_when_probe_succeeds(monkeypatch, fake_npu_package):
    class FakeNpu:
        @staticmethod
        def is_available():
            return True

        @staticmethod
        def device_count():
            return 8

    monkeypatch.setattr(device_mod, "_import_torch_npu", lambda: None)
    monkeypatch.setattr(torch, "npu", FakeNpu, raising=False)
    assert device_mod.probe("npu") == Probe("npu", True, device_mod.probe("npu").reason, 8,
                                            installed=True)


def test_auto_falls_back_to_cpu_and_says_why():
    chosen, probes = device_mod.select("auto")
    assert chosen.type == "cpu"  # this test machine has no accelerator
    assert [p.type for p in probes] == ["npu", "cuda", "xpu", "mps", "cpu"]
    assert all(p.reason for p in probes)


def test_auto_prefers_npu_over_cuda(monkeypatch):
    fake = {t: Probe(t, t in ("npu", "cuda", "cpu"), f"{t} fake", 2) for t in device_mod.KINDS}
    monkeypatch.setattr(device_mod, "probe", lambda t: fake[t])
    chosen, _ = device_mod.select("auto", index=3)
    assert (chosen.type, chosen.index) == ("npu", 1)  # worker 3 on a 2-device host


def test_explicit_unavailable_device_is_an_error_with_reason(monkeypatch):
    # the npu row names its probe, so replacing the function is enough
    monkeypatch.setattr(device_mod, "_probe_npu",
                        lambda: Probe("npu", False, "torch_npu is not installed"))
    with pytest.raises(DeviceUnavailable, match="--device npu is not usable: torch_npu is not"):
        device_mod.select("npu")


def test_dist_backends_per_type():
    assert {t: Device(t).dist_backend for t in device_mod.DEVICE_TYPES} == {
        "npu": "hccl", "cuda": "nccl", "xpu": "xccl", "mps": "gloo", "cpu": "gloo"}


def test_cpu_device_basics():
    cpu = Device("cpu")
    assert cpu.torch_device == torch.device("cpu") and cpu.peak_allocated() is None
    with pytest.raises(NotImplementedError):
        cpu.cap(1 << 20)
    with cpu.autocast(torch.bfloat16):
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.bfloat16
    if cpu.grad_scaler_unsupported() is None:  # torch >= 2.3 has a CPU GradScaler
        scaler = cpu.grad_scaler(init_scale=128.0)
        assert scaler.is_enabled() and scaler.get_scale() == 128.0
    else:  # an older stack says so instead of handing out a disabled scaler
        with pytest.raises(Unsupported, match="no GradScaler for cpu"):
            cpu.grad_scaler(init_scale=128.0)
    timer = cpu.event_timer()
    timer.start()
    time.sleep(0.05)
    timer.stop()
    assert 49.0 <= timer.elapsed_ms() < 5000.0  # sleep() waits at least as long as asked


def test_scope_is_reentrant():
    cpu = Device("cpu")
    with cpu.scope():
        with cpu.scope():
            assert device_mod._scope_state.depth == 2
    assert device_mod._scope_state.depth == 0


def test_xdist_worker_index(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw5")
    assert device_mod.xdist_worker_index() == 5
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert device_mod.xdist_worker_index() is None


# ------------------------------------------------------------------ kinds as data rows

FAKE_WARNING = r"ran\s+on\s+the\s+host\s+instead"


@pytest.fixture
def fake_kind(monkeypatch):
    """A device type that exists only as a row of KINDS: nothing else knows it."""
    row = kinds.Kind(
        "fake", lambda: Probe("fake", False, "no fake accelerator in this box"), "gloo", "torch",
        display="Fake accelerator", dispatch_key="PrivateUse1", autocast_type="fake",
        amp_dtypes=("bfloat16",), autocast_widens=False, legacy_amp=None,
        fallback_warning=FAKE_WARNING, fallback_on_stderr=True,
        oom_message=r"FAKE ran out of memory")
    monkeypatch.setitem(kinds.KINDS, "fake", row)
    return row


def test_a_new_device_type_is_one_row(fake_kind, pytester):
    # options: the plugin's, the doctor's and the model command's --device
    assert device_mod.DEVICE_TYPES[-1] == "fake" and "fake" in kinds.choices()
    option = dict(options.OPTIONS)[("--device",)]()
    assert "fake" in option["choices"] and "fake (Fake accelerator)" in option["help"]
    assert cli.build_parser().parse_args(["doctor", "--device", "fake"]).device == "fake"
    assert cli.build_parser().parse_args(["model", "m:f", "--device", "fake"]).device == "fake"
    pytester.makeconftest('pytest_plugins = ["harness.plugin"]')
    result = pytester.runpytest("-p", "no:cacheprovider", "--device", "nosuch")
    result.stderr.fnmatch_lines(["*invalid choice: 'nosuch' (choose from *'cpu', 'fake')*"])
    # the probe the row names
    with pytest.raises(DeviceUnavailable, match="no fake accelerator in this box"):
        device_mod.select("fake")
    # stack key and dispatch key
    assert stack.stack_id({"device_type": "fake", "torch": "2.4.0+cpu"}) == "torch-2.4.0"
    assert inventory.dispatch_key("fake") == "PrivateUse1"
    # fallback pattern: the row's wording, not torch_npu's
    text = "The operator 'aten::sort' is not currently supported; it ran on the host instead"
    assert fallback.parse(text, "fake") == ["aten::sort"]
    assert fallback.parse(text, "cpu") == []
    assert fallback.parse("CAUTION: The operator 'aten::sort' is not currently supported on "
                          "the NPU backend and will fall back to run on the CPU.", "fake") == []
    assert fallback.default_stderr_capture("fake")
    with fallback.capture("fake", stderr=False) as seen:
        warnings.warn(text, UserWarning, stacklevel=1)
    assert seen.ops == ["aten::sort"]
    # AMP dtypes: bf16 preferred and the only one; fp16 refused without touching torch
    fake = Device("fake")
    assert fake.amp_dtype == torch.bfloat16 and fake.amp_dtypes == (torch.bfloat16,)
    assert "fake autocast knows bfloat16, not float16" in fake.autocast_unsupported(
        torch.float16)
    with pytest.raises(Unsupported, match="knows bfloat16"):
        fake.autocast(torch.float16)
    # OOM detection: the row's text
    assert fake.is_out_of_memory(RuntimeError("FAKE ran out of memory: 3 GiB requested"))
    assert not fake.is_out_of_memory(RuntimeError("NPU out of memory. Tried to allocate 2 GiB"))
    assert not fake.simulated


def test_every_row_names_a_probe_and_known_dtypes_and_stack():
    from harness import dtypes

    for kind in kinds.KINDS.values():
        assert callable(device_mod.probe_function(kind)), kind.type
        assert kind.amp_dtypes and set(kind.amp_dtypes) <= set(dtypes.AMP), kind.type
        assert kind.stack_prefix in stack.STACKS, kind.type


def test_a_row_naming_a_missing_probe_says_so(monkeypatch):
    import dataclasses

    monkeypatch.setitem(kinds.KINDS, "npu",
                        dataclasses.replace(kinds.KINDS["npu"], probe="_probe_nothing"))
    with pytest.raises(ValueError, match="names the probe '_probe_nothing'"):
        device_mod.probe("npu")


def test_simnpu_simulates_the_row_that_names_it():
    from harness import simnpu

    row = kinds.KINDS[simnpu.DEVICE_TYPE]
    assert row.simulator == "harness.simnpu" and row.dispatch_key == "PrivateUse1"


def test_preferred_amp_dtype_per_type():
    # torch's default autocast dtype per type (torch.get_autocast_dtype) first
    assert {t: Device(t).amp_dtype for t in device_mod.DEVICE_TYPES} == {
        "npu": torch.float16, "cuda": torch.float16, "xpu": torch.float16,
        "mps": torch.float16, "cpu": torch.bfloat16}


TORCH_OOM = device_mod.TORCH_OOM


@pytest.mark.parametrize("device_type,exc,oom", [
    ("cpu", TORCH_OOM("harness tracker: out of memory"), True),
    ("npu", TORCH_OOM("NPU out of memory. Tried to allocate 2.00 GiB"), True),
    # older torch_npu: a plain RuntimeError that only its text identifies
    ("npu", RuntimeError("NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.97 GiB "
                         "total capacity; 58.10 GiB already allocated)"), True),
    ("cpu", RuntimeError("NPU out of memory. Tried to allocate 2.00 GiB"), False),
    ("cpu", RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: not "
                         "enough memory: you tried to allocate 4398046511104 bytes."), True),
    ("npu", RuntimeError("The size of tensor a (3) must match the size of tensor b (4)"),
     False),
    ("npu", ValueError("NPU out of memory"), False),  # only RuntimeErrors are read
])
def test_is_out_of_memory(device_type, exc, oom):
    assert Device(device_type).is_out_of_memory(exc) is oom


@pytest.mark.parametrize("api", ["manual_seed_all", "manual_seed"])
def test_seed_seeds_the_cpu_and_the_devices_own_generators(monkeypatch, api):
    """Device.seed draws as torch.manual_seed would on the CPU, and seeds the device's
    generators through its module (``manual_seed`` where there is no ``_all``, as MPS)."""
    torch.manual_seed(1234)
    expected = torch.randn(5)
    seeded = []
    module = type("Module", (), {api: staticmethod(seeded.append)})
    monkeypatch.setattr(Device, "module", property(lambda self: module))
    Device("npu", 0, 1).seed(1234)
    assert torch.equal(torch.randn(5), expected)
    assert seeded == [1234]
