"""The doctor's HCCL lines: the rank table (a good file, each malformed case -> its line)
and the HCCL_* timeouts beside --dist-timeout (harness/distributed/hccl.py)."""

from __future__ import annotations

import copy
import json

import pytest

from harness import doctor
from harness.distributed import hccl

GOOD = {"version": "1.0", "status": "completed", "server_count": "2", "server_list": [
    {"server_id": "10.0.0.1", "device": [
        {"device_id": "0", "device_ip": "192.168.1.10", "rank_id": "0"},
        {"device_id": "1", "device_ip": "192.168.1.11", "rank_id": "1"}]},
    {"server_id": "10.0.0.2", "device": [
        {"device_id": "0", "device_ip": "192.168.1.20", "rank_id": "2"},
        {"device_id": "1", "device_ip": "192.168.1.21", "rank_id": "3"}]}]}


def _edit(path: str, value):
    """GOOD with the field at ``path`` (dots and [i]) set to ``value`` (None: deleted)."""
    table = copy.deepcopy(GOOD)
    keys = path.replace("[", ".").replace("]", "").split(".")
    parent = table
    for key in keys[:-1]:
        parent = parent[int(key)] if key.isdigit() else parent[key]
    last = int(keys[-1]) if keys[-1].isdigit() else keys[-1]
    if value is None:
        del parent[last]
    else:
        parent[last] = value
    return table


def _doctor_lines(tmp_path, table, monkeypatch) -> list[doctor.Check]:
    monkeypatch.delenv(hccl.RANK_TABLE_ENV, raising=False)
    path = tmp_path / "rank_table.json"
    path.write_text(json.dumps(table) if not isinstance(table, str) else table)
    return doctor.check_rank_table(str(path))


def test_a_good_rank_table_is_one_ok_line(tmp_path, monkeypatch):
    lines = _doctor_lines(tmp_path, GOOD, monkeypatch)
    assert [(c.status, c.topic) for c in lines] == [(doctor.OK, "rank table")]
    assert "2 server(s), 4 ranks" in lines[0].detail
    numbers = json.loads(json.dumps(GOOD).replace('"0"', "0").replace('"1"', "1"))
    assert hccl.rank_table_problems(numbers) == []  # JSON integers are accepted too


MALFORMED = [
    # (edit, value, the field the line names, words of the problem, words of the fix)
    ("status", "pending", "status", "not 'completed'", "regenerate"),
    ("version", "2.0", "version", "not one of", '"version": "1.0"'),
    ("server_count", "3", "server_count", "says 3 but server_list has 2", '"server_count": "2"'),
    ("server_count", "two", "server_count", "not an integer", '"server_count": "2"'),
    ("server_list", [], "server_list", "missing or empty", "list every server"),
    ("server_list[1].server_id", "10.0.0.1", "server_list[1].server_id",
     "duplicates server_list[0].server_id", "each server appears once"),
    ("server_list[0].device", None, "server_list[0].device", "missing or empty",
     "device_id, device_ip"),
    ("server_list[0].device[1].device_id", "0", "server_list[0].device[1].device_id",
     "0 duplicates server_list[0].device[0].device_id", "correct the id"),
    ("server_list[0].device[1].device_id", "x", "server_list[0].device[1].device_id",
     "not an integer", "physical id"),
    ("server_list[1].device[0].device_ip", "192.168.1.10", "server_list[1].device[0].device_ip",
     "duplicates server_list[0].device[0].device_ip", "own NIC address"),
    ("server_list[1].device[0].device_ip", "npu-3", "server_list[1].device[0].device_ip",
     "not an IP address", "hccn_tool"),
    ("server_list[1].device[1].rank_id", "2", "server_list[1].device[1].rank_id",
     "2 duplicates server_list[1].device[0].rank_id", "renumber"),
    ("server_list[1].device[1].rank_id", "7", "rank_id", "ids [3] are missing", "0..3"),
    ("server_list[1].device[1].rank_id", "-1", "server_list[1].device[1].rank_id",
     "not an integer", "global rank"),
]


@pytest.mark.parametrize("edit,value,field,problem,fix", MALFORMED,
                         ids=[f"{m[0]}={m[1]!r}" for m in MALFORMED])
def test_each_malformed_rank_table_gets_its_line(edit, value, field, problem, fix, tmp_path,
                                                 monkeypatch):
    lines = _doctor_lines(tmp_path, _edit(edit, value), monkeypatch)
    assert lines and all(c.status == doctor.FAIL for c in lines)
    named = [c for c in lines if c.detail.split(": ", 1)[1].startswith(f"{field}: ")]
    assert len(named) == 1, [c.text() for c in lines]
    assert problem in named[0].detail and fix in named[0].fix, named[0].text()


def test_unreadable_and_non_json_rank_tables(tmp_path, monkeypatch):
    (line,) = _doctor_lines(tmp_path, "{not json", monkeypatch)
    assert line.status == doctor.FAIL and "is not JSON" in line.detail
    (line,) = _doctor_lines(tmp_path, "[1, 2]", monkeypatch)
    assert "(top level): is a list, not an object" in line.detail
    (line,) = doctor.check_rank_table(str(tmp_path / "absent.json"))
    assert "cannot read" in line.detail and "RANK_TABLE_FILE" in line.fix


def test_rank_table_comes_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(_edit("status", "initializing")))
    assert doctor.check_rank_table(env={}) == []  # none given: no line
    (line,) = doctor.check_rank_table(env={hccl.RANK_TABLE_ENV: str(path)})
    assert line.status == doctor.FAIL and "status: is 'initializing'" in line.detail


def _timeouts(dist_timeout, env, rank_table=None):
    return {c.detail.split("=", 1)[0]: c for c in
            doctor.check_hccl_timeouts(dist_timeout, "npu", env=env, rank_table=rank_table)}


def test_hccl_timeout_defaults_and_the_process_group_ordering():
    # Note [HCCL timeouts]: the process group's timeout should be larger than both
    default = _timeouts(120.0, {})
    connect, exec_ = default["HCCL_CONNECT_TIMEOUT"], default["HCCL_EXEC_TIMEOUT"]
    assert "HCCL_CONNECT_TIMEOUT=120 s (default" in connect.detail
    assert "HCCL_EXEC_TIMEOUT=1836 s (default" in exec_.detail
    assert exec_.status == doctor.WARN and "The plog may not be recorded" in exec_.detail
    assert "export HCCL_EXEC_TIMEOUT=68" in exec_.fix and "--dist-timeout above 1836" in exec_.fix
    assert connect.status == doctor.WARN and "--dist-timeout above 120" in connect.fix
    good = _timeouts(2000.0, {"HCCL_EXEC_TIMEOUT": "1836"})
    assert [c.status for c in good.values()] == [doctor.OK, doctor.OK]
    shorter = _timeouts(300.0, {"HCCL_EXEC_TIMEOUT": "272"})  # 4 x 68, below the group's
    assert shorter["HCCL_EXEC_TIMEOUT"].status == doctor.OK


def test_hccl_exec_timeout_zero_never_times_out_and_aiv_has_its_default():
    never = _timeouts(2000.0, {"HCCL_EXEC_TIMEOUT": "0"})["HCCL_EXEC_TIMEOUT"]
    assert never.status != doctor.FAIL and "0 (never times out)" in never.detail
    assert "only by the watchdog" in never.detail
    aiv = _timeouts(2000.0, {"HCCL_OP_EXPANSION_MODE": "AIV"})["HCCL_EXEC_TIMEOUT"]
    assert "HCCL_EXEC_TIMEOUT=1091 s (default, AIV mode" in aiv.detail
    assert "HCCL uses 1088 s (a multiple of 68)" in aiv.detail  # Atlas training series
    negative = _timeouts(2000.0, {"HCCL_EXEC_TIMEOUT": "-5"})["HCCL_EXEC_TIMEOUT"]
    assert "1836 s" in negative.detail and "reset to the default" in negative.detail


@pytest.mark.parametrize("value", ["soon", "60", "7201", "150.5"])
def test_hccl_connect_timeout_must_be_an_integer_in_its_range(value):
    line = _timeouts(8000.0, {"HCCL_CONNECT_TIMEOUT": value})["HCCL_CONNECT_TIMEOUT"]
    assert line.status == doctor.FAIL and "[120, 7200]" in line.detail, line.text()
    assert _timeouts(8000.0, {"HCCL_CONNECT_TIMEOUT": "7200"})["HCCL_CONNECT_TIMEOUT"].status \
        == doctor.OK
    bad = _timeouts(8000.0, {"HCCL_EXEC_TIMEOUT": "soon"})["HCCL_EXEC_TIMEOUT"]
    assert bad.status == doctor.FAIL and "not an integer" in bad.detail


def test_a_rank_table_wants_a_connect_timeout_of_300_s():
    lines = _timeouts(2000.0, {}, rank_table="rt.json")
    assert lines["HCCL_CONNECT_TIMEOUT"].status == doctor.WARN
    assert "export HCCL_CONNECT_TIMEOUT=300" in lines["HCCL_CONNECT_TIMEOUT"].fix
    ok = _timeouts(2000.0, {"HCCL_CONNECT_TIMEOUT": "300", hccl.RANK_TABLE_ENV: "rt.json"})
    assert ok["HCCL_CONNECT_TIMEOUT"].status == doctor.OK


def test_hccl_timeouts_only_for_an_hccl_device_or_when_set():
    assert doctor.check_hccl_timeouts(120.0, "cpu", env={}) == []  # not an hccl device
    assert len(doctor.check_hccl_timeouts(120.0, "cpu", env={"HCCL_EXEC_TIMEOUT": "9"})) == 2


def test_device_ip_is_needed_only_with_more_than_one_server(tmp_path, monkeypatch):
    one = {"version": "1.0", "status": "completed", "server_count": "1", "server_list": [
        {"server_id": "10.0.0.1", "device": [{"device_id": "0", "rank_id": "0"},
                                             {"device_id": "1", "rank_id": "1"}]}]}
    assert [c.status for c in _doctor_lines(tmp_path, one, monkeypatch)] == [doctor.OK]
    lines = _doctor_lines(tmp_path, _edit("server_list[1].device[0].device_ip", None),
                          monkeypatch)
    assert [c.status for c in lines] == [doctor.FAIL]
    assert "device_ip: is None" in lines[0].detail and "required with more than one" in \
        lines[0].detail


SUPER_POD = {"version": "1.2", "status": "completed", "server_count": "2", "server_list": [
    {"server_id": "node_0", "device": [
        {"device_id": "0", "super_device_id": "0", "device_ip": "192.168.1.6", "rank_id": "0"},
        {"device_id": "1", "super_device_id": "1", "device_ip": "192.168.1.7", "rank_id": "1"}]},
    {"server_id": "node_1", "device": [
        {"device_id": "0", "super_device_id": "2", "device_ip": "192.168.1.8", "rank_id": "2"},
        {"device_id": "1", "super_device_id": "3", "device_ip": "192.168.1.9", "rank_id": "3"}]}],
    "super_pod_list": [{"super_pod_id": "0", "server_list": [{"server_id": "node_0"},
                                                            {"server_id": "node_1"}]}]}


@pytest.mark.parametrize("edit,value,words", [
    ("super_pod_list", None, "super_pod_list: is missing or empty"),
    ("server_list[1].device[0].super_device_id", None, "super_device_id: is None, not an"),
    ("server_list[1].device[0].super_device_id", "1", "duplicates server_list[0].device[1]"),
    ("super_pod_list[0].server_list[1].server_id", "node_9", "names server 'node_9'"),
])
def test_version_1_2_checks_its_super_node_fields(edit, value, words, tmp_path, monkeypatch):
    assert [c.status for c in _doctor_lines(tmp_path, SUPER_POD, monkeypatch)] == [doctor.OK]
    table = copy.deepcopy(SUPER_POD)
    keys = edit.replace("[", ".").replace("]", "").split(".")
    parent = table
    for key in keys[:-1]:
        parent = parent[int(key)] if key.isdigit() else parent[key]
    if value is None:
        del parent[keys[-1]]
    else:
        parent[keys[-1]] = value
    lines = _doctor_lines(tmp_path, table, monkeypatch)
    assert any(words in c.detail for c in lines), [c.text() for c in lines]


def test_a_symlinked_rank_table_is_refused_with_the_reason(tmp_path, monkeypatch):
    real = tmp_path / "real.json"
    real.write_text(json.dumps(GOOD))
    link = tmp_path / "rank_table.json"
    link.symlink_to(real)
    (line,) = doctor.check_rank_table(str(link))
    assert line.status == doctor.FAIL and "symbolic link" in line.detail
    assert "default negotiation" in line.detail and str(real) in line.fix


def test_doctor_command_prints_the_rank_table_line(tmp_path, monkeypatch, capsys):
    from harness import cli

    monkeypatch.delenv(hccl.RANK_TABLE_ENV, raising=False)
    path = tmp_path / "rt.json"
    path.write_text(json.dumps(_edit("server_count", "3")))
    code = cli.main(["doctor", "--device", "cpu", "--rank-table", str(path),
                     "--dist-timeout", "60"])
    out = capsys.readouterr().out
    assert code == 1
    assert f"[FAIL] rank table: {path}: server_count: says 3 but server_list has 2" in out
    assert "(--dist-timeout) 60 s" in out
