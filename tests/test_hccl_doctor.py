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


def test_hccl_timeouts_beside_the_dist_timeout():
    default = doctor.check_hccl_timeouts(120.0, "npu", env={})
    assert [c.status for c in default] == [doctor.OK, doctor.OK]
    assert "HCCL_CONNECT_TIMEOUT=120 s (default" in default[0].detail
    assert "HCCL_EXEC_TIMEOUT=1836 s (default" in default[1].detail
    assert "--dist-timeout 120 s" in default[1].detail
    longer = doctor.check_hccl_timeouts(300.0, "npu", env={"HCCL_EXEC_TIMEOUT": "60"})
    assert [c.status for c in longer] == [doctor.WARN, doctor.WARN]
    assert "HCCL_EXEC_TIMEOUT=60 s (set" in longer[1].detail and "shorter" in longer[1].detail
    assert longer[1].fix.startswith("export HCCL_EXEC_TIMEOUT=300")
    assert longer[0].fix.startswith("export HCCL_CONNECT_TIMEOUT=300")
    (bad,) = [c for c in doctor.check_hccl_timeouts(120.0, "npu",
                                                    env={"HCCL_EXEC_TIMEOUT": "soon"})
              if c.status == doctor.FAIL]
    assert "not a number of seconds" in bad.detail
    assert doctor.check_hccl_timeouts(120.0, "cpu", env={}) == []  # not an hccl device
    assert len(doctor.check_hccl_timeouts(120.0, "cpu", env={"HCCL_EXEC_TIMEOUT": "9"})) == 2


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
    assert "--dist-timeout 60 s" in out
