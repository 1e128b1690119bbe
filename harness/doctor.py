"""``python -m harness doctor``: the environment check a user runs first.

Each check yields a :class:`Check` (ok / warn / fail) with what was seen and, for a
problem, how to fix it (docs/design.md, "Tool chain"). ``import torch`` is tried in a child
process first: an installed but broken ``torch_npu`` makes ``import torch`` itself fail
through backend autoloading, and the doctor must explain that rather than crash.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

OK, WARN, FAIL, NA = "ok", "warn", "FAIL", "--"


@dataclasses.dataclass
class Check:
    status: str
    topic: str
    detail: str
    fix: str = ""

    def text(self) -> str:
        fix = f"\n         fix: {self.fix}" if self.fix else ""
        return f"[{self.status:>4}] {self.topic}: {self.detail}{fix}"


def probe_import_torch() -> tuple[bool, str]:
    """Try ``import torch`` in a child process (a seam: tests replace it)."""
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    return False, (proc.stderr.strip().splitlines() or ["(no output)"])[-1]


def check_import_torch(probe: Callable[[], tuple[bool, str]] = probe_import_torch) -> Check:
    ok, text = probe()
    if ok:
        return Check(OK, "torch", f"import torch works (torch {text})")
    autoload = os.environ.get("TORCH_DEVICE_BACKEND_AUTOLOAD", "1") != "0"
    if autoload and ("torch_npu" in text or "libhccl" in text or "libascend" in text
                     or "cannot open shared object file" in text):
        return Check(FAIL, "torch", f"import torch fails: {text}. torch >= 2.5 autoloads "
                       "installed device backends, so a torch_npu that cannot load (CANN not "
                       "sourced, or built for another torch) breaks `import torch` itself",
                       "source CANN's set_env.sh (`source /usr/local/Ascend/cann/set_env.sh` "
                       "for CANN >= 8.5, `source /usr/local/Ascend/ascend-toolkit/set_env.sh` "
                       "before), or install the torch_npu matching this torch; to use the "
                       "CPU meanwhile, export TORCH_DEVICE_BACKEND_AUTOLOAD=0")
    return Check(FAIL, "torch", f"import torch fails: {text}",
                   "reinstall torch for this Python (pip install torch==<your version>)")


def check_cann_env(env: Optional[dict] = None) -> Check:
    """Whether CANN's set_env.sh was sourced (what torch_npu needs on the library path)."""
    env = os.environ if env is None else env
    home = env.get("ASCEND_TOOLKIT_HOME") or env.get("ASCEND_HOME_PATH")
    libpath = env.get("LD_LIBRARY_PATH", "")
    if home and "Ascend" in libpath or home and home in libpath:
        return Check(OK, "CANN environment", f"sourced (ASCEND_TOOLKIT_HOME={home})")
    if home:
        return Check(WARN, "CANN environment", f"ASCEND_TOOLKIT_HOME={home} but its lib64 is "
                       "not on LD_LIBRARY_PATH", f"source {home}/set_env.sh")
    from harness import stack

    script = stack.set_env_script(env)
    if script or os.path.isdir("/usr/local/Ascend"):
        return Check(WARN, "CANN environment", "/usr/local/Ascend exists but CANN's "
                       "environment is not sourced",
                       f"source {script}" if script else "source CANN's set_env.sh: "
                       "/usr/local/Ascend/cann/set_env.sh (CANN >= 8.5) or "
                       "/usr/local/Ascend/ascend-toolkit/set_env.sh (older)")
    return Check(OK, "CANN environment", "not present (only needed for Ascend NPUs)")


def check_rank_table(path: Optional[str] = None, env: Optional[dict] = None) -> list[Check]:
    """The rank table HCCL would read (``--rank-table`` or ``RANK_TABLE_FILE``): one line
    per problem, naming the field and the fix (Note [Rank table] in
    :mod:`harness.distributed.hccl`); nothing when there is none."""
    from harness.distributed import hccl

    env = os.environ if env is None else env
    path = path or env.get(hccl.RANK_TABLE_ENV)
    if not path:
        return []
    table, problems = hccl.load_rank_table(path)
    if table is not None:
        problems = hccl.rank_table_problems(table)
    if not problems:
        return [Check(OK, "rank table", f"{path}: {table.get('server_count')} server(s), "
                      f"{hccl.world_size(table)} ranks")]
    return [Check(FAIL, "rank table", f"{path}: {p.text()}", p.fix) for p in problems]


def check_hccl_timeouts(dist_timeout: float, device: str = "auto",
                        env: Optional[dict] = None, rank_table: Optional[str] = None
                        ) -> list[Check]:
    """``HCCL_CONNECT_TIMEOUT`` / ``HCCL_EXEC_TIMEOUT`` beside ``--dist-timeout`` (Note
    [HCCL timeouts] in :mod:`harness.distributed.hccl`): for an hccl device, or when any
    of them (or a rank table) is set."""
    from harness.distributed import hccl
    from harness.kinds import KINDS

    env = os.environ if env is None else env
    kind = KINDS.get(device)
    wanted = (kind is not None and kind.dist_backend == "hccl" or rank_table
              or any(name in env for name in (*hccl.TIMEOUTS, hccl.RANK_TABLE_ENV)))
    if not wanted:
        return []
    status = {"ok": OK, "warn": WARN, "fail": FAIL}
    return [Check(status[s], "hccl timeout", detail, fix)
            for s, detail, fix in hccl.timeout_findings(dist_timeout, env,
                                                        rank_table=bool(rank_table))]


def run_checks(device: str = "auto", baseline_dir=None, *,
               import_probe: Callable[[], tuple[bool, str]] = probe_import_torch,
               rank_table: Optional[str] = None, dist_timeout: float = 120.0) -> tuple[
                   list[Check], bool]:
    """All checks; returns the findings and whether the requested device is usable."""
    if baseline_dir is None:
        baseline_dir = Path(__file__).resolve().parent.parent / "baselines"
    findings = [Check(OK, "python", sys.version.split()[0])]
    torch_finding = check_import_torch(import_probe)
    findings.append(torch_finding)
    findings.append(check_cann_env())
    findings += check_rank_table(rank_table)
    findings += check_hccl_timeouts(dist_timeout, device, rank_table=rank_table)
    findings += check_fallback_channel(device)
    if torch_finding.status == FAIL:
        return findings, False

    from harness import device as device_mod
    from harness import stack

    probes = {t: device_mod.probe(t) for t in device_mod.DEVICE_TYPES}
    for device_type, result in probes.items():
        if result.available:
            findings.append(Check(OK, f"device {device_type}", result.reason))
            dev = device_mod.Device(device_type, 0, result.count)
            try:
                total = dev.total_memory()
                memory = f", {total / 2**30:.1f} GiB" if total else ""
                findings.append(Check(OK, f"  {device_type}:0", f"{dev.name}{memory}"))
            except Exception as exc:  # noqa: BLE001 - report, don't crash the doctor
                findings.append(Check(WARN, f"  {device_type}:0", f"name/memory unreadable: "
                                        f"{exc}"))
        else:
            # a device whose own software is installed (torch_npu) but unusable: a warning
            severity = FAIL if device_type == device else (WARN if result.installed else NA)
            findings.append(Check(severity, f"device {device_type}",
                                    f"not usable: {result.reason}"))
    if any(probes[t].available for t, kind in device_mod.KINDS.items()
           if kind.stack_prefix == "cann"):  # a device on CANN's stack: its components
        cann = stack.cann_versions(stack._torch_npu_get_cann_version())
        if cann.get("cann"):
            parts = ", ".join(f"{k} {v}" for k, v in cann.items() if k not in ("cann", "source"))
            findings.append(Check(OK, "CANN", f"{cann['cann']} ({parts}; from {cann['source']})"))
        else:
            findings.append(Check(WARN, "CANN", "version unknown (get_cann_version and the "
                                    "toolkit's version files gave nothing)",
                                    "source set_env.sh so ASCEND_TOOLKIT_HOME is set"))
    wanted = device if device != "auto" else next(t for t, p in probes.items() if p.available)
    usable = probes[wanted].available
    if usable:
        chosen = device_mod.Device(wanted, 0, probes[wanted].count)
        fp = stack.fingerprint(chosen)
        findings.append(Check(OK, "stack", f"{fp['stack_id']} on {fp['device_type']}/"
                              f"{fp['device_slug']}"))
        findings.append(_baseline_finding(fp, Path(baseline_dir)))
    return findings, usable


def _baseline_finding(fp: dict, baseline_dir) -> Check:
    """The baseline a compare run would use; never OK for a file that does not exist."""
    from harness import baselines

    selection = baselines.select(baseline_dir, fp)
    target = baselines.path_for(baseline_dir, fp)
    if selection.error:
        where = f"{selection.path}: " if selection.path is not None else ""
        return Check(FAIL, "baseline", f"{where}unusable: {selection.error}",
                       "restore it from version control or re-record it with --baseline record")
    if selection.results is None:
        stored = baselines.stored_anywhere(baseline_dir)
        return Check(WARN, "baseline", f"NOT COMPARED: no baseline for {fp['stack_id']} or an "
                       f"older stack at {target.parent} (stored: {', '.join(stored[:6]) or 'none'})",
                       "record one on this machine: python -m pytest -m npu --baseline record")
    return Check(OK, "baseline", f"{selection.path} ({len(selection.results.records)} records; "
                   f"{selection.reason})")


def check_fallback_channel(device: str = "auto", env: Optional[dict] = None) -> list[Check]:
    """Whether torch_npu would print its CPU-fallback warning here (Note [Fallback warnings
    reach stderr only] in harness/simnpu/simnpu.cpp): not under TORCH_NPU_WARNING_DISABLE=1
    (or the deprecated TORCH_NPU_DISABLED_WARNING=1), nor where RANK is not 0; the
    suite sees a fallback only through that warning. For a CANN device, or when set."""
    from harness.kinds import KINDS

    env = os.environ if env is None else env
    kind = KINDS.get(device)
    names = ("TORCH_NPU_WARNING_DISABLE", "TORCH_NPU_DISABLED_WARNING")
    if not (kind is not None and kind.stack_prefix == "cann" or any(n in env for n in names)):
        return []
    disabled = next((n for n in names if env.get(n, "").strip() == "1"), None)
    if disabled:
        return [Check(FAIL, "fallback warnings", f"{disabled}=1: torch_npu prints no "
                      "warning, so no CPU fallback is seen and every op that runs on the host "
                      "passes as if it ran on the NPU", f"unset {disabled}")]
    rank = env.get("RANK", "").strip()
    if rank and rank != "0":
        return [Check(WARN, "fallback warnings", f"RANK={rank}: torch_npu prints its "
                      "warnings only where RANK is unset or 0, so this process sees no CPU "
                      "fallback (the distributed family's ranks are handled: Note [Fallbacks "
                      "on every rank])", "unset RANK for a single-device run")]
    return [Check(OK, "fallback warnings", "torch_npu's CPU-fallback warning reaches stderr "
                  "(TORCH_NPU_WARNING_DISABLE unset, RANK unset or 0)")]


def main(device: str = "auto", as_json: bool = False, baseline_dir=None,
         rank_table: Optional[str] = None, dist_timeout: float = 120.0,
         deep: bool = False, fault: Optional[str] = None) -> int:
    findings, usable = run_checks(device, baseline_dir, rank_table=rank_table,
                                  dist_timeout=dist_timeout)
    if deep and usable:
        from harness import deep as deep_mod
        from harness import device as device_mod

        wanted = device if device != "auto" else device_mod.select("auto")[0].type
        count = device_mod.probe(wanted).count
        status = {"ok": OK, "warn": WARN, "fail": FAIL, "--": NA}
        findings += [Check(status[s], f"deep: {topic}", detail, fix) for s, topic, detail, fix
                     in deep_mod.deep_checks(wanted, count, fault=fault,
                                             dist_timeout=dist_timeout)]
    failed = [f for f in findings if f.status == FAIL]
    if as_json:
        print(json.dumps({"device": device, "usable": usable,
                          "findings": [dataclasses.asdict(f) for f in findings]}, indent=1))
    else:
        for finding in findings:
            print(finding.text())
        verdict = "usable" if usable else "NOT usable"
        print(f"requested device {device}: {verdict}")
        if usable and failed:
            print(f"{len(failed)} check(s) FAIL (fix them as the lines above say)")
    return 0 if usable and not failed else 1
