"""The migration scan: what ties a training script to CUDA, and what to write instead.

``python -m harness scan PATH...`` parses every ``.py`` file given (folders: every ``.py``
file under them) with :mod:`ast` and lists, with ``file:line:col``, each use of a CUDA-only
API: ``.cuda()``, ``torch.cuda.*`` (``torch.cuda.amp`` included), "cuda" device strings
(f-strings and ``"cuda:{}".format`` too), the ``nccl`` backend, ``torch.backends.cudnn``
flags, apex, CUDA streams and events, ``CUDA_VISIBLE_DEVICES``, ``pin_memory``,
``torch.compile``. Each finding names its rule in :data:`RULES`, whose row holds the
severity and the two equivalents: device-generic torch first, then torch_npu's.

The rules are data: one :class:`Rule` per pattern. Adding a pattern is adding a row; the
matcher (:class:`_Scanner`) knows only the five kinds of pattern (Note [What the scan
matches]). Severities are facts about a torch without CUDA (Note [Blocker, change, note]);
``tests/test_scan.py`` runs each row's ``probe`` on the installed CPU torch and requires
the blockers' probes to raise and the others' to run.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import re
import tokenize
from pathlib import Path
from typing import Iterable, Optional, Sequence

SEVERITIES = ("blocker", "change", "note")
"""Most severe first. A ``blocker`` makes the scan exit 1."""

KINDS = ("api", "module", "method", "string", "keyword")


# Note [What the scan matches]
# ----------------------------
# Five kinds of pattern, each a plain value in a Rule row:
#
# - api: a qualified name prefix ("torch.cuda.synchronize"). Every Name / Attribute chain
#   in the code is resolved through the file's imports (`import torch as t`, `from torch
#   import cuda`, `from torch.cuda.amp import autocast as ac`) to a dotted name; the rule
#   whose prefix is the longest match wins ("torch.cuda.amp.GradScaler" before
#   "torch.cuda.amp" before "torch.cuda"), and the chain's inner parts are not reported
#   again. Imports are resolved module-wide; a later rebinding of the name is not
#   followed. An import of a torch.cuda name is not a finding by itself (it imports fine
#   on an NPU); each use is.
# - module: a third-party module built for CUDA (apex). Its import is a finding (it is
#   the line that fails) and so is each use of a name bound from it.
# - method: ".cuda()" (a call) or ".is_cuda" (an attribute) on an object the imports do
#   not resolve: a tensor, a module, self. A call is required for ".cuda()", so an
#   `args.cuda` flag is not reported.
# - string: a regular expression a whole str constant must match ("cuda", "cuda:0",
#   "cuda:{}", "cuda:%d", "nccl", "CUDA_VISIBLE_DEVICES"; not a message like "cuda: no
#   device"); an f-string is matched by its leading text with a 0 for the first
#   placeholder (f"cuda:{rank}" as "cuda:0"). So `.to("cuda")`, `device="cuda"`, `torch.device("cuda:0")`,
#   `init_process_group("nccl")`, `backend="nccl"` and `os.environ["CUDA_VISIBLE_DEVICES"]`
#   are found wherever the string is written, including a default in argparse.
# - keyword: a keyword argument given a value other than False/None (`pin_memory=True`).
#
# The code is parsed, never grepped: comments and docstrings are not code, and a string is
# found only as a whole constant.

# Note [Blocker, change, note]
# ----------------------------
# blocker: fails outright on an NPU: raises ("Torch not compiled with CUDA enabled", "NCCL
#   not built in") or cannot be imported. The scan exits 1.
# change: runs, but does something else than on the GPU, silently: autocast and
#   GradScaler disable themselves (fp32 training, no loss scaling), is_available() is
#   False (the script picks the CPU), memory counters read 0, determinism flags do nothing.
# note: runs and does no harm, but has an NPU counterpart worth setting (TF32 flags,
#   cudnn.benchmark, pin_memory, torch.compile's backend).
# Each api row's `probe` is a statement that exercises the API on a torch built without
# CUDA; tests/test_scan.py requires it to raise for a blocker and to run otherwise, so the
# table's severities are measured, not asserted.


@dataclasses.dataclass(frozen=True)
class Rule:
    """One pattern that ties code to CUDA.

    Attributes:
        id: stable name, printed with each finding and used in ``# scan:`` markers.
        kind: one of :data:`KINDS` (Note [What the scan matches]).
        match: the patterns of that kind: name prefixes, module names, ``.cuda()`` /
            ``.is_cuda``, regular expressions, keyword names.
        severity: one of :data:`SEVERITIES` (Note [Blocker, change, note]).
        what: what the code does on an NPU, in a few words.
        generic: the device-generic torch equivalent (runs on CUDA, NPU, XPU, MPS, CPU).
        npu: the torch_npu equivalent (``import torch_npu``), for older stacks.
        probe: a statement run on a torch without CUDA (it reads flags, never sets
            them): raises iff the rule is a blocker.
    """

    id: str
    kind: str
    match: tuple[str, ...]
    severity: str
    what: str
    generic: str
    npu: str
    probe: Optional[str] = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"scan rule {self.id!r}: kind {self.kind!r} is not one of {KINDS}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"scan rule {self.id!r}: severity {self.severity!r} is not one "
                             f"of {SEVERITIES}")


DEVICE = "device = torch.accelerator.current_accelerator()"

RULES: tuple[Rule, ...] = (
    # --- moving things to the device
    Rule("dot-cuda", "method", (".cuda()",), "blocker",
         "moves to the CUDA device: raises without CUDA",
         f"`.to(device)`, with `{DEVICE}` (torch >= 2.6) or a --device option",
         "`.to('npu')` or `.npu()`", probe="torch.ones(1).cuda()"),
    Rule("is-cuda", "method", (".is_cuda",), "change",
         "False on an NPU: a branch on it silently takes the other path",
         "`t.device.type == device.type`", "`t.is_npu`", probe="torch.ones(1).is_cuda"),
    Rule("cuda-device-string", "string", (r"cuda(:(\d+|\{\w*\}|%d|%s))?",), "blocker",
         "a CUDA device string: a tensor or module sent there raises without CUDA, a "
         "comparison with it is never true",
         f"one `device` variable: `{DEVICE}`, `torch.device(device_type, local_rank)`",
         "'npu', f'npu:{local_rank}'", probe="torch.ones(1).to('cuda')"),
    # --- mixed precision
    Rule("cuda-amp-autocast", "api", ("torch.cuda.amp.autocast", "torch.cuda.autocast"),
         "change",
         "warns 'CUDA is not available' and disables itself: training silently runs in fp32",
         "`torch.amp.autocast(device.type, dtype=torch.float16)`",
         "`torch.npu.amp.autocast()`", probe="with torch.cuda.amp.autocast(): pass"),
    Rule("cuda-amp-grad-scaler", "api", ("torch.cuda.amp.GradScaler",), "change",
         "disables itself without CUDA (warns): no loss scaling, fp16 gradients underflow",
         "`torch.amp.GradScaler(device.type)`", "`torch.npu.amp.GradScaler()`",
         probe="torch.cuda.amp.GradScaler().scale(torch.ones(1))"),
    Rule("cuda-amp-custom-fwd", "api", ("torch.cuda.amp.custom_fwd",
                                        "torch.cuda.amp.custom_bwd"), "change",
         "casts for CUDA's autocast only: under the NPU's autocast the function gets other "
         "dtypes", "`torch.amp.custom_fwd(device_type=device.type)` / `custom_bwd` "
         "(torch >= 2.4)", "the device-generic one with device_type='npu'",
         probe="torch.cuda.amp.custom_fwd(lambda x: x)"),
    Rule("cuda-amp", "api", ("torch.cuda.amp",), "change",
         "CUDA's AMP module: does nothing without CUDA",
         "`torch.amp` with the device type", "`torch.npu.amp`"),
    # --- the device itself
    Rule("cuda-synchronize", "api", ("torch.cuda.synchronize",), "blocker",
         "raises without CUDA", "`torch.accelerator.synchronize()`",
         "`torch.npu.synchronize()`", probe="torch.cuda.synchronize()"),
    Rule("cuda-device", "api", ("torch.cuda.set_device", "torch.cuda.current_device",
                                "torch.cuda.get_device_name",
                                "torch.cuda.get_device_properties",
                                "torch.cuda.get_device_capability", "torch.cuda.device"),
         "blocker", "raises without CUDA",
         "`torch.accelerator.set_device_index(i)` / `current_device_index()` / "
         "`get_device_capability()`",
         "`torch.npu.set_device(i)` / `current_device()` / `get_device_name(i)`",
         probe="torch.cuda.set_device(0)"),
    Rule("cuda-is-available", "api", ("torch.cuda.is_available",), "change",
         "False on an NPU: `'cuda' if torch.cuda.is_available() else 'cpu'` trains on the "
         "CPU, silently", "`torch.accelerator.is_available()` / `current_accelerator()`",
         "`torch.npu.is_available()`", probe="torch.cuda.is_available()"),
    Rule("cuda-device-count", "api", ("torch.cuda.device_count",), "change",
         "0 on an NPU: a world size or per-device batch computed from it is wrong",
         "`torch.accelerator.device_count()`", "`torch.npu.device_count()`",
         probe="torch.cuda.device_count()"),
    Rule("cuda-seed", "api", ("torch.cuda.manual_seed", "torch.cuda.manual_seed_all",
                              "torch.cuda.seed", "torch.cuda.seed_all"), "note",
         "a no-op without CUDA", "`torch.manual_seed(s)` (seeds every device type)",
         "`torch.npu.manual_seed_all(s)`", probe="torch.cuda.manual_seed_all(0)"),
    # --- memory
    Rule("cuda-memory-stats", "api", ("torch.cuda.memory_allocated",
                                      "torch.cuda.max_memory_allocated",
                                      "torch.cuda.memory_reserved",
                                      "torch.cuda.max_memory_reserved",
                                      "torch.cuda.memory_stats", "torch.cuda.empty_cache"),
         "change", "reads 0 / does nothing without CUDA: memory numbers are silently wrong",
         "`torch.accelerator.memory_allocated()` / `max_memory_allocated()` / "
         "`empty_cache()` where it exists, else `torch.get_device_module(device)`",
         "`torch.npu.memory_allocated()` / `max_memory_allocated()` / `empty_cache()`",
         probe="torch.cuda.max_memory_allocated()"),
    Rule("cuda-memory-control", "api", ("torch.cuda.reset_peak_memory_stats",
                                        "torch.cuda.reset_max_memory_allocated",
                                        "torch.cuda.mem_get_info",
                                        "torch.cuda.memory_summary",
                                        "torch.cuda.set_per_process_memory_fraction"),
         "blocker", "raises without CUDA",
         "`torch.accelerator.reset_peak_memory_stats()` / `get_memory_info()` where it "
         "exists, else `torch.get_device_module(device)`",
         "`torch.npu.reset_peak_memory_stats()` / `mem_get_info()` / "
         "`set_per_process_memory_fraction()`", probe="torch.cuda.reset_peak_memory_stats()"),
    # --- streams, events, graphs, profiling
    Rule("cuda-stream", "api", ("torch.cuda.Stream", "torch.cuda.stream",
                                "torch.cuda.current_stream", "torch.cuda.default_stream",
                                "torch.cuda.set_stream"), "blocker",
         "raises without CUDA",
         "`torch.Stream(device)`, `torch.accelerator.current_stream()` / `set_stream()`",
         "`torch.npu.Stream()`, `torch.npu.stream(s)`, `torch.npu.current_stream()`",
         probe="torch.cuda.Stream()"),
    Rule("cuda-event", "api", ("torch.cuda.Event",), "blocker", "raises without CUDA",
         "`torch.Event(device, enable_timing=True)`", "`torch.npu.Event(enable_timing=True)`",
         probe="torch.cuda.Event(enable_timing=True)"),
    Rule("cuda-graph", "api", ("torch.cuda.CUDAGraph", "torch.cuda.graph",
                               "torch.cuda.make_graphed_callables"), "blocker",
         "raises without CUDA", "`torch.compile(mode='reduce-overhead')` where the device "
         "supports it", "`torch.npu.NPUGraph` / `torch.npu.graph` (recent torch_npu)",
         probe="torch.cuda.CUDAGraph()"),
    Rule("cuda-nvtx", "api", ("torch.cuda.nvtx",), "blocker",
         "raises without CUDA ('NVTX functions not installed')",
         "`torch.profiler.record_function(name)`", "`torch_npu.profiler` (mstx marks)",
         probe="torch.cuda.nvtx.range_push('step')"),
    Rule("cuda-oom", "api", ("torch.cuda.OutOfMemoryError",), "change",
         "an NPU's out-of-memory may be another exception: older torch_npu raise "
         "RuntimeError('NPU out of memory'), which this does not catch",
         "`torch.OutOfMemoryError` (torch >= 2.5)",
         "also catch RuntimeError whose message says 'out of memory'",
         probe="torch.cuda.OutOfMemoryError"),
    Rule("cuda-tensor-type", "string", (r"torch\.cuda\.\w+Tensor",), "blocker",
         "a CUDA tensor type by name (set_default_tensor_type, .type()): raises without "
         "CUDA", "`torch.set_default_device(device)` and `torch.set_default_dtype(dtype)`",
         "'torch.npu.FloatTensor' (torch_npu)"),
    Rule("torch-cuda", "api", ("torch.cuda",), "blocker",
         "most of torch.cuda raises 'Torch not compiled with CUDA enabled' without CUDA",
         "`torch.accelerator.*`, else `torch.get_device_module(device).<same name>`",
         "`torch.npu.<same name>` (torch_npu mirrors most of torch.cuda)",
         probe="torch.cuda.ipc_collect()"),
    # --- backend flags
    Rule("cudnn-benchmark", "api", ("torch.backends.cudnn.benchmark",), "note",
         "no effect on an NPU (there is no cuDNN)", "none: the flag is cuDNN's own",
         "nothing to set; `torch.npu.set_compile_mode(jit_compile=False)` picks the "
         "prebuilt kernels", probe="torch.backends.cudnn.benchmark"),
    Rule("cudnn-deterministic", "api", ("torch.backends.cudnn.deterministic",), "change",
         "no effect on an NPU: the run is no longer deterministic",
         "`torch.use_deterministic_algorithms(True)`",
         "the same, plus `HCCL_DETERMINISTIC=true` for collectives",
         probe="torch.backends.cudnn.deterministic"),
    Rule("cudnn-allow-tf32", "api", ("torch.backends.cudnn.allow_tf32",), "note",
         "no effect on an NPU", "none: the flag is cuDNN's own",
         "`torch.npu.conv.allow_hf32` (HF32, Ascend's TF32 counterpart)",
         probe="torch.backends.cudnn.allow_tf32"),
    Rule("cudnn", "api", ("torch.backends.cudnn",), "note", "cuDNN's settings: no effect "
         "on an NPU", "none", "none needed", probe="torch.backends.cudnn.enabled"),
    Rule("cuda-matmul-allow-tf32", "api", ("torch.backends.cuda.matmul.allow_tf32",), "note",
         "no effect on an NPU", "`torch.set_float32_matmul_precision('high')`",
         "`torch.npu.matmul.allow_hf32`",
         probe="torch.backends.cuda.matmul.allow_tf32"),
    Rule("backends-cuda", "api", ("torch.backends.cuda",), "note",
         "CUDA's kernel selection (SDPA, cuBLAS): no effect on an NPU",
         "`torch.nn.attention.sdpa_kernel(...)` for SDPA backends",
         "`torch_npu.npu_fusion_attention` for fused attention",
         probe="torch.backends.cuda.flash_sdp_enabled()"),
    # --- distributed
    Rule("nccl", "string", (r"nccl",), "blocker",
         "NCCL is CUDA's collective library: init_process_group fails on an NPU",
         "omit `backend` (torch picks each device type's registered backend) or "
         "`dist.get_default_backend_for_device(device)`", "'hccl'"),
    Rule("nccl-env", "string", (r"NCCL_\w+",), "note", "NCCL's setting: no effect on an NPU",
         "none", "the HCCL_* variable of the same purpose (HCCL_CONNECT_TIMEOUT, "
         "HCCL_BUFFSIZE, ...)"),
    Rule("cuda-visible-devices", "string", (r"CUDA_VISIBLE_DEVICES",), "change",
         "ignored on an NPU: every NPU stays visible", "none: set it outside the script",
         "ASCEND_RT_VISIBLE_DEVICES"),
    Rule("cuda-launch-blocking", "string", (r"CUDA_LAUNCH_BLOCKING",), "note",
         "ignored on an NPU", "none", "ASCEND_LAUNCH_BLOCKING=1"),
    # --- CUDA-built libraries
    Rule("apex", "module", ("apex",), "blocker",
         "NVIDIA apex is built against CUDA: its import fails on an NPU",
         "`torch.amp` (autocast + GradScaler) for apex.amp, "
         "`torch.nn.parallel.DistributedDataParallel` for apex.parallel, torch.optim for "
         "the fused optimizers", "Ascend's apex fork (github.com/Ascend/apex) keeps apex.amp"),
    Rule("pynvml", "module", ("pynvml",), "blocker", "NVML is NVIDIA's: no NPU behind it",
         "`torch.accelerator.get_memory_info()` where it exists",
         "`torch.npu.mem_get_info()`, npu-smi"),
    Rule("flash-attn", "module", ("flash_attn",), "blocker",
         "flash-attn is built against CUDA: its import fails on an NPU",
         "`torch.nn.functional.scaled_dot_product_attention`",
         "`torch_npu.npu_fusion_attention`"),
    # --- notes
    Rule("torch-compile", "api", ("torch.compile",), "note",
         "inductor's default code generation targets CUDA (Triton)",
         "`torch.compile` where the device registers its backend",
         "`torch.compile(model, backend=torchair.get_npu_backend())` (torchair ships with "
         "torch_npu)"),
    Rule("pin-memory", "keyword", ("pin_memory",), "note",
         "pins host memory for the current accelerator; older torch pinned only when CUDA "
         "was available", "nothing on a recent torch",
         "pin_memory_device='npu' on older torch"),
)
"""One row per pattern (Note [What the scan matches])."""

BY_ID = {rule.id: rule for rule in RULES}
if len(BY_ID) != len(RULES):  # a duplicated id would hide a row
    raise ValueError("scan: two rules share an id in harness.scan.RULES")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One place that ties the code to CUDA. ``line`` and ``col`` count from 1."""

    file: str
    line: int
    col: int
    code: str
    rule: str
    severity: str
    message: str = ""
    """Set only for a file that does not parse: the parser's message."""

    def as_dict(self) -> dict:
        """The ``--json`` form: the finding, what it does on an NPU and its fix."""
        rule = BY_ID.get(self.rule)
        out = {"file": self.file, "line": self.line, "col": self.col, "code": self.code,
               "rule": self.rule, "severity": self.severity}
        if rule:
            out.update(what=rule.what, fix={"generic": rule.generic, "npu": rule.npu})
        else:
            out.update(what=self.message, fix=None)
        return out


SYNTAX_ERROR = "syntax-error"
"""The rule id of a file that does not parse (severity ``error``: the scan exits 2)."""


class UsageError(Exception):
    """A path that cannot be scanned: named, with what to give instead."""


# ------------------------------------------------------------------------------ matching

_API = sorted(((prefix, rule) for rule in RULES if rule.kind in ("api", "module")
               for prefix in rule.match), key=lambda pr: -len(pr[0]))
_MODULES = {prefix: rule for rule in RULES if rule.kind == "module" for prefix in rule.match}
_METHOD_CALLS = {m[1:-2]: rule for rule in RULES if rule.kind == "method"
                 for m in rule.match if m.endswith("()")}
_METHOD_ATTRS = {m[1:]: rule for rule in RULES if rule.kind == "method"
                 for m in rule.match if not m.endswith("()")}
_STRINGS = [(re.compile(p), rule) for rule in RULES if rule.kind == "string"
            for p in rule.match]
_KEYWORDS = {k: rule for rule in RULES if rule.kind == "keyword" for k in rule.match}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def api_rule(name: str) -> Optional[Rule]:
    """The rule of a qualified name: the longest matching prefix, or None."""
    for prefix, rule in _API:
        if _under(name, prefix):
            return rule
    return None


def string_rule(text: str) -> Optional[Rule]:
    """The rule a whole string constant matches, or None."""
    for pattern, rule in _STRINGS:
        if pattern.fullmatch(text):
            return rule
    return None


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local name -> qualified name, from every import in the file."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:  # `import torch.cuda` binds `torch`
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


class _Scanner(ast.NodeVisitor):
    """Walks one file's tree and collects (line, byte offset, rule) hits."""

    def __init__(self, aliases: dict[str, str]):
        self.aliases = aliases
        self.hits: list[tuple[int, int, Rule]] = []  # line, UTF-8 byte offset, rule

    def hit(self, node: ast.AST, rule: Rule) -> None:
        self.hits.append((node.lineno, node.col_offset, rule))

    def hit_method(self, node: ast.Attribute, rule: Rule) -> None:
        """At the dot of ``x.cuda()`` / ``x.is_cuda``: the receiver may span lines."""
        self.hits.append((node.value.end_lineno or node.lineno,
                          node.value.end_col_offset or node.col_offset, rule))

    def qualified(self, node: ast.AST) -> Optional[str]:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualified(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def _name(self, node: ast.AST) -> bool:
        name = self.qualified(node)
        rule = api_rule(name) if name else None
        if rule:
            self.hit(node, rule)
        return rule is not None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module and not node.level:
            if not self._module(node, node.module) and any(a.name == "*" for a in node.names):
                rule = api_rule(node.module)  # `from torch.cuda.amp import *`
                if rule:
                    self.hit(node, rule)

    def _module(self, node: ast.AST, module: str) -> bool:
        for prefix, rule in _MODULES.items():
            if _under(module, prefix):
                self.hit(node, rule)
                return True
        return False

    def visit_Name(self, node: ast.Name) -> None:
        self._name(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if self._name(node):
            return  # the outermost chain that matches; its inner parts are the same use
        rule = _METHOD_ATTRS.get(node.attr)
        if rule and self.qualified(node.value) is None:
            self.hit_method(node, rule)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _METHOD_CALLS \
                and self.qualified(func.value) is None:
            self.hit_method(func, _METHOD_CALLS[func.attr])
            self.visit(func.value)
            for child in [*node.args, *node.keywords]:
                self.visit(child)
            return
        for kw in node.keywords:
            rule = _KEYWORDS.get(kw.arg or "")
            if rule and not (isinstance(kw.value, ast.Constant)
                             and kw.value.value in (False, None)):
                self.hit(kw, rule)
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # a docstring or a bare string statement: text, not code
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            rule = string_rule(node.value)
            if rule:
                self.hit(node, rule)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        head = ""  # the leading text, up to the first placeholder: f"cuda:{rank}"
        for part in node.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                break
            head += part.value
        # the first placeholder stands for a number or a name: "cuda:" + rank, "NCCL_" + k
        rule = head and (string_rule(head) or string_rule(head + "0"))
        if rule:
            self.hit(node, rule)
        for part in node.values:  # the text parts are not whole strings of their own
            if not isinstance(part, ast.Constant):
                self.visit(part)


# ------------------------------------------------------------------------------ scanning

def _read(path: Path) -> tuple[bytes, list[str]]:
    data = path.read_bytes()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    return data, data.decode(encoding, errors="replace").splitlines()


def scan_source(data: bytes, lines: Sequence[str], file: str) -> list[Finding]:
    """The findings of one file's source; a SyntaxError propagates."""
    tree = ast.parse(data, filename=file)
    scanner = _Scanner(_aliases(tree))
    scanner.visit(tree)
    seen: set[tuple[int, int, str]] = set()
    found = []
    for line, offset, rule in scanner.hits:
        text = lines[line - 1] if 0 < line <= len(lines) else ""
        # ast's col_offset counts UTF-8 bytes; people count characters, from 1
        raw = text.encode("utf-8")[:offset]
        col = len(raw.decode("utf-8", errors="replace")) + 1
        key = (line, col, rule.id)
        if key not in seen:
            seen.add(key)
            found.append(Finding(file, line, col, text.strip(), rule.id, rule.severity))
    return sorted(found, key=lambda f: (f.line, f.col, f.rule))


def scan_file(path: Path, shown: Optional[str] = None) -> list[Finding]:
    """A file's findings; one that does not parse (or decode) gives one ``syntax-error``
    finding with the line the parser names."""
    shown = shown or str(path)
    try:
        data, lines = _read(path)
        return scan_source(data, lines, shown)
    except SyntaxError as exc:
        line = exc.lineno or 1
        code = (exc.text or "").strip()
        return [Finding(shown, line, exc.offset or 1, code, SYNTAX_ERROR, "error",
                        f"does not parse: {exc.msg}")]
    except (UnicodeDecodeError, LookupError) as exc:
        return [Finding(shown, 1, 1, "", SYNTAX_ERROR, "error", f"cannot decode: {exc}")]


def files(paths: Iterable[str]) -> list[Path]:
    """The ``.py`` files to scan: each file as given, each folder's ``.py`` files (folders
    whose name starts with a dot and ``__pycache__`` skipped), sorted, each once."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*.py") if p.is_file() and not any(
                part.startswith(".") or part == "__pycache__"
                for part in p.relative_to(path).parts[:-1]))
            if not found:
                raise UsageError(f"scan: no .py file under the folder {raw!r}; give the "
                                 f"training script or the folder that holds it")
            out.extend(found)
        else:
            raise UsageError(f"scan: no such file or folder: {raw!r}; give .py files or "
                             f"folders holding them")
    unique: dict[Path, None] = {}
    for path in out:
        unique.setdefault(path.resolve(), None)
    return [p for p in unique]


def scan(paths: Iterable[str]) -> list[Finding]:
    """Every finding under ``paths`` (:func:`files`), in file, line, column order; raises
    :class:`UsageError` for a path that is neither a file nor a folder of ``.py`` files."""
    return scan_files(files(paths))


def scan_files(paths: Iterable[Path]) -> list[Finding]:
    """Every finding of these files, each shown relative to the working folder if under it."""
    cwd = Path.cwd()
    found: list[Finding] = []
    for path in paths:
        try:
            shown = str(path.relative_to(cwd))
        except ValueError:
            shown = str(path)
        found.extend(scan_file(path, shown))
    return found


def exit_code(findings: Sequence[Finding]) -> int:
    """2 when a file did not parse, 1 when a blocker was found, else 0."""
    if any(f.rule == SYNTAX_ERROR for f in findings):
        return 2
    return 1 if any(f.severity == "blocker" for f in findings) else 0


def counts(findings: Sequence[Finding]) -> dict[str, int]:
    return {s: sum(f.severity == s for f in findings) for s in SEVERITIES}


def _counted(n: dict[str, int]) -> str:
    return ", ".join(f"{n[s]} {s}" for s in SEVERITIES)


def text(findings: Sequence[Finding], scanned: int) -> str:
    """The human report: per file, one line per finding (``file:line:col``, severity, rule,
    the source line), then each rule met once with what it does on an NPU and its two
    equivalents; last, one summary line."""
    out: list[str] = []
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.file, []).append(f)
    for file, items in by_file.items():
        if items[0].rule == SYNTAX_ERROR:
            out.append(f"{file}: does not parse")
        else:
            out.append(f"{file}: {len(items)} finding(s) ({_counted(counts(items))})")
        width = max(len(f"{f.file}:{f.line}:{f.col}:") for f in items)
        for f in items:
            where = f"{f.file}:{f.line}:{f.col}:"
            out.append(f"  {where:<{width}} {f.severity:<7} {f.rule:<22} {f.code}")
            if f.rule == SYNTAX_ERROR:
                out.append(f"      {f.message}: the scan cannot read this file; fix it and "
                           f"scan again")
        met = sorted({f.rule for f in items} - {SYNTAX_ERROR},
                     key=lambda r: (SEVERITIES.index(BY_ID[r].severity), r))
        if met:
            out.append("  fixes (device-generic torch | torch_npu):")
        for rid in met:
            rule = BY_ID[rid]
            out.append(f"    {rid}: {rule.what}")
            out.append(f"      -> {rule.generic} | torch_npu: {rule.npu}")
        out.append("")
    n = counts(findings)
    broken = sum(f.rule == SYNTAX_ERROR for f in findings)
    head = ("NOT SCANNED" if broken else "BLOCKERS" if n["blocker"] else
            "CHANGES" if n["change"] else "NOTES" if n["note"] else "CLEAN")
    parts = _counted(n) + (f", {broken} file(s) that do not parse" if broken else "")
    tied = len({f.file for f in findings if f.rule != SYNTAX_ERROR})
    out.append(f"{head}: {parts} in {tied} of {scanned} file(s) scanned "
               f"(exit {exit_code(findings)})")
    return "\n".join(out)
