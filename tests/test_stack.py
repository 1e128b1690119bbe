from harness import stack
from harness.device import Device


def test_cann_version_from_toolkit_files(tmp_path):
    root = tmp_path / "ascend-toolkit" / "latest"
    (root / "runtime").mkdir(parents=True)
    (root / "version.cfg").write_text("[version]\nversion=8.0.RC3\n")
    (root / "runtime" / "version.info").write_text("Version=8.0.RC3.10\n")
    found = stack.cann_version_from_files({"ASCEND_TOOLKIT_HOME": str(root)})
    assert found["cann"] == "8.0.RC3" and found["runtime"] == "8.0.RC3.10"
    assert found["source"] == str(root)


def test_cann_versions_prefer_torch_npu_api():
    table = {"CANN": "8.0.0", "HCCL": "8.0.0.1"}

    def get_cann_version(module="CANN"):
        if module not in table:
            raise ValueError(module)
        return table[module]

    found = stack.cann_versions(get_cann_version)
    assert found["cann"] == "8.0.0" and found["hccl"] == "8.0.0.1"
    assert found["source"] == "torch_npu.npu.utils.get_cann_version"


def test_stack_id_per_device_type():
    base = {"torch": "2.4.0+cpu", "cuda_runtime": "12.4", "cann": "8.0.RC3"}
    assert stack.stack_id(dict(base, device_type="npu")) == "cann-8.0.RC3"
    assert stack.stack_id(dict(base, device_type="cuda")) == "cuda-12.4"
    assert stack.stack_id(dict(base, device_type="cpu")) == "torch-2.4.0"


def test_cpu_fingerprint_slug_names_the_simd_level():
    fp = stack.fingerprint(Device("cpu"))
    assert fp["stack_id"].startswith("torch-") and fp["cpu_capability"] in fp["device_slug"]
    for key in ("python", "torch", "cpu", "os", "device_name", "device_count"):
        assert fp[key]
