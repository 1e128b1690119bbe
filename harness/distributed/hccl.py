"""HCCL's own failure modes, checked before a run: the rank table and the timeouts.

``python -m harness doctor`` calls :func:`rank_table_problems` on ``RANK_TABLE_FILE``
(or ``--rank-table PATH``) and :func:`timeout_findings` on the ``HCCL_*`` timeouts beside
``--dist-timeout``. Plain data in, ``(field, problem, fix)`` out; no torch.

Note [Rank table]
~~~~~~~~~~~~~~~~~
Ascend's rank table (version 1.0) describes a cluster for HCCL::

    {"version": "1.0", "status": "completed", "server_count": "2",
     "server_list": [{"server_id": "10.0.0.1",
                      "device": [{"device_id": "0", "device_ip": "192.168.1.10",
                                  "rank_id": "0"}, ...]}, ...]}

Counts and ids are integers, written as decimal strings by Ascend's tools (both are
accepted). A table HCCL cannot use fails at ``init_process_group`` on every rank, after
the connect timeout, with an error code rather than the field; so each rule here names
the field and the fix: ``status`` is ``completed`` (the tool that writes it finished),
``server_count`` equals the servers listed, server ids are unique, device ids are unique
within a server, device IPs are unique, and the rank ids over the whole table are
``0 .. N-1``, each once.

Note [HCCL timeouts]
~~~~~~~~~~~~~~~~~~~~
``HCCL_CONNECT_TIMEOUT`` (default 120 s, against NCCL's 10 min) bounds building the
links at start-up; ``HCCL_EXEC_TIMEOUT`` (default 1836 s) bounds one collective on the
device, so a rank that arrives later than that fails the collective on every rank (a
known cause of runs failing after an upgrade slowed one rank). Either shorter than the
harness's ``--dist-timeout`` means HCCL gives up before the harness's watchdog can name
the late rank: the doctor warns and says which variable to raise.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import os
from typing import Any, Optional

RANK_TABLE_ENV = "RANK_TABLE_FILE"
VERSIONS = ("1.0", "1.1", "1.2")
TIMEOUTS = {  # variable: (default seconds, what it bounds)
    "HCCL_CONNECT_TIMEOUT": (120.0, "building the links between ranks at start-up"),
    "HCCL_EXEC_TIMEOUT": (1836.0, "one collective, waiting for the slowest rank"),
}
"""Note [HCCL timeouts]."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a rank table: the field (a JSON path), what, and the fix."""

    field: str
    problem: str
    fix: str

    def text(self) -> str:
        return f"{self.field}: {self.problem}"


def _int(value: Any) -> Optional[int]:
    """An integer id or count, as a JSON number or a decimal string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def load_rank_table(path: str) -> tuple[Optional[Any], list[Problem]]:
    """The parsed file, or the problem reading it."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle), []
    except OSError as exc:
        return None, [Problem(RANK_TABLE_ENV, f"cannot read {path}: {exc.strerror or exc}",
                              f"point {RANK_TABLE_ENV} (or --rank-table) at the cluster's "
                              "rank table JSON file")]
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, [Problem("(file)", f"{path} is not JSON: {exc}",
                              "regenerate the rank table (hccn_tool / the cluster's "
                              "generator) or fix the JSON syntax at that position")]


def rank_table_problems(table: Any) -> list[Problem]:
    """Every rule of Note [Rank table] the parsed ``table`` breaks; empty when it is good."""
    if not isinstance(table, dict):
        return [Problem("(top level)", f"is a {type(table).__name__}, not an object",
                        "the file must be one JSON object with version, status, "
                        "server_count and server_list")]
    problems: list[Problem] = []
    version = table.get("version")
    if version not in VERSIONS:
        problems.append(Problem("version", f"is {version!r}, not one of {list(VERSIONS)}",
                                'set "version": "1.0" (the rank table format HCCL reads)'))
    status = table.get("status")
    if status != "completed":
        problems.append(Problem("status", f"is {status!r}, not 'completed'",
                                "the tool writing the table did not finish: wait for it or "
                                'regenerate the table; a finished one says "status": '
                                '"completed"'))
    servers = table.get("server_list")
    if not isinstance(servers, list) or not servers:
        problems.append(Problem("server_list", "is missing or empty",
                                "list every server with its server_id and device list"))
        servers = []
    count = _int(table.get("server_count"))
    if count is None:
        problems.append(Problem("server_count", f"is {table.get('server_count')!r}, not an "
                                "integer", f'set "server_count": "{len(servers)}"'))
    elif servers and count != len(servers):
        problems.append(Problem("server_count", f"says {count} but server_list has "
                                f"{len(servers)} server(s)",
                                f'set "server_count": "{len(servers)}", or add the missing '
                                "servers to server_list"))
    ranks: dict[int, str] = {}
    server_ids: dict[str, str] = {}
    device_ips: dict[str, str] = {}
    for s, server in enumerate(servers):
        where = f"server_list[{s}]"
        if not isinstance(server, dict):
            problems.append(Problem(where, "is not an object", "each server is an object "
                                    "with server_id and device"))
            continue
        sid = server.get("server_id")
        if not isinstance(sid, str) or not sid.strip():
            problems.append(Problem(f"{where}.server_id", f"is {sid!r}", "give the server's "
                                    "host IP as server_id"))
        else:
            _once(server_ids, sid, f"{where}.server_id", problems,
                  "each server appears once; merge the two entries or correct the IP")
        devices = server.get("device")
        if not isinstance(devices, list) or not devices:
            problems.append(Problem(f"{where}.device", "is missing or empty",
                                    "list the server's devices (device_id, device_ip, "
                                    "rank_id)"))
            continue
        device_ids: dict[int, str] = {}
        for d, entry in enumerate(devices):
            here = f"{where}.device[{d}]"
            if not isinstance(entry, dict):
                problems.append(Problem(here, "is not an object", "each device has "
                                        "device_id, device_ip and rank_id"))
                continue
            device_id = _int(entry.get("device_id"))
            if device_id is None:
                problems.append(Problem(f"{here}.device_id", f"is {entry.get('device_id')!r}, "
                                        "not an integer", "the NPU's physical id on its "
                                        'server, e.g. "device_id": "0"'))
            else:
                _once(device_ids, device_id, f"{here}.device_id", problems,
                      "each device of a server appears once; correct the id")
            ip = entry.get("device_ip")
            try:
                ipaddress.ip_address(str(ip))
            except ValueError:
                problems.append(Problem(f"{here}.device_ip", f"is {ip!r}, not an IP address",
                                        "the device's NIC address (hccn_tool -i <id> -ip "
                                        "-g)"))
            else:
                _once(device_ips, ip, f"{here}.device_ip", problems,
                      "every device has its own NIC address; correct it")
            rank = _int(entry.get("rank_id"))
            if rank is None:
                problems.append(Problem(f"{here}.rank_id", f"is {entry.get('rank_id')!r}, not "
                                        "an integer", 'the global rank, e.g. "rank_id": "0"'))
            else:
                _once(ranks, rank, f"{here}.rank_id", problems,
                      "rank ids are 0..N-1, each once; renumber the devices")
    if ranks:
        missing = sorted(set(range(len(ranks))) - set(ranks))
        beyond = sorted(r for r in ranks if r >= len(ranks))
        if missing:
            problems.append(Problem("rank_id", f"{len(ranks)} ranks but ids "
                                    f"{missing} are missing (past the end: {beyond})",
                                    f"rank ids must be 0..{len(ranks) - 1}, each once, over "
                                    "the whole table; renumber them"))
    return problems



def _once(seen: dict, key, where: str, problems: list, fix: str) -> None:
    """Remember where ``key`` first appeared; a second appearance is a problem naming the
    first place (``seen`` maps each key to that place)."""
    if key in seen:
        problems.append(Problem(where, f"{key!r} duplicates {seen[key]}", fix))
    else:
        seen[key] = where


def world_size(table: dict) -> int:
    """The number of ranks a good table describes."""
    return sum(len(server.get("device", [])) for server in table.get("server_list", []))


def timeout_value(name: str, env: Optional[dict] = None) -> tuple[Optional[float], bool, str]:
    """``(seconds, from the environment, error)`` of an ``HCCL_*`` timeout: the default
    when unset; seconds None with the error when the value is not a number of seconds."""
    env = os.environ if env is None else env
    default = TIMEOUTS[name][0]
    text = env.get(name, "").strip()
    if not text:
        return default, False, ""
    try:
        seconds = float(text)
    except ValueError:
        return None, True, f"{name}={text!r} is not a number of seconds"
    if seconds <= 0:
        return None, True, f"{name}={text!r} must be positive"
    return seconds, True, ""


def timeout_findings(dist_timeout: float, env: Optional[dict] = None
                     ) -> list[tuple[str, str, str]]:
    """``(status, detail, fix)`` per ``HCCL_*`` timeout: "ok", "warn" when it is shorter
    than ``dist_timeout`` (Note [HCCL timeouts]), "fail" when unreadable."""
    out = []
    for name, (default, bounds) in TIMEOUTS.items():
        seconds, given, error = timeout_value(name, env)
        if error:
            out.append(("fail", error, f"export {name}=<seconds> (default {default:g})"))
            continue
        source = "set" if given else "default"
        detail = f"{name}={seconds:g} s ({source}; bounds {bounds}); --dist-timeout {dist_timeout:g} s"
        if seconds < dist_timeout:
            out.append(("warn", f"{detail}: shorter, so HCCL fails a rank that lags "
                        f"{seconds:g}-{dist_timeout:g} s before the harness can name it",
                        f"export {name}={math.ceil(dist_timeout)} (at least --dist-timeout), "
                        "or lower --dist-timeout"))
        else:
            out.append(("ok", detail, ""))
    return out
