"""The migration scan (harness/scan.py, ``python -m harness scan``): the ResNet-18 example
found line by line, aliases, f-strings, what is not code, exit codes, ``--json``, and the
severities measured on this CPU torch."""

from __future__ import annotations

import importlib.util
import json
import textwrap
import tokenize
import warnings
from pathlib import Path

import pytest
import torch

from harness import cli, scan

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "resnet18_cuda_train.py"


def rules_of(source: str) -> list[tuple[int, str]]:
    """(line, rule id) of each finding in ``source``."""
    source = textwrap.dedent(source)
    found = scan.scan_source(source.encode(), source.splitlines(), "<test>")
    return [(f.line, f.rule) for f in found]


def markers(path: Path) -> set[tuple[int, str]]:
    """(line, rule id) of each ``# scan: RULE...`` comment in ``path``."""
    marked = set()
    with path.open("rb") as fh:
        for tok in tokenize.tokenize(fh.readline):
            if tok.type == tokenize.COMMENT and tok.string.startswith("# scan:"):
                for rule in tok.string[len("# scan:"):].split():
                    marked.add((tok.start[0], rule))
    return marked


# ------------------------------------------------------------------------ the example

def test_the_resnet18_example_is_found_line_by_line():
    marked = markers(EXAMPLE)
    unknown = {rule for _, rule in marked} - set(scan.BY_ID)
    assert not unknown, f"markers name rules that do not exist: {unknown}"
    found = {(f.line, f.rule) for f in scan.scan([str(EXAMPLE)])}
    assert found - marked == set(), "reported but not marked"
    assert marked - found == set(), "marked but not reported"
    # what the issue asks to see found: amp autocast and GradScaler, .cuda(), nccl, cudnn
    for rule in ("cuda-amp-autocast", "cuda-amp-grad-scaler", "dot-cuda", "nccl",
                 "cudnn-benchmark", "cuda-event", "cuda-synchronize", "cuda-visible-devices",
                 "pin-memory"):
        assert any(r == rule for _, r in marked), rule


def test_the_example_is_a_real_resnet18():
    """The example's model is torchvision's ResNet-18 (11,689,512 parameters), written out."""
    spec = importlib.util.spec_from_file_location("resnet18_cuda_train", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines only: training starts under __main__
    assert sum(p.numel() for p in module.ResNet18().parameters()) == 11_689_512


def test_the_example_is_a_blocker_run_through_the_command(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert cli.main(["scan", "docs/examples"]) == 1
    out = capsys.readouterr().out
    assert "docs/examples/resnet18_cuda_train.py:" in out
    assert "with autocast(dtype=torch.float16):" in out  # the source line
    assert out.strip().splitlines()[-1].startswith("BLOCKERS: ")
    assert "(exit 1)" in out


# --------------------------------------------------------------------------- matching

@pytest.mark.parametrize("source, expected", [
    ("import torch as t\nt.cuda.synchronize()", [(2, "cuda-synchronize")]),
    ("from torch import cuda\ncuda.Stream()", [(2, "cuda-stream")]),
    ("from torch.cuda.amp import autocast, GradScaler as GS\nwith autocast(): GS()",
     [(2, "cuda-amp-autocast"), (2, "cuda-amp-grad-scaler")]),
    ("from torch.cuda import amp\namp.autocast()", [(2, "cuda-amp-autocast")]),
    ("import torch.cuda.amp as A\n@A.custom_fwd\ndef f(x): pass", [(2, "cuda-amp-custom-fwd")]),
    ("from torch.backends import cudnn\ncudnn.deterministic = True",
     [(2, "cudnn-deterministic")]),
    ("import torch\ntorch.backends.cudnn.enabled = False", [(2, "cudnn")]),
    ("import torch\ntorch.cuda.memory_summary()", [(2, "cuda-memory-control")]),
    ("import torch\ntorch.cuda.FloatTensor(3)", [(2, "torch-cuda")]),
    ("import torch.cuda\ntorch.cuda.device_count()", [(2, "cuda-device-count")]),
    ("import apex\nfrom apex.parallel import DistributedDataParallel as DDP\nDDP(m)",
     [(1, "apex"), (2, "apex"), (3, "apex")]),
    ("from apex import amp\nm, o = amp.initialize(m, o)", [(1, "apex"), (2, "apex")]),
    ("from torch.cuda.amp import *", [(1, "cuda-amp")]),
    ("import torch\ntorch.compile(m, backend='inductor')", [(2, "torch-compile")]),
    ("import torch\ntorch.cuda.nvtx.range_push('a')", [(2, "cuda-nvtx")]),
    ("import torch\ntry: pass\nexcept torch.cuda.OutOfMemoryError: pass", [(3, "cuda-oom")]),
])
def test_imports_and_aliases_are_resolved(source, expected):
    assert rules_of(source) == expected


@pytest.mark.parametrize("source, expected", [
    ("x.to('cuda')", [(1, "cuda-device-string")]),
    ("torch.zeros(1, device='cuda:1')", [(1, "cuda-device-string")]),
    ("torch.device(f'cuda:{rank}')", [(1, "cuda-device-string")]),
    ("torch.device(f'cuda:{rank % n}', 0)", [(1, "cuda-device-string")]),
    ("d = 'cuda:{}'.format(rank)", [(1, "cuda-device-string")]),
    ("d = 'cuda:%d' % rank", [(1, "cuda-device-string")]),
    ("d = 'cuda:{local_rank}'.format(local_rank=r)", [(1, "cuda-device-string")]),
    ("x = x.cuda(non_blocking=True)", [(1, "dot-cuda")]),
    ("x = self.net.cuda(rank)", [(1, "dot-cuda")]),
    ("if x.is_cuda: pass", [(1, "is-cuda")]),
    ("dist.init_process_group('nccl')", [(1, "nccl")]),
    ("dist.init_process_group(backend='nccl', world_size=2)", [(1, "nccl")]),
    ("os.environ['CUDA_VISIBLE_DEVICES'] = '0,1'", [(1, "cuda-visible-devices")]),
    ("v = os.environ.get('CUDA_LAUNCH_BLOCKING')", [(1, "cuda-launch-blocking")]),
    ("os.environ[f'NCCL_{k}'] = v", [(1, "nccl-env")]),
    ("DataLoader(ds, pin_memory=True)", [(1, "pin-memory")]),
    ("torch.set_default_tensor_type('torch.cuda.HalfTensor')", [(1, "cuda-tensor-type")]),
])
def test_strings_methods_and_keywords(source, expected):
    assert rules_of(source) == expected


@pytest.mark.parametrize("source", [
    "# torch.cuda.synchronize() and x.cuda() in a comment",
    '"""Moves the model to "cuda" with .cuda()."""',
    "def f():\n    'cuda'\n    return 1",
    "if args.cuda: pass",            # a flag named cuda, not the method
    "args.cuda = True",
    "DataLoader(ds, pin_memory=False)",
    "x = f'{prefix}cuda'",            # only a string that starts as a device string
    "print('cuda is not here')",
    "print('cuda: no device')",
    "print(f'cuda: {msg}')",
    "import torch\nx = torch.amp.autocast(device_type=dev)",  # device-generic already
    "import torch\ntorch.accelerator.synchronize()",
    "from torch.cuda.amp import autocast",  # an import alone imports fine on an NPU
    "torch.cuda.synchronize()",       # `torch` never imported: not torch
])
def test_what_is_not_code_or_not_cuda_is_not_reported(source):
    assert rules_of(source) == []


def test_a_finding_has_its_column_source_line_and_nothing_twice():
    source = "import torch\ny = torch.ones(1).cuda(); z = y.to('cuda')  # é\n"
    found = scan.scan_source(source.encode(), source.splitlines(), "f.py")
    assert [(f.line, f.col, f.rule) for f in found] == [
        (2, 18, "dot-cuda"), (2, 36, "cuda-device-string")]  # .cuda() at its dot
    assert found[0].code == "y = torch.ones(1).cuda(); z = y.to('cuda')  # é"
    # columns count characters from 1, not UTF-8 bytes from 0
    source = "s = 'é'; x.cuda()\n"
    (f,) = scan.scan_source(source.encode(), source.splitlines(), "f.py")
    assert f.col == 11
    # a receiver over several lines: the line of the dot
    source = "model = Net(\n    3,\n).cuda()\n"
    (f,) = scan.scan_source(source.encode(), source.splitlines(), "f.py")
    assert (f.line, f.col, f.code) == (3, 2, ").cuda()")


# ---------------------------------------------------------------- exit codes and json

def write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.parametrize("source, rc, head", [
    ("import torch\nx = torch.ones(1).cuda()\n", 1, "BLOCKERS: 1 blocker, 0 change, 0 note"),
    ("import torch\nok = torch.cuda.is_available()\n", 0, "CHANGES: 0 blocker, 1 change"),
    ("import torch\ntorch.backends.cudnn.benchmark = True\n", 0, "NOTES: 0 blocker, 0 change, "
                                                                 "1 note"),
    ("import torch\nx = torch.ones(1)\n", 0, "CLEAN: 0 blocker, 0 change, 0 note in 0 of 1"),
])
def test_exit_code_is_1_on_a_blocker_only(tmp_path, capsys, source, rc, head):
    path = write(tmp_path, "train.py", source)
    assert cli.main(["scan", str(path)]) == rc
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(head) and last.endswith(f"(exit {rc})")


def test_a_file_that_does_not_parse_exits_2_naming_its_line(tmp_path, capsys):
    write(tmp_path, "src/good.py", "import torch\nx = torch.ones(1).cuda()\n")
    write(tmp_path, "src/bad.py", "import torch\n\ndef f(:\n    pass\n")
    assert cli.main(["scan", str(tmp_path / "src")]) == 2
    out = capsys.readouterr().out
    assert "bad.py:3:" in out and "syntax-error" in out and "def f(:" in out
    assert "good.py:2:18:" in out  # the other files are still scanned
    assert out.strip().splitlines()[-1].startswith("NOT SCANNED: 1 blocker")


@pytest.mark.parametrize("make, words", [
    (lambda tmp: str(tmp / "missing.py"), "no such file or folder"),
    (lambda tmp: str(tmp), "no .py file under the folder"),
])
def test_a_path_that_cannot_be_scanned_is_a_usage_error(tmp_path, capsys, make, words):
    with pytest.raises(SystemExit) as exc:
        cli.main(["scan", make(tmp_path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_folders_are_walked_and_hidden_folders_skipped(tmp_path):
    write(tmp_path, "a/train.py", "x.cuda()\n")
    write(tmp_path, "a/sub/model.py", "y.cuda()\n")
    write(tmp_path, "a/.venv/lib.py", "z.cuda()\n")
    write(tmp_path, "a/__pycache__/c.py", "z.cuda()\n")
    paths = scan.files([str(tmp_path / "a"), str(tmp_path / "a" / "train.py")])
    assert [p.name for p in paths] == ["model.py", "train.py"]  # sorted, each once


def test_json_lists_every_finding_with_its_fix(tmp_path, capsys):
    path = write(tmp_path, "train.py", """\
        import torch
        from torch.cuda.amp import GradScaler
        scaler = GradScaler()
        dist.init_process_group("nccl")
        """)
    assert cli.main(["scan", "--json", str(path)]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [(r["line"], r["col"], r["rule"], r["severity"]) for r in rows] == [
        (3, 10, "cuda-amp-grad-scaler", "change"), (4, 25, "nccl", "blocker")]
    assert rows[0]["file"] == str(path)
    assert rows[0]["code"] == "scaler = GradScaler()"
    assert rows[0]["fix"] == {"generic": "`torch.amp.GradScaler(device.type)`",
                              "npu": "`torch.npu.amp.GradScaler()`"}
    assert rows[1]["fix"]["npu"] == "'hccl'" and "NCCL" in rows[1]["what"]


def test_json_names_a_file_that_does_not_parse(tmp_path, capsys):
    path = write(tmp_path, "bad.py", "x = (\n")
    assert cli.main(["scan", "--json", str(path)]) == 2
    (row,) = json.loads(capsys.readouterr().out)
    assert row["rule"] == "syntax-error" and row["severity"] == "error"
    assert row["fix"] is None and "does not parse" in row["what"]


# ------------------------------------------------------------------------- the table

PROBED = [rule for rule in scan.RULES if rule.probe]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the probes need a torch without CUDA")
@pytest.mark.parametrize("rule", PROBED, ids=[r.id for r in PROBED])
def test_a_blocker_raises_without_cuda_and_the_others_run(rule):
    """Note [Blocker, change, note]: the severity is what the API does without CUDA."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available, disabling autocast"
        try:
            exec(rule.probe, {"torch": torch})
            raised = None
        except Exception as exc:  # any exception is what is measured
            raised = exc
    if rule.severity == "blocker":
        assert raised is not None, f"{rule.id}: {rule.probe} ran without CUDA"
    else:
        assert raised is None, f"{rule.id}: {rule.probe} raised {raised!r}"


def test_every_api_blocker_has_a_probe_and_every_probe_names_its_rule():
    for rule in scan.RULES:
        if rule.kind == "api" and rule.severity == "blocker":
            assert rule.probe, f"{rule.id}: a blocker without a probe"
        if rule.probe and rule.kind == "api":
            # the probe exercises the rule's own API: the scan finds it there
            assert (2, rule.id) in rules_of("import torch\n" + rule.probe), rule.id


def test_every_rule_is_documented():
    doc = (ROOT / "docs" / "migration.md").read_text()
    missing = [rule.id for rule in scan.RULES if f"`{rule.id}`" not in doc]
    assert not missing, f"docs/migration.md does not list {missing}"


def test_a_row_with_a_bad_kind_or_severity_is_refused_when_written():
    with pytest.raises(ValueError, match="severity 'fatal'"):
        scan.Rule("x", "api", ("torch.x",), "fatal", "", "", "")
    with pytest.raises(ValueError, match="kind 'regex'"):
        scan.Rule("x", "regex", ("x",), "note", "", "", "")

