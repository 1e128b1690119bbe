"""Multi-node through torch's own launcher: two ``torchrun`` "nodes" on loopback.

Each node is one ``torchrun --nnodes 2 --node-rank N --nproc-per-node 1`` process with a
static rendezvous on ``127.0.0.1``; its rank runs ``python -m harness.distributed`` with
the family's sub-checks, writes ``rank<N>.json``, and rank 0 gathers every rank's
results into ``summary.json`` (over the process group: on real hosts the other ranks'
files are elsewhere). The verdicts are the single-host ones. See docs/distributed.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from harness.distributed import ROOT, free_port
from suites.distributed.judge import judge_collective, judge_ddp

pytestmark = pytest.mark.distributed

CHECKS = ("suites.distributed.dist_checks:collective", "suites.distributed.dist_checks:ddp_train")
NODE_TIMEOUT = 90.0


def torchrun_command(node_rank: int, nnodes: int, port: int, out: Path,
                     nproc_per_node: int = 1) -> list[str]:
    """The command one node runs (``python -m torch.distributed.run`` is ``torchrun``)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
            "--node-rank", str(node_rank), "--nproc-per-node", str(nproc_per_node),
            "--master-addr", "127.0.0.1", "--master-port", str(port),
            "-m", "harness.distributed", *CHECKS, "--out", str(out), "--device", "cpu"]


def test_two_torchrun_nodes_on_loopback(device, results, tmp_path):
    if device.type != "cpu":
        pytest.skip("the loopback two-node run uses gloo on the CPU; on hardware run the "
                    "docs/distributed.md commands on two hosts")
    port, out = free_port(), tmp_path / "results"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    nodes = [subprocess.Popen(torchrun_command(n, 2, port, out), cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for n in range(2)]
    outputs = []
    try:
        for node in nodes:
            outputs.append(node.communicate(timeout=NODE_TIMEOUT)[0])
    except subprocess.TimeoutExpired:
        pytest.fail(f"torchrun nodes still running after {NODE_TIMEOUT:.0f} s; killed")
    finally:
        for node in nodes:  # the agents and their workers (the workers die with them)
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
    record_id = "distributed/multinode/none/torchrun_2x1/ws2"
    summary_path = out / "summary.json"
    codes = [node.returncode for node in nodes]
    if codes != [0, 0] or not summary_path.exists():
        results.record(record_id, status="error",
                       message=f"torchrun nodes exited {codes}; summary.json "
                               f"{'written' if summary_path.exists() else 'missing'}.\n"
                               + "\n".join(f"--- node {n} ---\n{text[-3000:]}"
                                           for n, text in enumerate(outputs)))
        return
    summary = json.loads(summary_path.read_text())
    values = {r["rank"]: r["results"] for r in summary["ranks"]}
    problems = [f"rank {rank} {name}: {res.get('type')}: {res.get('message')}"
                for rank, checks in values.items() for name, res in checks.items()
                if not res.get("ok")]
    if problems or sorted(values) != [0, 1]:
        results.record(record_id, status="fail", message="; ".join(problems)
                       or f"summary has ranks {sorted(values)}, expected [0, 1]")
        return
    ddp = judge_ddp({r: v["ddp_train"]["value"] for r, v in values.items()},
                    dtype="float32", variant="plain", steps=5, world_size=2)
    verdicts = {"ddp/float32/plain": ddp}
    collective = {r: v["collective"]["value"] for r, v in values.items()}
    for size in next(iter(collective.values())):
        verdicts[f"all_reduce_sum/float32/n={size}"] = judge_collective(
            collective, size, op="all_reduce_sum", dtype="float32")
    for name, verdict in verdicts.items():
        results.record(f"distributed/multinode/{name}/torchrun_2x1", status=verdict.status,
                       metrics=verdict.metrics, rules=verdict.rules,
                       message=f"two torchrun nodes: {verdict.message}")
