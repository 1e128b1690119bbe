"""Multi-node through torch's own launcher: two ``torchrun`` "nodes" on loopback.

Each node is one ``torchrun --nnodes 2 --node-rank N --nproc-per-node 1`` process with a
static rendezvous on ``127.0.0.1``; its rank runs ``python -m harness.distributed`` with
the family's sub-checks, writes ``rank<N>.json``, and rank 0 gathers every rank's
results into ``summary.json`` (over the process group: on real hosts the other ranks'
files are elsewhere). The verdicts are the single-host ones. See docs/distributed.md.
The planner runs it (a :class:`~harness.distributed.DistJob`) like a launch: ahead of the
test on the CPU in one process (Note [Launches ahead of their tests] in
harness/distributed/cases.py), never beside another launch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import pytest

from harness import ids
from harness.distributed import ADDRESS_IN_USE, ROOT, DistJob, free_port
from harness.distributed.judge import judge_collective, judge_ddp, record_error, record_verdict
from harness.distributed.launcher import STOPPED, Background

pytestmark = pytest.mark.distributed

CHECKS = ("collective", "ddp_train")  # built-in rank programs, by name (as docs/distributed.md)
NODE_TIMEOUT = 35.0  # the run takes 4-15 s; keeps a hang well under a minute


def torchrun_command(node_rank: int, nnodes: int, port: int, out: Path,
                     nproc_per_node: int = 1) -> list[str]:
    """The command one node runs (``python -m torch.distributed.run`` is ``torchrun``)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
            "--node-rank", str(node_rank), "--nproc-per-node", str(nproc_per_node),
            "--master-addr", "127.0.0.1", "--master-port", str(port),
            "-m", "harness.distributed", *CHECKS, "--out", str(out), "--device", "cpu"]


def run_two_nodes(out: Path, timeout: float = NODE_TIMEOUT,
                  background: Optional[Background] = None) -> tuple[list, list[str], str]:
    """Start both nodes; stop both as soon as one fails. Returns (exit codes, outputs, why).

    The port is free when chosen, but another process on the host may take it before
    node 0 binds it (ephemeral ports are shared); that failure is retried on a new port.
    With ``background`` the nodes take its niceness (their workers inherit it), the
    ``timeout`` runs from when ``background.needed`` is set, and ``background.stop``
    kills them (Note [Launches ahead of their tests]).
    """
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for _attempt in range(2):
        port = free_port()
        logs = [out.parent / f"node{n}-{port}.log" for n in range(2)]
        nodes = []
        try:
            for n in range(2):
                with open(logs[n], "w") as log:
                    nodes.append(subprocess.Popen(torchrun_command(n, 2, port, out), cwd=ROOT,
                                                  env=env, stdout=log, stderr=subprocess.STDOUT,
                                                  start_new_session=True))
                if background is not None:
                    background.lower_priority(nodes[-1].pid, group=True)  # its session
            deadline, why = time.monotonic() + timeout, ""
            while [node.poll() for node in nodes].count(None):
                if background is not None:
                    if background.stop.is_set():
                        why = STOPPED
                        break
                    if not background.needed.is_set():
                        deadline = time.monotonic() + timeout  # nobody waits yet
                if any(node.returncode not in (None, 0) for node in nodes):
                    why = "a node failed; the other was stopped"
                    break
                if time.monotonic() > deadline:
                    why = f"torchrun nodes still running after {timeout:.0f} s; killed"
                    break
                time.sleep(0.1)
        finally:
            for node in nodes:  # the agents' groups; their workers die with them
                if node.poll() is None:
                    os.killpg(node.pid, signal.SIGKILL)
                node.wait()
        outputs = [log.read_text(errors="replace") for log in logs]
        if not any(word in text for text in outputs for word in ADDRESS_IN_USE):
            break
    return [node.returncode for node in nodes], outputs, why


def two_nodes(background: Optional[Background]) -> dict:
    """The job: both nodes in a folder of their own; what the test judges."""
    with tempfile.TemporaryDirectory(prefix="harness-torchrun-") as folder:
        out = Path(folder) / "results"
        codes, outputs, why = run_two_nodes(out, background=background)
        summary_path = out / "summary.json"
        summary = json.loads(summary_path.read_text()) if summary_path.exists() else None
    return {"codes": codes, "outputs": outputs, "why": why, "summary": summary}


@pytest.mark.parametrize("job", [DistJob("torchrun_2x1", two_nodes)], ids=lambda job: job.id)
def test_two_torchrun_nodes_on_loopback(job, device, results, dist):
    if device.type != "cpu":
        pytest.skip("the loopback two-node run uses gloo on the CPU; on hardware run the "
                    "docs/distributed.md commands on two hosts")
    ran = dist(job)
    codes, outputs, summary = ran["codes"], ran["outputs"], ran["summary"]
    record_id = ids.record("distributed", "multinode", "none", "torchrun_2x1", "ws2")
    if codes != [0, 0] or summary is None:
        record_error(results, record_id,
                     f"{ran['why'] or 'done'}: torchrun nodes exited {codes}; summary.json "
                     f"{'written' if summary is not None else 'missing'}.\n"
                     + "\n".join(f"--- node {n} ---\n{text[-3000:]}"
                                 for n, text in enumerate(outputs)))
        return
    values = {r["rank"]: r["results"] for r in summary["ranks"]}
    problems = [f"rank {rank} {name}: {res.get('type')}: {res.get('message')}"
                for rank, checks in values.items() for name, res in checks.items()
                if not res.get("ok")]
    if problems or sorted(values) != [0, 1]:
        results.check(record_id, False, "; ".join(problems)
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
        verdict = dataclasses.replace(verdict, message=f"two torchrun nodes: {verdict.message}")
        record_verdict(results, ids.record("distributed", "multinode", name, "torchrun_2x1"), verdict)
