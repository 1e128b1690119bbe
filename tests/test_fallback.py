"""CPU-fallback capture (harness.fallback), with faked torch_npu warnings: no NPU needed."""

import logging
import os
import warnings

import pytest
import torch

from harness import fallback, regress
from harness.results import Record

NPU_TEXT = ("CAUTION: The operator 'aten::linalg_lstsq.out' is not currently supported on "
            "the NPU backend and will fall back to run on the CPU. This may have performance "
            "implications.")
C10_LINE = ("[W1014 17:17:24.992527772 compiler_depend.ts:250] Warning: CAUTION: The operator "
            "'aten::scatter_reduce.two_out' is not currently supported on the NPU backend and "
            "will fall back to run on the CPU. This may have performance implications. "
            "(function npu_cpu_fallback)\n")


@pytest.fixture(autouse=True)
def fresh_known():
    fallback.forget()
    yield
    fallback.forget()


def test_parse_names_the_op_from_torch_npus_warning():
    assert fallback.parse(NPU_TEXT) == ["aten::linalg_lstsq.out"]
    assert fallback.parse(C10_LINE) == ["aten::scatter_reduce.two_out"]


def test_parse_matches_loosely_and_ignores_unrelated_text():
    assert fallback.parse("op X will FALL BACK to run on the cpu") == [fallback.UNKNOWN_OP]
    assert fallback.parse("The operator 'aten::add' is deprecated") == []
    assert fallback.parse("") == []


def test_capture_records_a_faked_fallback_warning():
    with fallback.capture() as seen:
        warnings.warn(NPU_TEXT, UserWarning, stacklevel=1)
    assert seen.ops == ["aten::linalg_lstsq.out"]
    assert seen.sources["aten::linalg_lstsq.out"] == "warning"
    assert bool(seen) and "aten::linalg_lstsq.out" in seen.describe()


def test_capture_without_fallback_is_empty_and_hands_other_warnings_on():
    with pytest.warns(RuntimeWarning, match="unrelated"):
        with fallback.capture() as seen:
            warnings.warn("something unrelated", RuntimeWarning, stacklevel=1)
            torch.ones(3).sum()
    assert seen.ops == [] and not seen and seen.describe() == "no CPU fallback"


def test_capture_swallows_the_fallback_warning_itself():
    with warnings.catch_warnings(record=True) as outer:
        warnings.simplefilter("always")
        with fallback.capture():
            warnings.warn(NPU_TEXT, UserWarning, stacklevel=1)
    assert not [w for w in outer if "fall back" in str(w.message)]


def test_capture_listens_to_logging():
    with fallback.capture() as seen:
        logging.getLogger("torch_npu.fake").warning(NPU_TEXT)
    assert seen.ops == ["aten::linalg_lstsq.out"] and seen.sources[seen.ops[0]] == "log"


def test_capture_reads_c10_warnings_printed_to_stderr_fd(capfd):
    with fallback.capture(stderr=True) as seen:
        os.write(2, C10_LINE.encode())
    assert seen.ops == ["aten::scatter_reduce.two_out"]
    assert seen.sources[seen.ops[0]] == "stderr"
    assert "scatter_reduce" in capfd.readouterr().err  # passed through, not eaten


def test_stderr_watching_is_on_by_default_only_for_npu():
    assert fallback.default_stderr_capture("npu")
    assert not fallback.default_stderr_capture("cpu")
    assert not fallback.default_stderr_capture(None) and not fallback.default_stderr_capture("meta")


def test_capture_for_a_device_type_takes_its_rows_stderr_default(capfd):
    with fallback.capture("npu") as npu:  # the npu row: fd 2 watched
        os.write(2, C10_LINE.encode())
    with fallback.capture("cpu") as cpu:  # the cpu row: not watched
        os.write(2, C10_LINE.encode())
    assert npu.ops == ["aten::scatter_reduce.two_out"] and npu.sources[npu.ops[0]] == "stderr"
    assert cpu.ops == [] and capfd.readouterr().err.count("scatter_reduce") == 2


def test_an_op_that_warned_once_is_still_flagged_later():
    # torch_npu warns once per op and process (Note [Fallback warnings are emitted once]).
    with fallback.capture() as first:
        warnings.warn("CAUTION: The operator 'aten::cumsum' is not currently supported on the "
                      "NPU backend and will fall back to run on the CPU.", UserWarning,
                      stacklevel=1)
    assert first.ops == ["aten::cumsum"] and "aten::cumsum" in fallback.KNOWN
    with fallback.capture() as second:  # silent this time, but cumsum is dispatched
        torch.cumsum(torch.ones(4), 0)
    assert second.ops == ["aten::cumsum"]
    assert second.sources["aten::cumsum"] == "known fallback op dispatched"
    with fallback.capture() as third:  # other ops are not flagged
        torch.ones(4).exp()
    assert third.ops == []


def test_regress_treats_a_new_fallback_as_a_regression():
    old = Record("opinfo/sort/float32/fwd/abcd1234", status="pass")
    new = Record("opinfo/sort/float32/fwd/abcd1234", status="fallback")
    found = regress.compare_record(new, old, "torch-2.4.0")
    assert [(f.kind, f.old, f.new) for f in found] == [("regression", "pass", "fallback")]
    back = regress.compare_record(old, new, "torch-2.4.0")
    assert [f.kind for f in back] == ["improvement"]
