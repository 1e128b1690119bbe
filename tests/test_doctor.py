"""Doctor output with faked probes (npu missing, CANN missing, version mismatch)."""

import pytest
import torch

from harness import device as device_mod
from harness import doctor


def _text(findings):
    return "\n".join(f.text() for f in findings)


def test_cpu_host_is_usable_and_explains_each_accelerator():
    findings, usable = doctor.run_checks("auto", import_probe=lambda: (True, "2.x"))
    text = _text(findings)
    assert usable and "device cpu" in text and "torch_npu is not installed" in text
    assert "stack: torch-" in text


def test_requested_npu_missing_fails(monkeypatch):
    monkeypatch.setattr(device_mod, "torch_npu_version", lambda: None)
    monkeypatch.setattr(device_mod.importlib.util, "find_spec", lambda name: None)
    findings, usable = doctor.run_checks("npu", import_probe=lambda: (True, "2.x"))
    assert not usable
    assert "[FAIL] device npu: not usable: torch_npu is not installed" in _text(findings)


def test_cann_missing_is_explained(monkeypatch):
    monkeypatch.setattr(device_mod, "torch_npu_version",
                        lambda: device_mod._base_version(torch.__version__))

    def missing():
        raise ImportError("libhccl.so: cannot open shared object file")

    monkeypatch.setattr(device_mod, "_import_torch_npu", missing)
    findings, usable = doctor.run_checks("npu", import_probe=lambda: (True, "2.x"))
    assert not usable and "set_env.sh" in _text(findings)


def test_version_mismatch_is_explained(monkeypatch):
    monkeypatch.setattr(device_mod, "torch_npu_version", lambda: "2.1.0.post3")
    findings, _ = doctor.run_checks("auto", import_probe=lambda: (True, "2.x"))
    text = _text(findings)
    assert "[warn] device npu: not usable: version mismatch" in text


def test_broken_autoload_explains_the_environment_variable(monkeypatch):
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    probe = lambda: (False, "ImportError: libhccl.so: cannot open shared object file")  # noqa: E731
    findings, usable = doctor.run_checks("auto", import_probe=probe)
    text = _text(findings)
    assert not usable and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in text and "autoloads" in text


@pytest.mark.parametrize("env,status", [
    ({}, "ok"),
    ({"ASCEND_TOOLKIT_HOME": "/opt/Ascend/latest"}, "warn"),
    ({"ASCEND_TOOLKIT_HOME": "/opt/Ascend/latest",
      "LD_LIBRARY_PATH": "/opt/Ascend/latest/lib64"}, "ok"),
])
def test_cann_environment_sourced_or_not(env, status, monkeypatch):
    monkeypatch.setattr(doctor.os.path, "isdir", lambda p: False)
    assert doctor.check_cann_env(env).status == status


def test_doctor_command_exit_status(capsys):
    assert doctor.main("cpu") == 0
    assert "requested device cpu: usable" in capsys.readouterr().out


def test_fallback_channel_fails_when_torch_npu_warnings_are_disabled():
    """torch_npu prints its CPU-fallback warning only without TORCH_NPU_WARNING_DISABLE=1
    (or the older TORCH_NPU_DISABLED_WARNING=1) and where RANK is unset or 0."""
    from harness import doctor

    (ok,) = doctor.check_fallback_channel("npu", env={})
    assert ok.status == doctor.OK
    for name in ("TORCH_NPU_WARNING_DISABLE", "TORCH_NPU_DISABLED_WARNING"):
        (off,) = doctor.check_fallback_channel("npu", env={name: "1"})
        assert off.status == doctor.FAIL and f"unset {name}" == off.fix
    (rank,) = doctor.check_fallback_channel("npu", env={"RANK": "3"})
    assert rank.status == doctor.WARN and "RANK=3" in rank.detail
    assert doctor.check_fallback_channel("cpu", env={}) == []


def test_deep_rounding_line_names_a_missing_or_different_pad():
    from harness import deep

    def line(blocks):
        return deep._rounding_line({"blocks": blocks, "reserved_vs_allocated": [2 << 20, 512],
                                    "int_fraction": "refused"})

    assert line({480: 512, 481: 1024, 1000: 1536})[0] == "ok"
    status, _, detail, fix = line({480: 512, 481: 512, 1000: 1024})
    assert status == "fail" and "no pad" in detail and "re-record" in fix
    assert "another rounding" in line({480: 1024, 481: 1024, 1000: 1536})[2]
