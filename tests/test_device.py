"""The device layer with faked probes: only the probe seams are replaced, never numbers."""

import pytest
import torch

from harness import device as device_mod
from harness.device import Device, DeviceUnavailable, Probe


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
    assert device_mod.probe("npu") == Probe("npu", True, device_mod.probe("npu").reason, 8)


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
    monkeypatch.setattr(device_mod, "_probe_npu",
                        lambda: Probe("npu", False, "torch_npu is not installed"))
    monkeypatch.setitem(device_mod.KINDS, "npu",
                        device_mod.Kind("npu", device_mod._probe_npu, "hccl", "cann"))
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
    scaler = cpu.grad_scaler(init_scale=128.0)
    assert scaler.get_scale() == 128.0 if scaler.is_enabled() else True
    timer = cpu.event_timer()
    timer.start()
    timer.stop()
    assert timer.elapsed_ms() >= 0


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
