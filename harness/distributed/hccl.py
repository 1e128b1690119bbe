"""HCCL's own failure modes, checked before a run: the rank table and the timeouts.

``python -m harness doctor`` calls :func:`rank_table_problems` on ``RANK_TABLE_FILE``
(or ``--rank-table PATH``) and :func:`timeout_findings` on the ``HCCL_*`` timeouts beside
``--dist-timeout``. Plain data in, ``(field, problem, fix)`` out; no torch.

Note [Rank table]
~~~~~~~~~~~~~~~~~
Ascend's rank table describes a cluster for HCCL (CANN's HCCL user guide, "ranktable"),
version 1.0::

    {"version": "1.0", "status": "completed", "server_count": "2",
     "server_list": [{"server_id": "10.0.0.1",
                      "device": [{"device_id": "0", "device_ip": "192.168.1.10",
                                  "rank_id": "0"}, ...]}, ...]}

and version 1.2 for super-node (Atlas A3) clusters: each device also has its
``super_device_id`` (its id in the super node, unique there), and ``super_pod_list``
lists the super nodes, each a ``super_pod_id`` and the ``server_list`` of its
``server_id`` values; every server is in one super node. ``device_ip`` (the NIC address)
is required where ranks talk across servers (``server_count`` > 1), optional on one.

Counts and ids are integers, written as decimal strings by Ascend's tools (both are
accepted). A table HCCL cannot use fails at ``init_process_group`` on every rank, after
the connect timeout, with an error code rather than the field; so each rule here names
the field and the fix: ``status`` is ``completed`` (the tool that writes it finished),
``server_count`` equals the servers listed, server ids are unique, device ids are unique
within a server, device IPs are unique, and the rank ids over the whole table are
``0 .. N-1``, each once. The file itself must be a regular file, not a symbolic link:
torch_npu's ``checkFilePathReadable`` (HCCLUtils.cpp) refuses a symlink and then uses
default negotiation instead, silently (the table is ignored).

Note [HCCL timeouts]
~~~~~~~~~~~~~~~~~~~~
What CANN documents and torch_npu does (docs/simnpu.md cites the sources):
``HCCL_CONNECT_TIMEOUT`` bounds building the links, which torch_npu does lazily inside a
group's first collective: an integer in [120, 7200] s, default 120 (NCCL waits 10 min);
with ``RANK_TABLE_FILE`` torch_npu warns below 300 s. ``HCCL_EXEC_TIMEOUT`` bounds one
collective on the device: default 1836 s (1091 s when ``HCCL_OP_EXPANSION_MODE=AIV``),
``0`` = never time out (Atlas A2/A3), a negative value is reset to the default; on the
Atlas training series the value is rounded down to a multiple of 68. The process group's
timeout (``init_process_group(timeout=)``: the harness passes ``--dist-timeout``) is the
watchdog's, and a timed-out work ends the process (TORCH_HCCL_ASYNC_ERROR_HANDLING=1, the
default); Ascend advises it to be *larger* than both HCCL timeouts, and torch_npu warns
when it is not larger than HCCL_EXEC_TIMEOUT ("The plog may not be recorded"). The
harness's launcher also ends a launch in which no rank progressed for ``--dist-timeout``,
so a --dist-timeout not above HCCL_CONNECT_TIMEOUT can stop ranks that are still
connecting. :func:`timeout_findings` checks each rule.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import os
from typing import Any, Optional

RANK_TABLE_ENV = "RANK_TABLE_FILE"
VERSIONS = ("1.0", "1.2")
SUPER_POD_VERSION = "1.2"
TIMEOUTS = {  # variable: (default seconds, what it bounds)
    "HCCL_CONNECT_TIMEOUT": (120.0, "building the links, in a group's first collective"),
    "HCCL_EXEC_TIMEOUT": (1836.0, "one collective on the device"),
}
"""Note [HCCL timeouts]."""
CONNECT_RANGE = (120, 7200)
CONNECT_WITH_RANK_TABLE = 300
EXEC_DEFAULT_AIV = 1091
EXEC_GRANULE = 68  # Atlas training series: rounded down to a multiple of this
AIV_ENV = "HCCL_OP_EXPANSION_MODE"


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
    """The parsed file, or the problem reading it (a symlink is refused: Note [Rank
    table])."""
    if os.path.islink(path):
        return None, [Problem(RANK_TABLE_ENV, f"{path} is a symbolic link (to "
                              f"{os.path.realpath(path)}): torch_npu does not read a "
                              "symlinked rank table and silently falls back to default "
                              "negotiation",
                              f"point {RANK_TABLE_ENV} at the file itself: "
                              f"{os.path.realpath(path)}")]
    if os.path.exists(path) and not os.path.isfile(path):
        return None, [Problem(RANK_TABLE_ENV, f"{path} is not a regular file",
                              f"point {RANK_TABLE_ENV} at the rank table JSON file")]
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
                                'set "version": "1.0", or "1.2" for a super-node cluster '
                                "(the formats HCCL reads)"))
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
    multi_server = len(servers) > 1 or (count or 0) > 1
    super_pods = version == SUPER_POD_VERSION
    pod_of: dict[str, str] = {}
    super_ids: dict[str, dict] = {}
    if super_pods:
        problems += _super_pod_problems(table, servers, pod_of)
    for where, server in _objects(servers, "server_list", "each server is an object with "
                                  "server_id and device", problems):
        sid = _named(server, "server_id", where, "give the server's host IP as server_id",
                     problems)
        if sid is not None:
            _once(server_ids, sid, f"{where}.server_id", problems,
                  "each server appears once; merge the two entries or correct the IP")
        devices = server.get("device")
        if not isinstance(devices, list) or not devices:
            problems.append(Problem(f"{where}.device", "is missing or empty",
                                    "list the server's devices (device_id, device_ip, "
                                    "rank_id)"))
            continue
        device_ids: dict[int, str] = {}
        for here, entry in _objects(devices, f"{where}.device", "each device has device_id, "
                                    "device_ip and rank_id", problems):
            device_id = _int(entry.get("device_id"))
            if device_id is None:
                problems.append(Problem(f"{here}.device_id", f"is {entry.get('device_id')!r}, "
                                        "not an integer", "the NPU's physical id on its "
                                        'server, e.g. "device_id": "0"'))
            else:
                _once(device_ids, device_id, f"{here}.device_id", problems,
                      "each device of a server appears once; correct the id")
            ip = entry.get("device_ip")
            if ip is None and not multi_server:
                pass  # one server: HCCL does not need the NIC address
            else:
                try:
                    ipaddress.ip_address(str(ip))
                except ValueError:
                    problems.append(Problem(f"{here}.device_ip", f"is {ip!r}, not an IP "
                                            "address" + (" (required with more than one "
                                                         "server)" if ip is None else ""),
                                            "the device's NIC address (hccn_tool -i <id> "
                                            "-ip -g)"))
                else:
                    _once(device_ips, ip, f"{here}.device_ip", problems,
                          "every device has its own NIC address; correct it")
            if super_pods:
                super_id = _int(entry.get("super_device_id"))
                if super_id is None:
                    problems.append(Problem(f"{here}.super_device_id",
                                            f"is {entry.get('super_device_id')!r}, not an "
                                            "integer (version 1.2 needs it)", "the device's "
                                            "id in its super node (npu-smi info -t spod-info)"))
                else:
                    pod = pod_of.get(sid, "?")
                    _once(super_ids.setdefault(pod, {}), super_id, f"{here}.super_device_id",
                          problems, "super_device_id is unique within a super node; "
                          "correct it")
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



def _super_pod_problems(table: dict, servers: list, pod_of: dict) -> list[Problem]:
    """Version 1.2's ``super_pod_list`` (Note [Rank table]); fills ``pod_of`` (server_id ->
    super_pod_id)."""
    problems: list[Problem] = []
    pods = table.get("super_pod_list")
    if not isinstance(pods, list) or not pods:
        return [Problem("super_pod_list", "is missing or empty (version 1.2 lists the super "
                        "nodes)", "list each super node as {\"super_pod_id\": \"0\", "
                        "\"server_list\": [{\"server_id\": ...}]}, or use version 1.0 "
                        "without super nodes")]
    pod_ids: dict[str, str] = {}
    for where, pod in _objects(pods, "super_pod_list", "each super node is an object with "
                               "super_pod_id and server_list", problems):
        pid = _named(pod, "super_pod_id", where, 'give each super node an id, e.g. '
                     '"super_pod_id": "0"', problems)
        if pid is None:
            continue
        _once(pod_ids, pid, f"{where}.super_pod_id", problems, "each super node appears "
              "once; merge the entries")
        members = pod.get("server_list")
        if not isinstance(members, list) or not members:
            problems.append(Problem(f"{where}.server_list", "is missing or empty",
                                    "list the server_id of each server in this super node"))
            continue
        for j, member in enumerate(members):
            sid = member.get("server_id") if isinstance(member, dict) else None
            here = f"{where}.server_list[{j}].server_id"
            if sid in pod_of:
                problems.append(Problem(here, f"{sid!r} is already in super node "
                                        f"{pod_of[sid]!r}", "each server belongs to one "
                                        "super node"))
            else:
                pod_of[sid] = pid
    known = {server.get("server_id") for server in servers if isinstance(server, dict)}
    for sid in sorted(set(pod_of) - known, key=str):
        problems.append(Problem("super_pod_list", f"names server {sid!r}, which server_list "
                                "does not have", "list only servers of server_list"))
    for sid in sorted(known - set(pod_of), key=str):
        problems.append(Problem("super_pod_list", f"has no super node for server {sid!r}",
                                "add the server's server_id to its super node's "
                                "server_list"))
    return problems


def _objects(items: list, name: str, fix: str, problems: list):
    """``(where, item)`` for each object of ``items`` (``name[i]``); a problem for each
    item that is not one."""
    for i, item in enumerate(items):
        if isinstance(item, dict):
            yield f"{name}[{i}]", item
        else:
            problems.append(Problem(f"{name}[{i}]", "is not an object", fix))


def _named(entry: dict, key: str, where: str, fix: str, problems: list) -> Optional[str]:
    """``entry[key]`` when it is a non-empty string; else None and a problem naming it."""
    value = entry.get(key)
    if isinstance(value, str) and value.strip():
        return value
    problems.append(Problem(f"{where}.{key}", f"is {value!r}", fix))
    return None


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


def _integer(text: str) -> Optional[int]:
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else None


def exec_default(env: Optional[dict] = None) -> int:
    """HCCL_EXEC_TIMEOUT's default: 1836 s, 1091 s in AIV mode (Note [HCCL timeouts])."""
    env = os.environ if env is None else env
    aiv = env.get(AIV_ENV, "").strip().upper() == "AIV"
    return EXEC_DEFAULT_AIV if aiv else int(TIMEOUTS["HCCL_EXEC_TIMEOUT"][0])


def timeout_value(name: str, env: Optional[dict] = None) -> tuple[Optional[float], bool, str]:
    """``(seconds, from the environment, error)`` of an ``HCCL_*`` timeout as HCCL takes
    it: the default when unset; None with the error when the value is not an integer in
    the documented range (Note [HCCL timeouts])."""
    env = os.environ if env is None else env
    default = float(exec_default(env)) if name == "HCCL_EXEC_TIMEOUT" else TIMEOUTS[name][0]
    text = env.get(name, "").strip()
    if not text:
        return default, False, ""
    value = _integer(text)
    if name == "HCCL_CONNECT_TIMEOUT":
        low, high = CONNECT_RANGE
        if value is None or not low <= value <= high:
            return None, True, (f"{name}={text!r} is not an integer number of seconds in "
                                f"[{low}, {high}] (CANN's range)")
        return float(value), True, ""
    if value is None:
        return None, True, f"{name}={text!r} is not an integer number of seconds"
    if value < 0:  # torch_npu: "less than 0, so reset it to the default value"
        return default, True, ""
    return float(value), True, ""


def timeout_findings(dist_timeout: float, env: Optional[dict] = None,
                     rank_table: bool = False) -> list[tuple[str, str, str]]:
    """``(status, detail, fix)`` per ``HCCL_*`` timeout, by Note [HCCL timeouts]: "fail"
    when HCCL would refuse the value, "warn" when the ordering against the process group's
    timeout (``dist_timeout``) or the rank-table advice is broken, else "ok"."""
    env = os.environ if env is None else env
    rank_table = rank_table or bool(env.get(RANK_TABLE_ENV))
    out = []
    for name, (_, bounds) in TIMEOUTS.items():
        seconds, given, error = timeout_value(name, env)
        default = exec_default(env) if name == "HCCL_EXEC_TIMEOUT" else int(TIMEOUTS[name][0])
        if error:
            out.append(("fail", error, f"export {name}=<integer seconds> (default {default}"
                        + (", range 120-7200)" if name == "HCCL_CONNECT_TIMEOUT" else ")")))
            continue
        source = "set" if given else ("default, AIV mode" if name == "HCCL_EXEC_TIMEOUT"
                                      and default == EXEC_DEFAULT_AIV else "default")
        raw = _integer(env.get(name, "") or "0") or 0
        shown = f"{seconds:g} s" if not (name == "HCCL_EXEC_TIMEOUT" and seconds == 0) \
            else "0 (never times out)"
        detail = (f"{name}={shown} ({source}{'; a negative value is reset to the default' if raw < 0 else ''}; "
                  f"bounds {bounds}); process-group timeout (--dist-timeout) {dist_timeout:g} s")
        if name == "HCCL_EXEC_TIMEOUT" and seconds and int(seconds) % EXEC_GRANULE:
            detail += (f"; on Atlas training series HCCL uses "
                       f"{int(seconds) // EXEC_GRANULE * EXEC_GRANULE} s (a multiple of 68)")
        problems, fixes = [], []
        if name == "HCCL_CONNECT_TIMEOUT":
            if rank_table and seconds < CONNECT_WITH_RANK_TABLE:
                problems.append(f"below {CONNECT_WITH_RANK_TABLE} s with a rank table: "
                                "torch_npu warns that the connection may time out")
                fixes.append(f"export {name}={CONNECT_WITH_RANK_TABLE}")
            if dist_timeout <= seconds:
                problems.append("not below the process-group timeout: the harness stops a "
                                "launch whose ranks are still connecting")
                fixes.append(f"pass --dist-timeout above {seconds:g}")
        elif seconds == 0:
            problems.append("a hung collective is then ended only by the watchdog "
                            "(--dist-timeout), and torch_npu warns that the plog may not be "
                            "recorded")
            fixes.append(f"export {name}=<seconds below --dist-timeout> to let HCCL report "
                         "the hang first")
        elif dist_timeout <= seconds:
            problems.append("the process-group timeout is not larger: the watchdog ends a "
                            "slow collective before HCCL reports it, and torch_npu warns "
                            "\"The plog may not be recorded\"")
            below = max(EXEC_GRANULE, (math.ceil(dist_timeout) - 1) // EXEC_GRANULE
                        * EXEC_GRANULE)
            fixes.append(f"export {name}={below} (a multiple of 68 below --dist-timeout), or "
                         f"pass --dist-timeout above {seconds:g}")
        if problems:
            out.append(("warn", f"{detail}: {'; '.join(problems)}", "; ".join(fixes)))
        else:
            out.append(("ok", detail, ""))
    return out
